//! Reading one YAML mapping's fields by type, remembering which were used,
//! so that whatever no reader took is named: noted, refused or unknown.

use crate::problem::Problems;
use crate::yaml::{Key, Node, Value};

use super::Target;
use super::evaluators::Number;
use super::known::FieldSets;

/// Reads one mapping's fields, remembering which were used.
pub(super) struct Fields<'a> {
    pub(super) entries: &'a [(Key, Node)],
    used: Vec<bool>,
}

impl<'a> Fields<'a> {
    pub(super) fn new(entries: &'a [(Key, Node)]) -> Fields<'a> {
        Fields {
            entries,
            used: vec![false; entries.len()],
        }
    }

    pub(super) fn take(&mut self, name: &str) -> Option<&'a Node> {
        let i = self.entries.iter().position(|(k, _)| k.name == name)?;
        self.used[i] = true;
        Some(&self.entries[i].1)
    }

    pub(super) fn unused(&self) -> impl Iterator<Item = &'a (Key, Node)> + '_ {
        self.entries
            .iter()
            .zip(&self.used)
            .filter(|(_, u)| !**u)
            .map(|(e, _)| e)
    }

    pub(super) fn string(&mut self, p: &mut Problems, name: &str, what: &str) -> Option<String> {
        let node = self.take(name)?;
        match &node.value {
            Value::Str(s) => Some(s.clone()),
            // Numbers and booleans written bare are still text here (`action: true`).
            Value::Int(i) => Some(i.to_string()),
            Value::BigInt(d) => Some(d.clone()),
            Value::Float(f) => Some(f.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            _ => {
                p.at(
                    node.line,
                    format!("{what}`{name}` must be text, not {}", node.kind()),
                );
                None
            }
        }
    }

    pub(super) fn target(&mut self, p: &mut Problems, name: &str, what: &str) -> Option<Target> {
        let node = self.take(name)?;
        match node.as_str() {
            Some(s) => Some(Target {
                state: s.to_string(),
                line: node.line,
            }),
            None => {
                p.at(
                    node.line,
                    format!("{what}`{name}` must name a state, not {}", node.kind()),
                );
                None
            }
        }
    }

    pub(super) fn uint(&mut self, p: &mut Problems, name: &str, what: &str) -> Option<u64> {
        let node = self.take(name)?;
        match node.value {
            Value::Int(i) if i >= 0 => Some(i as u64),
            _ => {
                p.at(
                    node.line,
                    format!(
                        "{what}`{name}` must be a whole number of 0 or more, not {}",
                        describe(node)
                    ),
                );
                None
            }
        }
    }

    pub(super) fn positive(&mut self, p: &mut Problems, name: &str, what: &str) -> Option<u64> {
        let line = value_line(self.entries, name)?;
        match self.uint(p, name, what) {
            Some(0) => {
                p.at(line, format!("{what}`{name}` must be greater than 0"));
                None
            }
            other => other,
        }
    }

    pub(super) fn boolean(&mut self, p: &mut Problems, name: &str, what: &str) -> Option<bool> {
        let node = self.take(name)?;
        match node.value {
            Value::Bool(b) => Some(b),
            _ => {
                p.at(
                    node.line,
                    format!(
                        "{what}`{name}` must be true or false, not {}",
                        describe(node)
                    ),
                );
                None
            }
        }
    }

    pub(super) fn number(&mut self, p: &mut Problems, name: &str, what: &str) -> Option<Number> {
        let node = self.take(name)?;
        match &node.value {
            Value::Int(i) => Some(Number::Value(*i as f64)),
            Value::BigInt(d) => d.parse().ok().map(Number::Value),
            Value::Float(f) => Some(Number::Value(*f)),
            // little-loops reads text as a number when the state runs (`"3"`, `${context.n}`).
            Value::Str(s) if s.contains("${") || s.trim().parse::<f64>().is_ok() => {
                Some(Number::Expr(s.clone()))
            }
            _ => {
                p.at(
                    node.line,
                    format!(
                        "{what}`{name}` must be a number or a `${{...}}` reference, not {}",
                        describe(node)
                    ),
                );
                None
            }
        }
    }
}

/// The line of `name`'s value in a mapping's entries, when the key is there.
pub(super) fn value_line(entries: &[(Key, Node)], name: &str) -> Option<u32> {
    entries
        .iter()
        .find(|(k, _)| k.name == name)
        .map(|(_, v)| v.line)
}

/// The line of the key `name` itself.
pub(super) fn key_line(entries: &[(Key, Node)], name: &str) -> Option<u32> {
    entries
        .iter()
        .find(|(k, _)| k.name == name)
        .map(|(k, _)| k.line)
}

fn describe(node: &Node) -> String {
    match &node.value {
        Value::Str(s) => format!("`{s}`"),
        Value::Int(i) => i.to_string(),
        Value::BigInt(d) => d.clone(),
        Value::Float(f) => f.to_string(),
        Value::Bool(b) => b.to_string(),
        _ => node.kind().to_string(),
    }
}

/// A field no reader took: ignored, noted, refused with its reason, or
/// unknown, which little-loops ignores (warning at the top level) and so
/// does loopbox, with a note naming the fields it knows.
pub(super) fn leftover(p: &mut Problems, key: &Key, what: &str, sets: &FieldSets) {
    let name = key.name.as_str();
    if sets.ignored.contains(&name) {
        return;
    }
    if let Some((_, note)) = sets.noted.iter().find(|(n, _)| *n == name) {
        p.note(
            key.line,
            format!("{what}`{name}` is read and not acted on: {note}"),
        );
    } else if sets.refused.iter().any(|(n, _)| *n == name) {
        unknown(p, key, what, sets.refused, sets.known);
    } else {
        p.note(
            key.line,
            format!(
                "{what}unknown field `{name}` is ignored (fields: {})",
                sets.known.join(", ")
            ),
        );
    }
}

pub(super) fn unknown(
    p: &mut Problems,
    key: &Key,
    what: &str,
    refused: &[(&str, &str)],
    supported: &[&str],
) {
    match refused.iter().find(|(name, _)| *name == key.name) {
        Some((_, why)) => p.at(
            key.line,
            format!("{what}`{}` is not supported by loopbox: {why}", key.name),
        ),
        None => p.at(
            key.line,
            format!(
                "{what}unknown field `{}` (fields: {})",
                key.name,
                supported.join(", ")
            ),
        ),
    }
}
