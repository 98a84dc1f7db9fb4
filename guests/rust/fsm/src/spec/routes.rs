//! Where each verdict leads: `on_*` shorthands, `next`, and `route:` tables.

use std::collections::BTreeMap;

use crate::problem::Problems;
use crate::yaml::{Key, Node};

use super::Target;
use super::fields::Fields;
use super::known::REFUSED_STATE_FIELDS;

/// Where each verdict leads. `on_success` is stored as `yes`, `on_failure`
/// as `no`; route table keys are kept as written.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Routes {
    pub by_verdict: BTreeMap<String, Target>,
    /// `_` in a route table: any verdict not listed.
    pub default: Option<Target>,
    /// `_error` in a route table, or `on_error` (a table's `error:` key is
    /// in `by_verdict`, a literal verdict).
    pub error: Option<Target>,
    /// `next`: unconditional; the state is not evaluated.
    pub next: Option<Target>,
    /// A `route:` table was given: it alone decides (`on_*` beside it are ignored).
    pub table: bool,
}

impl Routes {
    pub fn targets(&self) -> impl Iterator<Item = &Target> {
        self.by_verdict
            .values()
            .chain(self.default.iter())
            .chain(self.error.iter())
            .chain(self.next.iter())
    }

    pub fn is_empty(&self) -> bool {
        self.targets().next().is_none()
    }
}

/// The verdict an `on_VERDICT` shorthand routes: `on_success` is `on_yes`
/// and `on_failure` is `on_no`, as little-loops' `StateConfig.from_dict`
/// reads them; any other shorthand, and every `route:` key (`success`,
/// `pass` and `error` included), is the literal verdict (`RouteConfig`).
pub fn shorthand_verdict(v: &str) -> String {
    match v {
        "success" => "yes".into(),
        "failure" => "no".into(),
        other => other.to_string(),
    }
}

/// Shorthand routes: on_yes / on_success, on_no / on_failure, on_error, on_<verdict>.
pub(super) fn read_shorthand_routes(
    f: &mut Fields,
    routes: &mut Routes,
    what: &str,
    p: &mut Problems,
) {
    let shorthand: Vec<Key> = f
        .unused()
        .filter(|(k, _)| k.name.starts_with("on_"))
        .map(|(k, _)| k.clone())
        .collect();
    for k in shorthand {
        if REFUSED_STATE_FIELDS.iter().any(|(n, _)| *n == k.name) {
            continue;
        }
        let Some(target) = f.target(p, &k.name, what) else {
            continue;
        };
        let verdict = shorthand_verdict(&k.name[3..]);
        if verdict.is_empty() {
            p.at(k.line, format!("{what}`on_` names no verdict"));
            continue;
        }
        if verdict == "error" {
            put_route(&mut routes.error, target, what, "on_error", p);
        } else if let Some(old) = routes.by_verdict.get(&verdict) {
            p.at(
                k.line,
                format!(
                    "{what}verdict `{verdict}` is routed twice (also on line {})",
                    old.line
                ),
            );
        } else {
            routes.by_verdict.insert(verdict, target);
        }
    }
}

fn put_route(slot: &mut Option<Target>, target: Target, what: &str, name: &str, p: &mut Problems) {
    match slot {
        Some(old) => p.at(
            target.line,
            format!("{what}`{name}` is given twice (also on line {})", old.line),
        ),
        None => *slot = Some(target),
    }
}

pub(super) fn read_route_table(node: &Node, what: &str, routes: &mut Routes, p: &mut Problems) {
    let Some(entries) = node.as_map() else {
        p.at(
            node.line,
            format!(
                "{what}`route` must map verdicts to states, not {}",
                node.kind()
            ),
        );
        return;
    };
    for (key, value) in entries {
        let Some(state) = value.as_str() else {
            p.at(
                value.line,
                format!(
                    "{what}route `{}` must name a state, not {}",
                    key.name,
                    value.kind()
                ),
            );
            continue;
        };
        let target = Target {
            state: state.to_string(),
            line: value.line,
        };
        match key.name.as_str() {
            "_" => put_route(&mut routes.default, target, what, "_", p),
            "_error" => put_route(&mut routes.error, target, what, "_error", p),
            k if k.starts_with('_') => p.at(key.line, format!("{what}route key `{k}`: only `_` (any other verdict) and `_error` start with `_`")),
            k => {
                // Literal: `error`, `success` and `pass` are verdicts of their own.
                let verdict = k.to_string();
                if let Some(old) = routes.by_verdict.get(&verdict) {
                    p.at(key.line, format!("{what}verdict `{verdict}` is routed twice (also on line {})", old.line));
                } else {
                    routes.by_verdict.insert(verdict, target);
                }
            }
        }
    }
}
