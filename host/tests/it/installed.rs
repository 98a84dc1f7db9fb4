//! Policies installed as `[policies.NAME]` in loopbox.toml: run by name, each under
//! its own grants and never the top-level ones, pinned to a digest, and resumed
//! under the same section. The real binary, the real probe component.

use std::path::Path;

use crate::common;

use common::*;
use serde_json::Value;

/// A workspace whose config lets path-named policies run `cat` and installs the
/// probe as `lister`, which may run `ls` only.
fn workspace(digest: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(probe(), dir.path().join("probe.wasm")).unwrap();
    std::fs::write(dir.path().join("notes.txt"), "hello\n").unwrap();
    std::fs::write(
        dir.path().join("loopbox.toml"),
        format!(
            r#"
[shell]
allow = [["cat"]]
sandbox = "none"

[policies.lister]
source = "probe.wasm"
unsigned = true
{digest}

[policies.lister.shell]
allow = [["ls"]]
sandbox = "none"
"#
        ),
    )
    .unwrap();
    dir
}

/// Run `policy` with an exec of `argv`; (exit code, the probe's result, stderr).
fn exec(dir: &Path, policy: &str, argv: &[&str]) -> (i32, Value, String) {
    let input = serde_json::json!({"op": "exec", "argv": argv}).to_string();
    let o = loopbox(dir, &["run", policy, "--input", &input, "--json"]);
    let out: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    (
        code(&o),
        out,
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Whether the probe's run ended with its command run (not refused).
fn ran(out: &Value) -> bool {
    let data = out["outcome"]["data"].to_string();
    data.contains(r#""ok""#) && !data.contains(r#""err""#)
}

#[test]
fn an_installed_policy_runs_under_its_own_grants_and_never_the_top_level_ones() {
    let dir = workspace("");
    let d = dir.path();
    // By name: its section allows `ls` and nothing else, the top-level `cat` included.
    let (code_ls, out, err) = exec(d, "lister", &["ls"]);
    assert!(code_ls == 0 && ran(&out), "{out} {err}");
    let (_, out, _) = exec(d, "lister", &["cat", "notes.txt"]);
    assert!(
        !ran(&out),
        "the top-level grant reached an installed policy: {out}"
    );
    assert!(
        out.to_string().contains("no rule in `policies.lister.shell.allow` matches; to allow it add [\\\"cat\\\", \\\"notes.txt\\\"] to `policies.lister.shell.allow`"),
        "the refusal names the section to edit: {out}"
    );
    // A prompt with no agent in its section names that section, not the top-level [agent].
    let o = loopbox(
        d,
        &[
            "run",
            "lister",
            "--input",
            r#"{"op":"prompt","text":"hi"}"#,
            "--json",
        ],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("no agent is configured: add an `[policies.lister.agent]` section"),
        "{out}"
    );
    // Its section grants no workspace reads; by path the top level grants them all.
    let read = |policy: &str| {
        let o = loopbox(
            d,
            &[
                "run",
                policy,
                "--input",
                r#"{"op":"read","path":"notes.txt"}"#,
                "--json",
            ],
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let out = read("lister");
    assert!(
        out.contains("reading `notes.txt` is not granted: no path in `policies.lister.workspace.read` covers it")
            && !out.contains("hello"),
        "{out}"
    );
    assert!(read("probe.wasm").contains("hello"));
    let config = std::fs::read_to_string(d.join("loopbox.toml")).unwrap();
    std::fs::write(
        d.join("loopbox.toml"),
        format!("{config}\n[policies.lister.workspace]\nread = [\"notes.txt\"]\n"),
    )
    .unwrap();
    assert!(read("lister").contains("hello"));
    std::fs::write(d.join("loopbox.toml"), &config).unwrap();
    // By path, the same component runs under the top-level grants.
    let (_, out, _) = exec(d, "probe.wasm", &["cat", "notes.txt"]);
    assert!(ran(&out), "{out}");
    let (_, out, _) = exec(d, "probe.wasm", &["ls"]);
    assert!(
        !ran(&out) && out.to_string().contains("to `shell.allow` in loopbox.toml"),
        "{out}"
    );

    // The run records which grants it ran under.
    let runs: Value = serde_json::from_slice(&loopbox(d, &["runs", "--json"]).stdout).unwrap();
    let mut seen: Vec<(String, Value)> = vec![];
    for r in runs.as_array().unwrap() {
        let id = r["id"].as_str().unwrap();
        let show: Value =
            serde_json::from_slice(&loopbox(d, &["runs", "show", id, "--json"]).stdout).unwrap();
        seen.push((
            show["grants"].as_str().unwrap().to_string(),
            show["policy_name"].clone(),
        ));
    }
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        seen,
        [
            ("[policies.lister]".to_string(), Value::from("lister")),
            ("[policies.lister]".to_string(), Value::from("lister")),
            ("[policies.lister]".to_string(), Value::from("lister")),
            ("[policies.lister]".to_string(), Value::from("lister")),
            ("[policies.lister]".to_string(), Value::from("lister")),
            ("the top-level sections".to_string(), Value::Null),
            ("the top-level sections".to_string(), Value::Null),
            ("the top-level sections".to_string(), Value::Null),
        ]
    );
    let o = loopbox(d, &["run", "lister", "--input", r#"{"op":"echo"}"#]);
    let banner = String::from_utf8_lossy(&o.stderr);
    assert!(
        banner.contains("grants of [policies.lister]: exec [ls]"),
        "{banner}"
    );
}

#[test]
fn a_pinned_digest_refuses_a_changed_component() {
    let digest = format!(
        "blake3:{}",
        blake3::hash(&std::fs::read(probe()).unwrap()).to_hex()
    );
    let dir = workspace(&format!("digest = \"{digest}\""));
    let d = dir.path();
    let (code_ok, out, err) = exec(d, "lister", &["ls"]);
    assert!(code_ok == 0 && ran(&out), "{out} {err}");

    // One byte appended in a custom section's place: still a component, not the pinned one.
    let mut bytes = std::fs::read(d.join("probe.wasm")).unwrap();
    bytes.extend_from_slice(&[0, 4, 3, b'x', b'y', b'z']);
    std::fs::write(d.join("probe.wasm"), &bytes).unwrap();
    let o = loopbox(d, &["run", "lister", "--input", r#"{"op":"echo"}"#]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(code(&o), 2, "{err}");
    assert!(
        err.contains("policy `lister` is not the component [policies.lister] pins")
            && err.contains(&digest),
        "{err}"
    );
    // The same file by path is not pinned, and runs.
    let o = loopbox(d, &["run", "probe.wasm", "--input", r#"{"op":"echo"}"#]);
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn a_bad_policies_section_is_refused_with_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (toml, words) in [
        (
            "[policies.Bad]\nsource = \"x.wasm\"\n",
            "[policies.Bad]: a policy's name is 1 to 64 lower-case letters",
        ),
        (
            "[policies.a]\nsource = \"x.wasm\"\ndigest = \"md5:00\"\n",
            "policies.a.digest: `md5:00` is not a digest",
        ),
        (
            "[policies.a]\nsource = \"x.wasm\"\n[policies.a.shell]\nallow = [[\"\"]]\n",
            "in [policies.a]: shell.allow[0]: a rule needs at least a program name",
        ),
        (
            "[policies.a]\nsource = \"x.wasm\"\ngrants = 1\n",
            "unknown field `grants`",
        ),
    ] {
        std::fs::write(d.join("loopbox.toml"), toml).unwrap();
        let o = loopbox(d, &["run", "a", "--input", "{}"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(code(&o), 2, "{toml}: {err}");
        assert!(err.contains(words), "{toml}: {err}");
    }
}

#[test]
fn a_parked_run_resumes_under_its_section_or_not_at_all() {
    let dir = workspace("");
    let d = dir.path();
    let o = loopbox(
        d,
        &[
            "run",
            "lister",
            "--input",
            r#"{"op": "echo", "then": "ask"}"#,
        ],
    );
    assert_eq!(code(&o), 4, "{}", String::from_utf8_lossy(&o.stderr));
    let runs: Value = serde_json::from_slice(&loopbox(d, &["runs", "--json"]).stdout).unwrap();
    let id = runs[0]["id"].as_str().unwrap().to_string();
    let config = std::fs::read_to_string(d.join("loopbox.toml")).unwrap();

    // A change to the section's grants is a change to this run's grants: refused.
    std::fs::write(
        d.join("loopbox.toml"),
        config.replace(r#"allow = [["ls"]]"#, r#"allow = [["ls"], ["rm"]]"#),
    )
    .unwrap();
    let o = loopbox(d, &["runs", "answer", &id, "yes"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(code(&o), 2, "{err}");
    assert!(err.contains("shell.allow"), "{err}");

    // A change to the top-level grants is not: they are not this run's.
    std::fs::write(
        d.join("loopbox.toml"),
        config.replace(r#"allow = [["cat"]]"#, r#"allow = [["cat"], ["rm"]]"#),
    )
    .unwrap();
    let o = loopbox(d, &["runs", "answer", &id, "yes"]);
    assert_ne!(code(&o), 2, "{}", String::from_utf8_lossy(&o.stderr));

    // Without its section, a parked run of the policy does not fall back to the top level.
    let o = loopbox(
        d,
        &[
            "run",
            "lister",
            "--input",
            r#"{"op": "echo", "then": "ask"}"#,
        ],
    );
    assert_eq!(code(&o), 4);
    let runs: Value = serde_json::from_slice(&loopbox(d, &["runs", "--json"]).stdout).unwrap();
    let parked = runs
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["status"] == "waiting")
        .expect("a parked run");
    let id = parked["id"].as_str().unwrap();
    let top_only = &config[..config.find("[policies.lister]").unwrap()];
    std::fs::write(d.join("loopbox.toml"), top_only).unwrap();
    let o = loopbox(d, &["runs", "answer", id, "yes"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(code(&o), 2, "{err}");
    assert!(
        err.contains("the run was started as policy `lister`, under the grants of [policies.lister], which the config no longer has"),
        "{err}"
    );
}

/// A workspace with `top` as the top-level sections and the probe installed as
/// `p` with `section` as its `[policies.p.shell]`, reading the whole workspace,
/// and a secret in `.env`.
fn bound_workspace(top: &str, section: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(probe(), dir.path().join("probe.wasm")).unwrap();
    std::fs::write(dir.path().join(".env"), "API_KEY=SECRET-7f3a\n").unwrap();
    std::fs::write(
        dir.path().join("loopbox.toml"),
        format!(
            "{top}\n[policies.p]\nsource = \"probe.wasm\"\nunsigned = true\n\n[policies.p.shell]\n{section}\n\n[policies.p.workspace]\nread = [\".\"]\n"
        ),
    )
    .unwrap();
    dir
}

#[test]
fn the_top_levels_hidden_paths_bind_an_installed_policy() {
    let dir = bound_workspace("[shell]\nhide = [\".env\"]\n", "allow = [[\"cat\"]]");
    let d = dir.path();
    // Its own command: the sandbox hides `.env` from it.
    let (c, cat, err) = exec(d, "p", &["cat", ".env"]);
    assert_eq!(c, 0, "{cat} {err}");
    // Its own read: refused by name.
    let o = loopbox(
        d,
        &[
            "run",
            "p",
            "--input",
            r#"{"op":"read","path":".env"}"#,
            "--json",
        ],
    );
    let read = String::from_utf8_lossy(&o.stdout);
    let mut leaks = Vec::new();
    if cat.to_string().contains("SECRET-7f3a") {
        leaks.push(format!("its `cat` read the hidden .env: {cat}"));
    }
    if read.contains("SECRET-7f3a") || !read.contains("hidden") {
        leaks.push(format!(
            "its workspace.read returned the hidden .env: {read}"
        ));
    }
    assert!(leaks.is_empty(), "an installed policy: {leaks:#?}");
}

#[test]
fn a_policy_section_cannot_widen_the_top_levels_safety_settings() {
    let mut widened = Vec::new();
    // Keys a section may not widen: refused at load, naming the key.
    for (top, section, words) in [
        (
            "[shell]\nsandbox = \"bwrap\"\n",
            "sandbox = \"none\"",
            "policies.p.shell.sandbox = \"none\" is weaker than the top-level shell.sandbox = \"bwrap\"",
        ),
        (
            "[shell]\nsandbox = \"auto\"\n",
            "sandbox = \"landlock\"",
            "policies.p.shell.sandbox = \"landlock\" is weaker",
        ),
        (
            "",
            "unix_sockets = true",
            "policies.p.shell.unix_sockets = true, but the top-level [shell] has unix_sockets off",
        ),
        (
            "[shell]\nreveal = [\"~/.aws\"]\n",
            "reveal = [\"~/.ssh\"]",
            "policies.p.shell.reveal: `~/.ssh` is not in the top-level shell.reveal",
        ),
    ] {
        let dir = bound_workspace(top, section);
        let o = loopbox(dir.path(), &["run", "p", "--input", r#"{"op":"echo"}"#]);
        let err = String::from_utf8_lossy(&o.stderr);
        if code(&o) != 2 || !err.contains(words) || !err.contains("never widen them") {
            widened.push(format!("{section} (exit {}): {err}", code(&o)));
        }
    }

    // Keys a section narrows: the top level's deny rules hold, and limits are the smaller.
    let dir = bound_workspace(
        "[shell]\ndeny = [[\"ls\"]]\n[shell.rlimits]\nfile_size_bytes = 1000\n",
        "allow = [[\"ls\"], [\"truncate\"]]\n[policies.p.shell.rlimits]\nfile_size_bytes = 1000000",
    );
    let d = dir.path();
    let (_, out, _) = exec(d, "p", &["ls"]);
    if ran(&out) || !out.to_string().contains("is denied by") {
        widened.push(format!("the top-level deny did not bind it: {out}"));
    }
    let exit_code = |out: &Value| out["outcome"]["data"]["ok"]["exit_code"].as_i64();
    let (_, out, _) = exec(d, "p", &["truncate", "-s", "5000", "big"]);
    let size = std::fs::metadata(d.join("big")).map(|m| m.len()).ok();
    if exit_code(&out).is_none_or(|c| c == 0) || size.is_some_and(|s| s > 1000) {
        widened.push(format!(
            "the section's larger file size limit won: {size:?} {out}"
        ));
    }
    let (_, out, _) = exec(d, "p", &["truncate", "-s", "900", "small"]);
    assert_eq!(exit_code(&out), Some(0), "{out}");
    assert!(widened.is_empty(), "a policy section widened: {widened:#?}");
}

/// `loopbox ARGS` in `dir` with `env` added to its environment.
fn loopbox_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    trusted_command(dir)
        .arg("-C")
        .arg(dir)
        .args(args)
        .env(
            "LOOPBOX_CACHE_DIR",
            std::env::temp_dir().join("loopbox-cli-test-cache"),
        )
        .env("CI", "true")
        .envs(env.iter().copied())
        .current_dir(dir)
        .output()
        .unwrap()
}

#[test]
fn the_agents_variables_reach_the_agent_and_not_the_commands() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::copy(probe(), d.join("probe.wasm")).unwrap();
    let agent = d.join("agent.sh");
    std::fs::write(
        &agent,
        "#!/bin/sh\necho \"agent sees AGENT_ONLY=${AGENT_ONLY:-unset} SHARED=${SHARED:-unset}\"\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    let shell = "[shell]\nallow = [[\"printenv\"]]\npass_env = [\"HOME\", \"LANG\", \"TERM\", \"SHARED\"]\n";
    let agent_section = "[agent]\ncommand = [\"./agent.sh\"]\nprompt_input = \"stdin\"\n";
    let env = [("AGENT_ONLY", "agent-key-51d2"), ("SHARED", "shared-8c0e")];
    let prompt = |d: &Path| {
        let o = loopbox_env(
            d,
            &[
                "run",
                "probe.wasm",
                "--input",
                r#"{"op":"prompt","text":"hi"}"#,
                "--json",
            ],
            &env,
        );
        (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };

    // With agent.pass_env: the agent gets exactly its own variables.
    std::fs::write(
        d.join("loopbox.toml"),
        format!("{shell}\n{agent_section}pass_env = [\"HOME\", \"AGENT_ONLY\"]\n"),
    )
    .unwrap();
    let (out, err) = prompt(d);
    assert!(
        out.contains("agent sees AGENT_ONLY=agent-key-51d2 SHARED=unset"),
        "{out} {err}"
    );
    assert!(!err.contains("warning: the agent has no pass_env"), "{err}");
    // A command gets shell.pass_env, never the agent's key.
    let o = loopbox_env(
        d,
        &[
            "run",
            "probe.wasm",
            "--input",
            r#"{"op":"exec","argv":["printenv"]}"#,
            "--json",
        ],
        &env,
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        ran(&serde_json::from_str(&out).unwrap_or(Value::Null)),
        "{out}"
    );
    assert!(
        out.contains("SHARED=shared-8c0e") && !out.contains("agent-key-51d2"),
        "{out}"
    );

    // Without it (a config from before the key): the agent still gets
    // shell.pass_env, and loopbox says how to give the agent its own.
    std::fs::write(d.join("loopbox.toml"), format!("{shell}\n{agent_section}")).unwrap();
    let (out, err) = prompt(d);
    assert!(
        out.contains("agent sees AGENT_ONLY=unset SHARED=shared-8c0e"),
        "{out} {err}"
    );
    assert!(
        err.contains("warning: the agent has no pass_env of its own, so it gets shell.pass_env (SHARED) as before")
            && err.contains("`pass_env = [\"HOME\", \"LANG\", \"TERM\", \"SHARED\"]` in its [agent] section"),
        "{err}"
    );

    // A code-loading variable is refused there as in shell.pass_env.
    std::fs::write(
        d.join("loopbox.toml"),
        format!("{shell}\n{agent_section}pass_env = [\"NODE_OPTIONS\"]\n"),
    )
    .unwrap();
    let (_, err) = prompt(d);
    assert!(err.contains("agent.pass_env: `NODE_OPTIONS`"), "{err}");
}

/// `loopbox add` is the user's own edit of a trusted config: the next run obeys the
/// config without another `loopbox trust`. An untrusted config stays untrusted.
#[test]
fn add_keeps_a_trusted_config_trusted_and_an_untrusted_one_not() {
    let run_plain = |dir: &Path, args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_loopbox"))
            .arg("-C")
            .arg(dir)
            .args(args)
            .env("XDG_DATA_HOME", data_home())
            .env("CI", "true")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    for trusted_first in [true, false] {
        let dir = workspace("");
        std::fs::copy(probe(), dir.path().join("second.wasm")).unwrap();
        if trusted_first {
            trust(&dir.path().join("loopbox.toml"));
        }
        let o = run_plain(
            dir.path(),
            &["add", "second.wasm", "--allow-unsigned", "--yes"],
        );
        assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
        let o = run_plain(dir.path(), &["run", "second", "--input", "{}"]);
        let err = String::from_utf8_lossy(&o.stderr);
        if trusted_first {
            // The config was obeyed: the run started (the probe then refuses `{}`).
            assert!(!err.contains("not trusted yet"), "trusted_first: {err}");
            assert!(err.contains("loopbox: run r"), "{err}");
        } else {
            assert_eq!(code(&o), 2, "{err}");
            assert!(err.contains("is not trusted yet"), "{err}");
        }
    }
}
