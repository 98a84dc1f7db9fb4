//! The data of one instance's Store: WASI's empty context, each capability's
//! host state, and the resource limiter. Built fresh for every event by
//! [`crate::run::RunContext::instance_state`] and dropped with the Store.
//! [`add_to_linker`] links every capability against it, once per engine and contract.

use anyhow::Result;
use wasmtime::ResourceLimiter;
use wasmtime::component::{HasSelf, Linker, ResourceTable};
use wasmtime_wasi::{WasiCtxView, WasiView};

use crate::bindings::loopbox::policy::types;
use crate::caps::{
    self,
    actions::ActionsHost,
    log::LogHost,
    spend::SpendHost,
    state::StateHost,
    wasi::{CapturedOutput, LazyWasi},
    workspace::WorkspaceHost,
};
use crate::limits::{Limit, LimitExceeded, Limits};
use crate::wasm::contract::Contract;

pub struct InstanceState {
    pub wasi: LazyWasi,
    pub table: ResourceTable,
    pub limiter: Limiter,
    pub actions: ActionsHost,
    pub state: StateHost,
    pub workspace: WorkspaceHost,
    pub log: LogHost,
    pub spend: SpendHost,
    pub stdout: CapturedOutput,
    pub stderr: CapturedOutput,
}

/// WASI and every capability as `contract` names them, linked once per
/// engine and contract (see [`crate::wasm::runtime::Runtime`]): a component
/// imports one contract's interfaces ([`crate::wasm::policy::classify`]
/// refuses a mix), so a process links only the versions it loads.
pub fn add_to_linker(linker: &mut Linker<InstanceState>, contract: Contract) -> Result<()> {
    caps::wasi::add_to_linker(linker)?;
    // Components of older contracts reach the same capabilities.
    let older = crate::wasm::contract::v0_1::Capabilities {
        actions: |s: &mut InstanceState| &mut s.actions,
        state: |s: &mut InstanceState| &mut s.state,
        workspace: |s: &mut InstanceState| &mut s.workspace,
        log: |s: &mut InstanceState| &mut s.log,
    };
    match contract {
        Contract::V0_1 => crate::wasm::contract::v0_1::add_to_linker(linker, older),
        Contract::V0_2 => crate::wasm::contract::v0_2::add_to_linker(linker, older),
        Contract::V0_3 => crate::wasm::contract::v0_3::add_to_linker(linker, older),
        Contract::V0_4 => {
            types::add_to_linker::<InstanceState, HasSelf<InstanceState>>(linker, |s| s)
                .map_err(crate::wasm_err)?;
            caps::actions::add_to_linker(linker, |s| &mut s.actions)?;
            caps::state::add_to_linker(linker, |s| &mut s.state)?;
            caps::workspace::add_to_linker(linker, |s| &mut s.workspace)?;
            caps::log::add_to_linker(linker, |s| &mut s.log)?;
            caps::spend::add_to_linker(linker, |s| &mut s.spend)
        }
    }
}

impl types::Host for InstanceState {}

impl WasiView for InstanceState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: self.wasi.ctx(),
            table: &mut self.table,
        }
    }
}

/// Memory, table and instance limits; growth past them traps with a [`LimitExceeded`].
pub struct Limiter {
    memory_bytes: u64,
    table_elements: u64,
    instances: usize,
    tables: usize,
    memories: usize,
}

impl Limiter {
    pub fn new(l: &Limits) -> Limiter {
        Limiter {
            memory_bytes: l.memory_bytes,
            table_elements: l.table_elements,
            instances: l.max_instances as usize,
            tables: l.max_tables as usize,
            memories: l.max_memories as usize,
        }
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired as u64 > self.memory_bytes {
            return Err(LimitExceeded::new(Limit::Memory, self.memory_bytes)
                .attempted(desired as u64)
                .into());
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired as u64 > self.table_elements {
            return Err(
                LimitExceeded::new(Limit::TableElements, self.table_elements)
                    .attempted(desired as u64)
                    .into(),
            );
        }
        Ok(true)
    }

    fn instances(&self) -> usize {
        self.instances
    }

    fn tables(&self) -> usize {
        self.tables
    }

    fn memories(&self) -> usize {
        self.memories
    }
}
