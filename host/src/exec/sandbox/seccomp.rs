//! The seccomp filters under every sandboxed child, built with `seccompiler`
//! (no hand-written BPF). Three programs, one per answer, all installed
//! (stacked) before the program executes:
//!
//! 1. **Sockets** (EACCES): an allowlist of socket families. `socket()` works
//!    only for the families the run grants.
//!    - no network: no family at all, unless `shell.unix_sockets` (or Landlock
//!      ABI 9, which confines pathname UNIX sockets to the workspace) adds AF_UNIX.
//!    - network (through the proxy): AF_INET and AF_INET6 for TCP only, and
//!      AF_NETLINK (which glibc's resolver uses); no send with MSG_FASTOPEN,
//!      which connects past Landlock's TCP rules.
//!
//!    AF_UNIX stays out by default because a socket outside the workspace (the
//!    Docker daemon's, an ssh-agent's) is a door to a process running with the
//!    user's rights, and neither a read-only mount nor Landlock before ABI 9 keeps
//!    a child from connecting to one. `socketpair()` is always allowed: its two
//!    ends reach nothing but each other. `io_uring_setup` is refused because
//!    io_uring can open sockets past this filter.
//! 2. **Refused** (EPERM): what a confined program never needs, decided from
//!    Docker's default profile (moby `profiles/seccomp/default.json`: what it
//!    allows only with a capability a container does not get by default) and
//!    Podman's (containers/common `pkg/seccomp/seccomp.json`, the same list).
//!    Children have no capabilities (see `mod.rs`), so most of these would fail
//!    anyway; the filter also closes them where a capability check is missing
//!    or wrong, and keeps the kernel code behind them out of reach. See
//!    [`REFUSED`] for each call and why.
//! 3. **clone3** (ENOSYS): its flags are in memory, where seccomp cannot look,
//!    so namespace creation through it cannot be told apart; ENOSYS makes glibc
//!    (and everything else Docker runs) fall back to `clone`, whose flags are
//!    filtered in program 2. This is what Docker does.
//!
//! Allowed on purpose, as Docker allows them: `ptrace` and `process_vm_*`
//! (debuggers, `strace`; bwrap's PID namespace and Landlock's ptrace rule keep
//! the target inside the sandbox), `adjtimex` and `clock_adjtime` (with modes 0
//! they only read the clock, and a seccomp filter cannot see the mode in the
//! struct; setting needs CAP_SYS_TIME, which no child has), and plain `mknod`
//! of FIFOs, sockets and regular files.

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

/// System calls refused outright (EPERM), and why.
pub const REFUSED: &[(i64, &str)] = &[
    // Mounts: one remount of `/` read-write undoes every read-only bind and cover.
    (libc::SYS_mount, "mount"),
    (libc::SYS_umount2, "umount2"),
    (libc::SYS_fsopen, "fsopen (the new mount API)"),
    (libc::SYS_fsconfig, "fsconfig"),
    (libc::SYS_fsmount, "fsmount"),
    (libc::SYS_fspick, "fspick"),
    (libc::SYS_open_tree, "open_tree"),
    (libc::SYS_move_mount, "move_mount"),
    (libc::SYS_mount_setattr, "mount_setattr"),
    (libc::SYS_pivot_root, "pivot_root"),
    (libc::SYS_chroot, "chroot"),
    // Namespaces: a new user namespace gives every capability inside it and
    // opens kernel code that is a frequent source of privilege escalations
    // (`clone` with a namespace flag is refused in `filters`).
    (libc::SYS_unshare, "unshare"),
    (libc::SYS_setns, "setns"),
    // The kernel itself: programs, tracing, modules, rebooting.
    (libc::SYS_bpf, "bpf"),
    (libc::SYS_perf_event_open, "perf_event_open"),
    (libc::SYS_reboot, "reboot"),
    (libc::SYS_kexec_load, "kexec_load"),
    (libc::SYS_kexec_file_load, "kexec_file_load"),
    (libc::SYS_init_module, "init_module"),
    (libc::SYS_finit_module, "finit_module"),
    (libc::SYS_delete_module, "delete_module"),
    (libc::SYS_lookup_dcookie, "lookup_dcookie"),
    (libc::SYS_nfsservctl, "nfsservctl"),
    (libc::SYS_syslog, "syslog (the kernel log)"),
    (libc::SYS_vhangup, "vhangup"),
    (
        libc::SYS_fanotify_init,
        "fanotify_init (watching the whole filesystem)",
    ),
    (libc::SYS_sethostname, "sethostname"),
    (libc::SYS_setdomainname, "setdomainname"),
    // The machine's clock (setting only: see the module doc for adjtimex).
    (libc::SYS_settimeofday, "settimeofday"),
    (libc::SYS_clock_settime, "clock_settime"),
    // Swap, accounting and quotas: machine-wide settings.
    (libc::SYS_swapon, "swapon"),
    (libc::SYS_swapoff, "swapoff"),
    (libc::SYS_acct, "acct"),
    (libc::SYS_quotactl, "quotactl"),
    (libc::SYS_quotactl_fd, "quotactl_fd"),
    // File handles open any file on a filesystem by number, past every mount
    // and path rule (Docker's "shocker" escape).
    (libc::SYS_open_by_handle_at, "open_by_handle_at"),
    (libc::SYS_name_to_handle_at, "name_to_handle_at"),
    // Kernel exploitation helpers with no use in a build or a test run.
    (libc::SYS_userfaultfd, "userfaultfd"),
    // The kernel keyring is not namespaced: it can hold the user's (or root's) keys.
    (libc::SYS_keyctl, "keyctl"),
    (libc::SYS_add_key, "add_key"),
    (libc::SYS_request_key, "request_key"),
    // Another process's descriptors and memory beyond ptrace's own checks
    // (Docker allows these only with CAP_SYS_PTRACE).
    (libc::SYS_pidfd_getfd, "pidfd_getfd"),
    (libc::SYS_process_madvise, "process_madvise"),
    (libc::SYS_kcmp, "kcmp"),
];

/// x86 port I/O and obsolete calls, refused the same way.
#[cfg(target_arch = "x86_64")]
const REFUSED_X86: &[(i64, &str)] = &[
    (libc::SYS_iopl, "iopl"),
    (libc::SYS_ioperm, "ioperm"),
    (libc::SYS_uselib, "uselib"),
    (libc::SYS__sysctl, "_sysctl"),
    (libc::SYS_ustat, "ustat"),
    (libc::SYS_sysfs, "sysfs"),
];
#[cfg(not(target_arch = "x86_64"))]
const REFUSED_X86: &[(i64, &str)] = &[];

/// `personality()` values Docker allows: the default, PER_LINUX32, UNAME26,
/// both, and the query (0xffffffff). Others (ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC)
/// weaken the child's own exploit mitigations.
const PERSONALITIES: [u64; 5] = [0x0, 0x8, 0x2_0000, 0x2_0008, 0xffff_ffff];

/// clone's namespace flags (Docker's mask 0x7E020000): NEWNS, NEWCGROUP,
/// NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET.
const CLONE_NAMESPACES: [i32; 7] = [
    libc::CLONE_NEWNS,
    libc::CLONE_NEWCGROUP,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
];

type Rules = BTreeMap<i64, Vec<SeccompRule>>;

/// Add `rules` for system call `nr` (and its x32 twin on x86_64).
fn insert(map: &mut Rules, nr: i64, rules: Vec<SeccompRule>) {
    #[cfg(target_arch = "x86_64")]
    map.insert(X32_BIT | nr, rules.clone());
    map.insert(nr, rules);
}

fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, String> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).map_err(|e| e.to_string())
}

fn rule(conditions: Vec<SeccompCondition>) -> Result<SeccompRule, String> {
    SeccompRule::new(conditions).map_err(|e| e.to_string())
}

/// A rule matching when argument `arg` differs from every value in `allowed`.
fn none_of(arg: u8, allowed: impl IntoIterator<Item = u64>) -> Result<Vec<SeccompRule>, String> {
    let conditions = allowed
        .into_iter()
        .map(|v| cond(arg, SeccompCmpOp::Ne, v))
        .collect::<Result<Vec<_>, _>>()?;
    if conditions.is_empty() {
        return Ok(Vec::new()); // every call matches
    }
    Ok(vec![rule(conditions)?])
}

/// One rule per `(mask, value)`: each matches when `arg & mask == value`.
fn any_masked(arg: u8, pairs: &[(u64, u64)]) -> Result<Vec<SeccompRule>, String> {
    pairs
        .iter()
        .map(|&(mask, value)| rule(vec![cond(arg, SeccompCmpOp::MaskedEq(mask), value)?]))
        .collect()
}

fn build(rules: Rules, errno: i32) -> Result<BpfProgram, String> {
    let arch: TargetArch = std::env::consts::ARCH
        .try_into()
        .map_err(|e| format!("seccomp does not support this architecture: {e:?}"))?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno as u32),
        arch,
    )
    .map_err(|e| e.to_string())?;
    filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())
}

/// The filters for `sockets`, as BPF programs ready for `PR_SET_SECCOMP` or
/// bwrap's `--add-seccomp-fd`, in the order they are installed.
pub fn filters(sockets: Sockets) -> Result<Vec<BpfProgram>, String> {
    let families = sockets.families().into_iter().map(|f| f as u64);
    let mut socket_rules = Rules::new();
    let mut socket = none_of(0, families)?;
    // With the network, INET sockets are TCP only: a datagram or raw socket
    // would pass Landlock's TCP rules by.
    if sockets.network {
        for family in [libc::AF_INET, libc::AF_INET6] {
            let fam = || cond(0, SeccompCmpOp::Eq, family as u64);
            for kind in [
                libc::SOCK_DGRAM,
                libc::SOCK_RAW,
                libc::SOCK_RDM,
                libc::SOCK_SEQPACKET,
                libc::SOCK_DCCP,
                // SOCK_PACKET: the old name of AF_PACKET's raw sockets.
                10,
            ] {
                socket.push(rule(vec![
                    fam()?,
                    cond(1, SeccompCmpOp::MaskedEq(0xf), kind as u64)?,
                ])?);
            }
            // A protocol other than 0 or TCP (SCTP in a stream socket, say).
            socket.push(rule(vec![
                fam()?,
                cond(2, SeccompCmpOp::Gt, libc::IPPROTO_TCP as u64)?,
            ])?);
            socket.push(rule(vec![
                fam()?,
                cond(2, SeccompCmpOp::Gt, 0)?,
                cond(2, SeccompCmpOp::Lt, libc::IPPROTO_TCP as u64)?,
            ])?);
        }
    }
    insert(&mut socket_rules, libc::SYS_socket, socket);
    // TCP Fast Open: `sendto(MSG_FASTOPEN)` connects a TCP socket without
    // connect(2), and Landlock's TCP rules see only connect(2) (kernel 6.18
    // let a Landlock-confined child reach any loopback port this way). Each
    // send call carrying the flag is refused (TCP_FASTOPEN_CONNECT goes
    // through connect(2) and is confined).
    if sockets.network {
        let fastopen = [(libc::MSG_FASTOPEN as u64, libc::MSG_FASTOPEN as u64)];
        insert(
            &mut socket_rules,
            libc::SYS_sendto,
            any_masked(3, &fastopen)?,
        );
        insert(
            &mut socket_rules,
            libc::SYS_sendmsg,
            any_masked(2, &fastopen)?,
        );
        insert(
            &mut socket_rules,
            libc::SYS_sendmmsg,
            any_masked(3, &fastopen)?,
        );
    }
    insert(&mut socket_rules, libc::SYS_io_uring_setup, Vec::new());

    let mut refused = Rules::new();
    for &(nr, _) in REFUSED.iter().chain(REFUSED_X86) {
        insert(&mut refused, nr, Vec::new());
    }
    insert(
        &mut refused,
        libc::SYS_personality,
        none_of(0, PERSONALITIES)?,
    );
    // Device nodes: a character or block device made in the workspace is a
    // door to the hardware (a disk, /dev/kmsg, /dev/mem). FIFOs, sockets and
    // regular files stay allowed.
    let devices = [
        (libc::S_IFMT as u64, libc::S_IFCHR as u64),
        (libc::S_IFMT as u64, libc::S_IFBLK as u64),
    ];
    #[cfg(target_arch = "x86_64")]
    insert(&mut refused, libc::SYS_mknod, any_masked(1, &devices)?);
    insert(&mut refused, libc::SYS_mknodat, any_masked(2, &devices)?);
    let namespaces: Vec<(u64, u64)> = CLONE_NAMESPACES
        .iter()
        .map(|&f| (f as u64, f as u64))
        .collect();
    // clone's flags are its first argument, except on s390.
    insert(&mut refused, libc::SYS_clone, any_masked(0, &namespaces)?);
    // Another process's limits: `prlimit --pid $PPID --fsize=0:0` killed
    // loopbox with SIGXFSZ, and as root every process (PID 1 too) is of the
    // same user. Setting (a new-limit pointer, argument 2) for a pid other than
    // 0 is refused; reading any, and setting one's own (pid 0, as glibc's
    // setrlimit does), stay allowed.
    insert(
        &mut refused,
        libc::SYS_prlimit64,
        vec![rule(vec![
            cond(0, SeccompCmpOp::Ne, 0)?,
            SeccompCondition::new(2, SeccompCmpArgLen::Qword, SeccompCmpOp::Ne, 0)
                .map_err(|e| e.to_string())?,
        ])?],
    );
    // Typing into the terminal: a child under Landlock keeps loopbox's
    // controlling terminal, and TIOCSTI pushes input into it that the shell
    // behind loopbox then runs (kernels before 6.2 allow it without a
    // capability). TIOCLINUX can do the same through the console's selection.
    // ioctl's request is an int to the kernel: its low 32 bits are compared.
    insert(
        &mut refused,
        libc::SYS_ioctl,
        [libc::TIOCSTI, libc::TIOCLINUX]
            .into_iter()
            .map(|r| rule(vec![cond(1, SeccompCmpOp::Eq, r)?]))
            .collect::<Result<_, _>>()?,
    );
    // Set-user-ID and set-group-ID bits: root inside either sandbox owns root's
    // files, so `chmod 4777` on one of them (under Landlock, which does not
    // cover metadata, anywhere; under bwrap, in the workspace) makes a program
    // that runs as root for every user of the machine. Other modes stay allowed.
    let set_id = [
        (libc::S_ISUID as u64, libc::S_ISUID as u64),
        (libc::S_ISGID as u64, libc::S_ISGID as u64),
    ];
    #[cfg(target_arch = "x86_64")]
    insert(&mut refused, libc::SYS_chmod, any_masked(1, &set_id)?);
    insert(&mut refused, libc::SYS_fchmod, any_masked(1, &set_id)?);
    insert(&mut refused, libc::SYS_fchmodat, any_masked(2, &set_id)?);
    insert(&mut refused, libc::SYS_fchmodat2, any_masked(2, &set_id)?);

    let mut clone3 = Rules::new();
    insert(&mut clone3, libc::SYS_clone3, Vec::new());

    Ok(vec![
        build(socket_rules, libc::EACCES)?,
        build(refused, libc::EPERM)?,
        build(clone3, libc::ENOSYS)?,
    ])
}

/// System V IPC and POSIX message queues, refused (EPERM) under Landlock when
/// the child cannot have an IPC namespace of its own (without CAP_SYS_ADMIN):
/// they are named by key or name, not path, so Landlock does not see them, and
/// a command could attach to a shared memory segment or queue of another
/// process of the same user and read or change it. What needs them breaks
/// there: a PostgreSQL a test starts (SysV semaphores and shared memory), X11
/// clients using MIT-SHM (they fall back to the socket). POSIX shared memory
/// (`shm_open`) is a file in `/dev/shm`, which Landlock covers.
pub const IPC: &[(i64, &str)] = &[
    (libc::SYS_shmget, "shmget"),
    (libc::SYS_shmat, "shmat"),
    (libc::SYS_shmctl, "shmctl"),
    (libc::SYS_msgget, "msgget"),
    (libc::SYS_msgsnd, "msgsnd"),
    (libc::SYS_msgrcv, "msgrcv"),
    (libc::SYS_msgctl, "msgctl"),
    (libc::SYS_semget, "semget"),
    (libc::SYS_semop, "semop"),
    (libc::SYS_semtimedop, "semtimedop"),
    (libc::SYS_semctl, "semctl"),
    (libc::SYS_mq_open, "mq_open"),
    (libc::SYS_mq_unlink, "mq_unlink"),
    (libc::SYS_mq_timedsend, "mq_timedsend"),
    (libc::SYS_mq_timedreceive, "mq_timedreceive"),
    (libc::SYS_mq_notify, "mq_notify"),
    (libc::SYS_mq_getsetattr, "mq_getsetattr"),
];

/// The filter refusing [`IPC`] (shmdt stays: it only detaches the caller's own mapping).
pub fn ipc_filter() -> Result<BpfProgram, String> {
    let mut rules = Rules::new();
    for &(nr, _) in IPC {
        insert(&mut rules, nr, Vec::new());
    }
    build(rules, libc::EPERM)
}

/// The program as bwrap reads it from `--add-seccomp-fd FD`: the raw instructions.
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
    use std::os::unix::process::CommandExt;

    #[test]
    fn filters_build_for_every_grant() {
        for (network, unix) in [(false, false), (true, false), (false, true), (true, true)] {
            let programs = filters(Sockets { network, unix }).unwrap();
            assert_eq!(programs.len(), 3);
            for p in programs {
                assert!(!p.is_empty());
                assert_eq!(to_bytes(&p).len(), p.len() * 8);
            }
        }
    }

    /// Each call as Python's ctypes makes it, with harmless arguments (a bad
    /// magic number, a missing path): refused, it fails with EPERM; allowed,
    /// with something else or not at all.
    const PROBE: &str = r#"
import ctypes, os, sys, tempfile
libc = ctypes.CDLL(None, use_errno=True)
sc = libc.syscall
sc.restype = ctypes.c_long
def call(*args):
    ctypes.set_errno(0)
    r = sc(*[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    return "ok" if r >= 0 else os.strerror(ctypes.get_errno())
d = tempfile.mkdtemp()
S_IFCHR, S_IFIFO = 0o020000, 0o010000
attr = (ctypes.c_char * 128)(); attr[0] = 1; attr[4] = 128  # perf_event_attr: a software event (CPU clock), size 128
bpf_attr = (ctypes.c_uint32 * 8)(2, 4, 4, 1)     # BPF_MAP_TYPE_ARRAY, 4-byte keys and values, 1 entry
lim = (ctypes.c_uint64 * 2)(64, 64)
old = (ctypes.c_uint64 * 2)()
f = (d + "/file").encode()
fd = os.open(f, os.O_CREAT | os.O_WRONLY, 0o600)
r = {
  "mount": call(165, b"none", b"/nonexistent-loopbox", b"tmpfs", 0, 0),
  "umount2": call(166, b"/nonexistent-loopbox", 0),
  "fsopen": call(430, b"tmpfs", 0),
  "open_tree": call(428, -100, b"/", 0),
  "pivot_root": call(155, b"/nonexistent-loopbox", b"/nonexistent-loopbox"),
  "chroot": call(161, b"/nonexistent-loopbox"),
  "setns": call(308, -1, 0),
  "mknod char": call(259, -100, (d + "/null").encode(), S_IFCHR | 0o600, (1 << 8) | 3),
  "mknod fifo": call(259, -100, (d + "/fifo").encode(), S_IFIFO | 0o600, 0),
  "bpf": call(321, 0, bpf_attr, 32),
  "perf_event_open": call(298, attr, -1, 0, -1, 0),
  "reboot": call(169, 1, 2, 3, 0),
  "kexec_load": call(246, 0, 0, 0, 0xdead0000),
  "init_module": call(175, 0, 0, b""),
  "delete_module": call(176, b"loopbox_nonexistent", 0o4000),
  "settimeofday": call(164, 0, 0),
  "clock_settime": call(227, 0, 0),
  "swapon": call(167, b"/nonexistent-loopbox", 0),
  "acct": call(163, b"/nonexistent-loopbox/acct"),
  "open_by_handle_at": call(304, -1, 0, 0),
  "name_to_handle_at": call(303, -100, b"/", 0, 0, 0),
  "userfaultfd": call(323, 0),
  "keyctl": call(250, 0, -3, 0),
  "iopl": call(172, 0),
  "sethostname": call(170, 0, -1),
  "syslog": call(103, 10, 0, 0),
  "personality ADDR_NO_RANDOMIZE": call(135, 0x0040000),
  "personality query": call(135, 0xffffffff),
  "clone3": call(435, 0, 0),
  # ioctl on a bad descriptor: allowed, EBADF; refused, EPERM.
  "ioctl TIOCSTI": call(16, -1, 0x5412, 0),
  "ioctl TIOCLINUX": call(16, -1, 0x541C, 0),
  "ioctl TIOCSTI high bits": call(16, -1, 0x100005412, 0),
  "ioctl FIONREAD": call(16, -1, 0x541B, 0),
  # prlimit64 on a pid that does not exist: allowed, ESRCH.
  "prlimit set other": call(302, 0x3fffffff, 7, lim, 0),
  "prlimit read other": call(302, 0x3fffffff, 7, 0, old),
  "prlimit read own": call(302, 0, 7, 0, old),
  "prlimit set own": call(302, 0, 7, old, 0),  # to what it is
  "chmod setuid": call(90, f, 0o4755),
  "fchmod setgid": call(91, fd, 0o2755),
  "fchmodat setuid": call(268, -100, f, 0o4755),
  "fchmodat2 setgid": call(452, -100, f, 0o2755, 0),
  "chmod plain": call(90, f, 0o700),
  "fchmodat plain": call(268, -100, f, 0o755),
}
r["unshare"] = call(272, 0x10000000)  # last: allowed, it would change what the calls above see
pid = sc(ctypes.c_long(56), ctypes.c_long(0x10000000 | 17), ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0))
if pid == 0:
    os._exit(0)
r["clone NEWUSER"] = "ok" if pid > 0 else os.strerror(ctypes.get_errno())
if pid > 0:
    os.waitpid(pid, 0)
r["fork"] = "ok" if os.fork() or os._exit(0) else "?"
a, b = __import__("socket").socketpair(); r["socketpair"] = "ok"
for k, v in r.items():
    print(f"{k}: {v}")
"#;

    /// Each refused call fails with EPERM in a child that keeps every
    /// capability (as root), so only the filter can be what refuses it.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_filter_refuses_what_a_confined_program_never_needs() {
        // SAFETY: geteuid only reads this process's credentials.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!(
                "skipped: as a user without capabilities the kernel refuses these calls itself, so the filter's part cannot be seen; run as root"
            );
            return;
        }
        let programs = filters(Sockets {
            network: false,
            unix: true,
        })
        .unwrap();
        let mut cmd = std::process::Command::new("python3");
        cmd.args(["-c", PROBE]);
        // SAFETY: the closure makes system calls only, on programs built before the fork.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                for p in &programs {
                    install(p)?;
                }
                Ok(())
            });
        }
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got: BTreeMap<&str, &str> = text.lines().filter_map(|l| l.split_once(": ")).collect();
        let refused = "Operation not permitted";
        for (call, want) in [
            ("mount", refused),
            ("umount2", refused),
            ("fsopen", refused),
            ("open_tree", refused),
            ("pivot_root", refused),
            ("chroot", refused),
            ("unshare", refused),
            ("setns", refused),
            ("mknod char", refused),
            ("mknod fifo", "ok"),
            ("bpf", refused),
            ("perf_event_open", refused),
            ("reboot", refused),
            ("kexec_load", refused),
            ("init_module", refused),
            ("delete_module", refused),
            ("settimeofday", refused),
            ("clock_settime", refused),
            ("swapon", refused),
            ("acct", refused),
            ("open_by_handle_at", refused),
            ("name_to_handle_at", refused),
            ("userfaultfd", refused),
            ("keyctl", refused),
            ("iopl", refused),
            ("sethostname", refused),
            ("syslog", refused),
            ("personality ADDR_NO_RANDOMIZE", refused),
            ("personality query", "ok"),
            ("clone3", "Function not implemented"),
            ("clone NEWUSER", refused),
            ("fork", "ok"),
            ("socketpair", "ok"),
            ("ioctl TIOCSTI", refused),
            ("ioctl TIOCLINUX", refused),
            ("ioctl TIOCSTI high bits", refused),
            ("ioctl FIONREAD", "Bad file descriptor"),
            ("prlimit set other", refused),
            ("prlimit read other", "No such process"),
            ("prlimit read own", "ok"),
            ("prlimit set own", "ok"),
            ("chmod setuid", refused),
            ("fchmod setgid", refused),
            ("fchmodat setuid", refused),
            ("fchmodat2 setgid", refused),
            ("chmod plain", "ok"),
            ("fchmodat plain", "ok"),
        ] {
            assert_eq!(got.get(call).copied(), Some(want), "{call}:\n{text}");
        }
    }

    /// Under [`ipc_filter`], SysV IPC and POSIX message queues fail with
    /// EPERM, whoever runs it; socketpair and ordinary files still work.
    #[test]
    fn the_ipc_filter_refuses_sysv_ipc_and_message_queues() {
        let program = ipc_filter().unwrap();
        let mut cmd = std::process::Command::new("python3");
        cmd.args([
            "-c",
            r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
def err(r):
    return "ok" if r >= 0 else os.strerror(ctypes.get_errno())
print("shmget:", err(libc.shmget(0, 4096, 0o1600)))
print("semget:", err(libc.semget(0, 1, 0o1600)))
print("msgget:", err(libc.msgget(0, 0o1600)))
print("mq_open:", err(libc.mq_open(b"/loopbox-test", 0o100 | 2, 0o600, None)))
print("open:", err(os.open("/dev/null", os.O_RDONLY)))
"#,
        ]);
        // SAFETY: the closure makes system calls only, on a program built before the fork.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                install(&program)
            });
        }
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            text,
            "shmget: Operation not permitted\nsemget: Operation not permitted\n\
             msgget: Operation not permitted\nmq_open: Operation not permitted\nopen: ok\n",
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
