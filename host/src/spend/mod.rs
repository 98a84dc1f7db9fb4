//! What agent turns cost. One turn's [`Charge`] is what its agent reported
//! (tokens per model, and a dollar figure when the agent gives one), priced
//! from `[prices]` when it gives none; a run's [`Totals`] add its charges up.
//! `report` reads each agent's own report (Claude Code's `--output-format json`,
//! Codex's `exec --json` events, Gemini CLI's JSON stats, a chat-completions
//! `usage`), `transcript` the usage lines of an agent's session transcript (a
//! hook session's totals), `price` owns `[prices]`, and `budget` owns
//! `run.max_cost_usd` and `run.max_tokens`, the budgets checked before each turn.
//!
//! Pure data and arithmetic: the store keeps the figures, the driver, the
//! `prompt` action and the hook decide with them.

pub mod budget;
pub mod price;
pub mod report;
pub mod transcript;

use serde::{Deserialize, Serialize};

/// Tokens of one turn or of a whole run. `input` counts every input token,
/// those read from or written to a prompt cache included (`cache_read` and
/// `cache_write` are parts of it), whatever the agent's own convention; the
/// budget `run.max_tokens` counts `input + output`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tokens {
    #[serde(default)]
    pub input: u64,
    #[serde(default)]
    pub output: u64,
    #[serde(default)]
    pub cache_read: u64,
    #[serde(default)]
    pub cache_write: u64,
}

impl Tokens {
    /// Input and output: what `run.max_tokens` counts.
    pub fn total(&self) -> u64 {
        self.input.saturating_add(self.output)
    }

    pub fn add(&mut self, other: &Tokens) {
        self.input = self.input.saturating_add(other.input);
        self.output = self.output.saturating_add(other.output);
        self.cache_read = self.cache_read.saturating_add(other.cache_read);
        self.cache_write = self.cache_write.saturating_add(other.cache_write);
    }

    /// `self` less `other`, field by field, never below zero.
    pub fn minus(&self, other: &Tokens) -> Tokens {
        Tokens {
            input: self.input.saturating_sub(other.input),
            output: self.output.saturating_sub(other.output),
            cache_read: self.cache_read.saturating_sub(other.cache_read),
            cache_write: self.cache_write.saturating_sub(other.cache_write),
        }
    }

    pub fn is_zero(&self) -> bool {
        *self == Tokens::default()
    }
}

/// What an agent reported about one turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Usage {
    /// Tokens per model, in the order the agent listed them; a model the agent
    /// does not name is `""`.
    pub models: Vec<(String, Tokens)>,
    /// The dollar figure the agent computed itself (Claude Code's
    /// `total_cost_usd`), which `[prices]` never overrides.
    pub cost_usd: Option<f64>,
}

impl Usage {
    pub fn tokens(&self) -> Tokens {
        let mut t = Tokens::default();
        for (_, m) in &self.models {
            t.add(m);
        }
        t
    }

    /// The model that used the most tokens, if the agent named one.
    pub fn main_model(&self) -> Option<&str> {
        self.models
            .iter()
            .filter(|(m, _)| !m.is_empty())
            .max_by_key(|(_, t)| t.total())
            .map(|(m, _)| m.as_str())
    }
}

/// Where a charge's dollar figure comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CostSource {
    /// The agent reported it.
    Agent,
    /// `[prices]` priced the tokens it reported.
    Prices,
    /// Neither: the turn's tokens are known, its cost is not.
    Unknown,
}

/// One agent turn as recorded with it in the journal: a driver turn, a
/// `prompt` action, or (in a hook session) what the transcript added.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Charge {
    /// The agent reported no usage at all (a plain-text agent): nothing is known.
    #[serde(default)]
    pub unmetered: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default)]
    pub tokens: Tokens,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    pub source: CostSource,
}

impl Charge {
    /// A turn whose agent said nothing about what it used.
    pub fn unmetered() -> Charge {
        Charge {
            unmetered: true,
            model: None,
            tokens: Tokens::default(),
            cost_usd: None,
            source: CostSource::Unknown,
        }
    }

    /// The cost as a person reads it: `$0.0123`, or `?` when unknown.
    pub fn cost_text(&self) -> String {
        match (self.unmetered, self.cost_usd) {
            (true, _) => "-".into(),
            (false, Some(c)) => usd(c),
            (false, None) => "?".into(),
        }
    }
}

/// A dollar amount to four decimals, as `runs` and `runs show` print it.
pub fn usd(amount: f64) -> String {
    format!("${amount:.4}")
}

/// What a run has spent: the sum of its charges. The journal holds each
/// charge; the run's row keeps this sum, written in the same transaction as
/// the charge, so the two never disagree.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// Agent turns charged (those with usage and those without).
    pub turns: u64,
    /// Turns whose agent reported no usage.
    pub unmetered: u64,
    /// Turns with tokens but no known cost.
    pub unpriced: u64,
    pub tokens: Tokens,
    /// The known costs, summed: a lower bound when `unpriced` or `unmetered` > 0.
    pub cost_usd: f64,
}

impl Totals {
    pub fn add(&mut self, c: &Charge) {
        self.turns += 1;
        if c.unmetered {
            self.unmetered += 1;
            return;
        }
        self.tokens.add(&c.tokens);
        match c.cost_usd {
            Some(cost) if cost.is_finite() && cost >= 0.0 => self.cost_usd += cost,
            _ => self.unpriced += 1,
        }
    }

    /// Whether every charged turn has a known cost.
    pub fn cost_known(&self) -> bool {
        self.unpriced == 0 && self.unmetered == 0
    }

    /// The totals as `--json` and the server's API give them: agent turns
    /// charged, tokens, dollars, and whether every turn's cost is known
    /// (`cost_usd` is then exact, else a floor).
    pub fn json(&self) -> serde_json::Value {
        let t = &self.tokens;
        serde_json::json!({
            "turns": self.turns, "cost_usd": self.cost_usd, "cost_known": self.cost_known(),
            "unpriced_turns": self.unpriced, "unmetered_turns": self.unmetered,
            "tokens": {"input": t.input, "output": t.output, "cache_read": t.cache_read,
                       "cache_write": t.cache_write, "total": t.total()},
        })
    }

    /// The totals [`Totals::json`] gave (a server's API answer); what is missing is nothing.
    pub fn from_json(v: &serde_json::Value) -> Totals {
        let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
        let t = &v["tokens"];
        Totals {
            turns: n(&v["turns"]),
            unmetered: n(&v["unmetered_turns"]),
            unpriced: n(&v["unpriced_turns"]),
            tokens: Tokens {
                input: n(&t["input"]),
                output: n(&t["output"]),
                cache_read: n(&t["cache_read"]),
                cache_write: n(&t["cache_write"]),
            },
            cost_usd: v["cost_usd"].as_f64().unwrap_or(0.0),
        }
    }

    /// The cost as a person reads it: `$1.2345`, `$1.2345+` when some turns'
    /// costs are unknown, `-` when nothing was charged.
    pub fn cost_text(&self) -> String {
        if self.turns == 0 {
            "-".into()
        } else if self.cost_known() {
            usd(self.cost_usd)
        } else {
            format!("{}+", usd(self.cost_usd))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_add_known_costs_and_count_the_unknown_ones() {
        let mut t = Totals::default();
        let priced = Charge {
            unmetered: false,
            model: Some("m".into()),
            tokens: Tokens {
                input: 100,
                output: 10,
                cache_read: 40,
                cache_write: 0,
            },
            cost_usd: Some(0.25),
            source: CostSource::Agent,
        };
        t.add(&priced);
        t.add(&Charge {
            cost_usd: None,
            source: CostSource::Unknown,
            ..priced.clone()
        });
        t.add(&Charge::unmetered());
        assert_eq!(
            (t.turns, t.unpriced, t.unmetered, t.tokens.total()),
            (3, 1, 1, 220)
        );
        assert_eq!(t.cost_usd, 0.25);
        assert_eq!(Totals::from_json(&t.json()), t);
        assert_eq!(t.cost_text(), "$0.2500+");
        assert_eq!(Totals::default().cost_text(), "-");
        // A nonsense figure from an agent is not money spent: it counts as unknown.
        let mut n = Totals::default();
        n.add(&Charge {
            cost_usd: Some(f64::NAN),
            ..priced
        });
        assert_eq!((n.cost_usd, n.unpriced), (0.0, 1));
    }
}
