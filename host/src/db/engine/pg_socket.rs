//! A PostgreSQL connection driven by the thread that waits on it, as libpq
//! does: the caller writes its request to the socket, waits in `poll(2)` for
//! the answer, and reads it, with no other thread in between.
//!
//! tokio-postgres splits a connection into a `Client`, which queues requests,
//! and a `Connection` future, which does the socket's work. Here the socket is
//! a non-blocking `std` one that answers `Pending` when it would block and
//! says which way it waits ([`Interest`]); [`Link::drive`] polls the caller's
//! future and the `Connection` in turn, and sleeps in `poll(2)` on the socket
//! only when neither can go on. Nothing polls a connection between requests:
//! what the server sends meanwhile (a notice, its closing the session) waits
//! in the socket for the next one.
//!
//! Each request then costs the round trip itself; handing it to a thread that
//! owns the socket, and its answer back, cost two thread wake-ups more (a
//! third of a shell action's store time, measured in BENCHMARKS section 10).

use std::future::Future;
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::config::Host;
use tokio_postgres::{Client, Config};

use super::tls::MakeRustls;

/// Which way the socket last found nothing to do.
#[derive(Default)]
struct Interest {
    read: AtomicBool,
    write: AtomicBool,
}

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// A connection's socket, non-blocking: `Pending` (with its [`Interest`]
/// noted, no waker kept) where a read or write would block.
pub struct Socket {
    stream: Stream,
    interest: Arc<Interest>,
}

impl Socket {
    fn io<T>(
        &mut self,
        write: bool,
        mut f: impl FnMut(&mut Stream) -> io::Result<T>,
    ) -> Poll<io::Result<T>> {
        loop {
            match f(&mut self.stream) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let flag = if write {
                        &self.interest.write
                    } else {
                        &self.interest.read
                    };
                    flag.store(true, Ordering::Relaxed);
                    return Poll::Pending;
                }
                done => return Poll::Ready(done),
            }
        }
    }
}

impl AsyncRead for Socket {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let unfilled = buf.initialize_unfilled();
        let n = std::task::ready!(this.io(false, |s| match s {
            Stream::Tcp(s) => s.read(unfilled),
            Stream::Unix(s) => s.read(unfilled),
        }))?;
        buf.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().io(true, |s| match s {
            Stream::Tcp(s) => s.write(data),
            Stream::Unix(s) => s.write(data),
        })
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        let shut = match &self.stream {
            Stream::Tcp(s) => s.shutdown(std::net::Shutdown::Write),
            Stream::Unix(s) => s.shutdown(std::net::Shutdown::Write),
        };
        Poll::Ready(shut)
    }
}

/// What does a connection's socket work: its `Connection` future, while it
/// has not ended.
type Connection = Pin<Box<dyn Future<Output = Result<(), tokio_postgres::Error>> + Send>>;

/// A connection's socket and the future that works it.
pub struct Link {
    fd: RawFd,
    interest: Arc<Interest>,
    connection: Option<Connection>,
}

impl Link {
    /// Wait for `f` on this thread, working the connection's socket while it
    /// waits; `None` at `deadline`. Once the connection has ended (the server
    /// closed it, or it failed), its client's requests fail at once.
    pub fn drive<F: Future>(&mut self, f: F, deadline: Instant) -> Option<F::Output> {
        let f = std::pin::pin!(f);
        drive(f, self.fd, &self.interest, &mut self.connection, deadline)
    }
}

impl Link {
    /// Drop the connection without a word more to the server (it is lost).
    pub fn abandon(&mut self) {
        self.connection = None;
    }
}

impl Drop for Link {
    /// The client is dropped first (its `Terminate` queued): send it, so the
    /// server sees the session end rather than a socket cut, for a moment at most.
    fn drop(&mut self) {
        if self.connection.is_some() {
            let deadline = Instant::now() + Duration::from_millis(200);
            self.drive(std::future::pending::<()>(), deadline);
        }
    }
}

/// A waker that notes it was woken: a channel between the client and its
/// connection, both polled on this thread, has something for the other.
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::Release);
    }
}

fn drive<F: Future>(
    mut f: Pin<&mut F>,
    fd: RawFd,
    interest: &Interest,
    connection: &mut Option<Connection>,
    deadline: Instant,
) -> Option<F::Output> {
    let flag = Arc::new(Flag(AtomicBool::new(false)));
    let waker = Waker::from(flag.clone());
    let mut cx = Context::from_waker(&waker);
    loop {
        flag.0.store(false, Ordering::Release);
        interest.read.store(false, Ordering::Relaxed);
        interest.write.store(false, Ordering::Relaxed);
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return Some(v);
        }
        let Some(c) = connection.as_mut() else {
            // The connection is gone: the request sees its channel closed once
            // polled again. One that still waits would wait forever.
            if flag.0.load(Ordering::Acquire) {
                continue;
            }
            return None;
        };
        if c.as_mut().poll(&mut cx).is_ready() {
            // Dropped, so the client knows it is closed (`Client::is_closed`).
            *connection = None;
            continue;
        }
        if flag.0.load(Ordering::Acquire) {
            continue;
        }
        let mut events = libc::POLLIN;
        if interest.write.load(Ordering::Relaxed) {
            events |= libc::POLLOUT;
        }
        let left = deadline.checked_duration_since(Instant::now())?;
        if left.is_zero() {
            return None;
        }
        // Round up, so a wait of less than a millisecond is not a busy loop.
        let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
        let mut pfd = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        // SAFETY: poll(2) on one descriptor this link owns, described by a pollfd we own.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return None;
        }
    }
}

/// Drive `f`, which uses `socket`, before there is a connection future (the
/// handshake, TLS and authentication).
fn drive_handshake<F: Future>(
    f: F,
    fd: RawFd,
    interest: &Interest,
    deadline: Instant,
) -> Option<F::Output> {
    let f = std::pin::pin!(f);
    // Without a connection future, `drive` returns when `f` stops making
    // progress by itself: give it one that never ends, so it waits on the socket.
    let mut idle: Option<Connection> = Some(Box::pin(std::future::pending()));
    drive(f, fd, interest, &mut idle, deadline)
}

/// Connect to the first of `config`'s hosts that answers, as tokio-postgres
/// would (TLS as `sslmode` says), within `timeout` for each.
pub fn open(
    config: &Config,
    tls: &MakeRustls,
    timeout: Duration,
) -> Result<(Client, Link), String> {
    let ports = config.get_ports();
    let addrs = config.get_hostaddrs();
    let mut last = String::from("no host to connect to");
    for (i, host) in config.get_hosts().iter().enumerate() {
        let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
        let hostaddr = addrs.get(i).copied();
        match open_one(config, tls, host, hostaddr, port, timeout) {
            Ok(done) => return Ok(done),
            Err(e) => last = e,
        }
    }
    Err(last)
}

fn open_one(
    config: &Config,
    tls: &MakeRustls,
    host: &Host,
    hostaddr: Option<std::net::IpAddr>,
    port: u16,
    timeout: Duration,
) -> Result<(Client, Link), String> {
    let deadline = Instant::now() + timeout;
    let (stream, name) = match host {
        Host::Tcp(name) => {
            let addrs: Vec<std::net::SocketAddr> = match hostaddr {
                Some(ip) => vec![(ip, port).into()],
                None => (name.as_str(), port)
                    .to_socket_addrs()
                    .map_err(|e| format!("cannot resolve {name}: {e}"))?
                    .collect(),
            };
            let mut made = Err(format!("{name} has no address"));
            for a in addrs {
                // What is left of the deadline: a name with several addresses
                // that all drop the SYN takes `timeout` in all, not each.
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                match TcpStream::connect_timeout(&a, left) {
                    Ok(s) => {
                        made = Ok(s);
                        break;
                    }
                    Err(e) => made = Err(format!("{a}: {e}")),
                }
            }
            let s = made?;
            s.set_nodelay(true).map_err(|e| e.to_string())?;
            // TCP keepalives, as tokio-postgres sets them by default: a peer that
            // is gone is noticed even on a connection nothing is sent on.
            let _ = socket2::SockRef::from(&s).set_keepalive(true);
            (Stream::Tcp(s), name.clone())
        }
        Host::Unix(dir) => {
            let path = dir.join(format!(".s.PGSQL.{port}"));
            let s =
                connect_unix(&path, deadline).map_err(|e| format!("{}: {e}", path.display()))?;
            (Stream::Unix(s), dir.display().to_string())
        }
    };
    let fd = match &stream {
        Stream::Tcp(s) => {
            s.set_nonblocking(true).map_err(|e| e.to_string())?;
            s.as_raw_fd()
        }
        Stream::Unix(s) => {
            s.set_nonblocking(true).map_err(|e| e.to_string())?;
            s.as_raw_fd()
        }
    };
    let interest = Arc::new(Interest::default());
    let socket = Socket {
        stream,
        interest: interest.clone(),
    };
    // PostgreSQL has no TLS on a Unix socket, and libpq asks for none there
    // whatever `sslmode` says: the connector is made, not used.
    let mut config = config.clone();
    let name = if matches!(host, Host::Unix(_)) {
        config.ssl_mode(tokio_postgres::config::SslMode::Disable);
        "localhost".to_string()
    } else {
        name
    };
    let mut make = tls.clone();
    let connect = tokio_postgres::tls::MakeTlsConnect::<Socket>::make_tls_connect(&mut make, &name)
        .map_err(|e| e.to_string())?;
    let (client, connection) =
        match drive_handshake(config.connect_raw(socket, connect), fd, &interest, deadline) {
            Some(Ok(made)) => made,
            Some(Err(e)) => return Err(with_causes(&e)),
            None => return Err(format!("no answer in {}s", timeout.as_secs())),
        };
    Ok((
        client,
        Link {
            fd,
            interest,
            connection: Some(Box::pin(connection)),
        },
    ))
}

/// Connect to the Unix socket at `path` by `deadline`. A blocking connect(2)
/// to a server whose listen queue is full (a stopped or swamped postmaster)
/// waits for room with no end: the socket's send timeout bounds that wait.
fn connect_unix(path: &std::path::Path, deadline: Instant) -> io::Result<UnixStream> {
    use socket2::{Domain, SockAddr, Socket, Type};
    let addr = SockAddr::unix(path)?;
    let socket = Socket::new(Domain::UNIX, Type::STREAM, None)?;
    loop {
        let left = deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero());
        let Some(left) = left else {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "no room in the server's queue of connections by the deadline: is PostgreSQL stopped or overloaded?",
            ));
        };
        socket.set_write_timeout(Some(left))?;
        match socket.connect(&addr) {
            Ok(()) => break,
            // A signal, or the timeout (EAGAIN): try again while time is left.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                ) => {}
            Err(e) => return Err(e),
        }
    }
    socket.set_write_timeout(None)?;
    Ok(UnixStream::from(std::os::fd::OwnedFd::from(socket)))
}

/// `e` and what caused it (a TLS handshake's error says why only in its source).
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(&format!(": {c}"));
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_that_never_answers_is_given_up_at_the_deadline() {
        // It accepts, reads what it is sent, and says nothing.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 1024];
            while s.read(&mut buf).is_ok_and(|n| n > 0) {}
        });
        let config: Config = format!("postgres://u@127.0.0.1:{port}/db?sslmode=disable")
            .parse()
            .unwrap();
        let (tls, started) = (
            super::super::tls::split("postgres://u@h/db", "x")
                .unwrap()
                .tls,
            Instant::now(),
        );
        let e = open(&config, &tls, Duration::from_millis(300))
            .err()
            .unwrap();
        assert!(e.contains("no answer"), "{e}");
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(5),
            "{took:?}"
        );
    }

    #[test]
    fn a_refused_connection_says_where() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let config: Config = format!("postgres://u@127.0.0.1:{port}/db").parse().unwrap();
        let tls = super::super::tls::split("postgres://u@h/db", "x")
            .unwrap()
            .tls;
        let e = open(&config, &tls, Duration::from_secs(1)).err().unwrap();
        assert!(e.contains(&format!("127.0.0.1:{port}")), "{e}");
    }
}

/// Attacks on the waiting itself: signals, stopped servers, full queues.
#[cfg(test)]
mod waiting {
    use super::*;

    /// CPU time this thread has used.
    fn thread_cpu() -> Duration {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_gettime(2) writes the timespec we own.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
        Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
    }

    fn plain_tls() -> MakeRustls {
        super::super::tls::split("postgres://u@h/db", "x")
            .unwrap()
            .tls
    }

    /// A server that accepts, reads what it is sent, and says nothing.
    fn silent_server() -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 1024];
            while s.read(&mut buf).is_ok_and(|n| n > 0) {}
        });
        port
    }

    extern "C" fn ignore(_: libc::c_int) {}

    #[test]
    fn a_wait_interrupted_by_signals_sleeps_and_ends_at_its_deadline() {
        // A handler without SA_RESTART: every signal ends poll(2) with EINTR.
        // SAFETY: a handler that does nothing, for a signal no test relies on.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = ignore as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(libc::SIGWINCH, &sa, std::ptr::null_mut());
        }
        let port = silent_server();
        let config: Config = format!("postgres://u@127.0.0.1:{port}/db?sslmode=disable")
            .parse()
            .unwrap();
        // SAFETY: pthread_self(3) has no preconditions.
        let me = unsafe { libc::pthread_self() } as usize;
        let stop = Arc::new(AtomicBool::new(false));
        let signals = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut sent = 0u32;
                while !stop.load(Ordering::Relaxed) {
                    // SAFETY: the waiting thread outlives this loop (it sets `stop` first).
                    unsafe { libc::pthread_kill(me as libc::pthread_t, libc::SIGWINCH) };
                    sent += 1;
                    std::thread::sleep(Duration::from_micros(500));
                }
                sent
            })
        };
        let (started, cpu) = (Instant::now(), thread_cpu());
        let e = open(&config, &plain_tls(), Duration::from_millis(1500))
            .err()
            .unwrap();
        let (took, used) = (started.elapsed(), thread_cpu() - cpu);
        stop.store(true, Ordering::Relaxed);
        let sent = signals.join().unwrap();
        assert!(e.contains("no answer"), "{e}");
        assert!(sent > 500, "only {sent} signals sent");
        assert!(
            took >= Duration::from_millis(1500) && took < Duration::from_secs(4),
            "{took:?}"
        );
        // A busy loop would use the whole 1.5 s.
        assert!(
            used < Duration::from_millis(300),
            "{used:?} of CPU in {took:?} of waiting"
        );
    }

    /// A connection of the shared test server, driven here, and its backend's pid.
    fn connected() -> (Client, Link, i32) {
        let pg =
            super::super::pg_server::PgServer::shared(false).unwrap_or_else(|e| panic!("{e:#}"));
        let config: Config = pg.url().parse().unwrap();
        let (client, mut link) = open(&config, &plain_tls(), Duration::from_secs(10)).unwrap();
        let soon = || Instant::now() + Duration::from_secs(10);
        let pid: i32 = link
            .drive(client.query_one("SELECT pg_backend_pid()", &[]), soon())
            .unwrap()
            .unwrap()
            .get(0);
        (client, link, pid)
    }

    #[test]
    fn a_stopped_backend_is_waited_for_asleep_until_the_deadline_reading_or_writing() {
        let (client, mut link, pid) = connected();
        let soon = || Instant::now() + Duration::from_secs(10);
        link.drive(client.batch_execute("BEGIN"), soon())
            .unwrap()
            .unwrap();
        // SAFETY: kill(2) of the backend this test's connection owns.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
        let cont = || {
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGCONT) };
        };
        // A small request (waits to read), then one of 16 MB (waits to write:
        // the socket's buffers fill long before it is all sent).
        let big = "x".repeat(16 << 20);
        for (what, wait) in [
            (
                "read",
                Box::pin(async { client.query_one("SELECT 1", &[]).await.map(|_| ()) })
                    as Pin<Box<dyn Future<Output = _>>>,
            ),
            (
                "write",
                Box::pin(async {
                    client
                        .query_one("SELECT length($1::text)", &[&big])
                        .await
                        .map(|_| ())
                }),
            ),
        ] {
            let (started, cpu) = (Instant::now(), thread_cpu());
            let done = link.drive(wait, Instant::now() + Duration::from_millis(1000));
            let (took, used) = (started.elapsed(), thread_cpu() - cpu);
            if done.is_some() {
                cont();
                panic!(
                    "{what}: answered by a stopped backend: {:?}",
                    done.map(|d| d.err())
                );
            }
            assert!(
                took >= Duration::from_millis(1000) && took < Duration::from_secs(3),
                "{what}: {took:?}"
            );
            assert!(
                used < Duration::from_millis(200),
                "{what}: {used:?} of CPU in {took:?}"
            );
        }
        cont();
    }
}

#[cfg(test)]
mod unix_queue {
    use super::*;
    use socket2::{Domain, SockAddr, Socket, Type};

    #[test]
    fn a_unix_socket_whose_server_accepts_nothing_is_given_up_at_the_deadline() {
        // A postmaster stopped (SIGSTOP) or swamped: its listen queue is full,
        // and a blocking connect(2) to it waits for room with no end.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".s.PGSQL.5999");
        let listener = Socket::new(Domain::UNIX, Type::STREAM, None).unwrap();
        listener.bind(&SockAddr::unix(&path).unwrap()).unwrap();
        listener.listen(0).unwrap();
        let mut queued = Vec::new();
        loop {
            let s = Socket::new(Domain::UNIX, Type::STREAM, None).unwrap();
            s.set_nonblocking(true).unwrap();
            match s.connect(&SockAddr::unix(&path).unwrap()) {
                Ok(()) => queued.push(s),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
            assert!(queued.len() < 100, "the queue never fills");
        }
        let config: Config = format!("postgresql://u@/db?host={}&port=5999", dir.path().display())
            .parse()
            .unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let tls = super::super::tls::split("postgres://u@h/db", "x")
                .unwrap()
                .tls;
            let started = Instant::now();
            let e = open(&config, &tls, Duration::from_millis(500)).err();
            let _ = tx.send((e, started.elapsed()));
        });
        let (e, took) = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("connecting to a full Unix socket queue still waits after 10s");
        let e = e.expect("connected to a server that accepts nothing");
        assert!(e.contains(".s.PGSQL.5999") && e.contains("no room"), "{e}");
        assert!(
            took >= Duration::from_millis(400) && took < Duration::from_secs(3),
            "{took:?}"
        );
        drop(queued);
    }
}
