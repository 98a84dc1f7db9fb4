//! The network namespace of a bubblewrap sandbox that may use the network,
//! made by loopbox in the child that executes bwrap: a new user namespace
//! (the caller's own uid and gid mapped, nothing else) owning a new network
//! namespace with only loopback, up, and a listening socket on
//! `127.0.0.1:`[`SANDBOX_PORT`] in it, handed back to loopbox over a socket
//! pair before bwrap runs. bwrap then makes the rest of the sandbox inside it
//! (without `--unshare-net`), and loopbox's proxy accepts the sandbox's
//! connections on that socket itself (`EgressSide::adopt`).
//!
//! Why not a process in the sandbox: a bridge (the `loopbox` binary run again
//! inside, carrying each connection to the proxy's Unix socket) cost every
//! networked command 4.7 ms at its start (the exec of a 50 MB binary, 1.28x a
//! sandbox without the network) and every byte one more hop. Here the
//! sandbox holds nothing of loopbox's: no socket of the host's is bound in,
//! and the listening socket lives only in loopbox, so nothing the command
//! runs can replace or trace it. Its one way out is still the proxy.

use std::io;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use std::ffi::CString;

use crate::exec::egress::SANDBOX_PORT;

/// What the child needs, prepared before the clone (it allocates nothing).
pub struct ChildNet {
    /// Loopbox's end of the pair: the listening socket arrives here.
    ours: OwnedFd,
    /// The child's end (close-on-exec: bwrap never holds it).
    theirs: OwnedFd,
    setgroups: CString,
    uid_map: CString,
    gid_map: CString,
    uid_line: String,
    gid_line: String,
}

impl ChildNet {
    pub fn new() -> io::Result<ChildNet> {
        let mut pair = [0; 2];
        // SAFETY: socketpair(2) filling a local array.
        let r = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                0,
                pair.as_mut_ptr(),
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just made and are ours alone.
        let (ours, theirs) =
            unsafe { (OwnedFd::from_raw_fd(pair[0]), OwnedFd::from_raw_fd(pair[1])) };
        // SAFETY: geteuid and getegid have no preconditions.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let c = |s: &str| CString::new(s).expect("no NUL");
        Ok(ChildNet {
            ours,
            theirs,
            setgroups: c("/proc/self/setgroups"),
            uid_map: c("/proc/self/uid_map"),
            gid_map: c("/proc/self/gid_map"),
            uid_line: format!("{uid} {uid} 1"),
            gid_line: format!("{gid} {gid} 1"),
        })
    }

    /// In the child, between clone and exec: make the namespaces, bring
    /// loopback up, listen, and send the listener to loopbox. On failure
    /// errno says why.
    ///
    /// # Safety
    /// Only in a child about to execute: it changes the calling process's
    /// namespaces, and makes system calls on prepared data only.
    pub unsafe fn enter(&self) -> Result<(), ()> {
        // SAFETY: system calls on data prepared in `new` or on this stack.
        unsafe {
            if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET) != 0 {
                return Err(());
            }
            // setgroups must be denied before an unprivileged gid map is written.
            write_file(&self.setgroups, b"deny")?;
            write_file(&self.uid_map, self.uid_line.as_bytes())?;
            write_file(&self.gid_map, self.gid_line.as_bytes())?;
            let s = check(libc::socket(
                libc::AF_INET,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                0,
            ))?;
            let mut up: libc::ifreq = std::mem::zeroed();
            for (i, b) in b"lo".iter().enumerate() {
                up.ifr_name[i] = *b as libc::c_char;
            }
            up.ifr_ifru.ifru_flags =
                (libc::IFF_UP | libc::IFF_LOOPBACK | libc::IFF_RUNNING) as libc::c_short;
            let r = libc::ioctl(s, libc::SIOCSIFFLAGS, &up);
            libc::close(s);
            check(r)?;
            let l = check(libc::socket(
                libc::AF_INET,
                libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
                0,
            ))?;
            let mut addr: libc::sockaddr_in = std::mem::zeroed();
            addr.sin_family = libc::AF_INET as libc::sa_family_t;
            addr.sin_port = SANDBOX_PORT.to_be();
            addr.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
            let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            if libc::bind(l, &addr as *const _ as *const libc::sockaddr, len) != 0
                || libc::listen(l, libc::SOMAXCONN) != 0
                || send_fd(self.theirs.as_raw_fd(), l).is_err()
            {
                libc::close(l);
                return Err(());
            }
            libc::close(l);
        }
        Ok(())
    }

    /// After the child executed: the listening socket it sent.
    pub fn receive(self) -> io::Result<TcpListener> {
        drop(self.theirs);
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr() as *mut libc::c_void,
            iov_len: 1,
        };
        let mut control = [0u64; 8];
        // SAFETY: msghdr is plain C data; all-zero is valid before the fields are set.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = std::mem::size_of_val(&control);
        // SAFETY: recvmsg into the buffers above, which outlive the call. The
        // child sent before it executed, and spawn returns only after the exec.
        let n = unsafe {
            libc::recvmsg(
                self.ours.as_raw_fd(),
                &mut msg,
                libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: walking the control data recvmsg filled, within its length.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            if cmsg.is_null()
                || (*cmsg).cmsg_level != libc::SOL_SOCKET
                || (*cmsg).cmsg_type != libc::SCM_RIGHTS
            {
                return Err(io::Error::other(
                    "the sandbox's network namespace sent no socket",
                ));
            }
            let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg) as *const libc::c_int);
            let listener = TcpListener::from_raw_fd(fd);
            listener.set_nonblocking(true)?;
            Ok(listener)
        }
    }
}

fn check(r: libc::c_int) -> Result<libc::c_int, ()> {
    if r < 0 { Err(()) } else { Ok(r) }
}

/// # Safety
/// A system call sequence on a prepared path.
unsafe fn write_file(path: &CString, data: &[u8]) -> Result<(), ()> {
    // SAFETY: open, write and close on a NUL-terminated path and a live buffer.
    unsafe {
        let fd = check(libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC))?;
        let n = libc::write(fd, data.as_ptr() as *const libc::c_void, data.len());
        libc::close(fd);
        if n != data.len() as isize {
            return Err(());
        }
    }
    Ok(())
}

/// Send `fd` over the socket `over` (SCM_RIGHTS), building the message on
/// this stack.
///
/// # Safety
/// System calls only.
unsafe fn send_fd(over: libc::c_int, fd: libc::c_int) -> Result<(), ()> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr() as *mut libc::c_void,
        iov_len: 1,
    };
    let mut control = [0u64; 8];
    // SAFETY: plain C structures on this stack, filled by the CMSG macros
    // within `control`'s bounds (one descriptor needs CMSG_SPACE(4) = 24 bytes).
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) as usize;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut libc::c_int, fd);
        if libc::sendmsg(over, &msg, 0) != 1 {
            return Err(());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_sent_over_the_pair_arrives_and_accepts() {
        // The sending half as the child runs it, in this process (no namespaces).
        let net = ChildNet::new().unwrap();
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        // SAFETY: sendmsg on descriptors we own.
        unsafe { send_fd(net.theirs.as_raw_fd(), l.as_raw_fd()).unwrap() };
        drop(l);
        let got = net.receive().unwrap();
        assert_eq!(got.local_addr().unwrap().port(), port);
        let _c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        got.set_nonblocking(false).unwrap();
        got.accept().unwrap();
    }

    #[test]
    fn nothing_sent_is_an_error_not_a_wait() {
        let net = ChildNet::new().unwrap();
        assert!(net.receive().is_err());
    }

    /// The whole path as a run takes it: bwrap started by the launcher in the
    /// namespace it made, the proxy listening on 3128 there, only loopback,
    /// nothing of the host's network or sockets.
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
                assert!(p.net.is_some() && !p.args.contains(&"--unshare-net".to_string()));
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
