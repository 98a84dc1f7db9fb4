//! `workspace`: read-only access to the workspace's files through a cap-std
//! directory handle. `..` that climbs out, absolute paths and symlinks leading
//! outside are refused by the handle itself. What the sandbox hides inside the
//! workspace (the store `.loopbox/`, `shell.hide` paths) is [`Withheld`]: refused
//! by name, and by where the opened file really is, so a symbolic link a
//! command planted (`notes -> .loopbox`) does not lead there either.
//!
//! Each read goes into the event's journal with what it returned, so a resumed
//! run replays what the policy saw even if the files changed since.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use cap_std::fs::Dir;

use crate::files::ReadError;
use wasmtime::component::{HasSelf, Linker};

use crate::bindings::loopbox::policy::workspace;
use crate::db::STORE_DIR;
use crate::exec::child_env::normalize_relative;
use crate::journal::{Journal, Step, codec};
use crate::limits::meter::Meter;
use crate::limits::{Limit, LimitExceeded};

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

/// What workspace reads never reach, wherever a name or a symbolic link leads:
/// the store, and the hidden paths that lie in the workspace.
pub struct Withheld {
    /// The canonical workspace root.
    root: PathBuf,
    /// Relative to `root`, symbolic links resolved.
    paths: Vec<PathBuf>,
}

impl Withheld {
    /// For the canonical workspace `root`, given what the sandbox hides from
    /// commands (absolute paths; those outside the workspace are not reachable
    /// here anyway).
    pub fn new(root: &Path, hidden: &[PathBuf]) -> Withheld {
        let mut paths = vec![PathBuf::from(STORE_DIR)];
        for rel in hidden.iter().filter_map(|h| h.strip_prefix(root).ok()) {
            if !rel.as_os_str().is_empty() && !paths.iter().any(|p| p == rel) {
                paths.push(rel.to_path_buf());
            }
        }
        Withheld {
            root: root.to_path_buf(),
            paths,
        }
    }

    fn covers(&self, rel: &Path) -> bool {
        self.paths.iter().any(|p| rel.starts_with(p))
    }

    /// Whether `rel`, a path relative to the root with no link on the way
    /// (a listing that follows none), is withheld.
    pub fn withholds(&self, rel: &Path) -> bool {
        self.covers(rel)
    }

    /// Refuse `rel` (as the policy named it) when it is withheld.
    fn check_name(&self, rel: &Path, path: &str) -> Result<(), String> {
        if self.covers(rel) {
            return Err(hidden_message(path));
        }
        Ok(())
    }

    /// Where the opened `file` really is, relative to the root; refused when
    /// withheld, or when that cannot be told.
    fn locate(&self, file: &impl std::os::fd::AsFd, path: &str) -> Result<PathBuf, String> {
        use std::os::fd::AsRawFd;
        // The kernel's name for the open file: what every link on the way resolved to.
        let real = std::fs::read_link(format!("/proc/self/fd/{}", file.as_fd().as_raw_fd()))
            .map_err(|e| format!("`{path}` cannot be read: cannot tell where it leads ({e})"))?;
        let real = match real.to_str().and_then(|r| r.strip_suffix(" (deleted)")) {
            Some(r) => PathBuf::from(r),
            None => real,
        };
        let rel = real.strip_prefix(&self.root).map_err(|_| {
            format!("`{path}` leads outside the workspace (through a symlink) or is not readable")
        })?;
        if self.covers(rel) {
            return Err(hidden_message(path));
        }
        Ok(rel.to_path_buf())
    }
}

fn hidden_message(path: &str) -> String {
    format!(
        "`{}` is hidden from policies (loopbox's store, or a path in `shell.hide`), also through a symlink",
        crate::ui::sanitize(path)
    )
}

pub struct WorkspaceHost {
    dir: Arc<Dir>,
    withheld: Arc<Withheld>,
    reads: Arc<ReadGrant>,
    meter: Arc<Meter>,
    read_limit: u64,
    journal: Journal,
}

impl WorkspaceHost {
    pub fn new(
        dir: Arc<Dir>,
        withheld: Arc<Withheld>,
        reads: Arc<ReadGrant>,
        meter: Arc<Meter>,
        read_limit: u64,
        journal: Journal,
    ) -> WorkspaceHost {
        WorkspaceHost {
            dir,
            withheld,
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
pub fn read_text(dir: &Dir, withheld: &Withheld, path: &str, limit: u64) -> Result<String, String> {
    let rel = check_path(path)?;
    withheld.check_name(&rel, path)?;
    // Non-blocking: a FIFO a command planted in the workspace must not stall the open.
    let file = crate::files::open_nonblocking_in(dir, &rel).map_err(|e| io_message(path, e))?;
    withheld.locate(&file, path)?;
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
        Ok(read_text(&self.dir, &self.withheld, path, self.read_limit))
    }

    fn list_live(&self, dir: &str) -> wasmtime::Result<Result<Vec<String>, String>> {
        let rel = match check_path(dir)
            .and_then(|rel| self.reads.check(&rel, dir).map(|_| rel))
            .and_then(|rel| self.withheld.check_name(&rel, dir).map(|_| rel))
        {
            Ok(p) => p,
            Err(e) => return Ok(Err(e)),
        };
        let opened = if rel.as_os_str().is_empty() {
            self.dir.try_clone()
        } else {
            self.dir.open_dir(&rel)
        };
        let opened = match opened {
            Ok(d) => d,
            Err(e) => return Ok(Err(io_message(dir, e))),
        };
        // Where the directory really is: a link may lead into a withheld one,
        // and withheld names inside it are left out of the listing.
        let real = match self.withheld.locate(&opened, dir) {
            Ok(r) => r,
            Err(e) => return Ok(Err(e)),
        };
        let entries = match opened.entries() {
            Ok(e) => e,
            Err(e) => return Ok(Err(io_message(dir, e))),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(crate::error::host_err)?;
            let mut name = entry.file_name().to_string_lossy().into_owned();
            if self.withheld.covers(&real.join(entry.file_name())) {
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

/// `[workspace]` (or `[policies.NAME.workspace]`): which workspace files a policy
/// may read and list through the `workspace` capability.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceConfig {
    /// Paths relative to the workspace root, each with everything under it; `"."`
    /// is all of it. A section that leaves `read` out grants no reads.
    #[serde(default)]
    pub read: Vec<String>,
    /// Patterns (little-loops' `project.test_patterns` syntax) of the files a
    /// policy may keep copies of and put back (`actions.snapshot`,
    /// `actions.restore`): none unless named. Left out of a run's pin when
    /// empty, so runs pinned before it existed resume.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restore: Vec<String>,
}

impl Default for WorkspaceConfig {
    /// The top level without a `[workspace]` section: the whole workspace.
    fn default() -> Self {
        WorkspaceConfig {
            read: vec![".".into()],
            restore: Vec::new(),
        }
    }
}

impl WorkspaceConfig {
    /// An installed policy without a `[policies.NAME.workspace]` section: nothing.
    pub fn nothing() -> Self {
        WorkspaceConfig {
            read: Vec::new(),
            restore: Vec::new(),
        }
    }

    /// What serde cannot check of `[workspace]`: each `read` path is one this
    /// capability can serve.
    pub fn validate(&self) -> Result<()> {
        for (i, path) in self.read.iter().enumerate() {
            check_path(path)
                .and_then(|_| {
                    if path.is_empty() {
                        Err("it is empty; `.` is the whole workspace".into())
                    } else {
                        Ok(())
                    }
                })
                .map_err(|e| anyhow::anyhow!("workspace.read[{i}]: {e}"))?;
        }
        for (i, p) in self.restore.iter().enumerate() {
            if p.is_empty() || p.len() > 256 || p.contains('\0') {
                anyhow::bail!("workspace.restore[{i}]: a pattern is 1 to 256 bytes");
            }
        }
        Ok(())
    }
}

/// The capability's per-run state, shared by the run's instances: the
/// workspace opened once, what reads never reach, what the section grants.
#[derive(Clone)]
pub struct WorkspaceGrants {
    pub dir: Arc<Dir>,
    /// What the policy's reads never reach (the store, hidden paths).
    pub withheld: Arc<Withheld>,
    /// What the policy may read (`workspace.read`).
    pub reads: Arc<ReadGrant>,
}

impl WorkspaceGrants {
    /// From the section (`section` is its key: `workspace` or
    /// `policies.NAME.workspace`), the canonical workspace `root`, and the paths
    /// hidden from the run's commands, which reads do not reach either.
    pub fn new(
        config: &WorkspaceConfig,
        section: String,
        root: &Path,
        hidden: &[PathBuf],
    ) -> Result<WorkspaceGrants> {
        let dir = Dir::open_ambient_dir(root, cap_std::ambient_authority())
            .with_context(|| format!("failed to open workspace `{}`", root.display()))?;
        Ok(WorkspaceGrants {
            dir: Arc::new(dir),
            withheld: Arc::new(Withheld::new(root, hidden)),
            reads: Arc::new(ReadGrant::new(&config.read, section)),
        })
    }

    /// The host of one instance, counting on `meter` and journaling in `journal`.
    pub fn host(&self, meter: Arc<Meter>, read_limit: u64, journal: Journal) -> WorkspaceHost {
        WorkspaceHost::new(
            self.dir.clone(),
            self.withheld.clone(),
            self.reads.clone(),
            meter,
            read_limit,
            journal,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::{ReadGrant, Withheld, check_path, read_text};
    use std::path::PathBuf;

    #[test]
    fn withheld_paths_are_refused_by_name_and_through_links() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join(".loopbox")).unwrap();
        std::fs::create_dir_all(root.join("keys")).unwrap();
        for (f, text) in [
            (".loopbox/log", "s"),
            (".env", "s"),
            ("keys/k", "s"),
            ("a.txt", "a"),
        ] {
            std::fs::write(root.join(f), text).unwrap();
        }
        for (link, to) in [
            ("l1", ".loopbox/log"),
            ("l2", ".env"),
            ("l3", "keys"),
            ("l4", "a.txt"),
        ] {
            std::os::unix::fs::symlink(to, root.join(link)).unwrap();
        }
        let dir = cap_std::fs::Dir::open_ambient_dir(&root, cap_std::ambient_authority()).unwrap();
        let w = Withheld::new(
            &root,
            &[
                root.join(".env"),
                root.join("keys"),
                PathBuf::from("/elsewhere"),
            ],
        );
        for p in [".env", "keys/k", "l1", "l2", "l3/k"] {
            let e = read_text(&dir, &w, p, 100).unwrap_err();
            assert!(e.contains("hidden from policies"), "{p}: {e}");
        }
        let e = read_text(&dir, &w, ".loopbox/log", 100).unwrap_err();
        assert!(e.contains("inside loopbox's store"), "{e}");
        assert_eq!(read_text(&dir, &w, "l4", 100).unwrap(), "a");
        assert_eq!(read_text(&dir, &w, "a.txt", 100).unwrap(), "a");
    }

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
