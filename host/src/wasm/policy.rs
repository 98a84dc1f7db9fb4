//! A loaded policy: its source, its compiled and pre-linked form, the world it
//! targets. Loading checks everything that can be checked before running:
//! that the file is a component (not a core module), that it exports the
//! `loopbox:policy/policy` interface of a released contract (see
//! [`crate::wasm::contract`]), and that it imports only what loopbox provides.
//! [`Policy::call`] runs one call on a fresh instance in a fresh Store.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, ComponentExportIndex, InstancePre, TypedFunc};
use wasmtime::{Engine, Store, UpdateDeadline};

use crate::bindings::{Decision, Event, PolicyInfo};
use crate::limits::meter::Meter;
use crate::limits::{Limit, LimitExceeded, Limits};
use crate::wasm::builtin;
use crate::wasm::cache::CacheOutcome;
use crate::wasm::contract::{self, Contract, v0_1, v0_3};
use crate::wasm::engine::{EpochTicker, ticks};
use crate::wasm::fault::PolicyFault;
use crate::wasm::instance::InstanceState;

pub use crate::wasm::contract::PACKAGE;
/// The newest contract version, the one `wit/policy.wit` declares.
pub const VERSION: &str = Contract::LATEST.version();

/// Longest stretch a guest runs before yielding to other tasks.
const SLICE: Duration = Duration::from_millis(20);

/// Where a policy comes from: `builtin:NAME` or a path to a `.wasm` component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicySource {
    Builtin(String),
    Path(PathBuf),
}

impl PolicySource {
    pub fn parse(s: &str) -> PolicySource {
        match s.strip_prefix("builtin:") {
            Some(name) => PolicySource::Builtin(name.to_string()),
            None => PolicySource::Path(PathBuf::from(s)),
        }
    }

    /// The file, for a policy loaded from one.
    pub fn path(&self) -> Option<&Path> {
        match self {
            PolicySource::Path(p) => Some(p),
            PolicySource::Builtin(_) => None,
        }
    }

    pub fn read(&self) -> Result<Cow<'static, [u8]>> {
        match self {
            PolicySource::Builtin(name) => {
                builtin::get(name).map(Cow::Borrowed).with_context(|| {
                    format!(
                        "there is no builtin policy `{name}`; builtins are: {}",
                        builtin::names()
                            .iter()
                            .map(|n| format!("builtin:{n}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })
            }
            PolicySource::Path(p) => {
                crate::files::read_capped(p, crate::files::MAX_COMPONENT_BYTES)
                    .map(Cow::Owned)
                    .with_context(|| {
                        format!(
                            "cannot read `{}`: give a path to a .wasm component or builtin:NAME",
                            p.display()
                        )
                    })
            }
        }
    }
}

impl std::fmt::Display for PolicySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PolicySource::Builtin(n) => write!(f, "builtin:{n}"),
            PolicySource::Path(p) => write!(f, "{}", p.display()),
        }
    }
}

/// The world a component targets, told by what it imports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum World {
    /// May run commands, prompt agents and read the workspace.
    LoopPolicy,
    /// State and log only.
    Decider,
}

impl World {
    pub fn name(self) -> &'static str {
        match self {
            World::LoopPolicy => "loop-policy",
            World::Decider => "decider",
        }
    }
}

/// What a component imports and exports, by name.
#[derive(Debug, Clone)]
pub struct Interface {
    pub imports: Vec<String>,
    pub exports: Vec<String>,
}

pub struct Policy {
    pub source: PolicySource,
    pub digest: String,
    pub size: usize,
    pub world: World,
    /// The contract version it was built for.
    pub contract: Contract,
    pub interface: Interface,
    pub cache: CacheOutcome,
    pub wasm: Arc<[u8]>,
    engine: Engine,
    pre: InstancePre<InstanceState>,
    exports: Exports,
    /// The engine's epoch ticker, kept alive while the policy is: without its
    /// ticks the compute-time limit, a stop request and a limit deferred by a
    /// clock read never interrupt the guest, so a caller that drops the
    /// `Runtime` after loading must not silently switch them off.
    _ticker: Arc<EpochTicker>,
}

/// The `policy` export's functions, found and type-checked once at load against
/// the bindings of the component's contract version. The bindings' own
/// `instantiate` would type-check both again for every instance (about 3% of a
/// Rust decision, BENCHMARKS.md).
#[derive(Clone, Copy)]
struct Exports {
    info: ComponentExportIndex,
    handle: ComponentExportIndex,
    contract: Contract,
}

type InfoFn<I> = TypedFunc<(), (I,)>;
type HandleFn<'a, E, D> = TypedFunc<(&'a E,), (Result<D, String>,)>;

impl Exports {
    fn find(pre: &InstancePre<InstanceState>, contract: Contract) -> Result<Exports> {
        Exports::shaped(pre, contract, contract)
    }

    /// The exports of contract `named`, if they have the types of contract `shapes`.
    fn shaped(
        pre: &InstancePre<InstanceState>,
        named: Contract,
        shapes: Contract,
    ) -> Result<Exports> {
        match shapes {
            Contract::V0_4 => Exports::typed::<PolicyInfo, Event, Decision>(pre, named),
            // 0.2.0's and 0.3.0's events and info have the newest's shapes; their
            // decisions lack `sleep` (0.4.0).
            Contract::V0_3 | Contract::V0_2 => {
                Exports::typed::<PolicyInfo, Event, v0_3::Decision>(pre, named)
            }
            Contract::V0_1 => Exports::typed::<v0_1::Info, v0_1::Event, v0_1::Decision>(pre, named),
        }
    }

    /// The oldest released contract, newer than `named`, whose types the
    /// component's `policy` export has under `named`'s name: a build from
    /// loopbox's wit/ while that contract was being made, before it was
    /// released and renamed (see [`mismatch`]).
    fn shaped_like(pre: &InstancePre<InstanceState>, named: Contract) -> Option<Contract> {
        contract::RELEASED
            .into_iter()
            .filter(|c| *c > named)
            .find(|c| Exports::shaped(pre, named, *c).is_ok())
    }

    fn typed<I, E, D>(pre: &InstancePre<InstanceState>, contract: Contract) -> Result<Exports>
    where
        I: wasmtime::component::Lift,
        E: wasmtime::component::Lower,
        D: wasmtime::component::Lift,
    {
        let component = pre.component();
        let name = contract.interface("policy");
        let iface = component
            .get_export_index(None, &name)
            .with_context(|| format!("it does not export `{name}`"))?;
        let ty = pre.instance_type();
        let func = |name: &str| match component.get_export(Some(&iface), name) {
            Some((ComponentItem::ComponentFunc(f), index)) => Ok((f, index)),
            _ => Err(anyhow::anyhow!("it has no function `{name}`")),
        };
        let (f, info) = func("info")?;
        f.typecheck::<(), (I,)>(&ty)
            .map_err(crate::wasm_err)
            .context("`info`")?;
        let (f, handle) = func("handle")?;
        f.typecheck::<(&E,), (Result<D, String>,)>(&ty)
            .map_err(crate::wasm_err)
            .context("`handle`")?;
        Ok(Exports {
            info,
            handle,
            contract,
        })
    }
}

/// One call into a policy.
pub enum Call<'a> {
    Info,
    Handle(&'a Event),
}

/// A call's return value.
pub enum Returned {
    Info(PolicyInfo),
    Decision(Decision),
}

/// The WASI packages linked (with an empty context, see `caps::wasi`). Others,
/// `wasi:http` above all, would be a way out of the sandbox and are not provided.
const WASI_PACKAGES: [&str; 6] = [
    "wasi:io/",
    "wasi:clocks/",
    "wasi:random/",
    "wasi:cli/",
    "wasi:filesystem/",
    "wasi:sockets/",
];

/// The interface names loopbox provides to a component of `contract`, for import checks.
fn provided(name: &str, contract: Contract) -> bool {
    let ours = ["types", "actions", "state", "workspace", "log"]
        .iter()
        .any(|i| name == contract.interface(i))
        // `spend` came with 0.4.0.
        || (contract >= Contract::V0_4 && name == contract.interface("spend"));
    ours || WASI_PACKAGES.iter().any(|p| name.starts_with(p))
}

/// The world and contract version of a component with these imports and
/// exports, or why it is not a policy this loopbox runs.
pub fn classify(interface: &Interface) -> Result<(World, Contract)> {
    let contract = contract::detect(&interface.exports)?;
    let foreign: Vec<&String> = interface
        .imports
        .iter()
        .filter(|i| !provided(i, contract))
        .collect();
    let prefix = format!("{PACKAGE}/");
    if let Some(other) = foreign.iter().find(|i| i.starts_with(&prefix)) {
        bail!(
            "it imports `{other}` but exports the policy of `{contract}`: build it against one version of the contract (this loopbox supports {})",
            contract::supported()
        );
    }
    if !foreign.is_empty() {
        let names = foreign
            .iter()
            .map(|i| format!("`{i}`"))
            .collect::<Vec<_>>()
            .join(", ");
        let hint = if foreign.iter().any(|i| i.starts_with("wasi:http/")) {
            " (a policy reaches the network only through loopbox's actions; with componentize-js, build with `disableFeatures: ['http', 'fetch-event']`, as `loopbox build` does)"
        } else {
            ""
        };
        bail!(
            "it imports {names}, which loopbox does not provide: a policy may import only loopbox:policy's interfaces and basic WASI{hint}"
        );
    }
    let acts = ["actions", "workspace"]
        .iter()
        .any(|i| interface.imports.contains(&contract.interface(i)));
    let world = if acts {
        World::LoopPolicy
    } else {
        World::Decider
    };
    Ok((world, contract))
}

/// Why a component's `policy` export does not match `named`, the contract it
/// names, and what to do. `shaped_like`: the released contract whose types it
/// has under that name, if any. Such a component was built from loopbox's
/// wit/ between two releases, when the contract in the making still carried
/// the last release's name (0.1.0's name with 0.2.0's `origin`, a `turn` of 5
/// fields): no loopbox ever ran it as it is, and rebuilding it is the way on.
/// Any other mismatch is a contract edited by hand.
pub fn mismatch(named: Contract, shaped_like: Option<Contract>) -> String {
    match shaped_like {
        Some(newer) => format!(
            "it names contract `{named}` but its `policy` export has the types of `{newer}`: it was built from loopbox's wit/ while {} was being made, before that contract was released under its own name, so it matches no released contract. \
             Rebuild it against a released contract: `loopbox build` in its project, or its bindings made again from wit/ of this loopbox (`{}`)",
            newer.version(),
            Contract::LATEST
        ),
        None => format!(
            "its `policy` export does not match `{named}`, the contract it names (was it built from an edited copy of loopbox's wit/?)"
        ),
    }
}

/// Refuse what is not a component before compiling it, with an error that says what it is.
pub fn check_component_bytes(bytes: &[u8]) -> Result<()> {
    if wasmparser::Parser::is_component(bytes) {
        return Ok(());
    }
    if wasmparser::Parser::is_core_wasm(bytes) {
        bail!(
            "it is a core WebAssembly module, not a component: build it for the wasm32-wasip2 target (or wrap it with `wasm-tools component new`)"
        );
    }
    bail!("it is not a WebAssembly component (no `\\0asm` header)");
}

impl Policy {
    pub(crate) fn new<'l>(
        source: PolicySource,
        wasm: Arc<[u8]>,
        engine: &Engine,
        component: &Component,
        cache: CacheOutcome,
        linker: impl FnOnce(Contract) -> Result<&'l wasmtime::component::Linker<InstanceState>>,
        ticker: &Arc<EpochTicker>,
    ) -> Result<Policy> {
        let ty = component.component_type();
        let interface = Interface {
            imports: ty.imports(engine).map(|(n, _)| n.to_string()).collect(),
            exports: ty.exports(engine).map(|(n, _)| n.to_string()).collect(),
        };
        let (world, contract) = classify(&interface)?;
        let pre = linker(contract)?
            .instantiate_pre(component)
            .map_err(|e| anyhow::anyhow!("{e}"))
            .context("it cannot be linked")?;
        let exports = Exports::find(&pre, contract)
            .with_context(|| mismatch(contract, Exports::shaped_like(&pre, contract)))?;
        Ok(Policy {
            source,
            digest: blake3::hash(&wasm).to_hex().to_string(),
            size: wasm.len(),
            world,
            contract,
            interface,
            cache,
            wasm,
            engine: engine.clone(),
            pre,
            exports,
            _ticker: ticker.clone(),
        })
    }

    /// Run one call on a fresh instance; returns the result and the instance's state
    /// (its buffered state writes and captured output) for the caller to commit or drop.
    pub async fn call(
        &self,
        data: InstanceState,
        meter: Arc<Meter>,
        limits: &Limits,
        call: Call<'_>,
    ) -> (Result<Returned, PolicyFault>, InstanceState) {
        let mut store = Store::new(&self.engine, data);
        store.limiter(|s| &mut s.limiter);
        if let Err(e) = store.set_fuel(limits.fuel_per_event) {
            return (
                Err(PolicyFault::Instantiate(e.to_string())),
                store.into_data(),
            );
        }
        store.set_hostcall_fuel(limits.hostcall_bytes as usize);
        let budget = meter.cpu_budget();
        let cpu_ms = limits.cpu_ms_per_event;
        let m = meter.clone();
        store.epoch_deadline_callback(move |_| {
            // A limit hit where it could not be raised (a clock read), or a stop request.
            m.check()?;
            // CPU, not wall time: a busy machine's other processes are not the guest's.
            let used = m.guest_cpu();
            if used >= budget {
                return Err(LimitExceeded::new(Limit::CpuTime, cpu_ms).into());
            }
            Ok(UpdateDeadline::Yield(ticks((budget - used).min(SLICE))))
        });
        store.set_epoch_deadline(ticks(budget.min(SLICE)));

        // The epoch callback runs only while the guest runs wasm; the watchdog also
        // covers a guest waiting in the host (a WASI sleep, a pollable that never
        // fires). Whichever ends first drops the other: a call cut short drops its
        // instance, and an action in progress kills its process group.
        // Biased: the call is polled first, so one that finishes without waiting
        // (most do) never arms the watchdog's timer.
        let result = tokio::select! {
            biased;
            r = meter.metered(self.call_in(&mut store, call)) => r.and_then(|r| meter.check_limits().map(|()| r).map_err(Into::into)),
            halt = watchdog(&meter, limits.wall_ms_per_event) => Err(halt),
        };
        let result = match result {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(msg)) => Err(PolicyFault::Error(msg)),
            Err(e) => Err(PolicyFault::from_wasm(&e, limits)),
        };
        // The Store is dropped here whatever happened: nothing of a trapped instance is reused.
        (result, store.into_data())
    }
}

/// Resolves with the error that ends the call: its wall time is used, or a stop was requested.
async fn watchdog(meter: &Meter, wall_ms: u64) -> wasmtime::Error {
    let budget = meter.wall_budget();
    loop {
        let used = meter.guest_time();
        if used >= budget {
            return LimitExceeded::new(Limit::WallTime, wall_ms).into();
        }
        // Host calls pause the guest's clock, so waking finds less used than asked for; check again.
        let nap = (budget - used).max(Duration::from_millis(1));
        tokio::select! {
            reason = meter.stop().wait() => return crate::limits::stop::Stopped(reason).into(),
            () = tokio::time::sleep(nap) => {}
        }
    }
}

impl Policy {
    async fn call_in(
        &self,
        store: &mut Store<InstanceState>,
        call: Call<'_>,
    ) -> wasmtime::Result<Result<Returned, String>> {
        let instance = self.pre.instantiate_async(&mut *store).await?;
        let func = |store: &mut Store<InstanceState>, index| {
            instance
                .get_func(store, index)
                .ok_or_else(|| wasmtime::format_err!("the policy's export is gone"))
        };
        let (info, handle) = (&self.exports.info, &self.exports.handle);
        match (call, self.exports.contract) {
            (Call::Info, Contract::V0_4 | Contract::V0_3 | Contract::V0_2) => {
                // SAFETY: `Exports::find` type-checked this export against this
                // signature, of the contract it holds, for the component `pre` instantiates.
                let f = unsafe { InfoFn::<PolicyInfo>::new_unchecked(func(store, info)?) };
                let (info,) = f.call_async(&mut *store, ()).await?;
                Ok(Ok(Returned::Info(info)))
            }
            (Call::Handle(event), Contract::V0_4) => {
                // SAFETY: as above, for `handle`.
                let f = unsafe { HandleFn::<Event, Decision>::new_unchecked(func(store, handle)?) };
                let (decision,) = f.call_async(&mut *store, (event,)).await?;
                Ok(decision.map(Returned::Decision))
            }
            (Call::Handle(event), Contract::V0_3 | Contract::V0_2) => {
                // SAFETY: as above, with contract 0.3.0's decision type.
                let f = unsafe {
                    HandleFn::<Event, v0_3::Decision>::new_unchecked(func(store, handle)?)
                };
                let (decision,) = f.call_async(&mut *store, (event,)).await?;
                Ok(decision.map(|d| Returned::Decision(d.into())))
            }
            // An older contract: the event adapted down, the answer up.
            (Call::Info, Contract::V0_1) => {
                // SAFETY: as above, with contract 0.1.0's types.
                let f = unsafe { InfoFn::<v0_1::Info>::new_unchecked(func(store, info)?) };
                let (info,) = f.call_async(&mut *store, ()).await?;
                Ok(Ok(Returned::Info(info.into())))
            }
            (Call::Handle(event), Contract::V0_1) => {
                let event = v0_1::Event::from(event);
                // SAFETY: as above, with contract 0.1.0's types.
                let f = unsafe {
                    HandleFn::<v0_1::Event, v0_1::Decision>::new_unchecked(func(store, handle)?)
                };
                let (decision,) = f.call_async(&mut *store, (&event,)).await?;
                Ok(decision.map(|d| Returned::Decision(d.into())))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wasm::runtime::Runtime;

    /// A component exporting `loopbox:policy/policy` with `info` and `handle` of
    /// the given types; their bodies trap, since loading never runs them.
    fn exporting(info: &str, handle: &str) -> Vec<u8> {
        wat::parse_str(format!(
            r#"(component
                (core module $m
                  (memory (export "memory") 1)
                  (func (export "realloc") (param i32 i32 i32 i32) (result i32) unreachable)
                  (func (export "info") (result i32) unreachable)
                  (func (export "handle") (param i32) (result i32) unreachable))
                (core instance $i (instantiate $m))
                (alias core export $i "memory" (core memory $mem))
                (alias core export $i "realloc" (core func $realloc))
                (alias core export $i "info" (core func $info))
                (alias core export $i "handle" (core func $handle))
                (type $pi' (record (field "name" string) (field "version" string) (field "description" string)))
                (export $pi "policy-info" (type $pi'))
                (func $info {info} (canon lift (core func $info) (memory $mem) (realloc $realloc)))
                (func $handle {handle} (canon lift (core func $handle) (memory $mem) (realloc $realloc)))
                (instance $p (export "policy-info" (type $pi)) (export "info" (func $info)) (export "handle" (func $handle)))
                (export "{PACKAGE}/policy@{VERSION}" (instance $p)))"#
        ))
        .unwrap()
    }

    fn load(wasm: &[u8]) -> Result<Policy> {
        let cache = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.wasm");
        std::fs::write(&path, wasm).unwrap();
        Runtime::new(cache.path().to_path_buf())
            .unwrap()
            .load(&PolicySource::Path(path))
    }

    #[test]
    fn imports_of_another_contract_version_are_refused() {
        let interface = Interface {
            imports: vec!["loopbox:policy/actions@0.1.0".into()],
            exports: vec!["loopbox:policy/policy@0.2.0".into()],
        };
        let e = classify(&interface).unwrap_err().to_string();
        assert!(
            e.contains("imports `loopbox:policy/actions@0.1.0` but exports the policy of `loopbox:policy@0.2.0`"),
            "{e}"
        );
        let interface = Interface {
            imports: vec!["loopbox:policy/actions@0.1.0".into()],
            exports: vec!["loopbox:policy/policy@0.1.0".into()],
        };
        assert_eq!(
            classify(&interface).unwrap(),
            (World::LoopPolicy, Contract::V0_1)
        );
    }

    #[test]
    fn exports_of_another_type_are_refused_at_load() {
        let cases = [
            (
                "(result string)",
                "(param \"x\" u32) (result u32)",
                "`info`",
            ),
            ("(result u32)", "(param \"x\" u32) (result u32)", "`info`"),
            ("(result $pi)", "(param \"x\" u32) (result u32)", "`handle`"),
        ];
        for (info, handle, names) in cases {
            let err = format!("{:#}", load(&exporting(info, handle)).err().unwrap());
            assert!(
                err.contains(&format!(
                    "does not match `loopbox:policy@{VERSION}`, the contract it names"
                )),
                "{err}"
            );
            assert!(err.contains(names), "{err}");
        }
        let err = format!(
            "{:#}",
            load(&exporting("(result $pi)", "(param \"x\" u32) (result u32)"))
                .err()
                .unwrap()
        );
        assert!(!err.contains("`info`"), "{err}");
    }
}
