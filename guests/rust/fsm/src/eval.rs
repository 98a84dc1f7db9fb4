//! Evaluators: an action's result in, a verdict out. Pure functions; the
//! LLM evaluator's prompt is built and its reply parsed here, and the
//! machine sends the prompt.
//!
//! Verdicts: `yes`, `no`, `error` for the deterministic evaluators;
//! `target`, `progress`, `stall` for `convergence`; whatever the model says
//! (`yes`, `no`, `blocked`, `partial`) for `llm_structured`.

use serde_json::Value;

use crate::spec::{Direction, Op, canonical_verdict};

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

/// 0 is `yes`, 1 is `no`, anything else (or no code: killed, timed out) is `error`.
pub fn exit_code(code: Option<i32>, timed_out: bool) -> Verdict {
    match code {
        _ if timed_out => v("error", "timed out"),
        Some(0) => v("yes", "exit 0"),
        Some(1) => v("no", "exit 1"),
        Some(c) => v("error", format!("exit {c}")),
        None => v("error", "killed by a signal"),
    }
}

/// A regular expression, or plain text when the pattern does not compile.
fn matches(pattern: &str, text: &str) -> bool {
    match regex_lite::Regex::new(pattern) {
        Ok(re) => re.is_match(text),
        Err(_) => text.contains(pattern),
    }
}

pub fn output_contains(
    output: &str,
    pattern: &str,
    negate: bool,
    error_patterns: &[String],
) -> Verdict {
    if let Some(p) = error_patterns.iter().find(|p| matches(p, output)) {
        return v("error", format!("output matches error pattern `{p}`"));
    }
    let found = matches(pattern, output);
    let detail = format!("`{pattern}` {}", if found { "found" } else { "not found" });
    yes_no(found != negate, detail)
}

/// The output as a number: all of it, or else its last non-empty line.
pub fn number_in(output: &str) -> Option<f64> {
    let parse = |s: &str| s.trim().parse::<f64>().ok().filter(|f| f.is_finite());
    parse(output).or_else(|| {
        output
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .and_then(parse)
    })
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

pub fn output_numeric(output: &str, op: Op, target: f64) -> Verdict {
    match number_in(output) {
        None => v(
            "error",
            format!("the output is not a number: `{}`", preview(output)),
        ),
        Some(n) => yes_no(
            compare(n, op, target),
            format!("{} {} {}", fmt(n), op.name(), fmt(target)),
        ),
    }
}

/// `path` like `.summary.failed` or `items.0.name` into the JSON output.
pub fn output_json(output: &str, path: &str, op: Op, target: &Value) -> Verdict {
    let data: Value = match serde_json::from_str(output.trim()) {
        Ok(d) => d,
        Err(e) => return v("error", format!("the output is not JSON: {e}")),
    };
    let parts: Vec<String> = path
        .trim_start_matches('.')
        .split('.')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect();
    let Some(value) = crate::interp::walk(&data, &parts) else {
        return v("error", format!("path `{path}` is not in the output"));
    };
    if let (Some(a), Some(b)) = (value.as_f64(), target.as_f64()) {
        return yes_no(
            compare(a, op, b),
            format!("{path} = {} {} {}", fmt(a), op.name(), fmt(b)),
        );
    }
    match op {
        Op::Eq => yes_no(value == target, format!("{path} = {value} eq {target}")),
        Op::Ne => yes_no(value != target, format!("{path} = {value} ne {target}")),
        _ => v(
            "error",
            format!(
                "`{}` compares numbers, and {path} = {value} or the target {target} is not one",
                op.name()
            ),
        ),
    }
}

/// `target` within `tolerance`; else `progress` when it moved the right way
/// since `previous` (or there is no previous), else `stall`.
pub fn convergence(
    output: &str,
    previous: Option<f64>,
    target: f64,
    tolerance: f64,
    direction: Direction,
) -> (Verdict, Option<f64>) {
    let Some(current) = number_in(output) else {
        return (
            v(
                "error",
                format!("the output is not a number: `{}`", preview(output)),
            ),
            None,
        );
    };
    let verdict = if (current - target).abs() <= tolerance {
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
    };
    (verdict, Some(current))
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
    format!(
        "{question}\n\n<action_output>\n{tail}\n</action_output>\n\nReply with only a JSON object: \
         {{\"verdict\": \"yes\" | \"no\" | \"blocked\" | \"partial\", \"confidence\": a number from 0 to 1, \"reason\": \"one sentence\"}}.{budget}"
    )
}

/// Read the model's reply tolerantly: the JSON may sit in a code fence or
/// among prose; `success`/`failure` are `yes`/`no`; a verdict below
/// `min_confidence` becomes `VERDICT_uncertain` with `uncertain_suffix`,
/// else `error` (a guess is not a verdict to act on).
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
    let verdict = canonical_verdict(verdict.trim());
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
    let detail = format!("{verdict} at {:.2}: {}", confidence, preview(&reason));
    if confidence < min_confidence {
        if uncertain_suffix {
            return v(&format!("{verdict}_uncertain"), detail);
        }
        return v(
            "error",
            format!("{detail} (below min_confidence {min_confidence})"),
        );
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
                ((Some(0), false), "yes"),
                ((Some(1), false), "no"),
                ((Some(2), false), "error"),
                ((Some(127), false), "error"),
                ((None, false), "error"),
                ((Some(0), true), "error"),
            ],
            |(c, t)| exit_code(*c, *t),
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
                (
                    (
                        "thread panicked; result: ok",
                        "result: ok",
                        false,
                        &errs[..],
                    ),
                    "error",
                ),
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
                (("counting...\n7\n", Eq, 7.0), "yes"),
                (("seven", Eq, 7.0), "error"),
                (("", Eq, 0.0), "error"),
            ],
            |(out, op, t)| output_numeric(out, *op, *t),
        );
    }

    #[test]
    fn output_json_table() {
        let out = r#"{"summary": {"failed": 0, "status": "green"}, "items": [{"n": 5}]}"#;
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
            ],
            |(out, path, op, t)| output_json(out, path, *op, t),
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
                convergence(out, prev, target, tol, dir).0.verdict,
                want,
                "{out} {prev:?}"
            );
        }
    }

    #[test]
    fn llm_replies_are_read_tolerantly() {
        let cases = [
            (
                r#"{"verdict": "yes", "confidence": 0.9, "reason": "tests pass"}"#,
                "yes",
            ),
            (
                "Sure!\n```json\n{\"verdict\": \"success\", \"confidence\": 0.8, \"reason\": \"ok\"}\n```",
                "yes",
            ),
            (
                r#"{"verdict": "FAILURE", "confidence": "90%", "reason": "red"}"#,
                "no",
            ),
            (
                r#"I think {"verdict": "blocked", "confidence": 1, "reason": "needs a key"} is it"#,
                "blocked",
            ),
            (r#"{"verdict": "partial"}"#, "partial"),
            (
                r#"{"verdict": "yes", "confidence": 0.2, "reason": "guess"}"#,
                "error",
            ),
            ("no json here", "error"),
            (r#"{"confidence": 0.9}"#, "error"),
            ("{broken {\"verdict\": \"no\", \"confidence\": 0.7}", "no"),
        ];
        for (reply, want) in cases {
            assert_eq!(llm_reply(reply, 0.5, false).verdict, want, "{reply}");
        }
        assert_eq!(
            llm_reply(r#"{"verdict": "yes", "confidence": 0.2}"#, 0.5, true).verdict,
            "yes_uncertain"
        );
    }

    #[test]
    fn the_llm_prompt_keeps_the_output_tail_and_asks_for_json() {
        let long = "x".repeat(5000) + "THE END";
        let p = llm_prompt(Some("Did the tests pass?"), &long, Some(256));
        assert!(p.starts_with("Did the tests pass?"));
        assert!(p.contains("THE END\n</action_output>"));
        assert!(p.contains("\"verdict\""));
        assert!(p.contains("under 256 tokens"));
        assert!(p.len() < 4500);
    }
}
