//! Issue 45, defect 3: no panic wedges the server. The README's `openai`
//! agent (no `command`) runs, on the CLI and on a server; and a panic while
//! a run is driven (injected with `LOOPBOX_PANIC_AT`) fails that run with
//! the panic's message while the server goes on serving and stops on SIGTERM.

use std::time::{Duration, Instant};

use serde_json::json;

use super::{Srv, scratch};
use crate::common::{code, loopbox};

/// Top-level grants with the README's chat-completions agent: no `command`.
const OPENAI: &str = "[shell]\nallow = [[\"echo\"]]\n\n[agent]\nrunner = \"openai\"\n\n[agent.openai]\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"gpt-4o-mini\"\n";

const LOOP: &str = "name: hello\ninitial: say\nstates:\n  say:\n    exec: [echo, hello]\n    next: done\n  done:\n    terminal: true\n";

fn start_loop(srv: &Srv) -> String {
    let r = srv.post(
        "/api/v1/runs",
        srv.token("t", "operator"),
        json!({"loop": "l.yaml", "workspace": "proj"}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    r.json()["id"].as_str().unwrap().to_string()
}

#[test]
fn an_openai_agent_without_a_command_runs_on_the_cli_and_on_a_server() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("loopbox.toml"), OPENAI).unwrap();
    std::fs::write(ws.path().join("l.yaml"), LOOP).unwrap();
    let o = loopbox(ws.path(), &["run", "l.yaml"]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(code(&o), 0, "{stderr}");
    assert!(
        stderr.contains("agent openai (gpt-4o-mini at http://127.0.0.1:9/v1)"),
        "the banner names the agent: {stderr}"
    );

    let dir = scratch();
    let mut srv = Srv::prepare(dir.path(), "", &[("t", "")]);
    srv.set_config("t", OPENAI);
    std::fs::write(srv.root("t").join("proj/l.yaml"), LOOP).unwrap();
    srv.start();
    let run = start_loop(&srv);
    let v = srv.wait_final("t", &run);
    assert_eq!(v["status"], "done", "{v:#}");
}

#[test]
fn a_panic_while_a_run_is_driven_fails_that_run_and_the_server_serves_on() {
    let dir = scratch();
    let mut srv = Srv::prepare(dir.path(), "", &[("t", "max_running = 1\n")]);
    std::fs::write(srv.root("t").join("proj/l.yaml"), LOOP).unwrap();
    // The first drive panics (in the server, or in its worker on PostgreSQL).
    srv.env = vec![("LOOPBOX_PANIC_AT".into(), "drive:1".into())];
    srv.start();
    let first = start_loop(&srv);
    let v = srv.wait_final("t", &first);
    assert_eq!(v["status"], "failed", "{v:#}");
    let summary = v["outcome"]["summary"].as_str().unwrap_or_default();
    assert!(
        summary.contains("panicked") && summary.contains("LOOPBOX_PANIC_AT"),
        "the outcome says what happened: {v:#}"
    );
    // Its slot is free again (the tenant runs one at a time): the next run runs.
    let second = start_loop(&srv);
    let v = srv.wait_final("t", &second);
    assert_eq!(v["status"], "done", "{v:#}");
    // And one SIGTERM stops the server.
    let asked = Instant::now();
    let status = srv.term();
    assert!(status.success(), "{status:?}");
    assert!(asked.elapsed() < Duration::from_secs(10));
}
