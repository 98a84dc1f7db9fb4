//! Fault injection for crash-recovery tests: `LOOPBOX_CRASH_AT=NAME:N` makes
//! the process kill itself with SIGKILL (as `kill -9` would) the Nth time it
//! passes the point called NAME. Unset, a point costs one relaxed load.
//!
//! Points: `before-intent`, `action-started` (intent written, action not yet
//! run), `action-finished` (action done, result not yet written),
//! `action-recorded`, `event-committed`, `turn-started`, `turn-finished`,
//! `turn-recorded`, `hook-event` (a hook's event numbered, not yet delivered).
//!
//! `LOOPBOX_PANIC_AT=NAME:N` panics there instead, for the tests of what a
//! panic leaves behind. Points: `drive` (a server or worker starts driving a run).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

struct Target {
    name: String,
    nth: u64,
    seen: AtomicU64,
}

fn target(var: &str, cell: &'static OnceLock<Option<Target>>) -> Option<&'static Target> {
    cell.get_or_init(|| {
        let spec = std::env::var(var).ok()?;
        let (name, nth) = spec.rsplit_once(':').unwrap_or((&spec, "1"));
        Some(Target {
            name: name.to_string(),
            nth: nth.parse().ok()?,
            seen: AtomicU64::new(0),
        })
    })
    .as_ref()
}

/// Whether this pass of point `name` is the one `t` names.
fn is_it(t: Option<&Target>, name: &str) -> bool {
    t.is_some_and(|t| t.name == name && t.seen.fetch_add(1, Ordering::Relaxed) + 1 == t.nth)
}

/// Die here if this is the point and the pass `LOOPBOX_CRASH_AT` names.
pub fn hit(name: &str) {
    static CRASH: OnceLock<Option<Target>> = OnceLock::new();
    if is_it(target("LOOPBOX_CRASH_AT", &CRASH), name) {
        // SAFETY: raising a signal on this process; SIGKILL cannot be caught.
        unsafe {
            libc::raise(libc::SIGKILL);
        }
    }
}

/// Panic here if this is the point and the pass `LOOPBOX_PANIC_AT` names.
pub fn panic_at(name: &str) {
    static PANIC: OnceLock<Option<Target>> = OnceLock::new();
    if is_it(target("LOOPBOX_PANIC_AT", &PANIC), name) {
        panic!("injected at `{name}` by LOOPBOX_PANIC_AT");
    }
}
