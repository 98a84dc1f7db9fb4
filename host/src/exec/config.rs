//! `[shell]` and `[agent]` of `loopbox.toml` (or `[policies.NAME.shell]` and
//! `[policies.NAME.agent]`): the grants of the programs loopbox runs for a
//! policy, the commands of its `shell` actions and the agent behind `prompt`
//! and `inject`. The sections sit beside what reads them, the rules
//! ([`super::grants`]), the sandbox, a child's environment, the agent runner,
//! all below the `actions` capability, whose per-run state
//! ([`crate::caps::actions::ActionGrants::new`]) is built from them. Each
//! section checks what serde cannot in its `validate`; [`crate::config`]
//! assembles the file and scopes the sections of `[policies.NAME]`.

use std::path::Path;

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

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

impl ShellConfig {
    /// What serde cannot check of `[shell]`; messages name the key as `shell.KEY`
    /// (a policy's section adds `in [policies.NAME]` around them).
    pub fn validate(&self) -> Result<()> {
        for (key, rules) in [
            ("allow", &self.allow),
            ("ask", &self.ask),
            ("deny", &self.deny),
            ("idempotent", &self.idempotent),
        ] {
            for (i, rule) in rules.iter().enumerate() {
                if rule.is_empty() || rule[0].is_empty() {
                    bail!(
                        "shell.{key}[{i}]: a rule needs at least a program name, e.g. [\"cargo\", \"test\"]"
                    );
                }
            }
        }
        if self.pass_env_from_policy.iter().any(|n| n == "PATH") {
            bail!(
                "shell.pass_env_from_policy: PATH would let a policy choose which program runs; remove it"
            );
        }
        for (key, names, host) in [
            ("pass_env_from_policy", &self.pass_env_from_policy, false),
            ("pass_env", &self.pass_env, true),
        ] {
            for name in names {
                let exempt = self.unsafe_env.contains(name)
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
        for name in &self.writable {
            crate::exec::sandbox::protect::check_writable(name)
                .map_err(|e| anyhow::anyhow!("shell.writable: {e}"))?;
        }
        for (key, paths) in [("hide", &self.hide), ("reveal", &self.reveal)] {
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
        if self.default_timeout_ms == 0 || self.max_timeout_ms == 0 {
            bail!("shell.default_timeout_ms and shell.max_timeout_ms must be greater than 0");
        }
        for name in self.pass_env.iter().chain(&self.pass_env_from_policy) {
            if name.is_empty() || name.contains('=') || name.contains('\0') {
                bail!("shell.pass_env: `{name}` is not an environment variable name");
            }
        }
        Ok(())
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
    /// the conversation id in `session_id` (or `session`), and what the turn used
    /// (see [`crate::spend::report`]). Claude Code's and Gemini CLI's `--output-format json`.
    Json,
    /// stdout is JSON lines, as `codex exec --json` prints them: the reply is the
    /// last agent message, the conversation the thread, the usage each turn's.
    Jsonl,
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
    /// `codex exec --json`, the message on stdin.
    Codex,
    /// `gemini --output-format json`, the message on stdin.
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
    pub(crate) fn apply_preset(&mut self) -> Result<()> {
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
            // JSON output: the turn's usage comes with the reply (see crate::spend::report).
            RunnerKind::Codex => (
                v(&["codex", "exec", "--json"]),
                vec![],
                v(&["--model", "{model}"]),
                AgentOutput::Jsonl,
                v(&["~/.codex"]),
            ),
            RunnerKind::Gemini => (
                v(&["gemini", "--output-format", "json"]),
                vec![],
                v(&["--model", "{model}"]),
                AgentOutput::Json,
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

impl AgentConfig {
    /// The program the agent runs: none for `runner = "openai"`, which talks
    /// to a server instead (the one kind of agent with no `command`).
    pub fn program(&self) -> Option<&str> {
        match self.runner {
            RunnerKind::Openai => None,
            _ => self.command.first().map(String::as_str),
        }
    }

    /// The agent in a few words, for the grants banner and `doctor`: its
    /// program, or the model and server it talks to.
    pub fn describe(&self) -> String {
        match (self.program(), &self.openai) {
            (Some(p), _) => p.to_string(),
            (None, Some(o)) => format!("openai ({} at {})", o.model, o.base_url),
            (None, None) => self.runner.name().to_string(),
        }
    }

    /// What serde cannot check of `[agent]`; `unsafe_env` is `shell.unsafe_env`
    /// beside it, which names the code-loading variables it may pass after all.
    pub fn validate(&self, unsafe_env: &[String]) -> Result<()> {
        let agent = self;
        if agent.runner == RunnerKind::Openai {
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
            // Else a command that never runs would be shown, pinned and protected as the agent.
            if !agent.command.is_empty() {
                bail!(
                    "agent.command: runner = \"openai\" talks to [agent.openai]'s server and runs no command; remove agent.command, or use runner = \"command\""
                );
            }
        }
        if agent.runner != RunnerKind::Openai {
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
                    || unsafe_env.contains(name)
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

/// Whether `name` may name an agent profile (`[agents.NAME]`): 1 to 64 of
/// `[A-Za-z0-9_-]`, not starting with `-`. A policy's `prompt-request.profile`
/// is checked against it before any lookup, so what it names is only ever a
/// key of the user's config.
pub fn profile_name_ok(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && !name.starts_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// `[agents.NAME]` resolved to whole agent sections: `[agent]` as written
/// (`agent`, absent: nothing; with a `runner` of the profile's own, without
/// `[agent]`'s command and other CLI words) with the keys the profile sets replaced, its
/// preset filled in, checked as `[agent]` is, then the profile's `args`
/// inserted after the command's fixed words (before the first `--` or
/// placeholder token). The args are the user's words: a policy only picks a
/// profile by name. Errors name `agents.NAME.KEY`.
pub fn resolve_profiles(
    agent: Option<&toml::Table>,
    profiles: &std::collections::BTreeMap<String, toml::Table>,
    unsafe_env: &[String],
) -> Result<std::collections::BTreeMap<String, AgentConfig>> {
    let mut out = std::collections::BTreeMap::new();
    for (name, table) in profiles {
        if !profile_name_ok(name) {
            bail!(
                "agents.{}: a profile's name is 1 to 64 letters, digits, `_` or `-`, not starting with `-`",
                crate::ui::shorten(&crate::ui::sanitize(name), 40)
            );
        }
        let here = |e: anyhow::Error| {
            // `[agent]`'s checks name `agent.KEY`; here the key is the profile's.
            anyhow::anyhow!(
                "{}",
                e.to_string().replace("agent.", &format!("agents.{name}."))
            )
        };
        let mut merged = agent.cloned().unwrap_or_default();
        if table.contains_key("runner") {
            // Another runner: `[agent]`'s words for its own CLI do not carry over.
            for key in [
                "command",
                "prompt_input",
                "resume",
                "model",
                "output",
                "writable",
                "openai",
            ] {
                merged.remove(key);
            }
        }
        let mut args = Vec::new();
        for (key, value) in table {
            if key == "max_prompts" {
                bail!(
                    "agents.{name}.max_prompts: a run has one prompt budget for every profile, agent.max_prompts; remove it here"
                );
            }
            if key == "args" {
                args = Vec::<String>::deserialize(value.clone())
                    .map_err(|e| anyhow::anyhow!("agents.{name}.args: {e}"))?;
                continue;
            }
            // Each key alone, so an unknown key or a bad value names itself.
            let one: toml::Table = [(key.clone(), value.clone())].into_iter().collect();
            AgentConfig::deserialize(toml::Value::Table(one)).map_err(|e| {
                anyhow::anyhow!(
                    "agents.{name}.{key}: {}; a profile takes the keys of [agent] and `args`",
                    e.to_string().trim_end()
                )
            })?;
            merged.insert(key.clone(), value.clone());
        }
        if agent.is_none() && !table.contains_key("runner") && !table.contains_key("command") {
            bail!(
                "agents.{name}: there is no [agent] section to build on, so the profile needs `runner` or `command` of its own"
            );
        }
        let mut config = AgentConfig::deserialize(toml::Value::Table(merged))
            .map_err(|e| anyhow::anyhow!("agents.{name}: {}", e.to_string().trim_end()))?;
        config.apply_preset().map_err(here)?;
        config.validate(unsafe_env).map_err(here)?;
        if !args.is_empty() {
            if config.runner == RunnerKind::Openai {
                bail!(
                    "agents.{name}.args: runner = \"openai\" runs no command, so it takes no args; remove them"
                );
            }
            let at = config
                .command
                .iter()
                .enumerate()
                .skip(1)
                .find(|(_, t)| *t == "--" || t.contains('{'))
                .map_or(config.command.len(), |(i, _)| i);
            config.command.splice(at..at, args);
        }
        out.insert(name.clone(), config);
    }
    Ok(out)
}

impl AgentConfig {
    /// The provider hosts an agent needs (`network.agent_preset`): its CLI's
    /// provider, or for `openai` the host and port of its `base_url`, which the
    /// config names exactly (a private address among them too, as a rule naming
    /// it would; never on a server unless its operator allows it).
    pub fn preset_hosts(&self) -> Vec<String> {
        let agent = self;
        let fixed: &[&str] = match agent.runner {
            RunnerKind::Claude => &[
                "api.anthropic.com:443",
                "statsig.anthropic.com:443",
                "console.anthropic.com:443",
                "claude.ai:443",
            ],
            RunnerKind::Codex => &[
                "api.openai.com:443",
                "chatgpt.com:443",
                "auth.openai.com:443",
            ],
            RunnerKind::Gemini => &[
                "generativelanguage.googleapis.com:443",
                "cloudcode-pa.googleapis.com:443",
                "oauth2.googleapis.com:443",
                "www.googleapis.com:443",
            ],
            RunnerKind::Openai => {
                return agent
                    .openai
                    .as_ref()
                    .and_then(|o| Self::base_url_destination(&o.base_url))
                    .into_iter()
                    .collect();
            }
            RunnerKind::Command => &[],
        };
        fixed.iter().map(|h| h.to_string()).collect()
    }

    /// `host:port` of an `http(s)://` URL (IPv6 in brackets), None if it has no host.
    fn base_url_destination(url: &str) -> Option<String> {
        let uri: http::Uri = url.parse().ok()?;
        let host = uri.host()?;
        let port = uri
            .port_u16()
            .unwrap_or(if uri.scheme_str() == Some("http") {
                80
            } else {
                443
            });
        Some(format!("{host}:{port}"))
    }
}

#[cfg(test)]
mod profile_tests {
    use crate::config::Config;

    fn parse(text: &str) -> anyhow::Result<Config> {
        Config::parse(text, std::path::Path::new("loopbox.toml"))
    }

    #[test]
    fn a_profile_is_the_agent_section_with_its_keys_replaced_and_its_args_inserted() {
        let c = parse(
            "[agent]\ncommand = [\"agent\", \"-p\", \"--\", \"{prompt}\"]\ntier = \"allow\"\ntimeout_ms = 5000\n\n\
             [agents.slow]\ntimeout_ms = 9000\ntier = \"ask\"\nargs = [\"--agent\", \"slow\"]\n\n\
             [agents.claude-one]\nrunner = \"claude\"\nargs = [\"--agent\", \"x\"]\n",
        )
        .unwrap();
        let slow = &c.profiles["slow"];
        assert_eq!(
            slow.command,
            ["agent", "-p", "--agent", "slow", "--", "{prompt}"]
        );
        assert_eq!((slow.timeout_ms, slow.tier), (9000, super::PromptTier::Ask));
        // `[agent]` itself is untouched.
        assert_eq!(c.agent.as_ref().unwrap().command.len(), 4);
        // A preset fills the command first; stdin input: the args go last.
        let claude = &c.profiles["claude-one"];
        assert_eq!(
            claude.command,
            ["claude", "-p", "--output-format", "json", "--agent", "x"]
        );
        assert_eq!(claude.writable.as_deref().unwrap()[0], "~/.claude");
    }

    #[test]
    fn profile_errors_name_the_profile_and_key() {
        let cases = [
            (
                "[agent]\ncommand = [\"a\", \"{prompt}\"]\n[agents.x]\nnope = 1\n",
                "agents.x.nope: unknown field `nope`",
            ),
            (
                "[agent]\ncommand = [\"a\", \"{prompt}\"]\n[agents.x]\ntimeout_ms = \"soon\"\n",
                "agents.x.timeout_ms: ",
            ),
            (
                "[agent]\ncommand = [\"a\", \"{prompt}\"]\n[agents.x]\nargs = \"--agent\"\n",
                "agents.x.args: ",
            ),
            (
                "[agent]\ncommand = [\"a\", \"{prompt}\"]\n[agents.x]\ncommand = [\"b\"]\n",
                "agents.x.command: no token holds `{prompt}`",
            ),
            (
                "[agent]\ncommand = [\"a\", \"{prompt}\"]\n[agents.\"-x\"]\nargs = []\n",
                "agents.-x: a profile's name is 1 to 64",
            ),
            (
                "[agents.x]\nargs = [\"--agent\", \"x\"]\n",
                "agents.x: there is no [agent] section to build on",
            ),
            (
                "[agent]\nrunner = \"claude\"\n[agents.x]\nmax_prompts = 5\n",
                "agents.x.max_prompts: ",
            ),
        ];
        for (text, want) in cases {
            let e = format!("{:#}", parse(text).unwrap_err());
            assert!(e.contains(want), "{text}\n{e}");
        }
        // Complete on its own without `[agent]`.
        let c = parse("[agents.x]\ncommand = [\"b\", \"{prompt}\"]\n").unwrap();
        assert!(c.agent.is_none() && c.profiles["x"].command == ["b", "{prompt}"]);
    }
}
