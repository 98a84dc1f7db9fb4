//! How a run is started: [`start`], which every front end (`loopbox run`,
//! the agent hooks, `serve`, `loopbox test`) puts a new run together through.
//!
//! It takes the source of trust as a required value ([`Trust`]) and owns the
//! steps that hold a run to what it is granted: the config read and judged by
//! that trust, a tenant's bounds and per-run resources, the policy resolved
//! (an installed one's signer recorded, its bytes admitted when it loads),
//! `--max-turns` and the command-line rules, and the grants pinned for the
//! run's life. What comes back is a [`Prepared`] run, the only way to its
//! context and its drive. `loopbox inspect` asks a policy about itself in a
//! [`throwaway`] run that grants nothing.

use std::path::Path;
use std::sync::Arc;

use crate::config::Config;
use crate::db::Db;
use crate::run::RunContext;
use crate::run::launch::{Launch, LaunchError, Prepared};
use crate::run::trust::Trust;
use crate::ui::Ui;
use crate::wasm::policy::Policy;

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

#[cfg(test)]
mod tests;
