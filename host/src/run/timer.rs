//! A `sleep` decision: the run parks (status `waiting`, its wake time in the
//! run's row) until the timer's time, then the driver delivers the `tick` the
//! policy named. In the foreground the driver sleeps here; a cancel ends the
//! run, SIGINT/SIGTERM leave it parked; `loopbox runs tick ID` from another
//! process brings the wake time to now, and the sleeper wakes at its next look.

use std::time::Duration;

use anyhow::Result;

use crate::bindings::Timer;
use crate::db::RunStatus;
use crate::limits::stop::StopReason;
use crate::run::RunContext;

/// Why a sleep ended before its timer was due.
#[derive(Debug, Clone, PartialEq)]
pub enum Woken {
    /// `loopbox runs cancel`: the run ends.
    Cancelled,
    /// SIGINT or SIGTERM: the run stays parked; the text says how it goes on.
    Parked(String),
}

/// How often a sleeping run looks for a stop request or an earlier wake time.
const LOOK: Duration = Duration::from_millis(200);

/// Sleep until `timer` is due: `Ok(())` to deliver its tick, or how the run
/// stops instead (cancelled; parked for a later `runs resume` when interrupted).
pub async fn sleep(ctx: &RunContext, timer: &Timer) -> Result<Result<(), Woken>> {
    let due = timer.until_ms;
    if now() < due {
        ctx.db.park_until(&ctx.id, due)?;
        let when = crate::ui::utc(i64::try_from(due).unwrap_or(i64::MAX));
        ctx.log.host(
            "info",
            format!(
                "sleeping until {when} UTC: {}",
                crate::ui::one_line(&timer.reason)
            ),
        );
        ctx.log.ui().status(format!(
            "sleeping until {when} UTC ({}); `loopbox runs tick {}` wakes it now",
            crate::ui::one_line(&timer.reason),
            ctx.id
        ));
        loop {
            if ctx.db.cancel_requested(&ctx.id)? {
                ctx.stop().request(StopReason::Cancelled);
            }
            match ctx.stop().requested() {
                Some(StopReason::Cancelled) => return Ok(Err(Woken::Cancelled)),
                // (`Waiting` is raised by an action, never while the run sleeps.)
                Some(StopReason::Interrupted | StopReason::Waiting) => {
                    return Ok(Err(Woken::Parked(parked(&ctx.id, &when, &timer.reason))));
                }
                None => {}
            }
            let now = now();
            // The row's time moves only earlier (`runs tick`); the decision's is the plan.
            let woken = ctx
                .db
                .wake_at(&ctx.id)?
                .is_some_and(|w| (w.max(0) as u64) <= now);
            if now >= due || woken {
                break;
            }
            let left = Duration::from_millis(due - now).min(LOOK);
            tokio::select! {
                _ = tokio::time::sleep(left) => {}
                _ = ctx.stop().wait() => {}
            }
        }
    }
    ctx.db.set_status(&ctx.id, RunStatus::Running, None)?;
    ctx.log
        .host("info", "the timer is due: delivering its tick");
    Ok(Ok(()))
}

/// Whether `timer` is due now.
pub fn due(timer: &Timer) -> bool {
    now() >= timer.until_ms
}

/// Park the run until `timer` is due without sleeping here (a server's run:
/// its sweep finds it through `Db::due_runs`); how the run waits, in words.
pub fn park(ctx: &RunContext, timer: &Timer) -> Result<String> {
    ctx.db.park_until(&ctx.id, timer.until_ms)?;
    let when = crate::ui::utc(i64::try_from(timer.until_ms).unwrap_or(i64::MAX));
    ctx.log.host(
        "info",
        format!(
            "sleeping until {when} UTC: {}",
            crate::ui::one_line(&timer.reason)
        ),
    );
    Ok(format!(
        "the run sleeps until {when} UTC ({})",
        crate::ui::one_line(&timer.reason)
    ))
}

/// Why a run stopped while it slept, and how it goes on.
pub fn parked(id: &str, when: &str, reason: &str) -> String {
    format!(
        "the run sleeps until {when} UTC ({}); `loopbox runs resume {id}` goes on at or after then, `loopbox runs tick {id}` at once",
        crate::ui::one_line(reason)
    )
}

fn now() -> u64 {
    crate::db::now_ms().max(0) as u64
}
