//! `run.max_cost_usd` and `run.max_tokens` (also under `[policies.NAME.run]`):
//! what a run may spend on its agent. They are checked before each agent turn
//! (the driver's turn after an `inject`, a `prompt` action, a hook event), so
//! no turn starts once the run has reached either; the turn in flight when it
//! crosses one is the most a run spends past it (see the README's "Budgets").
//!
//! A budget that cannot be measured is not kept by hoping: once a turn's cost
//! (or, for `max_tokens`, its usage) is unknown, the next turn is refused with
//! what to configure, as a spent budget is.

use serde::{Deserialize, Serialize};

use super::{Totals, usd};

/// What a run may spend; `None` is no limit.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SpendBudget {
    /// Dollars the run's agent turns may cost, as reported or priced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
    /// Tokens (input, cached input included, and output) the turns may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// The section each limit was set in (`run`, `policies.NAME.run`), for the
    /// messages; not read from the file.
    #[serde(skip)]
    pub cost_section: Option<String>,
    #[serde(skip)]
    pub tokens_section: Option<String>,
}

/// Why no more turns may start.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct Exhausted {
    /// The key, `run.max_cost_usd` or `policies.NAME.run.max_tokens`.
    pub key: String,
    pub message: String,
}

impl SpendBudget {
    pub fn is_set(&self) -> bool {
        self.max_cost_usd.is_some() || self.max_tokens.is_some()
    }

    /// What serde cannot check, naming `section`'s keys.
    pub fn validate(&self, section: &str) -> Result<(), String> {
        if let Some(c) = self.max_cost_usd
            && !(c.is_finite() && c > 0.0)
        {
            return Err(format!(
                "{section}.max_cost_usd = {c}: give the dollars a run may spend, more than 0"
            ));
        }
        if self.max_tokens == Some(0) {
            return Err(format!(
                "{section}.max_tokens = 0: give the tokens a run may use, at least 1"
            ));
        }
        Ok(())
    }

    /// The budget of a policy's section under the top level's: each limit the
    /// smaller of the two, named by the section it came from.
    pub fn within(&self, top: &SpendBudget, section: &str) -> SpendBudget {
        let pick = |own: Option<f64>, top: Option<f64>| match (own, top) {
            (Some(o), Some(t)) if t < o => (Some(t), None),
            (Some(o), _) => (Some(o), Some(section.to_string())),
            (None, t) => (t, None),
        };
        let (max_cost_usd, cost_section) = pick(self.max_cost_usd, top.max_cost_usd);
        let (tokens, tokens_section) = pick(
            self.max_tokens.map(|t| t as f64),
            top.max_tokens.map(|t| t as f64),
        );
        SpendBudget {
            max_cost_usd,
            max_tokens: tokens.map(|t| t as u64),
            cost_section: cost_section.or_else(|| top.cost_section.clone()),
            tokens_section: tokens_section.or_else(|| top.tokens_section.clone()),
        }
    }

    fn key(&self, which: &str) -> String {
        let section = match which {
            "max_cost_usd" => self.cost_section.as_deref(),
            _ => self.tokens_section.as_deref(),
        };
        format!("{}.{which}", section.unwrap_or("run"))
    }

    /// Whether another turn may start after `spent`; `Err` names the key, its
    /// value and what was spent.
    pub fn check(&self, spent: &Totals) -> Result<(), Exhausted> {
        if let Some(limit) = self.max_cost_usd {
            let key = self.key("max_cost_usd");
            if spent.cost_usd >= limit {
                return Err(Exhausted {
                    message: format!(
                        "the run reached {key} = {limit}: it has spent {} over {} agent turn(s)",
                        usd(spent.cost_usd),
                        spent.turns
                    ),
                    key,
                });
            }
            if spent.unmetered > 0 {
                return Err(Exhausted {
                    message: format!(
                        "{key} = {limit} cannot be kept: the agent reported no usage for {} turn(s), so what they cost is unknown \
                         (spent {} on the others); use an agent that reports it: the claude, codex and gemini runners and the openai runner do, \
                         or a command with output = \"json\" that prints Claude Code's result object",
                        spent.unmetered,
                        usd(spent.cost_usd)
                    ),
                    key,
                });
            }
            if spent.unpriced > 0 {
                return Err(Exhausted {
                    message: format!(
                        "{key} = {limit} cannot be kept: the cost of {} turn(s) is unknown (the agent reported tokens for a model [prices] does not price; \
                         `loopbox runs show` names it): add a [prices.\"MODEL\"] entry, or [prices.default]",
                        spent.unpriced
                    ),
                    key,
                });
            }
        }
        if let Some(limit) = self.max_tokens {
            let key = self.key("max_tokens");
            let used = spent.tokens.total();
            if used >= limit {
                return Err(Exhausted {
                    message: format!(
                        "the run reached {key} = {limit}: it has used {used} tokens over {} agent turn(s)",
                        spent.turns
                    ),
                    key,
                });
            }
            if spent.unmetered > 0 {
                return Err(Exhausted {
                    message: format!(
                        "{key} = {limit} cannot be kept: the agent reported no usage for {} turn(s); use an agent that reports it: \
                         the claude, codex and gemini runners and the openai runner do",
                        spent.unmetered
                    ),
                    key,
                });
            }
        }
        Ok(())
    }

    /// Dollars left before `max_cost_usd`, if it is set: what Claude Code's
    /// `--max-budget-usd` is given, so one turn cannot spend past it by more
    /// than its last model call.
    pub fn remaining_usd(&self, spent: &Totals) -> Option<f64> {
        self.max_cost_usd.map(|l| (l - spent.cost_usd).max(0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spend::{Charge, CostSource, Tokens};

    fn spent(cost: f64, tokens: u64) -> Totals {
        let mut t = Totals::default();
        t.add(&Charge {
            unmetered: false,
            model: None,
            tokens: Tokens {
                input: tokens,
                ..Default::default()
            },
            cost_usd: Some(cost),
            source: CostSource::Agent,
        });
        t
    }

    #[test]
    fn a_turn_starts_only_below_every_limit_and_the_refusal_names_key_value_and_spend() {
        let b = SpendBudget {
            max_cost_usd: Some(1.0),
            max_tokens: Some(1000),
            ..Default::default()
        };
        assert!(b.check(&spent(0.99, 999)).is_ok());
        let e = b.check(&spent(1.0, 10)).unwrap_err();
        assert_eq!(e.key, "run.max_cost_usd");
        assert_eq!(
            e.message,
            "the run reached run.max_cost_usd = 1: it has spent $1.0000 over 1 agent turn(s)"
        );
        let e = b.check(&spent(0.1, 1000)).unwrap_err();
        assert!(
            e.message
                .contains("run.max_tokens = 1000: it has used 1000 tokens"),
            "{e}"
        );
        assert!(SpendBudget::default().check(&spent(1e9, u64::MAX)).is_ok());
        assert_eq!(b.remaining_usd(&spent(0.25, 0)), Some(0.75));
        assert_eq!(b.remaining_usd(&spent(2.0, 0)), Some(0.0));
    }

    #[test]
    fn an_unmeasurable_budget_refuses_the_next_turn() {
        let b = SpendBudget {
            max_cost_usd: Some(5.0),
            ..Default::default()
        };
        let mut t = Totals::default();
        t.add(&Charge::unmetered());
        assert!(
            b.check(&t)
                .unwrap_err()
                .message
                .contains("reported no usage for 1 turn")
        );
        let mut t = Totals::default();
        t.add(&Charge {
            unmetered: false,
            model: Some("x".into()),
            tokens: Tokens::default(),
            cost_usd: None,
            source: CostSource::Unknown,
        });
        assert!(b.check(&t).unwrap_err().message.contains("[prices"));
        // Tokens alone are measured without prices.
        let tokens_only = SpendBudget {
            max_tokens: Some(10),
            ..Default::default()
        };
        assert!(tokens_only.check(&t).is_ok());
    }

    #[test]
    fn a_policy_section_narrows_and_is_named_when_it_binds() {
        let top = SpendBudget {
            max_cost_usd: Some(10.0),
            max_tokens: Some(500),
            ..Default::default()
        };
        let own = SpendBudget {
            max_cost_usd: Some(2.0),
            max_tokens: Some(900),
            ..Default::default()
        };
        let b = own.within(&top, "policies.p.run");
        assert_eq!((b.max_cost_usd, b.max_tokens), (Some(2.0), Some(500)));
        assert_eq!(b.key("max_cost_usd"), "policies.p.run.max_cost_usd");
        assert_eq!(b.key("max_tokens"), "run.max_tokens");
        assert!(
            SpendBudget {
                max_cost_usd: Some(0.0),
                ..Default::default()
            }
            .validate("run")
            .unwrap_err()
            .contains("run.max_cost_usd = 0")
        );
    }
}
