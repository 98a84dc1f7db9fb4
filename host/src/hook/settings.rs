//! Adding and removing a loopbox hook in an agent's hook settings:
//! Claude Code's `.claude/settings.json`, Codex's `.codex/hooks.json`,
//! Gemini CLI's `.gemini/settings.json`. All three nest command hooks the same
//! way: `hooks.<Event>[] = {matcher?, hooks: [{type: "command", command, timeout?}]}`.
//!
//! Install appends a group of its own under `hooks.<Event>` and touches nothing
//! else; uninstall removes exactly that entry (and the containers it emptied).
//! The file is edited in place ([`super::jsonedit`]), so the user's spacing,
//! key order and comments stay as they were, and an install followed by an
//! uninstall gives back the original file byte for byte.

use serde_json::{Map, Value, json};

use super::jsonedit::{self, Node};

/// One hook entry as loopbox writes it.
#[derive(Debug, Clone, PartialEq)]
pub struct HookEntry {
    pub event: String,
    pub matcher: Option<String>,
    /// The full command line the agent runs (through a shell).
    pub command: String,
    /// The entry's `timeout`, in the agent's unit; absent leaves the agent's default.
    pub timeout: Option<u64>,
}

/// A command line split into words as a POSIX shell would (quotes and
/// backslashes; no expansion). None when the quoting is unbalanced.
pub fn shell_words(line: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' => words.extend(word.take()),
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next()? {
                        '\'' => break,
                        c => w.push(c),
                    }
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => match chars.next()? {
                            c @ ('"' | '\\' | '$' | '`') => w.push(c),
                            c => {
                                w.push('\\');
                                w.push(c);
                            }
                        },
                        c => w.push(c),
                    }
                }
            }
            '\\' => word.get_or_insert_with(String::new).push(chars.next()?),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    Some(words)
}

/// Whether two hook commands are the same loopbox hook: the same words after
/// the program, which is loopbox wherever it is installed, apart from the
/// pinned `--digest` (a rebuilt policy is the same hook, pinned anew).
fn same_command(a: &str, b: &str) -> bool {
    let is_loopbox = |w: &[String]| {
        w.first()
            .is_some_and(|p| p.rsplit('/').next() == Some("loopbox"))
    };
    let unpinned = |w: &[String]| {
        let mut out = Vec::new();
        let mut words = w[1..].iter();
        while let Some(word) = words.next() {
            if word == "--digest" {
                words.next();
            } else {
                out.push(word.clone());
            }
        }
        out
    };
    match (shell_words(a), shell_words(b)) {
        (Some(a), Some(b)) => is_loopbox(&a) && is_loopbox(&b) && unpinned(&a) == unpinned(&b),
        _ => false,
    }
}

fn parse(text: &str) -> Result<Node, String> {
    match jsonedit::parse(text) {
        // The agent keeps the last of two keys; an edit to the first would be ignored.
        Ok(node @ Node::Object { .. }) => match node.duplicate() {
            Some((key, first, second)) => Err(format!(
                "the settings file has the key `{}` twice in one object (lines {} and {}): the agent reads only the last, so loopbox will not edit it; merge the two into one",
                crate::ui::sanitize(key),
                jsonedit::line_of(text, first),
                jsonedit::line_of(text, second)
            )),
            None => Ok(node),
        },
        Ok(_) => Err("the settings file is not a JSON object".into()),
        Err(e) => Err(format!(
            "the settings file is not valid JSON ({e}); fix it or move it aside, loopbox will not overwrite it"
        )),
    }
}

fn member_index(object: &Node, key: &str) -> usize {
    match object {
        Node::Object { members, .. } => members
            .iter()
            .position(|m| m.key == key)
            .expect("the member was found by key"),
        _ => unreachable!("members of an object"),
    }
}

fn group_value(entry: &HookEntry) -> Value {
    let mut hook = json!({"type": "command", "command": entry.command});
    if let Some(t) = entry.timeout {
        hook["timeout"] = json!(t);
    }
    let mut group = Map::new();
    if let Some(m) = &entry.matcher {
        group.insert("matcher".into(), json!(m));
    }
    group.insert("hooks".into(), json!([hook]));
    Value::Object(group)
}

/// Where an installed entry is: (group index, hook index within the group).
fn find(text: &str, groups: &Node, entry: &HookEntry) -> Option<(usize, usize)> {
    groups.items().iter().enumerate().find_map(|(gi, group)| {
        let matcher = group.get("matcher").and_then(|m| m.as_str(text));
        if matcher.as_deref() != entry.matcher.as_deref() {
            return None;
        }
        let hooks = group.get("hooks")?;
        let hi = hooks.items().iter().position(|h| {
            h.get("command")
                .and_then(|c| c.as_str(text))
                .is_some_and(|c| same_command(&c, &entry.command))
        })?;
        Some((gi, hi))
    })
}

/// The settings text with `entry` added; None when it is already there.
pub fn install(original: &str, entry: &HookEntry) -> Result<Option<String>, String> {
    let group = group_value(entry);
    if original.trim().is_empty() {
        let mut text =
            serde_json::to_string_pretty(&json!({"hooks": {entry.event.clone(): [group]}}))
                .expect("JSON values serialize");
        text.push('\n');
        return Ok(Some(text));
    }
    let root = parse(original)?;
    let Some(hooks) = root.get("hooks") else {
        return Ok(Some(jsonedit::append(
            original,
            &root,
            Some("hooks"),
            &json!({entry.event.clone(): [group]}),
        )));
    };
    if !matches!(hooks, Node::Object { .. }) {
        return Err("`hooks` in the settings file is not an object".into());
    }
    let Some(groups) = hooks.get(&entry.event) else {
        return Ok(Some(jsonedit::append(
            original,
            hooks,
            Some(&entry.event),
            &json!([group]),
        )));
    };
    if !matches!(groups, Node::Array { .. }) {
        return Err(format!(
            "`hooks.{}` in the settings file is not an array",
            entry.event
        ));
    }
    if let Some((gi, hi)) = find(original, groups, entry) {
        // The same hook: unchanged, or pinned to a rebuilt policy (its command is replaced).
        let command = groups.items()[gi]
            .get("hooks")
            .and_then(|h| h.items().get(hi))
            .and_then(|h| h.get("command"))
            .expect("found by its command");
        if command.as_str(original).as_deref() == Some(entry.command.as_str()) {
            return Ok(None);
        }
        let quoted = serde_json::to_string(&entry.command).expect("strings serialize");
        return Ok(Some(format!(
            "{}{quoted}{}",
            &original[..command.start()],
            &original[command.end()..]
        )));
    }
    Ok(Some(jsonedit::append(original, groups, None, &group)))
}

/// The settings text with `entry` removed; None when it is not there.
pub fn uninstall(original: &str, entry: &HookEntry) -> Result<Option<String>, String> {
    if original.trim().is_empty() {
        return Ok(None);
    }
    let root = parse(original)?;
    let Some(hooks) = root
        .get("hooks")
        .filter(|h| matches!(h, Node::Object { .. }))
    else {
        return Ok(None);
    };
    let Some(groups) = hooks
        .get(&entry.event)
        .filter(|g| matches!(g, Node::Array { .. }))
    else {
        return Ok(None);
    };
    let Some((gi, hi)) = find(original, groups, entry) else {
        return Ok(None);
    };
    let group_hooks = groups.items()[gi].get("hooks").expect("found in it");
    // Remove the smallest container that holds nothing else.
    let text = if group_hooks.items().len() > 1 {
        jsonedit::remove(original, group_hooks, hi)
    } else if groups.items().len() > 1 {
        jsonedit::remove(original, groups, gi)
    } else if matches!(hooks, Node::Object { members, .. } if members.len() > 1) {
        jsonedit::remove(original, hooks, member_index(hooks, &entry.event))
    } else {
        jsonedit::remove(original, &root, member_index(&root, "hooks"))
    };
    Ok(Some(text))
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
            timeout: Some(30),
        }
    }

    #[test]
    fn install_then_uninstall_restores_the_file_byte_for_byte() {
        for e in [
            entry("Stop", None),
            entry("PreToolUse", Some("Bash")),
            entry("UserPromptSubmit", None),
        ] {
            let installed = install(EXISTING, &e).unwrap().unwrap();
            assert!(installed.contains("notify-send done") && installed.contains("./lint.sh"));
            assert_eq!(
                install(&installed, &e).unwrap(),
                None,
                "installing twice changes nothing"
            );
            assert_eq!(uninstall(&installed, &e).unwrap().unwrap(), EXISTING);
        }
    }

    #[test]
    fn other_hooks_keep_their_bytes() {
        let installed = install(EXISTING, &entry("Stop", None)).unwrap().unwrap();
        let before = &EXISTING[EXISTING.find("\"PreToolUse\"").unwrap()..];
        assert!(installed.contains(before.split("\"model\"").next().unwrap()));
        assert!(
            installed.find("notify-send").unwrap() < installed.find("loopbox hook").unwrap(),
            "appended after the existing group"
        );
    }

    #[test]
    fn a_missing_or_empty_file_gets_just_the_hook() {
        let text = install("", &entry("Stop", None)).unwrap().unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v,
            json!({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "/usr/bin/loopbox hook claude-code --policy builtin:ralph", "timeout": 30}]}]}})
        );
        assert_eq!(
            uninstall(&text, &entry("Stop", None)).unwrap().unwrap(),
            "{}\n"
        );
        assert_eq!(uninstall("", &entry("Stop", None)).unwrap(), None);
    }

    #[test]
    fn uninstall_finds_entries_written_by_a_loopbox_elsewhere_and_nothing_else() {
        let text = install(EXISTING, &entry("Stop", None)).unwrap().unwrap();
        let moved = HookEntry {
            command: "loopbox hook claude-code --policy builtin:ralph".into(),
            ..entry("Stop", None)
        };
        assert_eq!(uninstall(&text, &moved).unwrap().unwrap(), EXISTING);
        assert_eq!(uninstall(EXISTING, &entry("Stop", None)).unwrap(), None);
        assert_eq!(
            uninstall(&text, &entry("Stop", Some("Bash"))).unwrap(),
            None,
            "matcher must match"
        );
    }

    #[test]
    fn commands_are_compared_word_by_word_with_quotes() {
        let quoted = HookEntry {
            command: "loopbox hook claude-code --policy 'my policy.wasm'".into(),
            ..entry("Stop", None)
        };
        let text = install(EXISTING, &quoted).unwrap().unwrap();
        let same = HookEntry {
            command: "/opt/bin/loopbox hook claude-code --policy \"my policy.wasm\"".into(),
            ..entry("Stop", None)
        };
        assert_eq!(uninstall(&text, &same).unwrap().unwrap(), EXISTING);
        let other = HookEntry {
            command: "loopbox hook claude-code --policy 'my'".into(),
            ..entry("Stop", None)
        };
        assert_eq!(
            uninstall(&text, &other).unwrap(),
            None,
            "the first space inside quotes does not end the argument"
        );
        let not_ours = HookEntry {
            command: "notify-send hook claude-code --policy 'my policy.wasm'".into(),
            ..entry("Stop", None)
        };
        assert_eq!(uninstall(&text, &not_ours).unwrap(), None);
        assert_eq!(
            shell_words(r#"a 'b c' "d \"e\"" f\ g"#).unwrap(),
            ["a", "b c", "d \"e\"", "f g"]
        );
        assert_eq!(shell_words("a 'open"), None);
    }

    #[test]
    fn comments_and_tabs_survive() {
        let text = "{\n\t// mine\n\t\"model\": \"x\" /* keep */\n}\n";
        let e = entry("Stop", None);
        let installed = install(text, &e).unwrap().unwrap();
        assert!(
            installed.contains("// mine")
                && installed.contains("/* keep */")
                && installed.contains("\n\t\t\"Stop\": [\n\t\t\t{"),
            "{installed}"
        );
        assert_eq!(uninstall(&installed, &e).unwrap().unwrap(), text);
    }

    #[test]
    fn a_key_given_twice_at_any_level_is_refused_naming_its_lines() {
        let e = entry("Stop", None);
        let top = "{\n  \"hooks\": {},\n  \"hooks\": {}\n}";
        assert_eq!(
            install(top, &e).unwrap_err(),
            "the settings file has the key `hooks` twice in one object (lines 2 and 3): the agent reads only the last, so loopbox will not edit it; merge the two into one"
        );
        let deep = r#"{"a": [{"b": {"x": 1,
            "x": 2}}], "hooks": {}}"#;
        assert!(
            install(deep, &e)
                .unwrap_err()
                .contains("the key `x` twice in one object (lines 1 and 2)")
        );
        assert!(uninstall(top, &e).unwrap_err().contains("twice"));
        assert!(
            install(r#"{"a": {"x": 1}, "b": {"x": 1}}"#, &e).is_ok(),
            "the same key in two objects is no duplicate"
        );
    }

    #[test]
    fn a_broken_file_is_not_overwritten() {
        assert!(
            install("{ nope", &entry("Stop", None))
                .unwrap_err()
                .contains("will not overwrite")
        );
        assert!(
            install("[]", &entry("Stop", None))
                .unwrap_err()
                .contains("not a JSON object")
        );
        assert!(
            install(r#"{"hooks": []}"#, &entry("Stop", None))
                .unwrap_err()
                .contains("not an object")
        );
    }
}
