//! Fault injection for crash-recovery tests: `LOOPBOX_CRASH_AT=NAME:N` makes
//! the process kill itself with SIGKILL (as `kill -9` would) the Nth time it
//! passes the point called NAME. Unset, a point costs one relaxed load.
//!
//! Points: `before-intent`, `action-started` (intent written, action not yet
//! run), `action-finished` (action done, result not yet written),
//! `action-recorded`, `event-committed`, `turn-started`, `turn-finished`,
//! `turn-recorded`, `hook-event` (a hook's event numbered, not yet delivered).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

struct Target {
    name: String,
    nth: u64,
    seen: AtomicU64,
}

fn target() -> Option<&'static Target> {
    static TARGET: OnceLock<Option<Target>> = OnceLock::new();
    TARGET
        .get_or_init(|| {
            let spec = std::env::var("LOOPBOX_CRASH_AT").ok()?;
            let (name, nth) = spec.rsplit_once(':').unwrap_or((&spec, "1"));
            Some(Target {
                name: name.to_string(),
                nth: nth.parse().ok()?,
                seen: AtomicU64::new(0),
            })
        })
        .as_ref()
}

/// Die here if this is the point and the pass `LOOPBOX_CRASH_AT` names.
pub fn hit(name: &str) {
    if let Some(t) = target()
        && t.name == name
        && t.seen.fetch_add(1, Ordering::Relaxed) + 1 == t.nth
    {
        // SAFETY: raising a signal on this process; SIGKILL cannot be caught.
        unsafe {
            libc::raise(libc::SIGKILL);
        }
    }
}
