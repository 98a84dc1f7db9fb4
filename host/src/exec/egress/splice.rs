//! Moving a connection's bytes from one socket to another, one direction per
//! [`one_way`] call, on tokio's readiness of the two sockets: with
//! `splice(2)` through a pipe, so they never pass through loopbox's memory,
//! or through a 1 MiB buffer ([`Way::Copy`]). Which is faster depends on the
//! sockets, measured (BENCHMARKS.md section 11, a 100 MB download on
//! loopback): from a Unix socket (the bridge's way) splice reached 75 to 98%
//! of a direct download where a copy reached 59 to 68%; between two TCP
//! sockets a 1 MiB copy reached 78 to 80% where splice reached 37 to 67%,
//! and the old 64 KiB copy about 50%.
//!
//! Ours, not a crate's: tokio has no splice, and the crates that add it are
//! young and unmaintained; this is one system call each way on file
//! descriptors tokio already watches.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use tokio::io::Interest;

/// The pipe between the sockets: 1 MiB if the system allows (else its
/// default, 64 KiB), so a fast sender moves up to that much per call.
const PIPE_BYTES: libc::c_int = 1 << 20;

/// How [`one_way`] moves bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    Splice,
    /// Through a buffer of this many bytes.
    Copy(usize),
}

/// A 1 MiB buffer per direction: each connection of a run holds at most two
/// (so `network.max_connections` bounds a run's buffers at 2 MiB each).
pub const COPY_BYTES: usize = 1 << 20;

/// A socket tokio watches, whose readiness [`one_way`] waits on.
pub trait Socket: AsRawFd + Send + Sync {
    /// Whether it is a Unix socket (splice is the faster way from one).
    const UNIX: bool;
    fn ready(&self, interest: Interest) -> impl Future<Output = io::Result<()>> + Send;
    fn attempt<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R>;
}

macro_rules! socket {
    ($t:ty, $unix:expr) => {
        impl Socket for $t {
            const UNIX: bool = $unix;
            async fn ready(&self, interest: Interest) -> io::Result<()> {
                <$t>::ready(self, interest).await.map(|_| ())
            }
            fn attempt<R>(
                &self,
                interest: Interest,
                f: impl FnOnce() -> io::Result<R>,
            ) -> io::Result<R> {
                self.try_io(interest, f)
            }
        }
    };
}
socket!(tokio::net::TcpStream, false);
socket!(tokio::net::UnixStream, true);

impl Way {
    /// The faster way between these two kinds of socket.
    pub fn between<A: Socket, B: Socket>() -> Way {
        if A::UNIX || B::UNIX {
            Way::Splice
        } else {
            Way::Copy(COPY_BYTES)
        }
    }
}

struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    size: usize,
}

impl Pipe {
    fn new() -> io::Result<Pipe> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: pipe2 writes two descriptors into the array it is given.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just made by pipe2 and are owned here alone.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: fcntl on a descriptor this function owns, with integer arguments.
        let size = unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_BYTES) };
        let size = if size > 0 {
            size
        } else {
            // SAFETY: as above; F_GETPIPE_SZ only reads.
            unsafe { libc::fcntl(write.as_raw_fd(), libc::F_GETPIPE_SZ) }
        };
        Ok(Pipe {
            read,
            write,
            size: usize::try_from(size).unwrap_or(0).max(4096),
        })
    }
}

/// A system call's count as an `io::Result`.
fn sys(n: isize) -> io::Result<usize> {
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

fn splice(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
    // SAFETY: splice between two descriptors the caller holds open; no memory is passed.
    sys(unsafe {
        libc::splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
        )
    })
}

/// Move what `from` sends to `to` until `from` ends, an error, or `moved`
/// says stop (it is told each chunk's size before the chunk is passed on);
/// then end `to`'s writing side. `Err` only when no pipe could be made.
pub async fn one_way<R: Socket, W: Socket>(
    way: Way,
    from: &R,
    to: &W,
    moved: impl FnMut(usize) -> bool,
) -> io::Result<()> {
    match way {
        Way::Splice => spliced(from, to, moved).await?,
        Way::Copy(size) => copied(size, from, to, moved).await,
    }
    // SAFETY: shutdown on a descriptor `to` holds open.
    unsafe { libc::shutdown(to.as_raw_fd(), libc::SHUT_WR) };
    Ok(())
}

/// One system call on `s` once it is ready for `interest`, again while it
/// would block: its count, or None when the socket failed.
async fn when_ready<S: Socket>(
    s: &S,
    interest: Interest,
    mut call: impl FnMut() -> io::Result<usize>,
) -> Option<usize> {
    loop {
        s.ready(interest).await.ok()?;
        match s.attempt(interest, &mut call) {
            Ok(n) => return Some(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(_) => return None,
        }
    }
}

async fn copied<R: Socket, W: Socket>(
    size: usize,
    from: &R,
    to: &W,
    mut moved: impl FnMut(usize) -> bool,
) {
    let mut buf = vec![0u8; size.max(1)];
    loop {
        // SAFETY: read(2) into a buffer of ours, at most its length.
        let read =
            || sys(unsafe { libc::read(from.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) });
        let n = match when_ready(from, Interest::READABLE, read).await {
            Some(n) if n > 0 && moved(n) => n,
            _ => return,
        };
        let mut sent = 0;
        while sent < n {
            let rest = &buf[sent..n];
            // SAFETY: write(2) from a slice of ours, at most its length.
            let write =
                || sys(unsafe { libc::write(to.as_raw_fd(), rest.as_ptr().cast(), rest.len()) });
            match when_ready(to, Interest::WRITABLE, write).await {
                Some(m) if m > 0 => sent += m,
                _ => return,
            }
        }
    }
}

async fn spliced<R: Socket, W: Socket>(
    from: &R,
    to: &W,
    mut moved: impl FnMut(usize) -> bool,
) -> io::Result<()> {
    let pipe = Pipe::new()?;
    loop {
        // The pipe is empty here: a splice into it waits only on `from`.
        let fill = || splice(from.as_raw_fd(), pipe.write.as_raw_fd(), pipe.size);
        let n = match when_ready(from, Interest::READABLE, fill).await {
            Some(n) if n > 0 && moved(n) => n,
            _ => return Ok(()),
        };
        let mut left = n;
        while left > 0 {
            let drain = || splice(pipe.read.as_raw_fd(), to.as_raw_fd(), left);
            match when_ready(to, Interest::WRITABLE, drain).await {
                Some(m) if m > 0 => left -= m,
                _ => return Ok(()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// 8 MiB through a TCP pair and a Unix pair, both ways at once, each way,
    /// each byte where it was, and the far end told when the near one closed.
    #[tokio::test(flavor = "current_thread")]
    async fn bytes_cross_whole_and_in_order_both_ways() {
        for way in [Way::Splice, Way::Copy(COPY_BYTES), Way::Copy(1000)] {
            crosses(way).await;
        }
    }

    async fn crosses(way: Way) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (client, accepted) = tokio::join!(tokio::net::TcpStream::connect(addr), l.accept());
        let (mut client, (proxy_in, _)) = (client.unwrap(), accepted.unwrap());
        let (proxy_out, mut server) = tokio::net::UnixStream::pair().unwrap();
        let data: Vec<u8> = (0..8u32 << 20).map(|i| (i % 251) as u8).collect();
        let (mut up, mut down) = (0usize, 0usize);
        let relay = async {
            tokio::join!(
                one_way(way, &proxy_in, &proxy_out, |n| {
                    up += n;
                    true
                }),
                one_way(way, &proxy_out, &proxy_in, |n| {
                    down += n;
                    true
                })
            )
        };
        let ends = async {
            let (mut cr, mut cw) = client.split();
            let (mut sr, mut sw) = server.split();
            let (mut got_s, mut got_c) = (Vec::new(), Vec::new());
            tokio::join!(
                async {
                    cw.write_all(&data).await.unwrap();
                    cw.shutdown().await.unwrap();
                },
                async {
                    sw.write_all(&data).await.unwrap();
                    sw.shutdown().await.unwrap();
                },
                async { sr.read_to_end(&mut got_s).await.unwrap() },
                async { cr.read_to_end(&mut got_c).await.unwrap() },
            );
            (got_s, got_c)
        };
        let ((a, b), (got_s, got_c)) = tokio::join!(relay, ends);
        a.unwrap();
        b.unwrap();
        assert!(got_s == data && got_c == data);
        assert_eq!((up, down), (data.len(), data.len()));
    }

    /// `moved` saying stop ends the direction before the chunk goes on.
    #[tokio::test(flavor = "current_thread")]
    async fn a_stop_passes_nothing_more_on() {
        let (a, mut a_end) = tokio::net::UnixStream::pair().unwrap();
        let (b, mut b_end) = tokio::net::UnixStream::pair().unwrap();
        a_end.write_all(b"over budget").await.unwrap();
        one_way(Way::Splice, &a, &b, |_| false).await.unwrap();
        let mut got = Vec::new();
        b_end.read_to_end(&mut got).await.unwrap();
        assert!(got.is_empty());
        let (c, mut c_end) = tokio::net::UnixStream::pair().unwrap();
        let (d, mut d_end) = tokio::net::UnixStream::pair().unwrap();
        c_end.write_all(b"over budget").await.unwrap();
        one_way(Way::Copy(64), &c, &d, |_| false).await.unwrap();
        let mut got = Vec::new();
        d_end.read_to_end(&mut got).await.unwrap();
        assert!(got.is_empty());
    }
}
