//! The command line: clap derive, one file per subcommand. Exit codes are
//! documented in the README and in `loopbox --help`.

mod add;
mod build;
mod doctor;
mod drive;
mod hook;
mod inspect;
mod key;
mod new;
mod publish;
mod pull;
mod run;
mod runs;
mod serve;
mod test;
mod trust;
mod validate;
mod worker;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Exit codes shared by every subcommand.
pub mod exit {
    pub const OK: i32 = 0;
    /// The policy finished and said it failed (or blocked).
    pub const FAILURE: i32 = 1;
    /// Bad arguments, config, input or policy file.
    pub const USAGE: i32 = 2;
    pub const ESCALATED: i32 = 3;
    pub const WAITING: i32 = 4;
    pub const FAULT: i32 = 5;
    /// The run used a budget: its turns (`run.max_turns`), its spend
    /// (`run.max_cost_usd`, `run.max_tokens`) or a shared quota.
    pub const TURN_BUDGET: i32 = 6;
    pub const AGENT: i32 = 7;
    /// The run was cancelled (`loopbox runs cancel`).
    pub const CANCELLED: i32 = 8;
    /// Another loopbox process is driving the run.
    pub const BUSY: i32 = 9;
    /// An agent turn was in flight when the run stopped; resume with --resend-turn or cancel.
    pub const UNKNOWN_TURN: i32 = 10;
    /// loopbox itself failed (store, I/O).
    pub const INTERNAL: i32 = 70;
    /// SIGINT or SIGTERM stopped the run; resume it with `loopbox runs resume`.
    pub const INTERRUPTED: i32 = 130;
}

const EXIT_CODES: &str = "Exit codes:
  0   the run finished successfully (or the policy let the agent stop)
  1   the policy finished with a failure outcome, or blocked
  2   bad arguments, config, input or policy file
  3   the policy escalated to a person
  4   the run is waiting (for an answer or events)
  5   the policy failed: trap, limit, error or malformed decision
  6   the run used a budget: all its turns (run.max_turns), its spend (run.max_cost_usd,
      run.max_tokens) or a shared quota
  7   the agent could not be run or failed
  8   the run was cancelled (loopbox runs cancel)
  9   another loopbox process is driving the run
  10  an agent turn was in flight when the run stopped: resume with --resend-turn, or cancel
  70  loopbox itself failed (store, I/O)
  130 interrupted by Ctrl-C (SIGINT) or SIGTERM: the run stopped where it stood; resume it with `loopbox runs resume ID`";

#[derive(Debug, Parser)]
#[command(name = "loopbox", version, about = "Run loop policies for AI coding agents as sandboxed WebAssembly components", after_help = EXIT_CODES)]
pub struct Cli {
    /// The workspace: actions run here, the store lives in its .loopbox/ (default: the current directory)
    #[arg(short = 'C', long, global = true, value_name = "DIR")]
    workspace: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a policy, or a YAML loop, until it finishes
    Run(run::RunArgs),
    /// Check a YAML loop without running it
    Validate(validate::ValidateArgs),
    /// Test policies against scenario files (*.scenario.yaml), without an agent or commands
    Test(test::TestArgs),
    /// Describe a policy component without running it
    Inspect(inspect::InspectArgs),
    /// List the runs in this workspace (or a server's: --server URL); show, follow, resume, answer, tick or cancel one
    Runs(runs::RunsArgs),
    /// Run a policy as an agent's hook (Claude Code, Codex, Gemini CLI), or install it as one
    Hook(hook::HookArgs),
    /// Say what this machine supports: OS sandboxes, cache, agent
    Doctor(doctor::DoctorArgs),
    /// Create a policy project in Rust, Python or JavaScript
    New(new::NewArgs),
    /// Build a policy project into a component (NAME.wasm)
    Build(build::BuildArgs),
    /// Install a policy (from a registry or a file) under grants of its own, after you review them
    Add(add::AddArgs),
    /// Fetch the registry policies loopbox.lock pins, for offline runs
    Pull(pull::PullArgs),
    /// Push a policy to an OCI registry, with its needs embedded and signed
    Publish(publish::PublishArgs),
    /// Make or show a signing key
    Key(key::KeyArgs),
    /// Approve a config file (loopbox.toml) after reviewing its grants; --list, --revoke
    Trust(trust::TrustArgs),
    /// Run the shared server (tenants, tokens, approvals from anywhere, an audit log, an HTTP API);
    /// `serve token`, `serve audit`, `serve tenant-config` manage it
    Serve(serve::ServeArgs),
    /// Drive the runs of a shared PostgreSQL store (`--store`), beside other workers
    Worker(worker::WorkerArgs),
}

/// A failure with the exit code it should end the process with.
#[derive(Debug)]
pub struct Failure {
    pub code: i32,
    pub error: anyhow::Error,
}

impl Failure {
    pub fn usage(error: anyhow::Error) -> Failure {
        Failure {
            code: exit::USAGE,
            error,
        }
    }

    pub fn internal(error: anyhow::Error) -> Failure {
        Failure {
            code: exit::INTERNAL,
            error: loopbox::db::advise(error),
        }
    }

    /// Looking something up: not finding it is a usage error, the store failing is internal.
    pub fn lookup(error: anyhow::Error) -> Failure {
        if loopbox::db::is_store_error(&error) {
            Failure::internal(error)
        } else {
            Failure::usage(error)
        }
    }
}

pub fn main() -> i32 {
    loopbox::out::guard_std_fds();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => match hook::answering(std::env::args_os()) {
            // A hook command with a wrong flag: the agent reads exit 2 as "block", so answer as the hook would.
            Some(agent) if e.use_stderr() => {
                return hook::answer_broken_command(agent, &e.to_string());
            }
            // With --json, a script reads the failure from stdout like any other answer.
            _ if e.use_stderr() && wants_json(std::env::args_os()) => {
                let message = e.render().to_string();
                let first = message.lines().next().unwrap_or_default();
                let first = first.strip_prefix("error: ").unwrap_or(first);
                print_json_error(first, &[first.to_string()], exit::USAGE);
                e.exit()
            }
            _ => e.exit(),
        },
    };
    // Off unless OTEL_EXPORTER_OTLP_* is set; flushed when this guard drops, before exit.
    let _telemetry = match loopbox::telemetry::init_from_env() {
        Ok(t) => t,
        Err(why) => {
            loopbox::errln!("warning: OpenTelemetry is off: {why}");
            None
        }
    };
    let code = main_with(cli);
    match loopbox::out::stdout_failure() {
        Some(why) if code == exit::OK => {
            loopbox::errln!("error: cannot write to standard output: {why}");
            exit::INTERNAL
        }
        _ => code,
    }
}

/// Whether the command line asks for JSON output (before any `--`).
fn wants_json(args: impl Iterator<Item = std::ffi::OsString>) -> bool {
    args.skip(1)
        .take_while(|a| a != "--")
        .any(|a| a == "--json")
}

/// A failure as one JSON object on stdout, for scripts that asked for `--json`:
/// `{"error": "...", "causes": [...], "exit_code": N}`. The same words go to stderr.
fn print_json_error(message: &str, causes: &[String], code: i32) {
    let object = serde_json::json!({"error": message, "causes": causes, "exit_code": code});
    loopbox::outln!("{object}");
}

impl Command {
    /// Whether the user asked for JSON (`--json`): a failure is then printed as JSON too.
    fn json(&self) -> bool {
        match self {
            Command::Run(a) => a.json,
            Command::Validate(a) => a.json,
            Command::Test(a) => a.json,
            Command::Inspect(a) => a.json,
            Command::Runs(a) => a.json,
            Command::Doctor(a) => a.json,
            Command::Build(a) => a.json,
            Command::Add(a) => a.json,
            Command::Pull(a) => a.json,
            Command::Publish(a) => a.json,
            Command::Key(_) => false,
            Command::Trust(a) => a.json,
            Command::Serve(a) => a.json(),
            Command::Worker(_) => false,
            // A hook answers in its agent's protocol; `new` prints no JSON.
            Command::Hook(_) | Command::New(_) => false,
        }
    }
}

fn main_with(cli: Cli) -> i32 {
    let json = cli.command.json();
    // A workspace is used, never created: a mistyped -C must not make a directory.
    // (A hook checks its own workspace, to answer in its agent's protocol.)
    if let Some(dir) = &cli.workspace
        && !dir.is_dir()
        && !matches!(&cli.command, Command::Hook(h) if h.answers())
    {
        let why = if dir.exists() {
            "is not a directory"
        } else {
            "does not exist"
        };
        let message = format!(
            "workspace `{}` (-C) {why}; give the directory of an existing project",
            dir.display()
        );
        loopbox::errln!("error: {message}");
        if json {
            print_json_error(&message, std::slice::from_ref(&message), exit::USAGE);
        }
        return exit::USAGE;
    }
    let workspace = cli.workspace.clone().unwrap_or_else(|| PathBuf::from("."));
    // What a loopbox killed with SIGKILL left: temp dirs, the workspace's placeholders.
    loopbox::exec::sandbox::leftovers::clean(Some(&workspace));
    let result = match cli.command {
        Command::Run(args) => run::execute(args, &workspace),
        Command::Validate(args) => validate::execute(args, &workspace),
        Command::Test(args) => test::execute(args, &workspace),
        Command::Inspect(args) => inspect::execute(args, &workspace),
        Command::Runs(args) => runs::execute(args, &workspace),
        Command::Hook(args) => hook::execute(args, cli.workspace.as_deref()),
        Command::Doctor(args) => doctor::execute(args, &workspace),
        Command::New(args) => new::execute(args, &workspace),
        Command::Build(args) => build::execute(args, &workspace),
        Command::Add(args) => add::execute(args, &workspace),
        Command::Pull(args) => pull::execute(args, &workspace),
        Command::Publish(args) => publish::execute(args, &workspace),
        Command::Key(args) => key::execute(args),
        Command::Trust(args) => trust::execute(args, &workspace),
        Command::Serve(args) => serve::execute(args),
        Command::Worker(args) => worker::execute(args),
    };
    match result {
        Ok(code) => code,
        Err(f) => {
            // The chain may quote a policy, a registry or a loop file: escaped,
            // and its own lines indented, so it cannot pose as loopbox's words.
            loopbox::errln!(
                "error: {}",
                loopbox::ui::Untrusted(&format!("{:#}", f.error))
            );
            if json {
                let causes: Vec<String> = f.error.chain().map(|c| c.to_string()).collect();
                print_json_error(&format!("{:#}", f.error), &causes, f.code);
            }
            f.code
        }
    }
}

/// The runtime for a workspace's config (its cache directory, which must lie outside `workspace`).
pub(crate) fn runtime(
    config: &loopbox::config::Config,
    workspace: &std::path::Path,
) -> Result<loopbox::wasm::runtime::Runtime, Failure> {
    let dir = loopbox::wasm::cache::ComponentCache::default_dir(config.engine.cache_dir.as_deref());
    loopbox::wasm::cache::check_dir(&dir, workspace).map_err(Failure::usage)?;
    loopbox::wasm::runtime::Runtime::with_pool(dir, config.engine.pool_instances)
        .map_err(Failure::internal)
}

/// A multi-threaded tokio runtime for one command.
pub(crate) fn tokio() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::internal(e.into()))
}

/// Cap glibc's malloc arenas for a process that serves for days (`serve`,
/// `worker`), unless `MALLOC_ARENA_MAX` says otherwise. glibc gives each
/// thread that allocates under contention an arena of its own, up to eight
/// per core, and keeps what they freed: after a burst of 200 requests and 50
/// runs the server held 74 MB where four arenas hold 53 MB, at the same
/// latencies (BENCHMARKS.md section 9). Called before the runtime's threads
/// exist.
pub(crate) fn long_running_allocator() {
    #[cfg(target_env = "gnu")]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt with integer arguments, before other threads allocate.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 4);
        }
    }
}

/// `--input` / `--tick` values: inline JSON, or `@file` to read it from a file.
/// An argument as text, or the text of the file `@FILE` names.
pub(crate) fn text_arg(flag: &str, value: &str) -> Result<String, Failure> {
    match value.strip_prefix('@') {
        Some(path) => loopbox::files::read_text(
            std::path::Path::new(path),
            loopbox::files::MAX_INPUT_BYTES,
            &format!("{flag} @"),
        )
        .map_err(|e| Failure::usage(anyhow::anyhow!("{e}"))),
        None => Ok(value.to_string()),
    }
}

pub(crate) fn json_arg(flag: &str, value: &str) -> Result<String, Failure> {
    let text = text_arg(flag, value)?;
    serde_json::from_str::<serde::de::IgnoredAny>(&text)
        .map_err(|e| Failure::usage(anyhow::anyhow!("{flag} is not valid JSON: {e}")))?;
    Ok(text)
}
