//! The proxy's port inside a bubblewrap sandbox that may use the network.
//!
//! bwrap makes the sandbox's namespaces as always (its own user namespace, a
//! network namespace with only loopback), tells loopbox the sandbox's pid
//! (`--info-fd`) and waits before it runs the command (`--block-fd`). Then a
//! short-lived child of loopbox's joins that user and network namespace (as
//! their owner's user it has every capability there), waits for bwrap to give
//! loopback its address, listens on `127.0.0.1:`[`SANDBOX_PORT`] and sends the listening socket back
//! over a socket pair; the run's proxy adopts it (`EgressSide::adopt`) for as
//! long as the command runs, and only then is the command let go.
//!
//! Why not a process in the sandbox: a bridge (the `loopbox` binary run again
//! inside, carrying each connection to the proxy's Unix socket) cost every
//! networked command 4.7 ms at its start (the exec of a 50 MB binary, 1.28x a
//! sandbox without the network) and every byte one more hop. Here nothing of
//! the host's is bound into the sandbox and the listening socket is held by
//! loopbox alone. Why not make the namespace ourselves before bwrap: loopbox
//! is not dumpable (its `/proc` files are root's, see the binary's
//! `secrets.rs`), so a child sharing its memory cannot write its own user
//! namespace's uid map; joining bwrap's needs no map.

use std::ffi::{c_int, c_void};
use std::io;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::exec::egress::{Adopted, EgressSide, SANDBOX_PORT};

/// How long bwrap gets to report its sandbox (it takes a few milliseconds).
const REPORT_WITHIN: Duration = Duration::from_secs(10);

/// A sandbox's way to the proxy, between `prepare` and the command's start.
pub struct SandboxNet {
    side: Arc<EgressSide>,
    /// Our end of bwrap's `--info-fd`: the sandbox's pid arrives here.
    info: OwnedFd,
    /// Our end of bwrap's `--block-fd`: the command starts once a byte is written.
    release: OwnedFd,
}

impl std::fmt::Debug for SandboxNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SandboxNet({:?})", self.side)
    }
}

/// The two descriptors bwrap gets: its `--info-fd` and its `--block-fd`.
pub struct BwrapEnds {
    pub info: OwnedFd,
    pub block: OwnedFd,
}

impl SandboxNet {
    pub fn new(side: Arc<EgressSide>) -> io::Result<(SandboxNet, BwrapEnds)> {
        let (info, info_bwrap) = crate::exec::fd::pipe()?;
        let (block_bwrap, release) = crate::exec::fd::pipe()?;
        Ok((
            SandboxNet {
                side,
                info,
                release,
            },
            BwrapEnds {
                info: info_bwrap,
                block: block_bwrap,
            },
        ))
    }

    /// Once bwrap runs: find its sandbox, make the proxy's port in it, have
    /// the proxy serve it, then let the command start. Dropping the result
    /// closes the port.
    pub fn join(self, bwrap: libc::pid_t) -> io::Result<Adopted> {
        let pid = sandbox_pid(&self.info, REPORT_WITHIN)?;
        let listener = listen_in(&Namespaces::of(pid, bwrap)?)?;
        let hold = self.side.adopt(listener).map_err(io::Error::other)?;
        let go = [1u8];
        // SAFETY: write(2) of a local byte to a pipe we own.
        if unsafe { libc::write(self.release.as_raw_fd(), go.as_ptr() as *const c_void, 1) } != 1 {
            return Err(io::Error::last_os_error());
        }
        Ok(hold)
    }
}

/// The sandbox's pid, from bwrap's `--info-fd` report (`{"child-pid": N, ...}`).
fn sandbox_pid(info: &OwnedFd, within: Duration) -> io::Result<libc::pid_t> {
    let deadline = Instant::now() + within;
    let mut got = Vec::new();
    loop {
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&got) {
            return v["child-pid"]
                .as_i64()
                .and_then(|p| libc::pid_t::try_from(p).ok())
                .filter(|p| *p > 0)
                .ok_or_else(|| io::Error::other("bwrap reported no sandbox pid"));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let mut poll = libc::pollfd {
            fd: info.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll(2) on one descriptor we own.
        let ready =
            unsafe { libc::poll(&mut poll, 1, left.as_millis().min(i32::MAX as u128) as i32) };
        if ready < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if ready == 0 {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("bwrap did not report its sandbox within {within:?}"),
            ));
        }
        let mut buf = [0u8; 512];
        // SAFETY: read(2) into a local buffer from a pipe we own.
        let n = unsafe { libc::read(info.as_raw_fd(), buf.as_mut_ptr() as *mut c_void, buf.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 || got.len() > 4096 {
            return Err(io::Error::other(
                "bwrap ended before it reported its sandbox (its error is the command's stderr)",
            ));
        }
        got.extend_from_slice(&buf[..n as usize]);
    }
}

/// The sandbox's network namespace and the user namespace that owns it, opened
/// by loopbox itself.
struct Namespaces {
    user: OwnedFd,
    net: OwnedFd,
}

impl Namespaces {
    /// Those of `pid`, which must be a child of `bwrap` (the process we
    /// started) and still that process once they are open (a pid reused in
    /// between would point elsewhere). The user namespace is the one that
    /// owns the network namespace (NS_GET_USERNS), not the process's own: as
    /// another user than root, bwrap nests a second user namespace before it
    /// waits, which holds no rights over the network.
    fn of(pid: libc::pid_t, bwrap: libc::pid_t) -> io::Result<Namespaces> {
        let not_ours = || {
            io::Error::other(format!(
                "bwrap reported process {pid}, which is not its sandbox"
            ))
        };
        // SAFETY: pidfd_open(2) with integer arguments.
        let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if pidfd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the descriptor was just made and is ours alone.
        let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as c_int) };
        if parent_of(pid)? != bwrap {
            return Err(not_ours());
        }
        let net: OwnedFd = std::fs::File::open(format!("/proc/{pid}/ns/net"))?.into();
        // SAFETY: an ioctl on a namespace descriptor we own; it returns a new descriptor.
        let user = unsafe { libc::ioctl(net.as_raw_fd(), libc::NS_GET_USERNS) };
        if user < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: NS_GET_USERNS made this descriptor; it is ours alone.
        let user = unsafe { OwnedFd::from_raw_fd(user) };
        // SAFETY: pidfd_send_signal(2) of signal 0 (a check, nothing sent).
        let alive = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                pidfd.as_raw_fd(),
                0,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        if alive != 0 {
            return Err(not_ours());
        }
        Ok(Namespaces { user, net })
    }
}

/// The parent pid of `pid`, from `/proc/PID/stat` (after the name, which may
/// hold spaces and parentheses).
fn parent_of(pid: libc::pid_t) -> io::Result<libc::pid_t> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(1))
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| io::Error::other(format!("cannot read the parent of process {pid}")))
}

/// What the joining child needs, prepared before the clone (it allocates nothing).
struct Join {
    user: c_int,
    net: c_int,
    /// The child's end of the pair the listener (or why not) goes back on.
    send: c_int,
}

/// The steps the child reports a failure at.
const STEPS: [&str; 5] = [
    "join the sandbox's user namespace",
    "join the sandbox's network namespace",
    "bind the sandbox's port (bwrap gives loopback its address)",
    "listen on the sandbox's port",
    "hand the port to loopbox",
];

/// How many 100 us pauses the child waits for loopback's address (bwrap gives
/// it well within a millisecond; some kernels have it from the start): 5 s.
const BIND_TRIES: u32 = 50_000;

/// A socket listening on the proxy's port in the network namespace `ns`.
fn listen_in(ns: &Namespaces) -> io::Result<TcpListener> {
    let (ours, theirs) = pair()?;
    let job = Join {
        user: ns.user.as_raw_fd(),
        net: ns.net.as_raw_fd(),
        send: theirs.as_raw_fd(),
    };
    // SAFETY: `joiner` only makes system calls on `job` and its own stack.
    // Its signals stay blocked (the mask `clone_vfork` gave it) until it exits.
    let child = unsafe { crate::exec::spawn::clone_vfork(joiner, &job, 64 << 10) };
    drop(theirs);
    let child = child?;
    let _ = crate::exec::spawn::reap(child);
    receive(&ours)
}

/// The joining child: system calls only, then exit (0, or 1 after reporting why).
extern "C" fn joiner(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `Join` the parent keeps alive until we exit.
    let job = unsafe { &*(arg as *const Join) };
    // SAFETY: every call below is a system call on `job` or this stack.
    unsafe {
        let fail = |step: c_int| -> c_int {
            let report = [step, *libc::__errno_location()];
            libc::send(job.send, report.as_ptr() as *const c_void, 8, 0);
            1
        };
        for (step, fd, kind) in [
            (0, job.user, libc::CLONE_NEWUSER),
            (1, job.net, libc::CLONE_NEWNET),
        ] {
            if libc::setns(fd, kind) != 0 {
                return fail(step);
            }
        }
        // bwrap gives loopback its address and brings it up (touching it
        // first makes bwrap fail): until it has, binding finds no address.
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_port = SANDBOX_PORT.to_be();
        addr.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let l = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if l < 0 {
            return fail(2);
        }
        let mut waited = 0;
        while libc::bind(l, &addr as *const _ as *const libc::sockaddr, len) != 0 {
            if *libc::__errno_location() != libc::EADDRNOTAVAIL || waited >= BIND_TRIES {
                return fail(2);
            }
            let pause = libc::timespec {
                tv_sec: 0,
                tv_nsec: 100_000,
            };
            libc::nanosleep(&pause, std::ptr::null_mut());
            waited += 1;
        }
        if libc::listen(l, libc::SOMAXCONN) != 0 {
            return fail(3);
        }
        if send_fd(job.send, l).is_err() {
            return fail(4);
        }
        0
    }
}

/// A datagram socket pair, both ends close-on-exec.
fn pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: socketpair(2) filling a local array.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just made and are ours alone.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Send `fd` over `over` (SCM_RIGHTS), the message built on this stack.
///
/// # Safety
/// System calls only.
unsafe fn send_fd(over: c_int, fd: c_int) -> Result<(), ()> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr() as *mut c_void,
        iov_len: 1,
    };
    let mut control = [0u64; 8];
    // SAFETY: plain C structures on this stack, filled by the CMSG macros
    // within `control`'s bounds (one descriptor needs CMSG_SPACE(4) = 24 bytes).
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr() as *mut c_void;
        msg.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<c_int>() as u32) as usize;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<c_int>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut c_int, fd);
        if libc::sendmsg(over, &msg, 0) != 1 {
            return Err(());
        }
    }
    Ok(())
}

/// What the child sent: the listening socket, or the step it failed at and errno.
fn receive(ours: &OwnedFd) -> io::Result<TcpListener> {
    let mut data = [0u8; 8];
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr() as *mut c_void,
        iov_len: data.len(),
    };
    let mut control = [0u64; 8];
    // SAFETY: msghdr is plain C data; all-zero is valid before the fields are set.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr() as *mut c_void;
    msg.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: recvmsg into the buffers above, which outlive the call; the
    // child has exited, so whatever it sent is already queued.
    let n = unsafe {
        libc::recvmsg(
            ours.as_raw_fd(),
            &mut msg,
            libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
        )
    };
    if n < 0 {
        return Err(io::Error::other(format!(
            "the sandbox's port was not made: {}",
            io::Error::last_os_error()
        )));
    }
    // SAFETY: walking the control data recvmsg filled, within its length.
    let fd = unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null()
            || (*cmsg).cmsg_level != libc::SOL_SOCKET
            || (*cmsg).cmsg_type != libc::SCM_RIGHTS
        {
            None
        } else {
            Some(std::ptr::read_unaligned(
                libc::CMSG_DATA(cmsg) as *const c_int
            ))
        }
    };
    let Some(fd) = fd else {
        let step = i32::from_ne_bytes(data[..4].try_into().expect("4 bytes"));
        let errno = i32::from_ne_bytes(data[4..].try_into().expect("4 bytes"));
        let what = STEPS
            .get(step as usize)
            .copied()
            .unwrap_or("make the sandbox's port");
        return Err(io::Error::other(format!(
            "cannot {what}: {}",
            io::Error::from_raw_os_error(errno)
        )));
    };
    // SAFETY: SCM_RIGHTS gave us this descriptor; it is ours alone.
    let listener = unsafe { TcpListener::from_raw_fd(fd) };
    listener.set_nonblocking(true)?;
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_sent_over_the_pair_arrives_and_accepts() {
        let (ours, theirs) = pair().unwrap();
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        // SAFETY: sendmsg on descriptors we own.
        unsafe { send_fd(theirs.as_raw_fd(), l.as_raw_fd()).unwrap() };
        drop(l);
        let got = receive(&ours).unwrap();
        assert_eq!(got.local_addr().unwrap().port(), port);
        let _c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        got.set_nonblocking(false).unwrap();
        got.accept().unwrap();
    }

    #[test]
    fn a_reported_pid_that_is_not_bwraps_child_is_refused() {
        // No such process.
        assert!(Namespaces::of(i32::MAX, 1).is_err());
        // A live process whose parent is not the bwrap we started (pid 1's
        // own parent is 0; this process's is the test runner's).
        // SAFETY: getpid has no preconditions.
        let me = unsafe { libc::getpid() };
        let e = Namespaces::of(me, 1).err().unwrap().to_string();
        assert!(e.contains("not its sandbox"), "{e}");
        let e = Namespaces::of(1, me).err().unwrap().to_string();
        assert!(e.contains("not its sandbox"), "{e}");
    }

    /// bwrap as another user than root nests a second user namespace before it
    /// waits; joining the process's own one then failed (EPERM) now and then.
    /// The namespace joined is the network's owner, whatever the process's own.
    #[test]
    fn the_user_namespace_joined_is_the_one_owning_the_network() {
        use std::os::unix::fs::MetadataExt;
        // A process in user namespace B, itself inside A, which owns its network namespace.
        let Ok(mut child) = std::process::Command::new("unshare")
            .args(["-Urn", "--", "unshare", "-U", "--", "sleep", "30"])
            .spawn()
        else {
            return;
        };
        let pid = child.id() as libc::pid_t;
        let own = format!("/proc/{pid}/ns/user");
        let deadline = Instant::now() + Duration::from_secs(5);
        // Until the inner unshare has run (its user namespace differs from the outer one).
        let inner = loop {
            let user = std::fs::File::open(&own).unwrap();
            // SAFETY: NS_GET_PARENT on a namespace descriptor we own.
            let parent = unsafe { libc::ioctl(user.as_raw_fd(), libc::NS_GET_PARENT) };
            if parent >= 0 {
                // SAFETY: the ioctl made this descriptor; it is ours alone.
                let parent = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(parent) });
                let outer_of_parent = parent.metadata().unwrap().ino();
                let host = std::fs::metadata("/proc/self/ns/user").unwrap().ino();
                if outer_of_parent != host {
                    break (user.metadata().unwrap().ino(), outer_of_parent);
                }
            }
            assert!(
                Instant::now() < deadline,
                "the nested namespace never appeared"
            );
            std::thread::sleep(Duration::from_millis(5));
        };
        // SAFETY: getpid has no preconditions.
        let me = unsafe { libc::getpid() };
        let ns = Namespaces::of(pid, me).unwrap();
        let joined = std::fs::File::from(ns.user).metadata().unwrap().ino();
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(joined, inner.1, "the owner of the network namespace");
        assert_ne!(joined, inner.0, "not the process's own, nested one");
    }

    #[test]
    fn bwraps_report_gives_the_pid_and_a_silent_bwrap_is_an_error_not_a_wait() {
        let (r, w) = crate::exec::fd::pipe().unwrap();
        let report = b"{\n    \"child-pid\": 4242,\n    \"net-namespace\": 1\n}\n";
        std::io::Write::write_all(&mut std::fs::File::from(w), report).unwrap();
        assert_eq!(sandbox_pid(&r, Duration::from_secs(1)).unwrap(), 4242);
        let (r, w) = crate::exec::fd::pipe().unwrap();
        drop(w);
        assert!(sandbox_pid(&r, Duration::from_secs(1)).is_err());
        let (r, _w) = crate::exec::fd::pipe().unwrap();
        let e = sandbox_pid(&r, Duration::from_millis(50)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    }

    /// The whole path as a run takes it: bwrap started in its namespaces, the
    /// proxy's port made in them, the command let go.
    #[test]
    fn a_networked_bwrap_sandbox_gets_a_namespace_of_its_own_with_only_the_proxy_in_it() {
        use crate::exec::egress::{Egress, NetworkConfig};
        use crate::exec::process::{Spec, run};
        use crate::exec::sandbox::{Confines, Sandbox, support};
        let Ok(bwrap) = support().bwrap.clone() else {
            assert!(std::env::var_os("CI").is_none(), "CI has bubblewrap");
            return;
        };
        let egress = Egress::standalone(&NetworkConfig {
            allow: vec!["example.invalid:80".into()],
            ..NetworkConfig::default()
        })
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        let c = Confines {
            workspace: ws.clone(),
            protected: Vec::new(),
            egress: egress.commands(),
            unix_sockets: false,
            writable_outside: Vec::new(),
            hidden: Vec::new(),
            tmp_bytes: 0,
        };
        // Twice at once: each sandbox listens on the same port of its own namespace.
        let script = "cat /proc/net/tcp; echo; cut -d: -f1 /proc/net/dev | tail -n +3; readlink /proc/self/ns/net; ls /tmp";
        let ours = std::fs::read_link("/proc/self/ns/net").unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let outs = rt.block_on(async {
            let one = || {
                let p = c
                    .prepare(
                        &Sandbox::Bwrap(bwrap.clone()),
                        "/bin/sh".into(),
                        None,
                        vec!["-c".into(), script.into()],
                        &ws,
                    )
                    .unwrap();
                assert!(p.net.is_some() && p.args.contains(&"--unshare-net".to_string()));
                let keep = (p._tmp, p._hold);
                let spec = Spec {
                    program: p.program,
                    arg0: p.arg0,
                    args: p.args,
                    cwd: ws.clone(),
                    env: vec![("PATH".into(), "/usr/bin:/bin".into())],
                    stdin: None,
                    timeout: std::time::Duration::from_secs(30),
                    output_cap: 1 << 16,
                    rlimits: None,
                    confinement: p.confinement,
                    pass_fd: p.pass_fd,
                    net: p.net,
                };
                async move {
                    let out = run(spec).await.unwrap();
                    drop(keep);
                    out
                }
            };
            tokio::join!(one(), one())
        });
        for out in [outs.0, outs.1] {
            assert_eq!(out.exit_code, Some(0), "{}", out.stderr);
            let lines: Vec<&str> = out.stdout.lines().collect();
            // 127.0.0.1:3128 (0C38), listening (0A): the only socket.
            let tcp: Vec<&&str> = lines.iter().take_while(|l| !l.is_empty()).skip(1).collect();
            assert_eq!(tcp.len(), 1, "{}", out.stdout);
            assert!(
                tcp[0].contains("0100007F:0C38 00000000:0000 0A"),
                "{}",
                out.stdout
            );
            let after: Vec<&str> = lines
                .iter()
                .skip_while(|l| !l.is_empty())
                .skip(1)
                .copied()
                .collect();
            assert_eq!(after[0].trim(), "lo", "only loopback: {}", out.stdout);
            assert!(after[1].starts_with("net:["), "{}", out.stdout);
            assert_ne!(after[1], ours.to_string_lossy(), "the host's namespace");
            // No socket of the host's is bound into the sandbox.
            assert!(after[2..].is_empty(), "{}", out.stdout);
        }
    }
}
