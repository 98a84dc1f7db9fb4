//! The Ralph loop: keep feeding the agent the same prompt until its reply carries
//! the completion promise (`<promise>TEXT</promise>`) or the iteration budget runs out.
//!
//! The decision logic is plain Rust over plain data (`decide`), so it is tested and
//! benchmarked natively; the component glue at the bottom only moves values between
//! the WIT types and these.

use serde::{Deserialize, Serialize};

/// The run's input, given with `--input`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The prompt fed to the agent on every iteration.
    pub prompt: String,
    /// The text the agent must put inside `<promise>...</promise>` to finish.
    #[serde(default)]
    pub completion_promise: Option<String>,
    /// Stop (as a failure) after this many iterations; 0 means no limit of our own.
    #[serde(default)]
    pub max_iterations: u32,
}

/// What the loop remembers between events.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct Progress {
    pub config: Config,
    /// Iterations started so far (the first prompt is iteration 1).
    pub iteration: u32,
}

/// What happened, reduced to what Ralph looks at.
#[derive(Debug, Clone, PartialEq)]
pub enum Input<'a> {
    Start(&'a str),
    Turn { response: &'a str },
    Other,
}

/// What Ralph wants next.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    Pass,
    Inject(String),
    Done { success: bool, summary: String },
}

/// The first `<promise>...</promise>` in `text`, trimmed.
pub fn find_promise(text: &str) -> Option<&str> {
    let start = text.find("<promise>")? + "<promise>".len();
    let len = text[start..].find("</promise>")?;
    Some(text[start..start + len].trim())
}

/// The message sent on iteration `n`.
pub fn iteration_prompt(config: &Config, n: u32) -> String {
    if config.max_iterations > 0 {
        format!(
            "{}\n\n[ralph iteration {n} of {}]",
            config.prompt, config.max_iterations
        )
    } else {
        format!("{}\n\n[ralph iteration {n}]", config.prompt)
    }
}

/// One step of the loop: the progress so far (none before `start`) and an input,
/// to the new progress and what to do next.
pub fn decide(
    progress: Option<Progress>,
    input: Input<'_>,
) -> Result<(Option<Progress>, Next), String> {
    match input {
        Input::Start(json) => {
            let config: Config = serde_json::from_str(json)
                .map_err(|e| format!("ralph: bad input: {e}; expected {{\"prompt\": \"...\", \"completion_promise\": \"...\", \"max_iterations\": N}}"))?;
            if config.prompt.trim().is_empty() {
                return Err("ralph: bad input: `prompt` is empty".into());
            }
            let next = Next::Inject(iteration_prompt(&config, 1));
            Ok((
                Some(Progress {
                    config,
                    iteration: 1,
                }),
                next,
            ))
        }
        Input::Turn { response } => {
            let Some(mut p) = progress else {
                return Err("ralph: a turn arrived before the run started; deliver `start` with the loop's input first".into());
            };
            if p.config.completion_promise.is_some()
                && p.config.completion_promise.as_deref() == find_promise(response)
            {
                let summary = format!(
                    "completion promise found after {} iteration(s)",
                    p.iteration
                );
                return Ok((
                    Some(p),
                    Next::Done {
                        success: true,
                        summary,
                    },
                ));
            }
            if p.config.max_iterations > 0 && p.iteration >= p.config.max_iterations {
                let summary = format!(
                    "max_iterations ({}) reached without the completion promise",
                    p.config.max_iterations
                );
                return Ok((
                    Some(p),
                    Next::Done {
                        success: false,
                        summary,
                    },
                ));
            }
            p.iteration += 1;
            let next = Next::Inject(iteration_prompt(&p.config, p.iteration));
            Ok((Some(p), next))
        }
        Input::Other => Ok((progress, Next::Pass)),
    }
}

#[cfg(all(target_arch = "wasm32", target_os = "wasi"))]
mod component {
    use loopbox_guest::{Decision, Event, Info, Policy, done, state};

    const KEY: &str = "ralph";

    struct Ralph;

    impl Policy for Ralph {
        fn info() -> Info {
            Info::new(
                "ralph",
                env!("CARGO_PKG_VERSION"),
                "Re-feed a prompt until the reply carries the completion promise or iterations run out",
            )
        }

        fn handle(event: Event) -> Result<Decision, String> {
            let input = match &event {
                Event::Start(json) => super::Input::Start(json),
                Event::TurnComplete(turn) => super::Input::Turn {
                    response: &turn.response,
                },
                _ => super::Input::Other,
            };
            let (progress, next) = super::decide(state::get(KEY)?, input)?;
            if let Some(p) = progress {
                state::set(KEY, &p)?;
            }
            Ok(match next {
                super::Next::Pass => Decision::Pass,
                super::Next::Inject(msg) => Decision::Inject(msg),
                super::Next::Done { success, summary } => done(success, summary),
            })
        }
    }

    loopbox_guest::policy!(Ralph);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(json: &str) -> Option<Progress> {
        decide(None, Input::Start(json)).unwrap().0
    }

    #[test]
    fn promise_is_the_first_tag_trimmed() {
        assert_eq!(
            find_promise("x <promise> DONE </promise> <promise>NO</promise>"),
            Some("DONE")
        );
        assert_eq!(find_promise("<promise>unclosed"), None);
        assert_eq!(find_promise("nothing"), None);
    }

    #[test]
    fn stops_exactly_at_the_promise() {
        let p = start(r#"{"prompt":"go","completion_promise":"DONE"}"#);
        let (p, next) = decide(
            p,
            Input::Turn {
                response: "<promise>not yet</promise>",
            },
        )
        .unwrap();
        assert_eq!(next, Next::Inject("go\n\n[ralph iteration 2]".into()));
        let (_, next) = decide(
            p,
            Input::Turn {
                response: "ok <promise>DONE</promise>",
            },
        )
        .unwrap();
        assert_eq!(
            next,
            Next::Done {
                success: true,
                summary: "completion promise found after 2 iteration(s)".into()
            }
        );
    }

    #[test]
    fn fails_when_iterations_run_out() {
        let mut p = start(r#"{"prompt":"go","completion_promise":"DONE","max_iterations":2}"#);
        let (np, next) = decide(p, Input::Turn { response: "no" }).unwrap();
        assert!(matches!(next, Next::Inject(_)));
        p = np;
        let (_, next) = decide(p, Input::Turn { response: "no" }).unwrap();
        assert!(matches!(next, Next::Done { success: false, .. }));
    }

    #[test]
    fn bad_input_is_an_error() {
        assert!(
            decide(None, Input::Start("{}"))
                .unwrap_err()
                .contains("bad input")
        );
        assert!(
            decide(None, Input::Start(r#"{"prompt":" "}"#))
                .unwrap_err()
                .contains("empty")
        );
        assert!(
            decide(None, Input::Turn { response: "x" })
                .unwrap_err()
                .contains("before the run started")
        );
    }
}
