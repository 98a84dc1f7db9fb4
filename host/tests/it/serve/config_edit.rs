//! Issue 45, defect 2: an edit of a tenant's config while a run waits. An
//! edit that does not touch what the run's grants are made of (another
//! `[policies.NAME]`) leaves it alone: the approved command runs. One that
//! does parks it `interrupted`, and the resume its log names goes on with it
//! (on PostgreSQL, in the `loopbox worker` that claims the run next).

use serde_json::json;

use super::{Srv, scratch};

/// Top-level grants: `touch` needs an approval; `extra` goes at the end.
fn config(extra: &str) -> String {
    format!("[shell]\nallow = [[\"echo\"]{extra}]\nask = [[\"touch\"]]\n")
}

fn with_other_policy(base: &str) -> String {
    format!(
        "{base}\n[policies.other]\nsource = {:?}\nunsigned = true\n",
        crate::common::probe().display().to_string()
    )
}

/// A YAML loop that touches `file` (an approval) and ends.
fn write_loop(srv: &Srv, name: &str, file: &str) {
    std::fs::write(
        srv.root("t").join("proj").join(name),
        format!(
            "name: touch-it\ninitial: write\nstates:\n  write:\n    exec: [touch, {file}]\n    next: done\n  done:\n    terminal: true\n"
        ),
    )
    .unwrap();
}

/// Start loop `name`; its id once its approval is pending, and the approval.
fn start_waiting(srv: &Srv, name: &str) -> (String, serde_json::Value) {
    let r = srv.post(
        "/api/v1/runs",
        srv.token("t", "operator"),
        json!({"loop": name, "workspace": "proj"}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let id = r.json()["id"].as_str().unwrap().to_string();
    let a = srv.pending_approval("t", &id);
    (id, a)
}

fn approve(srv: &Srv, a: &serde_json::Value) {
    let r = srv.post(
        &format!("/api/v1/approvals/{}/approve", a["id"].as_str().unwrap()),
        srv.token("t", "approver"),
        json!({"digest": a["digest"]}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
}

#[test]
fn an_unrelated_config_edit_keeps_a_waiting_run_and_a_related_one_parks_it_resumably() {
    let dir = scratch();
    let mut srv = Srv::prepare(dir.path(), "", &[("t", "")]);
    srv.set_config("t", &config(""));
    srv.start();
    let proj = srv.root("t").join("proj");

    // Another policy's section added while the loop waits: not the loop's grants.
    write_loop(&srv, "one.yaml", "one.txt");
    let (one, a) = start_waiting(&srv, "one.yaml");
    srv.set_config("t", &with_other_policy(&config("")));
    approve(&srv, &a);
    let v = srv.wait_final("t", &one);
    assert_eq!(v["status"], "done", "{v:#}");
    assert!(proj.join("one.txt").exists(), "the approved command ran");

    // The top-level grants widened while the loop waits: parked, not ended.
    write_loop(&srv, "two.yaml", "two.txt");
    let (two, a) = start_waiting(&srv, "two.yaml");
    srv.set_config("t", &with_other_policy(&config(", [\"cat\"]")));
    approve(&srv, &a);
    let v = srv.wait_run("t", &two, |v| {
        v["status"] != "waiting" && v["status"] != "queued" && v["status"] != "running"
    });
    assert_eq!(v["status"], "interrupted", "{v:#}");
    assert!(
        !proj.join("two.txt").exists(),
        "nothing ran under the new grants"
    );
    let log: Vec<String> = srv
        .store()
        .log(&two)
        .unwrap()
        .into_iter()
        .map(|l| l.message)
        .collect();
    let why = log.join("\n");
    assert!(
        why.contains("shell.allow") && why.contains("accept_config_change"),
        "the log names the key and the way on: {why}"
    );
    // The way on the message names works, on a shared (PostgreSQL) store too:
    // the acceptance is recorded with the run for whichever worker claims it.
    let r = srv.post(
        &format!("/api/v1/runs/{two}/resume"),
        srv.token("t", "operator"),
        json!({"accept_config_change": true}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    // The yes was given under the old grants: the command asks again under the new.
    let a = srv.pending_approval("t", &two);
    approve(&srv, &a);
    let v = srv.wait_final("t", &two);
    assert_eq!(v["status"], "done", "{v:#}");
    assert!(
        proj.join("two.txt").exists(),
        "the approved command ran once accepted"
    );
}
