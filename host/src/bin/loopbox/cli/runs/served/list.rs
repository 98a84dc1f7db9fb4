//! `loopbox runs --server URL [--limit N] [--before ID] [--status S] [--policy P]`:
//! the tenant's runs, newest first, a page of the API's `GET /api/v1/runs`
//! at a time, printed as `loopbox runs` prints a workspace's.

use serde_json::Value;

use super::super::super::{Failure, exit};
use super::super::list::{ListArgs, Listed, Printer, next_command, pages};
use super::client::Client;
use super::ms;

fn listed(v: &Value) -> Listed {
    Listed {
        id: v["id"].as_str().unwrap_or_default().to_string(),
        policy: v["policy"].as_str().unwrap_or_default().to_string(),
        loop_name: v["loop"].as_str().map(String::from),
        status: v["status"].as_str().unwrap_or_default().to_string(),
        started_ms: ms(&v["started"]).unwrap_or(0),
        updated_ms: ms(&v["updated"]).unwrap_or(0),
        last_event: v["last_event"].as_str().map(String::from),
        turns: v["turns"].as_u64().unwrap_or(0),
        actions: v["actions"].as_u64().unwrap_or(0),
        wakes_ms: ms(&v["wakes"]),
        spent: loopbox::spend::Totals::from_json(&v["spend"]),
    }
}

pub fn execute(c: &Client, a: ListArgs, json: bool) -> Result<i32, Failure> {
    let mut printer = Printer::new(json);
    let next = pages(&a, &mut printer, |before, n| {
        let mut q: Vec<(&str, String)> = vec![("limit", n.to_string())];
        if let Some(b) = before {
            q.push(("before", b));
        }
        if let Some(s) = a.status {
            q.push(("status", s.to_string()));
        }
        if let Some(p) = &a.policy {
            q.push(("policy", p.clone()));
        }
        let query = serde_urlencoded::to_string(&q).map_err(|e| Failure::usage(e.into()))?;
        let page = c.get(&format!("/api/v1/runs?{query}"))?;
        let rows: Vec<Listed> = page["runs"]
            .as_array()
            .map(|r| r.iter().map(listed).collect())
            .unwrap_or_default();
        Ok((rows, !page["next"].is_null()))
    })?;
    let none = if a.status.is_some() || a.policy.is_some() || a.before.is_some() {
        "no runs match".to_string()
    } else {
        format!(
            "no runs on the server at {} yet for this token's tenant",
            c.url
        )
    };
    let tail = format!(" --server {}", c.url);
    printer.end(&none, next.map(|b| next_command(&a, &b, &tail)));
    Ok(exit::OK)
}
