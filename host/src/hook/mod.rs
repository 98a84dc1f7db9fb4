//! loopbox as a hook inside an agent: the same Wasm policy that runs
//! standalone answers Claude Code's, Codex's and Gemini CLI's hook events.
//!
//! `agents` says what each agent's events can carry, `input` reads a hook's
//! JSON into a policy event, `render` turns the decision (or a failure) into
//! the agent's answer, `session` ties the hook processes of one agent session
//! to one run, `settings` edits the agents' hook configuration files.

pub mod agents;
pub mod input;
pub(crate) mod jsonedit;
pub mod render;
pub mod session;
pub mod settings;
pub mod transcript;
pub mod workspace;
