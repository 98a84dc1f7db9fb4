//! What a shell action costs: the `durable` test guest runs 20 actions of
//! `true` in one event through loopbox (grant check, spawn, output capture, run
//! log, and the journal's intent and result), with the journal on and off
//! (`[run] journal = false`), against the same 20 spawns of `true` made
//! directly from Rust. Commands run without an OS sandbox (`sandbox = "none"`)
//! so the comparison is of loopbox's own work. Samples are interleaved so
//! machine noise hits each alike.
//!
//! `cargo bench -p loopbox-bench --bench actions` (the store is on the temp
//! directory's file system, `synchronous=FULL`: every intent and result is a sync).
//!
//! A row with an event of no action (delivery and commit alone) gives what one
//! event costs. `BENCH_OTEL=1` runs the same table with OpenTelemetry on,
//! exporting to a receiver on loopback (`loopbox_bench::otlp_sink`): each event
//! and action then has its span, and each a metric; the rows of the two runs
//! side by side are the overhead.

use std::path::Path;
use std::sync::Arc;

use loopbox::bindings::{Decision, Event};
use loopbox::config::Config;
use loopbox::db::Db;
use loopbox::run::RunContext;
use loopbox::ui::Ui;
use loopbox::wasm::policy::{Policy, PolicySource};
use loopbox::wasm::runtime::Runtime;
use loopbox_bench::{Variant, full_run, interleave, table};

const ACTIONS: u32 = 20;

fn config(journal: bool) -> Config {
    let text = format!(
        "[shell]\nallow = [[\"true\"]]\nsandbox = \"none\"\n[limits]\nactions_per_run = 100000\n[run]\njournal = {journal}\n"
    );
    Config::parse(&text, Path::new("bench.toml")).unwrap()
}

/// One event of `actions` actions through loopbox.
async fn through_loopbox(
    policy: &Policy,
    ws: &Path,
    db: &Db,
    config: &Arc<Config>,
    n: usize,
    actions: u32,
) {
    let id = format!("bench-{n}");
    db.create_run(&id, "durable", &policy.digest, "{}").unwrap();
    let ctx = RunContext::new(id, config.clone(), db.clone(), ws, Ui::quiet()).unwrap();
    let input = serde_json::json!({"per_event": actions, "turns": 0, "file": "unused", "command": ["true"]}).to_string();
    let d = ctx
        .deliver(policy, &Event::Start(input))
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(d, Decision::Done(ref o) if o.success), "{d:?}");
}

/// The same ACTIONS spawns of `true`, straight from Rust, output captured.
/// With `fork_path`, each spawn also gets its own process group and an empty
/// `pre_exec` hook, which makes the standard library fork instead of using
/// posix_spawn: what that path costs in a process this size.
async fn bare(ws: &Path, fork_path: bool) {
    for _ in 0..ACTIONS {
        let mut cmd = tokio::process::Command::new("true");
        cmd.current_dir(ws).stdin(std::process::Stdio::null());
        if fork_path {
            cmd.process_group(0);
            // SAFETY: the hook does nothing.
            unsafe {
                cmd.pre_exec(|| Ok(()));
            }
        }
        let out = cmd.output().await.unwrap();
        assert!(out.status.success());
    }
}

fn main() {
    let full = full_run();
    let otel = std::env::var_os("BENCH_OTEL").is_some();
    let sink = otel.then(loopbox_bench::otlp_sink);
    let telemetry = sink.as_ref().map(|sink| {
        #[allow(clippy::disallowed_methods)] // telemetry's own configuration is read from here
        // SAFETY: set before this process starts any thread that reads the environment.
        unsafe {
            std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", &sink.endpoint)
        };
        loopbox::telemetry::init_from_env()
            .unwrap()
            .expect("telemetry is on")
    });
    let dir = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(dir.path().join("cache")).unwrap();
    let policy = runtime
        .load(&PolicySource::Path(env!("DURABLE").into()))
        .unwrap();
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let setup = |journal: bool| {
        let ws = tempfile::tempdir_in(dir.path()).unwrap();
        let db = Db::open_workspace(ws.path()).unwrap();
        (ws, db, Arc::new(config(journal)))
    };
    let (on, off) = (setup(true), setup(false));
    let bare_ws = tempfile::tempdir_in(dir.path()).unwrap();
    let runs = std::cell::Cell::new(0);
    let next_run = || {
        runs.set(runs.get() + 1);
        runs.get()
    };
    let mut variants = vec![
        Variant::new("spawn `true` from Rust (posix_spawn, the floor)", 1, || {
            tokio.block_on(bare(bare_ws.path(), false));
        }),
        // Each sample is one event; creating its run (two small inserts) is inside the timing.
        Variant::new("loopbox, journal on", 1, || {
            tokio.block_on(through_loopbox(
                &policy,
                on.0.path(),
                &on.1,
                &on.2,
                next_run(),
                ACTIONS,
            ));
        }),
        Variant::new("loopbox, journal off", 1, || {
            tokio.block_on(through_loopbox(
                &policy,
                off.0.path(),
                &off.1,
                &off.2,
                next_run(),
                ACTIONS,
            ));
        }),
        Variant::new("spawn `true` from Rust with pre_exec (fork)", 1, || {
            tokio.block_on(bare(bare_ws.path(), true));
        }),
    ];
    // A whole event each sample, not divided by the actions: what one event costs.
    variants.push(Variant::new(
        "loopbox, an event of no action (per event)",
        1,
        || {
            tokio.block_on(through_loopbox(
                &policy,
                on.0.path(),
                &on.1,
                &on.2,
                next_run(),
                0,
            ));
        },
    ));
    let rounds = if full { 40 } else { 1 };
    interleave(&mut variants, 1, rounds);
    for v in variants
        .iter_mut()
        .filter(|v| !v.name.contains("per event"))
    {
        v.samples = v.samples.iter().map(|d| *d / ACTIONS).collect();
    }
    table(
        &format!(
            "one shell action of `true`, per action ({ACTIONS} per event, {rounds} interleaved events of each){}",
            if otel { ", OpenTelemetry on" } else { "" }
        ),
        &variants,
    );
    if let Some(sink) = sink {
        drop(variants);
        drop(telemetry);
        let (requests, bytes) = sink.requests_and_bytes();
        println!("OTLP receiver: {requests} request(s), {bytes} bytes of spans and metrics");
    }
}
