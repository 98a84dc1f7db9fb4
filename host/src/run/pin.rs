//! Grants pinned for the life of a run. A run records the grants it started
//! with (the resolved config, command-line rules included, and the identity of
//! the agent program, see [`crate::exec::agent::program_identity`]); a later process
//! that continues it (`runs resume`, the next hook event) compares the config
//! it reads now and refuses a difference, naming the keys, unless the user
//! accepts it (`--accept-config-change`).
//! So an edit made during a run, by anyone, never widens that run's grants
//! silently.

use std::path::Path;

use serde_json::{Value, json};

use crate::config::Config;
use crate::db::Db;

/// The pinned form of a run's grants: what they are made of and nothing
/// else. `scoped`: the config is a `[policies.NAME]`'s ([`Config::scoped`]),
/// whose entry is part of them; a run under the top-level grants is granted
/// nothing by any `[policies.NAME]`, so another section's edit is no change
/// of its grants.
pub fn pin(config: &Config, workspace: &Path, scoped: bool) -> Value {
    let agent_program = config
        .agent
        .as_ref()
        .and_then(|a| a.program())
        .and_then(|program| {
            config
                .shell
                .child_env(workspace)
                .resolve_program(program, workspace)
        })
        .and_then(|p| crate::exec::agent::program_identity(&p));
    let mut config = serde_json::to_value(config).unwrap_or(Value::Null);
    if !scoped && let Some(c) = config.as_object_mut() {
        c.remove("policies");
    }
    json!({"config": config, "agent_program": agent_program})
}

/// The keys that differ between two pins, as dotted paths (`shell.allow`, `agent.tier`).
pub fn differences(pinned: &Value, now: &Value) -> Vec<String> {
    let mut out = Vec::new();
    // Pinned before top-level runs left out every `[policies.NAME]`: not compared.
    let mut pinned = pinned.clone();
    if now["config"].get("policies").is_none()
        && let Some(c) = pinned.get_mut("config").and_then(Value::as_object_mut)
    {
        c.remove("policies");
    }
    diff("", &pinned, now, &mut out);
    out.iter_mut().for_each(|k| {
        *k = k
            .strip_prefix("config.")
            .map(str::to_string)
            .unwrap_or_else(|| k.clone())
    });
    out
}

fn diff(prefix: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                let (x, y) = (
                    a.get(k).unwrap_or(&Value::Null),
                    b.get(k).unwrap_or(&Value::Null),
                );
                diff(&key, x, y, out);
            }
        }
        (a, b) if a != b => out.push(if prefix == "agent_program" {
            "the agent program".into()
        } else {
            prefix.to_string()
        }),
        _ => {}
    }
}

/// Hold run `id`, pinned to `pinned` (None: from before grants were pinned), to
/// the grants `now`. The outer error is the store's; the inner one refuses a
/// change not accepted (`how_to_accept` says how). When the run goes on, `now`
/// is its pin from here on, and the keys that changed come back.
pub fn hold(
    db: &Db,
    id: &str,
    pinned: Option<&Value>,
    now: &Value,
    accept: bool,
    how_to_accept: &str,
) -> anyhow::Result<Result<Vec<String>, anyhow::Error>> {
    let changed = pinned.map(|p| differences(p, now)).unwrap_or_default();
    if !changed.is_empty() && !accept {
        return Ok(Err(changed_error(id, &changed, how_to_accept)));
    }
    if !changed.is_empty() || pinned.is_none() {
        db.set_pinned_grants(id, now)?;
    }
    Ok(Ok(changed))
}

/// The refusal for a run whose config changed, naming what changed and what to do.
fn changed_error(id: &str, keys: &[String], how_to_accept: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "the grants changed since run {id} started ({}); a run keeps the grants it started with, so an edit made during a run cannot widen them. \
         Restore the config, or {how_to_accept}",
        keys.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_name_the_keys() {
        let ws = Path::new("/");
        let a = pin(
            &Config::parse("[shell]\nallow = [[\"ls\"]]", Path::new("t")).unwrap(),
            ws,
            false,
        );
        let b =
            pin(&Config::parse("[shell]\nallow = [[\"ls\"], [\"sh\"]]\nnetwork = true\n[agent]\ncommand = [\"x\", \"{prompt}\"]", Path::new("t")).unwrap(), ws, false);
        assert_eq!(differences(&a, &a), Vec::<String>::new());
        let d = differences(&a, &b);
        assert!(
            d.contains(&"shell.allow".to_string())
                && d.contains(&"shell.network".to_string())
                && d.contains(&"agent".to_string()),
            "{d:?}"
        );
    }

    #[test]
    fn a_top_level_run_is_not_changed_by_another_policys_section() {
        let ws = Path::new("/");
        let top = "[shell]\nallow = [[\"ls\"]]\n";
        let other = format!("{top}[policies.other]\nsource = \"o.wasm\"\n");
        let parse = |t: &str| Config::parse(t, Path::new("t")).unwrap();
        let a = pin(&parse(top), ws, false);
        let b = pin(&parse(&other), ws, false);
        assert_eq!(differences(&a, &b), Vec::<String>::new());
        // A pin recorded with every section (before this rule) compares the same.
        let mut old = a.clone();
        old["config"]["policies"] = serde_json::json!({"gone": {"source": "g.wasm"}});
        assert_eq!(differences(&old, &b), Vec::<String>::new());
        // A change to its own grants still counts.
        let c = pin(
            &parse("[shell]\nallow = [[\"ls\"], [\"cat\"]]\n"),
            ws,
            false,
        );
        assert_eq!(differences(&a, &c), vec!["shell.allow".to_string()]);
    }
}
