//! Accepting changed grants on resume obeys the config as it is now, so that config
//! must be approved as `loopbox run` requires (docs/security.md).

use std::process::{Command, Stdio};

use crate::common::{self, BIN, code, loopbox, probe};

#[test]
fn accepting_a_changed_config_on_resume_needs_it_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("loopbox.toml");
    std::fs::write(&config, "[shell]\nallow = [[\"ls\"]]\n").unwrap();
    let probe = probe().to_string_lossy().into_owned();
    let o = loopbox(
        dir.path(),
        &[
            "run",
            &probe,
            "--input",
            r#"{"op": "echo", "then": "pass"}"#,
        ],
    );
    assert_eq!(code(&o), 4, "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value =
        serde_json::from_slice(&loopbox(dir.path(), &["runs", "--json"]).stdout).unwrap();
    let id = v[0]["id"].as_str().unwrap().to_string();
    // An edit nobody approved widens the grants to a command the tick then runs.
    std::fs::write(&config, "[shell]\nallow = [[\"ls\"], [\"touch\"]]\n").unwrap();
    let tick = r#"{"op": "exec", "argv": ["touch", "pwned"], "then": "pass"}"#;
    let args = ["runs", "tick", &id, tick, "--accept-config-change"];
    // Not `common::loopbox`: that approves the config as it is now.
    let o = Command::new(BIN)
        .arg("-C")
        .arg(dir.path())
        .args(args)
        .env("XDG_DATA_HOME", common::data_home())
        .env("CI", "true")
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(code(&o), 2, "{err}");
    assert!(err.contains(&config.display().to_string()), "{err}");
    assert!(err.contains("is not trusted yet"), "{err}");
    assert!(!dir.path().join("pwned").exists(), "{err}");
    // Approved (`loopbox trust`), the same resume goes on under the new grants.
    let o = loopbox(dir.path(), &args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("under changed grants (shell.allow)"), "{err}");
    assert!(dir.path().join("pwned").exists(), "{err}");
}

/// A project that arrives with a run in its store (a cloned repository that
/// committed `.loopbox/`, say) and a config nobody approved: approving its
/// pending action, or resuming it, obeys nothing until the user trusts that
/// config, even though the run's pinned grants match it.
#[test]
fn a_planted_run_is_never_continued_under_a_config_nobody_trusted() {
    let made = tempfile::tempdir().unwrap();
    std::fs::write(
        made.path().join("loopbox.toml"),
        "[shell]\nask = [[\"touch\"]]\n",
    )
    .unwrap();
    let probe = probe().to_string_lossy().into_owned();
    let o = loopbox(
        made.path(),
        &[
            "run",
            &probe,
            "--input",
            r#"{"op": "exec", "argv": ["touch", "pwned"]}"#,
        ],
    );
    assert_eq!(code(&o), 4, "{}", String::from_utf8_lossy(&o.stdout));
    let v: serde_json::Value =
        serde_json::from_slice(&loopbox(made.path(), &["runs", "--json"]).stdout).unwrap();
    let id = v[0]["id"].as_str().unwrap().to_string();
    // The whole project, store included, lands somewhere else: the victim's clone.
    let clone = tempfile::tempdir().unwrap();
    common::copy_dir(made.path(), clone.path());
    std::fs::create_dir_all(clone.path().join(".loopbox")).unwrap();
    for f in ["loopbox.db", ".gitignore"] {
        std::fs::copy(
            made.path().join(".loopbox").join(f),
            clone.path().join(".loopbox").join(f),
        )
        .unwrap();
    }
    for args in [vec!["runs", "approve", &id], vec!["runs", "resume", &id]] {
        let o = Command::new(BIN)
            .arg("-C")
            .arg(clone.path())
            .args(&args)
            .env("XDG_DATA_HOME", common::data_home())
            .env("CI", "true")
            .current_dir(clone.path())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(code(&o), 2, "{args:?}: {err}");
        assert!(err.contains("is not trusted yet"), "{args:?}: {err}");
        assert!(!clone.path().join("pwned").exists(), "{args:?}: {err}");
    }
}
