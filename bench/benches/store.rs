//! The PostgreSQL store next to SQLite (issue 35), on this machine, with a
//! PostgreSQL of its own on loopback (`db::engine::pg_server`, `fsync` on, as
//! in production):
//!
//! - Claim latency: a run is queued (its transaction commits), and one of 4
//!   claimers (each a `Db` handle of its own, as a `loopbox worker` has) holds
//!   it. PostgreSQL claimers are woken by `LISTEN/NOTIFY`; SQLite has no
//!   notification, so its claimers poll every 10 ms.
//! - Events per second across 4 workers: each thread claims a queued run and
//!   delivers events to it through the `durable` test guest (a real policy
//!   call, its state and log, the commit, every write fenced by the claim):
//!   20 events per claim, as a worker holding a run drives it, and one event
//!   per claim (a claim's transaction for each event).
//! - A shell action: the `durable` guest's 20 actions of `true` in one event,
//!   journal on (intent and result are each a durable write), per action,
//!   and the round trips to PostgreSQL one such event makes, and one with no
//!   action (`db::engine::postgres::round_trips`): the difference over 20 is
//!   what each action costs.
//!
//! - A tenant's quota checked before an action (`actions_per_hour` set): in
//!   the process's memory (before issue 35 part C, and still on SQLite), and
//!   counted in the store (`db::quota`, a write transaction each), per check;
//!   and an agent turn's check with a daily cost budget (the day's charges
//!   read from the store's journal, here of a tenant with none yet).
//!
//! `cargo bench -p loopbox-bench --bench store` (without `--bench`: one short
//! round of each, as a smoke test).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use loopbox::bindings::{Decision, Event};
use loopbox::config::Config;
use loopbox::db::claim::ClaimFilter;
use loopbox::db::engine::pg_server::PgServer;
use loopbox::db::engine::postgres::round_trips;
use loopbox::db::{Db, NewRun, RunOptions, RunPlace, RunStatus};
use loopbox::run::RunContext;
use loopbox::ui::Ui;
use loopbox::wasm::policy::{Policy, PolicySource};
use loopbox::wasm::runtime::Runtime;
use loopbox_bench::{Variant, full_run, interleave, micros, percentile, table};

const WORKERS: usize = 4;

fn queue(db: &Db, id: &str) {
    db.create_queued_run(
        NewRun {
            id,
            policy: "durable",
            digest: "d",
            input: "{}",
            options: &RunOptions::default(),
            place: &RunPlace {
                tenant: Some("bench".into()),
                ..Default::default()
            },
            status: RunStatus::Queued,
        },
        &Default::default(),
    )
    .unwrap();
}

/// p50 and p99 from queueing a run to a claimer holding it, `n` runs queued
/// one at a time (each after the last was claimed).
fn claim_latency(db: &Db, n: usize) -> (Duration, Duration) {
    let claimed = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done: Arc<std::sync::Mutex<Vec<(String, Instant)>>> = Arc::default();
    let claimers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let handle = db.reopen().unwrap();
            let (claimed, stop, done) = (claimed.clone(), stop.clone(), done.clone());
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                let wake = handle.listen_runnable().unwrap();
                let filter = ClaimFilter {
                    limit: 1,
                    ..Default::default()
                };
                while !stop.load(Ordering::SeqCst) {
                    for c in handle.claim(&format!("w{w}"), 60_000, &filter).unwrap() {
                        done.lock().unwrap().push((c.run, Instant::now()));
                        claimed.fetch_add(1, Ordering::SeqCst);
                    }
                    match &wake {
                        Some(n) => rt.block_on(async {
                            let _ = tokio::time::timeout(Duration::from_millis(500), n.notified())
                                .await;
                        }),
                        None => std::thread::sleep(Duration::from_millis(10)),
                    }
                }
            })
        })
        .collect();
    // The listeners connect first.
    std::thread::sleep(Duration::from_millis(300));
    let mut queued = Vec::with_capacity(n);
    for i in 0..n {
        let id = format!("claim-{i}");
        queue(db, &id);
        queued.push((id, Instant::now()));
        while claimed.load(Ordering::SeqCst) <= i {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    stop.store(true, Ordering::SeqCst);
    for c in claimers {
        c.join().unwrap();
    }
    let done = done.lock().unwrap();
    let mut lat: Vec<Duration> = queued
        .iter()
        .map(|(id, at)| {
            let (_, got) = done.iter().find(|(r, _)| r == id).unwrap();
            got.saturating_duration_since(*at)
        })
        .collect();
    lat.sort();
    (percentile(&lat, 0.5), percentile(&lat, 0.99))
}

/// Transactions committed in a PostgreSQL store's database so far, reads on
/// their own included (none on SQLite): what each event costs in round trips.
fn commits(db: &Db) -> Option<i64> {
    // A server process reports its counts when idle, at most once a second.
    std::thread::sleep(Duration::from_millis(1500));
    let c = db.second_connection().unwrap();
    c.as_sqlite().is_none().then(|| {
        c.query_row(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()",
            [],
            |r| r.get(0),
        )
        .unwrap()
    })
}

fn config(journal: bool) -> Config {
    let text = format!(
        "[shell]\nallow = [[\"true\"]]\nsandbox = \"none\"\n[limits]\nactions_per_run = 100000\n[run]\njournal = {journal}\n"
    );
    Config::parse(&text, Path::new("bench.toml")).unwrap()
}

/// One event of `actions` actions of `true` in run `id`, which `db` holds.
async fn event(policy: &Policy, ws: &Path, db: &Db, config: &Arc<Config>, id: &str, actions: u32) {
    let ctx = RunContext::new(id.to_string(), config.clone(), db.clone(), ws, Ui::quiet()).unwrap();
    let input = serde_json::json!({"per_event": actions, "turns": 0, "file": "unused", "command": ["true"]}).to_string();
    let d = ctx
        .deliver(policy, &Event::Start(input))
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(d, Decision::Done(ref o) if o.success), "{d:?}");
}

/// Events per second: WORKERS threads, each claiming queued runs one at a
/// time and delivering `per_claim` events to each (as a worker holding a run
/// drives it; 1: a claim per event), for `secs`.
fn events_per_second(db: &Db, policy: &Policy, ws: &Path, secs: f64, per_claim: usize) -> f64 {
    let per = 4000;
    for i in 0..per {
        queue(db, &format!("ev-{per_claim}-{i}"));
    }
    let config = Arc::new(config(true));
    let count = Arc::new(AtomicUsize::new(0));
    let until = Instant::now() + Duration::from_secs_f64(secs);
    let started = Instant::now();
    std::thread::scope(|s| {
        for w in 0..WORKERS {
            let handle = db.reopen().unwrap();
            let (count, config) = (count.clone(), config.clone());
            s.spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                let filter = ClaimFilter {
                    limit: 1,
                    ..Default::default()
                };
                'claiming: while Instant::now() < until {
                    let claims = handle.claim(&format!("w{w}"), 60_000, &filter).unwrap();
                    if claims.is_empty() {
                        break;
                    }
                    for c in claims {
                        for _ in 0..per_claim {
                            rt.block_on(event(policy, ws, &handle, &config, &c.run, 0));
                            count.fetch_add(1, Ordering::Relaxed);
                            if Instant::now() >= until {
                                break 'claiming;
                            }
                        }
                    }
                }
            });
        }
    });
    count.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

fn main() {
    let full = full_run();
    let dir = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(dir.path().join("cache")).unwrap();
    let policy = runtime
        .load(&PolicySource::Path(env!("DURABLE").into()))
        .unwrap();
    let pg = PgServer::shared(true).unwrap();
    let stores = |name: &str| -> Vec<(&'static str, Db)> {
        vec![
            (
                "SQLite",
                Db::open(&dir.path().join(format!("{name}.db"))).unwrap(),
            ),
            (
                "PostgreSQL",
                Db::open_postgres(&pg.fresh_store().unwrap()).unwrap(),
            ),
        ]
    };
    let ws = tempfile::tempdir_in(dir.path()).unwrap();

    let n = if full { 400 } else { 20 };
    println!(
        "\nclaim latency: a run queued (committed) -> one of {WORKERS} claimers holds it, {n} runs"
    );
    println!("{:<48}{:>12}{:>12}", "store", "p50", "p99");
    for (name, db) in stores("claim") {
        let how = if name == "SQLite" {
            "SQLite (claimers poll every 10 ms)"
        } else {
            "PostgreSQL (LISTEN/NOTIFY, SKIP LOCKED)"
        };
        let (p50, p99) = claim_latency(&db, n);
        println!("{how:<48}{:>12}{:>12}", micros(p50), micros(p99));
    }

    let secs = if full { 10.0 } else { 1.0 };
    println!(
        "\nevents per second: {WORKERS} workers (threads, a store handle each), each claiming a queued run, then delivering events to it (the durable guest, no action), {secs} s"
    );
    println!("{:<48}{:>12}", "store", "events/s");
    for per_claim in [20, 1] {
        for (name, db) in stores(&format!("events-{per_claim}")) {
            let before = commits(&db);
            let started = Instant::now();
            let rate = events_per_second(&db, &policy, ws.path(), secs, per_claim);
            let events = rate * started.elapsed().as_secs_f64();
            let how = if per_claim == 1 {
                format!("{name}, one event per claim")
            } else {
                format!("{name}, {per_claim} events per claim")
            };
            match (before, commits(&db)) {
                (Some(b), Some(a)) => println!(
                    "{how:<48}{rate:>12.0}   ({:.1} transactions per event, reads included)",
                    (a - b) as f64 / events
                ),
                _ => println!("{how:<48}{rate:>12.0}"),
            }
        }
    }

    const ACTIONS: u32 = 20;
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let config = Arc::new(config(true));
    let runs = std::cell::Cell::new(0);
    let mut variants: Vec<Variant> = stores("actions")
        .into_iter()
        .map(|(name, db)| {
            let (ws, config, policy, runs, tokio) =
                (ws.path(), config.clone(), &policy, &runs, &tokio);
            Variant::new(format!("loopbox, journal on, {name}"), 1, move || {
                runs.set(runs.get() + 1);
                let id = format!("act-{}", runs.get());
                db.create_run(&id, "durable", &policy.digest, "{}").unwrap();
                tokio.block_on(event(policy, ws, &db, &config, &id, ACTIONS));
            })
        })
        .collect();
    // As a worker drives it: the run claimed, so every write is fenced by the claim's epoch.
    {
        let db = Db::open_postgres(&pg.fresh_store().unwrap()).unwrap();
        let (ws, config, policy, runs, tokio) = (ws.path(), config.clone(), &policy, &runs, &tokio);
        variants.push(Variant::new(
            "loopbox, journal on, PostgreSQL, claimed (a worker)".to_string(),
            1,
            move || {
                runs.set(runs.get() + 1);
                let id = format!("claimed-{}", runs.get());
                queue(&db, &id);
                let filter = ClaimFilter {
                    limit: 1,
                    ..Default::default()
                };
                let claimed = db.claim("bench", 60_000, &filter).unwrap();
                assert_eq!(claimed.len(), 1, "the run is claimed");
                tokio.block_on(event(policy, ws, &db, &config, &id, ACTIONS));
            },
        ));
    }
    let rounds = if full { 40 } else { 1 };
    // Counted once, apart from the timed samples.
    let counted = |actions: u32| {
        let db = Db::open_postgres(&pg.fresh_store().unwrap()).unwrap();
        db.create_run("counted", "durable", &policy.digest, "{}")
            .unwrap();
        let before = round_trips();
        tokio.block_on(event(&policy, ws.path(), &db, &config, "counted", actions));
        let after = round_trips();
        (after.0 - before.0, after.1 - before.1)
    };
    let (with, without) = (counted(ACTIONS), counted(0));
    interleave(&mut variants, 1, rounds);
    for v in variants.iter_mut() {
        v.samples = v.samples.iter().map(|d| *d / ACTIONS).collect();
    }
    table(
        &format!(
            "one shell action of `true`, per action ({ACTIONS} per event, {rounds} interleaved events of each)"
        ),
        &variants,
    );
    println!(
        "PostgreSQL round trips (statements): an event of {ACTIONS} actions {} ({}), of none {} ({}): {:.1} ({:.1}) per action",
        with.0,
        with.1,
        without.0,
        without.1,
        (with.0 - without.0) as f64 / f64::from(ACTIONS),
        (with.1 - without.1) as f64 / f64::from(ACTIONS),
    );

    quota_checks(&stores, full);
}

/// p50 and p99 of `n` calls of `f`.
fn timed(n: usize, mut f: impl FnMut()) -> (Duration, Duration) {
    let mut samples: Vec<Duration> = (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    samples.sort();
    (percentile(&samples, 0.5), percentile(&samples, 0.99))
}

fn quota_checks(stores: &dyn Fn(&str) -> Vec<(&'static str, Db)>, full: bool) {
    use loopbox::limits::quota::{Quota, Spend};
    use loopbox::serve::quota::{DailyBudget, TenantQuota};
    let n = if full { 2000 } else { 50 };
    // Limits high enough that no check is refused: the cost of counting.
    let quota = || {
        TenantQuota::new("bench", 1_000_000, 1_000_000, &[], &[]).with_budget(
            DailyBudget {
                max_cost_usd: Some(1e9),
                max_tokens: None,
            },
            &[],
        )
    };
    println!(
        "
a tenant's quota checked before an action or agent turn, per check, {n} checks"
    );
    println!("{:<48}{:>12}{:>12}", "where the count is", "p50", "p99");
    let mem = quota();
    let (p50, p99) = timed(n, || mem.spend(Spend::Action).unwrap());
    println!(
        "{:<48}{:>12}{:>12}",
        "action, process memory (before)",
        micros(p50),
        micros(p99)
    );
    for (name, db) in stores("quota") {
        let store = loopbox::serve::store::Store::with(db).unwrap();
        let q = quota().on_store(store);
        let (p50, p99) = timed(n, || q.spend(Spend::Action).unwrap());
        let how = format!("action, {name} store (quota_spends)");
        println!("{how:<48}{:>12}{:>12}", micros(p50), micros(p99));
        let (p50, p99) = timed(n, || q.spend(Spend::AgentTurn).unwrap());
        let how = format!("agent turn + day's cost, {name} store");
        println!("{how:<48}{:>12}{:>12}", micros(p50), micros(p99));
    }
}
