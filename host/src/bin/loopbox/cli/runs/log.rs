//! `loopbox runs log ID [--follow]`: a run's log lines, as text or JSON lines.
//! `--follow` keeps printing new lines while a process drives the run.

use std::path::Path;
use std::time::Duration;

use clap::Args;
use serde_json::json;

use super::super::{Failure, exit};
use super::read_store;
use loopbox::db::LogRecord;
use loopbox::ui::{Untrusted, one_line, rfc3339, utc};

#[derive(Debug, Args)]
pub struct LogArgs {
    /// The run's id (see `loopbox runs`)
    pub(super) id: String,
    /// Keep printing new lines until no process drives the run
    #[arg(short, long)]
    pub(super) follow: bool,
}

pub(super) fn print(l: &LogRecord, json: bool) {
    if json {
        loopbox::outln!(
            "{}",
            json!({"at": rfc3339(l.at_ms), "level": l.level, "source": l.source, "message": l.message})
        );
    } else {
        // The message's own lines are indented under it: a policy's `\n` cannot
        // forge a line that looks like loopbox's.
        loopbox::outln!(
            "{} {:<5} [{}] {}",
            utc(l.at_ms),
            one_line(&l.level),
            one_line(&l.source),
            Untrusted(&l.message)
        );
    }
}

pub fn execute(args: LogArgs, json: bool, workspace: &Path) -> Result<i32, Failure> {
    let db = read_store(workspace)?;
    db.existing_run(&args.id).map_err(Failure::lookup)?;
    let mut seen = 0;
    loop {
        for (seq, line) in db.log_after(&args.id, seen).map_err(Failure::internal)? {
            print(&line, json);
            seen = seq;
        }
        if !args.follow {
            return Ok(exit::OK);
        }
        let run = db.existing_run(&args.id).map_err(Failure::internal)?;
        if !run.lease.as_ref().is_some_and(|o| o.is_alive()) {
            // The driver is gone: print what it wrote last, then stop.
            for (_, line) in db.log_after(&args.id, seen).map_err(Failure::internal)? {
                print(&line, json);
            }
            return Ok(exit::OK);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
