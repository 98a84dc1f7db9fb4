//! `loopbox hook claude-code` as Claude Code runs it: recorded hook inputs on
//! stdin to the real binary, the stdout JSON and exit code checked; and
//! `hook install` / `uninstall` against existing settings files.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_loopbox");
const RALPH_INPUT: &str = r#"{"prompt": "Fix the build.", "completion_promise": "DONE", "max_iterations": 4}"#;

fn probe() -> &'static Path {
    static PROBE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PROBE.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        loopbox_guest_build::Repo::containing(root).build_rust_guests(&["probe"]).remove(0).1
    })
}

fn run(dir: &Path, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .env("LOOPBOX_CACHE_DIR", std::env::temp_dir().join("loopbox-hook-test-cache"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

/// One hook invocation: (exit code, stdout JSON or Null, stderr).
fn hook(dir: &Path, policy: &str, input: Value) -> (i32, Value, String) {
    // The probe's start input is an op like any other; Ralph's is its loop config.
    let start = if policy.starts_with("builtin:") { RALPH_INPUT } else { r#"{"op": "echo"}"# };
    let o = run(dir, &["hook", "claude-code", "--policy", policy, "--input", start], &input.to_string());
    let out = String::from_utf8_lossy(&o.stdout);
    let json = if out.trim().is_empty() { Value::Null } else { serde_json::from_str(&out).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {out}")) };
    (o.status.code().unwrap(), json, String::from_utf8_lossy(&o.stderr).into_owned())
}

fn stop(dir: &Path, session: &str, message: Option<&str>, active: bool) -> Value {
    let mut v = json!({
        "session_id": session, "transcript_path": dir.join("missing.jsonl"), "cwd": dir,
        "permission_mode": "default", "hook_event_name": "Stop", "stop_hook_active": active,
    });
    if let Some(m) = message {
        v["last_assistant_message"] = json!(m);
    }
    v
}

#[test]
fn ralph_blocks_each_stop_until_the_promise() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (code, out, err) = hook(d, "builtin:ralph", stop(d, "s1", Some("I started."), false));
    assert_eq!((code, &out), (0, &json!({"decision": "block", "reason": "Fix the build.\n\n[ralph iteration 2 of 4]"})), "{err}");
    let (_, out, _) = hook(d, "builtin:ralph", stop(d, "s1", Some("<promise>NOT YET</promise>"), true));
    assert_eq!(out["reason"], "Fix the build.\n\n[ralph iteration 3 of 4]");
    let (code, out, _) = hook(d, "builtin:ralph", stop(d, "s1", Some("All green. <promise>DONE</promise>"), true));
    assert_eq!((code, &out), (0, &json!({"systemMessage": "loopbox: completion promise found after 3 iteration(s)"})));
    // The loop is over for this session: later stops pass through.
    assert_eq!(hook(d, "builtin:ralph", stop(d, "s1", Some("more"), false)), (0, Value::Null, String::new()));
    // Another session starts its own loop and stops at the iteration limit.
    for i in 2..=4 {
        let (_, out, _) = hook(d, "builtin:ralph", stop(d, "s2", Some("no"), i > 2));
        assert_eq!(out["decision"], "block", "iteration {i}");
    }
    let (code, out, _) = hook(d, "builtin:ralph", stop(d, "s2", Some("no"), true));
    assert_eq!((code, &out), (0, &json!({"systemMessage": "loopbox: max_iterations (4) reached without the completion promise"})));

    // Hook sessions are runs like any other.
    let o = run(d, &["runs", "--json"], "");
    let runs: Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut statuses: Vec<(&str, &str, u64)> =
        runs.as_array().unwrap().iter().map(|r| (r["status"].as_str().unwrap(), r["last_event"].as_str().unwrap(), r["turns"].as_u64().unwrap())).collect();
    statuses.sort();
    assert_eq!(statuses, [("done", "turn-complete", 3), ("failed", "turn-complete", 4)]);
}

#[test]
fn the_response_comes_from_the_transcript_when_the_input_lacks_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let transcript = d.join("session.jsonl");
    std::fs::write(
        &transcript,
        [
            json!({"type": "user", "message": {"role": "user", "content": "go"}}).to_string(),
            json!({"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": "done <promise>DONE</promise>"}]}}).to_string(),
        ]
        .join("\n"),
    )
    .unwrap();
    let mut input = stop(d, "t1", None, false);
    input["transcript_path"] = json!(transcript);
    let (code, out, err) = hook(d, "builtin:ralph", input);
    assert_eq!((code, out["systemMessage"].as_str()), (0, Some("loopbox: completion promise found after 1 iteration(s)")), "{err}");
    // SubagentStop reads the agent's own transcript.
    let mut input = stop(d, "t2", None, false);
    input["hook_event_name"] = json!("SubagentStop");
    input["agent_transcript_path"] = json!(transcript);
    input["agent_id"] = json!("a1");
    assert_eq!(hook(d, "builtin:ralph", input).1["systemMessage"], "loopbox: completion promise found after 1 iteration(s)");
    // A transcript outside the workspace and ~/.claude is not read.
    let mut input = stop(d, "t3", None, false);
    input["transcript_path"] = json!("/etc/passwd");
    let (code, out, err) = hook(d, "builtin:ralph", input);
    assert_eq!((code, out), (1, Value::Null));
    assert!(err.contains("outside the workspace and ~/.claude"), "{err}");
}

#[test]
fn tool_calls_and_prompts_map_to_their_answers() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let probe = probe().to_string_lossy().into_owned();
    let pre = |op: Value| json!({"session_id": "p", "transcript_path": "", "cwd": d, "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": op, "tool_use_id": "t"});
    let (_, out, _) = hook(d, &probe, pre(json!({"op": "echo", "then": "block"})));
    assert_eq!(out, json!({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": "probe blocks"}}));
    let (_, out, _) = hook(d, &probe, pre(json!({"op": "echo", "then": "ask"})));
    assert_eq!(out["hookSpecificOutput"]["permissionDecision"], "ask");
    let (_, out, _) = hook(d, &probe, pre(json!({"op": "echo", "command": "ls -a", "then": "rewrite"})));
    // A rewrite is shown to the user, never approved by the policy.
    assert_eq!(out["hookSpecificOutput"]["permissionDecision"], "ask");
    assert_eq!(out["hookSpecificOutput"]["updatedInput"], json!({"op": "echo", "command": "ls -a", "then": "rewrite"}));
    assert_eq!(hook(d, &probe, pre(json!({"op": "echo", "then": "pass"}))), (0, Value::Null, String::new()));
    let (_, out, _) = hook(d, &probe, pre(json!({"op": "echo", "then": "escalate"})));
    assert_eq!(out, json!({"continue": false, "stopReason": "probe escalates"}));

    let post = json!({"session_id": "q", "cwd": d, "hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_input": {"op": "echo", "then": "block"}, "tool_response": {}});
    assert_eq!(hook(d, &probe, post).1, json!({"decision": "block", "reason": "probe blocks"}));
    let prompt = |op: Value| json!({"session_id": "u", "cwd": d, "hook_event_name": "UserPromptSubmit", "prompt": op.to_string()});
    assert_eq!(hook(d, &probe, prompt(json!({"op": "echo", "then": "block"}))).1, json!({"decision": "block", "reason": "probe blocks"}));
    assert_eq!(
        hook(d, &probe, prompt(json!({"op": "echo", "then": "inject", "message": "ctx"}))).1,
        json!({"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "ctx"}})
    );
}

#[test]
fn failures_never_block_the_agent() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let probe = probe().to_string_lossy().into_owned();
    let trap = json!({"session_id": "z", "cwd": d, "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"op": "trap"}}).to_string();
    for (policy, start, stdin, expect) in [
        ("builtin:ralph", RALPH_INPUT, "{not json".to_string(), "hook input is not JSON"),
        ("builtin:ralph", RALPH_INPUT, "".to_string(), "no hook input on stdin"),
        ("builtin:nope", "{}", stop(d, "x", Some("hi"), false).to_string(), "there is no builtin policy `nope`"),
        (&probe, "{}", trap.clone(), "the policy failed on start: policy returned an error: probe: unknown op"),
        (&probe, r#"{"op": "echo"}"#, trap, "policy trapped"),
    ] {
        let o = run(d, &["hook", "claude-code", "--policy", policy, "--input", start], &stdin);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "exit 1 is non-blocking; exit 2 would block: {err}");
        assert!(o.stdout.is_empty());
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(err.starts_with(&format!("loopbox: the {policy} hook failed and let Claude continue: ")) && err.contains(expect), "{err}");
        assert!(err.contains("details in"), "{err}");
    }
    let log = std::fs::read_to_string(d.join(".loopbox/hook.log")).unwrap();
    assert_eq!(log.lines().count(), 5, "{log}");
}

const SETTINGS: &str = r#"{
  "hooks": {
    "PreToolUse": [
      {
        "matcher": "Bash",
        "hooks": [
          {
            "type": "command",
            "command": "python3 guard.py"
          }
        ]
      }
    ]
  },
  "permissions": {
    "deny": [
      "Read(.env)"
    ]
  }
}
"#;

#[test]
fn install_and_uninstall_keep_other_hooks_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join(".claude")).unwrap();
    let settings = d.join(".claude/settings.json");
    std::fs::write(&settings, SETTINGS).unwrap();
    let install = ["hook", "install", "claude-code", "--policy", "builtin:ralph", "--event", "Stop", "--input", RALPH_INPUT];
    let o = run(d, &install, "");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "installed the Stop hook for builtin:ralph in ./.claude/settings.json\n");
    let text = std::fs::read_to_string(&settings).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["hooks"]["PreToolUse"], serde_json::from_str::<Value>(SETTINGS).unwrap()["hooks"]["PreToolUse"]);
    let command = v["hooks"]["Stop"][0]["hooks"][0]["command"].as_str().unwrap();
    assert!(command.ends_with(&format!("hook claude-code --policy builtin:ralph --input '{RALPH_INPUT}'")), "{command}");
    assert_eq!(String::from_utf8_lossy(&run(d, &install, "").stdout), "the Stop hook for builtin:ralph is already installed in ./.claude/settings.json\n");

    let gate = ["hook", "install", "claude-code", "--policy", "builtin:todo-enforcer", "--event", "PreToolUse", "--matcher", "Bash"];
    assert_eq!(run(d, &gate, "").status.code(), Some(0));
    let mut un = gate;
    un[1] = "uninstall";
    run(d, &un, "");
    let mut un = install;
    un[1] = "uninstall";
    let o = run(d, &un, "");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "removed the Stop hook for builtin:ralph in ./.claude/settings.json\n");
    assert_eq!(std::fs::read_to_string(&settings).unwrap(), SETTINGS, "back to the original bytes");

    let o = run(d, &["hook", "install", "claude-code", "--policy", "builtin:ralph", "--event", "Stopp"], "");
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown hook event `Stopp`"));
}

#[test]
fn the_installed_command_runs_as_claude_code_would_run_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    run(d, &["hook", "install", "claude-code", "--policy", "builtin:ralph", "--event", "Stop", "--input", RALPH_INPUT], "");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(d.join(".claude/settings.json")).unwrap()).unwrap();
    let command = v["hooks"]["Stop"][0]["hooks"][0]["command"].as_str().unwrap();
    let mut child = Command::new("sh")
        .args(["-c", command])
        .current_dir(d)
        .env("LOOPBOX_CACHE_DIR", std::env::temp_dir().join("loopbox-hook-test-cache"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stop(d, "sh", Some("hi"), false).to_string().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["reason"], "Fix the build.\n\n[ralph iteration 2 of 4]");
}
