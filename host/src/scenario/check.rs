//! Comparing what a policy did with what its scenario expects: plain values
//! compare equal, `{contains: TEXT}` and `{matches: REGEX}` match strings, a
//! mapping matches the keys it names (others are not looked at), a list
//! matches element by element. The first difference is reported with its
//! path, what was expected and what came.

use serde_json::Value;

use crate::ui::shorten;

/// How much of a value a difference shows.
const SHOWN: usize = 400;

/// The first place `actual` differs from `expected`, as `at PATH: expected X, got Y`.
pub fn first_mismatch(expected: &Value, actual: &Value) -> Option<String> {
    walk(expected, actual, "")
}

fn show(v: &Value) -> String {
    shorten(&crate::ui::sanitize(&v.to_string()), SHOWN)
}

fn walk(expected: &Value, actual: &Value, path: &str) -> Option<String> {
    let here = if path.is_empty() { "." } else { path };
    let differ = |what: String| Some(format!("at `{here}`: {what}"));
    match expected {
        Value::Object(m) if m.len() == 1 && m.contains_key("contains") => {
            let needle = m["contains"].as_str().unwrap_or_default();
            match actual.as_str() {
                Some(s) if s.contains(needle) => None,
                _ => differ(format!(
                    "expected text containing {}, got {}",
                    show(&m["contains"]),
                    show(actual)
                )),
            }
        }
        Value::Object(m) if m.len() == 1 && m.contains_key("matches") => {
            let pattern = m["matches"].as_str().unwrap_or_default();
            let re = match regex_lite::Regex::new(pattern) {
                Ok(re) => re,
                Err(e) => {
                    return differ(format!(
                        "the pattern {} is not a regular expression: {e}",
                        show(&m["matches"])
                    ));
                }
            };
            match actual.as_str() {
                Some(s) if re.is_match(s) => None,
                _ => differ(format!(
                    "expected text matching {}, got {}",
                    show(&m["matches"]),
                    show(actual)
                )),
            }
        }
        Value::Object(m) => {
            let Some(a) = actual.as_object() else {
                return differ(format!("expected a mapping, got {}", show(actual)));
            };
            m.iter().find_map(|(k, e)| {
                walk(e, a.get(k).unwrap_or(&Value::Null), &format!("{path}.{k}"))
            })
        }
        Value::Array(items) => {
            let Some(a) = actual.as_array() else {
                return differ(format!("expected a list, got {}", show(actual)));
            };
            if let Some(d) = items
                .iter()
                .zip(a)
                .enumerate()
                .find_map(|(i, (e, a))| walk(e, a, &format!("{path}[{i}]")))
            {
                return Some(d);
            }
            (items.len() != a.len()).then(|| {
                format!(
                    "at `{here}`: expected {} item(s), got {}: {}",
                    items.len(),
                    a.len(),
                    show(actual)
                )
            })
        }
        // 3 and 3.0 are the same number to a scenario author.
        Value::Number(n) if actual.as_f64().is_some() && n.as_f64() == actual.as_f64() => None,
        e if e == actual => None,
        e => differ(format!("expected {}, got {}", show(e), show(actual))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn plain_values_compare_equal_and_mappings_match_the_keys_they_name() {
        let actual = json!({"type": "inject", "message": "fix it\n[ralph iteration 2]", "x": 1});
        assert_eq!(first_mismatch(&json!({"type": "inject"}), &actual), None);
        assert_eq!(
            first_mismatch(&json!({"type": "done"}), &actual).unwrap(),
            "at `.type`: expected \"done\", got \"inject\""
        );
        assert_eq!(first_mismatch(&json!({"x": 1.0}), &actual), None);
        assert!(
            first_mismatch(&json!({"missing": 1}), &actual)
                .unwrap()
                .contains("got null")
        );
    }

    #[test]
    fn contains_and_matches_match_text() {
        let actual = json!({"message": "fix it\n[ralph iteration 2]"});
        assert_eq!(
            first_mismatch(&json!({"message": {"contains": "iteration 2"}}), &actual),
            None
        );
        assert_eq!(
            first_mismatch(
                &json!({"message": {"matches": "iteration \\d+\\]$"}}),
                &actual
            ),
            None
        );
        let d = first_mismatch(&json!({"message": {"contains": "iteration 3"}}), &actual).unwrap();
        assert!(
            d.starts_with("at `.message`: expected text containing \"iteration 3\""),
            "{d}"
        );
        let d = first_mismatch(&json!({"message": {"matches": "("}}), &actual).unwrap();
        assert!(d.contains("is not a regular expression"), "{d}");
    }

    #[test]
    fn lists_match_element_by_element_and_by_length() {
        let actual = json!({"exec": ["make", "test"]});
        assert_eq!(
            first_mismatch(&json!({"exec": ["make", "test"]}), &actual),
            None
        );
        assert_eq!(
            first_mismatch(&json!({"exec": ["make", "check"]}), &actual).unwrap(),
            "at `.exec[1]`: expected \"check\", got \"test\""
        );
        assert!(
            first_mismatch(&json!({"exec": ["make"]}), &actual)
                .unwrap()
                .contains("expected 1 item(s), got 2")
        );
        assert!(first_mismatch(&json!({"exec": [{"contains": "ma"}, "test"]}), &actual).is_none());
    }
}
