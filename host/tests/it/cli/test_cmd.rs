//! `loopbox test` as a user runs it: a passing and a failing scenario's
//! output, `--json` and JUnit XML, the exit codes, `runs export --scenario`
//! round-tripping a real run, and hostile scenarios (a huge file, deep
//! nesting, aliases, huge claimed outputs, a policy asking for calls forever).

use std::path::Path;

use super::common::*;

const RALPH: &str = "name: ralph stops at the promise
policy: builtin:ralph
input: {prompt: Fix it., completion_promise: DONE, max_iterations: 3}
steps:
  - decision: {inject: {contains: \"[ralph iteration 1 of 3]\"}}
  - reply: not yet
    decision: {inject: {contains: \"[ralph iteration 2 of 3]\"}}
  - reply: <promise>DONE</promise>
    decision: {done: {success: true}}
expect:
  end: {done: {summary: completion promise found after 2 iteration(s)}}
  state: {ralph: {iteration: 2}}
";

fn write(dir: &Path, name: &str, text: &str) -> String {
    std::fs::write(dir.join(name), text).unwrap();
    name.to_string()
}

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn a_passing_and_a_failing_scenario_print_a_line_each_the_first_difference_and_a_summary() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "good.scenario.yaml", RALPH);
    write(
        d.path(),
        "bad.scenario.yaml",
        &RALPH.replace("iteration 2 of 3", "iteration 3 of 3"),
    );
    let o = loopbox(d.path(), &["test", "good.scenario.yaml"]);
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        stdout(&o),
        "ok    ralph stops at the promise (good.scenario.yaml)\n1 scenario(s): 1 passed, 0 failed, 0 could not run\n"
    );
    let o = loopbox(d.path(), &["test", "."]);
    assert_eq!(code(&o), 1, "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        stdout(&o),
        "FAIL  ralph stops at the promise (./bad.scenario.yaml)
  ./bad.scenario.yaml:7: the decision differs: at `.message`: expected text containing \"[ralph iteration 3 of 3]\", got \"Fix it.\\n\\n[ralph iteration 2 of 3]\"
  │   decided: {\"type\":\"inject\",\"message\":\"Fix it.\\n\\n[ralph iteration 2 of 3]\"}
ok    ralph stops at the promise (./good.scenario.yaml)
2 scenario(s): 1 passed, 1 failed, 0 could not run
"
    );
}

#[test]
fn json_and_junit_say_the_same_for_scripts_and_ci() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "a.scenario.yaml", RALPH);
    write(
        d.path(),
        "b.scenario.yaml",
        &RALPH.replace("iteration: 2", "iteration: 5"),
    );
    let o = loopbox(d.path(), &["test", "--json", "--junit", "report.xml", "."]);
    assert_eq!(code(&o), 1);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (
            v["passed"].as_u64(),
            v["failed"].as_u64(),
            v["errors"].as_u64()
        ),
        (Some(1), Some(1), Some(0))
    );
    let rows = v["scenarios"].as_array().unwrap();
    assert_eq!(rows[0]["status"], "ok");
    assert_eq!(rows[0]["events"], 3);
    assert_eq!(rows[1]["status"], "fail");
    assert_eq!(rows[1]["line"], 12);
    assert!(
        rows[1]["message"]
            .as_str()
            .unwrap()
            .starts_with("the state at the end differs: at `.ralph.iteration`: expected 5, got 2"),
        "{v}"
    );
    let xml = std::fs::read_to_string(d.path().join("report.xml")).unwrap();
    assert!(xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"loopbox test\" tests=\"2\" failures=\"1\" errors=\"0\">\n  <testsuite name=\"loopbox test\" tests=\"2\" failures=\"1\" errors=\"0\">\n"), "{xml}");
    assert!(xml.contains("<testcase name=\"ralph stops at the promise\" classname=\"./a.scenario.yaml\" file=\"./a.scenario.yaml\"/>"), "{xml}");
    assert!(xml.contains("<failure message=\"the state at the end differs: at `.ralph.iteration`: expected 5, got 2\">./b.scenario.yaml:12: "), "{xml}");
    assert!(xml.ends_with("  </testsuite>\n</testsuites>\n"), "{xml}");
}

#[test]
fn a_scenario_that_cannot_run_or_none_at_all_is_exit_2() {
    let d = tempfile::tempdir().unwrap();
    let o = loopbox(d.path(), &["test", "."]);
    assert_eq!(code(&o), 2);
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("no scenario files (*.scenario.yaml) under `.`")
    );
    write(d.path(), "x.scenario.yaml", "input: {}\n");
    let o = loopbox(d.path(), &["test", "--json"]);
    assert_eq!(code(&o), 2);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["scenarios"][0]["status"], "error");
    assert!(
        v["scenarios"][0]["message"]
            .as_str()
            .unwrap()
            .contains("the scenario does not say which policy it tests"),
        "{v}"
    );
}

/// A bug seen in a real run becomes a regression test: the run is exported,
/// and the exported scenario passes against the same policy.
#[test]
fn a_real_run_exported_as_a_scenario_passes_loopbox_test() {
    let p = example("loops");
    let o = loopbox(p.path(), &["run", "fix-the-tests.yaml"]);
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    let o = loopbox(p.path(), &["runs", "--json"]);
    let runs: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let id = runs[0]["id"].as_str().unwrap().to_string();
    let o = loopbox(
        p.path(),
        &[
            "runs",
            "export",
            &id,
            "--scenario",
            "-o",
            "run.scenario.yaml",
        ],
    );
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(p.path().join("run.scenario.yaml")).unwrap();
    assert!(
        text.contains("  - shell: {\"script\":\"sh test.sh\""),
        "{text}"
    );
    assert!(text.contains("\"common.yaml\": "), "{text}");
    // A YAML loop is named by its path from the scenario's directory, with its own input.
    assert!(
        text.contains("policy: \"fix-the-tests.yaml\"\ninput: \"{}\"\n"),
        "{text}"
    );
    std::fs::create_dir(p.path().join("t")).unwrap();
    let o = loopbox(
        p.path(),
        &[
            "runs",
            "export",
            &id,
            "--scenario",
            "-o",
            "t/x.scenario.yaml",
        ],
    );
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    let sub = std::fs::read_to_string(p.path().join("t/x.scenario.yaml")).unwrap();
    assert!(sub.contains("policy: \"../fix-the-tests.yaml\"\n"), "{sub}");
    let o = loopbox(p.path(), &["test", "run.scenario.yaml"]);
    assert_eq!(
        code(&o),
        0,
        "{}{}",
        stdout(&o),
        String::from_utf8_lossy(&o.stderr)
    );
    // An export never replaces a file.
    let o = loopbox(
        p.path(),
        &[
            "runs",
            "export",
            &id,
            "--scenario",
            "-o",
            "run.scenario.yaml",
        ],
    );
    assert_eq!(code(&o), 2);
    // A scenario that expects another command fails, naming the call, its line and the difference.
    let changed = text.replacen(
        "{\"script\":\"sh test.sh\"",
        "{\"script\":\"sh other.sh\"",
        1,
    );
    write(p.path(), "changed.scenario.yaml", &changed);
    let o = loopbox(p.path(), &["test", "changed.scenario.yaml"]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    let line = changed
        .lines()
        .position(|l| l.contains("sh other.sh"))
        .unwrap()
        + 1;
    assert!(
        stdout(&o).contains(&format!(
            "  changed.scenario.yaml:{line}: call 1 of the step does not match the scenario (line {line}): the policy asked for script \"sh test.sh\"; at `.script`: expected \"sh other.sh\", got \"sh test.sh\"\n"
        )),
        "{}",
        stdout(&o)
    );
}

/// The scenarios shipped with the example loops pass.
#[test]
fn the_example_loops_scenarios_pass() {
    let p = example("loops");
    let o = loopbox(p.path(), &["test", "."]);
    assert_eq!(
        code(&o),
        0,
        "{}{}",
        stdout(&o),
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn hostile_scenario_files_end_with_a_clear_error() {
    let d = tempfile::tempdir().unwrap();
    // 100 MB: read no further than the cap.
    let f = std::fs::File::create(d.path().join("huge.scenario.yaml")).unwrap();
    f.set_len(100 << 20).unwrap();
    write(
        d.path(),
        "deep.scenario.yaml",
        &format!(
            "policy: builtin:ralph\ninput: {}{}\n",
            "[".repeat(100_000),
            "]".repeat(100_000)
        ),
    );
    let mut bomb = String::from("policy: builtin:ralph\na: &a [\"xxxxxxxxxxxxxxxxxxxxxxxx\"]\n");
    for i in 0..20 {
        let prev = if i == 0 {
            "a".to_string()
        } else {
            format!("l{}", i - 1)
        };
        bomb.push_str(&format!(
            "l{i}: &l{i} [{}]\n",
            vec![format!("*{prev}"); 10].join(", ")
        ));
    }
    write(d.path(), "bomb.scenario.yaml", &bomb);
    let o = loopbox(d.path(), &["test", "--json", "."]);
    assert_eq!(code(&o), 2);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let msg = |i: usize| v["scenarios"][i]["message"].as_str().unwrap().to_string();
    assert!(
        msg(0).contains("line 3: YAML aliases (`*name`) are not accepted"),
        "{}",
        msg(0)
    );
    assert!(
        msg(1).contains("line 2: recursion limit exceeded"),
        "{}",
        msg(1)
    );
    assert!(
        msg(2).contains("scenario `./huge.scenario.yaml` cannot be read"),
        "{}",
        msg(2)
    );
}

#[test]
fn huge_claimed_outputs_are_cut_at_the_output_limit_and_a_policy_asking_forever_is_stopped() {
    let d = tempfile::tempdir().unwrap();
    let probe = probe().display().to_string();
    // 900 KB of claimed stdout reaches the policy cut at limits.output_bytes, marked truncated.
    write(
        d.path(),
        "big.scenario.yaml",
        &format!(
            "policy: {probe}\ninput: {{op: exec, argv: [cat, big]}}\nconfig: |\n  [limits]\n  output_bytes = 1000\ncalls:\n  - shell: [cat, big]\n    returns: {}\ndecision: {{done: {{data: {{ok: {{truncated: true, stdout: {{matches: \"^x{{1000}}$\"}}}}}}}}}}\n",
            serde_json::Value::String("x".repeat(900_000))
        ),
    );
    // Asking for the same command again and again: the first unscripted call ends the event.
    write(
        d.path(),
        "again.scenario.yaml",
        &format!(
            "policy: {probe}\ninput: {{op: exec, argv: [ls], times: 100000}}\ncalls:\n  - shell: [ls]\n"
        ),
    );
    // Reading state forever: the host-call limit stops it.
    write(
        d.path(),
        "flood.scenario.yaml",
        &format!(
            "policy: {probe}\ninput: {{op: flood, count: 1000000000}}\nfault: limits.host_calls_per_event\n"
        ),
    );
    let start = std::time::Instant::now();
    let o = loopbox(d.path(), &["test", "--json", "."]);
    assert!(start.elapsed() < std::time::Duration::from_secs(30));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v["scenarios"].as_array().unwrap();
    assert_eq!(rows[0]["file"], "./again.scenario.yaml");
    assert_eq!(rows[0]["status"], "fail", "{v}");
    assert!(
        rows[0]["message"]
            .as_str()
            .unwrap()
            .starts_with("unexpected call: the policy asked for exec [\"ls\"], and the step at line 3 scripts 1 call(s), all made"),
        "{v}"
    );
    assert_eq!(rows[1]["status"], "ok", "{v}");
    assert_eq!(rows[2]["status"], "ok", "{v}");
    assert_eq!(code(&o), 1);
}

/// The scenarios of the test policies `stall` (its wall-time limit applies under a
/// scenario as in a run) and `durable` (clock and random numbers in its requests).
#[test]
fn the_stall_and_durable_scenarios_pass_against_their_builds() {
    let built =
        loopbox_guest_build::Repo::containing(&repo()).build_rust_guests(&["stall", "durable"]);
    for (name, wasm) in built {
        let dir = repo().join("guests/rust").join(&name);
        let o = loopbox(
            &dir,
            &["test", "--policy", &wasm.display().to_string(), "."],
        );
        assert_eq!(code(&o), 0, "{name}: {}", stdout(&o));
    }
}

/// `--junit report.xml` where report.xml is a planted symlink replaces the
/// link with the report; the file it pointed at is left as it was.
#[test]
fn junit_replaces_a_symlink_at_the_report_path_never_its_target() {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "a.scenario.yaml", RALPH);
    write(d.path(), "victim", "keep me\n");
    std::os::unix::fs::symlink(d.path().join("victim"), d.path().join("report.xml")).unwrap();
    let o = loopbox(
        d.path(),
        &["test", "--junit", "report.xml", "a.scenario.yaml"],
    );
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        std::fs::read_to_string(d.path().join("victim")).unwrap(),
        "keep me\n"
    );
    let report = d.path().join("report.xml");
    assert!(!report.symlink_metadata().unwrap().is_symlink());
    assert!(
        std::fs::read_to_string(report)
            .unwrap()
            .contains("<testsuites")
    );
}

/// A scenario file name holding ESC, CR and a newline is printed escaped: it
/// cannot clear the screen or forge an `ok` line.
#[test]
fn a_hostile_scenario_file_name_is_printed_on_one_escaped_line() {
    let d = tempfile::tempdir().unwrap();
    let name = "x\u{1b}[2J\rok    forged\n.scenario.yaml";
    write(
        d.path(),
        name,
        &RALPH.replace("iteration: 2", "iteration: 5"),
    );
    let o = loopbox(d.path(), &["test", name]);
    assert_eq!(code(&o), 1, "{}", String::from_utf8_lossy(&o.stderr));
    let out = stdout(&o);
    assert!(!out.contains('\u{1b}') && !out.contains('\r'), "{out:?}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("FAIL  "), "{out:?}");
    assert!(lines[1].starts_with("  x"), "{out:?}");
    assert!(!out.lines().any(|l| l.starts_with("ok")), "{out:?}");
}

/// A scenario's `config` may lower limits, never raise them above the
/// defaults: a raised host-call limit still stops a policy flooding the host.
#[test]
fn a_scenario_cannot_raise_its_limits_above_the_defaults() {
    let d = tempfile::tempdir().unwrap();
    let probe = probe().display().to_string();
    write(
        d.path(),
        "flood.scenario.yaml",
        &format!(
            "policy: {probe}\ninput: {{op: flood, count: 1000000000}}\nconfig: |\n  [limits]\n  host_calls_per_event = 18446744073709551615\nfault: limits.host_calls_per_event\n"
        ),
    );
    let o = loopbox(d.path(), &["test", "--json", "."]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["scenarios"][0]["status"], "ok", "{v}");
    assert_eq!(code(&o), 0);
}

/// `cd examples/loops && loopbox test triage.scenario.yaml`: a bare file
/// name's directory is `.`.
#[test]
fn a_bare_scenario_file_name_finds_its_loop_beside_it() {
    let p = example("loops");
    let o = loopbox(p.path(), &["test", "triage.scenario.yaml"]);
    assert_eq!(
        code(&o),
        0,
        "{}{}",
        stdout(&o),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A `shell.pass_env` variable's value a command printed is not copied into
/// an exported scenario.
#[test]
fn an_export_redacts_the_values_of_pass_env_variables() {
    let p = example("loops");
    let toml = std::fs::read_to_string(p.path().join("loopbox.toml")).unwrap();
    let toml = toml.replacen(
        "scripts = true\n",
        "scripts = true\npass_env = [\"LB_EXPORT_SECRET\"]\n",
        1,
    );
    write(p.path(), "loopbox.toml", &toml);
    write(p.path(), "test.sh", "echo \"key=$LB_EXPORT_SECRET\"\n");
    write(
        p.path(),
        "leak.yaml",
        "name: leak\ninitial: show\nstates:\n  show:\n    action: sh test.sh\n    next: end\n  end:\n    terminal: true\n",
    );
    let run = |args: &[&str]| {
        trusted_command(p.path())
            .arg("-C")
            .arg(p.path())
            .args(args)
            .env("LB_EXPORT_SECRET", "hunter2-very-secret")
            .env("CI", "true")
            .current_dir(p.path())
            .output()
            .unwrap()
    };
    let o = run(&["run", "leak.yaml"]);
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    let o = run(&["runs", "--json"]);
    let runs: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let id = runs[0]["id"].as_str().unwrap().to_string();
    let o = run(&["runs", "export", &id, "--scenario"]);
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    let text = stdout(&o);
    assert!(!text.contains("hunter2-very-secret"), "{text}");
    assert!(text.contains("key=<redacted:LB_EXPORT_SECRET>"), "{text}");
}
