//! No capabilities in the child, whoever started loopbox (Landlock path; bwrap
//! does the same itself with `--unshare-user --cap-drop ALL`).
//!
//! Run as root, a child would otherwise keep every capability: it could make
//! device nodes, load BPF programs, read every CPU's performance counters,
//! change how the machine reboots. In the child, before it executes:
//! - the secure bits `NOROOT` and `NO_SETUID_FIXUP` (so executing a program as
//!   uid 0 grants nothing), `NO_CAP_AMBIENT_RAISE`, and their locks;
//! - every capability up to `/proc/sys/kernel/cap_last_cap` dropped from the
//!   bounding set;
//! - with CAP_SYS_ADMIN (root), a new IPC namespace first, so the host's SysV
//!   IPC objects and POSIX message queues are out of reach (bwrap makes one
//!   with `--unshare-ipc`; without the capability a seccomp filter refuses
//!   those calls, see `seccomp::ipc_filter`);
//! - the ambient set cleared, and the effective, permitted and inheritable
//!   sets emptied with `capset`.
//!
//! The first two need CAP_SETPCAP. A process without it (an ordinary user)
//! cannot change them, and has nothing to lose: it has no capabilities, and
//! `no_new_privs` (set with the Landlock ruleset) keeps an exec from granting
//! any. Its bounding set stays full, which without a way to gain a
//! capability means nothing.

use std::io;

/// What the child needs to drop its capabilities, read in the parent.
#[derive(Debug, Clone, Copy)]
pub struct CapDrop {
    /// The highest capability number this kernel knows.
    last_cap: u32,
    /// Whether the child can make its own IPC namespace (CAP_SYS_ADMIN, so
    /// root): see [`CapDrop::isolates_ipc`].
    new_ipc: bool,
}

/// `CAP_LAST_CAP` of the kernel this crate was written against (6.x: 40),
/// used when `/proc/sys/kernel/cap_last_cap` cannot be read; the drop loop
/// also stops at the first number the kernel calls invalid.
const FALLBACK_LAST_CAP: u32 = 63;

const CAP_SETPCAP: u32 = 8;
const CAP_SYS_ADMIN: u32 = 21;
const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

impl CapDrop {
    /// Read the kernel's last capability number.
    pub fn prepare() -> CapDrop {
        let last_cap = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(FALLBACK_LAST_CAP);
        let new_ipc = effective().is_ok_and(|e| e & (1 << CAP_SYS_ADMIN) != 0);
        CapDrop { last_cap, new_ipc }
    }

    /// Whether the child gets an IPC namespace of its own (made in
    /// [`CapDrop::apply`] before the capabilities go): the host's SysV shared
    /// memory, semaphores, message queues and POSIX message queues are then
    /// out of its reach. Without CAP_SYS_ADMIN it cannot make one, and the
    /// caller refuses those calls with a seccomp filter instead.
    pub fn isolates_ipc(&self) -> bool {
        self.new_ipc
    }

    /// Drop every capability of the calling thread, for good.
    ///
    /// # Safety
    /// System calls only, on stack data: the caller is a vfork-style child.
    pub unsafe fn apply(&self) -> io::Result<()> {
        let effective = effective()?;
        if self.new_ipc {
            // SAFETY: unshare with an integer argument.
            if unsafe { libc::unshare(libc::CLONE_NEWIPC) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        if effective & (1 << CAP_SETPCAP) != 0 {
            let bits = libc::SECBIT_NOROOT
                | libc::SECBIT_NOROOT_LOCKED
                | libc::SECBIT_NO_SETUID_FIXUP
                | libc::SECBIT_NO_SETUID_FIXUP_LOCKED
                | libc::SECBIT_NO_CAP_AMBIENT_RAISE
                | libc::SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED
                | libc::SECBIT_KEEP_CAPS_LOCKED;
            // SAFETY: prctl with integer arguments.
            if unsafe { libc::prctl(libc::PR_SET_SECUREBITS, bits as libc::c_ulong, 0, 0, 0) } != 0
            {
                return Err(io::Error::last_os_error());
            }
            for cap in 0..=self.last_cap {
                // SAFETY: prctl with integer arguments.
                if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) } != 0
                {
                    // Past the kernel's last capability (only with the fallback).
                    if io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
                        break;
                    }
                    return Err(io::Error::last_os_error());
                }
            }
        }
        // SAFETY: prctl with integer arguments.
        if unsafe {
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
                0,
                0,
                0,
            )
        } != 0
        {
            return Err(io::Error::last_os_error());
        }
        let empty = [CapData::default(); 2];
        let header = CapHeader {
            version: LINUX_CAPABILITY_VERSION_3,
            pid: 0,
        };
        // SAFETY: capset reads the header and the two-element array.
        if unsafe {
            libc::syscall(
                libc::SYS_capset,
                &header as *const CapHeader,
                empty.as_ptr(),
            )
        } != 0
        {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// The calling thread's effective capabilities (the low 32: CAP_SYS_ADMIN is
/// among them).
fn effective() -> io::Result<u32> {
    let mut header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: capget fills the two-element array version 3 expects.
    if unsafe {
        libc::syscall(
            libc::SYS_capget,
            &mut header as *mut CapHeader,
            data.as_mut_ptr(),
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    Ok(data[0].effective)
}
