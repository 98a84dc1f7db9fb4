//! Adding and removing a loopbox hook in Claude Code's `.claude/settings.json`.
//!
//! Install appends a group of its own under `hooks.<Event>` and touches nothing
//! else; uninstall removes exactly that entry (and the containers it emptied).
//! Key order is preserved and the file is written in Claude Code's own
//! two-space format, so every other hook stays as it was, byte for byte, and an
//! install followed by an uninstall gives back the original file.

use serde_json::{Map, Value, json};

/// One hook entry as loopbox writes it.
#[derive(Debug, Clone, PartialEq)]
pub struct HookEntry {
    pub event: String,
    pub matcher: Option<String>,
    /// The full command line Claude Code runs.
    pub command: String,
    pub timeout_s: Option<u64>,
}

/// The events Claude Code runs command hooks for.
pub const EVENTS: &[&str] =
    &["PreToolUse", "PostToolUse", "UserPromptSubmit", "Stop", "SubagentStop", "Notification", "PreCompact", "SessionStart", "SessionEnd"];

/// The part of a loopbox command line after the program: how entries are recognised,
/// so an entry written by a loopbox installed elsewhere is still found.
fn args_of(command: &str) -> &str {
    command.split_once(' ').map_or("", |(_, rest)| rest)
}

fn parse(text: &str) -> Result<Map<String, Value>, String> {
    if text.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err("the settings file is not a JSON object".into()),
        Err(e) => Err(format!("the settings file is not valid JSON ({e}); fix it or move it aside, loopbox will not overwrite it")),
    }
}

fn render(settings: &Map<String, Value>, original: &str) -> String {
    let mut text = serde_json::to_string_pretty(settings).expect("JSON values serialize");
    if original.is_empty() || original.ends_with('\n') {
        text.push('\n');
    }
    text
}

fn same_matcher(group: &Value, matcher: Option<&str>) -> bool {
    group.get("matcher").and_then(Value::as_str) == matcher
}

fn holds(group: &Value, entry: &HookEntry) -> bool {
    group["hooks"].as_array().is_some_and(|hs| hs.iter().any(|h| h["command"].as_str().is_some_and(|c| args_of(c) == args_of(&entry.command))))
}

/// The settings text with `entry` added; None when it is already there.
pub fn install(original: &str, entry: &HookEntry) -> Result<Option<String>, String> {
    let mut settings = parse(original)?;
    let hooks = settings.entry("hooks").or_insert_with(|| Value::Object(Map::new()));
    let hooks = hooks.as_object_mut().ok_or("`hooks` in the settings file is not an object")?;
    let groups = hooks.entry(entry.event.clone()).or_insert_with(|| Value::Array(Vec::new()));
    let groups = groups.as_array_mut().ok_or_else(|| format!("`hooks.{}` in the settings file is not an array", entry.event))?;
    if groups.iter().any(|g| same_matcher(g, entry.matcher.as_deref()) && holds(g, entry)) {
        return Ok(None);
    }
    let mut hook = json!({"type": "command", "command": entry.command});
    if let Some(t) = entry.timeout_s {
        hook["timeout"] = json!(t);
    }
    let mut group = Map::new();
    if let Some(m) = &entry.matcher {
        group.insert("matcher".into(), json!(m));
    }
    group.insert("hooks".into(), json!([hook]));
    groups.push(Value::Object(group));
    Ok(Some(render(&settings, original)))
}

/// The settings text with `entry` removed; None when it is not there.
pub fn uninstall(original: &str, entry: &HookEntry) -> Result<Option<String>, String> {
    let mut settings = parse(original)?;
    let Some(hooks) = settings.get_mut("hooks").and_then(Value::as_object_mut) else { return Ok(None) };
    let Some(groups) = hooks.get_mut(&entry.event).and_then(Value::as_array_mut) else { return Ok(None) };
    let Some(gi) = groups.iter().position(|g| same_matcher(g, entry.matcher.as_deref()) && holds(g, entry)) else { return Ok(None) };
    let list = groups[gi]["hooks"].as_array_mut().expect("checked by holds");
    list.retain(|h| h["command"].as_str().is_none_or(|c| args_of(c) != args_of(&entry.command)));
    if list.is_empty() {
        groups.remove(gi);
    }
    if groups.is_empty() {
        hooks.remove(&entry.event);
    }
    if hooks.is_empty() {
        settings.remove("hooks");
    }
    Ok(Some(render(&settings, original)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXISTING: &str = r#"{
  "permissions": {
    "allow": [
      "Bash(npm test:*)"
    ]
  },
  "hooks": {
    "Stop": [
      {
        "hooks": [
          {
            "type": "command",
            "command": "notify-send done",
            "timeout": 5
          }
        ]
      }
    ],
    "PreToolUse": [
      {
        "matcher": "Edit",
        "hooks": [
          {
            "type": "command",
            "command": "./lint.sh"
          }
        ]
      }
    ]
  },
  "model": "opus"
}
"#;

    fn entry(event: &str, matcher: Option<&str>) -> HookEntry {
        HookEntry {
            event: event.into(),
            matcher: matcher.map(String::from),
            command: "/usr/bin/loopbox hook claude-code --policy builtin:ralph".into(),
            timeout_s: Some(30),
        }
    }

    #[test]
    fn install_then_uninstall_restores_the_file_byte_for_byte() {
        for e in [entry("Stop", None), entry("PreToolUse", Some("Bash")), entry("UserPromptSubmit", None)] {
            let installed = install(EXISTING, &e).unwrap().unwrap();
            assert!(installed.contains("notify-send done") && installed.contains("./lint.sh"));
            assert_eq!(install(&installed, &e).unwrap(), None, "installing twice changes nothing");
            assert_eq!(uninstall(&installed, &e).unwrap().unwrap(), EXISTING);
        }
    }

    #[test]
    fn other_hooks_keep_their_bytes() {
        let installed = install(EXISTING, &entry("Stop", None)).unwrap().unwrap();
        let before = &EXISTING[EXISTING.find("\"PreToolUse\"").unwrap()..];
        assert!(installed.contains(before.split("\"model\"").next().unwrap()));
        assert!(installed.find("notify-send").unwrap() < installed.find("loopbox hook").unwrap(), "appended after the existing group");
    }

    #[test]
    fn a_missing_or_empty_file_gets_just_the_hook() {
        let text = install("", &entry("Stop", None)).unwrap().unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v,
            json!({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "/usr/bin/loopbox hook claude-code --policy builtin:ralph", "timeout": 30}]}]}})
        );
        assert_eq!(uninstall(&text, &entry("Stop", None)).unwrap().unwrap(), "{}\n");
    }

    #[test]
    fn uninstall_finds_entries_written_by_a_loopbox_elsewhere_and_nothing_else() {
        let text = install(EXISTING, &entry("Stop", None)).unwrap().unwrap();
        let moved = HookEntry { command: "loopbox hook claude-code --policy builtin:ralph".into(), ..entry("Stop", None) };
        assert_eq!(uninstall(&text, &moved).unwrap().unwrap(), EXISTING);
        assert_eq!(uninstall(EXISTING, &entry("Stop", None)).unwrap(), None);
        assert_eq!(uninstall(&text, &entry("Stop", Some("Bash"))).unwrap(), None, "matcher must match");
    }

    #[test]
    fn a_broken_file_is_not_overwritten() {
        assert!(install("{ nope", &entry("Stop", None)).unwrap_err().contains("will not overwrite"));
        assert!(install("[]", &entry("Stop", None)).unwrap_err().contains("not a JSON object"));
        assert!(install(r#"{"hooks": []}"#, &entry("Stop", None)).unwrap_err().contains("not an object"));
    }
}
