//! Operating a shared store: `runs resume` takes a run through a claim (never
//! one a live worker holds, and fenced like a worker), workers forget the
//! rows of workers long dead, a store URL's password never reaches an error,
//! and the dashboard shows its workers when the store is shared.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

use super::scale::{server_on, worker};
use super::{on_postgres, scratch, shared};
use crate::common::BIN;
use loopbox::db::engine::pg_server::PgServer;

/// A query on the PostgreSQL store `store`, outside any loopbox process.
fn pg(store: &str) -> loopbox::db::Conn {
    loopbox::db::Conn::postgres(loopbox::db::engine::postgres::PgConn::connect(store).unwrap())
}

#[test]
fn a_store_urls_password_is_never_printed() {
    let dir = scratch();
    let config = dir.path().join("loopbox-server.toml");
    std::fs::write(
        &config,
        "[server]\nlisten = \"127.0.0.1:0\"\ndata = \"data\"\n",
    )
    .unwrap();
    let secret = "hunter2pw";
    let cases: [(&str, &[&str], &str); 7] = [
        // Not a PostgreSQL URL at all.
        ("worker", &[], "mysql://ops:hunter2pw@db.example/runs"),
        ("serve", &[], "mysql://ops:hunter2pw@db.example/runs"),
        // Nothing listens there.
        ("runs", &[], "postgres://ops:hunter2pw@127.0.0.1:1/runs"),
        // The password as a parameter.
        (
            "worker",
            &[],
            "postgres://ops@127.0.0.1:1/runs?password=hunter2pw",
        ),
        // A port that is no number: the URL is quoted back.
        (
            "worker",
            &[],
            "postgres://ops:hunter2pw@127.0.0.1:port/runs",
        ),
        (
            "runs",
            &[],
            "postgres://ops@127.0.0.1:port/runs?sslmode=disable&password=hunter2pw",
        ),
        (
            "serve",
            &[],
            "mysql://ops@db.example/runs?Password=hunter2pw",
        ),
    ];
    for (command, args, store) in cases {
        for by_env in [false, true] {
            let mut cmd = Command::new(BIN);
            cmd.arg(command);
            if command != "runs" {
                cmd.arg("--config").arg(&config);
            }
            if by_env {
                cmd.env("LOOPBOX_STORE", store);
            } else {
                cmd.args(["--store", store]);
            }
            let out = cmd.args(args).current_dir(dir.path()).output().unwrap();
            let said = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(!out.status.success(), "{command} {store}: {said}");
            assert!(
                !said.contains(secret),
                "{command} with {store} (env: {by_env}) printed the password: {said}"
            );
            // It still says which store, and what to do.
            assert!(
                said.contains("ops") && said.contains("postgres://"),
                "{command} {store}: {said}"
            );
        }
    }
}

#[test]
fn the_dashboard_lists_workers_in_its_navigation_only_on_a_shared_store() {
    let srv = shared();
    let auth = format!("Bearer {}", srv.token("alpha", "viewer"));
    let r = super::http(&srv.addr, "GET", "/runs", &[("Authorization", &auth)], None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        r.body.contains("href=\"/workers\""),
        on_postgres(),
        "the navigation: {}",
        r.body
    );
}

/// A resume's options reach the workers of a shared store (recorded with the
/// run, see `serve::config_edit` for one carried out): a resume is judged by
/// the run's status alone, on either engine, never refused for what it asks.
#[test]
fn a_resume_asking_more_is_judged_by_the_run_alone_on_a_shared_store() {
    let srv = shared();
    let run = srv.start_probe("alpha", json!({"op": "echo"}));
    srv.wait_final("alpha", &run);
    let r = srv.post(
        &format!("/api/v1/runs/{run}/resume"),
        srv.token("alpha", "operator"),
        json!({"resend_turn": true, "allow_policy_change": true, "accept_config_change": true}),
    );
    assert_eq!(r.status, 409, "{}", r.body);
    let said = r.error();
    assert!(said.contains("already ended (done)"), "{said}");
}

#[test]
fn runs_resume_on_a_shared_store_claims_the_run_and_dead_workers_are_forgotten() {
    if on_postgres() {
        eprintln!(
            "skipped on the PostgreSQL pass: it makes a PostgreSQL store of its own, in the default pass"
        );
        return;
    }
    let store = PgServer::shared(false).unwrap().fresh_store().unwrap();
    let dir = scratch();
    let srv = server_on(dir.path(), &store, 64);
    // A worker that stopped reporting an hour ago.
    let hour_ago = loopbox::db::now_ms() - 3_600_000;
    pg(&store)
        .exec(
            "INSERT INTO workers (id, host, slots, held, started_at, heartbeat_at) VALUES ('ghost 1 1', 'gone', 4, '[]', ?1, ?1)",
            [hour_ago],
        )
        .unwrap();
    let mut first = worker(&srv, None);
    let run = srv.start_probe("solo", json!({"op": "exec", "argv": ["sleep", "30"]}));
    srv.wait_run("solo", &run, |v| {
        v["journal"].as_array().is_some_and(|j| !j.is_empty())
    });
    // The operator trusts the tenant's config, as `loopbox runs` asks of any config.
    let cli = |args: &[&str]| {
        Command::new(BIN)
            .args(args)
            .env("XDG_DATA_HOME", crate::common::data_home())
            .current_dir(srv.root("solo").join("proj"))
            .output()
            .unwrap()
    };
    let tenant_config = srv.dir.join("data/tenants/solo/loopbox.toml");
    let out = cli(&["trust", tenant_config.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The live worker's run is not `runs resume`'s to take.
    let resume = || cli(&["runs", "--store", &store, "resume", &run]);
    let out = resume();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(9), "{said}");
    assert!(
        said.contains(&format!("run {run} is held by the worker")),
        "{said}"
    );
    // The ghost is gone within a renewal (TTL/3) of the worker starting, and that is audited.
    let started = Instant::now();
    let ghosts = || {
        pg(&store)
            .query("SELECT id FROM workers WHERE id = 'ghost 1 1'", [], |r| {
                r.get::<_, String>(0)
            })
            .unwrap()
            .len()
    };
    while ghosts() > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the dead worker's row is still there"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = srv.serve_cmd(&["audit", "--json"]);
    let audit: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        audit["audit"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["act"] == "workers.forget" && a["target"] == "ghost 1 1"),
        "{audit:#}"
    );
    // Drained: the run is handed back, and `runs resume` claims it (its epoch grows).
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(first.id() as i32, libc::SIGTERM) };
    first.wait().unwrap();
    let epoch = || -> i64 {
        pg(&store)
            .query_row("SELECT lease_epoch FROM runs WHERE id = ?1", [&run], |r| {
                r.get(0)
            })
            .unwrap()
    };
    let before = epoch();
    let out = resume();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(epoch(), before + 1, "resumed through a claim");
    let v = srv.wait_final("solo", &run);
    assert_eq!(
        v["outcome"]["data"]["err"]["kind"], "outcome-unknown",
        "{v:#}"
    );
}
