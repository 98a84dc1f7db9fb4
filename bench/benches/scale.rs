//! Many runs in one process.
//!
//! - Parked: 1,000 runs of `builtin:fix-forward` started and left waiting for
//!   ticks. A parked run is rows in the store, not an instance in memory; the
//!   table gives the memory and store bytes per parked run, and what waking one
//!   (delivering a tick) costs.
//! - Active: 200 runs at once, each a `builtin:fsm` loop of short shell actions
//!   (`true`), on one multi-threaded runtime with a pool of 256 instances:
//!   actions per second, the p50/p99 latency of a decision (a whole event: its
//!   actions and its commit), and the peak resident memory.
//!
//! `cargo bench -p loopbox-bench --bench scale`.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use loopbox::bindings::{Decision, Event};
use loopbox::config::Config;
use loopbox::db::Db;
use loopbox::loops::{LoopFile, payload};
use loopbox::run::RunContext;
use loopbox::ui::Ui;
use loopbox::wasm::policy::{Policy, PolicySource};
use loopbox::wasm::runtime::Runtime;
use loopbox_bench::{full_run, micros, percentile, rss};

const MB: f64 = 1024.0 * 1024.0;

fn parked(runtime: &Runtime, ws: &Path, n: usize) {
    let policy = runtime
        .load(&PolicySource::parse("builtin:fix-forward"))
        .unwrap();
    let db = Db::open(&ws.join("parked.db")).unwrap();
    let config = Arc::new(Config::default());
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let input = r#"{"fix_forward_max_attempts": 3, "fix_forward_max_seconds": 3600}"#;
    let (before, _) = rss();
    let t = Instant::now();
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let id = format!("parked-{i}");
        db.create_run(&id, "builtin:fix-forward", &policy.digest, input)
            .unwrap();
        let ctx = RunContext::new(id.clone(), config.clone(), db.clone(), ws, Ui::quiet()).unwrap();
        let d = tokio
            .block_on(ctx.deliver(&policy, &Event::Start(input.into())))
            .unwrap()
            .unwrap();
        assert!(matches!(d, Decision::Pass), "{d:?}");
        ids.push(id);
    }
    let parked_in = t.elapsed();
    let (after, _) = rss();
    let store = std::fs::metadata(ws.join("parked.db"))
        .map(|m| m.len())
        .unwrap_or(0)
        + std::fs::metadata(ws.join("parked.db-wal"))
            .map(|m| m.len())
            .unwrap_or(0);

    // Wake each one with a tick it waits for: the CI is still pending.
    let tick = Event::Tick(r#"{"pushed": true, "ci_status": "pending"}"#.into());
    let mut wake = Vec::with_capacity(n);
    for id in &ids {
        let ctx = RunContext::new(id.clone(), config.clone(), db.clone(), ws, Ui::quiet()).unwrap();
        let t = Instant::now();
        let d = tokio
            .block_on(ctx.deliver(&policy, &tick))
            .unwrap()
            .unwrap();
        wake.push(t.elapsed());
        assert!(matches!(d, Decision::Pass), "{d:?}");
    }
    wake.sort();
    println!("\n{n} runs parked waiting for ticks, one process");
    println!(
        "  resident memory: {:.1} MB before, {:.1} MB after: {:.1} KB per parked run",
        before as f64 / MB,
        after as f64 / MB,
        (after.saturating_sub(before)) as f64 / 1024.0 / n as f64
    );
    println!(
        "  store: {:.1} MB, {:.1} KB per parked run",
        store as f64 / MB,
        store as f64 / 1024.0 / n as f64
    );
    println!(
        "  parking (start event, fresh instance, commit): {} per run",
        micros(parked_in / n as u32)
    );
    println!(
        "  waking one (a tick: fresh instance, decision, commit): p50 {}, p99 {}",
        micros(percentile(&wake, 0.5)),
        micros(percentile(&wake, 0.99))
    );
}

fn active(ws: &Path, concurrent: usize, runs_each: usize, steps: u32) {
    let runtime = Arc::new(
        Runtime::with_pool(std::env::temp_dir().join("loopbox-bench-cache"), 256).unwrap(),
    );
    let policy: Arc<Policy> = Arc::new(runtime.load(&PolicySource::parse("builtin:fsm")).unwrap());
    let text = format!(
        "name: short\ninitial: step\nmax_steps: {cap}\nmax_edge_revisits: {cap}\nstates:\n  step:\n    exec: [\"true\"]\n    on_yes: $current\n    on_no: done\n    max_retries: {retries}\n    on_retry_exhausted: done\n    throttle:\n      hard_max: {cap}\n  done:\n    terminal: true\n",
        cap = steps + 1,
        retries = steps - 1
    );
    let file = LoopFile {
        path: "short.yaml".into(),
        text,
    };
    let config =
        Arc::new(Config::parse("[shell]\nallow = [[\"true\"]]\nsandbox = \"none\"\n[limits]\nactions_per_run = 100000\n", Path::new("bench.toml")).unwrap());
    let lp = loopbox::loops::load(ws, &file, &config).unwrap();
    let input = payload(&lp, &file, "{}", ".loops/runs/bench/", ws).unwrap();
    let db = Db::open(&ws.join("active.db")).unwrap();
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    let latencies: Vec<Duration> = tokio.block_on(async {
        let mut tasks = Vec::new();
        for worker in 0..concurrent {
            let (policy, config, db, input, ws) = (
                policy.clone(),
                config.clone(),
                db.clone(),
                input.clone(),
                ws.to_path_buf(),
            );
            tasks.push(tokio::spawn(async move {
                let mut lat = Vec::with_capacity(runs_each);
                for r in 0..runs_each {
                    let id = format!("active-{worker}-{r}");
                    db.create_run(&id, "builtin:fsm", &policy.digest, &input)
                        .unwrap();
                    let ctx =
                        RunContext::new(id, config.clone(), db.clone(), &ws, Ui::quiet()).unwrap();
                    let t = Instant::now();
                    let d = ctx
                        .deliver(&policy, &Event::Start(input.clone()))
                        .await
                        .unwrap()
                        .unwrap();
                    lat.push(t.elapsed());
                    assert!(matches!(&d, Decision::Done(o) if o.success), "{d:?}");
                }
                lat
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        all
    });
    let wall = started.elapsed();
    let mut lat = latencies;
    lat.sort();
    let actions = (concurrent * runs_each) as f64 * steps as f64;
    let (_, peak) = rss();
    println!(
        "\n{concurrent} runs active at once, {runs_each} loops each of {steps} `true` actions (one event per loop)"
    );
    println!(
        "  throughput: {:.0} actions/s, {:.0} decisions/s over {:.1} s",
        actions / wall.as_secs_f64(),
        lat.len() as f64 / wall.as_secs_f64(),
        wall.as_secs_f64()
    );
    println!(
        "  decision latency (the event's actions and commit): p50 {}, p99 {}",
        micros(percentile(&lat, 0.5)),
        micros(percentile(&lat, 0.99))
    );
    println!(
        "  peak resident memory of the process: {:.1} MB",
        peak as f64 / MB
    );
}

fn main() {
    let full = full_run();
    let ws = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(std::env::temp_dir().join("loopbox-bench-cache")).unwrap();
    if full {
        parked(&runtime, ws.path(), 1000);
        drop(runtime);
        active(ws.path(), 200, 5, 5);
    } else {
        parked(&runtime, ws.path(), 5);
        active(ws.path(), 4, 1, 2);
    }
}
