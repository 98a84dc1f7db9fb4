//! `loopbox runs --server URL ...`: a `loopbox serve`'s runs, through its
//! HTTP API (docs/serve.md) as one token of the server, the same whether the
//! server keeps its runs in SQLite or in PostgreSQL. Each subcommand is one
//! file here and prints what its local counterpart prints; `--json` keeps the
//! local shape. The server moves its runs on itself: a decision, an answer or
//! a resume here is handed to it, never driven in this process.

mod cancel;
mod client;
mod decide;
mod deliver;
mod list;
mod log;
mod resume;
mod show;

use serde_json::Value;

use super::super::Failure;
use super::{RunsArgs, RunsCommand};
use client::Client;
use loopbox::db::approvals::{Approval, ApprovalStatus, Verdict};

pub fn execute(args: RunsArgs, url: &str) -> Result<i32, Failure> {
    let c = Client::new(url, args.token_file.as_deref())?;
    let json = args.json;
    match args.command {
        None => list::execute(&c, args.list, json),
        Some(RunsCommand::Show(a)) => show::execute(&c, a, json),
        Some(RunsCommand::Log(a)) => log::execute(&c, a, json),
        Some(RunsCommand::Resume(a)) => resume::execute(&c, a, json),
        Some(RunsCommand::Answer(a)) => deliver::answer(&c, a, json),
        Some(RunsCommand::Tick(a)) => deliver::tick(&c, a, json),
        Some(RunsCommand::Approve(a)) => decide::execute(&c, a, Verdict::Approve, json),
        Some(RunsCommand::Deny(a)) => decide::execute(&c, a, Verdict::Deny, json),
        Some(RunsCommand::Cancel(a)) => cancel::execute(&c, a, json),
        Some(RunsCommand::Export(_)) => Err(Failure::usage(anyhow::anyhow!(
            "`loopbox runs export` reads a workspace's own store, not a server's: leave out --server (and LOOPBOX_SERVER)"
        ))),
    }
}

/// A flag that means nothing on a server, refused by name (with why).
fn refuse_flag(given: bool, flag: &str, why: &str) -> Result<(), Failure> {
    if given {
        return Err(Failure::usage(anyhow::anyhow!(
            "{flag} does not apply to a server's run: {why}"
        )));
    }
    Ok(())
}

/// `id` as one segment of an API path (a run's or an approval's id as typed).
fn segment(id: &str) -> String {
    id.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A time of the API (RFC 3339) in ms since the epoch.
fn ms(v: &Value) -> Option<i64> {
    v.as_str()
        .and_then(loopbox::serve::web::page::parse_rfc3339)
}

/// An approval as the API shows it (`serve::api::approvals::view`), as the
/// store holds it: what `runs approve` checks and prints, locally or here.
fn approval(v: &Value) -> Approval {
    let text = |k: &str| v[k].as_str().unwrap_or_default().to_string();
    let status = match v["status"].as_str().unwrap_or_default() {
        "approved" => ApprovalStatus::Approved,
        "denied" => ApprovalStatus::Denied,
        "expired" => ApprovalStatus::Expired,
        "void" => ApprovalStatus::Void,
        _ => ApprovalStatus::Pending,
    };
    Approval {
        id: text("id"),
        run_id: text("run_id"),
        position: serde_json::from_value(v["position"].clone()).ok(),
        digest: text("digest"),
        request: v["request"].clone(),
        what: text("what"),
        rule: text("rule"),
        status,
        requested_at_ms: ms(&v["requested"]).unwrap_or(0),
        deadline_ms: ms(&v["deadline"]).unwrap_or(0),
        allow_self: v["allow_self"].as_bool().unwrap_or(true),
        decided_by: v["decided_by"].as_str().map(String::from),
        decided_at_ms: ms(&v["decided"]),
        reason: v["reason"].as_str().map(String::from),
        consumed_at_ms: ms(&v["consumed"]),
    }
}

/// `loopbox runs ARGS --server URL`: a command to say next, as it is typed.
fn command(c: &Client, args: &str) -> String {
    loopbox::ui::runs_command_at(Some(&c.url), args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_one_path_segment_and_approvals_read_back() {
        assert_eq!(segment("r6b08cbb955463c"), "r6b08cbb955463c");
        assert_eq!(segment("../x y"), "..%2Fx%20y");
        let v = serde_json::json!({
            "id": "a1", "run_id": "r1", "status": "approved", "digest": "d", "what": "exec `tee`",
            "rule": "r", "requested": "1970-01-01T00:00:01.000Z", "deadline": "1970-01-01T01:00:00.000Z",
            "decided": null, "request": {"request": {"argv": ["tee"]}},
        });
        let a = approval(&v);
        assert_eq!(a.status, ApprovalStatus::Approved);
        assert_eq!((a.requested_at_ms, a.deadline_ms), (1000, 3_600_000));
        assert_eq!(a.decided_at_ms, None);
    }
}
