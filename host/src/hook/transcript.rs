//! Reading the last assistant message from a Claude Code transcript (JSONL),
//! for Stop inputs from versions that do not send `last_assistant_message`.
//!
//! The file is opened through a cap-std directory handle for the root it lies
//! in: the workspace or `~/.claude` (where Claude Code keeps transcripts). A
//! path anywhere else, or escaping through `..` or a symlink, is refused.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use serde_json::Value;

use crate::files::MAX_TRANSCRIPT_BYTES;

/// The roots a transcript may live under: the workspace and `~/.claude`.
pub fn allowed_roots(workspace: &Path) -> Vec<PathBuf> {
    let mut roots = vec![workspace.to_path_buf()];
    if let Some(home) = std::env::var_os("HOME") {
        roots.push(PathBuf::from(home).join(".claude"));
    }
    roots.into_iter().filter_map(|r| r.canonicalize().ok()).collect()
}

pub fn last_assistant_message(path: &str, roots: &[PathBuf]) -> Result<String, String> {
    let p = Path::new(path);
    let (root, rel) = roots
        .iter()
        .find_map(|r| p.strip_prefix(r).ok().map(|rel| (r, rel)))
        .ok_or_else(|| format!("transcript `{path}` is outside the workspace and ~/.claude, so loopbox will not read it"))?;
    let dir = Dir::open_ambient_dir(root, ambient_authority()).map_err(|e| format!("cannot open `{}`: {e}", root.display()))?;
    // Not blocking on a FIFO, and only a regular file: a transcript path comes from the hook input.
    let file = crate::files::open_nonblocking_in(&dir, rel).map_err(|e| format!("cannot read transcript `{path}`: {e}"))?;
    crate::files::check_regular(&file).map_err(|e| format!("cannot read transcript `{path}`: {e}"))?;
    let reader = BufReader::new(file.take(MAX_TRANSCRIPT_BYTES));
    let mut last = None;
    for line in reader.lines() {
        let line = line.map_err(|e| format!("cannot read transcript `{path}`: {e}"))?;
        if let Some(text) = assistant_text(&line) {
            last = Some(text);
        }
    }
    last.ok_or_else(|| format!("transcript `{path}` has no assistant message"))
}

/// The text of an assistant entry: `{"type": "assistant", "message": {"content": [{"type": "text", "text": ...}]}}`.
fn assistant_text(line: &str) -> Option<String> {
    let v: Value = serde_json::from_str(line).ok()?;
    let message = &v["message"];
    if v["type"] != "assistant" && message["role"] != "assistant" {
        return None;
    }
    match &message["content"] {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => {
            let texts: Vec<&str> = parts.iter().filter(|p| p["type"] == "text").filter_map(|p| p["text"].as_str()).collect();
            (!texts.is_empty()).then(|| texts.join("\n"))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(last_assistant_message(t.to_str().unwrap(), std::slice::from_ref(&root)).unwrap(), "second\n<promise>X</promise>");
        assert!(last_assistant_message("/etc/passwd", std::slice::from_ref(&root)).unwrap_err().contains("outside the workspace"));
        std::os::unix::fs::symlink("/etc/passwd", root.join("link.jsonl")).unwrap();
        assert!(last_assistant_message(root.join("link.jsonl").to_str().unwrap(), &[root]).is_err());
    }
}
