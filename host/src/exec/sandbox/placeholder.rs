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
//! while any bwrap child runs, its loopbox process holds a shared lock on the
//! workspace's `run` lock file, and clean-up happens only when that lock can be
//! taken exclusively. The `setup` lock orders creation against clean-up. Both
//! lock files, and the record of what was created, live in a private per-user
//! directory outside the workspace.
//!
//! The `run` lock is a POSIX record lock, owned by the process, taken once per
//! workspace and counted in [`HELD`] for the holds inside it. A `flock(2)` lock
//! would belong to the open descriptor, and every process forked elsewhere in
//! loopbox keeps a copy of that until it execs: the clean-up would then see a
//! child that is not there and leave the placeholders behind.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::protect::{Kind, Protected};

/// The `run` lock files this process holds, with how many holds rely on each.
/// Clean-up runs under this mutex too, so no hold in the process starts
/// while the process has let go of the lock.
static HELD: Mutex<BTreeMap<PathBuf, (usize, File)>> = Mutex::new(BTreeMap::new());

fn held() -> MutexGuard<'static, BTreeMap<PathBuf, (usize, File)>> {
    HELD.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Held while one sandboxed child runs; clean-up is tried when it is dropped.
#[derive(Debug)]
pub struct Hold {
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
    {
        let mut held = held();
        match held.get_mut(&files.run) {
            Some((holds, _)) => *holds += 1,
            None => {
                let run = open(&files.run)?;
                record_lock(&run, libc::F_RDLCK, true)?;
                held.insert(files.run.clone(), (1, run));
            }
        }
    }
    // From here on, an error lets go of the hold again.
    let hold = Hold { files };
    let files = &hold.files;
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
    Ok(hold)
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut held = held();
        let Some((holds, _)) = held.get_mut(&self.files.run) else {
            return;
        };
        *holds -= 1;
        if *holds == 0 {
            // Closing the descriptor releases this process's lock.
            held.remove(&self.files.run);
            let _ = clean_up(&self.files);
        }
    }
}

/// At the start of a loopbox command: remove the placeholders a loopbox killed
/// with SIGKILL left in `root` (canonical), if no sandboxed child runs there now.
/// Cheap when nothing was left: only the record's existence is checked.
pub fn clean_stale(root: &Path) {
    let Ok(files) = lock_files(root) else {
        return;
    };
    if !files.record.exists() {
        return;
    }
    let held = held();
    // A hold of this process would be counted in HELD; none runs at start, but
    // a record lock this process holds would make the check below pass.
    if !held.contains_key(&files.run) {
        let _ = clean_up(&files);
    }
}

/// Remove recorded placeholders that are still empty, if no child is running.
/// Called with [`HELD`] locked and this process holding no `run` lock.
fn clean_up(files: &LockFiles) -> Result<(), String> {
    let setup = open(&files.setup)?;
    lock(&setup, libc::LOCK_EX)?;
    let run = open(&files.run)?;
    if !record_lock(&run, libc::F_WRLCK, false)? {
        return Ok(()); // another process runs a child: the last one out cleans up
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

/// Take a POSIX record lock of `kind` on all of `file`; with `wait` false,
/// Ok(false) when another process holds a conflicting one.
fn record_lock(file: &File, kind: libc::c_int, wait: bool) -> Result<bool, String> {
    // SAFETY: a zeroed flock is a valid value; the fields that matter are set below.
    let mut range: libc::flock = unsafe { std::mem::zeroed() };
    range.l_type = kind as libc::c_short;
    range.l_whence = libc::SEEK_SET as libc::c_short;
    let cmd = if wait { libc::F_SETLKW } else { libc::F_SETLK };
    loop {
        // SAFETY: fcntl(2) on a descriptor we own, with a valid flock.
        if unsafe { libc::fcntl(file.as_raw_fd(), cmd, &range) } == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN | libc::EACCES) if !wait => return Ok(false),
            _ => return Err(format!("cannot lock the sandbox's lock file: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch workspace (canonical, as the sandbox sees it) with one protected name.
    fn one_protected(name: &str, kind: Kind) -> (tempfile::TempDir, PathBuf, [Protected; 1]) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let set = [Protected {
            path: root.join(name),
            kind,
        }];
        (dir, root, set)
    }

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

    /// A thread forking at the moment a hold ends (the child keeps copies of
    /// every descriptor until it execs) must not make the clean-up think a
    /// sandboxed child still runs: the placeholders go all the same.
    #[test]
    fn a_fork_elsewhere_in_the_process_does_not_keep_placeholders() {
        use std::io::Read;
        use std::os::unix::process::CommandExt;
        let (_dir, root, set) = one_protected(".claude", Kind::Dir);
        let h = hold(&root, &set).unwrap();
        let (mut forked, tell) = std::io::pipe().unwrap();
        let tell = tell.as_raw_fd();
        let spawner = std::thread::spawn(move || {
            let mut cmd = std::process::Command::new("true");
            // SAFETY: write(2) and nanosleep(2) are async-signal-safe.
            unsafe {
                cmd.pre_exec(move || {
                    libc::write(tell, b"x".as_ptr().cast(), 1);
                    std::thread::sleep(std::time::Duration::from_millis(400));
                    Ok(())
                });
            }
            cmd.status().unwrap()
        });
        forked.read_exact(&mut [0]).unwrap(); // the child is between fork and exec
        drop(h);
        assert!(
            !root.join(".claude").exists(),
            "a placeholder outlived the last hold"
        );
        assert!(spawner.join().unwrap().success());
    }

    /// Another process running a sandboxed child in the same workspace (its
    /// lock taken as loopbox takes it, here by Python's `lockf`) keeps the
    /// placeholders; the next hold to end after it cleans them up.
    #[test]
    fn a_child_of_another_process_keeps_the_placeholders() {
        use std::io::{BufRead, BufReader};
        let (_dir, root, set) = one_protected(".envrc", Kind::File);
        let h = hold(&root, &set).unwrap();
        let run = lock_files(&root).unwrap().run;
        let mut other = std::process::Command::new("python3")
            .args([
                "-c",
                "import fcntl, sys; f = open(sys.argv[1], 'r+'); fcntl.lockf(f, fcntl.LOCK_SH); print('held', flush=True); sys.stdin.read()",
            ])
            .arg(&run)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(other.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "held\n");
        drop(h);
        assert!(
            root.join(".envrc").is_file(),
            "the other child relies on it"
        );
        drop(other.stdin.take());
        assert!(other.wait().unwrap().success());
        drop(hold(&root, &set).unwrap());
        assert!(!root.join(".envrc").exists(), "the last hold cleans up");
    }
}
