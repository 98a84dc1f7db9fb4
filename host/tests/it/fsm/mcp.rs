//! Issue 32: `action_type: mcp_tool` through the CLI, against the test MCP
//! server (`tests/conformance/loops/mcp-server.py`) run sandboxed. A server or
//! tool the user did not grant routes `not_found`, as little-loops routes a
//! server missing from `.mcp.json`; a run killed after a call never calls again.

use std::path::Path;

use super::*;

fn config(tools: &[&str]) -> String {
    format!(
        "[shell]\nscripts = true\n\n[mcp.servers.probe]\ncommand = [\"python3\", {:?}]\ntools = {}\n",
        repo()
            .join("tests/conformance/loops/mcp-server.py")
            .to_string_lossy(),
        serde_json::json!(tools)
    )
}

fn gate(tool: &str) -> String {
    format!(
        "name: gate\ninitial: call\nstates:\n  call:\n    action_type: mcp_tool\n    action: {tool}\n    params:\n      path: count.txt\n    capture: result\n    route:\n      success: passed\n      tool_error: failed\n      not_found: skipped\n      timeout: failed\n      _error: errored\n  passed:\n    terminal: true\n  failed:\n    terminal: true\n  skipped:\n    terminal: true\n  errored:\n    terminal: true\n"
    )
}

fn workspace(config: &str, yaml: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("l.yaml"), yaml).unwrap();
    std::fs::write(dir.path().join("loopbox.toml"), config).unwrap();
    dir
}

fn run(dir: &Path) -> (Vec<String>, String) {
    let o = loopbox(dir, &["run", "l.yaml", "--json"]);
    let result = json_of(&o);
    (path_of(&result), log_of(dir, &result))
}

#[test]
fn each_tool_answer_takes_its_route_and_an_ungranted_tool_is_not_found() {
    for (tool, tools, want) in [
        ("probe/echo", &["echo"][..], "passed"),
        ("probe/fail", &["fail"], "failed"),
        ("probe/nope", &["nope"], "skipped"),
        ("probe/echo", &[], "skipped"),
        ("other/echo", &["echo"], "skipped"),
        ("no-slash", &["echo"], "failed"),
    ] {
        let dir = workspace(&config(tools), &gate(tool));
        let (path, log) = run(dir.path());
        assert_eq!(path, ["call", want], "{tool} with {tools:?}: {log}");
    }
    let dir = workspace(&config(&[]), &gate("probe/echo"));
    let (_, log) = run(dir.path());
    assert!(
        log.contains("cannot be reached") && log.contains("add it to `tools`"),
        "{log}"
    );
    // `validate --grants` names the section and tool the state needs.
    let o = loopbox(dir.path(), &["validate", "--grants", "l.yaml"]);
    assert!(
        text(&o.stdout).contains("missing  [mcp.servers.probe] tools = [\"echo\"]"),
        "{}",
        text(&o.stdout)
    );
}

#[test]
fn a_run_killed_after_a_call_never_calls_the_tool_again() {
    let dir = workspace(&config(&["count"]), &gate("probe/count"));
    killed_at(dir.path(), "l.yaml", "action-finished:1");
    assert_eq!(read(dir.path(), "count.txt"), "called\n");
    let runs = json_of(&loopbox(dir.path(), &["runs", "--json"]));
    let id = runs[0]["id"].as_str().unwrap().to_string();
    let o = loopbox(dir.path(), &["runs", "resume", &id, "--json"]);
    let result = json_of(&o);
    // Its outcome is unknown: the state's error route, and no second call.
    assert_eq!(path_of(&result), ["call", "errored"], "{}", text(&o.stderr));
    assert_eq!(read(dir.path(), "count.txt"), "called\n");
    assert!(log_of(dir.path(), &result).contains("its outcome is unknown"));
}
