//! The host's `bindgen!` over `wit/`: Rust types and traits for the newest
//! `loopbox:policy` contract, which the rest of loopbox speaks (older released
//! versions are adapted to it in [`crate::wasm::contract`]). A `decider`
//! component imports a subset of `loop-policy`'s interfaces and exports the
//! same `policy`, so one set of bindings serves both worlds.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "loop-policy",
    imports: { default: async | trappable },
    exports: { default: async },
    additional_derives: [PartialEq],
});

pub use self::loopbox::policy::actions;
pub use self::loopbox::policy::types::{Decision, Event, Origin, Outcome, Timer, ToolCall, Turn};
pub use exports::loopbox::policy::policy::PolicyInfo;
