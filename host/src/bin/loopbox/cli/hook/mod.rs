//! `loopbox hook claude-code|codex|gemini`: answer one hook event of that
//! agent; and `loopbox hook install|uninstall AGENT`: manage the hook entry in
//! the agent's settings.
//!
//! A failure of loopbox itself (bad input, a missing policy, a trapping or
//! hanging guest, a panic) is answered by `--on-error`: a gate (a tool call, a
//! permission request) refuses in the protocol's blocking form, any other
//! event lets the agent go on. Either way one line goes to stderr and the
//! details to `.loopbox/hook.log`. loopbox answers before the agent's own
//! timeout would kill it, because a killed hook is a non-blocking error to
//! every agent: a gate that is too slow would otherwise fail open.
//!
//! This file is the command line and its dispatch; `answer` answers an event
//! (reading stdin, the launcher, the failure answer), `deadline` keeps it within
//! the agent's timeout, `install` edits the settings files, `command` writes the
//! hook command they hold.

mod answer;
mod codex_trust;
mod command;
mod deadline;
mod install;

use std::io::Read;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand, ValueEnum};

use super::Failure;
use loopbox::hook::agents::Agent;
use loopbox::hook::input::{MAX_INPUT_BYTES, event_named_in};
use loopbox::hook::render::{OnError, fail};

#[derive(Debug, Args)]
pub struct HookArgs {
    #[command(subcommand)]
    command: HookCommand,
}

#[derive(Debug, Subcommand)]
enum HookCommand {
    /// Answer one Claude Code hook event: reads its JSON on stdin, prints the answer on stdout
    ClaudeCode(AnswerArgs),
    /// Answer one Codex hook event: reads its JSON on stdin, prints the answer on stdout
    Codex(AnswerArgs),
    /// Answer one Gemini CLI hook event: reads its JSON on stdin, prints the answer on stdout
    Gemini(AnswerArgs),
    /// Add a loopbox hook to an agent's settings
    Install {
        #[command(subcommand)]
        agent: AgentEntry,
    },
    /// Remove exactly the hook `install` added
    Uninstall {
        #[command(subcommand)]
        agent: AgentEntry,
    },
}

#[derive(Debug, Subcommand)]
enum AgentEntry {
    /// Claude Code: .claude/settings.json (project), .claude/settings.local.json (local), ~/.claude/settings.json (user)
    ClaudeCode(EntryArgs),
    /// Codex: .codex/hooks.json (project), ~/.codex/hooks.json (user)
    Codex(EntryArgs),
    /// Gemini CLI: .gemini/settings.json (project), ~/.gemini/settings.json (user)
    Gemini(EntryArgs),
}

#[derive(Debug, Args)]
struct AnswerArgs {
    /// The policy: the NAME of a [policies.NAME] section (run under its grants), a .wasm component (relative to the workspace), or builtin:NAME
    #[arg(long)]
    policy: String,
    /// Input delivered with `start` the first time a session is seen: JSON or @FILE
    #[arg(long, value_name = "JSON|@FILE", default_value = "{}")]
    input: String,
    /// Config file, relative to the workspace (default: loopbox.toml in the workspace)
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Continue the session's run under the config as it is now, though its grants changed since the run started
    #[arg(long)]
    accept_config_change: bool,
    /// When loopbox cannot answer: refuse (default for tool calls and permission requests) or let the agent go on (default otherwise)
    #[arg(long, value_enum)]
    on_error: Option<OnError>,
    /// Seconds the agent gives this hook (default: the agent's own default); loopbox answers before they run out
    #[arg(long, value_name = "SECS")]
    timeout: Option<u64>,
    /// The event this command was installed for: an input loopbox cannot read is answered as this event (a gate refuses)
    #[arg(long, value_name = "NAME")]
    event: Option<String>,
    /// The workspace this hook was installed for: the only one it answers in (an event from outside it is refused)
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// The blake3 of the policy component `hook install` pinned: any other component is refused
    #[arg(long, value_name = "BLAKE3")]
    digest: Option<String>,
}

/// Which settings file an entry goes into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scope {
    /// The project's shared settings, committed with it
    Project,
    /// This project on this machine only (Claude Code's settings.local.json)
    Local,
    /// Every project of this user
    User,
}

#[derive(Debug, Args)]
struct EntryArgs {
    /// The policy the hook runs: the NAME of a [policies.NAME] section, a path to a .wasm component, or builtin:NAME
    #[arg(long)]
    policy: String,
    /// The hook event (Stop, PreToolUse, PermissionRequest, AfterAgent, BeforeTool, ...; see `loopbox hook install AGENT --help`)
    #[arg(long)]
    event: String,
    /// Which tools (or sources) the entry fires for, e.g. Bash; Gemini CLI's tool names are accepted in Claude Code's form
    #[arg(long)]
    matcher: Option<String>,
    /// Input delivered with `start` for each new session: JSON or @FILE (written into the hook command)
    #[arg(long, value_name = "JSON|@FILE")]
    input: Option<String>,
    /// Config file for the hook to use
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Seconds the agent gives the hook (default: the agent's own, 600 for Claude Code and Codex, 60 for Gemini CLI)
    #[arg(long, value_name = "SECS")]
    timeout: Option<u64>,
    /// What the hook does when loopbox cannot answer (default: block on gates, allow otherwise)
    #[arg(long, value_enum)]
    on_error: Option<OnError>,
    /// Which settings file to edit
    #[arg(long, value_enum, default_value = "project")]
    scope: Scope,
    /// Codex only: also record in Codex's config that you reviewed this hook,
    /// as its /hooks view does (Codex 0.171+ runs a new hook only then; the
    /// hash is asked of the `codex` on PATH)
    #[arg(long)]
    trust: bool,
}

pub fn execute(args: HookArgs, workspace: Option<&Path>) -> Result<i32, Failure> {
    match args.command {
        HookCommand::ClaudeCode(a) => Ok(answer::answer(Agent::ClaudeCode, a, workspace)),
        HookCommand::Codex(a) => Ok(answer::answer(Agent::Codex, a, workspace)),
        HookCommand::Gemini(a) => Ok(answer::answer(Agent::Gemini, a, workspace)),
        HookCommand::Install { agent } => {
            let (agent, e) = agent.split();
            install::edit(agent, e, workspace, true)
        }
        HookCommand::Uninstall { agent } => {
            let (agent, e) = agent.split();
            install::edit(agent, e, workspace, false)
        }
    }
}

impl HookArgs {
    /// Whether this answers a hook event (rather than editing settings).
    pub fn answers(&self) -> bool {
        matches!(
            self.command,
            HookCommand::ClaudeCode(_) | HookCommand::Codex(_) | HookCommand::Gemini(_)
        )
    }
}

/// The agent when `args` is a `loopbox hook AGENT ...` command line that answers an event.
pub fn answering(args: impl Iterator<Item = std::ffi::OsString>) -> Option<Agent> {
    let args: Vec<_> = args.collect();
    let at = args.iter().position(|a| a == "hook")?;
    let name = args.get(at + 1)?.to_str()?;
    Agent::ALL.into_iter().find(|a| a.id() == name)
}

/// Answer the event on stdin when the hook's own command line is wrong: with
/// the failure form for its event, as any other failure.
pub fn answer_broken_command(agent: Agent, clap_error: &str) -> i32 {
    let mut text = String::new();
    let _ = std::io::stdin()
        .take(MAX_INPUT_BYTES as u64)
        .read_to_string(&mut text);
    // The installed command names its event; else the input may.
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let named = args
        .iter()
        .position(|a| a == "--event")
        .and_then(|at| args.get(at + 1).cloned())
        .or_else(|| {
            args.iter()
                .find_map(|a| a.strip_prefix("--event=").map(String::from))
        });
    let spec = agent.event(&named.unwrap_or_else(|| event_named_in(&text)));
    let first = clap_error
        .lines()
        .next()
        .unwrap_or_default()
        .trim_start_matches("error: ");
    answer::emit(&fail(
        agent,
        &spec,
        OnError::default_for(&spec),
        &format!("the hook command is wrong ({first}); fix it in the agent's hook settings"),
    ))
}

impl AgentEntry {
    fn split(self) -> (Agent, EntryArgs) {
        match self {
            AgentEntry::ClaudeCode(e) => (Agent::ClaudeCode, e),
            AgentEntry::Codex(e) => (Agent::Codex, e),
            AgentEntry::Gemini(e) => (Agent::Gemini, e),
        }
    }
}

/// A path from the hook command, relative to the workspace: the agent may run the hook from any directory.
fn in_workspace(workspace: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        workspace.join(path)
    }
}
