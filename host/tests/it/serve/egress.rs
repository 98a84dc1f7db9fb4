//! A tenant's network on a shared server: its commands reach only what its
//! `[network]` allows, through the proxy, and never the server's own address,
//! the store's, or a private address its own rules name (only the operator
//! could open one). Each connection is in the run's view (`network`).

use std::io::{Read, Write};
use std::net::TcpListener;

use serde_json::json;

use super::{Srv, scratch, tenant_config};

/// A loopback origin on 127.0.0.2 (the server listens on 127.0.0.1) that
/// answers every request with `hello`.
fn origin() -> u16 {
    let l = TcpListener::bind("127.0.0.2:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nhello\n",
            );
        }
    });
    port
}

#[test]
fn a_tenants_commands_reach_neither_the_server_nor_a_private_address_its_rules_name() {
    let dir = scratch();
    let mut srv = Srv::prepare(dir.path(), "", &[("mallory", "")]);
    srv.start();
    let o = origin();
    let server = srv.addr.clone();
    let admin = srv.token("mallory", "admin");
    let text = format!(
        "{}scripts = true\n\n[policies.probe.network]\nallow = [\"{server}\", \"127.0.0.2:{o}\", \"*\"]\n",
        tenant_config()
    );
    let r = srv.call("PUT", "/api/v1/config", admin, Some(json!({"text": text})));
    assert_eq!(r.status, 200, "{}", r.body);
    let script = format!(
        "curl -s -i --max-time 10 http://{server}/api/v1/runs | grep -i x-loopbox-refused; echo ---; \
         curl -s -i --max-time 10 http://127.0.0.2:{o}/ | grep -i x-loopbox-refused; echo ---; \
         curl -sS --noproxy '*' --max-time 5 http://{server}/ || echo DIRECT-FAILED"
    );
    let run = srv.start_probe(
        "mallory",
        json!({"op": "script", "source": script, "timeout_ms": 60000}),
    );
    let v = srv.wait_final("mallory", &run);
    let out = v["outcome"]["data"]["ok"]["stdout"]
        .as_str()
        .unwrap_or_else(|| panic!("{v:#}"))
        .to_string();
    let parts: Vec<&str> = out.split("---\n").collect();
    assert_eq!(parts.len(), 3, "{out}");
    assert!(
        parts[0].contains("an address of loopbox's own server or store, which no run reaches"),
        "{out}"
    );
    assert!(
        parts[1].contains(
            "127.0.0.2 is a loopback address, which a run on a shared server reaches only where its operator opened it"
        ),
        "{out}"
    );
    assert!(parts[2].contains("DIRECT-FAILED"), "{out}");
    let net = v["network"].as_array().unwrap_or_else(|| panic!("{v:#}"));
    assert_eq!(net.len(), 2, "{v:#}");
    assert!(
        net.iter()
            .all(|c| c["allowed"] == false && c["side"] == "commands"),
        "{v:#}"
    );
    // The dashboard's run page has a Network panel with the same.
    let viewer = srv.token("mallory", "viewer").to_string();
    let auth = format!("Bearer {viewer}");
    let page = super::http(
        &srv.addr,
        "GET",
        &format!("/runs/{run}"),
        &[("Authorization", &auth)],
        None,
    );
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("<h2>Network</h2>"), "{}", page.body);
    assert!(page.body.contains(" 2 refused."), "{}", page.body);
    assert!(page.body.contains("which no run reaches"), "{}", page.body);
}

/// The operator, not the tenant, opens a private destination
/// (`[tenants.NAME.network] private`): the tenant's rule naming it then
/// reaches it, and nothing else private; the operator's `max_bytes` bounds
/// the tenant's runs whatever their own `[network]` says.
#[test]
fn an_operator_opens_a_private_destination_to_one_tenant_and_caps_its_bytes() {
    let dir = scratch();
    let (o, other) = (origin(), origin());
    let mut srv = Srv::prepare(
        dir.path(),
        "",
        &[
            (
                "ops",
                &format!("\n[tenants.ops.network]\nprivate = [\"127.0.0.2:{o}\"]\n"),
            ),
            (
                "small",
                &format!(
                    "\n[tenants.small.network]\nprivate = [\"127.0.0.2:{o}\"]\nmax_bytes = 40\n"
                ),
            ),
        ],
    );
    srv.start();
    let rules = format!(
        "{}scripts = true\n\n[policies.probe.network]\nallow = [\"127.0.0.2:{o}\", \"127.0.0.2:{other}\"]\nmax_bytes = 1000000\n",
        tenant_config()
    );
    let script = format!(
        "curl -sS --max-time 10 http://127.0.0.2:{o}/; echo ---; \
         curl -s -i --max-time 10 http://127.0.0.2:{other}/ | grep -i x-loopbox-refused; echo ---"
    );
    for t in ["ops", "small"] {
        let r = srv.call(
            "PUT",
            "/api/v1/config",
            srv.token(t, "admin"),
            Some(json!({"text": rules})),
        );
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let run = srv.start_probe(
        "ops",
        json!({"op": "script", "source": script, "timeout_ms": 60000}),
    );
    let v = srv.wait_final("ops", &run);
    let out = v["outcome"]["data"]["ok"]["stdout"]
        .as_str()
        .unwrap_or_else(|| panic!("{v:#}"))
        .to_string();
    let parts: Vec<&str> = out.split("---\n").collect();
    assert_eq!(parts[0], "hello\n", "{out}");
    assert!(
        parts[1].contains("reaches only where its operator opened it"),
        "{out}"
    );
    // The same rules under a 40-byte ceiling: the reply is cut.
    let run = srv.start_probe(
        "small",
        json!({"op": "script", "source": script, "timeout_ms": 60000}),
    );
    let v = srv.wait_final("small", &run);
    let net = v["network"].as_array().unwrap_or_else(|| panic!("{v:#}"));
    assert!(
        net.iter().any(|c| c["allowed"] == true
            && c["rule"]
                .as_str()
                .unwrap_or("")
                .contains("cut at network.max_bytes")),
        "{v:#}"
    );
}

/// `0.0.0.0` (and `::`) connect to the machine itself: a tenant whose
/// operator opened a range holding it (`0.0.0.0/8` here; `0.0.0.0/0` would
/// do) reached the server's own port through `0.0.0.0:PORT`, which the
/// guard did not count as the server's address (it listens on 127.0.0.1).
#[test]
fn a_tenant_does_not_reach_the_server_through_the_unspecified_address() {
    let dir = scratch();
    let mut srv = Srv::prepare(
        dir.path(),
        "",
        &[(
            "mallory",
            "\n[tenants.mallory.network]\nprivate = [\"0.0.0.0/8\"]\n",
        )],
    );
    srv.start();
    let port = srv.addr.rsplit(':').next().unwrap().to_string();
    let admin = srv.token("mallory", "admin");
    let text = format!(
        "{}scripts = true\n\n[policies.probe.network]\nallow = [\"0.0.0.0:{port}\"]\n",
        tenant_config()
    );
    let r = srv.call("PUT", "/api/v1/config", admin, Some(json!({"text": text})));
    assert_eq!(r.status, 200, "{}", r.body);
    let script = format!("curl -s -i --max-time 10 http://0.0.0.0:{port}/api/v1/runs | head -3");
    let run = srv.start_probe(
        "mallory",
        json!({"op": "script", "source": script, "timeout_ms": 60000}),
    );
    let v = srv.wait_final("mallory", &run);
    let out = v["outcome"]["data"]["ok"]["stdout"]
        .as_str()
        .unwrap_or_else(|| panic!("{v:#}"))
        .to_string();
    assert!(
        out.contains("an address of loopbox's own server or store, which no run reaches"),
        "the tenant reached the server: {out}"
    );
}
