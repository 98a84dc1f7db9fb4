//! Writing an approved policy into `loopbox.toml`: its `[policies.NAME]`
//! section with the grants the user approved, edited in place so the user's
//! comments and layout stay. The result is parsed as a config before it is
//! written, so a bad edit changes nothing.

use anyhow::{Context, Result, bail};
use toml_edit::{Array, DocumentMut, Item, Table, value};

use super::needs::Needs;

/// What `loopbox add` writes for one policy.
#[derive(Debug, Clone, Default)]
pub struct Grant {
    pub name: String,
    pub source: String,
    /// `blake3:...` for a local component (a registry one is pinned in the lock).
    pub digest: Option<String>,
    pub unsigned: bool,
    /// The needs approved now: added to what the section already grants.
    pub approved: Needs,
}

/// `text` (a config, possibly empty) with `grant` applied to `[policies.NAME]`.
pub fn apply(text: &str, grant: &Grant) -> Result<String> {
    let mut doc: DocumentMut = text.parse().context("the config is not valid TOML")?;
    let top_agent = doc.get("agent").cloned();
    let policies = doc
        .entry("policies")
        .or_insert_with(|| {
            let mut t = Table::new();
            t.set_implicit(true);
            Item::Table(t)
        })
        .as_table_mut()
        .context("`policies` in the config is not a table")?;
    let entry = policies
        .entry(&grant.name)
        .or_insert_with(|| Item::Table(Table::new()))
        .as_table_mut()
        .with_context(|| format!("`policies.{}` in the config is not a table", grant.name))?;
    entry.insert("source", value(grant.source.as_str()));
    match &grant.digest {
        Some(d) => {
            entry.insert("digest", value(d.as_str()));
        }
        None => {
            entry.remove("digest");
        }
    }
    if grant.unsigned {
        entry.insert("unsigned", value(true));
    } else {
        entry.remove("unsigned");
    }

    let needs = &grant.approved;
    let name = &grant.name;
    if !needs.exec.is_empty() || needs.scripts || needs.network {
        let shell = table(entry, "shell", name)?;
        let allow = array(shell, "allow", &format!("policies.{name}.shell"))?;
        for rule in &needs.exec {
            let have = allow.iter().any(|v| {
                v.as_array().is_some_and(|a| {
                    a.iter()
                        .map(|t| t.as_str())
                        .eq(rule.iter().map(|t| Some(t.as_str())))
                })
            });
            if !have {
                allow.push(rule.iter().map(String::as_str).collect::<Array>());
            }
        }
        if needs.scripts {
            shell.insert("scripts", value(true));
        }
        if needs.network {
            shell.insert("network", value(true));
        }
    }
    if !needs.read.is_empty() {
        let workspace = table(entry, "workspace", name)?;
        let read = array(workspace, "read", &format!("policies.{name}.workspace"))?;
        for path in &needs.read {
            if !read.iter().any(|v| v.as_str() == Some(path)) {
                read.push(path.as_str());
            }
        }
    }
    if needs.prompts && !entry.contains_key("agent") {
        let Some(agent) = top_agent else {
            bail!(
                "it sends prompts, and the config has no [agent] to give it: add an [agent] section (or [policies.{}.agent]) first",
                grant.name
            );
        };
        entry.insert("agent", agent);
    }
    Ok(doc.to_string())
}

/// The table `key` of a policy's entry, made when missing.
fn table<'a>(entry: &'a mut Table, key: &str, name: &str) -> Result<&'a mut Table> {
    entry
        .entry(key)
        .or_insert_with(|| Item::Table(Table::new()))
        .as_table_mut()
        .with_context(|| format!("`policies.{name}.{key}` in the config is not a table"))
}

/// The array `key` of `table` (called `section` in messages), made when missing.
fn array<'a>(table: &'a mut Table, key: &str, section: &str) -> Result<&'a mut Array> {
    table
        .entry(key)
        .or_insert_with(|| value(Array::new()))
        .as_array_mut()
        .with_context(|| format!("`{section}.{key}` in the config is not an array"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use std::path::Path;

    fn grant(needs: Needs) -> Grant {
        Grant {
            name: "lister".into(),
            source: "oci://localhost:5000/acme/lister:1".into(),
            approved: needs,
            ..Grant::default()
        }
    }

    #[test]
    fn a_grant_keeps_comments_and_adds_only_what_is_new() {
        let text = "# my grants\n[shell]\nallow = [[\"ls\"]]  # top level\n\n[agent]\ncommand = [\"claude\", \"-p\", \"{prompt}\"]\n";
        let first = apply(
            text,
            &grant(Needs {
                exec: vec![vec!["cat".into(), "README.md".into()]],
                prompts: true,
                ..Needs::default()
            }),
        )
        .unwrap();
        assert!(
            first.starts_with("# my grants\n") && first.contains("# top level"),
            "{first}"
        );
        let config = Config::parse(&first, Path::new("loopbox.toml")).unwrap();
        let e = &config.policies["lister"];
        assert_eq!(
            e.shell.allow,
            vec![vec!["cat".to_string(), "README.md".to_string()]]
        );
        assert_eq!(e.agent.as_ref().unwrap().command[0], "claude");
        assert_eq!(
            config.shell.allow,
            vec![vec!["ls".to_string()]],
            "the top level is untouched"
        );

        let second = apply(
            &first,
            &grant(Needs {
                exec: vec![vec!["cat".into(), "README.md".into()], vec!["wc".into()]],
                scripts: true,
                read: vec!["README.md".into()],
                ..Needs::default()
            }),
        )
        .unwrap();
        let e = Config::parse(&second, Path::new("loopbox.toml"))
            .unwrap()
            .policies["lister"]
            .clone();
        assert_eq!(e.shell.allow.len(), 2, "{second}");
        assert!(e.shell.scripts);
        assert_eq!(e.workspace.read, vec!["README.md".to_string()]);
    }

    #[test]
    fn prompts_without_an_agent_and_odd_configs_are_refused() {
        let prompts = grant(Needs {
            prompts: true,
            ..Needs::default()
        });
        assert!(
            apply("", &prompts)
                .unwrap_err()
                .to_string()
                .contains("[agent]")
        );
        assert!(apply("policies = 3\n", &grant(Needs::default())).is_err());
        assert!(apply("[x\n", &grant(Needs::default())).is_err());
    }
}
