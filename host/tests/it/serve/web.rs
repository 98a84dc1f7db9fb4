//! The dashboard in a real browser: Debian's chromium driven by playwright-core
//! (`host/tests/browser/dashboard.mjs`, one scenario per test), against the
//! shared server's tenant `web`; what each click did is checked again here in
//! the store and the tenant's files. Screenshots go to
//! `target/artifacts/dashboard/`. And the pages over plain HTTP: their
//! headers, and a role too low refused by the server whatever the page shows.

use std::path::PathBuf;
use std::process::Command;

use serde_json::{Value, json};

use super::{ROLES, http, shared};
use crate::common::repo;

const CHROMIUM: &str = "/usr/bin/chromium";

/// `node dashboard.mjs SCENARIO` against the shared server; its `RESULT` lines.
fn browser(scenario: &str) -> Vec<Value> {
    browser_as("web", scenario)
}

/// [`browser`] with the tokens of `tenant`.
fn browser_as(tenant: &str, scenario: &str) -> Vec<Value> {
    let dir = repo().join("host/tests/browser");
    assert!(
        dir.join("node_modules/playwright-core").is_dir(),
        "playwright-core is not installed: run ./scripts/test.sh, or `npm ci` in {}",
        dir.display()
    );
    assert!(
        std::path::Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: `apt-get install chromium` (./scripts/test.sh does)"
    );
    let srv = shared();
    let tokens: serde_json::Map<String, Value> = ROLES
        .iter()
        .map(|r| (r.to_string(), json!(srv.token(tenant, r))))
        .collect();
    let out = Command::new("node")
        .arg("dashboard.mjs")
        .arg(scenario)
        .current_dir(&dir)
        .env("LOOPBOX_URL", format!("http://{}", srv.addr))
        .env("LOOPBOX_TOKENS", Value::Object(tokens).to_string())
        .env("LOOPBOX_ARTIFACTS", artifacts())
        .output()
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed, 0 failed"),
        "the browser scenario `{scenario}` failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("RESULT "))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `target/artifacts/dashboard`, where the screenshots are kept.
fn artifacts() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("artifacts/dashboard")
}

fn count_txt() -> String {
    std::fs::read_to_string(shared().root("web").join("proj/count.txt")).unwrap_or_default()
}

#[test]
fn the_browser_signs_in_starts_a_run_approves_its_command_and_sees_its_output() {
    let r = &browser("approve")[0];
    let marker = r["marker"].as_str().unwrap();
    // The approved command ran once.
    assert_eq!(count_txt().matches(marker).count(), 1, "{}", count_txt());
    let run = shared()
        .store()
        .existing_run(r["run"].as_str().unwrap())
        .unwrap();
    assert_eq!(run.status.as_str(), "done");
    assert!(artifacts().join("run-approved.png").is_file());
}

#[test]
fn the_browser_denies_and_the_policy_is_declined() {
    let r = &browser("deny")[0];
    // The denied command never ran.
    assert!(!count_txt().contains(r["marker"].as_str().unwrap()));
    let acts = audit_of(r["run"].as_str().unwrap());
    assert!(
        acts.iter()
            .any(|(act, outcome)| act == "deny" && outcome == "ok"),
        "{acts:?}"
    );
}

/// The acts the web tenant's audit log holds about `run`: the run itself, or
/// one of its approvals (a decision, or a request refused on its way to one).
fn audit_of(run: &str) -> Vec<(String, String)> {
    let srv = shared();
    let approvals = srv
        .get(
            &format!("/api/v1/approvals?run={run}"),
            srv.token("web", "viewer"),
        )
        .json();
    let ids: Vec<String> = approvals["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap().to_string())
        .collect();
    let v = srv
        .get("/api/v1/audit?limit=1000", srv.token("web", "viewer"))
        .json();
    v["audit"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| {
            let target = a["target"].as_str().unwrap_or_default();
            target == run
                || a["detail"].to_string().contains(run)
                || ids.iter().any(|id| target.contains(id.as_str()))
        })
        .map(|a| {
            (
                a["act"].as_str().unwrap().to_string(),
                a["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn a_form_without_or_with_a_forged_csrf_token_is_refused_and_changes_nothing() {
    let r = &browser("csrf")[0];
    // Neither post reached the act: no approve row; the deny is the cleanup's.
    // Each was refused on its way, and that is recorded (issue 45, item 6).
    let acts = audit_of(r["run"].as_str().unwrap());
    assert!(!acts.iter().any(|(act, _)| act == "approve"), "{acts:?}");
    let refused = acts
        .iter()
        .filter(|(act, outcome)| {
            act == "request" && outcome.starts_with("refused: the CSRF token is missing or wrong")
        })
        .count();
    assert_eq!(refused, 2, "{acts:?}");
    assert!(!count_txt().contains("csrf\n"));
}

#[test]
fn a_viewer_sees_no_button_it_cannot_use_and_is_refused_anyway() {
    let r = &browser("viewer")[0];
    let acts = audit_of(r["run"].as_str().unwrap());
    // Refused, and recorded with who and why (issue 45, item 6); never done.
    assert!(
        !acts
            .iter()
            .any(|(act, outcome)| act == "approve" && outcome == "ok"),
        "{acts:?}"
    );
    assert!(
        acts.iter().any(|(act, outcome)| act == "approve"
            && outcome
                .contains("has the viewer role; to approve an action it needs the approver role")),
        "{acts:?}"
    );
}

#[test]
fn what_a_policy_logs_and_a_command_prints_renders_inert() {
    browser("xss");
}

#[test]
fn the_browser_starts_a_loop_follows_its_states_and_sees_the_approval_count_live() {
    super::loops::files();
    let r = &browser_as("webloop", "loop")[0];
    let run = shared()
        .store()
        .existing_run(r["run"].as_str().unwrap())
        .unwrap();
    assert_eq!(
        (run.status.as_str(), run.options.loop_name.as_deref()),
        ("done", Some("tidy"))
    );
    for shot in ["loop-form-pending", "loop-running", "loop-done"] {
        assert!(artifacts().join(format!("{shot}.png")).is_file(), "{shot}");
    }
}

#[test]
fn every_page_fits_a_phone() {
    browser("phone");
    assert!(artifacts().join("phone-approvals.png").is_file());
}

#[test]
fn pages_carry_a_csp_without_inline_script_and_send_strangers_to_sign_in() {
    let srv = shared();
    let r = http(&srv.addr, "GET", "/runs", &[], None);
    assert_eq!(
        (r.status, r.header("location")),
        (303, Some("/login")),
        "{}",
        r.body
    );
    let r = http(&srv.addr, "GET", "/login", &[], None);
    assert_eq!(r.status, 200);
    let csp = r.header("content-security-policy").unwrap();
    assert!(
        csp.contains("script-src 'self'")
            && !csp.contains("unsafe-inline")
            && csp.contains("default-src 'none'"),
        "{csp}"
    );
    assert_eq!(r.header("x-frame-options"), Some("DENY"));
    let cookie = r.header("set-cookie").unwrap();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    // The script is the server's own file, and no page has a script of its own.
    assert!(
        r.body
            .contains(r#"<script src="/assets/app.js" defer></script>"#),
        "{}",
        r.body
    );
    assert_eq!(r.body.matches("<script").count(), 1, "{}", r.body);
    let js = http(&srv.addr, "GET", "/assets/app.js", &[], None);
    assert_eq!(
        js.header("content-type"),
        Some("text/javascript; charset=utf-8")
    );
    assert!(
        !js.body.contains("innerHTML"),
        "text goes in through textContent only"
    );
}

#[test]
fn a_pages_post_by_a_role_too_low_is_refused_by_the_server() {
    let srv = shared();
    let run = srv.start_probe("web", json!({"op": "echo", "then": "ask"}));
    srv.wait_run("web", &run, |v| v["status"] == "waiting");
    // A viewer's bearer token needs no CSRF token: the role alone refuses it.
    for (path, body) in [
        (format!("/runs/{run}/cancel"), ""),
        (format!("/runs/{run}/answer"), "text=blue"),
        ("/tokens".to_string(), "name=sneaky&role=admin"),
    ] {
        let auth = format!("Bearer {}", srv.token("web", "viewer"));
        let r = http(
            &srv.addr,
            "POST",
            &path,
            &[
                ("Authorization", &auth),
                ("Content-Type", "application/x-www-form-urlencoded"),
            ],
            Some(body.as_bytes()),
        );
        assert_eq!(r.status, 403, "{path}: {}", r.body);
        assert!(r.body.contains("has the viewer role"), "{}", r.body);
        assert!(r.header("content-type").unwrap().starts_with("text/html"));
    }
    let v = srv.wait_run("web", &run, |_| true);
    assert_eq!(v["status"], "waiting", "nothing changed");
    // An operator's answer goes through and lands on the run's page.
    let auth = format!("Bearer {}", srv.token("web", "operator"));
    let r = http(
        &srv.addr,
        "POST",
        &format!("/runs/{run}/answer"),
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        Some(b"text=blue"),
    );
    assert_eq!(
        (r.status, r.header("location")),
        (303, Some(format!("/runs/{run}?note=answered").as_str())),
        "{}",
        r.body
    );
    let v = srv.wait_final("web", &run);
    assert_eq!(v["outcome"]["summary"], "answer: blue");
}

#[test]
fn signing_in_needs_the_forms_own_cookie_and_a_bounded_body() {
    let srv = shared();
    let token = srv.token("web", "viewer");
    let form = |csrf: &str| format!("csrf_token={csrf}&token={token}");
    let post = |cookie: Option<&str>, body: &[u8]| {
        let mut headers = vec![("Content-Type", "application/x-www-form-urlencoded")];
        if let Some(c) = cookie {
            headers.push(("Cookie", c));
        }
        http(&srv.addr, "POST", "/login", &headers, Some(body))
    };
    let page = http(&srv.addr, "GET", "/login", &[], None);
    let cookie = page
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let field = cookie.split_once('=').unwrap().1.to_string();
    // A valid token with no form cookie (another site's form), or a field that is not the cookie's.
    for (c, f) in [(None, field.as_str()), (Some(cookie.as_str()), "forged")] {
        let r = post(c, form(f).as_bytes());
        assert_eq!(r.status, 403, "{}", r.body);
        assert!(
            r.body.contains("CSRF token is missing or wrong"),
            "{}",
            r.body
        );
        assert!(r.header("set-cookie").is_none(), "no session");
    }
    let r = post(Some(&cookie), &vec![b'x'; 10_000]);
    assert_eq!(r.status, 413, "{}", r.body);
    // The form as the browser sends it signs in.
    let r = post(Some(&cookie), form(&field).as_bytes());
    assert_eq!(
        (r.status, r.header("location")),
        (303, Some("/runs")),
        "{}",
        r.body
    );
    let session = r
        .headers
        .iter()
        .find(|(k, v)| k == "set-cookie" && v.starts_with("loopbox_session="))
        .map(|(_, v)| v.clone())
        .unwrap();
    assert!(
        session.contains("HttpOnly") && session.contains("SameSite=Strict"),
        "{session}"
    );
}
