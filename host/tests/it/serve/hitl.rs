//! A YAML loop's `human_approval` state on a server: the run waits for the
//! person's verdict and takes the route little-loops 1.167 took for it (the
//! answered traces of `traces-1.167.json`), each answered over the API
//! (`POST /api/v1/runs/ID/answer`) and with `loopbox runs approve|deny|answer
//! --server` (a yes approved, a no denied with its reason), a `y` after the
//! deadline routing `timeout`. The answer is a verdict: an operator's is
//! refused, an approver's taken.

use serde_json::json;

use super::{http, shared};
use crate::common::{BIN, repo};
use crate::conformance::{LATE, answered, lines};

/// Scripts for the loops' shell states; `approvals.self = false`, which
/// refuses a run's starter its own question (the runs here are started by
/// an operator and answered by an approver, but one).
const CONFIG: &str = "[shell]\nscripts = true\n\n[approvals]\nself = false\n";

#[test]
fn human_approval_answered_over_the_api_routes_as_little_loops() {
    let srv = shared();
    srv.set_config("hitl", CONFIG);
    let proj = srv.root("hitl").join("proj");
    let url = format!("http://{}", srv.addr);
    let mut failures = vec![];
    for (t, api) in answered()
        .into_iter()
        .flat_map(|t| [true, false].map(|api| (t.clone(), api)))
    {
        std::fs::copy(
            repo().join("tests/conformance/loops").join(&t.loop_file),
            proj.join(&t.loop_file),
        )
        .unwrap();
        let r = srv.post(
            "/api/v1/runs",
            srv.token("hitl", "operator"),
            json!({"loop": t.loop_file, "workspace": "proj"}),
        );
        assert_eq!(r.status, 201, "{}", r.body);
        let id = r.json()["id"].as_str().unwrap().to_string();
        let (typed, late) = lines(&t.answer);
        if late {
            std::thread::sleep(LATE);
        }
        for l in &typed {
            let v = srv.wait_run("hitl", &id, |v| v["status"] == "waiting");
            assert_eq!(
                v["approvals"],
                json!([]),
                "a question, not an approval: {v:#}"
            );
            if api {
                // The verdict is an approver's, as an approval's decision is.
                let r = srv.post(
                    &format!("/api/v1/runs/{id}/answer"),
                    srv.token("hitl", "operator"),
                    json!({ "text": l }),
                );
                assert_eq!(r.status, 403, "{}", r.body);
                assert!(r.error().contains("needs the approver role"), "{}", r.body);
                let r = srv.post(
                    &format!("/api/v1/runs/{id}/answer"),
                    srv.token("hitl", "approver"),
                    json!({ "text": l }),
                );
                assert_eq!(r.status, 200, "{}", r.body);
                continue;
            }
            let args: Vec<&str> = match l.split_once(' ') {
                _ if l == "y" => vec!["runs", "approve", &id],
                Some(("n", reason)) => vec!["runs", "deny", &id, "--reason", reason],
                _ => vec!["runs", "answer", &id, l],
            };
            let cli = |role: &str| {
                std::process::Command::new(BIN)
                    .args(&args)
                    .args(["--server", &url])
                    .current_dir(std::env::temp_dir())
                    .env_remove("LOOPBOX_STORE")
                    .env("LOOPBOX_TOKEN", srv.token("hitl", role))
                    .stdin(std::process::Stdio::null())
                    .output()
                    .unwrap()
            };
            if l == "y" {
                // An operator's approve is the server's 403, said as such.
                let o = cli("operator");
                let said = String::from_utf8_lossy(&o.stderr);
                assert!(
                    !o.status.success() && said.contains("needs the approver role"),
                    "{said}"
                );
            }
            let o = cli("approver");
            assert!(
                o.status.success()
                    && String::from_utf8_lossy(&o.stdout).starts_with("answered run "),
                "{args:?}: {}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        let v = srv.wait_final("hitl", &id);
        let path: Vec<String> = v["outcome"]["data"]["path"]
            .as_array()
            .map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
            .unwrap_or_default();
        let success = v["status"] == "done";
        if path != t.path || success != (t.exit_code == 0) {
            failures.push(format!(
                "{} (answer {:?}, {}): little-loops went {:?} (exit {}); loopbox went {path:?} ({})",
                t.loop_file,
                t.answer,
                if api { "the API" } else { "the CLI" },
                t.path,
                t.exit_code,
                v["status"]
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The approvals inbox shows the question a run waits on, with its prompt,
/// and an approver's form answers it (a viewer sees no form).
#[test]
fn the_dashboards_inbox_shows_the_question_and_its_form_answers_it() {
    let srv = shared();
    srv.set_config("hitl", CONFIG);
    let proj = srv.root("hitl").join("proj");
    let file = "human-approval-answered.yaml";
    std::fs::copy(
        repo().join("tests/conformance/loops").join(file),
        proj.join(file),
    )
    .unwrap();
    let r = srv.post(
        "/api/v1/runs",
        srv.token("hitl", "operator"),
        json!({"loop": file, "workspace": "proj"}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let id = r.json()["id"].as_str().unwrap().to_string();
    srv.wait_run("hitl", &id, |v| v["status"] == "waiting");
    let page = |role: &str| {
        let auth = format!("Bearer {}", srv.token("hitl", role));
        http(
            &srv.addr,
            "GET",
            "/approvals",
            &[("Authorization", &auth)],
            None,
        )
    };
    let html = page("approver").body;
    let card = html
        .split(&format!("id=\"question-{id}\""))
        .nth(1)
        .unwrap_or_else(|| panic!("no question card for {id}: {html}"));
    assert!(
        card.contains("Human approval requested")
            && card.contains("Prompt: Proposed change: retry 5 times. Approve?"),
        "{card}"
    );
    assert!(
        card.contains(&format!("action=\"/questions/{id}\"")),
        "{card}"
    );
    let viewer = page("viewer").body;
    assert!(
        viewer.contains(&format!("id=\"question-{id}\""))
            && !viewer.contains(&format!("action=\"/questions/{id}\"")),
        "{viewer}"
    );
    let auth = format!("Bearer {}", srv.token("hitl", "approver"));
    let r = http(
        &srv.addr,
        "POST",
        &format!("/questions/{id}"),
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        Some(b"verdict=reject&text=too+risky"),
    );
    assert_eq!(
        (r.status, r.header("location")),
        (303, Some("/approvals?note=answered")),
        "{}",
        r.body
    );
    let v = srv.wait_final("hitl", &id);
    assert_eq!(
        v["outcome"]["data"]["path"],
        json!(["prepare", "ask", "rejected", "done"]),
        "{v:#}"
    );
    // Under `approvals.self = false`, the approver who started a run may not
    // answer its question.
    let r = srv.post(
        "/api/v1/runs",
        srv.token("hitl", "approver"),
        json!({"loop": file, "workspace": "proj"}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let own = r.json()["id"].as_str().unwrap().to_string();
    srv.wait_run("hitl", &own, |v| v["status"] == "waiting");
    let r = srv.post(
        &format!("/api/v1/runs/{own}/answer"),
        srv.token("hitl", "approver"),
        json!({"text": "y"}),
    );
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(
        r.error().contains("approvals.self = false")
            && r.error()
                .contains("someone else must answer its human_approval question"),
        "{}",
        r.body
    );
    let r = srv.post(
        &format!("/api/v1/runs/{own}/cancel"),
        srv.token("hitl", "operator"),
        json!({}),
    );
    assert!(r.status < 300, "{}", r.body);
}
