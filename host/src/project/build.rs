//! `loopbox build`: turn a project into `NAME.wasm` with its language's pinned
//! toolchain (the same steps that build this repository's own guests, from
//! `loopbox-guest-build`). A JavaScript project's `policy.ts` is TypeScript,
//! bundled with the project's pinned esbuild before componentize-js.

use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow, bail};
use loopbox_guest_build::toolchain::{
    CargoBuild, JsBuild, PythonBuild, TARGET, check_node, npm_install,
};

use super::{Language, Manifest};

/// Build the project in `dir`; returns the component's path (`dir/NAME.wasm`).
pub fn build(dir: &Path, manifest: &Manifest) -> Result<PathBuf> {
    let out = dir.join(format!("{}.wasm", manifest.name));
    let wit = dir.join("wit");
    if manifest.language != Language::Rust && !wit.join("policy.wit").is_file() {
        bail!(
            "`{}` is missing: a {} policy is built against loopbox's contract; copy wit/ from a project made by `loopbox new`",
            wit.join("policy.wit").display(),
            manifest.language.title()
        );
    }
    match manifest.language {
        Language::Rust => {
            let target_dir = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| dir.join("target"));
            let built = CargoBuild {
                dir,
                target_dir: &target_dir,
                packages: &[manifest.name.as_str()],
                nested: false,
                target: TARGET,
            }
            .run()
            .map_err(|e| anyhow!(e))?;
            std::fs::copy(&built[0].1, &out).map_err(|e| {
                anyhow!(
                    "cannot copy {} to {}: {e}",
                    built[0].1.display(),
                    out.display()
                )
            })?;
        }
        Language::Python => {
            if !dir.join("app.py").is_file() {
                bail!(
                    "`{}` is missing: a Python policy's `Policy` class lives in app.py",
                    dir.join("app.py").display()
                );
            }
            PythonBuild {
                dir,
                module: "app",
                // The SDK is vendored in the project (`loopbox_policy/`).
                paths: &[],
                wit: &wit,
                world: &manifest.world,
                out: &out,
            }
            .run()
            .map_err(|e| anyhow!(e))?;
        }
        Language::Js => {
            // TypeScript when there is a policy.ts (a policy.js beside it may be tsc's output).
            let Some(source) = ["policy.ts", "policy.js"]
                .into_iter()
                .map(|f| dir.join(f))
                .find(|p| p.is_file())
            else {
                bail!(
                    "`{}` is missing: a JavaScript policy exports `policy` from policy.js (or, in TypeScript, policy.ts)",
                    dir.join("policy.js").display()
                );
            };
            check_node().map_err(|e| anyhow!(e))?;
            let typescript = source.extension().is_some_and(|e| e == "ts");
            if !dir
                .join("node_modules/@bytecodealliance/componentize-js")
                .is_dir()
                || (typescript && !dir.join("node_modules/esbuild").is_dir())
            {
                if !dir.join("package.json").is_file() {
                    bail!(
                        "`{}` is missing: it pins the componentize-js that builds the policy; copy it from a project made by `loopbox new`",
                        dir.join("package.json").display()
                    );
                }
                crate::errln!(
                    "installing the npm packages in {} (first build only)",
                    dir.display()
                );
                npm_install(dir).map_err(|e| anyhow!(e))?;
            }
            JsBuild {
                node_project: dir,
                source: &source,
                wit: &wit,
                world: &manifest.world,
                out: &out,
                keep_http: false,
            }
            .run()
            .map_err(|e| anyhow!(e))?;
        }
    }
    Ok(out)
}
