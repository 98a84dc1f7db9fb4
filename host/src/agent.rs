//! The agent runner: sends a message to the agent the user configured and
//! reads its reply and conversation id, so the next message continues the
//! same conversation.
//!
//! - CLI agents (`runner = "command"` or a preset: `claude`, `codex`, `gemini`):
//!   an argv template, `{prompt}` one argument, never through a shell.
//! - `openai`: an OpenAI-compatible chat-completions server. The conversation
//!   of each session id is kept in the run store, so a later process (a
//!   resumed run, the next hook) continues it. The API key is read from the
//!   environment variable the config names; the config never holds it.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::child_env::ChildEnv;
use crate::config::{AgentConfig, AgentOutput, OpenAiConfig, RunnerKind};
use crate::db::Db;
use crate::process::{self, Finished, Spec};

#[derive(Debug, Clone)]
pub struct AgentRunner {
    config: AgentConfig,
    env: ChildEnv,
    output_cap: usize,
    db: Db,
}

/// One message to the agent.
#[derive(Debug, Clone, Default)]
pub struct AgentRequest<'a> {
    pub text: &'a str,
    pub model: Option<&'a str>,
    pub session: Option<&'a str>,
    pub timeout: Option<Duration>,
}

/// What the agent answered.
#[derive(Debug, Clone)]
pub struct AgentReply {
    /// The CLI's process (for HTTP agents, a synthesized record of the request).
    pub process: Finished,
    /// The reply text: all of stdout, or the `result` field for JSON output.
    pub text: String,
    pub session: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("the agent command `{program}` was not found (agent.command[0]; looked in shell.path = `{path}`)")]
    NotFound { program: String, path: String },
    #[error("failed to start the agent `{program}`: {source}")]
    Spawn { program: String, source: std::io::Error },
    #[error("the agent did not answer within {0:?} (agent.timeout_ms)")]
    TimedOut(Duration),
    #[error("the agent server failed: {0}")]
    Http(String),
}

impl AgentRunner {
    pub fn new(config: AgentConfig, env: ChildEnv, output_cap: usize, db: Db) -> AgentRunner {
        AgentRunner { config, env, output_cap, db }
    }

    pub fn config(&self) -> &AgentConfig {
        &self.config
    }

    /// The argv for a request: the template filled in, then resume and model arguments.
    pub fn argv(&self, req: &AgentRequest<'_>) -> Vec<String> {
        let fill = |t: &String| -> Option<String> {
            let mut t = t.replace("{prompt}", req.text);
            for (key, value) in [("{model}", req.model), ("{session}", req.session)] {
                if t.contains(key) {
                    t = t.replace(key, value?);
                }
            }
            Some(t)
        };
        let mut argv: Vec<String> = self.config.command.iter().filter_map(fill).collect();
        if let Some(session) = req.session {
            argv.extend(self.config.resume.iter().map(|t| t.replace("{session}", session)));
        }
        if let Some(model) = req.model {
            argv.extend(self.config.model.iter().map(|t| t.replace("{model}", model)));
        }
        argv
    }

    fn timeout(&self, asked: Option<Duration>) -> Duration {
        let max = Duration::from_millis(self.config.timeout_ms);
        asked.map_or(max, |t| t.min(max))
    }

    pub async fn send(&self, req: AgentRequest<'_>) -> Result<AgentReply, AgentError> {
        match (&self.config.runner, &self.config.openai) {
            (RunnerKind::Openai, Some(openai)) => {
                let (openai, db, cap, timeout) = (openai.clone(), self.db.clone(), self.output_cap, self.timeout(req.timeout));
                let (text, model, session) = (req.text.to_string(), req.model.map(String::from), req.session.map(String::from));
                tokio::task::spawn_blocking(move || chat(&openai, &db, &text, model.as_deref(), session.as_deref(), timeout, cap))
                    .await
                    .map_err(|e| AgentError::Http(format!("the request task failed: {e}")))?
            }
            _ => self.send_cli(req).await,
        }
    }

    async fn send_cli(&self, req: AgentRequest<'_>) -> Result<AgentReply, AgentError> {
        let argv = self.argv(&req);
        let cwd = self.env.root().to_path_buf();
        let program =
            self.env.resolve_program(&argv[0], &cwd).ok_or_else(|| AgentError::NotFound { program: argv[0].clone(), path: self.env.path_var().to_string() })?;
        let spec = Spec {
            program,
            args: argv[1..].to_vec(),
            cwd,
            env: self.env.vars(&[]),
            stdin: None,
            timeout: self.timeout(req.timeout),
            output_cap: self.output_cap,
            rlimits: None,
            confinement: None,
        };
        let process = process::run(spec).await.map_err(|source| AgentError::Spawn { program: argv[0].clone(), source })?;
        let (text, session) = parse_reply(self.config.output, &process.stdout);
        Ok(AgentReply { process, text, session })
    }
}

/// One chat-completions exchange in a conversation kept in the store.
fn chat(cfg: &OpenAiConfig, db: &Db, text: &str, model: Option<&str>, session: Option<&str>, timeout: Duration, cap: usize) -> Result<AgentReply, AgentError> {
    let started = Instant::now();
    let (session, mut messages) = match session {
        Some(id) => {
            let history = db.conversation(id).map_err(|e| AgentError::Http(format!("cannot read conversation `{id}`: {e:#}")))?;
            let history = history.ok_or_else(|| AgentError::Http(format!("there is no conversation `{id}` to continue")))?;
            (id.to_string(), serde_json::from_str::<Vec<Value>>(&history).map_err(|e| AgentError::Http(format!("conversation `{id}` is corrupt: {e}")))?)
        }
        None => {
            let id = format!("oa-{}", &blake3::hash(format!("{:?}{}", Instant::now(), std::process::id()).as_bytes()).to_hex()[..16]);
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

    let agent: ureq::Agent = ureq::Agent::config_builder().timeout_global(Some(timeout)).http_status_as_error(false).build().into();
    let url = format!("{}/chat/completions", cfg.base_url.trim_end_matches('/'));
    let mut request = agent.post(&url).header("Content-Type", "application/json");
    if let Some(var) = &cfg.api_key_env {
        let key = std::env::var(var).map_err(|_| AgentError::Http(format!("environment variable `{var}` (agent.openai.api_key_env) is not set")))?;
        request = request.header("Authorization", &format!("Bearer {key}"));
    }
    let mut response = match request.send_json(&body) {
        Ok(r) => r,
        Err(ureq::Error::Timeout(_)) => return Err(AgentError::TimedOut(timeout)),
        Err(e) => return Err(AgentError::Http(format!("{url}: {e}"))),
    };
    let status = response.status();
    let raw = response.body_mut().read_to_string().map_err(|e| match e {
        ureq::Error::Timeout(_) => AgentError::TimedOut(timeout),
        e => AgentError::Http(format!("{url}: reading the answer failed: {e}")),
    })?;
    if !status.is_success() {
        return Err(AgentError::Http(format!("{url} answered {status}: {}", crate::ui::shorten(raw.trim(), 300))));
    }
    let v: Value = serde_json::from_str(&raw).map_err(|e| AgentError::Http(format!("{url} answered with invalid JSON: {e}")))?;
    let reply = v["choices"][0]["message"]["content"]
        .as_str()
        .ok_or_else(|| AgentError::Http(format!("{url} answered with no choices[0].message.content")))?
        .to_string();
    messages.push(json!({"role": "assistant", "content": reply}));
    db.save_conversation(&session, &Value::Array(messages).to_string())
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
    let process = Finished { exit_code: Some(0), stdout: text.clone(), stderr: String::new(), duration: started.elapsed(), timed_out: false, truncated };
    Ok(AgentReply { process, text, session: Some(session) })
}

/// The reply text and session id from an agent's stdout.
pub fn parse_reply(format: AgentOutput, stdout: &str) -> (String, Option<String>) {
    match format {
        AgentOutput::Text => (stdout.trim_end_matches('\n').to_string(), None),
        AgentOutput::Json => {
            // Some CLIs print progress lines before the result: take the last JSON object line.
            let value = serde_json::from_str::<Value>(stdout.trim())
                .ok()
                .or_else(|| stdout.lines().rev().find_map(|l| serde_json::from_str::<Value>(l.trim()).ok().filter(Value::is_object)));
            match value {
                Some(v) => {
                    let text = ["result", "response", "text", "content"].iter().find_map(|k| v.get(*k).and_then(Value::as_str)).unwrap_or_default().to_string();
                    let session = ["session_id", "sessionId", "session"].iter().find_map(|k| v.get(*k).and_then(Value::as_str)).map(String::from);
                    (text, session)
                }
                None => (stdout.trim_end_matches('\n').to_string(), None),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn json_replies_carry_text_and_session() {
        let (t, s) = parse_reply(AgentOutput::Json, r#"{"type":"result","result":"hi <promise>X</promise>","session_id":"abc"}"#);
        assert_eq!((t.as_str(), s.as_deref()), ("hi <promise>X</promise>", Some("abc")));
        let (t, s) = parse_reply(AgentOutput::Json, "progress...\n{\"response\":\"ok\",\"session\":\"s2\"}\n");
        assert_eq!((t.as_str(), s.as_deref()), ("ok", Some("s2")));
        let (t, s) = parse_reply(AgentOutput::Json, "not json");
        assert_eq!((t.as_str(), s), ("not json", None));
    }

    fn runner(toml: &str) -> AgentRunner {
        let config = Config::parse(toml, std::path::Path::new("t.toml")).unwrap();
        let db = Db::open(std::path::Path::new(":memory:")).unwrap();
        AgentRunner::new(config.agent.unwrap(), ChildEnv::new(&Default::default(), std::path::Path::new("/")), 100, db)
    }

    #[test]
    fn presets_fill_the_template() {
        let r = runner("[agent]\nrunner = \"claude\"");
        assert_eq!(r.argv(&AgentRequest { text: "a; rm -rf /", ..Default::default() }), ["claude", "-p", "a; rm -rf /", "--output-format", "json"]);
        assert_eq!(
            r.argv(&AgentRequest { text: "x", session: Some("s"), model: Some("m"), ..Default::default() }),
            ["claude", "-p", "x", "--output-format", "json", "--resume", "s", "--model", "m"]
        );
        assert_eq!(runner("[agent]\nrunner = \"codex\"").argv(&AgentRequest { text: "x", ..Default::default() }), ["codex", "exec", "x"]);
        assert_eq!(runner("[agent]\nrunner = \"gemini\"").argv(&AgentRequest { text: "x", ..Default::default() }), ["gemini", "-p", "x"]);
        let e = Config::parse("[agent]\nrunner = \"claude\"\ncommand = [\"x\", \"{prompt}\"]", std::path::Path::new("t.toml")).unwrap_err();
        assert!(format!("{e:#}").contains("sets the command itself"), "{e:#}");
    }

    #[test]
    fn command_tokens_with_absent_values_are_dropped() {
        let r = runner("[agent]\ncommand = [\"my-agent\", \"--model={model}\", \"--session={session}\", \"{prompt}\"]");
        assert_eq!(r.argv(&AgentRequest { text: "hi", ..Default::default() }), ["my-agent", "hi"]);
        assert_eq!(
            r.argv(&AgentRequest { text: "hi", model: Some("m"), session: Some("s"), ..Default::default() }),
            ["my-agent", "--model=m", "--session=s", "hi"]
        );
    }

    #[test]
    fn openai_config_is_checked() {
        let err = |t: &str| format!("{:#}", Config::parse(t, std::path::Path::new("t.toml")).unwrap_err());
        assert!(err("[agent]\nrunner = \"openai\"").contains("[agent.openai]"));
        assert!(err("[agent]\nrunner = \"openai\"\n[agent.openai]\nbase_url = \"ftp://x\"\nmodel = \"m\"").contains("base_url"));
        assert!(
            err("[agent]\nrunner = \"openai\"\n[agent.openai]\nbase_url = \"http://x\"\nmodel = \"m\"\napi_key_env = \"sk-abc\"")
                .contains("never the key itself")
        );
    }
}
