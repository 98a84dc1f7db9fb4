//! Issue 32: learning states (`type: learning` with `learning:`) run in the
//! sandbox: records are read through the workspace capability, the remedy
//! `/ll:explore-api TARGET` is a prompt under `[agent]`. The conformance
//! cases (`tests/conformance/loops/learning-*.yaml`) hold the paths; these
//! hold what `validate` says and what a hostile registry cannot do.

use std::path::Path;

use super::*;

/// little-loops' `ready-to-implement-gate.yaml`, as it ships in 1.156.0.
const GATE: &str = r#"name: ready-to-implement-gate
initial: prove
max_steps: 50
timeout: 3600
on_handoff: spawn
scope:
  - "${context.run_dir}"
context:
  targets: ""
  max_retries: "2"
states:
  prove:
    type: learning
    learning:
      targets_csv: "${context.targets}"
      max_retries_expr: "${context.max_retries}"
    on_yes: done
    on_blocked: blocked
  done:
    terminal: true
  blocked:
    terminal: true
    failure: true
"#;

fn workspace(config: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("gate.yaml"), GATE).unwrap();
    std::fs::write(dir.path().join("loopbox.toml"), config).unwrap();
    std::fs::create_dir_all(dir.path().join(".ll/learning-tests")).unwrap();
    dir
}

fn run(dir: &Path, targets: &str) -> (Value, String) {
    let input = format!("{{\"targets\": \"{targets}\"}}");
    let o = loopbox(dir, &["run", "gate.yaml", "--json", "--input", &input]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    (
        v,
        format!(
            "exit {:?}; {}{}",
            o.status.code(),
            text(&o.stdout),
            text(&o.stderr)
        ),
    )
}

#[test]
fn validate_accepts_a_learning_gate_and_lists_the_agent_it_needs() {
    let dir = workspace("[shell]\nscripts = true\n");
    let o = loopbox(dir.path(), &["validate", "--grants", "gate.yaml"]);
    let out = text(&o.stdout);
    assert_eq!(code(&o), 0, "{out}{}", text(&o.stderr));
    assert!(!text(&o.stderr).contains("learning"), "{}", text(&o.stderr));
    assert!(
        out.contains(
            "missing  [agent]: `/ll:explore-api TARGET` for a missing or stale learning record (state `prove`)"
        ),
        "{out}"
    );
    // Without `on_yes`, refused as little-loops refuses it.
    std::fs::write(
        dir.path().join("gate.yaml"),
        GATE.replace("    on_yes: done\n", ""),
    )
    .unwrap();
    let o = loopbox(dir.path(), &["validate", "gate.yaml"]);
    assert_ne!(code(&o), 0);
    assert!(
        text(&o.stderr).contains("a learning state needs `on_yes`"),
        "{}",
        text(&o.stderr)
    );
}

/// A proven record routes `on_yes` with no agent call; the agent is a
/// program that would fail the test if it ran.
#[test]
fn a_proven_record_passes_the_gate_in_the_sandbox() {
    let dir = workspace(
        "[shell]\nscripts = true\n\n[agent]\ncommand = [\"false\", \"{prompt}\"]\noutput = \"text\"\n",
    );
    std::fs::write(
        dir.path()
            .join(".ll/learning-tests/anthropic-sdk-streaming.md"),
        "---\ntarget: Anthropic SDK streaming\ndate: '2099-01-01'\nstatus: proven\n---\n",
    )
    .unwrap();
    let (v, all) = run(dir.path(), "Anthropic SDK streaming");
    assert_eq!(
        v["outcome"]["data"]["path"],
        serde_json::json!(["prove", "done"]),
        "{all}"
    );
    assert_eq!(v["outcome"]["success"], true, "{all}");
}

/// A record that is a FIFO or a link out of the workspace is never read as
/// missing (which would send prompts) nor waited on: the run ends at once,
/// naming the file.
#[test]
fn a_hostile_record_ends_the_run_naming_it() {
    let config = "[shell]\nscripts = true\n\n[agent]\ncommand = [\"false\", \"{prompt}\"]\noutput = \"text\"\n";
    let dir = workspace(config);
    let fifo = dir.path().join(".ll/learning-tests/fifo-api.md");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let started = std::time::Instant::now();
    let (v, all) = run(dir.path(), "fifo-api");
    // Not waited on: a blocking open would hang here for good.
    assert!(started.elapsed().as_secs() < 60, "{all}");
    assert_eq!(v["outcome"]["data"]["terminated_by"], "error", "{all}");
    assert!(
        all.contains("learning record `.ll/learning-tests/fifo-api.md`"),
        "{all}"
    );

    let dir = workspace(config);
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.md");
    std::fs::write(&secret, "---\ntarget: x\ndate: '2099-01-01'\n---\n").unwrap();
    std::os::unix::fs::symlink(&secret, dir.path().join(".ll/learning-tests/link-api.md")).unwrap();
    let (v, all) = run(dir.path(), "link-api");
    assert_eq!(v["outcome"]["data"]["terminated_by"], "error", "{all}");
    assert!(all.contains("leads outside the workspace"), "{all}");
}
