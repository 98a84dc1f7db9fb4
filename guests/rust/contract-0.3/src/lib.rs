//! A policy built against contract 0.3.0 (`wit/released/0.3.0`), with
//! wit-bindgen directly and not the SDK, as a policy published before 0.4.0
//! was. The tests run it on today's host: its decisions (which have no
//! `sleep`) and its 0.3.0 calls (a prompt's `profile`, `worktree-add`) reach
//! today's capabilities.
//!
//! - `start`: with `{"exec": [ARGV...]}` it runs the command, with
//!   `{"prompt": TEXT, "profile": NAME?}` it prompts the agent (or the named
//!   profile), with `{"worktree": BRANCH}` it checks the branch out and
//!   removes it again; then it is `done` with the output (an action error:
//!   `escalate` naming it); with `{}`, `pass`.
//! - `turn-complete`: `inject` a line with the turn's fields.
//! - anything else: `pass`.

wit_bindgen::generate!({
    path: "../../../wit/released/0.3.0",
    world: "loop-policy",
});

use exports::loopbox::policy::policy::{Guest, PolicyInfo};
use loopbox::policy::actions::{
    self, ActionError, Command, PromptKind, PromptRequest, ShellRequest,
};
use loopbox::policy::log::{self, Level};
use loopbox::policy::types::{Decision, Event, Outcome};

struct Old;

fn done(summary: String, success: bool) -> Decision {
    Decision::Done(Outcome {
        success,
        summary,
        data: None,
    })
}

impl Guest for Old {
    fn info() -> PolicyInfo {
        PolicyInfo {
            name: "contract-0-3".into(),
            version: "0.3.0".into(),
            description: "a policy built against loopbox:policy@0.3.0".into(),
        }
    }

    fn handle(event: Event) -> Result<Decision, String> {
        match event {
            Event::Start(input) => {
                log::write(Level::Info, "contract 0.3.0 policy started");
                let input: serde_json::Value =
                    serde_json::from_str(&input).map_err(|e| e.to_string())?;
                if let Some(branch) = input["worktree"].as_str() {
                    return Ok(match actions::worktree_add(branch) {
                        Ok(path) => match actions::worktree_remove(&path) {
                            Ok(()) => done(format!("0.3.0 had a worktree at {path}"), true),
                            Err(e) => Decision::Escalate(format!("0.3.0 remove: {e:?}")),
                        },
                        Err(e) => Decision::Escalate(format!("0.3.0 worktree: {e:?}")),
                    });
                }
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
                        profile: input["profile"].as_str().map(String::from),
                        cwd: None,
                    })
                } else {
                    return Ok(Decision::Pass);
                };
                Ok(match result {
                    Ok(out) => done(
                        format!("0.3.0 got: {}", out.stdout.trim()),
                        out.exit_code == Some(0),
                    ),
                    Err(ActionError::Denied(m)) => Decision::Escalate(format!("0.3.0 denied: {m}")),
                    Err(e) => Decision::Escalate(format!("0.3.0 action error: {e:?}")),
                })
            }
            Event::TurnComplete(t) => Ok(Decision::Inject(format!(
                "0.3.0 saw turn {} of {}: {}",
                t.index, t.session_id, t.response
            ))),
            _ => Ok(Decision::Pass),
        }
    }
}

export!(Old);
