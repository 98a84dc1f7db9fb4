//! The data of one instance's Store: WASI's empty context, each capability's
//! host state, and the resource limiter. Built fresh for every event by
//! [`crate::run::RunContext::instance_state`] and dropped with the Store.

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::WasiCtx;

use crate::caps::{
    actions::ActionsHost, log::LogHost, state::StateHost, wasi::CapturedOutput,
    workspace::WorkspaceHost,
};
use crate::limits::{Limit, LimitExceeded, Limits};

pub struct InstanceState {
    pub wasi: WasiCtx,
    pub table: ResourceTable,
    pub limiter: Limiter,
    pub actions: ActionsHost,
    pub state: StateHost,
    pub workspace: WorkspaceHost,
    pub log: LogHost,
    pub stdout: CapturedOutput,
    pub stderr: CapturedOutput,
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
