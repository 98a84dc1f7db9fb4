//! `action_type: mcp_tool`: a state that calls a tool of an MCP server, as
//! little-loops 1.156 does it (`fsm/executor.py` runs `mcp-call SERVER/TOOL
//! PARAMS`; `mcp_call.py` prints the response envelope and exits 0, 1, 124 or
//! 127; `fsm/evaluators.py` `evaluate_mcp_result` reads them). In loopbox the
//! host makes the call (`actions.mcp-call`, granted per server and tool in
//! loopbox.toml); this module turns its answer into what little-loops' state
//! would have seen, the same envelope and exit code, so `capture`, the
//! evaluators and the routes read it unchanged:
//!
//! - the tool's result: printed as `json.dumps` writes it, exit 0, or 1 when
//!   it says `isError`;
//! - a tool the server does not have: exit 127 (`not_found`);
//! - no answer in time, the server gone, or a message over the host's cap:
//!   exit 124 (`timeout`), as little-loops' reader gives up on a silent or
//!   dead server;
//! - a server or tool the user did not grant, or a server that does not
//!   start: exit 127 (`not_found`), as little-loops routes a server missing
//!   from `.mcp.json`, with a warning saying what to grant;
//! - `SERVER/TOOL` without a `/`: exit 2, as `mcp-call` refuses its usage.

use serde_json::{Value, json};

use crate::eval::Verdict;
use crate::interp;
use crate::machine::{Level, Out, World};

/// How the host answered an MCP call.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// The call ran: its status and the server's `result` (or JSON-RPC `error`).
    Answered {
        status: Status,
        answer: String,
        duration_ms: u64,
    },
    /// The host refused it: `denied` or `unavailable` (the tool cannot be
    /// reached), or anything else (a refusal the state's `on_error` takes).
    Unreachable(String),
    Refused(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    ToolError,
    NotFound,
    NoAnswer,
}

/// `server/tool` at its first `/`, as `mcp-call` splits its spec.
pub fn split(spec: &str) -> Option<(&str, &str)> {
    spec.split_once('/')
}

/// Call `spec` with `arguments` through the world: the output little-loops'
/// `mcp-call` would have given, or the host's refusal.
pub fn call(
    world: &mut dyn World,
    spec: &str,
    arguments: &Value,
    timeout_ms: u64,
) -> Result<Out, String> {
    let Some((server, tool)) = split(spec) else {
        return Ok(Out {
            exit_code: Some(2),
            stderr: format!("Error: spec must be 'server/tool-name', got: {spec:?}\n"),
            ..Default::default()
        });
    };
    let reply = world.mcp_call(server, tool, &arguments.to_string(), Some(timeout_ms));
    if let Reply::Unreachable(why) = &reply {
        world.log(
            Level::Warn,
            &format!(
                "MCP tool `{tool}` of server `{server}` cannot be reached ({why}); the state sees `not_found`, as little-loops routes a server missing from `.mcp.json`"
            ),
        );
    }
    out(server, tool, reply)
}

fn text_envelope(text: String) -> Value {
    json!({"isError": true, "content": [{"type": "text", "text": text}]})
}

/// The state's output for `reply`, as `mcp-call` prints and exits.
pub fn out(server: &str, tool: &str, reply: Reply) -> Result<Out, String> {
    let (code, envelope, duration_ms) = match reply {
        Reply::Refused(why) => return Err(why),
        Reply::Unreachable(why) => (
            127,
            text_envelope(format!(
                "Server '{server}' or its tool '{tool}' is not granted in loopbox.toml: {why}"
            )),
            0,
        ),
        Reply::Answered {
            status,
            answer,
            duration_ms,
        } => {
            let answer: Value = serde_json::from_str(&answer).unwrap_or(Value::Null);
            match status {
                Status::Ok => (0, answer, duration_ms),
                Status::ToolError if answer.get("isError").is_some() => (1, answer, duration_ms),
                Status::ToolError if answer.get("during").is_some() => (
                    1,
                    text_envelope(format!(
                        "Initialize failed: {}",
                        interp::as_text(&answer["error"])
                    )),
                    duration_ms,
                ),
                Status::ToolError => (
                    1,
                    text_envelope(format!("tools/call error: {}", interp::as_text(&answer))),
                    duration_ms,
                ),
                Status::NotFound => (
                    127,
                    text_envelope(format!("Tool '{tool}' not found on server '{server}'")),
                    duration_ms,
                ),
                Status::NoAnswer => {
                    let during = if answer["error"]
                        .as_str()
                        .is_some_and(|e| e.contains("`initialize`"))
                    {
                        "initialize"
                    } else {
                        "tools/call"
                    };
                    (
                        124,
                        text_envelope(format!("No response to {during} request (timeout)")),
                        duration_ms,
                    )
                }
            }
        }
    };
    Ok(Out {
        exit_code: Some(code),
        stdout: format!("{}\n", dumps(&envelope)),
        duration_ms,
        ..Default::default()
    })
}

/// `evaluate_mcp_result`: the verdict on an MCP call's output and exit code.
pub fn verdict(output: &str, code: i32) -> Verdict {
    let v = |verdict: &str, detail: String| Verdict {
        verdict: verdict.into(),
        detail,
    };
    match code {
        127 => return v("not_found", "the server or tool is not there".into()),
        124 => return v("timeout", "the MCP tool call timed out".into()),
        _ => {}
    }
    let text = output.trim();
    let envelope = if text.is_empty() {
        json!({})
    } else {
        match serde_json::from_str::<Value>(text) {
            Ok(e) => e,
            Err(_) => {
                return v(
                    "tool_error",
                    format!("invalid JSON from the call: {}", crate::eval::preview(text)),
                );
            }
        }
    };
    let is_error = match envelope.get("isError") {
        Some(flag) => truthy(flag),
        None => code != 0,
    };
    if is_error {
        v(
            "tool_error",
            format!("the tool reported an error (exit {code})"),
        )
    } else {
        v("success", "the tool succeeded".into())
    }
}

/// Python's truth of a JSON value.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// JSON as Python's `json.dumps` writes it: `", "` and `": "` between items,
/// and every character past ASCII escaped.
pub fn dumps(v: &Value) -> String {
    match v {
        Value::String(s) => {
            let mut out = String::from('"');
            for c in s.chars() {
                match c {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    '\t' => out.push_str("\\t"),
                    '\u{8}' => out.push_str("\\b"),
                    '\u{c}' => out.push_str("\\f"),
                    c if (c as u32) < 0x20 || (c as u32) > 0x7f => {
                        let mut buf = [0u16; 2];
                        for unit in c.encode_utf16(&mut buf) {
                            out.push_str(&format!("\\u{unit:04x}"));
                        }
                    }
                    c => out.push(c),
                }
            }
            out.push('"');
            out
        }
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(dumps).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(m) => format!(
            "{{{}}}",
            m.iter()
                .map(|(k, v)| format!("{}: {}", dumps(&Value::String(k.clone())), dumps(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(status: Status, answer: Value) -> Reply {
        Reply::Answered {
            status,
            answer: answer.to_string(),
            duration_ms: 5,
        }
    }

    fn routed(reply: Reply) -> (i32, String) {
        let o = out("pw", "shot", reply).unwrap();
        let code = o.code();
        (code, verdict(&o.stdout, code).verdict)
    }

    #[test]
    fn each_answer_routes_as_little_loops_routes_it() {
        let ok = json!({"content": [{"type": "text", "text": "é"}]});
        let o = out("pw", "shot", answered(Status::Ok, ok)).unwrap();
        assert_eq!(
            o.stdout,
            "{\"content\": [{\"text\": \"\\u00e9\", \"type\": \"text\"}]}\n"
        );
        assert_eq!(verdict(&o.stdout, 0).verdict, "success");
        assert_eq!(
            routed(answered(
                Status::ToolError,
                json!({"isError": true, "content": []})
            )),
            (1, "tool_error".into())
        );
        assert_eq!(
            routed(answered(
                Status::ToolError,
                json!({"code": -32000, "message": "boom"})
            )),
            (1, "tool_error".into())
        );
        assert_eq!(
            routed(answered(Status::NotFound, json!({"code": -32601}))),
            (127, "not_found".into())
        );
        assert_eq!(
            routed(answered(Status::NoAnswer, json!({"error": "no answer"}))),
            (124, "timeout".into())
        );
        assert_eq!(
            routed(Reply::Unreachable("denied: no MCP server `pw`".into())),
            (127, "not_found".into())
        );
        assert!(out("pw", "shot", Reply::Refused("budget exhausted: x".into())).is_err());
        // `isError` as Python reads it; garbage is a tool error.
        assert_eq!(verdict("{\"isError\": 0}", 0).verdict, "success");
        assert_eq!(verdict("{}", 1).verdict, "tool_error");
        assert_eq!(verdict("not json", 0).verdict, "tool_error");
        assert_eq!(verdict("", 0).verdict, "success");
    }

    #[test]
    fn a_spec_without_a_slash_is_mcp_calls_usage_error() {
        struct NoCall;
        impl World for NoCall {
            fn act(&mut self, _: crate::machine::Request) -> Result<Out, String> {
                unreachable!()
            }
            fn log(&mut self, _: Level, _: &str) {}
            fn progress(&mut self, _: &str) {}
            fn now_ms(&mut self) -> u64 {
                0
            }
            fn read(&mut self, _: &str) -> Result<String, String> {
                Err("no".into())
            }
            fn mcp_call(&mut self, _: &str, _: &str, _: &str, _: Option<u64>) -> Reply {
                unreachable!("no call without a server")
            }
        }
        let o = call(&mut NoCall, "screenshot", &json!({}), 1000).unwrap();
        assert_eq!(o.code(), 2);
        assert_eq!(verdict(&o.stdout, 2).verdict, "tool_error");
        assert_eq!(split("a/b/c"), Some(("a", "b/c")));
    }
}
