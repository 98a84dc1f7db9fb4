//! YAML text to a small tree of [`Node`]s that remember their line, so every
//! later error can say where it is. Bounded: the text's size, the nesting
//! depth, the number of values, and what aliases add (each use copies all its
//! anchor holds, which stops alias bombs: counted both in values and in bytes,
//! since one aliased string can be as large as the file) all have caps, each
//! named in the error it gives.

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

/// The longest loop file accepted.
pub const MAX_TEXT_BYTES: usize = 1 << 20;
/// Values aliases may add to one document, each use counted at the full size
/// of what it copies: `a: &a [x, x]` then `b: [*a, *a]` adds 6.
pub const MAX_NODES: usize = 100_000;
/// The text (strings and keys) one document may hold once its anchors and
/// aliases are expanded, counted as it is built so memory stays bounded:
/// 900 KB aliased a thousand times would otherwise take 900 MB. The text as
/// written is at most [`MAX_TEXT_BYTES`], so aliases may add about 15 MiB.
pub const MAX_EXPANDED_BYTES: usize = 16 << 20;
/// Values one document may hold as written (keys, scalars, lists and
/// mappings each count one). A 1 MiB loop of 50,000 states holds about
/// 300,000; [`MAX_TEXT_BYTES`] keeps a document under about a million.
pub const MAX_VALUES: usize = 1_000_000;
/// How deep mappings and sequences may nest.
pub const MAX_DEPTH: usize = 64;

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub value: Value,
    /// 1-based line where the node starts.
    pub line: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    /// An integer beyond `i64`, as its digits: Python's `int` has no bound.
    BigInt(String),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    /// Keys in document order; duplicate keys are refused at parse time.
    Map(Vec<(Key, Node)>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Key {
    pub name: String,
    pub line: u32,
}

/// A YAML error with its line.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntaxError {
    pub line: u32,
    pub message: String,
}

impl Node {
    pub fn kind(&self) -> &'static str {
        match self.value {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Int(_) | Value::BigInt(_) | Value::Float(_) => "a number",
            Value::Str(_) => "a string",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_map(&self) -> Option<&[(Key, Node)]> {
        match &self.value {
            Value::Map(m) => Some(m),
            _ => None,
        }
    }

    /// A mapping's entries, where an empty value (`name:` with nothing after it)
    /// counts as a mapping with none: a state or a parameter with no fields.
    pub fn as_fields(&self) -> Option<&[(Key, Node)]> {
        match &self.value {
            Value::Map(m) => Some(m),
            Value::Null => Some(&[]),
            _ => None,
        }
    }

    /// The value as JSON (for `context` values and `output_json` targets).
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value as J;
        match &self.value {
            Value::Null => J::Null,
            Value::Bool(b) => J::Bool(*b),
            Value::Int(i) => J::from(*i),
            // Every digit in the policy (serde_json's `arbitrary_precision`).
            Value::BigInt(d) => serde_json::from_str::<serde_json::Number>(d)
                .map(J::Number)
                .unwrap_or_else(|_| J::String(d.clone())),
            // JSON has no NaN or infinity: Python's `str()` of them.
            Value::Float(f) => serde_json::Number::from_f64(*f)
                .map(J::Number)
                .unwrap_or_else(|| J::String(crate::pyjson::Py::Float(*f).repr())),
            Value::Str(s) => J::String(s.clone()),
            Value::Seq(items) => J::Array(items.iter().map(Node::to_json).collect()),
            Value::Map(entries) => J::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.name.clone(), v.to_json()))
                    .collect(),
            ),
        }
    }
}

/// Mark every line of a tree as read from file `index` of the load (see
/// [`crate::problem::LINE_BITS`]). Index 0, the loop itself, changes nothing.
pub fn tag(node: &mut Node, index: u32) {
    if index == 0 {
        return;
    }
    let bits = index << crate::problem::LINE_BITS;
    fn walk(n: &mut Node, bits: u32) {
        n.line = crate::problem::line_of(n.line) | bits;
        match &mut n.value {
            Value::Seq(items) => items.iter_mut().for_each(|i| walk(i, bits)),
            Value::Map(entries) => entries.iter_mut().for_each(|(k, v)| {
                k.line = crate::problem::line_of(k.line) | bits;
                walk(v, bits)
            }),
            _ => {}
        }
    }
    walk(node, bits);
}

/// The value at `name` in a mapping node.
pub fn get<'a>(node: &'a Node, name: &str) -> Option<&'a Node> {
    node.as_map()?
        .iter()
        .find(|(k, _)| k.name == name)
        .map(|(_, v)| v)
}

/// Parse one YAML document. An empty text is a null node.
pub fn parse(text: &str) -> Result<Node, SyntaxError> {
    if text.len() > MAX_TEXT_BYTES {
        return Err(SyntaxError {
            line: 1,
            message: format!(
                "the file is {} bytes; a loop may be at most {MAX_TEXT_BYTES}",
                text.len()
            ),
        });
    }
    let mut builder = Builder::default();
    let mut parser = Parser::new_from_str(text);
    if let Err(e) = parser.load(&mut builder, false) {
        return Err(SyntaxError {
            line: e.marker().line() as u32,
            message: e.info().to_string(),
        });
    }
    if let Some(e) = builder.error {
        return Err(e);
    }
    Ok(builder.root.unwrap_or(Node {
        value: Value::Null,
        line: 1,
    }))
}

/// Containers being filled, innermost last.
enum Open {
    Seq {
        items: Vec<Node>,
        line: u32,
        anchor: usize,
    },
    Map {
        entries: Vec<(Key, Node)>,
        /// Each key's line, once the mapping is large enough that looking
        /// keys up one by one would make a large document quadratic.
        index: Option<std::collections::HashMap<String, u32>>,
        pending: Option<Key>,
        line: u32,
        anchor: usize,
    },
}

#[derive(Default)]
struct Builder {
    stack: Vec<Open>,
    root: Option<Node>,
    /// Each anchor's node, with its [`size`] and [`text_bytes`] so that each
    /// use is charged without walking the node again.
    anchors: Vec<(usize, Node, usize, usize)>,
    /// Values as written.
    nodes: usize,
    /// Values aliases added.
    copied: usize,
    /// Text held: as written, plus what anchors and aliases copied.
    bytes: usize,
    error: Option<SyntaxError>,
}

impl Builder {
    fn fail(&mut self, line: u32, message: String) {
        if self.error.is_none() {
            self.error = Some(SyntaxError { line, message });
        }
    }

    /// Count one value as written.
    fn count(&mut self, line: u32) -> bool {
        self.nodes += 1;
        if self.nodes > MAX_VALUES {
            self.fail(
                line,
                format!(
                    "the document holds more than {MAX_VALUES} values (keys, scalars, lists and mappings), the most a loop file may; split it into sub-loops (`loop:`)"
                ),
            );
            return false;
        }
        true
    }

    /// Count the `n` values an alias copies.
    fn count_copied(&mut self, n: usize, line: u32) -> bool {
        self.copied += n;
        if self.copied > MAX_NODES {
            self.fail(
                line,
                format!(
                    "aliases expand to more than {MAX_NODES} values, the most they may add to a loop file (each `*name` copies all its anchor holds; are aliases nesting?)"
                ),
            );
            return false;
        }
        true
    }

    /// Charge `n` bytes of text, before they are allocated.
    fn count_bytes(&mut self, n: usize, line: u32) -> bool {
        self.bytes = self.bytes.saturating_add(n);
        if self.bytes > MAX_EXPANDED_BYTES {
            self.fail(
                line,
                format!(
                    "aliases expand this document past {} MiB (the limit for a loop file); each `*name` copies all its `&name` holds, so write a large value once instead of aliasing it",
                    MAX_EXPANDED_BYTES >> 20
                ),
            );
            return false;
        }
        true
    }

    /// Put a finished node into its parent (or make it the root).
    fn place(&mut self, node: Node, anchor: usize) {
        if anchor != 0 {
            // The anchor keeps its own copy: nested anchors copy the same text
            // once per level, so the copy is charged like an alias's.
            let bytes = text_bytes(&node);
            if !self.count_bytes(bytes, node.line) {
                return;
            }
            self.anchors
                .push((anchor, node.clone(), size(&node), bytes));
        }
        match self.stack.last_mut() {
            None => self.root = Some(node),
            Some(Open::Seq { items, .. }) => items.push(node),
            Some(Open::Map {
                entries,
                index,
                pending,
                ..
            }) => {
                match pending.take() {
                    Some(key) => entries.push((key, node)),
                    None => {
                        let name = match node.value {
                            Value::Str(s) => s,
                            Value::Int(i) => i.to_string(),
                            Value::BigInt(d) => d,
                            Value::Bool(b) => b.to_string(),
                            Value::Float(f) => f.to_string(),
                            Value::Null => "null".into(),
                            _ => {
                                let line = node.line;
                                self.fail(
                                    line,
                                    "a mapping key must be a plain value, not a list or mapping"
                                        .into(),
                                );
                                return;
                            }
                        };
                        if index.is_none() && entries.len() >= 32 {
                            *index = Some(
                                entries
                                    .iter()
                                    .map(|(k, _)| (k.name.clone(), k.line))
                                    .collect(),
                            );
                        }
                        let first = match index {
                            Some(index) => index.get(&name).copied(),
                            None => entries
                                .iter()
                                .find(|(k, _)| k.name == name)
                                .map(|(k, _)| k.line),
                        };
                        if let Some(first) = first {
                            let line = node.line;
                            self.fail(line, format!("key `{name}` appears twice in this mapping (first on line {first})"));
                            return;
                        }
                        if let Some(index) = index {
                            index.insert(name.clone(), node.line);
                        }
                        *pending = Some(Key {
                            name,
                            line: node.line,
                        });
                    }
                }
            }
        }
    }
}

/// Values in `node`: each key, scalar, list and mapping counts one.
pub fn size(node: &Node) -> usize {
    match &node.value {
        Value::Seq(items) => 1 + items.iter().map(size).sum::<usize>(),
        Value::Map(entries) => 1 + entries.iter().map(|(_, v)| 1 + size(v)).sum::<usize>(),
        _ => 1,
    }
}

/// Bytes of text in `node`: its strings and mapping keys (other scalars are
/// counted by [`size`]).
pub fn text_bytes(node: &Node) -> usize {
    match &node.value {
        Value::Str(s) => s.len(),
        Value::Seq(items) => items.iter().map(text_bytes).sum(),
        Value::Map(entries) => entries
            .iter()
            .map(|(k, v)| k.name.len() + text_bytes(v))
            .sum(),
        _ => 0,
    }
}

fn scalar(text: String, style: TScalarStyle) -> Value {
    if style != TScalarStyle::Plain {
        return Value::Str(text);
    }
    match text.as_str() {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        // PyYAML's (YAML 1.1's) spellings of infinity and NaN.
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Value::Float(f64::INFINITY);
        }
        "-.inf" | "-.Inf" | "-.INF" => return Value::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Value::Float(f64::NAN),
        _ => {}
    }
    if let Ok(i) = text.parse::<i64>() {
        return Value::Int(i);
    }
    let digits = text.strip_prefix('+').unwrap_or(&text);
    let magnitude = digits.strip_prefix('-').unwrap_or(digits);
    if !magnitude.starts_with('0')
        && !magnitude.is_empty()
        && magnitude.bytes().all(|b| b.is_ascii_digit())
    {
        return Value::BigInt(digits.to_string());
    }
    let numeric = text
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_digit() || b == b'-' || b == b'+' || b == b'.');
    if numeric
        && let Ok(f) = text.parse::<f64>()
        && f.is_finite()
    {
        return Value::Float(f);
    }
    Value::Str(text)
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, ev: Event, mark: Marker) {
        if self.error.is_some() {
            return;
        }
        let line = mark.line() as u32;
        match ev {
            Event::Scalar(text, style, anchor, tag) => {
                if !self.count(line) || !self.count_bytes(text.len(), line) {
                    return;
                }
                let value = match tag {
                    // `!!str 1` keeps the text; other tags are read as plain values.
                    Some(t) if t.suffix == "str" => Value::Str(text),
                    _ => scalar(text, style),
                };
                self.place(Node { value, line }, anchor);
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                if self.stack.len() >= MAX_DEPTH {
                    self.fail(line, format!("values nest deeper than {MAX_DEPTH} levels"));
                    return;
                }
                if !self.count(line) {
                    return;
                }
                self.stack.push(if matches!(ev, Event::SequenceStart(..)) {
                    Open::Seq {
                        items: Vec::new(),
                        line,
                        anchor,
                    }
                } else {
                    Open::Map {
                        entries: Vec::new(),
                        index: None,
                        pending: None,
                        line,
                        anchor,
                    }
                });
            }
            Event::SequenceEnd | Event::MappingEnd => match self.stack.pop() {
                Some(Open::Seq {
                    items,
                    line,
                    anchor,
                }) => self.place(
                    Node {
                        value: Value::Seq(items),
                        line,
                    },
                    anchor,
                ),
                Some(Open::Map {
                    entries,
                    line,
                    anchor,
                    ..
                }) => self.place(
                    Node {
                        value: Value::Map(entries),
                        line,
                    },
                    anchor,
                ),
                None => self.fail(line, "unbalanced end of a collection".into()),
            },
            Event::Alias(id) => {
                let Some(at) = self.anchors.iter().rposition(|(a, ..)| *a == id) else {
                    self.fail(line, "an alias refers to an unknown anchor".into());
                    return;
                };
                let (_, _, values, bytes) = self.anchors[at];
                // Charged before the copy is made, so a bomb stops at the cap.
                if !self.count_copied(values, line) || !self.count_bytes(bytes, line) {
                    return;
                }
                let node = self.anchors[at].1.clone();
                self.place(Node { line, ..node }, 0);
            }
            Event::Nothing
            | Event::StreamStart
            | Event::StreamEnd
            | Event::DocumentStart
            | Event::DocumentEnd => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_take_their_yaml_types() {
        let n = parse("a: 1\nb: 2.5\nc: true\nd: ~\ne: '1'\nf: text\ng: -3\n").unwrap();
        let m = n.as_map().unwrap();
        let kinds: Vec<_> = m
            .iter()
            .map(|(k, v)| (k.name.as_str(), v.value.clone(), v.line))
            .collect();
        assert_eq!(
            kinds,
            vec![
                ("a", Value::Int(1), 1),
                ("b", Value::Float(2.5), 2),
                ("c", Value::Bool(true), 3),
                ("d", Value::Null, 4),
                ("e", Value::Str("1".into()), 5),
                ("f", Value::Str("text".into()), 6),
                ("g", Value::Int(-3), 7),
            ]
        );
    }

    /// As PyYAML reads them (`big-int.yaml`): integers of any size, and
    /// YAML 1.1's spellings of infinity and NaN.
    #[test]
    fn big_integers_keep_their_digits_and_inf_nan_are_floats() {
        let n =
            parse("a: 18446744073709551617\nb: -9223372036854775809\nd: .inf\ne: -.Inf\nf: .nan\n")
                .unwrap();
        let v: Vec<_> = n
            .as_map()
            .unwrap()
            .iter()
            .map(|(_, v)| v.value.clone())
            .collect();
        assert_eq!(v[0], Value::BigInt("18446744073709551617".into()));
        assert_eq!(v[1], Value::BigInt("-9223372036854775809".into()));
        assert_eq!(v[2], Value::Float(f64::INFINITY));
        assert_eq!(v[3], Value::Float(f64::NEG_INFINITY));
        assert!(matches!(v[4], Value::Float(f) if f.is_nan()));
    }

    #[test]
    fn nested_nodes_keep_their_lines() {
        let n = parse("states:\n  test:\n    action: cargo test\n    on_yes: done\n").unwrap();
        let states = &n.as_map().unwrap()[0].1;
        let (key, test) = &states.as_map().unwrap()[0];
        assert_eq!((key.name.as_str(), key.line), ("test", 2));
        assert_eq!(test.as_map().unwrap()[1].0.line, 4);
    }

    #[test]
    fn duplicate_keys_are_refused_with_both_lines() {
        let e = parse("a: 1\nb: 2\na: 3\n").unwrap_err();
        assert_eq!(
            e,
            SyntaxError {
                line: 3,
                message: "key `a` appears twice in this mapping (first on line 1)".into()
            }
        );
    }

    #[test]
    fn syntax_errors_name_their_line() {
        let e = parse("a: [1, 2\nb: 3\n").unwrap_err();
        assert!(e.line >= 2, "{e:?}");
    }

    #[test]
    fn alias_bombs_stop_at_the_node_cap() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..8 {
            let p = i - 1;
            text.push_str(&format!("a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"));
        }
        let e = parse(&text).unwrap_err();
        assert!(
            e.message
                .starts_with("aliases expand to more than 100000 values, the most they may add"),
            "{e:?}"
        );
    }

    /// `s: &s "<900 KB>"` then `l:` and one `  - *s` per line.
    fn string_bomb(aliases: usize) -> String {
        let mut text = format!("s: &s \"{}\"\nl:\n", "x".repeat(900_000));
        text.push_str(&"  - *s\n".repeat(aliases));
        text
    }

    /// Few values, many bytes: each alias of a 900 KB string is one value, so
    /// only the byte cap stops 1,000 of them (900 MB), at the 17th: the text
    /// as written and the anchor's own copy are charged too.
    #[test]
    fn alias_bombs_of_a_large_string_stop_at_the_byte_cap() {
        let text = string_bomb(1_000);
        assert!(text.len() < MAX_TEXT_BYTES, "{}", text.len());
        // Not `unwrap_err`: that would print the whole 900 MB tree.
        let Err(e) = parse(&text) else {
            panic!("the bomb parsed")
        };
        assert_eq!(
            (e.line, e.message.as_str()),
            (
                19,
                "aliases expand this document past 16 MiB (the limit for a loop file); each `*name` copies all its `&name` holds, so write a large value once instead of aliasing it"
            )
        );
        // Sixteen copies are within it (16.2 MB with the original and the anchor's).
        let n = parse(&string_bomb(16)).unwrap();
        assert_eq!(text_bytes(&n), 17 * 900_000 + 2);
    }

    /// Nested anchors each keep a copy of what they hold: charged too.
    #[test]
    fn nested_anchors_are_charged_for_their_copies() {
        let depth = 60;
        let mut text = String::new();
        for i in 0..depth {
            text.push_str(&format!("&a{i} ["));
        }
        text.push_str(&format!("\"{}\"", "x".repeat(400_000)));
        text.push_str(&"]".repeat(depth));
        let Err(e) = parse(&text) else {
            panic!("the nested anchors parsed")
        };
        assert!(
            e.message
                .starts_with("aliases expand this document past 16 MiB"),
            "{e:?}"
        );
    }

    /// A plain 50,000-state loop under 1 MiB is no alias bomb: it parses.
    #[test]
    fn a_large_plain_document_is_not_taken_for_an_alias_bomb() {
        let mut text = String::from("states:\n");
        for i in 0..50_000 {
            text.push_str(&format!("  s{i}: {{next: z}}\n"));
        }
        assert!(text.len() < MAX_TEXT_BYTES, "{}", text.len());
        let n = parse(&text).unwrap();
        assert_eq!(get(&n, "states").unwrap().as_map().unwrap().len(), 50_000);
    }

    #[test]
    fn duplicate_keys_are_found_in_a_large_mapping() {
        let mut text: String = (0..40).map(|i| format!("k{i}: {i}\n")).collect();
        text.push_str("k3: again\n");
        let e = parse(&text).unwrap_err();
        assert_eq!(e.line, 41);
        assert_eq!(
            e.message,
            "key `k3` appears twice in this mapping (first on line 4)"
        );
    }

    #[test]
    fn values_past_the_cap_are_refused_naming_it() {
        let mut b = Builder {
            nodes: MAX_VALUES,
            ..Builder::default()
        };
        assert!(!b.count(7));
        let e = b.error.unwrap();
        assert_eq!(e.line, 7);
        assert!(
            e.message
                .starts_with("the document holds more than 1000000 values (keys, scalars, lists and mappings), the most a loop file may"),
            "{e:?}"
        );
    }

    #[test]
    fn deep_nesting_is_refused() {
        let text = "[".repeat(200) + &"]".repeat(200);
        assert!(parse(&text).unwrap_err().message.contains("nest deeper"));
    }

    #[test]
    fn anchors_and_aliases_copy_values() {
        let n = parse("base: &b {x: 1}\nother: *b\n").unwrap();
        assert_eq!(
            n.to_json(),
            serde_json::json!({"base": {"x": 1}, "other": {"x": 1}})
        );
    }
}
