//! The `start` payload of a `builtin:fsm` run: the loop's text, where it
//! lives in the workspace (for the files it names and for messages), its
//! input, and the run's directory; and the context a run starts with.
//!
//! `{"path": "loops/fix.yaml", "yaml": "name: ...", "context": {...},
//! "input": "TEXT", "run_dir": ".loops/runs/ID/", "workspace": "/abs"}`; a bare JSON string is
//! taken as the YAML text of a loop at the workspace root.

use serde_json::{Map, Value, json};

use crate::check::INJECTED_CONTEXT;
use crate::spec::Loop;

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Start {
    pub path: String,
    pub yaml: String,
    /// Values that replace `context` values, as given.
    pub context: Map<String, Value>,
    /// The run's input as typed (`loopbox run LOOP.yaml --input TEXT`).
    pub input: Option<String>,
    /// Where the loop keeps its files, `${context.run_dir}`.
    pub run_dir: Option<String>,
    /// The workspace directory as commands and the agent see it, `${env.PWD}`.
    pub workspace: Option<String>,
    /// Seconds to pause after each route, in place of the loop's `backoff`
    /// (`loopbox run --delay`, as `ll-loop run --delay`).
    pub delay: Option<f64>,
    /// `loopbox run --little-loops 1.156`: the release the run follows, over
    /// the loop's own `little_loops:` (see [`crate::spec::Release`]).
    pub little_loops: Option<String>,
    /// The variables loopbox.toml passes to commands, with their values:
    /// what `${env.NAME}` reads (see [`crate::spec::Loop::env`]).
    pub env: std::collections::BTreeMap<String, String>,
    /// A person can answer a `human_approval` state: at the terminal, or
    /// from elsewhere while the run waits (`[confirm] unattended = "wait"`).
    /// Absent: little-loops' headless path (see [`crate::spec::Loop::asks`]).
    pub ask: bool,
}

impl Start {
    /// The loop's `backoff` as this run keeps it, in milliseconds: `--delay`
    /// when given, else the loop's own.
    pub fn backoff_ms(&self, lp: &Loop) -> u64 {
        match self.delay {
            Some(s) if s.is_finite() && s >= 0.0 => (s * 1000.0).round() as u64,
            _ => lp.backoff_ms,
        }
    }
}

impl Start {
    /// The payload as JSON, what [`parse`] reads: only the fields that are set.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("path".into(), json!(self.path));
        m.insert("yaml".into(), json!(self.yaml));
        if !self.context.is_empty() {
            m.insert("context".into(), Value::Object(self.context.clone()));
        }
        for (name, value) in [
            ("input", &self.input),
            ("run_dir", &self.run_dir),
            ("workspace", &self.workspace),
            ("little_loops", &self.little_loops),
        ] {
            if let Some(v) = value {
                m.insert(name.into(), json!(v));
            }
        }
        if let Some(d) = self.delay {
            m.insert("delay".into(), json!(d));
        }
        if !self.env.is_empty() {
            m.insert("env".into(), json!(self.env));
        }
        if self.ask {
            m.insert("ask".into(), json!(true));
        }
        Value::Object(m)
    }
}

pub fn parse(input: &str) -> Result<Start, String> {
    let value: Value =
        serde_json::from_str(input).map_err(|e| format!("the input is not JSON: {e}"))?;
    match value {
        Value::String(yaml) => Ok(Start {
            path: "loop.yaml".into(),
            yaml,
            ..Default::default()
        }),
        Value::Object(mut m) => {
            let Some(Value::String(yaml)) = m.remove("yaml") else {
                return Err(
                    "the input needs `yaml`: the loop's text (`loopbox run LOOP.yaml` fills it in)"
                        .into(),
                );
            };
            let text = |m: &mut Map<String, Value>, name: &str| match m.remove(name) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(p)) => Ok(Some(p)),
                Some(_) => Err(format!("`{name}` in the input must be text")),
            };
            let path = text(&mut m, "path")?.unwrap_or_else(|| "loop.yaml".into());
            let input = text(&mut m, "input")?;
            let run_dir = text(&mut m, "run_dir")?;
            let workspace = text(&mut m, "workspace")?;
            let little_loops = text(&mut m, "little_loops")?;
            if let Some(v) = &little_loops
                && crate::spec::Release::parse(v).is_none()
            {
                return Err(format!(
                    "`little_loops` in the input names a release like `1.156` or `1.167.0`, not `{v}`"
                ));
            }
            let delay = match m.remove("delay") {
                None | Some(Value::Null) => None,
                Some(Value::Number(n)) => n.as_f64().filter(|d| d.is_finite() && *d >= 0.0),
                Some(_) => None,
            };
            let env = match m.remove("env") {
                None | Some(Value::Null) => Default::default(),
                Some(Value::Object(e)) => e
                    .into_iter()
                    .map(|(k, v)| match v {
                        Value::String(v) => Ok((k, v)),
                        _ => Err(format!("`env.{k}` in the input must be text")),
                    })
                    .collect::<Result<_, _>>()?,
                Some(_) => return Err("`env` in the input must be an object".into()),
            };
            let ask = match m.remove("ask") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => b,
                Some(_) => return Err("`ask` in the input must be true or false".into()),
            };
            let context = match m.remove("context") {
                None | Some(Value::Null) => Map::new(),
                Some(Value::Object(c)) => c,
                Some(_) => return Err("`context` in the input must be an object".into()),
            };
            if let Some(k) = m.keys().next() {
                return Err(format!(
                    "unknown input field `{k}` (fields: path, yaml, context, input, run_dir, workspace, delay, little_loops, env, ask)"
                ));
            }
            Ok(Start {
                path,
                yaml,
                context,
                input,
                run_dir,
                workspace,
                delay,
                little_loops,
                env,
                ask,
            })
        }
        _ => Err(
            "the input must be the loop's YAML text, or {\"path\", \"yaml\", \"context\"}".into(),
        ),
    }
}

/// Readiness and outcome thresholds little-loops seeds from its config
/// defaults when a loop does not set them.
const THRESHOLDS: &[(&str, i64)] = &[("readiness_threshold", 85), ("outcome_threshold", 65)];

/// The context a run starts with, as `ll-loop run` builds it: the loop's
/// `context`, the input, then the values little-loops injects (`run_dir`,
/// `input_hash`, `max_steps`, the thresholds), each only where the loop or
/// the input did not set it. A required input that is missing or empty stops
/// the run before it starts.
///
/// The input: a JSON object naming at least one value the loop knows
/// (declared, required, a parameter or injected) sets those values; any
/// other text, or an object naming none of them, becomes the `input_key`
/// value (`input` unless the loop says otherwise).
pub fn context(lp: &Loop, start: &Start) -> Result<Map<String, Value>, String> {
    let mut ctx = lp.context.clone();
    ctx.extend(start.context.clone());
    if let Some(raw) = &start.input {
        let referenced = referenced_context(lp);
        let known = |k: &str| {
            ctx.contains_key(k)
                || referenced.contains(k)
                || lp.required_inputs.iter().any(|r| r == k)
                || lp.parameters.iter().any(|p| p.name == k)
                || INJECTED_CONTEXT.contains(&k)
                || k == lp.input_key
        };
        match serde_json::from_str::<Value>(raw) {
            Ok(Value::Object(m)) if m.is_empty() => {}
            Ok(Value::Object(m)) if m.keys().any(|k| known(k)) => ctx.extend(m),
            _ => {
                ctx.insert(lp.input_key.clone(), Value::String(raw.clone()));
            }
        }
    }
    // A top-level run fills in parameter defaults; a missing required one is
    // only an error for a sub-loop call, as in little-loops.
    let _ = crate::spec::Param::bind(&lp.parameters, &mut ctx);
    let run_dir = start
        .run_dir
        .clone()
        .unwrap_or_else(|| format!(".loops/runs/{}/", lp.name));
    ctx.entry("run_dir").or_insert(Value::String(run_dir));
    if let (false, Some(Value::String(input))) = (ctx.contains_key("input_hash"), ctx.get("input"))
    {
        let hash = sha256_hex(input.as_bytes());
        ctx.insert("input_hash".into(), Value::String(hash[..12].to_string()));
    }
    ctx.entry("max_steps").or_insert(json!(lp.max_steps));
    for (k, v) in THRESHOLDS {
        ctx.entry(*k).or_insert(json!(v));
    }
    ctx.entry("design_tokens_context").or_insert(json!(""));
    // Before the first state, as `ll-loop run` checks (`cli/loop/run.py`,
    // "Missing required context variable").
    let missing: Vec<String> = referenced_context(lp)
        .into_iter()
        .filter(|k| !ctx.contains_key(k))
        .collect();
    if !missing.is_empty() {
        return Err(missing
            .iter()
            .map(|key| {
                format!(
                    "loop `{}`: missing required context variable `{key}` (used as `${{context.{key}}}` with no default): pass it with --input '{{\"{key}\": \"VALUE\"}}', or give it a value under `context:`",
                    lp.name
                )
            })
            .collect::<Vec<_>>()
            .join("\n"));
    }
    for key in &lp.required_inputs {
        let empty = match ctx.get(key) {
            None | Some(Value::Null) => true,
            Some(Value::String(s)) => s.is_empty(),
            Some(Value::Bool(b)) => !b,
            Some(Value::Number(n)) => n.as_f64() == Some(0.0),
            Some(Value::Array(a)) => a.is_empty(),
            Some(Value::Object(o)) => o.is_empty(),
        };
        if empty {
            let how = if *key == lp.input_key {
                "--input TEXT".to_string()
            } else {
                format!("--input '{{\"{key}\": ...}}'")
            };
            return Err(format!(
                "loop `{}` requires input `{key}` but none was given: pass it with {how}",
                lp.name
            ));
        }
    }
    Ok(ctx)
}

/// The `context` keys the loop's actions and judge prompts use without a
/// fallback, read as `ll-loop run` reads them (`cli/loop/run.py`: the regex
/// `\$\{context\.([^}.]+)`, skipping `:default=` and `?`, `:shell` stripped).
pub fn referenced_context(lp: &Loop) -> std::collections::BTreeSet<String> {
    use crate::spec::{Action, EvalKind};
    let mut keys = std::collections::BTreeSet::new();
    for state in &lp.states {
        let mut templates: Vec<&str> = Vec::new();
        match &state.action {
            Some(
                Action::Shell(t)
                | Action::Prompt(t)
                | Action::SlashCommand(t)
                | Action::HumanApproval(t),
            ) => templates.push(t),
            Some(Action::Exec(argv)) => templates.extend(argv.iter().map(String::as_str)),
            Some(Action::Mcp { tool, params }) => {
                templates.push(tool);
                templates.extend(params.values().filter_map(|v| v.as_str()));
            }
            None => {}
        }
        if let Some(e) = &state.evaluate
            && let EvalKind::LlmStructured {
                prompt: Some(p), ..
            } = &e.kind
        {
            templates.push(p);
        }
        for t in templates {
            for (i, _) in t.match_indices("${context.") {
                let rest = &t[i + "${context.".len()..];
                let raw = &rest[..rest.find(['}', '.']).unwrap_or(rest.len())];
                // The suffixes read as the engine reads them (1.167's
                // `parse_interpolation_suffixes`, in any order); a chain it
                // cannot read is left for run time, as `ll-loop run` leaves it.
                match crate::interp::suffixes(raw, raw) {
                    Ok((name, None, false, _)) if !name.is_empty() => {
                        keys.insert(name.into_owned());
                    }
                    _ => {}
                }
            }
        }
    }
    keys
}

/// SHA-256 as hex, for `input_hash` (little-loops keeps its first 12 digits).
pub(crate) fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_round_trip_and_bad_ones_say_why() {
        let mut ctx = Map::new();
        ctx.insert("n".into(), json!(2));
        let start = Start {
            path: "loops/a.yaml".into(),
            yaml: "name: a".into(),
            context: ctx,
            input: Some("fix it".into()),
            run_dir: Some(".loops/runs/r1/".into()),
            workspace: None,
            delay: Some(0.5),
            little_loops: Some("1.156.0".into()),
            env: [("HOME".to_string(), "/home/u".to_string())].into(),
            ask: true,
        };
        assert_eq!(parse(&start.to_json().to_string()), Ok(start));
        assert!(
            parse(r#"{"yaml": "name: a", "little_loops": "latest"}"#)
                .unwrap_err()
                .contains("names a release like `1.156`")
        );
        assert_eq!(parse("\"name: b\"").unwrap().path, "loop.yaml");
        assert!(parse("{}").unwrap_err().contains("needs `yaml`"));
        assert!(
            parse("{\"yaml\": \"x\", \"extra\": 1}")
                .unwrap_err()
                .contains("unknown input field `extra`")
        );
        assert!(
            parse("3")
                .unwrap_err()
                .contains("must be the loop's YAML text")
        );
    }

    #[test]
    fn sha256_matches_known_digests() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            sha256_hex(&[b'a'; 200]),
            "c2a908d98f5df987ade41b5fce213067efbcc21ef2240212a41e54b5e7c28ae5"
        );
    }

    fn lp(yaml: &str) -> Loop {
        struct NoFiles;
        impl crate::Files for NoFiles {
            fn read(&mut self, _: &str) -> Result<String, String> {
                Err("no files".into())
            }
        }
        crate::load("l.yaml", yaml, &mut NoFiles).unwrap()
    }

    #[test]
    fn the_starting_context_follows_ll_loop_run() {
        let l =
            lp("name: l\ninitial: a\ncontext:\n  target: x\nstates:\n  a:\n    terminal: true\n");
        let start = |input: &str| Start {
            input: Some(input.into()),
            run_dir: Some(".loops/runs/r1/".into()),
            ..Default::default()
        };
        // An object naming a known value sets it.
        let c = context(&l, &start(r#"{"target": "y"}"#)).unwrap();
        assert_eq!((c["target"].clone(), c.get("input")), (json!("y"), None));
        // One naming none, or any other text, lands in `input`, with its hash.
        let c = context(&l, &start(r#"{"other": 1}"#)).unwrap();
        assert_eq!(c["input"], json!(r#"{"other": 1}"#));
        let c = context(&l, &start("fix the bug")).unwrap();
        assert_eq!(c["input"], json!("fix the bug"));
        assert_eq!(
            c["input_hash"],
            json!(sha256_hex(b"fix the bug")[..12].to_string())
        );
        assert_eq!(c["run_dir"], json!(".loops/runs/r1/"));
        assert_eq!(
            (c["max_steps"].clone(), c["readiness_threshold"].clone()),
            (json!(50), json!(85))
        );
        // `{}` is no input at all.
        assert_eq!(context(&l, &start("{}")).unwrap().get("input"), None);
    }

    #[test]
    fn a_context_reference_with_no_value_or_default_stops_the_run_before_it_starts() {
        // As `ll-loop run` (`cli/loop/run.py`): actions and judge prompts; `:default=`,
        // `?` and values skip; `:shell` is stripped; sorted.
        let l = lp(concat!(
            "name: l\ninitial: a\ncontext:\n  set: 1\nstates:\n  a:\n",
            // With 1.167's combinations, each with a fallback.
            "    action: 'echo ${context.zeta:shell} ${context.alpha.sub} ${context.d:default=x} ${context.o?} ${context.set} ${context.run_dir} ${context.p:shell:default=y} ${context.q?:shell} ${context.r:shell?} ${context.s:default=z:shell}'\n",
            "    evaluate:\n      type: llm_structured\n      prompt: 'is ${context.mid} done?'\n",
            "    next: done\n  done:\n    terminal: true\n",
        ));
        let e = context(&l, &Start::default()).unwrap_err();
        let keys: Vec<&str> = e
            .lines()
            .map(|line| line.split('`').nth(3).unwrap_or(line))
            .collect();
        assert_eq!(keys, ["alpha", "mid", "zeta"], "{e}");
        assert!(
            e.contains("missing required context variable `alpha`"),
            "{e}"
        );
        assert!(e.contains(r#"--input '{"alpha": "VALUE"}'"#), "{e}");
        // A JSON object naming them sets them (they are known keys).
        let c = context(
            &l,
            &Start {
                input: Some(r#"{"alpha": {"sub": 1}, "mid": "m", "zeta": "z"}"#.into()),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(c["zeta"], json!("z"));
    }

    #[test]
    fn required_inputs_and_input_key_are_honoured() {
        let l = lp(
            "name: l\ninitial: a\ninput_key: issue\nrequired_inputs: [issue]\nstates:\n  a:\n    terminal: true\n",
        );
        let e = context(&l, &Start::default()).unwrap_err();
        assert_eq!(
            e,
            "loop `l` requires input `issue` but none was given: pass it with --input TEXT"
        );
        let c = context(
            &l,
            &Start {
                input: Some("BUG-7".into()),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(c["issue"], json!("BUG-7"));
        let e = context(
            &l,
            &Start {
                input: Some("".into()),
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(e.contains("requires input `issue`"), "{e}");
    }
}
