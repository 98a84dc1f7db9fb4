//! `loopbox serve`: one process that drives many tenants' runs at once, each
//! exactly as `loopbox run` drives one (the same launcher, sandbox, journal,
//! limits and grants), behind an HTTP API with tokens, roles and an audit log.
//!
//! - [`config`]: `loopbox-server.toml` (`[server]`, `[engine]`, `[tenants.NAME]`).
//! - [`data`]: the data directory (the store, the tenants' configs).

pub mod config;
pub mod data;
