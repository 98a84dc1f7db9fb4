//! Scenario files (`NAME.scenario.yaml`) read into a [`Scenario`]: the policy,
//! its input and grants, the world it sees (files, state at start, what each
//! command and prompt returns) and what is expected. Every part keeps its line,
//! so a failure names where the scenario says otherwise.
//!
//! Bounded: the file is read to [`MAX_SCENARIO_BYTES`], YAML aliases are refused
//! before anything is built (an alias copies what its anchor holds, so a small
//! file could claim gigabytes), and nesting is capped by the YAML reader.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use loopbox_fsm::yaml::{self, Key, Node, Value as Y};
use serde_json::{Map, Value, json};

/// The largest scenario file read (the YAML reader's own cap).
pub const MAX_SCENARIO_BYTES: u64 = yaml::MAX_TEXT_BYTES as u64;
/// Steps one scenario may hold.
pub const MAX_STEPS: usize = 10_000;
/// What names a scenario file.
pub const SUFFIX: &str = ".scenario.yaml";

/// A value to compare with, from the scenario: plain values compare equal,
/// `{contains: TEXT}` and `{matches: REGEX}` match strings, a mapping matches
/// the keys it names (see `check`).
#[derive(Debug, Clone, PartialEq)]
pub struct Pattern {
    pub line: u32,
    pub value: Value,
}

/// One scripted command or prompt, in the order the policy must ask for them.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub line: u32,
    /// `shell` or `prompt`, as the journal names calls.
    pub kind: &'static str,
    /// Matched against the request as the journal writes it.
    pub request: Pattern,
    /// The result as the journal writes it.
    pub returns: String,
}

/// What event a step delivers.
#[derive(Debug, Clone, PartialEq)]
pub enum StepEvent {
    /// `start` with the scenario's input (the first step), or nothing given.
    Implied,
    /// The agent's reply to the previous step's `inject`: a `turn-complete`.
    Reply(String),
    /// An event as `loopbox runs show --json` prints it.
    Event(Value),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub line: u32,
    pub event: StepEvent,
    pub calls: Vec<Call>,
    pub decision: Option<Pattern>,
    /// The event is expected to fail; its message matches this.
    pub fault: Option<Pattern>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    pub name: String,
    pub file: PathBuf,
    /// As written (`builtin:NAME`, a component path, a YAML loop) and its line.
    pub policy: Option<(String, u32)>,
    /// The `start` input as text (JSON written as YAML becomes JSON text).
    pub input: Option<String>,
    /// loopbox.toml text: limits, `[run] max_turns`.
    pub config: Option<String>,
    /// State at start: key and JSON text.
    pub state: Vec<(String, String)>,
    /// Workspace files the policy may read: path and contents.
    pub files: Vec<(String, String)>,
    pub steps: Vec<Step>,
    /// How the run ends.
    pub end: Option<Pattern>,
    /// State at the end (the keys it names).
    pub final_state: Option<Pattern>,
}

/// A problem with the scenario file itself, at a line.
fn at(line: u32, msg: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("line {line}: {msg}")
}

/// Read and parse the scenario file at `path`.
pub fn read(path: &Path) -> Result<Scenario> {
    let text = crate::files::read_text(path, MAX_SCENARIO_BYTES, "scenario")?;
    parse(&text, path)
}

/// Parse a scenario's text; `path` names it and anchors relative paths.
pub fn parse(text: &str, path: &Path) -> Result<Scenario> {
    refuse_aliases(text)?;
    let root = yaml::parse(text).map_err(|e| at(e.line, e.message))?;
    let Some(fields) = root.as_fields() else {
        bail!(
            "line {}: a scenario is a mapping, not {}",
            root.line,
            root.kind()
        );
    };
    let known = [
        "name", "policy", "input", "config", "state", "files", "steps", "calls", "decision",
        "fault", "expect",
    ];
    for (k, _) in fields {
        if !known.contains(&k.name.as_str()) {
            bail!(
                "line {}: unknown key `{}`; a scenario has {}",
                k.line,
                k.name,
                known.join(", ")
            );
        }
    }
    let get = |name: &str| yaml::get(&root, name);
    let name = match get("name") {
        Some(n) => string(n, "name")?,
        None => path
            .file_name()
            .map(|f| f.to_string_lossy())
            .unwrap_or_default()
            .trim_end_matches(SUFFIX)
            .to_string(),
    };
    let policy = get("policy")
        .map(|n| Ok::<_, anyhow::Error>((string(n, "policy")?, n.line)))
        .transpose()?;
    let input = get("input").map(|n| match &n.value {
        Y::Str(s) => s.clone(),
        _ => n.to_json().to_string(),
    });
    let config = get("config").map(|n| string(n, "config")).transpose()?;
    let state = match get("state") {
        None => Vec::new(),
        Some(n) => map_of(n, "state")?
            .iter()
            .map(|(k, v)| (k.name.clone(), v.to_json().to_string()))
            .collect(),
    };
    let files = match get("files") {
        None => Vec::new(),
        Some(n) => map_of(n, "files")?
            .iter()
            .map(|(k, v)| Ok((k.name.clone(), string(v, &format!("files.{}", k.name))?)))
            .collect::<Result<_>>()?,
    };
    let steps = match get("steps") {
        Some(n) => {
            if get("calls").is_some() || get("decision").is_some() || get("fault").is_some() {
                bail!(
                    "line {}: `calls`, `decision` and `fault` go inside each step when the scenario has `steps`",
                    n.line
                );
            }
            let Y::Seq(items) = &n.value else {
                bail!("line {}: `steps` is a list, not {}", n.line, n.kind());
            };
            if items.len() > MAX_STEPS {
                bail!(
                    "line {}: {} steps; a scenario may have at most {MAX_STEPS}",
                    n.line,
                    items.len()
                );
            }
            items.iter().map(step).collect::<Result<Vec<_>>>()?
        }
        // One event, `start`, with the calls and decision at the top level.
        None => {
            let line = fields
                .iter()
                .find(|(k, _)| k.name == "calls")
                .map_or(root.line, |(k, _)| k.line);
            vec![step_fields(&root, line, &["calls", "decision", "fault"])?]
        }
    };
    let (end, final_state) = match get("expect") {
        None => (None, None),
        Some(n) => {
            let fields = map_of(n, "expect")?;
            for (k, _) in fields {
                if k.name != "end" && k.name != "state" {
                    bail!(
                        "line {}: `expect` has `end` and `state`, not `{}`",
                        k.line,
                        k.name
                    );
                }
            }
            (
                yaml::get(n, "end").map(|e| pattern(e, shorthand_end)),
                yaml::get(n, "state").map(|s| pattern(s, |v| v)),
            )
        }
    };
    Ok(Scenario {
        name,
        file: path.to_path_buf(),
        policy,
        input,
        config,
        state,
        files,
        steps,
        end,
        final_state,
    })
}

fn string(n: &Node, what: &str) -> Result<String> {
    match &n.value {
        Y::Str(s) => Ok(s.clone()),
        Y::Int(_) | Y::Float(_) | Y::Bool(_) => Ok(n.to_json().to_string()),
        _ => Err(at(n.line, format!("`{what}` is text, not {}", n.kind()))),
    }
}

fn map_of<'a>(n: &'a Node, what: &str) -> Result<&'a [(Key, Node)]> {
    n.as_fields()
        .ok_or_else(|| at(n.line, format!("`{what}` is a mapping, not {}", n.kind())))
}

fn step(n: &Node) -> Result<Step> {
    step_fields(n, n.line, &["event", "reply", "calls", "decision", "fault"])
}

fn step_fields(n: &Node, line: u32, allowed: &[&str]) -> Result<Step> {
    let fields = map_of(n, "a step")?;
    if allowed.contains(&"event") {
        for (k, _) in fields {
            if !allowed.contains(&k.name.as_str()) {
                bail!(
                    "line {}: unknown key `{}` in a step; a step has {}",
                    k.line,
                    k.name,
                    allowed.join(", ")
                );
            }
        }
    }
    let event = match (yaml::get(n, "event"), yaml::get(n, "reply")) {
        (Some(_), Some(r)) => bail!("line {}: a step has `event` or `reply`, not both", r.line),
        (None, Some(r)) => StepEvent::Reply(string(r, "reply")?),
        (Some(e), None) => match &e.value {
            Y::Str(s) if s == "start" => StepEvent::Implied,
            Y::Map(_) => {
                let v = e.to_json();
                if v.get("type").and_then(Value::as_str).is_none() {
                    bail!(
                        "line {}: an event needs a `type` (start, turn-complete, tool-call, tick, user-input, custom)",
                        e.line
                    );
                }
                StepEvent::Event(v)
            }
            _ => bail!(
                "line {}: `event` is `start` or a mapping with a `type`, not {}",
                e.line,
                e.kind()
            ),
        },
        (None, None) => StepEvent::Implied,
    };
    let calls = match yaml::get(n, "calls") {
        None => Vec::new(),
        Some(c) => {
            let Y::Seq(items) = &c.value else {
                bail!("line {}: `calls` is a list, not {}", c.line, c.kind());
            };
            items.iter().map(call).collect::<Result<_>>()?
        }
    };
    Ok(Step {
        line,
        event,
        calls,
        decision: yaml::get(n, "decision").map(|d| pattern(d, shorthand_decision)),
        fault: yaml::get(n, "fault").map(|f| pattern(f, |v| v)),
    })
}

fn pattern(n: &Node, shorthand: fn(Value) -> Value) -> Pattern {
    Pattern {
        line: n.line,
        value: shorthand(n.to_json()),
    }
}

/// `pass` is `{type: pass}`; `{inject: TEXT}` is `{type: inject, message: TEXT}`.
fn shorthand_decision(v: Value) -> Value {
    shorthand(
        v,
        &[
            ("pass", ""),
            ("inject", "message"),
            ("block", "reason"),
            ("rewrite", "payload"),
            ("ask", "question"),
            ("done", "summary"),
            ("escalate", "reason"),
        ],
    )
}

/// `done` is `{type: done}`; `{escalated: TEXT}` is `{type: escalated, reason: TEXT}`.
fn shorthand_end(v: Value) -> Value {
    shorthand(
        v,
        &[
            ("done", "summary"),
            ("stopped", "turns"),
            ("escalated", "reason"),
            ("blocked", "reason"),
            ("waiting", "reason"),
            ("fault", "message"),
            ("open", "message"),
            ("turn-budget", "turns"),
            ("decided", "decision"),
        ],
    )
}

fn shorthand(v: Value, kinds: &[(&str, &str)]) -> Value {
    match v {
        Value::String(s) if kinds.iter().any(|(k, _)| *k == s) => json!({"type": s}),
        Value::Object(m) if m.len() == 1 && !m.contains_key("type") => {
            let (k, inner) = m.into_iter().next().expect("one entry");
            let Some((kind, field)) = kinds.iter().find(|(kind, _)| *kind == k) else {
                let mut m = Map::new();
                m.insert(k, inner);
                return Value::Object(m);
            };
            let mut out = Map::new();
            out.insert("type".into(), json!(kind));
            match inner {
                // `{done: {success: true, summary: ...}}`: the fields as they are.
                Value::Object(fields)
                    if !fields.contains_key("contains") && !fields.contains_key("matches") =>
                {
                    out.extend(fields)
                }
                Value::Null => {}
                other if !field.is_empty() => {
                    out.insert((*field).into(), other);
                }
                _ => {}
            }
            Value::Object(out)
        }
        other => other,
    }
}

fn call(n: &Node) -> Result<Call> {
    let fields = map_of(n, "a call")?;
    let mut kind = None;
    for (k, v) in fields {
        match k.name.as_str() {
            "shell" | "exec" | "script" | "prompt" => {
                if kind.is_some() {
                    bail!(
                        "line {}: a call is one of shell, exec, script or prompt",
                        k.line
                    );
                }
                kind = Some((k.name.as_str(), v));
            }
            "returns" => {}
            other => bail!(
                "line {}: unknown key `{other}` in a call; a call has shell (or exec, script) or prompt, and returns",
                k.line
            ),
        }
    }
    let Some((name, req)) = kind else {
        bail!(
            "line {}: a call names `shell`, `exec`, `script` or `prompt`",
            n.line
        );
    };
    let req_json = req.to_json();
    let (kind, request) = match (name, req_json) {
        ("exec", v) | ("shell", v @ Value::Array(_)) => ("shell", json!({"exec": v})),
        ("script", v) => ("shell", json!({"script": v})),
        ("shell", Value::String(s)) => ("shell", json!({"script": s})),
        ("shell", v @ Value::Object(_)) => ("shell", v),
        ("prompt", Value::String(s)) => ("prompt", json!({"text": s})),
        ("prompt", v @ Value::Object(_))
            if v.get("contains").is_some() || v.get("matches").is_some() =>
        {
            ("prompt", json!({"text": v}))
        }
        ("prompt", v @ Value::Object(_)) => ("prompt", v),
        (_, _) => bail!(
            "line {}: `{name}` is an argv list, a script's text or a mapping of the request, not {}",
            req.line,
            req.kind()
        ),
    };
    let returns = match yaml::get(n, "returns") {
        None => output(&Map::new(), n.line)?,
        Some(r) => returns(r)?,
    };
    Ok(Call {
        line: n.line,
        kind,
        request: Pattern {
            line: req.line,
            value: request,
        },
        returns,
    })
}

/// A call's result in the journal's form: `{ok: OUTPUT}` or `{err: {kind, message}}`.
fn returns(n: &Node) -> Result<String> {
    match n.to_json() {
        Value::String(s) => output(&Map::from_iter([("stdout".into(), json!(s))]), n.line),
        Value::Object(m) if m.contains_key("error") => {
            let (kind, message) = match &m["error"] {
                Value::String(k) => (k.clone(), Value::Null),
                Value::Object(e) => (
                    e.get("kind")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    e.get("message").cloned().unwrap_or(Value::Null),
                ),
                _ => (String::new(), Value::Null),
            };
            const KINDS: [&str; 6] = [
                "denied",
                "declined",
                "budget-exhausted",
                "invalid",
                "unavailable",
                "outcome-unknown",
            ];
            if !KINDS.contains(&kind.as_str()) {
                bail!(
                    "line {}: `error` is one of {} (or `{{kind: ..., message: ...}}`)",
                    n.line,
                    KINDS.join(", ")
                );
            }
            let message = match message {
                Value::Null if kind != "outcome-unknown" => json!(format!("{kind} (scenario)")),
                m => m,
            };
            Ok(json!({"err": {"kind": kind, "message": message}}).to_string())
        }
        Value::Object(m) => output(&m, n.line),
        _ => bail!(
            "line {}: `returns` is the command's stdout, a mapping (exit_code, stdout, stderr, ...) or `{{error: KIND}}`",
            n.line
        ),
    }
}

fn output(m: &Map<String, Value>, line: u32) -> Result<String> {
    const KEYS: [&str; 7] = [
        "exit_code",
        "stdout",
        "stderr",
        "duration_ms",
        "timed_out",
        "truncated",
        "session",
    ];
    for k in m.keys() {
        if !KEYS.contains(&k.as_str()) {
            bail!(
                "line {line}: unknown key `{k}` in `returns`; it has {}",
                KEYS.join(", ")
            );
        }
    }
    let text = |k: &str| match m.get(k) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(at(line, format!("`returns.{k}` is text"))),
    };
    let flag = |k: &str| m.get(k).and_then(Value::as_bool).unwrap_or(false);
    let exit = match m.get("exit_code") {
        None => Some(0),
        Some(Value::Null) => None,
        Some(v) => Some(
            v.as_i64()
                .and_then(|c| i32::try_from(c).ok())
                .ok_or_else(|| {
                    at(
                        line,
                        "`returns.exit_code` is a whole number (or null: killed by a signal)",
                    )
                })?,
        ),
    };
    Ok(json!({"ok": {
        "exit_code": exit, "stdout": text("stdout")?, "stderr": text("stderr")?,
        "duration_ms": m.get("duration_ms").and_then(Value::as_u64).unwrap_or(0),
        "timed_out": flag("timed_out"), "truncated": flag("truncated"),
        "session": m.get("session").and_then(Value::as_str),
    }})
    .to_string())
}

/// Refuse YAML aliases (`*name`) before the tree is built: the reader copies
/// what an anchor holds at every use, so aliases could claim far more memory
/// than the file's size. Streaming, so it holds nothing but the parser's state.
fn refuse_aliases(text: &str) -> Result<()> {
    use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
    use yaml_rust2::scanner::Marker;
    struct Aliases(Option<u32>);
    impl MarkedEventReceiver for Aliases {
        fn on_event(&mut self, ev: Event, mark: Marker) {
            if matches!(ev, Event::Alias(_)) && self.0.is_none() {
                self.0 = Some(mark.line() as u32);
            }
        }
    }
    if text.len() as u64 > MAX_SCENARIO_BYTES {
        bail!(
            "the scenario is {} bytes; a scenario may be at most {MAX_SCENARIO_BYTES}",
            text.len()
        );
    }
    let mut found = Aliases(None);
    // Syntax errors are reported by the reader proper, with its message.
    let _ = Parser::new_from_str(text).load(&mut found, false);
    if let Some(line) = found.0 {
        bail!(
            "line {line}: YAML aliases (`*name`) are not accepted in scenarios; write the value out"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(text: &str) -> Result<Scenario> {
        parse(text, Path::new("dir/ralph.scenario.yaml"))
    }

    #[test]
    fn a_scenario_reads_with_its_lines_and_shorthands() {
        let s = parse_str(
            "policy: builtin:ralph\ninput: {prompt: p}\nstate: {k: [1]}\nfiles: {a.txt: A}\nsteps:\n  - event: start\n    calls:\n      - shell: [make, test]\n        returns: {exit_code: 2, stdout: o}\n      - prompt: {contains: fix}\n        returns: {error: denied}\n    decision: {inject: {contains: it}}\n  - reply: ok\n    decision: pass\nexpect:\n  end: stopped\n  state: {k: [1]}\n",
        )
        .unwrap();
        assert_eq!(s.name, "ralph");
        assert_eq!(s.policy, Some(("builtin:ralph".into(), 1)));
        assert_eq!(s.input.as_deref(), Some("{\"prompt\":\"p\"}"));
        assert_eq!(s.state, vec![("k".into(), "[1]".into())]);
        assert_eq!(s.files, vec![("a.txt".into(), "A".into())]);
        let first = &s.steps[0];
        assert_eq!((first.line, first.event.clone()), (6, StepEvent::Implied));
        assert_eq!(first.calls[0].line, 8);
        assert_eq!(
            first.calls[0].request.value,
            json!({"exec": ["make", "test"]})
        );
        assert!(first.calls[0].returns.contains("\"exit_code\":2"));
        assert_eq!(first.calls[1].kind, "prompt");
        assert_eq!(
            first.calls[1].request.value,
            json!({"text": {"contains": "fix"}})
        );
        assert!(first.calls[1].returns.contains("\"kind\":\"denied\""));
        assert_eq!(
            first.decision.as_ref().unwrap().value,
            json!({"type": "inject", "message": {"contains": "it"}})
        );
        assert_eq!(s.steps[1].event, StepEvent::Reply("ok".into()));
        assert_eq!(
            s.steps[1].decision.as_ref().unwrap().value,
            json!({"type": "pass"})
        );
        assert_eq!(s.end.unwrap().value, json!({"type": "stopped"}));
    }

    #[test]
    fn mistakes_name_their_line() {
        let e = |t: &str| format!("{:#}", parse_str(t).unwrap_err());
        assert!(
            e("policy: x\nsteps:\n  - reply: a\n    decison: pass\n")
                .starts_with("line 4: unknown key `decison`")
        );
        assert!(
            e("calls:\n  - shell: [a]\n    returns: {exit: 1}\n")
                .contains("line 3: unknown key `exit`")
        );
        assert!(
            e("calls:\n  - shell: [a]\n    returns: {error: nope}\n")
                .contains("`error` is one of denied")
        );
        assert!(e("a: [\n").starts_with("line "));
        assert!(e("steps: []\ncalls: []\n").contains("go inside each step"));
    }

    #[test]
    fn aliases_and_deep_nesting_are_refused_before_anything_is_built() {
        let bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n";
        let e = format!("{:#}", parse_str(bomb).unwrap_err());
        assert!(
            e.contains("line 2: YAML aliases (`*name`) are not accepted"),
            "{e}"
        );
        let deep = format!("input: {}{}\n", "[".repeat(10_000), "]".repeat(10_000));
        let e = format!("{:#}", parse_str(&deep).unwrap_err());
        assert!(e.contains("line 1:"), "{e}");
        let big = "#".repeat(MAX_SCENARIO_BYTES as usize + 1);
        let e = format!("{:#}", parse_str(&big).unwrap_err());
        assert!(e.contains("a scenario may be at most 1048576"), "{e}");
    }
}
