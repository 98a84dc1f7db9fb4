//! What a tenant's runs spend, shown per run and per tenant, and its daily
//! budget (`tenants.NAME.max_cost_usd_per_day`) stopping them, across a
//! `kill -9` of the server. The agent is `fixtures/agents/costly-claude` (turn
//! N of a workspace costs N x $0.10) run by the `claude` preset.

use serde_json::{Value, json};

use super::{Srv, scratch};
use crate::common;

const NEVER: &str =
    r#"{"prompt": "Fix the build.", "completion_promise": "NEVER", "max_iterations": 50}"#;

pub(super) fn start_ralph(srv: &Srv) -> String {
    start_ralph_as(srv, "spender")
}

/// [`start_ralph`] in `tenant`'s `proj`.
pub(super) fn start_ralph_as(srv: &Srv, tenant: &str) -> String {
    let r = srv.post(
        "/api/v1/runs",
        srv.token(tenant, "operator"),
        json!({"policy": "ralph", "workspace": "proj", "input": serde_json::from_str::<Value>(NEVER).unwrap(), "max_turns": 20}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    r.json()["id"].as_str().unwrap().to_string()
}

fn close(a: &Value, b: f64) -> bool {
    a.as_f64().is_some_and(|a| (a - b).abs() < 1e-9)
}

/// A server whose tenant `spender` (with `tenant_lines` in its section) has
/// builtin:ralph installed, its agent the costly script as `claude`.
pub(super) fn costly_server(dir: &std::path::Path, tenant_lines: &str) -> Srv {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(
        common::repo().join("host/tests/fixtures/agents/costly-claude"),
        bin.join("claude"),
    )
    .unwrap();
    let mut srv = Srv::prepare(dir, "", &[("spender", tenant_lines)]);
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display());
    srv.set_config(
        "spender",
        &format!(
            "[policies.ralph]\nsource = \"builtin:ralph\"\n\n[policies.ralph.shell]\npath = \"{path}\"\n\n\
             [policies.ralph.agent]\nrunner = \"claude\"\nwritable = []\npass_env = []\n"
        ),
    );
    srv.start();
    srv
}

#[test]
fn a_tenants_daily_budget_stops_its_runs_and_its_spend_is_shown_per_run_and_tenant() {
    let dir = scratch();
    let mut srv = costly_server(dir.path(), "max_cost_usd_per_day = 0.25\n");
    let viewer = srv.token("spender", "viewer").to_string();
    let turns_file = srv.root("spender").join("proj/.costly-agent/turns");
    let calls = || {
        std::fs::read_to_string(&turns_file)
            .map(|t| t.trim().parse::<u32>().unwrap())
            .unwrap_or(0)
    };
    // $0.10, then $0.20: $0.30 is past the tenant's $0.25, so no third turn starts.
    let first = start_ralph(&srv);
    let v = srv.wait_final("spender", &first);
    let why = "the tenant's budget tenants.spender.max_cost_usd_per_day = 0.25 is used: its runs spent $0.3000 over 2 agent turn(s) in the last 24 hours";
    assert_eq!(
        (v["status"].as_str(), v["outcome"]["summary"].as_str()),
        (Some("failed"), Some(why)),
        "{v:#}"
    );
    assert_eq!(calls(), 2);
    assert!(close(&v["spend"]["cost_usd"], 0.3), "{v:#}");
    let costs: Vec<f64> = v["agent_turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["cost_usd"].as_f64().unwrap())
        .collect();
    assert_eq!(costs, [0.1, 0.2]);
    let list = srv.get("/api/v1/runs", &viewer).json();
    assert!(
        close(&list["runs"][0]["spend"]["cost_usd"], 0.3),
        "{list:#}"
    );
    let spend = srv.get("/api/v1/spend", &viewer).json();
    assert!(close(&spend["day"]["cost_usd"], 0.3), "{spend:#}");
    assert_eq!(spend["day"]["turns"], 2);
    assert!(close(&spend["total"]["cost_usd"], 0.3));
    assert!(close(&spend["budgets"]["max_cost_usd_per_day"], 0.25));
    // The dashboard shows the same: the tenant's day against its budget, each
    // run's cost, and a run's agent turns.
    let page = |path: &str| {
        let auth = format!("Bearer {viewer}");
        let r = super::http(&srv.addr, "GET", path, &[("Authorization", &auth)], None);
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        r.body
    };
    let runs = page("/runs");
    assert!(
        runs.contains("Last 24 hours: <strong>$0.3000</strong> of $0.2500"),
        "{runs}"
    );
    assert!(runs.contains(r#"data-label="Cost">$0.3000</td>"#), "{runs}");
    let one = page(&format!("/runs/{first}"));
    assert!(
        one.contains("$0.3000 · 3450 tokens · 2 agent turns"),
        "{one}"
    );
    assert!(
        one.contains("Agent turns") && one.contains("$0.1000") && one.contains("$0.2000"),
        "{one}"
    );

    // Another run of the tenant starts no turn at all.
    let second = start_ralph(&srv);
    let v = srv.wait_final("spender", &second);
    assert_eq!(v["outcome"]["summary"].as_str(), Some(why), "{v:#}");
    assert_eq!(calls(), 2);

    // A server killed and started again does not hand the tenant a fresh day.
    srv.kill9();
    srv.start();
    let spend = srv.get("/api/v1/spend", &viewer).json();
    assert!(close(&spend["day"]["cost_usd"], 0.3), "{spend:#}");
    let third = start_ralph(&srv);
    let v = srv.wait_final("spender", &third);
    assert_eq!(v["outcome"]["summary"].as_str(), Some(why), "{v:#}");
    assert_eq!(calls(), 2);
}

#[test]
fn a_tenants_agent_turns_per_day_stops_its_runs_before_the_turn_past_it() {
    let dir = scratch();
    let srv = costly_server(dir.path(), "agent_turns_per_day = 3\n");
    let turns_file = srv.root("spender").join("proj/.costly-agent/turns");
    let v = srv.wait_final("spender", &start_ralph(&srv));
    assert_eq!(v["status"], "failed", "{v:#}");
    let why = v["outcome"]["summary"].as_str().unwrap_or_default();
    assert!(
        why.contains("tenants.spender.agent_turns_per_day = 3"),
        "{v:#}"
    );
    assert_eq!(
        std::fs::read_to_string(&turns_file).unwrap().trim(),
        "3",
        "three turns ran, the fourth never started"
    );
    // The next run of the tenant starts none.
    let v = srv.wait_final("spender", &start_ralph(&srv));
    assert!(
        v["outcome"]["summary"]
            .as_str()
            .unwrap_or_default()
            .contains("agent_turns_per_day = 3"),
        "{v:#}"
    );
    assert_eq!(std::fs::read_to_string(&turns_file).unwrap().trim(), "3");
}
