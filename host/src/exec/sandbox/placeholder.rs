//! Placeholders for protected names that do not exist yet (bwrap only).
//!
//! A bind mount needs something to mount on, so before a bwrap child starts,
//! each missing protected name (`.claude`, `.envrc`, ...) is created empty and
//! bound read-only over itself: the child can neither write it nor create it.
//! When the last sandboxed command in the workspace ends, the placeholders that
//! are still empty are removed again.
//!
//! Removing a mount point in another mount namespace silently detaches that
//! mount, so a placeholder must never go while some child still relies on it:
//! every bwrap child holds a shared lock on the workspace's `run` lock while it
//! runs, and clean-up happens only when that lock can be taken exclusively. The
//! `setup` lock orders creation against clean-up. Both lock files, and the
//! record of what was created, live in a private per-user directory outside
//! the workspace.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::protect::{Kind, Protected};

/// Held while one sandboxed child runs; clean-up is tried when it is dropped.
#[derive(Debug)]
pub struct Hold {
    run: Option<File>,
    files: LockFiles,
}

#[derive(Debug, Clone)]
struct LockFiles {
    run: PathBuf,
    setup: PathBuf,
    record: PathBuf,
}

/// Create the missing protected names in `protected` and hold the workspace's run lock.
pub fn hold(root: &Path, protected: &[Protected]) -> Result<Hold, String> {
    let files = lock_files(root)?;
    let run = open(&files.run)?;
    lock(&run, libc::LOCK_SH)?;
    let setup = open(&files.setup)?;
    lock(&setup, libc::LOCK_EX)?;
    let mut created = Vec::new();
    for p in protected {
        let parent_ok = p
            .path
            .parent()
            .is_some_and(|d| d.starts_with(root) && d.is_dir());
        if !parent_ok || std::fs::symlink_metadata(&p.path).is_ok() {
            continue;
        }
        let made = match p.kind {
            Kind::Dir => std::fs::create_dir(&p.path),
            Kind::File => std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&p.path)
                .map(drop),
        };
        match made {
            Ok(()) => {
                let m = std::fs::symlink_metadata(&p.path)
                    .map_err(|e| format!("{}: {e}", p.path.display()))?;
                created.push(format!("{} {} {}", m.dev(), m.ino(), p.path.display()));
            }
            // Someone else made it meanwhile: it is bound as it is.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(format!(
                    "cannot create a placeholder for the protected path `{}`: {e}",
                    p.path.display()
                ));
            }
        }
    }
    if !created.is_empty() {
        let mut record = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&files.record)
            .map_err(|e| format!("{}: {e}", files.record.display()))?;
        writeln!(record, "{}", created.join("\n"))
            .map_err(|e| format!("{}: {e}", files.record.display()))?;
    }
    drop(setup);
    Ok(Hold {
        run: Some(run),
        files,
    })
}

impl Drop for Hold {
    fn drop(&mut self) {
        drop(self.run.take());
        let _ = clean_up(&self.files);
    }
}

/// Remove recorded placeholders that are still empty, if no child is running.
fn clean_up(files: &LockFiles) -> Result<(), String> {
    let setup = open(&files.setup)?;
    lock(&setup, libc::LOCK_EX)?;
    let run = open(&files.run)?;
    if lock(&run, libc::LOCK_EX | libc::LOCK_NB).is_err() {
        return Ok(()); // another child runs: the last one out cleans up
    }
    let Ok(text) = std::fs::read_to_string(&files.record) else {
        return Ok(());
    };
    for line in text.lines() {
        let mut parts = line.splitn(3, ' ');
        let (Some(dev), Some(ino), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let path = Path::new(path);
        let Ok(m) = std::fs::symlink_metadata(path) else {
            continue;
        };
        if m.dev().to_string() != dev || m.ino().to_string() != ino {
            continue; // replaced by something else since: not ours
        }
        let _ = if m.is_dir() {
            std::fs::remove_dir(path)
        } else if m.is_file() && m.len() == 0 {
            std::fs::remove_file(path)
        } else {
            Ok(())
        };
    }
    let _ = std::fs::remove_file(&files.record);
    Ok(())
}

/// The lock files for `root`, in a directory only this user can write.
fn lock_files(root: &Path) -> Result<LockFiles, String> {
    // SAFETY: getuid(2) cannot fail.
    let uid = unsafe { libc::getuid() };
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(|d| PathBuf::from(d).join("loopbox"))
        .filter(|d| d.parent().is_some_and(Path::is_dir))
        .unwrap_or_else(|| std::env::temp_dir().join(format!("loopbox-{uid}")));
    crate::files::create_private_dir(&base).map_err(|e| format!("{}: {e}", base.display()))?;
    if !(base.is_dir() && crate::files::only_mine(&base)) {
        return Err(format!(
            "`{}` is not a private directory of this user; loopbox keeps its sandbox locks there",
            base.display()
        ));
    }
    let key = &blake3::hash(root.as_os_str().as_encoded_bytes()).to_hex()[..16];
    Ok(LockFiles {
        run: base.join(format!("{key}.run")),
        setup: base.join(format!("{key}.setup")),
        record: base.join(format!("{key}.placeholders")),
    })
}

fn open(path: &Path) -> Result<File, String> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn lock(file: &File, op: i32) -> Result<(), String> {
    loop {
        // SAFETY: flock(2) on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), op) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(format!("cannot lock the sandbox's lock file: {e}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_live_while_held_and_go_with_the_last_hold() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::write(root.join(".envrc"), "user's own").unwrap();
        let set = [
            Protected {
                path: root.join(".claude"),
                kind: Kind::Dir,
            },
            Protected {
                path: root.join(".envrc"),
                kind: Kind::File,
            },
            Protected {
                path: root.join("loopbox.toml"),
                kind: Kind::File,
            },
        ];
        let first = hold(&root, &set).unwrap();
        let second = hold(&root, &set).unwrap();
        assert!(root.join(".claude").is_dir() && root.join("loopbox.toml").is_file());
        drop(first);
        assert!(
            root.join(".claude").is_dir(),
            "the second child still relies on it"
        );
        drop(second);
        assert!(
            !root.join(".claude").exists() && !root.join("loopbox.toml").exists(),
            "removed with the last hold"
        );
        assert_eq!(
            std::fs::read_to_string(root.join(".envrc")).unwrap(),
            "user's own",
            "what existed is left alone"
        );

        // A placeholder that got content (the user wrote it meanwhile) is kept.
        let h = hold(&root, &set).unwrap();
        std::fs::write(root.join(".claude/settings.json"), "{}").unwrap();
        drop(h);
        assert!(root.join(".claude/settings.json").exists());
    }
}
