//! Bounded reads of files loopbox itself reads: the config, `--input`/`--tick`
//! files, YAML loops, hook transcripts, and the policy's workspace reads.
//!
//! Every read opens the file without blocking (`O_NONBLOCK`, so a FIFO with no
//! writer cannot stall the open), refuses anything that is not a regular file
//! (FIFOs, devices, sockets, directories) by looking at the opened handle
//! rather than the path, and reads at most one byte past its cap, so
//! `/dev/zero` or a file that grows while it is read cannot grow loopbox's memory.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// The file loopbox reads from the workspace root when `--config` is not given.
pub const CONFIG_FILE: &str = "loopbox.toml";
/// The pins of registry policies, beside the config (see `dist::lock`).
pub const LOCK_FILE: &str = "loopbox.lock";

/// `loopbox.toml` and `--config` files.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// `--input @FILE` and `--tick @FILE`.
pub const MAX_INPUT_BYTES: u64 = 16 << 20;
/// A policy component (a Python one is about 20 MB).
pub const MAX_COMPONENT_BYTES: u64 = 256 << 20;
/// An agent's session transcript.
pub const MAX_TRANSCRIPT_BYTES: u64 = 256 << 20;

/// Replace `path` with `bytes` whole: written to a temporary file beside it, then
/// renamed over it, keeping the old file's permissions (0644 for a new one).
pub fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use anyhow::Context;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mode = std::fs::metadata(path).map_or(0o644, |m| m.permissions().mode() & 0o7777);
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("cannot write in `{}`", dir.display()))?;
    tmp.write_all(bytes)
        .and_then(|_| {
            tmp.as_file()
                .set_permissions(std::fs::Permissions::from_mode(mode))
        })
        .and_then(|_| tmp.as_file().sync_all())
        .with_context(|| format!("cannot write `{}`", path.display()))?;
    tmp.persist(path)
        .with_context(|| format!("cannot write `{}`", path.display()))?;
    Ok(())
}

/// Why a file was not read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("it is {0}, not a regular file")]
    NotRegular(&'static str),
    #[error("{}; at most {cap} bytes are read", size.map_or("it grew while it was read".to_string(), |s| format!("it is {s} bytes")))]
    TooLarge { cap: u64, size: Option<u64> },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl ReadError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, ReadError::Io(e) if e.kind() == std::io::ErrorKind::NotFound)
    }
}

/// What a file of this type is, for messages.
pub fn describe(t: std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        "a regular file"
    }
}

/// Refuse an opened file that is not a regular file; its metadata otherwise.
pub fn check_regular(file: &File) -> Result<std::fs::Metadata, ReadError> {
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(ReadError::NotRegular(describe(meta.file_type())));
    }
    Ok(meta)
}

/// Read an opened file: it must be regular and at most `cap` bytes.
pub fn read_opened(file: File, cap: u64) -> Result<Vec<u8>, ReadError> {
    let meta = check_regular(&file)?;
    if meta.len() > cap {
        return Err(ReadError::TooLarge {
            cap,
            size: Some(meta.len()),
        });
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    // One byte past the cap tells a file that grew since the stat.
    file.take(cap + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(ReadError::TooLarge { cap, size: None });
    }
    Ok(bytes)
}

/// Open `path` for reading without blocking on a FIFO or device.
pub fn open_nonblocking(path: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
}

/// As [`open_nonblocking`], for `rel` inside the cap-std directory `dir` (which
/// refuses `..` and symlinks leading out of it).
pub fn open_nonblocking_in(dir: &cap_std::fs::Dir, rel: &Path) -> std::io::Result<File> {
    use cap_std::fs::OpenOptionsExt as _;
    let mut opts = cap_std::fs::OpenOptions::new();
    opts.read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY);
    Ok(dir.open_with(rel, &opts)?.into_std())
}

/// Create the directory `dir` unless it exists; never its parents (a missing
/// workspace is an error, not something to make).
pub fn ensure_dir(dir: &Path) -> std::io::Result<()> {
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

/// Create `dir` (and its missing parents) readable and writable by this user only.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Whether `path`, if it exists, is this user's and no one else can write it (and
/// is no symbolic link): what loopbox runs or trusts from disk must be. A missing
/// path is fine: this user will create it.
pub fn only_mine(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match std::fs::symlink_metadata(path) {
        Ok(m) => {
            // SAFETY: getuid(2) cannot fail.
            let me = unsafe { libc::getuid() };
            m.uid() == me && m.mode() & 0o022 == 0 && !m.file_type().is_symlink()
        }
        Err(_) => true,
    }
}

/// The bytes of the regular file at `path`, at most `cap`.
pub fn read_capped(path: &Path, cap: u64) -> Result<Vec<u8>, ReadError> {
    read_opened(open_nonblocking(path)?, cap)
}

/// As [`read_capped`], as UTF-8 text, with an error naming `what` and the file.
pub fn read_text(path: &Path, cap: u64, what: &str) -> anyhow::Result<String> {
    let bytes = read_capped(path, cap)
        .map_err(|e| anyhow::anyhow!("{what} `{}` cannot be read: {e}", path.display()))?;
    String::from_utf8(bytes).map_err(|_| {
        anyhow::anyhow!(
            "{what} `{}` cannot be read: it must be UTF-8 text",
            path.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_fifos_and_directories_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo on a NUL-terminated path we own.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert_eq!(
            read_capped(&fifo, 10).unwrap_err().to_string(),
            "it is a FIFO (named pipe), not a regular file"
        );
        assert_eq!(
            read_capped(Path::new("/dev/zero"), 10)
                .unwrap_err()
                .to_string(),
            "it is a character device, not a regular file"
        );
        assert_eq!(
            read_capped(dir.path(), 10).unwrap_err().to_string(),
            "it is a directory, not a regular file"
        );
    }

    #[test]
    fn files_over_the_cap_are_refused_and_others_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        std::fs::write(&f, b"12345").unwrap();
        assert_eq!(read_capped(&f, 5).unwrap(), b"12345");
        assert_eq!(
            read_capped(&f, 4).unwrap_err().to_string(),
            "it is 5 bytes; at most 4 bytes are read"
        );
        assert!(
            read_capped(&dir.path().join("missing"), 4)
                .unwrap_err()
                .is_not_found()
        );
        let e = read_text(&f, 4, "the config").unwrap_err().to_string();
        assert!(
            e.starts_with("the config `")
                && e.ends_with("cannot be read: it is 5 bytes; at most 4 bytes are read"),
            "{e}"
        );
    }
}
