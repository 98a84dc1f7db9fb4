//! Starting a child without fork(2). A fork copies the page tables of the
//! whole process, and loopbox's (wasmtime's instance pools, compiled code) is
//! large: a fork-based spawn cost about 0.8 ms more than posix_spawn here.
//! This does what glibc's posix_spawn does, clone(CLONE_VM | CLONE_VFORK) on a
//! private stack, and in the child also sets what posix_spawn cannot: the
//! rlimits, the confinement (capabilities, Landlock, seccomp), and a
//! parent-death signal, before it executes.
//!
//! The child shares our memory until it executes, and we are suspended until
//! then, so it must only make system calls: everything it reads is prepared
//! here first, and it allocates nothing.

use std::ffi::{CString, c_int, c_void};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::path::Path;

use crate::exec::sandbox::Confinement;

/// What the child gets: the program, its argv and environment, its working
/// directory, the three descriptors for stdin/stdout/stderr, and what to set.
pub struct Launch<'a> {
    pub program: &'a Path,
    /// `argv[0]`; None: the program's path.
    pub arg0: Option<&'a str>,
    pub args: &'a [String],
    pub env: &'a [(String, String)],
    pub cwd: &'a Path,
    pub stdin: RawFd,
    pub stdout: RawFd,
    pub stderr: RawFd,
    /// `(resource, limit)` pairs, each already clamped to our own hard limit.
    pub rlimits: &'a [(libc::__rlimit_resource_t, libc::rlim_t)],
    pub confinement: Option<&'a Confinement>,
    /// Descriptors the child gets as [`crate::exec::sandbox::PASSED_FD`] and
    /// the numbers after it (bwrap's seccomp filters). Each must be numbered
    /// above every target (`PASSED_FD + pass_fd.len()` or higher), so that
    /// moving one cannot overwrite another.
    pub pass_fd: &'a [RawFd],
    /// Killed with SIGKILL when the thread that started it ends (with
    /// loopbox, however loopbox ends). Only a watcher that must outlive us
    /// (`process::Reaper`) goes without.
    pub die_with_parent: bool,
    /// The process group to join (a live one of ours); 0: a group of its own.
    pub pgid: libc::pid_t,
}

fn cstring(s: impl Into<Vec<u8>>) -> io::Result<CString> {
    CString::new(s).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "a program, argument, variable or path contains a NUL byte",
        )
    })
}

/// Everything the child reads, prepared before the clone.
struct Prepared<'a> {
    program: CString,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    cwd: CString,
    fds: [RawFd; 3],
    rlimits: &'a [(libc::__rlimit_resource_t, libc::rlim_t)],
    confinement: Option<&'a Confinement>,
    pass_fd: &'a [RawFd],
    die_with_parent: bool,
    pgid: libc::pid_t,
    /// Our pid: a child whose parent is already someone else (we died before
    /// its parent-death signal was set) exits.
    parent: libc::pid_t,
    /// Where the child reports why exec failed (close-on-exec: silent on success).
    report: RawFd,
    /// One past the highest descriptor number to mark close-on-exec where
    /// close_range(2) cannot (the soft RLIMIT_NOFILE, at most 65536).
    fd_limit: c_int,
}

const STACK_BYTES: usize = 256 << 10;

/// Start the child in its own process group, or the one `pgid` names (unless told otherwise, killed
/// with SIGKILL when the thread that started it ends: with loopbox, however
/// loopbox ends); its pid once it has executed, or why it could not.
pub fn spawn(l: &Launch) -> io::Result<libc::pid_t> {
    let target = crate::exec::sandbox::PASSED_FD;
    if l.pass_fd
        .iter()
        .any(|fd| *fd < target + l.pass_fd.len() as RawFd)
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a descriptor to pass is numbered where another one is to go",
        ));
    }
    use std::os::unix::ffi::OsStrExt;
    let program = cstring(l.program.as_os_str().as_bytes())?;
    let arg0 = match l.arg0 {
        Some(a) => cstring(a)?,
        None => program.clone(),
    };
    let args: Vec<CString> = std::iter::once(Ok(arg0))
        .chain(l.args.iter().map(|a| cstring(a.as_str())))
        .collect::<io::Result<_>>()?;
    let env: Vec<CString> = l
        .env
        .iter()
        .map(|(k, v)| cstring(format!("{k}={v}")))
        .collect::<io::Result<_>>()?;
    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = env.iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());
    let (report_r, report_w) = crate::exec::fd::pipe()?;
    let prepared = Prepared {
        program,
        argv,
        envp,
        cwd: cstring(l.cwd.as_os_str().as_bytes())?,
        fds: [l.stdin, l.stdout, l.stderr],
        rlimits: l.rlimits,
        confinement: l.confinement,
        pass_fd: l.pass_fd,
        die_with_parent: l.die_with_parent,
        pgid: l.pgid,
        // SAFETY: getpid has no preconditions.
        parent: unsafe { libc::getpid() },
        report: report_w.as_raw_fd(),
        fd_limit: fd_limit(),
    };
    // SAFETY: `child` only makes system calls on data in `prepared`, which
    // outlives the call (`clone_vfork` returns once the child executed or exited).
    let pid = unsafe { clone_vfork(child, &prepared, STACK_BYTES) };
    drop(report_w);
    let pid = pid?;
    // The child either executed (the report pipe closed empty) or wrote its errno and exited.
    let mut errno = [0u8; 4];
    let n = loop {
        // SAFETY: reads into a local buffer from a descriptor we own.
        let n = unsafe { libc::read(report_r.as_raw_fd(), errno.as_mut_ptr() as *mut c_void, 4) };
        if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
            continue;
        }
        break n;
    };
    if n == 4 {
        let _ = reap(pid); // it exited at once; only its status is left to collect
        return Err(io::Error::from_raw_os_error(i32::from_ne_bytes(errno)));
    }
    Ok(pid)
}

/// Run `f(arg)` in a child that shares our memory (clone with CLONE_VM and
/// CLONE_VFORK, on a stack of `stack_bytes` made here): we are suspended until
/// it executed or exited. Every signal is blocked meanwhile, so that no handler
/// of ours runs on the child's side; it inherits that mask. Its pid.
///
/// # Safety
/// `f` must only make system calls, on `arg` and its own stack, and allocate
/// nothing: it runs in our address space.
pub(crate) unsafe fn clone_vfork<T>(
    f: extern "C" fn(*mut c_void) -> c_int,
    arg: &T,
    stack_bytes: usize,
) -> io::Result<libc::pid_t> {
    let mut stack = vec![0u8; stack_bytes];
    // The stack grows down: hand clone its top, 16-byte aligned.
    let top = ((stack.as_mut_ptr() as usize + stack_bytes) & !15) as *mut c_void;
    // SAFETY: sigset_t is a plain C bit set; all-zero is a valid (empty) value.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: plain signal-mask calls on sets we own.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    // SAFETY: as the caller promises of `f`; CLONE_VFORK suspends us until the
    // child executed or exited, and only then is the stack freed.
    let pid = unsafe {
        libc::clone(
            f,
            top,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            arg as *const T as *mut c_void,
        )
    };
    let clone_error = io::Error::last_os_error();
    // SAFETY: restores the mask saved above.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
    drop(stack);
    if pid < 0 {
        return Err(clone_error);
    }
    Ok(pid)
}

/// The soft limit on open descriptors, at most 65536.
fn fd_limit() -> c_int {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) into a local struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return 65536;
    }
    lim.rlim_cur.min(65536) as c_int
}

/// Wait for `pid` to exit without reaping it: until it is reaped its number,
/// and the number of the group it leads, stay its own.
pub fn wait_exit(pid: libc::pid_t) -> io::Result<()> {
    loop {
        // SAFETY: waitid(2) on our own child, filling a zeroed siginfo we own.
        let r = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Wait for `pid` to exit; its wait status.
pub fn reap(pid: libc::pid_t) -> io::Result<c_int> {
    let mut status = 0;
    loop {
        // SAFETY: waits for our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            return Ok(status);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// The child: system calls only, then exec; on failure, report errno and exit.
extern "C" fn child(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `Prepared` the parent keeps alive until we exec or exit.
    let p = unsafe { &*(arg as *const Prepared) };
    let fail = |p: &Prepared| -> c_int {
        // SAFETY: errno of this task; write(2) and _exit(2) are system calls.
        unsafe {
            let e = *libc::__errno_location();
            libc::write(p.report, &e as *const c_int as *const c_void, 4);
            libc::_exit(127)
        }
    };
    // SAFETY: every call below is a system call on prepared data.
    unsafe {
        // Handlers are the parent's code: each becomes the default. Signals the
        // user ignored stay ignored (as exec keeps them), except SIGPIPE, which
        // Rust ignores for itself: the child gets the default, as std gives it.
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        for sig in 1..65 {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                continue;
            }
            let handled = old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN;
            if handled || sig == libc::SIGPIPE {
                libc::sigaction(sig, &dfl, std::ptr::null_mut());
            }
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());

        if libc::setpgid(0, p.pgid) != 0 {
            return fail(p);
        }
        for (target, fd) in p.fds.iter().enumerate() {
            if libc::dup2(*fd, target as c_int) < 0 {
                return fail(p);
            }
        }
        for (i, &fd) in p.pass_fd.iter().enumerate() {
            let target = crate::exec::sandbox::PASSED_FD + i as c_int;
            // dup2 onto itself would keep close-on-exec: clear it instead.
            let ok = if fd == target {
                libc::fcntl(fd, libc::F_SETFD, 0) == 0
            } else {
                libc::dup2(fd, target) == target
            };
            if !ok {
                return fail(p);
            }
        }
        // Nothing loopbox inherited reaches the child: every descriptor above
        // the ones it is given closes at exec (a socket loopbox's own parent
        // left open would be a way out of the sandbox's network). Marked, not
        // closed: the report pipe must outlive a failed exec.
        let first = (crate::exec::sandbox::PASSED_FD + p.pass_fd.len() as c_int) as libc::c_uint;
        if libc::syscall(
            libc::SYS_close_range,
            first,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        ) != 0
        {
            // Before Linux 5.11: each open descriptor in turn.
            for fd in first as c_int..p.fd_limit {
                let flags = libc::fcntl(fd, libc::F_GETFD);
                if flags >= 0 && libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC) != 0 {
                    return fail(p);
                }
            }
        }
        if libc::chdir(p.cwd.as_ptr()) != 0 {
            return fail(p);
        }
        for (resource, value) in p.rlimits {
            let lim = libc::rlimit {
                rlim_cur: *value,
                rlim_max: *value,
            };
            if libc::setrlimit(*resource, &lim) != 0 {
                return fail(p);
            }
        }
        if let Some(c) = p.confinement
            && c.apply_in_child().is_err()
        {
            return fail(p);
        }
        // Killed when we die, even by SIGKILL (kept across the exec: nothing
        // above changes the uids, and dropping capabilities is no gain). Set
        // last, and checked against the race with our death before it was set.
        if p.die_with_parent
            && libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
        {
            return fail(p);
        }
        if p.die_with_parent && libc::getppid() != p.parent {
            libc::_exit(127);
        }
        libc::execve(p.program.as_ptr(), p.argv.as_ptr(), p.envp.as_ptr());
    }
    fail(p)
}
