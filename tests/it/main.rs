//! Guests built from source, run through loopbox's runtime: one binary (each
//! links wasmtime once), a module per area.

mod adversarial;
mod agents;
mod capabilities;
mod limits;
mod loading;
mod policies;
mod sandbox;
mod scenarios;
