//! What durability costs per action: the `durable` test guest runs 20 shell
//! actions (`tee -a FILE`, a line on stdin) in one event, through loopbox with
//! the journal on and with it off (`[run] journal = false`), against the same
//! 20 spawns made directly from Rust. Samples of the three are interleaved so
//! machine noise hits each alike; the table gives the cost per action and the
//! ratios.
//!
//! `cargo bench -p loopbox --bench durability` (the store is on the temp
//! directory's file system, `synchronous=FULL`: every intent and result is a sync).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use loopbox::bindings::{Decision, Event};
use loopbox::config::Config;
use loopbox::db::Db;
use loopbox::policy::{Policy, PolicySource};
use loopbox::run::RunContext;
use loopbox::runtime::Runtime;
use loopbox::ui::Ui;
use tokio::io::AsyncWriteExt;

const ACTIONS: u32 = 20;

fn config(journal: bool) -> Config {
    let text = format!("[shell]\nallow = [[\"tee\", \"-a\"]]\nsandbox = \"none\"\n[limits]\nactions_per_run = 100000\n[run]\njournal = {journal}\n");
    Config::parse(&text, Path::new("bench.toml")).unwrap()
}

/// One event of ACTIONS actions through loopbox; the time per action.
async fn through_loopbox(policy: &Policy, ws: &Path, db: &Db, config: &Arc<Config>, n: usize) -> Duration {
    let id = format!("bench-{n}");
    db.create_run(&id, "durable", &policy.digest, "{}").unwrap();
    let ctx = RunContext::new(id, config.clone(), db.clone(), ws, Ui::quiet()).unwrap();
    let input = serde_json::json!({"per_event": ACTIONS, "turns": 0, "file": "effects.log"}).to_string();
    let t = Instant::now();
    let d = ctx.deliver(policy, &Event::Start(input)).await.unwrap().unwrap();
    let elapsed = t.elapsed();
    assert!(matches!(d, Decision::Done(ref o) if o.success), "{d:?}");
    elapsed / ACTIONS
}

/// The same ACTIONS spawns of `tee -a FILE` with a line on stdin, straight from Rust.
async fn bare(ws: &Path) -> Duration {
    let t = Instant::now();
    for i in 0..ACTIONS {
        let mut child = tokio::process::Command::new("tee")
            .args(["-a", "effects.log"])
            .current_dir(ws)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(format!("bare-{i}\n").as_bytes()).await.unwrap();
        drop(stdin);
        let out = child.wait_with_output().await.unwrap();
        assert!(out.status.success());
    }
    t.elapsed() / ACTIONS
}

fn p(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    // `cargo test --all-targets` runs this once as a smoke test; the table is for `cargo bench`.
    let samples = if bench { 40 } else { 1 };
    let repo = loopbox_guest_build::Repo::containing(Path::new(env!("CARGO_MANIFEST_DIR")));
    let built = repo.build_rust_guests(&["durable"]);
    let dir = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(dir.path().join("cache")).unwrap();
    let policy = runtime.load(&PolicySource::Path(built[0].1.clone())).unwrap();
    let tokio = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();

    let mut rows: Vec<(&str, Vec<Duration>)> = vec![("loopbox, journal on", vec![]), ("loopbox, journal off", vec![]), ("bare spawn from Rust", vec![])];
    let setups: Vec<(tempfile::TempDir, Db, Arc<Config>)> = [true, false]
        .into_iter()
        .map(|journal| {
            let ws = tempfile::tempdir_in(dir.path()).unwrap();
            let db = Db::open_workspace(ws.path()).unwrap();
            (ws, db, Arc::new(config(journal)))
        })
        .collect();
    let bare_ws = tempfile::tempdir_in(dir.path()).unwrap();
    for n in 0..samples {
        for (i, (ws, db, config)) in setups.iter().enumerate() {
            let d = tokio.block_on(through_loopbox(&policy, ws.path(), db, config, n));
            rows[i].1.push(d);
        }
        rows[2].1.push(tokio.block_on(bare(bare_ws.path())));
    }
    for (_, s) in &mut rows {
        s.sort();
    }
    let base = p(&rows[2].1, 0.5).as_secs_f64();
    let unjournaled = p(&rows[1].1, 0.5).as_secs_f64();
    println!("\nper shell action ({ACTIONS} actions per event, {samples} events each, interleaved)");
    println!("{:<24} {:>10} {:>10} {:>12} {:>14}", "variant", "p50", "p99", "vs bare", "vs journal off");
    for (name, s) in &rows {
        let mid = p(s, 0.5).as_secs_f64();
        println!("{name:<24} {:>8.0}us {:>8.0}us {:>11.2}x {:>13.2}x", mid * 1e6, p(s, 0.99).as_secs_f64() * 1e6, mid / base, mid / unjournaled);
    }
}
