//! `loopbox runs`: the runs in this workspace's store, standalone and hook
//! sessions alike, newest first.

use std::path::Path;

use clap::Args;
use serde_json::json;

use super::{Failure, exit};
use crate::db::{Db, STORE_DIR};
use crate::ui::utc;

#[derive(Debug, Args)]
pub struct RunsArgs {
    /// Print one JSON array
    #[arg(long)]
    json: bool,
}

pub fn execute(args: RunsArgs, workspace: &Path) -> Result<i32, Failure> {
    if !workspace.join(STORE_DIR).join("loopbox.db").is_file() {
        if args.json {
            println!("[]");
        } else {
            println!("no runs in {} yet (start one with `loopbox run POLICY`)", workspace.display());
        }
        return Ok(exit::OK);
    }
    let db = Db::open_workspace(workspace).map_err(Failure::internal)?;
    let runs = db.list_runs().map_err(Failure::internal)?;
    if args.json {
        let rows: Vec<_> = runs
            .iter()
            .map(|(r, last)| {
                json!({
                    "id": r.id, "policy": r.policy, "status": r.status, "started": utc(r.created_at_ms),
                    "updated": utc(r.updated_at_ms), "last_event": last, "turns": r.turns, "actions": r.actions,
                })
            })
            .collect();
        println!("{}", serde_json::Value::Array(rows));
        return Ok(exit::OK);
    }
    println!("{:<20} {:<28} {:<10} {:<20} {:<14} {:>7}", "ID", "POLICY", "STATUS", "STARTED (UTC)", "LAST EVENT", "ACTIONS");
    for (r, last) in &runs {
        println!(
            "{:<20} {:<28} {:<10} {:<20} {:<14} {:>7}",
            r.id,
            keep_tail(&r.policy, 28),
            r.status,
            utc(r.created_at_ms),
            last.as_deref().unwrap_or("-"),
            r.actions
        );
    }
    Ok(exit::OK)
}

/// Keep the end of long policy paths, where the file name is.
/// The end of `s` (a path: its file name matters most) within `max` characters.
fn keep_tail(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max { s.to_string() } else { format!("…{}", s.chars().skip(n - max + 1).collect::<String>()) }
}
