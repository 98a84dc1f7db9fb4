//! `[worktree]`: git worktrees the host makes for a policy (`actions.worktree-add`
//! and `worktree-remove`), so a YAML loop's `worktree:` sub-loop runs in a
//! scratch checkout of a branch, as little-loops 1.156.0 does
//! (`fsm/executor.py` `_run_sub_loop`, `worktree_utils.setup_worktree` with
//! `checkout_existing=True`, `cleanup_worktree`).
//!
//! git runs here, outside the sandbox, with the user's rights, on a branch name
//! the policy chose. So:
//! - the name is checked against git's ref rules, may not start with `-`, is at
//!   most [`MAX_BRANCH_BYTES`] bytes, and is passed after `--`;
//! - git runs with an empty environment but `PATH`, `HOME`, `LANG`, and
//!   `GIT_CONFIG_NOSYSTEM=1`; hooks (`core.hooksPath=/dev/null`), fsmonitor and
//!   protocols are off, so the `post-checkout` hook does not run;
//! - git itself runs confined as a command is ([`GitJail`]: the same sandbox,
//!   no network, what commands cannot see hidden) with only the repository's
//!   `.git` opened for writing: what git reads from `.git` may have been written
//!   by a sandboxed command after all (a repository nested in a wider workspace
//!   a run used, where only the workspace root's `.git` is protected), and a
//!   filter driver or anything else it names then runs inside the sandbox,
//!   never with the user's rights outside it;
//! - the worktree lies in `.worktrees/<timestamp>-subloop-<safe-branch>`, little-loops'
//!   default base; its `.git` file (a pointer a command could aim at a hostile
//!   config) is protected like `.git` at the root for as long as the worktree is
//!   open ([`Worktrees::protected`]), and git never runs with the worktree as its
//!   repository: it is removed by deleting the directory (links are not followed)
//!   and `git worktree prune` in the workspace;
//! - at most `worktree.max_open` are open at once; `remove` removes only what this
//!   run added; what is still open when the run's process ends is removed then, and
//!   a record in the store (`.loopbox/worktrees/`, locked by its process for its
//!   life) lets the next loopbox run remove what a killed one left.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

use crate::bindings::actions::ActionError;
use crate::exec::sandbox::protect::{Kind, Protected};

/// Where worktrees go, relative to the workspace: little-loops' default
/// (`automation.worktree_base`).
pub const BASE: &str = ".worktrees";
/// The longest branch name `worktree-add` takes.
pub const MAX_BRANCH_BYTES: usize = 200;
/// How long one git command may take before it is killed.
const GIT_TIMEOUT: Duration = Duration::from_secs(60);
/// The most of git's error output kept for the message.
const GIT_OUTPUT_BYTES: u64 = 4096;
/// The store's folder of records, one per process that holds worktrees.
const RECORDS: &str = "worktrees";

/// `[worktree]` in loopbox.toml: nothing unless `allow` says so.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct WorktreeConfig {
    /// `true` for any branch, or the branch patterns (`*` matches any run of
    /// characters) a policy may check out.
    #[serde(default)]
    pub allow: Allow,
    /// The most worktrees a run holds at once (each is a whole checkout on disk).
    #[serde(default = "default_max_open")]
    pub max_open: u32,
}

fn default_max_open() -> u32 {
    4
}

impl Default for WorktreeConfig {
    fn default() -> WorktreeConfig {
        WorktreeConfig {
            allow: Allow::default(),
            max_open: default_max_open(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum Allow {
    All(bool),
    Branches(Vec<String>),
}

impl Default for Allow {
    fn default() -> Allow {
        Allow::All(false)
    }
}

impl WorktreeConfig {
    pub fn is_default(&self) -> bool {
        *self == WorktreeConfig::default()
    }

    pub fn validate(&self) -> Result<()> {
        if !(1..=64).contains(&self.max_open) {
            bail!("worktree.max_open must be 1 to 64");
        }
        if let Allow::Branches(list) = &self.allow
            && let Some(bad) = list
                .iter()
                .find(|p| p.is_empty() || p.len() > MAX_BRANCH_BYTES)
        {
            bail!(
                "worktree.allow: `{bad}` is not a branch pattern (1 to {MAX_BRANCH_BYTES} bytes)"
            );
        }
        Ok(())
    }

    /// Whether a `worktree:` template's branch is granted: `None` when only the
    /// run can tell (an allow-list, and the name comes from `${...}`).
    pub fn grants(&self, template: &str) -> Option<bool> {
        match &self.allow {
            Allow::All(all) => Some(*all),
            Allow::Branches(_) if template.contains("${") => None,
            Allow::Branches(_) => Some(self.permits(template.trim()).is_ok()),
        }
    }

    /// Whether the user grants `branch`; `Err` says which key to change.
    pub fn permits(&self, branch: &str) -> Result<(), String> {
        match &self.allow {
            Allow::All(true) => Ok(()),
            Allow::All(false) => Err(
                "git worktrees are not granted: add `[worktree]` with `allow = true` (or a list of branch patterns) to loopbox.toml".into(),
            ),
            Allow::Branches(list) if list.iter().any(|p| glob(p, branch)) => Ok(()),
            Allow::Branches(list) => Err(format!(
                "branch `{}` matches none of worktree.allow = {list:?} in loopbox.toml",
                crate::ui::sanitize(branch)
            )),
        }
    }
}

/// `*` matches any run of characters; everything else itself.
fn glob(pattern: &str, s: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == s,
        Some((head, rest)) => {
            let Some(tail) = s.strip_prefix(head) else {
                return false;
            };
            (0..=tail.len())
                .filter(|i| tail.is_char_boundary(*i))
                .any(|i| glob(rest, &tail[i..]))
        }
    }
}

/// git's rules for a branch name (`git check-ref-format --branch`), a length cap,
/// and no leading `-`, so the name can never read as an option.
pub fn check_branch(b: &str) -> Result<(), String> {
    let shown = crate::ui::shorten(&crate::ui::sanitize(b), 60);
    let bad = |why: &str| Err(format!("`{shown}` is not a branch name: {why}"));
    if b.is_empty() {
        return bad("it is empty");
    }
    if b.len() > MAX_BRANCH_BYTES {
        return bad(&format!("longer than {MAX_BRANCH_BYTES} bytes"));
    }
    if b.starts_with('-') {
        return bad("it starts with `-`");
    }
    if b.chars()
        .any(|c| c.is_ascii_control() || " ~^:?*[\\".contains(c))
    {
        return bad("it holds a space, a control character or one of ~^:?*[\\");
    }
    if b.contains("..") || b.contains("@{") || b == "@" || b == "HEAD" {
        return bad("it holds `..` or `@{`, or is `@` or `HEAD`");
    }
    if b.starts_with('/') || b.ends_with('/') || b.ends_with('.') || b.contains("//") {
        return bad("it starts or ends with `/`, ends with `.`, or holds `//`");
    }
    if b.split('/')
        .any(|c| c.starts_with('.') || c.ends_with(".lock"))
    {
        return bad("a part starts with `.` or ends with `.lock`");
    }
    Ok(())
}

/// A revision `worktree-at` takes: `HEAD`, a branch or tag name by git's rules
/// (see [`check_branch`]), or a commit id (4 to 64 hex digits). Never starting with
/// `-`, and resolved with `--end-of-options` before use, so it cannot be a flag.
pub fn check_revision(r: &str) -> Result<(), String> {
    if r == "HEAD" || ((4..=64).contains(&r.len()) && r.bytes().all(|b| b.is_ascii_hexdigit())) {
        return Ok(());
    }
    check_branch(r).map_err(|e| e.replacen("is not a branch name", "is not a revision", 1))
}

/// little-loops' directory name for a branch: `re.sub(r"[^a-zA-Z0-9-]", "-", b)`.
fn safe_branch(b: &str) -> String {
    b.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// Local time as `%Y%m%d-%H%M%S`, as little-loops names its worktrees.
fn timestamp() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as libc::time_t)
        .unwrap_or(0);
    // SAFETY: `tm` is a plain C struct for which all-zero is valid, and
    // localtime_r writes only into it, reading `now`.
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&now, &mut tm);
        tm
    };
    format!(
        "{:04}{:02}{:02}-{:02}{:02}{:02}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec
    )
}

/// A run's worktrees: what it may add, and what it holds.
pub struct Worktrees {
    root: PathBuf,
    config: WorktreeConfig,
    /// `git`, found on `shell.path` (never inside the workspace), if there.
    git: Option<PathBuf>,
    held: Mutex<Held>,
    /// Where git runs: confined as a command (None: as it is, in unit tests).
    jail: Option<GitJail>,
}

/// The sandbox git runs in: the run's, with the commands' confines but `.git`
/// writable (git writes its worktree records, refs and index there) and no network.
pub struct GitJail {
    pub sandbox: crate::exec::sandbox::LazySandbox,
    pub confines: crate::exec::sandbox::Confines,
}

impl GitJail {
    /// The commands' `confines` with the workspace's own `.git` no longer protected.
    pub fn new(
        sandbox: crate::exec::sandbox::LazySandbox,
        mut confines: crate::exec::sandbox::Confines,
    ) -> GitJail {
        let git_dir = confines.workspace.join(".git");
        confines.protected.retain(|p| p.path != git_dir);
        confines.egress = None;
        confines.unix_sockets = false;
        confines.writable_outside.clear();
        GitJail { sandbox, confines }
    }
}

#[derive(Default)]
struct Held {
    /// Open worktrees, relative to the workspace.
    open: Vec<String>,
    /// This process's record in the store, locked while it exists.
    record: Option<(PathBuf, File)>,
}

impl Worktrees {
    /// The run's worktrees in the canonical workspace `root`; `path` is `shell.path`.
    /// Removes what a loopbox process that died left behind.
    pub fn new(config: &WorktreeConfig, root: &Path, path: &str) -> Worktrees {
        Worktrees::with_jail(config, root, path, None)
    }

    /// [`Worktrees::new`], git confined by `jail`.
    pub fn with_jail(
        config: &WorktreeConfig,
        root: &Path,
        path: &str,
        jail: Option<GitJail>,
    ) -> Worktrees {
        let git = path
            .split(':')
            .filter(|d| !d.is_empty())
            .map(|d| Path::new(d).join("git"))
            .find(|p| p.is_file() && p.canonicalize().is_ok_and(|r| !r.starts_with(root)));
        let w = Worktrees {
            root: root.to_path_buf(),
            config: config.clone(),
            git,
            held: Mutex::new(Held::default()),
            jail,
        };
        w.sweep();
        w
    }

    /// Whether `[worktree]` grants `branch`; `Err` names the key to change.
    pub fn config_permits(&self, branch: &str) -> Result<(), String> {
        self.config.permits(branch)
    }

    /// The worktrees' `.git` files, read-only to every sandboxed child while open.
    pub fn protected(&self) -> Vec<Protected> {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.open
            .iter()
            .map(|rel| Protected {
                path: self.root.join(rel).join(".git"),
                kind: Kind::File,
            })
            .collect()
    }

    /// Check out `branch` in a new worktree; its path relative to the workspace.
    pub fn add(&self, branch: &str) -> Result<String, ActionError> {
        self.config.permits(branch).map_err(ActionError::Denied)?;
        check_branch(branch).map_err(ActionError::Invalid)?;
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if held.open.len() >= self.config.max_open as usize {
            return Err(ActionError::Denied(format!(
                "the run holds {} git worktrees already, the most worktree.max_open allows: remove one first",
                held.open.len()
            )));
        }
        let base = self.base()?;
        let stem = format!("{}-subloop-{}", timestamp(), safe_branch(branch));
        let mut made = None;
        for n in 1..=16 {
            let name = if n == 1 {
                stem.clone()
            } else {
                format!("{stem}-{n}")
            };
            match std::fs::create_dir(base.join(&name)) {
                Ok(()) => {
                    made = Some(name);
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(unavailable(format!("cannot create {BASE}/{name}: {e}"))),
            }
        }
        let Some(name) = made else {
            return Err(unavailable(format!("{BASE}/{stem} exists already")));
        };
        let rel = format!("{BASE}/{name}");
        self.checkout(&rel, branch)?;
        held.open.push(rel.clone());
        self.write_record(&mut held);
        Ok(rel)
    }

    /// Check out `revision` in a new detached worktree (`.worktrees/prepatch-*`,
    /// as little-loops names its pre-patch forks), then copy the workspace files
    /// `copy` names into it at the same paths; its path relative to the workspace.
    /// A copy that is a link or not a regular file fails the whole call (the
    /// fork must hold every file asked for): what a policy asks to test in the
    /// fork is never silently left out.
    pub fn add_at(&self, revision: &str, copy: &[String], cap: u64) -> Result<String, ActionError> {
        self.config.permits(revision).map_err(ActionError::Denied)?;
        check_revision(revision).map_err(ActionError::Invalid)?;
        let files = self.copies(copy, cap)?;
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if held.open.len() >= self.config.max_open as usize {
            return Err(ActionError::Denied(format!(
                "the run holds {} git worktrees already, the most worktree.max_open allows: remove one first",
                held.open.len()
            )));
        }
        let base = self.base()?;
        let stem = format!("prepatch-{}", timestamp());
        let name = (1..=16)
            .map(|n| {
                if n == 1 {
                    stem.clone()
                } else {
                    format!("{stem}-{n}")
                }
            })
            .find(|name| std::fs::create_dir(base.join(name)).is_ok())
            .ok_or_else(|| unavailable(format!("cannot create {BASE}/{stem}")))?;
        let rel = format!("{BASE}/{name}");
        self.fork(&rel, revision, &files)?;
        held.open.push(rel.clone());
        self.write_record(&mut held);
        Ok(rel)
    }

    /// Take over a worktree a replayed `worktree-at` made, making it again
    /// (checkout and copies) where it is gone.
    pub fn adopt_at(
        &self,
        rel: &str,
        revision: &str,
        copy: &[String],
        cap: u64,
    ) -> Result<(), ActionError> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if held.open.iter().any(|o| o == rel) {
            return Ok(());
        }
        let name = rel
            .strip_prefix(BASE)
            .and_then(|n| n.strip_prefix('/'))
            .filter(|n| n.starts_with("prepatch-") && !n.contains('/'))
            .ok_or_else(|| unavailable(format!("`{rel}` is not a worktree path")))?;
        if std::fs::symlink_metadata(self.root.join(rel)).is_err() {
            check_revision(revision).map_err(ActionError::Invalid)?;
            let files = self.copies(copy, cap)?;
            std::fs::create_dir(self.base()?.join(name))
                .map_err(|e| unavailable(format!("cannot create {rel} again: {e}")))?;
            self.fork(rel, revision, &files)?;
        }
        held.open.push(rel.to_string());
        self.write_record(&mut held);
        Ok(())
    }

    /// The workspace files to copy into a fork: read before anything is
    /// checked out, each a regular file reached without a link; missing ones
    /// are left out, as little-loops copies only the files there.
    fn copies(&self, copy: &[String], cap: u64) -> Result<Vec<(String, Vec<u8>)>, ActionError> {
        for rel in copy {
            if let Some(why) = crate::caps::snapshot::never_written(rel) {
                return Err(ActionError::Denied(format!(
                    "`{}` is {why}: the host never copies it into a worktree",
                    crate::ui::shorten(&crate::ui::sanitize(rel), 120)
                )));
            }
        }
        let workspace = crate::caps::beneath::Beneath::open(&self.root)
            .map_err(|e| unavailable(format!("cannot open the workspace: {e}")))?;
        let mut files = Vec::new();
        let mut total = 0u64;
        for rel in copy {
            match workspace.read(rel, cap.saturating_sub(total)) {
                Ok(Some(bytes)) => {
                    total += bytes.len() as u64;
                    files.push((rel.clone(), bytes));
                }
                Ok(None) => {}
                Err(e) => {
                    return Err(ActionError::Invalid(format!(
                        "cannot copy into the worktree: {e} (limits.snapshot_bytes = {cap} bounds the copies)"
                    )));
                }
            }
        }
        Ok(files)
    }

    /// Check out `revision`, detached, in the empty directory `rel`, and write
    /// `files` into it; on failure the directory goes.
    fn fork(
        &self,
        rel: &str,
        revision: &str,
        files: &[(String, Vec<u8>)],
    ) -> Result<(), ActionError> {
        let dir = self.root.join(rel);
        if dir.canonicalize().ok().as_deref() != Some(dir.as_path()) {
            let _ = self.delete(rel);
            return Err(unavailable(format!(
                "`{rel}` does not resolve to itself (a link in the way): remove `{BASE}`"
            )));
        }
        let sha = self
            .git_out(&[
                "rev-parse".as_ref(),
                "--verify".as_ref(),
                "--quiet".as_ref(),
                "--end-of-options".as_ref(),
                format!("{revision}^{{commit}}").as_ref(),
            ])
            .map(|s| s.trim().to_string())
            .ok()
            .filter(|s| s.len() >= 40 && s.bytes().all(|b| b.is_ascii_hexdigit()));
        let Some(sha) = sha else {
            let _ = self.delete(rel);
            return Err(unavailable(format!(
                "`{}` does not resolve to a commit in the workspace's repository",
                crate::ui::shorten(&crate::ui::sanitize(revision), 60)
            )));
        };
        let made = self
            .git(&[
                "worktree".as_ref(),
                "add".as_ref(),
                "--detach".as_ref(),
                "--quiet".as_ref(),
                "--".as_ref(),
                dir.as_os_str(),
                sha.as_ref(),
            ])
            .and_then(|()| match std::fs::symlink_metadata(dir.join(".git")) {
                Ok(m) if m.is_file() => Ok(()),
                _ => Err("git left no `.git` file in it".to_string()),
            })
            .map_err(|e| format!("git could not check out `{sha}` in a worktree: {e}"))
            // Written from the fork's own root: a link the commit holds is not followed.
            .and_then(|()| {
                let fork = crate::caps::beneath::Beneath::open(&dir).map_err(|e| e.to_string())?;
                files.iter().try_for_each(|(rel, bytes)| {
                    fork.write(rel, bytes)
                        .map_err(|e| format!("cannot copy the files into the worktree: {e}"))
                })
            });
        if let Err(e) = made {
            let _ = self.delete(rel);
            return Err(unavailable(e));
        }
        Ok(())
    }

    /// Take over a worktree a replayed `add` made before the run stopped, making it
    /// again where it is gone.
    pub fn adopt(&self, rel: &str, branch: &str) -> Result<(), ActionError> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if held.open.iter().any(|o| o == rel) {
            return Ok(());
        }
        let name = rel
            .strip_prefix(BASE)
            .and_then(|n| n.strip_prefix('/'))
            .filter(|n| !n.is_empty() && !n.contains('/') && !n.starts_with('.'))
            .ok_or_else(|| unavailable(format!("`{rel}` is not a worktree path")))?;
        if std::fs::symlink_metadata(self.root.join(rel)).is_err() {
            let base = self.base()?;
            std::fs::create_dir(base.join(name))
                .map_err(|e| unavailable(format!("cannot create {rel} again: {e}")))?;
            self.checkout(rel, branch)?;
        }
        held.open.push(rel.to_string());
        self.write_record(&mut held);
        Ok(())
    }

    /// Remove a worktree this run added.
    pub fn remove(&self, rel: &str) -> Result<(), ActionError> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let Some(i) = held.open.iter().position(|o| o == rel) else {
            return Err(ActionError::Denied(format!(
                "`{}` is not a worktree this run added",
                crate::ui::shorten(&crate::ui::sanitize(rel), 80)
            )));
        };
        self.delete(rel).map_err(unavailable)?;
        held.open.remove(i);
        self.write_record(&mut held);
        Ok(())
    }

    /// Forget a worktree a replayed `remove` took away, removing it if it is there.
    pub fn forget(&self, rel: &str) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = held.open.iter().position(|o| o == rel) {
            let _ = self.delete(rel);
            held.open.remove(i);
            self.write_record(&mut held);
        }
    }

    /// `.worktrees`, made if missing; refused when it is not a plain directory
    /// (a link a command planted would send git's checkout outside the workspace).
    fn base(&self) -> Result<PathBuf, ActionError> {
        if !self.root.join(".git").is_dir() {
            return Err(unavailable(
                "the workspace is not a git repository (no `.git` directory at its root)".into(),
            ));
        }
        let base = self.root.join(BASE);
        match std::fs::symlink_metadata(&base) {
            Ok(m) if m.is_dir() => Ok(base),
            Ok(_) => Err(unavailable(format!(
                "`{BASE}` in the workspace is not a directory (a link or a file): remove it"
            ))),
            Err(_) => std::fs::create_dir(&base)
                .map(|()| base)
                .map_err(|e| unavailable(format!("cannot create `{BASE}`: {e}"))),
        }
    }

    /// `git worktree add -- PATH BRANCH` into the empty directory `rel`; on failure
    /// the directory goes.
    fn checkout(&self, rel: &str, branch: &str) -> Result<(), ActionError> {
        let dir = self.root.join(rel);
        let real = dir.canonicalize().ok();
        if real.as_deref() != Some(dir.as_path()) {
            let _ = self.delete(rel);
            return Err(unavailable(format!(
                "`{rel}` does not resolve to itself (a link in the way): remove `{BASE}`"
            )));
        }
        let out = self.git(&[
            "worktree".as_ref(),
            "add".as_ref(),
            "--quiet".as_ref(),
            "--".as_ref(),
            dir.as_os_str(),
            branch.as_ref(),
        ]);
        let failed = match out {
            Ok(()) => match std::fs::symlink_metadata(dir.join(".git")) {
                Ok(m) if m.is_file() => return Ok(()),
                _ => "git left no `.git` file in it".to_string(),
            },
            Err(e) => e,
        };
        let _ = self.delete(rel);
        Err(unavailable(format!(
            "git could not check out branch `{}` in a worktree: {failed}",
            crate::ui::shorten(&crate::ui::sanitize(branch), 60)
        )))
    }

    /// Delete `rel` under `.worktrees` without following links, then let git
    /// forget it (`git worktree prune`, run in the workspace, never in the worktree).
    fn delete(&self, rel: &str) -> Result<(), String> {
        let base = self.root.join(BASE);
        match std::fs::symlink_metadata(&base) {
            Ok(m) if m.is_dir() => {}
            _ => {
                return Err(format!(
                    "`{BASE}` is no longer a directory; nothing removed"
                ));
            }
        }
        let path = self.root.join(rel);
        match std::fs::symlink_metadata(&path) {
            // remove_dir_all unlinks links inside without following them.
            Ok(m) if m.is_dir() => {
                std::fs::remove_dir_all(&path).map_err(|e| format!("cannot remove `{rel}`: {e}"))?
            }
            Ok(_) => {
                std::fs::remove_file(&path).map_err(|e| format!("cannot remove `{rel}`: {e}"))?
            }
            Err(_) => {}
        }
        self.git(&["worktree".as_ref(), "prune".as_ref()])
    }

    /// Run git in the workspace with hooks and repository-chosen programs off.
    fn git(&self, args: &[&std::ffi::OsStr]) -> Result<(), String> {
        self.git_out(args).map(|_| ())
    }

    /// What git runs with besides its arguments: the variables and `-c` settings.
    fn git_env() -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = ["PATH", "HOME", "LANG"]
            .into_iter()
            .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
            .collect();
        for (k, v) in [
            ("GIT_CONFIG_NOSYSTEM", "1"),
            ("GIT_TERMINAL_PROMPT", "0"),
            ("GIT_OPTIONAL_LOCKS", "0"),
        ] {
            env.push((k.into(), v.into()));
        }
        env
    }

    const GIT_SETTINGS: [&str; 6] = [
        "core.hooksPath=/dev/null",
        "core.fsmonitor=false",
        "core.untrackedCache=false",
        "protocol.allow=never",
        "submodule.recurse=false",
        "safe.bareRepository=explicit",
    ];

    /// git in [`GitJail`]: prepared as a command is, run to its end or its timeout.
    fn git_confined(
        &self,
        jail: &GitJail,
        git: &Path,
        args: &[&std::ffi::OsStr],
    ) -> Result<String, String> {
        let mut argv: Vec<String> = vec!["-C".into(), self.root.display().to_string()];
        for c in Self::GIT_SETTINGS {
            argv.extend(["-c".to_string(), c.to_string()]);
        }
        for a in args {
            argv.push(
                a.to_str()
                    .ok_or_else(|| format!("`{}` is not UTF-8 text", a.to_string_lossy()))?
                    .to_string(),
            );
        }
        let prepared = jail.confines.prepare(
            jail.sandbox.get(),
            git.to_path_buf(),
            Some("git".into()),
            argv,
            &self.root,
        )?;
        let mut env = Self::git_env();
        env.extend(prepared.env.iter().cloned());
        let spec = crate::exec::process::Spec {
            program: prepared.program,
            arg0: prepared.arg0,
            args: prepared.args,
            cwd: self.root.clone(),
            env,
            stdin: None,
            timeout: GIT_TIMEOUT,
            output_cap: GIT_OUTPUT_BYTES as usize,
            rlimits: None,
            confinement: prepared.confinement,
            pass_fd: prepared.pass_fd,
            net: prepared.net,
        };
        let _keep = (prepared._tmp, prepared._hold);
        // A runtime of its own on a thread of its own: called from a runtime's
        // worker (a run's start sweeps what a killed one left) or a blocking task alike.
        let ran = std::thread::scope(|s| {
            s.spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?
                    .block_on(crate::exec::process::run(spec))
            })
            .join()
        });
        let f = ran
            .map_err(|_| "git's watcher failed".to_string())?
            .map_err(|e| format!("cannot start git: {e}"))?;
        match (f.exit_code, f.timed_out) {
            (_, true) => Err(format!("git took longer than {}s", GIT_TIMEOUT.as_secs())),
            (Some(0), _) => Ok(f.stdout),
            (code, _) => Err(format!(
                "{} (exit {})",
                crate::ui::shorten(&crate::ui::sanitize(f.stderr.trim()), 400),
                code.map_or("by a signal".to_string(), |c| c.to_string())
            )),
        }
    }

    /// [`Worktrees::git`], keeping the first [`GIT_OUTPUT_BYTES`] of its stdout.
    fn git_out(&self, args: &[&std::ffi::OsStr]) -> Result<String, String> {
        let Some(git) = &self.git else {
            return Err("no `git` on shell.path (outside the workspace)".into());
        };
        if let Some(jail) = &self.jail {
            return self.git_confined(jail, git, args);
        }
        let mut cmd = Command::new(git);
        cmd.env_clear().envs(Self::git_env());
        cmd.arg("-C").arg(&self.root);
        for c in Self::GIT_SETTINGS {
            cmd.arg("-c").arg(c);
        }
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| format!("cannot start git: {e}"))?;
        let capped = |r: Option<Box<dyn Read + Send>>| {
            std::thread::spawn(move || {
                let mut text = String::new();
                if let Some(mut r) = r {
                    let _ = (&mut r).take(GIT_OUTPUT_BYTES).read_to_string(&mut text);
                    // Drain the rest so git never blocks on a full pipe.
                    let _ = std::io::copy(&mut r, &mut std::io::sink());
                }
                text
            })
        };
        let out = capped(
            child
                .stdout
                .take()
                .map(|r| Box::new(r) as Box<dyn Read + Send>),
        );
        let err = capped(
            child
                .stderr
                .take()
                .map(|r| Box::new(r) as Box<dyn Read + Send>),
        );
        let started = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if started.elapsed() > GIT_TIMEOUT => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => return Err(format!("waiting for git: {e}")),
            }
        };
        let stdout = out.join().unwrap_or_default();
        let text = err.join().unwrap_or_default();
        match status {
            Some(s) if s.success() => Ok(stdout),
            Some(s) => Err(format!(
                "{} ({s})",
                crate::ui::shorten(&crate::ui::sanitize(text.trim()), 400)
            )),
            None => Err(format!("git took longer than {}s", GIT_TIMEOUT.as_secs())),
        }
    }

    /// Write the open worktrees to this process's record, creating and locking it first.
    fn write_record(&self, held: &mut Held) {
        if held.record.is_none() && !held.open.is_empty() {
            let dir = self.root.join(crate::db::STORE_DIR).join(RECORDS);
            let path = dir.join(format!(
                "{}-{}.list",
                std::process::id(),
                rand::random::<u64>()
            ));
            let opened = std::fs::create_dir_all(&dir).and_then(|()| {
                let f = File::options()
                    .create_new(true)
                    .read(true)
                    .write(true)
                    .open(&path)?;
                f.try_lock().map_err(std::io::Error::other)?;
                Ok(f)
            });
            match opened {
                Ok(f) => held.record = Some((path, f)),
                Err(_) => return,
            }
        }
        if let Some((path, f)) = &mut held.record {
            if held.open.is_empty() {
                let _ = std::fs::remove_file(path);
                held.record = None;
                return;
            }
            let text: String = held.open.iter().map(|o| format!("{o}\n")).collect();
            let _ = f
                .set_len(0)
                .and_then(|()| f.rewind())
                .and_then(|()| f.write_all(text.as_bytes()))
                .and_then(|()| f.sync_data());
        }
    }

    /// Remove the worktrees of records whose process is gone (their lock is free).
    fn sweep(&self) {
        let dir = self.root.join(crate::db::STORE_DIR).join(RECORDS);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return;
        };
        for e in entries.flatten() {
            let path = e.path();
            let Ok(mut f) = File::options().read(true).write(true).open(&path) else {
                continue;
            };
            if f.try_lock().is_err() {
                continue;
            }
            let mut text = String::new();
            let _ = (&mut f).take(1 << 20).read_to_string(&mut text);
            for rel in text.lines() {
                let name = rel.strip_prefix(BASE).and_then(|n| n.strip_prefix('/'));
                if name.is_some_and(|n| !n.is_empty() && !n.contains('/') && !n.starts_with('.')) {
                    let _ = self.delete(rel);
                }
            }
            let _ = std::fs::remove_file(&path);
        }
    }
}

impl Drop for Worktrees {
    fn drop(&mut self) {
        let held = self.held.get_mut().unwrap_or_else(|e| e.into_inner());
        let (open, record) = (std::mem::take(&mut held.open), held.record.take());
        for rel in open {
            let _ = self.delete(&rel);
        }
        if let Some((path, _)) = record {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn unavailable(why: String) -> ActionError {
    ActionError::Unavailable(why)
}

#[cfg(test)]
mod tests;
