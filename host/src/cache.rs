//! Compiled components on disk, keyed by the component's content hash and the
//! engine's compatibility hash, so the second run of an 18 MB Python policy
//! loads native code instead of recompiling for seconds.
//!
//! Artifacts are written atomically (temp file + rename) into a directory only
//! the user can write: deserializing one is trusting it, so nothing else may
//! put files there. A directory or artifact that another user owns or can write
//! is not used (the component is compiled in memory instead). A damaged
//! artifact is recompiled and replaced.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use wasmtime::Engine;
use wasmtime::component::Component;

pub struct ComponentCache {
    dir: PathBuf,
}

/// Whether a load hit the cache; reported by `inspect` and the benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheOutcome {
    Hit,
    Compiled,
}

impl ComponentCache {
    /// `$LOOPBOX_CACHE_DIR`, else `explicit`, else `$XDG_CACHE_HOME/loopbox`, else `~/.cache/loopbox`.
    pub fn default_dir(explicit: Option<&Path>) -> PathBuf {
        if let Some(d) = std::env::var_os("LOOPBOX_CACHE_DIR") {
            return PathBuf::from(d);
        }
        if let Some(d) = explicit {
            return d.to_path_buf();
        }
        if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
            return PathBuf::from(d).join("loopbox");
        }
        match std::env::var_os("HOME") {
            Some(h) => PathBuf::from(h).join(".cache/loopbox"),
            None => std::env::temp_dir().join("loopbox-cache"),
        }
    }

    pub fn new(dir: PathBuf) -> ComponentCache {
        ComponentCache { dir: dir.join("components") }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The artifact's file name: content hash plus engine settings.
    pub fn key(engine: &Engine, wasm: &[u8]) -> String {
        let mut h = std::hash::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        format!("{}-{:016x}", blake3::hash(wasm).to_hex(), h.finish())
    }

    /// Load the compiled form of `wasm`, compiling and storing it on a miss.
    /// A cache directory another user could write is not used at all.
    pub fn load(&self, engine: &Engine, wasm: &[u8]) -> Result<(Component, CacheOutcome)> {
        let path = self.dir.join(format!("{}.cwasm", Self::key(engine, wasm)));
        let trusted = trusted(&self.dir) && (!path.exists() || trusted(&path));
        if trusted && path.is_file() {
            // SAFETY: the file was written by `store` below from `Engine::precompile_component`
            // into a directory created private to this user; wasmtime checks the
            // engine compatibility header before using it.
            match unsafe { Component::deserialize_file(engine, &path) } {
                Ok(c) => return Ok((c, CacheOutcome::Hit)),
                Err(_) => {
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        let bytes = engine.precompile_component(wasm).map_err(|e| anyhow::anyhow!("{e:?}")).context("failed to compile the component")?;
        // A cache that cannot be written (or trusted) costs speed, not correctness.
        if trusted {
            let _ = self.store(&path, &bytes);
        }
        // SAFETY: these bytes were just produced by this engine.
        let component = unsafe { Component::deserialize(engine, &bytes) }.map_err(|e| anyhow::anyhow!("{e:?}"))?;
        Ok((component, CacheOutcome::Compiled))
    }

    fn store(&self, path: &Path, bytes: &[u8]) -> Result<()> {
        create_private_dir(&self.dir)?;
        let mut tmp = tempfile_in(&self.dir)?;
        tmp.1.write_all(bytes)?;
        tmp.1.sync_all()?;
        std::fs::rename(&tmp.0, path)?;
        Ok(())
    }
}

/// Whether `path` (if it exists) belongs to this user and no one else can write it:
/// loading an artifact runs its code, so only this user may have put it there.
fn trusted(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match std::fs::symlink_metadata(path) {
        Ok(m) => {
            // SAFETY: getuid(2) cannot fail.
            let uid = unsafe { libc::getuid() };
            m.uid() == uid && m.mode() & 0o022 == 0 && !m.file_type().is_symlink()
        }
        Err(_) => true,
    }
}

fn create_private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    Ok(())
}

fn tempfile_in(dir: &Path) -> Result<(PathBuf, std::fs::File)> {
    use std::os::unix::fs::OpenOptionsExt;
    let name = format!(
        ".tmp-{}-{}",
        std::process::id(),
        blake3::hash(&std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_nanos().to_le_bytes()).to_hex()
    );
    let path = dir.join(&name[..40.min(name.len())]);
    let file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path)?;
    Ok((path, file))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const WAT: &str = "(component)";

    #[test]
    fn a_second_load_hits_and_an_untrusted_dir_is_not_used() {
        let engine = Engine::new(&crate::engine::config(4)).unwrap();
        let wasm = wat::parse_str(WAT).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let cache = ComponentCache::new(dir.path().to_path_buf());
        assert_eq!(cache.load(&engine, &wasm).unwrap().1, CacheOutcome::Compiled);
        assert_eq!(cache.load(&engine, &wasm).unwrap().1, CacheOutcome::Hit);

        // Writable by others: neither read nor written.
        let shared = tempfile::tempdir().unwrap();
        let cache = ComponentCache::new(shared.path().to_path_buf());
        std::fs::create_dir_all(cache.dir()).unwrap();
        std::fs::set_permissions(cache.dir(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(cache.load(&engine, &wasm).unwrap().1, CacheOutcome::Compiled);
        assert_eq!(cache.load(&engine, &wasm).unwrap().1, CacheOutcome::Compiled);
        assert_eq!(std::fs::read_dir(cache.dir()).unwrap().count(), 0);
    }
}
