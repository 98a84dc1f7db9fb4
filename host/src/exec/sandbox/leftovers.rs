//! What sandboxed children leave behind, and its removal at the next start.
//!
//! - Landlock's private temp dirs: made mode 0700 in the system temp dir,
//!   named `loopbox-child-PID-START-XXXXXX` after the loopbox process that owns
//!   them (its pid and its start time in clock ticks since boot, as in
//!   `/proc/PID/stat`, so a reused pid is told apart). A loopbox killed with
//!   SIGKILL cannot remove its own; the next loopbox command removes every such
//!   dir of this user whose owner is gone. A dir of a live loopbox, another
//!   user's, a link, or a name of another form is never touched.
//! - bwrap's placeholders ([`super::placeholder`]): removed when the last
//!   sandboxed child of the workspace ends; after a SIGKILL the next loopbox
//!   command that uses the workspace removes them, before it reads the
//!   workspace's config (an empty `loopbox.toml` placeholder is not a config).
//!
//! Whether an owner lives is told first by its lock: each process that makes
//! such a dir holds `loopbox-child-PID-START.lock` beside it for as long as it
//! runs, so an owner in another PID namespace, or one `/proc` will not show, is
//! never taken for dead. Without a lock file, `/proc` decides: no entry or
//! another start time is gone, an entry that cannot be read is kept. Locks no
//! process holds are removed with the dirs.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The start of every private temp dir's name.
const PREFIX: &str = "loopbox-child-";

/// This process's start time in clock ticks after boot (`/proc/PID/stat` field 22).
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The lock file that says the loopbox process `pid` started at `start` lives.
fn lock_path(tmp: &Path, pid: u32, start: u64) -> PathBuf {
    tmp.join(format!("{PREFIX}{pid}-{start}.lock"))
}

/// This process's lock, taken once and held until it exits (the kernel lets go
/// of it however the process ends). A pid can be misread (another PID
/// namespace, a `/proc` that hides it); a held lock cannot.
fn hold_process_lock(tmp: &Path, pid: u32, start: u64) {
    static HELD: std::sync::OnceLock<Option<std::fs::File>> = std::sync::OnceLock::new();
    HELD.get_or_init(|| {
        use std::os::unix::fs::OpenOptionsExt;
        use std::os::unix::io::AsRawFd;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(lock_path(tmp, pid, start))
            .ok()?;
        // SAFETY: flock(2) on a descriptor this function owns.
        (unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0)
            .then_some(file)
    });
}

/// Whether the owner of a lock file at `path` is gone: the lock can be taken.
/// `None` when there is no such file (an owner from before the locks).
fn lock_free(path: &Path) -> Option<bool> {
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .ok()?;
    // SAFETY: flock(2) on a descriptor this function owns; closing it lets go.
    Some(unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0)
}

/// Whether the loopbox process `pid` started at `start` is gone. Its lock says
/// so where it has one; else `/proc`: no entry, or another start time, is gone,
/// and an entry that cannot be read is kept.
fn owner_gone(tmp: &Path, pid: u32, start: u64) -> bool {
    if let Some(free) = lock_free(&lock_path(tmp, pid, start)) {
        return free;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
        Ok(_) => start_time(pid).is_some_and(|s| s != start),
    }
}

/// A new private temp dir for one child, mode 0700, removed when dropped.
pub fn private_tmp() -> Result<tempfile::TempDir, String> {
    let pid = std::process::id();
    let start = start_time(pid).unwrap_or(0);
    hold_process_lock(&std::env::temp_dir(), pid, start);
    tempfile::Builder::new()
        .prefix(&format!("{PREFIX}{pid}-{start}-"))
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
        .map_err(|e| {
            format!(
                "cannot create the child's private temp dir in `{}`: {e}; check that it exists and is writable, or set TMPDIR",
                std::env::temp_dir().display()
            )
        })
}

/// The owner of a private temp dir named `name`: (pid, start time).
fn owner(name: &str) -> Option<(u32, u64)> {
    let mut parts = name.strip_prefix(PREFIX)?.splitn(3, '-');
    let pid = parts.next()?.parse().ok()?;
    let start = parts.next()?.parse().ok()?;
    parts.next()?;
    Some((pid, start))
}

/// The names in `tmp` that start with [`PREFIX`]: one listing of the system
/// temp dir per command (it may hold thousands of entries; a hook pays this
/// on every event).
fn ours(tmp: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| {
            use std::os::unix::ffi::OsStrExt;
            e.file_name().as_bytes().starts_with(PREFIX.as_bytes())
        })
        .map(|e| e.path())
        .collect()
}

/// Of `named` (see [`ours`]), the private temp dirs left by loopbox processes
/// of this user that are gone.
fn dead_dirs_of(tmp: &Path, named: &[PathBuf]) -> Vec<PathBuf> {
    // SAFETY: geteuid(2) cannot fail.
    let uid = unsafe { libc::geteuid() };
    // Without /proc no owner can be told alive: keep everything.
    if start_time(std::process::id()).is_none() {
        return Vec::new();
    }
    named
        .iter()
        .filter(|p| {
            let Some((pid, start)) = p.file_name().and_then(|n| n.to_str()).and_then(owner) else {
                return false;
            };
            // Not a link, and ours.
            let mine = std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir() && m.uid() == uid);
            mine && owner_gone(tmp, pid, start)
        })
        .cloned()
        .collect()
}

/// Of `named`, this user's process lock files that no process holds.
fn dead_locks_of(named: &[PathBuf]) -> Vec<PathBuf> {
    // SAFETY: geteuid(2) cannot fail.
    let uid = unsafe { libc::geteuid() };
    named
        .iter()
        .filter(|p| {
            let named = p
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(".lock"));
            named
                && std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file() && m.uid() == uid)
                && lock_free(p) == Some(true)
        })
        .cloned()
        .collect()
}

/// Remove what dead loopbox processes left: their private temp dirs, and the
/// placeholders in `workspace` when no sandboxed child runs there. Errors are
/// ignored: a leftover stays for the next start, and nothing is refused.
pub fn clean(workspace: Option<&Path>) {
    let tmp = std::env::temp_dir();
    let named = ours(&tmp);
    for dir in dead_dirs_of(&tmp, &named) {
        let owner = dir.file_name().and_then(|n| n.to_str()).and_then(owner);
        let _ = std::fs::remove_dir_all(&dir);
        if let Some((pid, start)) = owner {
            let _ = std::fs::remove_file(lock_path(&tmp, pid, start));
        }
    }
    // The locks of processes that ended (most remove their own dirs as they go).
    for lock in dead_locks_of(&named) {
        let _ = std::fs::remove_file(lock);
    }
    if let Some(root) = workspace.and_then(|w| w.canonicalize().ok()) {
        super::placeholder::clean_stale(&root);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Private temp dirs in `tmp` left by loopbox processes of this user that are gone.
    fn dead_dirs_of_tmp(tmp: &Path) -> Vec<PathBuf> {
        dead_dirs_of(tmp, &ours(tmp))
    }

    #[test]
    fn private_dirs_are_0700_named_by_their_owner_and_kept_while_it_lives() {
        let tmp = private_tmp().unwrap();
        let m = std::fs::metadata(tmp.path()).unwrap();
        assert_eq!(m.mode() & 0o777, 0o700);
        let name = tmp.path().file_name().unwrap().to_str().unwrap();
        let (pid, start) = owner(name).unwrap();
        assert_eq!(pid, std::process::id());
        assert_eq!(Some(start), start_time(pid));
        let parent = tmp.path().parent().unwrap();
        assert!(!dead_dirs_of_tmp(parent).contains(&tmp.path().to_path_buf()));

        // A dir whose owner is gone (a start time that never was), one of
        // another form, and a link with a dead owner's name.
        let scratch = tempfile::tempdir().unwrap();
        let dead = scratch
            .path()
            .join(format!("{PREFIX}{}-1-abc", std::process::id()));
        std::fs::create_dir(&dead).unwrap();
        std::fs::create_dir(scratch.path().join(format!("{PREFIX}abcdef"))).unwrap();
        std::os::unix::fs::symlink(
            scratch.path(),
            scratch.path().join(format!("{PREFIX}1-1-link")),
        )
        .unwrap();
        assert_eq!(dead_dirs_of_tmp(scratch.path()), vec![dead.clone()]);

        // An owner /proc misreads (another PID namespace): its held lock keeps
        // its dir; once the lock is let go, the dir goes.
        let (pid, start) = (std::process::id(), 2);
        let misread = scratch.path().join(format!("{PREFIX}{pid}-{start}-xyz"));
        std::fs::create_dir(&misread).unwrap();
        let held = std::fs::File::create(lock_path(scratch.path(), pid, start)).unwrap();
        use std::os::unix::io::AsRawFd;
        // SAFETY: flock(2) on a descriptor the test owns.
        assert_eq!(unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX) }, 0);
        assert_eq!(dead_dirs_of_tmp(scratch.path()), vec![dead.clone()]);
        drop(held);
        let mut gone = dead_dirs_of_tmp(scratch.path());
        gone.sort();
        assert_eq!(gone, vec![dead, misread]);
        // A lock no one holds is a leftover too; a held one is not.
        let held = std::fs::File::create(lock_path(scratch.path(), pid, 3)).unwrap();
        // SAFETY: flock(2) on a descriptor the test owns.
        assert_eq!(unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX) }, 0);
        assert_eq!(
            dead_locks_of(&ours(scratch.path())),
            vec![lock_path(scratch.path(), pid, start)]
        );
    }
}
