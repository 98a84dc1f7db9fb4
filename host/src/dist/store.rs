//! The offline store of fetched components: one file per component, named by
//! its sha256 digest, under the cache directory (outside the workspace, where
//! no sandboxed command writes). A file is never trusted for being here: every
//! load checks it against the digest `loopbox.lock` pins.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::reference::is_sha256;

pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// The store under a component cache directory.
    pub fn new(cache_dir: &Path) -> Store {
        Store {
            dir: cache_dir.join("components").join("sha256"),
        }
    }

    /// Where the component with this digest is kept.
    pub fn path(&self, digest: &str) -> Result<PathBuf> {
        anyhow::ensure!(is_sha256(digest), "`{digest}` is not a sha256 digest");
        Ok(self
            .dir
            .join(format!("{}.wasm", &digest["sha256:".len()..])))
    }

    /// Keep `bytes` as the component `digest` (written whole, then renamed into place).
    pub fn put(&self, digest: &str, bytes: &[u8]) -> Result<PathBuf> {
        let path = self.path(digest)?;
        std::fs::create_dir_all(&self.dir).with_context(|| {
            format!("cannot create the component store `{}`", self.dir.display())
        })?;
        crate::files::write_atomically(&path, bytes)?;
        Ok(path)
    }
}
