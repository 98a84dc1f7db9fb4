//! loopbox: run loop policies for AI coding agents as sandboxed WebAssembly
//! components.
//!
//! A policy is a component exporting `loopbox:policy/policy` (see `wit/`). The
//! [`wasm::runtime::Runtime`] loads it (compiled once, cached on disk), and a
//! [`run::RunContext`] delivers events to fresh instances, each event one
//! transaction in the run's SQLite store, its host calls recorded in a
//! [`journal`] so a crashed run resumes without redoing them. Everything a policy does in the world
//! goes through the capabilities in [`caps`], checked against the user's
//! [`config::Config`]. [`run::driver`] is the standalone loop behind `loopbox run`.
//!
//! See `docs/architecture.md` for how the pieces fit.

pub mod bindings;
pub(crate) mod caps;
pub mod config;
pub mod db;
pub mod dist;
pub mod error;
pub mod exec;
pub mod files;
pub mod hook;
pub mod journal;
pub mod limits;
pub mod loops;
pub mod out;
pub mod project;
pub mod run;
pub(crate) mod runlog;
pub mod scenario;
pub mod serve;
pub mod trust;
pub mod ui;
pub mod wasm;

/// A wasmtime error as an `anyhow` one (wasmtime 48 has its own error type).
pub fn wasm_err(e: wasmtime::Error) -> anyhow::Error {
    anyhow::Error::from(e)
}
