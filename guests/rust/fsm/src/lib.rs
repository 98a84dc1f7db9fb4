//! little-loops FSM loops for loopbox. A loop is YAML; this crate reads it
//! (with every problem named by file and line), checks it, and runs it
//! against a [`machine::World`]. Built for `wasm32-wasip2` it is the
//! `builtin:fsm` policy, whose world is the host: every action it takes goes
//! through the user's grants. The host links it natively for `loopbox validate`.

pub mod check;
pub mod eval;
pub mod idle;
pub mod interp;
pub mod learning;
pub mod load;
pub mod machine;
pub mod markers;
pub mod mcp;
pub mod prepatch;
pub mod problem;
pub mod pyjson;
pub mod pyre;
pub mod resolve;
pub mod route;
pub mod spec;
pub mod start;
pub mod tamper;
pub mod yaml;

#[cfg(target_arch = "wasm32")]
mod guest;

pub use load::{Files, load};
pub use problem::{Problem, render};
