//! The agent runner: sends a message to the agent the user configured and
//! reads its reply and conversation id, so the next message continues the
//! same conversation.
//!
//! - CLI agents (`runner = "command"` or a preset: `claude`, `codex`, `gemini`):
//!   an argv template, never through a shell, run inside the OS sandbox with
//!   the network allowed and the protected paths read-only. The message goes on
//!   stdin (presets) or as the `{prompt}` argument; placeholders are filled in
//!   the template only, a message that would be read as an option is refused,
//!   and a session id or model name must be a plain word.
//! - `openai`: an OpenAI-compatible chat-completions server. The conversation
//!   of each session id is kept in the run store, so a later process (a
//!   resumed run, the next hook) continues it. The API key is read from the
//!   environment variable the config names; the config never holds it.
//!
//! Every reply comes with its [`Charge`]: what the agent reported it used
//! (`crate::spend::report`), priced from `[prices]` when it reports no cost.
//! Given the dollars a run has left, the `claude` preset passes them as
//! `--max-budget-usd`, so Claude Code itself stops a turn that would spend
//! past them after its current model call.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::db::Db;
use crate::exec::child_env::ChildEnv;
use crate::exec::config::{AgentConfig, AgentOutput, OpenAiConfig, PromptInput, RunnerKind};
use crate::exec::process::{self, Finished, Spec};
use crate::exec::sandbox::{Confines, LazySandbox, Prepared};
use crate::spend::price::{self, Prices};
use crate::spend::{Charge, Usage, report};

#[derive(Clone)]
pub struct AgentRunner {
    config: AgentConfig,
    env: ChildEnv,
    output_cap: usize,
    db: Db,
    sandbox: Option<std::sync::Arc<AgentSandbox>>,
    /// The agent program and its identity when the runner was made: a program
    /// changed since (by anything) is not run.
    program: Option<(std::path::PathBuf, String)>,
    /// `[prices]`, for replies that report tokens but no cost.
    prices: std::sync::Arc<Prices>,
    /// The run whose agent this is: its conversations are saved as its writes (fenced).
    run: Option<String>,
}

/// Where the agent CLI runs: the run's sandbox, with the agent's own confines.
pub struct AgentSandbox {
    pub sandbox: LazySandbox,
    pub confines: Confines,
}

/// One message to the agent.
#[derive(Debug, Clone, Default)]
pub struct AgentRequest<'a> {
    pub text: &'a str,
    pub model: Option<&'a str>,
    pub session: Option<&'a str>,
    pub timeout: Option<Duration>,
    /// Where the agent runs, already checked to be inside the workspace; the
    /// workspace root when `None`.
    pub cwd: Option<&'a std::path::Path>,
    /// Read-only for this message besides the run's protected set: the `.git`
    /// files of the git worktrees the run holds.
    pub protected: &'a [crate::exec::sandbox::protect::Protected],
    /// Dollars the run may still spend (`run.max_cost_usd`): the `claude` preset
    /// passes them as `--max-budget-usd`.
    pub budget_usd: Option<f64>,
}

/// What the agent answered.
#[derive(Debug, Clone)]
pub struct AgentReply {
    /// The CLI's process (for HTTP agents, a synthesized record of the request).
    pub process: Finished,
    /// The reply text: all of stdout, or the `result` field for JSON output.
    pub text: String,
    pub session: Option<String>,
    /// What the turn used and cost, as the agent reported it.
    pub charge: Charge,
}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(
        "the agent command `{program}` was not found (agent.command[0]; looked in shell.path = `{path}`)"
    )]
    NotFound { program: String, path: String },
    #[error("failed to start the agent `{program}`: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("the agent did not answer within {0:?} (agent.timeout_ms)")]
    TimedOut(Duration),
    #[error("the agent server failed: {0}")]
    Http(String),
    #[error("{0}")]
    Refused(String),
}

impl AgentError {
    /// Its class, as telemetry's `error.type` (low cardinality).
    pub fn kind(&self) -> &'static str {
        match self {
            AgentError::NotFound { .. } => "not_found",
            AgentError::Spawn { .. } => "spawn",
            AgentError::TimedOut(_) => "timeout",
            AgentError::Http(_) => "http",
            AgentError::Refused(_) => "refused",
        }
    }
}

/// The host variables `shell.pass_env` passes by default, which hold no secret.
const PLAIN_VARIABLES: &[&str] = &["HOME", "LANG", "TERM"];

static PASS_ENV_WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The environment the agent gets: `agent.pass_env` when the config has it, else
/// (as before that key existed) the commands' `shell.pass_env`, with a warning
/// once per process when that hands the agent more than the plain variables,
/// since the same keys then reach every command too.
fn agent_env(config: &AgentConfig, commands: ChildEnv) -> ChildEnv {
    if let Some(own) = &config.pass_env {
        return commands.with_pass_env(own);
    }
    if config.runner == RunnerKind::Openai {
        // No process: the key comes from agent.openai.api_key_env.
        return commands;
    }
    let extra: Vec<&str> = commands
        .passed_names()
        .filter(|n| !PLAIN_VARIABLES.contains(n))
        .collect();
    if !extra.is_empty() && !PASS_ENV_WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        let mut list: Vec<String> = PLAIN_VARIABLES.iter().map(|v| format!("\"{v}\"")).collect();
        list.extend(extra.iter().map(|v| format!("\"{v}\"")));
        crate::errln!(
            "warning: the agent has no pass_env of its own, so it gets shell.pass_env ({}) as before, and so does every command the policy runs. \
             Give the agent its keys alone with `pass_env = [{}]` in its [agent] section, and keep in shell.pass_env only what commands need; \
             a later release passes the agent only its own pass_env",
            extra.join(", "),
            list.join(", ")
        );
    }
    commands
}

impl AgentRunner {
    /// `sandbox`: where the CLI runs (None: unconfined, for tests of the template).
    /// `env` is the commands' environment (`shell.pass_env`); the agent's own
    /// variables come from `agent.pass_env` (see [`agent_env`]).
    pub fn new(
        config: AgentConfig,
        env: ChildEnv,
        output_cap: usize,
        db: Db,
        sandbox: Option<AgentSandbox>,
    ) -> AgentRunner {
        let env = agent_env(&config, env);
        let program = (config.runner != RunnerKind::Openai)
            .then(|| env.resolve_program(&config.command[0], env.root()))
            .flatten()
            .and_then(|p| program_identity(&p).map(|d| (p, d)));
        AgentRunner {
            config,
            env,
            output_cap,
            db,
            sandbox: sandbox.map(std::sync::Arc::new),
            program,
            prices: Default::default(),
            run: None,
        }
    }

    /// The agent of run `id`: what it saves in the store is that run's write.
    pub fn for_run(mut self, id: &str) -> AgentRunner {
        self.run = Some(id.to_string());
        self
    }

    /// Price replies that report tokens but no cost with `prices` (`[prices]`).
    pub fn with_prices(mut self, prices: std::sync::Arc<Prices>) -> AgentRunner {
        self.prices = prices;
        self
    }

    /// A reply's charge: its usage priced, or unmetered when it reported none.
    fn charge(&self, usage: Option<Usage>, model: Option<&str>) -> Charge {
        match usage {
            Some(u) => price::charge(&u, &self.prices, model),
            None => Charge::unmetered(),
        }
    }

    pub fn config(&self) -> &AgentConfig {
        &self.config
    }

    /// Who a turn goes to, for its telemetry (`profile`: the `[agents.NAME]` a
    /// prompt named; `model`: the model it asked for).
    pub fn invocation(
        &self,
        profile: Option<&str>,
        model: Option<&str>,
    ) -> crate::telemetry::Invocation {
        crate::telemetry::Invocation::new(
            self.config.runner.name(),
            self.config.command.first().map(String::as_str),
            profile,
            model,
        )
    }

    /// The argv for a request: the template filled in, then resume and model
    /// arguments; or why the request may not be sent.
    pub fn argv(&self, req: &AgentRequest<'_>) -> Result<Vec<String>, String> {
        for (what, value) in [("session id", req.session), ("model name", req.model)] {
            if let Some(v) = value.filter(|v| !plain_word(v)) {
                return Err(format!(
                    "the {what} `{}` is not a plain word (letters, digits and `._:/@-`, not starting with `-`), so it could reach the agent as an option",
                    crate::ui::shorten(&crate::ui::sanitize(v), 40)
                ));
            }
        }
        let values = [
            ("{prompt}", Some(req.text)),
            ("{model}", req.model),
            ("{session}", req.session),
        ];
        let mut argv = Vec::new();
        let mut options_ended = false;
        for (i, token) in self.config.command.iter().enumerate() {
            // A message starting with `-` in a token of its own, before any `--`,
            // would be an option of the agent.
            if i > 0 && token == "{prompt}" && !options_ended && req.text.starts_with('-') {
                return Err(format!(
                    "the message starts with `-` and agent.command passes it as an argument before `--`, where the agent would read it as an option; put \"--\" before \"{{prompt}}\" in agent.command, or use agent.prompt_input = \"stdin\" (message: `{}`)",
                    crate::ui::shorten(&crate::ui::sanitize(req.text), 40)
                ));
            }
            options_ended |= token == "--";
            argv.extend(fill(token, &values));
        }
        let tail = |templates: &[String], key: &str, value: &str| -> Vec<String> {
            templates
                .iter()
                .filter_map(|t| fill(t, &[(key, Some(value))]))
                .collect()
        };
        // Resume and model arguments are options: they go before a `--` in the command.
        let at = argv.iter().position(|a| a == "--").unwrap_or(argv.len());
        let mut extra = Vec::new();
        if let Some(session) = req.session {
            extra.extend(tail(&self.config.resume, "{session}", session));
        }
        if let Some(model) = req.model {
            extra.extend(tail(&self.config.model, "{model}", model));
        }
        if let Some(left) = req.budget_usd
            && self.config.runner == RunnerKind::Claude
        {
            extra.extend(["--max-budget-usd".to_string(), format!("{left:.4}")]);
        }
        argv.splice(at..at, extra);
        Ok(argv)
    }

    fn timeout(&self, asked: Option<Duration>) -> Duration {
        let max = Duration::from_millis(self.config.timeout_ms);
        asked.map_or(max, |t| t.min(max))
    }

    pub async fn send(&self, req: AgentRequest<'_>) -> Result<AgentReply, AgentError> {
        match (&self.config.runner, &self.config.openai) {
            (RunnerKind::Openai, Some(openai)) => {
                let call = Chat {
                    cfg: openai.clone(),
                    proxy: self.openai_proxy()?,
                    host: self.env.host().clone(),
                    db: self.db.clone(),
                    run: self.run.clone(),
                    timeout: self.timeout(req.timeout),
                    cap: self.output_cap,
                };
                let (text, model, session) = (
                    req.text.to_string(),
                    req.model.map(String::from),
                    req.session.map(String::from),
                );
                let (mut reply, usage) = tokio::task::spawn_blocking(move || {
                    chat(&call, &text, model.as_deref(), session.as_deref())
                })
                .await
                .map_err(|e| AgentError::Http(format!("the request task failed: {e}")))??;
                reply.charge = self.charge(usage, req.model.or(Some(openai.model.as_str())));
                Ok(reply)
            }
            _ => self.send_cli(req).await,
        }
    }

    /// Where the `openai` runner's requests go out: the run's proxy, on its
    /// agent side. loopbox makes them itself, outside any sandbox, so they
    /// pass the same rules and records as a CLI agent's connections.
    fn openai_proxy(&self) -> Result<Option<String>, AgentError> {
        let Some(sandbox) = &self.sandbox else {
            return Ok(None);
        };
        let Some(side) = &sandbox.confines.egress else {
            return Err(AgentError::Refused(
                "the openai agent may reach no host: allow its base_url's host and port in `network.allow` (or keep `network.agent_preset`, which allows it)".into(),
            ));
        };
        let e = side.endpoint().map_err(AgentError::Refused)?;
        Ok(Some(format!(
            "http://loopbox:{}@127.0.0.1:{}",
            e.token, e.port
        )))
    }

    async fn send_cli(&self, req: AgentRequest<'_>) -> Result<AgentReply, AgentError> {
        let argv = self.argv(&req).map_err(AgentError::Refused)?;
        let cwd = req.cwd.unwrap_or(self.env.root()).to_path_buf();
        let program =
            // From the root, as when the runner pinned it, wherever the agent runs.
            self.env
                .resolve_program(&argv[0], self.env.root())
                .ok_or_else(|| AgentError::NotFound {
                    program: argv[0].clone(),
                    path: self.env.path_var().to_string(),
                })?;
        if let Some((pinned, identity)) = &self.program
            && (&program != pinned || program_identity(&program).as_ref() != Some(identity))
        {
            return Err(AgentError::Refused(format!(
                "the agent program `{}` changed since the run started, so it is not run; if you changed it, start the run again",
                program.display()
            )));
        }
        let stdin = (self.config.prompt_input == PromptInput::Stdin).then(|| req.text.to_string());
        let (arg0, args) = (Some(argv[0].clone()), argv[1..].to_vec());
        let p = match &self.sandbox {
            Some(s) => {
                moved_state(&s.confines.writable_outside).map_err(AgentError::Refused)?;
                let with_open;
                let confines = if req.protected.is_empty() {
                    &s.confines
                } else {
                    let mut c = s.confines.clone();
                    c.protected.extend(req.protected.iter().cloned());
                    with_open = c;
                    &with_open
                };
                confines
                    .prepare(s.sandbox.get(), program, arg0, args, &cwd)
                    .map_err(|why| {
                        AgentError::Refused(format!(
                            "the agent runs only inside the OS sandbox, and it cannot be set up: {why}"
                        ))
                    })?
            }
            None => Prepared::unconfined(program, arg0, args),
        };
        let spec = Spec {
            program: p.program,
            arg0: p.arg0,
            args: p.args,
            cwd,
            env: self.env.vars(&p.env),
            stdin,
            timeout: self.timeout(req.timeout),
            output_cap: self.output_cap,
            rlimits: None,
            confinement: p.confinement,
            pass_fd: p.pass_fd,
            net: p.net,
        };
        // The private temp dir and the placeholders live until the agent is done.
        let _keep = (p._tmp, p._hold);
        let process = process::run(spec)
            .await
            .map_err(|source| AgentError::Spawn {
                program: argv[0].clone(),
                source,
            })?;
        let (text, session, usage) = parse_reply(self.config.output, &process.stdout);
        Ok(AgentReply {
            process,
            text,
            session,
            charge: self.charge(usage, req.model),
        })
    }
}

/// Refuse a turn when one of the agent's writable paths (resolved when the run
/// began) now leads elsewhere: a link planted since, by the agent or a command,
/// would have the sandbox bind what it points at writable.
fn moved_state(writable: &[std::path::PathBuf]) -> Result<(), String> {
    for p in writable {
        if std::fs::symlink_metadata(p).is_err() {
            continue;
        }
        match p.canonicalize() {
            Ok(real) if &real == p => {}
            Ok(real) => {
                return Err(format!(
                    "the agent's writable `{}` leads to `{}` since the run started, and a link is never followed there; remove the link and resume",
                    p.display(),
                    real.display()
                ));
            }
            Err(e) => return Err(format!("the agent's writable `{}`: {e}", p.display())),
        }
    }
    Ok(())
}

/// What one chat-completions exchange is sent with: the runner's section, where
/// its API key variable is read, the store keeping conversations, its bounds.
struct Chat {
    cfg: OpenAiConfig,
    /// The run's egress proxy, as `http://loopbox:TOKEN@127.0.0.1:PORT`: the
    /// request is decided by the run's `[network]` rules like any agent's
    /// (None: no sandbox, only in tests of the runner itself).
    proxy: Option<String>,
    host: crate::exec::child_env::HostEnv,
    db: Db,
    run: Option<String>,
    timeout: Duration,
    cap: usize,
}

/// A new conversation's id: 128 random bits, so one tenant's policy cannot
/// guess another's (the store also keeps each tenant's apart).
fn new_session_id() -> Result<String, AgentError> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 16];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| AgentError::Http("the system's random source failed".into()))?;
    Ok(format!(
        "oa-{}",
        bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
    ))
}

/// Whether `id` is spelled as [`new_session_id`] makes them.
fn is_session_id(id: &str) -> bool {
    id.strip_prefix("oa-")
        .is_some_and(|h| !h.is_empty() && h.len() <= 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// One chat-completions exchange in a conversation kept in the store, with
/// the response's `usage` (priced by the caller).
fn chat(
    call: &Chat,
    text: &str,
    model: Option<&str>,
    session: Option<&str>,
) -> Result<(AgentReply, Option<Usage>), AgentError> {
    let Chat {
        cfg,
        proxy,
        host,
        db,
        run,
        timeout,
        cap,
    } = call;
    let (timeout, cap) = (*timeout, *cap);
    let started = Instant::now();
    let (session, mut messages) = match session {
        Some(id) => {
            // Only an id this runner made: never a key of the store's own spelling.
            let history = if is_session_id(id) {
                db.conversation(run.as_deref(), id).map_err(|e| {
                    AgentError::Http(format!("cannot read conversation `{id}`: {e:#}"))
                })?
            } else {
                None
            };
            let history = history.ok_or_else(|| {
                AgentError::Http(format!("there is no conversation `{id}` to continue"))
            })?;
            (
                id.to_string(),
                serde_json::from_str::<Vec<Value>>(&history).map_err(|e| {
                    AgentError::Http(format!("conversation `{id}` is corrupt: {e}"))
                })?,
            )
        }
        None => {
            let id = new_session_id()?;
            let mut m = Vec::new();
            if let Some(system) = &cfg.system {
                m.push(json!({"role": "system", "content": system}));
            }
            (id, m)
        }
    };
    messages.push(json!({"role": "user", "content": text}));
    let mut body = json!({"model": model.unwrap_or(&cfg.model), "messages": messages});
    if let Some(n) = cfg.max_tokens {
        body["max_tokens"] = json!(n);
    }

    let proxy = match proxy {
        Some(p) => Some(
            ureq::Proxy::new(p)
                .map_err(|e| AgentError::Http(format!("the run's network proxy: {e}")))?,
        ),
        None => None,
    };
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        // Never the proxy of loopbox's own environment: the run's, or none.
        .proxy(proxy)
        .build()
        .into();
    let url = format!("{}/chat/completions", cfg.base_url.trim_end_matches('/'));
    let mut request = agent.post(&url).header("Content-Type", "application/json");
    if let Some(var) = &cfg.api_key_env {
        let key = host.var(var).ok_or_else(|| {
            AgentError::Http(format!(
                "environment variable `{var}` (agent.openai.api_key_env) is not set"
            ))
        })?;
        request = request.header("Authorization", &format!("Bearer {key}"));
    }
    let mut response = match request.send_json(&body) {
        Ok(r) => r,
        Err(ureq::Error::Timeout(_)) => return Err(AgentError::TimedOut(timeout)),
        // A refused CONNECT (an https base_url) surfaces as the proxy's failure.
        Err(e @ ureq::Error::ConnectProxyFailed(_)) => {
            return Err(AgentError::Refused(format!(
                "the run's network rules refused {url} ({e}): the run log's `network:` line says which rule"
            )));
        }
        Err(e) => return Err(AgentError::Http(format!("{url}: {e}"))),
    };
    let status = response.status();
    if let Some(why) = response.headers().get("x-loopbox-refused") {
        return Err(AgentError::Refused(format!(
            "the run's network rules refused {url}: {}",
            why.to_str().unwrap_or("(unreadable)")
        )));
    }
    let raw = response.body_mut().read_to_string().map_err(|e| match e {
        ureq::Error::Timeout(_) => AgentError::TimedOut(timeout),
        e => AgentError::Http(format!("{url}: reading the answer failed: {e}")),
    })?;
    if !status.is_success() {
        return Err(AgentError::Http(format!(
            "{url} answered {status}: {}",
            crate::ui::shorten(raw.trim(), 300)
        )));
    }
    let v: Value = serde_json::from_str(&raw)
        .map_err(|e| AgentError::Http(format!("{url} answered with invalid JSON: {e}")))?;
    let reply = v["choices"][0]["message"]["content"]
        .as_str()
        .ok_or_else(|| {
            AgentError::Http(format!("{url} answered with no choices[0].message.content"))
        })?
        .to_string();
    messages.push(json!({"role": "assistant", "content": reply}));
    db.save_conversation(
        run.as_deref(),
        &session,
        &Value::Array(messages).to_string(),
    )
    .map_err(|e| AgentError::Http(format!("cannot save conversation `{session}`: {e:#}")))?;

    let truncated = reply.len() > cap;
    let mut text = reply;
    if truncated {
        let mut end = cap;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    let process = Finished {
        exit_code: Some(0),
        stdout: text.clone(),
        stderr: String::new(),
        duration: started.elapsed(),
        timed_out: false,
        truncated,
    };
    Ok((
        AgentReply {
            process,
            text,
            session: Some(session),
            charge: Charge::unmetered(),
        },
        report::openai(&v),
    ))
}

/// The identity of the program file `path` resolves to: device, inode, size and
/// change time. Replacing the file changes its inode, and any write, truncation
/// or `chmod` sets its change time, which no unprivileged process can set back;
/// a stat, where hashing an agent CLI (a 200 MB single-file binary) would cost
/// every hook event a few hundred milliseconds.
pub fn program_identity(path: &std::path::Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok().filter(|m| m.is_file())?;
    Some(format!(
        "{}:{}:{}:{}.{:09}",
        m.dev(),
        m.ino(),
        m.len(),
        m.ctime(),
        m.ctime_nsec()
    ))
}

/// `template` with each placeholder replaced by its value in one pass (a value
/// is never searched for placeholders); None when a placeholder it holds has none.
fn fill(template: &str, values: &[(&str, Option<&str>)]) -> Option<String> {
    let mut out = String::new();
    let mut rest = template;
    'scan: while !rest.is_empty() {
        for (key, value) in values {
            if let Some(after) = rest.strip_prefix(key) {
                out.push_str((*value)?);
                rest = after;
                continue 'scan;
            }
        }
        let c = rest.chars().next().expect("not empty");
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    Some(out)
}

/// A session id or model name that cannot be an option or smuggle anything:
/// `claude-sonnet-4.5`, `gpt-4o`, a UUID, `models/gemini-2.5-pro`.
fn plain_word(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= 200
        && !v.starts_with('-')
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || "._:/@-[]".contains(c))
}

/// The reply text, session id and usage from an agent's stdout.
pub fn parse_reply(format: AgentOutput, stdout: &str) -> (String, Option<String>, Option<Usage>) {
    match format {
        AgentOutput::Text => (stdout.trim_end_matches('\n').to_string(), None, None),
        AgentOutput::Jsonl => report::codex_events(stdout),
        AgentOutput::Json => {
            // Some CLIs print progress lines before the result: take the last JSON object line.
            let value = serde_json::from_str::<Value>(stdout.trim())
                .ok()
                .or_else(|| {
                    stdout.lines().rev().find_map(|l| {
                        serde_json::from_str::<Value>(l.trim())
                            .ok()
                            .filter(Value::is_object)
                    })
                });
            match value {
                Some(v) => {
                    let text = ["result", "response", "text", "content"]
                        .iter()
                        .find_map(|k| v.get(*k).and_then(Value::as_str))
                        .unwrap_or_default()
                        .to_string();
                    let session = ["session_id", "sessionId", "session"]
                        .iter()
                        .find_map(|k| v.get(*k).and_then(Value::as_str))
                        .map(String::from);
                    (
                        text,
                        session,
                        largest_report(stdout).or_else(|| report::json_object(&v)),
                    )
                }
                None => (stdout.trim_end_matches('\n').to_string(), None, None),
            }
        }
    }
}

/// The usage an agent's stdout reports, when more than one line reports one:
/// the largest (an unknown cost counting as the largest). An agent prints one
/// result; a second can only come from something else writing to its stdout
/// (a process of its tools reopening it through `/proc`), and taking the last
/// would let that lower what the turn is charged.
fn largest_report(stdout: &str) -> Option<Usage> {
    let reports: Vec<Usage> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
        .filter(Value::is_object)
        .filter_map(|v| report::json_object(&v))
        .collect();
    if reports.len() < 2 {
        return None;
    }
    reports.into_iter().max_by(|a, b| {
        let key = |u: &Usage| (u.cost_usd.unwrap_or(f64::INFINITY), u.tokens().total());
        let (ka, kb) = (key(a), key(b));
        ka.0.total_cmp(&kb.0).then(ka.1.cmp(&kb.1))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn a_second_report_on_the_agents_stdout_never_lowers_the_turns_charge() {
        let real = r#"{"type":"result","result":"done","session_id":"s","total_cost_usd":5.0,"usage":{"input_tokens":1000,"output_tokens":500}}"#;
        let forged = r#"{"type":"result","result":"done","session_id":"s","total_cost_usd":0.0,"usage":{"input_tokens":1,"output_tokens":1}}"#;
        for out in [format!("{real}\n{forged}\n"), format!("{forged}\n{real}\n")] {
            let (text, _, usage) = parse_reply(AgentOutput::Json, &out);
            let u = usage.unwrap();
            assert_eq!((text.as_str(), u.cost_usd), ("done", Some(5.0)), "{out}");
            assert_eq!(u.tokens().total(), 1500);
        }
        // A report of unknown cost beside a known one: unknown, which stops a cost budget.
        let unknown = r#"{"modelUsage":{"m":{"inputTokens":1,"outputTokens":1}}}"#;
        let (_, _, usage) = parse_reply(AgentOutput::Json, &format!("{real}\n{unknown}\n"));
        assert_eq!(usage.unwrap().cost_usd, None);
        // One report, as agents print: as before.
        let (_, _, usage) = parse_reply(AgentOutput::Json, real);
        assert_eq!(usage.unwrap().cost_usd, Some(5.0));
    }

    #[test]
    fn json_replies_carry_text_and_session() {
        let (t, s, _) = parse_reply(
            AgentOutput::Json,
            r#"{"type":"result","result":"hi <promise>X</promise>","session_id":"abc"}"#,
        );
        assert_eq!(
            (t.as_str(), s.as_deref()),
            ("hi <promise>X</promise>", Some("abc"))
        );
        let (t, s, _) = parse_reply(
            AgentOutput::Json,
            "progress...\n{\"response\":\"ok\",\"session\":\"s2\"}\n",
        );
        assert_eq!((t.as_str(), s.as_deref()), ("ok", Some("s2")));
        let (t, s, _) = parse_reply(AgentOutput::Json, "not json");
        assert_eq!((t.as_str(), s), ("not json", None));
    }

    /// Each agent's recorded output (`tests/fixtures/usage/`, each citing where
    /// its format is documented) gives the reply, the session and what the turn
    /// used and cost, as the fixture expects.
    #[test]
    fn every_agents_recorded_output_is_read_with_its_usage() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/usage");
        let mut seen = 0;
        for name in ["claude-code", "codex", "gemini", "openai"] {
            let f: Value = serde_json::from_str(
                &std::fs::read_to_string(dir.join(format!("{name}.json"))).unwrap(),
            )
            .unwrap();
            let stdout = f["stdout"].as_str().unwrap();
            let (text, session, usage) = match f["output"].as_str().unwrap() {
                "json" => parse_reply(AgentOutput::Json, stdout),
                "jsonl" => parse_reply(AgentOutput::Jsonl, stdout),
                _ => {
                    let v: Value = serde_json::from_str(stdout).unwrap();
                    let text = v["choices"][0]["message"]["content"]
                        .as_str()
                        .unwrap()
                        .to_string();
                    (text, None, report::openai(&v))
                }
            };
            let prices: Prices = serde_json::from_value(f["prices"].clone()).unwrap_or_default();
            let charge = price::charge(&usage.expect(name), &prices, f["model"].as_str());
            let e = &f["expect"];
            assert_eq!(text, e["text"].as_str().unwrap(), "{name}");
            assert_eq!(session.as_deref(), e["session"].as_str(), "{name}");
            assert_eq!(charge.model.as_deref(), e["model"].as_str(), "{name}");
            assert_eq!(
                serde_json::to_value(charge.tokens).unwrap(),
                e["tokens"],
                "{name}"
            );
            assert_eq!(
                serde_json::to_value(charge.source).unwrap(),
                e["cost_source"],
                "{name}"
            );
            let (got, want) = (charge.cost_usd.unwrap(), e["cost_usd"].as_f64().unwrap());
            assert!((got - want).abs() < 1e-9, "{name}: {got} != {want}");
            seen += 1;
        }
        assert_eq!(seen, 4);
        // A plain-text agent reports nothing: its turns are unmetered.
        assert!(parse_reply(AgentOutput::Text, "done").2.is_none());
    }

    fn runner(toml: &str) -> AgentRunner {
        let config = Config::parse(toml, std::path::Path::new("t.toml")).unwrap();
        let db = Db::open(std::path::Path::new(":memory:")).unwrap();
        AgentRunner::new(
            config.agent.unwrap(),
            crate::exec::config::ShellConfig::default().child_env(std::path::Path::new("/")),
            100,
            db,
            None,
        )
    }

    fn argv(
        r: &AgentRunner,
        text: &str,
        session: Option<&str>,
        model: Option<&str>,
    ) -> Result<Vec<String>, String> {
        r.argv(&AgentRequest {
            text,
            session,
            model,
            ..Default::default()
        })
    }

    #[test]
    fn presets_send_the_message_on_stdin() {
        let r = runner("[agent]\nrunner = \"claude\"");
        assert_eq!(r.config().prompt_input, PromptInput::Stdin);
        assert_eq!(
            argv(&r, "--dangerously-skip-permissions", None, None).unwrap(),
            ["claude", "-p", "--output-format", "json"]
        );
        assert_eq!(
            argv(&r, "x", Some("s-1"), Some("m")).unwrap(),
            [
                "claude",
                "-p",
                "--output-format",
                "json",
                "--resume",
                "s-1",
                "--model",
                "m"
            ]
        );
        assert_eq!(
            argv(&runner("[agent]\nrunner = \"codex\""), "x", None, None).unwrap(),
            ["codex", "exec", "--json"]
        );
        assert_eq!(
            argv(&runner("[agent]\nrunner = \"gemini\""), "x", None, None).unwrap(),
            ["gemini", "--output-format", "json"]
        );
        // What the run has left of run.max_cost_usd reaches Claude Code as its own budget.
        let left = |r: &AgentRunner| {
            r.argv(&AgentRequest {
                text: "x",
                budget_usd: Some(0.123456),
                ..Default::default()
            })
            .unwrap()
        };
        assert_eq!(
            left(&r),
            [
                "claude",
                "-p",
                "--output-format",
                "json",
                "--max-budget-usd",
                "0.1235"
            ]
        );
        assert_eq!(
            left(&runner("[agent]\nrunner = \"codex\"")),
            ["codex", "exec", "--json"],
            "only Claude Code has a budget flag"
        );
        let e = Config::parse(
            "[agent]\nrunner = \"claude\"\ncommand = [\"x\", \"{prompt}\"]",
            std::path::Path::new("t.toml"),
        )
        .unwrap_err();
        assert!(
            format!("{e:#}").contains("sets the command itself"),
            "{e:#}"
        );
    }

    #[test]
    fn values_never_become_options_or_placeholders() {
        let r = runner(
            "[agent]\ncommand = [\"my-agent\", \"--model={model}\", \"{prompt}\"]\nresume = [\"--resume\", \"{session}\"]",
        );
        assert!(
            argv(&r, "--dangerously-skip-permissions", None, None)
                .unwrap_err()
                .contains("put \"--\" before")
        );
        assert!(
            argv(&r, "hi", Some("-x"), None)
                .unwrap_err()
                .contains("session id `-x` is not a plain word")
        );
        assert!(
            argv(&r, "hi", None, Some("m --yolo"))
                .unwrap_err()
                .contains("model name")
        );
        // `{model}` inside the message stays text.
        assert_eq!(
            argv(&r, "use {model} and {session}", None, Some("m")).unwrap(),
            ["my-agent", "--model=m", "use {model} and {session}"]
        );
        let after = runner(
            "[agent]\ncommand = [\"my-agent\", \"--\", \"{prompt}\"]\nresume = [\"--resume\", \"{session}\"]",
        );
        assert_eq!(
            argv(&after, "--help", Some("abc"), None).unwrap(),
            ["my-agent", "--resume", "abc", "--", "--help"],
            "options go before `--`"
        );
    }

    #[test]
    fn command_tokens_with_absent_values_are_dropped() {
        let r = runner(
            "[agent]\ncommand = [\"my-agent\", \"--model={model}\", \"--session={session}\", \"{prompt}\"]",
        );
        assert_eq!(argv(&r, "hi", None, None).unwrap(), ["my-agent", "hi"]);
        assert_eq!(
            argv(&r, "hi", Some("s"), Some("m")).unwrap(),
            ["my-agent", "--model=m", "--session=s", "hi"]
        );
    }

    #[test]
    fn openai_config_is_checked() {
        let err = |t: &str| {
            format!(
                "{:#}",
                Config::parse(t, std::path::Path::new("t.toml")).unwrap_err()
            )
        };
        assert!(err("[agent]\nrunner = \"openai\"").contains("[agent.openai]"));
        assert!(err("[agent]\nrunner = \"openai\"\n[agent.openai]\nbase_url = \"ftp://x\"\nmodel = \"m\"").contains("base_url"));
        assert!(
            err("[agent]\nrunner = \"openai\"\n[agent.openai]\nbase_url = \"http://x\"\nmodel = \"m\"\napi_key_env = \"sk-abc\"")
                .contains("never the key itself")
        );
    }
}
