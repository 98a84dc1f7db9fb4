//! Reading the last assistant message from a Claude Code transcript (JSONL),
//! for Stop inputs from versions that do not send `last_assistant_message`;
//! and reading what a session spent from any of the three agents' transcripts,
//! a little more at each event ([`read_usage`], counted by
//! [`crate::spend::transcript`]).
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
use crate::hook::agents::Agent;
use crate::spend::transcript::{Format, Tally};

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

/// Where each agent keeps its session transcripts, besides the workspace:
/// Claude Code under `$CLAUDE_CONFIG_DIR` (else `~/.claude`), Codex under
/// `$CODEX_HOME` (else `~/.codex`), Gemini CLI under `~/.gemini`.
pub fn usage_roots(agent: Agent, workspace: &Path) -> Vec<PathBuf> {
    let home = |dir: &str| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(dir));
    let own = match agent {
        Agent::ClaudeCode => claude_config_dir(),
        Agent::Codex => std::env::var_os("CODEX_HOME")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .or_else(|| home(".codex")),
        Agent::Gemini => home(".gemini"),
    };
    std::iter::once(workspace.to_path_buf())
        .chain(own)
        .filter_map(|r| r.canonicalize().ok())
        .collect()
}

/// Open the transcript at `path`, which must lie under one of `roots`: through
/// a handle on that root (no `..` or link out of it), never blocking on a
/// FIFO, and only a regular file, since the path comes from the hook input.
/// `agent_dir` names the agent's directory for the refusal.
fn open_transcript(
    path: &str,
    roots: &[PathBuf],
    agent_dir: &str,
) -> Result<std::fs::File, String> {
    let p = Path::new(path);
    let (root, rel) = roots
        .iter()
        .find_map(|r| p.strip_prefix(r).ok().map(|rel| (r, rel)))
        .ok_or_else(|| format!("transcript `{path}` is outside the workspace and {agent_dir}, so loopbox will not read it"))?;
    let dir = Dir::open_ambient_dir(root, ambient_authority())
        .map_err(|e| format!("cannot open `{}`: {e}", root.display()))?;
    let file = crate::files::open_nonblocking_in(&dir, rel)
        .map_err(|e| format!("cannot read transcript `{path}`: {e}"))?;
    crate::files::check_regular(&file)
        .map_err(|e| format!("cannot read transcript `{path}`: {e}"))?;
    Ok(file)
}

/// Count what the transcript `tally` is of gained since it was last read (a
/// transcript not written yet has nothing to count): the
/// whole lines from its offset on (a line still being written waits for the
/// next event), at most [`MAX_TRANSCRIPT_BYTES`] of them per call. A file
/// shorter than the offset was replaced: it is counted again from its start,
/// on top of what the tally holds.
pub fn read_usage(tally: &mut Tally, format: Format, roots: &[PathBuf]) -> Result<(), String> {
    use std::io::{Seek, SeekFrom};
    let path = tally.path.clone();
    // Not written yet (a session's first events come before it): nothing spent yet.
    if matches!(std::fs::symlink_metadata(&path), Err(e) if e.kind() == std::io::ErrorKind::NotFound)
    {
        return Ok(());
    }
    let mut file = open_transcript(&path, roots, "the agent's own directory")?;
    let len = file
        .metadata()
        .map_err(|e| format!("cannot read transcript `{path}`: {e}"))?
        .len();
    if len < tally.offset {
        tally.restart();
    }
    if len == tally.offset {
        return Ok(());
    }
    file.seek(SeekFrom::Start(tally.offset))
        .map_err(|e| format!("cannot read transcript `{path}`: {e}"))?;
    let mut reader = BufReader::new(file.take(MAX_TRANSCRIPT_BYTES));
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| format!("cannot read transcript `{path}`: {e}"))?;
        if n == 0 || line.last() != Some(&b'\n') {
            break;
        }
        tally.offset += n as u64;
        if let Ok(text) = std::str::from_utf8(&line) {
            tally.feed(format, text.trim_end());
        }
    }
    Ok(())
}

pub fn last_assistant_message(path: &str, roots: &[PathBuf]) -> Result<String, String> {
    let file = open_transcript(
        path,
        roots,
        "Claude Code's configuration directory ($CLAUDE_CONFIG_DIR or ~/.claude)",
    )?;
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

    /// Each agent's recorded transcript (`tests/fixtures/usage/*.transcript.json`),
    /// read as hook events read it: the first part, with a line still being
    /// written at its end, then the rest; the tally counts each message once.
    #[test]
    fn every_agents_transcript_is_tallied_across_events() {
        let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/usage");
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for (name, format) in [
            ("claude-code", Format::ClaudeCode),
            ("codex", Format::Codex),
            ("gemini", Format::Gemini),
        ] {
            let f: Value = serde_json::from_str(
                &std::fs::read_to_string(fixtures.join(format!("{name}.transcript.json"))).unwrap(),
            )
            .unwrap();
            let lines: Vec<&str> = f["lines"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| l.as_str().unwrap())
                .collect();
            let path = root.join(format!("{name}.jsonl"));
            let half = lines.len() / 2;
            let partial = &lines[half][..lines[half].len() / 2];
            std::fs::write(&path, format!("{}\n{partial}", lines[..half].join("\n"))).unwrap();
            let mut tally = Tally::of(path.to_str().unwrap());
            read_usage(&mut tally, format, std::slice::from_ref(&root)).unwrap();
            std::fs::write(&path, format!("{}\n", lines.join("\n"))).unwrap();
            let mut tally: Tally =
                serde_json::from_str(&serde_json::to_string(&tally).unwrap()).unwrap();
            read_usage(&mut tally, format, std::slice::from_ref(&root)).unwrap();
            // Nothing new: nothing changes.
            let before = tally.clone();
            read_usage(&mut tally, format, std::slice::from_ref(&root)).unwrap();
            assert_eq!(tally, before, "{name}");
            let e = &f["expect"];
            assert_eq!(tally.messages, e["messages"].as_u64().unwrap(), "{name}");
            assert_eq!(
                serde_json::to_value(&tally.models).unwrap(),
                e["models"],
                "{name}"
            );
        }
    }

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
