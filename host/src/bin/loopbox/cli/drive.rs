//! What `loopbox run` and `loopbox runs resume|answer|tick` add to the
//! library's launcher (`loopbox::run::launch`): asking on the terminal,
//! driving a prepared run, and reporting how it ended with its exit code.

use std::io::{BufRead, IsTerminal, Write};
use std::path::Path;
use std::sync::Arc;

use serde_json::json;

use super::{Failure, exit};
use loopbox::db::{Db, RunRecord};
use loopbox::exec::confirm::{Answer, ApproveAll, AskRequest, Asking, Confirm};
use loopbox::run::driver::{Asker, Next, NoAsker, RunEnd};
use loopbox::run::launch::{self, Ended, Failed, LaunchError, Prepared, Signals};
use loopbox::ui::{Ui, Untrusted};
use loopbox::wasm::policy::{Policy, PolicySource};

pub use loopbox::run::launch::grant_set;

impl From<LaunchError> for Failure {
    fn from(e: LaunchError) -> Failure {
        match e.kind {
            // A change a resume did not accept: the user's to accept, as a usage error is.
            Failed::Usage | Failed::Changed => Failure::usage(e.error),
            Failed::Internal => Failure::internal(e.error),
        }
    }
}

/// SIGINT and SIGTERM caught on the runtime the run will be driven on: a second
/// one ends loopbox at once with [`exit::INTERRUPTED`].
pub fn catch_signals() -> Result<Signals, Failure> {
    Ok(Signals::catch(exit::INTERRUPTED)?)
}

/// One process driving one run: what the front end adds to [`Prepared::drive`].
pub struct Drive {
    /// Listening for SIGINT and SIGTERM since before the run was marked running.
    pub signals: Signals,
    pub db: Db,
    pub run: RunRecord,
    pub policy: Policy,
    pub json: bool,
    /// Print the grants banner (a new run) or a one-line "resuming" note.
    pub banner: bool,
    pub resend_turn: bool,
}

impl Drive {
    /// Drive the run from `next`, record how it ended, print it; the exit code.
    pub fn until_it_stops(self, prepared: &Prepared<'_>, next: Next) -> Result<i32, Failure> {
        let Drive {
            signals,
            db,
            run,
            policy,
            json,
            banner,
            resend_turn,
        } = self;
        let ui = if json { Ui::quiet() } else { Ui::detect(false) };
        // With nobody at a terminal (or --json), an ask-tier action waits for an
        // approval (`loopbox runs approve`), or is declined ([confirm] unattended).
        let asking = if run.options.yes {
            Asking::Here(Arc::new(ApproveAll))
        } else if json || !can_ask() {
            Asking::Nobody
        } else {
            Asking::Here(Arc::new(TerminalConfirm { ui: ui.clone() }))
        };
        let asker: Box<dyn Asker + Sync> = if json {
            Box::new(NoAsker)
        } else {
            Box::new(TerminalAsker { ui: ui.clone() })
        };
        let (id, store) = (run.id.clone(), db.path().to_path_buf());
        let drive = launch::Drive {
            db,
            run,
            policy,
            ui,
            asking,
            asker: asker.as_ref(),
            banner,
            resend_turn,
            park_sleeps: false,
        };
        let ended = prepared.drive(drive, signals, next)?;
        Ok(report(&ended, &id, &store, &prepared.source, json))
    }
}

/// Print how the run ended (already recorded); the exit code.
fn report(ended: &Ended, id: &str, store: &Path, source: &PolicySource, json: bool) -> i32 {
    let Ended {
        end,
        outcome,
        record,
        world,
    } = ended;
    let code = exit_code(end, launch::is_yaml_loop(source));
    if json {
        let out = json!({
            "run_id": id, "policy": source.to_string(), "world": world, "status": end.status(),
            "exit_code": code, "summary": end.summary(), "outcome": outcome, "turns": record.turns, "actions": record.actions,
        });
        loopbox::outln!("{out}");
    } else {
        loopbox::outln!("{}: {}", end.status(), Untrusted(&end.summary()));
        match end {
            RunEnd::Waiting(_) | RunEnd::Asked(_) | RunEnd::AwaitingApproval(_) => {
                loopbox::outln!("run {id} is parked in {}", store.display())
            }
            RunEnd::TurnUnknown(_) => loopbox::outln!(
                "resume it with `loopbox runs resume {id} --resend-turn`, or stop it with `loopbox runs cancel {id}`"
            ),
            RunEnd::Interrupted => loopbox::outln!(
                "resume it with `loopbox runs resume {id}`, or stop it with `loopbox runs cancel {id}`"
            ),
            _ => {}
        }
    }
    code
}

/// Take the run for this process, or say who has it.
pub fn acquire(db: &Db, id: &str) -> Result<(), Failure> {
    match db.acquire(id).map_err(Failure::internal)? {
        Ok(()) => Ok(()),
        Err(holder) => Err(Failure {
            code: exit::BUSY,
            error: anyhow::anyhow!(
                "run {id} is being driven by another loopbox process (pid {} on {}); wait for it to finish, or stop it with `loopbox runs cancel {id}`",
                holder.pid,
                holder.host
            ),
        }),
    }
}

/// Asks on the terminal whether an ask-tier action may run.
struct TerminalConfirm {
    ui: Ui,
}

impl Confirm for TerminalConfirm {
    fn confirm(&self, ask: &AskRequest) -> anyhow::Result<Answer> {
        let message = format!(
            "The policy wants to run {} (needs a yes: {})",
            Untrusted(&ask.what),
            Untrusted(&ask.rule)
        );
        Ok(match read_answer(&self.ui, &message, "Allow it? [y/N] ") {
            None => Answer::NoOneToAsk(
                "there is no terminal to ask on (stdin is not a terminal, or CI is set); run on a terminal, or pass --yes to approve ask-tier actions".into(),
            ),
            Some(a) if matches!(a.trim(), "y" | "Y" | "yes" | "YES" | "Yes") => Answer::Approved,
            Some(_) => Answer::Declined("the user said no".into()),
        })
    }
}

/// Whether a person can be asked on this terminal (stdin is one, and `CI` is not set).
pub fn can_ask() -> bool {
    std::io::stdin().is_terminal() && std::env::var_os("CI").is_none()
}

/// Asks on the terminal; declines (returns None) without one or under CI.
struct TerminalAsker {
    ui: Ui,
}

impl Asker for TerminalAsker {
    fn ask(&self, question: &str) -> Option<String> {
        read_answer(
            &self.ui,
            &format!("The policy asks: {}", Untrusted(question)),
            "answer> ",
        )
    }
}

/// Show `message` and read one line from the person at the terminal; None without one
/// (stdin not a terminal, or `CI` set), or when reading fails or meets the end
/// of input (a closed terminal answers nothing: the run waits, rather than
/// taking an empty line for an answer again and again).
pub fn read_answer(ui: &Ui, message: &str, prompt: &str) -> Option<String> {
    if !can_ask() {
        return None;
    }
    let mut answer = String::new();
    ui.suspend(|| {
        loopbox::errln!("\n{message}");
        loopbox::errprint!("{prompt}");
        let _ = std::io::stderr().flush();
        std::io::stdin().lock().read_line(&mut answer).ok()
    })
    .filter(|read| *read > 0)?;
    Some(answer.trim_end_matches(['\n', '\r']).to_string())
}

/// The exit code of a YAML loop that ends in a failure terminal state:
/// little-loops' `FAILURE_TERMINAL_EXIT_CODE` (the same number as a usage error).
const LOOP_FAILURE_TERMINAL: i32 = 2;

/// `builtin:fsm`'s outcome data says the loop ended in a terminal state (a
/// failure one, since the outcome is not a success).
fn failure_terminal(data: Option<&str>) -> bool {
    data.and_then(|d| serde_json::from_str::<serde_json::Value>(d).ok())
        .is_some_and(|d| d["terminated_by"] == "terminal")
}

/// The process exit code of a run's end (see the README's table). A YAML
/// loop that reaches a failure terminal exits 2, as `ll-loop run` does
/// (`FAILURE_TERMINAL_EXIT_CODE`, `cli/loop/_helpers.py::run_foreground`),
/// for queues that test for it; its other failures exit 1.
fn exit_code(end: &RunEnd, yaml_loop: bool) -> i32 {
    match end {
        RunEnd::Done(o) if o.success => exit::OK,
        RunEnd::Done(o) if yaml_loop && failure_terminal(o.data.as_deref()) => {
            LOOP_FAILURE_TERMINAL
        }
        RunEnd::Stopped { .. } => exit::OK,
        RunEnd::Done(_) | RunEnd::Blocked(_) => exit::FAILURE,
        RunEnd::Escalated(_) => exit::ESCALATED,
        RunEnd::Waiting(_) | RunEnd::Asked(_) | RunEnd::AwaitingApproval(_) => exit::WAITING,
        RunEnd::Fault(_) => exit::FAULT,
        RunEnd::TurnBudget(_) | RunEnd::Quota(_) | RunEnd::Budget { .. } => exit::TURN_BUDGET,
        RunEnd::Agent(_) => exit::AGENT,
        RunEnd::Cancelled => exit::CANCELLED,
        RunEnd::TurnUnknown(_) => exit::UNKNOWN_TURN,
        RunEnd::Interrupted => exit::INTERRUPTED,
    }
}
