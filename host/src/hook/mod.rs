//! loopbox as a hook inside an agent: the same Wasm policy that runs
//! standalone answers the agent's hook events. One module per agent protocol.

pub mod claude_code;
pub mod session;
pub mod settings;
pub mod transcript;
