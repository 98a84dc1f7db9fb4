//! A policy built against contract 0.1.0 (`wit/released/0.1.0`), with
//! wit-bindgen directly and not the SDK, as a policy published before 0.2.0
//! was. The tests run it on today's host: its events come without `origin`,
//! its actions, state and log reach the same capabilities, its decisions count.
//!
//! - `start`: with `{"exec": [ARGV...]}` it runs the command and is `done` with
//!   its stdout (an action error: `escalate` naming its kind); with `{}`, `pass`.
//!   It stores `started` in state either way.
//! - `turn-complete`: `inject` a line with the turn's fields and the state it stored.
//! - `tool-call`: `block` naming the tool.
//! - anything else: `pass`.

wit_bindgen::generate!({
    path: "../../../wit/released/0.1.0",
    world: "loop-policy",
});

use exports::loopbox::policy::policy::{Guest, PolicyInfo};
use loopbox::policy::actions::{self, ActionError, Command, ShellRequest};
use loopbox::policy::log::{self, Level};
use loopbox::policy::state;
use loopbox::policy::types::{Decision, Event, Outcome};

struct Old;

impl Guest for Old {
    fn info() -> PolicyInfo {
        PolicyInfo {
            name: "contract-0-1".into(),
            version: "0.1.0".into(),
            description: "a policy built against loopbox:policy@0.1.0".into(),
        }
    }

    fn handle(event: Event) -> Result<Decision, String> {
        match event {
            Event::Start(input) => {
                state::set("started", "true")?;
                log::write(Level::Info, "contract 0.1.0 policy started");
                let input: serde_json::Value =
                    serde_json::from_str(&input).map_err(|e| e.to_string())?;
                let Some(argv) = input["exec"].as_array() else {
                    return Ok(Decision::Pass);
                };
                let argv = argv
                    .iter()
                    .map(|a| a.as_str().unwrap_or_default().to_string())
                    .collect();
                let req = ShellRequest::Exec(Command {
                    argv,
                    cwd: None,
                    env: vec![],
                    stdin: None,
                    timeout_ms: None,
                });
                Ok(match actions::shell(&req) {
                    Ok(out) => Decision::Done(Outcome {
                        success: out.exit_code == Some(0),
                        summary: format!("0.1.0 ran it: {}", out.stdout.trim()),
                        data: None,
                    }),
                    Err(ActionError::Denied(m)) => Decision::Escalate(format!("0.1.0 denied: {m}")),
                    Err(e) => Decision::Escalate(format!("0.1.0 action error: {e:?}")),
                })
            }
            Event::TurnComplete(t) => Ok(Decision::Inject(format!(
                "0.1.0 saw turn {} of {} (continuation {}, started {}): {}",
                t.index,
                t.session_id,
                t.continuation,
                state::get("started").unwrap_or_default(),
                t.response
            ))),
            Event::ToolCall(c) => Ok(Decision::Block(format!("0.1.0 blocks {}", c.name))),
            _ => Ok(Decision::Pass),
        }
    }
}

export!(Old);
