//! A tenant's quotas and daily budgets hold across processes: on a PostgreSQL
//! store with TWO `loopbox worker`s, `actions_per_hour = K` gives the tenant K
//! actions in total, and `max_cost_usd_per_day` stops its turns whichever
//! worker drives them. Each test parks one worker (SIGSTOP) while the other
//! spends, then lets the parked one drive: a worker counting in its own
//! memory (started before anything was spent) would let it spend again. On
//! SQLite (one server process) the same numbers hold.

use std::process::Child;

use serde_json::json;

use super::spend::{costly_server, start_ralph};
use super::{Srv, scratch};

/// A worker killed when the test ends, passed or not.
struct Second(Option<Child>);

impl Drop for Second {
    fn drop(&mut self) {
        if let Some(w) = &mut self.0 {
            let _ = w.kill();
            let _ = w.wait();
        }
    }
}

/// The second worker on a PostgreSQL store (the harness starts the first);
/// none on SQLite.
fn second_worker(srv: &Srv) -> Second {
    Second(
        srv.store
            .is_some()
            .then(|| srv.spawn_worker(&["--lease-ms", "1000"])),
    )
}

/// SIGSTOP or SIGCONT to a worker, if there is one.
fn signal(worker: Option<&Child>, sig: i32) {
    if let Some(w) = worker {
        // SAFETY: kill(2) on our own child's pid.
        assert_eq!(unsafe { libc::kill(w.id() as i32, sig) }, 0);
    }
}

struct Workers<'a> {
    first: Option<&'a Child>,
    second: Option<&'a Child>,
}

impl Workers<'_> {
    /// Only the first drives.
    fn first_only(&self) {
        signal(self.second, libc::SIGSTOP);
        signal(self.first, libc::SIGCONT);
    }
    /// Only the second drives.
    fn second_only(&self) {
        signal(self.first, libc::SIGSTOP);
        signal(self.second, libc::SIGCONT);
    }
    fn both(&self) {
        signal(self.first, libc::SIGCONT);
        signal(self.second, libc::SIGCONT);
    }
}

fn echo(srv: &Srv, word: &str) -> String {
    srv.start_probe("metered", json!({"op": "exec", "argv": ["echo", word]}))
}

#[test]
fn actions_per_hour_holds_across_two_workers() {
    let dir = scratch();
    let mut srv = Srv::prepare(
        dir.path(),
        "",
        &[(
            "metered",
            "max_running = 4\nmax_queued = 20\nactions_per_hour = 3\n",
        )],
    );
    srv.start();
    let second = second_worker(&srv);
    let w = Workers {
        first: srv.worker.as_ref(),
        second: second.0.as_ref(),
    };
    let ok = |id: &str| {
        let v = srv.wait_final("metered", id);
        assert_eq!(v["outcome"]["data"]["ok"]["exit_code"], 0, "{v:#}");
    };
    let refused = |id: &str| {
        let v = srv.wait_final("metered", id);
        let err = &v["outcome"]["data"]["err"];
        assert_eq!(err["kind"], "budget-exhausted", "{v:#}");
        let m = err["message"].as_str().unwrap();
        assert!(
            m.starts_with(
                "the tenant's quota tenants.metered.actions_per_hour = 3 is used up (3 actions in the last hour)"
            ),
            "{v:#}"
        );
    };
    // Two actions on the first worker, the third on the second; the fourth,
    // on the second, is refused.
    w.first_only();
    ok(&echo(&srv, "one"));
    ok(&echo(&srv, "two"));
    w.second_only();
    ok(&echo(&srv, "three"));
    refused(&echo(&srv, "four"));
    // Both driving, several at once: none gets through.
    w.both();
    let more: Vec<String> = (0..4).map(|i| echo(&srv, &format!("more {i}"))).collect();
    for id in &more {
        refused(id);
    }
    // The store's window holds at most the quota's value of rows.
    if srv.store.is_some() {
        let c = srv.store().second_connection().unwrap();
        let rows: i64 = c
            .query_row(
                "SELECT COUNT(*) FROM quota_spends WHERE tenant = ?1 AND kind = 'action'",
                ["metered"],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(rows, 3);
    }
}

#[test]
fn a_daily_cost_budget_holds_across_two_workers() {
    let dir = scratch();
    let srv = costly_server(dir.path(), "max_cost_usd_per_day = 0.25\nmax_running = 4\n");
    let second = second_worker(&srv);
    let w = Workers {
        first: srv.worker.as_ref(),
        second: second.0.as_ref(),
    };
    let turns_file = srv.root("spender").join("proj/.costly-agent/turns");
    let calls = || {
        std::fs::read_to_string(&turns_file)
            .map(|t| t.trim().parse::<u32>().unwrap())
            .unwrap_or(0)
    };
    let why = "the tenant's budget tenants.spender.max_cost_usd_per_day = 0.25 is used: its runs spent $0.3000 over 2 agent turn(s) in the last 24 hours";
    let failed_with_why = |id: &str| {
        let v = srv.wait_final("spender", id);
        assert_eq!(
            (v["status"].as_str(), v["outcome"]["summary"].as_str()),
            (Some("failed"), Some(why)),
            "{v:#}"
        );
    };
    // $0.10, then $0.20 on the first worker: past the $0.25.
    w.first_only();
    failed_with_why(&start_ralph(&srv));
    assert_eq!(calls(), 2);
    // The second worker, started before any of it was spent, sends no turn.
    w.second_only();
    failed_with_why(&start_ralph(&srv));
    w.both();
    failed_with_why(&start_ralph(&srv));
    assert_eq!(
        calls(),
        2,
        "an agent turn was sent past the tenant's daily budget"
    );
}

/// A store that fails at a quota's check lets nothing through, and loses
/// nothing: the action is not run, and once the store answers the run goes on
/// and the action runs once.
#[test]
fn a_store_failing_at_the_check_runs_nothing_and_the_run_goes_on() {
    if !super::on_postgres() {
        // The check is in the store only on a shared store.
        return;
    }
    let dir = scratch();
    let mut srv = Srv::prepare(
        dir.path(),
        "",
        &[(
            "metered",
            "max_running = 4\nmax_queued = 20\nactions_per_hour = 3\n",
        )],
    );
    srv.start();
    let admin = srv.store().second_connection().unwrap();
    admin
        .execute_batch("ALTER TABLE quota_spends RENAME TO quota_spends_gone")
        .unwrap();
    let id = srv.start_probe("metered", json!({"op": "exec", "argv": ["echo", "ran"]}));
    // While the store cannot count, the action does not run; the run is not failed.
    std::thread::sleep(std::time::Duration::from_secs(3));
    let v = srv
        .get(
            &format!("/api/v1/runs/{id}"),
            srv.token("metered", "viewer"),
        )
        .json();
    assert!(
        matches!(
            v["status"].as_str(),
            Some("queued" | "running" | "interrupted")
        ),
        "{v:#}"
    );
    assert!(
        v["journal"]
            .as_array()
            .is_none_or(|j| j.iter().all(|c| c["exit_code"].is_null())),
        "{v:#}"
    );
    // The store answers again: the run goes on, its action run once.
    admin
        .execute_batch("ALTER TABLE quota_spends_gone RENAME TO quota_spends")
        .unwrap();
    if v["status"] == "interrupted" {
        let r = srv.post(
            &format!("/api/v1/runs/{id}/resume"),
            srv.token("metered", "operator"),
            json!({}),
        );
        assert_eq!(r.status, 200, "{}", r.body);
    }
    let v = srv.wait_final("metered", &id);
    assert_eq!(v["outcome"]["data"]["ok"]["exit_code"], 0, "{v:#}");
    let shells = v["journal"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["kind"] == "shell")
        .count();
    assert_eq!(shells, 1, "{v:#}");
}
