//! Compiled components on disk, keyed by the component's content hash and the
//! engine's compatibility hash, so the second run of an 18 MB Python policy
//! loads native code instead of recompiling for seconds.
//!
//! Deserializing an artifact runs its native code, so the cache is trusted
//! only where nothing sandboxed can write:
//! - the directory must be absolute and outside the workspace (checked with
//!   [`check_dir`] before a run uses it), where no sandboxed command reaches;
//! - it must belong to the user and be writable by no one else (else it is not
//!   used: the component is compiled in memory);
//! - every artifact's BLAKE3 digest is kept in `digests/`, and an artifact is
//!   deserialized only from bytes that match it. A mismatch (a patched artifact)
//!   is recompiled and replaced, and says so on stderr.
//!
//! Artifacts are written atomically (temp file + rename).

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use wasmtime::Engine;
use wasmtime::component::Component;

use crate::files::{create_private_dir, only_mine};

pub struct ComponentCache {
    dir: PathBuf,
    digests: PathBuf,
}

/// A `Hasher` whose output depends only on the bytes fed to it.
struct StableHasher(blake3::Hasher);

impl Hasher for StableHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finish(&self) -> u64 {
        u64::from_le_bytes(
            self.0.finalize().as_bytes()[..8]
                .try_into()
                .expect("8 bytes"),
        )
    }
}

/// Why a cached artifact is not used.
enum Unverified {
    NoDigest,
    Bad(String),
}

/// The largest compiled artifact read back (a large Python component compiles to ~100 MB).
const MAX_ARTIFACT_BYTES: u64 = 1 << 30;

/// Refuse a cache directory a sandboxed command could write: relative, or inside `workspace`.
pub fn check_dir(dir: &Path, workspace: &Path) -> Result<()> {
    if !dir.is_absolute() {
        anyhow::bail!(
            "the component cache `{}` is a relative path; give engine.cache_dir (or LOOPBOX_CACHE_DIR) as an absolute path outside the workspace",
            dir.display()
        );
    }
    // The nearest part of the path that exists, resolved: the cache would live under it.
    let mut existing = dir.to_path_buf();
    while !existing.exists() {
        if !existing.pop() {
            break;
        }
    }
    let real = existing.canonicalize().unwrap_or(existing);
    let rest = dir
        .strip_prefix(real.as_path())
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let ws = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_path_buf());
    if real.join(rest).starts_with(&ws) {
        anyhow::bail!(
            "the component cache `{}` is inside the workspace `{}`, where sandboxed commands can write, and loading a cached artifact runs its native code; move engine.cache_dir (or LOOPBOX_CACHE_DIR) outside the workspace",
            dir.display(),
            ws.display()
        );
    }
    Ok(())
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
        ComponentCache {
            dir: dir.join("components"),
            digests: dir.join("digests"),
        }
    }

    #[cfg(test)]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The artifact's file name: content hash plus engine settings.
    /// Stable across Rust releases (std's `DefaultHasher` is not), so an upgrade
    /// of the compiler does not orphan the cache.
    pub fn key(engine: &Engine, wasm: &[u8]) -> String {
        let mut h = StableHasher(blake3::Hasher::new());
        engine.precompile_compatibility_hash().hash(&mut h);
        format!(
            "{}-{}",
            blake3::hash(wasm).to_hex(),
            &h.0.finalize().to_hex()[..16]
        )
    }

    /// Load the compiled form of `wasm`, compiling and storing it on a miss.
    /// A cache directory another user could write is not used at all.
    pub fn load(&self, engine: &Engine, wasm: &[u8]) -> Result<(Component, CacheOutcome)> {
        let key = Self::key(engine, wasm);
        let path = self.dir.join(format!("{key}.cwasm"));
        let digest_path = self.digests.join(&key);
        let trusted = [&self.dir, &self.digests, &path, &digest_path]
            .into_iter()
            .all(|p| only_mine(p));
        if trusted && path.is_file() {
            match self.verified(&path, &digest_path) {
                Ok(bytes) => {
                    // SAFETY: these bytes match the digest recorded when `store` wrote
                    // them from `Engine::precompile_component`, in directories private to
                    // this user and outside every sandbox; wasmtime checks the engine
                    // compatibility header before using them.
                    if let Ok(c) = unsafe { Component::deserialize(engine, &bytes) } {
                        return Ok((with_images(c)?, CacheOutcome::Hit));
                    }
                }
                // An artifact from before digests were kept: an ordinary miss.
                Err(Unverified::NoDigest) => {}
                Err(Unverified::Bad(why)) => crate::errln!(
                    "loopbox: not using the cached component `{}`: {why}; compiling it again",
                    path.display()
                ),
            }
            let _ = std::fs::remove_file(&path);
        }
        let bytes = engine
            .precompile_component(wasm)
            .map_err(|e| anyhow::anyhow!("{e:?}"))
            .context("failed to compile the component")?;
        // A cache that cannot be written (or trusted) costs speed, not correctness.
        // Loading an artifact runs its code: only this user may have put it there.
        if trusted {
            let _ = self.store(&path, &digest_path, &bytes);
        }
        // SAFETY: these bytes were just produced by this engine.
        let component = unsafe { Component::deserialize(engine, &bytes) }
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        Ok((with_images(component)?, CacheOutcome::Compiled))
    }

    /// The artifact's bytes, if they match their recorded digest.
    fn verified(&self, path: &Path, digest_path: &Path) -> Result<Vec<u8>, Unverified> {
        let expected = std::fs::read_to_string(digest_path).map_err(|_| Unverified::NoDigest)?;
        let bytes = crate::files::read_capped(path, MAX_ARTIFACT_BYTES)
            .map_err(|e| Unverified::Bad(format!("it cannot be read ({e})")))?;
        if blake3::hash(&bytes).to_hex().as_str() != expected.trim() {
            return Err(Unverified::Bad(
                "it does not match the digest recorded when it was written (changed since)".into(),
            ));
        }
        Ok(bytes)
    }

    fn store(&self, path: &Path, digest_path: &Path, bytes: &[u8]) -> Result<()> {
        create_private_dir(&self.dir)?;
        create_private_dir(&self.digests)?;
        let mut digest = tempfile_in(&self.digests)?;
        digest
            .1
            .write_all(blake3::hash(bytes).to_hex().as_bytes())?;
        digest.1.sync_all()?;
        std::fs::rename(&digest.0, digest_path)?;
        let mut tmp = tempfile_in(&self.dir)?;
        tmp.1.write_all(bytes)?;
        tmp.1.sync_all()?;
        std::fs::rename(&tmp.0, path)?;
        Ok(())
    }
}

fn tempfile_in(dir: &Path) -> Result<(PathBuf, std::fs::File)> {
    use std::os::unix::fs::OpenOptionsExt;
    let name = format!(
        ".tmp-{}-{}",
        std::process::id(),
        blake3::hash(
            &std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)?
                .as_nanos()
                .to_le_bytes()
        )
        .to_hex()
    );
    let path = dir.join(&name[..40.min(name.len())]);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    Ok((path, file))
}

/// `component` with its memory images made now rather than at its first
/// instance (wasmtime makes each in a memfd it then seals). The kernel can
/// refuse the seal for a moment (EBUSY while a page of the new file is still
/// held elsewhere, as another CPU's page batch may): seen once as an event's
/// trap, "cannot add seals to the memfd: Device or resource busy". wasmtime
/// keeps no failure, so a few more tries get past it.
fn with_images(component: Component) -> Result<Component> {
    retry(
        4,
        || component.initialize_copy_on_write_image(),
        |e| format!("{e:?}").contains("Device or resource busy"),
    )
    .map_err(|e| anyhow::anyhow!("{e:?}"))
    .context("failed to prepare the component's memory image")?;
    Ok(component)
}

/// `f`'s result once it succeeds, fails in a way `transient` does not
/// excuse, or has failed `tries` times, waiting a little longer each time.
fn retry<T>(
    tries: u32,
    mut f: impl FnMut() -> wasmtime::Result<T>,
    transient: impl Fn(&wasmtime::Error) -> bool,
) -> wasmtime::Result<T> {
    let mut tried = 1;
    loop {
        match f() {
            Err(e) if tried < tries && transient(&e) => {
                std::thread::sleep(std::time::Duration::from_millis(u64::from(tried)));
                tried += 1;
            }
            done => return done,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    const WAT: &str = "(component)";

    #[test]
    fn a_second_load_hits_and_an_untrusted_dir_is_not_used() {
        let engine = Engine::new(&crate::wasm::engine::config(4)).unwrap();
        let wasm = wat::parse_str(WAT).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let cache = ComponentCache::new(dir.path().to_path_buf());
        assert_eq!(
            cache.load(&engine, &wasm).unwrap().1,
            CacheOutcome::Compiled
        );
        assert_eq!(cache.load(&engine, &wasm).unwrap().1, CacheOutcome::Hit);

        // Writable by others: neither read nor written.
        let shared = tempfile::tempdir().unwrap();
        let cache = ComponentCache::new(shared.path().to_path_buf());
        std::fs::create_dir_all(cache.dir()).unwrap();
        std::fs::set_permissions(cache.dir(), std::fs::Permissions::from_mode(0o777)).unwrap();
        assert_eq!(
            cache.load(&engine, &wasm).unwrap().1,
            CacheOutcome::Compiled
        );
        assert_eq!(
            cache.load(&engine, &wasm).unwrap().1,
            CacheOutcome::Compiled
        );
        assert_eq!(std::fs::read_dir(cache.dir()).unwrap().count(), 0);
    }

    #[test]
    fn a_transient_failure_is_tried_again_and_any_other_is_not() {
        let busy =
            || wasmtime::Error::msg("cannot add seals to the memfd: Device or resource busy");
        let is_busy = |e: &wasmtime::Error| format!("{e:?}").contains("resource busy");
        // Busy twice, then through.
        let mut calls = 0;
        let r = retry(
            4,
            || {
                calls += 1;
                if calls < 3 { Err(busy()) } else { Ok(calls) }
            },
            is_busy,
        );
        assert_eq!((r.unwrap(), calls), (3, 3));
        // Busy every time: given up after the tries, with the error.
        let mut calls = 0;
        let r: wasmtime::Result<()> = retry(
            4,
            || {
                calls += 1;
                Err(busy())
            },
            is_busy,
        );
        assert!(format!("{:?}", r.unwrap_err()).contains("resource busy"));
        assert_eq!(calls, 4);
        // Anything else: at once.
        let mut calls = 0;
        let r: wasmtime::Result<()> = retry(
            4,
            || {
                calls += 1;
                Err(wasmtime::Error::msg("out of memory"))
            },
            is_busy,
        );
        assert!(r.is_err());
        assert_eq!(calls, 1);
    }

    #[test]
    fn a_patched_artifact_is_never_deserialized() {
        let engine = Engine::new(&crate::wasm::engine::config(4)).unwrap();
        let wasm = wat::parse_str(WAT).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let cache = ComponentCache::new(dir.path().to_path_buf());
        cache.load(&engine, &wasm).unwrap();
        let artifact = std::fs::read_dir(cache.dir())
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let mut bytes = std::fs::read(&artifact).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&artifact, &bytes).unwrap();
        assert_eq!(
            cache.load(&engine, &wasm).unwrap().1,
            CacheOutcome::Compiled,
            "the patched artifact is recompiled"
        );
        assert_eq!(
            cache.load(&engine, &wasm).unwrap().1,
            CacheOutcome::Hit,
            "and replaced"
        );
    }

    #[test]
    fn a_cache_inside_the_workspace_or_relative_is_refused() {
        let ws = tempfile::tempdir().unwrap();
        assert!(
            format!(
                "{:#}",
                check_dir(Path::new("cache"), ws.path()).unwrap_err()
            )
            .contains("relative")
        );
        assert!(
            format!(
                "{:#}",
                check_dir(&ws.path().join("x/cache"), ws.path()).unwrap_err()
            )
            .contains("inside the workspace")
        );
        let other = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(ws.path(), other.path().join("link")).unwrap();
        assert!(
            check_dir(&other.path().join("link/cache"), ws.path()).is_err(),
            "through a link too"
        );
        assert!(check_dir(&other.path().join("cache"), ws.path()).is_ok());
    }
}
