//! The Wasm side: the process's one engine, the compiled-component cache, a
//! loaded policy and the store data of one instance (every capability linked),
//! and how a failed call is told apart (a limit, a trap, the host). It ranks
//! above the capabilities it links; what they share with it (the contract's
//! bindings, the limits, the meter, the stop request) ranks below them, in
//! [`crate::bindings`] and [`crate::limits`].

pub(crate) mod builtin;
pub mod cache;
pub mod contract;
pub(crate) mod engine;
pub use engine::pagemap_scan;
pub mod fault;
pub mod inspect;
pub(crate) mod instance;
pub mod policy;
pub mod runtime;
