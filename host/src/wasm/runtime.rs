//! The runtime: the process's one engine, a linker per contract version
//! (built when a component of that version is first loaded), and the
//! compiled-component cache. [`Runtime::load`] turns a policy source
//! into a ready [`Policy`]. `[engine]` of `loopbox.toml` ([`EngineConfig`])
//! is its section.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use anyhow::{Context, Result};
use wasmtime::Engine;
use wasmtime::component::Linker;

use crate::wasm::cache::ComponentCache;
use crate::wasm::contract::{Contract, RELEASED};
use crate::wasm::engine::{self, EpochTicker};
use crate::wasm::instance::InstanceState;
use crate::wasm::policy::{Policy, PolicySource, check_component_bytes};

pub struct Runtime {
    engine: Engine,
    /// One per released contract, in [`RELEASED`]'s order: a process links
    /// only the versions it loads (a hook, one), not all of them.
    linkers: [OnceLock<Linker<InstanceState>>; RELEASED.len()],
    cache: ComponentCache,
    /// Shared with every policy loaded here, which keeps it ticking.
    ticker: Arc<EpochTicker>,
}

impl Runtime {
    pub fn new(cache_dir: PathBuf) -> Result<Runtime> {
        Runtime::with_pool(cache_dir, engine::DEFAULT_POOL_INSTANCES)
    }

    /// A runtime whose instance pool holds `pool_instances` instances at once.
    pub fn with_pool(cache_dir: PathBuf, pool_instances: u32) -> Result<Runtime> {
        let engine = Engine::new(&engine::config(pool_instances))
            .map_err(crate::wasm_err)
            .context("failed to create the Wasm engine")?;
        let ticker = Arc::new(EpochTicker::start(&engine)?);
        Ok(Runtime {
            engine,
            linkers: Default::default(),
            cache: ComponentCache::new(cache_dir),
            ticker,
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn cache(&self) -> &ComponentCache {
        &self.cache
    }

    /// The linker of `contract`'s capabilities, built on first use.
    fn linker(&self, contract: Contract) -> Result<&Linker<InstanceState>> {
        let slot = RELEASED
            .iter()
            .position(|c| *c == contract)
            .map(|i| &self.linkers[i])
            .context("not a released contract")?;
        if let Some(l) = slot.get() {
            return Ok(l);
        }
        let mut linker = Linker::new(&self.engine);
        crate::wasm::instance::add_to_linker(&mut linker, contract)
            .with_context(|| format!("failed to link loopbox's capabilities for `{contract}`"))?;
        // Two threads may build it at once; either result is the same linker.
        Ok(slot.get_or_init(|| linker))
    }

    /// Read, check, compile (or load from the cache) and pre-link a policy.
    pub fn load(&self, source: &PolicySource) -> Result<Policy> {
        self.load_inner(source, |_| Ok(()))
            .with_context(|| format!("failed to load policy `{source}`"))
    }

    /// [`Runtime::load`], after `admit` accepted the bytes: a refused component
    /// is never compiled.
    pub fn load_admitted(
        &self,
        source: &PolicySource,
        admit: impl FnOnce(&[u8]) -> Result<()>,
    ) -> Result<Policy> {
        self.load_inner(source, admit)
            .with_context(|| format!("failed to load policy `{source}`"))
    }

    fn load_inner(
        &self,
        source: &PolicySource,
        admit: impl FnOnce(&[u8]) -> Result<()>,
    ) -> Result<Policy> {
        let bytes = source.read()?;
        admit(&bytes)?;
        check_component_bytes(&bytes)?;
        let (component, outcome) = self
            .cache
            .load(&self.engine, &bytes)
            .context("it is not a valid component")?;
        let wasm: Arc<[u8]> = Arc::from(bytes.into_owned());
        Policy::new(
            source.clone(),
            wasm,
            &self.engine,
            &component,
            outcome,
            |contract| self.linker(contract),
            &self.ticker,
        )
    }
}

/// `[engine]`: the Wasm engine and its compiled-component cache.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct EngineConfig {
    /// Where compiled components are kept; `$LOOPBOX_CACHE_DIR`, else
    /// `$XDG_CACHE_HOME/loopbox`, else `~/.cache/loopbox` when absent.
    #[serde(default)]
    pub cache_dir: Option<PathBuf>,
    /// Instances that may be alive at once (events in flight); reserved at start-up.
    #[serde(default = "default_pool_instances")]
    pub pool_instances: u32,
}

fn default_pool_instances() -> u32 {
    crate::wasm::engine::DEFAULT_POOL_INSTANCES
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            cache_dir: None,
            pool_instances: default_pool_instances(),
        }
    }
}

impl EngineConfig {
    /// What serde cannot check of `[engine]`.
    pub fn validate(&self) -> Result<()> {
        if !(1..=10_000).contains(&self.pool_instances) {
            anyhow::bail!(
                "engine.pool_instances = {} is out of range: give 1 to 10000",
                self.pool_instances
            );
        }
        Ok(())
    }
}
