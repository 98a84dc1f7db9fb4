//! Static checks over a whole loop (imports merged): targets that name no
//! state, states the loop can never reach, no terminal state at all (none
//! in reach is a note, as little-loops runs such a loop to max_steps),
//! verdicts an evaluator produces that nothing routes (a note: the run ends
//! there, as in little-loops), and `${...}` references that could never
//! resolve (a `${captured.X}` no state captures is refused, as little-loops'
//! `_validate_capture_reachability` refuses it).

use std::collections::{BTreeSet, VecDeque};

use crate::interp;
use crate::problem::Problem;
use crate::spec::{Action, CURRENT, EvalKind, Loop, Number, State, Target};

/// Context values a run gets without the loop declaring them: those
/// `ll-loop run` injects, which `loopbox run` fills in the same way.
pub const INJECTED_CONTEXT: &[&str] = &[
    "run_dir",
    "input_hash",
    "max_steps",
    "max_iterations",
    "readiness_threshold",
    "outcome_threshold",
    "design_tokens_context",
];

/// Problems that stop the loop, and `notes` for what runs but may surprise.
pub fn check(lp: &Loop, notes: &mut Vec<Problem>) -> Vec<Problem> {
    let mut out = Vec::new();
    let names: BTreeSet<&str> = lp.states.iter().map(|s| s.name.as_str()).collect();
    let list = names.iter().copied().collect::<Vec<_>>().join(", ");
    let known = |t: &Target| names.contains(t.state.as_str());

    // With no states at all, the loader has said so; naming the initial one adds nothing.
    if !lp.initial.state.is_empty() && !lp.states.is_empty() && !known(&lp.initial) {
        out.push(at(
            &lp.files,
            lp.initial.line,
            format!(
                "initial state `{}` is not defined (states: {list})",
                lp.initial.state
            ),
        ));
    }
    if let Some(t) = lp.circuit.as_ref().and_then(|c| c.on_repeated.as_ref())
        && !known(t)
    {
        out.push(at(
            &lp.files,
            t.line,
            format!(
                "`circuit.repeated_failure.on_repeated_failure` names `{}`, which is not defined (states: {list}); `abort` ends the loop",
                t.state
            ),
        ));
    }
    if let Some(t) = &lp.on_max_steps
        && !known(t)
    {
        out.push(at(
            &lp.files,
            t.line,
            format!(
                "`on_max_steps` names `{}`, which is not defined (states: {list})",
                t.state
            ),
        ));
    }
    // A sub-loop state given `with:` or `context_passthrough` keeps the
    // child's captures under its own name.
    let captures: BTreeSet<&str> = lp
        .states
        .iter()
        .filter_map(|s| s.capture.as_deref())
        .chain(
            lp.states
                .iter()
                .filter(|s| {
                    s.sub
                        .as_ref()
                        .is_some_and(|l| l.with.is_some() || l.passthrough)
                })
                .map(|s| s.name.as_str()),
        )
        // A human_approval state keeps its answer under its own name
        // (little-loops' `_validate_capture_reachability`, FEAT-1794).
        .chain(
            lp.states
                .iter()
                .filter(|s| matches!(s.action, Some(Action::HumanApproval(_))))
                .map(|s| s.name.as_str()),
        )
        .collect();
    let has_sub = lp.states.iter().any(|s| s.sub.is_some());
    for s in &lp.states {
        for t in s
            .routes
            .targets()
            .chain(s.on_retry_exhausted.iter())
            .chain(s.on_throttle_hard.iter())
            .chain(s.on_maintain.iter())
        {
            if t.state != CURRENT && !known(t) {
                out.push(at(
                    &lp.files,
                    t.line,
                    format!(
                        "state `{}`: routes to `{}`, which is not defined (states: {list})",
                        s.name, t.state
                    ),
                ));
            }
        }
        unrouted_verdicts(lp, s, notes);
        unwatched_idle(lp, s, notes);
        if matches!(s.action, Some(Action::HumanApproval(_))) {
            notes.push(at(
                &lp.files,
                s.action_line,
                format!(
                    "state `{}`: `action_type: human_approval` asks a person: at the terminal, else the run waits for `loopbox runs approve|deny|answer` or the server's API (`[confirm] unattended = \"decline\"`: the `timeout` route at once, as little-loops without an operator); an answer after the state's `timeout` routes `timeout`, but a waiting run does not wake by itself at that deadline",
                    s.name
                ),
            ));
        }
        references(lp, &captures, has_sub, s, &mut out, notes);
    }
    if !known(&lp.initial) {
        return out;
    }

    // Reachability from `initial`; on_max_steps is reachable from anywhere.
    let mut reached = BTreeSet::from([lp.initial.state.as_str()]);
    let mut queue = VecDeque::from([lp.initial.state.as_str()]);
    // By name: a search per step would make a loop of many states quadratic.
    let mut by_name = std::collections::BTreeMap::new();
    for s in &lp.states {
        by_name.entry(s.name.as_str()).or_insert(s);
    }
    if let Some(t) = &lp.on_max_steps
        && reached.insert(t.state.as_str())
    {
        queue.push_back(t.state.as_str());
    }
    while let Some(name) = queue.pop_front() {
        let Some(s) = by_name.get(name) else {
            continue;
        };
        for t in s
            .routes
            .targets()
            .chain(s.on_retry_exhausted.iter())
            .chain(s.on_throttle_hard.iter())
            .chain(s.on_maintain.iter().filter(|_| lp.maintain))
            .chain(lp.circuit.iter().filter_map(|c| c.on_repeated.as_ref()))
        {
            if names.contains(t.state.as_str()) && reached.insert(t.state.as_str()) {
                queue.push_back(t.state.as_str());
            }
        }
    }
    // Imported files are libraries of states: only the loop's own are
    // looked at. An unreachable state runs never; little-loops accepts it.
    for s in lp.states.iter().filter(|s| s.file == lp.file) {
        if !reached.contains(s.name.as_str()) {
            notes.push(at(
                &lp.files,
                s.line,
                format!(
                    "state `{}` is unreachable: no route from `{}` leads to it",
                    s.name, lp.initial.state
                ),
            ));
        }
    }
    // little-loops refuses a loop with no terminal state
    // (`structural_rules.py`), and runs one whose terminal states are out
    // of reach until max_steps.
    if !lp.states.iter().any(|s| s.terminal) {
        out.push(at(
            &lp.files,
            lp.initial.line,
            "no terminal state defined: at least one state must have `terminal: true`".to_string(),
        ));
    } else if !lp
        .states
        .iter()
        .any(|s| s.terminal && reached.contains(s.name.as_str()))
    {
        notes.push(at(
            &lp.files,
            lp.initial.line,
            format!("no terminal state can be reached from `{}`: the loop can only stop at max_steps (or `on_max_steps`)", lp.initial.state),
        ));
    }
    out
}

fn at(files: &[String], line: u32, message: String) -> Problem {
    Problem::at(files, line, message)
}

/// Verdicts a deterministic evaluator always may produce and nothing
/// routes: the run ends there ("no valid transition", as little-loops'
/// executor ends it), so `validate` notes them.
fn unrouted_verdicts(lp: &Loop, s: &State, notes: &mut Vec<Problem>) {
    if s.terminal || s.routes.next.is_some() || s.routes.default.is_some() || s.evaluate_invalid {
        return;
    }
    let kind = match (&s.evaluate, &s.action) {
        (Some(e), _) => &e.kind,
        (None, Some(Action::Mcp { .. })) => &EvalKind::McpResult,
        // Its verdicts are the person's (see `unanswered` below).
        (None, Some(Action::HumanApproval(_))) => return,
        (None, Some(a)) if !a.is_prompt() => &EvalKind::ExitCode {
            abstain_on_exit_3: false,
        },
        _ => return,
    };
    let verdicts: &[&str] = match kind {
        // Its verdict is whatever the output says.
        EvalKind::Classify { .. } => return,
        EvalKind::McpResult => &["success", "tool_error", "not_found", "timeout"],
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
            notes.push(at(
                &lp.files,
                s.line,
                format!("state `{}`: verdict `{v}` of `{}` goes nowhere: the run ends there (no valid transition); add {hint}, or `_` in a `route` table", s.name, kind.name()),
            ));
        }
    }
}

/// `idle_timeout` on a state whose action loopbox does not watch for
/// silence: little-loops ends a silent prompt too; here the action runs to
/// its `timeout` (see [`crate::idle`]), so `validate` says so.
fn unwatched_idle(lp: &Loop, s: &State, notes: &mut Vec<Problem>) {
    let watched = matches!(s.action, None | Some(Action::Shell(_)));
    if watched || s.idle_timeout_s.unwrap_or(0) == 0 {
        return;
    }
    notes.push(at(
        &lp.files,
        s.action_line,
        format!(
            "state `{}`: `idle_timeout` ends shell actions only in loopbox: this action runs until its `timeout` (give one, or make the state a shell action)",
            s.name
        ),
    ));
}

/// Each `${env.NAME}` of the loop's states but `PWD`, with its tagged line
/// and state: the host refuses those its config does not pass to commands.
pub fn env_refs(lp: &Loop) -> Vec<(u32, String, String)> {
    let mut out = Vec::new();
    for s in &lp.states {
        for (_, template, line) in templates(s) {
            for r in interp::refs(&template).into_iter().flatten() {
                if r.path[0] == "env" && r.path[1] != "PWD" {
                    out.push((line, s.name.clone(), r.path[1].clone()));
                }
            }
        }
    }
    out
}

/// Templates in a state, with what they are for messages.
/// Templates in a state, with what they are and their line, for messages.
fn templates(s: &State) -> Vec<(&'static str, String, u32)> {
    let mut out = Vec::new();
    if let Some(t) = &s.append_to_messages {
        out.push(("append_to_messages", t.clone(), s.line));
    }
    match &s.action {
        Some(
            Action::Shell(t)
            | Action::Prompt(t)
            | Action::SlashCommand(t)
            | Action::HumanApproval(t),
        ) => out.push(("action", t.clone(), s.action_line)),
        Some(Action::Exec(argv)) => {
            out.extend(argv.iter().map(|a| ("exec", a.clone(), s.action_line)))
        }
        Some(Action::Mcp { tool, params }) => {
            out.push(("action", tool.clone(), s.action_line));
            for v in params.values() {
                strings(v, &mut |t| {
                    out.push(("params", t.to_string(), s.action_line))
                });
            }
        }
        None => {}
    }
    if let Some(sub) = &s.sub {
        out.push(("loop", sub.name.clone(), sub.line));
        for v in sub.with.iter().flat_map(|w| w.values()) {
            strings(v, &mut |t| out.push(("with", t.to_string(), sub.line)));
        }
    }
    if let Some(l) = &s.learning {
        // Each target is interpolated again in its `/ll:explore-api` prompt.
        let texts = l
            .targets
            .iter()
            .chain(&l.targets_csv)
            .chain(&l.max_retries_expr);
        out.extend(texts.map(|t| ("learning", t.clone(), l.line)));
    }
    if let Some(f) = &s.fragment {
        for v in f.bindings.values() {
            strings(v, &mut |t| out.push(("with", t.to_string(), s.line)));
        }
    }
    if let Some(e) = &s.evaluate {
        let mut add = |what, t: &String| out.push((what, t.clone(), e.line));
        e.source.iter().for_each(|t| add("evaluate.source", t));
        match &e.kind {
            EvalKind::OutputNumeric {
                target: Number::Expr(t),
                ..
            } => add("evaluate.target", t),
            EvalKind::Convergence {
                target,
                tolerance,
                previous,
                reference,
                ..
            } => {
                for n in [Some(target), Some(tolerance), reference.as_ref()]
                    .into_iter()
                    .flatten()
                {
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

/// `captures`: every capture name in the loop; `has_sub`: a state of the
/// loop runs a sub-loop.
fn references(
    lp: &Loop,
    captures: &BTreeSet<&str>,
    has_sub: bool,
    s: &State,
    out: &mut Vec<Problem>,
    notes: &mut Vec<Problem>,
) {
    for (field, template, line) in templates(s) {
        for r in interp::refs(&template) {
            let r = match r {
                Ok(r) => r,
                Err(e) => {
                    out.push(at(
                        &lp.files,
                        line,
                        format!("state `{}`: {field}: {e}", s.name),
                    ));
                    continue;
                }
            };
            // What the release stops at only when the state runs: a note.
            if let Some(why) = interp::release_refuses(&r, lp.release()) {
                notes.push(at(
                    &lp.files,
                    line,
                    format!(
                        "state `{}`: {field}: {why}; the state fails there when it runs",
                        s.name
                    ),
                ));
            }
            if r.default.is_some() || r.optional {
                continue;
            }
            // `${messages}` alone has no key.
            let Some(key) = r.path.get(1).map(String::as_str) else {
                continue;
            };
            if r.path[0] == "context"
                && !lp.context.contains_key(key)
                && !INJECTED_CONTEXT.contains(&key)
                && lp.input_key != key
            {
                let given = if lp.required_inputs.iter().any(|k| k == key) {
                    "a required input: `loopbox run` refuses to start without it"
                } else if lp.parameters.iter().any(|p| p.name == key) {
                    "a parameter: a parent loop's `with:` binds it"
                } else {
                    "not declared: it must come from --input, or the run stops at this state"
                };
                let note = at(
                    &lp.files,
                    line,
                    format!("state `{}`: {field}: `{}` is {given}", s.name, r.raw),
                );
                if !notes.contains(&note) {
                    notes.push(note);
                }
                continue;
            }
            let param_known = |name: &str| {
                s.fragment.as_ref().is_some_and(|f| {
                    f.bindings.contains_key(name) || f.parameters.iter().any(|p| p.name == name)
                })
            };
            let problem = match r.path[0].as_str() {
                "env" => None,
                "param" if !param_known(key) => Some(format!(
                    "`{}`: `param` is what a fragment's `with:` binds, and this state binds no `{key}`",
                    r.raw
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
                "state" if !matches!(r.path[1].as_str(), "name" | "iteration") => {
                    Some(format!("`{}`: `state` has `name` and `iteration`", r.raw))
                }
                "loop"
                    if !matches!(
                        key,
                        "name" | "step" | "started_at" | "elapsed_ms" | "elapsed"
                    ) =>
                {
                    Some(format!(
                        "`{}`: `loop` has name, step, started_at, elapsed_ms and elapsed",
                        r.raw
                    ))
                }
                "prev"
                    if !matches!(
                        r.path[1].as_str(),
                        "output"
                            | "exit_code"
                            | "stderr"
                            | "state"
                            | "result"
                            | "duration_ms"
                            | "timeout_kind"
                    ) =>
                {
                    Some(format!(
                        "`{}`: `prev` has output, exit_code, stderr, duration_ms, state, result and timeout_kind",
                        r.raw
                    ))
                }
                _ => None,
            };
            if let Some(message) = problem {
                let p = at(
                    &lp.files,
                    line,
                    format!("state `{}`: {field}: {message}", s.name),
                );
                // little-loops refuses, at load, an unguarded `${captured.X}`
                // in an action or `evaluate.source` when no state captures
                // `X` and the loop has no sub-loop (whose captures could
                // hold it): `_validate_capture_reachability`.
                let refused = r.path[0] == "captured"
                    && !lp.capture_reachability_ok
                    && s.sub.is_none()
                    && matches!(field, "action" | "exec" | "evaluate.source")
                    && !has_sub;
                if refused {
                    let p = at(
                        &lp.files,
                        line,
                        format!(
                            "state `{}`: {field}: {message}; add `capture: {}` to the state that produces it, or `:default=` / `?` to the reference",
                            s.name, r.path[1]
                        ),
                    );
                    if !out.contains(&p) {
                        out.push(p);
                    }
                    continue;
                }
                // little-loops finds these only when the state runs, and so
                // does loopbox: the loop stops there, naming the reference.
                if !notes.contains(&p) {
                    notes.push(p);
                }
            }
        }
    }
}

/// Every string inside a JSON value.
fn strings(v: &serde_json::Value, f: &mut dyn FnMut(&str)) {
    match v {
        serde_json::Value::String(t) => f(t),
        serde_json::Value::Array(items) => items.iter().for_each(|i| strings(i, f)),
        serde_json::Value::Object(m) => m.values().for_each(|i| strings(i, f)),
        _ => {}
    }
}
