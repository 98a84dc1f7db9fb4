//! PostgreSQL restarted under live workers: two `loopbox worker` processes
//! drive runs whose actions each append a line to one file, and the store's
//! server is restarted mid-event, once with a fast shutdown (`pg_ctl -m
//! fast`: SIGINT) and once with an immediate one (`-m immediate`: SIGQUIT,
//! crash recovery at the next start). The workers reconnect (a failed claim
//! is tried again after 100 ms, doubling to 2 s), every run finishes, and no
//! action is lost or run twice: an action whose intent was journaled without
//! its result is `outcome-unknown` to the policy.
//!
//! It needs a PostgreSQL of its own (a restart would cut every other test's
//! connections), so it runs once, in the default pass of the suite.

use std::time::{Duration, Instant};

use serde_json::json;

use super::scale::{server_on, worker};
use super::{on_postgres, scratch};
use loopbox::db::engine::pg_server::PgServer;

/// Runs, and the actions each makes (one line each).
const RUNS: usize = 6;
const STEPS: usize = 30;

fn lines(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

/// Wait until `path` has at least `n` lines.
fn until_lines(path: &std::path::Path, n: usize) {
    let started = Instant::now();
    while lines(path) < n {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the runs stalled at {} lines (waiting for {n})",
            lines(path)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn postgres_restarted_fast_then_immediate_under_two_workers_loses_and_repeats_nothing() {
    if on_postgres() {
        eprintln!(
            "skipped on the PostgreSQL pass: it starts a PostgreSQL of its own, in the default pass"
        );
        return;
    }
    // Durable (fsync and synchronous_commit on, as in production): the tests'
    // shared server turns both off, and an immediate shutdown then loses
    // commits it had acknowledged (journaled intents among them), after which
    // an action did run twice. That is what those settings mean, not a bug.
    let pg = PgServer::start_own(true).unwrap();
    let store = pg.fresh_store().unwrap();
    let dir = scratch();
    let srv = server_on(dir.path(), &store, 64);
    let mut workers = [worker(&srv, None), worker(&srv, None)];
    let runs: Vec<String> = (0..RUNS)
        .map(|n| {
            srv.start_probe(
                "solo",
                json!({"op": "exec", "argv": ["tee", "-a", "out.txt"], "stdin": format!("run {n}\n"), "times": STEPS}),
            )
        })
        .collect();
    let out = srv.root("solo").join("proj/out.txt");
    let total = RUNS * STEPS;
    // Mid-event: some actions done, most to come.
    until_lines(&out, total / 6);
    let before_fast = lines(&out);
    pg.restart().unwrap();
    until_lines(&out, before_fast + total / 6);
    let before_immediate = lines(&out);
    // `-m immediate`: the postmaster is told SIGQUIT (no checkpoint, crash
    // recovery at the next start); the keeper then starts it again.
    let pid: i32 = std::fs::read_to_string(pg.dir().join("data/postmaster.pid"))
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    // SAFETY: kill(2) on the PostgreSQL server this test started (its keeper thread's child, not reaped yet).
    unsafe { libc::kill(pid, libc::SIGQUIT) };
    pg.restart().unwrap();
    assert!(
        before_immediate < total,
        "every action ran before the second restart: make the runs longer"
    );
    let mut unknown = 0;
    let views: Vec<_> = runs.iter().map(|r| srv.wait_final("solo", r)).collect();
    let text = std::fs::read_to_string(&out).unwrap();
    for (n, v) in views.iter().enumerate() {
        assert_eq!(v["status"], "done", "run {n} did not finish: {v:#}");
        let results = v["outcome"]["data"]
            .as_array()
            .unwrap_or_else(|| panic!("run {n}: {v:#}"));
        assert_eq!(results.len(), STEPS, "run {n}: {v:#}");
        let ok = results.iter().filter(|r| r["ok"].is_object()).count();
        let unknowns = results
            .iter()
            .filter(|r| r["err"]["kind"] == "outcome-unknown")
            .count();
        assert_eq!(ok + unknowns, STEPS, "run {n}: another error: {v:#}");
        unknown += unknowns;
        let line = format!("run {n}");
        let seen = text.lines().filter(|l| *l == line).count();
        // Lost: an action the policy was told ran, whose line is missing.
        // Twice: more lines than actions that may have run.
        assert!(
            (ok..=ok + unknowns).contains(&seen),
            "run {n}: {seen} lines for {ok} actions done and {unknowns} outcome-unknown"
        );
    }
    eprintln!(
        "PostgreSQL restarted (fast at {before_fast}/{total} actions, immediate at {before_immediate}/{total}) under 2 workers: {RUNS} runs done, {unknown} outcome-unknown, 0 lost, 0 duplicated"
    );
    for w in workers.iter_mut() {
        let _ = w.kill();
        let _ = w.wait();
    }
}
