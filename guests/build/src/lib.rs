//! Builds loopbox's guest policies from source: the Rust guests in `guests/rust`,
//! the Python guests in `guests/python` and the JavaScript guests in `guests/js`.
//!
//! [`toolchain`] holds the fallible steps, shared with `loopbox build`; [`Repo`]
//! wraps them for build scripts (the host's, which embeds the shipped policies as
//! `builtin:NAME`, and the integration tests'), panicking with the step's message.
//! Guests build into `target/guests`, a target directory of their own, so the
//! outer build's lock on `target/debug` is never contended.

use std::path::{Path, PathBuf};

pub mod toolchain;

pub use toolchain::{COMPONENTIZE_PY, TARGET};

/// Where the repository's files are, seen from a crate one level below its root.
pub struct Repo {
    pub root: PathBuf,
}

impl Repo {
    /// The repository holding the crate whose build script is running.
    pub fn from_build_script() -> Repo {
        Repo::containing(Path::new(
            &std::env::var("CARGO_MANIFEST_DIR").expect("run from a build script"),
        ))
    }

    /// The repository that `dir` is inside.
    pub fn containing(dir: &Path) -> Repo {
        let root = dir
            .ancestors()
            .find(|p| p.join("wit").is_dir() && p.join("guests").is_dir())
            .expect("repository root with wit/ and guests/")
            .to_path_buf();
        Repo { root }
    }

    /// Tell cargo to rerun the build script when `paths` change (only from a
    /// build script: NUM_JOBS is set for build scripts alone, OUT_DIR for tests too).
    fn watch(&self, paths: &[PathBuf]) {
        if std::env::var_os("NUM_JOBS").is_some() {
            for p in paths {
                println!("cargo:rerun-if-changed={}", p.display());
            }
        }
    }

    /// Build the named guest packages in release mode; returns each one's component path.
    pub fn build_rust_guests(&self, packages: &[&str]) -> Vec<(String, PathBuf)> {
        let guests = self.root.join("guests/rust");
        // The SDK too: every guest is built on it (and it on wit/).
        let mut watched = vec![
            guests.join("Cargo.toml"),
            guests.join("Cargo.lock"),
            guests.join("sdk"),
            self.root.join("wit"),
        ];
        watched.extend(packages.iter().map(|p| guests.join(p)));
        self.watch(&watched);
        let build = toolchain::CargoBuild {
            dir: &guests,
            target_dir: &self.root.join("target/guests"),
            packages,
            nested: true,
            target: toolchain::TARGET,
        };
        build
            .run()
            .unwrap_or_else(|e| panic!("building the guest policies: {e}"))
    }

    /// Build the Extism plugins in `guests/extism` (for the comparison benchmarks);
    /// returns each one's core module path.
    pub fn build_extism_plugins(&self, packages: &[&str]) -> Vec<(String, PathBuf)> {
        let dir = self.root.join("guests/extism");
        let mut watched = vec![
            dir.join("Cargo.toml"),
            dir.join("Cargo.lock"),
            self.root.join("guests/rust/ralph"),
        ];
        watched.extend(
            packages
                .iter()
                .map(|p| dir.join(p.trim_end_matches("-extism"))),
        );
        self.watch(&watched);
        let build = toolchain::CargoBuild {
            dir: &dir,
            target_dir: &self.root.join("target/guests-extism"),
            packages,
            nested: true,
            target: "wasm32-unknown-unknown",
        };
        build
            .run()
            .unwrap_or_else(|e| panic!("building the Extism plugins: {e}"))
    }

    /// Build the Python guest in `guests/python/<name>` (module `app`) for `world`,
    /// with the `loopbox_policy` SDK from `guests/python/sdk`.
    pub fn build_python_guest(&self, name: &str, world: &str) -> PathBuf {
        let source = self.root.join("guests/python").join(name);
        let sdk = self.root.join("guests/python/sdk");
        self.watch(&[
            source.clone(),
            sdk.join("loopbox_policy"),
            self.root.join("wit"),
        ]);
        let out = self.output("python", name);
        let build = toolchain::PythonBuild {
            dir: &source,
            module: "app",
            paths: &[&sdk],
            wit: &self.root.join("wit"),
            world,
            out: &out,
        };
        build.run().unwrap_or_else(|e| panic!("building the Python guest {name}: {e}\n(./scripts/test.sh installs what the guests need)"));
        out
    }

    /// Build the JavaScript guest `guests/js/<name>/policy.js` (or `policy.ts`) for
    /// `world` with the componentize-js (and esbuild) pinned in
    /// `guests/js/package-lock.json`. `keep_http` builds the variant that imports
    /// `wasi:http` (for the test that loopbox refuses it).
    pub fn build_js_guest(&self, name: &str, world: &str, keep_http: bool) -> PathBuf {
        let js = self.root.join("guests/js");
        self.watch(&[
            js.join(name),
            js.join("sdk"),
            js.join("package-lock.json"),
            self.root.join("wit"),
        ]);
        let source = ["policy.ts", "policy.js"]
            .iter()
            .map(|f| js.join(name).join(f))
            .find(|p| p.is_file())
            .unwrap_or_else(|| js.join(name).join("policy.js"));
        let out = self.output(
            "js",
            &if keep_http {
                format!("{name}-http")
            } else {
                name.to_string()
            },
        );
        let build = toolchain::JsBuild {
            node_project: &js,
            source: &source,
            wit: &self.root.join("wit"),
            world,
            out: &out,
            keep_http,
        };
        build.run().unwrap_or_else(|e| panic!("building the JavaScript guest {name}: {e}\n(./scripts/test.sh installs what the guests need)"));
        out
    }

    fn output(&self, language: &str, name: &str) -> PathBuf {
        let dir = self.root.join("target/guests").join(language);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        dir.join(format!("{name}.wasm"))
    }
}
