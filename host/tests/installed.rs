//! Policies installed as `[policies.NAME]` in loopbox.toml: run by name, each under
//! its own grants and never the top-level ones, pinned to a digest, and resumed
//! under the same section. The real binary, the real probe component.

use std::path::Path;

mod common;

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
