//! The real Codex CLI (pinned in `host/tests/agents`) and the hooks `loopbox
//! hook install codex` writes. Codex 0.171 runs a new hook only once its hash
//! is trusted in `$CODEX_HOME/config.toml`: installed without `--trust`, the
//! hook never runs under `codex exec`; with `--trust` (Codex's own app-server
//! asked for the hash) it runs and its block stops the prompt. Codex runs in a
//! network namespace of the test's own (`unshare -rn`, only a down loopback)
//! with a model provider on a closed loopback port: nothing leaves the machine.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{self, BIN};

/// Where `npm ci` in `host/tests/agents` put the `codex` command.
fn codex_bin_dir() -> PathBuf {
    let dir = common::repo().join("host/tests/agents");
    let bin = dir.join("node_modules/.bin");
    assert!(
        bin.join("codex").is_file(),
        "the codex CLI is not installed: run ./scripts/test.sh, or `npm ci` in {}",
        dir.display()
    );
    bin
}

/// `args` in a network namespace of its own, with the pinned codex first on
/// PATH and `CODEX_HOME` set.
fn isolated(project: &Path, home: &Path, program: &str, args: &[&str]) -> Command {
    let path = format!(
        "{}:{}",
        codex_bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut c = Command::new("unshare");
    c.args(["-rn", program])
        .args(args)
        .current_dir(project)
        .env("PATH", path)
        .env("CODEX_HOME", home)
        .env("OPENAI_API_KEY", "sk-test-not-a-key")
        .env("XDG_DATA_HOME", common::data_home())
        .env(
            "LOOPBOX_CACHE_DIR",
            std::env::temp_dir().join("loopbox-hook-test-cache"),
        );
    c
}

/// `codex exec PROMPT`, read until the hook's verdict or Codex waiting for the
/// (absent) network, whichever comes first: its output so far.
fn codex_exec(project: &Path, home: &Path, prompt: &str) -> String {
    let provider = "model_providers.loopback={name=\"loopback\",base_url=\"http://127.0.0.1:9/v1\",wire_api=\"responses\",env_key=\"OPENAI_API_KEY\",stream_max_retries=0,request_max_retries=0}";
    let mut child = isolated(
        project,
        home,
        "codex",
        &[
            "exec",
            "-c",
            "model_provider=\"loopback\"",
            "-c",
            provider,
            prompt,
        ],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("unshare and codex");
    let (send, lines) = std::sync::mpsc::channel();
    for out in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let send = send.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = send.send(line);
            }
        });
    }
    drop(send);
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while let Ok(line) = lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
        seen.push_str(&line);
        seen.push('\n');
        if line.contains("Blocked") || line.contains("Reconnecting") {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    seen
}

/// The runs `loopbox runs --json` lists in `project`.
fn runs(project: &Path) -> Vec<Value> {
    let o = common::loopbox(project, &["runs", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    v.as_array()
        .cloned()
        .or_else(|| v["runs"].as_array().cloned())
        .unwrap_or_default()
}

#[test]
fn codex_exec_runs_a_hook_only_once_install_trusted_it() {
    let project = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let p = project.path().canonicalize().unwrap();
    std::fs::copy(common::probe(), p.join("policy.wasm")).unwrap();
    // A git repository (codex exec refuses to run elsewhere), which Codex
    // trusts (its hooks are read only then: the user's call).
    assert!(
        Command::new("git")
            .args(["init", "-q"])
            .current_dir(&p)
            .status()
            .unwrap()
            .success()
    );
    std::fs::write(
        home.path().join("config.toml"),
        format!(
            "[projects.\"{}\"]\ntrust_level = \"trusted\"\n",
            p.display()
        ),
    )
    .unwrap();
    let install = |extra: &[&str]| {
        let mut args = vec![
            "hook",
            "install",
            "codex",
            "--policy",
            "policy.wasm",
            "--event",
            "UserPromptSubmit",
            "--input",
            r#"{"op": "echo"}"#,
        ];
        args.extend(extra);
        let o = isolated(&p, home.path(), BIN, &args).output().unwrap();
        let out =
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
        (o.status.code(), out)
    };
    let prompt = r#"{"op": "echo", "then": "block"}"#;

    // Installed as before: Codex skips the hook it was not told was reviewed.
    let (code, out) = install(&[]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("run this again with --trust"), "{out}");
    let seen = codex_exec(&p, home.path(), prompt);
    // It went on to the (absent) model instead.
    assert!(
        !seen.contains("Blocked") && seen.contains("Reconnecting"),
        "{seen}"
    );
    assert!(runs(&p).is_empty(), "the hook ran: {seen}");

    // --trust: Codex's own hash recorded; the same prompt is now blocked by the policy.
    let (code, out) = install(&["--trust"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("Codex trusts the hook"), "{out}");
    let config = std::fs::read_to_string(home.path().join("config.toml")).unwrap();
    assert_eq!(
        config.matches("trusted_hash = \"sha256:").count(),
        1,
        "{config}"
    );
    assert!(
        config.contains(&format!(
            "{}/.codex/hooks.json:user_prompt_submit:0:0",
            p.display()
        )),
        "{config}"
    );
    let seen = codex_exec(&p, home.path(), prompt);
    assert!(seen.contains("hook: UserPromptSubmit Blocked"), "{seen}");
    assert_eq!(runs(&p).len(), 1, "{seen}");
}

#[test]
fn trust_refuses_an_untrusted_project_and_other_agents() {
    let project = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let p = project.path().canonicalize().unwrap();
    std::fs::copy(common::probe(), p.join("policy.wasm")).unwrap();
    let o = isolated(
        &p,
        home.path(),
        BIN,
        &[
            "hook",
            "install",
            "codex",
            "--policy",
            "policy.wasm",
            "--event",
            "Stop",
            "--trust",
        ],
    )
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("Codex does not list the hook just written")
            && err.contains("trust_level = \"trusted\""),
        "{err}"
    );
    let o = isolated(
        &p,
        home.path(),
        BIN,
        &[
            "hook",
            "install",
            "gemini",
            "--policy",
            "policy.wasm",
            "--event",
            "AfterAgent",
            "--trust",
        ],
    )
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--trust is for `hook install codex`"), "{err}");
}
