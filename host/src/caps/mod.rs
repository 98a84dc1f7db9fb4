//! The capabilities a policy can import, one module each. Every module owns its
//! host implementation (the per-instance struct implementing the bindgen
//! `Host` trait) and its `add_to_linker`; per-run context comes from
//! [`crate::run::RunContext`]. Nothing is granted unless the user's config says so.

pub mod actions;
pub mod log;
pub mod state;
pub mod wasi;
pub mod workspace;

use anyhow::Result;
use wasmtime::component::{HasSelf, Linker};

use crate::bindings::loopbox::policy::types;
use crate::instance::InstanceState;

/// Every capability, linked once per engine.
pub fn add_to_linker(linker: &mut Linker<InstanceState>) -> Result<()> {
    types::add_to_linker::<InstanceState, HasSelf<InstanceState>>(linker, |s| s)
        .map_err(crate::wasm_err)?;
    actions::add_to_linker(linker)?;
    state::add_to_linker(linker)?;
    workspace::add_to_linker(linker)?;
    log::add_to_linker(linker)?;
    wasi::add_to_linker(linker)?;
    Ok(())
}

impl types::Host for InstanceState {}
