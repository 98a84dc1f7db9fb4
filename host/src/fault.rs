//! Why a policy failed to decide: a limit, a trap, an error it returned, a
//! malformed decision. Built from whatever wasmtime or the host raised, so
//! every failure reaches the user as one clear line naming its cause.

use wasmtime::Trap;

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
}

impl PolicyFault {
    /// A short name for records and `--json`.
    pub fn kind(&self) -> &'static str {
        match self {
            PolicyFault::Limit(_) => "limit",
            PolicyFault::Trap(_) => "trap",
            PolicyFault::Error(_) => "error",
            PolicyFault::Malformed(_) => "malformed",
            PolicyFault::Instantiate(_) => "instantiate",
        }
    }

    /// Classify an error raised while instantiating or calling the guest.
    pub fn from_wasm(err: &wasmtime::Error, limits: &Limits) -> PolicyFault {
        if let Some(l) = err.downcast_ref::<LimitExceeded>() {
            return PolicyFault::Limit(l.clone());
        }
        if let Some(t) = err.downcast_ref::<Trap>() {
            return match t {
                Trap::OutOfFuel => PolicyFault::Limit(LimitExceeded::new(Limit::Fuel, limits.fuel_per_event)),
                Trap::Interrupt => PolicyFault::Limit(LimitExceeded::new(Limit::CpuTime, limits.cpu_ms_per_event)),
                Trap::StackOverflow => PolicyFault::Trap("stack overflow: the policy recursed past its 512 KiB stack".into()),
                Trap::UnreachableCodeReached => {
                    PolicyFault::Trap("wasm `unreachable` executed (a Rust panic or abort; its message, if any, is in the policy's stderr above)".into())
                }
                other => PolicyFault::Trap(other.to_string()),
            };
        }
        let chain: Vec<String> = err.chain().map(|e| e.to_string()).collect();
        let text = chain.join(": ");
        if text.contains("fuel allocated for hostcalls has been exhausted") {
            return PolicyFault::Limit(LimitExceeded::new(Limit::HostcallBytes, limits.hostcall_bytes));
        }
        for (needle, limit, value) in [
            ("instance count too high", Limit::Instances, limits.max_instances as u64),
            ("memory count too high", Limit::Memories, limits.max_memories as u64),
            ("table count too high", Limit::Tables, limits.max_tables as u64),
        ] {
            if text.contains(needle) {
                return PolicyFault::Limit(LimitExceeded::new(limit, value));
            }
        }
        PolicyFault::Trap(text)
    }
}
