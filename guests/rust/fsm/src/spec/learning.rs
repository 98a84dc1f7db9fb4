//! `type: learning` with a `learning:` block: the targets a state proves
//! against little-loops' learning-test registry before the loop goes on
//! (`fsm/schema.py` `LearningConfig`; the checks of
//! `fsm/validation/structural_rules.py`).

use crate::problem::Problems;
use crate::yaml::{Node, Value};

use super::fields::{Fields, unknown};
use super::routes::Routes;

/// What a learning state proves, and how often it asks the agent to.
#[derive(Debug, Clone, PartialEq)]
pub struct Learning {
    /// `targets`, as written (not interpolated).
    pub targets: Vec<String>,
    /// `targets_csv`: interpolated and split on `,` when the state runs; wins
    /// over `targets`.
    pub targets_csv: Option<String>,
    /// `/ll:explore-api` calls per target before the state is blocked (default 2).
    pub max_retries: u32,
    /// `max_retries_expr`: interpolated to a whole number; wins over `max_retries`.
    pub max_retries_expr: Option<String>,
    pub line: u32,
}

const FIELDS: &[&str] = &["targets", "targets_csv", "max_retries", "max_retries_expr"];

/// The `learning:` mapping.
pub(super) fn read_learning(node: &Node, what: &str, p: &mut Problems) -> Option<Learning> {
    let Some(entries) = node.as_map() else {
        p.at(
            node.line,
            format!("{what}`learning` must be a mapping of `targets` or `targets_csv`, and `max_retries`"),
        );
        return None;
    };
    let w = format!("{what}learning: ");
    let mut f = Fields::new(entries);
    let targets = match f.take("targets") {
        None => Vec::new(),
        Some(n) => match &n.value {
            Value::Null => Vec::new(),
            Value::Seq(items) if items.iter().all(|i| i.as_str().is_some()) => items
                .iter()
                .filter_map(|i| i.as_str().map(str::to_string))
                .collect(),
            _ => {
                p.at(n.line, format!("{w}`targets` must be a list of text"));
                Vec::new()
            }
        },
    };
    // `data.get(...) or None`: empty text is no text.
    let targets_csv = f.string(p, "targets_csv", &w).filter(|t| !t.is_empty());
    let max_retries = f
        .uint(p, "max_retries", &w)
        .map_or(2, |n| n.min(u64::from(u32::MAX)) as u32);
    let max_retries_expr = f
        .string(p, "max_retries_expr", &w)
        .filter(|t| !t.is_empty());
    for (k, _) in f.unused() {
        unknown(p, k, &w, &[], FIELDS);
    }
    if targets.is_empty() && targets_csv.is_none() {
        p.at(
            node.line,
            format!("{w}a learning state needs non-empty `targets` or `targets_csv` (as little-loops requires)"),
        );
    }
    Some(Learning {
        targets,
        targets_csv,
        max_retries,
        max_retries_expr,
        line: node.line,
    })
}

/// What little-loops requires of a learning state's routes, and what it
/// leaves unused beside them.
pub(super) fn check_learning(
    routes: &Routes,
    has_action: bool,
    line: u32,
    what: &str,
    p: &mut Problems,
) {
    if routes.table {
        p.at(
            line,
            format!("{what}a learning state routes with `on_yes` and `on_blocked` (or `on_no`), as in little-loops, which never reads its `route` table; write those instead"),
        );
        return;
    }
    if !routes.by_verdict.contains_key("yes") {
        p.at(
            line,
            format!(
                "{what}a learning state needs `on_yes`: where to go when every target is proven"
            ),
        );
    }
    if !routes.by_verdict.contains_key("blocked") && !routes.by_verdict.contains_key("no") {
        p.at(
            line,
            format!("{what}a learning state needs `on_blocked` or `on_no`: where to go when a target is refuted or stays unproven"),
        );
    }
    if has_action || routes.next.is_some() {
        p.note(
            line,
            format!("{what}a learning state runs no action of its own and takes no `next` (as in little-loops): they are never used"),
        );
    }
}
