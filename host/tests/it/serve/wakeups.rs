//! Issue 45, defect 1: an approval, an answer or a tick sent within
//! milliseconds of the run parking is never lost. The driver parks a run (its
//! status `waiting` in the store) a moment before it gives back its slot; an
//! act in that moment queues the run in the store, and the scheduler must
//! drive it once its slot is free (before the fix it stayed `queued` for good).

use std::time::{Duration, Instant};

use loopbox::db::approvals::{ApprovalFilter, ApprovalStatus};
use loopbox::db::{Db, RunStatus};
use serde_json::{Value, json};

use super::{Srv, scratch};

/// Acts per run, and runs of each kind (ticks, answers, approvals).
const ACTS: usize = 100;
const RUNS: [(&str, usize); 3] = [("tick", 4), ("answer", 3), ("approve", 3)];

/// How long a parked run may take to park again after an act before it
/// counts as lost (a drive takes tens of milliseconds).
const STEP_LIMIT: Duration = Duration::from_secs(20);

/// A small generator of delays (no dependency for 1,000 numbers).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Once the run is parked (`waiting` in the store, read behind the
/// server's back, which is quicker than any request): its pending approval's
/// id and digest, if it has one.
fn parked(db: &Db, id: &str, acts: usize) -> Option<(String, String)> {
    let started = Instant::now();
    loop {
        let run = db.existing_run(id).unwrap();
        if run.status == RunStatus::Waiting {
            let pending = db
                .approvals(&ApprovalFilter {
                    tenant: None,
                    run: Some(id.to_string()),
                    status: Some(ApprovalStatus::Pending),
                    limit: 10,
                })
                .unwrap();
            return pending.first().map(|a| (a.id.clone(), a.digest.clone()));
        }
        assert!(
            !run.status.is_final() && run.status != RunStatus::Interrupted,
            "run {id} ended after {acts} acts: {}",
            run.status
        );
        assert!(
            started.elapsed() < STEP_LIMIT,
            "lost wake-up: run {id} never parked again after {acts} acts (it stays {})",
            run.status
        );
        std::thread::yield_now();
    }
}

fn drive_one(srv: &Srv, kind: &str, n: usize) -> String {
    let op = srv.token("t", "operator");
    let input = match kind {
        // Each tick passes again: the run waits for the next one.
        "tick" => json!({"op": "echo", "then": "pass"}),
        // A standing answer: each answer asks again.
        "answer" => {
            json!({"op": "state", "set": {"answer": {"op": "echo", "then": "ask"}}, "then": "ask"})
        }
        // One approval per command, ACTS of them in one event.
        _ => {
            json!({"op": "exec", "argv": ["tee", "-a", "count.txt"], "stdin": format!("{kind}{n}\n"), "times": ACTS})
        }
    };
    let id = srv.start_probe("t", input);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ ((n as u64 + 1) << 20) ^ kind.len() as u64);
    let db = srv.store();
    for i in 0..ACTS {
        let pending = parked(&db, &id, i);
        // 0 to 5 ms after the run parked: half of them at once.
        let delay = rng.below(12).saturating_sub(6);
        std::thread::sleep(Duration::from_millis(delay));
        let r = match kind {
            "tick" => srv.post(
                &format!("/api/v1/runs/{id}/tick"),
                op,
                json!({"payload": {"op": "echo", "then": "pass"}}),
            ),
            "answer" => srv.post(
                &format!("/api/v1/runs/{id}/answer"),
                op,
                json!({"text": format!("a{i}")}),
            ),
            _ => {
                let (aid, digest) =
                    pending.unwrap_or_else(|| panic!("run {id} waits without a pending approval"));
                srv.post(
                    &format!("/api/v1/approvals/{aid}/approve"),
                    srv.token("t", "approver"),
                    json!({"digest": digest}),
                )
            }
        };
        assert_eq!(r.status, 200, "act {i} on run {id}: {}", r.body);
    }
    id
}

#[test]
fn acts_sent_0_to_5_ms_after_the_run_parks_each_run_it_once() {
    let dir = scratch();
    let mut srv = Srv::prepare(
        dir.path(),
        "max_running = 16\n",
        &[("t", "max_running = 16\nmax_queued = 100\n")],
    );
    srv.start();
    let started = Instant::now();
    let runs: Vec<(String, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = RUNS
            .iter()
            .flat_map(|(kind, n)| (0..*n).map(move |i| (*kind, i)))
            .map(|(kind, i)| {
                let srv = &srv;
                s.spawn(move || (kind.to_string(), drive_one(srv, kind, i)))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let took = started.elapsed();
    // Every act ran once: each run handled exactly its acts (one event each,
    // or one command each), none twice.
    let db = srv.store();
    let mut total = 0;
    for (kind, id) in &runs {
        let events = db.events(id).unwrap();
        let of_type = |t: &str| {
            events
                .iter()
                .filter(|e| serde_json::from_str::<Value>(&e.event).is_ok_and(|v| v["type"] == t))
                .count()
        };
        let n = match kind.as_str() {
            "tick" => of_type("tick"),
            "answer" => of_type("user-input"),
            // One event; a command per approval in its journal.
            _ => {
                let v = srv.wait_final("t", id);
                assert_eq!(v["status"], "done", "{v:#}");
                v["journal_total"].as_u64().unwrap() as usize
            }
        };
        assert_eq!(
            n, ACTS,
            "run {id} ({kind}) took its acts {n} times, not {ACTS}"
        );
        total += n;
    }
    // The commands: ACTS lines from each approval run, none lost, none twice.
    let count = std::fs::read_to_string(srv.root("t").join("proj/count.txt")).unwrap_or_default();
    for i in 0..RUNS[2].1 {
        let lines = count
            .lines()
            .filter(|l| *l == format!("approve{i}"))
            .count();
        assert_eq!(lines, ACTS, "approve{i}: {lines} commands ran:\n{count}");
    }
    assert_eq!(total, 1000);
    eprintln!("1000 acts in {:.1} s", took.as_secs_f64());
}
