//! `loopbox runs`: the runs in this workspace's store (standalone runs and
//! hook sessions alike, newest first, a page at a time: [`list`]), and the
//! commands that look into one run or move it on: show, log, resume, answer,
//! tick, approve, deny, cancel. With `--server URL` (or `LOOPBOX_SERVER`) the
//! same commands act on a `loopbox serve`'s runs through its API ([`served`]).

mod approve;
mod cancel;
mod cont;
mod export;
mod lease;
mod list;
mod log;
mod served;
mod show;

use std::path::Path;

use clap::{Args, Subcommand};

use super::Failure;
use loopbox::db::{Db, STORE_DIR, STORE_FILE};

#[derive(Debug, Args)]
pub struct RunsArgs {
    #[command(subcommand)]
    command: Option<RunsCommand>,
    /// Print JSON (one array for the list)
    #[arg(long, global = true)]
    pub(super) json: bool,
    /// A shared store, postgres://USER@HOST:PORT/DB, no password here (default: LOOPBOX_STORE, which may hold one; else the workspace's)
    #[arg(long, value_name = "URL", global = true, conflicts_with = "server")]
    store: Option<String>,
    /// A `loopbox serve`'s runs, through its API: http://HOST:PORT (default: LOOPBOX_SERVER);
    /// the token comes from LOOPBOX_TOKEN or --token-file
    #[arg(long, value_name = "URL", global = true)]
    server: Option<String>,
    /// A file holding the server's token (default: LOOPBOX_TOKEN)
    #[arg(long, value_name = "PATH", global = true)]
    token_file: Option<std::path::PathBuf>,
    #[command(flatten)]
    list: list::ListArgs,
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
    let server = args.server.clone().or_else(|| {
        std::env::var("LOOPBOX_SERVER")
            .ok()
            .filter(|s| !s.is_empty())
    });
    if let Some(url) = server {
        // LOOPBOX_SERVER names a server: a --store given too says which one is meant.
        if args.store.is_some() {
            return Err(Failure::usage(anyhow::anyhow!(
                "--store and a server (LOOPBOX_SERVER) both given: leave one out (unset LOOPBOX_SERVER to use --store)"
            )));
        }
        return served::execute(args, &url);
    }
    if args.token_file.is_some() {
        return Err(Failure::usage(anyhow::anyhow!(
            "--token-file is a server's token: give --server URL too (or set LOOPBOX_SERVER)"
        )));
    }
    let shared = store_option(args.store.as_deref())?;
    let _ = SHARED_STORE.set(shared);
    match args.command {
        None => list::execute(args.list, args.json, workspace),
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

/// The shared store `--store` (or `LOOPBOX_STORE`) names. A file there (a
/// server's `DATA/loopbox.db`) is refused, pointing at `--server`: a server's
/// runs are its to move on, through its API, roles and audit log.
fn store_option(given: Option<&str>) -> Result<Option<String>, Failure> {
    // A path (no scheme) is a file. Anything else is checked as a URL by
    // serve::store_option, which refuses a password on the command line first.
    if let Some(s) = given
        && !s.contains("://")
    {
        return Err(Failure::usage(anyhow::anyhow!(
            "--store takes a shared PostgreSQL store (postgres://USER@HOST:PORT/DB), not `{}`: a server's runs, on SQLite or PostgreSQL, are reached through the server, `loopbox runs --server http://HOST:PORT` with LOOPBOX_TOKEN set to a token of it",
            loopbox::db::engine::postgres::redact(s)
        )));
    }
    loopbox::serve::store_option(given).map_err(Failure::usage)
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
            "there are no runs in `{}` yet (start one with `loopbox run POLICY`; a server's run: give --server URL, or set LOOPBOX_SERVER)",
            workspace.display()
        )));
    }
    Ok(path)
}

/// A run's totals in `--json` (see [`loopbox::spend::Totals::json`]).
pub(super) fn spend_json(t: &loopbox::spend::Totals) -> serde_json::Value {
    t.json()
}
