//! Files the host reads and writes in the workspace for a policy (a snapshot's
//! copies, a restore, the files copied into a pre-patch worktree), outside
//! the sandbox and with the user's rights. Whatever a sandboxed command left in
//! the workspace (a link, a FIFO, a directory swapped for a link) must not
//! carry such a write elsewhere, so every path is walked one component at a
//! time from a descriptor of the root with `openat(O_NOFOLLOW)`:
//!
//! - a path is relative, its components plain names (no `..`, `.`, empty or
//!   NUL); a link at any component is refused, never followed;
//! - a read takes regular files only (checked on the opened descriptor, opened
//!   `O_NONBLOCK` so a FIFO cannot block it), to a stated cap;
//! - a write goes to a fresh temporary file beside the target (`O_CREAT |
//!   O_EXCL`), then `renameat` over the name: a link or a hard link at the name
//!   is replaced, never written through, and a reader never sees half a file.
//!
//! What the policy may not name at all (protected and withheld paths) is the
//! caller's check; this module keeps the walk inside the root.

use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

/// A directory the host reads and writes beneath.
pub struct Beneath {
    root: OwnedFd,
}

/// Why a path cannot be read or written here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// Not a relative path of plain names.
    Invalid(String),
    /// A link, a non-regular file, a file over the cap, or an I/O error.
    Unusable(String),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Invalid(m) | Refused::Unusable(m) => f.write_str(m),
        }
    }
}

/// `rel`'s components, each a plain name.
pub fn components(rel: &str) -> Result<Vec<&str>, Refused> {
    let shown = || crate::ui::shorten(&crate::ui::sanitize(rel), 120);
    if rel.is_empty() || rel.starts_with('/') || rel.contains('\0') {
        return Err(Refused::Invalid(format!(
            "`{}` is not a relative path in the workspace",
            shown()
        )));
    }
    let parts: Vec<&str> = rel.split('/').collect();
    if parts
        .iter()
        .any(|p| p.is_empty() || *p == "." || *p == "..")
    {
        return Err(Refused::Invalid(format!(
            "`{}` holds an empty, `.` or `..` part: name a file by its plain path",
            shown()
        )));
    }
    Ok(parts)
}

fn cstr(name: &str) -> CString {
    // `components` refused NUL bytes.
    CString::new(name).unwrap_or_default()
}

fn openat(dir: &OwnedFd, name: &str, flags: i32, mode: libc::mode_t) -> std::io::Result<OwnedFd> {
    let c = cstr(name);
    // SAFETY: openat(2) on a directory descriptor we own with a NUL-terminated
    // name; the result is a fresh descriptor we then own.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            flags | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by openat and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn fstat(fd: &OwnedFd) -> std::io::Result<libc::stat> {
    // SAFETY: fstat(2) fills a zeroed local struct for a descriptor we own.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstat(fd.as_raw_fd(), &mut st) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(st)
    }
}

/// The step into one component failed: a link, not a directory, or gone.
fn walk_error(rel: &str, part: &str, e: &std::io::Error) -> Refused {
    let shown = crate::ui::shorten(&crate::ui::sanitize(rel), 120);
    let part = crate::ui::sanitize(part);
    match e.raw_os_error() {
        Some(libc::ELOOP) | Some(libc::ENOTDIR) => Refused::Unusable(format!(
            "`{shown}`: `{part}` is a link or not a directory, and the host follows no link in the workspace"
        )),
        _ => Refused::Unusable(format!("`{shown}`: cannot open `{part}`: {e}")),
    }
}

impl Beneath {
    /// The directory `root` (canonical, made by the caller), opened once.
    pub fn open(root: &Path) -> std::io::Result<Beneath> {
        let f = std::fs::File::open(root)?;
        if !f.metadata()?.is_dir() {
            return Err(std::io::Error::other(format!(
                "`{}` is not a directory",
                root.display()
            )));
        }
        Ok(Beneath { root: f.into() })
    }

    /// The directory holding `parts`' last component, each step a real
    /// directory; `None` when one is missing (and `create` is false).
    fn parent(&self, rel: &str, parts: &[&str], create: bool) -> Result<Option<OwnedFd>, Refused> {
        let dir_flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;
        let mut dir =
            openat(&self.root, ".", dir_flags, 0).map_err(|e| walk_error(rel, ".", &e))?;
        for part in &parts[..parts.len() - 1] {
            dir = match openat(&dir, part, dir_flags, 0) {
                Ok(d) => d,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
                    let c = cstr(part);
                    // SAFETY: mkdirat(2) on a directory descriptor we own.
                    let made = unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), 0o755) };
                    if made != 0 {
                        let e = std::io::Error::last_os_error();
                        return Err(walk_error(rel, part, &e));
                    }
                    openat(&dir, part, dir_flags, 0).map_err(|e| walk_error(rel, part, &e))?
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(walk_error(rel, part, &e)),
            };
        }
        Ok(Some(dir))
    }

    /// The bytes of the regular file `rel`, at most `cap` of them: `Ok(None)`
    /// when it (or a directory on the way) does not exist.
    pub fn read(&self, rel: &str, cap: u64) -> Result<Option<Vec<u8>>, Refused> {
        let parts = components(rel)?;
        let Some(dir) = self.parent(rel, &parts, false)? else {
            return Ok(None);
        };
        let name = parts[parts.len() - 1];
        let fd = match openat(
            &dir,
            name,
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK,
            0,
        ) {
            Ok(fd) => fd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(walk_error(rel, name, &e)),
        };
        let shown = crate::ui::shorten(&crate::ui::sanitize(rel), 120);
        let st = fstat(&fd).map_err(|e| Refused::Unusable(format!("`{shown}`: {e}")))?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(Refused::Unusable(format!(
                "`{shown}` is not a regular file"
            )));
        }
        if st.st_size as u64 > cap {
            return Err(Refused::Unusable(format!(
                "`{shown}` is {} bytes, over the {cap} this may take",
                st.st_size
            )));
        }
        let mut bytes = Vec::new();
        std::fs::File::from(fd)
            .take(cap.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| Refused::Unusable(format!("`{shown}` cannot be read: {e}")))?;
        if bytes.len() as u64 > cap {
            return Err(Refused::Unusable(format!(
                "`{shown}` grew past the {cap} bytes this may take while it was read"
            )));
        }
        Ok(Some(bytes))
    }

    /// Write `bytes` as the regular file `rel`, making missing directories
    /// (mode 0755). The file keeps the permission bits of a regular file it
    /// replaces (set-ID bits dropped), else gets 0644.
    pub fn write(&self, rel: &str, bytes: &[u8]) -> Result<(), Refused> {
        let parts = components(rel)?;
        let shown = crate::ui::shorten(&crate::ui::sanitize(rel), 120);
        let dir = self
            .parent(rel, &parts, true)?
            .ok_or_else(|| Refused::Unusable(format!("`{shown}`: a directory is missing")))?;
        let name = parts[parts.len() - 1];
        let mode = match openat(
            &dir,
            name,
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK,
            0,
        ) {
            Ok(fd) => match fstat(&fd) {
                Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFREG => st.st_mode & 0o777,
                Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => {
                    return Err(Refused::Unusable(format!(
                        "`{shown}` is a directory now; it is not replaced"
                    )));
                }
                _ => 0o644,
            },
            // A link (ELOOP) or nothing at the name: it is replaced by the rename.
            Err(_) => 0o644,
        };
        let tmp = format!(".loopbox-write-{:016x}", rand::random::<u64>());
        let fd = openat(
            &dir,
            &tmp,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
            mode,
        )
        .map_err(|e| {
            Refused::Unusable(format!("`{shown}`: cannot create a file beside it: {e}"))
        })?;
        let unlink_tmp = || {
            let c = cstr(&tmp);
            // SAFETY: unlinkat(2) of the temporary name we created in `dir`.
            unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), 0) };
        };
        let mut file = std::fs::File::from(fd);
        let written = file
            .write_all(bytes)
            .and_then(|()| {
                // The umask may have cut the mode; the file gets the one intended.
                // SAFETY: fchmod(2) on the descriptor we just created.
                if unsafe { libc::fchmod(file.as_raw_fd(), mode) } != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            })
            .and_then(|()| file.sync_all());
        if let Err(e) = written {
            unlink_tmp();
            return Err(Refused::Unusable(format!(
                "`{shown}` cannot be written: {e}"
            )));
        }
        let (from, to) = (cstr(&tmp), cstr(name));
        // SAFETY: renameat(2) within the directory we hold; names NUL-terminated.
        let renamed =
            unsafe { libc::renameat(dir.as_raw_fd(), from.as_ptr(), dir.as_raw_fd(), to.as_ptr()) };
        if renamed != 0 {
            let e = std::io::Error::last_os_error();
            unlink_tmp();
            return Err(Refused::Unusable(format!(
                "`{shown}` cannot be replaced: {e}"
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{PermissionsExt, symlink};

    use super::*;

    fn setup() -> (tempfile::TempDir, tempfile::TempDir, Beneath) {
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(ws.path().join("tests")).unwrap();
        std::fs::write(ws.path().join("tests/test_a.py"), "assert 1\n").unwrap();
        let b = Beneath::open(&ws.path().canonicalize().unwrap()).unwrap();
        (ws, outside, b)
    }

    #[test]
    fn reads_take_regular_files_beneath_the_root_and_no_link() {
        let (ws, outside, b) = setup();
        let root = ws.path();
        assert_eq!(
            b.read("tests/test_a.py", 100).unwrap(),
            Some(b"assert 1\n".to_vec())
        );
        assert_eq!(b.read("tests/none.py", 100).unwrap(), None);
        assert_eq!(b.read("gone/none.py", 100).unwrap(), None);
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        symlink(outside.path().join("secret"), root.join("tests/link.py")).unwrap();
        symlink(outside.path(), root.join("out")).unwrap();
        for rel in ["tests/link.py", "out/secret"] {
            let e = b.read(rel, 100).unwrap_err().to_string();
            assert!(e.contains("is a link or not a directory"), "{rel}: {e}");
        }
        let fifo = cstr(root.join("tests/fifo.py").to_str().unwrap());
        // SAFETY: mkfifo(3) with a NUL-terminated path in a temp dir.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        let e = b.read("tests/fifo.py", 100).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        let e = b.read("tests/test_a.py", 3).unwrap_err().to_string();
        assert!(e.contains("over the 3"), "{e}");
        for bad in [
            "../x",
            "/etc/passwd",
            "tests/../tests/test_a.py",
            "a//b",
            "",
        ] {
            assert!(
                matches!(b.read(bad, 100), Err(Refused::Invalid(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_write_replaces_a_link_or_hard_link_at_the_name_and_never_writes_through_one() {
        let (ws, outside, b) = setup();
        let root = ws.path();
        let target = outside.path().join("bashrc");
        std::fs::write(&target, "mine\n").unwrap();
        symlink(&target, root.join("tests/test_link.py")).unwrap();
        b.write("tests/test_link.py", b"restored\n").unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "mine\n");
        let m = std::fs::symlink_metadata(root.join("tests/test_link.py")).unwrap();
        assert!(m.is_file());
        // A hard link to a file elsewhere is replaced, its other name untouched.
        let other = root.join("elsewhere.txt");
        std::fs::write(&other, "keep\n").unwrap();
        std::fs::hard_link(&other, root.join("tests/test_hard.py")).unwrap();
        b.write("tests/test_hard.py", b"restored\n").unwrap();
        assert_eq!(std::fs::read_to_string(&other).unwrap(), "keep\n");
        // A directory on the way that is a link is refused: nothing lands outside.
        symlink(outside.path(), root.join("evil")).unwrap();
        let e = b.write("evil/test_x.py", b"x").unwrap_err().to_string();
        assert!(e.contains("is a link"), "{e}");
        assert!(!outside.path().join("test_x.py").exists());
        // Missing directories are made; the old mode is kept.
        b.write("tests/new/deep/test_n.py", b"n\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(root.join("tests/new/deep/test_n.py")).unwrap(),
            "n\n"
        );
        std::fs::set_permissions(
            root.join("tests/test_a.py"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        b.write("tests/test_a.py", b"assert 2\n").unwrap();
        let m = std::fs::metadata(root.join("tests/test_a.py")).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o755);
        // A directory at the name stays.
        let e = b.write("tests/new", b"x").unwrap_err().to_string();
        assert!(e.contains("is a directory"), "{e}");
        // No temporary file is left behind.
        let left: Vec<_> = std::fs::read_dir(root.join("tests"))
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(".loopbox-write-")
            })
            .collect();
        assert!(left.is_empty());
    }
}
