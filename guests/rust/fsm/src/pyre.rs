//! Python `re` patterns, as little-loops' `output_contains` searches with
//! them, translated to `fancy-regex` patterns that match the same text.
//!
//! The pattern is parsed as Python 3.11's `re._parser` parses it, so the
//! patterns Python refuses are known (little-loops then looks for the
//! pattern as plain text), and each construct is written out with its
//! Python meaning, where Rust's differs: `$` is the end or before a final
//! newline, `\Z` the very end, `\d` `\w` `\s` and `\b` are Python's Unicode
//! classes (or ASCII ones under `(?a)`), `{,n}` is `{0,n}`, a `{` that is no
//! quantifier is text, `(?P<n>...)`/`(?P=n)` are groups and references, and
//! every literal is escaped (`\<` is `<` in Python, a word start in Rust).
//! What Rust cannot match as Python does is [`Pattern::Unsupported`], which
//! `validate` refuses.

/// What a pattern is to little-loops.
#[derive(Debug, Clone, PartialEq)]
pub enum Pattern {
    /// A regular expression: the `fancy-regex` pattern that matches as it does.
    Regex(String),
    /// Python's `re` refuses it (the reason): it is searched for as text.
    Text(String),
    /// Python compiles it but loopbox cannot match it the same way (what).
    Unsupported(String),
}

/// Translate a Python pattern.
pub fn translate(pattern: &str) -> Pattern {
    let mut p = Parser {
        chars: pattern.chars().collect(),
        i: 0,
        groups: 0,
        closed: Vec::new(),
        names: Vec::new(),
        flags: Flags::default(),
        lookbehind: None,
    };
    let body = match p.alternation(false, true) {
        Ok(b) => b,
        Err(Error::Python(e)) => return Pattern::Text(e),
        Err(Error::Rust(e)) => return Pattern::Unsupported(e),
    };
    if p.i < p.chars.len() {
        return Pattern::Text("unbalanced parenthesis".into());
    }
    let mut out = String::new();
    if p.flags.i {
        out.push_str("(?i)");
    }
    if p.flags.i && p.flags.a {
        return Pattern::Unsupported(
            "`(?a)` with `(?i)`, ASCII-only case folding (match both cases with a class such as `[kK]`)".into(),
        );
    }
    let mut e = Emit {
        out,
        flags: p.flags,
    };
    if let Err(why) = e.alt(&body) {
        return Pattern::Unsupported(why);
    }
    let out = e.out;
    match fancy_regex::Regex::new(&out) {
        Ok(_) => Pattern::Regex(out),
        Err(err) => Pattern::Unsupported(format!(
            "a construct loopbox's regex engine cannot run ({err})"
        )),
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Flags {
    i: bool,
    m: bool,
    s: bool,
    x: bool,
    a: bool,
}

enum Error {
    /// Python's `re.error`: the pattern is plain text.
    Python(String),
    /// Python compiles it; Rust cannot match it alike.
    Rust(String),
}

fn py<T>(msg: impl Into<String>) -> Result<T, Error> {
    Err(Error::Python(msg.into()))
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Cat {
    Digit(bool),
    Space(bool),
    Word(bool),
}

#[derive(Debug, Clone, PartialEq)]
enum Item {
    Lit(char),
    Range(char, char),
    Cat(Cat),
}

#[derive(Debug, Clone, PartialEq)]
enum At {
    Begin,
    End,
    BeginString,
    EndString,
    Boundary,
    NonBoundary,
}

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Greedy,
    Lazy,
    Possessive,
}

type Alt = Vec<Vec<Node>>;

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Lit(char),
    Any,
    Class(bool, Vec<Item>),
    Cat(Cat),
    At(At),
    /// A group: capturing or not, with scoped flags `(?i-s:...)` (add, remove).
    Group(bool, Option<(Flags, Flags)>, Alt),
    Atomic(Alt),
    Look {
        behind: bool,
        negate: bool,
        body: Alt,
    },
    Ref(usize),
    Cond(usize, Vec<Node>, Option<Vec<Node>>),
    Repeat(u32, Option<u32>, Kind, Box<Node>),
}

/// Python's `MAXREPEAT - 1`, the largest count it takes.
const MAX_COUNT: u64 = u32::MAX as u64 - 1;

struct Parser {
    chars: Vec<char>,
    i: usize,
    /// Groups opened so far.
    groups: usize,
    /// `closed[g]`: group `g + 1` is closed, with its width.
    closed: Vec<Option<(u64, u64)>>,
    names: Vec<(String, usize)>,
    /// The global flags (`(?i)` at the start).
    flags: Flags,
    /// Groups opened before the lookbehind being parsed.
    lookbehind: Option<usize>,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.i).copied()
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn get(&mut self) -> Option<char> {
        let c = self.peek();
        if c.is_some() {
            self.i += 1;
        }
        c
    }

    /// `a|b|c` (`_parse_sub`).
    fn alternation(&mut self, verbose: bool, top: bool) -> Result<Alt, Error> {
        let mut items = Vec::new();
        let mut verbose = verbose;
        loop {
            items.push(self.sequence(verbose, top && items.is_empty())?);
            if !self.eat('|') {
                break;
            }
            if top {
                verbose = self.flags.x;
            }
        }
        Ok(items)
    }

    /// One branch (`_parse`), up to `|`, `)` or the end.
    fn sequence(&mut self, mut verbose: bool, first: bool) -> Result<Vec<Node>, Error> {
        let mut seq: Vec<Node> = Vec::new();
        while let Some(c) = self.peek() {
            if c == '|' || c == ')' {
                break;
            }
            self.i += 1;
            if verbose {
                if " \t\n\r\x0b\x0c".contains(c) {
                    continue;
                }
                if c == '#' {
                    while let Some(c) = self.get() {
                        if c == '\n' {
                            break;
                        }
                    }
                    continue;
                }
            }
            match c {
                '\\' => {
                    let n = self.escape()?;
                    seq.push(n);
                }
                '[' => seq.push(self.class()?),
                '*' | '+' | '?' | '{' => {
                    let here = self.i;
                    let (min, max) = match c {
                        '*' => (0, None),
                        '+' => (1, None),
                        '?' => (0, Some(1)),
                        _ => match self.braces()? {
                            Some(q) => q,
                            None => {
                                self.i = here;
                                seq.push(Node::Lit('{'));
                                continue;
                            }
                        },
                    };
                    let item = match seq.pop() {
                        None | Some(Node::At(_)) => return py("nothing to repeat"),
                        Some(Node::Repeat(..)) => return py("multiple repeat"),
                        Some(n) => n,
                    };
                    let kind = if self.eat('?') {
                        Kind::Lazy
                    } else if self.eat('+') {
                        Kind::Possessive
                    } else {
                        Kind::Greedy
                    };
                    seq.push(Node::Repeat(min, max, kind, Box::new(item)));
                }
                '.' => seq.push(Node::Any),
                '^' => seq.push(Node::At(At::Begin)),
                '$' => seq.push(Node::At(At::End)),
                '(' => {
                    if let Some(n) = self.group(&mut verbose, first && seq.is_empty())? {
                        seq.push(n);
                    }
                }
                c => seq.push(Node::Lit(c)),
            }
        }
        Ok(seq)
    }

    /// After `{`: `Some((min, max))` for a quantifier, `None` for a literal `{`.
    fn braces(&mut self) -> Result<Option<(u32, Option<u32>)>, Error> {
        if self.peek() == Some('}') {
            return Ok(None);
        }
        let digits = |p: &mut Self| {
            let mut s = String::new();
            while let Some(c) = p.peek().filter(char::is_ascii_digit) {
                s.push(c);
                p.i += 1;
            }
            s
        };
        let lo = digits(self);
        let hi = if self.eat(',') {
            digits(self)
        } else {
            lo.clone()
        };
        if !self.eat('}') {
            return Ok(None);
        }
        let count = |s: &str| -> Result<Option<u32>, Error> {
            if s.is_empty() {
                return Ok(None);
            }
            match s.parse::<u64>() {
                Ok(n) if n <= MAX_COUNT => Ok(Some(n as u32)),
                _ => py("the repetition number is too large"),
            }
        };
        let min = count(&lo)?.unwrap_or(0);
        let max = count(&hi)?;
        if max.is_some_and(|m| m < min) {
            return py("min repeat greater than max repeat");
        }
        Ok(Some((min, max)))
    }

    fn hex(&mut self, n: usize, escape: &str) -> Result<char, Error> {
        let mut s = String::new();
        while s.len() < n
            && let Some(c) = self.peek().filter(char::is_ascii_hexdigit)
        {
            s.push(c);
            self.i += 1;
        }
        if s.len() != n {
            return py(format!("incomplete escape {escape}{s}"));
        }
        let v = u32::from_str_radix(&s, 16).unwrap_or(u32::MAX);
        match char::from_u32(v) {
            Some(c) => Ok(c),
            // A surrogate: Python matches it, Rust text never holds one.
            None if v < 0x110000 => Err(Error::Rust(format!(
                "`{escape}{s}`, a surrogate (Rust text never holds one)"
            ))),
            None => py(format!("bad escape {escape}{s}")),
        }
    }

    /// The escapes both forms share (`\x`, `\u`, `\U`, `\N`, the letters);
    /// `None` for what the caller reads differently.
    fn common_escape(&mut self, c: char) -> Result<Option<char>, Error> {
        Ok(Some(match c {
            'a' => '\x07',
            'f' => '\x0c',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'v' => '\x0b',
            '\\' => '\\',
            'x' => self.hex(2, "\\x")?,
            'u' => self.hex(4, "\\u")?,
            'U' => self.hex(8, "\\U")?,
            'N' => {
                return Err(Error::Rust(
                    "`\\N{...}`, a character by its name (write the character itself)".into(),
                ));
            }
            _ => return Ok(None),
        }))
    }

    fn category(c: char) -> Option<Cat> {
        Some(match c {
            'd' => Cat::Digit(false),
            'D' => Cat::Digit(true),
            's' => Cat::Space(false),
            'S' => Cat::Space(true),
            'w' => Cat::Word(false),
            'W' => Cat::Word(true),
            _ => return None,
        })
    }

    /// An escape outside a class (`_escape`).
    fn escape(&mut self) -> Result<Node, Error> {
        let Some(c) = self.get() else {
            return py("bad escape (end of pattern)");
        };
        if let Some(cat) = Self::category(c) {
            return Ok(Node::Cat(cat));
        }
        match c {
            'A' => return Ok(Node::At(At::BeginString)),
            'Z' => return Ok(Node::At(At::EndString)),
            'b' => return Ok(Node::At(At::Boundary)),
            'B' => return Ok(Node::At(At::NonBoundary)),
            _ => {}
        }
        if let Some(l) = self.common_escape(c)? {
            return Ok(Node::Lit(l));
        }
        if c == '0' {
            let mut v = 0u32;
            for _ in 0..2 {
                match self.peek().and_then(|d| d.to_digit(8)) {
                    Some(d) => {
                        v = v * 8 + d;
                        self.i += 1;
                    }
                    None => break,
                }
            }
            return Ok(Node::Lit(char::from_u32(v).unwrap_or('\0')));
        }
        if let Some(d1) = c.to_digit(10) {
            let mut group = d1 as usize;
            if let Some(d2) = self.peek().and_then(|d| d.to_digit(10)) {
                self.i += 1;
                if let Some(d3) = self.peek().and_then(|d| d.to_digit(8))
                    && d1 < 8
                    && d2 < 8
                {
                    self.i += 1;
                    let v = d1 * 64 + d2 * 8 + d3;
                    if v > 0o377 {
                        return py("octal escape value outside of range 0-0o377");
                    }
                    return Ok(Node::Lit(char::from_u32(v).unwrap_or('\0')));
                }
                group = group * 10 + d2 as usize;
            }
            return self.reference(group);
        }
        if c.is_ascii_alphabetic() {
            return py(format!("bad escape \\{c}"));
        }
        Ok(Node::Lit(c))
    }

    /// A reference to group `g` (1-based), as Python checks it.
    fn reference(&mut self, g: usize) -> Result<Node, Error> {
        if g == 0 || g > self.groups {
            return py(format!("invalid group reference {g}"));
        }
        if self.closed.get(g - 1).copied().flatten().is_none() {
            return py("cannot refer to an open group");
        }
        if self.lookbehind.is_some_and(|first| g > first) {
            return py("cannot refer to group defined in the same lookbehind subpattern");
        }
        Ok(Node::Ref(g))
    }

    /// A character class (`[...]`).
    fn class(&mut self) -> Result<Node, Error> {
        let negate = self.eat('^');
        let mut items: Vec<Item> = Vec::new();
        loop {
            let Some(c) = self.get() else {
                return py("unterminated character set");
            };
            if c == ']' && !items.is_empty() {
                break;
            }
            let first = if c == '\\' {
                self.class_escape()?
            } else {
                Item::Lit(c)
            };
            if self.eat('-') {
                let Some(that) = self.get() else {
                    return py("unterminated character set");
                };
                if that == ']' {
                    items.push(first);
                    items.push(Item::Lit('-'));
                    break;
                }
                let second = if that == '\\' {
                    self.class_escape()?
                } else {
                    Item::Lit(that)
                };
                match (first, second) {
                    (Item::Lit(lo), Item::Lit(hi)) if lo <= hi => items.push(Item::Range(lo, hi)),
                    _ => return py("bad character range"),
                }
            } else {
                items.push(first);
            }
        }
        Ok(Node::Class(negate, items))
    }

    /// An escape inside a class (`_class_escape`).
    fn class_escape(&mut self) -> Result<Item, Error> {
        let Some(c) = self.get() else {
            return py("bad escape (end of pattern)");
        };
        if let Some(cat) = Self::category(c) {
            return Ok(Item::Cat(cat));
        }
        if c == 'b' {
            return Ok(Item::Lit('\x08'));
        }
        if let Some(l) = self.common_escape(c)? {
            return Ok(Item::Lit(l));
        }
        if let Some(d) = c.to_digit(8) {
            let mut v = d;
            for _ in 0..2 {
                match self.peek().and_then(|d| d.to_digit(8)) {
                    Some(d) => {
                        v = v * 8 + d;
                        self.i += 1;
                    }
                    None => break,
                }
            }
            if v > 0o377 {
                return py("octal escape value outside of range 0-0o377");
            }
            return Ok(Item::Lit(char::from_u32(v).unwrap_or('\0')));
        }
        if c.is_ascii_alphanumeric() {
            return py(format!("bad escape \\{c}"));
        }
        Ok(Item::Lit(c))
    }

    fn name(&mut self, end: char) -> Result<String, Error> {
        let mut s = String::new();
        loop {
            match self.get() {
                None => return py("missing group name"),
                Some(c) if c == end => break,
                Some(c) => s.push(c),
            }
        }
        let ident = s
            .chars()
            .next()
            .is_some_and(|c| c == '_' || c.is_alphabetic())
            && s.chars().all(|c| c == '_' || c.is_alphanumeric());
        if !ident {
            return py(format!("bad character in group name {s:?}"));
        }
        Ok(s)
    }

    /// After `(`: a group, or `None` for a comment or global flags.
    fn group(&mut self, verbose: &mut bool, first: bool) -> Result<Option<Node>, Error> {
        let mut capture = true;
        let mut name = None;
        let mut scoped = None;
        if self.eat('?') {
            let Some(c) = self.get() else {
                return py("unexpected end of pattern");
            };
            match c {
                'P' if self.eat('<') => {
                    let n = self.name('>')?;
                    if self.names.iter().any(|(m, _)| *m == n) {
                        return py(format!("redefinition of group name {n:?}"));
                    }
                    name = Some(n);
                }
                'P' if self.eat('=') => {
                    let n = self.name(')')?;
                    let Some(&(_, g)) = self.names.iter().find(|(m, _)| *m == n) else {
                        return py(format!("unknown group name {n:?}"));
                    };
                    return self.reference(g).map(Some);
                }
                'P' => return py("unknown extension ?P"),
                ':' => capture = false,
                '#' => {
                    loop {
                        match self.get() {
                            None => return py("missing ), unterminated comment"),
                            Some(')') => break,
                            Some(_) => {}
                        }
                    }
                    return Ok(None);
                }
                '=' | '!' | '<' => {
                    let (behind, kind) = if c == '<' {
                        match self.get() {
                            Some(k @ ('=' | '!')) => (true, k),
                            _ => return py("unknown extension ?<"),
                        }
                    } else {
                        (false, c)
                    };
                    let outer = self.lookbehind;
                    if behind && outer.is_none() {
                        self.lookbehind = Some(self.groups);
                    }
                    let body = self.alternation(*verbose, false)?;
                    if behind && outer.is_none() {
                        self.lookbehind = None;
                    }
                    if !self.eat(')') {
                        return py("missing ), unterminated subpattern");
                    }
                    if behind {
                        let (lo, hi) = self.width_alt(&body);
                        if lo != hi {
                            return py("look-behind requires fixed-width pattern");
                        }
                    }
                    return Ok(Some(Node::Look {
                        behind,
                        negate: kind == '!',
                        body,
                    }));
                }
                '(' => {
                    let cond = self.name_or_number()?;
                    let yes = self.sequence(*verbose, false)?;
                    let no = if self.eat('|') {
                        let no = self.sequence(*verbose, false)?;
                        if self.peek() == Some('|') {
                            return py("conditional backref with more than two branches");
                        }
                        Some(no)
                    } else {
                        None
                    };
                    if !self.eat(')') {
                        return py("missing ), unterminated subpattern");
                    }
                    return Ok(Some(Node::Cond(cond, yes, no)));
                }
                '>' => {
                    let body = self.alternation(*verbose, false)?;
                    if !self.eat(')') {
                        return py("missing ), unterminated subpattern");
                    }
                    return Ok(Some(Node::Atomic(body)));
                }
                c if "aiLmsux-".contains(c) => match self.flags_of(c)? {
                    None => {
                        if !first {
                            return py("global flags not at the start of the expression");
                        }
                        *verbose = self.flags.x;
                        return Ok(None);
                    }
                    Some(f) => {
                        capture = false;
                        scoped = Some(f);
                    }
                },
                c => return py(format!("unknown extension ?{c}")),
            }
        }
        let index = if capture {
            self.groups += 1;
            self.closed.push(None);
            if let Some(n) = name {
                self.names.push((n, self.groups));
            }
            Some(self.groups)
        } else {
            None
        };
        let sub_verbose = match scoped {
            Some((add, del)) => (*verbose || add.x) && !del.x,
            None => *verbose,
        };
        let body = self.alternation(sub_verbose, false)?;
        if !self.eat(')') {
            return py("missing ), unterminated subpattern");
        }
        if let Some(g) = index {
            self.closed[g - 1] = Some(self.width_alt(&body));
        }
        Ok(Some(Node::Group(index.is_some(), scoped, body)))
    }

    fn name_or_number(&mut self) -> Result<usize, Error> {
        let mut s = String::new();
        loop {
            match self.get() {
                None => return py("missing group name"),
                Some(')') => break,
                Some(c) => s.push(c),
            }
        }
        if let Some(&(_, g)) = self.names.iter().find(|(m, _)| *m == s) {
            return Ok(g);
        }
        match s.parse::<usize>() {
            // A later group may be named: Python checks at the end.
            Ok(g) if g > 0 && s.bytes().all(|b| b.is_ascii_digit()) => {
                if g > self.groups {
                    return Err(Error::Rust(
                        "a condition on a group defined after it (define the group first)".into(),
                    ));
                }
                Ok(g)
            }
            _ => py(format!("bad character in group name {s:?}")),
        }
    }

    /// Inline flags after `(?`: `None` when global (`(?i)`), else the scoped
    /// ones added and removed (`(?i-s:`).
    fn flags_of(&mut self, mut c: char) -> Result<Option<(Flags, Flags)>, Error> {
        let set = |f: &mut Flags, c: char| -> Result<(), Error> {
            match c {
                'i' => f.i = true,
                'm' => f.m = true,
                's' => f.s = true,
                'x' => f.x = true,
                'a' => f.a = true,
                'u' => {}
                'L' => return py("bad inline flags: cannot use 'L' flag with a str pattern"),
                _ => return py("unknown flag"),
            }
            Ok(())
        };
        let mut add = Flags::default();
        let mut del = Flags::default();
        let mut types = 0;
        if c != '-' {
            loop {
                if c == 'a' || c == 'u' {
                    types += 1;
                }
                set(&mut add, c)?;
                if types > 1 {
                    return py("bad inline flags: flags 'a', 'u' and 'L' are incompatible");
                }
                match self.get() {
                    None => return py("missing -, : or )"),
                    Some(n) if ")-:".contains(n) => {
                        c = n;
                        break;
                    }
                    Some(n) => c = n,
                }
            }
        }
        if c == ')' {
            let g = &mut self.flags;
            g.i |= add.i;
            g.m |= add.m;
            g.s |= add.s;
            g.x |= add.x;
            g.a |= add.a;
            return Ok(None);
        }
        if c == '-' {
            loop {
                match self.get() {
                    None => return py("missing :"),
                    Some(':') if del != Flags::default() => break,
                    Some('a' | 'u' | 'L') => {
                        return py("bad inline flags: cannot turn off flags 'a', 'u' and 'L'");
                    }
                    Some(n) => set(&mut del, n)?,
                }
            }
        }
        if (add.i && del.i) || (add.m && del.m) || (add.s && del.s) || (add.x && del.x) {
            return py("bad inline flags: flag turned on and off");
        }
        Ok(Some((add, del)))
    }

    /// `(min, max)` characters a branch list matches (`getwidth`); `u64::MAX` is unbounded.
    fn width_alt(&self, alt: &Alt) -> (u64, u64) {
        let mut lo = u64::MAX;
        let mut hi = 0;
        for seq in alt {
            let (l, h) = self.width_seq(seq);
            lo = lo.min(l);
            hi = hi.max(h);
        }
        (lo, hi)
    }

    fn width_seq(&self, seq: &[Node]) -> (u64, u64) {
        seq.iter().fold((0, 0), |(lo, hi), n| {
            let (l, h) = self.width(n);
            (lo.saturating_add(l), hi.saturating_add(h))
        })
    }

    fn width(&self, n: &Node) -> (u64, u64) {
        match n {
            Node::Lit(_) | Node::Any | Node::Class(..) | Node::Cat(_) => (1, 1),
            Node::At(_) | Node::Look { .. } => (0, 0),
            Node::Group(_, _, alt) | Node::Atomic(alt) => self.width_alt(alt),
            Node::Ref(g) => self.closed[g - 1].unwrap_or((0, 0)),
            Node::Cond(_, yes, no) => {
                let (l, h) = self.width_seq(yes);
                match no {
                    Some(no) => {
                        let (l2, h2) = self.width_seq(no);
                        (l.min(l2), h.max(h2))
                    }
                    None => (0, h),
                }
            }
            Node::Repeat(min, max, _, item) => {
                let (l, h) = self.width(item);
                let hi = match max {
                    None if h > 0 => u64::MAX,
                    None => 0,
                    Some(m) => h.saturating_mul(u64::from(*m)),
                };
                (l.saturating_mul(u64::from(*min)), hi)
            }
        }
    }
}

/// Python's `str.isspace()`: what `\s` matches and `str.strip()` strips.
pub fn is_space(c: char) -> bool {
    matches!(c, '\t'..='\r' | '\x1c'..='\x20' | '\u{85}' | '\u{a0}' | '\u{1680}' | '\u{2000}'..='\u{200a}' | '\u{2028}' | '\u{2029}' | '\u{202f}' | '\u{205f}' | '\u{3000}')
}

/// Python's `re.escape`: the characters it escapes, backslashed.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if "()[]{}?*+-|^$\\.&~# \t\n\r\x0b\x0c".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Python's Unicode `\w`: `str.isalnum()` or `_`.
const WORD: &str = r"\p{L}\p{N}_";
/// Python's Unicode `\s`: `str.isspace()`.
const SPACE: &str = r"\t\n\x0B\x0C\r\x1C-\x1F \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}";

struct Emit {
    out: String,
    flags: Flags,
}

impl Emit {
    fn alt(&mut self, alt: &Alt) -> Result<(), String> {
        for (k, seq) in alt.iter().enumerate() {
            if k > 0 {
                self.out.push('|');
            }
            self.seq(seq)?;
        }
        Ok(())
    }

    fn seq(&mut self, seq: &[Node]) -> Result<(), String> {
        seq.iter().try_for_each(|n| self.node(n))
    }

    fn lit(&mut self, c: char) {
        if c.is_ascii_alphanumeric() || c == '_' {
            self.out.push(c);
        } else {
            self.out.push_str(&format!("\\x{{{:X}}}", c as u32));
        }
    }

    /// A category's members, to sit inside `[...]`.
    fn cat_members(&self, cat: Cat) -> (bool, &'static str) {
        let a = self.flags.a;
        match cat {
            Cat::Digit(n) => (n, if a { "0-9" } else { r"\p{Nd}" }),
            Cat::Word(n) => (n, if a { "0-9A-Za-z_" } else { WORD }),
            Cat::Space(n) => (n, if a { r"\t\n\x0B\x0C\r " } else { SPACE }),
        }
    }

    fn cat(&mut self, cat: Cat) {
        let (negate, members) = self.cat_members(cat);
        self.out
            .push_str(&format!("[{}{members}]", if negate { "^" } else { "" }));
    }

    fn word(&self) -> String {
        format!("[{}]", self.cat_members(Cat::Word(false)).1)
    }

    fn node(&mut self, n: &Node) -> Result<(), String> {
        match n {
            Node::Lit(c) => self.lit(*c),
            Node::Any if self.flags.s => self.out.push_str(r"(?s:.)"),
            Node::Any => self.out.push_str(r"[^\n]"),
            Node::Cat(c) => self.cat(*c),
            Node::Class(negate, items) => {
                self.out.push('[');
                if *negate {
                    self.out.push('^');
                }
                for item in items {
                    match item {
                        Item::Lit(c) => self.class_lit(*c),
                        Item::Range(lo, hi) => {
                            self.class_lit(*lo);
                            self.out.push('-');
                            self.class_lit(*hi);
                        }
                        Item::Cat(c) => {
                            let (neg, members) = self.cat_members(*c);
                            if neg {
                                self.out.push_str(&format!("[^{members}]"));
                            } else {
                                self.out.push_str(members);
                            }
                        }
                    }
                }
                self.out.push(']');
            }
            Node::At(at) => {
                let w = self.word();
                let s = match at {
                    At::Begin if self.flags.m => "(?m:^)".to_string(),
                    At::Begin | At::BeginString => r"\A".to_string(),
                    At::End if self.flags.m => "(?m:$)".to_string(),
                    // Python: the end, or before a newline that ends the text.
                    At::End => r"(?:\z|(?=\n\z))".to_string(),
                    At::EndString => r"\z".to_string(),
                    At::Boundary if self.flags.a => r"(?-u:\b)".to_string(),
                    At::Boundary => format!("(?:(?<={w})(?!{w})|(?<!{w})(?={w}))"),
                    At::NonBoundary if self.flags.a => r"(?-u:\B)(?!\A\z)".to_string(),
                    // Python 3.11's `\B` never matches an empty text.
                    At::NonBoundary => format!("(?:(?<={w})(?={w})|(?<!{w})(?!{w})(?!\\A\\z))"),
                };
                self.out.push_str(&s);
            }
            Node::Group(capture, scoped, alt) => {
                let saved = self.flags;
                let mut open = if *capture { "(" } else { "(?:" }.to_string();
                if let Some((add, del)) = scoped {
                    let f = &mut self.flags;
                    f.i = (f.i || add.i) && !del.i;
                    f.m = (f.m || add.m) && !del.m;
                    f.s = (f.s || add.s) && !del.s;
                    f.a = f.a || add.a;
                    if f.i && f.a {
                        return Err("`(?a)` with `(?i)`, ASCII-only case folding (match both cases with a class such as `[kK]`)".into());
                    }
                    if add.i {
                        open = "(?i:".into();
                    } else if del.i {
                        open = "(?-i:".into();
                    }
                }
                self.out.push_str(&open);
                self.alt(alt)?;
                self.out.push(')');
                self.flags = saved;
            }
            Node::Atomic(alt) => {
                self.out.push_str("(?>");
                self.alt(alt)?;
                self.out.push(')');
            }
            Node::Look {
                behind,
                negate,
                body,
            } => {
                self.out.push_str(match (behind, negate) {
                    (false, false) => "(?=",
                    (false, true) => "(?!",
                    (true, false) => "(?<=",
                    (true, true) => "(?<!",
                });
                self.alt(body)?;
                self.out.push(')');
            }
            Node::Ref(g) => self.out.push_str(&format!("(?:\\{g})")),
            Node::Cond(g, yes, no) => {
                self.out.push_str(&format!("(?({g})"));
                self.seq(yes)?;
                self.out.push('|');
                if let Some(no) = no {
                    self.seq(no)?;
                }
                self.out.push(')');
            }
            Node::Repeat(min, max, kind, item) => {
                if *kind == Kind::Possessive {
                    self.out.push_str("(?>");
                }
                self.out.push_str("(?:");
                self.node(item)?;
                self.out.push(')');
                match max {
                    Some(m) => self.out.push_str(&format!("{{{min},{m}}}")),
                    None => self.out.push_str(&format!("{{{min},}}")),
                }
                match kind {
                    Kind::Lazy => self.out.push('?'),
                    Kind::Possessive => self.out.push(')'),
                    Kind::Greedy => {}
                }
            }
        }
        Ok(())
    }

    fn class_lit(&mut self, c: char) {
        if c.is_ascii_alphanumeric() {
            self.out.push(c);
        } else {
            self.out.push_str(&format!("\\x{{{:X}}}", c as u32));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `re.search(pattern, text)` as little-loops 1.167.0 under Python 3.11
    /// answers it; `None` where Python refuses the pattern.
    fn search(pattern: &str, text: &str) -> Option<bool> {
        match translate(pattern) {
            Pattern::Regex(r) => Some(fancy_regex::Regex::new(&r).unwrap().is_match(text).unwrap()),
            Pattern::Text(_) => None,
            Pattern::Unsupported(why) => panic!("{pattern}: unsupported: {why}"),
        }
    }

    /// Each row as Python 3.11's `re.search` answered it.
    #[test]
    fn patterns_match_as_python_re_matches() {
        let cases: &[(&str, &str, Option<bool>)] = &[
            ("done$", "done\n", Some(true)),
            ("done$", "done\n\n", Some(false)),
            (r"^\S+$\n", "done\n", Some(true)),
            (r"done\Z", "done\n", Some(false)),
            (r"done\Z", "done", Some(true)),
            (r"\Aok", "ok", Some(true)),
            (r"\Aok", "x\nok", Some(false)),
            ("(?m)^ok$", "x\nok\ny", Some(true)),
            ("^ok", "x\nok", Some(false)),
            (r"(?P<w>\w+) (?P=w)", "go go", Some(true)),
            (r"(?P<w>\w+) (?P=w)", "go to", Some(false)),
            (r"\d passed", "٣ passed", Some(true)),
            (r"(?a)\d", "٣", Some(false)),
            ("^\\w+$", "e\u{301}", Some(false)),
            ("^\\w+$", "x²", Some(true)),
            (r"a\sb", "a\x1fb", Some(true)),
            (r"a\sb", "a\u{a0}b", Some(true)),
            (r"\bword\b", "a word.", Some(true)),
            (r"\bword\b", "swordfish", Some(false)),
            (r"\B", "", Some(false)),
            (r"^x{,3}y", "xxy", Some(true)),
            ("a{}", "a{}", Some(true)),
            ("a{x}", "a{x}", Some(true)),
            ("a{1,x}", "a{1,x}", Some(true)),
            ("a{,}", "aaa", Some(true)),
            (r"x\<", "x<", Some(true)),
            (r"\x41\u0042\U00000043\101", "ABCA", Some(true)),
            ("[[:digit:]]", "5", Some(false)),
            ("[[:digit:]]", ":]", Some(true)),
            ("[]a]", "]", Some(true)),
            ("[^]a]", "]", Some(false)),
            (r"[\d-]", "-", Some(true)),
            (r"[\b]", "\x08", Some(true)),
            (r"[a&&b]", "&", Some(true)),
            ("(?#note)ok", "ok", Some(true)),
            ("(?x) o k # comment", "ok", Some(true)),
            ("(?x)[ ]", " ", Some(true)),
            ("(?i)ok", "OK", Some(true)),
            ("(?i:o)k", "Ok", Some(true)),
            ("(?i:o)k", "OK", Some(false)),
            ("(?s).", "\n", Some(true)),
            (".", "\n", Some(false)),
            ("(?s:a.)b", "a\nb", Some(true)),
            ("(?>a+)b", "aab", Some(true)),
            ("a*+a", "aaa", Some(false)),
            ("a{2}+", "aa", Some(true)),
            ("(?<=a{2})x", "aax", Some(true)),
            ("PASS(?!ED)", "PASSED", Some(false)),
            (r"(\w+) \1", "no no", Some(true)),
            ("(a)?(?(1)b|c)", "c", Some(true)),
            // Python refuses these; little-loops then looks for the text.
            (r"done\z", "done", None),
            (r"\p{L}", "a", None),
            ("(?<n>a)", "a", None),
            ("(?<=a|bc)x", "bcx", None),
            ("^*", "a", None),
            ("a**", "a", None),
            ("a(?i)", "A", None),
            (r"\1(a)", "a", None),
            (r"(a\1)", "a", None),
            (r"[a-\d]", "a", None),
            ("[z-a]", "a", None),
            ("x{2,1}", "xx", None),
            ("(?L)a", "a", None),
            ("a)", "a)", None),
            ("(?", "(?", None),
            (r"\8", "8", None),
            ("{1}", "{1}", None),
        ];
        for (pattern, text, want) in cases {
            assert_eq!(
                search(pattern, text),
                *want,
                "re.search({pattern:?}, {text:?})"
            );
        }
    }

    #[test]
    fn what_rust_cannot_match_is_named() {
        for (pattern, want) in [
            (r"\N{EM DASH}", "by its name"),
            (r"\ud800", "surrogate"),
            ("(?ai)k", "case folding"),
        ] {
            match translate(pattern) {
                Pattern::Unsupported(why) => assert!(why.contains(want), "{pattern}: {why}"),
                other => panic!("{pattern}: {other:?}"),
            }
        }
    }
}
