//! Why a policy failed to decide: a limit, a trap, an error it returned, a
//! malformed decision. Built from whatever wasmtime or the host raised, so
//! every failure reaches the user as one clear line naming its cause.

use wasmtime::Trap;

use crate::error::HostError;
use crate::limits::{Limit, LimitExceeded, Limits};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PolicyFault {
    #[error("{0}")]
    Limit(LimitExceeded),
    #[error("policy trapped: {0}")]
    Trap(String),
    #[error("policy returned an error: {0}")]
    Error(String),
    #[error("policy returned a malformed decision: {0}")]
    Malformed(String),
    #[error("failed to instantiate the policy: {0}")]
    Instantiate(String),
    /// On resume, the policy did not repeat the calls the journal recorded.
    #[error("non-determinism: {0}")]
    NonDeterminism(String),
    /// loopbox itself failed while serving the policy (the store, the disk):
    /// not the policy's fault, and the event is left to be resumed.
    #[error("loopbox failed while serving the policy: {0}")]
    Host(HostError),
    /// A failure read back from the store, as it was reported then.
    #[error("{0}")]
    Recorded(String),
    /// The run was asked to stop (cancel, SIGINT, SIGTERM) while the event ran:
    /// not the policy's doing; nothing of the event is committed.
    #[error("{0}")]
    Stopped(crate::limits::stop::StopReason),
}

/// How a guest that panicked or aborted (wasm `unreachable`) is described.
const ABORTED: &str =
    "the policy aborted (wasm `unreachable`: a panic, an uncaught exception or an abort)";

/// Lines language runtimes print around a guest's own message when it aborts.
const BOILERPLATE: [&str; 7] = [
    "thread '",
    "note: run with `RUST_BACKTRACE",
    "Traceback (most recent call last)",
    "Python function threw an unexpected exception",
    "Redirecting call to abort()",
    "Stack:",
    "Error: error while executing at wasm backtrace",
];

/// The line of a guest's stderr that says why it aborted: the last one that is
/// not a runtime's boilerplate or a stack frame.
pub fn last_words(stderr: &str) -> Option<&str> {
    stderr
        .lines()
        .rfind(|l| {
            !l.trim().is_empty()
                && !l.starts_with([' ', '\t'])
                && !BOILERPLATE.iter().any(|b| l.starts_with(b))
        })
        .map(str::trim)
}

impl PolicyFault {
    /// Add what the guest printed before it aborted, so the one-line error says why.
    pub fn with_stderr(self, stderr: &str) -> PolicyFault {
        match self {
            PolicyFault::Trap(m) if m == ABORTED => match last_words(stderr) {
                Some(words) => {
                    PolicyFault::Trap(format!("{m}; it said: {}", crate::ui::shorten(words, 300)))
                }
                None => PolicyFault::Trap(m),
            },
            other => other,
        }
    }

    /// A short name for records and `--json`.
    pub fn kind(&self) -> &'static str {
        match self {
            PolicyFault::Limit(_) => "limit",
            PolicyFault::Trap(_) => "trap",
            PolicyFault::Error(_) => "error",
            PolicyFault::Malformed(_) => "malformed",
            PolicyFault::Instantiate(_) => "instantiate",
            PolicyFault::NonDeterminism(_) => "non-determinism",
            PolicyFault::Host(_) => "host",
            PolicyFault::Recorded(_) => "recorded",
            PolicyFault::Stopped(_) => "stopped",
        }
    }

    /// Classify an error raised while instantiating or calling the guest.
    pub fn from_wasm(err: &wasmtime::Error, limits: &Limits) -> PolicyFault {
        if let Some(l) = err.downcast_ref::<LimitExceeded>() {
            return PolicyFault::Limit(l.clone());
        }
        if let Some(s) = err.downcast_ref::<crate::limits::stop::Stopped>() {
            return PolicyFault::Stopped(s.0);
        }
        if let Some(h) = err.downcast_ref::<HostError>() {
            return PolicyFault::Host(h.clone());
        }
        if let Some(t) = err.downcast_ref::<Trap>() {
            return match t {
                Trap::OutOfFuel => {
                    PolicyFault::Limit(LimitExceeded::new(Limit::Fuel, limits.fuel_per_event))
                }
                Trap::Interrupt => {
                    PolicyFault::Limit(LimitExceeded::new(Limit::CpuTime, limits.cpu_ms_per_event))
                }
                Trap::StackOverflow => PolicyFault::Trap(
                    "stack overflow: the policy recursed past its 512 KiB stack".into(),
                ),
                Trap::UnreachableCodeReached => PolicyFault::Trap(ABORTED.into()),
                other => PolicyFault::Trap(other.to_string()),
            };
        }
        let chain: Vec<String> = err.chain().map(|e| e.to_string()).collect();
        let text = chain.join(": ");
        if text.contains("fuel allocated for hostcalls has been exhausted") {
            return PolicyFault::Limit(LimitExceeded::new(
                Limit::HostcallBytes,
                limits.hostcall_bytes,
            ));
        }
        for (needle, limit, value) in [
            (
                "instance count too high",
                Limit::Instances,
                limits.max_instances as u64,
            ),
            (
                "memory count too high",
                Limit::Memories,
                limits.max_memories as u64,
            ),
            (
                "table count too high",
                Limit::Tables,
                limits.max_tables as u64,
            ),
        ] {
            if text.contains(needle) {
                return PolicyFault::Limit(LimitExceeded::new(limit, value));
            }
        }
        PolicyFault::Trap(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_words_skip_runtime_boilerplate() {
        let python = "Traceback (most recent call last):\n  File \"/0/app.py\", line 22, in handle\nRuntimeError: boom\nthread '<unnamed>' (1) panicked at runtime/src/lib.rs:1293:29:\nPython function threw an unexpected exception\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(last_words(python), Some("RuntimeError: boom"));
        let rust = "thread '<unnamed>' panicked at src/lib.rs:9:5:\nindex out of bounds\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(last_words(rust), Some("index out of bounds"));
        let js = "invalid variant tag value `\"bogus\"` specified for `Decision`\nStack:\n  handle@x.js:1:2\nRedirecting call to abort() to mozalloc_abort\n";
        assert_eq!(
            last_words(js),
            Some("invalid variant tag value `\"bogus\"` specified for `Decision`")
        );
        assert_eq!(last_words("note: run with `RUST_BACKTRACE=1`\n\n"), None);
        let f = PolicyFault::Trap(ABORTED.into()).with_stderr(rust);
        assert_eq!(
            f.to_string(),
            format!("policy trapped: {ABORTED}; it said: index out of bounds")
        );
        assert_eq!(
            PolicyFault::Error("x".into()).with_stderr(rust),
            PolicyFault::Error("x".into())
        );
    }
}
