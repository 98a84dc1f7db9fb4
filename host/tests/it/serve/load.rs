//! Many runs at once, and the quotas that bound a tenant.

use std::time::Instant;

use serde_json::json;

use super::shared;

#[test]
fn fifty_runs_across_three_tenants_all_finish() {
    let srv = shared();
    let tenants = ["alpha", "beta", "gamma"];
    let started = Instant::now();
    let runs: Vec<(String, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..50)
            .map(|i| {
                let t = tenants[i % 3];
                s.spawn(move || {
                    let id = srv.start_probe(
                        t,
                        json!({"op": "exec", "argv": ["echo", format!("run {i}")]}),
                    );
                    (t.to_string(), id)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, (t, id)) in runs.iter().enumerate() {
        let v = srv.wait_final(t, id);
        assert_eq!(v["status"], "done", "{v:#}");
        assert_eq!(
            v["outcome"]["data"]["ok"]["stdout"],
            format!("run {i}\n"),
            "{v:#}"
        );
        assert_eq!(v["actions"], 1);
        assert_eq!(v["tenant"], t.as_str());
    }
    eprintln!(
        "50 runs across 3 tenants finished in {:?}",
        started.elapsed()
    );
}

#[test]
fn quotas_refuse_with_the_quota_and_its_value_named() {
    let srv = shared();
    // tiny: one run at a time, one queued, three actions an hour.
    let first = srv.start_probe("tiny", json!({"op": "exec", "argv": ["sleep", "2"]}));
    srv.wait_run("tiny", &first, |v| v["driven"] == true);
    let second = srv.start_probe("tiny", json!({"op": "exec", "argv": ["echo", "two"]}));
    let queued = srv
        .get(
            &format!("/api/v1/runs/{second}"),
            srv.token("tiny", "viewer"),
        )
        .json();
    assert_eq!(
        queued["status"], "queued",
        "max_running = 1: it waits its turn"
    );
    let audited = srv
        .store()
        .audit(&loopbox::db::audit::AuditFilter {
            tenant: Some("tiny".into()),
            before: None,
            limit: 1000,
        })
        .unwrap()
        .len();
    let r = srv.post(
        "/api/v1/runs",
        srv.token("tiny", "operator"),
        json!({"policy": "probe", "workspace": "proj", "input": {"op": "echo"}}),
    );
    assert_eq!(r.status, 429, "{}", r.body);
    assert_eq!(
        r.error(),
        "tenant `tiny` has 1 runs queued (tenants.tiny.max_queued = 1); wait for some to start, or cancel some"
    );
    // The refusal is audited, and no run was made.
    let audit = srv
        .store()
        .audit(&loopbox::db::audit::AuditFilter {
            tenant: Some("tiny".into()),
            before: None,
            limit: 1000,
        })
        .unwrap();
    assert_eq!(audit.len(), audited + 1);
    assert!(
        audit[0]
            .entry
            .outcome
            .starts_with("refused: tenant `tiny` has 1 runs queued"),
        "{:?}",
        audit[0]
    );
    assert_eq!(
        srv.get("/api/v1/runs?limit=500", srv.token("tiny", "viewer"))
            .json()["runs"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    srv.wait_final("tiny", &first);
    srv.wait_final("tiny", &second);
    // Two actions spent; the third is the last in the hour, the fourth is refused.
    let third = srv.start_probe("tiny", json!({"op": "exec", "argv": ["echo", "three"]}));
    let v = srv.wait_final("tiny", &third);
    assert_eq!(v["outcome"]["data"]["ok"]["exit_code"], 0, "{v:#}");
    let fourth = srv.start_probe("tiny", json!({"op": "exec", "argv": ["echo", "four"]}));
    let v = srv.wait_final("tiny", &fourth);
    let err = &v["outcome"]["data"]["err"];
    assert_eq!(err["kind"], "budget-exhausted", "{v:#}");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("tenants.tiny.actions_per_hour = 3"),
        "{v:#}"
    );
}
