//! `loopbox.toml`: the user's grants and limits. Everything a policy may do is
//! decided here; a key that is absent grants nothing.
//!
//! Unknown keys and bad values are errors that name the key (serde with
//! `deny_unknown_fields`, plus `validate` for ranges serde cannot express).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use crate::wasm::limits::Limits;

pub use crate::files::CONFIG_FILE;

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub shell: ShellConfig,
    #[serde(default)]
    pub agent: Option<AgentConfig>,
    #[serde(default)]
    pub run: RunConfig,
    #[serde(default)]
    pub engine: EngineConfig,
    /// `[policies.NAME]`: policies the user installed, each with its own grants.
    #[serde(default)]
    pub policies: std::collections::BTreeMap<String, PolicyEntry>,
    /// `[trust]`: whose signatures installed policies may carry.
    #[serde(default)]
    pub trust: TrustConfig,
    /// `[workspace]`: what policies named by path may read (all of it when absent).
    #[serde(default)]
    pub workspace: WorkspaceConfig,
}

/// `[workspace]` (or `[policies.NAME.workspace]`): which workspace files a policy
/// may read and list through the `workspace` capability.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceConfig {
    /// Paths relative to the workspace root, each with everything under it; `"."`
    /// is all of it. A section that leaves `read` out grants no reads.
    #[serde(default)]
    pub read: Vec<String>,
}

impl Default for WorkspaceConfig {
    /// The top level without a `[workspace]` section: the whole workspace.
    fn default() -> Self {
        WorkspaceConfig {
            read: vec![".".into()],
        }
    }
}

impl WorkspaceConfig {
    /// An installed policy without a `[policies.NAME.workspace]` section: nothing.
    pub fn nothing() -> Self {
        WorkspaceConfig { read: Vec::new() }
    }
}

/// `[trust]`: the keys whose signature lets an installed policy run.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TrustConfig {
    /// `NAME = "ed25519:..."`: a signer you trust, by a name of your choosing.
    #[serde(default)]
    pub keys: std::collections::BTreeMap<String, String>,
}

impl TrustConfig {
    /// The name `[trust.keys]` gives this public key, if it lists it.
    pub fn name_of(&self, key: &str) -> Option<&str> {
        self.keys
            .iter()
            .find(|(_, k)| k.as_str() == key)
            .map(|(n, _)| n.as_str())
    }
}

/// `[policies.NAME]`: one policy and the grants it alone runs under. `loopbox run
/// NAME` runs it with these `shell` and `agent` sections instead of the top-level
/// ones (which stay the grants of policies named by path); everything absent
/// grants nothing. `limits`, `run` and `engine` are shared, and the top level's
/// safety settings bind it too (see [`Config::scoped`]).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyEntry {
    /// Where the component is: a path (relative to the workspace), `builtin:NAME`,
    /// or a registry reference `oci://REGISTRY/REPOSITORY:TAG` (pinned in `loopbox.lock`).
    pub source: String,
    /// `blake3:HEX` (as `loopbox inspect` prints it): the component must be exactly this.
    #[serde(default)]
    pub digest: Option<String>,
    /// Run it though it is unsigned, or signed by a key `[trust.keys]` does not list.
    /// A signature that does not verify is refused all the same.
    #[serde(default)]
    pub unsigned: bool,
    #[serde(default)]
    pub shell: ShellConfig,
    #[serde(default)]
    pub agent: Option<AgentConfig>,
    /// What it may read of the workspace: nothing unless this section says.
    #[serde(default = "WorkspaceConfig::nothing")]
    pub workspace: WorkspaceConfig,
    /// The keys its `shell` section sets (`sandbox`, `rlimits.cpu_seconds`, ...),
    /// so a key it leaves out takes the top level's value, not the default.
    /// Filled in by [`Config::parse`]; not read from the file.
    #[serde(skip)]
    pub shell_keys: std::collections::BTreeSet<String>,
}

/// `[shell]`: which commands a policy may run, and how children are set up.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ShellConfig {
    /// Argv-prefix rules: `["cargo", "test"]` allows `cargo test --all` but not `cargo build`.
    #[serde(default)]
    pub allow: Vec<Vec<String>>,
    /// Argv-prefix rules for commands that need a person's yes before they run.
    #[serde(default)]
    pub ask: Vec<Vec<String>>,
    /// Rules that never run; their tokens match in any order (`["rm", "-rf"]` denies `rm -fr`).
    #[serde(default)]
    pub deny: Vec<Vec<String>>,
    /// Argv-prefix rules for commands that are safe to run twice. When a run is resumed after
    /// a crash that happened while such a command ran, it is run again instead of being
    /// reported to the policy as `outcome-unknown`.
    #[serde(default)]
    pub idempotent: Vec<Vec<String>>,
    /// Allow `script` requests (shell text run by `sh -c`); they run only inside the OS sandbox.
    #[serde(default)]
    pub scripts: bool,
    /// The OS sandbox under every command: "auto" (default), "bwrap", "landlock" or "none".
    #[serde(default)]
    pub sandbox: crate::exec::sandbox::SandboxChoice,
    /// Let sandboxed commands use the network.
    #[serde(default)]
    pub network: bool,
    /// Let sandboxed commands create UNIX sockets. Off by default: a socket outside
    /// the workspace (Docker's, an ssh-agent's) reaches a process with your rights.
    #[serde(default)]
    pub unix_sockets: bool,
    /// Protected names (`.git`, `.vscode`, ...) sandboxed commands and the agent may
    /// write after all. `.loopbox` and `loopbox.toml` never open.
    #[serde(default)]
    pub writable: Vec<String>,
    /// More paths no sandboxed command or agent may read (`~/secrets`, `/opt/keys`,
    /// `.env` in the workspace), besides the credential stores hidden always.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hide: Vec<String>,
    /// Paths hidden by default that sandboxed commands and the agent may read after
    /// all (`~/.ssh` for an agent that pushes over SSH).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reveal: Vec<String>,
    /// Size of the private `/tmp` bubblewrap gives each child, in bytes: a tmpfs,
    /// so memory, which a command filling it would otherwise take up to half of.
    /// 0 leaves it at the kernel's default.
    #[serde(
        default = "default_tmp_bytes",
        skip_serializing_if = "is_default_tmp_bytes"
    )]
    pub tmp_bytes: u64,
    /// Variables that can make a program load code (`NODE_OPTIONS`, `BASH_ENV`, ...)
    /// that `pass_env` or `pass_env_from_policy` may carry anyway, named one by one.
    #[serde(default)]
    pub unsafe_env: Vec<String>,
    /// `PATH` for children and for resolving program names.
    #[serde(default = "default_path")]
    pub path: String,
    /// Host environment variables passed through to children (besides `PATH`).
    #[serde(default = "default_pass_env")]
    pub pass_env: Vec<String>,
    /// Environment variable names a policy may set in a `command`'s `env`.
    #[serde(default)]
    pub pass_env_from_policy: Vec<String>,
    /// Timeout when a request gives none, in milliseconds.
    #[serde(default = "default_timeout_ms")]
    pub default_timeout_ms: u64,
    /// The longest timeout a request may ask for, in milliseconds.
    #[serde(default = "default_max_timeout_ms")]
    pub max_timeout_ms: u64,
    /// Resource limits set on every child (0 leaves one unlimited).
    #[serde(default)]
    pub rlimits: Rlimits,
    /// Where these grants are written (`shell`, or `policies.NAME.shell`), so a
    /// refusal tells the user which section to edit. Not read from the file.
    #[serde(skip)]
    pub section: Option<String>,
}

impl ShellConfig {
    /// The config key of this section: `shell` or `policies.NAME.shell`.
    pub fn section(&self) -> &str {
        self.section.as_deref().unwrap_or("shell")
    }

    /// The agent section beside this one: `agent` or `policies.NAME.agent`.
    pub fn agent_section(&self) -> String {
        self.sibling("agent")
    }

    /// The section `key` beside this one: `key` or `policies.NAME.key`.
    pub fn sibling(&self, key: &str) -> String {
        match self
            .section
            .as_deref()
            .and_then(|s| s.strip_suffix(".shell"))
        {
            Some(policy) => format!("{policy}.{key}"),
            None => key.into(),
        }
    }

    /// What a child of this workspace may see under these grants.
    pub fn child_env(&self, root: &std::path::Path) -> crate::exec::child_env::ChildEnv {
        crate::exec::child_env::ChildEnv::new(&self.path, &self.pass_env, root)
    }
}

/// `[shell.rlimits]`: setrlimit(2) values for every command a policy runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Rlimits {
    /// CPU seconds (RLIMIT_CPU); the child gets SIGXCPU past it.
    pub cpu_seconds: u64,
    /// Address space in bytes (RLIMIT_AS); 0 by default, since JITs and compilers reserve a lot.
    pub address_space_bytes: u64,
    /// Processes of the user (RLIMIT_NPROC); counts all of the user's processes.
    pub processes: u64,
    /// Largest file the child may write (RLIMIT_FSIZE); SIGXFSZ past it.
    pub file_size_bytes: u64,
    /// Open file descriptors (RLIMIT_NOFILE).
    pub open_files: u64,
}

impl Default for Rlimits {
    fn default() -> Self {
        Rlimits {
            cpu_seconds: 1800,
            address_space_bytes: 0,
            processes: 0,
            file_size_bytes: 8 << 30,
            open_files: 4096,
        }
    }
}

fn default_path() -> String {
    "/usr/local/bin:/usr/bin:/bin".into()
}
fn default_pass_env() -> Vec<String> {
    vec!["HOME".into(), "LANG".into(), "TERM".into()]
}
fn default_timeout_ms() -> u64 {
    120_000
}
fn default_tmp_bytes() -> u64 {
    1 << 30
}
/// Left out of a run's pin at its default, so runs pinned before the key existed
/// resume unchanged.
fn is_default_tmp_bytes(n: &u64) -> bool {
    *n == default_tmp_bytes()
}
fn default_max_timeout_ms() -> u64 {
    1_800_000
}

impl Default for ShellConfig {
    fn default() -> Self {
        ShellConfig {
            allow: Vec::new(),
            ask: Vec::new(),
            deny: Vec::new(),
            idempotent: Vec::new(),
            scripts: false,
            sandbox: Default::default(),
            network: false,
            unix_sockets: false,
            writable: Vec::new(),
            hide: Vec::new(),
            reveal: Vec::new(),
            tmp_bytes: default_tmp_bytes(),
            unsafe_env: Vec::new(),
            path: default_path(),
            pass_env: default_pass_env(),
            pass_env_from_policy: Vec::new(),
            default_timeout_ms: default_timeout_ms(),
            max_timeout_ms: default_max_timeout_ms(),
            rlimits: Rlimits::default(),
            section: None,
        }
    }
}

/// How the agent's reply is read from its standard output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AgentOutput {
    /// The whole of stdout is the reply; no session id.
    #[default]
    Text,
    /// stdout is one JSON object: the reply in `result` (or `response`, `text`),
    /// the conversation id in `session_id` (or `session`). Claude's `--output-format json`.
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PromptTier {
    #[default]
    Allow,
    Ask,
    Deny,
}

/// How the message reaches an agent CLI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PromptInput {
    #[default]
    Argument,
    Stdin,
}

/// Which kind of agent answers prompts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunnerKind {
    /// Any CLI, from `agent.command`.
    #[default]
    Command,
    /// `claude -p {prompt} --output-format json`, continued with `--resume`.
    Claude,
    /// `codex exec {prompt}`.
    Codex,
    /// `gemini -p {prompt}`.
    Gemini,
    /// An OpenAI-compatible chat-completions server, from `[agent.openai]`.
    Openai,
}

impl RunnerKind {
    pub fn name(self) -> &'static str {
        match self {
            RunnerKind::Command => "command",
            RunnerKind::Claude => "claude",
            RunnerKind::Codex => "codex",
            RunnerKind::Gemini => "gemini",
            RunnerKind::Openai => "openai",
        }
    }
}

/// `[agent]`: the agent behind `prompt` actions and `inject` decisions.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// "command" (default), a CLI preset ("claude", "codex", "gemini"), or "openai".
    #[serde(default)]
    pub runner: RunnerKind,
    /// Command template; `{prompt}` becomes the message (one argument, never
    /// split or interpreted by a shell; put `--` before it so a message starting
    /// with `-` cannot be an option); a token holding `{model}` or `{session}`
    /// is filled in, or dropped when the request has none. Placeholders are
    /// filled in the template only, never inside a value. Presets fill it in.
    #[serde(default)]
    pub command: Vec<String>,
    /// How the message reaches the agent: "argument" (the `{prompt}` token, the
    /// default) or "stdin" (no `{prompt}` token). Presets use stdin.
    #[serde(default)]
    pub prompt_input: PromptInput,
    /// Paths outside the workspace the agent may write, for its own state
    /// (`~/` is your home). Presets name their own (`~/.claude`, `~/.codex`, `~/.gemini`).
    #[serde(default)]
    pub writable: Option<Vec<String>>,
    /// Appended when continuing a conversation; `{session}` becomes its id.
    #[serde(default)]
    pub resume: Vec<String>,
    /// Appended when a prompt asks for a model; `{model}` becomes its name.
    #[serde(default)]
    pub model: Vec<String>,
    #[serde(default)]
    pub output: AgentOutput,
    /// Milliseconds an agent turn may take; a prompt's own timeout is capped by it.
    #[serde(default = "default_agent_timeout_ms")]
    pub timeout_ms: u64,
    /// The tier of every message a policy sends the agent, `prompt` actions and
    /// `inject` decisions alike: "allow" (default), "ask" or "deny".
    #[serde(default)]
    pub tier: PromptTier,
    /// Prompt actions one run may take.
    #[serde(default = "default_max_prompts")]
    pub max_prompts: u64,
    /// Host environment variables passed to the agent (besides `PATH`), and to it
    /// alone: its API key, say. When absent the agent gets `shell.pass_env`, as
    /// before this key existed, with a warning; a later release drops that.
    /// Left out of a run's pin when absent, so runs pinned before it resume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass_env: Option<Vec<String>>,
    /// `[agent.openai]`, for `runner = "openai"`.
    #[serde(default)]
    pub openai: Option<OpenAiConfig>,
}

fn default_max_prompts() -> u64 {
    100
}

/// `[agent.openai]`: an OpenAI-compatible chat-completions server.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OpenAiConfig {
    /// e.g. `https://api.openai.com/v1` or `http://127.0.0.1:8080/v1`.
    pub base_url: String,
    /// The model when a prompt names none.
    pub model: String,
    /// The *name* of the environment variable holding the API key (never the key itself).
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// A system message at the start of every conversation.
    #[serde(default)]
    pub system: Option<String>,
    #[serde(default)]
    pub max_tokens: Option<u32>,
}

impl AgentConfig {
    /// Fill in a CLI preset's command, resume and model arguments and output format.
    fn apply_preset(&mut self) -> Result<()> {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // The message goes on stdin: it can never be read as an option. Measured
        // against claude 2.1.197, codex 0.169.0 and gemini 0.61.0 (see docs/security.md).
        let (command, resume, model, output, writable) = match self.runner {
            RunnerKind::Command | RunnerKind::Openai => return Ok(()),
            RunnerKind::Claude => (
                v(&["claude", "-p", "--output-format", "json"]),
                v(&["--resume", "{session}"]),
                v(&["--model", "{model}"]),
                AgentOutput::Json,
                v(&["~/.claude", "~/.claude.json"]),
            ),
            RunnerKind::Codex => (
                v(&["codex", "exec"]),
                vec![],
                v(&["--model", "{model}"]),
                AgentOutput::Text,
                v(&["~/.codex"]),
            ),
            RunnerKind::Gemini => (
                v(&["gemini"]),
                vec![],
                v(&["--model", "{model}"]),
                AgentOutput::Text,
                v(&["~/.gemini"]),
            ),
        };
        self.prompt_input = PromptInput::Stdin;
        if self.writable.is_none() {
            self.writable = Some(writable);
        }
        if !self.command.is_empty() {
            bail!(
                "agent.command: runner = \"{}\" sets the command itself; remove agent.command, or use runner = \"command\"",
                self.runner.name()
            );
        }
        self.command = command;
        if self.resume.is_empty() {
            self.resume = resume;
        }
        if self.model.is_empty() {
            self.model = model;
        }
        self.output = output;
        Ok(())
    }
}

fn default_agent_timeout_ms() -> u64 {
    1_800_000
}

/// `[run]`: the standalone driver.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// Agent turns one run may take before it is stopped.
    #[serde(default = "default_max_turns")]
    pub max_turns: u32,
    /// Journal every host call so a crashed run resumes without redoing finished
    /// actions. Off trades that away for one fewer disk sync per action.
    #[serde(default = "default_true")]
    pub journal: bool,
}

fn default_true() -> bool {
    true
}

fn default_max_turns() -> u32 {
    50
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            max_turns: default_max_turns(),
            journal: true,
        }
    }
}

/// `[engine]`: the Wasm engine and its compiled-component cache.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EngineConfig {
    /// Where compiled components are kept; `$LOOPBOX_CACHE_DIR`, else
    /// `$XDG_CACHE_HOME/loopbox`, else `~/.cache/loopbox` when absent.
    #[serde(default)]
    pub cache_dir: Option<PathBuf>,
    /// Instances that may be alive at once (events in flight); reserved at start-up.
    #[serde(default = "default_pool_instances")]
    pub pool_instances: u32,
}

fn default_pool_instances() -> u32 {
    crate::wasm::engine::DEFAULT_POOL_INSTANCES
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            cache_dir: None,
            pool_instances: default_pool_instances(),
        }
    }
}

/// The blake3 of a config's bytes, as the trust store records approvals.
pub fn digest(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

/// What [`Config::discover_hashed`] found: the config, its file (None: no file,
/// the defaults) and the blake3 of the bytes parsed.
#[derive(Debug, Clone)]
pub struct Discovered {
    pub config: Config,
    pub path: Option<PathBuf>,
    pub blake3: Option<String>,
}

/// How strong a sandbox choice is: `none` < `landlock` < `auto` (bubblewrap
/// where it works, else Landlock) < `bwrap`.
fn sandbox_strength(c: crate::exec::sandbox::SandboxChoice) -> u8 {
    use crate::exec::sandbox::SandboxChoice as S;
    match c {
        S::None => 0,
        S::Landlock => 1,
        S::Auto => 2,
        S::Bwrap => 3,
    }
}

/// The smaller of two limits where 0 means none.
fn min_limit(top: u64, policy: u64) -> u64 {
    match (top, policy) {
        (0, p) => p,
        (t, 0) => t,
        (t, p) => t.min(p),
    }
}

/// `[policies.NAME].shell` under the top level's safety settings (`top`); see
/// [`Config::scoped`].
fn bound_by(top: &ShellConfig, entry: &PolicyEntry, name: &str) -> Result<ShellConfig> {
    let own = &entry.shell;
    let set = |key: &str| entry.shell_keys.contains(key);
    let key = |k: &str| format!("policies.{name}.shell.{k}");
    let widen = "a policy's section can narrow the top level's safety settings, never widen them";
    let mut shell = ShellConfig {
        section: Some(format!("policies.{name}.shell")),
        ..own.clone()
    };
    shell.sandbox = if !set("sandbox") {
        top.sandbox
    } else if sandbox_strength(own.sandbox) < sandbox_strength(top.sandbox) {
        bail!(
            "{} = \"{}\" is weaker than the top-level shell.sandbox = \"{}\": {widen}; remove it, or choose one at least as strong",
            key("sandbox"),
            own.sandbox.name(),
            top.sandbox.name()
        );
    } else {
        own.sandbox
    };
    if own.unix_sockets && !top.unix_sockets {
        bail!(
            "{} = true, but the top-level [shell] has unix_sockets off: {widen}; remove it, or turn unix_sockets on at the top level",
            key("unix_sockets")
        );
    }
    if let Some(p) = own.reveal.iter().find(|p| !top.reveal.contains(p)) {
        bail!(
            "{}: `{}` is not in the top-level shell.reveal: {widen}; remove it, or reveal it at the top level",
            key("reveal"),
            p.escape_debug()
        );
    }
    for rule in &top.deny {
        if !shell.deny.contains(rule) {
            shell.deny.push(rule.clone());
        }
    }
    for path in &top.hide {
        if !shell.hide.contains(path) {
            shell.hide.push(path.clone());
        }
    }
    let bound = |k: &str, top: u64, own: u64| if set(k) { min_limit(top, own) } else { top };
    shell.tmp_bytes = bound("tmp_bytes", top.tmp_bytes, own.tmp_bytes);
    shell.max_timeout_ms = if set("max_timeout_ms") {
        top.max_timeout_ms.min(own.max_timeout_ms)
    } else {
        top.max_timeout_ms
    };
    shell.default_timeout_ms = shell.default_timeout_ms.min(shell.max_timeout_ms);
    let (t, o, r) = (&top.rlimits, &own.rlimits, &mut shell.rlimits);
    r.cpu_seconds = bound("rlimits.cpu_seconds", t.cpu_seconds, o.cpu_seconds);
    r.address_space_bytes = bound(
        "rlimits.address_space_bytes",
        t.address_space_bytes,
        o.address_space_bytes,
    );
    r.processes = bound("rlimits.processes", t.processes, o.processes);
    r.file_size_bytes = bound(
        "rlimits.file_size_bytes",
        t.file_size_bytes,
        o.file_size_bytes,
    );
    r.open_files = bound("rlimits.open_files", t.open_files, o.open_files);
    Ok(shell)
}

impl Config {
    /// Parse `text` (the contents of `origin`), then check what serde cannot.
    pub fn parse(text: &str, origin: &Path) -> Result<Config> {
        let mut config: Config = toml::from_str(text)
            .map_err(|e| anyhow::anyhow!("{}", e.to_string().trim_end()))
            .with_context(|| format!("invalid config `{}`", origin.display()))?;
        // Which keys each policy's shell section sets: what it leaves out comes from the top level.
        if let Ok(raw) = text.parse::<toml::Table>()
            && let Some(policies) = raw.get("policies").and_then(toml::Value::as_table)
        {
            for (name, entry) in config.policies.iter_mut() {
                let shell = policies
                    .get(name)
                    .and_then(|p| p.get("shell"))
                    .and_then(toml::Value::as_table);
                for (key, value) in shell.into_iter().flatten() {
                    entry.shell_keys.insert(key.clone());
                    for sub in value.as_table().into_iter().flat_map(|t| t.keys()) {
                        entry.shell_keys.insert(format!("{key}.{sub}"));
                    }
                }
            }
        }
        let agents = config.agent.iter_mut().chain(
            config
                .policies
                .values_mut()
                .filter_map(|p| p.agent.as_mut()),
        );
        for agent in agents {
            agent
                .apply_preset()
                .with_context(|| format!("invalid config `{}`", origin.display()))?;
        }
        config
            .validate()
            .with_context(|| format!("invalid config `{}`", origin.display()))?;
        Ok(config)
    }

    /// Read `path`; a missing file is an error (the user named it).
    pub fn load(path: &Path) -> Result<Config> {
        let text = crate::files::read_text(path, crate::files::MAX_CONFIG_BYTES, "config")?;
        Config::parse(&text, path)
    }

    /// `--config PATH` when given, else `loopbox.toml` in the workspace if present, else defaults.
    pub fn discover(
        explicit: Option<&Path>,
        workspace: &Path,
    ) -> Result<(Config, Option<PathBuf>)> {
        let found = Config::discover_hashed(explicit, workspace)?;
        Ok((found.config, found.path))
    }

    /// As [`Config::discover`], with the blake3 of the exact bytes parsed, which
    /// the trust store checks before a run or a hook obeys the file.
    pub fn discover_hashed(explicit: Option<&Path>, workspace: &Path) -> Result<Discovered> {
        let read = |path: &Path| -> Result<Discovered> {
            let text = crate::files::read_text(path, crate::files::MAX_CONFIG_BYTES, "config")?;
            Ok(Discovered {
                config: Config::parse(&text, path)?,
                path: Some(path.to_path_buf()),
                blake3: Some(digest(text.as_bytes())),
            })
        };
        if let Some(path) = explicit {
            return read(path);
        }
        let path = workspace.join(CONFIG_FILE);
        // Absent means defaults; anything else that is not a readable regular file
        // (a directory, a FIFO, a device, a dangling symlink) is an error, never
        // silently the defaults.
        match std::fs::symlink_metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Discovered {
                config: Config::default(),
                path: None,
                blake3: None,
            }),
            Err(e) => Err(anyhow::anyhow!(
                "config `{}` cannot be read: {e}",
                path.display()
            )),
            Ok(m) if m.file_type().is_symlink() && std::fs::metadata(&path).is_err() => {
                Err(anyhow::anyhow!(
                    "config `{}` is a symbolic link to `{}`, which does not exist; fix or remove the link",
                    path.display(),
                    std::fs::read_link(&path)
                        .map(|t| t.display().to_string())
                        .unwrap_or_default()
                ))
            }
            Ok(_) => read(&path),
        }
    }

    /// The config a policy installed as `[policies.NAME]` runs under: its own
    /// `shell` and `agent`, the shared `limits`, `run` and `engine`, and its entry
    /// (for its digest) as the only one in `policies`.
    ///
    /// The top level's safety settings bind it: its `hide` and `deny` are added to
    /// the section's; the section's `sandbox` may be stronger, never weaker (left
    /// out, it is the top level's); `rlimits`, `tmp_bytes` and `max_timeout_ms` are
    /// the smaller of the two (left out, the top level's); `reveal` may name only
    /// what the top level reveals, and `unix_sockets` only where the top level has
    /// them on. A section that tries to widen one of these is refused, naming the key.
    pub fn scoped(&self, name: &str) -> Result<Config> {
        let Some(entry) = self.policies.get(name) else {
            bail!("there is no [policies.{name}] in the config");
        };
        let shell = bound_by(&self.shell, entry, name)?;
        Ok(Config {
            limits: self.limits.clone(),
            shell,
            agent: entry.agent.clone(),
            run: self.run.clone(),
            engine: self.engine.clone(),
            policies: [(name.to_string(), entry.clone())].into(),
            trust: self.trust.clone(),
            workspace: entry.workspace.clone(),
        })
    }

    fn validate(&self) -> Result<()> {
        // The shared sections, once; then the grants of the top level and of each policy.
        self.limits.validate()?;
        if !(1..=10_000).contains(&self.engine.pool_instances) {
            bail!(
                "engine.pool_instances = {} is out of range: give 1 to 10000",
                self.engine.pool_instances
            );
        }
        if self.run.max_turns == 0 {
            bail!("run.max_turns must be at least 1");
        }
        self.validate_grants()?;
        for (name, key) in &self.trust.keys {
            crate::dist::sign::parse_public(key).with_context(|| format!("trust.keys.{name}"))?;
        }
        for (name, entry) in &self.policies {
            let ok = !name.is_empty()
                && name.len() <= 64
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
            if !ok {
                bail!(
                    "[policies.{name}]: a policy's name is 1 to 64 lower-case letters, digits, `-` and `_`"
                );
            }
            if let Some(d) = &entry.digest {
                let hex = d.strip_prefix("blake3:").unwrap_or("");
                if hex.len() != 64 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
                    bail!(
                        "policies.{name}.digest: `{d}` is not a digest; copy it from `loopbox inspect {}` (blake3: and 64 hex digits)",
                        entry.source
                    );
                }
            }
            if entry.source.trim().is_empty() {
                bail!(
                    "policies.{name}.source: give a path to a .wasm component, builtin:NAME or oci://REGISTRY/REPOSITORY:TAG"
                );
            }
            if entry.source.starts_with(crate::dist::reference::SCHEME) {
                crate::dist::reference::Reference::parse(&entry.source)
                    .with_context(|| format!("policies.{name}.source"))?;
            }
            self.scoped(name)?
                .validate_grants()
                .with_context(|| format!("in [policies.{name}]"))?;
        }
        Ok(())
    }

    /// The checks of `shell` and `agent`, for the top level or one policy.
    fn validate_grants(&self) -> Result<()> {
        for (i, path) in self.workspace.read.iter().enumerate() {
            crate::caps::workspace::check_path(path)
                .and_then(|_| {
                    if path.is_empty() {
                        Err("it is empty; `.` is the whole workspace".into())
                    } else {
                        Ok(())
                    }
                })
                .map_err(|e| anyhow::anyhow!("workspace.read[{i}]: {e}"))?;
        }
        for (key, rules) in [
            ("allow", &self.shell.allow),
            ("ask", &self.shell.ask),
            ("deny", &self.shell.deny),
            ("idempotent", &self.shell.idempotent),
        ] {
            for (i, rule) in rules.iter().enumerate() {
                if rule.is_empty() || rule[0].is_empty() {
                    bail!(
                        "shell.{key}[{i}]: a rule needs at least a program name, e.g. [\"cargo\", \"test\"]"
                    );
                }
            }
        }
        if self.shell.pass_env_from_policy.iter().any(|n| n == "PATH") {
            bail!(
                "shell.pass_env_from_policy: PATH would let a policy choose which program runs; remove it"
            );
        }
        for (key, names, host) in [
            (
                "pass_env_from_policy",
                &self.shell.pass_env_from_policy,
                false,
            ),
            ("pass_env", &self.shell.pass_env, true),
        ] {
            for name in names {
                let exempt = self.shell.unsafe_env.contains(name)
                    || (host
                        && (name == "PATH"
                            || crate::exec::child_env::SAFE_FROM_HOST.contains(&name.as_str())));
                if let Some(why) =
                    crate::exec::child_env::dangerous_variable(name).filter(|_| !exempt)
                {
                    bail!(
                        "shell.{key}: `{name}` {why}, so a command could be made to run code it was not asked to; remove it, or name it in `shell.unsafe_env` to accept that"
                    );
                }
            }
        }
        for name in &self.shell.writable {
            crate::exec::sandbox::protect::check_writable(name)
                .map_err(|e| anyhow::anyhow!("shell.writable: {e}"))?;
        }
        for (key, paths) in [("hide", &self.shell.hide), ("reveal", &self.shell.reveal)] {
            for p in paths {
                if p.is_empty()
                    || p.contains('\0')
                    || Path::new(p)
                        .components()
                        .any(|c| c == std::path::Component::ParentDir)
                {
                    bail!(
                        "shell.{key}: `{}` is not a path loopbox can hide: give `~/...`, an absolute path, or one inside the workspace without `..`",
                        p.escape_debug()
                    );
                }
            }
        }
        if self.shell.default_timeout_ms == 0 || self.shell.max_timeout_ms == 0 {
            bail!("shell.default_timeout_ms and shell.max_timeout_ms must be greater than 0");
        }
        for name in self
            .shell
            .pass_env
            .iter()
            .chain(&self.shell.pass_env_from_policy)
        {
            if name.is_empty() || name.contains('=') || name.contains('\0') {
                bail!("shell.pass_env: `{name}` is not an environment variable name");
            }
        }
        if let Some(agent) = self
            .agent
            .as_ref()
            .filter(|a| a.runner == RunnerKind::Openai)
        {
            let Some(o) = &agent.openai else {
                bail!(
                    "agent.runner = \"openai\" needs an [agent.openai] table with base_url and model"
                )
            };
            if !(o.base_url.starts_with("http://") || o.base_url.starts_with("https://")) {
                bail!(
                    "agent.openai.base_url must start with http:// or https://, not `{}`",
                    o.base_url
                );
            }
            if o.api_key_env
                .as_deref()
                .is_some_and(|k| k.starts_with("sk-") || k.contains(' '))
            {
                bail!(
                    "agent.openai.api_key_env is the *name* of the environment variable holding the key (e.g. \"OPENAI_API_KEY\"), never the key itself"
                );
            }
        }
        if let Some(agent) = self
            .agent
            .as_ref()
            .filter(|a| a.runner != RunnerKind::Openai)
        {
            if agent.command.is_empty() || agent.command[0].is_empty() {
                bail!(
                    "agent.command: needs at least a program, e.g. [\"claude\", \"-p\", \"{{prompt}}\"]"
                );
            }
            let has_prompt = agent.command.iter().any(|t| t.contains("{prompt}"));
            if agent.prompt_input == PromptInput::Argument && !has_prompt {
                bail!(
                    "agent.command: no token holds `{{prompt}}`, so the agent would never see the message (or set agent.prompt_input = \"stdin\")"
                );
            }
            if agent.prompt_input == PromptInput::Stdin && has_prompt {
                bail!(
                    "agent.command: with agent.prompt_input = \"stdin\" the message goes on stdin; remove the `{{prompt}}` token"
                );
            }
            for p in agent.writable.iter().flatten() {
                if !(p.starts_with('/') || p.starts_with("~/")) {
                    bail!("agent.writable: `{p}` must be an absolute path or start with `~/`");
                }
            }
            if agent.timeout_ms == 0 {
                bail!("agent.timeout_ms must be greater than 0");
            }
            for name in agent.pass_env.iter().flatten() {
                if name.is_empty() || name.contains('=') || name.contains('\0') {
                    bail!("agent.pass_env: `{name}` is not an environment variable name");
                }
                let exempt = name == "PATH"
                    || self.shell.unsafe_env.contains(name)
                    || crate::exec::child_env::SAFE_FROM_HOST.contains(&name.as_str());
                if let Some(why) =
                    crate::exec::child_env::dangerous_variable(name).filter(|_| !exempt)
                {
                    bail!(
                        "agent.pass_env: `{name}` {why}, so the agent could be made to run code it was not asked to; remove it, or name it in `shell.unsafe_env` to accept that"
                    );
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config> {
        Config::parse(text, Path::new("loopbox.toml"))
    }

    fn err(text: &str) -> String {
        format!("{:#}", parse(text).unwrap_err())
    }

    #[test]
    fn hide_reveal_and_tmp_bytes_stay_out_of_an_older_pin() {
        let c = parse(
            "[shell]\nhide = [\"~/secrets\", \"/opt/keys\", \".env\"]\nreveal = [\"~/.ssh\"]\n",
        )
        .unwrap();
        assert_eq!(c.shell.hide, ["~/secrets", "/opt/keys", ".env"]);
        assert_eq!(c.shell.reveal, ["~/.ssh"]);
        for bad in [
            "hide = [\"../x\"]",
            "reveal = [\"\"]",
            "hide = [\"/a/../b\"]",
        ] {
            let e = err(&format!("[shell]\n{bad}\n"));
            assert!(e.contains("is not a path loopbox can hide"), "{e}");
        }
        // A run pinned before these keys existed compares equal when they are unset.
        let shell = serde_json::to_value(&parse("").unwrap().shell).unwrap();
        for key in ["hide", "reveal", "tmp_bytes"] {
            assert!(shell.get(key).is_none(), "{key}: {shell}");
        }
        let shell =
            serde_json::to_value(&parse("[shell]\ntmp_bytes = 5\n").unwrap().shell).unwrap();
        assert_eq!(shell["tmp_bytes"], 5);
    }

    #[test]
    fn a_policy_section_is_bound_by_the_top_levels_safety_settings() {
        let c = parse(
            "[shell]\nsandbox = \"bwrap\"\ntmp_bytes = 1000\nhide = [\".env\"]\ndeny = [[\"rm\"]]\nmax_timeout_ms = 5000\n\
             [shell.rlimits]\ncpu_seconds = 10\nfile_size_bytes = 0\n\
             [policies.p]\nsource = \"p.wasm\"\n\
             [policies.p.shell]\ntmp_bytes = 5000\nhide = [\"~/k\"]\nmax_timeout_ms = 9000\n\
             [policies.p.shell.rlimits]\nfile_size_bytes = 77\n",
        )
        .unwrap();
        let s = c.scoped("p").unwrap().shell;
        // Left out of the section: the top level's, not the default.
        assert_eq!(s.sandbox, crate::exec::sandbox::SandboxChoice::Bwrap);
        assert_eq!(s.rlimits.cpu_seconds, 10);
        // Set in both: the smaller (0 is no limit).
        assert_eq!(s.tmp_bytes, 1000);
        assert_eq!(s.max_timeout_ms, 5000);
        assert_eq!(s.rlimits.file_size_bytes, 77);
        // Added to the section's.
        assert_eq!(s.hide, ["~/k", ".env"]);
        assert_eq!(s.deny, [["rm"]]);
        assert_eq!(s.section(), "policies.p.shell");
        // A stronger sandbox in the section stands.
        let c =
            parse("[policies.p]\nsource = \"p.wasm\"\n[policies.p.shell]\nsandbox = \"bwrap\"\n")
                .unwrap();
        assert_eq!(
            c.scoped("p").unwrap().shell.sandbox,
            crate::exec::sandbox::SandboxChoice::Bwrap
        );
    }

    #[test]
    fn empty_config_grants_nothing() {
        let c = parse("").unwrap();
        assert!(c.shell.allow.is_empty());
        assert!(!c.shell.scripts);
        assert!(c.agent.is_none());
        assert_eq!(c.run.max_turns, 50);
    }

    #[test]
    fn unknown_keys_are_named() {
        assert!(
            err("[shell]\nallowed = []").contains("unknown field `allowed`"),
            "{}",
            err("[shell]\nallowed = []")
        );
        assert!(err("[nope]").contains("unknown field `nope`"));
        assert!(err("[limits]\nfuel = 1").contains("unknown field `fuel`"));
    }

    #[test]
    fn bad_values_are_named() {
        assert!(err("[shell]\nscripts = \"yes\"").contains("scripts"));
        assert!(err("[shell]\nallow = [[]]").contains("shell.allow[0]"));
        assert!(err("[agent]\ncommand = [\"claude\"]").contains("{prompt}"));
        assert!(err("[run]\nmax_turns = 0").contains("run.max_turns"));
        assert!(err("[limits]\nmemory_bytes = 1").contains("limits.memory_bytes"));
        assert!(err("not toml").contains("loopbox.toml"));
    }

    #[test]
    fn a_full_config_parses() {
        let c = parse(
            r#"
            [limits]
            fuel_per_event = 1000000
            [shell]
            allow = [["cargo", "test"]]
            scripts = true
            [agent]
            command = ["claude", "-p", "{prompt}", "--output-format", "json"]
            resume = ["--resume", "{session}"]
            output = "json"
            [run]
            max_turns = 5
            "#,
        )
        .unwrap();
        assert_eq!(c.limits.fuel_per_event, 1_000_000);
        assert_eq!(c.agent.unwrap().output, AgentOutput::Json);
    }
}
