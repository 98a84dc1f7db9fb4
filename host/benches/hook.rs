//! Whole-process latency of `loopbox hook claude-code|codex|gemini`: what the
//! agent waits for on every turn. A fresh process per invocation (as Claude Code runs it),
//! with the policy's compiled component already in the cache.
//!
//! `cargo bench -p loopbox --bench hook` prints one table, samples interleaved
//! (every other round in reverse order) so machine noise hits every row alike: spawning `true` (the floor of any
//! hook), `loopbox --version` (process start), and a Ralph turn hook under
//! each agent's adapter (Claude Code and Codex `Stop`, Gemini CLI `AfterAgent`),
//! and the Claude Code hook again with pool slots reset without the pagemap
//! scan (`LOOPBOX_NO_PAGEMAP_SCAN`), which is what a kernel before 6.7 gets,
//! with the session's transcript grown by a message since the last event (what
//! reading on from there costs), and with OpenTelemetry on (exporting to a
//! receiver on loopback, the flush at exit included). `BENCH_BASELINE=/path/to/loopbox` adds the Claude Code row
//! for another build, interleaved with the rest (a before/after comparison);
//! `BENCH_BIN=/path/to/loopbox` runs that build in the other rows. Compare two
//! copies side by side (both outside `target/`): the same binary run as
//! `target/release/loopbox`, as the linker wrote it, measured 15% slower than
//! its copy in `/tmp` here (the file's pages as cached: `loopbox --version`
//! took 415 page faults against the copy's 391), and `cargo install` copies.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The build under test: this one, or `BENCH_BIN`'s.
fn bin() -> String {
    std::env::var("BENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_loopbox").to_string())
}

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
    hook_cmd_of(&bin(), agent, workspace, cache)
}

fn hook_cmd_of(bin: &str, agent: &str, workspace: &Path, cache: &Path) -> Command {
    let mut c = Command::new(bin);
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

/// An OTLP/HTTP receiver on loopback that answers every request with 200 and
/// keeps nothing: what a hook costs with OpenTelemetry on, its export included.
fn receiver() -> String {
    use std::io::{BufRead, BufReader, Read};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut out = stream;
                loop {
                    let mut len = 0usize;
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    loop {
                        let mut h = String::new();
                        if reader.read_line(&mut h).unwrap_or(0) == 0 {
                            return;
                        }
                        let h = h.trim_end().to_ascii_lowercase();
                        if h.is_empty() {
                            break;
                        }
                        if let Some(v) = h.strip_prefix("content-length:") {
                            len = v.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0; len];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    let _ = out.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
                }
            });
        }
    });
    format!("http://127.0.0.1:{port}")
}

/// One row: its name and how to make its command and stdin.
type Row<'a> = (String, Box<dyn Fn() -> (Command, Option<String>) + 'a>);

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
    let input = |agent: &str, ws: &Path| {
        let (event, reply) = if agent == "gemini" {
            ("AfterAgent", "prompt_response")
        } else {
            ("Stop", "last_assistant_message")
        };
        serde_json::json!({"session_id": "bench", "hook_event_name": event, "cwd": ws, "stop_hook_active": true, reply: "still failing"}).to_string()
    };
    const AGENTS: [&str; 3] = ["claude-code", "codex", "gemini"];
    let endpoint = receiver();
    // Its own workspace: its spans and metrics are the only difference.
    let traced_ws = dir.path().join("traced");
    std::fs::create_dir(&traced_ws).unwrap();
    let transcript_ws = dir.path().join("transcribed");
    std::fs::create_dir(&transcript_ws).unwrap();
    let transcript = transcript_ws.join("session.jsonl");
    // Another build side by side (`BENCH_BASELINE=/path/to/loopbox`), in its own
    // workspace and cache: an older store schema is refused by the other build.
    let baseline = std::env::var("BENCH_BASELINE").ok();
    let base_ws = dir.path().join("base-ws");
    let base_cache = dir.path().join("base-cache");
    let mut rows: Vec<Row> = vec![
        (
            "spawn `true` (floor)".into(),
            Box::new(|| (Command::new("true"), None)),
        ),
        (
            "loopbox --version".into(),
            Box::new(|| {
                let mut c = Command::new(bin());
                c.arg("--version");
                (c, None)
            }),
        ),
    ];
    for agent in AGENTS {
        let name = if agent == "gemini" {
            "loopbox hook gemini (Ralph AfterAgent)".to_string()
        } else {
            format!("loopbox hook {agent} (Ralph Stop)")
        };
        let (ws, cache, input) = (&ws, &cache, &input);
        rows.push((
            name,
            Box::new(move || (hook_cmd(agent, ws, cache), Some(input(agent, ws)))),
        ));
    }
    {
        let (ws, cache, input) = (&ws, &cache, &input);
        rows.push((
            "loopbox hook claude-code, no pagemap scan".into(),
            Box::new(move || {
                let mut c = hook_cmd("claude-code", ws, cache);
                c.env("LOOPBOX_NO_PAGEMAP_SCAN", "1");
                (c, Some(input("claude-code", ws)))
            }),
        ));
        // Claude Code's input names the session's transcript, which grows by a
        // message or more between two events: what reading on from the last event costs.
        let (transcript_ws, transcript) = (&transcript_ws, &transcript);
        rows.push((
            "loopbox hook claude-code, transcript +1 message".into(),
            Box::new(move || {
                let n = std::fs::metadata(transcript).map_or(0, |m| m.len());
                let line = serde_json::json!({"type": "assistant", "message": {"id": format!("msg_{n}"),
                    "model": "claude-sonnet-4-5-20250929", "role": "assistant", "content": [{"type": "text", "text": "still failing"}],
                    "usage": {"input_tokens": 4, "cache_creation_input_tokens": 120, "cache_read_input_tokens": 11893, "output_tokens": 85}}});
                let mut f = std::fs::OpenOptions::new().create(true).append(true).open(transcript).unwrap();
                writeln!(f, "{line}").unwrap();
                let mut input: serde_json::Value = serde_json::from_str(&input("claude-code", transcript_ws)).unwrap();
                input["transcript_path"] = serde_json::json!(transcript);
                (hook_cmd("claude-code", transcript_ws, cache), Some(input.to_string()))
            }),
        ));
        let (traced_ws, endpoint) = (&traced_ws, &endpoint);
        rows.push((
            "loopbox hook claude-code, OpenTelemetry on".into(),
            Box::new(move || {
                let mut c = hook_cmd("claude-code", traced_ws, cache);
                c.env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint);
                (c, Some(input("claude-code", traced_ws)))
            }),
        ));
    }
    if let Some(bin) = &baseline {
        std::fs::create_dir(&base_ws).unwrap();
        let (base_ws, base_cache, input) = (&base_ws, &base_cache, &input);
        rows.push((
            "BENCH_BASELINE hook claude-code (Ralph Stop)".into(),
            Box::new(move || {
                (
                    hook_cmd_of(bin, "claude-code", base_ws, base_cache),
                    Some(input("claude-code", base_ws)),
                )
            }),
        ));
    }
    // `BENCH_ONLY=TEXT` keeps the floor and the rows whose name contains TEXT.
    if let Ok(only) = std::env::var("BENCH_ONLY") {
        let mut i = 0;
        rows.retain(|(name, _)| {
            i += 1;
            i == 1 || name.contains(&only)
        });
    }
    // Warm the compiled-component caches (and each session's run) once.
    for (_, make) in &rows {
        let (cmd, stdin) = make();
        time(cmd, stdin.as_deref());
    }

    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); rows.len()];
    // Every other round in reverse: a process started right after another one
    // shares the machine with its exit, and no row should always be the one that does.
    for round in 0..n {
        let mut order: Vec<usize> = (0..rows.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let (cmd, stdin) = (rows[i].1)();
            samples[i].push(time(cmd, stdin.as_deref()));
        }
    }
    let pct = |s: &mut Vec<Duration>, p: f64| {
        s.sort();
        s[((s.len() - 1) as f64 * p).round() as usize]
    };
    let mut floor = samples[0].clone();
    let floor = pct(&mut floor, 0.5).as_secs_f64();
    println!("\nhook latency, whole process, cached component ({n} interleaved samples each)");
    println!(
        "{:<46} {:>10} {:>10} {:>10}",
        "command", "p50", "p99", "p50 ratio"
    );
    for ((name, _), s) in rows.iter().zip(samples.iter_mut()) {
        let (p50, p99) = (pct(s, 0.5), pct(s, 0.99));
        println!(
            "{:<46} {:>7.2} ms {:>7.2} ms {:>9.1}x",
            name,
            p50.as_secs_f64() * 1e3,
            p99.as_secs_f64() * 1e3,
            p50.as_secs_f64() / floor
        );
    }
}
