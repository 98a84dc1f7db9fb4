//! A server of its own per test: killed with SIGKILL while an approval is
//! pending, stopped with SIGTERM while a run works, and refused configs.

use std::time::{Duration, Instant};

use serde_json::json;

use super::{Srv, scratch, serve_cmd};

/// On this run's engine (`LOOPBOX_TEST_ENGINE`): on PostgreSQL the server
/// keeps nothing in its data directory's file, and its worker is killed with it.
#[test]
fn kill_9_while_an_approval_is_pending_then_restart_and_approve_runs_the_action_once() {
    kill_9_then_restart(super::engine_store().as_deref());
}

fn kill_9_then_restart(store: Option<&str>) {
    let dir = scratch();
    let mut srv = Srv::prepare_on(dir.path(), "", &[("solo", "max_running = 1\n")], store);
    srv.start();
    let run = srv.start_probe(
        "solo",
        json!({"op": "exec", "argv": ["tee", "-a", "count.txt"], "stdin": "ran\n"}),
    );
    let a = srv.pending_approval("solo", &run);
    // Beside it, a run in the middle of an action and one queued behind it (one at a time).
    let sleeper = srv.start_probe("solo", json!({"op": "exec", "argv": ["sleep", "30"]}));
    srv.wait_run("solo", &sleeper, |v| {
        v["journal"].as_array().is_some_and(|j| !j.is_empty())
    });
    let queued = srv.start_probe("solo", json!({"op": "exec", "argv": ["echo", "queued"]}));
    assert_eq!(
        srv.get(
            &format!("/api/v1/runs/{queued}"),
            srv.token("solo", "viewer")
        )
        .json()["status"],
        "queued"
    );
    srv.kill9();
    srv.start();
    // Nothing ran, the approval is still pending; the killed run and the queue go on by themselves.
    let count = srv.root("solo").join("proj/count.txt");
    assert!(!count.exists());
    let v = srv
        .get(&format!("/api/v1/runs/{run}"), srv.token("solo", "viewer"))
        .json();
    assert_eq!(
        (v["status"].as_str(), v["approvals"][0]["status"].as_str()),
        (Some("waiting"), Some("pending")),
        "{v:#}"
    );
    let v = srv.wait_final("solo", &sleeper);
    assert_eq!(
        v["outcome"]["data"]["err"]["kind"], "outcome-unknown",
        "{v:#}"
    );
    let v = srv.wait_final("solo", &queued);
    assert_eq!(v["outcome"]["data"]["ok"]["stdout"], "queued\n", "{v:#}");
    let r = srv.post(
        &format!("/api/v1/approvals/{}/approve", a["id"].as_str().unwrap()),
        srv.token("solo", "approver"),
        json!({"digest": a["digest"]}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let v = srv.wait_final("solo", &run);
    assert_eq!(v["status"], "done", "{v:#}");
    assert_eq!(
        std::fs::read_to_string(&count).unwrap(),
        "ran\n",
        "the action ran exactly once"
    );
    // And once more after another kill: a finished run is not driven again.
    srv.kill9();
    srv.start();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(std::fs::read_to_string(&count).unwrap(), "ran\n");
    let v = srv
        .get(&format!("/api/v1/runs/{run}"), srv.token("solo", "viewer"))
        .json();
    assert_eq!(v["journal"].as_array().unwrap().len(), 1, "{v:#}");
    if store.is_some() {
        // The worker reports itself; another tenant's runs would not be named.
        let w = srv
            .get("/api/v1/workers", srv.token("solo", "viewer"))
            .json();
        let ws = w["workers"].as_array().unwrap();
        assert!(
            ws.iter()
                .any(|w| w["slots"] == 4 && w["heartbeat"].is_string()),
            "{w:#}"
        );
    }
    // Where the runs were kept.
    assert_eq!(
        srv.dir.join("data/loopbox.db").exists(),
        store.is_none(),
        "the store in use"
    );
}

/// SIGTERM to what drives the run: the server with its own store, which
/// records the run interrupted for the next server; on a shared store the
/// `loopbox worker`, which drains: it hands the run back (queued) for
/// another worker.
#[test]
fn sigterm_stops_runs_where_they_stand_and_the_next_server_resumes_them() {
    let dir = scratch();
    let mut srv = Srv::prepare(dir.path(), "", &[("solo", "")]);
    srv.start();
    let run = srv.start_probe("solo", json!({"op": "exec", "argv": ["sleep", "30"]}));
    srv.wait_run("solo", &run, |v| {
        v["journal"].as_array().is_some_and(|j| !j.is_empty())
    });
    let asked = Instant::now();
    if srv.store.is_some() {
        let mut worker = srv.worker.take().unwrap();
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(worker.id() as i32, libc::SIGTERM) };
        let status = loop {
            if let Some(s) = worker.try_wait().unwrap() {
                break s;
            }
            assert!(
                asked.elapsed() < Duration::from_secs(10),
                "the worker did not drain within 10 s of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "{status:?}");
        let stored = srv.store().existing_run(&run).unwrap();
        assert_eq!(
            (stored.status.as_str(), stored.lease),
            ("queued", None),
            "handed back"
        );
        // The worker reported it holds nothing now.
        let w = srv
            .get("/api/v1/workers", srv.token("solo", "viewer"))
            .json();
        assert!(
            w["workers"]
                .as_array()
                .unwrap()
                .iter()
                .all(|w| w["held"] == 0),
            "{w:#}"
        );
        srv.worker = Some(srv.spawn_worker(&["--lease-ms", "1000"]));
    } else {
        let status = srv.term();
        assert!(status.success(), "{status:?}");
        assert!(
            asked.elapsed() < Duration::from_secs(10),
            "{:?}",
            asked.elapsed()
        );
        let stored = srv.store().existing_run(&run).unwrap();
        assert_eq!(stored.status.as_str(), "interrupted");
        // The next incarnation picks it up.
        srv.start();
    }
    // The action in flight is outcome-unknown to the policy.
    let v = srv.wait_final("solo", &run);
    assert_eq!(
        v["outcome"]["data"]["err"]["kind"], "outcome-unknown",
        "{v:#}"
    );
}

#[test]
fn a_bad_server_config_or_data_directory_is_refused_naming_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("roots/a");
    std::fs::create_dir_all(&root).unwrap();
    let config = dir.path().join("loopbox-server.toml");
    let cases = [
        ("[server]\nlisten = \"127.0.0.1:0\"\nlisen = 1\n", "line 3"),
        (
            "[server]\ndata = \"data\"\n[tenants.a]\nroots = [\"roots/a\"]\nmax_runing = 1\n",
            "unknown field `max_runing`",
        ),
        (
            "[server]\ndata = \"roots/a/data\"\n[tenants.a]\nroots = [\"roots/a\"]\n",
            "is inside",
        ),
        (
            "[server]\ndata = \"data\"\n[tenants.a]\nroots = [\"roots/a\"]\n[tenants.b]\nroots = [\"roots/a\"]\n",
            "overlaps",
        ),
        (
            "[server]\ndata = \"data\"\n[tenants.a]\nroots = [\"roots/a\"]\nenv_file = \"a.env\"\n",
            "env file",
        ),
    ];
    std::fs::write(dir.path().join("a.env"), "KEY=1\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        dir.path().join("a.env"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    for (text, want) in cases {
        std::fs::write(&config, text).unwrap();
        let out = serve_cmd(&config, &[]);
        assert_eq!(out.status.code(), Some(2), "{text}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{text}: {err}");
        assert!(!root.join("data").exists());
    }
    // No data directory at all says how to give one.
    std::fs::write(&config, "[server]\nlisten = \"127.0.0.1:0\"\n").unwrap();
    let out = serve_cmd(&config, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no data directory: give --data DIR"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn log_streams_are_bounded_and_the_refusal_names_the_limit() {
    use std::io::{Read, Write};
    let dir = scratch();
    let mut srv = Srv::prepare(dir.path(), "max_log_streams = 2\n", &[("solo", "")]);
    srv.start();
    let run = srv.start_probe("solo", json!({"op": "echo", "then": "ask"}));
    srv.wait_run("solo", &run, |v| v["status"] == "waiting");
    let path = format!("/api/v1/runs/{run}/log");
    let open = || {
        let mut s = std::net::TcpStream::connect(&srv.addr).unwrap();
        let token = srv.token("solo", "viewer");
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n")
                .as_bytes(),
        )
        .unwrap();
        let mut head = [0u8; 12];
        s.read_exact(&mut head).unwrap();
        assert_eq!(&head, b"HTTP/1.1 200");
        s
    };
    let held = [open(), open()];
    let r = srv.get(&path, srv.token("solo", "viewer"));
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(
        r.error(),
        "2 log streams are open, the server's limit (server.max_log_streams = 2); close one, or try again later"
    );
    drop(held);
    // The audit log from the command line: the acts of the run's start, in order.
    let out = srv.serve_cmd(&["audit", "--tenant", "solo", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let audit: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let acts: Vec<&str> = audit["audit"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["act"].as_str().unwrap())
        .collect();
    assert_eq!(
        acts,
        [
            "start",
            "token.create",
            "token.create",
            "token.create",
            "token.create",
            "config.set"
        ]
    );
    let text = srv.serve_cmd(&["audit"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.lines().next().unwrap().contains("solo/operator-1") && text.contains(&run),
        "{text}"
    );
}

#[test]
fn one_tenant_holding_log_streams_open_leaves_the_others_theirs() {
    use std::io::{Read, Write};
    let dir = scratch();
    let mut srv = Srv::prepare(
        dir.path(),
        "max_log_streams = 4\n",
        &[("greedy", "max_log_streams = 2\n"), ("other", "")],
    );
    srv.start();
    let open = |tenant: &str, run: &str| {
        let mut s = std::net::TcpStream::connect(&srv.addr).unwrap();
        let token = srv.token(tenant, "viewer");
        s.write_all(
            format!("GET /api/v1/runs/{run}/log HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n")
                .as_bytes(),
        )
        .unwrap();
        let mut head = [0u8; 12];
        s.read_exact(&mut head).unwrap();
        assert_eq!(&head, b"HTTP/1.1 200", "{tenant}");
        s
    };
    let greedy = srv.start_probe("greedy", json!({"op": "echo", "then": "ask"}));
    srv.wait_run("greedy", &greedy, |v| v["status"] == "waiting");
    let held = [open("greedy", &greedy), open("greedy", &greedy)];
    // A third: read with a deadline, so a stream granted after all fails here, not hangs.
    let mut s = std::net::TcpStream::connect(&srv.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let token = srv.token("greedy", "viewer");
    s.write_all(
        format!("GET /api/v1/runs/{greedy}/log HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let r = super::parse_response(&raw);
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(
        r.error(),
        "tenant `greedy` holds 2 log streams open, its limit (tenants.greedy.max_log_streams = 2); close one, or try again later"
    );
    // The server's own limit is not reached: the other tenant streams.
    let mine = srv.start_probe("other", json!({"op": "echo", "then": "ask"}));
    srv.wait_run("other", &mine, |v| v["status"] == "waiting");
    let _theirs = open("other", &mine);
    drop(held);
}

#[test]
fn an_approval_nobody_decides_in_time_turns_into_a_decline() {
    let dir = scratch();
    let mut srv = Srv::prepare(dir.path(), "", &[("solo", "")]);
    srv.set_config(
        "solo",
        &format!(
            "{}\n[approvals]\ntimeout = \"1s\"\n",
            super::tenant_config()
        ),
    );
    srv.start();
    let run = srv.start_probe(
        "solo",
        json!({"op": "exec", "argv": ["tee", "-a", "count.txt"], "stdin": "late\n"}),
    );
    let a = srv.pending_approval("solo", &run);
    let v = srv.wait_final("solo", &run);
    assert_eq!(v["outcome"]["data"]["err"]["kind"], "declined", "{v:#}");
    assert!(!srv.root("solo").join("proj/count.txt").exists());
    let id = a["id"].as_str().unwrap();
    let r = srv.post(
        &format!("/api/v1/approvals/{id}/approve"),
        srv.token("solo", "approver"),
        json!({"digest": a["digest"]}),
    );
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(r.error().contains("expired"), "{}", r.body);
    let audit = srv.get("/api/v1/audit", srv.token("solo", "viewer")).json();
    assert!(
        audit["audit"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["act"] == "expire" && e["actor"] == "loopbox" && e["target"] == id),
        "{audit:#}"
    );
}
