//! Runs on a shared PostgreSQL store, driven by `loopbox worker` processes:
//! a failover campaign (4 workers, at least 100 kill -9 at the crash points,
//! every run's action appending its own line to one file), and fencing (a
//! worker stopped past its lease commits nothing once it wakes, and kills the
//! command it had started).

use std::collections::BTreeMap;
use std::process::Child;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Srv, scratch};
use loopbox::db::engine::pg_server::PgServer;

/// The lease the workers here hold runs with: 3 s, renewed every second. A
/// takeover must come within 2 x TTL of the dead worker's last renewal; the
/// takeover itself takes up to TTL plus a worker's look (500 ms), which
/// leaves 2.5 s for a loaded 2-core CI machine's delays (with 1 s, 0.5 s was
/// too little: 3.9 s was seen once).
pub const TTL_MS: u64 = 3000;

/// A server on a fresh schema of this binary's PostgreSQL, with tenant `solo`,
/// whose `probe` may append to `out.txt` and sleep; no worker yet.
fn server(dir: &std::path::Path) -> Srv {
    server_with(dir, 64)
}

/// [`server`], tenant `solo` limited to `max_running` runs at once.
fn server_with(dir: &std::path::Path, max_running: u32) -> Srv {
    let pg = PgServer::shared(false).unwrap();
    server_on(dir, &pg.fresh_store().unwrap(), max_running)
}

/// [`server`] on the PostgreSQL store `store`.
pub fn server_on(dir: &std::path::Path, store: &str, max_running: u32) -> Srv {
    let mut srv = Srv::prepare_on(
        dir,
        "max_running = 64\n",
        &[(
            "solo",
            &format!("max_running = {max_running}\nmax_queued = 1000\n"),
        )],
        Some(store),
    );
    let probe = crate::common::probe().display().to_string();
    srv.set_config(
        "solo",
        &format!(
            "[shell]\nallow = [[\"tee\", \"-a\", \"out.txt\"], [\"sleep\"]]\n\n\
             [policies.probe]\nsource = {probe:?}\nunsigned = true\n\n\
             [policies.probe.shell]\nallow = [[\"tee\", \"-a\", \"out.txt\"], [\"sleep\"]]\n"
        ),
    );
    srv.start();
    // The tests start their own workers.
    if let Some(mut w) = srv.worker.take() {
        w.kill().unwrap();
        w.wait().unwrap();
    }
    srv
}

pub fn worker(srv: &Srv, crash: Option<String>) -> Child {
    let lease = TTL_MS.to_string();
    let args = ["--lease-ms", &lease, "--slots", "4"];
    match crash {
        // On the worker's command, never in this process's environment: every
        // `loopbox` another test spawned meanwhile would inherit the crash point.
        Some(c) => srv.spawn_worker_with(&args, &[("LOOPBOX_CRASH_AT", &c)]),
        None => srv.spawn_worker(&args),
    }
}

fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

/// A run a dead worker held: its lease, and when it was last renewed
/// (the lease's expiry less the TTL, in the store's clock: ms since the epoch).
struct Orphan {
    lease: String,
    renewed_ms: i64,
}

/// The runs the worker with process id `pid` holds now (its lease is `HOST PID START`).
fn held_by(store: &str, pid: u32) -> Vec<(String, Orphan)> {
    let c =
        loopbox::db::Conn::postgres(loopbox::db::engine::postgres::PgConn::connect(store).unwrap());
    c.query(
        "SELECT id, lease, lease_expires FROM runs WHERE status = 'running' AND lease LIKE ?1",
        [format!("{} {pid} %", host())],
        |r| {
            Ok((
                r.get(0)?,
                Orphan {
                    lease: r.get(1)?,
                    renewed_ms: r.get::<_, i64>(2)? - TTL_MS as i64,
                },
            ))
        },
    )
    .unwrap()
}

#[test]
fn four_workers_killed_100_times_at_the_crash_points_lose_and_repeat_no_action() {
    let dir = scratch();
    let srv = server(dir.path());
    let db = loopbox::db::Db::open_postgres(srv.store.as_deref().unwrap()).unwrap();
    let points = [
        "before-intent",
        "action-started",
        "action-finished",
        "action-recorded",
        "event-committed",
    ];
    let mut rng = 0x9e37_79b9_u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let crash = |next: &mut dyn FnMut() -> u64| {
        format!(
            "{}:{}",
            points[(next() % points.len() as u64) as usize],
            1 + next() % 3
        )
    };
    let mut workers: Vec<Child> = (0..4)
        .map(|_| worker(&srv, Some(crash(&mut next))))
        .collect();
    let mut runs: Vec<String> = Vec::new();
    let mut kills = 0;
    // Runs a killed worker held: each must be claimed again within 2 x TTL of
    // its last renewal (it died after that, so this is the longer span).
    let mut orphans: BTreeMap<String, Orphan> = BTreeMap::new();
    let mut takeovers: Vec<Duration> = Vec::new();
    let started = Instant::now();
    while kills < 100 {
        assert!(
            started.elapsed() < Duration::from_secs(240),
            "the campaign took too long: {kills} kills"
        );
        // Keep a dozen runs going.
        let open = runs
            .iter()
            .filter(|r| !db.existing_run(r).unwrap().status.is_final())
            .count();
        for _ in open..12 {
            let n = runs.len();
            runs.push(srv.start_probe(
                "solo",
                json!({"op": "exec", "argv": ["tee", "-a", "out.txt"], "stdin": format!("run {n}\n")}),
            ));
        }
        for w in workers.iter_mut() {
            if w.try_wait().unwrap().is_some() {
                orphans.extend(held_by(srv.store.as_deref().unwrap(), w.id()));
                kills += 1;
                *w = worker(&srv, Some(crash(&mut next)));
            }
        }
        orphans.retain(|run, o| {
            let r = db.existing_run(run).unwrap();
            let moved = r.status.is_final()
                || r.lease.as_ref().map(|l| l.to_string()).as_deref() != Some(o.lease.as_str());
            if moved {
                // Seen now: the takeover came at the latest now.
                let ms = loopbox::db::now_ms() - o.renewed_ms;
                takeovers.push(Duration::from_millis(ms.max(0) as u64));
            }
            !moved
        });
        std::thread::sleep(Duration::from_millis(20));
    }
    // The rest finish on workers that do not crash.
    for w in workers.iter_mut() {
        let _ = w.kill();
        let _ = w.wait();
    }
    let mut calm: Vec<Child> = (0..4).map(|_| worker(&srv, None)).collect();
    let mut unknown = 0;
    let out = srv.root("solo").join("proj/out.txt");
    for r in &runs {
        let v = srv.wait_final("solo", r);
        if v["outcome"]["data"]["err"]["kind"] == "outcome-unknown" {
            unknown += 1;
        } else {
            assert_eq!(v["status"], "done", "{v:#}");
        }
    }
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for line in text.lines() {
        *seen.entry(line).or_default() += 1;
    }
    let duplicated: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(duplicated.is_empty(), "actions run twice: {duplicated:?}");
    // Lost: a run that says it did its action, whose line is not there.
    let mut lost = Vec::new();
    for (n, r) in runs.iter().enumerate() {
        let v = srv
            .get(&format!("/api/v1/runs/{r}"), srv.token("solo", "viewer"))
            .json();
        let line = format!("run {n}");
        if v["outcome"]["data"]["ok"].is_object() && !seen.contains_key(line.as_str()) {
            lost.push(line);
        }
    }
    assert!(lost.is_empty(), "actions lost: {lost:?}");
    let slowest = takeovers.iter().max().copied().unwrap_or_default();
    assert!(
        slowest <= Duration::from_millis(2 * TTL_MS),
        "a takeover came {slowest:?} after the dead worker's last renewal, over 2 x TTL ({} ms)",
        2 * TTL_MS
    );
    eprintln!(
        "failover campaign: {} runs, {kills} kill -9, {} takeovers (slowest {slowest:?} after the last renewal, TTL {TTL_MS} ms), {unknown} outcome-unknown, 0 duplicated, 0 lost, in {:?}",
        runs.len(),
        takeovers.len(),
        started.elapsed()
    );
    for w in calm.iter_mut() {
        let _ = w.kill();
        let _ = w.wait();
    }
}

/// Processes whose command line ends with `argv` (the command, and the
/// sandbox that runs it).
pub fn processes(argv: &[&str]) -> usize {
    let want: Vec<u8> = argv[1..]
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("cmdline")).is_ok_and(|c| {
                c.ends_with(&want)
                    && c.split(|b| *b == 0)
                        .any(|a| a.ends_with(argv[0].as_bytes()))
            })
        })
        .count()
}

#[test]
fn a_worker_stopped_past_its_lease_commits_nothing_when_it_wakes_and_kills_its_command() {
    let dir = scratch();
    let srv = server(dir.path());
    let db = loopbox::db::Db::open_postgres(srv.store.as_deref().unwrap()).unwrap();
    let mut first = worker(&srv, None);
    let run = srv.start_probe("solo", json!({"op": "exec", "argv": ["sleep", "9.271"]}));
    let v = srv.wait_run("solo", &run, |v| {
        v["journal"].as_array().is_some_and(|j| !j.is_empty())
    });
    assert_eq!(v["status"], "running", "{v:#}");
    let sleeping = Instant::now();
    while processes(&["sleep", "9.271"]) == 0 {
        assert!(
            sleeping.elapsed() < Duration::from_secs(10),
            "the command never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(first.id() as i32, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_millis(TTL_MS + 300));
    let mut second = worker(&srv, None);
    let v = srv.wait_final("solo", &run);
    assert_eq!(
        v["outcome"]["data"]["err"]["kind"], "outcome-unknown",
        "{v:#}"
    );
    let before: Value = v.clone();
    let epoch = |db: &loopbox::db::Db| db.existing_run(&run).unwrap();
    let ended = epoch(&db);
    // SAFETY: as above.
    unsafe { libc::kill(first.id() as i32, libc::SIGCONT) };
    // It wakes, renews nothing, stops the run, and kills the command it started.
    let woke = Instant::now();
    while processes(&["sleep", "9.271"]) > 0 {
        assert!(
            woke.elapsed() < Duration::from_secs(5),
            "the stopped worker's command still runs 5 s after it woke"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(TTL_MS));
    let after = srv
        .get(&format!("/api/v1/runs/{run}"), srv.token("solo", "viewer"))
        .json();
    assert_eq!(
        (&after["status"], &after["journal"], &after["outcome"]),
        (&before["status"], &before["journal"], &before["outcome"]),
        "the woken worker changed the run"
    );
    let now = epoch(&db);
    assert_eq!(
        (now.status, now.updated_at_ms, now.actions),
        (ended.status, ended.updated_at_ms, ended.actions)
    );
    for w in [&mut first, &mut second] {
        let _ = w.kill();
        let _ = w.wait();
    }
}

#[test]
fn a_store_given_wrong_is_refused_without_printing_its_password() {
    let dir = scratch();
    for (args, env) in [
        (
            vec!["worker", "--store", "postgress://u:s3cr3t-pw@h/db"],
            None,
        ),
        (
            vec!["runs", "--store", "postgresql+psycopg://u:s3cr3t-pw@h/db"],
            None,
        ),
        (vec!["worker"], Some("host=h user=u password=s3cr3t-pw")),
        (
            vec![
                "worker",
                "--store",
                "postgres://u@127.0.0.1:1/db?password=s3cr3t-pw&bogus=1",
            ],
            None,
        ),
    ] {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_loopbox"));
        cmd.current_dir(dir.path())
            .args(&args)
            .env_remove("LOOPBOX_STORE");
        if args[0] == "worker" {
            cmd.arg("--data").arg(dir.path().join("data"));
        }
        if let Some(v) = env {
            cmd.env("LOOPBOX_STORE", v);
        }
        let out = cmd.output().unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(!out.status.success(), "{args:?}: {stdout}{stderr}");
        assert!(
            !stdout.contains("s3cr3t") && !stderr.contains("s3cr3t") && stderr.contains("***"),
            "{args:?} printed the store's password: {stdout}{stderr}"
        );
    }
}

/// A TCP relay to PostgreSQL that can be cut: from then on it forwards
/// nothing either way but keeps every connection open, as a partition that
/// drops packets looks to the worker (its requests wait for answers that
/// never come). Returns the relay's port and its switch.
fn relay(to: u16) -> (u16, std::sync::Arc<std::sync::atomic::AtomicBool>) {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::atomic::{AtomicBool, Ordering};
    let cut = std::sync::Arc::new(AtomicBool::new(false));
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let pipe = |mut from: TcpStream, mut to: TcpStream, cut: std::sync::Arc<AtomicBool>| {
        std::thread::spawn(move || {
            from.set_read_timeout(Some(Duration::from_millis(20)))
                .unwrap();
            let mut buf = [0u8; 16384];
            loop {
                if cut.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
                match from.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        if to.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) => {}
                    Err(_) => break,
                }
            }
            let _ = to.shutdown(std::net::Shutdown::Write);
        });
    };
    let switch = cut.clone();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Ok(server) = TcpStream::connect(("127.0.0.1", to)) else {
                continue;
            };
            pipe(
                client.try_clone().unwrap(),
                server.try_clone().unwrap(),
                switch.clone(),
            );
            pipe(server, client, switch.clone());
        }
    });
    (port, cut)
}

#[test]
fn a_worker_cut_off_from_the_store_kills_its_command_once_its_lease_may_be_taken() {
    let dir = scratch();
    let srv = server(dir.path());
    let store = srv.store.clone().unwrap();
    let pg_port: u16 = store
        .split("127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap()
        .parse()
        .unwrap();
    let (port, cut) = relay(pg_port);
    let relayed = store.replace(
        &format!("127.0.0.1:{pg_port}/"),
        &format!("127.0.0.1:{port}/"),
    );
    let lease = TTL_MS.to_string();
    let mut first = srv.spawn_worker(&["--lease-ms", &lease, "--slots", "4", "--store", &relayed]);
    let run = srv.start_probe("solo", json!({"op": "exec", "argv": ["sleep", "9.373"]}));
    let started = Instant::now();
    while processes(&["sleep", "9.373"]) == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the command never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    cut.store(true, std::sync::atomic::Ordering::SeqCst);
    let cut_at = Instant::now();
    let mut second = worker(&srv, None);
    // Another worker may take the run over one TTL after the last renewal: by
    // then the cut-off worker's command must be gone, though that worker cannot
    // reach the store to learn it lost the run.
    while processes(&["sleep", "9.373"]) > 0 {
        assert!(
            cut_at.elapsed() < Duration::from_millis(3 * TTL_MS),
            "the cut-off worker's command still runs {:?} after the cut, beside the run's new holder",
            cut_at.elapsed()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let killed = cut_at.elapsed();
    assert!(
        first.try_wait().unwrap().is_none(),
        "the cut-off worker is still running (only its run stopped)"
    );
    let v = srv.wait_final("solo", &run);
    assert_eq!(
        v["outcome"]["data"]["err"]["kind"], "outcome-unknown",
        "{v:#}"
    );
    eprintln!(
        "cut off: its command was killed {killed:?} after the cut (TTL {TTL_MS} ms); the run ended {:?} after it",
        cut_at.elapsed()
    );
    // Still cut off, it is told to stop: every store call it sits in gives up
    // at the answer deadline (12 s for a worker), and the drain at the TTL.
    let termed = Instant::now();
    // SAFETY: a plain signal to a child process this test started and still owns.
    assert_eq!(unsafe { libc::kill(first.id() as i32, libc::SIGTERM) }, 0);
    while first.try_wait().unwrap().is_none() {
        assert!(
            termed.elapsed() < Duration::from_secs(45),
            "a worker cut off from its store ignores SIGTERM: still running {:?} after it",
            termed.elapsed()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "cut off: the worker exited {:?} after SIGTERM",
        termed.elapsed()
    );
    for w in [&mut first, &mut second] {
        let _ = w.kill();
        let _ = w.wait();
    }
}

#[test]
fn workers_keep_a_tenants_max_running() {
    let dir = scratch();
    let srv = server_with(dir.path(), 1);
    let mut w = worker(&srv, None);
    let first = srv.start_probe("solo", json!({"op": "exec", "argv": ["sleep", "2.417"]}));
    // Running, its command started (the action is journaled).
    srv.wait_run("solo", &first, |v| {
        v["journal"].as_array().is_some_and(|j| !j.is_empty())
    });
    let second = srv.start_probe("solo", json!({"op": "exec", "argv": ["sleep", "0.1"]}));
    // The worker has 3 free slots and looks every TTL/3, but tenants.solo.max_running
    // = 1: the second run waits, queued, until the first ends.
    let get = |r: &str| {
        srv.get(&format!("/api/v1/runs/{r}"), srv.token("solo", "viewer"))
            .json()
    };
    let mut polls = 0;
    let watching = Instant::now();
    loop {
        let (a, b) = (get(&first), get(&second));
        if a["status"] != "running" {
            break;
        }
        assert!(
            watching.elapsed() < Duration::from_secs(60),
            "the first run never ended: {a:#}"
        );
        assert_ne!(
            b["status"], "running",
            "a second run of a tenant with max_running = 1 started beside the first: {b:#}"
        );
        polls += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        polls > 5,
        "the first run ended before the second was looked at"
    );
    for r in [&first, &second] {
        assert_eq!(srv.wait_final("solo", r)["status"], "done");
    }
    let _ = w.kill();
    let _ = w.wait();
}

#[test]
fn a_store_password_is_refused_on_the_command_line_and_no_tenant_command_reads_it() {
    let dir = scratch();
    // On the command line it is anyone's: refused, without being printed.
    for sub in ["worker", "serve", "runs"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_loopbox"))
            .current_dir(dir.path())
            .args([
                sub,
                "--store",
                "postgres://loopbox:pw-on-argv@127.0.0.1:1/db",
            ])
            .args(if sub == "runs" {
                vec![]
            } else {
                vec!["--data", "data"]
            })
            .env_remove("LOOPBOX_STORE")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{sub}: {stderr}");
        assert!(
            stderr.contains("password on the command line")
                && stderr.contains("LOOPBOX_STORE=")
                && !stderr.contains("pw-on-argv"),
            "{sub}: {stderr}"
        );
    }
    // Given in the environment (the way left), a tenant's command sees it
    // nowhere: in its own process namespace it lists its own processes only
    // (a tenant may not choose Landlock, under which /proc shows every one).
    let mut srv = server(dir.path());
    let probe = crate::common::probe().display().to_string();
    let script = "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; tr '\\0' '\\n' < $p/environ 2>/dev/null; done";
    let rule = serde_json::to_string(&["sh", "-c", script]).unwrap();
    srv.set_config(
        "solo",
        &format!(
            "[shell]\nallow = [{rule}]\n\n\
             [policies.probe]\nsource = {probe:?}\nunsigned = true\n\n\
             [policies.probe.shell]\nallow = [{rule}]\n"
        ),
    );
    // A mark in the URL stands for its password (the test server has none).
    let marked = format!("{}&application_name=s3cr3tpw", srv.store.clone().unwrap());
    srv.store = Some(marked);
    let mut w = srv.spawn_worker(&["--lease-ms", "1000"]);
    let run = srv.start_probe("solo", json!({"op": "exec", "argv": ["sh", "-c", script]}));
    let v = srv.wait_final("solo", &run);
    let stdout = v["outcome"]["data"]["ok"]["stdout"]
        .as_str()
        .unwrap_or_default();
    assert!(
        stdout.contains("sh -c for p in /proc"),
        "the command should list the processes it sees (else this proves nothing): {v:#}"
    );
    assert!(
        !stdout.contains("loopbox worker"),
        "a tenant's command sees the worker's process: {stdout}"
    );
    let seen: Vec<&str> = stdout.lines().filter(|l| l.contains("s3cr3tpw")).collect();
    assert!(
        seen.is_empty(),
        "a tenant's command read the store URL: {seen:?}"
    );
    let _ = w.kill();
    let _ = w.wait();
}

#[test]
fn a_run_no_worker_can_drive_is_left_interrupted_after_its_drives_fail_five_times() {
    let dir = scratch();
    let srv = server(dir.path());
    let store = srv.store.clone().unwrap();
    // Queued (no worker yet), then broken in the store in a way no drive can
    // get past: its row no longer says which workspace it runs in.
    let run = srv.start_probe("solo", json!({"op": "exec", "argv": ["sleep", "0"]}));
    let db = loopbox::db::Db::open_postgres(&store).unwrap();
    loopbox::db::Conn::postgres(loopbox::db::engine::postgres::PgConn::connect(&store).unwrap())
        .exec("UPDATE runs SET workspace = NULL WHERE id = ?1", [&run])
        .unwrap();
    let started = Instant::now();
    let mut w = srv.spawn_worker(&["--lease-ms", "1000", "--slots", "4"]);
    let v = srv.wait_run("solo", &run, |v| v["status"] == "interrupted");
    let log = db.log(&run).unwrap();
    let failed: Vec<&str> = log
        .iter()
        .filter(|l| l.message.starts_with("the server could not drive the run"))
        .map(|l| l.message.as_str())
        .collect();
    assert_eq!(failed.len(), 5, "{log:#?}");
    assert!(failed[0].contains("no workspace recorded"), "{failed:?}");
    let last = &log.last().unwrap().message;
    assert!(
        last.starts_with("workers stopped trying: 5 drives of this run failed")
            && last.contains(&format!("loopbox runs resume {run}")),
        "{last}"
    );
    // Left alone from then on: no worker claims it again.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(db.log(&run).unwrap().len(), log.len(), "claimed again");
    assert_eq!(
        db.existing_run(&run).unwrap().status.to_string(),
        "interrupted"
    );
    eprintln!(
        "poison run: interrupted {:?} after the worker started, after 5 failed drives (TTL 1000 ms); {}",
        started.elapsed(),
        v["status"]
    );
    let _ = w.kill();
    let _ = w.wait();
}
