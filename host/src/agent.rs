//! The agent runner: sends a message to the agent CLI the user configured
//! (`[agent] command`, e.g. `["claude", "-p", "{prompt}"]`) and reads its reply
//! and, when the CLI reports one, its conversation id so the next message
//! continues the same conversation.

use std::time::Duration;

use serde_json::Value;

use crate::child_env::ChildEnv;
use crate::config::{AgentConfig, AgentOutput};
use crate::process::{self, Finished, Spec};

#[derive(Debug, Clone)]
pub struct AgentRunner {
    config: AgentConfig,
    env: ChildEnv,
    output_cap: usize,
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
}

impl AgentRunner {
    pub fn new(config: AgentConfig, env: ChildEnv, output_cap: usize) -> AgentRunner {
        AgentRunner { config, env, output_cap }
    }

    /// The argv for a request: the template with `{prompt}` filled in, then
    /// `--model`-style and resume arguments.
    pub fn argv(&self, req: &AgentRequest<'_>) -> Vec<String> {
        let mut argv: Vec<String> = self.config.command.iter().map(|t| t.replace("{prompt}", req.text)).collect();
        if let Some(session) = req.session {
            argv.extend(self.config.resume.iter().map(|t| t.replace("{session}", session)));
        }
        if let Some(model) = req.model {
            argv.extend(self.config.model.iter().map(|t| t.replace("{model}", model)));
        }
        argv
    }

    pub async fn send(&self, req: AgentRequest<'_>) -> Result<AgentReply, AgentError> {
        let argv = self.argv(&req);
        let cwd = self.env.root().to_path_buf();
        let program =
            self.env.resolve_program(&argv[0], &cwd).ok_or_else(|| AgentError::NotFound { program: argv[0].clone(), path: self.env.path_var().to_string() })?;
        let timeout = req.timeout.map_or(Duration::from_millis(self.config.timeout_ms), |t| t.min(Duration::from_millis(self.config.timeout_ms)));
        let spec = Spec {
            program,
            args: argv[1..].to_vec(),
            cwd,
            env: self.env.vars(&[]),
            stdin: None,
            timeout,
            output_cap: self.output_cap,
            rlimits: None,
            confinement: None,
        };
        let process = process::run(spec).await.map_err(|source| AgentError::Spawn { program: argv[0].clone(), source })?;
        let (text, session) = parse_reply(self.config.output, &process.stdout);
        Ok(AgentReply { process, text, session })
    }
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

    #[test]
    fn json_replies_carry_text_and_session() {
        let (t, s) = parse_reply(AgentOutput::Json, r#"{"type":"result","result":"hi <promise>X</promise>","session_id":"abc"}"#);
        assert_eq!((t.as_str(), s.as_deref()), ("hi <promise>X</promise>", Some("abc")));
        let (t, s) = parse_reply(AgentOutput::Json, "progress...\n{\"response\":\"ok\",\"session\":\"s2\"}\n");
        assert_eq!((t.as_str(), s.as_deref()), ("ok", Some("s2")));
        let (t, s) = parse_reply(AgentOutput::Json, "not json");
        assert_eq!((t.as_str(), s), ("not json", None));
    }

    #[test]
    fn argv_fills_the_template() {
        let config = AgentConfig {
            command: vec!["claude".into(), "-p".into(), "{prompt}".into()],
            resume: vec!["--resume".into(), "{session}".into()],
            model: vec!["--model".into(), "{model}".into()],
            output: AgentOutput::Json,
            timeout_ms: 1000,
            tier: Default::default(),
        };
        let r = AgentRunner::new(config, ChildEnv::new(&Default::default(), std::path::Path::new("/")), 100);
        assert_eq!(r.argv(&AgentRequest { text: "a; rm -rf /", ..Default::default() }), ["claude", "-p", "a; rm -rf /"]);
        assert_eq!(
            r.argv(&AgentRequest { text: "x", session: Some("s"), model: Some("m"), ..Default::default() }),
            ["claude", "-p", "x", "--resume", "s", "--model", "m"]
        );
    }
}
