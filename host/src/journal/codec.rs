//! Requests and results as journal text: canonical JSON, so a replayed
//! request compares equal to the recorded one exactly when it asks for the
//! same thing.

use serde_json::{Value, json};

use crate::bindings::actions::{ActionError, Output, PromptKind, PromptRequest, ShellRequest};

pub fn shell_request(req: &ShellRequest) -> String {
    match req {
        ShellRequest::Exec(c) => json!({
            "exec": c.argv, "cwd": c.cwd, "env": c.env, "stdin": c.stdin, "timeout_ms": c.timeout_ms,
        }),
        ShellRequest::Script(s) => json!({"script": s.source, "cwd": s.cwd, "timeout_ms": s.timeout_ms}),
    }
    .to_string()
}

pub fn prompt_request(req: &PromptRequest) -> String {
    let kind = match req.kind {
        PromptKind::Prompt => "prompt",
        PromptKind::SlashCommand => "slash-command",
    };
    let mut v = json!({"text": req.text, "kind": kind, "model": req.model, "session": req.session, "timeout_ms": req.timeout_ms});
    // Only when set: a run journaled before contract 0.3.0 has neither key, and
    // its replayed requests must compare equal to what it recorded.
    if let Some(p) = &req.profile {
        v["profile"] = json!(p);
    }
    if let Some(c) = &req.cwd {
        v["cwd"] = json!(c);
    }
    v.to_string()
}

pub fn action_result(r: &Result<Output, ActionError>) -> String {
    action_value(r).to_string()
}

/// An action's result with what the agent turn behind it cost, under `usage`
/// beside `ok` or `err` (a replay reads the result alone; `runs show` and the
/// store's totals read the charge).
pub fn action_result_charged(
    r: &Result<Output, ActionError>,
    charge: Option<&crate::spend::Charge>,
) -> String {
    let mut v = action_value(r);
    if let Some(c) = charge {
        v["usage"] = serde_json::to_value(c).unwrap_or(Value::Null);
    }
    v.to_string()
}

fn action_value(r: &Result<Output, ActionError>) -> Value {
    match r {
        Ok(o) => json!({"ok": {
            "exit_code": o.exit_code, "stdout": o.stdout, "stderr": o.stderr, "duration_ms": o.duration_ms,
            "timed_out": o.timed_out, "truncated": o.truncated, "session": o.session,
        }}),
        Err(e) => {
            let (kind, message) = match e {
                ActionError::Denied(m) => ("denied", Some(m)),
                ActionError::Declined(m) => ("declined", Some(m)),
                ActionError::BudgetExhausted(m) => ("budget-exhausted", Some(m)),
                ActionError::Invalid(m) => ("invalid", Some(m)),
                ActionError::Unavailable(m) => ("unavailable", Some(m)),
                ActionError::OutcomeUnknown => ("outcome-unknown", None),
            };
            json!({"err": {"kind": kind, "message": message}})
        }
    }
}

/// A recorded action result; `None` when the text is not one (a damaged journal).
pub fn parse_action_result(text: &str) -> Option<Result<Output, ActionError>> {
    let v: Value = serde_json::from_str(text).ok()?;
    if let Some(o) = v.get("ok") {
        let s = |k: &str| o[k].as_str().map(String::from);
        return Some(Ok(Output {
            exit_code: o["exit_code"].as_i64().map(|c| c as i32),
            stdout: s("stdout")?,
            stderr: s("stderr")?,
            duration_ms: o["duration_ms"].as_u64()?,
            timed_out: o["timed_out"].as_bool()?,
            truncated: o["truncated"].as_bool()?,
            session: s("session"),
        }));
    }
    let e = v.get("err")?;
    let m = e["message"].as_str().unwrap_or_default().to_string();
    Some(Err(match e["kind"].as_str()? {
        "denied" => ActionError::Denied(m),
        "declined" => ActionError::Declined(m),
        "budget-exhausted" => ActionError::BudgetExhausted(m),
        "invalid" => ActionError::Invalid(m),
        "unavailable" => ActionError::Unavailable(m),
        "outcome-unknown" => ActionError::OutcomeUnknown,
        _ => return None,
    }))
}

/// `result<T, string>` of the workspace calls.
pub fn text_result<T: serde::Serialize>(r: &Result<T, String>) -> String {
    match r {
        Ok(v) => json!({"ok": v}),
        Err(e) => json!({"err": e}),
    }
    .to_string()
}

pub fn parse_text_result<T: serde::de::DeserializeOwned>(text: &str) -> Option<Result<T, String>> {
    let v: Value = serde_json::from_str(text).ok()?;
    match (v.get("ok"), v.get("err")) {
        (Some(ok), _) => serde_json::from_value(ok.clone()).ok().map(Ok),
        (_, Some(Value::String(e))) => Some(Err(e.clone())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_action_result_survives_the_journal() {
        let out = Output {
            exit_code: Some(3),
            stdout: "o\n".into(),
            stderr: "e".into(),
            duration_ms: 12,
            timed_out: false,
            truncated: true,
            session: Some("s".into()),
        };
        let signalled = Output {
            exit_code: None,
            session: None,
            ..out.clone()
        };
        let cases = [
            Ok(out),
            Ok(signalled),
            Err(ActionError::Denied("d".into())),
            Err(ActionError::Declined("n".into())),
            Err(ActionError::BudgetExhausted("b".into())),
            Err(ActionError::Invalid("i".into())),
            Err(ActionError::Unavailable("u".into())),
            Err(ActionError::OutcomeUnknown),
        ];
        for c in cases {
            let text = action_result(&c);
            assert_eq!(action_result(&parse_action_result(&text).unwrap()), text);
        }
        assert!(parse_action_result("{\"err\": {\"kind\": \"bogus\"}}").is_none());
        assert!(parse_action_result("garbage").is_none());
    }

    #[test]
    fn workspace_results_survive_the_journal() {
        let r: Result<Vec<String>, String> = Ok(vec!["a".into(), "b/".into()]);
        assert_eq!(
            parse_text_result::<Vec<String>>(&text_result(&r)).unwrap(),
            r
        );
        let e: Result<String, String> = Err("no such file".into());
        assert_eq!(parse_text_result::<String>(&text_result(&e)).unwrap(), e);
    }
}

#[cfg(test)]
mod profile_tests {
    use super::*;

    fn req(profile: Option<&str>, cwd: Option<&str>) -> PromptRequest {
        PromptRequest {
            text: "hi".into(),
            kind: PromptKind::Prompt,
            model: None,
            session: None,
            timeout_ms: None,
            profile: profile.map(String::from),
            cwd: cwd.map(String::from),
        }
    }

    /// A run journaled before contract 0.3.0 recorded no `profile` or `cwd`:
    /// the same request must still compare equal on resume, and one naming
    /// another profile (or directory) must not.
    #[test]
    fn a_prompt_without_profile_or_cwd_is_recorded_as_before_0_3_0() {
        assert_eq!(
            prompt_request(&req(None, None)),
            r#"{"text":"hi","kind":"prompt","model":null,"session":null,"timeout_ms":null}"#
        );
        let a = prompt_request(&req(Some("a"), None));
        assert!(a.contains(r#""profile":"a""#), "{a}");
        assert_ne!(a, prompt_request(&req(Some("b"), None)));
        assert_ne!(a, prompt_request(&req(Some("a"), Some("wt"))));
    }
}
