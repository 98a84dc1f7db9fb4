//! Reading the last assistant message from a Claude Code transcript (JSONL),
//! for Stop inputs from versions that do not send `last_assistant_message`.
//!
//! The file is opened through a cap-std directory handle for the root it lies
//! in: the workspace or Claude Code's configuration directory, where it keeps
//! transcripts (`$CLAUDE_CONFIG_DIR`, else `~/.claude`). A path anywhere else,
//! or escaping through `..` or a symlink, is refused.
//!
//! Claude Code writes one line per content block, so one assistant message
//! may span several lines with the same `message.id`. The answer is the text
//! of the last assistant message; when that message holds only tool calls it
//! is empty, never an older message's text.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use serde_json::Value;

use crate::files::MAX_TRANSCRIPT_BYTES;

/// Claude Code's configuration directory: `$CLAUDE_CONFIG_DIR`, else `~/.claude`.
pub fn claude_config_dir() -> Option<PathBuf> {
    match std::env::var_os("CLAUDE_CONFIG_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => Some(PathBuf::from(dir)),
        None => std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".claude")),
    }
}

/// The roots a transcript may live under: the workspace and Claude Code's configuration directory.
pub fn allowed_roots(workspace: &Path) -> Vec<PathBuf> {
    let mut roots = vec![workspace.to_path_buf()];
    roots.extend(claude_config_dir());
    roots
        .into_iter()
        .filter_map(|r| r.canonicalize().ok())
        .collect()
}

pub fn last_assistant_message(path: &str, roots: &[PathBuf]) -> Result<String, String> {
    let p = Path::new(path);
    let (root, rel) = roots
        .iter()
        .find_map(|r| p.strip_prefix(r).ok().map(|rel| (r, rel)))
        .ok_or_else(|| format!("transcript `{path}` is outside the workspace and Claude Code's configuration directory ($CLAUDE_CONFIG_DIR or ~/.claude), so loopbox will not read it"))?;
    let dir = Dir::open_ambient_dir(root, ambient_authority())
        .map_err(|e| format!("cannot open `{}`: {e}", root.display()))?;
    // Not blocking on a FIFO, and only a regular file: a transcript path comes from the hook input.
    let file = crate::files::open_nonblocking_in(&dir, rel)
        .map_err(|e| format!("cannot read transcript `{path}`: {e}"))?;
    crate::files::check_regular(&file)
        .map_err(|e| format!("cannot read transcript `{path}`: {e}"))?;
    let reader = BufReader::new(file.take(MAX_TRANSCRIPT_BYTES));
    // (message id, its text parts so far) of the last assistant message seen.
    let mut last: Option<(Option<String>, Vec<String>)> = None;
    for line in reader.lines() {
        let line = line.map_err(|e| format!("cannot read transcript `{path}`: {e}"))?;
        let Some(entry) = assistant_entry(&line) else {
            continue;
        };
        match &mut last {
            Some((id, texts)) if id.is_some() && *id == entry.id => texts.extend(entry.texts),
            _ => last = Some((entry.id, entry.texts)),
        }
    }
    last.map(|(_, texts)| texts.join("\n"))
        .ok_or_else(|| format!("transcript `{path}` has no assistant message"))
}

struct AssistantEntry {
    id: Option<String>,
    texts: Vec<String>,
}

/// An assistant line: `{"type": "assistant", "message": {"id": ..., "content": [{"type": "text", "text": ...}, {"type": "tool_use", ...}]}}`.
fn assistant_entry(line: &str) -> Option<AssistantEntry> {
    let v: Value = serde_json::from_str(line).ok()?;
    let message = &v["message"];
    if v["type"] != "assistant" && message["role"] != "assistant" {
        return None;
    }
    let texts = match &message["content"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(parts) => parts
            .iter()
            .filter(|p| p["type"] == "text")
            .filter_map(|p| p["text"].as_str().map(String::from))
            .collect(),
        _ => Vec::new(),
    };
    Some(AssistantEntry {
        id: message["id"].as_str().map(String::from),
        texts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn takes_the_last_assistant_text() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let t = root.join("t.jsonl");
        std::fs::write(
            &t,
            [
                r#"{"type":"user","message":{"role":"user","content":"go"}}"#,
                r#"{"type":"assistant","message":{"role":"assistant","content":[{"type":"text","text":"first"}]}}"#,
                "not json",
                r#"{"type":"assistant","message":{"role":"assistant","content":[{"type":"tool_use","name":"Bash"},{"type":"text","text":"second"},{"type":"text","text":"<promise>X</promise>"}]}}"#,
                r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result"}]}}"#,
            ]
            .join("\n"),
        )
        .unwrap();
        assert_eq!(
            last_assistant_message(t.to_str().unwrap(), std::slice::from_ref(&root)).unwrap(),
            "second\n<promise>X</promise>"
        );
        assert!(
            last_assistant_message("/etc/passwd", std::slice::from_ref(&root))
                .unwrap_err()
                .contains("outside the workspace")
        );

        // One message split over lines (same id) is read whole; a last message of
        // tool calls only is empty, not the older message's text.
        let split = root.join("split.jsonl");
        let line = |id: &str, part: Value| {
            json!({"type": "assistant", "message": {"id": id, "role": "assistant", "content": [part]}}).to_string()
        };
        std::fs::write(
            &split,
            [
                line(
                    "m1",
                    json!({"type": "text", "text": "old <promise>X</promise>"}),
                ),
                line("m2", json!({"type": "text", "text": "checking"})),
                line("m2", json!({"type": "tool_use", "name": "Bash"})),
                line("m2", json!({"type": "text", "text": "still going"})),
            ]
            .join("\n"),
        )
        .unwrap();
        assert_eq!(
            last_assistant_message(split.to_str().unwrap(), std::slice::from_ref(&root)).unwrap(),
            "checking\nstill going"
        );
        std::fs::write(
            &split,
            [
                line(
                    "m1",
                    json!({"type": "text", "text": "<promise>X</promise>"}),
                ),
                line("m2", json!({"type": "tool_use", "name": "Bash"})),
            ]
            .join("\n"),
        )
        .unwrap();
        assert_eq!(
            last_assistant_message(split.to_str().unwrap(), std::slice::from_ref(&root)).unwrap(),
            ""
        );
        std::os::unix::fs::symlink("/etc/passwd", root.join("link.jsonl")).unwrap();
        assert!(
            last_assistant_message(root.join("link.jsonl").to_str().unwrap(), &[root]).is_err()
        );
    }
}
