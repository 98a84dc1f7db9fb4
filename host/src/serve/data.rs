//! The server's data directory: the store (`DATA/loopbox.db`, every tenant's
//! runs, the tokens, the audit log) and each tenant's `loopbox.toml` as the
//! last audited act set it (`DATA/tenants/NAME/loopbox.toml`).
//!
//! It holds every tenant's runs and the token hashes, so it must be this
//! user's alone (mode 0700, created so), and it must lie outside every tenant
//! root: a tenant's sandboxed commands write their root, and must never reach
//! the store, another tenant's config or their own.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

/// The store's file name in the data directory.
pub const STORE_FILE: &str = "loopbox.db";

#[derive(Debug, Clone)]
pub struct DataDir {
    /// Canonical.
    root: PathBuf,
    /// A PostgreSQL store (`--store`, `LOOPBOX_STORE`) in place of `loopbox.db` here.
    store_url: Option<String>,
}

/// Whether `inner` is `outer` or lies below it (both canonical).
pub fn within(inner: &Path, outer: &Path) -> bool {
    inner.starts_with(outer)
}

impl DataDir {
    /// Open the data directory at `path`, creating it (mode 0700) when it is
    /// missing. Refused: one that is not a directory, is another user's, can be
    /// read or written by others, or lies inside one of `roots` (the tenants'
    /// canonical workspace roots) or holds one of them.
    pub fn open(path: &Path, roots: &[(String, PathBuf)]) -> Result<DataDir> {
        // Checked before anything is created, and again on the directory made.
        check_apart(&resolved(path), roots)?;
        if std::fs::symlink_metadata(path).is_err() {
            crate::files::create_private_dir(path).with_context(|| {
                format!("failed to create the data directory `{}`", path.display())
            })?;
        }
        let root = path
            .canonicalize()
            .with_context(|| format!("the data directory `{}` cannot be used", path.display()))?;
        check_apart(&root, roots)?;
        check_private(
            &root,
            "the data directory",
            "the server keeps every tenant's runs there and uses only a directory of its own",
            "every tenant's runs and the tokens' hashes",
        )?;
        Ok(DataDir {
            root,
            store_url: None,
        })
    }

    /// Keep the runs and the server's tables in the PostgreSQL store at `url`.
    pub fn with_store(self, url: Option<String>) -> DataDir {
        DataDir {
            store_url: url,
            ..self
        }
    }

    /// The shared store's URL, if any.
    pub fn store_url(&self) -> Option<&str> {
        self.store_url.as_deref()
    }

    /// Whether the store is a shared (PostgreSQL) one.
    pub fn is_shared(&self) -> bool {
        self.store_url.is_some()
    }

    /// The store: the PostgreSQL one given, else `loopbox.db` here.
    pub fn open_db(&self) -> Result<crate::db::Db> {
        match &self.store_url {
            Some(url) => crate::db::Db::open_postgres(url),
            None => crate::db::Db::open(&self.store()),
        }
    }

    /// The store opened for reading (a connection of its own).
    pub fn open_db_read_only(&self) -> Result<crate::db::Db> {
        match &self.store_url {
            Some(url) => crate::db::Db::open_postgres(url),
            None => crate::db::Db::open_read_only(&self.store()),
        }
    }

    pub fn path(&self) -> &Path {
        &self.root
    }

    /// `DATA/loopbox.db`.
    pub fn store(&self) -> PathBuf {
        self.root.join(STORE_FILE)
    }

    /// `DATA/tenants/NAME/`, created (0700) when missing.
    pub fn tenant_dir(&self, tenant: &str) -> Result<PathBuf> {
        let dir = self.root.join("tenants").join(tenant);
        crate::files::create_private_dir(&dir).with_context(|| {
            format!(
                "failed to create tenant `{tenant}`'s directory `{}`",
                dir.display()
            )
        })?;
        Ok(dir)
    }
}

/// Open the private directory at `path` (`what` names it in errors), creating
/// it (mode 0700) when missing; canonical. Refused: one that is not a
/// directory, is another user's, or that others can read or write.
pub fn private_dir(path: &Path, what: &str) -> Result<PathBuf> {
    if std::fs::symlink_metadata(path).is_err() {
        crate::files::create_private_dir(path)
            .with_context(|| format!("failed to create {what} `{}`", path.display()))?;
    }
    let real = path
        .canonicalize()
        .with_context(|| format!("{what} `{}` cannot be used", path.display()))?;
    check_private(
        &real,
        what,
        "the server uses only a directory of its own",
        "logins",
    )?;
    Ok(real)
}

/// That the directory `real` (canonical; `what` names it) is a directory,
/// this user's, and closed to everyone else; the errors say why it matters
/// (`owner_why`) and what it holds.
fn check_private(real: &Path, what: &str, owner_why: &str, holds: &str) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(real)
        .with_context(|| format!("{what} `{}` cannot be used", real.display()))?;
    if !meta.is_dir() {
        bail!(
            "{what} `{}` is {}, not a directory",
            real.display(),
            crate::files::describe(meta.file_type())
        );
    }
    // SAFETY: getuid(2) cannot fail.
    let me = unsafe { libc::getuid() };
    if meta.uid() != me {
        bail!(
            "{what} `{}` belongs to uid {}, not to this user (uid {me}): {owner_why}",
            real.display(),
            meta.uid()
        );
    }
    if meta.mode() & 0o077 != 0 {
        bail!(
            "{what} `{}` is mode {:04o}: it holds {holds}, so no one else may read or write it; `chmod 700 {}`",
            real.display(),
            meta.mode() & 0o7777,
            real.display()
        );
    }
    Ok(())
}

/// `path` with its longest existing ancestor resolved (links and all), the
/// rest appended as written: where a directory made there would really be.
pub fn resolved(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut rest = Vec::new();
    let mut at = absolute.as_path();
    loop {
        if let Ok(real) = at.canonicalize() {
            return rest.iter().rev().fold(real, |p, part| p.join(part));
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                at = parent;
            }
            _ => return absolute,
        }
    }
}

/// Refuse a data directory at `data` inside a tenant root, or holding one.
fn check_apart(data: &Path, roots: &[(String, PathBuf)]) -> Result<()> {
    for (tenant, r) in roots {
        if within(data, r) {
            bail!(
                "the data directory `{}` is inside `{}`, a root of tenant `{tenant}`: that tenant's commands could write the store; put it outside every tenant root",
                data.display(),
                r.display()
            );
        }
        if within(r, data) {
            bail!(
                "`{}`, a root of tenant `{tenant}`, is inside the data directory `{}`: put the data directory outside every tenant root",
                r.display(),
                data.display()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_new_data_directory_is_private_and_a_shared_one_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path().join("data");
        let data = DataDir::open(&d, &[]).unwrap();
        let mode = std::fs::metadata(data.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        assert_eq!(data.store(), d.canonicalize().unwrap().join("loopbox.db"));
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o757)).unwrap();
        let e = format!("{:#}", DataDir::open(&d, &[]).unwrap_err());
        assert!(e.contains("is mode 0757") && e.contains("chmod 700"), "{e}");
        let f = tmp.path().join("file");
        std::fs::write(&f, "").unwrap();
        let e = format!("{:#}", DataDir::open(&f, &[]).unwrap_err());
        assert!(e.contains("not a directory"), "{e}");
    }

    #[test]
    fn a_data_directory_inside_a_tenant_root_or_holding_one_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("alpha");
        std::fs::create_dir(&root).unwrap();
        let root = root.canonicalize().unwrap();
        let roots = [("alpha".to_string(), root.clone())];
        let e = format!(
            "{:#}",
            DataDir::open(&root.join("data"), &roots).unwrap_err()
        );
        assert!(e.contains("a root of tenant `alpha`"), "{e}");
        assert!(!root.join("data").exists(), "nothing was created");
        let e = format!("{:#}", DataDir::open(tmp.path(), &roots).unwrap_err());
        assert!(e.contains("is inside the data directory"), "{e}");
    }
}
