//! `import:`: files whose `states` and `context` join the loop.

use crate::problem::Problems;
use crate::yaml::{Node, Value};

use super::fields::Fields;
use super::known::IGNORED_LOOP_FIELDS;
use super::states::{State, read_states};
use super::top::read_context;

/// What an imported file contributes.
#[derive(Debug, Default)]
pub struct Imported {
    pub states: Vec<State>,
    pub context: serde_json::Map<String, serde_json::Value>,
}

/// An imported file: only `states`, `context` and `import` (a name is allowed).
pub fn read_import(root: &Node, p: &mut Problems) -> Imported {
    let Some(entries) = root.as_map() else {
        p.at(
            root.line,
            format!(
                "an imported file must be a mapping with `states` and/or `context`, not {}",
                root.kind()
            ),
        );
        return Default::default();
    };
    let mut f = Fields::new(entries);
    let _ = f.string(p, "name", "");
    let _ = f.string(p, "description", "");
    let states = f
        .take("states")
        .map(|n| read_states(n, p))
        .unwrap_or_default();
    let context = read_context(f.take("context"), p);
    let _ = f.take("import"); // read by the loader
    let _ = f.take("fragments"); // collected by the loader
    for (key, _) in f.unused() {
        if IGNORED_LOOP_FIELDS.contains(&key.name.as_str()) {
            continue;
        }
        p.at(key.line, format!("`{}` has no effect in an imported file: only `fragments`, `states`, `context` and `import` are merged", key.name));
    }
    Imported { states, context }
}

pub fn read_imports(node: Option<&Node>, p: &mut Problems) -> Vec<(String, u32)> {
    let Some(node) = node else { return Vec::new() };
    let items: Vec<&Node> = match &node.value {
        Value::Str(_) => vec![node],
        Value::Seq(items) => items.iter().collect(),
        _ => {
            p.at(
                node.line,
                format!(
                    "`import` must be a file name or a list of them, not {}",
                    node.kind()
                ),
            );
            return Vec::new();
        }
    };
    items
        .into_iter()
        .filter_map(|n| match n.as_str() {
            Some(s) => Some((s.to_string(), n.line)),
            None => {
                p.at(
                    n.line,
                    format!("an `import` entry must be a file name, not {}", n.kind()),
                );
                None
            }
        })
        .collect()
}
