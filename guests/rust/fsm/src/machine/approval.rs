//! `action_type: human_approval` (little-loops 1.167, FEAT-1794,
//! `executor.py` `_execute_human_approval_state` and the terminal adapter's
//! `_parse_verdict`): the state asks a person for a verdict, and routes it.
//!
//! When the host says a person can answer ([`crate::spec::Loop::asks`]: a
//! terminal, or `[confirm] unattended = "wait"`), a top-level run parks on
//! the question ([`super::Outcome::Asking`], the guest's `ask` decision) and
//! goes on with the answer, whoever gives it: at the terminal, `loopbox runs
//! answer|approve|deny`, the server's API or dashboard. The answer reads as
//! little-loops' terminal reads a line: `y`/`yes`/`approve` (any prefix),
//! `n`/`no`/`reject` with an optional reason, `e`/`edit`, after which the next
//! answer is the replacement text (`edit TEXT` gives it at once). Anything
//! else asks again, with the valid answers. An answer at or after the
//! deadline (the state's `timeout`, else 1800 s, within the loop's own
//! `timeout`) is the `timeout` verdict, as little-loops withdraws the question
//! then. Routes: approve `yes`; reject `no`; edit `edit`, else `yes`; timeout
//! `timeout`, else `no`. `${captured.STATE}` holds `output` (the edit, else
//! empty), `verdict`, `edit` and `reason`.
//!
//! When nobody can answer (`[confirm] unattended = "decline"`, or a sub-loop,
//! which runs inside its parent's step and cannot wait), the state takes
//! little-loops' headless path at once: the `timeout` route, `.reason` `headless`.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::interp;
use crate::spec::State;

use super::world::{Level, World};
use super::{End, Finish, Machine, failed};

/// A state's wait when it sets no `timeout` (little-loops' `hitl.default_timeout`).
const DEFAULT_WAIT_S: u64 = 1800;

/// What little-loops' terminal prints after an answer it cannot read.
const HINT: &str = "Expected y/yes/approve, n/no/reject, e/edit";

/// The question a run waits on, kept while it is parked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pending {
    /// The `human_approval` state.
    pub state: String,
    /// Its rendered `action`: what the person is asked.
    pub prompt: String,
    /// When the wait ends (the world's clock, milliseconds).
    pub deadline_ms: u64,
    /// `e`/`edit` was answered: the next answer is the replacement text.
    pub edit_next: bool,
    /// The last answer could not be read: the question says so.
    pub unread: bool,
}

/// A person's verdict, as little-loops' `AdapterResponse` holds it.
#[derive(Debug, PartialEq)]
enum Verdict {
    Approve,
    Reject(Option<String>),
    Edit(String),
    /// `e`/`edit` alone: the replacement comes next.
    EditNext,
}

/// One answer as little-loops' `_parse_verdict` reads a terminal line: the
/// first word's case-insensitive prefix of `yes`/`approve`, `no`/`reject`
/// (the rest is the reason) or `edit` (the rest, loopbox's one-line form, is
/// the replacement). `None`: not a verdict.
fn parse(line: &str) -> Option<Verdict> {
    let line = line.trim();
    let (word, rest) = match line.split_once(char::is_whitespace) {
        Some((w, r)) => (w, r.trim()),
        None => (line, ""),
    };
    if word.is_empty() {
        return None;
    }
    let word = word.to_lowercase();
    let is = |full: &str| full.starts_with(word.as_str());
    if is("yes") || is("approve") {
        Some(Verdict::Approve)
    } else if is("no") || is("reject") {
        Some(Verdict::Reject(
            (!rest.is_empty()).then(|| rest.to_string()),
        ))
    } else if is("edit") {
        Some(if rest.is_empty() {
            Verdict::EditNext
        } else {
            Verdict::Edit(rest.to_string())
        })
    } else {
        None
    }
}

impl Machine<'_> {
    /// Ask for the state's verdict: park on the question, or (nobody can
    /// answer) route little-loops' headless way.
    pub(super) fn human_approval(
        &mut self,
        state: &State,
        text: &str,
        world: &mut dyn World,
    ) -> Result<Option<String>, Finish> {
        // little-loops renders the question first: a reference that cannot
        // resolve stops the state there.
        let prompt = interp::render(text, &self.r)
            .map_err(|e| failed(End::Error, format!("state `{}`: action: {e}", state.name)))?;
        if self.r.lp.asks && self.parks {
            let mut wait_s = state.timeout_s.unwrap_or(DEFAULT_WAIT_S);
            if let Some(t) = self.r.lp.timeout_s {
                let elapsed = self.r.now.saturating_sub(self.r.started);
                wait_s = wait_s.min((t * 1000).saturating_sub(elapsed) / 1000);
            }
            world.log(
                Level::Info,
                &format!(
                    "`{}`: human_approval: waiting up to {wait_s}s for a person's verdict",
                    state.name
                ),
            );
            self.pending = Some(Pending {
                state: state.name.clone(),
                prompt,
                deadline_ms: self.r.now.saturating_add(wait_s * 1000),
                edit_next: false,
                unread: false,
            });
            return Ok(None);
        }
        world.log(
            Level::Warn,
            &format!(
                "`{}`: human_approval: {}; routed as an approval nobody answered (`timeout`), as little-loops routes it without an operator",
                state.name,
                if self.r.lp.asks {
                    "a sub-loop cannot wait for a person"
                } else {
                    "nobody can be asked ([confirm] unattended = \"decline\")"
                }
            ),
        );
        Ok(self.verdict(state, "timeout", json!({"reason": "headless"}), world))
    }

    /// The person's answer to the pending question: the route it takes, or
    /// (`Ok(None)` with the question still pending) a question asked again.
    pub(super) fn answered(
        &mut self,
        text: &str,
        world: &mut dyn World,
    ) -> Result<Option<u64>, Finish> {
        let Some(mut p) = self.pending.take() else {
            return Err(failed(
                End::Error,
                "an answer arrived, but the loop asked nothing".into(),
            ));
        };
        let lp = self.r.lp;
        let Some(state) = lp.states.iter().find(|s| s.name == p.state) else {
            return Err(failed(
                End::Error,
                format!("state `{}` is not defined", p.state),
            ));
        };
        self.r.now = world.now_ms();
        let verdict = if self.r.now >= p.deadline_ms {
            None
        } else if p.edit_next {
            Some(Verdict::Edit(text.to_string()))
        } else {
            match parse(text) {
                Some(Verdict::EditNext) => {
                    p.edit_next = true;
                    p.unread = false;
                    self.pending = Some(p);
                    return Ok(None);
                }
                Some(v) => Some(v),
                None => {
                    world.log(
                        Level::Warn,
                        &format!("`{}`: human_approval: {HINT}", state.name),
                    );
                    p.unread = true;
                    self.pending = Some(p);
                    return Ok(None);
                }
            }
        };
        let next = match verdict {
            None => self.verdict(state, "timeout", json!({}), world),
            Some(Verdict::Approve) => self.verdict(state, "approve", json!({}), world),
            Some(Verdict::Reject(reason)) => {
                self.verdict(state, "reject", json!({"reason": reason}), world)
            }
            Some(Verdict::Edit(t)) => {
                self.verdict(state, "edit", json!({"edit": t, "output": t}), world)
            }
            Some(Verdict::EditNext) => unreachable!("asked again above"),
        };
        self.go_to(state, next)
    }

    /// Capture `verdict` (with `more`: the edit, the reason) and choose its
    /// route, as little-loops' `_resolve_verdict`: a route table's own `_`
    /// and `_error` count before the `yes`/`no` fallbacks.
    fn verdict(
        &mut self,
        state: &State,
        verdict: &str,
        more: Value,
        world: &mut dyn World,
    ) -> Option<String> {
        let mut captured = json!({"output": "", "verdict": verdict, "edit": null, "reason": null});
        if let (Some(c), Some(m)) = (captured.as_object_mut(), more.as_object()) {
            c.extend(m.clone());
        }
        self.r.captured.insert(state.name.clone(), captured);
        let word = match verdict {
            "approve" => "yes",
            "reject" => "no",
            other => other,
        };
        let fallback = match word {
            "edit" => Some("yes"),
            "timeout" => Some("no"),
            _ => None,
        };
        let next = crate::route::route(state, word).ok().or_else(|| {
            let f = fallback?;
            if word == "edit" {
                world.log(
                    Level::Warn,
                    &format!(
                        "human_approval state `{}`: no route for the `edit` verdict; falling back to the `yes` route",
                        state.name
                    ),
                );
            }
            crate::route::route(state, f).ok()
        });
        if let Some(n) = &next {
            self.log_step(state, &format!("human_approval: {verdict}"), n, world);
        }
        next
    }

    /// What the person is asked, as little-loops' terminal shows it.
    pub(super) fn question(&self, world: &mut dyn World) -> String {
        let Some(p) = &self.pending else {
            return String::new();
        };
        let left = p.deadline_ms.saturating_sub(world.now_ms()) / 1000;
        let head = if p.edit_next {
            "Enter replacement text (one line):".to_string()
        } else {
            format!(
                "Human approval requested\n  Loop: {}\n  State: {}\n  Prompt: {}\n  Time remaining: {left}s\n  Valid responses: y/yes/approve, n/no/reject [REASON], e/edit [TEXT]",
                self.r.lp.name, p.state, p.prompt
            )
        };
        if p.unread {
            format!("{HINT}\n{head}")
        } else {
            head
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_read_as_little_loops_reads_a_terminal_line() {
        for (line, want) in [
            ("y", Some(Verdict::Approve)),
            ("Yes please", Some(Verdict::Approve)),
            ("ap", Some(Verdict::Approve)),
            ("n", Some(Verdict::Reject(None))),
            (
                "reject  too risky ",
                Some(Verdict::Reject(Some("too risky".into()))),
            ),
            ("e", Some(Verdict::EditNext)),
            (
                "edit retry 4 times",
                Some(Verdict::Edit("retry 4 times".into())),
            ),
            ("", None),
            ("maybe", None),
            ("yess", None),
        ] {
            assert_eq!(parse(line), want, "{line:?}");
        }
    }
}
