//! A run's stop request: `loopbox runs cancel` from another process, or
//! SIGINT/SIGTERM to this one. The driver polls for the first and the CLI's
//! signal task raises the second; the event in progress sees the request at
//! its next host call (the meter refuses it), inside the guest (the epoch
//! callback), or while it waits on the host (the event's watchdog), so no
//! event outlives a stop request by more than a moment. An action that waits
//! for an approval stops its event the same way ([`StopReason::Waiting`]),
//! from its own host call.

use std::sync::atomic::{AtomicU8, Ordering};

use tokio::sync::Notify;

/// Why a run was asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// `loopbox runs cancel`: the run ends for good.
    Cancelled,
    /// SIGINT or SIGTERM: the run stops where it is, to be resumed.
    Interrupted,
    /// An ask-tier action waits for a person's approval: the event stops where
    /// it is (its journal kept) and the run waits; it is resumed once the
    /// approval is decided. Raised by the action's host call, never by `Stop`.
    Waiting,
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StopReason::Cancelled => "the run was cancelled (loopbox runs cancel)",
            StopReason::Interrupted => "loopbox was interrupted (SIGINT or SIGTERM)",
            StopReason::Waiting => "an action waits for a person's approval",
        })
    }
}

/// The error a host call or the guest's epoch check raises once a stop is requested.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Stopped(pub StopReason);

#[derive(Default)]
pub struct Stop {
    /// 0: running; else a `StopReason` + 1. The first request wins.
    reason: AtomicU8,
    notify: Notify,
}

impl Stop {
    pub fn new() -> Stop {
        Stop::default()
    }

    /// Ask the run to stop; a later request does not change the reason.
    pub fn request(&self, reason: StopReason) {
        let code = match reason {
            StopReason::Cancelled => 1,
            StopReason::Interrupted => 2,
            StopReason::Waiting => 3,
        };
        if self
            .reason
            .compare_exchange(0, code, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            self.notify.notify_waiters();
        }
    }

    pub fn requested(&self) -> Option<StopReason> {
        match self.reason.load(Ordering::SeqCst) {
            1 => Some(StopReason::Cancelled),
            2 => Some(StopReason::Interrupted),
            3 => Some(StopReason::Waiting),
            _ => None,
        }
    }

    /// `Err` once a stop was requested.
    pub fn check(&self) -> Result<(), Stopped> {
        self.requested().map_or(Ok(()), |r| Err(Stopped(r)))
    }

    /// Resolves when a stop is requested (at once if it already was).
    pub async fn wait(&self) -> StopReason {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            // Register before checking, so a request between the check and the await is not missed.
            notified.as_mut().enable();
            if let Some(r) = self.requested() {
                return r;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn the_first_request_wins_and_wakes_waiters() {
        let stop = Arc::new(Stop::new());
        assert_eq!(stop.check(), Ok(()));
        let waiter = tokio::spawn({
            let stop = stop.clone();
            async move { stop.wait().await }
        });
        tokio::task::yield_now().await;
        stop.request(StopReason::Interrupted);
        stop.request(StopReason::Cancelled);
        assert_eq!(waiter.await.unwrap(), StopReason::Interrupted);
        assert_eq!(stop.check(), Err(Stopped(StopReason::Interrupted)));
        assert_eq!(stop.wait().await, StopReason::Interrupted);
    }
}
