//! A hook's JSON input, read the same way for every agent, and the policy
//! event it becomes.
//!
//! Claude Code, Codex and Gemini CLI send one JSON object on stdin with
//! `session_id`, `hook_event_name` and `cwd`; the event's own fields vary by
//! agent only in name (Gemini's `prompt_response` is the others'
//! `last_assistant_message`). The whole object is kept for `custom` events.

use serde::Deserialize;
use serde_json::{Map, Value};

use super::agents::{Agent, EventSpec, Kind};
use crate::bindings::{Event, Origin, ToolCall, Turn};

/// The fields loopbox reads from a hook's input; the rest is kept in `raw`.
#[derive(Debug, Clone)]
pub struct HookInput {
    pub agent: Agent,
    pub session_id: String,
    pub event_name: String,
    pub cwd: Option<String>,
    pub transcript_path: Option<String>,
    pub stop_hook_active: bool,
    pub last_assistant_message: Option<String>,
    pub agent_transcript_path: Option<String>,
    pub agent_id: Option<String>,
    pub permission_mode: Option<String>,
    pub tool_name: Option<String>,
    pub tool_input: Option<Value>,
    /// The whole input object, forwarded as the payload of `custom` events.
    pub raw: Value,
}

#[derive(Deserialize)]
struct Wire {
    session_id: String,
    hook_event_name: String,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    transcript_path: Option<String>,
    #[serde(default)]
    stop_hook_active: Option<bool>,
    #[serde(default)]
    last_assistant_message: Option<String>,
    /// Gemini CLI's name for the turn's reply (`AfterAgent`).
    #[serde(default)]
    prompt_response: Option<String>,
    #[serde(default)]
    agent_transcript_path: Option<String>,
    #[serde(default)]
    agent_id: Option<String>,
    #[serde(default)]
    permission_mode: Option<String>,
    #[serde(default)]
    tool_name: Option<String>,
    #[serde(default)]
    tool_input: Option<Value>,
}

/// Largest hook input accepted on stdin.
pub const MAX_INPUT_BYTES: usize = 16 << 20;

/// Deepest nesting of arrays and objects read in a hook input. serde_json stops
/// at 128, which an MCP tool's arguments can pass (and then the gate could not
/// answer); this is checked before parsing, so the parser's own limit is lifted.
pub const MAX_DEPTH: usize = 512;

/// The JSON value of `text`, nested at most [`MAX_DEPTH`] deep.
pub fn parse_json(text: &str) -> Result<Value, String> {
    let depth = nesting(text);
    if depth > MAX_DEPTH {
        return Err(format!(
            "hook input nests arrays and objects more than {MAX_DEPTH} deep"
        ));
    }
    let mut de = serde_json::Deserializer::from_str(text);
    de.disable_recursion_limit();
    let value = <Value as serde::Deserialize>::deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v))
        .map_err(|e| format!("hook input is not JSON: {e}"))?;
    Ok(value)
}

/// How deep arrays and objects nest in JSON text (brackets inside strings not counted);
/// stops counting once past [`MAX_DEPTH`].
fn nesting(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for b in text.bytes() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
                if deepest > MAX_DEPTH {
                    break;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// The `hook_event_name` of hook input that may not parse as a whole; empty when it names none.
pub fn event_named_in(text: &str) -> String {
    parse_json(text)
        .ok()
        .and_then(|v| v["hook_event_name"].as_str().map(String::from))
        .unwrap_or_default()
}

impl HookInput {
    pub fn parse(agent: Agent, text: &str) -> Result<HookInput, String> {
        if text.trim().is_empty() {
            return Err(format!(
                "no hook input on stdin: {} sends one JSON object; run this from a hook, or pipe one in",
                agent.title()
            ));
        }
        let raw = parse_json(text)?;
        if !raw.is_object() {
            return Err("hook input must be a JSON object".into());
        }
        let w: Wire = serde_json::from_value(raw.clone()).map_err(|e| {
            format!(
                "hook input is missing a field {} always sends: {e}",
                agent.title()
            )
        })?;
        if w.session_id.is_empty() {
            return Err("hook input has an empty session_id".into());
        }
        Ok(HookInput {
            agent,
            session_id: w.session_id,
            event_name: w.hook_event_name,
            cwd: w.cwd,
            transcript_path: w.transcript_path.filter(|p| !p.is_empty()),
            stop_hook_active: w.stop_hook_active.unwrap_or(false),
            last_assistant_message: w.last_assistant_message.or(w.prompt_response),
            agent_transcript_path: w.agent_transcript_path.filter(|p| !p.is_empty()),
            agent_id: w.agent_id.filter(|a| !a.is_empty()),
            permission_mode: w.permission_mode,
            tool_name: w.tool_name,
            tool_input: w.tool_input,
            raw,
        })
    }

    /// What the agent lets a hook say on this event.
    pub fn spec(&self) -> EventSpec {
        self.agent.event(&self.event_name)
    }

    /// The transcript to read the last assistant message from, when the input lacks it.
    pub fn transcript(&self) -> Option<&str> {
        match self.event_name.as_str() {
            "SubagentStop" => self
                .agent_transcript_path
                .as_deref()
                .or(self.transcript_path.as_deref()),
            _ => self.transcript_path.as_deref(),
        }
    }

    /// The transcript a session's spend is read from: a subagent's own, else the session's.
    pub fn usage_transcript(&self) -> Option<&str> {
        match &self.agent_id {
            Some(_) => self
                .agent_transcript_path
                .as_deref()
                .or(self.transcript_path.as_deref()),
            None => self.transcript_path.as_deref(),
        }
    }

    /// The key of the hook session this event belongs to: a subagent is a session of its own,
    /// so its stops do not count toward the main thread's loop.
    pub fn session_key(&self) -> String {
        match &self.agent_id {
            Some(agent) => format!("{}\0{agent}", self.session_id),
            None => self.session_id.clone(),
        }
    }

    fn origin(&self, tool: Option<String>) -> Origin {
        Origin {
            agent: self.agent.id().to_string(),
            event: self.event_name.clone(),
            agent_id: self.agent_id.clone(),
            permission_mode: self.permission_mode.clone(),
            tool,
        }
    }

    /// The policy event for this hook input. `response` is the assistant's last
    /// message for turn events (from the input or the transcript); `index` the turn's number.
    pub fn event(&self, response: Option<String>, index: u32) -> Result<Event, String> {
        Ok(match self.spec().kind {
            Kind::Turn => Event::TurnComplete(Turn {
                session_id: self.session_id.clone(),
                response: response
                    .ok_or_else(|| format!("a {} input has neither the last assistant message nor a readable transcript_path", self.event_name))?,
                index,
                continuation: self.stop_hook_active,
                origin: Some(self.origin(None)),
            }),
            Kind::Tool | Kind::Permission => {
                let native = self.tool_name.clone().ok_or_else(|| format!("a {} input has no tool_name", self.event_name))?;
                let (name, tool) = match self.agent.shared_tool_name(&native) {
                    Some(shared) => (shared.to_string(), Some(native)),
                    None => (native, None),
                };
                Event::ToolCall(ToolCall {
                    name,
                    input: self.tool_input.clone().unwrap_or(Value::Object(Map::new())).to_string(),
                    origin: Some(self.origin(tool)),
                })
            }
            Kind::Other => Event::Custom((self.event_name.clone(), self.raw.to_string())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn input(agent: Agent, v: Value) -> HookInput {
        HookInput::parse(agent, &v.to_string()).unwrap()
    }

    #[test]
    fn a_stop_becomes_a_turn_with_its_origin() {
        let i = input(
            Agent::ClaudeCode,
            json!({"session_id": "s1", "hook_event_name": "SubagentStop", "stop_hook_active": true, "last_assistant_message": "hi", "agent_id": "a7", "permission_mode": "plan"}),
        );
        let Event::TurnComplete(t) = i.event(i.last_assistant_message.clone(), 3).unwrap() else {
            panic!()
        };
        assert_eq!(
            (t.response.as_str(), t.index, t.continuation),
            ("hi", 3, true)
        );
        let o = t.origin.unwrap();
        assert_eq!(
            (
                o.agent.as_str(),
                o.event.as_str(),
                o.agent_id.as_deref(),
                o.permission_mode.as_deref()
            ),
            ("claude-code", "SubagentStop", Some("a7"), Some("plan"))
        );
        assert_eq!(i.session_key(), "s1\0a7");
        let i = input(
            Agent::ClaudeCode,
            json!({"session_id": "s1", "hook_event_name": "Stop"}),
        );
        assert!(i.event(None, 1).unwrap_err().contains("transcript_path"));
        assert_eq!(i.session_key(), "s1");
    }

    #[test]
    fn gemini_names_are_read_in_the_shared_vocabulary() {
        let i = input(
            Agent::Gemini,
            json!({"session_id": "g", "hook_event_name": "AfterAgent", "prompt": "p", "prompt_response": "done", "stop_hook_active": false}),
        );
        assert_eq!(i.last_assistant_message.as_deref(), Some("done"));
        let i = input(
            Agent::Gemini,
            json!({"session_id": "g", "hook_event_name": "BeforeTool", "tool_name": "run_shell_command", "tool_input": {"command": "ls"}}),
        );
        let Event::ToolCall(c) = i.event(None, 0).unwrap() else {
            panic!()
        };
        assert_eq!(
            (c.name.as_str(), c.origin.unwrap().tool.as_deref()),
            ("Bash", Some("run_shell_command"))
        );
    }

    #[test]
    fn other_events_are_custom_with_the_whole_input() {
        let i = input(
            Agent::Codex,
            json!({"session_id": "s", "hook_event_name": "UserPromptSubmit", "prompt": "p"}),
        );
        let Event::Custom((name, payload)) = i.event(None, 0).unwrap() else {
            panic!()
        };
        assert_eq!(
            (
                name.as_str(),
                serde_json::from_str::<Value>(&payload).unwrap()["prompt"].as_str()
            ),
            ("UserPromptSubmit", Some("p"))
        );
        let i = input(
            Agent::ClaudeCode,
            json!({"session_id": "s", "hook_event_name": "SomethingNew"}),
        );
        assert!(matches!(i.event(None, 0).unwrap(), Event::Custom(_)));
    }

    #[test]
    fn deep_tool_inputs_are_read_up_to_the_limit() {
        let nest = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        let input = |n: usize| {
            format!(
                r#"{{"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "mcp__x", "tool_input": {{"a": {}, "s": "[[[{{"}}}}"#,
                nest(n)
            )
        };
        // Past serde_json's own 128, the call reaches the policy.
        let i = HookInput::parse(Agent::ClaudeCode, &input(130)).unwrap();
        let Event::ToolCall(c) = i.event(None, 0).unwrap() else {
            panic!()
        };
        assert!(c.input.contains(&nest(130)));
        assert_eq!(event_named_in(&input(130)), "PreToolUse");
        let e = HookInput::parse(Agent::ClaudeCode, &input(MAX_DEPTH + 1)).unwrap_err();
        assert!(e.contains("more than 512 deep"), "{e}");
        assert_eq!(nesting(r#"{"a": "[[[[", "b": ["\"{"]}"#), 2);
    }

    #[test]
    fn bad_input_is_refused_clearly() {
        let p = |t: &str| HookInput::parse(Agent::ClaudeCode, t).unwrap_err();
        assert!(p("").contains("no hook input"));
        assert!(p("{").contains("not JSON"));
        assert!(p("[]").contains("JSON object"));
        assert!(p("{\"hook_event_name\": \"Stop\"}").contains("session_id"));
        assert!(
            p("{\"hook_event_name\": \"Stop\", \"session_id\": \"\"}").contains("empty session_id")
        );
    }
}
