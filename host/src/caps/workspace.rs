//! `workspace`: read-only access to the workspace's files through a cap-std
//! directory handle. `..` that climbs out, absolute paths and symlinks leading
//! outside are refused by the handle itself; the store directory `.loopbox/`
//! is hidden from policies.
//!
//! Each read goes into the event's journal with what it returned, so a resumed
//! run replays what the policy saw even if the files changed since.

use std::path::Path;
use std::sync::Arc;

use anyhow::Result;
use cap_std::fs::Dir;

use crate::files::ReadError;
use wasmtime::component::{HasSelf, Linker};

use crate::db::STORE_DIR;
use crate::exec::child_env::normalize_relative;
use crate::journal::{Journal, Step, codec};
use crate::wasm::bindings::loopbox::policy::workspace;
use crate::wasm::limits::{Limit, LimitExceeded};
use crate::wasm::meter::Meter;

/// Which paths a run's policy may read and list: its `workspace.read`, normalized.
pub struct ReadGrant {
    prefixes: Vec<std::path::PathBuf>,
    /// `workspace` or `policies.NAME.workspace`, named in refusals.
    section: String,
}

impl ReadGrant {
    pub fn new(read: &[String], section: String) -> ReadGrant {
        // The config was validated: a path that does not check grants nothing.
        let prefixes = read.iter().filter_map(|p| check_path(p).ok()).collect();
        ReadGrant { prefixes, section }
    }

    /// Whether the normalized path `rel` (which the policy wrote as `path`) is granted.
    pub fn check(&self, rel: &Path, path: &str) -> Result<(), String> {
        if self.prefixes.iter().any(|p| rel.starts_with(p)) {
            return Ok(());
        }
        let want = if rel.as_os_str().is_empty() {
            ".".to_string()
        } else {
            rel.to_string_lossy().into_owned()
        };
        Err(format!(
            "reading `{}` is not granted: no path in `{section}.read` covers it; to allow it add {:?} to `{section}.read` in loopbox.toml",
            crate::ui::sanitize(path),
            crate::ui::sanitize(&want),
            section = self.section
        ))
    }
}

pub struct WorkspaceHost {
    dir: Arc<Dir>,
    reads: Arc<ReadGrant>,
    meter: Arc<Meter>,
    read_limit: u64,
    journal: Journal,
}

impl WorkspaceHost {
    pub fn new(
        dir: Arc<Dir>,
        reads: Arc<ReadGrant>,
        meter: Arc<Meter>,
        read_limit: u64,
        journal: Journal,
    ) -> WorkspaceHost {
        WorkspaceHost {
            dir,
            reads,
            meter,
            read_limit,
            journal,
        }
    }

    /// Answer from the journal on replay; else call `live` and journal what it returned.
    fn journaled<T>(
        &self,
        kind: &str,
        request: &str,
        live: impl FnOnce() -> wasmtime::Result<Result<T, String>>,
    ) -> wasmtime::Result<Result<T, String>>
    where
        T: serde::Serialize + serde::de::DeserializeOwned,
    {
        match self
            .journal
            .step(kind, request)
            .map_err(crate::journal::StepError::into_wasm)?
        {
            Step::Replayed(text) => codec::parse_text_result(&text).ok_or_else(|| {
                crate::error::host_err(anyhow::anyhow!(
                    "the journal's result for {kind} `{request}` is damaged"
                ))
            }),
            Step::InFlight(seq) => Err(crate::error::host_err(anyhow::anyhow!(
                "call {seq} ({kind} `{request}`) has no result in the journal"
            ))),
            Step::Live(seq) => {
                let r = live()?;
                self.journal
                    .note(seq, kind, request, &codec::text_result(&r));
                Ok(r)
            }
        }
    }
}

/// Check a policy-supplied path before handing it to cap-std, for clearer errors.
pub fn check_path(path: &str) -> Result<std::path::PathBuf, String> {
    if path.contains('\0') {
        return Err("the path contains a NUL byte".into());
    }
    let p = Path::new(path);
    if p.is_absolute() {
        return Err(format!(
            "`{path}` is absolute; paths are relative to the workspace root"
        ));
    }
    let norm = normalize_relative(p).ok_or_else(|| format!("`{path}` leaves the workspace"))?;
    if norm
        .components()
        .next()
        .is_some_and(|c| c.as_os_str() == STORE_DIR)
    {
        return Err(format!(
            "`{path}` is inside loopbox's store ({STORE_DIR}/), which policies cannot read"
        ));
    }
    Ok(norm)
}

fn io_message(path: &str, e: std::io::Error) -> String {
    // cap-std reports an escape through a symlink as a permission error.
    if e.kind() == std::io::ErrorKind::PermissionDenied
        || e.to_string().contains("outside of the filesystem")
    {
        format!("`{path}` leads outside the workspace (through a symlink) or is not readable")
    } else if e.kind() == std::io::ErrorKind::NotFound {
        format!("`{path}` does not exist in the workspace")
    } else {
        format!("`{path}` cannot be read: {e}")
    }
}

/// A workspace file as UTF-8 text, at most `limit` bytes; the error says why not.
/// Shared by the policy's `workspace.read` and the host's own reads of loop files.
pub fn read_text(dir: &Dir, path: &str, limit: u64) -> Result<String, String> {
    let rel = check_path(path)?;
    // Non-blocking: a FIFO a command planted in the workspace must not stall the open.
    let file = crate::files::open_nonblocking_in(dir, &rel).map_err(|e| io_message(path, e))?;
    let bytes = match crate::files::read_opened(file, limit) {
        Ok(b) => b,
        Err(ReadError::NotRegular("a directory")) => {
            return Err(format!("`{path}` is a directory; use list-dir"));
        }
        Err(ReadError::NotRegular(what)) => {
            return Err(format!(
                "`{path}` is {what}, not a regular file; only regular files can be read"
            ));
        }
        Err(ReadError::TooLarge { size, .. }) => {
            let e = LimitExceeded::new(Limit::ReadBytes, limit);
            return Err(size.map_or(e.clone(), |s| e.attempted(s)).to_string());
        }
        Err(ReadError::Io(e)) => return Err(io_message(path, e)),
    };
    String::from_utf8(bytes).map_err(|_| format!("`{path}` is not UTF-8 text"))
}

impl WorkspaceHost {
    fn read_live(&self, path: &str) -> wasmtime::Result<Result<String, String>> {
        if let Err(e) = check_path(path).and_then(|rel| self.reads.check(&rel, path)) {
            return Ok(Err(e));
        }
        Ok(read_text(&self.dir, path, self.read_limit))
    }

    fn list_live(&self, dir: &str) -> wasmtime::Result<Result<Vec<String>, String>> {
        let rel = match check_path(dir).and_then(|rel| self.reads.check(&rel, dir).map(|_| rel)) {
            Ok(p) => p,
            Err(e) => return Ok(Err(e)),
        };
        let entries = if rel.as_os_str().is_empty() {
            self.dir.entries()
        } else {
            self.dir.read_dir(&rel)
        };
        let entries = match entries {
            Ok(e) => e,
            Err(e) => return Ok(Err(io_message(dir, e))),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(crate::error::host_err)?;
            let mut name = entry.file_name().to_string_lossy().into_owned();
            if rel.as_os_str().is_empty() && name == STORE_DIR {
                continue;
            }
            if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                name.push('/');
            }
            names.push(name);
        }
        names.sort();
        Ok(Ok(names))
    }
}

impl workspace::Host for WorkspaceHost {
    async fn read(&mut self, path: String) -> wasmtime::Result<Result<String, String>> {
        let _call = self.meter.call()?;
        self.meter.check_str(&path)?;
        self.journaled("read", &path, || self.read_live(&path))
    }

    async fn list_dir(&mut self, dir: String) -> wasmtime::Result<Result<Vec<String>, String>> {
        let _call = self.meter.call()?;
        self.meter.check_str(&dir)?;
        self.journaled("list-dir", &dir, || self.list_live(&dir))
    }
}

/// Link `workspace` into `linker`; `get` finds this capability's host state in the store's data.
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut WorkspaceHost,
) -> Result<()> {
    workspace::add_to_linker::<T, HasSelf<WorkspaceHost>>(linker, get).map_err(crate::wasm_err)
}

#[cfg(test)]
mod tests {
    use super::{ReadGrant, check_path};

    #[test]
    fn reads_are_granted_by_whole_path_components() {
        let g = ReadGrant::new(
            &["src".into(), "./README.md".into()],
            "policies.x.workspace".into(),
        );
        let ok = |p: &str| g.check(&check_path(p).unwrap(), p).is_ok();
        assert!(ok("src") && ok("src/lib.rs") && ok("src/../src/a") && ok("README.md"));
        assert!(!ok("srcx/a") && !ok(".env") && !ok("") && !ok("README.md.bak"));
        let e = g.check(&check_path(".env").unwrap(), ".env").unwrap_err();
        assert!(
            e.contains("add \".env\" to `policies.x.workspace.read`"),
            "{e}"
        );
        let all = ReadGrant::new(&[".".into()], "workspace".into());
        assert!(all.check(&check_path("").unwrap(), "").is_ok());
        assert!(all.check(&check_path("a/b").unwrap(), "a/b").is_ok());
        let none = ReadGrant::new(&[], "workspace".into());
        assert!(none.check(&check_path("a").unwrap(), "a").is_err());
    }

    #[test]
    fn paths_are_checked_before_use() {
        assert_eq!(check_path("a/./b").unwrap().to_str(), Some("a/b"));
        assert!(
            check_path("../etc/passwd")
                .unwrap_err()
                .contains("leaves the workspace")
        );
        assert!(
            check_path("a/../../x")
                .unwrap_err()
                .contains("leaves the workspace")
        );
        assert!(check_path("/etc/passwd").unwrap_err().contains("absolute"));
        assert!(
            check_path(".loopbox/loopbox.db")
                .unwrap_err()
                .contains("store")
        );
        assert!(check_path("x/../.loopbox").unwrap_err().contains("store"));
    }
}
