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
//! This assumes loopbox processes that share a temp dir see each other's pids
//! (one PID namespace), as they do on one machine or in one container.

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

/// A new private temp dir for one child, mode 0700, removed when dropped.
pub fn private_tmp() -> Result<tempfile::TempDir, String> {
    let pid = std::process::id();
    let start = start_time(pid).unwrap_or(0);
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

/// Private temp dirs in `tmp` left by loopbox processes of this user that are gone.
pub fn dead_tmp_dirs(tmp: &Path) -> Vec<PathBuf> {
    // SAFETY: geteuid(2) cannot fail.
    let uid = unsafe { libc::geteuid() };
    // Without /proc no owner can be told alive: keep everything.
    if start_time(std::process::id()).is_none() {
        return Vec::new();
    }
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let Some((pid, start)) = name.to_str().and_then(owner) else {
                return false;
            };
            // Not a link, and ours.
            let mine =
                std::fs::symlink_metadata(e.path()).is_ok_and(|m| m.is_dir() && m.uid() == uid);
            mine && start_time(pid) != Some(start)
        })
        .map(|e| e.path())
        .collect()
}

/// Remove what dead loopbox processes left: their private temp dirs, and the
/// placeholders in `workspace` when no sandboxed child runs there. Errors are
/// ignored: a leftover stays for the next start, and nothing is refused.
pub fn clean(workspace: Option<&Path>) {
    for dir in dead_tmp_dirs(&std::env::temp_dir()) {
        let _ = std::fs::remove_dir_all(dir);
    }
    if let Some(root) = workspace.and_then(|w| w.canonicalize().ok()) {
        super::placeholder::clean_stale(&root);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(!dead_tmp_dirs(parent).contains(&tmp.path().to_path_buf()));

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
        assert_eq!(dead_tmp_dirs(scratch.path()), vec![dead]);
    }
}
