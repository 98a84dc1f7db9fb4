//! Bad input: each a clear JSON error with the right status, and nothing
//! changed in the store (its runs, tokens, approvals and files are checked).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::json;

use super::{http, parse_response, shared};

/// What a tenant has in the store: its runs and its live tokens.
fn snapshot(tenant: &str) -> (usize, usize) {
    let srv = shared();
    let runs = srv
        .get("/api/v1/runs?limit=500", srv.token(tenant, "viewer"))
        .json()["runs"]
        .as_array()
        .unwrap()
        .len();
    let tokens = srv.get("/api/v1/tokens", srv.token(tenant, "admin")).json()["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["revoked"].is_null())
        .count();
    (runs, tokens)
}

#[test]
fn oversized_and_malformed_bodies_are_refused_and_start_nothing() {
    let srv = shared();
    let before = snapshot("delta");
    let token = srv.token("delta", "admin");
    // Over server.max_body_bytes (64 KiB here), declared...
    let big = json!({"policy": "probe", "workspace": "proj", "input": {"op": "echo", "pad": "x".repeat(70_000)}});
    let r = srv.post("/api/v1/runs", token, big.clone());
    assert_eq!(r.status, 413, "{}", r.body);
    assert_eq!(
        r.error(),
        "the request body is over the server's limit (server.max_body_bytes = 65536); send less"
    );
    // ... or sent in chunks with no length given.
    let mut s = TcpStream::connect(&srv.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let body = big.to_string();
    let head = format!(
        "POST /api/v1/runs HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
        srv.addr
    );
    s.write_all(head.as_bytes()).unwrap();
    for chunk in body.as_bytes().chunks(8192) {
        if s.write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
            .is_err()
        {
            break;
        }
        let _ = s.write_all(chunk);
        let _ = s.write_all(b"\r\n");
    }
    let _ = s.write_all(b"0\r\n\r\n");
    let mut raw = vec![];
    let _ = s.read_to_end(&mut raw);
    let r = parse_response(&raw);
    assert_eq!(r.status, 413, "{}", r.body);
    assert!(
        r.error().contains("server.max_body_bytes = 65536"),
        "{}",
        r.body
    );

    for (body, status, starts) in [
        (
            "{\"policy\": \"probe\",",
            400,
            "the request body is not valid JSON",
        ),
        ("[1, 2]", 400, "the request body does not fit this request"),
        (
            "{\"policy\": \"probe\", \"workspace\": \"proj\", \"colour\": 1}",
            400,
            "the request body does not fit this request: unknown field `colour`",
        ),
        (
            "{\"policy\": \"probe\", \"workspace\": \"../alpha\"}",
            400,
            "workspace `../alpha` is not inside any of tenant `delta`'s roots",
        ),
        (
            "{\"policy\": \"probe\", \"workspace\": \"/etc\"}",
            400,
            "workspace `/etc` is not inside any of tenant `delta`'s roots",
        ),
        (
            "{\"policy\": \"nothere\", \"workspace\": \"proj\"}",
            400,
            "tenant `delta` has no policy `nothere` installed",
        ),
        (
            "{\"policy\": \"/tmp/x.wasm\", \"workspace\": \"proj\"}",
            400,
            "`/tmp/x.wasm` is not the name of an installed policy",
        ),
        (
            "{\"policy\": \"probe\", \"workspace\": \"proj\", \"input\": \"{not json\"}",
            400,
            "the input is not valid JSON",
        ),
        (
            "{\"loop\": \"../../etc/passwd\", \"workspace\": \"proj\"}",
            400,
            "loop `../../etc/passwd`: a loop is named relative to the workspace, without `..`",
        ),
    ] {
        let r = http(
            &srv.addr,
            "POST",
            "/api/v1/runs",
            &[
                ("Authorization", &format!("Bearer {token}")),
                ("Content-Type", "application/json"),
            ],
            Some(body.as_bytes()),
        );
        assert_eq!(r.status, status, "{body}: {}", r.body);
        assert!(r.error().starts_with(starts), "{body}: {}", r.body);
        assert_eq!(
            r.json()["causes"].as_array().map(|c| c.is_empty()),
            Some(false)
        );
    }
    let r = srv.get("/api/v1/runs?status=sideways", token);
    assert_eq!(
        (r.status, r.error().as_str()),
        (400, "`sideways` is not a run status")
    );
    let r = srv.get("/api/v1/runs?limit=many", token);
    assert_eq!(r.status, 400, "{}", r.body);
    let r = srv.get("/api/v1/nowhere", token);
    assert_eq!(r.status, 404, "{}", r.body);
    let r = srv.call("PATCH", "/api/v1/runs", token, None);
    assert_eq!(r.status, 405, "{}", r.body);
    // A config that does not parse is refused with its line, and the old one stays.
    let old = srv.get("/api/v1/config", token).json()["digest"].clone();
    let r = srv.call(
        "PUT",
        "/api/v1/config",
        token,
        Some(json!({"text": "[shell]\nallow = [[\"ls\"]]\nalow = 1\n"})),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.error().contains("unknown field `alow`") && r.error().contains("line 3"),
        "{}",
        r.body
    );
    assert_eq!(srv.get("/api/v1/config", token).json()["digest"], old);
    assert_eq!(snapshot("delta"), before, "nothing changed");
}

#[test]
fn wrong_and_revoked_tokens_are_refused() {
    let srv = shared();
    let r = srv.get("/api/v1/runs", "not-a-token");
    assert_eq!(r.status, 401);
    assert!(
        r.error().starts_with("the token is not valid"),
        "{}",
        r.body
    );
    let r = http(
        &srv.addr,
        "GET",
        "/api/v1/runs",
        &[("Authorization", "Basic dXNlcjpwYXNz")],
        None,
    );
    assert_eq!(r.status, 401);
    assert!(
        r.error()
            .starts_with("the Authorization header must read `Bearer lbx_…`"),
        "{}",
        r.body
    );
    // A real token with one character changed.
    let good = srv.token("delta", "viewer");
    let mut bad = good.to_string();
    let last = bad.pop().unwrap();
    bad.push(if last == 'A' { 'B' } else { 'A' });
    assert_eq!(srv.get("/api/v1/runs", &bad).status, 401);
    // Revoked with the command line while the server runs: refused at once, sessions too.
    let made = srv.serve_cmd(&[
        "token",
        "create",
        "--tenant",
        "delta",
        "--role",
        "operator",
        "--name",
        "short-lived",
    ]);
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let t = String::from_utf8(made.stdout).unwrap().trim().to_string();
    assert_eq!(srv.get("/api/v1/runs", &t).status, 200);
    let signed = http(
        &srv.addr,
        "POST",
        "/api/v1/session",
        &[("Content-Type", "application/json")],
        Some(json!({"token": t}).to_string().as_bytes()),
    );
    let cookie = signed
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    assert_eq!(
        http(
            &srv.addr,
            "GET",
            "/api/v1/runs",
            &[("Cookie", &cookie)],
            None
        )
        .status,
        200
    );
    let before = snapshot("delta");
    let out = srv.serve_cmd(&[
        "token",
        "revoke",
        "--tenant",
        "delta",
        "--name",
        "short-lived",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = srv.post(
        "/api/v1/runs",
        &t,
        json!({"policy": "probe", "workspace": "proj", "input": {"op": "echo"}}),
    );
    assert_eq!(r.status, 401, "{}", r.body);
    assert_eq!(
        http(
            &srv.addr,
            "GET",
            "/api/v1/runs",
            &[("Cookie", &cookie)],
            None
        )
        .status,
        401
    );
    assert_eq!(snapshot("delta").0, before.0, "no run was started");
    // Revoking again names what is there.
    let out = srv.serve_cmd(&[
        "token",
        "revoke",
        "--tenant",
        "delta",
        "--name",
        "short-lived",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("tenant `delta` has no live token named `short-lived`")
    );
    // A duplicate name is refused; so is a tenant the config lacks.
    let out = srv.serve_cmd(&[
        "token", "create", "--tenant", "delta", "--role", "viewer", "--name", "viewer-1",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("has a token named `viewer-1` already"));
    let out = srv.serve_cmd(&[
        "token", "create", "--tenant", "omega", "--role", "viewer", "--name", "x",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains(
        "there is no tenant `omega` in the server config (it has: alpha, beta, cli, creds, delta, envs, gamma, hitl, loops, tiny, web, webloop)"
    ));
}

#[test]
fn a_replayed_approval_for_a_changed_request_is_refused_and_nothing_runs() {
    let srv = shared();
    let approver = srv.token("beta", "approver");
    // Two runs ask to run different commands.
    let one = srv.start_probe(
        "beta",
        json!({"op": "exec", "argv": ["tee", "-a", "count.txt"], "stdin": "one\n"}),
    );
    let two = srv.start_probe("beta", json!({"op": "exec", "argv": ["tee", "-a", "count.txt"], "stdin": "two, a different request\n"}));
    let a1 = srv.pending_approval("beta", &one);
    let a2 = srv.pending_approval("beta", &two);
    assert_ne!(a1["digest"], a2["digest"]);
    // The digest a person reviewed for one request does not approve another.
    let r = srv.post(
        &format!("/api/v1/approvals/{}/approve", a2["id"].as_str().unwrap()),
        approver,
        json!({"digest": a1["digest"]}),
    );
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(
        r.error().contains("is not the one you reviewed"),
        "{}",
        r.body
    );
    let v = srv.get(&format!("/api/v1/runs/{two}"), approver).json();
    assert_eq!(
        (v["status"].as_str(), v["approvals"][0]["status"].as_str()),
        (Some("waiting"), Some("pending"))
    );
    // Decided once, a replay of the same decision is refused; the action ran once.
    let path = format!("/api/v1/approvals/{}/approve", a1["id"].as_str().unwrap());
    assert_eq!(
        srv.post(&path, approver, json!({"digest": a1["digest"]}))
            .status,
        200
    );
    srv.wait_final("beta", &one);
    let r = srv.post(&path, approver, json!({"digest": a1["digest"]}));
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(
        r.error()
            .contains("was already approved by beta/approver-1"),
        "{}",
        r.body
    );
    let audit = srv
        .store()
        .audit(&loopbox::db::audit::AuditFilter {
            tenant: Some("beta".into()),
            before: None,
            limit: 1000,
        })
        .unwrap();
    let refused: Vec<_> = audit
        .iter()
        .filter(|r| r.entry.act == "approve" && r.entry.outcome.starts_with("refused: approval"))
        .map(|r| r.entry.target.as_str())
        .collect();
    assert!(
        refused.contains(&a1["id"].as_str().unwrap())
            && refused.contains(&a2["id"].as_str().unwrap()),
        "{refused:?}"
    );
    let written = std::fs::read_to_string(srv.root("beta").join("proj/count.txt")).unwrap();
    assert_eq!(written.matches("one\n").count(), 1, "{written}");
    assert!(!written.contains("two"), "{written}");
    // Clean up the other run.
    srv.post(
        &format!("/api/v1/runs/{two}/cancel"),
        srv.token("beta", "operator"),
        json!({}),
    );
}

/// A request for the run list from `source`, on a connection of its own; the
/// status line, or why there was none within 5 s.
fn runs_from(srv: &super::Srv, source: &str, token: &str) -> Result<String, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut s = rt
        .block_on(async {
            let sock = tokio::net::TcpSocket::new_v4()?;
            sock.bind(format!("{source}:0").parse().unwrap())?;
            sock.connect(srv.addr.parse().unwrap()).await?.into_std()
        })
        .map_err(|e| e.to_string())?;
    s.set_nonblocking(false).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let head = format!(
        "GET /api/v1/runs HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n",
        srv.addr
    );
    s.write_all(head.as_bytes()).map_err(|e| e.to_string())?;
    let mut got = Vec::new();
    match s.read_to_end(&mut got) {
        Ok(_) => Ok(String::from_utf8_lossy(&got)
            .lines()
            .next()
            .unwrap_or("")
            .to_string()),
        Err(e) => Err(format!("no answer within 5 s: {e}")),
    }
}

#[test]
fn a_flood_of_connections_from_one_address_leaves_room_for_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let mut srv = super::Srv::prepare(
        dir.path(),
        "max_connections = 8\nmax_connections_per_ip = 2\n",
        &[("solo", "")],
    );
    srv.start();
    let token = srv.token("solo", "viewer").to_string();
    // 127.0.0.1 opens 20 connections and sends nothing (each would hold its
    // slot for the 10 s header timeout, and open again when closed).
    let flood: Vec<TcpStream> = (0..20)
        .map(|_| TcpStream::connect(&srv.addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    // Another address is still served at once.
    assert_eq!(
        runs_from(&srv, "127.0.0.2", &token).as_deref(),
        Ok("HTTP/1.1 200 OK")
    );
    // All but the flooding address's 2 were closed unread.
    let closed = flood
        .iter()
        .filter(|s| {
            let mut s: &TcpStream = s;
            s.set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            match s.read(&mut [0u8; 1]) {
                Ok(n) => n == 0,
                Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
            }
        })
        .count();
    assert_eq!(closed, 18);
    // Its connections closed, the address has its share again.
    drop(flood);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        runs_from(&srv, "127.0.0.1", &token).as_deref(),
        Ok("HTTP/1.1 200 OK")
    );
}
