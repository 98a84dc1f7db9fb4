//! Exclusive locks between loopbox processes on one workspace, as `flock(2)`
//! on files in the store directory (which sandboxed commands cannot write).
//! An agent runs hooks of one session at once (parallel subagents), and each
//! hook is its own process: the session's events are handled one at a time
//! under its lock, so a run's counts and state stay exact.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// A held lock; released when dropped (or when the process dies).
pub struct FileLock {
    _file: File,
}

/// The lock file for `name` under the store directory `dir`.
pub fn path(dir: &Path, name: &str) -> PathBuf {
    dir.join("locks").join(format!("{name}.lock"))
}

/// Take the exclusive lock at `path`, waiting up to `wait` for its holder.
pub async fn acquire(path: &Path, wait: Duration) -> Result<FileLock> {
    if let Some(dir) = path.parent() {
        crate::files::ensure_dir(dir)
            .with_context(|| format!("failed to create `{}`", dir.display()))?;
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .with_context(|| format!("failed to open the lock `{}`", path.display()))?;
    let deadline = Instant::now() + wait;
    let mut nap = Duration::from_millis(1);
    loop {
        // SAFETY: flock on a descriptor we own for the call's duration.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(FileLock { _file: file });
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(err).with_context(|| format!("failed to lock `{}`", path.display()));
        }
        if Instant::now() >= deadline {
            bail!(
                "`{}` stayed locked by another loopbox process for {}s; is one stuck?",
                path.display(),
                wait.as_secs()
            );
        }
        tokio::time::sleep(nap).await;
        nap = (nap * 2).min(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_held_lock_makes_the_next_wait_and_then_time_out() {
        let dir = tempfile::tempdir().unwrap();
        let p = path(dir.path(), "s");
        let held = acquire(&p, Duration::from_secs(1)).await.unwrap();
        let e = acquire(&p, Duration::from_millis(50))
            .await
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("stayed locked by another loopbox process"),
            "{e}"
        );
        drop(held);
        acquire(&p, Duration::from_millis(50)).await.unwrap();
    }
}
