//! Write a [loopbox](https://example.invalid/loopbox) loop policy in Rust as a
//! plain type implementing [`Policy`]; [`policy!`] exports it as the
//! component's `loopbox:policy/policy`.
//!
//! Everything a policy does in the world goes through the host, and the host
//! checks it against the user's grants: a refusal comes back as an
//! [`ActionError`] to handle, never a crash.
//!
//! ```no_run
//! use loopbox_guest::{Decision, Event, Info, Policy, done, exec, log, state};
//!
//! struct GreenTests;
//!
//! impl Policy for GreenTests {
//!     fn info() -> Info {
//!         Info::new("green-tests", "0.1.0", "Re-run the tests until they pass, three tries at most")
//!     }
//!
//!     fn handle(event: Event) -> Result<Decision, String> {
//!         let tries: u32 = state::get("tries")?.unwrap_or(0);
//!         match exec(["cargo", "test"]).timeout_ms(600_000).run() {
//!             Ok(out) if out.exit_code == Some(0) => Ok(done(true, "the tests pass")),
//!             Ok(_) if tries + 1 >= 3 => Ok(done(false, "the tests still fail after 3 tries")),
//!             Ok(out) => {
//!                 state::set("tries", &(tries + 1))?;
//!                 Ok(Decision::Inject(format!("The tests fail:\n{}\nFix them.", out.stdout)))
//!             }
//!             // Not granted, or no agent: say so and stop.
//!             Err(e) => {
//!                 log::warn(&format!("cannot run the tests: {}", e.describe()));
//!                 Ok(Decision::Escalate(format!("cannot run `cargo test`: {}", e.describe())))
//!             }
//!         }
//!     }
//! }
//!
//! loopbox_guest::policy!(GreenTests);
//! ```
//!
//! Build with `cargo build --release --target wasm32-wasip2`. A policy that calls
//! only [`state`] and [`log`] imports nothing else, and loopbox runs it as a
//! `decider`: it needs no grants at all.

// The generated code names this crate by its public path, from inside it too.
extern crate self as loopbox_guest;

/// The contract this SDK targets: it is built against `loopbox:policy@0.4.0`
/// (`wit/released/0.4.0`), which every loopbox since 0.4.0 loads.
pub const CONTRACT_VERSION: &str = "0.4.0";

#[doc(hidden)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../../wit/released/0.4.0",
        world: "loop-policy",
        pub_export_macro: true,
        default_bindings_module: "loopbox_guest::bindings",
        runtime_path: "loopbox_guest::__wit_bindgen::rt",
    });
}

#[doc(hidden)]
pub use wit_bindgen as __wit_bindgen;

pub use bindings::exports::loopbox::policy::policy::PolicyInfo as Info;
pub use bindings::loopbox::policy::actions::{ActionError, Output};

impl ActionError {
    /// One line for a log or an escalation: `denied: <why, and the key that would allow it>`.
    pub fn describe(&self) -> String {
        match self {
            ActionError::Denied(m) => format!("denied: {m}"),
            ActionError::Declined(m) => format!("declined: {m}"),
            ActionError::BudgetExhausted(m) => format!("budget exhausted: {m}"),
            ActionError::Invalid(m) => format!("invalid: {m}"),
            ActionError::Unavailable(m) => format!("unavailable: {m}"),
            ActionError::OutcomeUnknown => "outcome unknown: the run was interrupted while this action ran, so it may or may not have happened".into(),
        }
    }
}
pub use bindings::loopbox::policy::actions::{McpResult, McpStatus};
pub use bindings::loopbox::policy::types::{
    Decision, Event, Origin, Outcome, Timer, ToolCall, Turn,
};

use bindings::loopbox::policy::actions::{
    self as host_actions, Command, PromptKind, PromptRequest, Script, ShellRequest,
};

/// A loop policy: describe yourself, then decide after each event.
pub trait Policy {
    fn info() -> Info;
    /// The decision after `event`; an `Err` is a policy failure the host records.
    fn handle(event: Event) -> Result<Decision, String>;
}

impl Info {
    pub fn new(name: &str, version: &str, description: &str) -> Info {
        Info {
            name: name.into(),
            version: version.into(),
            description: description.into(),
        }
    }
}

/// Export `$t` (the name of a type implementing [`Policy`]) as the component's policy.
#[macro_export]
macro_rules! policy {
    ($t:ident) => {
        const _: () = {
            impl $crate::bindings::exports::loopbox::policy::policy::Guest for $t {
                fn info() -> $crate::Info {
                    <$t as $crate::Policy>::info()
                }
                fn handle(
                    event: $crate::Event,
                ) -> ::core::result::Result<$crate::Decision, ::std::string::String> {
                    <$t as $crate::Policy>::handle(event)
                }
            }
    $crate::bindings::export!($t with_types_in $crate::bindings);
        };
    };
}

/// Finish the run with an outcome.
pub fn done(success: bool, summary: impl Into<String>) -> Decision {
    Decision::Done(Outcome {
        success,
        summary: summary.into(),
        data: None,
    })
}

/// Park the run until `until_ms` (milliseconds since the Unix epoch), then
/// have it woken with `tick(payload)`; `reason` is shown to the person.
pub fn sleep_until<T: serde::Serialize>(
    until_ms: u64,
    payload: &T,
    reason: impl Into<String>,
) -> Result<Decision, String> {
    let tick =
        serde_json::to_string(payload).map_err(|e| format!("the tick does not serialize: {e}"))?;
    Ok(Decision::Sleep(Timer {
        until_ms,
        tick,
        reason: reason.into(),
    }))
}

/// Finish the run with an outcome carrying structured data for scripts.
pub fn done_with<T: serde::Serialize>(
    success: bool,
    summary: impl Into<String>,
    data: &T,
) -> Result<Decision, String> {
    let data =
        serde_json::to_string(data).map_err(|e| format!("outcome data does not serialize: {e}"))?;
    Ok(Decision::Done(Outcome {
        success,
        summary: summary.into(),
        data: Some(data),
    }))
}

/// The run's durable state, as typed JSON values.
pub mod state {
    use super::bindings::loopbox::policy::state as host;

    /// The value under `key`, if any.
    pub fn get<T: serde::de::DeserializeOwned>(key: &str) -> Result<Option<T>, String> {
        match host::get(key) {
            Some(json) => serde_json::from_str(&json)
                .map(Some)
                .map_err(|e| format!("state `{key}` is not the expected shape: {e}")),
            None => Ok(None),
        }
    }

    /// Store `value` under `key`; fails (with the limit's name) when it is too large.
    pub fn set<T: serde::Serialize + ?Sized>(key: &str, value: &T) -> Result<(), String> {
        let json = serde_json::to_string(value)
            .map_err(|e| format!("state `{key}` does not serialize: {e}"))?;
        host::set(key, &json)
    }

    pub fn remove(key: &str) {
        host::remove(key)
    }

    /// Keys starting with `prefix`, sorted.
    pub fn keys(prefix: &str) -> Vec<String> {
        host::keys(prefix)
    }
}

/// Messages for the run log, and the run's status line.
pub mod log {
    use super::bindings::loopbox::policy::log::{Level, write};

    /// The one-line status the user sees while the run goes; not logged.
    pub fn progress(message: &str) {
        super::bindings::loopbox::policy::log::progress(message)
    }

    pub fn debug(message: &str) {
        write(Level::Debug, message)
    }
    pub fn info(message: &str) {
        write(Level::Info, message)
    }
    pub fn warn(message: &str) {
        write(Level::Warn, message)
    }
    pub fn error(message: &str) {
        write(Level::Error, message)
    }
}

/// Read-only access to the workspace's files.
pub mod workspace {
    use super::bindings::loopbox::policy::workspace as host;

    pub fn read(path: &str) -> Result<String, String> {
        host::read(path)
    }

    /// Names in `dir` (`""` for the root), sorted; directories end in `/`.
    pub fn list_dir(dir: &str) -> Result<Vec<String>, String> {
        host::list_dir(dir)
    }
}

/// A command to run, built up then [`Exec::run`]: `exec(["cargo", "test"]).run()`.
#[derive(Debug, Clone)]
pub struct Exec(Command);

/// A program with its arguments, executed directly: no shell reads them, so
/// nothing in an argument is expanded or split. For shell text, see [`script`].
pub fn exec<I, S>(argv: I) -> Exec
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    Exec(Command {
        argv: argv.into_iter().map(Into::into).collect(),
        cwd: None,
        env: Vec::new(),
        stdin: None,
        timeout_ms: None,
    })
}

impl Exec {
    /// Run in this directory, relative to the workspace root.
    pub fn cwd(mut self, dir: &str) -> Exec {
        self.0.cwd = Some(dir.into());
        self
    }
    /// Set a variable (the user must list its name in `shell.pass_env_from_policy`).
    pub fn env(mut self, name: &str, value: &str) -> Exec {
        self.0.env.push((name.into(), value.into()));
        self
    }
    pub fn stdin(mut self, text: &str) -> Exec {
        self.0.stdin = Some(text.into());
        self
    }
    pub fn timeout_ms(mut self, ms: u64) -> Exec {
        self.0.timeout_ms = Some(ms);
        self
    }
    pub fn run(self) -> Result<Output, ActionError> {
        host_actions::shell(&ShellRequest::Exec(self.0))
    }
}

/// Shell text run with `sh -c`; needs the user's `shell.scripts` grant.
pub fn script(source: &str, timeout_ms: Option<u64>) -> Result<Output, ActionError> {
    host_actions::shell(&ShellRequest::Script(Script {
        source: source.into(),
        cwd: None,
        timeout_ms,
    }))
}

/// A message to the configured agent, built up then [`Prompt::send`].
#[derive(Debug, Clone)]
pub struct Prompt(PromptRequest);

pub fn prompt(text: &str) -> Prompt {
    Prompt(PromptRequest {
        text: text.into(),
        kind: PromptKind::Prompt,
        model: None,
        session: None,
        timeout_ms: None,
        profile: None,
        cwd: None,
    })
}

/// A slash command (`/review`) for the agent.
pub fn slash_command(text: &str) -> Prompt {
    Prompt(PromptRequest {
        kind: PromptKind::SlashCommand,
        ..prompt(text).0
    })
}

impl Prompt {
    pub fn model(mut self, model: &str) -> Prompt {
        self.0.model = Some(model.into());
        self
    }
    /// Continue this agent conversation (an earlier [`Output::session`]).
    pub fn session(mut self, session: &str) -> Prompt {
        self.0.session = Some(session.into());
        self
    }
    pub fn timeout_ms(mut self, ms: u64) -> Prompt {
        self.0.timeout_ms = Some(ms);
        self
    }
    /// Send it to the user's `[agents.NAME]` profile instead of `[agent]`; a
    /// name the user did not define is refused (`denied`).
    pub fn profile(mut self, name: &str) -> Prompt {
        self.0.profile = Some(name.into());
        self
    }
    /// Run the agent in this directory, relative to the workspace root.
    pub fn cwd(mut self, dir: &str) -> Prompt {
        self.0.cwd = Some(dir.into());
        self
    }
    pub fn send(self) -> Result<Output, ActionError> {
        host_actions::prompt(&self.0)
    }
}

/// Check out `branch` in a new git worktree the host makes (the user's
/// `[worktree]` grant); its path, relative to the workspace, is for
/// [`Exec::cwd`] and [`Prompt::cwd`].
pub fn worktree_add(branch: &str) -> Result<String, ActionError> {
    host_actions::worktree_add(branch)
}

/// Remove a worktree [`worktree_add`] or [`worktree_at`] made in this run.
pub fn worktree_remove(path: &str) -> Result<(), ActionError> {
    host_actions::worktree_remove(path)
}

/// Check out `revision` in a new detached git worktree the host makes (the
/// user's `[worktree]` grant), with the workspace files `copy` names copied in
/// at the same paths; its path, relative to the workspace. Remove it with
/// [`worktree_remove`].
pub fn worktree_at(revision: &str, copy: &[String]) -> Result<String, ActionError> {
    host_actions::worktree_at(revision, copy)
}

/// Call `tool` of the MCP server the user's loopbox.toml names `server`
/// (`[mcp.servers.NAME]`), with `arguments` (a JSON object).
pub fn mcp_call<T: serde::Serialize>(
    server: &str,
    tool: &str,
    arguments: &T,
    timeout_ms: Option<u64>,
) -> Result<McpResult, ActionError> {
    let arguments = serde_json::to_string(arguments)
        .map_err(|e| ActionError::Invalid(format!("the arguments do not serialize: {e}")))?;
    host_actions::mcp_call(&host_actions::McpRequest {
        server: server.into(),
        tool: tool.into(),
        arguments,
        timeout_ms,
    })
}

/// Copies of workspace files the host keeps outside the workspace (the user's
/// `workspace.restore` grant), to put back with [`Snapshot::restore`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot(pub String);

impl Snapshot {
    /// Keep copies of `paths` (a missing one, or one that is not a regular file, as absent).
    pub fn take(paths: &[String]) -> Result<Snapshot, ActionError> {
        host_actions::snapshot(paths).map(Snapshot)
    }

    /// Put `paths` back as they were taken; the paths written.
    pub fn restore(&self, paths: &[String]) -> Result<Vec<String>, ActionError> {
        host_actions::restore(&self.0, paths)
    }

    /// Let the host forget the copies.
    pub fn forget(self) {
        host_actions::forget_snapshot(&self.0)
    }
}
