//! Who may do what: every role against every class of endpoint, no token at
//! all, and one tenant against another (its runs and approvals are 404, and
//! its sandboxed commands cannot read the other's root or the server's data).

use serde_json::{Value, json};

use super::{ROLES, shared};

/// One class of endpoint: the least role it needs and a request of that class.
struct Class {
    name: &'static str,
    needs: &'static str,
    method: &'static str,
    path: String,
    body: Option<Value>,
}

fn classes(n: usize) -> Vec<Class> {
    let tc = super::tenant_config();
    vec![
        Class {
            name: "read runs",
            needs: "viewer",
            method: "GET",
            path: "/api/v1/runs".into(),
            body: None,
        },
        Class {
            name: "read approvals",
            needs: "viewer",
            method: "GET",
            path: "/api/v1/approvals".into(),
            body: None,
        },
        Class {
            name: "read the audit log",
            needs: "viewer",
            method: "GET",
            path: "/api/v1/audit".into(),
            body: None,
        },
        Class {
            name: "read policies",
            needs: "viewer",
            method: "GET",
            path: "/api/v1/policies".into(),
            body: None,
        },
        Class {
            name: "start a run",
            needs: "operator",
            method: "POST",
            path: "/api/v1/runs".into(),
            body: Some(json!({"policy": "probe", "workspace": "proj", "input": {"op": "echo"}})),
        },
        Class {
            name: "cancel a run",
            needs: "operator",
            method: "POST",
            path: "/api/v1/runs/rnothere/cancel".into(),
            body: Some(json!({})),
        },
        Class {
            name: "resume a run",
            needs: "operator",
            method: "POST",
            path: "/api/v1/runs/rnothere/resume".into(),
            body: Some(json!({})),
        },
        Class {
            name: "answer a run",
            needs: "operator",
            method: "POST",
            path: "/api/v1/runs/rnothere/answer".into(),
            body: Some(json!({"text": "x"})),
        },
        Class {
            name: "tick a run",
            needs: "operator",
            method: "POST",
            path: "/api/v1/runs/rnothere/tick".into(),
            body: Some(json!({"payload": {}})),
        },
        Class {
            name: "approve",
            needs: "approver",
            method: "POST",
            path: "/api/v1/approvals/anothere/approve".into(),
            body: Some(json!({"digest": "d"})),
        },
        Class {
            name: "deny",
            needs: "approver",
            method: "POST",
            path: "/api/v1/approvals/anothere/deny".into(),
            body: Some(json!({})),
        },
        Class {
            name: "list tokens",
            needs: "admin",
            method: "GET",
            path: "/api/v1/tokens".into(),
            body: None,
        },
        Class {
            name: "make a token",
            needs: "admin",
            method: "POST",
            path: "/api/v1/tokens".into(),
            body: Some(json!({"name": format!("made-{n}"), "role": "viewer"})),
        },
        Class {
            name: "read the config",
            needs: "admin",
            method: "GET",
            path: "/api/v1/config".into(),
            body: None,
        },
        Class {
            name: "set the config",
            needs: "admin",
            method: "PUT",
            path: "/api/v1/config".into(),
            body: Some(json!({"text": tc})),
        },
    ]
}

fn rank(role: &str) -> usize {
    ROLES.iter().position(|r| *r == role).unwrap()
}

#[test]
fn every_role_against_every_endpoint_class() {
    let srv = shared();
    let mut table = vec![];
    for (i, role) in ROLES.iter().enumerate() {
        for c in classes(i) {
            let r = srv.call(c.method, &c.path, srv.token("gamma", role), c.body.clone());
            let allowed = rank(role) >= rank(c.needs);
            table.push(format!("{role:<8} {:<20} {}", c.name, r.status));
            if allowed {
                assert!(
                    ![401, 403].contains(&r.status) && r.status < 500,
                    "{role} may {}: {} {}",
                    c.name,
                    r.status,
                    r.body
                );
            } else {
                assert_eq!(r.status, 403, "{role} may not {}: {}", c.name, r.body);
                let e = r.error();
                assert!(
                    e.contains(&format!("has the {role} role"))
                        && e.contains(&format!("needs the {} role or above", c.needs)),
                    "{e}"
                );
            }
        }
    }
    // Without a token, or with a wrong one, nothing but the health check answers.
    for c in classes(99) {
        let r = super::http(&srv.addr, c.method, &c.path, &[], None);
        assert_eq!(r.status, 401, "{}: {}", c.name, r.body);
        assert!(r.error().contains("this needs a token"), "{}", r.body);
        let r = srv.call(
            c.method,
            &c.path,
            "lbx_0000000000000000_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            c.body.clone(),
        );
        assert_eq!(r.status, 401, "{}: {}", c.name, r.body);
    }
    let r = super::http(&srv.addr, "GET", "/healthz", &[], None);
    assert_eq!((r.status, r.body.as_str()), (200, "ok\n"));
    eprintln!("{}", table.join("\n"));
}

#[test]
fn another_tenants_runs_and_approvals_are_not_found() {
    let srv = shared();
    // beta's run waits for an approval.
    let run = srv.start_probe(
        "beta",
        json!({"op": "exec", "argv": ["tee", "-a", "count.txt"], "stdin": "beta\n"}),
    );
    let approval = srv.pending_approval("beta", &run);
    let aid = approval["id"].as_str().unwrap();
    let digest = approval["digest"].as_str().unwrap();
    let before = srv
        .store()
        .audit(&loopbox::db::audit::AuditFilter {
            tenant: Some("beta".into()),
            before: None,
            limit: 1000,
        })
        .unwrap()
        .len();
    let alpha = srv.token("alpha", "admin");
    for (method, path, body) in [
        ("GET", format!("/api/v1/runs/{run}"), None),
        ("GET", format!("/api/v1/runs/{run}/log"), None),
        (
            "POST",
            format!("/api/v1/runs/{run}/cancel"),
            Some(json!({})),
        ),
        (
            "POST",
            format!("/api/v1/runs/{run}/answer"),
            Some(json!({"text": "x"})),
        ),
        (
            "POST",
            format!("/api/v1/runs/{run}/resume"),
            Some(json!({})),
        ),
        ("GET", format!("/api/v1/approvals/{aid}"), None),
        (
            "POST",
            format!("/api/v1/approvals/{aid}/approve"),
            Some(json!({"digest": digest})),
        ),
        (
            "POST",
            format!("/api/v1/approvals/{aid}/deny"),
            Some(json!({"reason": "no"})),
        ),
    ] {
        let r = srv.call(method, &path, alpha, body);
        assert_eq!(r.status, 404, "{method} {path}: {}", r.body);
        assert!(r.error().starts_with("there is no "), "{}", r.body);
    }
    // alpha's lists do not show it.
    let runs = srv.get("/api/v1/runs?limit=500", alpha).json();
    assert!(
        !runs["runs"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["id"] == run.as_str())
    );
    let approvals = srv.get("/api/v1/approvals", alpha).json();
    assert!(
        !approvals["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["id"] == aid)
    );
    // Nothing of beta's changed: the run waits, its approval is pending, beta's audit log is as it was.
    let v = srv
        .get(&format!("/api/v1/runs/{run}"), srv.token("beta", "viewer"))
        .json();
    assert_eq!(v["status"], "waiting");
    assert_eq!(v["approvals"][0]["status"], "pending");
    let after = srv
        .store()
        .audit(&loopbox::db::audit::AuditFilter {
            tenant: Some("beta".into()),
            before: None,
            limit: 1000,
        })
        .unwrap()
        .len();
    assert_eq!(before, after);
    assert!(!srv.root("beta").join("proj/count.txt").exists());
    // beta's approver decides it.
    let r = srv.post(
        &format!("/api/v1/approvals/{aid}/deny"),
        srv.token("beta", "approver"),
        json!({"reason": "not today"}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let v = srv.wait_final("beta", &run);
    assert_eq!(v["outcome"]["data"]["err"]["kind"], "declined", "{v:#}");
}

#[test]
fn a_tenants_commands_cannot_read_another_tenants_root_or_the_servers_data() {
    let srv = shared();
    std::fs::write(srv.root("beta").join("proj/secret.txt"), "beta's secret\n").unwrap();
    std::fs::write(srv.root("alpha").join("proj/mine.txt"), "alpha's own\n").unwrap();
    let cat = |path: String| {
        let run = srv.start_probe("alpha", json!({"op": "exec", "argv": ["cat", path]}));
        let v = srv.wait_final("alpha", &run);
        v["outcome"]["data"]["ok"].clone()
    };
    // The command works: it reads alpha's own file.
    let own = cat(srv
        .root("alpha")
        .join("proj/mine.txt")
        .display()
        .to_string());
    assert_eq!(
        (own["exit_code"].as_i64(), own["stdout"].as_str()),
        (Some(0), Some("alpha's own\n"))
    );
    for path in [
        srv.root("beta").join("proj/secret.txt"),
        srv.dir
            .join("data")
            .canonicalize()
            .unwrap()
            .join("loopbox.db"),
        srv.dir
            .join("data")
            .canonicalize()
            .unwrap()
            .join("tenants/beta/loopbox.toml"),
        // The server's config holds every tenant's `env` (creds' key), and an
        // env file another tenant's: neither is alpha's to read.
        srv.config.clone(),
        srv.dir.join("creds.env"),
        // The component cache every tenant's policies are compiled into.
        cached_file(&srv.cache),
    ] {
        let out = cat(path.display().to_string());
        assert_ne!(out["exit_code"].as_i64(), Some(0), "{path:?}: {out}");
        let stdout = out["stdout"].as_str().unwrap();
        assert!(
            !stdout.contains("secret") && !stdout.contains("creds'"),
            "{path:?}: {out}"
        );
        assert_eq!(out["stdout"], "", "{path:?}: {out}");
    }
}

/// A file the server's component cache holds (a compiled policy's digest).
fn cached_file(cache: &std::path::Path) -> std::path::PathBuf {
    std::fs::read_dir(cache.join("digests"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("nothing cached in {cache:?}"))
}

#[test]
fn a_tenants_agent_gets_the_tenants_credentials_never_the_servers() {
    let srv = shared();
    let run = srv.start_probe("creds", json!({"op": "prompt", "text": "hello"}));
    let v = srv.wait_final("creds", &run);
    let out = v["outcome"]["data"]["ok"]["stdout"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(out.starts_with("key=creds' own key "), "{v:#}");
    assert!(!out.contains("server's own"), "{out}");
    // Its HOME is the tenant's own home, never the server user's.
    let home = srv
        .dir
        .join("data/tenants/creds/home")
        .canonicalize()
        .unwrap();
    assert!(out.contains(&format!(" home={} ", home.display())), "{out}");
    // Nor does it see another tenant's root.
    assert!(out.trim_end().ends_with("beta=hidden"), "{out}");
}

#[test]
fn a_tenant_config_that_weakens_the_shared_sandbox_is_refused() {
    let srv = shared();
    let admin = srv.token("delta", "admin");
    let before = srv.get("/api/v1/config", admin).json();
    let beta_policy = srv.root("beta").join("p.wasm");
    for (text, want) in [
        (
            "[shell]\nsandbox = \"none\"\n".to_string(),
            "shell.sandbox = \"none\" would run tenant `delta`'s commands unconfined",
        ),
        (
            "[shell]\nsandbox = \"landlock\"\n".to_string(),
            "shell.sandbox = \"landlock\" would let tenant `delta`'s commands read the command line of every process",
        ),
        (
            "[shell]\nreveal = [\"~/.ssh\"]\n".to_string(),
            "shell.reveal would show tenant `delta`'s commands the server user's credential stores",
        ),
        (
            "[shell]\nunix_sockets = true\n".to_string(),
            "shell.unix_sockets = true",
        ),
        (
            format!(
                "[policies.theirs]\nsource = {:?}\nunsigned = true\n",
                beta_policy.display().to_string()
            ),
            "which tenant `delta`'s runs never see",
        ),
        // The agent's writable state is bound over what the sandbox hides: /etc
        // (cron, passwd) as the server's user, another tenant's root, the store.
        (
            "[agent]\ncommand = [\"sh\"]\nprompt_input = \"stdin\"\nwritable = [\"/etc\"]\n".to_string(),
            "agent.writable: `/etc`",
        ),
        (
            format!(
                "[policies.theirs]\nsource = \"builtin:ralph\"\n[policies.theirs.agent]\ncommand = [\"sh\"]\nprompt_input = \"stdin\"\nwritable = [{:?}]\n",
                srv.root("beta").display().to_string()
            ),
            "is outside tenant `delta`'s roots",
        ),
        (
            "[agents.sneaky]\ncommand = [\"sh\"]\nprompt_input = \"stdin\"\nwritable = [\"~/.claude/../../etc\"]\n".to_string(),
            "a `..` part could lead anywhere",
        ),
    ] {
        let r = srv.call("PUT", "/api/v1/config", admin, Some(json!({"text": text})));
        assert_eq!(r.status, 400, "{text}: {}", r.body);
        assert!(r.error().contains(want), "{text}: {}", r.body);
    }
    assert_eq!(
        srv.get("/api/v1/config", admin).json(),
        before,
        "the config did not change"
    );
    let audit = srv.get("/api/v1/audit?act=config.set", admin).json();
    let refused = audit["audit"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["outcome"].as_str().unwrap().starts_with("refused: "))
        .count();
    assert!(refused >= 7, "{audit:#}");
    // The policies page: each installed policy, what it needs against what it is granted.
    let p = srv
        .get("/api/v1/policies", srv.token("delta", "viewer"))
        .json();
    let probe = &p["policies"][0];
    assert_eq!(probe["name"], "probe");
    assert_eq!(probe["grants"]["ask"], json!([["tee", "-a", "count.txt"]]));
    assert_eq!(
        probe["admission"],
        "runs: unsigned (accepted: unsigned = true)"
    );
    assert!(
        probe["component_digest"]
            .as_str()
            .unwrap()
            .starts_with("blake3:"),
        "{p:#}"
    );
}

#[test]
fn a_log_stream_ends_when_its_token_is_revoked() {
    use std::io::{Read, Write};
    let srv = shared();
    let admin = srv.token("gamma", "admin");
    let made = srv.post(
        "/api/v1/tokens",
        admin,
        json!({"name": "streamer", "role": "viewer"}),
    );
    assert_eq!(made.status, 201, "{}", made.body);
    let token = made.json()["token"].as_str().unwrap().to_string();
    let run = srv.start_probe("gamma", json!({"op": "echo", "then": "ask"}));
    srv.wait_run("gamma", &run, |v| v["status"] == "waiting");
    let mut s = std::net::TcpStream::connect(&srv.addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(1)))
        .unwrap();
    s.write_all(
        format!(
            "GET /api/v1/runs/{run}/log HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    let mut raw = Vec::new();
    let mut read_for = |secs: u64, raw: &mut Vec<u8>| {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        let mut buf = [0u8; 4096];
        while std::time::Instant::now() < until {
            match s.read(&mut buf) {
                Ok(0) => return true,
                Ok(n) => raw.extend_from_slice(&buf[..n]),
                Err(_) => {}
            }
        }
        false
    };
    read_for(1, &mut raw);
    assert!(
        String::from_utf8_lossy(&raw).contains("event: log"),
        "{}",
        String::from_utf8_lossy(&raw)
    );
    let r = srv.call("DELETE", "/api/v1/tokens/streamer", admin, None);
    assert_eq!(r.status, 200, "{}", r.body);
    // The run goes on after the revocation: what it logs then is not the revoked token's.
    let r = srv.post(
        &format!("/api/v1/runs/{run}/answer"),
        srv.token("gamma", "operator"),
        json!({"text": "after the revocation"}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    srv.wait_final("gamma", &run);
    let closed = read_for(10, &mut raw);
    let text = String::from_utf8_lossy(&raw);
    assert!(closed, "the stream stayed open: {text}");
    assert!(!text.contains("after the revocation"), "{text}");
    assert!(
        text.contains("event: error") && text.contains("it was revoked"),
        "{text}"
    );
}

/// The least role an act of the refusals' test needs.
fn needs_of(act: &str) -> &'static str {
    match act {
        "approve" | "deny" => "approver",
        "cancel" | "resume" => "operator",
        _ => "admin",
    }
}

/// Issue 45, item 6: a refused act that needs a role leaves an audit row with
/// who asked, what and why, as a refused act the store judges does: a
/// viewer's approve (403), an approve without a digest (400), an operator
/// minting an admin token (403), and the other role checks, each read back
/// through the API's audit view.
#[test]
fn every_refused_act_that_needs_a_role_is_audited_with_who_what_and_why() {
    let srv = shared();
    let run = srv.start_probe(
        "alpha",
        json!({"op": "exec", "argv": ["tee", "-a", "count.txt"], "stdin": "refused\n"}),
    );
    let approval = srv.pending_approval("alpha", &run);
    let aid = approval["id"].as_str().unwrap().to_string();
    let minted = format!("minted-{}", run.to_lowercase());
    /// (role, method, path, body, the act and target the row names, status, a word of the why)
    type Case = (
        &'static str,
        &'static str,
        String,
        Option<Value>,
        &'static str,
        String,
        u16,
        &'static str,
    );
    let cases: Vec<Case> = vec![
        (
            "viewer",
            "POST",
            format!("/api/v1/approvals/{aid}/approve"),
            Some(json!({"digest": approval["digest"]})),
            "approve",
            aid.clone(),
            403,
            "needs the approver role",
        ),
        (
            "approver",
            "POST",
            format!("/api/v1/approvals/{aid}/approve"),
            Some(json!({})),
            "approve",
            aid.clone(),
            400,
            "give `digest`",
        ),
        (
            "operator",
            "POST",
            "/api/v1/tokens".into(),
            Some(json!({"name": minted, "role": "admin"})),
            "token.create",
            minted.clone(),
            403,
            "needs the admin role",
        ),
        (
            "operator",
            "POST",
            format!("/api/v1/approvals/{aid}/deny"),
            Some(json!({})),
            "deny",
            aid.clone(),
            403,
            "needs the approver role",
        ),
        (
            "viewer",
            "POST",
            format!("/api/v1/runs/{run}/cancel"),
            Some(json!({})),
            "cancel",
            run.clone(),
            403,
            "needs the operator role",
        ),
        (
            "viewer",
            "POST",
            format!("/api/v1/runs/{run}/resume"),
            Some(json!({})),
            "resume",
            run.clone(),
            403,
            "needs the operator role",
        ),
        (
            "approver",
            "PUT",
            "/api/v1/config".into(),
            Some(json!({"text": ""})),
            "config.set",
            "loopbox.toml".into(),
            403,
            "needs the admin role",
        ),
        (
            "approver",
            "DELETE",
            format!("/api/v1/tokens/{minted}"),
            None,
            "token.revoke",
            minted.clone(),
            403,
            "needs the admin role",
        ),
    ];
    let admin = srv.token("alpha", "admin");
    for (role, method, path, body, act, target, status, why) in &cases {
        let token = srv.token("alpha", role);
        let r = srv.call(method, path, token, body.clone());
        assert_eq!(r.status, *status, "{role} {method} {path}: {}", r.body);
        let audit = srv
            .get(&format!("/api/v1/audit?limit=1000&act={act}"), admin)
            .json();
        let rows: Vec<&Value> = audit["audit"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["target"] == target.as_str())
            .filter(|a| {
                a["outcome"]
                    .as_str()
                    .is_some_and(|o| o.starts_with("refused: ") && o.contains(why))
            })
            .collect();
        assert_eq!(rows.len(), 1, "{role} {method} {path}: {audit:#}");
        let row = rows[0];
        let actor = row["actor"].as_str().unwrap();
        assert!(actor.starts_with("alpha/"), "who: {row:#}");
        assert_eq!(row["detail"]["role"], *role, "{row:#}");
        assert_eq!(row["detail"]["status"], *status, "{row:#}");
        assert!(row["at"].as_str().is_some(), "{row:#}");
        if *act == "token.create" {
            assert_eq!(
                row["detail"]["token_role"], "admin",
                "what was asked: {row:#}"
            );
        }
        if *status == 403 {
            assert_eq!(row["detail"]["needs"], needs_of(act), "{row:#}");
        }
    }
    // Refused, nothing changed: the approval still waits for an approver.
    let r = srv.post(
        &format!("/api/v1/approvals/{aid}/deny"),
        srv.token("alpha", "approver"),
        json!({"reason": "refusals tested"}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    srv.wait_final("alpha", &run);
}
