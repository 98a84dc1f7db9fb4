//! `loopbox runs`: the runs in this workspace's store (standalone runs and
//! hook sessions alike, newest first), and the commands that look into one run
//! or move it on: show, log, resume, answer, tick, approve, deny, cancel.

mod approve;
mod cancel;
mod cont;
mod export;
mod lease;
mod log;
mod show;

use std::path::Path;

use clap::{Args, Subcommand};
use serde_json::json;

use super::{Failure, exit};
use loopbox::db::{Db, STORE_DIR, STORE_FILE};
use loopbox::ui::{one_line, rfc3339, utc};

#[derive(Debug, Args)]
pub struct RunsArgs {
    #[command(subcommand)]
    command: Option<RunsCommand>,
    /// Print JSON (one array for the list)
    #[arg(long, global = true)]
    pub(super) json: bool,
    /// A shared store, postgres://USER@HOST:PORT/DB, no password here (default: LOOPBOX_STORE, which may hold one; else the workspace's)
    #[arg(long, value_name = "URL", global = true)]
    store: Option<String>,
}

/// The shared store `--store` or `LOOPBOX_STORE` names, for every command here.
static SHARED_STORE: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

#[derive(Debug, Subcommand)]
enum RunsCommand {
    /// Everything about one run: status, counters, events, journal
    Show(show::ShowArgs),
    /// A run's log; --follow keeps printing while the run goes on
    Log(log::LogArgs),
    /// Continue a run that was interrupted, or is parked
    Resume(cont::ResumeArgs),
    /// Answer the question a parked run asked (delivers `user-input`)
    Answer(cont::AnswerArgs),
    /// Deliver a `tick` to a run waiting for events, or wake a sleeping one now
    Tick(cont::TickArgs),
    /// Approve the ask-tier action a run waits for, then continue the run
    Approve(approve::DecideArgs),
    /// Deny the ask-tier action a run waits for (the policy gets `declined`), then continue the run
    Deny(approve::DecideArgs),
    /// Stop a run: now if no process drives it, else at its next step
    Cancel(cancel::CancelArgs),
    /// Write a run as a scenario file for `loopbox test` (--scenario)
    Export(export::ExportArgs),
}

pub fn execute(args: RunsArgs, workspace: &Path) -> Result<i32, Failure> {
    let shared = loopbox::serve::store_option(args.store.as_deref()).map_err(Failure::usage)?;
    let _ = SHARED_STORE.set(shared);
    match args.command {
        None => list(args.json, workspace),
        Some(RunsCommand::Show(a)) => show::execute(a, args.json, workspace),
        Some(RunsCommand::Log(a)) => log::execute(a, args.json, workspace),
        Some(RunsCommand::Resume(a)) => cont::resume(a, args.json, workspace),
        Some(RunsCommand::Answer(a)) => cont::answer(a, args.json, workspace),
        Some(RunsCommand::Tick(a)) => cont::tick(a, args.json, workspace),
        Some(RunsCommand::Approve(a)) => approve::execute(
            a,
            loopbox::db::approvals::Verdict::Approve,
            args.json,
            workspace,
        ),
        Some(RunsCommand::Deny(a)) => approve::execute(
            a,
            loopbox::db::approvals::Verdict::Deny,
            args.json,
            workspace,
        ),
        Some(RunsCommand::Cancel(a)) => cancel::execute(a, args.json, workspace),
        Some(RunsCommand::Export(a)) => export::execute(a, args.json, workspace),
    }
}

/// Whether the commands here work on a shared store (`--store`, `LOOPBOX_STORE`).
fn on_shared_store() -> bool {
    SHARED_STORE.get().is_some_and(Option::is_some)
}

/// The workspace's store, which must exist already.
fn open_store(workspace: &Path) -> Result<Db, Failure> {
    if let Some(url) = SHARED_STORE.get().cloned().flatten() {
        return Db::open_postgres(&url).map_err(Failure::internal);
    }
    Db::open(&store_path(workspace)?).map_err(Failure::internal)
}

/// The workspace's store, which must exist already, opened for reading only:
/// what only looks at runs needs no free space and changes nothing.
fn read_store(workspace: &Path) -> Result<Db, Failure> {
    if let Some(url) = SHARED_STORE.get().cloned().flatten() {
        return Db::open_postgres(&url).map_err(Failure::internal);
    }
    Db::open_read_only(&store_path(workspace)?).map_err(Failure::internal)
}

fn store_path(workspace: &Path) -> Result<std::path::PathBuf, Failure> {
    let path = workspace.join(STORE_DIR).join(STORE_FILE);
    if !path.is_file() {
        return Err(Failure::usage(anyhow::anyhow!(
            "there are no runs in `{}` yet (start one with `loopbox run POLICY`)",
            workspace.display()
        )));
    }
    Ok(path)
}

fn list(json: bool, workspace: &Path) -> Result<i32, Failure> {
    // A shared store is listed wherever the command runs (it said "no runs in
    // . yet" outside a workspace, without looking at the store it was given).
    if !on_shared_store() && !workspace.join(STORE_DIR).join(STORE_FILE).is_file() {
        if json {
            loopbox::outln!("[]");
        } else {
            loopbox::outln!(
                "no runs in {} yet (start one with `loopbox run POLICY`)",
                workspace.display()
            );
        }
        return Ok(exit::OK);
    }
    // Read only: a run whose driver is gone shows as interrupted without being marked so.
    let db = read_store(workspace)?;
    let runs = db.list_runs().map_err(Failure::internal)?;
    // When each parked run wakes (a `sleep` decision's timer), if it does.
    let wakes: Vec<Option<i64>> = runs
        .iter()
        .map(|(r, _)| {
            if r.status == loopbox::db::RunStatus::Waiting {
                db.wake_at(&r.id).ok().flatten()
            } else {
                None
            }
        })
        .collect();
    if json {
        let rows: Vec<_> = runs
            .iter()
            .zip(&wakes)
            .map(|((r, last), wakes)| {
                json!({
                    "id": r.id, "policy": r.policy, "status": r.seen_status(), "started": rfc3339(r.created_at_ms),
                    "updated": rfc3339(r.updated_at_ms), "last_event": last, "turns": r.turns, "actions": r.actions,
                    "wakes": wakes.map(rfc3339), "spend": spend_json(&r.spent),
                })
            })
            .collect();
        loopbox::outln!("{}", serde_json::Value::Array(rows));
        return Ok(exit::OK);
    }
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
    for ((r, last), wakes) in runs.iter().zip(&wakes) {
        loopbox::outln!(
            "{:<20} {:<28} {:<11} {:<20} {:<14} {:>7} {:>10}  {}",
            r.id,
            keep_tail(&one_line(&r.policy), 28),
            // As a str: the status's Display ignores the column's width.
            r.seen_status().as_str(),
            utc(r.created_at_ms),
            one_line(last.as_deref().unwrap_or("-")),
            r.actions,
            r.spent.cost_text(),
            wakes.map_or("-".to_string(), utc)
        );
    }
    Ok(exit::OK)
}

/// A run's totals in `--json` (see [`loopbox::spend::Totals::json`]).
pub(super) fn spend_json(t: &loopbox::spend::Totals) -> serde_json::Value {
    t.json()
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
