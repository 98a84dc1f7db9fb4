//! Editing a JSON settings file in place: add or remove one value and leave
//! every other byte (spacing, key order, comments) as the user wrote it.
//!
//! A small parser records where each value starts and ends; an edit splices
//! text at those offsets. It keeps every member of an object, a key given twice
//! included, so [`Node::duplicate`] can find what a reader that keeps only the
//! last would hide. Comments (`//`, `/* */`) are read as whitespace,
//! since Gemini CLI's settings allow them. An insertion is laid out like its
//! neighbours, and removing what was inserted gives back the original text.

use serde_json::Value;

/// A parsed JSON value and where it lies in the text.
#[derive(Debug, Clone)]
pub enum Node {
    Object {
        start: usize,
        end: usize,
        members: Vec<Member>,
    },
    Array {
        start: usize,
        end: usize,
        items: Vec<Node>,
    },
    Scalar {
        start: usize,
        end: usize,
    },
}

#[derive(Debug, Clone)]
pub struct Member {
    pub key: String,
    /// Offset of the key's opening quote.
    pub start: usize,
    pub value: Node,
}

impl Node {
    pub fn start(&self) -> usize {
        match self {
            Node::Object { start, .. } | Node::Array { start, .. } | Node::Scalar { start, .. } => {
                *start
            }
        }
    }

    pub fn end(&self) -> usize {
        match self {
            Node::Object { end, .. } | Node::Array { end, .. } | Node::Scalar { end, .. } => *end,
        }
    }

    pub fn get(&self, key: &str) -> Option<&Node> {
        match self {
            Node::Object { members, .. } => members.iter().find(|m| m.key == key).map(|m| &m.value),
            _ => None,
        }
    }

    pub fn items(&self) -> &[Node] {
        match self {
            Node::Array { items, .. } => items,
            _ => &[],
        }
    }

    /// The first key given twice in one object, here or at any depth below:
    /// the key and the offsets of its first and second member.
    pub fn duplicate(&self) -> Option<(&str, usize, usize)> {
        match self {
            Node::Object { members, .. } => members
                .iter()
                .enumerate()
                .find_map(|(i, m)| {
                    members[..i]
                        .iter()
                        .find(|first| first.key == m.key)
                        .map(|first| (m.key.as_str(), first.start, m.start))
                })
                .or_else(|| members.iter().find_map(|m| m.value.duplicate())),
            Node::Array { items, .. } => items.iter().find_map(Node::duplicate),
            Node::Scalar { .. } => None,
        }
    }

    /// A string value's text.
    pub fn as_str(&self, text: &str) -> Option<String> {
        match self {
            Node::Scalar { start, end } => serde_json::from_str::<String>(&text[*start..*end]).ok(),
            _ => None,
        }
    }

    /// (start, end) of each element: members of an object, items of an array.
    fn elements(&self) -> Vec<(usize, usize)> {
        match self {
            Node::Object { members, .. } => {
                members.iter().map(|m| (m.start, m.value.end())).collect()
            }
            Node::Array { items, .. } => items.iter().map(|i| (i.start(), i.end())).collect(),
            Node::Scalar { .. } => Vec::new(),
        }
    }
}

struct Parser<'a> {
    text: &'a [u8],
    pos: usize,
}

/// Deepest nesting accepted: a settings file is shallow; this bounds the recursion.
const MAX_DEPTH: usize = 128;

impl Parser<'_> {
    fn err<T>(&self, what: &str) -> Result<T, String> {
        Err(format!("{what} at line {}", line_at(self.text, self.pos)))
    }

    fn skip_blank(&mut self) -> Result<(), String> {
        loop {
            match self.text.get(self.pos..) {
                Some([b' ' | b'\t' | b'\n' | b'\r', ..]) => self.pos += 1,
                Some([b'/', b'/', ..]) => {
                    while self.pos < self.text.len() && self.text[self.pos] != b'\n' {
                        self.pos += 1;
                    }
                }
                Some([b'/', b'*', ..]) => {
                    let rest = &self.text[self.pos + 2..];
                    match rest.windows(2).position(|w| w == b"*/") {
                        Some(i) => self.pos += i + 4,
                        None => return self.err("unterminated comment"),
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    fn value(&mut self, depth: usize) -> Result<Node, String> {
        if depth > MAX_DEPTH {
            return self.err("nesting too deep");
        }
        self.skip_blank()?;
        let start = self.pos;
        match self.text.get(self.pos) {
            Some(b'{') => {
                self.pos += 1;
                let mut members = Vec::new();
                self.skip_blank()?;
                if self.text.get(self.pos) == Some(&b'}') {
                    self.pos += 1;
                    return Ok(Node::Object {
                        start,
                        end: self.pos,
                        members,
                    });
                }
                loop {
                    self.skip_blank()?;
                    let key_start = self.pos;
                    if self.text.get(self.pos) != Some(&b'"') {
                        return self.err("expected a key");
                    }
                    self.string()?;
                    let key: String = serde_json::from_slice(&self.text[key_start..self.pos])
                        .map_err(|e| format!("bad key: {e}"))?;
                    self.skip_blank()?;
                    if self.text.get(self.pos) != Some(&b':') {
                        return self.err("expected `:`");
                    }
                    self.pos += 1;
                    let value = self.value(depth + 1)?;
                    members.push(Member {
                        key,
                        start: key_start,
                        value,
                    });
                    self.skip_blank()?;
                    match self.text.get(self.pos) {
                        Some(b',') => self.pos += 1,
                        Some(b'}') => {
                            self.pos += 1;
                            return Ok(Node::Object {
                                start,
                                end: self.pos,
                                members,
                            });
                        }
                        _ => return self.err("expected `,` or `}`"),
                    }
                }
            }
            Some(b'[') => {
                self.pos += 1;
                let mut items = Vec::new();
                self.skip_blank()?;
                if self.text.get(self.pos) == Some(&b']') {
                    self.pos += 1;
                    return Ok(Node::Array {
                        start,
                        end: self.pos,
                        items,
                    });
                }
                loop {
                    items.push(self.value(depth + 1)?);
                    self.skip_blank()?;
                    match self.text.get(self.pos) {
                        Some(b',') => self.pos += 1,
                        Some(b']') => {
                            self.pos += 1;
                            return Ok(Node::Array {
                                start,
                                end: self.pos,
                                items,
                            });
                        }
                        _ => return self.err("expected `,` or `]`"),
                    }
                }
            }
            Some(b'"') => {
                self.string()?;
                Ok(Node::Scalar {
                    start,
                    end: self.pos,
                })
            }
            Some(_) => {
                while self.pos < self.text.len() && !b" \t\r\n,]}/".contains(&self.text[self.pos]) {
                    self.pos += 1;
                }
                // Numbers, true, false, null: serde_json says whether the token is one.
                serde_json::from_slice::<Value>(&self.text[start..self.pos])
                    .map_err(|_| "not a JSON value".to_string())
                    .or_else(|e| self.err(&e))?;
                Ok(Node::Scalar {
                    start,
                    end: self.pos,
                })
            }
            None => self.err("unexpected end of text"),
        }
    }

    fn string(&mut self) -> Result<(), String> {
        let start = self.pos;
        self.pos += 1;
        while let Some(&b) = self.text.get(self.pos) {
            self.pos += 1;
            match b {
                b'\\' => self.pos += 1,
                b'"' => {
                    return serde_json::from_slice::<String>(&self.text[start..self.pos])
                        .map(|_| ())
                        .map_err(|e| format!("bad string: {e}"));
                }
                _ => {}
            }
        }
        self.err("unterminated string")
    }
}

/// The line (from 1) of byte `offset` in `text`.
pub fn line_of(text: &str, offset: usize) -> usize {
    line_at(text.as_bytes(), offset)
}

fn line_at(text: &[u8], offset: usize) -> usize {
    text[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Parse `text` (JSON with comments allowed).
pub fn parse(text: &str) -> Result<Node, String> {
    let mut p = Parser {
        text: text.as_bytes(),
        pos: 0,
    };
    let node = p.value(0)?;
    p.skip_blank()?;
    if p.pos != text.len() {
        return p.err("text after the JSON value");
    }
    Ok(node)
}

/// The indentation unit the file uses (the first indented line's), else two spaces.
fn indent_unit(text: &str) -> String {
    text.lines()
        .map(|l| &l[..l.len() - l.trim_start_matches([' ', '\t']).len()])
        .find(|ws| !ws.is_empty())
        .unwrap_or("  ")
        .to_string()
}

/// The whitespace that starts the line `pos` is on.
fn line_indent(text: &str, pos: usize) -> &str {
    let line_start = text[..pos].rfind('\n').map_or(0, |i| i + 1);
    let line = &text[line_start..];
    &line[..line.len() - line.trim_start_matches([' ', '\t']).len()]
}

/// `value` pretty-printed with `unit`, each line after the first starting with `indent`.
fn render(value: &Value, unit: &str, indent: &str) -> String {
    let mut out = Vec::new();
    let mut ser = serde_json::Serializer::with_formatter(
        &mut out,
        serde_json::ser::PrettyFormatter::with_indent(unit.as_bytes()),
    );
    serde::Serialize::serialize(value, &mut ser).expect("JSON values serialize");
    String::from_utf8(out)
        .expect("serde_json writes UTF-8")
        .replace('\n', &format!("\n{indent}"))
}

/// `text` with `element` (a member `"key": value` when `key` is given) added at the end of `container`.
pub fn append(text: &str, container: &Node, key: Option<&str>, value: &Value) -> String {
    let unit = indent_unit(text);
    let elements = container.elements();
    let (at, indent, closing) = match elements.last() {
        Some(&(start, end)) => (end, line_indent(text, start).to_string(), None),
        None => {
            let parent = line_indent(text, container.start()).to_string();
            (
                container.start() + 1,
                format!("{parent}{unit}"),
                Some(parent),
            )
        }
    };
    let mut element = match key {
        Some(k) => format!("{}: ", Value::String(k.to_string())),
        None => String::new(),
    };
    element.push_str(&render(value, &unit, &indent));
    match closing {
        Some(parent) => {
            let end = container.end() - 1;
            format!(
                "{}\n{indent}{element}\n{parent}{}",
                &text[..at],
                &text[end..]
            )
        }
        None => format!("{},\n{indent}{element}{}", &text[..at], &text[at..]),
    }
}

/// `text` with element `index` of `container` removed, with its separating comma.
pub fn remove(text: &str, container: &Node, index: usize) -> String {
    let elements = container.elements();
    let (start, end) = elements[index];
    let (from, to) = if elements.len() == 1 {
        (container.start() + 1, container.end() - 1)
    } else if index > 0 {
        (elements[index - 1].1, end)
    } else {
        (start, elements[1].0)
    };
    format!("{}{}", &text[..from], &text[to..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_with_comments_and_finds_values() {
        let text = "// settings\n{\n  \"a\": [1, \"x\\\"y\", {\"b\": null}], /* note */\n  \"c\": true\n}\n";
        let root = parse(text).unwrap();
        assert_eq!(root.get("a").unwrap().items().len(), 3);
        assert_eq!(
            root.get("a").unwrap().items()[1].as_str(text).as_deref(),
            Some("x\"y")
        );
        assert!(root.get("c").is_some() && root.get("d").is_none());
        for bad in [
            "{",
            "{\"a\" 1}",
            "[1,]",
            "{\"a\": tru}",
            "\"open",
            "{} x",
            "/* open",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert!(parse(&"[".repeat(1000)).unwrap_err().contains("too deep"));
    }

    #[test]
    fn append_then_remove_gives_back_the_original() {
        for original in [
            "{\n    \"x\": 1\n}\n",
            "{}",
            "{\"x\":1}",
            "{\n\t\"x\": [\n\t\t1\n\t]\n}",
        ] {
            let root = parse(original).unwrap();
            let added = append(
                original,
                &root,
                Some("hooks"),
                &json!({"Stop": [{"hooks": []}]}),
            );
            let again = parse(&added).unwrap();
            assert_eq!(
                serde_json::from_str::<Value>(&added).unwrap()["hooks"]["Stop"][0],
                json!({"hooks": []}),
                "{added}"
            );
            let index = match &again {
                Node::Object { members, .. } => {
                    members.iter().position(|m| m.key == "hooks").unwrap()
                }
                _ => unreachable!(),
            };
            assert_eq!(remove(&added, &again, index), original, "{added}");
        }
        let text = "{\n    \"x\": 1\n}\n";
        let added = append(text, &parse(text).unwrap(), Some("y"), &json!({"z": [1]}));
        assert_eq!(
            added,
            "{\n    \"x\": 1,\n    \"y\": {\n        \"z\": [\n            1\n        ]\n    }\n}\n"
        );
    }

    #[test]
    fn remove_takes_the_right_comma() {
        let text = "[1, 2, 3]";
        let root = parse(text).unwrap();
        assert_eq!(remove(text, &root, 0), "[2, 3]");
        assert_eq!(remove(text, &root, 1), "[1, 3]");
        assert_eq!(remove(text, &root, 2), "[1, 2]");
        assert_eq!(remove("[ 1 ]", &parse("[ 1 ]").unwrap(), 0), "[]");
    }
}
