//! Where a verdict leads, first match wins:
//! 1. `next` (the state was not evaluated), unless the host refused the
//!    action and the state has an error route;
//! 2. the verdict's own route: `route: {VERDICT: ...}` or `on_VERDICT`
//!    (`success`/`failure` are `yes`/`no`; `error` is `_error`/`on_error`);
//! 3. a `no` with no route of its own goes to the error route;
//! 4. `_`, the table's default, for any other verdict;
//! 5. nothing: the loop fails, naming the verdict and the routes it has.
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

/// The next state's name, or why there is none.
pub fn route(state: &State, verdict: &str) -> Result<String, String> {
    let r: &Routes = &state.routes;
    let next = if verdict == "error" && r.error.is_some() {
        None
    } else {
        r.next.as_ref()
    };
    let target = next
        .or_else(|| {
            if verdict == "error" {
                r.error.as_ref()
            } else {
                r.by_verdict.get(verdict)
            }
        })
        .or_else(|| {
            if verdict == "no" {
                r.error.as_ref()
            } else {
                None
            }
        })
        .or(r.default.as_ref());
    match target {
        Some(t) => Ok(resolve(state, t)),
        None => {
            let mut have: Vec<String> = r.by_verdict.keys().cloned().collect();
            if r.error.is_some() {
                have.push("error".into());
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
            // next wins over everything, and is taken without a verdict.
            ("action: x\nnext: b", "no", Ok("b")),
            ("action: x\nnext: b\non_error: e", "error", Ok("e")),
            ("action: x\nnext: b", "error", Ok("b")),
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
            (
                "action: x\nroute:\n  success: a\n  _error: e",
                "yes",
                Ok("a"),
            ),
            ("action: x\nroute:\n  yes: a\n  _error: e", "error", Ok("e")),
            (
                "action: x\nroute:\n  yes: a\n  _error: e\n  _: d",
                "no",
                Ok("e"),
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
