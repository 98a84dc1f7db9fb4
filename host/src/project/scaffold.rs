//! `loopbox new`: a policy project that builds with `loopbox build` and runs with
//! `loopbox run`. The templates, the contract and the language's guest SDK
//! (`loopbox-guest/` for Rust, `loopbox_policy/` for Python, `loopbox-policy/`
//! for JavaScript and TypeScript) are embedded in the binary and written into
//! the project, so a scaffold needs nothing but the language's toolchain, and
//! the SDK it was made with stays with it, matching its `wit/`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use super::{Language, MANIFEST, check_name};

const WIT: &str = include_str!("../../../wit/policy.wit");
const SDK_LIB: &str = include_str!("../../../guests/rust/sdk/src/lib.rs");
/// Where the SDK finds the contract in the repository, and in a scaffold.
const SDK_WIT_IN_REPO: &str = "path: \"../../../wit/released/0.4.0\"";
const SDK_WIT_IN_SCAFFOLD: &str = "path: \"../wit\"";

/// The Python SDK (`guests/python/sdk/loopbox_policy`), vendored beside app.py,
/// where componentize-py finds it with the project's own modules.
const PYTHON_SDK: &[(&str, &str)] = &[
    (
        "loopbox_policy/__init__.py",
        include_str!("../../../guests/python/sdk/loopbox_policy/__init__.py"),
    ),
    (
        "loopbox_policy/_errors.py",
        include_str!("../../../guests/python/sdk/loopbox_policy/_errors.py"),
    ),
    (
        "loopbox_policy/_types.py",
        include_str!("../../../guests/python/sdk/loopbox_policy/_types.py"),
    ),
    (
        "loopbox_policy/state.py",
        include_str!("../../../guests/python/sdk/loopbox_policy/state.py"),
    ),
    (
        "loopbox_policy/log.py",
        include_str!("../../../guests/python/sdk/loopbox_policy/log.py"),
    ),
    (
        "loopbox_policy/workspace.py",
        include_str!("../../../guests/python/sdk/loopbox_policy/workspace.py"),
    ),
    (
        "loopbox_policy/py.typed",
        include_str!("../../../guests/python/sdk/loopbox_policy/py.typed"),
    ),
];

/// The JavaScript SDK (`guests/js/sdk`) with its TypeScript declarations,
/// vendored as `loopbox-policy/`.
const JS_SDK: &[(&str, &str)] = &[
    (
        "loopbox-policy/index.js",
        include_str!("../../../guests/js/sdk/index.js"),
    ),
    (
        "loopbox-policy/actions.js",
        include_str!("../../../guests/js/sdk/actions.js"),
    ),
    (
        "loopbox-policy/errors.js",
        include_str!("../../../guests/js/sdk/errors.js"),
    ),
    (
        "loopbox-policy/index.d.ts",
        include_str!("../../../guests/js/sdk/index.d.ts"),
    ),
    (
        "loopbox-policy/actions.d.ts",
        include_str!("../../../guests/js/sdk/actions.d.ts"),
    ),
    (
        "loopbox-policy/errors.d.ts",
        include_str!("../../../guests/js/sdk/errors.d.ts"),
    ),
    (
        "loopbox-policy/contract.d.ts",
        include_str!("../../../guests/js/sdk/contract.d.ts"),
    ),
];

/// The files of a new project, as (relative path, contents).
pub fn files(name: &str, language: Language) -> Vec<(&'static str, String)> {
    let fill = |template: &str| {
        template
            .replace("{{name}}", name)
            .replace("{{type}}", &type_name(name))
            .replace("{{language}}", language.title())
            .replace("{{language_key}}", language.key())
            .replace("{{build_note}}", build_note(language))
            .replace("{{files}}", source_list(language))
            .replace("{{js_packages}}", &js_packages())
    };
    let mut files = vec![
        ("README.md", fill(include_str!("../../templates/README.md"))),
        (
            ".gitignore",
            include_str!("../../templates/gitignore").to_string(),
        ),
        (MANIFEST, fill(include_str!("../../templates/policy.toml"))),
        (
            "loopbox.toml",
            fill(include_str!("../../templates/loopbox.toml")),
        ),
        ("wit/policy.wit", WIT.to_string()),
        // `loopbox test` runs these against the built NAME.wasm (docs/authoring/testing.md).
        (
            "scenarios/check.scenario.yaml",
            fill(include_str!(
                "../../templates/scenarios/check.scenario.yaml"
            )),
        ),
        (
            "scenarios/gives-up.scenario.yaml",
            fill(include_str!(
                "../../templates/scenarios/gives-up.scenario.yaml"
            )),
        ),
    ];
    match language {
        Language::Rust => {
            debug_assert!(
                SDK_LIB.contains(SDK_WIT_IN_REPO),
                "the SDK's wit path changed; update scaffold.rs"
            );
            files.push((
                "Cargo.toml",
                fill(include_str!("../../templates/rust/Cargo.toml")),
            ));
            files.push((
                "src/lib.rs",
                fill(include_str!("../../templates/rust/src/lib.rs")),
            ));
            files.push((
                "loopbox-guest/Cargo.toml",
                include_str!("../../templates/rust/sdk.Cargo.toml").to_string(),
            ));
            files.push((
                "loopbox-guest/src/lib.rs",
                SDK_LIB.replace(SDK_WIT_IN_REPO, SDK_WIT_IN_SCAFFOLD),
            ));
        }
        Language::Python => {
            files.push((
                "app.py",
                fill(include_str!("../../templates/python/app.py")),
            ));
            files.extend(PYTHON_SDK.iter().map(|(p, c)| (*p, c.to_string())));
        }
        Language::Js => {
            files.push((
                "policy.js",
                fill(include_str!("../../templates/js/policy.js")),
            ));
            files.push((
                "package.json",
                fill(include_str!("../../templates/js/package.json")),
            ));
            files.extend(JS_SDK.iter().map(|(p, c)| (*p, c.to_string())));
        }
    }
    files
}

/// Create `parent/name` with a new project. Nothing is left behind on failure, and
/// an existing path is never touched.
pub fn create(parent: &Path, name: &str, language: Language) -> Result<PathBuf> {
    check_name(name)?;
    let target = parent.join(name);
    if target.symlink_metadata().is_ok() {
        bail!(
            "`{}` already exists; choose another name or remove it",
            target.display()
        );
    }
    // Written aside and renamed into place, so an interrupted `new` leaves no half project.
    let staging = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .tempdir_in(parent)
        .with_context(|| format!("cannot create a directory in `{}`", parent.display()))?;
    for (rel, contents) in files(name, language) {
        let path = staging.path().join(rel);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create `{}`", dir.display()))?;
        }
        std::fs::write(&path, contents)
            .with_context(|| format!("cannot write `{}`", path.display()))?;
    }
    let staged = staging.keep();
    if let Err(e) = std::fs::rename(&staged, &target) {
        let _ = std::fs::remove_dir_all(&staged);
        return Err(e).with_context(|| format!("cannot create `{}`", target.display()));
    }
    Ok(target)
}

/// `green-tests` → `GreenTests`.
fn type_name(name: &str) -> String {
    name.split('-')
        .map(|w| w[..1].to_ascii_uppercase() + &w[1..])
        .collect()
}

fn build_note(language: Language) -> &'static str {
    match language {
        Language::Rust => "runs `cargo build --release --target wasm32-wasip2`",
        Language::Python => "runs componentize-py 0.25.1 on `app.py`",
        Language::Js => {
            "installs the npm packages in `package.json` (the first time) and runs componentize-js on `policy.js` (or on `policy.ts`, bundled with esbuild first)"
        }
    }
}

fn source_list(language: Language) -> &'static str {
    match language {
        Language::Rust => {
            "- `src/lib.rs`: the policy, a type implementing `loopbox_guest::Policy`.\n- `loopbox-guest/`: the Rust guest SDK, vendored.\n"
        }
        Language::Python => {
            "- `app.py`: the policy, a `Policy` class built on `loopbox_policy.Policy`.\n- `loopbox_policy/`: the Python SDK, vendored.\n"
        }
        Language::Js => {
            "- `policy.js`: the policy, exported as `policy` (rename it `policy.ts` to write TypeScript).\n- `loopbox-policy/`: the JavaScript SDK with its TypeScript declarations, vendored.\n- `package.json`: the pinned componentize-js and esbuild.\n"
        }
    }
}

fn js_packages() -> String {
    let entries: Vec<String> = loopbox_guest_build::toolchain::JS_PACKAGES
        .iter()
        .map(|(p, v)| format!("    \"{p}\": \"{v}\""))
        .collect();
    format!("{{\n{}\n  }}", entries.join(",\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_template_is_filled() {
        for language in [Language::Rust, Language::Python, Language::Js] {
            for (rel, contents) in files("green-tests", language) {
                let placeholder = contents.match_indices("{{").any(|(i, _)| {
                    let rest = &contents[i + 2..];
                    rest.find("}}").is_some_and(|end| {
                        end > 0
                            && rest[..end]
                                .chars()
                                .all(|c| c.is_ascii_lowercase() || c == '_')
                    })
                });
                assert!(
                    !placeholder,
                    "{rel} ({language:?}) has an unfilled placeholder"
                );
            }
        }
        let rust = files("green-tests", Language::Rust);
        let sdk = &rust
            .iter()
            .find(|(p, _)| *p == "loopbox-guest/src/lib.rs")
            .unwrap()
            .1;
        assert!(sdk.contains(SDK_WIT_IN_SCAFFOLD) && !sdk.contains(SDK_WIT_IN_REPO));
        assert!(
            rust.iter()
                .any(|(p, c)| *p == "src/lib.rs" && c.contains("struct GreenTests;"))
        );
        let js = files("p", Language::Js);
        let package: serde_json::Value =
            serde_json::from_str(&js.iter().find(|(p, _)| *p == "package.json").unwrap().1)
                .unwrap();
        assert_eq!(
            package["devDependencies"]["@bytecodealliance/componentize-js"],
            "0.23.0"
        );
        assert_eq!(
            package["devDependencies"]["esbuild"],
            loopbox_guest_build::toolchain::ESBUILD
        );
    }

    /// Every file of each SDK in the repository is vendored, as it is, and the
    /// templates use the SDKs: a module added to an SDK without being added
    /// here would leave `loopbox new` projects that do not build.
    #[test]
    fn the_python_and_javascript_sdks_are_vendored_whole() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for (language, repo_dir, vendored_dir, exts) in [
            (
                Language::Python,
                "guests/python/sdk/loopbox_policy",
                "loopbox_policy",
                &["py", "typed"][..],
            ),
            (
                Language::Js,
                "guests/js/sdk",
                "loopbox-policy",
                &["js", "ts"][..],
            ),
        ] {
            let project = files("green-tests", language);
            let mut in_repo: Vec<String> = std::fs::read_dir(root.join(repo_dir))
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| {
                    p.is_file() && p.extension().is_some_and(|e| exts.iter().any(|x| e == *x))
                })
                .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
                .collect();
            in_repo.sort();
            let mut vendored: Vec<String> = project
                .iter()
                .filter_map(|(p, _)| p.strip_prefix(&format!("{vendored_dir}/")))
                .map(String::from)
                .collect();
            vendored.sort();
            assert_eq!(vendored, in_repo, "{language:?}");
            for name in &in_repo {
                let text = std::fs::read_to_string(root.join(repo_dir).join(name)).unwrap();
                let path = format!("{vendored_dir}/{name}");
                assert!(
                    project.iter().any(|(p, c)| *p == path && *c == text),
                    "{path} differs from {repo_dir}/{name}"
                );
            }
        }
        let python = files("green-tests", Language::Python);
        let app = &python.iter().find(|(p, _)| *p == "app.py").unwrap().1;
        assert!(app.contains("from loopbox_policy import") && app.contains("class Policy(Base):"));
        let js = files("green-tests", Language::Js);
        let policy = &js.iter().find(|(p, _)| *p == "policy.js").unwrap().1;
        assert!(
            policy.contains("from './loopbox-policy/index.js'")
                && policy.contains("from './loopbox-policy/actions.js'")
        );
    }

    #[test]
    fn create_refuses_to_overwrite_and_leaves_nothing_half_done() {
        let dir = tempfile::tempdir().unwrap();
        let made = create(dir.path(), "p", Language::Python).unwrap();
        assert!(made.join("app.py").is_file() && made.join("wit/policy.wit").is_file());
        let e = create(dir.path(), "p", Language::Js)
            .unwrap_err()
            .to_string();
        assert!(e.contains("already exists"), "{e}");
        assert!(!made.join("policy.js").exists());
        assert!(create(dir.path(), "Bad Name", Language::Js).is_err());
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["p"]);
    }
}
