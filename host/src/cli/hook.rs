//! `loopbox hook claude-code`: answer one Claude Code hook event; and
//! `loopbox hook install|uninstall claude-code`: manage the hook entry in
//! `.claude/settings.json`.
//!
//! Answering a hook never blocks the user's agent by accident: any failure of
//! loopbox itself (bad input, missing policy, a trapping guest) exits 1, which
//! Claude Code treats as a non-blocking error, with one line on stderr and the
//! details appended to `.loopbox/hook.log`.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Subcommand};

use super::{Failure, exit, json_arg};
use crate::config::Config;
use crate::confirm::NoOneToAsk;
use crate::db::STORE_DIR;
use crate::grants::shell_quote;
use crate::hook::claude_code::{HookInput, MAX_INPUT_BYTES};
use crate::hook::session;
use crate::hook::settings::{self, EVENTS, HookEntry};
use crate::policy::PolicySource;
use crate::run::Access;

/// Exit code for a loopbox failure while answering a hook: non-blocking for Claude Code.
pub const HOOK_FAILED: i32 = 1;

#[derive(Debug, Args)]
pub struct HookArgs {
    #[command(subcommand)]
    command: HookCommand,
}

#[derive(Debug, Subcommand)]
enum HookCommand {
    /// Answer one Claude Code hook event: reads its JSON on stdin, prints the answer on stdout
    ClaudeCode(AnswerArgs),
    /// Add a loopbox hook to .claude/settings.json in the workspace
    Install {
        #[command(subcommand)]
        agent: Agent,
    },
    /// Remove exactly the hook `install` added
    Uninstall {
        #[command(subcommand)]
        agent: Agent,
    },
}

#[derive(Debug, Subcommand)]
enum Agent {
    /// Claude Code
    ClaudeCode(EntryArgs),
}

#[derive(Debug, Args)]
struct AnswerArgs {
    /// The policy: a path to a .wasm component, or builtin:NAME
    #[arg(long)]
    policy: String,
    /// Input delivered with `start` the first time a session is seen: JSON or @FILE
    #[arg(long, value_name = "JSON|@FILE", default_value = "{}")]
    input: String,
    /// Config file (default: loopbox.toml in the workspace)
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Continue the session's run under the config as it is now, though its grants changed since the run started
    #[arg(long)]
    accept_config_change: bool,
}

#[derive(Debug, Args)]
struct EntryArgs {
    /// The policy the hook runs: a path to a .wasm component, or builtin:NAME
    #[arg(long)]
    policy: String,
    /// The hook event: Stop, SubagentStop, PreToolUse, PostToolUse, UserPromptSubmit, ...
    #[arg(long)]
    event: String,
    /// Tool name pattern, for PreToolUse and PostToolUse (e.g. Bash)
    #[arg(long)]
    matcher: Option<String>,
    /// Input delivered with `start` for each new session: JSON or @FILE (written into the hook command)
    #[arg(long, value_name = "JSON|@FILE")]
    input: Option<String>,
    /// Config file for the hook to use
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Seconds Claude Code gives the hook
    #[arg(long, default_value_t = 30)]
    timeout: u64,
}

pub fn execute(args: HookArgs, workspace: Option<&Path>) -> Result<i32, Failure> {
    match args.command {
        HookCommand::ClaudeCode(a) => Ok(answer(a, workspace)),
        HookCommand::Install { agent: Agent::ClaudeCode(e) } => edit(e, workspace, true),
        HookCommand::Uninstall { agent: Agent::ClaudeCode(e) } => edit(e, workspace, false),
    }
}

fn answer(args: AnswerArgs, workspace: Option<&Path>) -> i32 {
    let mut text = String::new();
    let read = std::io::stdin().take(MAX_INPUT_BYTES as u64 + 1).read_to_string(&mut text);
    let input = match read {
        Ok(_) if text.len() > MAX_INPUT_BYTES => Err(anyhow!("hook input is over {MAX_INPUT_BYTES} bytes")),
        Ok(_) => HookInput::parse(&text).map_err(|e| anyhow!(e)),
        Err(e) => Err(anyhow!("cannot read the hook input from stdin: {e}")),
    };
    // The project: -C, else the hook input's cwd, else where Claude Code started us.
    let workspace =
        workspace.map(Path::to_path_buf).or_else(|| input.as_ref().ok().and_then(|i| i.cwd.clone()).map(PathBuf::from)).unwrap_or_else(|| PathBuf::from("."));
    let result = input.and_then(|input| answer_input(&args, &workspace, &input));
    match result {
        Ok(Some(json)) => {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{json}");
            exit::OK
        }
        Ok(None) => exit::OK,
        Err(e) => {
            let log = record_failure(&workspace, &args.policy, &e);
            let why = format!("{e:#}").replace('\n', " ");
            crate::errln!(
                "loopbox: the {} hook failed and let Claude continue: {why}{}",
                args.policy,
                log.map_or(String::new(), |p| format!(" (details in {})", p.display()))
            );
            HOOK_FAILED
        }
    }
}

fn answer_input(args: &AnswerArgs, workspace: &Path, input: &HookInput) -> Result<Option<serde_json::Value>> {
    let (config, config_path) = Config::discover(args.config.as_deref(), workspace)?;
    let start = json_arg("--input", &args.input).map_err(|f| f.error)?;
    let runtime = super::runtime(&config, workspace).map_err(|f| f.error)?;
    let source = PolicySource::parse(&args.policy);
    let policy = runtime.load(&source)?;
    // Stdin carries the hook's JSON: there is no one to ask about ask-tier actions.
    let access = Access {
        confirm: Arc::new(NoOneToAsk("a hook cannot ask anyone (its stdin is the hook input); approve it with an allow rule instead")),
        protected: config_path.into_iter().chain(source.path().map(Path::to_path_buf)).collect(),
        ..Access::default()
    };
    let tokio = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let output = tokio.block_on(session::answer(&policy, Arc::new(config), workspace, &start, input, access, args.accept_config_change))?;
    Ok(output.stdout)
}

/// Append the failure, with its whole cause chain, to `.loopbox/hook.log`.
fn record_failure(workspace: &Path, policy: &str, e: &anyhow::Error) -> Option<PathBuf> {
    let dir = workspace.join(STORE_DIR);
    // Only inside a workspace that exists: a hook never creates one.
    crate::files::ensure_dir(&dir).ok()?;
    let path = dir.join("hook.log");
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&path).ok()?;
    writeln!(f, "{} {policy}: {e:#}", crate::ui::utc(crate::db::now_ms())).ok()?;
    Some(path)
}

/// The command line Claude Code runs for this entry.
fn hook_command(e: &EntryArgs) -> Result<String> {
    let exe = std::env::current_exe().context("cannot find the loopbox executable to put in the hook")?;
    let policy = match PolicySource::parse(&e.policy) {
        PolicySource::Builtin(_) => e.policy.clone(),
        PolicySource::Path(p) => p.canonicalize().with_context(|| format!("policy `{}` not found", p.display()))?.to_string_lossy().into_owned(),
    };
    let mut argv = vec![exe.to_string_lossy().into_owned(), "hook".into(), "claude-code".into(), "--policy".into(), policy];
    if let Some(input) = &e.input {
        argv.push("--input".into());
        argv.push(json_arg("--input", input).map_err(|f| f.error)?.trim().to_string());
    }
    if let Some(c) = &e.config {
        argv.push("--config".into());
        argv.push(c.canonicalize().with_context(|| format!("config `{}` not found", c.display()))?.to_string_lossy().into_owned());
    }
    // Claude Code runs hook commands through a shell.
    Ok(argv.iter().map(|a| shell_quote(a)).collect::<Vec<_>>().join(" "))
}

fn edit(e: EntryArgs, workspace: Option<&Path>, install: bool) -> Result<i32, Failure> {
    if !EVENTS.contains(&e.event.as_str()) {
        return Err(Failure::usage(anyhow!("unknown hook event `{}`; Claude Code's events are: {}", e.event, EVENTS.join(", "))));
    }
    let workspace = workspace.unwrap_or(Path::new("."));
    let path = workspace.join(".claude/settings.json");
    let entry =
        HookEntry { event: e.event.clone(), matcher: e.matcher.clone(), command: hook_command(&e).map_err(Failure::usage)?, timeout_s: Some(e.timeout) };
    let original = match crate::files::read_capped(&path, crate::files::MAX_CONFIG_BYTES) {
        Ok(bytes) => String::from_utf8(bytes).map_err(|_| Failure::usage(anyhow!("`{}` is not UTF-8 text", path.display())))?,
        Err(err) if err.is_not_found() => String::new(),
        Err(err) => return Err(Failure::usage(anyhow!("cannot read `{}`: {err}", path.display()))),
    };
    let changed = if install { settings::install(&original, &entry) } else { settings::uninstall(&original, &entry) };
    let changed = changed.map_err(|m| Failure::usage(anyhow!("`{}`: {m}", path.display())))?;
    let what = format!("{} hook for {}{}", e.event, e.policy, e.matcher.as_ref().map_or(String::new(), |m| format!(" (matcher {m})")));
    match changed {
        Some(text) => {
            write_atomically(&path, &text).map_err(Failure::internal)?;
            crate::outln!("{} the {what} in {}", if install { "installed" } else { "removed" }, path.display());
        }
        None if install => crate::outln!("the {what} is already installed in {}", path.display()),
        None => crate::outln!("no {what} in {}; nothing to remove", path.display()),
    }
    Ok(exit::OK)
}

fn write_atomically(path: &Path, text: &str) -> Result<()> {
    let dir = path.parent().expect("settings path has a parent");
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create `{}`", dir.display()))?;
    let tmp = dir.join(format!(".settings.json.loopbox-{}", std::process::id()));
    std::fs::write(&tmp, text).with_context(|| format!("cannot write `{}`", tmp.display()))?;
    if let Ok(meta) = std::fs::metadata(path) {
        let _ = std::fs::set_permissions(&tmp, meta.permissions());
    }
    std::fs::rename(&tmp, path).with_context(|| format!("cannot replace `{}`", path.display()))?;
    if !path.is_file() {
        bail!("`{}` was not written", path.display());
    }
    Ok(())
}
