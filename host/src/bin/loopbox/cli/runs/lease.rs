//! The lease a `runs` command takes on a shared store before it drives a run
//! (`resume`, `answer`, `tick`, `approve`): a claim, as a `loopbox worker`
//! makes, so it never drives a run a live worker holds, its writes are fenced
//! by the run's epoch, and a worker takes the run over if this process dies.
//! The lease is renewed every TTL/3 while the run is driven.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::super::{Failure, exit};
use loopbox::db::Db;
use loopbox::db::claim::{DEFAULT_TTL_MS, Renewal};

/// A run held by claim; the renewals stop when it is dropped.
pub struct Held {
    done: Arc<AtomicBool>,
    renewing: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(t) = self.renewing.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// Claim run `id` on the shared store `db`, or say who holds it.
pub fn claim(db: &Db, id: &str) -> Result<Held, Failure> {
    let me = loopbox::db::lease::Owner::me().to_string();
    match db
        .claim_run(&me, DEFAULT_TTL_MS, id)
        .map_err(Failure::internal)?
    {
        Ok(_) => {}
        Err(holder) => {
            return Err(Failure {
                code: exit::BUSY,
                error: anyhow::anyhow!(
                    "run {id} is held by {} (a live lease on the shared store); wait for it to finish, or stop it with `loopbox runs cancel {id}`",
                    holder
                        .as_deref()
                        .map_or("another process".to_string(), |h| format!(
                            "the worker `{h}`"
                        ))
                ),
            });
        }
    }
    let done = Arc::new(AtomicBool::new(false));
    let (db, run, stop) = (db.clone(), id.to_string(), done.clone());
    let every = Duration::from_millis((DEFAULT_TTL_MS / 3) as u64);
    let renewing = std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            std::thread::park_timeout(every);
            if stop.load(Ordering::Relaxed) {
                break;
            }
            match db.heartbeat(&run, DEFAULT_TTL_MS) {
                Ok(Renewal::Renewed) => {}
                // Ended here: nothing more to renew.
                Ok(Renewal::Released) => break,
                // Taken over (this process was stopped past its lease): the fence
                // refuses every later write for the run.
                Ok(Renewal::TakenOver) => {
                    loopbox::errln!(
                        "loopbox: run {run}: its lease was taken over; nothing more of it is recorded here"
                    );
                    break;
                }
                Err(e) => loopbox::errln!("loopbox: run {run}: renewing its lease failed: {e:#}"),
            }
        }
    });
    Ok(Held {
        done,
        renewing: Some(renewing),
    })
}
