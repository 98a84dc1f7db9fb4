//! `${namespace.path}` interpolation in actions and evaluator fields.
//!
//! Namespaces: `context.*`, `captured.NAME.*` (`output`, `exit_code`,
//! `stderr`, `duration_ms`, `result.*` from an ACTION_RESULT block), `prev.*`
//! (the previous state's `output`, `exit_code`, `stderr`, `state`, `result`),
//! `state.name`, `state.iteration`, `loop.name`, `loop.step`,
//! `loop.elapsed_ms`, `loop.elapsed`, `param.*` (a fragment's `with:`
//! bindings), `messages` (the log `append_to_messages` keeps: `.output`,
//! `.last(N)`, `.summary`) and `env.NAME` (`PWD` the workspace directory, else a variable
//! loopbox.toml passes to commands, see [`crate::check::env_refs`]).
//! Suffixes as little-loops 1.167 reads them: `:default=TEXT` (missing is
//! TEXT), `?` (missing is empty) and `:shell` (quoted as one shell word, like
//! Python's `shlex.quote`, the fallback too); `:shell` combines with either
//! (`:shell:default=x`, `:default=x:shell`, `?:shell`, `:shell?`), the other
//! two do not. `$${` is a literal `${`. A missing reference
//! without a suffix is an error that names it. Values read as little-loops'
//! Python `str()` writes them: `True`, `3.0`, `['a', 'b']`.

use serde_json::Value;

use crate::spec::Release;

pub const NAMESPACES: &[&str] = &[
    "context", "captured", "prev", "state", "loop", "param", "env", "messages",
];

#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    Text(String),
    Ref(Ref),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Ref {
    /// `["captured", "tests", "output"]`.
    pub path: Vec<String>,
    pub default: Option<String>,
    pub optional: bool,
    /// `:shell`: the value quoted as one shell word.
    pub shell: bool,
    /// `:shell` with `:default=` or `?`, which little-loops reads from 1.159.
    pub combined: bool,
    /// The reference as written, `${...}` included.
    pub raw: String,
}

/// Split a template into text and references; syntax errors name the spot.
pub fn parse(template: &str) -> Result<Vec<Piece>, String> {
    scan(template).into_iter().collect()
}

/// Every piece of a template, each reference parsed on its own, so one bad
/// reference does not hide the others.
fn scan(template: &str) -> Vec<Result<Piece, String>> {
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut rest = template;
    while let Some(i) = rest.find('$') {
        text.push_str(&rest[..i]);
        let after = &rest[i..];
        if let Some(r) = after.strip_prefix("$${") {
            text.push_str("${");
            rest = r;
        } else if let Some(body_start) = after.strip_prefix("${") {
            if !text.is_empty() {
                pieces.push(Ok(Piece::Text(std::mem::take(&mut text))));
            }
            let Some(end) = body_start.find('}') else {
                pieces.push(Err(format!("`{}` is not closed with `}}`", shorten(after))));
                return pieces;
            };
            let body = &body_start[..end];
            pieces.push(parse_ref(body, format!("${{{body}}}")).map(Piece::Ref));
            rest = &body_start[end + 1..];
        } else {
            text.push('$');
            rest = &after[1..];
        }
    }
    text.push_str(rest);
    if !text.is_empty() {
        pieces.push(Ok(Piece::Text(text)));
    }
    pieces
}

fn parse_ref(body: &str, raw: String) -> Result<Ref, String> {
    let (expr, default, optional, shell) = suffixes(body, &raw)?;
    let expr = expr.trim();
    if expr.is_empty() {
        return Err(format!(
            "`{raw}` is empty: write `${{context.NAME}}`, `${{captured.NAME.output}}` and so on"
        ));
    }
    let path: Vec<String> = expr.split('.').map(str::to_string).collect();
    if path.iter().any(|p| p.is_empty()) {
        return Err(format!("`{raw}` has an empty part in its path"));
    }
    let ns = path[0].as_str();
    if ns == "env" && path.len() > 2 {
        return Err(format!(
            "`{raw}`: an environment variable is one name, like `env.HOME`"
        ));
    }
    if !NAMESPACES.contains(&ns) {
        return Err(format!(
            "`{raw}`: unknown namespace `{ns}` (namespaces: {})",
            NAMESPACES.join(", ")
        ));
    }
    // `${messages}` alone is the whole log (little-loops).
    if path.len() < 2 && ns != "messages" {
        return Err(format!(
            "`{raw}` names a whole namespace; add a field, like `{ns}.{}`",
            example(ns)
        ));
    }
    Ok(Ref {
        path,
        combined: shell && (default.is_some() || optional),
        default,
        optional,
        shell,
        raw,
    })
}

/// The `:default=`, `?` and `:shell` chain off a reference's body, as
/// little-loops 1.167's `parse_interpolation_suffixes` reads it: `:shell`
/// counts just before `:default=` or at the very end (after a default's text
/// or after `?`), anything else is the default's literal text; `?` with
/// `:default=` is ambiguous. What a given release refuses when the state
/// runs (a chain before 1.159, a `{` in a default from it) is
/// [`release_refuses`]'s.
/// Returns `(path, default, optional, shell)`.
pub(crate) fn suffixes<'a>(
    body: &'a str,
    raw: &str,
) -> Result<(std::borrow::Cow<'a, str>, Option<String>, bool, bool), String> {
    use std::borrow::Cow;
    let mut shell = false;
    let mut rest: Cow<'a, str> = Cow::Borrowed(body);
    if body.contains(":shell:default=") {
        rest = Cow::Owned(body.replacen(":shell:default=", ":default=", 1));
        shell = true;
    } else if let Some(e) = body.strip_suffix(":shell?") {
        rest = Cow::Owned(format!("{e}?"));
        shell = true;
    } else if let Some(e) = body.strip_suffix(":shell") {
        rest = Cow::Borrowed(e);
        shell = true;
    }
    if let Some((e, d)) = rest.split_once(":default=") {
        if e.ends_with('?') {
            return Err(format!(
                "`{raw}`: `:default=` and `?` cannot be combined (a missing value is either the default or empty): keep one"
            ));
        }
        let (e, d) = (e.to_string(), d.to_string());
        return Ok((Cow::Owned(e), Some(d), false, shell));
    }
    match rest.strip_suffix('?') {
        Some(e) => Ok((Cow::Owned(e.to_string()), None, true, shell)),
        None => Ok((rest, None, false, shell)),
    }
}

fn example(ns: &str) -> &'static str {
    match ns {
        "captured" => "NAME.output",
        "prev" => "output",
        "state" => "name",
        "loop" => "name",
        _ => "NAME",
    }
}

fn shorten(s: &str) -> String {
    s.chars().take(40).collect()
}

/// Every reference in a template, or why it is malformed (for static checks).
pub fn refs(template: &str) -> Vec<Result<Ref, String>> {
    scan(template)
        .into_iter()
        .filter_map(|p| match p {
            Ok(Piece::Ref(r)) => Some(Ok(r)),
            Ok(Piece::Text(_)) => None,
            Err(e) => Some(Err(e)),
        })
        .collect()
}

/// Looks a reference up: `None` when it does not exist (yet).
pub trait Scope {
    fn lookup(&self, path: &[String]) -> Result<Option<Value>, String>;
    /// The little-loops release whose reading of the suffixes applies
    /// (see [`release_refuses`]).
    fn release(&self) -> Release {
        Release::NEWEST
    }
}

/// Why `r` stops the state under `release`, as that release's engine raises
/// it when the state runs: before 1.159 `:shell` combined with a fallback,
/// from 1.159 a `:default=` value holding `{`.
pub fn release_refuses(r: &Ref, release: Release) -> Option<String> {
    if release < Release::SUFFIX_CHAINS && r.combined {
        Some(format!(
            "`{}`: little-loops {release} does not combine `:shell` with `:default=` or `?` (1.159 and later do); follow a later release (`little_loops:`), or drop one suffix",
            r.raw
        ))
    } else if release >= Release::SUFFIX_CHAINS
        && r.default.as_deref().is_some_and(|d| d.contains('{'))
    {
        Some(format!(
            "`{}`: a `:default=` value may not hold `{{` (the reference ends at the first `}}`; little-loops {release} stops here, 1.158 and earlier took it as text); put the text in `context` and refer to it",
            r.raw
        ))
    } else {
        None
    }
}

/// Fill in a template. Errors name the reference and why it is missing.
pub fn render(template: &str, scope: &dyn Scope) -> Result<String, String> {
    let mut out = String::new();
    for piece in parse(template)? {
        match piece {
            Piece::Text(t) => out.push_str(&t),
            Piece::Ref(r) if release_refuses(&r, scope.release()).is_some() => {
                return Err(release_refuses(&r, scope.release()).unwrap_or_default());
            }
            Piece::Ref(r) => match scope.lookup(&r.path)? {
                Some(v) if r.shell => out.push_str(&shell_quote(&as_text(&v))),
                Some(v) => out.push_str(&as_text(&v)),
                // The fallback is quoted too under `:shell`: a missing value
                // is still one shell word (`''` when empty).
                None if r.default.is_some() || r.optional => {
                    let fallback = r.default.as_deref().unwrap_or_default();
                    if r.shell {
                        out.push_str(&shell_quote(fallback))
                    } else {
                        out.push_str(fallback)
                    }
                }
                None => {
                    return Err(format!(
                        "`{}` refers to nothing: {}",
                        r.raw,
                        missing_hint(&r.path)
                    ));
                }
            },
        }
    }
    Ok(out)
}

fn missing_hint(path: &[String]) -> String {
    match path[0].as_str() {
        "captured" => format!(
            "no state has captured `{}` yet (add `:default=` or `?` if that can happen)",
            path[1]
        ),
        "prev" => "there is no previous state's result yet".into(),
        "env" => format!(
            "the environment variable `{}` is not set (a command sees only what loopbox.toml's `[shell] pass_env` names)",
            path[1]
        ),
        "context" => format!("`context` has no `{}`", path[1..].join(".")),
        _ => format!("`{}` is not defined", path.join(".")),
    }
}

/// How a value reads inside text, as little-loops' Python `str()` writes
/// it: strings as they are, null as nothing, `True`/`False`, whole floats
/// with `.0`, lists and mappings as Python literals.
pub fn as_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => python_repr(other),
    }
}

fn python_repr(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap_or_default();
            if f.fract() == 0.0 && f.abs() < 1e16 {
                format!("{f:.1}")
            } else {
                format!("{f}")
            }
        }
        Value::Number(n) => n.to_string(),
        Value::String(s) => {
            // Python quotes with ' unless the text has ' and no ".
            let q = if s.contains('\'') && !s.contains('"') {
                '"'
            } else {
                '\''
            };
            let mut out = String::from(q);
            for c in s.chars() {
                match c {
                    '\\' => out.push_str("\\\\"),
                    '\n' => out.push_str("\\n"),
                    '\t' => out.push_str("\\t"),
                    '\r' => out.push_str("\\r"),
                    c if c == q => {
                        out.push('\\');
                        out.push(c)
                    }
                    c => out.push(c),
                }
            }
            out.push(q);
            out
        }
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(python_repr).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(m) => format!(
            "{{{}}}",
            m.iter()
                .map(|(k, v)| format!(
                    "{}: {}",
                    python_repr(&Value::String(k.clone())),
                    python_repr(v)
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// `s` as one shell word, as Python's `shlex.quote` writes it: unchanged when
/// it is only safe characters, else in single quotes with each `'` as `'"'"'`.
pub fn shell_quote(s: &str) -> String {
    if s.is_empty() {
        return "''".into();
    }
    let safe = |c: char| c.is_ascii_alphanumeric() || "@%+=:,./-_".contains(c);
    if s.chars().all(safe) {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', "'\"'\"'"))
}

/// A number as text: whole numbers without a fraction (`3`, not `3.0`).
pub fn number_text(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

/// Follow `path` into a JSON value; numeric parts index lists.
pub fn walk<'a>(mut v: &'a Value, path: &[String]) -> Option<&'a Value> {
    for part in path {
        v = match v {
            Value::Object(m) => m.get(part)?,
            Value::Array(items) => items.get(part.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    struct Json(Value);

    impl Scope for Json {
        fn lookup(&self, path: &[String]) -> Result<Option<Value>, String> {
            Ok(walk(&self.0, path).cloned())
        }
    }

    fn scope() -> Json {
        Json(json!({
            "context": {"target": 3, "dir": "src", "nested": {"list": ["a", "b"]}},
            "captured": {"tests": {"output": "2 failed", "exit_code": 1, "stderr": ""}},
            "prev": {"output": "hello"},
            "state": {"name": "fix", "iteration": 2},
            "loop": {"name": "fix-tests"},
        }))
    }

    #[test]
    fn references_fill_in_from_every_namespace() {
        let cases = [
            ("make ${context.target} in ${context.dir}", "make 3 in src"),
            (
                "${captured.tests.output} (exit ${captured.tests.exit_code})",
                "2 failed (exit 1)",
            ),
            ("${prev.output}!", "hello!"),
            (
                "${state.name}#${state.iteration} of ${loop.name}",
                "fix#2 of fix-tests",
            ),
            ("${context.nested.list.1}", "b"),
            ("${context.nested.list}", "['a', 'b']"),
            ("cost: $5 and $${literal}", "cost: $5 and ${literal}"),
            ("${context.missing:default=none}", "none"),
            ("[${context.missing?}]", "[]"),
            ("${context.target:default=9}", "3"),
        ];
        for (template, want) in cases {
            assert_eq!(
                render(template, &scope()).as_deref(),
                Ok(want),
                "{template}"
            );
        }
    }

    #[test]
    fn unknown_references_are_errors_that_name_them() {
        let cases = [
            (
                "${captured.build.output}",
                "`${captured.build.output}` refers to nothing: no state has captured `build` yet",
            ),
            (
                "${context.nope}",
                "`${context.nope}` refers to nothing: `context` has no `nope`",
            ),
            ("${ctx.x}", "`${ctx.x}`: unknown namespace `ctx`"),
            ("${context}", "`${context}` names a whole namespace"),
            ("${context.x", "`${context.x` is not closed"),
            (
                "${env.A.B}",
                "`${env.A.B}`: an environment variable is one name",
            ),
            ("${}", "`${}` is empty"),
        ];
        for (template, want) in cases {
            let err = render(template, &scope()).unwrap_err();
            assert!(err.starts_with(want), "{template}: {err}");
        }
    }

    #[test]
    fn shell_quoting_and_python_text_match_little_loops() {
        let s = Json(json!({"context": {
            "plain": "src/main.rs", "odd": "it's $(rm -rf ~); `x`", "empty": "",
            "flag": true, "ratio": 3.0, "n": 3, "list": ["a", "b'c"], "map": {"k": null},
        }}));
        let cases = [
            ("${context.plain:shell}", "src/main.rs"),
            ("${context.odd:shell}", "'it'\"'\"'s $(rm -rf ~); `x`'"),
            ("${context.empty:shell}", "''"),
            ("${context.flag}", "True"),
            ("${context.ratio}", "3.0"),
            ("${context.n}", "3"),
            ("${context.list}", "['a', \"b'c\"]"),
            ("${context.map}", "{'k': None}"),
        ];
        for (t, want) in cases {
            assert_eq!(render(t, &s).unwrap(), want, "{t}");
        }
    }

    /// A scope read as `release` reads the suffixes.
    struct Old(Json, Release);

    impl Scope for Old {
        fn lookup(&self, path: &[String]) -> Result<Option<Value>, String> {
            self.0.lookup(path)
        }
        fn release(&self) -> Release {
            self.1
        }
    }

    /// Each release's reading, as its own `interpolate` raises it (1.156.0,
    /// 1.158.0: a chain is refused, a `{` is text; 1.159.0 on: the reverse).
    #[test]
    fn the_suffixes_follow_the_release_the_run_follows() {
        let at = |r| Old(Json(json!({"context": {"n": 3}})), r);
        let old = at(Release(1, 156));
        assert_eq!(
            render("${context.gone:default={}", &old).as_deref(),
            Ok("{")
        );
        assert_eq!(
            render("${context.gone:default=x}", &old).as_deref(),
            Ok("x")
        );
        let e = render("${context.n:shell:default=9}", &old).unwrap_err();
        assert!(e.contains("little-loops 1.156 does not combine"), "{e}");
        assert!(render("${context.gone?:shell}", &at(Release(1, 158))).is_err());
        let new = at(Release(1, 159));
        assert_eq!(render("${context.gone?:shell}", &new).as_deref(), Ok("''"));
        let e = render("${context.gone:default={}", &new).unwrap_err();
        assert!(e.contains("may not hold `{`"), "{e}");
        assert!(render("${context.gone:default={}", &at(Release::NEWEST)).is_err());
    }

    #[test]
    fn shell_combines_with_a_default_or_optional_as_in_little_loops_1_167() {
        // Each answer as little-loops 1.167.0's `interpolate` gives it.
        let s = Json(json!({"context": {"odd": "a b", "none": null, "n": 3}}));
        let cases = [
            ("${context.odd:shell:default=x}", "'a b'"),
            ("${context.gone:shell:default=true}", "true"),
            ("${context.gone:shell:default=}", "''"),
            ("${context.gone:shell:default=a b}", "'a b'"),
            ("${context.gone:default=a b:shell}", "'a b'"),
            ("${context.gone:default=a:shell:b}", "a:shell:b"),
            // `:shell:default=` wins; a trailing `:shell` is then the default's text.
            ("${context.gone:shell:default=v:shell}", "v:shell"),
            ("${context.gone:shell:default=v w:shell}", "'v w:shell'"),
            ("${context.gone?:shell}", "''"),
            ("${context.gone:shell?}", "''"),
            ("[${context.gone?}]", "[]"),
            ("${context.odd?:shell}", "'a b'"),
            ("${context.n:shell:default=9}", "3"),
            // A present null is not missing: no default, but still one word.
            ("${context.none:shell:default=9}", "''"),
            ("[${context.none:default=9}]", "[]"),
        ];
        for (t, want) in cases {
            assert_eq!(render(t, &s).as_deref(), Ok(want), "{t}");
        }
        let refused = [
            (
                "${context.odd?:default=x}",
                "`:default=` and `?` cannot be combined",
            ),
            (
                "${context.odd:shell?:default=x}",
                "`:default=` and `?` cannot be combined",
            ),
        ];
        for (t, want) in refused {
            let err = parse(t).unwrap_err();
            assert!(err.contains(want), "{t}: {err}");
        }
    }
}
