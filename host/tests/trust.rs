//! The trust boundary as a user meets it at the command line: a run keeps the
//! grants it started with, the agent tier governs `inject`, and a component
//! cache a sandboxed command could write is refused (docs/security.md).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{BIN, code, example, loopbox, normalize, probe};
use serde_json::json;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn run_id(dir: &Path) -> String {
    let o = loopbox(dir, &["runs", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v[0]["id"].as_str().unwrap().to_string()
}

#[test]
fn a_changed_config_is_refused_on_resume_naming_the_keys() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("loopbox.toml"),
        "[shell]\nallow = [[\"ls\"]]\n",
    )
    .unwrap();
    let probe = probe().to_string_lossy().into_owned();
    let o = loopbox(
        dir.path(),
        &["run", &probe, "--input", r#"{"op": "echo", "then": "ask"}"#],
    );
    assert_eq!(code(&o), 4, "{}", text(&o.stderr));
    let id = run_id(dir.path());
    // Something (the agent, a script run without a sandbox) widens the grants mid-run.
    std::fs::write(
        dir.path().join("loopbox.toml"),
        "[shell]\nallow = [[\"ls\"], [\"sh\"]]\nnetwork = true\n",
    )
    .unwrap();
    let o = loopbox(dir.path(), &["runs", "answer", &id, "go on"]);
    assert_eq!(code(&o), 2);
    let err = text(&o.stderr);
    assert!(
        err.contains(&format!(
            "the grants changed since run {id} started (shell.allow, shell.network)"
        )),
        "{err}"
    );
    assert!(err.contains("--accept-config-change"), "{err}");
    // Restored, the run goes on; accepted, too.
    let o = loopbox(
        dir.path(),
        &["runs", "answer", &id, "go on", "--accept-config-change"],
    );
    assert_eq!(code(&o), 0, "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("continuing run")
            && text(&o.stderr).contains("under changed grants (shell.allow, shell.network)")
    );
}

fn hook(dir: &Path, extra: &[&str], session: &str) -> (i32, String) {
    let probe = probe().to_string_lossy().into_owned();
    let mut args = vec![
        "hook",
        "claude-code",
        "--policy",
        &probe,
        "--input",
        r#"{"op": "echo"}"#,
    ];
    args.extend(extra);
    let input = json!({"session_id": session, "cwd": dir, "hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"op": "echo", "then": "pass"}});
    let mut child = Command::new(BIN)
        .args(&args)
        .current_dir(dir)
        .env(
            "LOOPBOX_CACHE_DIR",
            std::env::temp_dir().join("loopbox-cli-test-cache"),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(
        &mut child.stdin.take().unwrap(),
        input.to_string().as_bytes(),
    )
    .unwrap();
    let o = child.wait_with_output().unwrap();
    (code(&o), text(&o.stderr))
}

#[test]
fn a_hook_session_keeps_the_grants_it_started_with() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("loopbox.toml"),
        "[agent]\ncommand = [\"my-agent\", \"--\", \"{prompt}\"]\ntier = \"deny\"\n",
    )
    .unwrap();
    assert_eq!(hook(dir.path(), &[], "s1"), (0, String::new()));
    std::fs::write(
        dir.path().join("loopbox.toml"),
        "[agent]\ncommand = [\"my-agent\", \"--\", \"{prompt}\"]\ntier = \"allow\"\n",
    )
    .unwrap();
    let (c, err) = hook(dir.path(), &[], "s1");
    // A gate that cannot answer refuses the call: exit 0 with a deny, the reason on stderr too.
    assert_eq!(c, 0, "{err}");
    assert!(
        err.contains("the grants changed since run")
            && err.contains("(agent.tier)")
            && err.contains("start a new agent session"),
        "{err}"
    );
    // A new session starts under the config as it is; the old one accepts it only when told.
    assert_eq!(hook(dir.path(), &[], "s2"), (0, String::new()));
    assert_eq!(
        hook(dir.path(), &["--accept-config-change"], "s1"),
        (0, String::new())
    );
}

#[test]
fn inject_is_governed_by_the_agent_tier() {
    let p = example("project");
    let config = std::fs::read_to_string(p.path().join("loopbox.toml"))
        .unwrap()
        .replace("[agent]\n", "[agent]\ntier = \"deny\"\n");
    std::fs::write(p.path().join("loopbox.toml"), config).unwrap();
    let o = loopbox(
        p.path(),
        &["run", "builtin:ralph", "--input", "@ralph.json"],
    );
    assert_ne!(code(&o), 0);
    let out = normalize(&o.stdout) + &normalize(&o.stderr);
    assert!(
        out.contains("messages to the agent are denied by agent.tier = \"deny\""),
        "{out}"
    );
    assert!(
        !p.path().join(".scripted-agent/prompts").exists(),
        "the agent never ran"
    );
}

#[test]
fn a_component_cache_a_command_could_write_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let run = |config: &str, env: Option<PathBuf>| {
        std::fs::write(dir.path().join("loopbox.toml"), config).unwrap();
        let mut c = Command::new(BIN);
        c.args([
            "-C",
            &dir.path().to_string_lossy(),
            "run",
            "builtin:ralph",
            "--input",
            r#"{"prompt": "x"}"#,
        ])
        .env_remove("LOOPBOX_CACHE_DIR");
        if let Some(e) = env {
            c.env("LOOPBOX_CACHE_DIR", e);
        }
        c.output().unwrap()
    };
    let o = run("[engine]\ncache_dir = \"cache\"\n", None);
    assert_eq!(code(&o), 2);
    assert!(
        text(&o.stderr).contains("is a relative path"),
        "{}",
        text(&o.stderr)
    );
    let o = run("", Some(dir.path().join(".cache/loopbox")));
    assert_eq!(code(&o), 2);
    assert!(
        text(&o.stderr).contains("is inside the workspace"),
        "{}",
        text(&o.stderr)
    );
    assert!(
        !dir.path().join(".cache").exists(),
        "nothing was written there"
    );
}

/// The credential stores in the home directory are hidden from a policy's
/// commands by default, under every sandbox that can enforce it here, while the
/// rest of the home directory stays readable.
#[test]
fn the_credential_stores_in_home_are_hidden_by_default() {
    let support = loopbox::exec::sandbox::support();
    let kinds: Vec<&str> = [
        ("bwrap", support.bwrap.is_ok()),
        ("landlock", support.landlock_usable().is_ok()),
    ]
    .into_iter()
    .filter_map(|(k, ok)| ok.then_some(k))
    .collect();
    if kinds.is_empty() {
        eprintln!("skipped: neither bwrap nor Landlock can be used here");
        return;
    }
    // Not under /tmp, which bwrap replaces with a private one.
    let home = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let h = home.path().canonicalize().unwrap();
    let secrets = [
        ".ssh/id_ed25519",
        ".aws/credentials",
        ".config/gh/hosts.yml",
        ".netrc",
        ".claude/.credentials.json",
        ".codex/auth.json",
    ];
    for f in secrets {
        std::fs::create_dir_all(h.join(f).parent().unwrap()).unwrap();
        std::fs::write(h.join(f), "SECRET\n").unwrap();
    }
    std::fs::write(h.join("notes.txt"), "visible\n").unwrap();
    let files: Vec<String> = secrets
        .iter()
        .map(|f| h.join(f).display().to_string())
        .collect();
    for kind in kinds {
        let dir = tempfile::tempdir().unwrap();
        // Made beforehand: under Landlock a command cannot create root entries.
        std::fs::write(dir.path().join("loot"), "").unwrap();
        std::fs::write(
            dir.path().join("loopbox.toml"),
            format!("[shell]\nsandbox = \"{kind}\"\nscripts = true\n"),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("leak.yaml"),
            format!(
                "name: leak\ninitial: steal\nstates:\n  steal:\n    action: \"cat {} > loot 2>/dev/null; cat {}/notes.txt >> loot\"\n    next: done\n  done:\n    terminal: true\n",
                files.join(" "),
                h.display()
            ),
        )
        .unwrap();
        let o = Command::new(BIN)
            .args(["-C", &dir.path().to_string_lossy(), "run", "leak.yaml"])
            .current_dir(dir.path())
            .env("HOME", &h)
            .env(
                "LOOPBOX_CACHE_DIR",
                std::env::temp_dir().join("loopbox-cli-test-cache"),
            )
            .env("CI", "true")
            .output()
            .unwrap();
        assert_eq!(code(&o), 0, "{kind}: {}", text(&o.stderr));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("loot"))
                .unwrap_or_else(|e| panic!("{kind}: {e}: {}", text(&o.stderr))),
            "visible\n",
            "{kind}"
        );
    }
}
