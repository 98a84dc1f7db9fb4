//! Whole-process latency of `loopbox hook claude-code|codex|gemini`: what the
//! agent waits for on every turn. A fresh process per invocation (as Claude Code runs it),
//! with the policy's compiled component already in the cache.
//!
//! `cargo bench -p loopbox --bench hook` prints one table, samples interleaved
//! so machine noise hits every row alike: spawning `true` (the floor of any
//! hook), `loopbox --version` (process start), and a Ralph turn hook under
//! each agent's adapter (Claude Code and Codex `Stop`, Gemini CLI `AfterAgent`),
//! and the Claude Code hook again with pool slots reset without the pagemap
//! scan (`LOOPBOX_NO_PAGEMAP_SCAN`), which is what a kernel before 6.7 gets.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_loopbox");

fn time(mut cmd: Command, stdin: Option<&str>) -> Duration {
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    let t = Instant::now();
    let mut child = cmd.spawn().expect("spawn");
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    let status = child.wait().unwrap();
    let elapsed = t.elapsed();
    assert!(status.success(), "{cmd:?} failed");
    elapsed
}

fn hook_cmd(agent: &str, workspace: &Path, cache: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.args([
        "hook",
        agent,
        "--policy",
        "builtin:ralph",
        "--input",
        r#"{"prompt": "Fix the build.", "completion_promise": "DONE"}"#,
    ])
    .current_dir(workspace)
    .env("LOOPBOX_CACHE_DIR", cache);
    c
}

fn main() {
    // `cargo test --all-targets` runs this once as a smoke test; the table is for `cargo bench`.
    let n = if std::env::args().any(|a| a == "--bench") {
        200
    } else {
        3
    };
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let input = |agent: &str| {
        let (event, reply) = if agent == "gemini" {
            ("AfterAgent", "prompt_response")
        } else {
            ("Stop", "last_assistant_message")
        };
        serde_json::json!({"session_id": "bench", "hook_event_name": event, "cwd": ws, "stop_hook_active": true, reply: "still failing"}).to_string()
    };
    const AGENTS: [&str; 3] = ["claude-code", "codex", "gemini"];
    // Warm the compiled-component cache (and each session's run) once.
    for agent in AGENTS {
        time(hook_cmd(agent, &ws, &cache), Some(&input(agent)));
    }

    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); 3 + AGENTS.len()];
    for _ in 0..n {
        samples[0].push(time(Command::new("true"), None));
        let mut version = Command::new(BIN);
        version.arg("--version");
        samples[1].push(time(version, None));
        for (i, agent) in AGENTS.iter().enumerate() {
            samples[2 + i].push(time(hook_cmd(agent, &ws, &cache), Some(&input(agent))));
        }
        let mut unscanned = hook_cmd("claude-code", &ws, &cache);
        unscanned.env("LOOPBOX_NO_PAGEMAP_SCAN", "1");
        samples[2 + AGENTS.len()].push(time(unscanned, Some(&input("claude-code"))));
    }
    let pct = |s: &mut Vec<Duration>, p: f64| {
        s.sort();
        s[((s.len() - 1) as f64 * p).round() as usize]
    };
    let mut floor = samples[0].clone();
    let floor = pct(&mut floor, 0.5).as_secs_f64();
    println!("\nhook latency, whole process, cached component ({n} interleaved samples each)");
    println!(
        "{:<40} {:>10} {:>10} {:>10}",
        "command", "p50", "p99", "p50 ratio"
    );
    let names = [
        "spawn `true` (floor)",
        "loopbox --version",
        "loopbox hook claude-code (Ralph Stop)",
        "loopbox hook codex (Ralph Stop)",
        "loopbox hook gemini (Ralph AfterAgent)",
        "loopbox hook claude-code, no pagemap scan",
    ];
    for (name, s) in names.iter().zip(samples.iter_mut()) {
        let (p50, p99) = (pct(s, 0.5), pct(s, 0.99));
        println!(
            "{:<40} {:>7.2} ms {:>7.2} ms {:>9.1}x",
            name,
            p50.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3,
            p50.as_secs_f64() / floor
        );
    }
}
