//! loopbox: run loop policies for AI coding agents as sandboxed WebAssembly
//! components.
//!
//! A policy is a component exporting `loopbox:policy/policy` (see `wit/`). The
//! [`runtime::Runtime`] loads it (compiled once, cached on disk), and a
//! [`run::RunContext`] delivers events to fresh instances, each event one
//! transaction in the run's SQLite store, its host calls recorded in a
//! [`journal`] so a crashed run resumes without redoing them. Everything a policy does in the world
//! goes through the capabilities in [`caps`], checked against the user's
//! [`config::Config`]. [`driver`] is the standalone loop behind `loopbox run`.
//!
//! See `docs/architecture.md` for how the pieces fit.

pub mod agent;
pub mod bindings;
pub mod builtin;
pub mod cache;
pub mod caps;
pub mod child_env;
pub mod cli;
pub mod config;
pub mod confirm;
pub mod crashpoint;
pub mod db;
pub mod driver;
pub mod engine;
pub mod fault;
pub mod files;
pub mod grants;
pub mod hook;
pub mod inspect;
pub mod instance;
pub mod journal;
pub mod limits;
pub mod loops;
pub mod meter;
pub mod out;
pub mod pin;
pub mod policy;
pub mod process;
pub mod project;
pub mod record;
pub mod run;
pub mod runlog;
pub mod runtime;
pub mod sandbox;
pub mod spawn;
pub mod stop;
pub mod ui;

/// A wasmtime error as an `anyhow` one (wasmtime 48 has its own error type).
pub fn wasm_err(e: wasmtime::Error) -> anyhow::Error {
    anyhow::Error::from(e)
}

/// A failure of loopbox itself (the store, the file system) while serving a guest's call.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct HostError(pub String);

/// A host failure as a wasmtime error: it stops the guest, and the run stops
/// with it without blaming the policy (see [`fault::PolicyFault::Host`]).
pub fn host_err(e: impl std::fmt::Display) -> wasmtime::Error {
    wasmtime::Error::new(HostError(format!("{e:#}")))
}
