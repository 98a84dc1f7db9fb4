//! Events and decisions as JSON, for the store, the run log and `--json`
//! output; and the host's check of a decision before acting on it (JSON
//! payloads must parse, strings must fit the limit).

use serde_json::{Value, json};

use crate::bindings::{Decision, Event, Outcome};

/// Embed a JSON text as a value when it parses, else as a string.
fn embed(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

pub fn event_json(e: &Event) -> Value {
    match e {
        Event::Start(input) => json!({"type": "start", "input": embed(input)}),
        Event::TurnComplete(t) => json!({
            "type": "turn-complete", "session_id": t.session_id, "response": t.response,
            "index": t.index, "continuation": t.continuation,
        }),
        Event::ToolCall(c) => json!({"type": "tool-call", "name": c.name, "input": embed(&c.input)}),
        Event::Tick(p) => json!({"type": "tick", "payload": embed(p)}),
        Event::UserInput(t) => json!({"type": "user-input", "text": t}),
        Event::Custom((name, p)) => json!({"type": "custom", "name": name, "payload": embed(p)}),
    }
}

pub fn decision_json(d: &Decision) -> Value {
    match d {
        Decision::Pass => json!({"type": "pass"}),
        Decision::Inject(m) => json!({"type": "inject", "message": m}),
        Decision::Block(r) => json!({"type": "block", "reason": r}),
        Decision::Rewrite(p) => json!({"type": "rewrite", "payload": embed(p)}),
        Decision::Ask(q) => json!({"type": "ask", "question": q}),
        Decision::Done(o) => json!({"type": "done", "success": o.success, "summary": o.summary, "data": o.data.as_deref().map(embed)}),
        Decision::Escalate(r) => json!({"type": "escalate", "reason": r}),
    }
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
        Decision::Done(o) => format!("done ({}): {}", if o.success { "success" } else { "failure" }, short(&o.summary)),
        Decision::Escalate(r) => format!("escalate: {}", short(r)),
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
        Decision::Done(o) => [("done.summary", o.summary.as_str())].into_iter().chain(o.data.as_deref().map(|x| ("done.data", x))).collect(),
        Decision::Escalate(r) => vec![("escalate", r)],
    };
    for (what, text) in texts {
        if text.len() as u64 > max_bytes {
            return Err(format!("{what} is {} bytes, over limits.max_string_bytes = {max_bytes}", text.len()));
        }
    }
    let json_field = match d {
        Decision::Rewrite(p) => Some(("rewrite", p.as_str())),
        Decision::Done(o) => o.data.as_deref().map(|x| ("done.data", x)),
        _ => None,
    };
    if let Some((what, text)) = json_field {
        serde_json::from_str::<serde::de::IgnoredAny>(text).map_err(|e| format!("{what} is not JSON: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_json_in_a_decision_is_refused() {
        let d = Decision::Done(Outcome { success: true, summary: "ok".into(), data: Some("{nope".into()) });
        assert!(validate_decision(&d, 100).unwrap_err().contains("done.data is not JSON"));
        assert!(validate_decision(&Decision::Rewrite("[1]".into()), 100).is_ok());
        assert!(validate_decision(&Decision::Inject("x".repeat(101)), 100).unwrap_err().contains("limits.max_string_bytes"));
    }

    #[test]
    fn records_embed_json_payloads() {
        assert_eq!(event_json(&Event::Start("{\"a\":1}".into())), json!({"type": "start", "input": {"a": 1}}));
        assert_eq!(event_json(&Event::Tick("not json".into()))["payload"], json!("not json"));
    }
}
