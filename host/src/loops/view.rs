//! How a run of a YAML loop is shown (the API, the dashboard, `runs show`):
//! by its loop's name rather than `builtin:fsm`, with the path of states it
//! took and the state it is in, and each action of its journal as the state
//! it ran in, its command and what came of it.
//!
//! Where it stands is read from the marks `builtin:fsm` leaves in the journal
//! as it enters each state and as it routes out of it (its progress lines,
//! see [`crate::journal::Journal::mark`]): they are written with the next
//! action, so a run shows its state while that action runs, and each action
//! the verdict that routed the loop on. Once the run has ended, its outcome's
//! `path` and `state` (the fsm's own record, which ends with the terminal
//! state) are shown instead.

use serde_json::{Value, json};

use crate::db::RunOptions;

/// One state entered, as its mark says: the journal place of the mark, how
/// deep in sub-loops, the loop's name, the state's.
#[derive(Debug, Clone, PartialEq)]
pub struct Entered {
    pub event: i64,
    pub seq: i64,
    pub depth: usize,
    pub lp: String,
    pub state: String,
}

/// A progress line of `builtin:fsm`, as [`parse_mark`] reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    /// Sub-loops deep.
    pub depth: usize,
    pub lp: String,
    pub state: String,
    /// Leaving the state: the verdict and the state it routes to.
    pub routed: Option<(String, String)>,
}

/// A progress line of `builtin:fsm`: `{indent}{loop} · {state} · step {n}/{max}`
/// entering a state (two spaces of indent a sub-loop deep), the same with
/// ` · {verdict} -> {next}` leaving it. `None` for any other text.
pub fn parse_mark(text: &str) -> Option<Mark> {
    let body = text.trim_start_matches(' ');
    let depth = (text.len() - body.len()) / 2;
    // The first ` · step N/MAX` that is one: a name is less likely to hold one than a verdict.
    body.match_indices(" · step ").find_map(|(at, sep)| {
        let rest = &body[at + sep.len()..];
        let (n, rest) = rest.split_once('/')?;
        let (max, routed) = match rest.split_once(" · ") {
            Some((max, routed)) => (max, Some(routed.rsplit_once(" -> ")?)),
            None => (rest, None),
        };
        if n.parse::<u64>().is_err() || max.parse::<u64>().is_err() {
            return None;
        }
        let (lp, state) = body[..at].rsplit_once(" · ")?;
        Some(Mark {
            depth,
            lp: lp.to_string(),
            state: state.to_string(),
            routed: routed.map(|(v, n)| (v.to_string(), n.to_string())),
        })
    })
}

/// A verdict that routed the loop out of a state, at its journal place.
#[derive(Debug, Clone, PartialEq)]
pub struct Routed {
    pub event: i64,
    pub seq: i64,
    pub verdict: String,
    pub next: String,
}

/// What a run's marks `(event, seq, text)` say: the states it entered, and
/// the verdicts that routed it out of them.
pub type Marked = (Vec<Entered>, Vec<Routed>);

/// Read a run's marks ([`Marked`]).
pub fn entered(marks: &[(i64, i64, String)]) -> Marked {
    let mut entered = Vec::new();
    let mut routed = Vec::new();
    for (event, seq, text) in marks {
        let Some(m) = parse_mark(text) else { continue };
        match m.routed {
            Some((verdict, next)) => routed.push(Routed {
                event: *event,
                seq: *seq,
                verdict,
                next,
            }),
            None => entered.push(Entered {
                event: *event,
                seq: *seq,
                depth: m.depth,
                lp: m.lp,
                state: m.state,
            }),
        }
    }
    (entered, routed)
}

/// Whether the run is one of a YAML loop.
pub fn is_loop(policy: &str, options: &RunOptions) -> bool {
    options.loop_name.is_some() || policy == super::FSM
}

/// The name a run is shown by: its loop's, else its `[policies.NAME]`.
pub fn shown_name(options: &RunOptions) -> Option<&str> {
    options
        .loop_name
        .as_deref()
        .or(options.policy_name.as_deref())
}

/// The loop of a run as the API shows it (`None` for a run of no loop):
/// `{"name", "file", "state", "sub_loop", "path", "steps", "ended"}`.
/// `entered` are the states its latest marks entered; `cut`, whether it has
/// older marks than those.
pub fn loop_json(
    policy: &str,
    options: &RunOptions,
    input: &str,
    outcome: Option<&str>,
    entered: &[Entered],
    cut: bool,
) -> Option<Value> {
    if !is_loop(policy, options) {
        return None;
    }
    let input: Value = serde_json::from_str(input).unwrap_or(Value::Null);
    let data = outcome
        .and_then(|o| serde_json::from_str::<Value>(o).ok())
        .map(|o| o["data"].clone())
        .unwrap_or(Value::Null);
    let file = input["path"].as_str();
    let name = options
        .loop_name
        .clone()
        .or_else(|| data["loop"].as_str().map(str::to_string))
        .or_else(|| entered.first().map(|e| e.lp.clone()));
    let ended = data["path"].is_array() && data["state"].is_string();
    let (path, state, sub_loop, steps) = if ended {
        let path: Vec<Value> = data["path"].as_array().cloned().unwrap_or_default();
        let n = data["steps"].as_u64().unwrap_or(path.len() as u64);
        (path, data["state"].clone(), Value::Null, n)
    } else {
        let top: Vec<Value> = entered
            .iter()
            .filter(|e| e.depth == 0)
            .map(|e| json!(e.state))
            .collect();
        let last = entered.last();
        let sub = last
            .filter(|e| e.depth > 0)
            .map_or(Value::Null, |e| json!(e.lp));
        let steps = top.len() as u64;
        (
            top,
            last.map_or(Value::Null, |e| json!(e.state)),
            sub,
            steps,
        )
    };
    Some(json!({
        "name": name, "file": file, "state": state, "sub_loop": sub_loop,
        "path": path, "path_cut": !ended && cut,
        "steps": steps, "ended": ended,
    }))
}

/// Where the journal's call `(event, seq)` stands in a loop.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Placed<'a> {
    /// The state it ran in: the last one entered before it.
    pub state: Option<&'a str>,
    /// The verdict that routed the loop out of that state after it.
    pub verdict: Option<&'a str>,
    /// Where the loop went next.
    pub then: Option<&'a str>,
}

/// Place the journal's call `(event, seq)` among a run's marks ([`entered`]).
/// Where no verdict was marked (a run older than verdict marks), the next
/// state is the next one entered, or after the last one the state the run
/// ended in, `ended_in` (a terminal state is reached, not entered).
pub fn around<'a>(
    (entered, routed): &'a Marked,
    ended_in: Option<&'a str>,
    event: i64,
    seq: i64,
) -> Placed<'a> {
    let at = entered.partition_point(|e| (e.event, e.seq) < (event, seq));
    let state = at
        .checked_sub(1)
        .and_then(|i| entered.get(i))
        .map(|e| e.state.as_str());
    let next_entered = entered.get(at);
    // The first verdict after the call, before the next state is entered.
    let verdict = routed
        .iter()
        .find(|r| (r.event, r.seq) > (event, seq))
        .filter(|r| next_entered.is_none_or(|e| (r.event, r.seq) < (e.event, e.seq)))
        .filter(|_| state.is_some());
    let then = match verdict {
        Some(r) => Some(r.next.as_str()),
        None => next_entered
            .map(|e| e.state.as_str())
            .or(ended_in.filter(|_| at > 0)),
    };
    Placed {
        state,
        verdict: verdict.map(|r| r.verdict.as_str()),
        then,
    }
}

/// The state an ended loop ended in, from [`loop_json`]'s view of it.
pub fn ended_in(the_loop: Option<&Value>) -> Option<&str> {
    the_loop
        .filter(|l| l["ended"] == true)
        .and_then(|l| l["state"].as_str())
}

/// An action's request as the command it ran, in one line: an exec's argv, a
/// script's or a prompt's text. The request is as journaled: `{"exec": [...]}`
/// (or `argv`), `{"script": "..."}`, `{"text": "..."}`, or one of those under its kind.
pub fn command(request: &Value) -> String {
    if let Some(m) = request.as_object()
        && m.len() == 1
        && let Some((kind, inner)) = m.iter().next()
        && inner.is_object()
    {
        return format!("{kind} {}", command(inner));
    }
    if let Some(argv) = request["argv"]
        .as_array()
        .or_else(|| request["exec"].as_array())
    {
        let words: Vec<String> = argv
            .iter()
            .map(|a| a.as_str().unwrap_or_default().to_string())
            .collect();
        return crate::exec::grants::show_argv(&words);
    }
    for k in ["script", "source", "text", "prompt"] {
        if let Some(s) = request[k].as_str() {
            return s.to_string();
        }
    }
    match request {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        v => v.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marks(lines: &[(i64, i64, &str)]) -> Marked {
        entered(
            &lines
                .iter()
                .map(|(e, s, t)| (*e, *s, t.to_string()))
                .collect::<Vec<_>>(),
        )
    }

    #[test]
    fn progress_lines_are_read_back_as_states() {
        let m = |depth, lp: &str, state: &str, routed: Option<(&str, &str)>| Mark {
            depth,
            lp: lp.into(),
            state: state.into(),
            routed: routed.map(|(v, n)| (v.into(), n.into())),
        };
        assert_eq!(
            parse_mark("fix-tests · check · step 1/6"),
            Some(m(0, "fix-tests", "check", None))
        );
        assert_eq!(
            parse_mark("    inner · a · b · step 12/500"),
            Some(m(2, "inner · a", "b", None))
        );
        assert_eq!(
            parse_mark("l · check · step 1/6 · no (exit 1 · step 2/3) -> fix"),
            Some(m(0, "l", "check", Some(("no (exit 1 · step 2/3)", "fix"))))
        );
        for other in [
            "working",
            "a · b · step x/2",
            "a · step 1/2",
            "a · b · step 1/2 · no arrow",
            "",
        ] {
            assert_eq!(parse_mark(other), None, "{other}");
        }
    }

    #[test]
    fn a_running_loop_shows_its_path_and_state_and_an_ended_one_its_outcome() {
        let options = RunOptions {
            loop_name: Some("fix-tests".into()),
            ..Default::default()
        };
        let input = r#"{"path": "loops/fix.yaml", "yaml": "name: fix-tests"}"#;
        let e = marks(&[
            (1, 1, "fix-tests · check · step 1/6"),
            (1, 3, "fix-tests · fix · step 2/6"),
            (1, 5, "  sub · inner · step 1/3"),
        ]);
        let v = loop_json("builtin:fsm", &options, input, None, &e.0, false).unwrap();
        assert_eq!(v["name"], "fix-tests");
        assert_eq!(v["file"], "loops/fix.yaml");
        assert_eq!(v["path"], json!(["check", "fix"]));
        assert_eq!(
            (&v["state"], &v["sub_loop"]),
            (&json!("inner"), &json!("sub"))
        );
        assert_eq!(v["ended"], false);
        let outcome = r#"{"summary": "done", "data": {"loop": "fix-tests", "state": "done", "steps": 3, "path": ["check", "fix", "verify", "done"]}}"#;
        let v = loop_json("builtin:fsm", &options, input, Some(outcome), &e.0, false).unwrap();
        assert_eq!(v["path"], json!(["check", "fix", "verify", "done"]));
        assert_eq!(
            (&v["state"], v["steps"].as_u64()),
            (&json!("done"), Some(3))
        );
        // A run of no loop has none; an older loop run is named by its outcome.
        assert!(
            loop_json(
                "builtin:ralph",
                &RunOptions::default(),
                "{}",
                None,
                &[],
                false
            )
            .is_none()
        );
        let v = loop_json(
            "builtin:fsm",
            &RunOptions::default(),
            input,
            Some(outcome),
            &[],
            false,
        )
        .unwrap();
        assert_eq!(v["name"], "fix-tests");
    }

    #[test]
    fn an_action_is_placed_in_the_state_it_ran_in() {
        let p = |state, verdict, then| Placed {
            state,
            verdict,
            then,
        };
        // Marks without verdicts (a run from before them): the next state entered.
        let e = marks(&[(1, 1, "l · check · step 1/6"), (1, 3, "l · fix · step 2/6")]);
        assert_eq!(around(&e, None, 1, 2), p(Some("check"), None, Some("fix")));
        assert_eq!(around(&e, None, 1, 4), p(Some("fix"), None, None));
        assert_eq!(
            around(&e, Some("done"), 1, 4),
            p(Some("fix"), None, Some("done"))
        );
        assert_eq!(around(&e, None, 0, 9), p(None, None, Some("check")));
        // With them: each action's verdict, and where it sent the loop.
        let e = marks(&[
            (1, 1, "l · check · step 1/6"),
            (1, 3, "l · check · step 1/6 · no (exit 1) -> fix"),
            (1, 4, "l · fix · step 2/6"),
            (1, 6, "l · fix · step 2/6 · next -> done"),
        ]);
        assert_eq!(
            around(&e, None, 1, 2),
            p(Some("check"), Some("no (exit 1)"), Some("fix"))
        );
        assert_eq!(
            around(&e, None, 1, 5),
            p(Some("fix"), Some("next"), Some("done"))
        );
        assert_eq!(
            command(&json!({"script": "echo hi; exit 1", "cwd": null})),
            "echo hi; exit 1"
        );
        assert_eq!(command(&json!({"argv": ["echo", "a b"]})), "echo 'a b'");
        assert_eq!(
            command(&json!({"exec": ["cat", "x.txt"], "cwd": null, "env": []})),
            "cat x.txt"
        );
    }
}
