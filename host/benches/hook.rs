//! Whole-process latency of `loopbox hook claude-code`: what Claude Code waits
//! for on every turn. A fresh process per invocation (as Claude Code runs it),
//! with the policy's compiled component already in the cache.
//!
//! `cargo bench -p loopbox --bench hook` prints one table, samples interleaved
//! so machine noise hits every row alike: spawning `true` (the floor of any
//! hook), `loopbox --version` (process start), and a Ralph Stop hook.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_loopbox");

fn time(mut cmd: Command, stdin: Option<&str>) -> Duration {
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() }).stdout(Stdio::null()).stderr(Stdio::null());
    let t = Instant::now();
    let mut child = cmd.spawn().expect("spawn");
    if let Some(text) = stdin {
        child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    }
    let status = child.wait().unwrap();
    let elapsed = t.elapsed();
    assert!(status.success(), "{cmd:?} failed");
    elapsed
}

fn hook_cmd(workspace: &Path, cache: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.args(["hook", "claude-code", "--policy", "builtin:ralph", "--input", r#"{"prompt": "Fix the build.", "completion_promise": "DONE"}"#])
        .current_dir(workspace)
        .env("LOOPBOX_CACHE_DIR", cache);
    c
}

fn main() {
    // `cargo test --all-targets` runs this once as a smoke test; the table is for `cargo bench`.
    let n = if std::env::args().any(|a| a == "--bench") { 200 } else { 3 };
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let ws = dir.path().join("ws");
    std::fs::create_dir(&ws).unwrap();
    let input =
        serde_json::json!({"session_id": "bench", "hook_event_name": "Stop", "cwd": ws, "stop_hook_active": true, "last_assistant_message": "still failing"})
            .to_string();
    // Warm the compiled-component cache (and the session's run) once.
    time(hook_cmd(&ws, &cache), Some(&input));

    let mut samples = [Vec::new(), Vec::new(), Vec::new()];
    for _ in 0..n {
        samples[0].push(time(Command::new("true"), None));
        let mut version = Command::new(BIN);
        version.arg("--version");
        samples[1].push(time(version, None));
        samples[2].push(time(hook_cmd(&ws, &cache), Some(&input)));
    }
    let pct = |s: &mut Vec<Duration>, p: f64| {
        s.sort();
        s[((s.len() - 1) as f64 * p).round() as usize]
    };
    let mut floor = samples[0].clone();
    let floor = pct(&mut floor, 0.5).as_secs_f64();
    println!("\nhook latency, whole process, cached component ({n} interleaved samples each)");
    println!("{:<36} {:>10} {:>10} {:>10}", "command", "p50", "p99", "p50 ratio");
    for (name, s) in ["spawn `true` (floor)", "loopbox --version", "loopbox hook claude-code (Ralph Stop)"].iter().zip(samples.iter_mut()) {
        let (p50, p99) = (pct(s, 0.5), pct(s, 0.99));
        println!("{:<36} {:>7.2} ms {:>7.2} ms {:>9.1}x", name, p50.as_secs_f64() * 1e3, p99.as_secs_f64() * 1e3, p50.as_secs_f64() / floor);
    }
}
