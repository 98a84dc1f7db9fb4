//! The CLI as a user runs it: the real `loopbox` binary on the example
//! project, with stdout, stderr and exit codes checked. Run ids and timings
//! are normalized before comparing.

use std::process::Command;

use crate::common;
mod agent_profiles;
mod contract;
mod test_cmd;

use common::*;

/// A copy of examples/project in a temp dir, so runs leave nothing behind.
fn project() -> tempfile::TempDir {
    example("project")
}

#[test]
fn ralph_runs_the_example_to_its_promise() {
    let p = project();
    let o = loopbox(
        p.path(),
        &["run", "builtin:ralph", "--input", "@ralph.json"],
    );
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        normalize(&o.stdout),
        "done: completion promise found after 3 iteration(s)\n"
    );
    let stderr = normalize(&o.stderr);
    let (banner, rest) = stderr.split_once('\n').unwrap();
    // The sandbox named last depends on the machine (bwrap, landlock or none).
    assert!(
        banner.starts_with(
            "loopbox: run RUN of builtin:ralph (world decider); grants: exec [ls; cat README.md], scripts no, agent ./agent/scripted-agent; sandbox "
        ),
        "{banner}"
    );
    let expected_start = "  [host] info: decision: inject: Make the tests in this project pass. When they do, reply with <promise>DONE</promise>.\n  │\n  │ [ralph iteration 1 of 5]\nloopbox: turn 1: waiting for the agent\n  [host] info: agent turn 1 finished in T\n";
    assert!(rest.starts_with(expected_start), "{stderr}");
    assert!(stderr.ends_with("  [host] info: decision: done (success): completion promise found after 3 iteration(s)\n"), "{stderr}");
    // The same conversation was continued on every turn.
    let turns: Vec<_> = std::fs::read_dir(p.path().join(".scripted-agent"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("turns-")
        })
        .collect();
    assert_eq!(turns.len(), 1);
}

/// The README's first commands on a machine without bubblewrap: under Landlock
/// alone a command cannot create entries in the workspace root, so the examples'
/// agents and tools write only into entries that ship with them.
#[test]
fn the_first_commands_work_under_landlock_alone() {
    if let Err(why) = loopbox::exec::sandbox::support().landlock_usable() {
        eprintln!("skipped: no usable Landlock here ({why})");
        return;
    }
    let landlock_only = |dir: &std::path::Path| {
        let config = dir.join("loopbox.toml");
        let text = std::fs::read_to_string(&config).unwrap();
        assert!(text.contains("\n[shell]\n"), "{text}");
        let text = text.replace("\n[shell]\n", "\n[shell]\nsandbox = \"landlock\"\n");
        std::fs::write(&config, text).unwrap();
    };
    let p = project();
    landlock_only(p.path());
    let o = loopbox(
        p.path(),
        &["run", "builtin:ralph", "--input", "@ralph.json"],
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(code(&o), 0, "{stderr}");
    assert!(
        stderr
            .lines()
            .next()
            .unwrap()
            .contains("; sandbox landlock (ABI "),
        "{stderr}"
    );
    assert_eq!(
        normalize(&o.stdout),
        "done: completion promise found after 3 iteration(s)\n"
    );

    let l = example("loops");
    landlock_only(l.path());
    let o = loopbox(l.path(), &["run", "fix-the-tests.yaml"]);
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        normalize(&o.stdout),
        "done: reached `done` after 3 steps (test → fix → test → done)\n"
    );
    let calc = std::fs::read_to_string(l.path().join("calc.sh")).unwrap();
    assert!(calc.contains("$1 + $2"), "{calc}");

    // Without its state dir the agent cannot make one; the failure says why and what to do.
    let p = project();
    landlock_only(p.path());
    std::fs::remove_dir_all(p.path().join(".scripted-agent")).unwrap();
    let o = loopbox(
        p.path(),
        &["run", "builtin:ralph", "--input", "@ralph.json"],
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert_ne!(code(&o), 0, "{stdout}");
    assert!(
        stdout.contains("the agent exited with code 1 on turn 1: mkdir: cannot create directory")
            && stdout.contains("cannot create new entries in the workspace root, only write to existing ones: install bubblewrap"),
        "{stdout}"
    );
    assert!(!p.path().join(".scripted-agent").exists());
}

#[test]
fn ralph_fails_when_iterations_run_out() {
    let p = project();
    let o = loopbox(
        p.path(),
        &[
            "run",
            "builtin:ralph",
            "--input",
            r#"{"prompt": "go", "completion_promise": "NEVER", "max_iterations": 2}"#,
        ],
    );
    assert_eq!(code(&o), 1);
    assert_eq!(
        normalize(&o.stdout),
        "failed: max_iterations (2) reached without the completion promise\n"
    );
}

#[test]
fn the_turn_budget_stops_a_policy_that_never_ends() {
    let p = project();
    let o = loopbox(
        p.path(),
        &[
            "run",
            "builtin:ralph",
            "--max-turns",
            "2",
            "--input",
            r#"{"prompt": "go"}"#,
        ],
    );
    assert_eq!(code(&o), 6);
    assert_eq!(
        normalize(&o.stdout),
        "failed: the run used all 2 of its turns (run.max_turns) without the policy finishing\n"
    );
}

#[test]
fn todo_enforcer_keeps_the_agent_working_until_the_list_is_done() {
    let p = project();
    let o = loopbox(
        p.path(),
        &[
            "run",
            "builtin:todo-enforcer",
            "--input",
            "@todo.json",
            "--json",
        ],
    );
    assert_eq!(code(&o), 0);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (
            v["status"].as_str(),
            v["turns"].as_u64(),
            v["exit_code"].as_i64()
        ),
        (Some("done"), Some(3), Some(0)),
        "{v}"
    );
    assert_eq!(
        v["summary"],
        "the policy let the agent stop after 3 turn(s)"
    );
    assert!(
        o.stderr.is_empty(),
        "--json prints nothing else: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn fix_forward_follows_ticks_to_each_ending() {
    let p = project();
    let red = r#"{"pushed": true, "ci_status": "red", "attempts": 0, "elapsed_seconds": 10}"#;
    let o = loopbox(
        p.path(),
        &[
            "run",
            "builtin:fix-forward",
            "--input",
            "@fix-forward.json",
            "--tick",
            red,
            "--tick",
            r#"{"pushed": true, "ci_status": "green"}"#,
        ],
    );
    assert_eq!(
        (code(&o), normalize(&o.stdout).as_str()),
        (
            0,
            "done: CI is green on the pushed commit; closing the issue\n"
        )
    );
    let o = loopbox(
        p.path(),
        &[
            "run",
            "builtin:fix-forward",
            "--input",
            "@fix-forward.json",
            "--tick",
            r#"{"pushed": true, "ci_status": "red", "attempts": 2}"#,
        ],
    );
    assert_eq!(code(&o), 3);
    assert!(
        normalize(&o.stdout).starts_with(
            "escalated: freeze-escalate: CI is still red after 2 fix-forward attempt(s)"
        ),
        "{}",
        normalize(&o.stdout)
    );
    let o = loopbox(
        p.path(),
        &[
            "run",
            "builtin:fix-forward",
            "--input",
            "@fix-forward.json",
            "--tick",
            r#"{"pushed": false, "thread_status": "running"}"#,
        ],
    );
    assert_eq!(code(&o), 4);
    let out = normalize(&o.stdout);
    assert!(
        out.starts_with("waiting: the policy is waiting for events and none are queued")
            && out.contains("run RUN is parked in"),
        "{out}"
    );
}

#[test]
fn no_agent_configured_is_exit_7_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let o = loopbox(
        dir.path(),
        &["run", "builtin:ralph", "--input", r#"{"prompt": "go"}"#],
    );
    assert_eq!(code(&o), 7);
    assert_eq!(
        normalize(&o.stdout),
        "failed: the policy sent a message to the agent, but no agent is configured: add an `[agent]` section with `command = [...]` to loopbox.toml\n"
    );
}

#[test]
fn config_errors_name_the_key_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("loopbox.toml"),
        "[shell]\nallowed = [[\"ls\"]]\n",
    )
    .unwrap();
    let o = loopbox(dir.path(), &["run", "builtin:ralph"]);
    assert_eq!(code(&o), 2);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with("error: invalid config `") && err.contains("unknown field `allowed`"),
        "{err}"
    );
    assert!(o.stdout.is_empty());
}

#[test]
fn bad_input_and_missing_policies_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let o = loopbox(dir.path(), &["run", "builtin:ralph", "--input", "{nope"]);
    assert_eq!(code(&o), 2);
    assert!(String::from_utf8_lossy(&o.stderr).starts_with("error: --input is not valid JSON: "));
    let o = loopbox(dir.path(), &["run", "missing.wasm"]);
    assert_eq!(code(&o), 2);
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "error: failed to load policy `missing.wasm`: cannot read `missing.wasm`: give a path to a .wasm component or builtin:NAME: No such file or directory (os error 2)\n"
    );
}

/// A time as `--json` prints it: RFC 3339 in UTC, to the millisecond.
fn is_rfc3339(v: &serde_json::Value) -> bool {
    let Some(t) = v.as_str() else { return false };
    let b = t.as_bytes();
    t.len() == 24
        && t.ends_with('Z')
        && [4, 7].iter().all(|&i| b[i] == b'-')
        && b[10] == b'T'
        && [13, 16].iter().all(|&i| b[i] == b':')
        && b[19] == b'.'
        && t.chars()
            .enumerate()
            .all(|(i, c)| [4, 7, 10, 13, 16, 19, 23].contains(&i) || c.is_ascii_digit())
}

#[test]
fn json_output_has_rfc3339_times_and_json_errors() {
    let p = project();
    let d = p.path();
    let o = loopbox(
        d,
        &["run", "builtin:ralph", "--input", "@ralph.json", "--json"],
    );
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    let list: serde_json::Value =
        serde_json::from_slice(&loopbox(d, &["runs", "--json"]).stdout).unwrap();
    let run = &list[0];
    assert!(
        is_rfc3339(&run["started"]) && is_rfc3339(&run["updated"]),
        "{run}"
    );
    let id = run["id"].as_str().unwrap();
    let show: serde_json::Value =
        serde_json::from_slice(&loopbox(d, &["runs", "show", id, "--json"]).stdout).unwrap();
    assert!(is_rfc3339(&show["started"]), "{show}");
    assert!(
        show["events"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| is_rfc3339(&e["at"])),
        "{show}"
    );
    let log = loopbox(d, &["runs", "log", id, "--json"]);
    let first: serde_json::Value =
        serde_json::from_slice(log.stdout.split(|b| *b == b'\n').next().unwrap()).unwrap();
    assert!(is_rfc3339(&first["at"]), "{first}");

    // A failure with --json: one JSON object on stdout, the same words on stderr, the same exit code.
    let cases: [(&[&str], i32, &str); 4] = [
        (
            &["runs", "show", "r0000000000000000", "--json"],
            2,
            "there is no run `r0000000000000000`",
        ),
        (
            &["run", "missing.wasm", "--json"],
            2,
            "failed to load policy `missing.wasm`",
        ),
        (
            &["-C", "gone", "runs", "--json"],
            2,
            "workspace `gone` (-C) does not exist",
        ),
        (
            &["runs", "show", "--json"],
            2,
            "the following required arguments were not provided",
        ),
    ];
    for (args, exit, words) in cases {
        let o = match args {
            ["-C", rest @ ..] => Command::new(BIN)
                .args(["-C", rest[0]])
                .args(&rest[1..])
                .current_dir(d)
                .output()
                .unwrap(),
            _ => loopbox(d, args),
        };
        let stdout = String::from_utf8_lossy(&o.stdout);
        let err: serde_json::Value = serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("{args:?}: stdout is not one JSON object ({e}): {stdout}"));
        assert_eq!(code(&o), exit, "{args:?}");
        assert_eq!(err["exit_code"], exit, "{args:?}: {err}");
        let message = err["error"].as_str().unwrap();
        assert!(message.contains(words), "{args:?}: {err}");
        assert!(!err["causes"].as_array().unwrap().is_empty(), "{err}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(words),
            "{args:?}"
        );
    }
    // Without --json, stdout stays empty.
    let o = loopbox(d, &["runs", "show", "r0000000000000000"]);
    assert_eq!((code(&o), o.stdout.is_empty()), (2, true));
}

#[test]
fn inspect_describes_a_builtin() {
    let dir = tempfile::tempdir().unwrap();
    let o = loopbox(dir.path(), &["inspect", "builtin:ralph"]);
    assert_eq!(code(&o), 0);
    let out = String::from_utf8_lossy(&o.stdout);
    let head: Vec<&str> = out.lines().take(6).collect();
    assert_eq!(
        head,
        [
            "policy       builtin:ralph",
            "info         ralph 0.1.0: Re-feed a prompt until the reply carries the completion promise or iterations run out",
            "world        loopbox:policy/decider",
            "contract     loopbox:policy@0.4.0",
            "capabilities state",
            "exports      loopbox:policy/policy@0.4.0",
        ]
    );
    assert!(out.contains("\nlanguage     Rust"), "{out}");
    let o = loopbox(dir.path(), &["inspect", "builtin:fix-forward", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["world"].as_str(), &v["capabilities"]),
        (Some("decider"), &serde_json::json!(["state"]))
    );
    assert_eq!(v["info"]["name"], "fix-forward");
}

#[test]
fn inspect_refuses_a_core_module() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("core.wasm"), b"\0asm\x01\0\0\0").unwrap();
    let o = loopbox(
        dir.path(),
        &["inspect", &dir.path().join("core.wasm").to_string_lossy()],
    );
    assert_eq!(code(&o), 2);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(
            "is a core WebAssembly module, not a component: build it for the wasm32-wasip2 target"
        ),
        "{err}"
    );
}

#[test]
fn help_documents_the_exit_codes() {
    let o = Command::new(BIN).arg("--help").output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    for line in [
        "  4   the run is waiting (for an answer or events)",
        "  5   the policy failed: trap, limit, error or malformed decision",
    ] {
        assert!(out.contains(line), "{out}");
    }
}

#[test]
fn a_trapping_policy_is_exit_5_with_its_message() {
    let dir = tempfile::tempdir().unwrap();
    let o = loopbox(
        dir.path(),
        &[
            "run",
            &probe().to_string_lossy(),
            "--input",
            r#"{"op": "trap"}"#,
        ],
    );
    assert_eq!(code(&o), 5);
    assert!(
        normalize(&o.stdout).starts_with(
            "failed: policy trapped: the policy aborted (wasm `unreachable`: a panic, an uncaught exception or an abort); it said: probe was told to panic"
        ),
        "{}",
        normalize(&o.stdout)
    );
    let err = normalize(&o.stderr);
    assert!(
        err.contains("  [stderr] info: ") && err.contains("probe was told to panic"),
        "{err}"
    );
}

#[test]
fn an_ask_without_a_terminal_parks_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let o = loopbox(
        dir.path(),
        &[
            "run",
            &probe().to_string_lossy(),
            "--input",
            r#"{"op": "echo", "then": "ask"}"#,
        ],
    );
    assert_eq!(code(&o), 4);
    let out = normalize(&o.stdout);
    assert!(
        out.starts_with("waiting: the policy asks: probe asks\nrun RUN is parked in "),
        "{out}"
    );
}

#[test]
fn denials_are_shown_in_the_run_log() {
    let dir = tempfile::tempdir().unwrap();
    let o = loopbox(
        dir.path(),
        &[
            "run",
            &probe().to_string_lossy(),
            "--input",
            r#"{"op": "exec", "argv": ["rm", "-rf", "/"]}"#,
        ],
    );
    assert_eq!(code(&o), 0, "the policy handled the denial and finished");
    let err = normalize(&o.stderr);
    assert!(
        err.contains("  [host] warn: denied exec `rm -rf /`: `rm -rf /` is not allowed: no rule in `shell.allow` matches; to allow it add [\"rm\", \"-rf\"] to `shell.allow` in loopbox.toml\n"),
        "{err}"
    );
}

#[test]
fn command_line_rules_tiers_and_yes() {
    let dir = tempfile::tempdir().unwrap();
    let probe = probe().to_string_lossy().into_owned();
    let input = r#"{"op": "exec", "argv": ["echo", "hi"]}"#;
    // Ask-tier with no terminal (CI is set): the run waits for an approval
    // (`tests/it/approvals.rs`); with `[confirm] unattended = "decline"` the
    // action is declined at once, and the policy sees why.
    let o = loopbox(
        dir.path(),
        &["run", &probe, "--input", input, "--ask", "echo", "--json"],
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (code(&o), v["status"].as_str()),
        (4, Some("waiting")),
        "{v}"
    );
    assert!(
        v["summary"]
            .as_str()
            .unwrap()
            .contains("of exec `echo hi` (--ask (echo))"),
        "{v}"
    );
    std::fs::write(
        dir.path().join("loopbox.toml"),
        "[confirm]\nunattended = \"decline\"\n",
    )
    .unwrap();
    let o = loopbox(
        dir.path(),
        &["run", &probe, "--input", input, "--ask", "echo", "--json"],
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let data = &v["outcome"]["data"];
    assert_eq!(data["err"]["kind"], "declined", "{v}");
    assert!(
        data["err"]["message"]
            .as_str()
            .unwrap()
            .contains("needs a person's yes (--ask (echo)), and nobody is at a terminal"),
        "{v}"
    );
    std::fs::remove_file(dir.path().join("loopbox.toml")).unwrap();
    // --yes approves it, and the banner says so.
    let o = loopbox(
        dir.path(),
        &["run", &probe, "--input", input, "--ask", "echo", "--yes"],
    );
    assert_eq!(code(&o), 0);
    let err = normalize(&o.stderr);
    assert!(
        err.contains("; ask [echo] (all approved by --yes)"),
        "{err}"
    );
    assert!(
        err.contains("  [host] info: exec `echo hi` needs a yes (--ask (echo)): approved\n"),
        "{err}"
    );
    // --deny wins over --allow.
    let o = loopbox(
        dir.path(),
        &[
            "run", &probe, "--input", input, "--allow", "echo", "--deny", "echo hi", "--json",
        ],
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["outcome"]["data"]["err"]["message"],
        "`echo hi` is denied by --deny (echo hi)"
    );
    let o = loopbox(dir.path(), &["run", &probe, "--allow", " "]);
    assert_eq!(code(&o), 2);
}

#[test]
fn doctor_reports_the_sandboxes_and_refuses_an_unenforceable_choice() {
    let dir = tempfile::tempdir().unwrap();
    let o = loopbox(dir.path(), &["doctor"]);
    assert_eq!(code(&o), 0);
    let out = String::from_utf8_lossy(&o.stdout);
    let keys: Vec<&str> = out
        .lines()
        .map(|l| l.split_whitespace().next().unwrap_or(""))
        .collect();
    let mut expected = vec![
        "landlock",
        "bubblewrap",
        "sandbox",
        "network",
        "protected",
        "hidden",
    ];
    // SAFETY: geteuid(2) cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        expected.insert(3, "root");
    }
    // Landlock's limits are stated where it is the fallback.
    if loopbox::exec::sandbox::support().landlock_usable().is_ok() {
        expected.push("landlock");
        assert!(
            out.contains(
                "landlock limits   cannot keep a missing protected name from being created"
            ),
            "{out}"
        );
    }
    expected.extend(["config", "component", "agent", "loop"]);
    assert_eq!(keys, expected, "{out}");
    // YAML loops' shell is bash, as in little-loops.
    assert!(
        out.contains("loop shell        YAML loops' shell actions run with bash (/"),
        "{out}"
    );
    assert!(
        out.contains("config            none (defaults: nothing granted)"),
        "{out}"
    );
    assert!(
        out.contains("protected         .git .claude .codex"),
        "{out}"
    );
    let o = loopbox(dir.path(), &["doctor", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["network"], false);
    assert!(
        v["protected"].as_str().unwrap().starts_with(".git .claude"),
        "{v}"
    );
    // A choice this machine cannot enforce makes doctor fail, and says so.
    std::fs::write(
        dir.path().join("loopbox.toml"),
        "[shell]\nsandbox = \"landlock\"\n",
    )
    .unwrap();
    let support = loopbox::exec::sandbox::support();
    let o = loopbox(dir.path(), &["doctor"]);
    let landlock_ok = support.landlock_usable().is_ok();
    assert_eq!(code(&o), if landlock_ok { 0 } else { 1 });
}

#[test]
fn the_readme_config_example_is_a_valid_config() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let section = readme
        .split("## Configuration: `loopbox.toml`")
        .nth(1)
        .expect("README has the config section");
    let block = section
        .split("```toml\n")
        .nth(1)
        .unwrap()
        .split("```")
        .next()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("loopbox.toml"), block).unwrap();
    let o = loopbox(dir.path(), &["doctor"]);
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
}

/// `loopbox new NAME --lang LANG`, `loopbox build --json` and two runs of what it built.
/// `ts` is the JavaScript scaffold with `policy.js` renamed `policy.ts`.
fn new_build_run(lang: &str) {
    let dir = tempfile::tempdir().unwrap();
    let name = format!("{lang}-gate");
    let (lang, typescript) = if lang == "ts" {
        ("js", true)
    } else {
        (lang, false)
    };
    let o = loopbox(dir.path(), &["new", &name, "--lang", lang]);
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    let shown = dir.path().display().to_string();
    let title = match lang {
        "rust" => "Rust",
        "python" => "Python",
        _ => "JavaScript",
    };
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!(
            "created {shown}/{name}/, a {title} policy. Next:\n  cd {shown}/{name}\n  loopbox build\n  loopbox run {name}.wasm --input '{{\"check\": [\"make\", \"test\"]}}'\n"
        )
    );
    let project = dir.path().join(&name);
    if typescript {
        std::fs::rename(project.join("policy.js"), project.join("policy.ts")).unwrap();
    }
    // Rust scaffolds share one target directory, so a second test run reuses the compiled SDK.
    let o = Command::new(BIN)
        .args(["build", "--json"])
        .current_dir(&project)
        .env("CARGO_TARGET_DIR", repo().join("target/scaffolds"))
        .env(
            "LOOPBOX_CACHE_DIR",
            std::env::temp_dir().join("loopbox-cli-test-cache"),
        )
        .output()
        .unwrap();
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout)
        .expect("stdout is one JSON object, the tools' chatter went to stderr");
    assert_eq!(
        (
            report["name"].as_str(),
            report["language"].as_str(),
            report["world"].as_str()
        ),
        (Some(name.as_str()), Some(lang), Some("loop-policy"))
    );
    let wasm = format!("{name}.wasm");
    assert!(project.join(&wasm).is_file());
    // The build compiled the component into the cache: the next process loads it from there.
    let o = loopbox(&project, &["inspect", &wasm, "--json"]);
    let inspected: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (
            inspected["cached"].as_bool(),
            inspected["info"]["name"].as_str()
        ),
        (Some(true), Some(name.as_str())),
        "{inspected}"
    );
    // The scenarios the scaffold ships pass against what it built (`loopbox test`).
    let o = loopbox(&project, &["test"]);
    assert_eq!(
        (code(&o), String::from_utf8_lossy(&o.stdout).lines().last()),
        (
            0,
            Some("2 scenario(s): 2 passed, 0 failed, 0 could not run")
        ),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );

    let o = loopbox(
        &project,
        &[
            "run",
            &wasm,
            "--input",
            r#"{"check": ["true"]}"#,
            "--allow",
            "true",
        ],
    );
    assert_eq!(
        (code(&o), normalize(&o.stdout)),
        (0, "done: `true` passes after 0 fix(es)\n".to_string()),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Not granted: the policy gets a denial and escalates with it.
    let o = loopbox(
        &project,
        &["run", &wasm, "--input", r#"{"check": ["false"]}"#],
    );
    assert_eq!(code(&o), 3, "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        normalize(&o.stdout).starts_with("escalated: cannot run `false`: denied: `false` is not allowed: no rule in `shell.allow` matches"),
        "{}",
        normalize(&o.stdout)
    );
    // A failing check goes to the agent, which this project has not configured.
    let o = loopbox(
        &project,
        &[
            "run",
            &wasm,
            "--input",
            r#"{"check": ["false"]}"#,
            "--allow",
            "false",
        ],
    );
    assert_eq!(code(&o), 7, "{}", String::from_utf8_lossy(&o.stdout));
}

#[test]
fn a_new_rust_policy_builds_and_runs() {
    new_build_run("rust");
}

#[test]
fn a_new_python_policy_builds_and_runs() {
    new_build_run("python");
}

#[test]
fn a_new_javascript_policy_builds_and_runs() {
    new_build_run("js");
}

/// `loopbox build` bundles a `policy.ts` with the project's esbuild first.
#[test]
fn a_new_javascript_policy_renamed_to_typescript_builds_and_runs() {
    new_build_run("ts");
}

#[test]
fn new_and_build_refuse_bad_input_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let o = loopbox(dir.path(), &["new", "Bad_Name", "--lang", "rust"]);
    assert_eq!(
        (code(&o), normalize(&o.stderr).as_str()),
        (
            2,
            "error: `Bad_Name` is not a usable policy name: use lower-case letters, digits and `-`, starting with a letter (e.g. `green-tests`)\n"
        )
    );
    let o = loopbox(dir.path(), &["new", "p", "--lang", "cobol"]);
    assert_eq!(code(&o), 2);
    assert!(normalize(&o.stderr).contains("[possible values: rust, python, js]"));
    std::fs::create_dir(dir.path().join("taken")).unwrap();
    std::fs::write(dir.path().join("taken/keep.txt"), "mine").unwrap();
    let o = loopbox(dir.path(), &["new", "taken", "--lang", "python"]);
    assert_eq!(code(&o), 2);
    assert!(
        normalize(&o.stderr).contains("taken` already exists; choose another name or remove it")
    );
    assert_eq!(
        std::fs::read_dir(dir.path().join("taken")).unwrap().count(),
        1
    );

    let o = loopbox(dir.path(), &["build", "taken"]);
    assert_eq!(code(&o), 2);
    assert!(
        normalize(&o.stderr).contains(
            "is not a policy project: it has no policy.toml, Cargo.toml, app.py or policy.js; create one with `loopbox new NAME --lang rust|python|js`"
        )
    );

    // Each language's missing tool is named, with the command that installs it.
    let empty = tempfile::tempdir().unwrap();
    for (lang, needle) in [
        (
            "python",
            "componentize-py is needed to build Python policies but cannot be run",
        ),
        ("python", "python3 -m pip install componentize-py==0.25.1"),
        (
            "js",
            "Node.js is needed to build JavaScript policies but `node` cannot be run; install Node.js 20 or later",
        ),
        ("rust", "cannot run `cargo`"),
    ] {
        let name = format!("no-{lang}");
        if !dir.path().join(&name).exists() {
            assert_eq!(
                code(&loopbox(dir.path(), &["new", &name, "--lang", lang])),
                0
            );
        }
        let o = Command::new(BIN)
            .args(["build", &name])
            .current_dir(dir.path())
            .env("PATH", empty.path())
            .env_remove("CARGO")
            .output()
            .unwrap();
        assert_eq!(
            code(&o),
            1,
            "{lang}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let err = normalize(&o.stderr);
        assert!(
            err.contains(&format!("error: failed to build `./{name}`: ")) && err.contains(needle),
            "{lang}: {err}"
        );
    }
}

/// The `hostile` test guest (`guests/rust/hostile`): everything it says, from
/// `info()` to its decision, is aimed at the user's terminal.
fn hostile() -> std::path::PathBuf {
    static BUILT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            loopbox_guest_build::Repo::containing(&repo())
                .build_rust_guests(&["hostile"])
                .remove(0)
                .1
        })
        .clone()
}

fn leb128(mut n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

fn name(s: &str) -> Vec<u8> {
    [leb128(s.len()), s.as_bytes().to_vec()].concat()
}

/// A custom section (id 0): its size, its name, its payload.
fn custom_section(section: &str, payload: &[u8]) -> Vec<u8> {
    let body = [name(section), payload.to_vec()].concat();
    [vec![0], leb128(body.len()), body].concat()
}

/// A `producers` section, as toolchains write it: fields of (name, version) values.
fn producers_section(fields: &[(&str, &[(&str, &str)])]) -> Vec<u8> {
    let mut payload = leb128(fields.len());
    for (field, values) in fields {
        payload.extend(name(field));
        payload.extend(leb128(values.len()));
        for (n, v) in *values {
            payload.extend(name(n));
            payload.extend(name(v));
        }
    }
    custom_section("producers", &payload)
}

/// What someone else's text may never put on a terminal: a control character
/// (escape sequences start with one) or a bidi control; nor a line of the
/// guest's (marked FORGED) that starts as one of loopbox's own.
#[track_caller]
fn assert_shown_safely(what: &str, bytes: &[u8]) {
    let text = String::from_utf8(bytes.to_vec()).expect("output is UTF-8");
    let raw: Vec<char> = text
        .chars()
        .filter(|&c| {
            (c.is_control() && c != '\n')
                || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}')
        })
        .collect();
    assert!(
        raw.is_empty(),
        "{what}: {raw:?} reached the terminal as it is:\n{text}"
    );
    // Each FORGED text follows a newline, and starts as one of loopbox's lines
    // does: it may end up after a prefix loopbox wrote, or on a continuation
    // line, or after a `\n` shown as such, but never at the start of a line.
    for line in text.lines().filter(|l| l.contains("FORGED")) {
        assert!(
            !["signature", "  [host]", "[host]", "done:"]
                .iter()
                .any(|forgery| line.starts_with(forgery)),
            "{what}: a line the policy wrote poses as loopbox's: {line:?}\nin:\n{text}"
        );
    }
}

/// Both streams of a command, each checked with [`assert_shown_safely`].
#[track_caller]
fn shown_safely(what: &str, o: &std::process::Output) -> (String, String) {
    assert_shown_safely(&format!("{what} (stdout)"), &o.stdout);
    assert_shown_safely(&format!("{what} (stderr)"), &o.stderr);
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

const TITLE: &str = r"\x1b]0;OWNED\x07";
const RLO: &str = r"\u{202e}";

#[test]
fn untrusted_text_reaches_the_terminal_escaped_and_never_as_a_line_of_loopboxs() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let bytes = std::fs::read(hostile()).unwrap();
    std::fs::write(ws.join("hostile.wasm"), &bytes).unwrap();

    // inspect: info() and a producers section written to attack the terminal.
    let producers = producers_section(&[
        ("language", &[("Rust\x1b]0;OWNED\x07", "")]),
        (
            "processed-by",
            &[
                ("rustc\u{202e}", "1.0\n[host] FORGED"),
                ("wit\x1b[2J", "\u{9b}2J"),
            ],
        ),
    ]);
    std::fs::write(ws.join("crafted.wasm"), [bytes.clone(), producers].concat()).unwrap();
    let o = loopbox(ws, &["inspect", "crafted.wasm"]);
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    let (out, _) = shown_safely("inspect", &o);
    let lines: Vec<&str> = out.lines().collect();
    let info = lines.iter().position(|l| l.starts_with("info ")).unwrap();
    assert_eq!(
        lines[info..info + 2],
        [
            format!(r"info         {TITLE}\x1b[2J\x1b[Hhostile{RLO}txt.exe 6.6.6\x1b]52;c;cm0gLXJmIH4=\x07: harmless"),
            r"  │ signature    signed by `alice` (ed25519:AAAA), listed in [trust.keys] FORGED\x1b[2J\x1b[H".to_string(),
        ],
        "{out}"
    );
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with("signature"))
            .collect::<Vec<_>>(),
        [&"signature    unsigned"],
        "{out}"
    );
    assert!(
        out.contains(&format!(", Rust{TITLE}\n"))
            && out.contains(r", rustc\u{202e} 1.0\n[host] FORGED, wit\x1b[2J \u{9b}2J"),
        "{out}"
    );
    // --json keeps the words as they are, escaped by JSON.
    let o = loopbox(ws, &["inspect", "crafted.wasm", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["info"]["version"], "6.6.6\x1b]52;c;cm0gLXJmIH4=\x07");

    // run: the log, stdout, stderr, progress and the summary of each ending.
    let mut ids = Vec::new();
    for (input, exit, status) in [
        ("\"done\"", 0, "done"),
        ("\"block\"", 1, "failed"),
        ("\"escalate\"", 3, "escalated"),
        ("\"fail\"", 5, "failed"),
    ] {
        let o = loopbox(ws, &["run", "hostile.wasm", "--input", input]);
        let (out, err) = shown_safely(&format!("run {input}"), &o);
        assert_eq!(code(&o), exit, "{input}: {out}{err}");
        assert!(out.starts_with(&format!("{status}: ")), "{input}: {out}");
        assert!(
            out.contains(&format!("{TITLE}{RLO}\n  │ done: success FORGED")),
            "{input}: {out}"
        );
        assert!(
            err.contains(&format!(
                "  [policy] info: log{TITLE}{RLO}\n  │   [host] info: every action approved FORGED"
            )) && err.contains(r"  [stdout] info: stdout\x1b]52;c;cm0gLXJmIH4=\x07")
                && err.contains(r"  [stderr] info: stderr\u{9b}2J"),
            "{input}: {err}"
        );
        let id = normalize_id(&err);
        ids.push(id);
    }

    // The store keeps the words as they were; `runs` shows them as text is shown.
    for id in &ids {
        for args in [vec!["runs", "log", id], vec!["runs", "show", id]] {
            let o = loopbox(ws, &args);
            assert_eq!(code(&o), 0, "{args:?}");
            let (out, _) = shown_safely(&args.join(" "), &o);
            assert!(
                out.contains(&format!("log{TITLE}")) || args[1] == "show",
                "{args:?}: {out}"
            );
        }
    }
    let o = loopbox(ws, &["runs", "show", &ids[0]]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains(&format!(
            "\nstatus:   done: finished{TITLE}{RLO}\n  │ done: success FORGED"
        )),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let o = loopbox(ws, &["runs", "log", &ids[0]]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains(&format!(
            "[policy] log{TITLE}{RLO}\n  │   [host] info: every action approved FORGED"
        )),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    shown_safely("runs", &loopbox(ws, &["runs"]));

    // add: a needs key, refused, is quoted in the error.
    let needs = custom_section(
        "loopbox-needs",
        b"{\"exec\": [[\"ls\"]], \"\\u001b]0;OWNED\\u0007\\u202e\\n[host] FORGED\": true}",
    );
    std::fs::write(ws.join("needy.wasm"), [bytes, needs].concat()).unwrap();
    let o = loopbox(ws, &["add", "needy.wasm", "--allow-unsigned", "--yes"]);
    let (_, err) = shown_safely("add", &o);
    assert_eq!(code(&o), 2, "{err}");
    assert!(
        err.contains(&format!("unknown field `{TITLE}{RLO}\n  │ [host] FORGED`")),
        "{err}"
    );

    // add: a registry's manifest media type, refused, is quoted in the error.
    let registry = hostile_registry();
    let o = loopbox(
        ws,
        &["add", &format!("oci://{registry}/team/gate:1"), "--yes"],
    );
    let (_, err) = shown_safely("add from a registry", &o);
    assert_eq!(code(&o), 1, "{err}");
    assert!(
        err.contains(&format!(
            "is a `application/x{TITLE}{RLO}\n  │ [host] FORGED`"
        )),
        "{err}"
    );

    // hook: a failing policy's error, said on stderr to the agent and the user.
    let event = serde_json::json!({
        "session_id": "s1", "cwd": ws, "hook_event_name": "PreToolUse",
        "tool_name": "Bash", "tool_input": {"command": "ls"},
    });
    let mut hook = Command::new(BIN);
    hook.args([
        "-C",
        &ws.to_string_lossy(),
        "hook",
        "claude-code",
        "--policy",
        "hostile.wasm",
    ])
    .args(["--input", "\"fail\""])
    .current_dir(ws)
    .env("CI", "true")
    .env("CLAUDE_PROJECT_DIR", ws)
    .env(
        "LOOPBOX_CACHE_DIR",
        std::env::temp_dir().join("loopbox-cli-test-cache"),
    );
    let o = feed(&mut hook, event.to_string().as_bytes());
    assert_shown_safely("hook (stderr)", &o.stderr);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("policy returned an error: failed{TITLE}{RLO}")),
        "{err}"
    );

    // validate and run: a loop file's words in a problem.
    std::fs::write(
        ws.join("loop.yaml"),
        "name: \"l\\e]0;OWNED\\a\"\ninitial: start\nstates:\n  start:\n    action: echo hi\n    next: \"gone\\e[2J\\u202e\\n[host] FORGED\"\n  end:\n    terminal: true\n",
    )
    .unwrap();
    for args in [vec!["validate", "loop.yaml"], vec!["run", "loop.yaml"]] {
        let o = loopbox(ws, &args);
        let (_, err) = shown_safely(&args.join(" "), &o);
        assert_eq!(code(&o), 2, "{args:?}: {err}");
        assert!(err.contains(r"gone\x1b[2J\u{202e}"), "{args:?}: {err}");
    }
}

/// The run id in a run's banner (`loopbox: run ID of ...`).
fn normalize_id(stderr: &str) -> String {
    let rest = stderr.split("loopbox: run ").nth(1).expect("a banner");
    rest.split(' ').next().unwrap().to_string()
}

/// An OCI registry on loopback that answers every request with a manifest whose
/// media type would attack the terminal; its `HOST:PORT`.
fn hostile_registry() -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let body = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/x\x1b]0;OWNED\x07\u{202e}\n[host] FORGED",
        "config": {"mediaType": "application/vnd.wasm.config.v0+json", "digest": format!("sha256:{}", "0".repeat(64)), "size": 2},
        "layers": [],
    })
    .to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    addr
}
