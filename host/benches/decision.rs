//! Per-event decision latency of the Ralph loop: the same logic as a plain
//! Rust function (the floor) and as the `ralph` component through loopbox's
//! runtime with a fresh Store and instance for every event.
//!
//! `cargo bench -p loopbox --bench decision` runs criterion over the three
//! variants, then prints a side-by-side table (interleaved samples, so machine
//! noise hits every variant alike) with p50, p99 and the ratio to the floor.

use std::collections::HashMap;
use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use loopbox::bindings::{Event, Turn};
use loopbox::config::Config;
use loopbox::db::Db;
use loopbox::journal::Journal;
use loopbox::meter::Meter;
use loopbox::policy::{Call, Policy, PolicySource};
use loopbox::run::RunContext;
use loopbox::runtime::Runtime;
use loopbox::ui::Ui;

const RESPONSE: &str = "I changed the parser and reran the tests; two still fail. <promise>NOT YET</promise>";

/// The floor: Ralph's logic with its state as JSON in a map, as the guest keeps it.
fn plain(state: &mut HashMap<String, String>) -> ralph::Next {
    let progress = state.get("ralph").map(|s| serde_json::from_str(s).unwrap());
    let (progress, next) = ralph::decide(progress, ralph::Input::Turn { response: black_box(RESPONSE) }).unwrap();
    state.insert("ralph".into(), serde_json::to_string(&progress.unwrap()).unwrap());
    next
}

struct Wasm {
    tokio: tokio::runtime::Runtime,
    policy: Policy,
    ctx: RunContext,
    _runtime: Runtime,
}

fn turn() -> Event {
    Event::TurnComplete(Turn { session_id: "s".into(), response: RESPONSE.into(), index: 1, continuation: true })
}

impl Wasm {
    fn new() -> Wasm {
        let cache = std::env::temp_dir().join("loopbox-bench-cache");
        let runtime = Runtime::new(cache).unwrap();
        let policy = runtime.load(&PolicySource::parse("builtin:ralph")).unwrap();
        let db = Db::open(Path::new(":memory:")).unwrap();
        db.create_run("bench", "builtin:ralph", &policy.digest, "{}").unwrap();
        let workspace = std::env::temp_dir();
        let ctx = RunContext::new("bench".into(), Arc::new(Config::default()), db, &workspace, Ui::quiet()).unwrap();
        let tokio = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let start = Event::Start(r#"{"prompt": "fix the parser", "completion_promise": "DONE"}"#.into());
        tokio.block_on(ctx.deliver(&policy, &start)).unwrap().unwrap();
        Wasm { tokio, policy, ctx, _runtime: runtime }
    }

    /// One event on a fresh instance, state read from the store, nothing committed.
    fn call(&self, event: &Event) {
        self.tokio.block_on(async {
            let meter = Arc::new(Meter::new(&self.ctx.config.limits));
            // Clock readings are journaled in memory, as in a run; nothing is written.
            let journal = Journal::live(self.ctx.db.clone(), &self.ctx.id, String::new(), true);
            let data = self.ctx.instance_state(meter.clone(), &journal, 1).unwrap();
            let (r, _) = self.policy.call(data, meter, &self.ctx.config.limits, Call::Handle(event)).await;
            black_box(r.unwrap());
        })
    }

    /// One event end to end: fresh instance, then its state, log and decision committed.
    fn deliver(&self, event: &Event) {
        self.tokio.block_on(async { black_box(self.ctx.deliver(&self.policy, event).await.unwrap().unwrap()) });
    }
}

fn bench(c: &mut Criterion) {
    let wasm = Wasm::new();
    let event = turn();
    let mut state = HashMap::new();
    state.insert("ralph".into(), r#"{"config":{"prompt":"fix the parser","completion_promise":"DONE","max_iterations":0},"iteration":1}"#.into());
    let mut g = c.benchmark_group("ralph_decision");
    g.bench_function("plain_rust_fn", |b| b.iter(|| plain(&mut state)));
    g.bench_function("wasm_fresh_instance", |b| b.iter(|| wasm.call(&event)));
    g.bench_function("wasm_deliver_and_commit", |b| b.iter(|| wasm.deliver(&event)));
    g.finish();
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Interleaved samples of each variant, one table.
fn side_by_side() {
    let wasm = Wasm::new();
    let event = turn();
    let mut state = HashMap::new();
    state.insert("ralph".into(), r#"{"config":{"prompt":"fix the parser","completion_promise":"DONE","max_iterations":0},"iteration":1}"#.into());
    const N: usize = 3000;
    let mut samples: [Vec<Duration>; 3] = [Vec::with_capacity(N), Vec::with_capacity(N), Vec::with_capacity(N)];
    for _ in 0..200 {
        plain(&mut state);
        wasm.call(&event);
    }
    for _ in 0..N {
        // Many plain calls per sample: a single one is below the clock's resolution.
        let t = Instant::now();
        for _ in 0..100 {
            black_box(plain(&mut state));
        }
        samples[0].push(t.elapsed() / 100);
        let t = Instant::now();
        wasm.call(&event);
        samples[1].push(t.elapsed());
        let t = Instant::now();
        wasm.deliver(&event);
        samples[2].push(t.elapsed());
    }
    for s in &mut samples {
        s.sort();
    }
    let floor = percentile(&samples[0], 0.5).as_nanos() as f64;
    println!("\nralph decision, side by side ({N} interleaved samples each)");
    println!("{:<28} {:>12} {:>12} {:>14} {:>10}", "variant", "p50", "p99", "decisions/s", "p50 ratio");
    for (name, s) in ["plain Rust fn (floor)", "wasm, fresh instance", "wasm, deliver + commit"].iter().zip(&samples) {
        let p50 = percentile(s, 0.5);
        println!(
            "{:<28} {:>12} {:>12} {:>14.0} {:>9.1}x",
            name,
            format!("{:.2} us", p50.as_nanos() as f64 / 1000.0),
            format!("{:.2} us", percentile(s, 0.99).as_nanos() as f64 / 1000.0),
            1e9 / p50.as_nanos() as f64,
            p50.as_nanos() as f64 / floor
        );
    }
}

criterion_group!(benches, bench);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    // `cargo test --all-targets` runs benches once as a smoke test; the table is for `cargo bench`.
    if std::env::args().any(|a| a == "--bench") {
        side_by_side();
    }
}
