//! Declared needs: the grants a policy asks for, embedded in its component as
//! the `loopbox-needs` custom section, so the user sees them before granting
//! anything (`loopbox add`) and an upgrade that asks for more is caught.
//!
//! Needs are a request, never a grant: they reach `loopbox.toml` only through
//! `loopbox add` after the user said yes, and they can only name what a
//! policy's grant section may hold for it (argv prefixes, scripts, network,
//! prompts, workspace reads). Sandbox choice, writable paths and environment are the user's alone.

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use super::sections;
use crate::exec::config::ShellConfig;

/// At most this much JSON in a needs section.
pub const MAX_NEEDS_BYTES: usize = 64 << 10;
/// At most this many `exec` rules.
pub const MAX_RULES: usize = 256;

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Needs {
    /// Argv prefixes the policy wants to run (`[["cargo", "test"]]`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exec: Vec<Vec<String>>,
    /// Shell text (`script` requests), run by `sh -c` inside the OS sandbox.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub scripts: bool,
    /// Network access for its commands.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub network: bool,
    /// Messages to the agent (`prompt` actions and `inject` decisions).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub prompts: bool,
    /// Workspace paths it reads (each with everything under it; `.` is all of it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read: Vec<String>,
}

impl Needs {
    /// The needs embedded in a component; `None` when it declares none.
    pub fn read(component: &[u8]) -> Result<Option<Needs>> {
        let Some((payload, _)) = sections::find(component, sections::NEEDS)? else {
            return Ok(None);
        };
        if payload.len() > MAX_NEEDS_BYTES {
            bail!(
                "its `{}` section is {} bytes; at most {MAX_NEEDS_BYTES} are read",
                sections::NEEDS,
                payload.len()
            );
        }
        let needs: Needs = serde_json::from_slice(payload).with_context(|| {
            format!(
                "its `{}` section is not a needs document loopbox understands \
                 (it may only ask for exec, scripts, network, prompts and read)",
                sections::NEEDS
            )
        })?;
        needs.check()?;
        Ok(Some(needs))
    }

    /// `component` with these needs in place of any it had.
    pub fn embed(&self, component: &[u8]) -> Result<Vec<u8>> {
        self.check()?;
        let bare = sections::strip(component, &[sections::NEEDS, sections::SIGNATURE])?;
        let json = serde_json::to_vec(self).expect("serializable");
        Ok(sections::append(bare, sections::NEEDS, &json))
    }

    /// Refuse needs no grant section could hold.
    pub fn check(&self) -> Result<()> {
        if self.exec.len() > MAX_RULES {
            bail!(
                "it asks for {} exec rules; at most {MAX_RULES}",
                self.exec.len()
            );
        }
        for rule in &self.exec {
            if rule.is_empty() || rule.iter().any(|t| t.is_empty() || t.len() > 4096) {
                bail!(
                    "an exec rule it asks for is empty or has an empty or oversize token: {rule:?}"
                );
            }
            if rule.iter().any(|t| t.chars().any(char::is_control)) {
                bail!(
                    "an exec rule it asks for has a control character: {:?}",
                    crate::ui::sanitize(&rule.join(" "))
                );
            }
        }
        if self.read.len() > MAX_RULES {
            bail!(
                "it asks to read {} paths; at most {MAX_RULES}",
                self.read.len()
            );
        }
        for path in &self.read {
            crate::caps::workspace::check_path(path)
                .map_err(|e| anyhow::anyhow!("a path it asks to read is refused: {e}"))?;
            if path.is_empty() || path.chars().any(char::is_control) {
                bail!("a path it asks to read is empty or has a control character");
            }
        }
        Ok(())
    }

    /// What these needs ask for beyond `shell` (and, for prompts, an agent
    /// section): all default when the grants already cover them.
    pub fn beyond(&self, shell: &ShellConfig, has_agent: bool, reads: &[String]) -> Needs {
        let granted = crate::caps::workspace::ReadGrant::new(reads, String::new());
        Needs {
            read: self
                .read
                .iter()
                .filter(|p| {
                    crate::caps::workspace::check_path(p)
                        .and_then(|rel| granted.check(&rel, p))
                        .is_err()
                })
                .cloned()
                .collect(),
            exec: self
                .exec
                .iter()
                .filter(|rule| !shell.allow.iter().any(|a| rule.starts_with(a)))
                .cloned()
                .collect(),
            scripts: self.scripts && !shell.scripts,
            network: self.network && !shell.network,
            prompts: self.prompts && !has_agent,
        }
    }

    /// One line per thing asked for, for a diff.
    pub fn lines(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .exec
            .iter()
            .map(|r| format!("exec {}", show_rule(r)))
            .collect();
        out.extend(self.others(true));
        out
    }

    /// One line for people: `exec [cargo test], [git diff]; scripts; prompts`.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        if !self.exec.is_empty() {
            let rules: Vec<String> = self.exec.iter().map(|r| show_rule(r)).collect();
            parts.push(format!("exec {}", rules.join(", ")));
        }
        parts.extend(self.others(false));
        if parts.is_empty() {
            "nothing".into()
        } else {
            parts.join("; ")
        }
    }

    /// What it asks besides `exec`, each said at length (`long`) or in a word.
    fn others(&self, long: bool) -> Vec<String> {
        let mut out = Vec::new();
        if !self.read.is_empty() {
            out.push(format!("read {}", show_paths(&self.read)));
        }
        for (on, word, at_length) in [
            (self.scripts, "scripts", "scripts (shell text run by sh -c)"),
            (self.network, "network", "network for its commands"),
            (self.prompts, "prompts", "prompts to the agent"),
        ] {
            if on {
                out.push(if long { at_length } else { word }.to_string());
            }
        }
        out
    }
}

/// `[src, README.md]`.
fn show_paths(paths: &[String]) -> String {
    format!("[{}]", crate::ui::sanitize(&paths.join(", ")))
}

/// `[cargo test]`, with anything a terminal would act on made visible.
pub fn show_rule(rule: &[String]) -> String {
    format!("[{}]", crate::ui::sanitize(&rule.join(" ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn component() -> Vec<u8> {
        wat::parse_str("(component)").unwrap()
    }

    #[test]
    fn needs_round_trip_and_replace_earlier_ones() {
        let needs = Needs {
            exec: vec![vec!["cargo".into(), "test".into()]],
            prompts: true,
            ..Needs::default()
        };
        let once = needs.embed(&component()).unwrap();
        assert_eq!(Needs::read(&once).unwrap(), Some(needs.clone()));
        let again = Needs::default().embed(&once).unwrap();
        assert_eq!(Needs::read(&again).unwrap(), Some(Needs::default()));
        assert_eq!(Needs::read(&component()).unwrap(), None);
    }

    #[test]
    fn unknown_or_hostile_needs_are_refused() {
        let with = |json: &str| sections::append(component(), sections::NEEDS, json.as_bytes());
        let e = Needs::read(&with(r#"{"exec":[],"sandbox":"none"}"#)).unwrap_err();
        assert!(format!("{e:#}").contains("sandbox"), "{e:#}");
        let e = Needs::read(&with(r#"{"exec":[["ls","\u001b[2J"]]}"#)).unwrap_err();
        assert!(e.to_string().contains("control character"), "{e}");
        let e = Needs::read(&with(r#"{"read":["../home"]}"#)).unwrap_err();
        assert!(e.to_string().contains("leaves the workspace"), "{e}");
        let many = |key: &str, item: &str| {
            let items = vec![item; MAX_RULES + 1].join(",");
            with(&format!(r#"{{"{key}":[{items}]}}"#))
        };
        let e = Needs::read(&many("exec", r#"["ls"]"#)).unwrap_err();
        assert!(e.to_string().contains("257 exec rules; at most 256"), "{e}");
        let e = Needs::read(&many("read", r#""src""#)).unwrap_err();
        assert!(e.to_string().contains("257 paths; at most 256"), "{e}");
        let e = Needs::read(&with(r#"{"exec":[[]]}"#)).unwrap_err();
        assert!(e.to_string().contains("empty"), "{e}");
        let big = format!(r#"{{"exec":[["{}"]]}}"#, "a".repeat(MAX_NEEDS_BYTES));
        assert!(
            Needs::read(&with(&big))
                .unwrap_err()
                .to_string()
                .contains("at most")
        );
    }

    #[test]
    fn beyond_lists_only_what_the_grants_do_not_cover() {
        let needs = Needs {
            exec: vec![
                vec!["cargo".into(), "test".into()],
                vec!["git".into(), "diff".into()],
            ],
            scripts: true,
            network: false,
            prompts: true,
            read: vec!["src".into(), "notes/todo.md".into()],
        };
        let shell = ShellConfig {
            allow: vec![vec!["cargo".into()]],
            ..ShellConfig::default()
        };
        assert_eq!(
            needs
                .beyond(&shell, true, &["src".into(), "notes".into()])
                .lines(),
            vec![
                "exec [git diff]".to_string(),
                "scripts (shell text run by sh -c)".to_string()
            ]
        );
        assert_eq!(
            needs.beyond(&shell, false, &["src".into()]).lines(),
            vec![
                "exec [git diff]".to_string(),
                "read [notes/todo.md]".to_string(),
                "scripts (shell text run by sh -c)".to_string(),
                "prompts to the agent".to_string()
            ]
        );
        assert_eq!(
            needs.beyond(
                &ShellConfig {
                    allow: vec![vec!["cargo".into()], vec!["git".into()]],
                    scripts: true,
                    ..ShellConfig::default()
                },
                true,
                &[".".into()]
            ),
            Needs::default()
        );
        assert_eq!(
            needs.summary(),
            "exec [cargo test], [git diff]; read [src, notes/todo.md]; scripts; prompts"
        );
    }
}
