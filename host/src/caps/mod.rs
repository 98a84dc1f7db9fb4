//! The capabilities a policy can import, one module each. Every module owns its
//! host implementation (the per-instance struct implementing the bindgen
//! `Host` trait) and its `add_to_linker`, generic over the store's data (as
//! wasmtime-wasi's are), so a capability knows nothing of the instance that
//! holds it: [`crate::wasm::instance`] puts them together and links them.
//!
//! As Spin's factors do, a capability also owns its config section and its
//! per-run state: `[workspace]` is [`workspace::WorkspaceConfig`], and the
//! actions capability's per-run grants ([`actions::ActionGrants::new`]) are
//! built from `[shell]` and `[agent]` (which live in [`crate::exec::config`],
//! beside the rules, sandbox and agent runner that read them) and the
//! [`RunFacts`] every capability shares. [`crate::run::RunContext::with_access`]
//! only gathers those facts and calls each constructor. Nothing is granted
//! unless the user's config says so.

pub mod actions;
pub mod beneath;
pub mod log;
pub mod mcp;
pub mod snapshot;
pub mod spend;
pub mod state;
pub mod wasi;
pub mod workspace;
pub mod worktree;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::db::Db;
use crate::exec::child_env::HostEnv;
use crate::exec::sandbox::Support;
use crate::limits::Limits;
use crate::limits::quota::Quota;

/// What a capability's per-run state is built from besides its own section:
/// the run's facts, the same for every capability.
pub struct RunFacts<'a> {
    /// The run's id.
    pub run: &'a str,
    /// The workspace, canonical.
    pub root: &'a Path,
    /// Files of loopbox's own the sandbox keeps read-only besides the protected
    /// names: the config in use, the lock beside it, the policy file.
    pub own_files: &'a [PathBuf],
    /// What the machine supports; probed on first use when None.
    pub support: Option<Support>,
    /// The run's store.
    pub db: &'a Db,
    /// `[limits]`, shared by every capability.
    pub limits: &'a Limits,
    /// Where `pass_env` finds its values (a server tenant's, or loopbox's own).
    pub host_env: &'a HostEnv,
    /// Paths commands and the agent never see, besides the ones the config
    /// hides (on a server: the other tenants' roots, the server's data).
    pub hidden: &'a [PathBuf],
    /// The run's own home (a server tenant's): the agent's `HOME` and where its
    /// state lives, and where `~/` leads in its config. None: loopbox's `$HOME`.
    pub home: Option<&'a Path>,
    /// A budget shared with other runs (a server tenant's quotas), if any.
    pub quota: Option<&'a Arc<dyn Quota>>,
    /// The run log, where the network proxy writes each connection.
    pub log: &'a crate::runlog::RunLog,
    /// On a server: addresses the proxy never connects to (its own listen
    /// address, its store's), the private ones its operator opened to the
    /// tenant, and the operator's ceilings. None on the CLI.
    pub guard: Option<&'a crate::exec::egress::guard::Guard>,
}
