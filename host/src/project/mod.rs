//! A policy project on disk: its manifest (`policy.toml`) and language, and the
//! two things done to one: [`scaffold`] (`loopbox new`) and [`build`] (`loopbox build`).

pub mod build;
pub mod scaffold;

use std::path::Path;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

/// The file naming a project's language and world.
pub const MANIFEST: &str = "policy.toml";

/// A language a policy can be written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    Rust,
    Python,
    Js,
}

impl Language {
    /// The `language` value in policy.toml.
    pub fn key(self) -> &'static str {
        match self {
            Language::Rust => "rust",
            Language::Python => "python",
            Language::Js => "js",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Language::Rust => "Rust",
            Language::Python => "Python",
            Language::Js => "JavaScript",
        }
    }
}

/// What `loopbox build` builds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub name: String,
    pub language: Language,
    #[serde(default = "default_world")]
    pub world: String,
    /// `[needs]`: the grants the policy asks for, embedded in what `loopbox publish` pushes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs: Option<crate::dist::needs::Needs>,
}

fn default_world() -> String {
    "loop-policy".into()
}

impl Manifest {
    /// The project in `dir`: its policy.toml, or else what its files say (a
    /// Cargo.toml, an app.py, a policy.js or policy.ts) with the `loop-policy` world.
    pub fn read(dir: &Path) -> Result<Manifest> {
        let path = dir.join(MANIFEST);
        let manifest = if path.is_file() {
            let text =
                crate::files::read_text(&path, crate::files::MAX_CONFIG_BYTES, "policy manifest")?;
            toml::from_str::<Manifest>(&text)
                .with_context(|| format!("`{}` is not a valid policy manifest", path.display()))?
        } else {
            Manifest::detect(dir)?
        };
        check_name(&manifest.name).with_context(|| format!("in `{}`", path.display()))?;
        if !["loop-policy", "decider"].contains(&manifest.world.as_str()) {
            bail!(
                "`{}`: world `{}` is not one of loopbox's worlds: use \"loop-policy\" or \"decider\"",
                path.display(),
                manifest.world
            );
        }
        Ok(manifest)
    }

    fn detect(dir: &Path) -> Result<Manifest> {
        if !dir.is_dir() {
            bail!("`{}` is not a directory", dir.display());
        }
        let dir_name = || {
            dir.canonicalize()
                .ok()
                .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
                .unwrap_or_default()
        };
        let (name, language) = if dir.join("Cargo.toml").is_file() {
            (cargo_package_name(&dir.join("Cargo.toml"))?, Language::Rust)
        } else if dir.join("app.py").is_file() {
            (dir_name(), Language::Python)
        } else if dir.join("policy.js").is_file() || dir.join("policy.ts").is_file() {
            (dir_name(), Language::Js)
        } else {
            bail!(
                "`{}` is not a policy project: it has no {MANIFEST}, Cargo.toml, app.py or policy.js; create one with `loopbox new NAME --lang rust|python|js`",
                dir.display()
            );
        };
        Ok(Manifest {
            name,
            language,
            world: default_world(),
            needs: None,
        })
    }
}

fn cargo_package_name(path: &Path) -> Result<String> {
    let text = crate::files::read_text(path, crate::files::MAX_CONFIG_BYTES, "Cargo manifest")?;
    let value: toml::Value =
        toml::from_str(&text).with_context(|| format!("`{}` is not valid TOML", path.display()))?;
    value
        .get("package")
        .and_then(|p| p.get("name"))
        .and_then(|n| n.as_str())
        .map(String::from)
        .with_context(|| format!("`{}` has no [package] name", path.display()))
}

/// A policy name: lower-case letters, digits and `-`, starting with a letter.
pub fn check_name(name: &str) -> Result<()> {
    let ok = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.ends_with('-');
    if !ok {
        bail!(
            "`{name}` is not a usable policy name: use lower-case letters, digits and `-`, starting with a letter (e.g. `green-tests`)"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        for good in ["a", "green-tests", "x2"] {
            check_name(good).unwrap();
        }
        for bad in [
            "",
            "Green",
            "2x",
            "a_b",
            "a-",
            "../x",
            "a b",
            &"a".repeat(65),
        ] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn manifests_are_read_or_detected() {
        let dir = tempfile::tempdir().unwrap();
        let e = format!("{:#}", Manifest::read(dir.path()).unwrap_err());
        assert!(
            e.contains("is not a policy project")
                && e.contains("loopbox new NAME --lang rust|python|js"),
            "{e}"
        );
        std::fs::write(
            dir.path().join("Cargo.toml"),
            "[package]\nname = \"my-gate\"\n",
        )
        .unwrap();
        assert_eq!(
            Manifest::read(dir.path()).unwrap(),
            Manifest {
                name: "my-gate".into(),
                language: Language::Rust,
                world: "loop-policy".into(),
                needs: None,
            }
        );
        std::fs::write(
            dir.path().join(MANIFEST),
            "name = \"p\"\nlanguage = \"python\"\nworld = \"decider\"\n",
        )
        .unwrap();
        assert_eq!(
            Manifest::read(dir.path()).unwrap().language,
            Language::Python
        );
        std::fs::write(
            dir.path().join(MANIFEST),
            "name = \"p\"\nlanguage = \"cobol\"\n",
        )
        .unwrap();
        assert!(
            format!("{:#}", Manifest::read(dir.path()).unwrap_err())
                .contains("unknown variant `cobol`")
        );
        std::fs::write(
            dir.path().join(MANIFEST),
            "name = \"p\"\nlanguage = \"js\"\nworld = \"server\"\n",
        )
        .unwrap();
        assert!(
            format!("{:#}", Manifest::read(dir.path()).unwrap_err())
                .contains("world `server` is not one of loopbox's worlds")
        );
    }
}
