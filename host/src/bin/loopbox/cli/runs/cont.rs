//! `loopbox runs resume|answer|tick ID`: continue a run in this process, from
//! where the store says it stands.

use std::path::{Path, PathBuf};

use clap::Args;

use super::super::drive::{Drive, acquire, catch_signals, config_for, load_policy, policy_source};
use super::super::{Failure, exit, json_arg};
use super::open_store;
use loopbox::config::Config;
use loopbox::db::{Db, RunRecord};
use loopbox::run::driver::{Next, resume_point};
use loopbox::wasm::bindings::{Decision, Event};
use loopbox::wasm::policy::Policy;

#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The run's id (see `loopbox runs`)
    id: String,
    /// Continue even though the policy file changed since the run started
    #[arg(long)]
    allow_policy_change: bool,
    /// Continue under the config as it is now, though its grants changed since the run started
    #[arg(long)]
    accept_config_change: bool,
    /// Send again an agent turn that was in flight when the run stopped
    #[arg(long)]
    resend_turn: bool,
}

#[derive(Debug, Args)]
pub struct AnswerArgs {
    /// The run's id
    id: String,
    /// The answer, delivered to the policy as `user-input`
    text: String,
    /// Continue even though the policy file changed since the run started
    #[arg(long)]
    allow_policy_change: bool,
    /// Continue under the config as it is now, though its grants changed since the run started
    #[arg(long)]
    accept_config_change: bool,
}

#[derive(Debug, Args)]
pub struct TickArgs {
    /// The run's id
    id: String,
    /// The tick's payload: JSON, or @FILE
    #[arg(value_name = "JSON|@FILE")]
    payload: String,
    /// Continue even though the policy file changed since the run started
    #[arg(long)]
    allow_policy_change: bool,
    /// Continue under the config as it is now, though its grants changed since the run started
    #[arg(long)]
    accept_config_change: bool,
}

/// A run that may be continued, with its policy and config loaded.
struct Loaded {
    db: Db,
    run: RunRecord,
    policy: Policy,
    config: Config,
    config_path: Option<PathBuf>,
}

fn load(
    id: &str,
    workspace: &Path,
    allow_policy_change: bool,
    accept_config_change: bool,
) -> Result<Loaded, Failure> {
    let db = open_store(workspace)?;
    db.find_interrupted().map_err(Failure::internal)?;
    let run = db.existing_run(id).map_err(Failure::lookup)?;
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
    let (config, config_path) = config_for(&run.options, workspace)?;
    let now = loopbox::run::pin::pin(&config, workspace);
    let how = "pass --accept-config-change to continue under the config as it is now";
    let changed = loopbox::run::pin::hold(
        &db,
        id,
        run.options.grants.as_ref(),
        &now,
        accept_config_change,
        how,
    )
    .map_err(Failure::internal)?
    .map_err(Failure::usage)?;
    if !changed.is_empty() {
        loopbox::errln!(
            "warning: continuing run {id} under changed grants ({}) (--accept-config-change)",
            changed.join(", ")
        );
    }
    let runtime = super::super::runtime(&config, workspace)?;
    let source = policy_source(&run);
    let policy = load_policy(
        &runtime,
        &config,
        config_path.as_deref(),
        workspace,
        &run.options,
        &source,
    )?;
    if policy.digest != run.policy_digest {
        if !allow_policy_change {
            return Err(Failure::usage(anyhow::anyhow!(
                "the policy `{source}` changed since run {id} started (digest {} then, {} now); replaying its journal with different code can go wrong. \
                 Restore the original policy, or pass --allow-policy-change to continue with this one",
                short(&run.policy_digest),
                short(&policy.digest)
            )));
        }
        loopbox::errln!(
            "warning: continuing run {id} with a changed policy (--allow-policy-change)"
        );
        db.set_policy_digest(id, &policy.digest)
            .map_err(Failure::internal)?;
    }
    Ok(Loaded {
        db,
        run,
        policy,
        config,
        config_path,
    })
}

fn short(digest: &str) -> &str {
    &digest[..digest.len().min(12)]
}

fn drive(
    l: Loaded,
    workspace: &Path,
    json: bool,
    resend_turn: bool,
    next: Next,
) -> Result<i32, Failure> {
    let signals = catch_signals()?;
    acquire(&l.db, &l.run.id)?;
    let drive = Drive {
        signals,
        workspace,
        db: l.db,
        run: l.run,
        policy: l.policy,
        config: l.config,
        config_path: l.config_path,
        json,
        banner: false,
        resend_turn,
    };
    drive.until_it_stops(next)
}

pub fn resume(args: ResumeArgs, json: bool, workspace: &Path) -> Result<i32, Failure> {
    let l = load(
        &args.id,
        workspace,
        args.allow_policy_change,
        args.accept_config_change,
    )?;
    let next = resume_point(&l.db, &l.run).map_err(Failure::internal)?;
    drive(l, workspace, json, args.resend_turn, next)
}

pub fn answer(args: AnswerArgs, json: bool, workspace: &Path) -> Result<i32, Failure> {
    let l = load(
        &args.id,
        workspace,
        args.allow_policy_change,
        args.accept_config_change,
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
        ),
        other => Err(not_waiting(&args.id, "an answer", &other)),
    }
}

pub fn tick(args: TickArgs, json: bool, workspace: &Path) -> Result<i32, Failure> {
    let payload = json_arg("the tick", &args.payload)?;
    let l = load(
        &args.id,
        workspace,
        args.allow_policy_change,
        args.accept_config_change,
    )?;
    match resume_point(&l.db, &l.run).map_err(Failure::internal)? {
        Next::Act {
            decision: Decision::Pass,
            after_turn: false,
            ..
        } => drive(
            l,
            workspace,
            json,
            false,
            Next::Deliver(Event::Tick(payload)),
        ),
        other => Err(not_waiting(&args.id, "a tick", &other)),
    }
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
        Next::Redeliver { .. } => {
            format!("it was interrupted while handling an event: `loopbox runs resume {id}`")
        }
        _ => format!("see `loopbox runs show {id}`"),
    };
    Failure::usage(anyhow::anyhow!("run {id} is not waiting for {what}; {why}"))
}
