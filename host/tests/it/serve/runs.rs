//! Runs through the API: started, shown with their journal, followed as
//! Server-Sent Events (resumable), answered, ticked, cancelled; approvals
//! decided; dashboard sessions with their cookie and CSRF token.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{http, shared};

/// The `data:` of each `event: NAME` of a run's log stream, read until `event: end`.
fn events(
    addr: &str,
    path: &str,
    token: &str,
    last_event_id: Option<&str>,
) -> Vec<(String, Value)> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n"
    );
    if let Some(id) = last_event_id {
        req.push_str(&format!("Last-Event-ID: {id}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&raw).contains("event: end") {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no end: {}",
            String::from_utf8_lossy(&raw)
        );
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) => panic!("{e}"),
        }
    }
    let text = String::from_utf8_lossy(&raw).to_string();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        text.to_ascii_lowercase()
            .contains("content-type: text/event-stream"),
        "{text}"
    );
    let mut out = vec![];
    let mut name = String::new();
    for line in text.lines() {
        if let Some(n) = line.strip_prefix("event: ") {
            name = n.to_string();
        } else if let Some(d) = line.strip_prefix("data: ") {
            out.push((name.clone(), serde_json::from_str(d).unwrap()));
        }
    }
    out
}

#[test]
fn a_run_is_started_shown_and_its_log_followed_and_resumed_from_an_event_id() {
    let srv = shared();
    let run = srv.start_probe("alpha", json!({"op": "exec", "argv": ["echo", "hello"]}));
    let v = srv.wait_final("alpha", &run);
    assert_eq!(v["status"], "done", "{v:#}");
    assert_eq!(v["started_by"], "alpha/operator-1");
    assert_eq!(v["grants"], "[policies.probe]");
    assert_eq!(v["policy_name"], "probe");
    let j = &v["journal"][0];
    assert_eq!(
        (
            j["kind"].as_str(),
            j["outcome"].as_str(),
            j["exit_code"].as_i64()
        ),
        (Some("shell"), Some("ok"), Some(0)),
        "{v:#}"
    );
    assert!(j["duration_ms"].is_u64(), "{j}");
    assert_eq!(v["outcome"]["data"]["ok"]["stdout"], "hello\n");
    // The list shows it, newest first, and pages.
    let list = srv
        .get(
            "/api/v1/runs?status=done&policy=probe&limit=1",
            srv.token("alpha", "viewer"),
        )
        .json();
    assert_eq!(list["runs"].as_array().unwrap().len(), 1);
    let next = list["next"].as_str().unwrap().to_string();
    let older = srv
        .get(
            &format!("/api/v1/runs?status=done&limit=500&before={next}"),
            srv.token("alpha", "viewer"),
        )
        .json();
    assert!(
        older["runs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["id"] != next.as_str())
    );

    // A run's view is bounded whatever the run holds: output is cut at 4 KiB.
    let big = srv.start_probe("alpha", json!({"op": "exec_big", "bytes": 10000}));
    let v = srv.wait_final("alpha", &big);
    assert_eq!(
        v["journal"][0]["stdout"].as_str().unwrap().len(),
        4096,
        "{v:#}"
    );
    assert!(
        v["journal"][0]["request"]
            .as_str()
            .unwrap()
            .ends_with(" bytes in all)"),
        "{v:#}"
    );
    assert_eq!(v["journal_total"], 1);

    let path = format!("/api/v1/runs/{run}/log");
    let token = srv.token("alpha", "viewer");
    let all = events(&srv.addr, &path, token, None);
    let logs: Vec<&Value> = all
        .iter()
        .filter(|(n, _)| n == "log")
        .map(|(_, d)| d)
        .collect();
    assert!(
        logs.iter()
            .any(|l| l["message"].as_str().unwrap().contains("ran `echo hello`")),
        "{all:?}"
    );
    assert_eq!(
        all.last().unwrap(),
        &("end".to_string(), json!({"status": "done"}))
    );
    // Reconnecting with the last id seen sends only what came after it.
    let first = logs[0]["seq"].as_i64().unwrap();
    let rest = events(&srv.addr, &path, token, Some(&first.to_string()));
    let seqs: Vec<i64> = rest
        .iter()
        .filter(|(n, _)| n == "log")
        .map(|(_, d)| d["seq"].as_i64().unwrap())
        .collect();
    assert_eq!(
        seqs,
        logs[1..]
            .iter()
            .map(|l| l["seq"].as_i64().unwrap())
            .collect::<Vec<_>>()
    );
    let none = events(&srv.addr, &format!("{path}?after=100000"), token, None);
    assert_eq!(none, vec![("end".to_string(), json!({"status": "done"}))]);
}

#[test]
fn a_run_is_answered_ticked_and_cancelled() {
    let srv = shared();
    let op = srv.token("alpha", "operator");
    // An `ask`: the run waits; an answer goes on with it.
    let asks = srv.start_probe("alpha", json!({"op": "echo", "then": "ask"}));
    srv.wait_run("alpha", &asks, |v| v["status"] == "waiting");
    // A tick is not what it waits for: refused, in the CLI's words, nothing changed.
    let r = srv.post(
        &format!("/api/v1/runs/{asks}/tick"),
        op,
        json!({"payload": {"op": "echo"}}),
    );
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(
        r.error(),
        format!(
            "run {asks} is not waiting for a tick; it waits for an answer: POST /api/v1/runs/{asks}/answer"
        )
    );
    let r = srv.post(
        &format!("/api/v1/runs/{asks}/answer"),
        op,
        json!({"text": "blue"}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let v = srv.wait_final("alpha", &asks);
    assert_eq!(v["outcome"]["summary"], "answer: blue", "{v:#}");
    let r = srv.post(
        &format!("/api/v1/runs/{asks}/answer"),
        op,
        json!({"text": "again"}),
    );
    assert_eq!(r.status, 409);
    assert!(r.error().contains("already ended (done)"), "{}", r.body);

    // A `pass` outside a turn: the run waits for events; a tick goes on with it.
    let waits = srv.start_probe("alpha", json!({"op": "echo", "then": "pass"}));
    srv.wait_run("alpha", &waits, |v| v["status"] == "waiting");
    let r = srv.post(
        &format!("/api/v1/runs/{waits}/tick"),
        op,
        json!({"payload": {"op": "echo", "n": 2}}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let v = srv.wait_final("alpha", &waits);
    assert_eq!(v["outcome"]["data"]["n"], 2, "{v:#}");

    // A waiting run is cancelled at once; a running one at its next step.
    let parked = srv.start_probe("alpha", json!({"op": "echo", "then": "ask"}));
    srv.wait_run("alpha", &parked, |v| v["status"] == "waiting");
    let r = srv.post(&format!("/api/v1/runs/{parked}/cancel"), op, json!({}));
    assert_eq!(
        (r.status, r.json()["status"].as_str()),
        (200, Some("cancelled")),
        "{}",
        r.body
    );
    let busy = srv.start_probe("alpha", json!({"op": "exec", "argv": ["sleep", "30.173"]}));
    srv.wait_run("alpha", &busy, |v| {
        v["driven"] == true && v["journal"].as_array().is_some_and(|j| !j.is_empty())
    });
    let asked = Instant::now();
    let r = srv.post(&format!("/api/v1/runs/{busy}/cancel"), op, json!({}));
    assert_eq!(
        (r.status, r.json()["status"].as_str()),
        (200, Some("cancelled")),
        "{}",
        r.body
    );
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "{:?}",
        asked.elapsed()
    );
    // Its command is killed by whoever drives it (the server, or a worker on a shared store).
    while super::scale::processes(&["sleep", "30.173"]) > 0 {
        assert!(
            asked.elapsed() < Duration::from_secs(10),
            "the cancelled run's command still runs"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = srv.post(&format!("/api/v1/runs/{busy}/cancel"), op, json!({}));
    assert_eq!(r.status, 409);
    assert_eq!(
        r.error(),
        format!("run {busy} already ended (cancelled); there is nothing to cancel")
    );
    // Each act is in the audit log.
    let audit = srv
        .get("/api/v1/audit?limit=1000", srv.token("alpha", "viewer"))
        .json();
    let acts: Vec<(String, String, String)> = audit["audit"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["act"].as_str().unwrap().into(),
                a["target"].as_str().unwrap().into(),
                a["outcome"].as_str().unwrap().into(),
            )
        })
        .collect();
    for want in [
        ("start", asks.as_str(), "ok"),
        ("answer", asks.as_str(), "ok"),
        ("tick", waits.as_str(), "ok"),
        ("cancel", parked.as_str(), "ok"),
        ("cancel", busy.as_str(), "ok"),
    ] {
        assert!(
            acts.iter()
                .any(|(a, t, o)| (a.as_str(), t.as_str(), o.as_str()) == want),
            "{want:?} in {acts:?}"
        );
    }
    assert!(
        acts.iter()
            .any(|(a, t, o)| a == "cancel" && t == &busy && o.starts_with("refused: run")),
        "{acts:?}"
    );
}

#[test]
fn an_approved_action_runs_once_and_a_denied_one_is_declined() {
    let srv = shared();
    let root = srv.root("gamma").join("proj");
    let count = root.join("count.txt");
    let _ = std::fs::remove_file(&count);
    let run = srv.start_probe(
        "gamma",
        json!({"op": "exec", "argv": ["tee", "-a", "count.txt"], "stdin": "ran\n"}),
    );
    let a = srv.pending_approval("gamma", &run);
    assert_eq!(a["what"], "exec `tee -a count.txt`");
    assert_eq!(
        a["request"]["request"]["argv"],
        json!(["tee", "-a", "count.txt"])
    );
    assert!(
        a["request"]["request"]["program"]
            .as_str()
            .unwrap()
            .ends_with("/tee"),
        "{a}"
    );
    let id = a["id"].as_str().unwrap();
    let r = srv.post(
        &format!("/api/v1/approvals/{id}/approve"),
        srv.token("gamma", "approver"),
        json!({"digest": a["digest"], "reason": "looks right"}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["decided_by"], "gamma/approver-1");
    let v = srv.wait_final("gamma", &run);
    assert_eq!(v["outcome"]["data"]["ok"]["exit_code"], 0, "{v:#}");
    assert_eq!(std::fs::read_to_string(&count).unwrap(), "ran\n");

    let run = srv.start_probe(
        "gamma",
        json!({"op": "exec", "argv": ["tee", "-a", "count.txt"], "stdin": "again\n"}),
    );
    let a = srv.pending_approval("gamma", &run);
    let r = srv.post(
        &format!("/api/v1/approvals/{}/deny", a["id"].as_str().unwrap()),
        srv.token("gamma", "admin"),
        json!({"reason": "no more"}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let v = srv.wait_final("gamma", &run);
    assert_eq!(v["outcome"]["data"]["err"]["kind"], "declined", "{v:#}");
    assert!(
        v["outcome"]["data"]["err"]["message"]
            .as_str()
            .unwrap()
            .contains("no more"),
        "{v:#}"
    );
    assert_eq!(std::fs::read_to_string(&count).unwrap(), "ran\n");
}

#[test]
fn a_session_cookie_is_http_only_strict_and_needs_its_csrf_token_to_act() {
    let srv = shared();
    let token = srv.token("alpha", "operator");
    let body = json!({"token": token}).to_string();
    let r = http(
        &srv.addr,
        "POST",
        "/api/v1/session",
        &[("Content-Type", "application/json")],
        Some(body.as_bytes()),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let cookie = r.header("set-cookie").unwrap().to_string();
    assert!(
        cookie.contains("HttpOnly")
            && cookie.contains("SameSite=Strict")
            && cookie.contains("Path=/"),
        "{cookie}"
    );
    assert!(!cookie.contains("Secure"), "loopback: no Secure: {cookie}");
    let pair = cookie.split(';').next().unwrap().to_string();
    let csrf = r.json()["csrf_token"].as_str().unwrap().to_string();
    let who = http(
        &srv.addr,
        "GET",
        "/api/v1/session",
        &[("Cookie", &pair)],
        None,
    )
    .json();
    assert_eq!(
        (
            who["tenant"].as_str(),
            who["role"].as_str(),
            who["csrf_token"].as_str()
        ),
        (Some("alpha"), Some("operator"), Some(csrf.as_str()))
    );
    // Reading needs no CSRF token.
    assert_eq!(
        http(&srv.addr, "GET", "/api/v1/runs", &[("Cookie", &pair)], None).status,
        200
    );
    let start =
        json!({"policy": "probe", "workspace": "proj", "input": {"op": "echo"}}).to_string();
    let runs_before = srv.get("/api/v1/runs?limit=500", token).json()["runs"]
        .as_array()
        .unwrap()
        .len();
    for headers in [
        vec![
            ("Cookie", pair.as_str()),
            ("Content-Type", "application/json"),
        ],
        vec![
            ("Cookie", pair.as_str()),
            ("Content-Type", "application/json"),
            ("X-CSRF-Token", "forged"),
        ],
        vec![
            ("Cookie", pair.as_str()),
            ("Content-Type", "application/json"),
            ("X-CSRF-Token", &csrf[..csrf.len() - 1]),
        ],
    ] {
        let r = http(
            &srv.addr,
            "POST",
            "/api/v1/runs",
            &headers,
            Some(start.as_bytes()),
        );
        assert_eq!(r.status, 403, "{}", r.body);
        assert!(
            r.error().starts_with("the CSRF token is missing or wrong"),
            "{}",
            r.body
        );
    }
    // A form with a forged field (the token's first character changed) is refused the same way.
    let forged = if csrf.starts_with('x') { 'y' } else { 'x' };
    let form = format!(
        "policy=probe&workspace=proj&input=%7B%7D&csrf_token={forged}{}",
        &csrf[1..]
    );
    let r = http(
        &srv.addr,
        "POST",
        "/api/v1/runs",
        &[
            ("Cookie", &pair),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        Some(form.as_bytes()),
    );
    assert_eq!(r.status, 403, "{}", r.body);
    // From another site, even with the token: refused.
    let r = http(
        &srv.addr,
        "POST",
        "/api/v1/runs",
        &[
            ("Cookie", &pair),
            ("Content-Type", "application/json"),
            ("X-CSRF-Token", &csrf),
            ("Origin", "http://evil.example"),
        ],
        Some(start.as_bytes()),
    );
    assert_eq!(r.status, 403, "{}", r.body);
    let runs_after = srv.get("/api/v1/runs?limit=500", token).json()["runs"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(runs_before, runs_after, "no refused request started a run");
    // With it, by header or by form field, it acts.
    let r = http(
        &srv.addr,
        "POST",
        "/api/v1/runs",
        &[
            ("Cookie", &pair),
            ("Content-Type", "application/json"),
            ("X-CSRF-Token", &csrf),
        ],
        Some(start.as_bytes()),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let form =
        format!("policy=probe&workspace=proj&input=%7B%22op%22%3A%22echo%22%7D&csrf_token={csrf}");
    let r = http(
        &srv.addr,
        "POST",
        "/api/v1/runs",
        &[
            ("Cookie", &pair),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        Some(form.as_bytes()),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    // Signing out ends the session.
    let r = http(
        &srv.addr,
        "DELETE",
        "/api/v1/session",
        &[("Cookie", &pair), ("X-CSRF-Token", &csrf)],
        None,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let r = http(&srv.addr, "GET", "/api/v1/runs", &[("Cookie", &pair)], None);
    assert_eq!(r.status, 401);
    assert!(r.error().contains("your session has ended"), "{}", r.body);
}

#[test]
fn a_sleeping_run_gives_its_slot_back_and_the_server_wakes_it_when_due() {
    let srv = shared();
    let sleeps = srv.start_probe(
        "alpha",
        json!({"op": "echo", "then": "sleep", "sleep_ms": 1500, "tick": {"op": "echo", "n": 7}}),
    );
    // Parked, not driven: its slot is free while it sleeps.
    let v = srv.wait_run("alpha", &sleeps, |v| v["status"] == "waiting");
    assert_eq!(v["driven"], false, "{v:#}");
    let v = srv.wait_final("alpha", &sleeps);
    assert_eq!(
        (v["status"].as_str(), v["outcome"]["data"]["n"].as_i64()),
        (Some("done"), Some(7)),
        "the sweep woke it and its tick was delivered: {v:#}"
    );
}
