//! A policy installed as `[policies.NAME]`, resolved to the component it runs:
//! a path in the workspace, a builtin, or (from a registry) the stored copy
//! `loopbox.lock` pins. Every way of running one by name (`run`, `runs
//! resume`, `hook --policy`, `inspect`) resolves it here, and admits its bytes
//! with [`crate::dist::admit`] before they compile. It sits above `config`
//! and `wasm`, whose config it scopes and whose runtime loads it.

use std::path::Path;

use anyhow::{Result, bail};

use crate::config::Config;
use crate::dist::admit::{Admitted, PolicyEntry, admit};
use crate::dist::lock::{Lock, Locked, path_for};
use crate::dist::reference::SCHEME;
use crate::dist::store::Store;
use crate::wasm::cache::ComponentCache;
use crate::wasm::policy::{Policy, PolicySource};
use crate::wasm::runtime::Runtime;

pub struct Installed {
    pub name: String,
    pub entry: PolicyEntry,
    /// The component to read.
    pub source: PolicySource,
    /// Its `loopbox.lock` entry, for a registry policy.
    pub locked: Option<Locked>,
}

/// Whether `source` (a `[policies.NAME].source`) names a registry policy.
pub fn is_registry(source: &str) -> bool {
    source.starts_with(SCHEME)
}

/// The component store of a config (under its cache directory).
pub fn store(config: &Config) -> Store {
    Store::new(&ComponentCache::default_dir(
        config.engine.cache_dir.as_deref(),
    ))
}

impl Installed {
    /// `[policies.NAME]` of `config`, or None when it installs no such name.
    pub fn resolve(
        config: &Config,
        config_path: Option<&Path>,
        workspace: &Path,
        name: &str,
    ) -> Result<Option<Installed>> {
        let Some(entry) = config.policies.get(name) else {
            return Ok(None);
        };
        let mut locked = None;
        let source = if is_registry(&entry.source) {
            let lock_path = path_for(config_path, workspace);
            let lock = Lock::read(&lock_path)?;
            let Some(l) = lock.policies.get(name) else {
                bail!(
                    "policy `{name}` comes from {}, but {} does not pin it: `loopbox add {} --name {name}` reviews and pins it",
                    entry.source,
                    lock_path.display(),
                    entry.source
                );
            };
            if l.source != entry.source {
                bail!(
                    "{} pins `{name}` as {}, but the config now says {}: `loopbox add {} --name {name}` reviews the new one",
                    lock_path.display(),
                    l.source,
                    entry.source,
                    entry.source
                );
            }
            let path = store(config).path(&l.component)?;
            if !path.is_file() {
                bail!(
                    "policy `{name}` ({}) is not fetched on this machine yet: `loopbox pull` fetches what loopbox.lock pins",
                    l.source
                );
            }
            locked = Some(l.clone());
            PolicySource::Path(path)
        } else {
            match PolicySource::parse(&entry.source) {
                PolicySource::Path(p) if p.is_relative() => PolicySource::Path(workspace.join(p)),
                other => other,
            }
        };
        Ok(Some(Installed {
            name: name.to_string(),
            entry: entry.clone(),
            source,
            locked,
        }))
    }

    /// Admit `bytes` as this policy's component (digests, then signature).
    pub fn admit(&self, config: &Config, bytes: &[u8]) -> Result<Admitted> {
        admit(
            &self.name,
            &self.entry,
            self.locked.as_ref(),
            &config.trust,
            bytes,
        )
    }

    /// Load its component, admitted by `config`'s trust before it is compiled.
    pub fn load(&self, runtime: &Runtime, config: &Config) -> Result<Policy> {
        runtime.load_admitted(&self.source, |b| self.admit(config, b).map(|_| ()))
    }

    /// How runs and reports name it: its registry reference, else its source.
    pub fn display(&self) -> String {
        match &self.locked {
            Some(l) => format!("{}@{}", l.source, l.manifest),
            None => self.source.to_string(),
        }
    }
}
