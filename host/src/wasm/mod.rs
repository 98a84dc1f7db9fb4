//! The Wasm side: the process's one engine, the compiled-component cache, a
//! loaded policy and the store data of one instance, the limits a guest runs
//! under and how a failed call is told apart (a limit, a trap, the host).

pub mod bindings;
pub(crate) mod builtin;
pub mod cache;
pub mod contract;
pub(crate) mod engine;
pub use engine::pagemap_scan;
pub mod fault;
pub mod inspect;
pub(crate) mod instance;
pub mod limits;
pub mod meter;
pub mod policy;
pub mod runtime;
