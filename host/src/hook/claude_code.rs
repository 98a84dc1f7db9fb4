//! The Claude Code hook protocol: one JSON object on stdin becomes a policy
//! event, and the policy's decision becomes the hook's stdout JSON.
//! See `shared/reference/claude-code-hooks.md` for the protocol itself.
//!
//! Everything here is pure: parsing, mapping and rendering, tested without Wasm.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::bindings::{Decision, Event, ToolCall, Turn};

/// The fields loopbox reads from a hook's input; the rest is kept in `raw`.
#[derive(Debug, Clone)]
pub struct HookInput {
    pub session_id: String,
    pub event_name: String,
    pub cwd: Option<String>,
    pub transcript_path: Option<String>,
    pub stop_hook_active: bool,
    pub last_assistant_message: Option<String>,
    pub agent_transcript_path: Option<String>,
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
    #[serde(default)]
    agent_transcript_path: Option<String>,
    #[serde(default)]
    tool_name: Option<String>,
    #[serde(default)]
    tool_input: Option<Value>,
}

/// Largest hook input accepted on stdin.
pub const MAX_INPUT_BYTES: usize = 16 << 20;

impl HookInput {
    pub fn parse(text: &str) -> Result<HookInput, String> {
        if text.trim().is_empty() {
            return Err("no hook input on stdin: Claude Code sends one JSON object; run this from a hook, or pipe one in".into());
        }
        let raw: Value = serde_json::from_str(text).map_err(|e| format!("hook input is not JSON: {e}"))?;
        if !raw.is_object() {
            return Err("hook input must be a JSON object".into());
        }
        let w: Wire = serde_json::from_value(raw.clone()).map_err(|e| format!("hook input is missing a field Claude Code always sends: {e}"))?;
        if w.session_id.is_empty() {
            return Err("hook input has an empty session_id".into());
        }
        Ok(HookInput {
            session_id: w.session_id,
            event_name: w.hook_event_name,
            cwd: w.cwd,
            transcript_path: w.transcript_path,
            stop_hook_active: w.stop_hook_active.unwrap_or(false),
            last_assistant_message: w.last_assistant_message,
            agent_transcript_path: w.agent_transcript_path,
            tool_name: w.tool_name,
            tool_input: w.tool_input,
            raw,
        })
    }

    pub fn is_stop(&self) -> bool {
        matches!(self.event_name.as_str(), "Stop" | "SubagentStop")
    }

    /// The transcript to read the last assistant message from, when the input lacks it.
    pub fn transcript(&self) -> Option<&str> {
        match self.event_name.as_str() {
            "SubagentStop" => self.agent_transcript_path.as_deref().or(self.transcript_path.as_deref()),
            _ => self.transcript_path.as_deref(),
        }
    }

    /// The policy event for this hook input. `response` is the assistant's last
    /// message for Stop events (from the input or the transcript); `index` the turn's number.
    pub fn event(&self, response: Option<String>, index: u32) -> Result<Event, String> {
        Ok(match self.event_name.as_str() {
            "Stop" | "SubagentStop" => Event::TurnComplete(Turn {
                session_id: self.session_id.clone(),
                response: response.ok_or("a Stop hook input has neither last_assistant_message nor a readable transcript_path")?,
                index,
                continuation: self.stop_hook_active,
            }),
            "PreToolUse" => Event::ToolCall(ToolCall {
                name: self.tool_name.clone().ok_or("a PreToolUse input has no tool_name")?,
                input: self.tool_input.clone().unwrap_or(Value::Object(Map::new())).to_string(),
            }),
            other => Event::Custom((other.to_string(), self.raw.to_string())),
        })
    }
}

/// What the hook process prints and exits with.
#[derive(Debug, Clone, PartialEq)]
pub struct HookOutput {
    /// The JSON object for stdout; None prints nothing.
    pub stdout: Option<Value>,
}

fn system_message(text: &str) -> Value {
    json!({"systemMessage": format!("loopbox: {text}")})
}

/// The hook answer for `decision` on `event_name`.
pub fn render(event_name: &str, decision: &Decision) -> Result<HookOutput, String> {
    let out = |v: Value| Ok(HookOutput { stdout: Some(v) });
    let none = || Ok(HookOutput { stdout: None });
    // `continue: false` stops Claude whatever the event.
    if let Decision::Escalate(reason) = decision {
        return out(json!({"continue": false, "stopReason": reason}));
    }
    if let Decision::Done(o) = decision {
        return out(system_message(&o.summary));
    }
    match (event_name, decision) {
        (_, Decision::Pass) => none(),
        ("Stop" | "SubagentStop", Decision::Inject(msg) | Decision::Block(msg)) => out(json!({"decision": "block", "reason": msg})),
        ("PreToolUse", Decision::Block(reason) | Decision::Inject(reason)) => out(pre_tool_use("deny", reason, None)),
        ("PreToolUse", Decision::Ask(question)) => out(pre_tool_use("ask", question, None)),
        ("PreToolUse", Decision::Rewrite(json)) => {
            let input: Value = serde_json::from_str(json).map_err(|e| format!("rewrite is not JSON: {e}"))?;
            if !input.is_object() {
                return Err("rewrite of a tool input must be a JSON object".into());
            }
            // Never "allow": a policy that could rewrite a tool call and approve it at
            // once would run any command through the agent with the user's rights.
            // Claude Code shows the rewritten input and asks.
            out(pre_tool_use("ask", "the loop policy rewrote this tool call; approve the rewritten input to run it", Some(input)))
        }
        ("UserPromptSubmit", Decision::Inject(context)) => {
            out(json!({"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": context}}))
        }
        ("PostToolUse" | "UserPromptSubmit", Decision::Block(reason) | Decision::Inject(reason)) => out(json!({"decision": "block", "reason": reason})),
        (event, d) => Err(format!("the policy answered {} to a {event} hook, which cannot carry it", crate::record::describe_decision(d))),
    }
}

fn pre_tool_use(decision: &str, reason: &str, updated: Option<Value>) -> Value {
    let mut specific = json!({"hookEventName": "PreToolUse", "permissionDecision": decision, "permissionDecisionReason": reason});
    if let Some(input) = updated {
        specific["updatedInput"] = input;
    }
    json!({"hookSpecificOutput": specific})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bindings::Outcome;

    fn input(v: Value) -> HookInput {
        HookInput::parse(&v.to_string()).unwrap()
    }

    #[test]
    fn stop_becomes_a_turn() {
        let i = input(json!({"session_id": "s1", "hook_event_name": "Stop", "stop_hook_active": true, "last_assistant_message": "hi", "cwd": "/w"}));
        let e = i.event(i.last_assistant_message.clone(), 3).unwrap();
        assert_eq!(e, Event::TurnComplete(Turn { session_id: "s1".into(), response: "hi".into(), index: 3, continuation: true }));
        let i = input(json!({"session_id": "s1", "hook_event_name": "Stop"}));
        assert!(i.event(None, 1).unwrap_err().contains("transcript_path"));
    }

    #[test]
    fn pre_tool_use_becomes_a_tool_call_and_others_custom() {
        let i = input(json!({"session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"}}));
        assert_eq!(i.event(None, 0).unwrap(), Event::ToolCall(ToolCall { name: "Bash".into(), input: "{\"command\":\"ls\"}".into() }));
        let i = input(json!({"session_id": "s", "hook_event_name": "UserPromptSubmit", "prompt": "p"}));
        match i.event(None, 0).unwrap() {
            Event::Custom((name, payload)) => {
                assert_eq!((name.as_str(), serde_json::from_str::<Value>(&payload).unwrap()["prompt"].as_str()), ("UserPromptSubmit", Some("p")))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_input_is_refused_clearly() {
        assert!(HookInput::parse("").unwrap_err().contains("no hook input"));
        assert!(HookInput::parse("{").unwrap_err().contains("not JSON"));
        assert!(HookInput::parse("[]").unwrap_err().contains("JSON object"));
        assert!(HookInput::parse("{\"hook_event_name\": \"Stop\"}").unwrap_err().contains("session_id"));
    }

    #[test]
    fn decisions_render_per_the_protocol() {
        let r = |e: &str, d: Decision| render(e, &d).unwrap().stdout;
        assert_eq!(r("Stop", Decision::Inject("again".into())), Some(json!({"decision": "block", "reason": "again"})));
        assert_eq!(r("Stop", Decision::Pass), None);
        assert_eq!(r("Stop", Decision::Done(Outcome { success: true, summary: "ok".into(), data: None })), Some(json!({"systemMessage": "loopbox: ok"})));
        assert_eq!(r("Stop", Decision::Escalate("help".into())), Some(json!({"continue": false, "stopReason": "help"})));
        assert_eq!(
            r("PreToolUse", Decision::Block("no rm".into())),
            Some(json!({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": "no rm"}}))
        );
        assert_eq!(r("PreToolUse", Decision::Ask("sure?".into())).unwrap()["hookSpecificOutput"]["permissionDecision"], "ask");
        let rw = r("PreToolUse", Decision::Rewrite("{\"command\":\"ls -a\"}".into())).unwrap();
        assert_eq!(
            (rw["hookSpecificOutput"]["permissionDecision"].as_str(), &rw["hookSpecificOutput"]["updatedInput"]),
            (Some("ask"), &json!({"command": "ls -a"}))
        );
        assert_eq!(r("PreToolUse", Decision::Pass), None);
        assert_eq!(r("PostToolUse", Decision::Block("x".into())), Some(json!({"decision": "block", "reason": "x"})));
        assert_eq!(r("UserPromptSubmit", Decision::Block("x".into())), Some(json!({"decision": "block", "reason": "x"})));
        assert!(render("PreToolUse", &Decision::Rewrite("[1]".into())).is_err());
        assert!(render("Notification", &Decision::Ask("?".into())).unwrap_err().contains("cannot carry it"));
    }
}
