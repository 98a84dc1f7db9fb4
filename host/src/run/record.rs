//! Events and decisions as JSON, for the store, the run log and `--json`
//! output; and the host's check of a decision before acting on it (JSON
//! payloads must parse, strings must fit the limit).

use serde_json::{Value, json};

use crate::bindings::{Decision, Event, Origin, Outcome};

/// Embed a JSON text as a value when it parses, else as a string.
fn embed(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

pub fn event_json(e: &Event) -> Value {
    match e {
        Event::Start(input) => json!({"type": "start", "input": embed(input)}),
        Event::TurnComplete(t) => json!({
            "type": "turn-complete", "session_id": t.session_id, "response": t.response,
            "index": t.index, "continuation": t.continuation, "origin": t.origin.as_ref().map(origin_json),
        }),
        Event::ToolCall(c) => {
            json!({"type": "tool-call", "name": c.name, "input": embed(&c.input), "origin": c.origin.as_ref().map(origin_json)})
        }
        Event::Tick(p) => json!({"type": "tick", "payload": embed(p)}),
        Event::UserInput(t) => json!({"type": "user-input", "text": t}),
        Event::Custom((name, p)) => json!({"type": "custom", "name": name, "payload": embed(p)}),
    }
}

fn origin_json(o: &Origin) -> Value {
    json!({"agent": o.agent, "event": o.event, "agent_id": o.agent_id, "permission_mode": o.permission_mode, "tool": o.tool})
}

fn parse_origin(v: &Value) -> Option<Origin> {
    let s = |k: &str| v[k].as_str().map(String::from);
    Some(Origin {
        agent: s("agent")?,
        event: s("event")?,
        agent_id: s("agent_id"),
        permission_mode: s("permission_mode"),
        tool: s("tool"),
    })
}

/// An event back from its stored JSON (the inverse of [`event_json`]).
pub fn parse_event(text: &str) -> anyhow::Result<Event> {
    let v: Value = serde_json::from_str(text)?;
    // Payloads were embedded as JSON when they parsed; give them back as text.
    let payload = |v: &Value| match v {
        Value::String(s) if serde_json::from_str::<Value>(s).is_err() => s.clone(),
        other => other.to_string(),
    };
    let s = |k: &str| {
        v[k].as_str()
            .map(String::from)
            .ok_or_else(|| anyhow::anyhow!("the event has no `{k}`"))
    };
    Ok(match v["type"].as_str().unwrap_or_default() {
        "start" => Event::Start(payload(&v["input"])),
        "turn-complete" => Event::TurnComplete(crate::bindings::Turn {
            session_id: s("session_id")?,
            response: s("response")?,
            index: v["index"].as_u64().unwrap_or(0) as u32,
            continuation: v["continuation"].as_bool().unwrap_or(false),
            origin: parse_origin(&v["origin"]),
        }),
        "tool-call" => Event::ToolCall(crate::bindings::ToolCall {
            name: s("name")?,
            input: payload(&v["input"]),
            origin: parse_origin(&v["origin"]),
        }),
        "tick" => Event::Tick(payload(&v["payload"])),
        "user-input" => Event::UserInput(s("text")?),
        "custom" => Event::Custom((s("name")?, payload(&v["payload"]))),
        other => anyhow::bail!("unknown event type `{other}`"),
    })
}

pub fn decision_json(d: &Decision) -> Value {
    match d {
        Decision::Pass => json!({"type": "pass"}),
        Decision::Inject(m) => json!({"type": "inject", "message": m}),
        Decision::Block(r) => json!({"type": "block", "reason": r}),
        Decision::Rewrite(p) => json!({"type": "rewrite", "payload": embed(p)}),
        Decision::Ask(q) => json!({"type": "ask", "question": q}),
        Decision::Done(o) => {
            json!({"type": "done", "success": o.success, "summary": o.summary, "data": o.data.as_deref().map(embed)})
        }
        Decision::Escalate(r) => json!({"type": "escalate", "reason": r}),
        Decision::Sleep(t) => {
            json!({"type": "sleep", "until_ms": t.until_ms, "tick": embed(&t.tick), "reason": t.reason})
        }
    }
}

/// A decision back from its stored JSON (the inverse of [`decision_json`]).
pub fn parse_decision(text: &str) -> anyhow::Result<Decision> {
    let v: Value = serde_json::from_str(text)?;
    let s = |k: &str| {
        v[k].as_str()
            .map(String::from)
            .ok_or_else(|| anyhow::anyhow!("the decision has no `{k}`"))
    };
    Ok(match v["type"].as_str().unwrap_or_default() {
        "pass" => Decision::Pass,
        "inject" => Decision::Inject(s("message")?),
        "block" => Decision::Block(s("reason")?),
        "rewrite" => Decision::Rewrite(v["payload"].to_string()),
        "ask" => Decision::Ask(s("question")?),
        "done" => Decision::Done(Outcome {
            success: v["success"].as_bool().unwrap_or(false),
            summary: s("summary")?,
            data: v.get("data").filter(|d| !d.is_null()).map(Value::to_string),
        }),
        "escalate" => Decision::Escalate(s("reason")?),
        "sleep" => Decision::Sleep(crate::bindings::Timer {
            until_ms: v["until_ms"]
                .as_u64()
                .ok_or_else(|| anyhow::anyhow!("the decision has no `until_ms`"))?,
            tick: v["tick"].to_string(),
            reason: s("reason")?,
        }),
        other => anyhow::bail!("unknown decision type `{other}`"),
    })
}

/// An outcome as JSON, its `data` embedded (the `done` decision above, without its type).
pub fn outcome_json(o: &Outcome) -> Value {
    json!({"success": o.success, "summary": o.summary, "data": o.data.as_deref().map(embed)})
}

/// One line for the run log.
pub fn describe_decision(d: &Decision) -> String {
    let short = |s: &str| crate::ui::shorten(&crate::ui::sanitize(s), 120);
    match d {
        Decision::Pass => "pass".into(),
        Decision::Inject(m) => format!("inject: {}", short(m)),
        Decision::Block(r) => format!("block: {}", short(r)),
        Decision::Rewrite(_) => "rewrite".into(),
        Decision::Ask(q) => format!("ask: {}", short(q)),
        Decision::Done(o) => format!(
            "done ({}): {}",
            if o.success { "success" } else { "failure" },
            short(&o.summary)
        ),
        Decision::Escalate(r) => format!("escalate: {}", short(r)),
        Decision::Sleep(t) => format!(
            "sleep until {} UTC: {}",
            crate::ui::utc(t.until_ms as i64),
            short(&t.reason)
        ),
    }
}

/// Check what the host will act on: JSON that must parse, strings within `max_bytes`.
pub fn validate_decision(d: &Decision, max_bytes: u64) -> Result<(), String> {
    let texts: Vec<(&str, &str)> = match d {
        Decision::Pass => vec![],
        Decision::Inject(m) => vec![("inject", m)],
        Decision::Block(r) => vec![("block", r)],
        Decision::Rewrite(p) => vec![("rewrite", p)],
        Decision::Ask(q) => vec![("ask", q)],
        Decision::Done(o) => [("done.summary", o.summary.as_str())]
            .into_iter()
            .chain(o.data.as_deref().map(|x| ("done.data", x)))
            .collect(),
        Decision::Escalate(r) => vec![("escalate", r)],
        Decision::Sleep(t) => vec![("sleep.reason", &t.reason), ("sleep.tick", &t.tick)],
    };
    for (what, text) in texts {
        if text.len() as u64 > max_bytes {
            return Err(format!(
                "{what} is {} bytes, over limits.max_string_bytes = {max_bytes}",
                text.len()
            ));
        }
    }
    let json_field = match d {
        Decision::Rewrite(p) => Some(("rewrite", p.as_str())),
        Decision::Done(o) => o.data.as_deref().map(|x| ("done.data", x)),
        Decision::Sleep(t) => Some(("sleep.tick", t.tick.as_str())),
        _ => None,
    };
    if let Some((what, text)) = json_field {
        serde_json::from_str::<serde::de::IgnoredAny>(text)
            .map_err(|e| format!("{what} is not JSON: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_json_in_a_decision_is_refused() {
        let d = Decision::Done(Outcome {
            success: true,
            summary: "ok".into(),
            data: Some("{nope".into()),
        });
        assert!(
            validate_decision(&d, 100)
                .unwrap_err()
                .contains("done.data is not JSON")
        );
        assert!(validate_decision(&Decision::Rewrite("[1]".into()), 100).is_ok());
        assert!(
            validate_decision(&Decision::Inject("x".repeat(101)), 100)
                .unwrap_err()
                .contains("limits.max_string_bytes")
        );
    }

    #[test]
    fn stored_events_read_back_as_they_were_delivered() {
        let events = [
            Event::Start("{\"a\":[1,2]}".into()),
            Event::Start("not json".into()),
            Event::Tick("{}".into()),
            Event::UserInput("yes".into()),
            Event::Custom(("PostToolUse".into(), "{\"x\":1}".into())),
            Event::ToolCall(crate::bindings::ToolCall {
                name: "Bash".into(),
                input: "{\"command\":\"ls\"}".into(),
                origin: None,
            }),
            Event::TurnComplete(crate::bindings::Turn {
                session_id: "s".into(),
                response: "done".into(),
                index: 2,
                continuation: true,
                origin: None,
            }),
            Event::ToolCall(crate::bindings::ToolCall {
                name: "Bash".into(),
                input: "{}".into(),
                origin: Some(Origin {
                    agent: "gemini".into(),
                    event: "BeforeTool".into(),
                    agent_id: None,
                    permission_mode: Some("default".into()),
                    tool: Some("run_shell_command".into()),
                }),
            }),
        ];
        for e in events {
            let text = event_json(&e).to_string();
            assert_eq!(event_json(&parse_event(&text).unwrap()).to_string(), text);
        }
        assert!(parse_event("{\"type\": \"nope\"}").is_err());
    }

    #[test]
    fn stored_decisions_read_back() {
        let decisions = [
            Decision::Pass,
            Decision::Inject("go on".into()),
            Decision::Block("no".into()),
            Decision::Rewrite("{\"a\":1}".into()),
            Decision::Ask("which?".into()),
            Decision::Done(Outcome {
                success: true,
                summary: "ok".into(),
                data: Some("[1]".into()),
            }),
            Decision::Done(Outcome {
                success: false,
                summary: "no".into(),
                data: None,
            }),
            Decision::Escalate("help".into()),
        ];
        for d in decisions {
            assert_eq!(parse_decision(&decision_json(&d).to_string()).unwrap(), d);
        }
    }

    #[test]
    fn records_embed_json_payloads() {
        assert_eq!(
            event_json(&Event::Start("{\"a\":1}".into())),
            json!({"type": "start", "input": {"a": 1}})
        );
        assert_eq!(
            event_json(&Event::Tick("not json".into()))["payload"],
            json!("not json")
        );
    }
}
