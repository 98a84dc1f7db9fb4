//! A policy built against contract 0.2.0 (`wit/released/0.2.0`), with
//! wit-bindgen directly and not the SDK, as a policy published before 0.3.0
//! was. The tests run it on today's host: its prompts (which have no
//! `profile` or `cwd`) go to the `[agent]` section, its events keep `origin`.
//!
//! - `start`: with `{"exec": [ARGV...]}` it runs the command, with
//!   `{"prompt": TEXT}` it prompts the agent, and is `done` with the output's
//!   stdout (an action error: `escalate` naming it); with `{}`, `pass`.
//! - `turn-complete`: `inject` a line with the turn's fields and its origin's agent.
//! - anything else: `pass`.

wit_bindgen::generate!({
    path: "../../../wit/released/0.2.0",
    world: "loop-policy",
});

use exports::loopbox::policy::policy::{Guest, PolicyInfo};
use loopbox::policy::actions::{
    self, ActionError, Command, PromptKind, PromptRequest, ShellRequest,
};
use loopbox::policy::log::{self, Level};
use loopbox::policy::types::{Decision, Event, Outcome};

struct Old;

impl Guest for Old {
    fn info() -> PolicyInfo {
        PolicyInfo {
            name: "contract-0-2".into(),
            version: "0.2.0".into(),
            description: "a policy built against loopbox:policy@0.2.0".into(),
        }
    }

    fn handle(event: Event) -> Result<Decision, String> {
        match event {
            Event::Start(input) => {
                log::write(Level::Info, "contract 0.2.0 policy started");
                let input: serde_json::Value =
                    serde_json::from_str(&input).map_err(|e| e.to_string())?;
                let result = if let Some(argv) = input["exec"].as_array() {
                    let argv = argv
                        .iter()
                        .map(|a| a.as_str().unwrap_or_default().to_string())
                        .collect();
                    actions::shell(&ShellRequest::Exec(Command {
                        argv,
                        cwd: None,
                        env: vec![],
                        stdin: None,
                        timeout_ms: None,
                    }))
                } else if let Some(text) = input["prompt"].as_str() {
                    actions::prompt(&PromptRequest {
                        text: text.into(),
                        kind: PromptKind::Prompt,
                        model: None,
                        session: None,
                        timeout_ms: None,
                    })
                } else {
                    return Ok(Decision::Pass);
                };
                Ok(match result {
                    Ok(out) => Decision::Done(Outcome {
                        success: out.exit_code == Some(0),
                        summary: format!("0.2.0 got: {}", out.stdout.trim()),
                        data: None,
                    }),
                    Err(ActionError::Denied(m)) => Decision::Escalate(format!("0.2.0 denied: {m}")),
                    Err(e) => Decision::Escalate(format!("0.2.0 action error: {e:?}")),
                })
            }
            Event::TurnComplete(t) => Ok(Decision::Inject(format!(
                "0.2.0 saw turn {} of {} from {}: {}",
                t.index,
                t.session_id,
                t.origin.map(|o| o.agent).unwrap_or_default(),
                t.response
            ))),
            _ => Ok(Decision::Pass),
        }
    }
}

export!(Old);
