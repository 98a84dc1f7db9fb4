//! `loopbox hook claude-code|codex|gemini` as the agents run it: recorded hook
//! inputs on stdin to the real binary, the stdout JSON and exit code checked
//! (against golden files for every event and decision); and `hook install` /
//! `uninstall` against existing settings files.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

use crate::common;

use common::{BIN, probe};

mod codex;
mod yaml_loop;
const RALPH_INPUT: &str =
    r#"{"prompt": "Fix the build.", "completion_promise": "DONE", "max_iterations": 4}"#;

fn run(dir: &Path, args: &[&str], stdin: &str) -> Output {
    run_env(dir, args, stdin, &[])
}

/// `run` with extra environment variables, the config in `dir` approved as a user would.
fn run_env(dir: &Path, args: &[&str], stdin: &str, env: &[(&str, &Path)]) -> Output {
    common::trust(&dir.join("loopbox.toml"));
    run_bytes(dir, args, stdin.as_bytes(), env)
}

/// The binary in `dir` with `stdin` as its input, trusting nothing the test did not
/// trust itself (this process's own data directory). A child that stops reading
/// (an input over the limit) ends the write, not the test.
fn run_bytes(dir: &Path, args: &[&str], stdin: &[u8], env: &[(&str, &Path)]) -> Output {
    common::feed(
        Command::new(BIN)
            .args(args)
            .env("XDG_DATA_HOME", common::data_home())
            .current_dir(dir)
            .env(
                "LOOPBOX_CACHE_DIR",
                std::env::temp_dir().join("loopbox-hook-test-cache"),
            )
            .envs(env.iter().map(|(k, v)| (*k, *v))),
        stdin,
    )
}

/// A gate's answer that refuses the tool call (exit 0, `permissionDecision: deny`),
/// with stderr saying each of `why`.
fn assert_denied(code: i32, out: &Value, err: &str, why: &[&str]) {
    assert_eq!(
        (
            code,
            out["hookSpecificOutput"]["permissionDecision"].as_str()
        ),
        (0, Some("deny")),
        "{err}"
    );
    for w in why {
        assert!(err.contains(w), "stderr lacks {w:?}: {err}");
    }
}

/// (exit code, stdout JSON or Null, stderr) of a hook process.
fn answer_of(o: &Output) -> (i32, Value, String) {
    let out = String::from_utf8_lossy(&o.stdout);
    let json = if out.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {out}"))
    };
    (
        o.status.code().unwrap(),
        json,
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// One hook invocation: (exit code, stdout JSON or Null, stderr).
fn hook(dir: &Path, policy: &str, input: Value) -> (i32, Value, String) {
    // The probe's start input is an op like any other; Ralph's is its loop config.
    let start = if policy.starts_with("builtin:") {
        RALPH_INPUT
    } else {
        r#"{"op": "echo"}"#
    };
    answer_of(&run(
        dir,
        &["hook", "claude-code", "--policy", policy, "--input", start],
        &input.to_string(),
    ))
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
    assert_eq!(
        (code, &out),
        (
            0,
            &json!({"decision": "block", "reason": "Fix the build.\n\n[ralph iteration 2 of 4]"})
        ),
        "{err}"
    );
    let (_, out, _) = hook(
        d,
        "builtin:ralph",
        stop(d, "s1", Some("<promise>NOT YET</promise>"), true),
    );
    assert_eq!(out["reason"], "Fix the build.\n\n[ralph iteration 3 of 4]");
    let (code, out, _) = hook(
        d,
        "builtin:ralph",
        stop(d, "s1", Some("All green. <promise>DONE</promise>"), true),
    );
    assert_eq!(
        (code, &out),
        (
            0,
            &json!({"systemMessage": "loopbox: completion promise found after 3 iteration(s)"})
        )
    );
    // The loop is over for this session: later stops pass through.
    assert_eq!(
        hook(d, "builtin:ralph", stop(d, "s1", Some("more"), false)),
        (0, Value::Null, String::new())
    );
    // Another session starts its own loop and stops at the iteration limit.
    for i in 2..=4 {
        let (_, out, _) = hook(d, "builtin:ralph", stop(d, "s2", Some("no"), i > 2));
        assert_eq!(out["decision"], "block", "iteration {i}");
    }
    let (code, out, _) = hook(d, "builtin:ralph", stop(d, "s2", Some("no"), true));
    assert_eq!(
        (code, &out),
        (
            0,
            &json!({"systemMessage": "loopbox: max_iterations (4) reached without the completion promise"})
        )
    );

    // Hook sessions are runs like any other.
    let o = run(d, &["runs", "--json"], "");
    let runs: Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut statuses: Vec<(&str, &str, u64)> = runs
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["status"].as_str().unwrap(),
                r["last_event"].as_str().unwrap(),
                r["turns"].as_u64().unwrap(),
            )
        })
        .collect();
    statuses.sort();
    assert_eq!(
        statuses,
        [("done", "turn-complete", 3), ("failed", "turn-complete", 4)]
    );

    // A session whose run the user cancelled stops steering the agent.
    let (_, out, _) = hook(d, "builtin:ralph", stop(d, "s3", Some("no"), false));
    assert_eq!(out["decision"], "block");
    let o = run(d, &["runs", "--json"], "");
    let runs: Value = serde_json::from_slice(&o.stdout).unwrap();
    let s3 = runs
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["status"] == "running")
        .expect("the s3 session's run");
    let id = s3["id"].as_str().unwrap();
    let o = run(d, &["runs", "cancel", id, "--json"], "");
    let cancelled: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    assert_eq!(
        hook(d, "builtin:ralph", stop(d, "s3", Some("no"), true)),
        (0, Value::Null, String::new())
    );
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
    assert_eq!(
        (code, out["systemMessage"].as_str()),
        (
            0,
            Some("loopbox: completion promise found after 1 iteration(s)")
        ),
        "{err}"
    );
    // SubagentStop reads the agent's own transcript.
    let mut input = stop(d, "t2", None, false);
    input["hook_event_name"] = json!("SubagentStop");
    input["agent_transcript_path"] = json!(transcript);
    input["agent_id"] = json!("a1");
    assert_eq!(
        hook(d, "builtin:ralph", input).1["systemMessage"],
        "loopbox: completion promise found after 1 iteration(s)"
    );
    // A transcript outside the workspace and ~/.claude is not read.
    let mut input = stop(d, "t3", None, false);
    input["transcript_path"] = json!("/etc/passwd");
    let (code, out, err) = hook(d, "builtin:ralph", input);
    assert_eq!((code, out), (1, Value::Null));
    assert!(
        err.contains("outside the workspace and Claude Code's configuration directory"),
        "{err}"
    );
}

#[test]
fn tool_calls_and_prompts_map_to_their_answers() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let probe = probe().to_string_lossy().into_owned();
    let pre = |op: Value| json!({"session_id": "p", "transcript_path": "", "cwd": d, "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": op, "tool_use_id": "t"});
    let (_, out, _) = hook(d, &probe, pre(json!({"op": "echo", "then": "block"})));
    assert_eq!(
        out,
        json!({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": "probe blocks"}})
    );
    let (_, out, _) = hook(d, &probe, pre(json!({"op": "echo", "then": "ask"})));
    assert_eq!(out["hookSpecificOutput"]["permissionDecision"], "ask");
    let (_, out, _) = hook(
        d,
        &probe,
        pre(json!({"op": "echo", "command": "ls -a", "then": "rewrite"})),
    );
    // A rewrite is shown to the user, never approved by the policy.
    assert_eq!(out["hookSpecificOutput"]["permissionDecision"], "ask");
    assert_eq!(
        out["hookSpecificOutput"]["updatedInput"],
        json!({"op": "echo", "command": "ls -a", "then": "rewrite"})
    );
    assert_eq!(
        hook(d, &probe, pre(json!({"op": "echo", "then": "pass"}))),
        (0, Value::Null, String::new())
    );
    let (_, out, _) = hook(d, &probe, pre(json!({"op": "echo", "then": "escalate"})));
    assert_eq!(
        out,
        json!({"continue": false, "stopReason": "probe escalates"})
    );

    let post = json!({"session_id": "q", "cwd": d, "hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_input": {"op": "echo", "then": "block"}, "tool_response": {}});
    assert_eq!(
        hook(d, &probe, post).1,
        json!({"decision": "block", "reason": "probe blocks"})
    );
    let prompt = |op: Value| json!({"session_id": "u", "cwd": d, "hook_event_name": "UserPromptSubmit", "prompt": op.to_string()});
    assert_eq!(
        hook(d, &probe, prompt(json!({"op": "echo", "then": "block"}))).1,
        json!({"decision": "block", "reason": "probe blocks"})
    );
    assert_eq!(
        hook(
            d,
            &probe,
            prompt(json!({"op": "echo", "then": "inject", "message": "ctx"}))
        )
        .1,
        json!({"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "ctx"}})
    );
}

#[test]
fn a_failing_gate_refuses_and_a_failing_stop_hook_lets_the_agent_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let probe = probe().to_string_lossy().into_owned();
    let trap = json!({"session_id": "z", "cwd": d, "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"op": "trap"}}).to_string();
    // Not a gate: exit 1, which every agent reads as a non-blocking error.
    for (policy, start, stdin, expect) in [
        (
            "builtin:ralph",
            RALPH_INPUT,
            "{not json".to_string(),
            "hook input is not JSON",
        ),
        (
            "builtin:ralph",
            RALPH_INPUT,
            "".to_string(),
            "no hook input on stdin",
        ),
        (
            "builtin:nope",
            "{}",
            stop(d, "x", Some("hi"), false).to_string(),
            "there is no builtin policy `nope`",
        ),
    ] {
        let o = run(
            d,
            &["hook", "claude-code", "--policy", policy, "--input", start],
            &stdin,
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            o.status.code(),
            Some(1),
            "exit 1 is non-blocking; exit 2 would block: {err}"
        );
        assert!(o.stdout.is_empty());
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(
            err.starts_with("loopbox: the hook failed and let Claude Code go on: ")
                && err.contains(expect),
            "{err}"
        );
    }
    // A gate: a trapping or failing policy denies the call (fail closed), and says why.
    for (start, expect) in [
        (
            "{}",
            "the policy failed on start: policy returned an error: probe: unknown op",
        ),
        (r#"{"op": "echo"}"#, "policy trapped"),
    ] {
        let o = run(
            d,
            &["hook", "claude-code", "--policy", &probe, "--input", start],
            &trap,
        );
        let err = String::from_utf8_lossy(&o.stderr);
        let out: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {err}"));
        assert_eq!(
            (
                o.status.code(),
                out["hookSpecificOutput"]["permissionDecision"].as_str()
            ),
            (Some(0), Some("deny")),
            "{err}"
        );
        let reason = out["hookSpecificOutput"]["permissionDecisionReason"]
            .as_str()
            .unwrap();
        assert!(
            reason.contains(expect) && reason.contains("details in") && err.contains(expect),
            "{reason}"
        );
    }
    // --on-error allow opts a gate out.
    let o = run(
        d,
        &[
            "hook",
            "claude-code",
            "--policy",
            &probe,
            "--input",
            r#"{"op": "echo"}"#,
            "--on-error",
            "allow",
        ],
        &trap,
    );
    assert_eq!((o.status.code(), o.stdout.is_empty()), (Some(1), true));
    let log = std::fs::read_to_string(d.join(".loopbox/hook.log")).unwrap();
    assert_eq!(log.lines().count(), 6, "{log}");
}

#[test]
fn every_agent_gate_fails_closed_even_when_the_policy_hangs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let probe = probe().to_string_lossy().into_owned();
    let sleep = json!({"op": "sleep", "ms": 60_000});
    for (agent, event, tool) in [
        ("claude-code", "PreToolUse", "Bash"),
        ("codex", "PreToolUse", "Bash"),
        ("gemini", "BeforeTool", "run_shell_command"),
    ] {
        let input = json!({"session_id": format!("hang-{agent}"), "cwd": d, "hook_event_name": event, "tool_name": tool, "tool_input": sleep});
        let started = std::time::Instant::now();
        // The agent gives the hook 3 s: loopbox answers before they run out.
        let o = run(
            d,
            &[
                "hook",
                agent,
                "--policy",
                &probe,
                "--input",
                r#"{"op": "echo"}"#,
                "--timeout",
                "3",
            ],
            &input.to_string(),
        );
        let took = started.elapsed();
        let out: Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{agent} {e}: {}", String::from_utf8_lossy(&o.stderr)));
        let denied =
            out["hookSpecificOutput"]["permissionDecision"] == "deny" || out["decision"] == "deny";
        assert!(denied && o.status.code() == Some(0), "{agent}: {out}");
        assert!(
            took < std::time::Duration::from_secs(3),
            "{agent} answered after {took:?}"
        );
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("no answer within 2.5 s"),
            "{agent}"
        );
    }
    // A permission request denies too; a policy that cannot answer it never approves it.
    let input = json!({"session_id": "perm", "cwd": d, "hook_event_name": "PermissionRequest", "tool_name": "Bash", "tool_input": {"op": "trap"}});
    let o = run(
        d,
        &[
            "hook",
            "claude-code",
            "--policy",
            &probe,
            "--input",
            r#"{"op": "echo"}"#,
        ],
        &input.to_string(),
    );
    let out: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        out["hookSpecificOutput"]["decision"]["behavior"], "deny",
        "{out}"
    );
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
    let install = [
        "hook",
        "install",
        "claude-code",
        "--policy",
        "builtin:ralph",
        "--event",
        "Stop",
        "--input",
        RALPH_INPUT,
    ];
    let o = run(d, &install, "");
    // The test binary is not on PATH, so the command names it by its path, and says so.
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        said.starts_with("installed the Claude Code Stop hook for builtin:ralph in ./.claude/settings.json\nnote: the command names paths of this machine"),
        "{said}"
    );
    let text = std::fs::read_to_string(&settings).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        v["hooks"]["PreToolUse"],
        serde_json::from_str::<Value>(SETTINGS).unwrap()["hooks"]["PreToolUse"]
    );
    let command = v["hooks"]["Stop"][0]["hooks"][0]["command"]
        .as_str()
        .unwrap();
    assert!(
        command.ends_with(&format!(
            "hook claude-code --policy builtin:ralph --event Stop --root {} --input '{RALPH_INPUT}'",
            d.canonicalize().unwrap().display()
        )),
        "{command}"
    );
    assert_eq!(
        String::from_utf8_lossy(&run(d, &install, "").stdout),
        "the Claude Code Stop hook for builtin:ralph is already installed in ./.claude/settings.json\n"
    );
    assert!(
        v["hooks"]["Stop"][0]["hooks"][0].get("timeout").is_none(),
        "the agent's own default timeout applies"
    );

    let gate = [
        "hook",
        "install",
        "claude-code",
        "--policy",
        "builtin:todo-enforcer",
        "--event",
        "PreToolUse",
        "--matcher",
        "Bash",
    ];
    assert_eq!(run(d, &gate, "").status.code(), Some(0));
    let mut un = gate;
    un[1] = "uninstall";
    run(d, &un, "");
    let mut un = install;
    un[1] = "uninstall";
    let o = run(d, &un, "");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "removed the Claude Code Stop hook for builtin:ralph in ./.claude/settings.json\n"
    );
    assert_eq!(
        std::fs::read_to_string(&settings).unwrap(),
        SETTINGS,
        "back to the original bytes"
    );

    let o = run(
        d,
        &[
            "hook",
            "install",
            "claude-code",
            "--policy",
            "builtin:ralph",
            "--event",
            "Stopp",
        ],
        "",
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown Claude Code hook event `Stopp`"));
}

#[test]
fn the_installed_command_runs_as_claude_code_would_run_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    run(
        d,
        &[
            "hook",
            "install",
            "claude-code",
            "--policy",
            "builtin:ralph",
            "--event",
            "Stop",
            "--input",
            RALPH_INPUT,
        ],
        "",
    );
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(d.join(".claude/settings.json")).unwrap())
            .unwrap();
    let command = v["hooks"]["Stop"][0]["hooks"][0]["command"]
        .as_str()
        .unwrap();
    let out = common::feed(
        Command::new("sh").args(["-c", command]).current_dir(d).env(
            "LOOPBOX_CACHE_DIR",
            std::env::temp_dir().join("loopbox-hook-test-cache"),
        ),
        stop(d, "sh", Some("hi"), false).to_string().as_bytes(),
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["reason"], "Fix the build.\n\n[ralph iteration 2 of 4]");
}

/// The recorded inputs of one agent's hook events (`tests/fixtures/hooks/AGENT.json`), with `$WORKSPACE` filled in.
fn fixture(agent: &str, workspace: &Path) -> serde_json::Map<String, Value> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/hooks/{agent}.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("$WORKSPACE", &workspace.to_string_lossy());
    let v: Value = serde_json::from_str(&text).unwrap();
    assert!(
        v["source"].as_str().unwrap().contains("https://"),
        "each fixture cites its reference"
    );
    v["events"].as_object().unwrap().clone()
}

const DECISIONS: [&str; 7] = [
    "pass", "inject", "block", "ask", "rewrite", "done", "escalate",
];

/// Every event of every agent, answered with every decision, through the real
/// binary; compared with `tests/fixtures/hooks/AGENT.golden.json`
/// (`LOOPBOX_BLESS=1` writes them after a deliberate change).
#[test]
fn every_event_and_decision_matches_the_golden_answers() {
    let probe = probe().to_string_lossy().into_owned();
    let threads: Vec<_> = ["claude-code", "codex", "gemini"]
        .into_iter()
        .map(|agent| {
            let probe = probe.clone();
            std::thread::spawn(move || {
                let dir = tempfile::tempdir().unwrap();
                let d = dir.path().canonicalize().unwrap();
                let mut golden = serde_json::Map::new();
                for (event, input) in fixture(agent, &d) {
                    let mut answers = serde_json::Map::new();
                    for decision in DECISIONS {
                        let answer =
                            json!({"op": "echo", "then": decision, "message": "keep going"});
                        let start =
                            json!({"op": "state", "set": {"answer": answer}, "then": "pass"})
                                .to_string();
                        let mut input = input.clone();
                        input["session_id"] = json!(format!("{event}-{decision}"));
                        let o = run(
                            &d,
                            &["hook", agent, "--policy", &probe, "--input", &start],
                            &input.to_string(),
                        );
                        let out = String::from_utf8_lossy(&o.stdout)
                            .replace(&*d.to_string_lossy(), "$WORKSPACE");
                        let stdout = if out.trim().is_empty() {
                            Value::Null
                        } else {
                            serde_json::from_str(&out).unwrap()
                        };
                        let stderr = String::from_utf8_lossy(&o.stderr)
                            .replace(&*d.to_string_lossy(), "$WORKSPACE");
                        answers.insert(
                            decision.into(),
                            json!({"exit": o.status.code(), "stdout": stdout, "stderr": stderr}),
                        );
                    }
                    golden.insert(event, Value::Object(answers));
                }
                (agent, Value::Object(golden))
            })
        })
        .collect();
    for t in threads {
        let (agent, got) = t.join().unwrap();
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("tests/fixtures/hooks/{agent}.golden.json"));
        if std::env::var_os("LOOPBOX_BLESS").is_some() {
            std::fs::write(&path, serde_json::to_string_pretty(&got).unwrap() + "\n").unwrap();
            continue;
        }
        let want: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for (event, answers) in want.as_object().unwrap() {
            for (decision, expected) in answers.as_object().unwrap() {
                assert_eq!(
                    &got[event][decision], expected,
                    "{agent} {event} {decision}"
                );
            }
        }
        assert_eq!(
            got.as_object().unwrap().len(),
            want.as_object().unwrap().len(),
            "{agent}: events"
        );
    }
}

/// `hook AGENT` with extra environment variables: (exit code, stdout JSON or Null, stderr).
fn hook_env(
    dir: &Path,
    agent: &str,
    policy: &str,
    start: &str,
    input: &Value,
    env: &[(&str, &Path)],
) -> (i32, Value, String) {
    answer_of(&run_env(
        dir,
        &["hook", agent, "--policy", policy, "--input", start],
        &input.to_string(),
        env,
    ))
}

/// The same two policies, unchanged, under each agent's adapter, from the recorded inputs.
#[test]
fn ralph_and_the_javascript_tool_gate_run_unchanged_under_all_three_agents() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let gate = loopbox_guest_build::Repo::containing(root)
        .build_js_guest("tool-gate", "decider", false)
        .to_string_lossy()
        .into_owned();
    for (agent, turn_event, tool_event, reply_key) in [
        (
            "claude-code",
            "Stop",
            "PreToolUse",
            "last_assistant_message",
        ),
        ("codex", "Stop", "PreToolUse", "last_assistant_message"),
        ("gemini", "AfterAgent", "BeforeTool", "prompt_response"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let events = fixture(agent, d);
        let turn = |reply: &str, active: bool| {
            let mut t = events[turn_event].clone();
            t[reply_key] = json!(reply);
            t["stop_hook_active"] = json!(active);
            t
        };
        // Ralph: keep going until the promise, then let the agent stop.
        let (_, out, err) = hook_env(
            d,
            agent,
            "builtin:ralph",
            RALPH_INPUT,
            &turn("I started.", false),
            &[],
        );
        assert_eq!(
            out,
            json!({"decision": "block", "reason": "Fix the build.\n\n[ralph iteration 2 of 4]"}),
            "{agent}: {err}"
        );
        let (_, out, _) = hook_env(
            d,
            agent,
            "builtin:ralph",
            RALPH_INPUT,
            &turn("Done. <promise>DONE</promise>", true),
            &[],
        );
        assert_eq!(
            out,
            json!({"systemMessage": "loopbox: completion promise found after 2 iteration(s)"}),
            "{agent}"
        );
        assert_eq!(
            hook_env(
                d,
                agent,
                "builtin:ralph",
                RALPH_INPUT,
                &turn("more", false),
                &[]
            )
            .1,
            Value::Null,
            "{agent}: the loop is over"
        );

        // The tool gate: the recorded `npm test` passes, a recursive forced delete is refused.
        let (code, out, err) = hook_env(d, agent, &gate, "{}", &events[tool_event], &[]);
        assert_eq!((code, out), (0, Value::Null), "{agent}: {err}");
        let mut rm = events[tool_event].clone();
        rm["tool_input"]["command"] = json!("cd build && sudo rm -fr /");
        let (_, out, _) = hook_env(d, agent, &gate, "{}", &rm, &[]);
        let reason = out["hookSpecificOutput"]["permissionDecisionReason"]
            .as_str()
            .or(out["reason"].as_str())
            .unwrap_or_default();
        let denied =
            out["hookSpecificOutput"]["permissionDecision"] == "deny" || out["decision"] == "deny";
        assert!(
            denied && reason.contains("refusing a recursive forced delete"),
            "{agent}: {out}"
        );
    }
}

#[test]
fn a_subagent_is_a_session_of_its_own_and_the_policy_sees_where_events_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let events = fixture("claude-code", d);
    // Subagent stops do not count toward the main thread's Ralph loop.
    let mut sub = events["SubagentStop"].clone();
    sub["last_assistant_message"] = json!("sub");
    for _ in 0..3 {
        hook_env(d, "claude-code", "builtin:ralph", RALPH_INPUT, &sub, &[]);
    }
    let (_, out, _) = hook_env(
        d,
        "claude-code",
        "builtin:ralph",
        RALPH_INPUT,
        &events["Stop"],
        &[],
    );
    assert_eq!(
        out["reason"], "Fix the build.\n\n[ralph iteration 2 of 4]",
        "the main loop starts at its own first turn"
    );
    let mut other = sub.clone();
    other["agent_id"] = json!("agent-9");
    assert_eq!(
        hook_env(d, "claude-code", "builtin:ralph", RALPH_INPUT, &other, &[]).1["reason"],
        "Fix the build.\n\n[ralph iteration 2 of 4]"
    );

    // agent_id and permission_mode reach the policy.
    let probe = probe().to_string_lossy().into_owned();
    let mut sub = events["SubagentStop"].clone();
    sub["permission_mode"] = json!("acceptEdits");
    let (_, out, _) = hook_env(
        d,
        "claude-code",
        &probe,
        r#"{"op": "echo", "then": "pass"}"#,
        &sub,
        &[],
    );
    assert_eq!(out["systemMessage"], "loopbox: turn 1");
    let runs: Value = serde_json::from_slice(&run(d, &["runs", "--json"], "").stdout).unwrap();
    let run = runs
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r.to_string().contains("probe"))
        .unwrap_or_else(|| panic!("{runs}"));
    let shown = std::process::Command::new(BIN)
        .args(["runs", "show", run["id"].as_str().unwrap(), "--json"])
        .current_dir(d)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        text.contains("agent-7f3") && text.contains("acceptEdits"),
        "{text}"
    );
    let gm = fixture("gemini", d);
    let mut gtool = gm["BeforeTool"].clone();
    gtool["tool_input"] = json!({"op": "origin"});
    let (_, out, _) = hook_env(
        d,
        "gemini",
        &probe,
        r#"{"op": "echo", "then": "pass"}"#,
        &gtool,
        &[],
    );
    assert_eq!(
        out["systemMessage"], "loopbox: tool Bash",
        "Gemini's run_shell_command is Bash to the policy"
    );
}

#[test]
fn the_workspace_is_the_project_root_and_is_never_created() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("src/deep")).unwrap();
    let stop_in = |cwd: &Path, reply: &str, session: &str| {
        let mut input = stop(d, session, Some(reply), false);
        input["cwd"] = json!(cwd);
        hook_env(
            &d.join("src"),
            "claude-code",
            "builtin:ralph",
            RALPH_INPUT,
            &input,
            &[("CLAUDE_PROJECT_DIR", d)],
        )
    };
    assert_eq!(
        stop_in(d, "<promise>DONE</promise>", "w").1["systemMessage"],
        "loopbox: completion promise found after 1 iteration(s)"
    );
    // After Claude `cd`s into a subdirectory the finished loop stays finished.
    assert_eq!(
        stop_in(&d.join("src/deep"), "still working", "w").1,
        Value::Null
    );
    assert!(!d.join("src/deep/.loopbox").exists() && !d.join("src/.loopbox").exists());

    // Without CLAUDE_PROJECT_DIR (Codex): the nearest ancestor with .loopbox/.
    let mut codex = fixture("codex", d)["Stop"].clone();
    codex["cwd"] = json!(d.join("src/deep"));
    codex["last_assistant_message"] = json!("<promise>DONE</promise>");
    assert_eq!(
        hook_env(d, "codex", "builtin:ralph", RALPH_INPUT, &codex, &[]).1["systemMessage"],
        "loopbox: completion promise found after 1 iteration(s)"
    );
    assert!(!d.join("src/deep/.loopbox").exists());

    // A cwd or -C that does not exist is an error, and nothing is created.
    let gone = d.join("gone");
    codex["cwd"] = json!(gone);
    let (code, _, err) = hook_env(d, "codex", "builtin:ralph", RALPH_INPUT, &codex, &[]);
    assert!(code == 1 && err.contains("does not create it"), "{err}");
    let o = run(
        d,
        &[
            "-C",
            gone.to_str().unwrap(),
            "hook",
            "codex",
            "--policy",
            "builtin:ralph",
        ],
        &codex.to_string(),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.code() == Some(1) && err.contains("does not create it"),
        "{err}"
    );
    assert!(!gone.exists());
    // A wrong hook command is answered in the protocol too: a Stop hook must not exit 2 (which means "keep working").
    let o = run(
        d,
        &[
            "hook",
            "codex",
            "--policy",
            "builtin:ralph",
            "--no-such-flag",
        ],
        &codex.to_string(),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.code() == Some(1) && err.contains("the hook command is wrong"),
        "{err}"
    );
    let mut pre = fixture("codex", d)["PreToolUse"].clone();
    pre["cwd"] = json!(d);
    let o = run(d, &["hook", "codex", "--polcy", "x.wasm"], &pre.to_string());
    let out: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (
            o.status.code(),
            &out["hookSpecificOutput"]["permissionDecision"]
        ),
        (Some(0), &json!("deny")),
        "a gate with a broken command refuses"
    );
}

#[test]
fn transcripts_follow_claude_config_dir() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let config = tempfile::tempdir().unwrap();
    let transcript = config.path().join("projects/t.jsonl");
    std::fs::create_dir_all(transcript.parent().unwrap()).unwrap();
    let line = |id: &str, part: Value| {
        json!({"type": "assistant", "message": {"id": id, "role": "assistant", "content": [part]}})
            .to_string()
    };
    std::fs::write(
        &transcript,
        [
            line(
                "m1",
                json!({"type": "text", "text": "<promise>DONE</promise>"}),
            ),
            line("m2", json!({"type": "tool_use", "name": "Bash"})),
        ]
        .join("\n"),
    )
    .unwrap();
    let mut input = stop(d, "cfg", None, false);
    input["transcript_path"] = json!(transcript);
    // The last message holds only a tool call: it is not the older promise.
    let (code, out, err) = hook_env(
        d,
        "claude-code",
        "builtin:ralph",
        RALPH_INPUT,
        &input,
        &[("CLAUDE_CONFIG_DIR", config.path())],
    );
    assert_eq!(
        (code, out["decision"].as_str()),
        (0, Some("block")),
        "{err}"
    );
    // Without CLAUDE_CONFIG_DIR the directory is not one loopbox reads from.
    input["session_id"] = json!("cfg2");
    let (code, _, err) = hook_env(d, "claude-code", "builtin:ralph", RALPH_INPUT, &input, &[]);
    assert!(
        code == 1 && err.contains("configuration directory"),
        "{err}"
    );
}

#[test]
fn install_writes_each_agent_and_scope_with_portable_commands() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.join("policies")).unwrap();
    std::fs::copy(probe(), d.join("policies/gate policy.wasm")).unwrap();
    let bin_dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(BIN, bin_dir.path().join("loopbox")).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin_dir.path().display());
    let install = |args: &[&str]| {
        Command::new(BIN)
            .args(["hook", "install"])
            .args(args)
            .current_dir(d)
            .env("HOME", home.path())
            .env("PATH", &path)
            .env_remove("CLAUDE_CONFIG_DIR")
            .env_remove("CODEX_HOME")
            .output()
            .unwrap()
    };
    let read =
        |p: &Path| -> Value { serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap() };
    for (agent, scope, file, event, matcher) in [
        (
            "claude-code",
            "project",
            d.join(".claude/settings.json"),
            "PreToolUse",
            "Bash",
        ),
        (
            "claude-code",
            "local",
            d.join(".claude/settings.local.json"),
            "PermissionRequest",
            "Bash",
        ),
        (
            "claude-code",
            "user",
            home.path().join(".claude/settings.json"),
            "PreToolUse",
            "Bash",
        ),
        (
            "codex",
            "project",
            d.join(".codex/hooks.json"),
            "PreToolUse",
            "Bash",
        ),
        (
            "codex",
            "user",
            home.path().join(".codex/hooks.json"),
            "PreToolUse",
            "Bash",
        ),
        (
            "gemini",
            "project",
            d.join(".gemini/settings.json"),
            "BeforeTool",
            "Bash",
        ),
        (
            "gemini",
            "user",
            home.path().join(".gemini/settings.json"),
            "BeforeTool",
            "Bash",
        ),
    ] {
        let o = install(&[
            agent,
            "--policy",
            "policies/gate policy.wasm",
            "--event",
            event,
            "--matcher",
            matcher,
            "--scope",
            scope,
            "--timeout",
            "20",
        ]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{agent} {scope}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let v = read(&file);
        let group = &v["hooks"][event][0];
        let hook = &group["hooks"][0];
        // `loopbox` from PATH, quoted for the shell; pinned: the event, the workspace
        // (project and local scopes, with the policy relative to it) and the component.
        let root = d.canonicalize().unwrap();
        let digest = blake3::hash(&std::fs::read(probe()).unwrap()).to_hex();
        let expected = if scope == "user" {
            format!(
                "loopbox hook {agent} --policy '{}' --event {event} --digest {digest} --timeout 20",
                root.join("policies/gate policy.wasm").display()
            )
        } else {
            format!(
                "loopbox hook {agent} --policy 'policies/gate policy.wasm' --event {event} --root {} --digest {digest} --timeout 20",
                root.display()
            )
        };
        assert_eq!(hook["command"], expected, "{agent} {scope}");
        assert_eq!(
            hook["timeout"],
            if agent == "gemini" { 20_000 } else { 20 },
            "{agent}: the agent's own unit"
        );
        assert_eq!(
            group["matcher"],
            if agent == "gemini" {
                "run_shell_command"
            } else {
                "Bash"
            }
        );
        let mut un = vec![
            agent,
            "--policy",
            "policies/gate policy.wasm",
            "--event",
            event,
            "--matcher",
            matcher,
            "--scope",
            scope,
            "--timeout",
            "20",
        ];
        let o = Command::new(BIN)
            .args(["hook", "uninstall"])
            .args(&un)
            .current_dir(d)
            .env("HOME", home.path())
            .env("PATH", &path)
            .env_remove("CLAUDE_CONFIG_DIR")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0));
        assert_eq!(read(&file), json!({}), "{agent} {scope}");
        un.clear();
    }
    for agent in ["codex", "gemini"] {
        let o = install(&[
            agent,
            "--policy",
            "builtin:ralph",
            "--event",
            "Stop",
            "--scope",
            "local",
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.code() == Some(2)
                && (err.contains("has no local scope")
                    || err.contains("unknown Gemini CLI hook event")),
            "{err}"
        );
    }
    let o = install(&[
        "gemini",
        "--policy",
        "builtin:ralph",
        "--event",
        "AfterAgent",
        "--matcher",
        "x",
    ]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("take no matcher"));
    let o = install(&[
        "claude-code",
        "--policy",
        "builtin:ralph",
        "--event",
        "WorktreeCreate",
    ]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("WorktreeCreate"));

    // The installed command runs from a subdirectory, as Claude Code runs it, with the project in CLAUDE_PROJECT_DIR.
    install(&[
        "claude-code",
        "--policy",
        "policies/gate policy.wasm",
        "--event",
        "PreToolUse",
        "--input",
        r#"{"op": "echo"}"#,
    ]);
    let command =
        read(&d.join(".claude/settings.json"))["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
            .as_str()
            .unwrap()
            .to_string();
    std::fs::create_dir(d.join("sub")).unwrap();
    let input = json!({"session_id": "inst", "cwd": d.join("sub"), "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"op": "echo", "then": "block"}});
    let o = common::feed(
        Command::new("sh")
            .args(["-c", &command])
            .current_dir(d.join("sub"))
            .env("PATH", &path)
            .env("CLAUDE_PROJECT_DIR", d)
            .env(
                "LOOPBOX_CACHE_DIR",
                std::env::temp_dir().join("loopbox-hook-test-cache"),
            ),
        input.to_string().as_bytes(),
    );
    let out: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(out["hookSpecificOutput"]["permissionDecision"], "deny");
}

#[test]
fn a_hook_names_an_installed_policy_and_runs_it_only_as_admitted() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::copy(probe(), d.join("probe.wasm")).unwrap();
    std::fs::write(
        d.join("loopbox.toml"),
        "[policies.loop]\nsource = \"builtin:ralph\"\n\n[policies.gate]\nsource = \"probe.wasm\"\n",
    )
    .unwrap();
    // By name, the builtin runs as itself (a builtin needs no signature).
    let (code, out, err) = answer_of(&run(
        d,
        &[
            "hook",
            "claude-code",
            "--policy",
            "loop",
            "--input",
            RALPH_INPUT,
        ],
        &stop(d, "s1", Some("I started."), false).to_string(),
    ));
    assert_eq!((code, &out["decision"]), (0, &json!("block")), "{err}");
    // An unsigned component without `unsigned = true` is refused, and the gate fails closed.
    let pre = json!({"session_id": "g", "cwd": d, "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"op": "echo"}});
    let gate = || {
        answer_of(&run(
            d,
            &[
                "hook",
                "claude-code",
                "--policy",
                "gate",
                "--input",
                r#"{"op": "echo"}"#,
            ],
            &pre.to_string(),
        ))
    };
    let (code, out, err) = gate();
    assert_denied(code, &out, &err, &["policy `gate` is unsigned"]);
    // Accepted as unsigned, it answers.
    let config = std::fs::read_to_string(d.join("loopbox.toml")).unwrap();
    std::fs::write(
        d.join("loopbox.toml"),
        config.replace(
            "source = \"probe.wasm\"\n",
            "source = \"probe.wasm\"\nunsigned = true\n",
        ),
    )
    .unwrap();
    let (code, out, err) = gate();
    assert!(
        code == 0 && out["hookSpecificOutput"]["permissionDecision"] != "deny",
        "{out} {err}"
    );
    // `hook install` writes the name as it is: the hook resolves it from the config.
    let o = run(
        d,
        &[
            "hook",
            "install",
            "claude-code",
            "--policy",
            "gate",
            "--event",
            "PreToolUse",
            "--scope",
            "local",
        ],
        "",
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let settings = std::fs::read_to_string(d.join(".claude/settings.local.json")).unwrap();
    assert!(settings.contains("--policy gate"), "{settings}");
}

/// What a sandboxed command can leave in a workspace to be obeyed by the next hook
/// (issue 31, section 2): `sub/loopbox.toml` with no sandbox and `touch` granted,
/// and `sub/policies/gate.wasm`. The planted policy here is the probe, steered by
/// the tool call to `touch` a file outside the workspace.
fn plant(dir: &Path, outside: &Path) {
    std::fs::create_dir_all(dir.join("policies")).unwrap();
    std::fs::write(
        dir.join("loopbox.toml"),
        "[shell]\nsandbox = \"none\"\nallow = [[\"touch\"]]\n",
    )
    .unwrap();
    std::fs::copy(probe(), dir.join("policies/gate.wasm")).unwrap();
    assert!(!outside.exists());
}

/// A PreToolUse event of `agent` whose tool call asks the probe to touch `outside`.
fn touch_call(agent: &str, session: &str, cwd: &Path, outside: &Path) -> Value {
    json!({"session_id": session, "cwd": cwd, "hook_event_name": if agent == "gemini" { "BeforeTool" } else { "PreToolUse" },
           "tool_name": "mcp__x__y", "tool_input": {"op": "exec", "argv": ["touch", outside]}})
}

/// The hook command `hook install` wrote for `event`, split into words (for checks only).
fn installed_command(settings: &Path, event: &str) -> Vec<String> {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(settings).unwrap()).unwrap();
    vec![
        v["hooks"][event][0]["hooks"][0]["command"]
            .as_str()
            .unwrap()
            .to_string(),
    ]
}

/// Run a hook command as the agent does (through `sh -c`) in `cwd` with `input`.
/// `words` is one shell command line, or the words of one.
fn run_installed(cwd: &Path, words: &[String], input: &Value, env: &[(&str, &Path)]) -> Output {
    let line = if words.len() == 1 {
        words[0].clone()
    } else {
        words
            .iter()
            .map(|w| format!("'{w}'"))
            .collect::<Vec<_>>()
            .join(" ")
            .replacen("'loopbox'", BIN, 1)
    };
    common::feed(
        Command::new("sh")
            .args(["-c", &line])
            .current_dir(cwd)
            .env("XDG_DATA_HOME", common::data_home())
            .env(
                "LOOPBOX_CACHE_DIR",
                std::env::temp_dir().join("loopbox-hook-test-cache"),
            )
            .envs(env.iter().map(|(k, v)| (*k, *v))),
        input.to_string().as_bytes(),
    )
}

/// Section 2, attack (a): a Codex event whose `cwd` is a subfolder where a
/// sandboxed command planted a config and a policy. Before: `sub/` was taken as
/// the workspace and the planted policy ran under `sandbox = "none"`, touching a
/// file outside the workspace. Now the installed command pins the workspace, and
/// a hand-written command (no pin) finds the planted config untrusted: either
/// way the gate refuses and nothing outside is touched.
#[test]
fn a_config_and_policy_planted_in_a_subfolder_are_never_obeyed() {
    let top = tempfile::tempdir().unwrap();
    let t = top.path().canonicalize().unwrap();
    let d = t.join("ws");
    let outside = t.join("touched-outside");
    std::fs::create_dir_all(d.join("policies")).unwrap();
    std::fs::create_dir(d.join(".git")).unwrap();
    std::fs::copy(probe(), d.join("policies/gate.wasm")).unwrap();
    let o = run(
        &d,
        &[
            "hook",
            "install",
            "codex",
            "--policy",
            "policies/gate.wasm",
            "--event",
            "PreToolUse",
            "--input",
            r#"{"op":"echo","then":"pass"}"#,
        ],
        "",
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let words = installed_command(&d.join(".codex/hooks.json"), "PreToolUse");
    assert!(words[0].contains(" --root "), "{words:?}");
    plant(&d.join("sub"), &outside);

    // The installed command: the workspace is the pinned root; the planted folder is not adopted.
    let (code, out, err) = answer_of(&run_installed(
        &d.join("sub"),
        &words,
        &touch_call("codex", "a1", &d.join("sub"), &outside),
        &[],
    ));
    assert_eq!(code, 0, "{err}");
    assert!(
        !outside.exists(),
        "the planted config was obeyed: {out} {err}"
    );
    assert!(!d.join("sub/.loopbox").exists() && d.join(".loopbox").exists());
    // An event from outside the pinned root is refused (a gate: denied).
    let (code, out, err) = answer_of(&run_installed(
        &t,
        &words,
        &touch_call("codex", "a2", &t, &outside),
        &[],
    ));
    assert_denied(code, &out, &err, &["is outside", "hook install"]);
    // Another component in the policy's place (here: one more custom section) is not the one pinned.
    let pinned = std::fs::read(d.join("policies/gate.wasm")).unwrap();
    let mut other = pinned.clone();
    other.extend([0u8, 4, 3, b'a', b'b', b'c']);
    std::fs::write(d.join("policies/gate.wasm"), &other).unwrap();
    let (code, out, err) = answer_of(&run_installed(
        &d,
        &words,
        &touch_call("codex", "a4", &d, &outside),
        &[],
    ));
    assert_denied(
        code,
        &out,
        &err,
        &["is not the component `hook install` pinned"],
    );
    std::fs::write(d.join("policies/gate.wasm"), &pinned).unwrap();

    // A hand-written command pins nothing: `sub/` becomes the workspace, and its config is not trusted.
    let (code, out, err) = answer_of(&run_bytes(
        &d.join("sub"),
        &[
            "hook",
            "codex",
            "--policy",
            "policies/gate.wasm",
            "--input",
            r#"{"op":"echo","then":"pass"}"#,
        ],
        touch_call("codex", "a3", &d.join("sub"), &outside)
            .to_string()
            .as_bytes(),
        &[],
    ));
    let reason = out["hookSpecificOutput"]["permissionDecisionReason"]
        .as_str()
        .unwrap_or_default();
    let config = d.join("sub/loopbox.toml");
    assert_denied(code, &out, &err, &[]);
    assert_eq!(
        reason,
        format!(
            "loopbox: `{}` is not trusted yet (new, or changed since you trusted it): review it, then run `loopbox trust {}`",
            config.display(),
            config.display()
        )
    );
    assert!(!outside.exists(), "the planted config was obeyed");
}

/// Section 2, attack (b): a user-wide hook in a freshly cloned hostile
/// repository, which holds its own `loopbox.toml` (`sandbox = "none"`) and its own
/// policy. Before: both were obeyed. Now the config is not obeyed until approved
/// with `loopbox trust`: gates refuse and say that command, a Stop keeps the agent
/// from stopping on it, other events do nothing (and log); once trusted it is
/// obeyed, and changed it is refused again.
#[test]
fn a_cloned_repository_s_config_is_obeyed_only_once_trusted_and_until_it_changes() {
    let top = tempfile::tempdir().unwrap();
    let t = top.path().canonicalize().unwrap();
    let (home, mine, clone) = (t.join("home"), t.join("mine"), t.join("clone"));
    let outside = t.join("touched-outside");
    for dir in [&home, &mine, &clone] {
        std::fs::create_dir_all(dir.join(".git")).unwrap();
    }
    std::fs::create_dir_all(mine.join("policies")).unwrap();
    std::fs::copy(probe(), mine.join("policies/gate.wasm")).unwrap();
    plant(&clone, &outside);
    let o = Command::new(BIN)
        .args([
            "hook",
            "install",
            "claude-code",
            "--scope",
            "user",
            "--policy",
            "policies/gate.wasm",
            "--event",
            "PreToolUse",
            "--input",
            r#"{"op":"echo","then":"pass"}"#,
        ])
        .current_dir(&mine)
        .env("HOME", &home)
        .env_remove("CLAUDE_CONFIG_DIR")
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let words = installed_command(&home.join(".claude/settings.json"), "PreToolUse");
    assert!(!words[0].contains(" --root "), "{words:?}");
    let project = [("CLAUDE_PROJECT_DIR", clone.as_path())];
    let config = clone.join("loopbox.toml");
    let untrusted = format!(
        "loopbox: `{}` is not trusted yet (new, or changed since you trusted it): review it, then run `loopbox trust {}`",
        config.display(),
        config.display()
    );
    let gate = |session: &str, words: &[String]| {
        answer_of(&run_installed(
            &clone,
            words,
            &touch_call("claude-code", session, &clone, &outside),
            &project,
        ))
    };
    let (code, out, err) = gate("b1", &words);
    assert_eq!(
        (
            code,
            &out["hookSpecificOutput"]["permissionDecision"],
            &out["hookSpecificOutput"]["permissionDecisionReason"]
        ),
        (0, &json!("deny"), &json!(untrusted)),
        "{err}"
    );
    // The command as users wrote it before (the repository's own policy by a relative path): the same.
    let legacy: Vec<String> = [
        "loopbox",
        "hook",
        "claude-code",
        "--policy",
        "policies/gate.wasm",
        "--input",
        r#"{"op":"echo","then":"pass"}"#,
    ]
    .map(String::from)
    .to_vec();
    let (code, out, _) = gate("b2", &legacy);
    assert_eq!(
        (code, &out["hookSpecificOutput"]["permissionDecision"]),
        (0, &json!("deny"))
    );
    assert!(!outside.exists(), "the clone's config was obeyed");
    // A Stop is refused too (the agent keeps working, told the command), even with --on-error allow.
    let stop_in = |session: &str| {
        let mut input = stop(&clone, session, Some("done"), false);
        input["cwd"] = json!(clone);
        run_bytes(
            &clone,
            &[
                "hook",
                "claude-code",
                "--policy",
                "builtin:ralph",
                "--input",
                RALPH_INPUT,
                "--on-error",
                "allow",
            ],
            input.to_string().as_bytes(),
            &project,
        )
    };
    let o = stop_in("b3");
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(String::from_utf8_lossy(&o.stderr), format!("{untrusted}\n"));
    assert!(o.stdout.is_empty());
    // An event that cannot be refused does nothing, and the log says why.
    let start = json!({"session_id": "b4", "cwd": clone, "hook_event_name": "SessionStart", "source": "startup"});
    let o = run_bytes(
        &clone,
        &[
            "hook",
            "claude-code",
            "--policy",
            "builtin:ralph",
            "--input",
            RALPH_INPUT,
        ],
        start.to_string().as_bytes(),
        &project,
    );
    assert_eq!(
        (o.status.code(), o.stdout.as_slice(), o.stderr.as_slice()),
        (Some(0), &b""[..], &b""[..])
    );
    let log = std::fs::read_to_string(clone.join(".loopbox/hook.log")).unwrap();
    assert!(log.contains("is not trusted yet"), "{log}");

    // Approved, it is obeyed (the user chose `sandbox = "none"` and `touch`).
    let o = run_bytes(&clone, &["trust", "--json"], b"", &[]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let shown: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(shown["path"], json!(config));
    assert!(shown["grants"].to_string().contains("NONE"), "{shown}");
    let (code, out, err) = gate("b5", &words);
    assert_eq!(code, 0, "{out} {err}");
    assert!(outside.exists(), "a trusted config is obeyed: {out} {err}");
    std::fs::remove_file(&outside).unwrap();
    // Changed, it is refused again.
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("# one more line\n");
    std::fs::write(&config, text).unwrap();
    let (_, out, _) = gate("b6", &words);
    assert_eq!(
        out["hookSpecificOutput"]["permissionDecisionReason"],
        json!(untrusted)
    );
    assert!(!outside.exists());
    let list: Value =
        serde_json::from_slice(&run_bytes(&clone, &["trust", "--list", "--json"], b"", &[]).stdout)
            .unwrap();
    let entry = list
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["path"] == json!(config))
        .unwrap()
        .clone();
    assert_eq!(entry["status"], "changed since");
    let o = run_bytes(
        &clone,
        &["trust", "--revoke", &config.to_string_lossy()],
        b"",
        &[],
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!("`{}` is no longer trusted\n", config.display())
    );
}

/// `loopbox run` obeys a config only once trusted: without a terminal it refuses
/// with exit 2 and the command that approves it; `loopbox trust` approves it; a
/// changed config is refused again.
#[test]
fn run_refuses_an_untrusted_config_without_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    let config = d.join("loopbox.toml");
    std::fs::write(&config, "[shell]\nallow = [[\"true\"]]\n").unwrap();
    let run_it = || {
        Command::new(BIN)
            .args([
                "run",
                "builtin:ralph",
                "--input",
                r#"{"prompt": "x", "max_iterations": 1}"#,
            ])
            .current_dir(&d)
            .env("XDG_DATA_HOME", common::data_home())
            .env(
                "LOOPBOX_CACHE_DIR",
                std::env::temp_dir().join("loopbox-hook-test-cache"),
            )
            .env("CI", "true")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let refused = format!(
        "error: `{}` is not trusted yet (new, or changed since you trusted it): review it, then run `loopbox trust {}`\n",
        config.display(),
        config.display()
    );
    let o = run_it();
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(String::from_utf8_lossy(&o.stderr), refused);
    let o = run_bytes(&d, &["trust"], b"", &[]);
    let shown = String::from_utf8_lossy(&o.stdout);
    assert!(
        shown.contains("exec [true]") && shown.contains(&format!("trusted `{}`", config.display())),
        "{shown}"
    );
    let o = run_it();
    assert_ne!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    std::fs::write(&config, "[shell]\nallow = [[\"true\"], [\"rm\"]]\n").unwrap();
    let o = run_it();
    assert_eq!(
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned()
        ),
        (Some(2), refused)
    );
}

/// Section 3: input loopbox cannot read, to each agent's gate. Before, every
/// one exited 1 ("the agent goes on"), `--on-error block` too. Now the installed
/// command names its event: each is refused in the agent's own deny form (one
/// line of JSON, exit 0), and a command without `--event` under `--on-error
/// block` exits 2. A deep but valid tool input reaches the policy.
#[test]
fn a_gate_refuses_input_it_cannot_read_and_reads_deep_input() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    let probe = probe().to_string_lossy().into_owned();
    // A standing answer: every event after start is blocked by the policy itself.
    let start =
        json!({"op": "state", "set": {"answer": {"op": "echo", "then": "block"}}, "then": "pass"})
            .to_string();
    let nest = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    for (agent, event) in [
        ("claude-code", "PreToolUse"),
        ("codex", "PreToolUse"),
        ("gemini", "BeforeTool"),
    ] {
        let input = |session: &str, tool_input: &str| {
            format!(
                r#"{{"session_id": "{agent}-{session}", "cwd": "{}", "hook_event_name": "{event}", "tool_name": "mcp__srv__t", "tool_input": {tool_input}}}"#,
                d.display()
            )
        };
        let deep = input("deep", &format!(r#"{{"a": {}}}"#, nest(130)));
        assert!(deep.len() < 500, "a small input: {}", deep.len());
        let huge = input(
            "huge",
            &format!(r#"{{"a": "{}"}}"#, "x".repeat((16 << 20) + 10)),
        )
        .into_bytes();
        let mut bad_utf8 = input("utf8", r#"{"a": "XX"}"#).into_bytes();
        let at = bad_utf8.windows(2).position(|w| w == b"XX").unwrap();
        bad_utf8[at] = 0xff;
        let truncated = input("cut", r#"{"a": [1, 2"#);
        let truncated = truncated.as_bytes()[..truncated.len() - 1].to_vec();
        let base = ["hook", agent, "--policy", &probe, "--input", &start];
        for on_error in [None, Some("block")] {
            let mut args = base.to_vec();
            args.extend(["--event", event]);
            if let Some(o) = on_error {
                args.extend(["--on-error", o]);
            }
            // Deep but valid: the policy answers (its own block), not loopbox's failure.
            let o = run_bytes(&d, &args, deep.as_bytes(), &[]);
            let (code, out, err) = answer_of(&o);
            let (decision, reason) = if agent == "gemini" {
                (&out["decision"], &out["reason"])
            } else {
                (
                    &out["hookSpecificOutput"]["permissionDecision"],
                    &out["hookSpecificOutput"]["permissionDecisionReason"],
                )
            };
            assert_eq!(
                (code, decision, reason),
                (0, &json!("deny"), &json!("probe blocks")),
                "{agent} deep: {err}"
            );
            for (what, bytes, why) in [
                (
                    "over 16 MiB",
                    huge.clone(),
                    "hook input is over 16777216 bytes",
                ),
                (
                    "invalid UTF-8",
                    bad_utf8.clone(),
                    "cannot read the hook input from stdin",
                ),
                ("truncated", truncated.clone(), "hook input is not JSON"),
            ] {
                let o = run_bytes(&d, &args, &bytes, &[]);
                let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
                assert_eq!(
                    o.status.code(),
                    Some(0),
                    "{agent} {what} {on_error:?}: {}",
                    String::from_utf8_lossy(&o.stderr)
                );
                assert!(
                    stdout.ends_with("}\n") && stdout.lines().count() == 1,
                    "{agent} {what}: {stdout:?}"
                );
                let out: Value = serde_json::from_str(&stdout).unwrap();
                let prefix = "loopbox: the hook failed, so this is refused (--on-error block): ";
                let reason = if agent == "gemini" {
                    assert_eq!(
                        out.as_object().unwrap().keys().collect::<Vec<_>>(),
                        ["decision", "reason"],
                        "{agent} {what}"
                    );
                    assert_eq!(out["decision"], "deny", "{agent} {what}");
                    out["reason"].as_str().unwrap().to_string()
                } else {
                    let h = &out["hookSpecificOutput"];
                    assert_eq!(out.as_object().unwrap().len(), 1, "{agent} {what}");
                    assert_eq!(
                        (&h["hookEventName"], &h["permissionDecision"]),
                        (&json!("PreToolUse"), &json!("deny")),
                        "{agent} {what}"
                    );
                    h["permissionDecisionReason"].as_str().unwrap().to_string()
                };
                assert!(
                    reason.starts_with(prefix) && reason.contains(why),
                    "{agent} {what}: {reason}"
                );
            }
        }
        // A command without --event does not know the gate; --on-error block still blocks (exit 2).
        let mut args = base.to_vec();
        args.extend(["--on-error", "block"]);
        for bytes in [huge.clone(), bad_utf8.clone(), truncated.clone()] {
            let o = run_bytes(&d, &args, &bytes, &[]);
            assert_eq!(
                (o.status.code(), o.stdout.as_slice()),
                (Some(2), &b""[..]),
                "{agent}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
}

/// Section 8 item 1: a hook killed mid-event (here with SIGKILL, after its turn
/// was numbered and before the event committed: what an agent's timeout does)
/// left a phantom turn, so every later turn of the session was numbered one too
/// high. The turn is now numbered from the turns the session has committed.
#[test]
fn a_hook_killed_mid_event_leaves_no_phantom_turn() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let probe = probe().to_string_lossy().into_owned();
    let args = [
        "hook",
        "claude-code",
        "--policy",
        &probe,
        "--input",
        r#"{"op": "echo", "then": "pass"}"#,
    ];
    let input = stop(d, "killed", Some("working"), false).to_string();
    let crash = Path::new("hook-event:1");
    let o = run_bytes(d, &args, input.as_bytes(), &[("LOOPBOX_CRASH_AT", crash)]);
    assert_eq!(
        o.status.code(),
        None,
        "killed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let (code, out, err) = answer_of(&run(d, &args, &input));
    assert_eq!(
        (code, &out["systemMessage"]),
        (0, &json!("loopbox: turn 1")),
        "{err}"
    );
}

/// On a terminal, `loopbox run` shows what an untrusted config grants and asks
/// once: yes records the approval and runs, anything else runs nothing (exit 2).
#[test]
fn run_asks_once_on_a_terminal() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: util-linux `script` (a terminal for the test) is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    let config = d.join("loopbox.toml");
    std::fs::write(&config, "[shell]\nallow = [[\"true\"]]\n").unwrap();
    let on_terminal = |answer: &str| {
        let line = format!(
            "'{BIN}' run builtin:ralph --input '{{\"prompt\": \"x\", \"max_iterations\": 1}}'"
        );
        let mut child = Command::new("script")
            .args(["-qec", &line, "/dev/null"])
            .current_dir(&d)
            .env("XDG_DATA_HOME", common::data_home())
            .env(
                "LOOPBOX_CACHE_DIR",
                std::env::temp_dir().join("loopbox-hook-test-cache"),
            )
            .env_remove("CI")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let _ = stdin.write_all(answer.as_bytes());
        let out = child.wait_with_output().unwrap();
        drop(stdin);
        out
    };
    let o = on_terminal("n\n");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        text.contains("new to loopbox; it grants:")
            && text.contains("exec [true]")
            && text.contains("[y/N]"),
        "{text}"
    );
    assert!(text.contains("declined, nothing ran"), "{text}");
    assert_eq!(o.status.code(), Some(2), "{text}");
    let o = on_terminal("y\n");
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        text.contains("[y/N]") && !text.contains("declined"),
        "{text}"
    );
    let list = run_bytes(&d, &["trust", "--list"], b"", &[]);
    assert!(
        String::from_utf8_lossy(&list.stdout).contains(&format!("{}  ", config.display())),
        "{}",
        String::from_utf8_lossy(&list.stdout)
    );
}

/// Issue 49, item 3: a settings file with a key twice. The agent reads the last
/// `"hooks"`; `install` wrote into the first and said it had installed the gate.
/// Such a file is refused, at any level, naming the lines, and left as it was.
#[test]
fn a_settings_file_with_a_key_twice_is_refused_and_left_alone() {
    let twice_at_top = "{\n  \"hooks\": {},\n  \"model\": \"m\",\n  \"hooks\": {\"Stop\": []}\n}\n";
    let twice_inside = "{\n  \"hooks\": {\n    \"Stop\": [],\n    \"Stop\": []\n  }\n}\n";
    for (agent, dir, event) in [
        ("claude-code", ".claude", "Stop"),
        ("gemini", ".gemini", "AfterAgent"),
    ] {
        for (text, key, first, second) in
            [(twice_at_top, "hooks", 2, 4), (twice_inside, "Stop", 3, 4)]
        {
            let tmp = tempfile::tempdir().unwrap();
            let d = tmp.path();
            std::fs::create_dir(d.join(dir)).unwrap();
            let settings = d.join(dir).join("settings.json");
            std::fs::write(&settings, text).unwrap();
            for verb in ["install", "uninstall"] {
                let o = run(
                    d,
                    &[
                        "hook",
                        verb,
                        agent,
                        "--policy",
                        "builtin:ralph",
                        "--event",
                        event,
                        "--input",
                        RALPH_INPUT,
                    ],
                    "",
                );
                let err = String::from_utf8_lossy(&o.stderr);
                assert_eq!(o.status.code(), Some(2), "{agent} {verb}: {err}");
                assert!(
                    err.contains(&format!(
                        "the settings file has the key `{key}` twice in one object (lines {first} and {second}): the agent reads only the last, so loopbox will not edit it; merge the two into one"
                    )),
                    "{agent} {verb}: {err}"
                );
                assert_eq!(std::fs::read_to_string(&settings).unwrap(), text);
            }
        }
    }
}
