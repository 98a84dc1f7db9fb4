//! Many loopbox processes on one workspace at once: what a shared machine or a
//! Claude Code session with parallel subagents does. Each round starts N
//! processes together and waits for all of them; every one must succeed.
//!
//! `cargo bench -p loopbox --bench concurrency` prints one table, rounds of each
//! row interleaved: one process alone (the floor), 20 `loopbox run`s on one
//! fresh workspace, 20 on 20 workspaces (no shared store), and 40 Stop hooks of
//! one session (serialised by the session lock, so their counts stay exact).

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_loopbox");
const RALPH: &str =
    r#"{"prompt": "Fix the build.", "completion_promise": "DONE", "max_iterations": 100000}"#;

fn run_cmd(ws: &Path, cache: &Path) -> Command {
    let mut c = Command::new(BIN);
    // A run with no agent ends at its first inject (exit 7): one start event, committed.
    c.args(["-C"])
        .arg(ws)
        .args(["run", "builtin:ralph", "--input", RALPH])
        .env("LOOPBOX_CACHE_DIR", cache)
        .env("CI", "true");
    c
}

fn hook_cmd(ws: &Path, cache: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.args([
        "hook",
        "claude-code",
        "--policy",
        "builtin:ralph",
        "--input",
        RALPH,
    ])
    .current_dir(ws)
    .env("LOOPBOX_CACHE_DIR", cache);
    c
}

/// Start every command at once, wait for all; the wall time of the round.
fn round(cmds: Vec<Command>, stdin: Option<&str>, ok: &[i32]) -> Duration {
    let t = Instant::now();
    let children: Vec<Child> = cmds
        .into_iter()
        .map(|mut c| {
            c.stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::null())
            .stderr(Stdio::null());
            let mut child = c.spawn().expect("spawn");
            if let Some(text) = stdin {
                child
                    .stdin
                    .take()
                    .unwrap()
                    .write_all(text.as_bytes())
                    .unwrap();
            }
            child
        })
        .collect();
    for mut c in children {
        let code = c.wait().unwrap().code().unwrap_or(-1);
        assert!(ok.contains(&code), "a process failed with exit {code}");
    }
    t.elapsed()
}

fn main() {
    // `cargo test --all-targets` runs this once as a smoke test; the table is for `cargo bench`.
    let rounds = if std::env::args().any(|a| a == "--bench") {
        10
    } else {
        1
    };
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let fresh = |name: String| {
        let p = dir.path().join(name);
        std::fs::create_dir(&p).unwrap();
        p
    };
    let hook_ws = fresh("hooks".into());
    let input = serde_json::json!({"session_id": "bench", "hook_event_name": "Stop", "cwd": hook_ws, "stop_hook_active": true, "last_assistant_message": "no"})
        .to_string();
    // Warm the compiled-component cache.
    round(vec![run_cmd(&fresh("warm".into()), &cache)], None, &[7]);

    let names = [
        "1 run alone (the floor)",
        "20 runs, one fresh workspace",
        "20 runs, 20 workspaces",
        "40 Stop hooks, one session",
    ];
    let per_round = [1.0, 20.0, 20.0, 40.0];
    let mut samples: [Vec<Duration>; 4] = Default::default();
    for r in 0..rounds {
        samples[0].push(round(
            vec![run_cmd(&fresh(format!("a{r}")), &cache)],
            None,
            &[7],
        ));
        let shared = fresh(format!("s{r}"));
        samples[1].push(round(
            (0..20).map(|_| run_cmd(&shared, &cache)).collect(),
            None,
            &[7],
        ));
        samples[2].push(round(
            (0..20)
                .map(|i| run_cmd(&fresh(format!("m{r}-{i}")), &cache))
                .collect(),
            None,
            &[7],
        ));
        samples[3].push(round(
            (0..40).map(|_| hook_cmd(&hook_ws, &cache)).collect(),
            Some(&input),
            &[0],
        ));
    }
    println!(
        "{:<40} {:>12} {:>12} {:>14} {:>10}",
        "round", "p50", "max", "per second", "vs first"
    );
    let mut first = None;
    for (i, s) in samples.iter_mut().enumerate() {
        s.sort();
        let p50 = s[(s.len() - 1) / 2];
        let throughput = per_round[i] / p50.as_secs_f64();
        let base = *first.get_or_insert(p50.as_secs_f64());
        println!(
            "{:<40} {:>10.1}ms {:>10.1}ms {:>14.1} {:>9.1}x",
            names[i],
            p50.as_secs_f64() * 1e3,
            s[s.len() - 1].as_secs_f64() * 1e3,
            throughput,
            p50.as_secs_f64() / base
        );
    }
}
