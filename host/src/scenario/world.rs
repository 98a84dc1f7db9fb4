//! The world a scenario gives a policy: each host call of one event is
//! answered here, through the event's journal ([`crate::journal::Script`]).
//! Commands and prompts come from the step's scripted calls, in order;
//! workspace reads from the scenario's files; clocks read a fixed time that
//! advances one millisecond a reading. A call the step does not script stops
//! the event, naming the call and the scenario's line.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::check::first_mismatch;
use super::format::Call;
use crate::journal::Script;
use crate::journal::codec;
use crate::ui::shorten;

/// The wall clock's reading at a scenario's first event: 2026-01-01T00:00:00Z.
pub const EPOCH_NANOS: u128 = 1_767_225_600 * 1_000_000_000;

/// Files and clocks, shared by every event of a scenario.
pub struct Shared {
    pub files: BTreeMap<String, String>,
    /// Nanoseconds the clocks have advanced.
    ticks: Mutex<u128>,
    /// `limits.output_bytes`: a scripted output longer than this is cut, as a real one is.
    output_cap: usize,
}

impl Shared {
    pub fn new(files: BTreeMap<String, String>, output_cap: usize) -> Arc<Shared> {
        Arc::new(Shared {
            files,
            ticks: Mutex::new(0),
            output_cap,
        })
    }

    fn tick(&self) -> u128 {
        let mut t = self.ticks.lock().unwrap_or_else(|p| p.into_inner());
        *t += 1_000_000;
        *t
    }

    fn read(&self, path: &str) -> Result<String, String> {
        let key = normalize(path);
        self.files.get(&key).cloned().ok_or_else(|| {
            if self.files.keys().any(|f| f.starts_with(&format!("{key}/"))) {
                format!("`{path}` is a directory")
            } else {
                format!("`{path}` does not exist (the scenario's `files` has no such file)")
            }
        })
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, String> {
        let key = normalize(dir);
        let prefix = if key.is_empty() {
            String::new()
        } else {
            format!("{key}/")
        };
        let mut names: Vec<String> = self
            .files
            .keys()
            .filter_map(|f| f.strip_prefix(&prefix))
            .map(|rest| match rest.split_once('/') {
                Some((d, _)) => format!("{d}/"),
                None => rest.to_string(),
            })
            .collect();
        names.dedup();
        if names.is_empty() && !key.is_empty() {
            return Err(format!(
                "`{dir}` does not exist (the scenario's `files` has nothing under it)"
            ));
        }
        Ok(names)
    }
}

/// `./a//b/` and `a/b` name the same file.
fn normalize(path: &str) -> String {
    path.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect::<Vec<_>>()
        .join("/")
}

/// One event's world: its scripted calls and how far the policy got.
pub struct EventWorld {
    shared: Arc<Shared>,
    calls: Vec<Call>,
    /// The step's line, for calls it does not script.
    line: u32,
    made: Mutex<usize>,
    /// The line of the scripted call the policy's request did not match.
    failed_at: Mutex<Option<u32>>,
}

impl EventWorld {
    pub fn new(shared: Arc<Shared>, calls: Vec<Call>, line: u32) -> Arc<EventWorld> {
        Arc::new(EventWorld {
            shared,
            calls,
            line,
            made: Mutex::new(0),
            failed_at: Mutex::new(None),
        })
    }

    /// Where the scenario and the policy parted: the mismatched call's line.
    pub fn failed_at(&self) -> Option<u32> {
        *self.failed_at.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The first scripted call the policy never made, if any.
    pub fn unmade(&self) -> Option<&Call> {
        let made = *self.made.lock().unwrap_or_else(|p| p.into_inner());
        self.calls.get(made)
    }

    fn action(&self, kind: &str, request: &str) -> Result<String, String> {
        let mut made = self.made.lock().unwrap_or_else(|p| p.into_inner());
        let asked = describe(kind, request);
        let Some(call) = self.calls.get(*made) else {
            return Err(format!(
                "unexpected call: the policy asked for {asked}, and the step at line {} scripts {} call(s), all made; script it under that step's `calls`",
                self.line,
                self.calls.len()
            ));
        };
        let actual: Value = serde_json::from_str(request).unwrap_or(Value::Null);
        let diff = if call.kind != kind {
            Some(format!("expected a {} call", call.kind))
        } else {
            first_mismatch(&call.request.value, &actual)
        };
        if let Some(diff) = diff {
            *self.failed_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(call.line);
            return Err(format!(
                "call {} of the step does not match the scenario (line {}): the policy asked for {asked}; {diff}",
                *made + 1,
                call.line
            ));
        }
        *made += 1;
        Ok(self.capped(&call.returns))
    }

    /// A scripted output cut at `limits.output_bytes`, as the host cuts a real one.
    fn capped(&self, text: &str) -> String {
        let cap = self.shared.output_cap;
        let Some(Ok(mut out)) = codec::parse_action_result(text) else {
            return text.to_string();
        };
        for s in [&mut out.stdout, &mut out.stderr] {
            if s.len() > cap {
                let mut end = cap;
                while !s.is_char_boundary(end) {
                    end -= 1;
                }
                s.truncate(end);
                out.truncated = true;
            }
        }
        codec::action_result(&Ok(out))
    }
}

impl Script for EventWorld {
    fn answer(&self, kind: &str, request: &str) -> Result<String, String> {
        match kind {
            "shell" | "prompt" => self.action(kind, request),
            "read" => Ok(codec::text_result(&self.shared.read(request))),
            "list-dir" => Ok(codec::text_result(&self.shared.list(request))),
            "wall-clock" => Ok((EPOCH_NANOS + self.shared.tick()).to_string()),
            "monotonic-clock" => Ok(self.shared.tick().to_string()),
            other => Err(format!(
                "unexpected call: the policy asked for {}, which a scenario cannot answer",
                describe(other, request)
            )),
        }
    }
}

fn describe(kind: &str, request: &str) -> String {
    let req: Value = serde_json::from_str(request).unwrap_or(Value::Null);
    let what = match (kind, &req) {
        ("shell", v) if v["exec"].is_array() => format!("exec {}", v["exec"]),
        ("shell", v) if v["script"].is_string() => format!("script {}", v["script"]),
        ("prompt", v) => format!("prompt {}", v["text"]),
        _ => format!("{kind} {request}"),
    };
    shorten(&crate::ui::sanitize(&what), 300)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::format::Pattern;
    use serde_json::json;

    fn shell_call(argv: Value, returns: &str) -> Call {
        Call {
            line: 7,
            kind: "shell",
            request: Pattern {
                line: 7,
                value: json!({"exec": argv}),
            },
            returns: returns.into(),
        }
    }

    #[test]
    fn scripted_calls_answer_in_order_and_others_fail_naming_the_line() {
        let ok = "{\"ok\":{\"exit_code\":0,\"stdout\":\"hi\",\"stderr\":\"\",\"duration_ms\":0,\"timed_out\":false,\"truncated\":false,\"session\":null}}";
        let w = EventWorld::new(
            Shared::new(BTreeMap::new(), 1000),
            vec![shell_call(json!(["make", "test"]), ok)],
            3,
        );
        let req = |argv: &[&str]| {
            json!({"exec": argv, "cwd": null, "env": [], "stdin": null, "timeout_ms": null})
                .to_string()
        };
        let e = w.answer("shell", &req(&["make", "check"])).unwrap_err();
        assert!(
            e.contains("(line 7)") && e.contains("at `.exec[1]`: expected \"test\", got \"check\""),
            "{e}"
        );
        assert!(w.unmade().is_some());
        assert_eq!(w.answer("shell", &req(&["make", "test"])).unwrap(), ok);
        assert!(w.unmade().is_none());
        let e = w.answer("shell", &req(&["ls"])).unwrap_err();
        assert!(e.contains("the step at line 3 scripts 1 call(s)"), "{e}");
    }

    #[test]
    fn files_and_directories_come_from_the_scenario() {
        let files = BTreeMap::from([
            ("a.txt".to_string(), "A".to_string()),
            ("src/lib.rs".to_string(), "L".to_string()),
        ]);
        let w = EventWorld::new(Shared::new(files, 10), vec![], 1);
        assert_eq!(w.answer("read", "./a.txt").unwrap(), "{\"ok\":\"A\"}");
        assert!(
            w.answer("read", "b.txt")
                .unwrap()
                .contains("does not exist")
        );
        assert_eq!(
            w.answer("list-dir", ".").unwrap(),
            "{\"ok\":[\"a.txt\",\"src/\"]}"
        );
        assert_eq!(
            w.answer("list-dir", "src").unwrap(),
            "{\"ok\":[\"lib.rs\"]}"
        );
        let a: u128 = w.answer("wall-clock", "").unwrap().parse().unwrap();
        let b: u128 = w.answer("wall-clock", "").unwrap().parse().unwrap();
        assert!(b > a && a > EPOCH_NANOS);
    }

    #[test]
    fn a_scripted_output_past_the_output_limit_is_cut_and_marked() {
        let big = format!(
            "{{\"ok\":{{\"exit_code\":0,\"stdout\":\"{}\",\"stderr\":\"\",\"duration_ms\":0,\"timed_out\":false,\"truncated\":false,\"session\":null}}}}",
            "x".repeat(5000)
        );
        let w = EventWorld::new(
            Shared::new(BTreeMap::new(), 100),
            vec![shell_call(json!(["x"]), &big)],
            1,
        );
        let out = w
            .answer("shell", &json!({"exec": ["x"]}).to_string())
            .unwrap();
        let out = codec::parse_action_result(&out).unwrap().unwrap();
        assert_eq!((out.stdout.len(), out.truncated), (100, true));
    }
}
