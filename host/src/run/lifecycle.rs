//! A run's two verbs, [`start`] and [`resume`]: every front end (`loopbox run`,
//! `loopbox runs resume|answer|tick|approve`, the agent hooks, `serve` and its
//! workers, `loopbox test`) puts a run together through these alone.
//!
//! Each takes the source of trust as a required value ([`Trust`]) and owns the
//! steps that hold a run to what it was granted: the config read and judged by
//! that trust, a tenant's bounds and per-run resources, the policy resolved
//! (an installed one's signer recorded, its bytes admitted when it loads),
//! `--max-turns` and the command-line rules, the grants pinned at start, and at
//! every resume the grants held to that pin and the policy's digest compared.
//! What comes back is a [`Prepared`] run, the only way to its context and its
//! drive. A hook session, which starts again from its command line at each
//! event, goes on with [`resume_with`]; `loopbox inspect` asks a policy about
//! itself in a [`throwaway`] run that grants nothing.

use std::path::Path;
use std::sync::Arc;

use anyhow::anyhow;
use serde_json::Value;

use crate::config::Config;
use crate::db::{Db, RunRecord};
use crate::run::RunContext;
use crate::run::launch::{Launch, LaunchError, Prepared};
use crate::run::trust::Trust;
use crate::ui::Ui;
use crate::wasm::policy::{Policy, PolicySource};
use crate::wasm::runtime::Runtime;

/// What a front end lets a continued run accept, and how its user asks for it
/// (quoted in the refusal, which is a [`crate::run::launch::Failed::Changed`]).
pub struct Changes<'a> {
    /// Go on under grants that changed since the run started (`--accept-config-change`).
    pub accept_config: bool,
    /// How the user accepts changed grants: "pass --accept-config-change to …".
    pub how_to_accept_config: &'a str,
    /// Go on with a policy whose digest changed (`--allow-policy-change`).
    pub allow_policy: bool,
    /// How the user goes on with a changed policy.
    pub how_to_allow_policy: &'a str,
}

/// A run put together to continue, its policy loaded.
pub struct Resumed<'a> {
    pub prepared: Prepared<'a>,
    pub policy: Policy,
    /// The keys of the grants that changed, accepted ([`Changes::accept_config`]).
    pub grants_changed: Vec<String>,
    /// The policy changed, and that was allowed ([`Changes::allow_policy`]).
    pub policy_changed: bool,
}

/// Put a new run together: its config obeyed only as `trust` allows, its
/// grants pinned for its life (in `options.grants`, which the caller records
/// with the run). Nothing is loaded or written yet: the caller checks its input
/// against the config first, then loads the policy ([`Prepared::load`]).
pub fn start<'a>(trust: &Trust<'_>, launch: Launch<'a>) -> Result<Prepared<'a>, LaunchError> {
    let mut prepared = launch.prepare(trust)?;
    // A scenario's run is never continued: there is nothing to hold it to.
    if !matches!(trust, Trust::Scenario(_)) {
        prepared.options.grants = Some(prepared.pin());
    }
    Ok(prepared)
}

/// Put stored `run` together again to continue it: the config its options
/// name, obeyed only as `trust` allows; the grants held to those it started
/// with, the policy loaded (on `runtime`, else the workspace's) and its digest
/// compared with the one it started with; a change is refused unless
/// `changes` accepts it, and an accepted one is recorded. A hook session is
/// moved on by its agent's events, never here.
pub fn resume<'a>(
    trust: &Trust<'_>,
    workspace: &'a Path,
    db: &Db,
    run: &RunRecord,
    changes: &Changes<'_>,
    runtime: Option<&Runtime>,
) -> Result<Resumed<'a>, LaunchError> {
    if run.options.hook {
        return Err(LaunchError::usage(anyhow!(
            "run {} is an agent hook session: the agent's next hook event moves it on, not `loopbox runs`",
            run.id
        )));
    }
    let prepared = Launch::resume(workspace, run).prepare(trust)?;
    // The grants first: a run refused for them compiles nothing.
    let grants_changed = hold_grants(db, run, &prepared.pin(), changes)?;
    let policy = match runtime {
        Some(r) => prepared.load_with(r)?,
        None => prepared.load()?,
    };
    let policy_changed = hold_policy(db, run, &prepared.source, &policy.digest, changes)?;
    Ok(Resumed {
        prepared,
        policy,
        grants_changed,
        policy_changed,
    })
}

/// Continue `run` with a run [`start`]ed and loaded again (a hook session's
/// next event): its policy and its grants must be those `run` started with.
/// The policy is compared first: a new one needs a new session.
pub fn resume_with(
    started: &Prepared<'_>,
    policy: &Policy,
    db: &Db,
    run: &RunRecord,
    changes: &Changes<'_>,
) -> Result<Vec<String>, LaunchError> {
    hold_policy(db, run, &policy.source, &policy.digest, changes)?;
    let now = started
        .options
        .grants
        .clone()
        .ok_or_else(|| LaunchError::internal(anyhow!("the run's grants were not pinned")))?;
    hold_grants(db, run, &now, changes)
}

/// Hold `run` to the grants it started with ([`crate::run::pin::hold`]).
fn hold_grants(
    db: &Db,
    run: &RunRecord,
    now: &Value,
    changes: &Changes<'_>,
) -> Result<Vec<String>, LaunchError> {
    crate::run::pin::hold(
        db,
        &run.id,
        run.options.grants.as_ref(),
        now,
        changes.accept_config,
        changes.how_to_accept_config,
    )
    .map_err(LaunchError::internal)?
    .map_err(LaunchError::changed)
}

/// Hold `run` to the policy it started with: a journal replayed by other code
/// can go wrong. Whether the policy changed (and that was allowed, and recorded).
fn hold_policy(
    db: &Db,
    run: &RunRecord,
    source: &PolicySource,
    digest: &str,
    changes: &Changes<'_>,
) -> Result<bool, LaunchError> {
    if digest == run.policy_digest {
        return Ok(false);
    }
    if !changes.allow_policy {
        return Err(LaunchError::changed(anyhow!(
            "the policy `{source}` changed since run {} started (digest {} then, {} now); replaying its journal with different code can go wrong. \
             Restore the original policy, or {}",
            run.id,
            short(&run.policy_digest),
            short(digest),
            changes.how_to_allow_policy
        )));
    }
    db.set_policy_digest(&run.id, digest)
        .map_err(LaunchError::internal)?;
    Ok(true)
}

/// A throwaway run that grants nothing, for asking `policy` to describe itself
/// (`loopbox inspect`): an in-memory store, no section of the config but its
/// `limits`, which only bound the guest. No trust is needed: nothing is obeyed.
pub fn throwaway(
    policy: &Policy,
    limits: &crate::limits::Limits,
    workspace: &Path,
) -> Result<RunContext, LaunchError> {
    let id = "inspect";
    let db = Db::open(Path::new(":memory:")).map_err(LaunchError::internal)?;
    db.create_run(id, &policy.source.to_string(), &policy.digest, "{}")
        .map_err(LaunchError::internal)?;
    let nothing = Config {
        limits: limits.clone(),
        ..Config::default()
    };
    RunContext::new(id.into(), Arc::new(nothing), db, workspace, Ui::quiet())
        .map_err(LaunchError::usage)
}

fn short(digest: &str) -> &str {
    &digest[..digest.len().min(12)]
}

#[cfg(test)]
mod tests;
