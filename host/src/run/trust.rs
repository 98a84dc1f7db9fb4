//! Why a run may obey its config: the source of trust every start and resume
//! ([`crate::run::lifecycle`]) takes as a required value, never a closure a
//! caller could leave out or write as "yes". Each variant says where the config
//! comes from and why it is believed; there is no variant that checks nothing.

use std::path::{Path, PathBuf};

use anyhow::anyhow;

use crate::config::{Config, Discovered};
use crate::run::RunExtras;
use crate::run::error::LaunchError;
use crate::trust::{NotTrusted, TrustStore};

/// The source of a run's trust in its config (see the module's doc).
pub enum Trust<'a> {
    /// The user's approvals ([`crate::trust`]): a config file is obeyed only
    /// once the user approved exactly its bytes at its path. Safe because the
    /// approvals live outside every workspace, where no sandboxed command writes.
    UserStore(TrustStore),
    /// As [`Trust::UserStore`], and a config the store refuses is put to a
    /// person (`loopbox run` on a terminal), who may approve it on the spot.
    /// Safe: the store is asked first, and only an approval lets it through.
    UserStoreOrAsk(TrustStore, &'a dyn Approver),
    /// A served tenant's config: the server wrote the file from its store,
    /// where an admin of the tenant put it through the server's checks. Safe
    /// because the run reads that file (never one the run names) and its
    /// config and policy file are checked again against the tenant's bounds
    /// ([`Tenancy::check`]), and a name runs only what the tenant installed.
    TenantConfig(&'a dyn Tenancy),
    /// `loopbox test`'s own fixtures: the scenario's config, given as a value
    /// (no file is read), with limits no higher than the defaults, in a
    /// throwaway workspace whose every host call the scenario answers. Safe
    /// because nothing the scenario grants reaches the machine.
    Scenario(Box<Config>),
}

/// Who may approve a config the user's store refuses (a person at a terminal).
pub trait Approver: Sync {
    /// `refused` is the store's refusal of `found`: Ok only once the approval
    /// is recorded in `store`; else the error to report.
    fn approve(
        &self,
        store: &TrustStore,
        found: &Discovered,
        refused: &NotTrusted,
    ) -> Result<(), LaunchError>;
}

/// A served tenant as its runs see it (implemented by `serve`, which ranks above).
pub trait Tenancy: Sync {
    /// The tenant's config file, as the server keeps it.
    fn config_file(&self) -> anyhow::Result<PathBuf>;
    /// The refusal of a policy name the tenant did not install.
    fn not_installed(&self, name: &str) -> anyhow::Error;
    /// Whether a run may go under `config` (scoped to its policy) with its
    /// policy read from `policy` (None: a builtin).
    fn check(&self, config: &Config, policy: Option<&Path>) -> anyhow::Result<()>;
    /// What each of its runs is given beside its config: credentials, hidden
    /// paths, its home, its network guard, its quota.
    fn extras(&self) -> RunExtras;
}

impl Trust<'_> {
    /// The config file to read instead of the one the launch names: a tenant's.
    pub(super) fn config_file(&self) -> Result<Option<PathBuf>, LaunchError> {
        match self {
            Trust::TenantConfig(t) => t.config_file().map(Some).map_err(LaunchError::internal),
            _ => Ok(None),
        }
    }

    /// The config a scenario gives, for a launch that reads no file.
    pub(super) fn given(&self) -> Option<&Config> {
        match self {
            Trust::Scenario(c) => Some(c.as_ref()),
            _ => None,
        }
    }

    /// Ok when `found` may be obeyed; else the refusal.
    pub(super) fn admit(&self, found: &Discovered) -> Result<(), LaunchError> {
        let (store, approver) = match self {
            Trust::UserStore(s) => (s, None),
            Trust::UserStoreOrAsk(s, a) => (s, Some(*a)),
            // The server wrote the file it reads from the config it vetted.
            Trust::TenantConfig(_) => return Ok(()),
            Trust::Scenario(_) => {
                return Err(LaunchError::internal(anyhow!(
                    "a scenario's trust covers its own config, not a file's (a bug in loopbox)"
                )));
            }
        };
        let Err(e) = store.require_discovered(found) else {
            return Ok(());
        };
        match (approver, e.downcast_ref::<NotTrusted>()) {
            (Some(a), Some(untrusted)) => a.approve(store, found, untrusted),
            _ => Err(LaunchError::usage(e)),
        }
    }

    /// Refuse a name that is no policy of the tenant's (a server runs only those).
    pub(super) fn require_installed(&self, name: &str) -> Result<(), LaunchError> {
        match self {
            Trust::TenantConfig(t) => Err(LaunchError::usage(t.not_installed(name))),
            _ => Ok(()),
        }
    }

    /// The tenant's bounds on the run's config and policy file, and what the
    /// tenant's runs are given; nothing for the other sources.
    pub(super) fn bound(
        &self,
        config: &Config,
        policy: Option<&Path>,
    ) -> Result<RunExtras, LaunchError> {
        match self {
            Trust::TenantConfig(t) => {
                t.check(config, policy).map_err(LaunchError::usage)?;
                Ok(t.extras())
            }
            _ => Ok(RunExtras::default()),
        }
    }
}
