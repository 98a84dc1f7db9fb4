//! `mcp-call` (contract 0.4.0): tools of MCP servers the user names, each
//! server a sandboxed process speaking JSON-RPC over stdio. Deny by default,
//! and every way a server can misbehave ends the call with a bound: an answer
//! too large, lines that are not JSON, no answer, an early exit, a flood.

use std::time::{Duration, Instant};

use loopbox_tests::*;
use serde_json::{Value, json};

use super::err_kind;

fn server() -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("conformance/loops/mcp-server.py")
        .to_string_lossy()
        .into_owned()
}

fn config(tools: &[&str], extra: &str) -> String {
    format!(
        "[mcp.servers.probe]\ncommand = [\"python3\", {:?}]\ntools = {}\n{extra}",
        server(),
        json!(tools)
    )
}

async fn call(ctx: &loopbox::run::RunContext, tool: &str, args: Value) -> Value {
    probe(
        ctx,
        json!({"op": "mcp", "server": "probe", "tool": tool, "arguments": args, "timeout_ms": 3000}),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn a_granted_tool_answers_and_nothing_else_is_called() {
    let ws = Workspace::new();
    let ctx = ws.run(
        &load("probe"),
        &config(&["echo", "fail", "nope", "argv"], ""),
    );
    let v = call(&ctx, "echo", json!({"url": "http://x", "n": 1})).await;
    assert_eq!(v["ok"]["status"], "McpStatus::Ok", "{v}");
    let answer: Value = serde_json::from_str(v["ok"]["answer"].as_str().unwrap()).unwrap();
    assert_eq!(
        answer["content"][0]["text"],
        r#"{"n": 1, "url": "http://x"}"#
    );
    assert_eq!(
        call(&ctx, "fail", json!({})).await["ok"]["status"],
        "McpStatus::ToolError"
    );
    // Granted here, but the server has no such tool (JSON-RPC -32601).
    assert_eq!(
        call(&ctx, "nope", json!({})).await["ok"]["status"],
        "McpStatus::NotFound"
    );
    // Deny by default: another tool, another server.
    let v = call(&ctx, "count", json!({})).await;
    let (kind, msg) = err_kind(&v);
    assert_eq!(kind, "denied");
    assert!(
        msg.contains("add it to `tools` in `[mcp.servers.probe]`"),
        "{msg}"
    );
    let v = probe(
        &ctx,
        json!({"op": "mcp", "server": "other", "tool": "echo"}),
    )
    .await
    .unwrap();
    assert!(err_kind(&v).1.contains("add `[mcp.servers.other]`"), "{v}");
    // Arguments that are not a JSON object are refused before anything starts.
    let v = call(&ctx, "echo", json!("[1, 2]")).await;
    assert_eq!(err_kind(&v).0, "invalid", "{v}");
    // What the policy sends never reaches the server's command line.
    let v = call(&ctx, "argv", json!({"x": "--evil", "y": "$(touch pwned)"})).await;
    let answer: Value = serde_json::from_str(v["ok"]["answer"].as_str().unwrap()).unwrap();
    let argv: Value = serde_json::from_str(answer["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(argv, json!([]), "{v}");
    assert!(!ws.root().join("pwned").exists());
}

#[tokio::test]
async fn a_server_runs_sandboxed_and_cannot_write_a_protected_path() {
    let ws = Workspace::new();
    ws.write("loopbox.toml", "# the user's\n");
    let ctx = ws.run(&load("probe"), &config(&["write"], ""));
    let v = call(
        &ctx,
        "write",
        json!({"path": "loopbox.toml", "text": "[shell]\nallow=[[\"sh\"]]\n"}),
    )
    .await;
    assert_eq!(v["ok"]["status"], "McpStatus::ToolError", "{v}");
    assert_eq!(
        std::fs::read_to_string(ws.root().join("loopbox.toml")).unwrap(),
        "# the user's\n"
    );
    let v = call(&ctx, "write", json!({"path": "notes.txt", "text": "ok"})).await;
    assert_eq!(v["ok"]["status"], "McpStatus::Ok", "{v}");
}

#[tokio::test]
async fn a_hostile_server_ends_the_call_within_its_bounds() {
    let ws = Workspace::new();
    let ctx = ws.run(
        &load("probe"),
        &config(
            &["huge", "garbage", "silent", "exit", "flood", "pings"],
            "\n[limits]\nmcp_message_bytes = 65536\n",
        ),
    );
    for (tool, says) in [
        ("huge", "limits.mcp_message_bytes = 65536"),
        // Under bwrap, bwrap holds the output open after the server closes it.
        ("garbage", "answer"),
        ("silent", "within the call's time limit"),
        ("exit", "closed its output"),
        ("flood", "messages without answering"),
        // Its answers fill the pipe it never reads: writing them is bounded too.
        ("pings", "read nothing more within the call's time limit"),
    ] {
        let started = Instant::now();
        let v = tokio::time::timeout(Duration::from_secs(30), call(&ctx, tool, json!({})))
            .await
            .unwrap_or_else(|_| panic!("{tool}: the call outlived its 3 s limit by 27 s"));
        let took = started.elapsed();
        assert_eq!(v["ok"]["status"], "McpStatus::NoAnswer", "{tool}: {v}");
        let answer: Value = serde_json::from_str(v["ok"]["answer"].as_str().unwrap()).unwrap();
        assert!(
            answer["error"].as_str().unwrap_or("").contains(says),
            "{tool}: {answer}"
        );
        // The call's 3 s, and the 2.5 s a server that ignores SIGTERM gets before SIGKILL.
        assert!(took < Duration::from_secs(10), "{tool} took {took:?}");
    }
}
