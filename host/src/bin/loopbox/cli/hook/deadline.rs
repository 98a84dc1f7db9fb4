//! The hook's deadline: loopbox answers before the agent's own timeout would
//! kill it, since every agent takes a killed hook for a non-blocking error.

use std::sync::Arc;
use std::time::Duration;

use super::answer::emit;
use loopbox::hook::render::HookOutput;

/// How long loopbox may take, given the agent's timeout: a margin is left to print the answer.
pub(super) fn deadline(agent_timeout_s: u64) -> Duration {
    let total = Duration::from_secs(agent_timeout_s);
    let margin = (total / 10).clamp(Duration::from_millis(500), Duration::from_secs(10));
    total.saturating_sub(margin).max(Duration::from_millis(200))
}

/// A thread that, if the answer is not in by `limit`, prints `on_timeout()` and ends the
/// process: a guest, a lock or an action that hangs cannot make the agent kill the hook,
/// which every agent reads as non-blocking. The work itself stays on the main thread
/// (answering on a worker thread made every hook about 1.5 ms slower, in page faults on
/// a fresh stack). Dropping the returned sender wakes the thread and lets it end.
pub(super) fn watchdog(
    limit: Duration,
    answered: Arc<std::sync::Mutex<bool>>,
    on_timeout: impl FnOnce() -> HookOutput + Send + 'static,
) -> std::sync::mpsc::Sender<()> {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let spawned = std::thread::Builder::new()
        .name("hook-deadline".into())
        .stack_size(256 << 10)
        .spawn(move || {
            if rx.recv_timeout(limit) == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
                let output = on_timeout();
                let mut done = answered.lock().unwrap_or_else(|p| p.into_inner());
                if !*done {
                    *done = true;
                    std::process::exit(emit(&output));
                }
            }
        });
    if let Err(e) = spawned {
        loopbox::errln!(
            "loopbox: cannot start the hook's deadline thread ({e}); answering without one"
        );
    }
    tx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopbox_answers_before_the_agent_gives_up() {
        assert_eq!(deadline(600), Duration::from_secs(590));
        assert_eq!(deadline(60), Duration::from_secs(54));
        assert_eq!(deadline(1), Duration::from_millis(500));
        assert_eq!(deadline(0), Duration::from_millis(200));
    }
}
