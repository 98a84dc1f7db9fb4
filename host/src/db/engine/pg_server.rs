//! A throwaway PostgreSQL server on loopback, for the tests and benchmarks of
//! the PostgreSQL store: Debian's `postgres` (on PATH, or under
//! `/usr/lib/postgresql/*/bin`) on a fresh data directory and a free port,
//! started once per process ([`PgServer::shared`]). Each test gets a schema of
//! its own ([`PgServer::fresh_store`]).
//!
//! PostgreSQL refuses to run as root: a root process runs it as the system
//! user `loopbox-pg` (`scripts/test.sh` makes it). The server is a child of a
//! thread that lives as long as the process, and is asked to stop (fast
//! shutdown) when that thread dies, so a test binary that exits, or is killed,
//! leaves no server behind; data directories of processes that are gone are
//! removed by the next one to start.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

/// The system user a root process runs the server as.
pub const USER: &str = "loopbox-pg";

/// A running server (see the module's doc).
pub struct PgServer {
    pub port: u16,
    dir: PathBuf,
    keeper: Mutex<Sender<Ask>>,
}

enum Ask {
    /// Stop the server (fast shutdown), then start it again on the same port.
    Restart(Sender<Result<()>>),
    /// Stop it for good, and remove its data.
    Stop,
}

static SHARED: OnceLock<std::result::Result<PgServer, String>> = OnceLock::new();

impl PgServer {
    /// The process's server, started at the first call. `durable`: with
    /// `fsync` as in production (benchmarks); tests turn it off.
    pub fn shared(durable: bool) -> Result<&'static PgServer> {
        SHARED
            .get_or_init(|| PgServer::start(durable, None).map_err(|e| format!("{e:#}")))
            .as_ref()
            .map_err(|e| anyhow!("{e}"))
    }

    /// The URL of the server's `postgres` database.
    pub fn url(&self) -> String {
        format!("postgres://loopbox@127.0.0.1:{}/postgres", self.port)
    }

    /// A store of its own: a new, empty schema, and the URL that uses it.
    pub fn fresh_store(&self) -> Result<String> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "t{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let admin = super::postgres::PgConn::connect(&self.url())?;
        admin.batch(&format!("CREATE SCHEMA {name}"))?;
        Ok(format!("{}?options=-c%20search_path%3D{name}", self.url()))
    }

    /// Stop the server and start it again: every connection to it is cut.
    pub fn restart(&self) -> Result<()> {
        let (tx, rx) = channel();
        self.keeper
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .send(Ask::Restart(tx))
            .map_err(|_| anyhow!("the PostgreSQL keeper thread is gone"))?;
        rx.recv()
            .map_err(|_| anyhow!("the PostgreSQL keeper thread is gone"))?
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A server of the caller's own (to restart without disturbing other
    /// tests), stopped when dropped.
    pub fn start_own(durable: bool) -> Result<PgServer> {
        PgServer::start(durable, None)
    }

    /// A server of the caller's own with TLS on (`ssl=on`), presenting the
    /// certificate and key in these PEM files; clients may still connect
    /// without TLS (`sslmode=disable`).
    pub fn start_tls(cert: &Path, key: &Path) -> Result<PgServer> {
        PgServer::start(false, Some((cert, key)))
    }

    fn start(durable: bool, tls: Option<(&Path, &Path)>) -> Result<PgServer> {
        static STARTED: AtomicU64 = AtomicU64::new(0);
        let bin = bin_dir()?;
        remove_stale_dirs();
        let dir = std::env::temp_dir().join(format!(
            "loopbox-pg-{}-{}",
            std::process::id(),
            STARTED.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("failed to create `{}`", dir.display()))?;
        let owner = server_user()?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .with_context(|| format!("failed to give `{}` to {USER}", dir.display()))?;
        }
        let data = dir.join("data");
        let out = as_server_user(Command::new(bin.join("initdb")), owner)
            .args([
                "-A",
                "trust",
                "-U",
                "loopbox",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C",
                "-D",
            ])
            .arg(&data)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("failed to run `{}`", bin.join("initdb").display()))?;
        if !out.status.success() {
            bail!(
                "initdb failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let port = free_port()?;
        let mut args: Vec<String> = vec![
            "-D".into(),
            data.display().to_string(),
            "-p".into(),
            port.to_string(),
            "-c".into(),
            "listen_addresses=127.0.0.1".into(),
            "-c".into(),
            // A socket beside the data, for the tests of stores reached through one.
            format!("unix_socket_directories={}", dir.display()),
            "-c".into(),
            "max_connections=300".into(),
        ];
        if !durable {
            for c in [
                "fsync=off",
                "synchronous_commit=off",
                "full_page_writes=off",
            ] {
                args.extend(["-c".into(), c.into()]);
            }
        }
        if let Some((cert, key)) = tls {
            // The server reads them as its own user, and refuses a key others can read.
            for (from, name, mode) in [(cert, "server.crt", 0o644), (key, "server.key", 0o600)] {
                let to = dir.join(name);
                std::fs::copy(from, &to)
                    .with_context(|| format!("failed to copy `{}`", from.display()))?;
                std::fs::set_permissions(&to, std::os::unix::fs::PermissionsExt::from_mode(mode))?;
                if let Some((uid, gid)) = owner {
                    std::os::unix::fs::chown(&to, Some(uid), Some(gid))?;
                }
                let setting = if name == "server.crt" {
                    "ssl_cert_file"
                } else {
                    "ssl_key_file"
                };
                args.extend(["-c".into(), format!("{setting}={}", to.display())]);
            }
            args.extend(["-c".into(), "ssl=on".into()]);
        }
        let postgres = bin.join("postgres");
        let log = dir.join("log");
        let scratch = dir.clone();
        let spawn = move || -> Result<Child> {
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log)?;
            as_server_user(Command::new(&postgres), owner)
                .args(&args)
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()
                .with_context(|| format!("failed to start `{}`", postgres.display()))
        };
        let (asks, asked) = channel::<Ask>();
        let (started, first) = channel::<Result<()>>();
        std::thread::Builder::new()
            .name("loopbox-pg-keeper".into())
            .spawn(move || {
                let mut child = match spawn() {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = started.send(Err(e));
                        return;
                    }
                };
                let _ = started.send(wait_ready(port));
                // Lives as long as the process: the server's parent-death signal is this thread.
                while let Ok(Ask::Restart(reply)) = asked.recv() {
                    stop(&mut child);
                    let again = spawn().and_then(|c| {
                        child = c;
                        wait_ready(port)
                    });
                    let _ = reply.send(again);
                }
                // Asked to stop, or dropped.
                stop(&mut child);
                let _ = std::fs::remove_dir_all(&scratch);
            })
            .context("failed to start the PostgreSQL keeper thread")?;
        first
            .recv()
            .map_err(|_| anyhow!("the PostgreSQL keeper thread stopped"))?
            .with_context(|| {
                format!(
                    "PostgreSQL did not start (its log: {})",
                    dir.join("log").display()
                )
            })?;
        Ok(PgServer {
            port,
            dir,
            keeper: Mutex::new(asks),
        })
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let keeper = self.keeper.lock().unwrap_or_else(|p| p.into_inner());
        let _ = keeper.send(Ask::Stop);
    }
}

/// Ask the server for a fast shutdown, and wait for it.
fn stop(child: &mut Child) {
    // SAFETY: kill(2) with the pid of a child this thread has not reaped yet.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGINT);
    }
    let _ = child.wait();
}

fn wait_ready(port: u16) -> Result<()> {
    let url = format!("postgres://loopbox@127.0.0.1:{port}/postgres");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match super::postgres::PgConn::connect(&url) {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() > deadline => {
                return Err(anyhow!(e).context("PostgreSQL did not accept connections in 60s"));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// The directory of Debian's PostgreSQL programs.
fn bin_dir() -> Result<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|b| b.join("postgres").exists())
        .collect();
    found.sort();
    if let Some(b) = found.pop() {
        return Ok(b);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .find(|p| p.join("postgres").exists() && p.join("initdb").exists())
        .ok_or_else(|| {
            anyhow!(
                "PostgreSQL is not installed: install Debian's `postgresql` package (scripts/test.sh does)"
            )
        })
}

/// The uid and gid to run the server as: [`USER`]'s when this process is root.
fn server_user() -> Result<Option<(u32, u32)>> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    let name = std::ffi::CString::new(USER)?;
    // SAFETY: `name` is NUL-terminated; getpwnam returns NULL or a pointer to a
    // static record, read at once (the tests start one server, on one thread).
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    if pw.is_null() {
        bail!(
            "PostgreSQL refuses to run as root, and there is no user `{USER}` to run it as: \
             create it (`useradd --system --no-create-home {USER}`, as scripts/test.sh does)"
        );
    }
    // SAFETY: `pw` is not NULL, so it points at a valid passwd record.
    let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
    Ok(Some((uid, gid)))
}

/// `cmd` to run as `owner`, asked to stop (SIGINT, a fast shutdown) when the
/// thread that started it dies.
fn as_server_user(mut cmd: Command, owner: Option<(u32, u32)>) -> Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec the closure only makes system calls
    // (setgroups, setgid, setuid, prctl), which are async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            if let Some((uid, gid)) = owner
                && (libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(gid) != 0
                    || libc::setuid(uid) != 0)
            {
                return Err(std::io::Error::last_os_error());
            }
            // After setuid, which clears it.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGINT) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("failed to find a free port")?;
    Ok(l.local_addr()?.port())
}

/// Data directories left by processes that are gone.
fn remove_stale_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("loopbox-pg-"))
            .and_then(|p| p.split('-').next()?.parse::<i32>().ok())
        else {
            continue;
        };
        // SAFETY: kill with signal 0 only checks that the process exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        if !alive {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}
