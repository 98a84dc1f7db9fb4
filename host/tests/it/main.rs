//! The `loopbox` crate's integration tests, one binary (each links wasmtime once):
//! the CLI as a user runs it, a module per area.

mod common;

mod approvals;
mod bounds;
mod cli;
mod conformance;
mod durability;
mod egress;
mod egress_clients;
mod fsm;
mod hook;
mod installed;
mod layout;
mod registry;
mod serve;
mod spend;
mod telemetry;
mod trust;
