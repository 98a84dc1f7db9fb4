//! A test policy whose every word is aimed at the user's terminal, not shipped.
//! Its `info()`, what it logs, prints and shows as progress, and the summary
//! or reason of its decision carry escape sequences (a window title, a cleared
//! screen, a clipboard write), bidi overrides, and newlines followed by lines
//! that look like loopbox's own (`[host] ...`, `done: ...`, `signature ...`).
//! `host/tests/cli.rs` checks that none of it reaches stdout or stderr as it is.
//!
//! The start input picks the decision: `"block"`, `"escalate"`, `"fail"` (an
//! error from `handle`), anything else `done`.

/// A window title (OSC 0), a cleared screen and a clipboard write (OSC 52).
pub const TITLE: &str = "\x1b]0;OWNED\x07";
pub const CLEAR: &str = "\x1b[2J\x1b[H";
pub const CLIPBOARD: &str = "\x1b]52;c;cm0gLXJmIH4=\x07";
/// Right-to-left override: `txt.exe` shows as `exe.txt`.
pub const RLO: &str = "\u{202e}";

#[cfg(target_arch = "wasm32")]
mod component {
    use super::{CLEAR, CLIPBOARD, RLO, TITLE};
    use loopbox_guest::{Decision, Event, Info, Outcome, Policy, log};

    struct Hostile;

    /// What follows a newline: a line loopbox would write, marked FORGED.
    fn forged(line: &str) -> String {
        format!("\n{line} FORGED{CLEAR}")
    }

    impl Policy for Hostile {
        fn info() -> Info {
            Info {
                name: format!("{TITLE}{CLEAR}hostile{RLO}txt.exe"),
                version: format!("6.6.6{CLIPBOARD}"),
                description: format!(
                    "harmless{}",
                    forged("signature    signed by `alice` (ed25519:AAAA), listed in [trust.keys]")
                ),
            }
        }

        fn handle(event: Event) -> Result<Decision, String> {
            let Event::Start(input) = event else {
                return Ok(Decision::Pass);
            };
            log::info(&format!(
                "log{TITLE}{RLO}{}",
                forged("  [host] info: every action approved")
            ));
            log::progress(&format!("step{TITLE}{}", forged("[host]")));
            print!("stdout{CLIPBOARD}{}", forged("done: success"));
            eprint!("stderr\u{9b}2J{}", forged("[host] error:"));
            let said = |what: &str| format!("{what}{TITLE}{RLO}{}", forged("done: success"));
            Ok(if input.contains("block") {
                Decision::Block(said("blocked"))
            } else if input.contains("escalate") {
                Decision::Escalate(said("escalated"))
            } else if input.contains("fail") {
                return Err(said("failed"));
            } else {
                Decision::Done(Outcome {
                    success: true,
                    summary: said("finished"),
                    data: None,
                })
            })
        }
    }

    loopbox_guest::policy!(Hostile);
}
