//! Running a child process for an action: a cleared environment, its own
//! process group, stdin closed unless given, stdout and stderr read
//! concurrently and kept only up to a cap (the rest is drained and dropped),
//! and a timeout that terminates the whole group (SIGTERM, then SIGKILL).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use crate::config::Rlimits;
use crate::sandbox::Confinement;

/// How long a timed-out group gets between SIGTERM and SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(2);
/// How long output pipes may stay open after the leader exits (held by its children).
const DRAIN_GRACE: Duration = Duration::from_millis(500);

#[derive(Debug)]
pub struct Spec {
    pub program: PathBuf,
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

pub async fn run(spec: Spec) -> std::io::Result<Finished> {
    let started = Instant::now();
    let mut cmd = Command::new(&spec.program);
    cmd.args(&spec.args)
        .current_dir(&spec.cwd)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(if spec.stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if spec.rlimits.is_some() || spec.confinement.is_some() {
        let table = spec.rlimits.as_ref().map(rlimit_table);
        let confinement = spec.confinement;
        // SAFETY: the closure runs in the forked child before exec and makes only
        // async-signal-safe syscalls (setrlimit, prctl, landlock_restrict_self);
        // everything it reads was prepared in the parent; it allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                for (resource, value) in table.iter().flatten() {
                    if *value > 0 {
                        // Limits only tighten: one above loopbox's own hard limit would be refused.
                        let mut own = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
                        let mut v = *value as libc::rlim_t;
                        if libc::getrlimit(*resource, &mut own) == 0 {
                            v = v.min(own.rlim_max);
                        }
                        let lim = libc::rlimit { rlim_cur: v, rlim_max: v };
                        if libc::setrlimit(*resource, &lim) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                    }
                }
                match &confinement {
                    Some(c) => c.apply_in_child(),
                    None => Ok(()),
                }
            });
        }
    }
    let mut child = cmd.spawn()?;
    let pgid = child.id().map(|p| p as i32);

    if let (Some(text), Some(mut stdin)) = (spec.stdin, child.stdin.take()) {
        // A child that does not read its stdin must not block us: write in the background.
        tokio::spawn(async move {
            let _ = stdin.write_all(text.as_bytes()).await;
        });
    }
    let out = tokio::spawn(read_capped(child.stdout.take().expect("piped"), spec.output_cap));
    let err = tokio::spawn(read_capped(child.stderr.take().expect("piped"), spec.output_cap));

    let (status, timed_out) = match tokio::time::timeout(spec.timeout, child.wait()).await {
        Ok(status) => (status?, false),
        Err(_) => {
            signal_group(pgid, libc::SIGTERM);
            let status = match tokio::time::timeout(KILL_GRACE, child.wait()).await {
                Ok(s) => s?,
                Err(_) => {
                    signal_group(pgid, libc::SIGKILL);
                    child.wait().await?
                }
            };
            (status, true)
        }
    };
    // Whatever the leader left behind in its group goes with it.
    signal_group(pgid, libc::SIGKILL);

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
        exit_code: if timed_out { None } else { status.code() },
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        duration: started.elapsed(),
        timed_out,
        truncated: cut_out || cut_err,
    })
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

fn signal_group(pgid: Option<i32>, signal: i32) {
    if let Some(pgid) = pgid.filter(|p| *p > 0) {
        // SAFETY: kill(2) with a negative pid signals the group we created for this child.
        unsafe {
            libc::kill(-pgid, signal);
        }
    }
}

/// Read everything, keeping the first `cap` bytes; true when more was dropped.
async fn read_capped(mut r: impl AsyncRead + Unpin, cap: usize) -> std::io::Result<(Vec<u8>, bool)> {
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
            args: args.iter().map(|s| s.to_string()).collect(),
            cwd: std::env::temp_dir(),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            stdin: None,
            timeout: Duration::from_secs(20),
            output_cap: 1 << 20,
            rlimits: None,
            confinement: None,
        }
    }

    #[tokio::test]
    async fn captures_exit_code_and_output() {
        let f = run(spec("/bin/sh", &["-c", "echo out; echo err >&2; exit 3"])).await.unwrap();
        assert_eq!((f.exit_code, f.stdout.as_str(), f.stderr.as_str(), f.timed_out), (Some(3), "out\n", "err\n", false));
    }

    #[tokio::test]
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
        assert_eq!((f.stdout.len(), f.truncated, f.exit_code), (1000, true, Some(0)));
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
    async fn rlimits_apply_to_the_child() {
        let mut s = spec("/bin/sh", &["-c", "ulimit -n; ulimit -f; ulimit -t"]);
        s.rlimits = Some(Rlimits { cpu_seconds: 7, address_space_bytes: 0, processes: 0, file_size_bytes: 1 << 20, open_files: 64 });
        // sh reports the file size limit in 512-byte blocks.
        assert_eq!(run(s).await.unwrap().stdout, "64\n2048\n7\n");
    }

    #[tokio::test]
    async fn a_child_past_its_cpu_limit_is_killed() {
        let mut s = spec("/bin/sh", &["-c", "while :; do :; done"]);
        s.rlimits = Some(Rlimits { cpu_seconds: 1, ..Rlimits::default() });
        let f = run(s).await.unwrap();
        assert_eq!((f.exit_code, f.timed_out), (None, false), "killed by SIGXCPU, not the timeout");
    }

    #[tokio::test]
    async fn a_child_ignoring_sigterm_is_killed() {
        let mut s = spec("/bin/sh", &["-c", "trap '' TERM; while :; do sleep 1; done"]);
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
    async fn stdin_is_delivered_or_closed() {
        let mut s = spec("/bin/cat", &[]);
        s.stdin = Some("hello".into());
        assert_eq!(run(s).await.unwrap().stdout, "hello");
        assert_eq!(run(spec("/bin/cat", &[])).await.unwrap().stdout, "");
    }
}
