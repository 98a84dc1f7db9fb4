//! `[mcp]`: tools of MCP servers the user names in loopbox.toml, which a policy
//! may call (`actions.mcp-call`), as a YAML loop's `action_type: mcp_tool`
//! state does in little-loops 1.156.0 (`mcp_call.py`: the server started for
//! the call, `initialize`, `notifications/initialized`, `tools/call`, protocol
//! version `2024-11-05`, the server stopped after).
//!
//! Deny by default: no server without `[mcp.servers.NAME]`, no tool the
//! server's `tools` list does not name. The server is untrusted code, run like
//! a command: found on `shell.path` (never in the workspace), in the same
//! sandbox, environment and rlimits as `shell` commands, in the workspace
//! root; its command line is the user's, and nothing a policy sends reaches it
//! but the tool's name and arguments, inside JSON. Every message is bounded
//! (`limits.mcp_message_bytes`), and so is the whole call (its timeout, at
//! most `shell.max_timeout_ms`, which bounds every write too): a server that
//! answers garbage, too much or nothing, or never reads what it is sent,
//! ends the call as `no-answer` and is killed with its process group.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::exec::process::{Line, Session};

/// The MCP protocol version little-loops' `mcp-call` speaks.
pub const PROTOCOL_VERSION: &str = "2024-11-05";
/// A call's time limit when neither the request nor the server's section sets one
/// (little-loops' `_DEFAULT_TIMEOUT`).
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
/// Messages a server may send that are not the answer awaited (notifications,
/// requests, lines that are not JSON) before the call is given up.
pub const MAX_OTHER_MESSAGES: usize = 1000;

/// `[mcp]` in loopbox.toml: the servers a policy may use (top level only: an
/// installed policy's section grants none).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    #[serde(default)]
    pub servers: BTreeMap<String, ServerConfig>,
}

/// `[mcp.servers.NAME]`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// The server's program (found on `shell.path`) and its arguments.
    pub command: Vec<String>,
    /// The tools a policy may call on it.
    #[serde(default)]
    pub tools: Vec<String>,
    /// A call's time limit when the request sets none.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// A server's or a tool's name: 1 to 128 characters, none a control character,
/// not starting with `-` (a name never becomes a flag, though none is passed on a command line).
pub fn name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && !name.starts_with('-')
        && !name.chars().any(|c| c.is_control())
}

impl McpConfig {
    pub fn is_default(&self) -> bool {
        self.servers.is_empty()
    }

    pub fn validate(&self) -> Result<()> {
        for (name, s) in &self.servers {
            if !name_ok(name) || name.contains('/') {
                bail!(
                    "[mcp.servers.{name}]: a server's name is 1 to 128 characters, no `/`, no control character, not starting with `-`"
                );
            }
            if s.command.first().is_none_or(|p| p.is_empty()) {
                bail!(
                    "[mcp.servers.{name}]: `command` needs the server's program, then its arguments"
                );
            }
            if let Some(bad) = s.tools.iter().find(|t| !name_ok(t)) {
                bail!(
                    "[mcp.servers.{name}]: tool `{}` is not a tool name (1 to 128 characters, no control character, not starting with `-`)",
                    crate::ui::sanitize(bad)
                );
            }
            if s.timeout_ms == Some(0) {
                bail!("[mcp.servers.{name}]: `timeout_ms` must be greater than 0");
            }
        }
        Ok(())
    }

    /// The server `name`, when the tool is granted on it; `Err` says what to change.
    pub fn permits(&self, server: &str, tool: &str) -> Result<&ServerConfig, String> {
        let s_shown = crate::ui::shorten(&crate::ui::sanitize(server), 64);
        let t_shown = crate::ui::shorten(&crate::ui::sanitize(tool), 64);
        let Some(s) = self.servers.get(server) else {
            return Err(format!(
                "no MCP server `{s_shown}` is configured: add `[mcp.servers.{s_shown}]` with `command = [...]` and `tools = [\"{t_shown}\"]` to loopbox.toml"
            ));
        };
        if !s.tools.iter().any(|t| t == tool) {
            return Err(format!(
                "tool `{t_shown}` of MCP server `{s_shown}` is not granted: add it to `tools` in `[mcp.servers.{s_shown}]` of loopbox.toml"
            ));
        }
        Ok(s)
    }
}

/// How a call came out, as `mcp-status` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    ToolError,
    NotFound,
    NoAnswer,
}

impl Status {
    /// little-loops' `mcp-call` exit code for it, which the journal keeps.
    pub fn code(self) -> i32 {
        match self {
            Status::Ok => 0,
            Status::ToolError => 1,
            Status::NoAnswer => 124,
            Status::NotFound => 127,
        }
    }

    pub fn from_code(code: i32) -> Option<Status> {
        [
            Status::Ok,
            Status::ToolError,
            Status::NoAnswer,
            Status::NotFound,
        ]
        .into_iter()
        .find(|s| s.code() == code)
    }
}

/// What the server answered: its status and result (JSON).
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub status: Status,
    pub result: Value,
}

fn no_answer(why: String) -> Reply {
    Reply {
        status: Status::NoAnswer,
        result: json!({"error": why}),
    }
}

/// Talk MCP to a started server until `tool` answers or `deadline` passes.
pub async fn call(
    session: &mut Session,
    tool: &str,
    arguments: Value,
    deadline: Instant,
    max_message: usize,
) -> Reply {
    let init = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "loopbox", "version": env!("CARGO_PKG_VERSION")},
        },
    });
    let answer = match exchange(session, &init, 1, deadline, max_message).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    if let Some(e) = answer.get("error") {
        return Reply {
            status: Status::ToolError,
            result: json!({"error": e, "during": "initialize"}),
        };
    }
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    if let Err(why) = send(session, &initialized, deadline).await {
        return no_answer(format!("the server stopped reading: {why}"));
    }
    let call = json!({
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    });
    let answer = match exchange(session, &call, 2, deadline, max_message).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    if let Some(e) = answer.get("error") {
        let status = if e["code"] == json!(-32601) {
            Status::NotFound
        } else {
            Status::ToolError
        };
        return Reply {
            status,
            result: e.clone(),
        };
    }
    let result = answer.get("result").cloned().unwrap_or_else(|| json!({}));
    let status = if result["isError"] == json!(true) {
        Status::ToolError
    } else {
        Status::Ok
    };
    Reply { status, result }
}

/// Send `request` and read until the answer with `id`; `Err` is a `no-answer`.
/// Requests from the server are answered "method not found" (a `ping`, an
/// empty result), notifications and lines that are not JSON are skipped.
async fn exchange(
    session: &mut Session,
    request: &Value,
    id: u64,
    deadline: Instant,
    max_message: usize,
) -> Result<Value, Reply> {
    let method = request["method"].as_str().unwrap_or_default().to_string();
    if let Err(why) = send(session, request, deadline).await {
        return Err(no_answer(format!(
            "the server stopped reading before `{method}`: {why}"
        )));
    }
    let mut others = 0usize;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = match tokio::time::timeout(left, session.line(max_message)).await {
            Err(_) => {
                return Err(no_answer(format!(
                    "no answer to `{method}` within the call's time limit"
                )));
            }
            Ok(Err(e)) => return Err(no_answer(format!("reading the server failed: {e}"))),
            Ok(Ok(Line::End)) => {
                return Err(no_answer(format!(
                    "the server closed its output before answering `{method}`"
                )));
            }
            Ok(Ok(Line::TooLong)) => {
                return Err(no_answer(format!(
                    "the server sent a message over limits.mcp_message_bytes = {max_message} (raise it in loopbox.toml if the server needs more)"
                )));
            }
            Ok(Ok(Line::Text(t))) => t,
        };
        others += 1;
        if others > MAX_OTHER_MESSAGES {
            return Err(no_answer(format!(
                "the server sent {MAX_OTHER_MESSAGES} messages without answering `{method}`"
            )));
        }
        let Ok(msg) = serde_json::from_slice::<Value>(&line) else {
            continue;
        };
        if msg.get("id") == Some(&json!(id)) && msg.get("method").is_none() {
            return Ok(msg);
        }
        // A request from the server: no client features are offered.
        if let (Some(m), Some(rid)) = (msg.get("method"), msg.get("id")) {
            let answer = if m == "ping" {
                json!({"jsonrpc": "2.0", "id": rid, "result": {}})
            } else {
                json!({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "loopbox offers no client features"}})
            };
            if let Err(why) = send(session, &answer, deadline).await {
                return Err(no_answer(format!(
                    "the server stopped reading while loopbox awaited `{method}`: {why}"
                )));
            }
        }
    }
}

/// Write `message` to the server by `deadline`: a server that never reads its
/// input fills the pipe (a large request, or answers to its own requests,
/// whose ids it chooses), and the write would wait for it forever.
async fn send(session: &mut Session, message: &Value, deadline: Instant) -> Result<(), String> {
    let left = deadline.saturating_duration_since(Instant::now());
    match tokio::time::timeout(left, session.send(&message.to_string())).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("it read nothing more within the call's time limit".into()),
    }
}

/// A call's time limit: the request's, else the server's, else the default;
/// never over `max`.
pub fn timeout(asked: Option<u64>, server: &ServerConfig, max: u64) -> Duration {
    Duration::from_millis(
        asked
            .or(server.timeout_ms)
            .unwrap_or(DEFAULT_TIMEOUT_MS)
            .min(max),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Result<McpConfig> {
        let c: McpConfig = toml::from_str(text)?;
        c.validate()?;
        Ok(c)
    }

    #[test]
    fn servers_and_tools_are_denied_unless_named() {
        let c =
            config("[servers.pw]\ncommand = [\"pw-mcp\", \"--stdio\"]\ntools = [\"screenshot\"]\n")
                .unwrap();
        assert!(c.permits("pw", "screenshot").is_ok());
        let e = c.permits("pw", "navigate").unwrap_err();
        assert!(
            e.contains("tool `navigate` of MCP server `pw` is not granted"),
            "{e}"
        );
        let e = c.permits("other", "screenshot").unwrap_err();
        assert!(e.contains("add `[mcp.servers.other]`"), "{e}");
        for bad in [
            "[servers.\"-x\"]\ncommand = [\"a\"]\n",
            "[servers.\"a/b\"]\ncommand = [\"a\"]\n",
            "[servers.a]\ncommand = []\n",
            "[servers.a]\ncommand = [\"a\"]\ntools = [\"--help\"]\n",
            "[servers.a]\ncommand = [\"a\"]\ntimeout_ms = 0\n",
            "[servers.a]\ncommand = [\"a\"]\nenv = {}\n",
        ] {
            assert!(config(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn statuses_round_trip_little_loops_exit_codes() {
        for s in [
            Status::Ok,
            Status::ToolError,
            Status::NotFound,
            Status::NoAnswer,
        ] {
            assert_eq!(Status::from_code(s.code()), Some(s));
        }
        let s = ServerConfig {
            command: vec!["x".into()],
            tools: vec![],
            timeout_ms: Some(5_000),
        };
        assert_eq!(timeout(None, &s, 1_000), Duration::from_secs(1));
        assert_eq!(timeout(Some(2_000), &s, 60_000), Duration::from_secs(2));
        assert_eq!(timeout(None, &s, 60_000), Duration::from_secs(5));
    }
}
