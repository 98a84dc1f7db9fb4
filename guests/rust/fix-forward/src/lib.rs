//! The AFK fix-forward table as a pure decider: each `tick` carries the run's
//! observed state; the policy answers with the next lifecycle action.
//!
//! First match wins:
//! - pushed and CI green -> close-success (`done`, success)
//! - pushed and CI red, both budgets remaining -> fix-forward (`inject` a corrective turn)
//! - pushed and CI red, a budget spent -> freeze-escalate (`escalate`)
//! - not pushed and the agent's thread errored or went idle -> escalate-prepush (`escalate`)
//! - anything else -> wait (`pass`)
//!
//! Budgets are strict: `attempts < max_attempts` and `elapsed_seconds < max_seconds`.

use serde::{Deserialize, Serialize};

/// Budgets, from the run's input.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Budgets {
    pub fix_forward_max_attempts: u32,
    pub fix_forward_max_seconds: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CiStatus {
    Green,
    Red,
    Pending,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ThreadStatus {
    Running,
    Idle,
    Error,
}

/// One observation, the payload of a `tick`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RunState {
    pub pushed: bool,
    #[serde(default)]
    pub ci_status: Option<CiStatus>,
    #[serde(default)]
    pub thread_status: Option<ThreadStatus>,
    #[serde(default)]
    pub attempts: u32,
    #[serde(default)]
    pub elapsed_seconds: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    CloseSuccess,
    FixForward,
    FreezeEscalate,
    EscalatePrepush,
    Wait,
}

impl Action {
    pub fn name(self) -> &'static str {
        match self {
            Action::CloseSuccess => "close-success",
            Action::FixForward => "fix-forward",
            Action::FreezeEscalate => "freeze-escalate",
            Action::EscalatePrepush => "escalate-prepush",
            Action::Wait => "wait",
        }
    }
}

/// The decision table. Pure and total.
pub fn next_action(s: &RunState, b: &Budgets) -> Action {
    if s.pushed {
        return match s.ci_status {
            Some(CiStatus::Green) => Action::CloseSuccess,
            Some(CiStatus::Red) if budget_remaining(s, b) => Action::FixForward,
            Some(CiStatus::Red) => Action::FreezeEscalate,
            _ => Action::Wait,
        };
    }
    match s.thread_status {
        Some(ThreadStatus::Error | ThreadStatus::Idle) => Action::EscalatePrepush,
        _ => Action::Wait,
    }
}

fn budget_remaining(s: &RunState, b: &Budgets) -> bool {
    s.attempts < b.fix_forward_max_attempts && s.elapsed_seconds < b.fix_forward_max_seconds
}

/// The text each action carries to the agent or the person.
pub fn explain(action: Action, s: &RunState, b: &Budgets) -> String {
    match action {
        Action::CloseSuccess => "CI is green on the pushed commit; closing the issue".into(),
        Action::FixForward => format!(
            "CI is red on the commit you pushed. Read the failing checks and push a fix \
             (fix-forward attempt {} of {}).",
            s.attempts + 1,
            b.fix_forward_max_attempts
        ),
        Action::FreezeEscalate => format!(
            "CI is still red after {} fix-forward attempt(s) and {}s (budget {} attempts, {}s); \
             the broken commit is left in place for a person",
            s.attempts, s.elapsed_seconds, b.fix_forward_max_attempts, b.fix_forward_max_seconds
        ),
        Action::EscalatePrepush => format!(
            "the agent's thread is {} with nothing pushed; it will not reach green on its own",
            match s.thread_status {
                Some(ThreadStatus::Error) => "in error",
                _ => "idle",
            }
        ),
        Action::Wait => String::new(),
    }
}

#[cfg(target_arch = "wasm32")]
mod component {
    use super::{Action, Budgets, RunState};
    use loopbox_guest::{Decision, Event, Info, Policy, done_with, state};

    const KEY: &str = "budgets";

    struct FixForward;

    impl Policy for FixForward {
        fn info() -> Info {
            Info::new(
                "fix-forward",
                env!("CARGO_PKG_VERSION"),
                "The AFK fix-forward decision table over CI and agent-thread ticks",
            )
        }

        fn handle(event: Event) -> Result<Decision, String> {
            match event {
                Event::Start(json) => {
                    let b: Budgets = serde_json::from_str(&json)
                        .map_err(|e| format!("fix-forward: bad input: {e}; expected {{\"fix_forward_max_attempts\": N, \"fix_forward_max_seconds\": N}}"))?;
                    state::set(KEY, &b)?;
                    Ok(Decision::Pass)
                }
                Event::Tick(json) => {
                    let b: Budgets = state::get(KEY)?
                        .ok_or("fix-forward: a tick arrived before `start` gave the budgets")?;
                    let s: RunState = serde_json::from_str(&json)
                        .map_err(|e| format!("fix-forward: bad tick: {e}"))?;
                    let action = super::next_action(&s, &b);
                    let text = super::explain(action, &s, &b);
                    Ok(match action {
                        Action::CloseSuccess => {
                            done_with(true, text, &serde_json::json!({"action": action.name()}))?
                        }
                        Action::FixForward => Decision::Inject(text),
                        Action::FreezeEscalate | Action::EscalatePrepush => {
                            Decision::Escalate(format!("{}: {text}", action.name()))
                        }
                        Action::Wait => Decision::Pass,
                    })
                }
                _ => Ok(Decision::Pass),
            }
        }
    }

    loopbox_guest::policy!(FixForward);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn green_closes_whatever_the_thread_says() {
        let b = Budgets {
            fix_forward_max_attempts: 1,
            fix_forward_max_seconds: 1,
        };
        for t in [None, Some(ThreadStatus::Error), Some(ThreadStatus::Idle)] {
            let s = RunState {
                pushed: true,
                ci_status: Some(CiStatus::Green),
                thread_status: t,
                attempts: 9,
                elapsed_seconds: 9,
            };
            assert_eq!(next_action(&s, &b), Action::CloseSuccess);
        }
    }

    #[test]
    fn budgets_are_strict() {
        let b = Budgets {
            fix_forward_max_attempts: 2,
            fix_forward_max_seconds: 60,
        };
        let red = |attempts, elapsed_seconds| RunState {
            pushed: true,
            ci_status: Some(CiStatus::Red),
            thread_status: None,
            attempts,
            elapsed_seconds,
        };
        assert_eq!(next_action(&red(1, 59), &b), Action::FixForward);
        assert_eq!(next_action(&red(2, 0), &b), Action::FreezeEscalate);
        assert_eq!(next_action(&red(0, 60), &b), Action::FreezeEscalate);
    }
}
