//! `loopbox runs cancel ID`: stop a run. A run no process drives is cancelled
//! at once; a driven one is asked to stop through the store. Its driver looks
//! for the request every 200 ms and ends the event in progress: at the guest's
//! next host call, inside the guest, or while it waits; an action in progress
//! is killed.

use std::path::Path;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::json;

use super::super::{Failure, exit};
use super::open_store;
use loopbox::db::RunStatus;

#[derive(Debug, Args)]
pub struct CancelArgs {
    /// The run's id (see `loopbox runs`)
    pub(super) id: String,
    /// How long to wait for a driving process to stop, in seconds
    #[arg(long, default_value_t = 10)]
    pub(super) wait: u64,
}

pub fn execute(args: CancelArgs, json: bool, workspace: &Path) -> Result<i32, Failure> {
    let db = open_store(workspace)?;
    let run = db.existing_run(&args.id).map_err(Failure::lookup)?;
    if run.status.is_final() {
        return Err(Failure {
            code: exit::FAILURE,
            error: anyhow::anyhow!(
                "run {} already ended ({}); there is nothing to cancel",
                run.id,
                run.status
            ),
        });
    }
    db.request_cancel(&run.id).map_err(Failure::internal)?;
    let driver = run.lease.filter(|o| o.is_alive());
    let status = match &driver {
        None => {
            db.finish_driving(&run.id, RunStatus::Cancelled, None)
                .map_err(Failure::internal)?;
            RunStatus::Cancelled
        }
        Some(o) => {
            if !json {
                loopbox::errln!(
                    "asked loopbox (pid {}) to stop run {} at its next step",
                    o.pid,
                    run.id
                );
            }
            let deadline = Instant::now() + Duration::from_secs(args.wait);
            loop {
                let now = db.existing_run(&run.id).map_err(Failure::internal)?;
                if now.lease.is_none() || Instant::now() >= deadline {
                    break now.status;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    if json {
        loopbox::outln!("{}", json!({"run_id": run.id, "status": status}));
    } else if status == RunStatus::Cancelled {
        loopbox::outln!("cancelled: run {}", run.id);
    } else {
        loopbox::outln!(
            "run {} is still {status}: its driver has not stopped yet (it may be stuck outside loopbox's control); check again with `loopbox runs show {}`",
            run.id,
            run.id
        );
    }
    Ok(exit::OK)
}
