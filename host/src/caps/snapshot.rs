//! `actions.snapshot`, `restore` and `forget-snapshot`: copies of workspace
//! files the host keeps for a policy and puts back on request, as a YAML
//! loop's `tamper_guard: revert` needs (the test files a guarded state's
//! action changed, put back as they were when the state began).
//!
//! The host writes into the workspace outside the sandbox here, so:
//! - only paths the user's `workspace.restore` patterns name are taken or put
//!   back (none by default), matched as little-loops matches
//!   `project.test_patterns`; a restore writes only paths its snapshot holds,
//!   with the bytes it holds;
//! - never a protected path (every name of `exec::sandbox::protect::NAMES`
//!   whatever `shell.writable` opens, any `.git` on the way, the run's own
//!   protected files, an open worktree's `.git` file) or a hidden one;
//! - every read and write goes through [`crate::caps::beneath`]: no link is
//!   followed, reads take regular files only, a write replaces the name;
//! - the copies live in the store (`db::snapshots`), never in the workspace,
//!   capped per run by `limits.snapshot_bytes`, and go when the run ends.

use std::path::{Path, PathBuf};

use crate::bindings::actions::ActionError;
use crate::caps::beneath::{Beneath, Refused, components};
use crate::db::{Db, SnapshotEntry};
use crate::exec::sandbox::protect::{self, Protected};
use crate::limits::{Limit, LimitExceeded};

/// The most paths one snapshot or restore names.
pub const MAX_PATHS: usize = 100_000;

/// What a run may snapshot and restore: `workspace.restore`, and what is never written.
pub struct RestoreGrant {
    patterns: Vec<String>,
    /// `workspace` or `policies.NAME.workspace`, named in refusals.
    section: String,
    root: PathBuf,
    /// The run's protected paths (absolute), as commands see them.
    protected: Vec<PathBuf>,
    /// What the sandbox hides, and the store.
    hidden: Vec<PathBuf>,
}

impl RestoreGrant {
    pub fn new(
        patterns: &[String],
        section: String,
        root: &Path,
        protected: &[Protected],
        hidden: &[PathBuf],
    ) -> RestoreGrant {
        RestoreGrant {
            patterns: patterns.to_vec(),
            section,
            root: root.to_path_buf(),
            protected: protected.iter().map(|p| p.path.clone()).collect(),
            hidden: hidden
                .iter()
                .cloned()
                .chain([root.join(crate::db::STORE_DIR)])
                .collect(),
        }
    }

    /// Whether `rel` may be taken and put back; `open` are the open worktrees' `.git` files.
    pub fn check(&self, rel: &str, open: &[Protected]) -> Result<(), ActionError> {
        components(rel).map_err(|e| ActionError::Invalid(e.to_string()))?;
        let shown = crate::ui::shorten(&crate::ui::sanitize(rel), 120);
        if self.patterns.is_empty() {
            return Err(ActionError::Denied(format!(
                "keeping and putting back workspace files is not granted: add the patterns of the files a policy may restore to `{}.restore` in loopbox.toml (for a YAML loop's `tamper_guard: revert`, its test files: `restore = [\"**/test_*.py\", \"**/*_test.py\", \"**/tests/**\", \"conftest.py\", \"**/conftest.py\"]`)",
                self.section
            )));
        }
        if !self
            .patterns
            .iter()
            .any(|p| loopbox_fsm::tamper::matches_pattern(rel, p))
        {
            return Err(ActionError::Denied(format!(
                "`{shown}` matches none of `{}.restore` in loopbox.toml",
                self.section
            )));
        }
        let never = |why: &str| {
            Err(ActionError::Denied(format!(
                "`{shown}` is {why}: the host never writes it for a policy"
            )))
        };
        if let Some(why) = never_written(rel) {
            return never(why);
        }
        let path = self.root.join(rel);
        let covered = |list: &[PathBuf]| list.iter().any(|p| path.starts_with(p));
        if covered(&self.protected) || open.iter().any(|p| path.starts_with(&p.path)) {
            return never("a protected path");
        }
        if covered(&self.hidden) {
            return never("hidden from the sandbox (`shell.hide`, or loopbox's store)");
        }
        Ok(())
    }
}

/// Why the host never writes `rel` (relative to a workspace or a worktree in
/// it) for a policy, whatever is granted: a `.git` on the way, or a protected
/// name at the root (every one of `protect::NAMES`, whatever `shell.writable`
/// opens).
pub fn never_written(rel: &str) -> Option<&'static str> {
    let parts: Vec<&str> = rel.split('/').collect();
    if parts.contains(&".git") {
        return Some("inside a `.git`");
    }
    if protect::NAMES.iter().any(|(n, _)| *n == parts[0]) {
        return Some("a protected path (git's, an agent's or an editor's settings, loopbox's own)");
    }
    None
}

/// Take a snapshot of `paths` for run `run`: each regular file's bytes, the
/// rest as absent. Its id, or why not.
pub fn take(
    grant: &RestoreGrant,
    open: &[Protected],
    db: &Db,
    run: &str,
    paths: &[String],
    cap: u64,
) -> Result<String, ActionError> {
    if paths.len() > MAX_PATHS {
        return Err(ActionError::Invalid(format!(
            "a snapshot names at most {MAX_PATHS} paths, not {}",
            paths.len()
        )));
    }
    for p in paths {
        grant.check(p, open)?;
    }
    let beneath = Beneath::open(&grant.root)
        .map_err(|e| ActionError::Unavailable(format!("cannot open the workspace: {e}")))?;
    let mut entries: Vec<SnapshotEntry> = Vec::with_capacity(paths.len());
    let mut total: u64 = 0;
    for p in paths {
        if entries.iter().any(|(q, _)| q == p) {
            continue;
        }
        // What is left of the cap bounds each read, so no file is read past it.
        let left = cap.saturating_sub(total);
        let content = match beneath.read(p, left) {
            Ok(c) => c,
            Err(Refused::Unusable(m)) if m.contains("over the") => {
                return Err(too_big(cap, total, p));
            }
            // A link, a FIFO, a directory: not a file to put back.
            Err(_) => None,
        };
        total += (p.len() + content.as_ref().map_or(0, Vec::len)) as u64;
        entries.push((p.clone(), content));
    }
    match db.snapshot_take(run, &entries, cap) {
        Ok(Ok(id)) => Ok(id.to_string()),
        Ok(Err((held, adding))) => Err(ActionError::Invalid(
            LimitExceeded::new(Limit::SnapshotBytes, cap)
                .attempted(held + adding)
                .to_string(),
        )),
        Err(e) => Err(ActionError::Unavailable(format!(
            "the snapshot cannot be kept in the store: {e:#}"
        ))),
    }
}

fn too_big(cap: u64, total: u64, path: &str) -> ActionError {
    ActionError::Invalid(format!(
        "{} (at `{}`, with {total} bytes taken)",
        LimitExceeded::new(Limit::SnapshotBytes, cap),
        crate::ui::shorten(&crate::ui::sanitize(path), 120)
    ))
}

/// The snapshot id a policy gave.
pub fn parse_id(text: &str) -> Result<i64, ActionError> {
    text.parse::<i64>().ok().filter(|n| *n > 0).ok_or_else(|| {
        ActionError::Invalid(format!(
            "`{}` is not a snapshot id",
            crate::ui::shorten(&crate::ui::sanitize(text), 40)
        ))
    })
}

/// Put `paths` back from snapshot `id`: the paths written, and for each one
/// not written, why.
pub fn restore(
    grant: &RestoreGrant,
    open: &[Protected],
    db: &Db,
    run: &str,
    id: i64,
    paths: &[String],
) -> Result<(Vec<String>, Vec<String>), ActionError> {
    if paths.len() > MAX_PATHS {
        return Err(ActionError::Invalid(format!(
            "a restore names at most {MAX_PATHS} paths, not {}",
            paths.len()
        )));
    }
    let known = db
        .snapshot_exists(run, id)
        .map_err(|e| ActionError::Unavailable(format!("cannot read the store: {e:#}")))?;
    if !known {
        return Err(ActionError::Invalid(format!(
            "this run holds no snapshot {id} (forgotten, or never taken)"
        )));
    }
    let beneath = Beneath::open(&grant.root)
        .map_err(|e| ActionError::Unavailable(format!("cannot open the workspace: {e}")))?;
    let (mut written, mut not) = (Vec::new(), Vec::new());
    for p in paths {
        let shown = crate::ui::shorten(&crate::ui::sanitize(p), 120);
        if let Err(e) = grant.check(p, open) {
            not.push(describe(&e));
            continue;
        }
        let held = db
            .snapshot_entry(run, id, p)
            .map_err(|e| ActionError::Unavailable(format!("cannot read the store: {e:#}")))?;
        match held {
            None => not.push(format!("`{shown}` is not in snapshot {id}")),
            Some(None) => not.push(format!(
                "`{shown}` was absent (or not a regular file) when snapshot {id} was taken"
            )),
            Some(Some(bytes)) => match beneath.write(p, &bytes) {
                Ok(()) => written.push(p.clone()),
                Err(e) => not.push(e.to_string()),
            },
        }
    }
    Ok((written, not))
}

fn describe(e: &ActionError) -> String {
    match e {
        ActionError::Denied(m)
        | ActionError::Declined(m)
        | ActionError::BudgetExhausted(m)
        | ActionError::Invalid(m)
        | ActionError::Unavailable(m) => m.clone(),
        ActionError::OutcomeUnknown => "outcome unknown".into(),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;
    use crate::exec::sandbox::protect::Kind;

    fn grant(root: &Path) -> RestoreGrant {
        grant_of(root, &["tests/", "conftest.py"])
    }

    fn grant_of(root: &Path, patterns: &[&str]) -> RestoreGrant {
        RestoreGrant::new(
            &patterns.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
            "workspace".into(),
            root,
            &[Protected {
                path: root.join("tests/own.py"),
                kind: Kind::File,
            }],
            &[root.join("tests/secret")],
        )
    }

    #[test]
    fn only_granted_paths_outside_every_protected_and_hidden_one_are_taken() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let g = grant(&root);
        assert!(g.check("tests/test_a.py", &[]).is_ok());
        assert!(g.check("conftest.py", &[]).is_ok());
        let denied = |rel: &str, open: &[Protected]| match g.check(rel, open) {
            Err(ActionError::Denied(m)) => m,
            other => panic!("{rel}: {other:?}"),
        };
        assert!(denied("src/a.py", &[]).contains("matches none of `workspace.restore`"));
        // A pattern that reaches them (`*` matches every file name) is not enough.
        let g = grant_of(&root, &["*"]);
        let denied = |rel: &str, open: &[Protected]| match g.check(rel, open) {
            Err(ActionError::Denied(m)) => m,
            other => panic!("{rel}: {other:?}"),
        };
        assert!(denied("loopbox.toml", &[]).contains("protected"));
        assert!(denied(".claude/settings.json", &[]).contains("protected"));
        assert!(denied(".git/hooks/pre-commit", &[]).contains("inside a `.git`"));
        assert!(denied("sub/.git/hooks/tests/x", &[]).contains("inside a `.git`"));
        assert!(denied(".loopbox/loopbox.db", &[]).contains("protected"));
        assert!(denied("tests/own.py", &[]).contains("protected"));
        assert!(denied("tests/secret/k", &[]).contains("hidden"));
        let open = [Protected {
            path: root.join("tests/wt"),
            kind: Kind::File,
        }];
        assert!(denied("tests/wt", &open).contains("protected"));
        assert!(matches!(
            g.check("tests/../src/a.py", &[]),
            Err(ActionError::Invalid(_))
        ));
        let none = RestoreGrant::new(&[], "workspace".into(), &root, &[], &[]);
        assert!(
            matches!(none.check("tests/a.py", &[]), Err(ActionError::Denied(m)) if m.contains("workspace.restore"))
        );
    }

    #[test]
    fn a_restore_puts_back_what_was_taken_and_never_writes_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("tests")).unwrap();
        std::fs::write(root.join("tests/test_a.py"), "assert 1\n").unwrap();
        std::fs::write(root.join("tests/test_b.py"), "assert 2\n").unwrap();
        let db = Db::open(&root.join("s.db")).unwrap();
        db.create_run("r", "p", "d", "{}").unwrap();
        let g = grant(&root);
        let paths: Vec<String> = ["tests/test_a.py", "tests/test_b.py", "tests/test_new.py"]
            .map(String::from)
            .to_vec();
        let id = take(&g, &[], &db, "r", &paths, 1 << 20).unwrap();
        let id = parse_id(&id).unwrap();
        // The step edits one, deletes one, adds one, and plants a link out.
        std::fs::write(root.join("tests/test_a.py"), "assert True  # weakened\n").unwrap();
        std::fs::remove_dir_all(root.join("tests")).unwrap();
        std::fs::create_dir(root.join("tests")).unwrap();
        let victim = outside.path().join("victim");
        std::fs::write(&victim, "mine\n").unwrap();
        symlink(&victim, root.join("tests/test_a.py")).unwrap();
        std::fs::write(root.join("tests/test_new.py"), "new\n").unwrap();
        let (written, not) = restore(&g, &[], &db, "r", id, &paths).unwrap();
        assert_eq!(written, ["tests/test_a.py", "tests/test_b.py"]);
        assert!(not[0].contains("absent"), "{not:?}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "mine\n");
        assert_eq!(
            std::fs::read_to_string(root.join("tests/test_a.py")).unwrap(),
            "assert 1\n"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("tests/test_b.py")).unwrap(),
            "assert 2\n"
        );
        // Added files stay: little-loops' revert never touches them.
        assert!(root.join("tests/test_new.py").exists());
        // A directory of the path swapped for a link out: refused, nothing written there.
        std::fs::remove_dir_all(root.join("tests")).unwrap();
        symlink(outside.path(), root.join("tests")).unwrap();
        let (written, not) = restore(&g, &[], &db, "r", id, &paths).unwrap();
        assert!(written.is_empty(), "{written:?}");
        assert!(not.iter().any(|n| n.contains("is a link")), "{not:?}");
        assert!(!outside.path().join("test_a.py").exists());
        // Over the cap: named, nothing kept.
        std::fs::write(root.join("conftest.py"), "x".repeat(100)).unwrap();
        match take(&g, &[], &db, "r", &["conftest.py".into()], 50) {
            Err(ActionError::Invalid(m)) => {
                assert!(m.contains("limits.snapshot_bytes = 50"), "{m}")
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            restore(&g, &[], &db, "r", 999, &paths),
            Err(ActionError::Invalid(m)) if m.contains("no snapshot 999")
        ));
    }
}
