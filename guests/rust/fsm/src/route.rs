//! Where a verdict leads, as little-loops' `_route` decides (a `next`
//! state is not evaluated, so never gets here):
//! - with a `route:` table, the table alone: the verdict's own entry (keys
//!   are literal: `error`, `success`, `pass` name those verdicts), else `_`
//!   (its default, taken by `error` too), else for `error` or `no` the
//!   table's `_error` (`executor.py` `_route`);
//! - without one, the shorthands: `on_yes`, `on_no` (a `no` with no `on_no`
//!   takes `on_error`), `on_error`, any `on_VERDICT` (`on_success`/
//!   `on_failure` are `on_yes`/`on_no`);
//! - nothing: the loop ends, naming the verdict and the routes it has
//!   (little-loops' "No valid transition").
//!
//! `$current` stays in the state.

use crate::spec::{CURRENT, Routes, State, Target};

/// The state `target` names, `$current` being `state` itself.
pub fn resolve(state: &State, target: &Target) -> String {
    if target.state == CURRENT {
        state.name.clone()
    } else {
        target.state.clone()
    }
}

/// Where `target`, when there is one, leads from `state`.
pub fn to(state: &State, target: Option<&Target>) -> Option<String> {
    target.map(|t| resolve(state, t))
}

/// Where the state's error route (`on_error`, or a table's `_error`) leads.
pub fn on_error(state: &State) -> Option<String> {
    to(state, state.routes.error.as_ref())
}

/// The next state's name, or why there is none.
pub fn route(state: &State, verdict: &str) -> Result<String, String> {
    let r: &Routes = &state.routes;
    let fallback = || {
        if verdict == "error" || verdict == "no" {
            r.error.as_ref()
        } else {
            None
        }
    };
    let target = if r.table {
        r.by_verdict
            .get(verdict)
            .or(r.default.as_ref())
            .or_else(fallback)
    } else if verdict == "error" {
        r.error.as_ref()
    } else {
        r.by_verdict.get(verdict).or_else(fallback)
    };
    match target {
        Some(t) => Ok(resolve(state, t)),
        None => {
            let mut have: Vec<String> = r.by_verdict.keys().cloned().collect();
            if r.error.is_some() {
                have.push(if r.table { "_error" } else { "error" }.into());
            }
            let have = if have.is_empty() {
                "none".to_string()
            } else {
                have.join(", ")
            };
            Err(format!(
                "state `{}` has no route for verdict `{verdict}` (it routes: {have}); add `on_{verdict}` or `_` in a `route` table",
                state.name
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::problem::Problems;

    fn state(yaml: &str) -> State {
        let text = format!(
            "name: t\ninitial: s\nstates:\n  s:\n{}\n",
            yaml.lines()
                .map(|l| format!("    {l}"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        let node = crate::yaml::parse(&text).unwrap();
        let mut p = Problems::new("t.yaml");
        let lp = crate::spec::read_loop(&node, &mut p).unwrap();
        lp.states.into_iter().next().unwrap()
    }

    #[test]
    fn every_routing_rule() {
        let cases: &[(&str, &str, Result<&str, &str>)] = &[
            // Shorthands and their aliases.
            ("action: x\non_yes: a\non_no: b", "yes", Ok("a")),
            ("action: x\non_success: a\non_failure: b", "yes", Ok("a")),
            ("action: x\non_success: a\non_failure: b", "no", Ok("b")),
            ("action: x\non_yes: a\non_error: e", "error", Ok("e")),
            ("action: x\non_yes: a\non_partial: p", "partial", Ok("p")),
            ("action: x\non_yes: a\non_blocked: k", "blocked", Ok("k")),
            ("action: x\non_yes: a\non_stall: st", "stall", Ok("st")),
            // A `no` with no route of its own falls to on_error.
            ("action: x\non_yes: a\non_error: e", "no", Ok("e")),
            // Route tables, with `_` and `_error`.
            ("action: x\nroute:\n  yes: a\n  _: d", "progress", Ok("d")),
            // Table keys are literal verdicts: `success`, `pass`, `error`.
            (
                "action: x\nroute:\n  success: a\n  _error: e",
                "success",
                Ok("a"),
            ),
            (
                "action: x\nroute:\n  success: a\n  pass: b",
                "yes",
                Err(
                    "state `s` has no route for verdict `yes` (it routes: pass, success); add `on_yes` or `_` in a `route` table",
                ),
            ),
            (
                "action: x\nroute:\n  error: a\n  _error: e",
                "error",
                Ok("a"),
            ),
            // With `_` and `_error`, `error` takes `_` (little-loops' order).
            (
                "action: x\nroute:\n  yes: a\n  _error: e\n  _: d",
                "error",
                Ok("d"),
            ),
            // `on_pass` is the verdict `pass`, not `yes`.
            ("action: x\non_pass: a\non_no: b", "pass", Ok("a")),
            ("action: x\nroute:\n  yes: a\n  _error: e", "error", Ok("e")),
            // In a table, `_` comes before `_error` (little-loops' order).
            (
                "action: x\nroute:\n  yes: a\n  _error: e\n  _: d",
                "no",
                Ok("d"),
            ),
            ("action: x\nroute:\n  yes: a\n  _error: e", "no", Ok("e")),
            // A table ignores `on_*` beside it.
            (
                "action: x\nroute:\n  yes: a\non_error: e",
                "error",
                Err(
                    "state `s` has no route for verdict `error` (it routes: yes); add `on_error` or `_` in a `route` table",
                ),
            ),
            (
                "action: x\nroute:\n  target: done\n  progress: s\n  stall: give-up",
                "stall",
                Ok("give-up"),
            ),
            // $current stays.
            ("action: x\non_yes: a\non_no: $current", "no", Ok("s")),
            // Nowhere to go.
            (
                "action: x\non_yes: a",
                "no",
                Err(
                    "state `s` has no route for verdict `no` (it routes: yes); add `on_no` or `_` in a `route` table",
                ),
            ),
            (
                "action: x\non_yes: a\non_no: b",
                "error",
                Err(
                    "state `s` has no route for verdict `error` (it routes: no, yes); add `on_error` or `_` in a `route` table",
                ),
            ),
        ];
        for (yaml, verdict, want) in cases {
            let got = route(&state(yaml), verdict);
            assert_eq!(
                got.as_deref().map_err(String::as_str),
                *want,
                "{yaml} / {verdict}"
            );
        }
    }
}
