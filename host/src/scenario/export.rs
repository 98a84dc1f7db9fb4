//! A journaled run as a scenario (`loopbox runs export ID --scenario`): each
//! event becomes a step with the commands and prompts it journaled, what they
//! returned, and its decision; the files it read become the scenario's files;
//! the run's end and its state become what is expected. A bug seen in a real
//! run becomes a regression test that `loopbox test` passes until the policy
//! changes what it does.
//!
//! Values are written as JSON, which YAML reads as it is, so nothing a policy
//! or a command printed can break out of its place in the file.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::bindings::Decision;
use crate::db::Db;
use crate::run::record::{parse_decision, parse_event};
use crate::wasm::fault::PolicyFault;

/// Events one export may hold (a scenario holds at most this many steps).
const MAX_EVENTS: usize = super::format::MAX_STEPS;

/// The scenario text for run `id` of `db`. `policy` replaces the policy the
/// run names (a path that was relative to where it ran, say).
pub fn scenario(db: &Db, id: &str, policy: Option<&str>) -> Result<String> {
    scenario_in(db, id, policy, Path::new("."), &[])
}

/// The current values (8 bytes or longer) of the run's `shell.pass_env`
/// variables, as read from its config (`workspace`'s loopbox.toml when it
/// named none): what a command may have printed and an export must not copy.
pub fn pass_env_values(db: &Db, id: &str, workspace: &Path) -> Vec<(String, String)> {
    let file = db.run(id).ok().flatten().and_then(|r| r.options.config);
    let names = crate::config::Config::discover(file.as_deref(), workspace)
        .map(|(c, _)| c.shell.pass_env)
        .unwrap_or_default();
    // The locale, terminal and home directory are not secrets, and redacting
    // them would blur every path and message in the export.
    const PLAIN: &[&str] = &[
        "HOME", "LANG", "TERM", "TZ", "USER", "LOGNAME", "SHELL", "PATH",
    ];
    names
        .into_iter()
        .filter(|n| !PLAIN.contains(&n.as_str()) && !n.starts_with("LC_"))
        .filter_map(|n| std::env::var(&n).ok().map(|v| (n, v)))
        .filter(|(_, v)| v.len() >= 8)
        .collect()
}

/// Every occurrence of a secret's value in `v`'s strings as `<redacted:NAME>`.
fn redact(v: &mut Value, secrets: &[(String, String)]) {
    match v {
        Value::String(s) => {
            for (name, value) in secrets {
                if s.contains(value.as_str()) {
                    *s = s.replace(value.as_str(), &format!("<redacted:{name}>"));
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| redact(x, secrets)),
        Value::Object(o) => o.values_mut().for_each(|x| redact(x, secrets)),
        _ => {}
    }
}

/// As [`scenario`], for a file written in `dir`: a YAML loop's run names the
/// loop by its path relative to `dir`, with the loop's own input, rather than
/// `builtin:fsm` with the whole loop text frozen in its input.
/// `secrets` (see [`pass_env_values`]) are redacted from the outputs and files.
pub fn scenario_in(
    db: &Db,
    id: &str,
    policy: Option<&str>,
    dir: &Path,
    secrets: &[(String, String)],
) -> Result<String> {
    let run = db.run(id)?.with_context(|| {
        format!("there is no run `{id}` in this workspace (`loopbox runs` lists them)")
    })?;
    let events = db.events(id)?;
    if events.is_empty() {
        bail!("run `{id}` has no events yet: there is nothing to export");
    }
    if events.len() > MAX_EVENTS {
        bail!(
            "run `{id}` has {} events; a scenario holds at most {MAX_EVENTS}",
            events.len()
        );
    }
    let q = |v: &str| Value::String(v.to_string()).to_string();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Exported from run {id} with `loopbox runs export {id} --scenario`.\n# `loopbox test FILE` runs it; edit the expectations to taste (docs/authoring/testing.md)."
    );
    let _ = writeln!(out, "name: {}", q(&format!("run {id}")));
    let (named, input) = match loop_of(&run.policy, &run.input, dir) {
        Some((path, input)) => (path, input),
        None => (run.policy.clone(), run.input.clone()),
    };
    let _ = writeln!(out, "policy: {}", q(policy.unwrap_or(&named)));
    let _ = writeln!(out, "input: {}", q(&input));
    let mut files: BTreeMap<String, String> = BTreeMap::new();
    let mut steps = String::new();
    let mut last: Option<(Result<Decision, PolicyFault>, bool)> = None;
    for (i, ev) in events.iter().enumerate() {
        let event = parse_event(&ev.event)
            .with_context(|| format!("event {} of run `{id}` cannot be read back", ev.seq))?;
        let after_turn = matches!(event, crate::bindings::Event::TurnComplete(_));
        let injected = matches!(&last, Some((Ok(Decision::Inject(_)), _)));
        let v: Value = serde_json::from_str(&ev.event)?;
        if i == 0 && v["type"] == "start" {
            let _ = writeln!(steps, "  - event: start");
        } else if after_turn && injected {
            let _ = writeln!(steps, "  - reply: {}", v["response"]);
        } else {
            let _ = writeln!(steps, "  - event: {v}");
        }
        let rows = db.journal(id, ev.seq)?;
        let mut calls = String::new();
        for r in rows.iter().filter(|r| r.seq > 0) {
            let result = r.result.clone().unwrap_or_else(|| {
                json!({"err": {"kind": "outcome-unknown", "message": null}}).to_string()
            });
            match r.kind.as_str() {
                "shell" | "prompt" => {
                    let request: Value = serde_json::from_str(&r.request).unwrap_or(Value::Null);
                    let returns: Value = serde_json::from_str(&result).unwrap_or(Value::Null);
                    let mut returns = match (returns.get("ok"), returns.get("err")) {
                        (Some(ok), _) => ok.clone(),
                        (_, Some(err)) => json!({"error": err}),
                        _ => Value::Null,
                    };
                    redact(&mut returns, secrets);
                    let _ = writeln!(
                        calls,
                        "      - {}: {request}\n        returns: {returns}",
                        r.kind
                    );
                }
                "read" => {
                    if let Some(Ok(text)) =
                        crate::journal::codec::parse_text_result::<String>(&result)
                    {
                        let mut text = Value::String(text);
                        redact(&mut text, secrets);
                        files.insert(r.request.clone(), text.as_str().unwrap_or("").into());
                    }
                }
                // Clocks and listings the scenario's world answers itself.
                _ => {}
            }
        }
        if !calls.is_empty() {
            let _ = writeln!(steps, "    calls:\n{}", calls.trim_end());
        }
        let result = match (&ev.decision, &ev.error) {
            (Some(d), _) => {
                let _ = writeln!(steps, "    decision: {d}");
                Ok(parse_decision(d)?)
            }
            (None, Some(e)) => {
                let message = serde_json::from_str::<Value>(e)
                    .ok()
                    .and_then(|v| v["message"].as_str().map(String::from))
                    .unwrap_or_else(|| e.clone());
                let _ = writeln!(steps, "    fault: {}", q(&message));
                Err(PolicyFault::Recorded(message))
            }
            (None, None) => {
                let _ = writeln!(
                    steps,
                    "    # this event was interrupted before it decided; the scenario stops here"
                );
                break;
            }
        };
        last = Some((result, after_turn));
    }
    if !files.is_empty() {
        let _ = writeln!(out, "files:");
        for (path, text) in &files {
            let _ = writeln!(out, "  {}: {}", q(path), q(text));
        }
    }
    let _ = write!(out, "steps:\n{steps}");
    let mut state = serde_json::Map::new();
    for key in db.state_keys(id, "")? {
        if let Some(v) = db.state_get(id, &key)? {
            state.insert(key, serde_json::from_str(&v).unwrap_or(Value::String(v)));
        }
    }
    let mut end = super::ending(last.as_ref());
    // A fault's message is matched by what it says, not how a trap's backtrace runs.
    if end["type"] == "fault" {
        end = json!({"type": "fault"});
    }
    let _ = writeln!(
        out,
        "expect:\n  end: {end}\n  state: {}",
        Value::Object(state)
    );
    Ok(out)
}

/// For a run of a YAML loop (`builtin:fsm` with the loop in its start input):
/// the loop's path relative to `dir`, and the loop's own input.
fn loop_of(policy: &str, input: &str, dir: &Path) -> Option<(String, String)> {
    if policy != crate::loops::FSM {
        return None;
    }
    let v: Value = serde_json::from_str(input).ok()?;
    let path = Path::new(v["path"].as_str()?);
    let workspace = Path::new(v["workspace"].as_str()?);
    let own = v["input"].as_str().unwrap_or("{}").to_string();
    let abs = workspace.join(path);
    let dir = dir.canonicalize().ok()?;
    Some((relative(&abs, &dir).to_string_lossy().into_owned(), own))
}

/// `to` as a path from `from` (both absolute): `..` for each of `from`'s
/// components past their common prefix.
fn relative(to: &Path, from: &Path) -> PathBuf {
    let (a, b): (Vec<Component>, Vec<Component>) =
        (to.components().collect(), from.components().collect());
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut out = PathBuf::new();
    for _ in common..b.len() {
        out.push("..");
    }
    for c in &a[common..] {
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pass_env_values_are_redacted_wherever_they_appear() {
        let mut v =
            json!({"stdout": "token=s3cr3t-value\n", "lines": ["s3cr3t-value x"], "code": 0});
        redact(&mut v, &[("API_TOKEN".into(), "s3cr3t-value".into())]);
        assert_eq!(
            v,
            json!({"stdout": "token=<redacted:API_TOKEN>\n", "lines": ["<redacted:API_TOKEN> x"], "code": 0})
        );
    }

    #[test]
    fn a_loop_is_named_relative_to_the_scenario_directory() {
        let p = |s: &str| PathBuf::from(s);
        assert_eq!(
            relative(Path::new("/w/l.yaml"), Path::new("/w")),
            p("l.yaml")
        );
        assert_eq!(
            relative(Path::new("/w/l.yaml"), Path::new("/w/t/u")),
            p("../../l.yaml")
        );
        assert_eq!(
            relative(Path::new("/w/a/l.yaml"), Path::new("/w/b")),
            p("../a/l.yaml")
        );
    }
}
