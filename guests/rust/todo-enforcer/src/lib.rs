//! The todo enforcer: while the agent's reply still lists unchecked `- [ ]` items,
//! send it back to work, up to a limit of consecutive forced continuations.
//!
//! `decide` is plain Rust over plain data; the component glue at the bottom maps
//! the WIT types onto it.

use serde::{Deserialize, Serialize};

/// The run's input, given with `--input`; every field is optional.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// A first prompt for the agent (standalone runs); none means wait for turns.
    #[serde(default)]
    pub prompt: Option<String>,
    /// The continuation message; `{count}` becomes the number of open items.
    #[serde(default = "default_message")]
    pub message: String,
    /// How many forced continuations in a row before the agent may stop anyway.
    #[serde(default = "default_max")]
    pub max_continuations: u32,
}

fn default_message() -> String {
    "You still have {count} unchecked todo item(s). Continue working, and mark each item `- [x]` when it is done.".into()
}

fn default_max() -> u32 {
    3
}

impl Default for Config {
    fn default() -> Self {
        Config {
            prompt: None,
            message: default_message(),
            max_continuations: default_max(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
pub struct Progress {
    pub config: Config,
    /// Forced continuations in a row so far.
    pub forced: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Input<'a> {
    Start(&'a str),
    Turn {
        response: &'a str,
        continuation: bool,
    },
    Other,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    Pass,
    Inject(String),
}

/// Number of unchecked markdown task items (`- [ ]`, `* [ ]`, `+ [ ]`) in `text`.
pub fn open_items(text: &str) -> usize {
    text.lines()
        .map(str::trim_start)
        .filter(|l| ["- [ ]", "* [ ]", "+ [ ]"].iter().any(|m| l.starts_with(m)))
        .count()
}

pub fn decide(progress: Option<Progress>, input: Input<'_>) -> Result<(Progress, Next), String> {
    match input {
        Input::Start(json) => {
            let config: Config =
                serde_json::from_str(json).map_err(|e| format!("todo-enforcer: bad input: {e}"))?;
            let next = config.prompt.clone().map_or(Next::Pass, Next::Inject);
            Ok((Progress { config, forced: 0 }, next))
        }
        Input::Turn {
            response,
            continuation,
        } => {
            let mut p = progress.unwrap_or_default();
            // A turn the agent started on its own ends any run of forced continuations.
            if !continuation {
                p.forced = 0;
            }
            let count = open_items(response);
            if count > 0 && p.forced < p.config.max_continuations {
                p.forced += 1;
                let msg = p.config.message.replace("{count}", &count.to_string());
                Ok((p, Next::Inject(msg)))
            } else {
                p.forced = 0;
                Ok((p, Next::Pass))
            }
        }
        Input::Other => Ok((progress.unwrap_or_default(), Next::Pass)),
    }
}

#[cfg(target_arch = "wasm32")]
mod component {
    use loopbox_guest::{Decision, Event, Info, Policy, state};

    const KEY: &str = "todo-enforcer";

    struct TodoEnforcer;

    impl Policy for TodoEnforcer {
        fn info() -> Info {
            Info::new(
                "todo-enforcer",
                env!("CARGO_PKG_VERSION"),
                "Send the agent back to work while its reply still has unchecked todo items",
            )
        }

        fn handle(event: Event) -> Result<Decision, String> {
            let input = match &event {
                Event::Start(json) => super::Input::Start(json),
                Event::TurnComplete(t) => super::Input::Turn {
                    response: &t.response,
                    continuation: t.continuation,
                },
                _ => super::Input::Other,
            };
            let (progress, next) = super::decide(state::get(KEY)?, input)?;
            state::set(KEY, &progress)?;
            Ok(match next {
                super::Next::Pass => Decision::Pass,
                super::Next::Inject(msg) => Decision::Inject(msg),
            })
        }
    }

    loopbox_guest::policy!(TodoEnforcer);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_only_unchecked_items() {
        assert_eq!(
            open_items("- [ ] a\n  * [ ] b\n- [x] c\n-[ ] d\n+ [ ] e"),
            3
        );
    }

    #[test]
    fn continues_up_to_the_limit_then_lets_go() {
        let (mut p, _) = decide(None, Input::Start(r#"{"max_continuations":2}"#)).unwrap();
        let mut seen = vec![];
        for i in 0..4 {
            let (np, next) = decide(
                Some(p),
                Input::Turn {
                    response: "- [ ] x",
                    continuation: i > 0,
                },
            )
            .unwrap();
            p = np;
            seen.push(matches!(next, Next::Inject(_)));
        }
        assert_eq!(seen, [true, true, false, true]);
    }

    #[test]
    fn a_fresh_turn_resets_the_count() {
        let (p, _) = decide(None, Input::Start(r#"{"max_continuations":1}"#)).unwrap();
        let (p, a) = decide(
            Some(p),
            Input::Turn {
                response: "- [ ] x",
                continuation: false,
            },
        )
        .unwrap();
        let (p, b) = decide(
            Some(p),
            Input::Turn {
                response: "- [ ] x",
                continuation: true,
            },
        )
        .unwrap();
        let (_, c) = decide(
            Some(p),
            Input::Turn {
                response: "- [ ] x",
                continuation: false,
            },
        )
        .unwrap();
        assert_eq!(
            (a, b),
            (
                Next::Inject(default_message().replace("{count}", "1")),
                Next::Pass
            )
        );
        assert!(matches!(c, Next::Inject(_)));
    }

    #[test]
    fn no_items_passes() {
        let (_, next) = decide(
            None,
            Input::Turn {
                response: "all done - [x] a",
                continuation: false,
            },
        )
        .unwrap();
        assert_eq!(next, Next::Pass);
    }
}
