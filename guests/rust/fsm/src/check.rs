//! Static checks over a whole loop (imports merged): targets that name no
//! state, states the loop can never reach, no terminal state in reach,
//! verdicts an evaluator produces that nothing routes, and `${...}`
//! references that could never resolve.

use std::collections::{BTreeSet, VecDeque};

use crate::interp;
use crate::problem::Problem;
use crate::spec::{Action, CURRENT, EvalKind, Loop, Number, State, Target};

pub fn check(lp: &Loop) -> Vec<Problem> {
    let mut out = Vec::new();
    let main_file = lp.file.clone();
    let names: BTreeSet<&str> = lp.states.iter().map(|s| s.name.as_str()).collect();
    let list = names.iter().copied().collect::<Vec<_>>().join(", ");
    let known = |t: &Target| names.contains(t.state.as_str());

    if !lp.initial.state.is_empty() && !known(&lp.initial) {
        out.push(at(
            &main_file,
            lp.initial.line,
            format!(
                "initial state `{}` is not defined (states: {list})",
                lp.initial.state
            ),
        ));
    }
    if let Some(t) = &lp.on_max_steps
        && !known(t)
    {
        out.push(at(
            &main_file,
            t.line,
            format!(
                "`on_max_steps` names `{}`, which is not defined (states: {list})",
                t.state
            ),
        ));
    } else if let Some(t) = &lp.on_max_steps
        && lp.states.iter().any(|s| s.name == t.state && !s.terminal)
    {
        out.push(at(&main_file, t.line, format!("`on_max_steps` must name a terminal state: the loop has no steps left to route on from `{}`", t.state)));
    }
    let captures: BTreeSet<&str> = lp
        .states
        .iter()
        .filter_map(|s| s.capture.as_deref())
        .collect();
    for s in &lp.states {
        for t in s.routes.targets().chain(s.on_retry_exhausted.iter()) {
            if t.state != CURRENT && !known(t) {
                out.push(at(
                    &s.file,
                    t.line,
                    format!(
                        "state `{}`: routes to `{}`, which is not defined (states: {list})",
                        s.name, t.state
                    ),
                ));
            }
        }
        unrouted_verdicts(s, &mut out);
        references(lp, &captures, s, &mut out);
    }
    if !known(&lp.initial) {
        return out;
    }

    // Reachability from `initial`; on_max_steps is reachable from anywhere.
    let mut reached = BTreeSet::from([lp.initial.state.as_str()]);
    let mut queue = VecDeque::from([lp.initial.state.as_str()]);
    if let Some(t) = &lp.on_max_steps
        && reached.insert(t.state.as_str())
    {
        queue.push_back(t.state.as_str());
    }
    while let Some(name) = queue.pop_front() {
        let Some(s) = lp.states.iter().find(|s| s.name == name) else {
            continue;
        };
        for t in s.routes.targets().chain(s.on_retry_exhausted.iter()) {
            if names.contains(t.state.as_str()) && reached.insert(t.state.as_str()) {
                queue.push_back(t.state.as_str());
            }
        }
    }
    // Imported files are libraries of states: only the loop's own must be reachable.
    for s in lp.states.iter().filter(|s| s.file == lp.file) {
        if !reached.contains(s.name.as_str()) {
            out.push(at(
                &s.file,
                s.line,
                format!(
                    "state `{}` is unreachable: no route from `{}` leads to it",
                    s.name, lp.initial.state
                ),
            ));
        }
    }
    if !lp
        .states
        .iter()
        .any(|s| s.terminal && reached.contains(s.name.as_str()))
    {
        out.push(at(
            &main_file,
            lp.initial.line,
            format!("no terminal state can be reached from `{}`: the loop could only stop at max_steps; add a state with `terminal: true`", lp.initial.state),
        ));
    }
    out
}

fn at(file: &str, line: u32, message: String) -> Problem {
    Problem {
        file: file.to_string(),
        line,
        message,
    }
}

/// Verdicts a deterministic evaluator always may produce must go somewhere.
fn unrouted_verdicts(s: &State, out: &mut Vec<Problem>) {
    if s.terminal || s.routes.next.is_some() || s.routes.default.is_some() || s.evaluate_invalid {
        return;
    }
    let kind = match (&s.evaluate, &s.action) {
        (Some(e), _) => &e.kind,
        (None, Some(a)) if !a.is_prompt() => &EvalKind::ExitCode,
        _ => return,
    };
    let verdicts: &[&str] = match kind {
        EvalKind::LlmStructured { .. } => &["yes"],
        EvalKind::Convergence { .. } => &["target", "progress", "stall"],
        _ => &["yes", "no"],
    };
    for v in verdicts {
        // `no` with no route of its own falls to the error route.
        let routed =
            s.routes.by_verdict.contains_key(*v) || (*v == "no" && s.routes.error.is_some());
        if !routed {
            let hint = match *v {
                "yes" => "`on_yes`".to_string(),
                "no" => "`on_no` or `on_error`".to_string(),
                other => format!("`on_{other}`"),
            };
            out.push(at(
                &s.file,
                s.line,
                format!("state `{}`: verdict `{v}` of `{}` goes nowhere; add {hint}, or `_` in a `route` table", s.name, kind.name()),
            ));
        }
    }
}

/// Templates in a state, with what they are for messages.
/// Templates in a state, with what they are and their line, for messages.
fn templates(s: &State) -> Vec<(&'static str, String, u32)> {
    let mut out = Vec::new();
    match &s.action {
        Some(Action::Shell(t) | Action::Prompt(t) | Action::SlashCommand(t)) => {
            out.push(("action", t.clone(), s.action_line))
        }
        Some(Action::Exec(argv)) => {
            out.extend(argv.iter().map(|a| ("exec", a.clone(), s.action_line)))
        }
        None => {}
    }
    if let Some(e) = &s.evaluate {
        let mut add = |what, t: &String| out.push((what, t.clone(), e.line));
        e.source.iter().for_each(|t| add("evaluate.source", t));
        match &e.kind {
            EvalKind::OutputContains { pattern, .. } => add("evaluate.pattern", pattern),
            EvalKind::OutputNumeric {
                target: Number::Expr(t),
                ..
            } => add("evaluate.target", t),
            EvalKind::Convergence {
                target,
                tolerance,
                previous,
                ..
            } => {
                for n in [target, tolerance] {
                    if let Number::Expr(t) = n {
                        add("evaluate", t);
                    }
                }
                previous.iter().for_each(|t| add("evaluate.previous", t));
            }
            EvalKind::LlmStructured {
                prompt: Some(p), ..
            } => add("evaluate.prompt", p),
            _ => {}
        }
    }
    out
}

/// `captures`: every capture name in the loop.
fn references(lp: &Loop, captures: &BTreeSet<&str>, s: &State, out: &mut Vec<Problem>) {
    for (field, template, line) in templates(s) {
        for r in interp::refs(&template) {
            let r = match r {
                Ok(r) => r,
                Err(e) => {
                    out.push(at(
                        &s.file,
                        line,
                        format!("state `{}`: {field}: {e}", s.name),
                    ));
                    continue;
                }
            };
            if r.default.is_some() || r.optional {
                continue;
            }
            let problem = match r.path[0].as_str() {
                "context" if !lp.context.contains_key(&r.path[1]) => Some(format!(
                    "`{}`: `context` has no `{}`; declare it under `context` (a run's --input can replace it)",
                    r.raw, r.path[1]
                )),
                "captured" if !captures.contains(r.path[1].as_str()) => {
                    let have = if captures.is_empty() {
                        "none".to_string()
                    } else {
                        captures.iter().copied().collect::<Vec<_>>().join(", ")
                    };
                    Some(format!(
                        "`{}`: no state captures `{}` (captures: {have})",
                        r.raw, r.path[1]
                    ))
                }
                "captured" if r.path.len() < 3 => Some(format!(
                    "`{}`: name a field, like `captured.{}.output`",
                    r.raw, r.path[1]
                )),
                "state" if !matches!(r.path[1].as_str(), "name" | "iteration") => {
                    Some(format!("`{}`: `state` has `name` and `iteration`", r.raw))
                }
                "loop" if !matches!(r.path[1].as_str(), "name" | "step") => {
                    Some(format!("`{}`: `loop` has `name` and `step`", r.raw))
                }
                "prev"
                    if !matches!(
                        r.path[1].as_str(),
                        "output" | "exit_code" | "stderr" | "state" | "result" | "duration_ms"
                    ) =>
                {
                    Some(format!(
                        "`{}`: `prev` has output, exit_code, stderr, duration_ms, state and result",
                        r.raw
                    ))
                }
                _ => None,
            };
            if let Some(message) = problem {
                out.push(at(
                    &s.file,
                    line,
                    format!("state `{}`: {field}: {message}", s.name),
                ));
            }
        }
    }
}
