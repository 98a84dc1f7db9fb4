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

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Subcommand, ValueEnum};

use super::{Failure, exit, json_arg};
use loopbox::config::Config;
use loopbox::db::STORE_DIR;
use loopbox::dist::installed::Installed;
use loopbox::exec::confirm::NoOneToAsk;
use loopbox::exec::grants::shell_quote;
use loopbox::hook::agents::{Agent, Block, EventSpec};
use loopbox::hook::input::{HookInput, MAX_INPUT_BYTES, event_named_in};
use loopbox::hook::render::{HookOutput, OnError, fail, refuse};
use loopbox::hook::settings::{self, HookEntry};
use loopbox::hook::{session, transcript};
use loopbox::run::Access;
use loopbox::trust::{NotTrusted, TrustStore};
use loopbox::wasm::policy::PolicySource;

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
}

pub fn execute(args: HookArgs, workspace: Option<&Path>) -> Result<i32, Failure> {
    match args.command {
        HookCommand::ClaudeCode(a) => Ok(answer(Agent::ClaudeCode, a, workspace)),
        HookCommand::Codex(a) => Ok(answer(Agent::Codex, a, workspace)),
        HookCommand::Gemini(a) => Ok(answer(Agent::Gemini, a, workspace)),
        HookCommand::Install { agent } => {
            let (agent, e) = agent.split();
            edit(agent, e, workspace, true)
        }
        HookCommand::Uninstall { agent } => {
            let (agent, e) = agent.split();
            edit(agent, e, workspace, false)
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
    emit(&fail(
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

/// How long loopbox may take, given the agent's timeout: a margin is left to print the answer.
fn deadline(agent_timeout_s: u64) -> Duration {
    let total = Duration::from_secs(agent_timeout_s);
    let margin = (total / 10).clamp(Duration::from_millis(500), Duration::from_secs(10));
    total.saturating_sub(margin).max(Duration::from_millis(200))
}

fn answer(agent: Agent, args: AnswerArgs, dash_c: Option<&Path>) -> i32 {
    let mut text = String::new();
    let read = std::io::stdin()
        .take(MAX_INPUT_BYTES as u64 + 1)
        .read_to_string(&mut text);
    let input = match read {
        Ok(_) if text.len() > MAX_INPUT_BYTES => {
            Err(format!("hook input is over {MAX_INPUT_BYTES} bytes"))
        }
        Ok(_) => HookInput::parse(agent, &text),
        Err(e) => Err(format!("cannot read the hook input from stdin: {e}")),
    };
    // The event decides how a failure is said: the one the installed command names
    // (an input loopbox cannot read must not turn a gate into a pass), else the input's.
    let spec = match (&input, &args.event) {
        (Ok(i), _) => i.spec(),
        (Err(_), Some(event)) => agent.event(event),
        (Err(_), None) => agent.event(&event_named_in(&text)),
    };
    let on_error = args.on_error.unwrap_or_else(|| OnError::default_for(&spec));
    let cwd = input.as_ref().ok().and_then(|i| i.cwd.clone());
    let workspace = loopbox::hook::workspace::resolve(
        agent,
        args.root.as_deref(),
        dash_c,
        cwd.as_deref(),
        |v| std::env::var(v).ok(),
    );
    let log_dir = workspace.as_ref().ok().cloned();
    let policy = args.policy.clone();
    let failed = move |e: anyhow::Error| {
        let log = log_dir
            .as_ref()
            .and_then(|ws| record_failure(ws, &policy, &e));
        let why = format!("{e:#}").replace('\n', " ");
        // A config the user has not approved is never obeyed: a gate refuses whatever
        // --on-error says, and saying the command that approves it; any other event goes on.
        if let Some(untrusted) = e.downcast_ref::<NotTrusted>() {
            return if spec.block == Block::No {
                HookOutput::nothing()
            } else {
                refuse(agent, &spec, &format!("loopbox: {untrusted}"))
            };
        }
        fail(
            agent,
            &spec,
            on_error,
            &format!(
                "{why}{}",
                log.map_or(String::new(), |p| format!(" (details in {})", p.display()))
            ),
        )
    };
    let (input, ws) = match (input, workspace) {
        (Err(e), _) => return emit(&failed(anyhow!(e))),
        (Ok(_), Err(e)) => return emit(&failed(anyhow!("{e}"))),
        (Ok(input), Ok(ws)) => (input, ws),
    };

    // Whoever answers first, the work or the watchdog, is the one that prints.
    let answered = Arc::new(std::sync::Mutex::new(false));
    let limit = deadline(args.timeout.unwrap_or_else(|| agent.default_timeout_s()));
    let _watchdog = watchdog(limit, Arc::clone(&answered), {
        let failed = failed.clone();
        move || {
            failed(anyhow!(
                "no answer within {:.1} s, the time left before the agent's hook timeout; raise it with --timeout on the hook command",
                limit.as_secs_f64()
            ))
        }
    });
    // A panic (a bug) is a failure like any other: the gate must still refuse.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        answer_input(&args, &ws, &input)
    }))
    .unwrap_or_else(|_| Err(anyhow!("loopbox failed unexpectedly while answering (a bug: please report it with .loopbox/hook.log)")));
    let output = result.unwrap_or_else(failed);
    let mut done = answered.lock().unwrap_or_else(|p| p.into_inner());
    *done = true;
    emit(&output)
}

fn emit(output: &HookOutput) -> i32 {
    if let Some(json) = &output.stdout {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{json}");
        let _ = out.flush();
    }
    if let Some(line) = &output.stderr {
        // It may quote the policy: escaped, its own lines indented (see `ui::Untrusted`).
        loopbox::errln!("{}", loopbox::ui::Untrusted(line));
    }
    output.exit
}

/// A thread that, if the answer is not in by `limit`, prints `on_timeout()` and ends the
/// process: a guest, a lock or an action that hangs cannot make the agent kill the hook,
/// which every agent reads as non-blocking. The work itself stays on the main thread
/// (answering on a worker thread made every hook about 1.5 ms slower, in page faults on
/// a fresh stack). Dropping the returned sender wakes the thread and lets it end.
fn watchdog(
    limit: Duration,
    answered: Arc<std::sync::Mutex<bool>>,
    on_timeout: impl FnOnce() -> HookOutput + Send + 'static,
) -> std::sync::mpsc::Sender<()> {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let spawned = std::thread::Builder::new()
        .name("hook-deadline".into())
        .stack_size(256 << 10)
        .spawn(move || {
            if rx.recv_timeout(limit) == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
                let output = on_timeout();
                let mut done = answered.lock().unwrap_or_else(|p| p.into_inner());
                if !*done {
                    *done = true;
                    std::process::exit(emit(&output));
                }
            }
        });
    if let Err(e) = spawned {
        loopbox::errln!(
            "loopbox: cannot start the hook's deadline thread ({e}); answering without one"
        );
    }
    tx
}

/// A path from the hook command, relative to the workspace: the agent may run the hook from any directory.
fn in_workspace(workspace: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        workspace.join(path)
    }
}

fn answer_input(args: &AnswerArgs, workspace: &Path, input: &HookInput) -> Result<HookOutput> {
    let (policy, accept) = (args.policy.as_str(), args.accept_config_change);
    let config_file = args.config.as_deref().map(|c| in_workspace(workspace, c));
    let found = Config::discover_hashed(config_file.as_deref(), workspace)?;
    // A config that a cloned repository or a sandboxed command could have written is obeyed only once approved.
    TrustStore::for_user()?.require_discovered(&found)?;
    let (config, config_path) = (found.config, found.path);
    let start = json_arg("--input", &args.input).map_err(|f| f.error)?;
    let runtime = super::runtime(&config, workspace).map_err(|f| f.error)?;
    // A name the config installs runs under its own section, admitted like `loopbox run NAME`.
    let (config, source, policy) =
        match Installed::resolve(&config, config_path.as_deref(), workspace, policy)? {
            Some(i) => {
                let scoped = config.scoped(&i.name)?;
                let loaded = i.load(&runtime, &scoped)?;
                (scoped, i.source, loaded)
            }
            None => {
                let source = match PolicySource::parse(policy) {
                    PolicySource::Path(p) => PolicySource::Path(in_workspace(workspace, &p)),
                    builtin => builtin,
                };
                let loaded = runtime.load(&source)?;
                (config, source, loaded)
            }
        };
    if let Some(pinned) = &args.digest
        && *pinned != policy.digest
    {
        bail!(
            "the policy `{source}` is not the component `hook install` pinned (blake3 {}…, this one {}…): it changed, or another file is in its place; \
             if you rebuilt it yourself, run `loopbox hook install` again",
            pinned.get(..16).unwrap_or(pinned),
            &policy.digest[..16]
        );
    }
    // Stdin carries the hook's JSON: there is no one to ask about ask-tier actions.
    let access = Access {
        confirm: Arc::new(NoOneToAsk(
            "a hook cannot ask anyone (its stdin is the hook input); approve it with an allow rule instead",
        )),
        protected: loopbox::run::own_files(config_path, &source),
        ..Access::default()
    };
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    tokio.block_on(session::answer(
        &policy,
        Arc::new(config),
        workspace,
        &start,
        input,
        access,
        accept,
    ))
}

/// Append the failure, with its whole cause chain, to `.loopbox/hook.log`.
fn record_failure(workspace: &Path, policy: &str, e: &anyhow::Error) -> Option<PathBuf> {
    let dir = workspace.join(STORE_DIR);
    // The workspace exists (it was resolved); its store directory may be made.
    loopbox::files::ensure_dir(&dir).ok()?;
    let path = dir.join("hook.log");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .ok()?;
    writeln!(
        f,
        "{} {policy}: {e:#}",
        loopbox::ui::utc(loopbox::db::now_ms())
    )
    .ok()?;
    Some(path)
}

/// The settings file an entry of `agent` goes into for `scope`.
fn settings_path(agent: Agent, scope: Scope, workspace: &Path) -> Result<PathBuf> {
    let home = || {
        std::env::var_os("HOME")
            .map(PathBuf::from)
            .context("HOME is not set, so the user's settings cannot be found")
    };
    let env_dir = |var: &str| {
        std::env::var_os(var)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    Ok(match (agent, scope) {
        (Agent::ClaudeCode, Scope::Project) => workspace.join(".claude/settings.json"),
        (Agent::ClaudeCode, Scope::Local) => workspace.join(".claude/settings.local.json"),
        (Agent::ClaudeCode, Scope::User) => transcript::claude_config_dir()
            .context("HOME is not set, so the user's settings cannot be found")?
            .join("settings.json"),
        (Agent::Codex, Scope::Project) => workspace.join(".codex/hooks.json"),
        (Agent::Codex, Scope::User) => match env_dir("CODEX_HOME") {
            Some(dir) => dir.join("hooks.json"),
            None => home()?.join(".codex/hooks.json"),
        },
        (Agent::Gemini, Scope::Project) => workspace.join(".gemini/settings.json"),
        (Agent::Gemini, Scope::User) => home()?.join(".gemini/settings.json"),
        (_, Scope::Local) => bail!(
            "{} has no local scope (only Claude Code does); use --scope project or --scope user",
            agent.title()
        ),
    })
}

/// `path` as the hook command should name it: relative to the workspace when inside it, so a
/// shared settings file works on every clone; absolute otherwise.
fn portable(workspace: &Path, path: &Path, what: &str) -> Result<String> {
    let real = path
        .canonicalize()
        .with_context(|| format!("{what} `{}` not found", path.display()))?;
    let root = workspace
        .canonicalize()
        .with_context(|| format!("the workspace `{}` cannot be used", workspace.display()))?;
    Ok(match real.strip_prefix(&root) {
        Ok(rel) if !rel.as_os_str().is_empty() => rel.to_string_lossy().into_owned(),
        _ => real.to_string_lossy().into_owned(),
    })
}

/// The program to put in a hook command: `loopbox` when that is this binary on PATH, else its absolute path.
fn program() -> Result<(String, bool)> {
    let exe =
        std::env::current_exe().context("cannot find the loopbox executable to put in the hook")?;
    let exe = exe.canonicalize().unwrap_or(exe);
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join("loopbox"))
        .find(|p| p.is_file())
        .and_then(|p| p.canonicalize().ok());
    Ok(match on_path {
        Some(p) if p == exe => ("loopbox".to_string(), true),
        _ => (exe.to_string_lossy().into_owned(), false),
    })
}

/// The command line the agent runs for this entry, and whether it names only what every machine has.
///
/// It pins what was installed: the event (so an input loopbox cannot read is still
/// answered as that event), the workspace (`--root`, for the project and local
/// scopes: a `cwd` elsewhere, a planted `sub/loopbox.toml` included, is never
/// adopted) and a component's blake3 (`--digest`: another file at that path is refused).
fn hook_command(
    agent: Agent,
    e: &EntryArgs,
    workspace: &Path,
    pin: bool,
) -> Result<(String, bool)> {
    let (program, on_path) = program()?;
    let config_file = e.config.as_ref().map(|c| in_workspace(workspace, c));
    let installed = Config::discover(config_file.as_deref(), workspace)?
        .0
        .policies
        .contains_key(&e.policy);
    let mut digest = None;
    let policy = match PolicySource::parse(&e.policy) {
        // An installed name travels as itself: the hook resolves it from the config.
        _ if installed => e.policy.clone(),
        PolicySource::Builtin(_) => e.policy.clone(),
        PolicySource::Path(p) => {
            let file = in_workspace(workspace, &p);
            // Uninstalling matches a hook whatever digest it pinned.
            if pin {
                let bytes = loopbox::files::read_capped(&file, loopbox::files::MAX_COMPONENT_BYTES)
                    .map_err(|err| anyhow!("policy `{}` cannot be read: {err}", file.display()))?;
                digest = Some(blake3::hash(&bytes).to_hex().to_string());
            }
            // A user-wide hook runs in every project: a relative path would name each project's own file.
            if e.scope == Scope::User {
                file.canonicalize()
                    .with_context(|| format!("policy `{}` not found", file.display()))?
                    .to_string_lossy()
                    .into_owned()
            } else {
                portable(workspace, &p, "policy")?
            }
        }
    };
    let mut portable_paths = !Path::new(&policy).is_absolute();
    let mut argv = vec![
        program,
        "hook".into(),
        agent.id().into(),
        "--policy".into(),
        policy,
        "--event".into(),
        e.event.clone(),
    ];
    if e.scope != Scope::User {
        let root = workspace
            .canonicalize()
            .with_context(|| format!("the workspace `{}` cannot be used", workspace.display()))?;
        argv.extend(["--root".into(), root.to_string_lossy().into_owned()]);
    }
    if let Some(d) = digest {
        argv.extend(["--digest".into(), d]);
    }
    if let Some(input) = &e.input {
        argv.push("--input".into());
        argv.push(
            json_arg("--input", input)
                .map_err(|f| f.error)?
                .trim()
                .to_string(),
        );
    }
    if let Some(c) = &e.config {
        let c = if e.scope == Scope::User {
            in_workspace(workspace, c)
                .canonicalize()
                .with_context(|| format!("config `{}` not found", c.display()))?
                .to_string_lossy()
                .into_owned()
        } else {
            portable(workspace, c, "config")?
        };
        portable_paths &= !Path::new(&c).is_absolute();
        argv.extend(["--config".into(), c]);
    }
    if let Some(o) = e.on_error {
        argv.extend([
            "--on-error".into(),
            o.to_possible_value()
                .expect("no skipped variants")
                .get_name()
                .to_string(),
        ]);
    }
    if let Some(t) = e.timeout {
        argv.extend(["--timeout".into(), t.to_string()]);
    }
    // The agents run hook commands through a shell.
    Ok((
        argv.iter()
            .map(|a| shell_quote(a))
            .collect::<Vec<_>>()
            .join(" "),
        on_path && portable_paths,
    ))
}

/// Gemini CLI matches its own tool names: `Bash` becomes `run_shell_command`, in each `|` alternative.
fn native_matcher(agent: Agent, matcher: &str) -> String {
    matcher
        .split('|')
        .map(|m| agent.native_tool_name(m).unwrap_or(m))
        .collect::<Vec<_>>()
        .join("|")
}

fn check_event(agent: Agent, e: &EntryArgs) -> Result<EventSpec, Failure> {
    if !agent.known(&e.event) {
        let names: Vec<&str> = agent.events().iter().map(|s| s.name).collect();
        return Err(Failure::usage(anyhow!(
            "unknown {} hook event `{}`; its events are: {}",
            agent.title(),
            e.event,
            names.join(", ")
        )));
    }
    if e.event == "WorktreeCreate" {
        return Err(Failure::usage(anyhow!(
            "a WorktreeCreate hook must create the worktree and print its path, which a loop policy does not do"
        )));
    }
    let spec = agent.event(&e.event);
    if e.matcher.is_some() && !spec.matcher {
        return Err(Failure::usage(anyhow!(
            "{} {} hooks take no matcher; leave out --matcher",
            agent.title(),
            e.event
        )));
    }
    Ok(spec)
}

fn edit(
    agent: Agent,
    e: EntryArgs,
    workspace: Option<&Path>,
    install: bool,
) -> Result<i32, Failure> {
    check_event(agent, &e)?;
    let workspace = workspace.unwrap_or(Path::new("."));
    let path = settings_path(agent, e.scope, workspace).map_err(Failure::usage)?;
    let (command, portable_command) =
        hook_command(agent, &e, workspace, install).map_err(Failure::usage)?;
    let pins_digest = command.contains(" --digest ");
    let entry = HookEntry {
        event: e.event.clone(),
        matcher: e.matcher.as_deref().map(|m| native_matcher(agent, m)),
        command,
        timeout: e.timeout.map(|t| agent.timeout_field(t)),
    };
    let original = match loopbox::files::read_capped(&path, loopbox::files::MAX_CONFIG_BYTES) {
        Ok(bytes) => String::from_utf8(bytes)
            .map_err(|_| Failure::usage(anyhow!("`{}` is not UTF-8 text", path.display())))?,
        Err(err) if err.is_not_found() => String::new(),
        Err(err) => {
            return Err(Failure::usage(anyhow!(
                "cannot read `{}`: {err}",
                path.display()
            )));
        }
    };
    let changed = if install {
        settings::install(&original, &entry)
    } else {
        settings::uninstall(&original, &entry)
    };
    let changed = changed.map_err(|m| Failure::usage(anyhow!("`{}`: {m}", path.display())))?;
    let what = format!(
        "{} {} hook for {}{}",
        agent.title(),
        e.event,
        e.policy,
        entry
            .matcher
            .as_ref()
            .map_or(String::new(), |m| format!(" (matcher {m})"))
    );
    match changed {
        Some(text) => {
            write_atomically(&path, &text).map_err(Failure::internal)?;
            loopbox::outln!(
                "{} the {what} in {}",
                if install { "installed" } else { "removed" },
                path.display()
            );
            if install && !portable_command && e.scope == Scope::Project {
                loopbox::outln!(
                    "note: the command names paths of this machine (loopbox is not on PATH, or the policy is outside the project); \
                     for a settings file others share, put loopbox on PATH and the policy in the project, or use --scope {}",
                    if agent == Agent::ClaudeCode {
                        "local"
                    } else {
                        "user"
                    }
                );
            }
            if install {
                trust_config(&e, workspace)?;
            }
            if install && e.scope != Scope::User {
                loopbox::outln!(
                    "note: the hook answers only in this workspace (--root){}; on another machine or clone, run `loopbox hook install` there",
                    if pins_digest {
                        ", and runs only this build of the policy (--digest): after rebuilding it, run `loopbox hook install` again"
                    } else {
                        ""
                    }
                );
            }
            if install && agent == Agent::Codex {
                loopbox::outln!(
                    "note: Codex reads a project's .codex/hooks.json only when the project is trusted, and runs a new or changed hook only after you review it (/hooks in Codex)"
                );
            }
        }
        None if install => loopbox::outln!("the {what} is already installed in {}", path.display()),
        None => loopbox::outln!("no {what} in {}; nothing to remove", path.display()),
    }
    Ok(exit::OK)
}

/// `hook install` is the user's word for the config the hook will obey: record it, showing what it grants.
fn trust_config(e: &EntryArgs, workspace: &Path) -> Result<(), Failure> {
    let path = match &e.config {
        Some(c) => in_workspace(workspace, c),
        None => workspace.join(loopbox::files::CONFIG_FILE),
    };
    if !path.is_file() {
        return Ok(());
    }
    let found = super::trust::approve_written(&path, workspace)?;
    loopbox::outln!(
        "trusted `{}`, which the hook obeys; it grants:",
        path.display()
    );
    for line in loopbox::trust::grants(&found.config) {
        loopbox::outln!("  {line}");
    }
    Ok(())
}

fn write_atomically(path: &Path, text: &str) -> Result<()> {
    let dir = path.parent().expect("settings path has a parent");
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create `{}`", dir.display()))?;
    let name = path
        .file_name()
        .map_or("settings".into(), |n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(".{name}.loopbox-{}", std::process::id()));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopbox_answers_before_the_agent_gives_up() {
        assert_eq!(deadline(600), Duration::from_secs(590));
        assert_eq!(deadline(60), Duration::from_secs(54));
        assert_eq!(deadline(1), Duration::from_millis(500));
        assert_eq!(deadline(0), Duration::from_millis(200));
    }

    #[test]
    fn gemini_matchers_use_its_tool_names() {
        assert_eq!(
            native_matcher(Agent::Gemini, "Bash|Edit|custom_tool"),
            "run_shell_command|replace|custom_tool"
        );
        assert_eq!(native_matcher(Agent::ClaudeCode, "Bash|Edit"), "Bash|Edit");
    }
}
