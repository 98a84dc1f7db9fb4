//! Evaluators: an action's result in, a verdict out. Pure functions; the
//! LLM evaluator's prompt is built and its reply parsed here, and the
//! machine sends the prompt.
//!
//! Verdicts: `yes`, `no`, `error` for the deterministic evaluators;
//! `target`, `progress`, `stall` for `convergence`; for `llm_structured`
//! what the model says within little-loops' grammar (`yes`, `no`,
//! `blocked`, `partial`, `cannot_judge`), `no` when it quotes no evidence.

use serde_json::Value;

use crate::pyjson::{self, Py};
use crate::pyre;
use crate::spec::{Direction, Op, Pick};

/// The judge's verdicts (little-loops' `fsm/verdicts.py` `DEFAULT_VERDICT_ENUM`).
pub const JUDGE_VERDICTS: &[&str] = &["yes", "no", "blocked", "partial", CANNOT_JUDGE];
/// The judge abstains: the state re-runs (see `machine/step.rs`).
pub const CANNOT_JUDGE: &str = "cannot_judge";

/// `cannot_judge`, or its `_uncertain` form (`verdicts.py` `is_abstention_verdict`).
pub fn is_abstention(verdict: &str) -> bool {
    verdict == CANNOT_JUDGE || verdict.starts_with("cannot_judge_")
}

/// What every judge prompt asks of the model, word for word as little-loops
/// asks it (`fsm/evaluators.py` `CHECK_SEMANTIC_EVIDENCE_CONTRACT`).
const EVIDENCE_CONTRACT: &str = "
IMPORTANT: For each condition you evaluate:
1. State your verdict: Yes / No / Partial / Cannot Judge
2. For Yes / No / Partial, provide a VERBATIM quote from the output that supports your verdict (exact text, in quotes)
3. If you cannot quote specific text to support Yes, No, or Partial, your verdict is Cannot Judge — do not guess

Do not assert a Yes/No/Partial verdict without evidence. \"The task appears complete\" is not evidence.
Cannot Judge means the check could not be evaluated from what is available — it is not a failure.
";

#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub verdict: String,
    /// One line for the run log: what the evaluator saw.
    pub detail: String,
}

fn v(verdict: &str, detail: impl Into<String>) -> Verdict {
    Verdict {
        verdict: verdict.to_string(),
        detail: detail.into(),
    }
}

fn yes_no(ok: bool, detail: String) -> Verdict {
    v(if ok { "yes" } else { "no" }, detail)
}

/// 0 is `yes`, 1 is `no`, anything else is `error` (124 is a timeout, a
/// negative code a process killed by a signal, as little-loops counts them).
pub fn exit_code(code: i32) -> Verdict {
    match code {
        0 => v("yes", "exit 0"),
        1 => v("no", "exit 1"),
        124 => v("error", "timed out"),
        c if c < 0 => v("error", "killed by a signal"),
        c => v("error", format!("exit {c}")),
    }
}

/// `re.search(pattern, text)` as little-loops runs it: the pattern read as
/// Python's `re` reads it ([`pyre`]), or as plain text when Python refuses
/// it. A match that exceeds `fancy-regex`'s backtracking limit is no match.
/// `Err` names what loopbox cannot match as Python does (`validate` refuses it).
fn matches(pattern: &str, text: &str) -> Result<bool, String> {
    match pyre::translate(pattern) {
        pyre::Pattern::Regex(r) => {
            Ok(fancy_regex::Regex::new(&r).is_ok_and(|re| re.is_match(text).unwrap_or(false)))
        }
        pyre::Pattern::Text(_) => Ok(text.contains(pattern)),
        pyre::Pattern::Unsupported(why) => Err(why),
    }
}

/// `pattern` found (`yes`) or not (`no`), `negate` turning it round. When it
/// is not found, an `error_patterns` entry in the output (as plain text)
/// makes it `error`, as little-loops checks them.
pub fn output_contains(
    output: &str,
    pattern: &str,
    negate: bool,
    error_patterns: &[String],
) -> Verdict {
    let found = match matches(pattern, output) {
        Ok(found) => found,
        Err(why) => {
            return v(
                "error",
                format!("`{pattern}` cannot be matched as Python's `re` matches it: {why}"),
            );
        }
    };
    if !found
        && !negate
        && let Some(p) = error_patterns.iter().find(|p| output.contains(p.as_str()))
    {
        return v(
            "error",
            format!("`{pattern}` not found, and error pattern `{p}` is"),
        );
    }
    let detail = format!("`{pattern}` {}", if found { "found" } else { "not found" });
    yes_no(found != negate, detail)
}

/// The whole output as a number, as little-loops reads it: Python's
/// `float(output.strip())`. Python's whitespace (`\x1c`-`\x1f` among it)
/// is stripped; any Unicode decimal digit counts as its ASCII digit (`٣` is
/// 3); `_` only between two digits; `inf`, `infinity`, `nan` in any case,
/// signed or not.
pub fn number_in(output: &str) -> Option<f64> {
    let t = output.trim_matches(pyre::is_space);
    let mut ascii = String::with_capacity(t.len());
    for c in t.chars() {
        if c.is_ascii() {
            ascii.push(c);
        } else {
            ascii.push(char::from(b'0' + decimal(c)?));
        }
    }
    let b = ascii.as_bytes();
    let digit_at = |i: usize| b.get(i).is_some_and(u8::is_ascii_digit);
    let lone_underscore =
        (0..b.len()).any(|i| b[i] == b'_' && (i == 0 || !digit_at(i - 1) || !digit_at(i + 1)));
    if lone_underscore {
        return None;
    }
    // Rust's grammar is Python's once the underscores are gone: a sign, digits
    // with an optional point and exponent, or inf/infinity/nan.
    ascii.replace('_', "").parse::<f64>().ok()
}

/// The value of a Unicode decimal digit (category Nd), as Python reads it.
fn decimal(c: char) -> Option<u8> {
    static ND: std::sync::OnceLock<Option<fancy_regex::Regex>> = std::sync::OnceLock::new();
    let nd = ND
        .get_or_init(|| fancy_regex::Regex::new(r"\A\p{Nd}\z").ok())
        .as_ref()?;
    let is_digit = |c: char| nd.is_match(c.encode_utf8(&mut [0; 4])).unwrap_or(false);
    if !is_digit(c) {
        return None;
    }
    // Decimal digits come in runs of ten, 0 to 9 (a Unicode stability policy).
    let mut first = c as u32;
    while let Some(p) = char::from_u32(first - 1).filter(|p| is_digit(*p)) {
        first = p as u32;
    }
    Some(((c as u32 - first) % 10) as u8)
}

/// The last `KEY=NUMBER` in the output (`output_numeric`'s `key`), found
/// with little-loops' own Python pattern (`\s` is Python's whitespace).
fn keyed_number(output: &str, key: &str) -> Option<f64> {
    let pattern = format!(
        r"{}\s*=\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)",
        pyre::escape(key)
    );
    let pyre::Pattern::Regex(re) = pyre::translate(&pattern) else {
        return None;
    };
    let re = fancy_regex::Regex::new(&re).ok()?;
    re.captures_iter(output)
        .filter_map(Result::ok)
        .last()
        .and_then(|c| c.get(1)?.as_str().parse::<f64>().ok())
}

fn compare(a: f64, op: Op, b: f64) -> bool {
    match op {
        Op::Eq => a == b,
        Op::Ne => a != b,
        Op::Lt => a < b,
        Op::Le => a <= b,
        Op::Gt => a > b,
        Op::Ge => a >= b,
    }
}

pub fn output_numeric(output: &str, op: Op, target: f64, key: Option<&str>) -> Verdict {
    let n = match key {
        Some(k) => {
            keyed_number(output, k).ok_or_else(|| format!("`{k}=NUMBER` is not in the output"))
        }
        None => number_in(output)
            .ok_or_else(|| format!("the output is not a number: `{}`", preview(output))),
    };
    match n {
        Err(why) => v("error", why),
        Ok(n) => yes_no(
            compare(n, op, target),
            format!("{} {} {}", fmt(n), op.name(), fmt(target)),
        ),
    }
}

/// `path` like `.summary.failed` or `items.0.name` into the JSON output,
/// read and compared as little-loops does in Python (see [`crate::pyjson`]):
/// numbers (booleans among them) with any operator, other values with `eq`
/// and `ne` only.
pub fn output_json(output: &str, path: &str, op: Op, target: &Py) -> Verdict {
    let data = match pyjson::loads(output) {
        Ok(d) => d,
        Err(e) => return v("error", format!("the output is not JSON: {e}")),
    };
    let Some(value) = pyjson::at(&data, path) else {
        return v("error", format!("path `{path}` is not in the output"));
    };
    let (value_text, target_text) = (preview(&value.repr()), preview(&target.repr()));
    let detail = format!("{path} = {value_text} {} {target_text}", op.name());
    if let Some(ok) = pyjson::py_compare(value, op, target) {
        return yes_no(ok, detail);
    }
    match op {
        Op::Eq => yes_no(pyjson::py_eq(value, target), detail),
        Op::Ne => yes_no(!pyjson::py_eq(value, target), detail),
        _ => v(
            "error",
            format!(
                "`{}` compares numbers, and {path} = {value_text} or the target {target_text} is not one",
                op.name()
            ),
        ),
    }
}

/// `stall` when worse than the frozen `reference`; else `target` within
/// `tolerance`; else `progress` when it moved the right way since `previous`
/// (or there is no previous), else `stall` (little-loops 1.167's order).
pub fn convergence(
    output: &str,
    previous: Option<f64>,
    reference: Option<f64>,
    target: f64,
    tolerance: f64,
    direction: Direction,
) -> Verdict {
    let Some(current) = number_in(output) else {
        return v(
            "error",
            format!("the output is not a number: `{}`", preview(output)),
        );
    };
    if let Some(base) = reference {
        let regressed = match direction {
            Direction::Minimize => current > base,
            Direction::Maximize => current < base,
        };
        if regressed {
            return v(
                "stall",
                format!(
                    "{} is worse than the reference {} (target {})",
                    fmt(current),
                    fmt(base),
                    fmt(target)
                ),
            );
        }
    }
    if (current - target).abs() <= tolerance {
        v(
            "target",
            format!(
                "{} is within {} of {}",
                fmt(current),
                fmt(tolerance),
                fmt(target)
            ),
        )
    } else {
        match previous {
            None => v(
                "progress",
                format!("{} (first value; target {})", fmt(current), fmt(target)),
            ),
            Some(p) => {
                let better = match direction {
                    Direction::Minimize => current < p,
                    Direction::Maximize => current > p,
                };
                v(
                    if better { "progress" } else { "stall" },
                    format!("{} -> {} (target {})", fmt(p), fmt(current), fmt(target)),
                )
            }
        }
    }
}

/// `diff_stall` / `action_stall`: `current` the same as last time counts a
/// stall; `max` of them in a row is `no`. `last` keeps the value and the
/// count between calls (little-loops keeps them in `.loops/tmp`; loopbox in
/// the run, so two runs do not share them).
pub fn repeat_stall(
    last: &mut Option<(String, u32)>,
    current: String,
    max: u32,
    what: &str,
) -> Verdict {
    match last {
        Some((seen, count)) if *seen == current => {
            *count += 1;
            let count = *count;
            yes_no(
                count < max,
                format!("{what} unchanged {count} time(s) (stall at {max})"),
            )
        }
        _ => {
            let first = last.is_none();
            *last = Some((current, 0));
            v(
                "yes",
                if first {
                    format!("first {what}")
                } else {
                    format!("{what} changed")
                },
            )
        }
    }
}

/// `score_stall` (higher is better) / `open_question_stall` (lower is
/// better) over a history file of one number a line: `no` once the best so
/// far has not improved by more than `epsilon` for `max` rounds.
pub fn history_stall(history: &str, max: u32, epsilon: f64, lower_is_better: bool) -> Verdict {
    let values: Vec<f64> = history
        .lines()
        .filter_map(|l| l.trim().parse::<f64>().ok())
        .collect();
    if values.len() < 2 {
        return v("yes", format!("{} round(s) of history", values.len()));
    }
    let better = |a: f64, b: f64| if lower_is_better { a < b } else { a > b };
    let (mut best, mut stall) = (values[0], 0u32);
    for &x in &values[1..] {
        let beyond = if lower_is_better {
            best - epsilon
        } else {
            best + epsilon
        };
        if better(x, beyond) {
            best = x;
            stall = 0;
        } else {
            if better(x, best) {
                best = x;
            }
            stall += 1;
        }
    }
    yes_no(
        stall < max,
        format!(
            "best {} after {} rounds, {stall} without progress (stall at {max})",
            fmt(best),
            values.len()
        ),
    )
}

/// `harbor_scorer`: a scorer that fails is `no`; one that prints a number `yes`.
pub fn harbor_scorer(output: &str, code: i32) -> Verdict {
    if code != 0 {
        return v("no", format!("the scorer exited {code}"));
    }
    match number_in(output) {
        Some(score) => v("yes", format!("score {}", fmt(score))),
        None => v(
            "error",
            format!("the scorer printed no number: `{}`", preview(output)),
        ),
    }
}

/// `classify`: a line of the output, trimmed, is the verdict.
pub fn classify(output: &str, pick: Pick) -> Verdict {
    let lines: Vec<&str> = output.lines().filter(|l| !l.trim().is_empty()).collect();
    let chosen = match pick {
        Pick::First => lines.first(),
        Pick::Last => lines.last(),
        Pick::Index(i) if i < 0 => lines
            .len()
            .checked_sub(i.unsigned_abs() as usize)
            .and_then(|j| lines.get(j)),
        Pick::Index(i) => lines.get(i as usize),
    };
    let token = chosen.map(|l| l.trim()).unwrap_or("");
    Verdict {
        verdict: token.to_string(),
        detail: format!("the output says `{}`", preview(token)),
    }
}

/// The question sent to the agent for an `llm_structured` verdict.
pub fn llm_prompt(question: Option<&str>, output: &str, max_tokens: Option<u64>) -> String {
    // The tail of a long output is where results usually are.
    let tail: String = {
        let chars: Vec<char> = output.chars().collect();
        chars[chars.len().saturating_sub(4000)..].iter().collect()
    };
    let question =
        question.unwrap_or("Evaluate whether this action succeeded based on its output.");
    let budget = max_tokens
        .map(|n| format!(" Keep the reply under {n} tokens."))
        .unwrap_or_default();
    // little-loops passes the shape as `--json-schema`; loopbox's agent is
    // any program, so the prompt states it.
    format!(
        "{question}\n\n{EVIDENCE_CONTRACT}\n\n<action_output>\n{tail}\n</action_output>\n\nReply with only a JSON object: \
         {{\"verdict\": \"yes\" | \"no\" | \"blocked\" | \"partial\" | \"cannot_judge\", \"confidence\": a number from 0 to 1, \"reason\": \"one sentence\", \
         \"evidence\": \"a verbatim quote from the output (empty only for cannot_judge)\"}}.{budget}"
    )
}

/// Read the model's reply as little-loops' `evaluate_llm_structured` does,
/// finding the JSON in a code fence or among prose: a verdict outside the
/// grammar is `error`; a `yes`/`no`/`blocked`/`partial` without `evidence` is
/// `no`; below `min_confidence` the verdict stands, `VERDICT_uncertain` with
/// `uncertain_suffix`.
pub fn llm_reply(reply: &str, min_confidence: f64, uncertain_suffix: bool) -> Verdict {
    let Some(obj) = find_json_object(reply) else {
        return v(
            "error",
            format!("the reply has no JSON verdict: `{}`", preview(reply)),
        );
    };
    let Some(verdict) = obj.get("verdict").and_then(Value::as_str) else {
        return v(
            "error",
            format!(
                "the reply's JSON has no `verdict`: {}",
                Value::Object(obj.clone())
            ),
        );
    };
    // Lower case, as little-loops' tag fallback reads it; its JSON schema
    // keeps the model to the lower-case words.
    let verdict = verdict.trim().to_ascii_lowercase();
    if !JUDGE_VERDICTS.contains(&verdict.as_str()) && verdict != "error" {
        return v(
            "error",
            format!(
                "the judge's verdict `{}` is outside the grammar ({}); ask for one of them in evaluate.prompt",
                preview(&verdict),
                JUDGE_VERDICTS.join(", ")
            ),
        );
    }
    let confidence = match obj.get("confidence") {
        Some(Value::Number(n)) => n.as_f64().unwrap_or(1.0),
        Some(Value::String(s)) => s
            .trim()
            .trim_end_matches('%')
            .parse::<f64>()
            .map(|c| if c > 1.0 { c / 100.0 } else { c })
            .unwrap_or(1.0),
        _ => 1.0,
    };
    let reason = obj
        .get("reason")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let mut detail = format!("{verdict} at {:.2}: {}", confidence, preview(&reason));
    let evidence = obj.get("evidence").and_then(Value::as_str).unwrap_or("");
    let mut verdict = verdict;
    if evidence.trim().is_empty() && verdict != "error" && verdict != CANNOT_JUDGE {
        detail = format!("{detail} (no evidence quoted: `no`)");
        verdict = "no".to_string();
    }
    if confidence < min_confidence {
        detail = format!("{detail} (below min_confidence {min_confidence})");
        if uncertain_suffix {
            verdict = format!("{verdict}_uncertain");
        }
    }
    v(&verdict, detail)
}

/// The first `{...}` in `text` that parses as a JSON object.
fn find_json_object(text: &str) -> Option<serde_json::Map<String, Value>> {
    let mut start = 0;
    while let Some(i) = text[start..].find('{') {
        let from = start + i;
        let mut stream = serde_json::Deserializer::from_str(&text[from..]).into_iter::<Value>();
        if let Some(Ok(Value::Object(m))) = stream.next() {
            return Some(m);
        }
        start = from + 1;
    }
    None
}

pub fn preview(s: &str) -> String {
    let one_line = s.trim().replace('\n', " ⏎ ");
    if one_line.chars().count() > 80 {
        format!("{}…", one_line.chars().take(80).collect::<String>())
    } else {
        one_line
    }
}

fn fmt(n: f64) -> String {
    crate::interp::number_text(n)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::spec::{Direction::*, Op::*};

    fn verdicts<T>(cases: &[(T, &str)], f: impl Fn(&T) -> Verdict)
    where
        T: std::fmt::Debug,
    {
        for (input, want) in cases {
            assert_eq!(f(input).verdict, *want, "{input:?}: {:?}", f(input));
        }
    }

    #[test]
    fn exit_code_table() {
        verdicts(
            &[
                (0, "yes"),
                (1, "no"),
                (2, "error"),
                (127, "error"),
                (-9, "error"),
                (124, "error"),
            ],
            |c| exit_code(*c),
        );
    }

    #[test]
    fn output_contains_table() {
        let no_errors: &[String] = &[];
        let errs = ["panicked".to_string()];
        verdicts(
            &[
                (("test result: ok", "result: ok", false, no_errors), "yes"),
                (
                    ("test result: FAILED", "result: ok", false, no_errors),
                    "no",
                ),
                (("3 passed", r"\d+ passed", false, no_errors), "yes"),
                (("TODO left", "TODO", true, no_errors), "no"),
                (("all clear", "TODO", true, no_errors), "yes"),
                // An invalid regex falls back to plain text.
                (("a (b", "(b", false, no_errors), "yes"),
                // Error patterns are read only when the pattern is not found.
                (
                    (
                        "thread panicked; result: ok",
                        "result: ok",
                        false,
                        &errs[..],
                    ),
                    "yes",
                ),
                (("thread panicked", "result: ok", false, &errs[..]), "error"),
                (("thread panicked", "result: ok", true, &errs[..]), "yes"),
                // Python's `$` matches before a final newline.
                (("done\n", "^done$", false, no_errors), "yes"),
                (("done\n\n", "^done$", false, no_errors), "no"),
                // Python `re` features: lookahead, lookbehind, backreferences.
                (("PASS: 3", r"PASS(?!ED)", false, no_errors), "yes"),
                (("PASSED", r"PASS(?!ED)", false, no_errors), "no"),
                (("x=1 ok", r"(?<=x=)\d", false, no_errors), "yes"),
                (("no no", r"(\w+) \1", false, no_errors), "yes"),
                (("no yes", r"(\w+) \1", false, no_errors), "no"),
            ],
            |(out, pat, neg, errs)| output_contains(out, pat, *neg, errs),
        );
    }

    #[test]
    fn output_numeric_table() {
        verdicts(
            &[
                (("3", Eq, 3.0), "yes"),
                (("3\n", Ne, 3.0), "no"),
                (("2.5", Lt, 3.0), "yes"),
                (("3", Le, 3.0), "yes"),
                (("4", Gt, 3.0), "yes"),
                (("2", Ge, 3.0), "no"),
                // The whole output, as Python's float() reads it.
                (("counting...\n7\n", Eq, 7.0), "error"),
                ((" 1_000 ", Eq, 1000.0), "yes"),
                // As Python's float() reads them (`numeric-python.yaml`).
                (("\u{663}", Eq, 3.0), "yes"),
                (("\u{ff17}", Eq, 7.0), "yes"),
                (("\u{1d7d3}", Eq, 5.0), "yes"),
                (("\u{661}\u{662}.\u{665}", Eq, 12.5), "yes"),
                (("7\x1f", Eq, 7.0), "yes"),
                (("1_.5", Gt, 0.0), "error"),
                (("1._5", Gt, 0.0), "error"),
                (("in_f", Gt, 0.0), "error"),
                (("1__0", Gt, 0.0), "error"),
                (("_1", Gt, 0.0), "error"),
                (("1_0.2_5e1_0", Eq, 102500000000.0), "yes"),
                (("-iNF", Lt, -1e308), "yes"),
                (("+nan", Le, 0.0), "no"),
                (("7\u{200b}", Eq, 7.0), "error"),
                (("\u{b2}", Eq, 2.0), "error"),
                (("0x10", Eq, 16.0), "error"),
                (("seven", Eq, 7.0), "error"),
                (("", Eq, 0.0), "error"),
            ],
            |(out, op, t)| output_numeric(out, *op, *t, None),
        );
        verdicts(
            &[
                (("score=3\nscore = 8\n", Eq, 8.0), "yes"),
                (("nothing", Eq, 8.0), "error"),
                (("score =\u{a0}8", Eq, 8.0), "yes"),
                (("a.b=1 axb=2", Eq, 1.0), "yes"),
            ],
            |(out, op, t)| {
                output_numeric(
                    out,
                    *op,
                    *t,
                    Some(if out.contains("a.b") { "a.b" } else { "score" }),
                )
            },
        );
    }

    #[test]
    fn output_json_table() {
        let out = r#"{"summary": {"failed": 0, "status": "green"}, "items": [{"n": 5}]}"#;
        let json = |v: Value| pyjson::loads(&v.to_string()).unwrap();
        verdicts(
            &[
                ((out, ".summary.failed", Eq, json!(0)), "yes"),
                ((out, "summary.failed", Gt, json!(0)), "no"),
                ((out, ".summary.status", Eq, json!("green")), "yes"),
                ((out, ".summary.status", Ne, json!("green")), "no"),
                ((out, ".items.0.n", Ge, json!(5)), "yes"),
                ((out, ".summary.missing", Eq, json!(0)), "error"),
                ((out, ".summary.status", Lt, json!("x")), "error"),
                (("not json", ".a", Eq, json!(1)), "error"),
                // As little-loops 1.167.0 compares in Python (`output-json-python.yaml`).
                ((r#"{"ok": true}"#, ".ok", Eq, json!(1)), "yes"),
                ((r#"{"ok": true}"#, ".ok", Gt, json!(0)), "yes"),
                ((r#"{"x": NaN}"#, ".x", Lt, json!(1)), "no"),
                ((r#"{"x": NaN}"#, ".x", Ne, json!(1)), "yes"),
                ((r#"{"x": -Infinity}"#, ".x", Lt, json!(-1e308)), "yes"),
                (
                    (
                        r#"{"x": [1, {"k": 1}]}"#,
                        ".x",
                        Eq,
                        json!([1.0, {"k": true}]),
                    ),
                    "yes",
                ),
                (("5", ".", Eq, json!(5)), "error"),
                ((out, "summary..failed", Eq, json!(0)), "error"),
            ],
            |(out, path, op, t)| output_json(out, path, *op, &json(t.clone())),
        );
    }

    #[test]
    fn convergence_table() {
        let cases = [
            (("10", None, 0.0, 0.0, Minimize), "progress"),
            (("6", Some(10.0), 0.0, 0.0, Minimize), "progress"),
            (("6", Some(6.0), 0.0, 0.0, Minimize), "stall"),
            (("8", Some(6.0), 0.0, 0.0, Minimize), "stall"),
            (("1", Some(6.0), 0.0, 1.0, Minimize), "target"),
            (("0", Some(6.0), 0.0, 0.0, Minimize), "target"),
            (("80", Some(70.0), 100.0, 0.0, Maximize), "progress"),
            (("60", Some(70.0), 100.0, 0.0, Maximize), "stall"),
            (("n/a", Some(70.0), 100.0, 0.0, Maximize), "error"),
        ];
        for ((out, prev, target, tol, dir), want) in cases {
            assert_eq!(
                convergence(out, prev, None, target, tol, dir).verdict,
                want,
                "{out} {prev:?}"
            );
        }
    }

    /// `reference` as little-loops 1.167.0's `evaluate_convergence` reads
    /// it: worse than the baseline is `stall` before the target is looked
    /// at; as good or better goes on as without it.
    #[test]
    fn convergence_reference_is_checked_before_the_target() {
        let cases = [
            // Within tolerance of the target but worse than the baseline.
            (("0.9", None, Some(0.95), 0.9, 0.02, Maximize), "stall"),
            (("0.9", None, Some(0.9), 0.9, 0.02, Maximize), "target"),
            (
                ("0.5", Some(0.4), Some(0.3), 0.9, 0.0, Maximize),
                "progress",
            ),
            (("5", Some(6.0), Some(4.0), 0.0, 0.0, Minimize), "stall"),
            (("4", Some(6.0), Some(4.0), 0.0, 0.0, Minimize), "progress"),
            (("0", None, Some(4.0), 0.0, 0.0, Minimize), "target"),
        ];
        for ((out, prev, reference, target, tol, dir), want) in cases {
            assert_eq!(
                convergence(out, prev, reference, target, tol, dir).verdict,
                want,
                "{out} {prev:?} {reference:?}"
            );
        }
    }

    #[test]
    fn llm_replies_are_read_as_little_loops_reads_them() {
        let cases = [
            (
                r#"{"verdict": "yes", "confidence": 0.9, "reason": "tests pass", "evidence": "3 passed"}"#,
                "yes",
            ),
            (
                "Sure!\n```json\n{\"verdict\": \"no\", \"confidence\": 0.8, \"reason\": \"red\", \"evidence\": \"1 failed\"}\n```",
                "no",
            ),
            (
                r#"I think {"verdict": "blocked", "confidence": 1, "reason": "needs a key", "evidence": "401"} is it"#,
                "blocked",
            ),
            (r#"{"verdict": "Partial", "evidence": "2 of 3"}"#, "partial"),
            // Outside the grammar: `error`, never an alias.
            (
                r#"{"verdict": "success", "confidence": 0.8, "evidence": "ok"}"#,
                "error",
            ),
            (r#"{"verdict": "maybe", "evidence": "x"}"#, "error"),
            // No evidence: `no` (cannot_judge and error need none).
            (r#"{"verdict": "yes", "confidence": 0.9}"#, "no"),
            (
                r#"{"verdict": "partial", "confidence": 0.9, "evidence": "  "}"#,
                "no",
            ),
            (
                r#"{"verdict": "cannot_judge", "confidence": 0.9}"#,
                "cannot_judge",
            ),
            (r#"{"verdict": "error"}"#, "error"),
            // Below min_confidence the verdict stands.
            (
                r#"{"verdict": "yes", "confidence": 0.2, "reason": "guess", "evidence": "ok"}"#,
                "yes",
            ),
            ("no json here", "error"),
            (r#"{"confidence": 0.9}"#, "error"),
            (
                "{broken {\"verdict\": \"no\", \"confidence\": 0.7, \"evidence\": \"e\"}",
                "no",
            ),
        ];
        for (reply, want) in cases {
            assert_eq!(llm_reply(reply, 0.5, false).verdict, want, "{reply}");
        }
        let uncertain = |r: &str| llm_reply(r, 0.5, true).verdict;
        assert_eq!(
            uncertain(r#"{"verdict": "yes", "confidence": 0.2, "evidence": "ok"}"#),
            "yes_uncertain"
        );
        assert_eq!(
            uncertain(r#"{"verdict": "yes", "confidence": 0.2}"#),
            "no_uncertain"
        );
        assert_eq!(
            uncertain(r#"{"verdict": "cannot_judge", "confidence": 0.1}"#),
            "cannot_judge_uncertain"
        );
        assert!(is_abstention("cannot_judge_uncertain") && !is_abstention("no"));
    }

    #[test]
    fn the_llm_prompt_keeps_the_output_tail_and_asks_for_json() {
        let long = "x".repeat(5000) + "THE END";
        let p = llm_prompt(Some("Did the tests pass?"), &long, Some(256));
        assert!(p.starts_with("Did the tests pass?"));
        assert!(p.contains("THE END\n</action_output>"));
        assert!(p.contains("\"verdict\""));
        assert!(p.contains("\"evidence\"") && p.contains("cannot_judge"));
        assert!(p.contains("Cannot Judge means the check could not be evaluated"));
        assert!(p.contains("under 256 tokens"));
        assert!(p.len() < 5500);
    }
}
