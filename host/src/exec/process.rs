//! Running a child process for an action: a cleared environment, its own
//! process group, stdin closed unless given, stdout and stderr read
//! concurrently and kept only up to a cap (the rest is drained and dropped),
//! and a timeout that terminates the whole group (SIGTERM, then SIGKILL).
//! The child is started by [`crate::exec::spawn`], without forking loopbox.
//!
//! Nothing outlives loopbox, however it ends (a SIGKILL, a hook's deadline
//! ending the process): the child dies with the thread that started it (a
//! parent-death signal), and its process group with a [`Reaper`]. Under
//! bwrap, the sandbox's PID namespace ends with bwrap, taking every process
//! inside, a daemon that left the group (`setsid`) included. But bwrap's
//! process inside the namespaces has no parent-death signal of its own until
//! its setup is done, and waits for good if bwrap's outer process dies before
//! letting it go on (issue 45: `kill -9` of workers left them behind, each
//! holding a PID namespace and the workspace's mount). So bwrap joins the
//! group of a reaper started before it, which kills that whole group when
//! loopbox dies. Elsewhere a daemon that left the group survives: only a PID
//! namespace or a cgroup could find it, and Landlock runs where neither can be made.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;

use crate::exec::config::Rlimits;
use crate::exec::egress::Adopted;
use crate::exec::sandbox::Confinement;
use crate::exec::sandbox::netns::SandboxNet;
use crate::exec::spawn;

/// How long a timed-out group gets between SIGTERM and SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(2);
/// How long output pipes may stay open after the leader exits (held by its children).
const DRAIN_GRACE: Duration = Duration::from_millis(500);

#[derive(Debug)]
pub struct Spec {
    pub program: PathBuf,
    /// `argv[0]` as the caller wrote it (None: the program's path).
    pub arg0: Option<String>,
    pub args: Vec<String>,
    pub cwd: PathBuf,
    /// The child's whole environment.
    pub env: Vec<(String, String)>,
    pub stdin: Option<String>,
    pub timeout: Duration,
    /// Bytes kept of stdout, and of stderr.
    pub output_cap: usize,
    /// Resource limits set in the child before it executes (None: inherit).
    pub rlimits: Option<Rlimits>,
    /// Landlock and seccomp restrictions applied in the child before it executes.
    pub confinement: Option<Confinement>,
    /// Descriptors handed to the child as fds 3, 4, ... (bwrap's seccomp filters).
    pub pass_fd: Vec<OwnedFd>,
    /// The proxy's port to make in bwrap's sandbox before its command starts
    /// (a network grant; see [`crate::exec::sandbox::netns`]).
    pub net: Option<SandboxNet>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub duration: Duration,
    pub timed_out: bool,
    pub truncated: bool,
}

/// A started child: its group, the watcher that ends it with loopbox, the
/// parent's ends of its pipes, and its exit.
struct Launched {
    group: Group,
    reaper: Option<Reaper>,
    stdin: Option<OwnedFd>,
    stdout: OwnedFd,
    stderr: OwnedFd,
    exited: tokio::task::JoinHandle<std::io::Result<i32>>,
    /// The proxy's hold on the sandbox's listening socket, while the child runs.
    net: Option<Adopted>,
}

/// Start `spec`'s child with stdout and stderr piped, and stdin piped when
/// `pipe_stdin` (else `/dev/null`).
fn launch(
    spec_pass_fd: Vec<OwnedFd>,
    net: Option<SandboxNet>,
    spec: &Spec,
    pipe_stdin: bool,
) -> std::io::Result<Launched> {
    // Every descriptor is close-on-exec here; the child's dup2 onto 0, 1 and 2
    // clears that for its own copies only, so no other child inherits a pipe.
    let (stdin_child, stdin_parent) = if pipe_stdin {
        let (r, w) = above_stdio(crate::exec::fd::pipe()?)?;
        (r, Some(w))
    } else {
        (above_stdio_one(dev_null()?)?, None)
    };
    let (out_r, out_w) = above_stdio(crate::exec::fd::pipe()?)?;
    let (err_r, err_w) = above_stdio(crate::exec::fd::pipe()?)?;
    let rlimits = spec.rlimits.as_ref().map(clamped).unwrap_or_default();
    // Above every number they are moved to in the child, so none overwrites another.
    let first_free = crate::exec::sandbox::PASSED_FD + spec_pass_fd.len() as i32;
    let spec_is_bwrap = !spec_pass_fd.is_empty();
    let pass_fd = spec_pass_fd
        .into_iter()
        .map(|fd| at_or_above(fd, first_free))
        .collect::<std::io::Result<Vec<_>>>()?;
    let pass_raw: Vec<i32> = pass_fd.iter().map(|f| f.as_raw_fd()).collect();
    // bwrap's reaper first, leading the group bwrap joins: from its first
    // instruction on, bwrap and what it starts before its own `setsid` die
    // with loopbox (see the module's doc).
    let leader = if spec_is_bwrap {
        Some(Reaper::leading().map_err(reaper_error)?)
    } else {
        None
    };
    let pid = spawn::spawn(&spawn::Launch {
        program: &spec.program,
        arg0: spec.arg0.as_deref(),
        args: &spec.args,
        env: &spec.env,
        cwd: &spec.cwd,
        stdin: stdin_child.as_raw_fd(),
        stdout: out_w.as_raw_fd(),
        stderr: err_w.as_raw_fd(),
        rlimits: &rlimits,
        confinement: spec.confinement.as_ref(),
        pass_fd: &pass_raw,
        die_with_parent: true,
        pgid: leader.as_ref().map_or(0, |r| r.pid),
    })?;
    drop((stdin_child, out_w, err_w, pass_fd));
    // The child leads its own group (pgid = pid), or is in its reaper's;
    // whatever happens to this future, the group does not outlive it.
    let group = Group::new(pid, leader.as_ref().map_or(pid, |r| r.pid));
    // Nor loopbox: a reaper watching the child's group (bwrap's came first).
    let reaper = match leader {
        Some(r) => Some(r),
        None => Some(Reaper::start(pid).map_err(reaper_error)?),
    };
    // The proxy's port in the sandbox, served until the child is done; only
    // then does bwrap run the command (a failure here drops the group, killing it).
    let net = match net {
        Some(n) => Some(n.join(pid).map_err(|e| {
            std::io::Error::other(format!("the sandbox's network did not come up: {e}"))
        })?),
        None => None,
    };
    let exited = group.reap_on_exit();
    Ok(Launched {
        group,
        reaper,
        stdin: stdin_parent,
        stdout: out_r,
        stderr: err_r,
        exited,
        net,
    })
}

pub async fn run(mut spec: Spec) -> std::io::Result<Finished> {
    let started = Instant::now();
    let pass_fd = std::mem::take(&mut spec.pass_fd);
    let net = spec.net.take();
    let Launched {
        group,
        reaper,
        stdin: stdin_parent,
        stdout: out_r,
        stderr: err_r,
        mut exited,
        net,
    } = launch(pass_fd, net, &spec, spec.stdin.is_some())?;

    if let (Some(text), Some(w)) = (spec.stdin, stdin_parent) {
        let mut stdin = pipe::Sender::from_owned_fd(w)?;
        // A child that does not read its stdin must not block us: write in the background.
        tokio::spawn(async move {
            let _ = stdin.write_all(text.as_bytes()).await;
        });
    }
    let out = tokio::spawn(read_capped(
        pipe::Receiver::from_owned_fd(out_r)?,
        spec.output_cap,
    ));
    let err = tokio::spawn(read_capped(
        pipe::Receiver::from_owned_fd(err_r)?,
        spec.output_cap,
    ));

    let wait = |r: Result<std::io::Result<i32>, tokio::task::JoinError>| {
        r.map_err(std::io::Error::other).and_then(|s| s)
    };
    let (status, timed_out) = match tokio::time::timeout(spec.timeout, &mut exited).await {
        Ok(r) => (wait(r)?, false),
        Err(_) => {
            group.signal(libc::SIGTERM);
            let status = match tokio::time::timeout(KILL_GRACE, &mut exited).await {
                Ok(r) => wait(r)?,
                Err(_) => {
                    group.signal(libc::SIGKILL);
                    wait(exited.await)?
                }
            };
            (status, true)
        }
    };
    // Whatever the leader left behind in its group goes with it.
    drop(group);
    drop(reaper);
    drop(net);

    let collect = |h: tokio::task::JoinHandle<std::io::Result<(Vec<u8>, bool)>>| async move {
        match tokio::time::timeout(DRAIN_GRACE, h).await {
            Ok(Ok(Ok(v))) => v,
            _ => (Vec::new(), false),
        }
    };
    let (stdout, cut_out) = collect(out).await;
    let (stderr, cut_err) = collect(err).await;

    Ok(Finished {
        // A signal death (including our own kill on timeout) has no exit code.
        exit_code: if timed_out || !libc::WIFEXITED(status) {
            None
        } else {
            Some(libc::WEXITSTATUS(status))
        },
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        duration: started.elapsed(),
        timed_out,
        truncated: cut_out || cut_err,
    })
}

/// A child spoken to line by line (an MCP server): stdin and stdout piped,
/// stderr kept to the spec's `output_cap` (the rest drained). Its process
/// group is killed when the session is dropped or stopped; `spec.stdin` and
/// `spec.timeout` are not used (the caller bounds each read).
pub struct Session {
    stdin: Option<pipe::Sender>,
    stdout: pipe::Receiver,
    /// Bytes read past the last line handed out.
    pending: Vec<u8>,
    stderr: tokio::task::JoinHandle<std::io::Result<(Vec<u8>, bool)>>,
    exited: tokio::task::JoinHandle<std::io::Result<i32>>,
    group: Group,
    _reaper: Option<Reaper>,
    _net: Option<Adopted>,
}

/// One line of a session's stdout.
#[derive(Debug, PartialEq)]
pub enum Line {
    /// The line, without its newline.
    Text(Vec<u8>),
    /// The child closed its stdout.
    End,
    /// More than the cap arrived without a newline: the session is not read further.
    TooLong,
}

impl Session {
    pub fn start(mut spec: Spec) -> std::io::Result<Session> {
        let pass_fd = std::mem::take(&mut spec.pass_fd);
        let net = spec.net.take();
        let l = launch(pass_fd, net, &spec, true)?;
        let stdin = match l.stdin {
            Some(w) => Some(pipe::Sender::from_owned_fd(w)?),
            None => None,
        };
        let stderr = tokio::spawn(read_capped(
            pipe::Receiver::from_owned_fd(l.stderr)?,
            spec.output_cap,
        ));
        Ok(Session {
            stdin,
            stdout: pipe::Receiver::from_owned_fd(l.stdout)?,
            pending: Vec::new(),
            stderr,
            exited: l.exited,
            group: l.group,
            _reaper: l.reaper,
            _net: l.net,
        })
    }

    /// Write `line` and a newline to the child's stdin.
    pub async fn send(&mut self, line: &str) -> std::io::Result<()> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| std::io::Error::other("the session's stdin is closed"))?;
        let mut bytes = Vec::with_capacity(line.len() + 1);
        bytes.extend_from_slice(line.as_bytes());
        bytes.push(b'\n');
        stdin.write_all(&bytes).await?;
        stdin.flush().await
    }

    /// The next line of stdout, at most `max` bytes.
    pub async fn line(&mut self, max: usize) -> std::io::Result<Line> {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            if let Some(i) = self.pending.iter().position(|b| *b == b'\n') {
                let rest = self.pending.split_off(i + 1);
                let mut line = std::mem::replace(&mut self.pending, rest);
                line.pop();
                if line.len() > max {
                    return Ok(Line::TooLong);
                }
                return Ok(Line::Text(line));
            }
            if self.pending.len() > max {
                return Ok(Line::TooLong);
            }
            let n = self.stdout.read(&mut buf).await?;
            if n == 0 {
                return Ok(Line::End);
            }
            self.pending.extend_from_slice(&buf[..n]);
        }
    }

    /// Close stdin (a server's cue to exit), give the child [`DRAIN_GRACE`] to
    /// exit, then SIGTERM and [`KILL_GRACE`], then kill its group; what it
    /// wrote to stderr.
    pub async fn stop(mut self) -> String {
        drop(self.stdin.take());
        if tokio::time::timeout(DRAIN_GRACE, &mut self.exited)
            .await
            .is_ok()
        {
            self.group.signal(libc::SIGKILL);
            return self.stderr().await;
        }
        self.group.signal(libc::SIGTERM);
        if tokio::time::timeout(KILL_GRACE, &mut self.exited)
            .await
            .is_err()
        {
            self.group.signal(libc::SIGKILL);
            let _ = (&mut self.exited).await;
        }
        self.group.signal(libc::SIGKILL);
        self.stderr().await
    }

    async fn stderr(&mut self) -> String {
        let stderr = match tokio::time::timeout(DRAIN_GRACE, &mut self.stderr).await {
            Ok(Ok(Ok((v, _)))) => v,
            _ => Vec::new(),
        };
        String::from_utf8_lossy(&stderr).into_owned()
    }
}

fn reaper_error(e: std::io::Error) -> std::io::Error {
    std::io::Error::new(
        e.kind(),
        format!("cannot start the watcher that ends the command if loopbox dies: {e}"),
    )
}

/// A child's process group: SIGKILLed when dropped, and when the child
/// exits. Signalled only while the child is not reaped: the number of a group
/// whose leader is reaped may be another group's by then (pids wrap). The
/// group is the child's own, or its reaper's (bwrap's), which is reaped only
/// after this is dropped.
struct Group(Arc<Leader>);

struct Leader {
    pid: libc::pid_t,
    pgid: libc::pid_t,
    /// Set once the child is reaped, under this lock: no signal goes out after.
    reaped: std::sync::Mutex<bool>,
}

impl Group {
    fn new(pid: libc::pid_t, pgid: libc::pid_t) -> Group {
        Group(Arc::new(Leader {
            pid,
            pgid,
            reaped: std::sync::Mutex::new(false),
        }))
    }

    fn signal(&self, signal: i32) {
        let reaped = self.0.reaped.lock().unwrap_or_else(|e| e.into_inner());
        if !*reaped {
            // SAFETY: kill(2) with a negative pid signals the group we created
            // for this child; its leader is not reaped (we hold the lock that
            // reaping takes), so the group's number is still its own.
            unsafe {
                libc::kill(-self.0.pgid, signal);
            }
        }
    }

    /// Wait for the leader to exit, kill what it left in its group while it
    /// is a zombie (its number still reserved), then reap it: its wait status.
    fn reap_on_exit(&self) -> tokio::task::JoinHandle<std::io::Result<i32>> {
        let leader = self.0.clone();
        tokio::task::spawn_blocking(move || {
            let exited = spawn::wait_exit(leader.pid);
            let mut reaped = leader.reaped.lock().unwrap_or_else(|e| e.into_inner());
            // A reaper's group is killed as the group is dropped, while the
            // reaper (its number) is surely not reaped yet; not from here.
            if exited.is_ok() && leader.pgid == leader.pid {
                // SAFETY: as in `signal`: the leader has exited but is not reaped.
                unsafe {
                    libc::kill(-leader.pgid, libc::SIGKILL);
                }
            }
            // Whatever went wrong above, the leader counts as reaped from here:
            // its number is never signalled again.
            *reaped = true;
            exited.and_then(|()| spawn::reap(leader.pid))
        })
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.signal(libc::SIGKILL);
    }
}

/// A watcher outside the child's group that kills the group (SIGKILL) if
/// loopbox dies first: a shell reading a pipe only loopbox holds open, which
/// reads end-of-file when loopbox is gone, however it went. Dropped, it is
/// killed itself before the pipe closes, so it never signals a group that
/// ended normally (whose number could be reused).
struct Reaper {
    pid: libc::pid_t,
    _pipe: OwnedFd,
}

impl Reaper {
    const SCRIPT: &'static str = "trap '' HUP INT TERM QUIT; read -r x; kill -9 -\"$0\"";
    /// Its own group, which the child joins: itself included.
    const LEADING: &'static str = "trap '' HUP INT TERM QUIT; read -r x; kill -9 0";

    /// A reaper of `group`, a child's.
    fn start(group: libc::pid_t) -> std::io::Result<Reaper> {
        Self::spawn(&["-c".to_string(), Self::SCRIPT.into(), group.to_string()])
    }

    /// A reaper leading a group of its own for the child to join (its pid is
    /// the group's number, reserved until it is reaped).
    fn leading() -> std::io::Result<Reaper> {
        Self::spawn(&["-c".to_string(), Self::LEADING.into()])
    }

    fn spawn(args: &[String]) -> std::io::Result<Reaper> {
        let (read, write) = above_stdio(crate::exec::fd::pipe()?)?;
        let null = above_stdio_one(dev_null()?)?;
        let pid = spawn::spawn(&spawn::Launch {
            program: std::path::Path::new("/bin/sh"),
            arg0: Some("loopbox-reaper"),
            args,
            env: &[("PATH".into(), "/usr/bin:/bin".into())],
            cwd: std::path::Path::new("/"),
            stdin: read.as_raw_fd(),
            stdout: null.as_raw_fd(),
            stderr: null.as_raw_fd(),
            rlimits: &[],
            confinement: None,
            pass_fd: &[],
            die_with_parent: false,
            pgid: 0,
        })?;
        Ok(Reaper { pid, _pipe: write })
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child, which has not been reaped yet.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
        }
        let _ = spawn::reap(self.pid);
    }
}

fn dev_null() -> std::io::Result<OwnedFd> {
    Ok(std::fs::File::open("/dev/null")?.into())
}

/// Keep our descriptors off 0, 1 and 2 (free when our own stdio is closed), so
/// the child's dup2 onto them cannot overwrite one it still needs.
fn above_stdio_one(fd: OwnedFd) -> std::io::Result<OwnedFd> {
    at_or_above(fd, 3)
}

/// `fd`, or a close-on-exec copy of it numbered `min` or higher.
fn at_or_above(fd: OwnedFd, min: i32) -> std::io::Result<OwnedFd> {
    if fd.as_raw_fd() >= min {
        return Ok(fd);
    }
    // SAFETY: duplicates a descriptor we own onto a fresh close-on-exec one at `min` or above.
    let moved = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, min) };
    if moved < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `moved` is fresh and ours.
    Ok(unsafe { OwnedFd::from_raw_fd(moved) })
}

fn above_stdio((a, b): (OwnedFd, OwnedFd)) -> std::io::Result<(OwnedFd, OwnedFd)> {
    Ok((above_stdio_one(a)?, above_stdio_one(b)?))
}

/// The limits to set in the child: the non-zero ones, each no higher than our
/// own hard limit (a child may only tighten them).
fn clamped(l: &Rlimits) -> Vec<(libc::__rlimit_resource_t, libc::rlim_t)> {
    rlimit_table(l)
        .into_iter()
        .filter(|(_, v)| *v > 0)
        .map(|(resource, value)| {
            let mut own = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            let mut v = value as libc::rlim_t;
            // SAFETY: getrlimit fills a local struct.
            if unsafe { libc::getrlimit(resource, &mut own) } == 0 {
                v = v.min(own.rlim_max);
            }
            (resource, v)
        })
        .collect()
}

/// `(resource, value)` pairs; a value of 0 leaves that resource alone.
fn rlimit_table(l: &Rlimits) -> [(libc::__rlimit_resource_t, u64); 5] {
    [
        (libc::RLIMIT_CPU, l.cpu_seconds),
        (libc::RLIMIT_AS, l.address_space_bytes),
        (libc::RLIMIT_NPROC, l.processes),
        (libc::RLIMIT_FSIZE, l.file_size_bytes),
        (libc::RLIMIT_NOFILE, l.open_files),
    ]
}

/// Read everything, keeping the first `cap` bytes; true when more was dropped.
async fn read_capped(
    mut r: impl AsyncRead + Unpin,
    cap: usize,
) -> std::io::Result<(Vec<u8>, bool)> {
    let mut kept = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    let mut cut = false;
    loop {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            return Ok((kept, cut));
        }
        let room = cap.saturating_sub(kept.len());
        kept.extend_from_slice(&buf[..n.min(room)]);
        cut |= n > room;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(program: &str, args: &[&str]) -> Spec {
        Spec {
            program: program.into(),
            arg0: None,
            args: args.iter().map(|s| s.to_string()).collect(),
            cwd: std::env::temp_dir(),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            stdin: None,
            timeout: Duration::from_secs(20),
            output_cap: 1 << 20,
            rlimits: None,
            confinement: None,
            pass_fd: Vec::new(),
            net: None,
        }
    }

    #[tokio::test]
    async fn a_missing_program_or_bad_directory_is_an_error_not_a_hang() {
        let e = run(spec("/nonexistent/program", &[])).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        let mut s = spec("/bin/true", &[]);
        s.cwd = "/nonexistent/dir".into();
        assert_eq!(
            run(s).await.unwrap_err().kind(),
            std::io::ErrorKind::NotFound
        );
        let dir = tempfile::tempdir().unwrap();
        let not_executable = dir.path().join("data");
        std::fs::write(&not_executable, "x").unwrap();
        let e = run(spec(not_executable.to_str().unwrap(), &[]))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
    }

    #[tokio::test]
    async fn the_child_runs_in_its_own_group_with_default_signals() {
        // SIGPIPE is ignored in Rust programs; a child must get the default back.
        // With SIGPIPE ignored, `yes` would print "Broken pipe" and go on failing writes.
        let f = run(spec(
            "/bin/sh",
            &[
                "-c",
                "echo $$ $(ps -o pgid= -p $$); yes | head -1 >/dev/null; echo ok",
            ],
        ))
        .await
        .unwrap();
        assert_eq!(f.stderr, "", "{f:?}");
        let mut parts = f.stdout.split_whitespace();
        let (pid, pgid) = (parts.next().unwrap(), parts.next().unwrap());
        assert_eq!(pid, pgid, "{}", f.stdout);
        assert!(f.stdout.ends_with("ok\n"), "{f:?}");
    }

    #[tokio::test]
    async fn a_signal_the_user_ignored_stays_ignored_in_the_child() {
        // As under `nohup loopbox ...`: SIGHUP is ignored, and exec keeps it so.
        // SAFETY: ignoring SIGHUP in the test process harms no other test.
        unsafe {
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
        }
        let f = run(spec("/bin/sh", &["-c", "kill -HUP $$; echo alive"]))
            .await
            .unwrap();
        assert_eq!((f.exit_code, f.stdout.as_str()), (Some(0), "alive\n"));
    }

    #[tokio::test]
    async fn many_children_at_once_each_get_only_their_own_output() {
        let runs = (0..40).map(|i| {
            run(spec(
                "/bin/sh",
                &["-c", &format!("sleep 0.0{}; echo {i}", i % 7)],
            ))
        });
        let outs = futures_join(runs).await;
        for (i, f) in outs.into_iter().enumerate() {
            assert_eq!(f.unwrap().stdout, format!("{i}\n"));
        }
    }

    async fn futures_join<F>(fs: impl Iterator<Item = F>) -> Vec<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let handles: Vec<_> = fs.map(tokio::spawn).collect();
        let mut out = Vec::new();
        for h in handles {
            out.push(h.await.unwrap());
        }
        out
    }

    #[tokio::test]
    async fn argv0_is_as_written_and_passed_fds_arrive_as_3_and_on() {
        let mut s = spec("/bin/sh", &["-c", "echo $0; cat <&3; cat <&4; cat <&5"]);
        s.arg0 = Some("as-written".into());
        for text in ["first", "second", "third"] {
            let (r, w) = crate::exec::fd::pipe().unwrap();
            std::io::Write::write_all(&mut std::fs::File::from(w), text.as_bytes()).unwrap();
            s.pass_fd.push(r);
        }
        assert_eq!(run(s).await.unwrap().stdout, "as-written\nfirstsecondthird");
    }

    /// A descriptor loopbox inherited without close-on-exec (a socket its own
    /// parent left open) never reaches a child: only 0-2 and those passed.
    #[tokio::test]
    async fn a_descriptor_loopbox_inherited_does_not_reach_the_child() {
        let (r, w) = crate::exec::fd::pipe().unwrap();
        // As a parent that passed it would leave it: inheritable.
        // SAFETY: F_SETFD on a descriptor we own.
        unsafe { libc::fcntl(w.as_raw_fd(), libc::F_SETFD, 0) };
        let n = w.as_raw_fd();
        let mut s = spec(
            "/bin/sh",
            &["-c", &format!("ls /proc/self/fd; echo leak >&{n}")],
        );
        let (passed, _keep) = crate::exec::fd::pipe().unwrap();
        s.pass_fd.push(passed);
        let f = run(s).await.unwrap();
        let fds: Vec<&str> = f.stdout.lines().collect();
        // 0-2, the one passed (3) and the one `ls` itself opens to list them.
        assert_eq!(fds.len(), 5, "{fds:?}");
        assert!(
            fds.iter()
                .all(|fd| fd.parse::<i32>().unwrap() <= 4 || *fd == "4"),
            "{fds:?}"
        );
        assert_ne!(
            f.exit_code,
            Some(0),
            "the shell wrote to fd {n}: {}",
            f.stderr
        );
        drop(w);
        let mut got = String::new();
        std::io::Read::read_to_string(&mut std::fs::File::from(r), &mut got).unwrap();
        assert_eq!(got, "");
    }

    #[tokio::test]
    async fn captures_exit_code_and_output() {
        let f = run(spec("/bin/sh", &["-c", "echo out; echo err >&2; exit 3"]))
            .await
            .unwrap();
        assert_eq!(
            (
                f.exit_code,
                f.stdout.as_str(),
                f.stderr.as_str(),
                f.timed_out
            ),
            (Some(3), "out\n", "err\n", false)
        );
    }

    #[tokio::test]
    #[allow(clippy::disallowed_methods)] // the point: a variable of loopbox's own must not reach the child
    async fn environment_is_cleared() {
        // SAFETY: tests in this module do not read this variable concurrently.
        unsafe { std::env::set_var("LOOPBOX_SECRET_TEST", "leak") };
        let f = run(spec("/usr/bin/env", &[])).await.unwrap();
        assert!(!f.stdout.contains("LOOPBOX_SECRET_TEST"));
        assert_eq!(f.stdout, "PATH=/usr/bin:/bin\n");
    }

    #[tokio::test]
    async fn output_past_the_cap_is_dropped_not_kept() {
        let mut s = spec("/bin/sh", &["-c", "head -c 5000000 /dev/zero"]);
        s.output_cap = 1000;
        let f = run(s).await.unwrap();
        assert_eq!(
            (f.stdout.len(), f.truncated, f.exit_code),
            (1000, true, Some(0))
        );
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let mut s = spec("/bin/sh", &["-c", "sleep 30 & sleep 30; echo never"]);
        s.timeout = Duration::from_millis(300);
        let f = run(s).await.unwrap();
        assert!(f.timed_out);
        assert_eq!(f.exit_code, None);
        assert!(f.duration < Duration::from_secs(10), "{:?}", f.duration);
    }

    #[tokio::test]
    async fn a_group_is_killed_as_its_leader_exits_and_never_signalled_once_it_is_reaped() {
        // The leader exits at once and leaves a member behind, which writes its
        // pid and would outlive it.
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("member");
        let script = format!("sleep 30 & echo $! > {}; exit 0", pidfile.display());
        let l = launch(Vec::new(), None, &spec("/bin/sh", &["-c", &script]), false).unwrap();
        let leader = l.group.0.clone();
        assert_eq!(libc::WEXITSTATUS(l.exited.await.unwrap().unwrap()), 0);
        // Reaped, and from then on its number is not ours to signal.
        assert!(*leader.reaped.lock().unwrap());
        let member: libc::pid_t = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The member went with its leader, before the group was dropped.
        let gone = Instant::now();
        // SAFETY: signal 0 only asks whether the pid exists.
        while unsafe { libc::kill(member, 0) } == 0 {
            let state = std::fs::read_to_string(format!("/proc/{member}/stat")).unwrap_or_default();
            if state.contains(") Z") {
                break; // killed; its parent (the shell, gone) left it to init
            }
            assert!(
                gone.elapsed() < Duration::from_secs(5),
                "the member outlived its leader"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(l.group);
    }

    #[tokio::test]
    async fn rlimits_apply_to_the_child() {
        let mut s = spec("/bin/sh", &["-c", "ulimit -n; ulimit -f; ulimit -t"]);
        s.rlimits = Some(Rlimits {
            cpu_seconds: 7,
            address_space_bytes: 0,
            processes: 0,
            file_size_bytes: 1 << 20,
            open_files: 64,
        });
        // sh reports the file size limit in 512-byte blocks.
        assert_eq!(run(s).await.unwrap().stdout, "64\n2048\n7\n");
    }

    #[tokio::test]
    async fn a_child_past_its_cpu_limit_is_killed() {
        let mut s = spec("/bin/sh", &["-c", "while :; do :; done"]);
        s.rlimits = Some(Rlimits {
            cpu_seconds: 1,
            ..Rlimits::default()
        });
        let f = run(s).await.unwrap();
        assert_eq!(
            (f.exit_code, f.timed_out),
            (None, false),
            "killed by SIGXCPU, not the timeout"
        );
    }

    #[tokio::test]
    async fn a_child_ignoring_sigterm_is_killed() {
        let mut s = spec(
            "/bin/sh",
            &["-c", "trap '' TERM; while :; do sleep 1; done"],
        );
        s.timeout = Duration::from_millis(300);
        let f = run(s).await.unwrap();
        assert!(f.timed_out && f.duration < Duration::from_secs(10), "{f:?}");
    }

    #[tokio::test]
    async fn a_grandchild_holding_the_pipe_does_not_hang_the_host() {
        let s = spec("/bin/sh", &["-c", "sleep 60 & echo started"]);
        let f = run(s).await.unwrap();
        assert_eq!((f.exit_code, f.stdout.as_str()), (Some(0), "started\n"));
        assert!(f.duration < Duration::from_secs(10), "{f:?}");
    }

    #[tokio::test]
    async fn a_session_reads_bounded_lines_and_its_group_dies_when_stopped() {
        let s = spec(
            "/bin/sh",
            &[
                "-c",
                "sleep 60 & while read -r l; do echo \"got $l\"; done; echo bye >&2",
            ],
        );
        let mut session = Session::start(s).unwrap();
        session.send("one").await.unwrap();
        session.send("two").await.unwrap();
        assert_eq!(
            session.line(100).await.unwrap(),
            Line::Text(b"got one".to_vec())
        );
        assert_eq!(
            session.line(100).await.unwrap(),
            Line::Text(b"got two".to_vec())
        );
        session.send(&"x".repeat(500)).await.unwrap();
        assert_eq!(session.line(100).await.unwrap(), Line::TooLong);
        let started = Instant::now();
        let stderr = session.stop().await;
        assert_eq!(stderr, "bye\n");
        assert!(started.elapsed() < Duration::from_secs(5));
        // A child that says nothing and exits: the end, never a hang.
        let mut quiet = Session::start(spec("/bin/true", &[])).unwrap();
        assert_eq!(quiet.line(100).await.unwrap(), Line::End);
        quiet.stop().await;
    }

    #[tokio::test]
    async fn stdin_is_delivered_or_closed() {
        let mut s = spec("/bin/cat", &[]);
        s.stdin = Some("hello".into());
        assert_eq!(run(s).await.unwrap().stdout, "hello");
        assert_eq!(run(spec("/bin/cat", &[])).await.unwrap().stdout, "");
    }
}
