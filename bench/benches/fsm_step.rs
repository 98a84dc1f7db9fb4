//! What one FSM step costs: a 1,000-step loop whose every step runs `true`,
//! through `builtin:fsm` (grant check, spawn, capture, journal, interpolation,
//! evaluation, routing, the run log), against a Rust loop spawning `true` 1,000
//! times. Journal on and off; commands run without an OS sandbox in the main
//! rows so the comparison is of loopbox's own work, plus a row under
//! bubblewrap when this machine has it.
//!
//! `cargo bench -p loopbox-bench --bench fsm_step` prints one table (per step).

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use loopbox::bindings::{Decision, Event};
use loopbox::config::Config;
use loopbox::db::Db;
use loopbox::loops::{LoopFile, payload};
use loopbox::run::RunContext;
use loopbox::ui::Ui;
use loopbox::wasm::policy::{Policy, PolicySource};
use loopbox::wasm::runtime::Runtime;
use loopbox_bench::{Variant, full_run, interleave, table};

fn spin(steps: u32) -> String {
    format!(
        "name: spin\ninitial: step\nmax_steps: {cap}\nmax_edge_revisits: {cap}\nstates:\n  step:\n    exec: [\"true\"]\n    on_yes: $current\n    on_no: done\n    max_retries: {retries}\n    on_retry_exhausted: done\n    throttle:\n      hard_max: {cap}\n  done:\n    terminal: true\n",
        cap = steps + 1,
        retries = steps - 1
    )
}

fn config(journal: bool, sandbox: &str) -> Arc<Config> {
    let text = format!(
        "[shell]\nallow = [[\"true\"]]\nsandbox = \"{sandbox}\"\n[limits]\nactions_per_run = 1000000\nhost_calls_per_event = 1000000\nlog_bytes_per_event = 16777216\n[run]\njournal = {journal}\n"
    );
    Arc::new(Config::parse(&text, Path::new("bench.toml")).unwrap())
}

struct Fsm<'a> {
    tokio: tokio::runtime::Runtime,
    policy: &'a Policy,
    db: Db,
    ws: &'a Path,
    config: Arc<Config>,
    input: String,
    runs: u32,
}

impl Fsm<'_> {
    /// One whole loop as one run: its `start` event drives every step.
    fn run(&mut self) {
        self.runs += 1;
        let id = format!("spin-{}", self.runs);
        self.db
            .create_run(&id, "builtin:fsm", &self.policy.digest, &self.input)
            .unwrap();
        let ctx = RunContext::new(
            id,
            self.config.clone(),
            self.db.clone(),
            self.ws,
            Ui::quiet(),
        )
        .unwrap();
        let d = self
            .tokio
            .block_on(ctx.deliver(self.policy, &Event::Start(self.input.clone())))
            .unwrap()
            .unwrap();
        assert!(matches!(&d, Decision::Done(o) if o.success), "{d:?}");
    }
}

fn main() {
    let full = full_run();
    let steps: u32 = if full { 1000 } else { 10 };
    let ws = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(std::env::temp_dir().join("loopbox-bench-cache")).unwrap();
    let policy = runtime.load(&PolicySource::parse("builtin:fsm")).unwrap();
    let file = LoopFile {
        path: "spin.yaml".into(),
        text: spin(steps),
    };
    let lp = loopbox::loops::load(ws.path(), &file, &Config::default()).unwrap();
    let input = payload(&lp, &file, "{}", ".loops/runs/bench/", ws.path()).unwrap();
    let fsm = |journal: bool, sandbox: &str| Fsm {
        tokio: tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
        policy: &policy,
        db: Db::open(&ws.path().join(format!("{journal}-{sandbox}.db"))).unwrap(),
        ws: ws.path(),
        config: config(journal, sandbox),
        input: input.clone(),
        runs: 0,
    };
    let mut on = fsm(true, "none");
    let mut off = fsm(false, "none");
    let bwrap = Command::new("bwrap")
        .args(["--ro-bind", "/", "/", "true"])
        .status()
        .is_ok_and(|s| s.success());
    let mut sandboxed = fsm(true, "bwrap");

    let per_step = |total: Duration| total / steps;
    let mut variants = vec![
        Variant::new("Rust loop spawning `true` (the floor)", 1, || {
            for _ in 0..steps {
                let out = Command::new("true").output().unwrap();
                assert!(out.status.success());
            }
        }),
        Variant::new("builtin:fsm, journal on", 1, || on.run()),
        Variant::new("builtin:fsm, journal off", 1, || off.run()),
    ];
    if bwrap {
        variants.push(Variant::new(
            "builtin:fsm, journal on, bubblewrap sandbox",
            1,
            || sandboxed.run(),
        ));
    }
    let rounds = if full { 7 } else { 1 };
    interleave(&mut variants, 1, rounds);
    for v in &mut variants {
        v.samples = v.samples.iter().map(|d| per_step(*d)).collect();
    }
    table(
        &format!(
            "one step of a {steps}-step loop of `true`, per step ({rounds} interleaved loops of each)"
        ),
        &variants,
    );
}
