//! `loopbox serve audit`: the audit log, newest first.

use clap::Args;
use serde_json::{Value, json};

use super::super::{Failure, exit};
use loopbox::db::audit::AuditFilter;
use loopbox::serve::Setup;
use loopbox::ui::{Untrusted, one_line, rfc3339, utc};

#[derive(Debug, Args)]
pub struct AuditArgs {
    /// Only this tenant's acts
    #[arg(long)]
    tenant: Option<String>,
    /// How many acts to show
    #[arg(long, default_value_t = 100)]
    limit: usize,
    /// Only acts numbered below this (page back)
    #[arg(long)]
    before: Option<i64>,
    /// Print one JSON object
    #[arg(long)]
    pub(super) json: bool,
}

pub fn execute(args: AuditArgs, setup: &Setup) -> Result<i32, Failure> {
    if let Some(t) = &args.tenant {
        setup.tenants.named(t).map_err(Failure::usage)?;
    }
    let store = setup.store().map_err(Failure::internal)?;
    let rows = store
        .db()
        .audit(&AuditFilter {
            tenant: args.tenant.clone(),
            before: args.before,
            limit: args.limit.clamp(1, 10_000),
        })
        .map_err(Failure::internal)?;
    if args.json {
        let rows: Vec<Value> = rows
            .iter()
            .map(|r| {
                json!({
                    "seq": r.seq, "at": rfc3339(r.at_ms), "actor": r.entry.actor, "tenant": r.entry.tenant,
                    "act": r.entry.act, "target": r.entry.target, "digest": r.entry.digest,
                    "outcome": r.entry.outcome, "detail": r.entry.detail,
                })
            })
            .collect();
        loopbox::outln!("{}", json!({"audit": rows}));
        return Ok(exit::OK);
    }
    if rows.is_empty() {
        loopbox::outln!("no acts recorded");
    }
    for r in rows {
        let e = &r.entry;
        loopbox::outln!(
            "{:>6} {} UTC {:<10} {:<24} {:<14} {} {}",
            r.seq,
            utc(r.at_ms),
            one_line(e.tenant.as_deref().unwrap_or("-")),
            one_line(&e.actor),
            one_line(&e.act),
            one_line(&e.target),
            Untrusted(&e.outcome)
        );
    }
    Ok(exit::OK)
}
