//! pytest's `--junit-xml` report, read as little-loops 1.156 reads it
//! (`prepatch_check.py` `_parse_junit`, `_reconstruct_nodeid`,
//! `_classify_error`): every `testcase` element, its node id rebuilt from its
//! `file`, `classname` and `name`, and its result from its direct `failure`,
//! `error` or `skipped` child. A report that does not parse reads as no
//! results, as `ET.ParseError` does there.
//!
//! The parser is the little of XML a report needs: elements, attributes,
//! text, comments, CDATA, declarations and character references; anything
//! malformed is `None`.

use std::collections::BTreeMap;

/// A test's category (`pass`, `fail`, `error`) and error kind.
pub type Results = BTreeMap<String, (String, Option<String>)>;

#[derive(Debug, Default)]
struct Element {
    name: String,
    attrs: Vec<(String, String)>,
    text: String,
    children: Vec<Element>,
}

impl Element {
    fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn child(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.name == name)
    }

    fn all<'a>(&'a self, name: &str, out: &mut Vec<&'a Element>) {
        if self.name == name {
            out.push(self);
        }
        for c in &self.children {
            c.all(name, out);
        }
    }
}

/// `_parse_junit`: each test's node id to its category and error kind.
pub fn results(xml: &str) -> Results {
    let Some(root) = parse(xml) else {
        return Results::new();
    };
    let mut cases = Vec::new();
    root.all("testcase", &mut cases);
    let mut out = Results::new();
    for case in cases {
        let name = case.attr("name").unwrap_or("");
        let classname = case.attr("classname").unwrap_or("");
        let nodeid = match case.attr("file") {
            Some(file) if !file.is_empty() => nodeid(file, classname, name),
            _ if !classname.is_empty() => format!("{classname}::{name}"),
            _ => name.to_string(),
        };
        let result = if case.child("failure").is_some() {
            ("fail".to_string(), None)
        } else if let Some(e) = case.child("error") {
            let msg = format!("{} {}", e.attr("message").unwrap_or(""), e.text);
            ("error".to_string(), Some(classify_error(&msg).to_string()))
        } else if case.child("skipped").is_some() {
            ("fail".to_string(), None)
        } else {
            ("pass".to_string(), None)
        };
        out.insert(nodeid, result);
    }
    out
}

/// `_reconstruct_nodeid`.
fn nodeid(file: &str, classname: &str, name: &str) -> String {
    let dotted = match file.strip_suffix(".py") {
        Some(stem) => stem.replace('/', "."),
        None => file.replace('/', "."),
    };
    if let Some(rest) = classname.strip_prefix(&format!("{dotted}."))
        && !rest.is_empty()
    {
        return format!("{file}::{rest}::{name}");
    }
    format!("{file}::{name}")
}

/// `_classify_error`.
fn classify_error(message: &str) -> &'static str {
    if message.contains("ModuleNotFoundError")
        || message.contains("ImportError")
        || message.to_lowercase().contains("collection")
    {
        "collection"
    } else {
        "infrastructure"
    }
}

/// The document's root element.
fn parse(xml: &str) -> Option<Element> {
    let mut p = Parser { s: xml, i: 0 };
    p.misc()?;
    let root = p.element()?;
    p.misc()?;
    (p.i == p.s.len()).then_some(root)
}

struct Parser<'a> {
    s: &'a str,
    i: usize,
}

impl Parser<'_> {
    fn rest(&self) -> &str {
        &self.s[self.i..]
    }

    /// Skip to past `end`.
    fn past(&mut self, end: &str) -> Option<()> {
        let j = self.rest().find(end)?;
        self.i += j + end.len();
        Some(())
    }

    fn space(&mut self) {
        let n = self.rest().len() - self.rest().trim_start().len();
        self.i += n;
    }

    /// Whitespace, comments, declarations and processing instructions.
    fn misc(&mut self) -> Option<()> {
        loop {
            self.space();
            if self.rest().starts_with("<?") {
                self.past("?>")?;
            } else if self.rest().starts_with("<!--") {
                self.past("-->")?;
            } else if self.rest().starts_with("<!DOCTYPE") {
                self.past(">")?;
            } else {
                return Some(());
            }
        }
    }

    fn name(&mut self) -> Option<String> {
        let n: String = self
            .rest()
            .chars()
            .take_while(|c| c.is_alphanumeric() || "_-.:".contains(*c))
            .collect();
        if n.is_empty() {
            return None;
        }
        self.i += n.len();
        Some(n)
    }

    fn element(&mut self) -> Option<Element> {
        if !self.rest().starts_with('<') {
            return None;
        }
        self.i += 1;
        let mut e = Element {
            name: self.name()?,
            ..Default::default()
        };
        loop {
            self.space();
            if self.rest().starts_with("/>") {
                self.i += 2;
                return Some(e);
            }
            if self.rest().starts_with('>') {
                self.i += 1;
                break;
            }
            let k = self.name()?;
            self.space();
            if !self.rest().starts_with('=') {
                return None;
            }
            self.i += 1;
            self.space();
            let q = self
                .rest()
                .chars()
                .next()
                .filter(|c| *c == '"' || *c == '\'')?;
            self.i += 1;
            let end = self.rest().find(q)?;
            let raw = &self.s[self.i..self.i + end];
            self.i += end + 1;
            e.attrs.push((k, unescape(raw)?));
        }
        loop {
            let rest = self.rest();
            if rest.starts_with("</") {
                self.i += 2;
                let n = self.name()?;
                self.space();
                if n != e.name || !self.rest().starts_with('>') {
                    return None;
                }
                self.i += 1;
                return Some(e);
            } else if rest.starts_with("<!--") {
                self.past("-->")?;
            } else if let Some(cdata) = rest.strip_prefix("<![CDATA[") {
                let end = cdata.find("]]>")?;
                e.text.push_str(&cdata[..end]);
                self.i += "<![CDATA[".len() + end + 3;
            } else if rest.starts_with("<?") {
                self.past("?>")?;
            } else if rest.starts_with('<') {
                let child = self.element()?;
                e.children.push(child);
            } else if rest.is_empty() {
                return None;
            } else {
                let end = rest.find('<').unwrap_or(rest.len());
                let text = unescape(&rest[..end])?;
                if e.children.is_empty() {
                    e.text.push_str(&text);
                }
                self.i += end;
            }
        }
    }
}

/// Character and entity references.
fn unescape(raw: &str) -> Option<String> {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let end = after.find(';')?;
        let name = &after[..end];
        let c = match name {
            "lt" => '<',
            "gt" => '>',
            "amp" => '&',
            "quot" => '"',
            "apos" => '\'',
            n if n.starts_with("#x") => char::from_u32(u32::from_str_radix(&n[2..], 16).ok()?)?,
            n if n.starts_with('#') => char::from_u32(n[1..].parse().ok()?)?,
            _ => return None,
        };
        out.push(c);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = r#"<?xml version="1.0" encoding="utf-8"?>
<testsuites name="pytest tests"><testsuite name="pytest" errors="1" failures="1" skipped="1" tests="5">
<testcase classname="tests.test_a" name="test_new" file="tests/test_a.py" line="3" time="0.001" />
<testcase classname="tests.test_a.TestK" name="test_m" file="tests/test_a.py" time="0.001"><failure message="assert 0">def test_m(): &gt; assert 0</failure></testcase>
<testcase classname="tests.test_b" name="test_s" file="tests/test_b.py"><skipped type="pytest.skip" message="no" /></testcase>
<testcase classname="" name="tests/test_c.py" file="tests/test_c.py"><error message="collection failure"><![CDATA[ModuleNotFoundError: No module named 'x']]></error></testcase>
<testcase classname="tests.test_d" name="test_x" time="0.1"><!-- xunit2: no file --><system-out>ok</system-out></testcase>
</testsuite></testsuites>"#;

    #[test]
    fn a_report_reads_as_little_loops_reads_it() {
        let r = results(REPORT);
        let get = |k: &str| r.get(k).map(|(c, e)| (c.as_str(), e.as_deref()));
        assert_eq!(get("tests/test_a.py::test_new"), Some(("pass", None)));
        assert_eq!(get("tests/test_a.py::TestK::test_m"), Some(("fail", None)));
        assert_eq!(get("tests/test_b.py::test_s"), Some(("fail", None)));
        assert_eq!(
            get("tests/test_c.py::tests/test_c.py"),
            Some(("error", Some("collection")))
        );
        // pytest's default (xunit2) writes no `file`: the id is `classname::name`,
        // which names no candidate, as in little-loops.
        assert_eq!(get("tests.test_d::test_x"), Some(("pass", None)));
        assert_eq!(r.len(), 5);
    }

    #[test]
    fn a_report_that_does_not_parse_has_no_results() {
        for bad in [
            "",
            "<testsuite><testcase name='a'></testsuite>",
            "<testsuite name='&bogus;'/>",
            "<a/><b/>",
            "not xml",
        ] {
            assert!(results(bad).is_empty(), "{bad}");
        }
    }
}
