//! `loopbox runs resume|answer|tick ID`: continue a run in this process, from
//! where the store says it stands.

use std::path::Path;

use clap::Args;

use super::super::drive::{Drive, acquire, catch_signals};
use super::super::{Failure, exit, json_arg};
use super::{open_store, read_store, store_path};
use loopbox::bindings::{Decision, Event};
use loopbox::db::{Db, RunRecord};
use loopbox::run::driver::{Next, resume_point};
use loopbox::run::launch::Prepared;
use loopbox::run::lifecycle::{self, Changes, Resumed};
use loopbox::run::trust::Trust;
use loopbox::wasm::policy::Policy;

#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The run's id (see `loopbox runs`)
    pub(super) id: String,
    /// Continue even though the policy file changed since the run started
    #[arg(long)]
    pub(super) allow_policy_change: bool,
    /// Continue under the config as it is now, though its grants changed since the run started
    #[arg(long)]
    pub(super) accept_config_change: bool,
    /// Send again an agent turn that was in flight when the run stopped
    #[arg(long)]
    pub(super) resend_turn: bool,
}

#[derive(Debug, Args)]
pub struct AnswerArgs {
    /// The run's id
    pub(super) id: String,
    /// The answer, delivered to the policy as `user-input`
    pub(super) text: String,
    /// Continue even though the policy file changed since the run started
    #[arg(long)]
    pub(super) allow_policy_change: bool,
    /// Continue under the config as it is now, though its grants changed since the run started
    #[arg(long)]
    pub(super) accept_config_change: bool,
}

#[derive(Debug, Args)]
pub struct TickArgs {
    /// The run's id
    pub(super) id: String,
    /// The tick's payload: JSON, or @FILE. Left out for a run sleeping on its
    /// own timer (a `sleep` decision), which wakes now with the tick it named
    #[arg(value_name = "JSON|@FILE")]
    pub(super) payload: Option<String>,
    /// Continue even though the policy file changed since the run started
    #[arg(long)]
    pub(super) allow_policy_change: bool,
    /// Continue under the config as it is now, though its grants changed since the run started
    #[arg(long)]
    pub(super) accept_config_change: bool,
}

/// A run that may be continued, with its policy and config loaded.
struct Loaded<'a> {
    db: Db,
    run: RunRecord,
    policy: Policy,
    prepared: Prepared<'a>,
}

/// The command that continues a run, to say how to try again.
struct Again(String);

fn load<'a>(
    id: &str,
    workspace: &'a Path,
    allow_policy_change: bool,
    accept_config_change: bool,
    again: &Again,
) -> Result<Loaded<'a>, Failure> {
    // The run is read (and refused when it cannot go on) before anything is
    // written: reading works on a full disk, and the run is named if writing does not.
    let seen = read_store(workspace)?
        .existing_run(id)
        .map_err(Failure::lookup)?;
    refuse_ended(id, &seen)?;
    let db = open_store(workspace)
        .and_then(|db| {
            db.find_interrupted().map_err(Failure::internal)?;
            Ok(db)
        })
        .map_err(|f| no_space(f, workspace, &seen, again))?;
    let run = db.existing_run(id).map_err(Failure::lookup)?;
    refuse_ended(id, &run)?;
    // The config as the run's options name it, obeyed only once the user trusts
    // it, as `loopbox run` requires: a store and a config that came with a cloned
    // project (a planted run) are never continued on their word. Pinned grants
    // then hold it to the run's, and its policy is compared with the one it started with.
    let trust = Trust::UserStoreOrAsk(
        super::super::trust::user_store()?,
        &super::super::trust::AtTerminal,
    );
    let changes = Changes {
        accept_config: accept_config_change,
        how_to_accept_config: "pass --accept-config-change to continue under the config as it is now",
        allow_policy: allow_policy_change,
        how_to_allow_policy: "pass --allow-policy-change to continue with this one",
    };
    let Resumed {
        prepared,
        policy,
        grants_changed,
        policy_changed,
    } = lifecycle::resume(&trust, workspace, &db, &run, &changes, None)?;
    if !grants_changed.is_empty() {
        loopbox::errln!(
            "warning: continuing run {id} under changed grants ({}) (--accept-config-change)",
            grants_changed.join(", ")
        );
    }
    if policy_changed {
        loopbox::errln!(
            "warning: continuing run {id} with a changed policy (--allow-policy-change)"
        );
    }
    Ok(Loaded {
        db,
        run,
        policy,
        prepared,
    })
}

/// A run that ended, or a hook session, is not continued here.
fn refuse_ended(id: &str, run: &RunRecord) -> Result<(), Failure> {
    if run.status.is_final() {
        return Err(Failure {
            code: exit::FAILURE,
            error: anyhow::anyhow!(
                "run {id} already ended ({}); there is nothing to continue",
                run.status
            ),
        });
    }
    if run.options.hook {
        return Err(Failure::usage(anyhow::anyhow!(
            "run {id} is an agent hook session: the agent's next hook event moves it on, not `loopbox runs`"
        )));
    }
    Ok(())
}

/// Free space below which a store failure is taken for a full disk.
const NEARLY_FULL: u64 = 1 << 20;

/// A failure to write the store to continue `run`: on a full disk, the run as
/// it stands and what to do; any other failure as it is.
fn no_space(f: Failure, workspace: &Path, run: &RunRecord, again: &Again) -> Failure {
    if f.code != exit::INTERNAL {
        return f;
    }
    let Ok(path) = store_path(workspace) else {
        return f;
    };
    let dir = path.parent().unwrap_or(workspace);
    match loopbox::db::free_bytes(dir) {
        Some(free) if free < NEARLY_FULL => Failure {
            code: exit::INTERNAL,
            error: anyhow::anyhow!(
                "run {} of {} is {} ({} turn(s), {} action(s), last change {} UTC), and cannot go on now: \
                 no space left on device at {}: free some space, then run `{}` again",
                run.id,
                loopbox::ui::one_line(&run.policy),
                run.seen_status(),
                run.turns,
                run.actions,
                loopbox::ui::utc(run.updated_at_ms),
                dir.display(),
                again.0
            ),
        },
        _ => f,
    }
}

fn drive(
    l: Loaded,
    workspace: &Path,
    json: bool,
    resend_turn: bool,
    next: Next,
    again: &Again,
) -> Result<i32, Failure> {
    let signals = catch_signals()?;
    // On a shared store, a claim (fenced, renewed); else this machine's lease.
    let _held = if super::on_shared_store() {
        Some(super::lease::claim(&l.db, &l.run.id)?)
    } else {
        acquire(&l.db, &l.run.id).map_err(|f| no_space(f, workspace, &l.run, again))?;
        None
    };
    let drive = Drive {
        signals,
        db: l.db,
        run: l.run,
        policy: l.policy,
        json,
        banner: false,
        resend_turn,
    };
    drive.until_it_stops(&l.prepared, next)
}

pub fn resume(args: ResumeArgs, json: bool, workspace: &Path) -> Result<i32, Failure> {
    let again = Again(format!("loopbox runs resume {}", args.id));
    let l = load(
        &args.id,
        workspace,
        args.allow_policy_change,
        args.accept_config_change,
        &again,
    )?;
    let next = resume_point(&l.db, &l.run).map_err(Failure::internal)?;
    drive(l, workspace, json, args.resend_turn, next, &again)
}

/// Continue a run after a decision on its pending approval (`runs approve|deny`):
/// the event it stopped in is delivered again, and the decided action runs (or
/// is declined) where it waited.
pub fn resume_after_decision(
    id: &str,
    workspace: &Path,
    json: bool,
    allow_policy_change: bool,
    accept_config_change: bool,
) -> Result<i32, Failure> {
    let again = Again(format!("loopbox runs resume {id}"));
    let l = load(
        id,
        workspace,
        allow_policy_change,
        accept_config_change,
        &again,
    )?;
    let next = resume_point(&l.db, &l.run).map_err(Failure::internal)?;
    drive(l, workspace, json, false, next, &again)
}

pub fn answer(args: AnswerArgs, json: bool, workspace: &Path) -> Result<i32, Failure> {
    let again = Again(format!("loopbox runs answer {} TEXT", args.id));
    let l = load(
        &args.id,
        workspace,
        args.allow_policy_change,
        args.accept_config_change,
        &again,
    )?;
    match resume_point(&l.db, &l.run).map_err(Failure::internal)? {
        Next::Act {
            decision: Decision::Ask(_),
            ..
        } => drive(
            l,
            workspace,
            json,
            false,
            Next::Deliver(Event::UserInput(args.text)),
            &again,
        ),
        other => Err(not_waiting(&args.id, "an answer", &other)),
    }
}

pub fn tick(args: TickArgs, json: bool, workspace: &Path) -> Result<i32, Failure> {
    let payload = args
        .payload
        .as_deref()
        .map(|p| json_arg("the tick", p))
        .transpose()?;
    // A run a live process sleeps in (its timer): its wake time comes forward,
    // and that process delivers the tick at its next look.
    let seen = read_store(workspace)?;
    let run = seen.existing_run(&args.id).map_err(Failure::lookup)?;
    let sleeper = run.lease.as_ref().filter(|o| o.is_alive());
    if let Some(owner) = sleeper
        && seen.wake_at(&run.id).map_err(Failure::internal)?.is_some()
    {
        refuse_payload(&args.id, payload.is_some())?;
        let db = open_store(workspace)?;
        db.wake_now(&run.id).map_err(Failure::internal)?;
        if json {
            loopbox::outln!(
                "{}",
                serde_json::json!({"run_id": run.id, "woken": true, "driver_pid": owner.pid})
            );
        } else {
            loopbox::outln!(
                "woke run {}: the loopbox process driving it (pid {}) delivers its tick now",
                run.id,
                owner.pid
            );
        }
        return Ok(super::super::exit::OK);
    }
    drop(seen);
    let again = Again(format!("loopbox runs tick {} JSON", args.id));
    let l = load(
        &args.id,
        workspace,
        args.allow_policy_change,
        args.accept_config_change,
        &again,
    )?;
    match resume_point(&l.db, &l.run).map_err(Failure::internal)? {
        Next::Act {
            decision: Decision::Sleep(timer),
            ..
        } => {
            refuse_payload(&args.id, payload.is_some())?;
            drive(
                l,
                workspace,
                json,
                false,
                Next::Deliver(Event::Tick(timer.tick)),
                &again,
            )
        }
        Next::Act {
            decision: Decision::Pass,
            after_turn: false,
            ..
        } => {
            let Some(payload) = payload else {
                return Err(Failure::usage(anyhow::anyhow!(
                    "run {} waits for a tick: give its payload (`loopbox runs tick {} JSON`)",
                    args.id,
                    args.id
                )));
            };
            drive(
                l,
                workspace,
                json,
                false,
                Next::Deliver(Event::Tick(payload)),
                &again,
            )
        }
        other => Err(not_waiting(&args.id, "a tick", &other)),
    }
}

/// A run sleeping on its own timer wakes with the tick its policy named.
fn refuse_payload(id: &str, given: bool) -> Result<(), Failure> {
    if given {
        return Err(Failure::usage(anyhow::anyhow!(
            "run {id} sleeps on its own timer and wakes with the tick its policy named: wake it now with `loopbox runs tick {id}` (no payload)"
        )));
    }
    Ok(())
}

fn not_waiting(id: &str, what: &str, next: &Next) -> Failure {
    let why = match next {
        Next::Act {
            decision: Decision::Ask(_),
            ..
        } => format!("it waits for an answer: `loopbox runs answer {id} TEXT`"),
        Next::Act {
            decision: Decision::Pass,
            after_turn: false,
            ..
        } => format!("it waits for a tick: `loopbox runs tick {id} JSON`"),
        Next::Act {
            decision: Decision::Sleep(t),
            ..
        } => format!(
            "it sleeps until {} UTC: `loopbox runs tick {id}` wakes it now, `loopbox runs resume {id}` goes on at that time",
            loopbox::ui::utc(i64::try_from(t.until_ms).unwrap_or(i64::MAX))
        ),
        Next::Redeliver { .. } => {
            format!("it was interrupted while handling an event: `loopbox runs resume {id}`")
        }
        _ => format!("see `loopbox runs show {id}`"),
    };
    Failure::usage(anyhow::anyhow!("run {id} is not waiting for {what}; {why}"))
}
