//! The pinned guest toolchains, called the same way from build scripts and from
//! `loopbox build`: cargo for Rust, componentize-py for Python, componentize-js
//! (through Node) for JavaScript. Each step fails with a message naming what is
//! missing and the command that installs it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The target every guest is built for.
pub const TARGET: &str = "wasm32-wasip2";

/// The componentize-py release Python guests are built with.
pub const COMPONENTIZE_PY: &str = "0.25.1";

/// The npm packages (and versions) a JavaScript guest project needs.
pub const JS_PACKAGES: &[(&str, &str)] = &[
    ("@bytecodealliance/componentize-js", "0.23.0"),
    ("@bytecodealliance/jco", "1.35.0"),
    // componentize-js imports it (lib/spidermonkey-embedding-splicer.js) without
    // declaring it; without this pin its import fails with ERR_MODULE_NOT_FOUND.
    ("@bytecodealliance/preview2-shim", "0.25.0"),
    // Bundles a TypeScript policy into one JavaScript module (componentize.mjs).
    ("esbuild", ESBUILD),
];

/// The esbuild release that compiles TypeScript policies.
pub const ESBUILD: &str = "0.28.2";

/// The Node script that turns one JavaScript module into a component, run with
/// `node --input-type=module -e` from the directory holding `node_modules`.
pub const COMPONENTIZE_JS_SCRIPT: &str = include_str!("componentize.mjs");

/// What a failed build step says: the whole message, ready to print.
pub type Error = String;

/// A tool's progress goes to stderr: stdout belongs to the caller (`--json`, or a
/// build script's `cargo:` directives).
fn to_stderr() -> Stdio {
    Stdio::from(std::io::stderr())
}

/// Environment variables a build script's cargo sets that must not reach a
/// nested cargo building for another target.
fn scrub_build_script_env(cmd: &mut Command) {
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
}

/// A Rust guest build: which workspace, where its output goes, which packages.
pub struct CargoBuild<'a> {
    /// The directory holding the guests' `Cargo.toml`.
    pub dir: &'a Path,
    pub target_dir: &'a Path,
    pub packages: &'a [&'a str],
    /// True inside a build script: drop the outer cargo's host-target settings.
    pub nested: bool,
    /// The Rust target: [`TARGET`] for policies; `wasm32-unknown-unknown` for the
    /// Extism plugins the comparison benchmarks build.
    pub target: &'a str,
}

impl CargoBuild<'_> {
    /// Build in release mode; returns each package's component path.
    pub fn run(&self) -> Result<Vec<(String, PathBuf)>, Error> {
        check_rust_target(self.dir, self.target)?;
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(&cargo);
        cmd.current_dir(self.dir)
            .args([
                "build",
                "--release",
                "--target",
                self.target,
                "--target-dir",
            ])
            .arg(self.target_dir);
        for p in self.packages {
            cmd.args(["-p", p]);
        }
        if self.nested {
            scrub_build_script_env(&mut cmd);
        }
        let status = cmd.stdout(to_stderr()).status().map_err(|e| {
            format!("cannot run `{cargo}` ({e}); install Rust with rustup: https://rustup.rs")
        })?;
        if !status.success() {
            return Err(format!(
                "`cargo build --release --target {}` failed in {} ({status}); its errors are above",
                self.target,
                self.dir.display()
            ));
        }
        self.packages
            .iter()
            .map(|p| {
                let path = self
                    .target_dir
                    .join(self.target)
                    .join("release")
                    .join(format!("{}.wasm", p.replace('-', "_")));
                if path.is_file() {
                    Ok((p.to_string(), path))
                } else {
                    Err(format!(
                        "cargo built {p} but {} is missing: is its crate-type `cdylib`?",
                        path.display()
                    ))
                }
            })
            .collect()
    }
}

/// Makes sure `target` is installed for the toolchain that `dir` selects: with
/// rustup, a missing target is added (rustup installs a `rust-toolchain.toml`'s
/// targets only along with the toolchain itself), and this says so on stderr.
/// Without rustup, cargo reports a missing target itself.
fn check_rust_target(dir: &Path, target: &str) -> Result<(), Error> {
    let installed = || -> Option<bool> {
        let out = Command::new("rustup")
            .current_dir(dir)
            .args(["target", "list", "--installed"])
            .output()
            .ok()?;
        out.status.success().then(|| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .any(|l| l.trim() == target)
        })
    };
    match installed() {
        None | Some(true) => Ok(()),
        Some(false) => {
            eprintln!(
                "loopbox-guest-build: the Rust target `{target}` is not installed; adding it with `rustup target add {target}`"
            );
            let status = Command::new("rustup")
                .current_dir(dir)
                .args(["target", "add", target])
                .stdout(to_stderr())
                .status();
            match status {
                Ok(s) if s.success() => Ok(()),
                _ => Err(format!(
                    "the Rust target `{target}` is not installed, and `rustup target add {target}` failed; install it with:\n    rustup target add {target}"
                )),
            }
        }
    }
}

/// A Python guest build with the pinned componentize-py.
pub struct PythonBuild<'a> {
    /// The directory holding the module.
    pub dir: &'a Path,
    /// The module that defines `Policy` (`app` for app.py).
    pub module: &'a str,
    /// More directories to find modules in (the repository's guests find the
    /// `loopbox_policy` SDK in `guests/python/sdk`; a project from `loopbox new`
    /// has it vendored beside app.py).
    pub paths: &'a [&'a Path],
    pub wit: &'a Path,
    pub world: &'a str,
    pub out: &'a Path,
}

impl PythonBuild<'_> {
    pub fn run(&self) -> Result<(), Error> {
        let install = format!(
            "install it with:\n    python3 -m pip install componentize-py=={COMPONENTIZE_PY}"
        );
        let version = componentize_py()
            .arg("--version")
            .output()
            .map_err(|e| format!("componentize-py is needed to build Python policies but cannot be run ({e}); {install}"))?;
        let version = String::from_utf8_lossy(&version.stdout);
        if !version.contains(COMPONENTIZE_PY) {
            return Err(format!(
                "Python policies are built with componentize-py {COMPONENTIZE_PY}, but `componentize-py --version` says `{}`; {install}",
                version.trim()
            ));
        }
        let status = componentize_py()
            .arg("-d")
            .arg(self.wit)
            .args(["-w", self.world, "componentize", self.module, "-p"])
            .arg(self.dir)
            .args(self.paths.iter().flat_map(|p| [Path::new("-p"), p]))
            .arg("-o")
            .arg(self.out)
            .stdout(to_stderr())
            .status()
            .map_err(|e| format!("failed to run componentize-py: {e}"))?;
        if !status.success() {
            return Err(format!(
                "componentize-py failed to build {} ({status}); its errors are above",
                self.dir.join(format!("{}.py", self.module)).display()
            ));
        }
        Ok(())
    }
}

/// `componentize-py` from PATH, else from python3's scripts directory (where pip
/// puts it even when that directory is not on PATH, e.g. before `pyenv rehash`).
fn componentize_py() -> Command {
    let on_path = Command::new("componentize-py")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if on_path {
        return Command::new("componentize-py");
    }
    let scripts = Command::new("python3")
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_path('scripts'))",
        ])
        .output();
    match scripts {
        Ok(o) if o.status.success() => Command::new(
            PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()).join("componentize-py"),
        ),
        _ => Command::new("componentize-py"),
    }
}

/// A JavaScript guest build with the componentize-js installed in `node_project`.
pub struct JsBuild<'a> {
    /// The directory whose `node_modules` holds componentize-js.
    pub node_project: &'a Path,
    /// The policy module: `policy.js`, or `policy.ts` (bundled with esbuild first).
    pub source: &'a Path,
    pub wit: &'a Path,
    pub world: &'a str,
    pub out: &'a Path,
    /// Leave componentize-js's HTTP support in (the component then imports
    /// `wasi:http`, which loopbox refuses; only tests want this).
    pub keep_http: bool,
}

impl JsBuild<'_> {
    pub fn run(&self) -> Result<(), Error> {
        check_node()?;
        if !self
            .node_project
            .join("node_modules/@bytecodealliance/componentize-js")
            .is_dir()
        {
            return Err(format!(
                "componentize-js is not installed in {}; install the npm packages with:\n    npm install --prefix {}",
                self.node_project.display(),
                self.node_project.display()
            ));
        }
        let typescript = self
            .source
            .extension()
            .is_some_and(|e| e == "ts" || e == "mts");
        if typescript && !self.node_project.join("node_modules/esbuild").is_dir() {
            return Err(format!(
                "{} is TypeScript, which is compiled with esbuild {ESBUILD}, but esbuild is not installed in {}; install it with:\n    npm install --prefix {} --save-dev esbuild@{ESBUILD}",
                self.source.display(),
                self.node_project.display(),
                self.node_project.display()
            ));
        }
        let status = Command::new("node")
            .args(["--input-type=module", "-e", COMPONENTIZE_JS_SCRIPT, "--"])
            .arg(self.source)
            .arg(self.wit)
            .arg(self.world)
            .arg(self.out)
            .arg(if self.keep_http {
                "keep-http"
            } else {
                "no-http"
            })
            .current_dir(self.node_project)
            .stdout(to_stderr())
            .status()
            .map_err(|e| format!("failed to run node: {e}"))?;
        if !status.success() {
            return Err(format!(
                "componentize-js failed to build {} ({status}); its errors are above",
                self.source.display()
            ));
        }
        Ok(())
    }
}

/// Fails, saying how to install it, when `node` cannot be run.
pub fn check_node() -> Result<(), Error> {
    let node = Command::new("node").arg("--version").output();
    if !node.is_ok_and(|o| o.status.success()) {
        return Err(
            "Node.js is needed to build JavaScript policies but `node` cannot be run; install Node.js 20 or later (e.g. `apt-get install nodejs npm`)".into()
        );
    }
    Ok(())
}

/// `npm install` in `dir` (the versions its package.json pins).
pub fn npm_install(dir: &Path) -> Result<(), Error> {
    let status = Command::new("npm")
        .args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(dir)
        .stdout(to_stderr())
        .status()
        .map_err(|e| format!("npm is needed to install the JavaScript build tools but cannot be run ({e}); install Node.js 20 or later with npm"))?;
    if !status.success() {
        return Err(format!(
            "`npm install` failed in {} ({status}); its errors are above",
            dir.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TypeScript policy in a project whose node_modules has componentize-js
    /// but no esbuild (a project made before TypeScript support) is refused
    /// before Node runs, with the command that installs the pinned esbuild.
    #[test]
    fn typescript_without_esbuild_says_how_to_install_it() {
        if check_node().is_err() {
            eprintln!("skipped: node is not installed, and it is checked first");
            return;
        }
        let dir =
            std::env::temp_dir().join(format!("loopbox-guest-build-ts-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("node_modules/@bytecodealliance/componentize-js"))
            .unwrap();
        std::fs::write(dir.join("policy.ts"), "export const policy = {};\n").unwrap();
        let (source, wit, out) = (dir.join("policy.ts"), dir.join("wit"), dir.join("out.wasm"));
        let build = JsBuild {
            node_project: &dir,
            source: &source,
            wit: &wit,
            world: "decider",
            out: &out,
            keep_http: false,
        };
        let e = build.run().unwrap_err();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            e.contains("policy.ts is TypeScript, which is compiled with esbuild 0.28.2, but esbuild is not installed in")
                && e.ends_with(&format!(
                    "install it with:\n    npm install --prefix {} --save-dev esbuild@0.28.2",
                    dir.display()
                )),
            "{e}"
        );
    }
}
