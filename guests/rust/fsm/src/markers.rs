//! Markers an action prints to steer the loop: `LOOP_STOP: why` ends it,
//! `FATAL_ERROR: why` fails it, and a CCW-style `ACTION_RESULT:` block is
//! read into structured fields for captures and `${prev.result.*}`.

use serde_json::{Map, Value};

#[derive(Debug, Clone, PartialEq)]
pub enum Signal {
    Stop(String),
    Fatal(String),
}

/// The first stop or fatal marker at the start of a line.
pub fn signal(output: &str) -> Option<Signal> {
    output.lines().find_map(|line| {
        let line = line.trim_start();
        if let Some(why) = line.strip_prefix("LOOP_STOP:") {
            Some(Signal::Stop(why.trim().to_string()))
        } else {
            line.strip_prefix("FATAL_ERROR:")
                .map(|why| Signal::Fatal(why.trim().to_string()))
        }
    })
}

/// Parse the last `ACTION_RESULT:` block:
///
/// ```text
/// ACTION_RESULT:
/// - action: DEVELOP
/// - status: success
/// - message: Implemented the parser
/// - state_updates: {"tasks_done": 2}
///
/// FILES_UPDATED:
/// - src/parse.rs: new parser
///
/// NEXT_ACTION_NEEDED: VALIDATE
/// ```
///
/// into `{action, status, message, state_updates, files_updated: {path: note}, next_action}`.
/// A `state_updates` value that parses as JSON is kept as JSON.
pub fn action_result(output: &str) -> Option<Value> {
    let lines: Vec<&str> = output.lines().collect();
    let start = lines.iter().rposition(|l| l.trim() == "ACTION_RESULT:")?;
    let mut result = Map::new();
    let mut files = Map::new();
    let mut section = "result";
    for line in &lines[start + 1..] {
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        if t == "FILES_UPDATED:" {
            section = "files";
            continue;
        }
        if let Some(next) = t.strip_prefix("NEXT_ACTION_NEEDED:") {
            result.insert("next_action".into(), Value::String(next.trim().to_string()));
            section = "done";
            continue;
        }
        let Some(item) = t.strip_prefix("- ") else {
            if section == "result" && !result.is_empty() {
                break; // prose after the block
            }
            continue;
        };
        let (key, value) = match item.split_once(':') {
            Some((k, v)) => (k.trim(), v.trim()),
            None => (item.trim(), ""),
        };
        match section {
            "result" => {
                let value = if key == "state_updates" {
                    serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_string()))
                } else {
                    Value::String(value.to_string())
                };
                result.insert(key.to_string(), value);
            }
            "files" => {
                files.insert(key.to_string(), Value::String(value.to_string()));
            }
            _ => {}
        }
    }
    if !files.is_empty() {
        result.insert("files_updated".into(), Value::Object(files));
    }
    Some(Value::Object(result))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn stop_and_fatal_markers_are_found_at_line_starts() {
        assert_eq!(
            signal("working\nLOOP_STOP: nothing left\nmore"),
            Some(Signal::Stop("nothing left".into()))
        );
        assert_eq!(
            signal("  FATAL_ERROR: disk full"),
            Some(Signal::Fatal("disk full".into()))
        );
        assert_eq!(signal("echo LOOP_STOP: not at the start"), None);
        assert_eq!(signal("all good"), None);
    }

    #[test]
    fn an_action_result_block_becomes_fields() {
        let out = "Did the work.\n\nACTION_RESULT:\n- action: DEVELOP\n- status: success\n- message: parser done\n- state_updates: {\"tasks_done\": 2}\n\nFILES_UPDATED:\n- src/parse.rs: new parser\n- README.md: usage\n\nNEXT_ACTION_NEEDED: VALIDATE\n";
        assert_eq!(
            action_result(out),
            Some(json!({
                "action": "DEVELOP", "status": "success", "message": "parser done", "state_updates": {"tasks_done": 2},
                "next_action": "VALIDATE", "files_updated": {"src/parse.rs": "new parser", "README.md": "usage"}
            }))
        );
        assert_eq!(action_result("no block"), None);
        assert_eq!(
            action_result("ACTION_RESULT:\n- status: failed\n- state_updates: not json"),
            Some(json!({"status": "failed", "state_updates": "not json"}))
        );
    }
}
