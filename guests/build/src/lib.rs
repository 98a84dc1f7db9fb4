//! Builds the Rust guest policies in `guests/rust` to wasm32-wasip2 components,
//! for build scripts: the host's (which embeds the shipped policies as
//! `builtin:NAME`) and the integration tests' (which load them from disk).
//!
//! It runs a nested cargo into `target/guests`, a target directory of its own, so
//! the outer build's lock on `target/debug` is never contended.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The target every guest is built for.
pub const TARGET: &str = "wasm32-wasip2";

/// Where the repository's files are, seen from a crate one level below its root.
pub struct Repo {
    pub root: PathBuf,
}

impl Repo {
    /// The repository holding the crate whose build script is running.
    pub fn from_build_script() -> Repo {
        Repo::containing(Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("run from a build script")))
    }

    /// The repository that `dir` is inside.
    pub fn containing(dir: &Path) -> Repo {
        let root = dir.ancestors().find(|p| p.join("wit").is_dir() && p.join("guests").is_dir()).expect("repository root with wit/ and guests/").to_path_buf();
        Repo { root }
    }

    /// Build the named guest packages in release mode; returns each one's component path.
    ///
    /// Tells cargo to rerun the build script when the guests or the contract change.
    pub fn build_rust_guests(&self, packages: &[&str]) -> Vec<(String, PathBuf)> {
        let guests = self.root.join("guests/rust");
        let target_dir = self.root.join("target/guests");
        if std::env::var_os("OUT_DIR").is_some() {
            for watched in [guests.join("Cargo.toml"), guests.join("Cargo.lock"), self.root.join("wit")] {
                println!("cargo:rerun-if-changed={}", watched.display());
            }
            for p in packages {
                println!("cargo:rerun-if-changed={}", guests.join(p).display());
            }
        }

        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.current_dir(&guests).args(["build", "--release", "--target", TARGET, "--target-dir"]).arg(&target_dir);
        for p in packages {
            cmd.args(["-p", p]);
        }
        // The outer build's flags are for the host target; they must not leak into the guests'.
        for var in [
            "RUSTFLAGS",
            "CARGO_ENCODED_RUSTFLAGS",
            "CARGO_TARGET_DIR",
            "CARGO_BUILD_TARGET",
            "RUSTC_WORKSPACE_WRAPPER",
            "CARGO_MAKEFLAGS",
            "MAKEFLAGS",
            "MFLAGS",
        ] {
            cmd.env_remove(var);
        }
        for (key, _) in std::env::vars() {
            if key.starts_with("CARGO_FEATURE_") || key.starts_with("CARGO_CFG_") {
                cmd.env_remove(key);
            }
        }
        let status = cmd.status().unwrap_or_else(|e| panic!("failed to run cargo for the guests in {}: {e}", guests.display()));
        if !status.success() {
            panic!(
                "building the guest policies in {} failed ({status}).\n\
                 If the error above says the `{TARGET}` target is missing, install it with:\n    rustup target add {TARGET}",
                guests.display()
            );
        }
        packages
            .iter()
            .map(|p| {
                let path = component_path(&target_dir, p);
                assert!(path.is_file(), "cargo built {p} but {} is missing", path.display());
                (p.to_string(), path)
            })
            .collect()
    }
}

/// The componentize-py release the Python guests are built with.
pub const COMPONENTIZE_PY: &str = "0.25.1";

impl Repo {
    /// Build the Python guest in `guests/python/<name>` (module `app`) for `world`
    /// with the pinned componentize-py; returns the component's path.
    pub fn build_python_guest(&self, name: &str, world: &str) -> PathBuf {
        let source = self.root.join("guests/python").join(name);
        let out_dir = self.root.join("target/guests/python");
        if std::env::var_os("OUT_DIR").is_some() {
            println!("cargo:rerun-if-changed={}", source.display());
        }
        let install = format!("install it with:\n    python3 -m pip install componentize-py=={COMPONENTIZE_PY}\n(./scripts/test.sh does this)");
        let version = componentize_py()
            .arg("--version")
            .output()
            .unwrap_or_else(|e| panic!("componentize-py is needed to build the Python guests but cannot be run ({e}); {install}"));
        let version = String::from_utf8_lossy(&version.stdout);
        if !version.contains(COMPONENTIZE_PY) {
            panic!("the Python guests are built with componentize-py {COMPONENTIZE_PY}, but `componentize-py --version` says `{}`; {install}", version.trim());
        }
        std::fs::create_dir_all(&out_dir).expect("create target/guests/python");
        let out = out_dir.join(format!("{name}.wasm"));
        let status = componentize_py()
            .arg("-d")
            .arg(self.root.join("wit"))
            .args(["-w", world, "componentize", "app", "-p"])
            .arg(&source)
            .arg("-o")
            .arg(&out)
            .status()
            .unwrap_or_else(|e| panic!("failed to run componentize-py: {e}"));
        assert!(status.success(), "componentize-py failed to build {} ({status})", source.display());
        out
    }
}

impl Repo {
    /// Build the JavaScript guest in `guests/js/<name>` (`policy.js`) for `world`
    /// with the componentize-js pinned in `guests/js/package-lock.json`.
    pub fn build_js_guest(&self, name: &str, world: &str) -> PathBuf {
        let js = self.root.join("guests/js");
        let out_dir = self.root.join("target/guests/js");
        if std::env::var_os("OUT_DIR").is_some() {
            println!("cargo:rerun-if-changed={}", js.join(name).display());
            println!("cargo:rerun-if-changed={}", js.join("build.mjs").display());
            println!("cargo:rerun-if-changed={}", js.join("package-lock.json").display());
        }
        if !js.join("node_modules/@bytecodealliance/componentize-js").is_dir() {
            panic!("the JavaScript guests need their npm packages: run `npm ci` in {} (./scripts/test.sh does)", js.display());
        }
        std::fs::create_dir_all(&out_dir).expect("create target/guests/js");
        let out = out_dir.join(format!("{name}.wasm"));
        let status = Command::new("node")
            .arg(js.join("build.mjs"))
            .args([name, world])
            .arg(&out)
            .current_dir(&js)
            .status()
            .unwrap_or_else(|e| panic!("failed to run node to build the JavaScript guests ({e}); install Node.js 20 or later"));
        assert!(status.success(), "componentize-js failed to build {} ({status})", js.join(name).display());
        out
    }
}

/// `componentize-py` from PATH, else from python3's scripts directory (where pip
/// puts it even when that directory is not on PATH, e.g. before `pyenv rehash`).
fn componentize_py() -> Command {
    let on_path = Command::new("componentize-py").arg("--version").output().is_ok_and(|o| o.status.success());
    if on_path {
        return Command::new("componentize-py");
    }
    let scripts = Command::new("python3").args(["-c", "import sysconfig; print(sysconfig.get_path('scripts'))"]).output();
    match scripts {
        Ok(o) if o.status.success() => Command::new(PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()).join("componentize-py")),
        _ => Command::new("componentize-py"),
    }
}

/// Where cargo leaves the component for package `name`.
pub fn component_path(target_dir: &Path, name: &str) -> PathBuf {
    target_dir.join(TARGET).join("release").join(format!("{}.wasm", name.replace('-', "_")))
}
