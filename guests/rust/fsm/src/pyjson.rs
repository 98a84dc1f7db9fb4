//! `output_json` as little-loops runs it in Python: the output read by
//! `json.loads` (which takes `NaN`, `Infinity` and `-Infinity`, and keeps
//! every digit of an integer), a path followed as its `_extract_json_path`
//! follows it, and values compared with Python's `==` and `<`: a boolean is
//! the integer 1 or 0, an integer and a float compare exactly, `NaN` equals
//! nothing, and lists and mappings compare item by item.

use std::cmp::Ordering;

/// A value as Python holds what `json.loads` (or PyYAML, for a target) gives.
#[derive(Debug, Clone, PartialEq)]
pub enum Py {
    None,
    Bool(bool),
    /// An integer of any size, as its decimal digits (`-` first when negative).
    Int(String),
    Float(f64),
    Str(String),
    List(Vec<Py>),
    /// Keys in first-seen order; a repeated key keeps its last value, as a `dict`.
    Dict(Vec<(String, Py)>),
}

/// How deep `json.loads` input may nest before it is refused (Python's own
/// limit is its recursion limit, about 1000).
const MAX_DEPTH: usize = 512;

impl Py {
    /// `isinstance(v, (int, float))`: booleans are integers in Python.
    fn number(&self) -> Option<Num<'_>> {
        match self {
            Py::Bool(b) => Some(Num::Int(if *b { "1" } else { "0" })),
            Py::Int(d) => Some(Num::Int(d)),
            Py::Float(f) => Some(Num::Float(*f)),
            _ => None,
        }
    }

    /// Python's `repr`, for the run log.
    pub fn repr(&self) -> String {
        match self {
            Py::None => "None".into(),
            Py::Bool(b) => if *b { "True" } else { "False" }.into(),
            Py::Int(d) => d.clone(),
            Py::Float(f) if f.is_nan() => "nan".into(),
            Py::Float(f) if f.is_infinite() => if *f > 0.0 { "inf" } else { "-inf" }.into(),
            Py::Float(f) if f.fract() == 0.0 && f.abs() < 1e16 => format!("{f:.1}"),
            Py::Float(f) => format!("{f}"),
            Py::Str(s) => format!("{s:?}"),
            Py::List(items) => format!(
                "[{}]",
                items.iter().map(Py::repr).collect::<Vec<_>>().join(", ")
            ),
            Py::Dict(m) => format!(
                "{{{}}}",
                m.iter()
                    .map(|(k, v)| format!("{k:?}: {}", v.repr()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

#[derive(Clone, Copy)]
enum Num<'a> {
    Int(&'a str),
    Float(f64),
}

/// Python's ordering of two numbers, exact between an integer and a float;
/// `None` when either is `NaN` (every comparison but `!=` is false).
fn cmp_num(a: Num, b: Num) -> Option<Ordering> {
    match (a, b) {
        (Num::Int(x), Num::Int(y)) => Some(cmp_int(x, y)),
        (Num::Float(x), Num::Float(y)) => x.partial_cmp(&y),
        (Num::Int(x), Num::Float(y)) => cmp_int_float(x, y),
        (Num::Float(x), Num::Int(y)) => cmp_int_float(y, x).map(Ordering::reverse),
    }
}

fn cmp_int(x: &str, y: &str) -> Ordering {
    let (xn, xd) = x.strip_prefix('-').map_or((false, x), |d| (true, d));
    let (yn, yd) = y.strip_prefix('-').map_or((false, y), |d| (true, d));
    // Digits are normalized (no leading zeros, no `-0`), so length orders magnitude.
    let magnitude = xd.len().cmp(&yd.len()).then_with(|| xd.cmp(yd));
    match (xn, yn) {
        (false, false) => magnitude,
        (true, true) => magnitude.reverse(),
        (false, true) => Ordering::Greater,
        (true, false) => Ordering::Less,
    }
}

fn cmp_int_float(x: &str, y: f64) -> Option<Ordering> {
    if y.is_nan() {
        return None;
    }
    if y.is_infinite() {
        return Some(if y > 0.0 {
            Ordering::Less
        } else {
            Ordering::Greater
        });
    }
    // A float's floor is an integer Rust prints with every digit.
    let floor = int_digits(&format!("{:.0}", y.floor()));
    Some(match cmp_int(x, &floor) {
        Ordering::Equal if y.fract() != 0.0 => Ordering::Less,
        o => o,
    })
}

/// Decimal digits normalized: no leading zeros, no sign on zero.
fn int_digits(text: &str) -> String {
    let (neg, d) = text.strip_prefix('-').map_or((false, text), |d| (true, d));
    let d = d.trim_start_matches('0');
    match (d.is_empty(), neg) {
        (true, _) => "0".into(),
        (false, true) => format!("-{d}"),
        (false, false) => d.into(),
    }
}

/// Python's `a == b`.
pub fn py_eq(a: &Py, b: &Py) -> bool {
    if let (Some(x), Some(y)) = (a.number(), b.number()) {
        return cmp_num(x, y) == Some(Ordering::Equal);
    }
    match (a, b) {
        (Py::None, Py::None) => true,
        (Py::Str(x), Py::Str(y)) => x == y,
        (Py::List(x), Py::List(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| py_eq(a, b))
        }
        (Py::Dict(x), Py::Dict(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.iter().any(|(k2, v2)| k == k2 && py_eq(v, v2)))
        }
        _ => false,
    }
}

/// `a OP b` for two numbers (booleans included), as Python's operators give it.
pub fn py_compare(a: &Py, op: crate::spec::Op, b: &Py) -> Option<bool> {
    use crate::spec::Op;
    let o = cmp_num(a.number()?, b.number()?);
    Some(match op {
        Op::Eq => o == Some(Ordering::Equal),
        Op::Ne => o != Some(Ordering::Equal),
        Op::Lt => o == Some(Ordering::Less),
        Op::Le => matches!(o, Some(Ordering::Less | Ordering::Equal)),
        Op::Gt => o == Some(Ordering::Greater),
        Op::Ge => matches!(o, Some(Ordering::Greater | Ordering::Equal)),
    })
}

/// The value at `path`, as little-loops' `_extract_json_path` finds it: one
/// leading `.` dropped, then each `.`-separated part (an empty one too) a
/// mapping's key or a list's index. `.` alone names the key `""`, not the
/// whole value.
pub fn at<'a>(data: &'a Py, path: &str) -> Option<&'a Py> {
    let path = path.strip_prefix('.').unwrap_or(path);
    let mut v = data;
    for part in path.split('.') {
        v = match v {
            Py::Dict(m) => &m.iter().rev().find(|(k, _)| k == part)?.1,
            // `str.isdigit()`; an index with other digits than 0-9 is not read.
            Py::List(items) if !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) => {
                items.get(part.parse::<usize>().ok()?)?
            }
            _ => return None,
        };
    }
    Some(v)
}

/// `json.loads(text)`: the error says where it stopped.
pub fn loads(text: &str) -> Result<Py, String> {
    let mut p = Parser {
        s: text.as_bytes(),
        i: 0,
        text,
    };
    p.ws();
    let v = p.value(0)?;
    p.ws();
    if p.i < p.s.len() {
        return Err(format!("extra data at character {}", p.i));
    }
    Ok(v)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
    text: &'a str,
}

impl Parser<'_> {
    /// JSON's whitespace only (not Unicode's), as `json.loads`.
    fn ws(&mut self) {
        while self.i < self.s.len() && matches!(self.s[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn err<T>(&self, what: &str) -> Result<T, String> {
        Err(format!("{what} at character {}", self.i))
    }

    fn eat(&mut self, word: &str) -> bool {
        if self.s[self.i..].starts_with(word.as_bytes()) {
            self.i += word.len();
            true
        } else {
            false
        }
    }

    fn value(&mut self, depth: usize) -> Result<Py, String> {
        if depth > MAX_DEPTH {
            return self.err("nested too deeply");
        }
        let Some(&c) = self.s.get(self.i) else {
            return self.err("expecting a value");
        };
        match c {
            b'{' => self.object(depth),
            b'[' => self.array(depth),
            b'"' => self.string().map(Py::Str),
            _ if self.eat("null") => Ok(Py::None),
            _ if self.eat("true") => Ok(Py::Bool(true)),
            _ if self.eat("false") => Ok(Py::Bool(false)),
            _ if self.eat("NaN") => Ok(Py::Float(f64::NAN)),
            _ if self.eat("Infinity") => Ok(Py::Float(f64::INFINITY)),
            _ if self.eat("-Infinity") => Ok(Py::Float(f64::NEG_INFINITY)),
            b'-' | b'0'..=b'9' => self.number(),
            _ => self.err("expecting a value"),
        }
    }

    fn number(&mut self) -> Result<Py, String> {
        let start = self.i;
        let digits = |p: &mut Self| {
            let from = p.i;
            while p.i < p.s.len() && p.s[p.i].is_ascii_digit() {
                p.i += 1;
            }
            p.i - from
        };
        self.eat("-");
        // `-` with no digits, or `01`: not a number (Python reads `0` then stops).
        match digits(self) {
            0 => return self.err("expecting a value"),
            n if n > 1 && self.s[self.i - n] == b'0' => {
                self.i -= n - 1;
            }
            _ => {}
        }
        let mut float = false;
        let here = self.i;
        if self.eat(".") {
            if digits(self) == 0 {
                self.i = here;
            } else {
                float = true;
            }
        }
        let here = self.i;
        if self.eat("e") || self.eat("E") {
            let _ = self.eat("+") || self.eat("-");
            if digits(self) == 0 {
                self.i = here;
            } else {
                float = true;
            }
        }
        let t = &self.text[start..self.i];
        Ok(if float {
            // Out of range is `inf`, as Python's float() reads it.
            Py::Float(t.parse::<f64>().unwrap_or(f64::NAN))
        } else {
            Py::Int(int_digits(t))
        })
    }

    fn string(&mut self) -> Result<String, String> {
        self.i += 1;
        let mut out = String::new();
        loop {
            let start = self.i;
            while self.i < self.s.len() && !matches!(self.s[self.i], b'"' | b'\\' | 0..=0x1f) {
                self.i += 1;
            }
            out.push_str(&self.text[start..self.i]);
            match self.s.get(self.i) {
                Some(b'"') => {
                    self.i += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.i += 1;
                    let Some(&e) = self.s.get(self.i) else {
                        return self.err("unterminated string");
                    };
                    self.i += 1;
                    out.push(match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => self.unicode()?,
                        _ => return self.err("invalid \\escape"),
                    });
                }
                Some(_) => return self.err("invalid control character"),
                None => return self.err("unterminated string"),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, String> {
        let h = self.text.get(self.i..self.i + 4).unwrap_or("");
        match u32::from_str_radix(h, 16) {
            Ok(n) if h.len() == 4 && h.bytes().all(|b| b.is_ascii_hexdigit()) => {
                self.i += 4;
                Ok(n)
            }
            _ => self.err("invalid \\uXXXX escape"),
        }
    }

    /// `\uXXXX`, a surrogate pair joined; a lone surrogate (which Python
    /// keeps) is U+FFFD, as Rust text cannot hold it.
    fn unicode(&mut self) -> Result<char, String> {
        let hi = self.hex4()?;
        if (0xd800..0xdc00).contains(&hi) && self.s[self.i..].starts_with(b"\\u") {
            let back = self.i;
            self.i += 2;
            let lo = self.hex4()?;
            if (0xdc00..0xe000).contains(&lo) {
                let c = 0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00);
                return Ok(char::from_u32(c).unwrap_or('\u{fffd}'));
            }
            self.i = back;
        }
        Ok(char::from_u32(hi).unwrap_or('\u{fffd}'))
    }

    fn array(&mut self, depth: usize) -> Result<Py, String> {
        self.i += 1;
        let mut items = Vec::new();
        self.ws();
        if self.eat("]") {
            return Ok(Py::List(items));
        }
        loop {
            self.ws();
            items.push(self.value(depth + 1)?);
            self.ws();
            if self.eat("]") {
                return Ok(Py::List(items));
            }
            if !self.eat(",") {
                return self.err("expecting ',' delimiter");
            }
        }
    }

    fn object(&mut self, depth: usize) -> Result<Py, String> {
        self.i += 1;
        let mut m: Vec<(String, Py)> = Vec::new();
        self.ws();
        if self.eat("}") {
            return Ok(Py::Dict(m));
        }
        loop {
            self.ws();
            if self.s.get(self.i) != Some(&b'"') {
                return self.err("expecting property name enclosed in double quotes");
            }
            let k = self.string()?;
            self.ws();
            if !self.eat(":") {
                return self.err("expecting ':' delimiter");
            }
            self.ws();
            let v = self.value(depth + 1)?;
            match m.iter_mut().find(|(k2, _)| *k2 == k) {
                Some(slot) => slot.1 = v,
                None => m.push((k, v)),
            }
            self.ws();
            if self.eat("}") {
                return Ok(Py::Dict(m));
            }
            if !self.eat(",") {
                return self.err("expecting ',' delimiter");
            }
        }
    }
}

/// A YAML value as PyYAML gives it to little-loops (an `output_json` target).
pub fn from_yaml(node: &crate::yaml::Node) -> Py {
    use crate::yaml::Value as Y;
    match &node.value {
        Y::Null => Py::None,
        Y::Bool(b) => Py::Bool(*b),
        Y::Int(i) => Py::Int(i.to_string()),
        Y::BigInt(d) => Py::Int(int_digits(d)),
        Y::Float(f) => Py::Float(*f),
        Y::Str(s) => Py::Str(s.clone()),
        Y::Seq(items) => Py::List(items.iter().map(from_yaml).collect()),
        Y::Map(entries) => Py::Dict(
            entries
                .iter()
                .map(|(k, v)| (k.name.clone(), from_yaml(v)))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Op::*;

    fn int(n: i64) -> Py {
        Py::Int(n.to_string())
    }

    #[test]
    fn loads_reads_what_python_json_reads() {
        assert_eq!(loads(" 5\n"), Ok(int(5)));
        assert_eq!(loads("-0"), Ok(int(0)));
        assert_eq!(
            loads("123456789012345678901234567890"),
            Ok(Py::Int("123456789012345678901234567890".into()))
        );
        assert!(matches!(loads("NaN"), Ok(Py::Float(f)) if f.is_nan()));
        assert_eq!(
            loads("[-Infinity, 1e400]"),
            Ok(Py::List(vec![
                Py::Float(f64::NEG_INFINITY),
                Py::Float(f64::INFINITY)
            ]))
        );
        assert_eq!(
            loads(r#"{"a": 1, "a": 2, "s": "\u00e9\ud83d\ude00"}"#),
            Ok(Py::Dict(vec![
                ("a".into(), int(2)),
                ("s".into(), Py::Str("é😀".into()))
            ]))
        );
        for bad in [
            "", "01", "1.", "[1,]", "{'a': 1}", "nan", "\u{a0}1", "1 2", "\"a\nb\"",
        ] {
            assert!(loads(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn comparisons_are_pythons() {
        let t = Py::Bool(true);
        assert!(py_eq(&t, &int(1)) && py_eq(&int(1), &Py::Float(1.0)));
        assert_eq!(py_compare(&t, Gt, &int(0)), Some(true));
        let nan = Py::Float(f64::NAN);
        for op in [Eq, Lt, Le, Gt, Ge] {
            assert_eq!(py_compare(&nan, op, &nan), Some(false), "{op:?}");
        }
        assert_eq!(py_compare(&nan, Ne, &int(1)), Some(true));
        // Exact between integers and floats, beyond 2^53 too.
        let big = Py::Int("9007199254740993".into());
        assert!(!py_eq(&big, &Py::Float(9007199254740992.0)));
        assert_eq!(
            py_compare(&big, Gt, &Py::Float(9007199254740992.0)),
            Some(true)
        );
        assert_eq!(py_compare(&int(-3), Lt, &Py::Float(-2.5)), Some(true));
        assert_eq!(py_compare(&int(2), Gt, &Py::Float(2.5)), Some(false));
        assert_eq!(py_compare(&int(-10), Lt, &int(-9)), Some(true));
        assert_eq!(
            py_compare(&int(5), Lt, &Py::Float(f64::INFINITY)),
            Some(true)
        );
        assert_eq!(py_compare(&Py::Str("a".into()), Lt, &int(1)), None);
        let list = loads(r#"[1, 2, {"k": 1}]"#).unwrap();
        let want = Py::List(vec![
            Py::Float(1.0),
            int(2),
            Py::Dict(vec![("k".into(), Py::Bool(true))]),
        ]);
        assert!(py_eq(&list, &want));
        assert!(!py_eq(&Py::Str("1".into()), &int(1)) && !py_eq(&Py::None, &int(0)));
    }

    #[test]
    fn paths_are_followed_as_little_loops_follows_them() {
        let d = loads(r#"{"a": {"b": [10, 20]}, "": 7}"#).unwrap();
        assert_eq!(at(&d, ".a.b.1"), Some(&int(20)));
        assert_eq!(at(&d, "a.b.0"), Some(&int(10)));
        assert_eq!(at(&d, "."), Some(&int(7)));
        assert_eq!(at(&d, ""), Some(&int(7)));
        assert_eq!(at(&d, "a..b"), None);
        assert_eq!(at(&d, ".a.b.-1"), None);
        assert_eq!(at(&int(5), "."), None);
    }
}
