//! The capabilities a policy can import, one module each. Every module owns its
//! host implementation (the per-instance struct implementing the bindgen
//! `Host` trait) and its `add_to_linker`, generic over the store's data (as
//! wasmtime-wasi's are), so a capability knows nothing of the instance that
//! holds it: [`crate::wasm::instance`] puts them together and links them. Per-run
//! context comes from [`crate::run::RunContext`]. Nothing is granted unless the
//! user's config says so.

pub mod actions;
pub mod log;
pub mod state;
pub mod wasi;
pub mod workspace;
