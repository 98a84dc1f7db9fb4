//! The seccomp filter under every sandboxed child, built with `seccompiler`
//! (no hand-written BPF): an allowlist of socket families. `socket()` works
//! only for the families the run grants; everything else fails with EACCES.
//!
//! - no network: no family at all, unless `shell.unix_sockets` (or Landlock
//!   ABI 9, which confines pathname UNIX sockets to the workspace) adds AF_UNIX.
//! - network: AF_INET, AF_INET6 and AF_NETLINK (which glibc's resolver uses).
//!
//! AF_UNIX stays out by default because a socket outside the workspace (the
//! Docker daemon's, an ssh-agent's) is a door to a process running with the
//! user's rights, and neither a read-only mount nor Landlock before ABI 9 keeps
//! a child from connecting to one. `socketpair()` is always allowed: its two
//! ends reach nothing but each other. `io_uring_setup` is refused because
//! io_uring can open sockets past this filter.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// The socket families a sandboxed child may create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sockets {
    pub network: bool,
    pub unix: bool,
}

impl Sockets {
    fn families(self) -> Vec<i32> {
        let mut f = Vec::new();
        if self.unix {
            f.push(libc::AF_UNIX);
        }
        if self.network {
            f.extend([libc::AF_INET, libc::AF_INET6, libc::AF_NETLINK]);
        }
        f
    }
}

/// x32 system calls are the x86_64 numbers with this bit set: filtered too.
#[cfg(target_arch = "x86_64")]
const X32_BIT: i64 = 0x4000_0000;

/// The filter for `sockets`, as a BPF program ready for `PR_SET_SECCOMP` or bwrap's `--seccomp`.
pub fn filter(sockets: Sockets) -> Result<BpfProgram, String> {
    let arch: TargetArch = std::env::consts::ARCH
        .try_into()
        .map_err(|e| format!("seccomp does not support this architecture: {e:?}"))?;
    let families = sockets.families();
    let socket_rules = if families.is_empty() {
        Vec::new() // every socket() call matches
    } else {
        let not = |family: i32| {
            SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, family as u64)
                .map_err(|e| e.to_string())
        };
        vec![
            SeccompRule::new(families.into_iter().map(not).collect::<Result<_, _>>()?)
                .map_err(|e| e.to_string())?,
        ]
    };
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    rules.insert(libc::SYS_socket, socket_rules.clone());
    rules.insert(libc::SYS_io_uring_setup, Vec::new());
    #[cfg(target_arch = "x86_64")]
    {
        rules.insert(X32_BIT | libc::SYS_socket, socket_rules);
        rules.insert(X32_BIT | libc::SYS_io_uring_setup, Vec::new());
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EACCES as u32),
        arch,
    )
    .map_err(|e| e.to_string())?;
    filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())
}

/// The program as bwrap reads it from `--seccomp FD`: the raw instructions.
pub fn to_bytes(program: &BpfProgram) -> Vec<u8> {
    let mut out = Vec::with_capacity(program.len() * 8);
    for i in program {
        out.extend_from_slice(&i.code.to_ne_bytes());
        out.push(i.jt);
        out.push(i.jf);
        out.extend_from_slice(&i.k.to_ne_bytes());
    }
    out
}

/// Install `program` on the calling thread. Called in the child between clone and
/// exec, so it only makes system calls (no allocation).
///
/// # Safety
/// Only async-signal-safe work: the caller is a vfork-style child.
pub unsafe fn install(program: &BpfProgram) -> std::io::Result<()> {
    let prog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: `prog` points at `program`, which outlives the call; seccompiler's
    // sock_filter has libc's layout (repr(C), same fields).
    if unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &prog as *const libc::sock_fprog,
        )
    } != 0
    {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_build_for_every_grant() {
        for (network, unix) in [(false, false), (true, false), (false, true), (true, true)] {
            let p = filter(Sockets { network, unix }).unwrap();
            assert!(!p.is_empty());
            assert_eq!(to_bytes(&p).len(), p.len() * 8);
        }
    }
}
