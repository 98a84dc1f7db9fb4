//! `loopbox runs [--limit N] [--before ID] [--status S] [--policy P]`: a page
//! of runs, newest first, printed as it is read (a table, or one JSON array
//! streamed row by row). The rows come a store page at a time
//! (`loopbox::db::page`, the query the server's API answers with), so memory
//! stays what one page needs however many runs the store holds. The same
//! printing serves a server's runs (`served::list`).

use std::path::Path;

use clap::Args;
use serde_json::json;

use super::super::{Failure, exit};
use super::{on_shared_store, read_store};
use loopbox::db::page::{MAX_PAGE, RunFilter, Whose};
use loopbox::db::{RunStatus, STORE_DIR, STORE_FILE};
use loopbox::ui::{one_line, rfc3339, utc};

#[derive(Debug, Args)]
pub struct ListArgs {
    /// At most this many runs (0: all of them, read a page at a time)
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub(super) limit: usize,
    /// Only runs older than this one: the last ID of the page before
    #[arg(long, value_name = "ID")]
    pub(super) before: Option<String>,
    /// Only runs with this status (queued, running, waiting, interrupted, done, failed, escalated, cancelled)
    #[arg(long, value_name = "STATUS", value_parser = status)]
    pub(super) status: Option<RunStatus>,
    /// Only runs of this policy (as `loopbox runs` shows it, or a server's [policies.NAME])
    #[arg(long, value_name = "POLICY")]
    pub(super) policy: Option<String>,
}

fn status(s: &str) -> Result<RunStatus, String> {
    s.parse::<RunStatus>()
}

/// One run of the list, wherever it was read.
pub(super) struct Listed {
    pub id: String,
    pub policy: String,
    /// A YAML loop's name: the run is listed by it.
    pub loop_name: Option<String>,
    pub status: String,
    pub started_ms: i64,
    pub updated_ms: i64,
    pub last_event: Option<String>,
    pub turns: u64,
    pub actions: u64,
    pub wakes_ms: Option<i64>,
    pub spent: loopbox::spend::Totals,
}

/// Prints the list as its rows come: a table's header first, or `[`; a row
/// each; then `]`, or where the next page starts.
pub(super) struct Printer {
    json: bool,
    rows: usize,
}

impl Printer {
    pub fn new(json: bool) -> Printer {
        Printer { json, rows: 0 }
    }

    pub fn row(&mut self, r: &Listed) {
        if self.json {
            let row = json!({
                "id": r.id, "policy": r.policy, "loop": r.loop_name, "status": r.status, "started": rfc3339(r.started_ms),
                "updated": rfc3339(r.updated_ms), "last_event": r.last_event, "turns": r.turns, "actions": r.actions,
                "wakes": r.wakes_ms.map(rfc3339), "spend": r.spent.json(),
            });
            let sep = if self.rows == 0 { "[" } else { "," };
            loopbox::outln!("{sep}{row}");
        } else {
            if self.rows == 0 {
                loopbox::outln!(
                    "{:<20} {:<28} {:<11} {:<20} {:<14} {:>7} {:>10}  WAKES (UTC)",
                    "ID",
                    "POLICY",
                    "STATUS",
                    "STARTED (UTC)",
                    "LAST EVENT",
                    "ACTIONS",
                    "COST"
                );
            }
            loopbox::outln!(
                "{:<20} {:<28} {:<11} {:<20} {:<14} {:>7} {:>10}  {}",
                one_line(&r.id),
                keep_tail(
                    &one_line(
                        &r.loop_name
                            .as_ref()
                            .map_or_else(|| r.policy.clone(), |n| format!("loop {n}"))
                    ),
                    28
                ),
                one_line(&r.status),
                utc(r.started_ms),
                one_line(r.last_event.as_deref().unwrap_or("-")),
                r.actions,
                r.spent.cost_text(),
                r.wakes_ms.map_or("-".to_string(), utc)
            );
        }
        self.rows += 1;
    }

    /// The end: `none` is what an empty list says; `next`, the command for
    /// the page after this one when there is one (on stderr: stdout is the list).
    pub fn end(self, none: &str, next: Option<String>) {
        match (self.json, self.rows) {
            (true, 0) => loopbox::outln!("[]"),
            (true, _) => loopbox::outln!("]"),
            (false, 0) => loopbox::outln!("{none}"),
            (false, _) => {}
        }
        if let Some(next) = next {
            loopbox::errln!("older runs: `{next}`");
        }
    }
}

/// Read and print up to `limit` runs (0: all), `fetch` giving a page of at
/// most N rows older than a run (or the newest) and whether more follow.
/// The command for the next page when there is one.
pub(super) fn pages(
    a: &ListArgs,
    printer: &mut Printer,
    mut fetch: impl FnMut(Option<String>, usize) -> Result<(Vec<Listed>, bool), Failure>,
) -> Result<Option<String>, Failure> {
    let mut before = a.before.clone();
    let mut left = if a.limit == 0 { usize::MAX } else { a.limit };
    while left > 0 {
        let n = left.min(MAX_PAGE);
        let (rows, more) = fetch(before.clone(), n)?;
        left -= rows.len();
        for r in &rows {
            printer.row(r);
        }
        match rows.last() {
            Some(last) if more => before = Some(last.id.clone()),
            _ => return Ok(None),
        }
    }
    Ok(before)
}

/// The flags that select `a`'s runs, to repeat in the next page's command.
pub(super) fn next_command(a: &ListArgs, before: &str, tail: &str) -> String {
    let mut cmd = format!("loopbox runs --before {before}");
    if a.limit != 50 {
        cmd.push_str(&format!(" --limit {}", a.limit));
    }
    if let Some(s) = a.status {
        cmd.push_str(&format!(" --status {s}"));
    }
    if let Some(p) = &a.policy {
        cmd.push_str(&format!(
            " --policy {}",
            loopbox::exec::grants::shell_quote(&one_line(p))
        ));
    }
    cmd.push_str(tail);
    cmd
}

pub fn execute(a: ListArgs, json: bool, workspace: &Path) -> Result<i32, Failure> {
    // A shared store is listed wherever the command runs (it said "no runs in
    // . yet" outside a workspace, without looking at the store it was given).
    if !on_shared_store() && !workspace.join(STORE_DIR).join(STORE_FILE).is_file() {
        Printer::new(json).end(
            &format!(
                "no runs in {} yet (start one with `loopbox run POLICY`; a server's runs: `loopbox runs --server URL`)",
                workspace.display()
            ),
            None,
        );
        return Ok(exit::OK);
    }
    // Read only: a run whose driver is gone shows as interrupted without being marked so.
    let db = read_store(workspace)?;
    let whose = if on_shared_store() {
        Whose::Any
    } else {
        Whose::Workspace
    };
    let mut printer = Printer::new(json);
    let next = pages(&a, &mut printer, |before, n| {
        let filter = RunFilter {
            status: a.status,
            policy: a.policy.clone(),
            before,
            limit: n,
        };
        let rows = db.run_page(whose, &filter).map_err(Failure::lookup)?;
        let more = rows.len() == n;
        let rows = rows
            .into_iter()
            .map(|r| Listed {
                status: r.seen_status().as_str().to_string(),
                // When a parked run wakes (a `sleep` decision's timer), if it does.
                wakes_ms: r.wake_at_ms.filter(|_| r.status == RunStatus::Waiting),
                id: r.id,
                policy: r.policy,
                loop_name: r.loop_name,
                started_ms: r.created_at_ms,
                updated_ms: r.updated_at_ms,
                last_event: r.last_event,
                turns: r.turns.into(),
                actions: r.actions,
                spent: r.spent,
            })
            .collect();
        Ok((rows, more))
    })?;
    let none = if a.status.is_some() || a.policy.is_some() || a.before.is_some() {
        "no runs match".to_string()
    } else {
        format!(
            "no runs in {} yet (start one with `loopbox run POLICY`)",
            workspace.display()
        )
    };
    printer.end(&none, next.map(|b| next_command(&a, &b, "")));
    Ok(exit::OK)
}

/// The end of `s` (a path: its file name matters most) within `max` characters.
fn keep_tail(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        s.to_string()
    } else {
        format!("…{}", s.chars().skip(n - max + 1).collect::<String>())
    }
}
