//! Issue 45, item 7: what docs/serve.md promises of the API. Every time it
//! returns is RFC 3339 (no epoch `_ms` integers); a request digest's first 12
//! digits name it as on the command line (`loopbox runs approve --digest`);
//! an installed `builtin:fsm` started without a loop is refused up front.

use serde_json::{Value, json};

use super::{Srv, scratch, tenant_config};

/// `2026-11-27T00:15:53.565Z`: what the API writes for a time.
fn is_rfc3339(v: &Value) -> bool {
    v.as_str().is_some_and(|t| {
        let b = t.as_bytes();
        b.len() == 24
            && b[4] == b'-'
            && b[10] == b'T'
            && b[19] == b'.'
            && b[23] == b'Z'
            && t[..4].parse::<u32>().is_ok_and(|y| y >= 2020)
    })
}

/// Every `_ms` key of `v` that holds an epoch time (ms past 2001; a duration
/// such as a `timeout_ms` is never that long), with where it was.
fn ms_keys(v: &Value, at: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                if k.ends_with("_ms") && x.as_i64().is_some_and(|n| n >= 1_000_000_000_000) {
                    out.push(format!("{at}.{k}"));
                }
                ms_keys(x, &format!("{at}.{k}"), out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| ms_keys(x, at, out)),
        _ => {}
    }
}

/// A server whose tenant `t` has the probe and `builtin:fsm` installed (as `loop`).
fn server(dir: &std::path::Path) -> Srv {
    let mut srv = Srv::prepare(dir, "", &[("t", "")]);
    srv.set_config(
        "t",
        &format!(
            "{}\n[policies.loop]\nsource = \"builtin:fsm\"\n",
            tenant_config()
        ),
    );
    srv.start();
    srv
}

/// A run waiting for an approval of `tee -a count.txt`: the run, the
/// approval as listed, and its approve path.
fn pending(srv: &Srv) -> (String, Value, String) {
    let run = srv.start_probe(
        "t",
        json!({"op": "exec", "argv": ["tee", "-a", "count.txt"], "stdin": "once\n"}),
    );
    let a = srv.pending_approval("t", &run);
    let path = format!("/api/v1/approvals/{}/approve", a["id"].as_str().unwrap());
    (run, a, path)
}

#[test]
fn an_installed_fsm_started_without_its_loop_is_refused_saying_what_is_missing() {
    let dir = scratch();
    let srv = server(dir.path());
    let op = srv.token("t", "operator");
    let runs = || {
        srv.get("/api/v1/runs", op).json()["runs"]
            .as_array()
            .unwrap()
            .len()
    };
    let before = runs();
    for input in [None, Some(json!({}))] {
        let mut body = json!({"policy": "loop", "workspace": "proj"});
        if let Some(i) = input {
            body["input"] = i;
        }
        let r = srv.post("/api/v1/runs", op, body);
        assert_eq!(r.status, 400, "{}", r.body);
        let said = r.error();
        assert!(
            said.contains("builtin:fsm")
                && said.contains("needs `yaml`")
                && said.contains("\"loop\""),
            "{said}"
        );
    }
    assert_eq!(before, runs(), "nothing was started");
    // With its loop as input it runs, as the docs say.
    let r = srv.post(
        "/api/v1/runs",
        op,
        json!({"policy": "loop", "workspace": "proj", "input": {"yaml": "name: l\ninitial: done\nstates:\n  done:\n    terminal: true\n"}}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let v = srv.wait_final("t", r.json()["id"].as_str().unwrap());
    assert_eq!(v["status"], "done", "{v:#}");
}

#[test]
fn a_digest_is_named_by_its_first_12_digits_as_on_the_command_line() {
    let dir = scratch();
    let srv = server(dir.path());
    let approver = srv.token("t", "approver");
    let (run, a, path) = pending(&srv);
    let digest = a["digest"].as_str().unwrap().to_string();
    // 11 digits do not name it: 400, saying what to give (not "not the one you reviewed").
    let r = srv.post(&path, approver, json!({"digest": &digest[..11]}));
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.error().contains("its first 12 hex digits or more")
            && !r.error().contains("not the one you reviewed"),
        "{}",
        r.body
    );
    // Another request's 12 digits are not it.
    let other = if digest.starts_with('0') { "1" } else { "0" }.repeat(12);
    let r = srv.post(&path, approver, json!({"digest": other}));
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(r.error().contains("not the one you reviewed"), "{}", r.body);
    // Its own first 12 digits approve it, as `loopbox runs approve --digest` does.
    let r = srv.post(&path, approver, json!({"digest": &digest[..12]}));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["status"], "approved", "{}", r.body);
    let v = srv.wait_final("t", &run);
    assert_eq!(v["status"], "done", "{v:#}");
    assert_eq!(
        std::fs::read_to_string(srv.root("t").join("proj/count.txt")).unwrap(),
        "once\n"
    );
}

#[test]
fn every_time_the_api_returns_is_rfc3339() {
    let dir = scratch();
    let srv = server(dir.path());
    let op = srv.token("t", "operator");
    let (run, a, path) = pending(&srv);
    // The pending approval's times, as listed and as shown.
    let shown = srv
        .get(
            &format!("/api/v1/approvals/{}", a["id"].as_str().unwrap()),
            op,
        )
        .json();
    for v in [&a, &shown] {
        assert!(
            is_rfc3339(&v["requested"]) && is_rfc3339(&v["deadline"]),
            "{v:#}"
        );
        assert!(v["decided"].is_null() && v["consumed"].is_null(), "{v:#}");
    }
    let r = srv.post(
        &path,
        srv.token("t", "approver"),
        json!({"digest": a["digest"]}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(is_rfc3339(&r.json()["decided"]), "{}", r.body);
    srv.wait_final("t", &run);
    // A token made and listed.
    let admin = srv.token("t", "admin");
    let made = srv.post(
        "/api/v1/tokens",
        admin,
        json!({"name": "times", "role": "viewer"}),
    );
    assert_eq!(made.status, 201, "{}", made.body);
    assert!(is_rfc3339(&made.json()["info"]["created"]), "{}", made.body);
    let tokens = srv.get("/api/v1/tokens", admin).json();
    assert!(
        tokens["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| is_rfc3339(&t["created"])),
        "{tokens:#}"
    );
    // The command line's listing has the API's shape.
    let out = srv.serve_cmd(&["token", "list", "--tenant", "t", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut found = vec![];
    ms_keys(&listed, "token list --json", &mut found);
    assert!(
        found.is_empty()
            && listed["tokens"]
                .as_array()
                .unwrap()
                .iter()
                .all(|t| is_rfc3339(&t["created"])),
        "{listed:#}"
    );
    // The run's approval, decided and consumed.
    let run_json = srv.get(&format!("/api/v1/runs/{run}"), op).json();
    let approval = &run_json["approvals"][0];
    assert!(
        is_rfc3339(&approval["requested"])
            && is_rfc3339(&approval["decided"])
            && is_rfc3339(&approval["consumed"]),
        "{run_json:#}"
    );
    // No epoch integers anywhere the API answers.
    let mut found = vec![];
    for path in [
        "/api/v1/runs".to_string(),
        format!("/api/v1/runs/{run}"),
        "/api/v1/approvals?status=approved".into(),
        "/api/v1/tokens".into(),
        "/api/v1/audit".into(),
        "/api/v1/spend".into(),
        "/api/v1/workers".into(),
        "/api/v1/session".into(),
    ] {
        let r = srv.get(&path, admin);
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        ms_keys(&r.json(), &path, &mut found);
    }
    assert!(found.is_empty(), "epoch times in the API: {found:?}");
}
