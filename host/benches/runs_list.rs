//! `loopbox runs` over a big workspace store, whole process: the real binary
//! run as a child, its wall time from spawn to exit and its peak memory (the
//! child's `ru_maxrss`, from `wait4`).
//!
//! `cargo bench -p loopbox --bench runs_list` prints one table for a store of
//! 50,000 runs (each with a start input, pinned grants, an outcome and three
//! events, written straight into the store):
//! - the first page (`loopbox runs`, 50 runs), as a table and as `--json`:
//!   goal at most 100 ms and 50 MB (issue 45: all runs were read, 899 MB);
//! - a page from the middle with a status filter (`--before ID --status`),
//!   and a status no run has (the filter then looks at every run);
//! - every run (`--limit 0 --json`, streamed a page at a time): its memory
//!   stays a page's, whatever the store holds;
//! - `loopbox --version`, the process's own floor.
//!
//! `cargo test --all-targets` runs it once, small, as a smoke test.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_loopbox");

/// Write `n` runs into the workspace store at `ws`: one in ten waiting (some
/// with a wake time), one in five failed, the rest done; each with a ~1.5 KB
/// input, ~3 KB of options (the pinned grants), an outcome and three events.
fn fill(ws: &Path, n: u32) {
    let store = ws.join(".loopbox/loopbox.db");
    std::fs::create_dir_all(store.parent().unwrap()).unwrap();
    drop(loopbox::db::Db::open(&store).unwrap());
    let db = rusqlite::Connection::open(&store).unwrap();
    db.execute_batch("BEGIN").unwrap();
    db.execute(
        "WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < ?1)
         INSERT INTO runs (id, policy, policy_digest, input, status, created_at, updated_at, seed, options,
                           outcome, turns, actions, wake_at, spend_turns, spend_input_tokens, spend_cost_usd)
         SELECT printf('r%014x', 1700000000000 + i), CASE i % 3 WHEN 0 THEN 'builtin:ralph' ELSE '/w/policies/review.wasm' END,
                'd', '{\"task\": \"' || printf('%.*c', 1500, 'x') || '\"}',
                CASE WHEN i % 10 = 0 THEN 'waiting' WHEN i % 5 = 0 THEN 'failed' ELSE 'done' END,
                1700000000000 + i * 1000, 1700000000000 + i * 1000 + 500, 's',
                '{\"policy_name\": \"review\", \"grants\": {\"shell\": \"' || printf('%.*c', 3000, 'g') || '\"}}',
                '{\"success\": true, \"summary\": \"' || printf('%.*c', 400, 's') || '\"}',
                i % 9, i % 7, CASE WHEN i % 20 = 0 THEN 1900000000000 + i END, i % 4, 1000 * (i % 4), 0.01 * (i % 4)
         FROM k",
        [n],
    )
    .unwrap();
    db.execute(
        "INSERT INTO events (run_id, seq, at, event, decision)
         SELECT id, s.seq, created_at + s.seq,
                CASE s.seq WHEN 1 THEN '{\"type\": \"start\"}' ELSE '{\"type\": \"turn\", \"text\": \"' || printf('%.*c', 200, 't') || '\"}' END,
                '{\"type\": \"continue\"}'
         FROM runs, (SELECT 1 AS seq UNION ALL SELECT 2 UNION ALL SELECT 3) s",
        [],
    )
    .unwrap();
    db.execute_batch("COMMIT").unwrap();
}

/// Run `loopbox ARGS` in `ws` to its end, its stdout into `out`: wall time
/// in ms and peak memory in MB. The child is reaped by `wait4`, which gives
/// its own rusage (not `Child::wait`).
#[allow(clippy::zombie_processes)]
fn measure(ws: &Path, args: &[&str], out: &Path) -> (f64, f64) {
    let sink = std::fs::File::create(out).unwrap();
    let started = Instant::now();
    let child = Command::new(BIN)
        .arg("-C")
        .arg(ws)
        .args(args)
        .env_remove("LOOPBOX_SERVER")
        .env_remove("LOOPBOX_STORE")
        .stdin(Stdio::null())
        .stdout(sink)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut status = 0;
    // SAFETY: rusage is plain data, zeroed is a valid value of it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child's pid, writing into locals we own.
    let waited = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    let took = started.elapsed();
    assert_eq!(waited, child.id() as i32, "wait4 failed");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "loopbox {args:?} failed: {status}"
    );
    (ms(took), usage.ru_maxrss as f64 / 1024.0)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// One line of the table: `samples` runs of `loopbox ARGS`.
fn row(ws: &Path, out: &Path, name: &str, args: &[&str], samples: usize, goal: &str) {
    let mut times = vec![];
    let mut peak: f64 = 0.0;
    for _ in 0..samples {
        let (t, mb) = measure(ws, args, out);
        times.push(t);
        peak = peak.max(mb);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "{name:<46} {:>9.1} ms {:>9.1} ms {:>9.1} MB {:>4}   {goal}",
        percentile(&times, 0.5),
        percentile(&times, 0.99),
        peak,
        samples
    );
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let (runs, samples) = if full { (50_000, 30) } else { (500, 2) };
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let filled = Instant::now();
    fill(&ws, runs);
    let store_mb = std::fs::metadata(ws.join(".loopbox/loopbox.db"))
        .unwrap()
        .len() as f64
        / 1e6;
    println!(
        "{runs} runs in the store ({store_mb:.0} MB, written in {:.1} s)",
        filled.elapsed().as_secs_f64()
    );
    println!(
        "{:<46} {:>12} {:>12} {:>12} {:>4}   goal",
        "loopbox runs, whole process", "p50", "p99", "peak RSS", "n"
    );
    let out = dir.path().join("out");
    row(
        &ws,
        &out,
        "first page (50), table",
        &["runs"],
        samples,
        "at most 100 ms, 50 MB",
    );
    let table = std::fs::read_to_string(&out).unwrap();
    assert_eq!(table.lines().count(), 51, "a header and 50 runs");
    row(
        &ws,
        &out,
        "first page (50), --json",
        &["runs", "--json"],
        samples,
        "at most 100 ms, 50 MB",
    );
    let page: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(page.as_array().unwrap().len(), 50);
    let middle = format!("r{:014x}", 1_700_000_000_000u64 + u64::from(runs / 2));
    row(
        &ws,
        &out,
        "--before (the middle) --status waiting",
        &["runs", "--before", &middle, "--status", "waiting"],
        samples,
        "",
    );
    row(
        &ws,
        &out,
        "--status running (none: every run is looked at)",
        &["runs", "--status", "running"],
        samples,
        "",
    );
    row(
        &ws,
        &out,
        &format!("every run (--limit 0 --json), {runs}"),
        &["runs", "--limit", "0", "--json"],
        samples.min(3),
        "memory of a page",
    );
    // A row a line (read without holding them: this process's memory would
    // count in its next child's peak, which starts as a copy of it).
    let lines =
        std::io::BufRead::lines(std::io::BufReader::new(std::fs::File::open(&out).unwrap()))
            .filter(|l| l.as_ref().unwrap().starts_with(['[', ',']))
            .count();
    assert_eq!(lines, runs as usize);
    row(
        &ws,
        &out,
        "loopbox --version (the process's floor)",
        &["--version"],
        samples,
        "",
    );
}
