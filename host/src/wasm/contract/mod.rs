//! The released versions of loopbox's contract (`wit/released/VERSION/`), and
//! which one a component was built for.
//!
//! A released contract never changes. The host keeps one set of bindings per
//! released version: the newest is [`crate::bindings`], which the rest
//! of loopbox speaks; an older one ([`v0_1`], [`v0_2`], [`v0_3`]) links the same
//! capabilities through `From` conversions, sees events adapted down (a 0.1.0
//! policy has no `origin`) and has its decisions adapted up. A component names its version
//! in its interface names (`loopbox:policy/policy@0.1.0`); [`detect`] reads it
//! from the `policy` export, and refuses a version this loopbox does not have,
//! saying which it needs and which this loopbox supports.

use anyhow::{Result, bail};
use serde::Serialize;

/// What every older contract's module has alike: linking its interfaces to the
/// newest's capabilities, and its action requests and results converted to and
/// from the newest's. Expanded inside each `v0_N` module, where `actions`,
/// `state`, `workspace`, `log`, `types` and `latest` name that version's
/// bindings and the newest's.
macro_rules! older_imports {
    // 0.3.0 had a prompt's profile and cwd, and the worktree calls: they
    // convert like the rest.
    (worktrees) => {
        impl From<actions::PromptRequest> for latest::actions::PromptRequest {
            fn from(r: actions::PromptRequest) -> Self {
                Self {
                    text: r.text,
                    kind: older_imports!(@kind r.kind),
                    model: r.model,
                    session: r.session,
                    timeout_ms: r.timeout_ms,
                    profile: r.profile,
                    cwd: r.cwd,
                }
            }
        }
        older_imports!(@common {
            async fn worktree_add(
                &mut self,
                branch: String,
            ) -> wasmtime::Result<Result<String, actions::ActionError>> {
                let r = latest::actions::Host::worktree_add(self, branch).await?;
                Ok(r.map_err(Into::into))
            }

            async fn worktree_remove(
                &mut self,
                path: String,
            ) -> wasmtime::Result<Result<(), actions::ActionError>> {
                let r = latest::actions::Host::worktree_remove(self, path).await?;
                Ok(r.map_err(Into::into))
            }
        });
    };
    () => {
        /// A 0.1.0 or 0.2.0 prompt goes to the `[agent]` section, in the workspace root.
        impl From<actions::PromptRequest> for latest::actions::PromptRequest {
            fn from(r: actions::PromptRequest) -> Self {
                Self {
                    text: r.text,
                    kind: older_imports!(@kind r.kind),
                    model: r.model,
                    session: r.session,
                    timeout_ms: r.timeout_ms,
                    profile: None,
                    cwd: None,
                }
            }
        }
        older_imports!(@common {});
    };
    (@kind $k:expr) => {
        match $k {
            actions::PromptKind::Prompt => latest::actions::PromptKind::Prompt,
            actions::PromptKind::SlashCommand => latest::actions::PromptKind::SlashCommand,
        }
    };
    (@common { $($more:tt)* }) => {
        /// Link this contract's interfaces to the same capabilities as the newest's.
        pub(crate) fn add_to_linker<T: Send + 'static>(
            linker: &mut Linker<T>,
            caps: Capabilities<T>,
        ) -> Result<()> {
            // `types` has no functions; any capability can stand for it.
            types::add_to_linker::<T, HasSelf<ActionsHost>>(linker, caps.actions)
                .map_err(crate::wasm_err)?;
            actions::add_to_linker::<T, HasSelf<ActionsHost>>(linker, caps.actions)
                .map_err(crate::wasm_err)?;
            state::add_to_linker::<T, HasSelf<StateHost>>(linker, caps.state)
                .map_err(crate::wasm_err)?;
            workspace::add_to_linker::<T, HasSelf<WorkspaceHost>>(linker, caps.workspace)
                .map_err(crate::wasm_err)?;
            log::add_to_linker::<T, HasSelf<LogHost>>(linker, caps.log).map_err(crate::wasm_err)?;
            Ok(())
        }

        impl types::Host for ActionsHost {}

        // Action requests up, their results down.

        impl From<actions::ShellRequest> for latest::actions::ShellRequest {
            fn from(r: actions::ShellRequest) -> Self {
                match r {
                    actions::ShellRequest::Exec(c) => Self::Exec(latest::actions::Command {
                        argv: c.argv,
                        cwd: c.cwd,
                        env: c.env,
                        stdin: c.stdin,
                        timeout_ms: c.timeout_ms,
                    }),
                    actions::ShellRequest::Script(s) => Self::Script(latest::actions::Script {
                        source: s.source,
                        cwd: s.cwd,
                        timeout_ms: s.timeout_ms,
                    }),
                }
            }
        }

        impl From<latest::actions::Output> for actions::Output {
            fn from(o: latest::actions::Output) -> Self {
                Self {
                    exit_code: o.exit_code,
                    stdout: o.stdout,
                    stderr: o.stderr,
                    duration_ms: o.duration_ms,
                    timed_out: o.timed_out,
                    truncated: o.truncated,
                    session: o.session,
                }
            }
        }

        impl From<latest::actions::ActionError> for actions::ActionError {
            fn from(e: latest::actions::ActionError) -> Self {
                use latest::actions::ActionError as E;
                match e {
                    E::Denied(s) => Self::Denied(s),
                    E::Declined(s) => Self::Declined(s),
                    E::BudgetExhausted(s) => Self::BudgetExhausted(s),
                    E::Invalid(s) => Self::Invalid(s),
                    E::Unavailable(s) => Self::Unavailable(s),
                    E::OutcomeUnknown => Self::OutcomeUnknown,
                }
            }
        }

        type ActionResult = wasmtime::Result<Result<actions::Output, actions::ActionError>>;

        impl actions::Host for ActionsHost {
            async fn shell(&mut self, req: actions::ShellRequest) -> ActionResult {
                let r = latest::actions::Host::shell(self, req.into()).await?;
                Ok(r.map(Into::into).map_err(Into::into))
            }

            async fn prompt(&mut self, req: actions::PromptRequest) -> ActionResult {
                let r = latest::actions::Host::prompt(self, req.into()).await?;
                Ok(r.map(Into::into).map_err(Into::into))
            }

            $($more)*
        }

        impl state::Host for StateHost {
            async fn get(&mut self, key: String) -> wasmtime::Result<Option<String>> {
                latest::loopbox::policy::state::Host::get(self, key).await
            }

            async fn set(
                &mut self,
                key: String,
                value: String,
            ) -> wasmtime::Result<Result<(), String>> {
                latest::loopbox::policy::state::Host::set(self, key, value).await
            }

            async fn remove(&mut self, key: String) -> wasmtime::Result<()> {
                latest::loopbox::policy::state::Host::remove(self, key).await
            }

            async fn keys(&mut self, prefix: String) -> wasmtime::Result<Vec<String>> {
                latest::loopbox::policy::state::Host::keys(self, prefix).await
            }
        }

        impl workspace::Host for WorkspaceHost {
            async fn read(&mut self, path: String) -> wasmtime::Result<Result<String, String>> {
                latest::loopbox::policy::workspace::Host::read(self, path).await
            }

            async fn list_dir(
                &mut self,
                dir: String,
            ) -> wasmtime::Result<Result<Vec<String>, String>> {
                latest::loopbox::policy::workspace::Host::list_dir(self, dir).await
            }
        }

        impl log::Host for LogHost {
            async fn write(&mut self, level: log::Level, message: String) -> wasmtime::Result<()> {
                use latest::loopbox::policy::log::Level as L;
                let level = match level {
                    log::Level::Debug => L::Debug,
                    log::Level::Info => L::Info,
                    log::Level::Warn => L::Warn,
                    log::Level::Error => L::Error,
                };
                latest::loopbox::policy::log::Host::write(self, level, message).await
            }

            async fn progress(&mut self, message: String) -> wasmtime::Result<()> {
                latest::loopbox::policy::log::Host::progress(self, message).await
            }
        }
    };
}

pub mod v0_1;
pub mod v0_2;
pub mod v0_3;

/// The contract's WIT package name.
pub const PACKAGE: &str = "loopbox:policy";

/// A released contract version this loopbox loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Contract {
    /// `wit/released/0.1.0`: events without `origin`.
    #[serde(rename = "0.1.0")]
    V0_1,
    /// `wit/released/0.2.0`: `origin` on `turn` and `tool-call`.
    #[serde(rename = "0.2.0")]
    V0_2,
    /// `wit/released/0.3.0`: `profile` and `cwd` on `prompt-request`,
    /// `worktree-add` and `worktree-remove`.
    #[serde(rename = "0.3.0")]
    V0_3,
    /// `wit/released/0.4.0`: the `sleep` decision; `worktree-at`, `mcp-call`,
    /// `snapshot`, `restore` and `forget-snapshot`; the `spend` interface.
    #[serde(rename = "0.4.0")]
    V0_4,
}

/// Every released version, oldest first.
pub const RELEASED: [Contract; 4] = [
    Contract::V0_1,
    Contract::V0_2,
    Contract::V0_3,
    Contract::V0_4,
];

impl Contract {
    /// The version `wit/policy.wit` declares, which `loopbox new`, the SDKs and
    /// the builtins target.
    pub const LATEST: Contract = Contract::V0_4;

    /// `0.4.0`.
    pub const fn version(self) -> &'static str {
        match self {
            Contract::V0_1 => "0.1.0",
            Contract::V0_2 => "0.2.0",
            Contract::V0_3 => "0.3.0",
            Contract::V0_4 => "0.4.0",
        }
    }

    /// The full name of one of its interfaces: `loopbox:policy/NAME@VERSION`.
    pub fn interface(self, name: &str) -> String {
        format!("{PACKAGE}/{name}@{}", self.version())
    }

    fn of_version(v: &str) -> Option<Contract> {
        RELEASED.into_iter().find(|c| c.version() == v)
    }
}

impl std::fmt::Display for Contract {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{PACKAGE}@{}", self.version())
    }
}

/// `0.1.0, 0.2.0, 0.3.0 and 0.4.0`: the versions this loopbox supports, for messages.
pub fn supported() -> String {
    let v: Vec<&str> = RELEASED.iter().map(|c| c.version()).collect();
    match v.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => v.join(""),
    }
}

/// `MAJOR.MINOR.PATCH` as numbers; `None` for anything else (a pre-release too).
fn numeric(v: &str) -> Option<(u64, u64, u64)> {
    let mut parts = v.split('.').map(|p| p.parse::<u64>().ok());
    let r = (parts.next()??, parts.next()??, parts.next()??);
    parts.next().is_none().then_some(r)
}

/// The contract version named by the component's `loopbox:policy/policy@VERSION`
/// exports: the newest this loopbox supports, or an error naming what it
/// needs, what this loopbox supports and what to do.
pub fn detect(exports: &[String]) -> Result<Contract> {
    let prefix = format!("{PACKAGE}/policy@");
    let claimed: Vec<&str> = exports
        .iter()
        .filter_map(|e| e.strip_prefix(&prefix))
        .collect();
    if let Some(c) = claimed.iter().filter_map(|v| Contract::of_version(v)).max() {
        return Ok(c);
    }
    let latest = Contract::LATEST;
    let Some(wanted) = claimed
        .iter()
        .copied()
        .max_by_key(|v| numeric(v).unwrap_or_default())
    else {
        let names = if exports.is_empty() {
            "none".to_string()
        } else {
            exports.join(", ")
        };
        bail!(
            "it is a component of another world: it does not export `{}` of any loopbox contract (its exports: {names}); this loopbox supports contracts {}: build it against world `loop-policy` or `decider` of `{latest}` (loopbox's wit/, or a project made by `loopbox new`)",
            latest.interface("policy"),
            supported()
        );
    };
    let wanted = crate::ui::shorten(wanted, 40);
    let newer = numeric(&wanted).is_some_and(|v| v > numeric(latest.version()).unwrap_or_default());
    if newer {
        bail!(
            "it was built for contract `{PACKAGE}@{wanted}`, newer than this loopbox, which supports {}: upgrade loopbox to a version that supports {wanted}, or rebuild the policy against `{latest}`",
            supported()
        );
    }
    bail!(
        "it was built for contract `{PACKAGE}@{wanted}`, which was never released: this loopbox supports {}; rebuild the policy against `{latest}` (loopbox's wit/, or a project made by `loopbox new`)",
        supported()
    )
}

/// The contract a component claims, read from its top-level exports without
/// compiling it (for `runs show`, which runs nothing); `None` when it claims
/// none this loopbox supports or is not a component.
pub fn of_component(wasm: &[u8]) -> Option<Contract> {
    let mut exports = Vec::new();
    // Nested modules and components come inline, each from its `Version` to its `End`.
    let mut depth = 0usize;
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        match payload.ok()? {
            wasmparser::Payload::Version { .. } => depth += 1,
            wasmparser::Payload::End(_) => depth = depth.saturating_sub(1),
            wasmparser::Payload::ComponentExportSection(section) if depth == 1 => {
                for export in section {
                    exports.push(export.ok()?.name.name.to_string());
                }
            }
            _ => {}
        }
    }
    detect(&exports).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// blake3 of each `wit/released/VERSION/policy.wit`. A released contract
    /// never changes: a policy built against it must keep loading. Releasing a
    /// version adds a line here (and a `Contract` case with its bindings).
    const RELEASED_DIGESTS: [(&str, &str); 4] = [
        (
            "0.1.0",
            "e60efe7de7e95c3fa83df6ed789067d39bf09a342b09455750609fbfd68e2428",
        ),
        (
            "0.2.0",
            "a7c7e8ab4ffe3f60d1df709e0cda3b5ce3ff6d0ce6e2d68ad1170427a702fb6c",
        ),
        (
            "0.3.0",
            "e11956f2e925825cf18bf6c614d22ce06a077cf09659604a0b7b4d6ca61d0e4d",
        ),
        (
            "0.4.0",
            // With `spend` (issue 36), added before 0.4.0 was released in a stop.
            "a4d4a4c4c88c5fece8c6a156cf02d6576d0a9150522c6df1d8763aca2309c1ff",
        ),
    ];

    fn wit() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit")
    }

    #[test]
    fn released_contracts_never_change() {
        let dir = wit().join("released");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        on_disk.sort();
        let listed: Vec<&str> = RELEASED_DIGESTS.iter().map(|(v, _)| *v).collect();
        assert_eq!(
            on_disk, listed,
            "each directory of wit/released/ has a digest here"
        );
        let known: Vec<&str> = RELEASED.iter().map(|c| c.version()).collect();
        assert_eq!(
            listed, known,
            "each released version has bindings (`Contract`)"
        );
        for (version, digest) in RELEASED_DIGESTS {
            let path = dir.join(version).join("policy.wit");
            let text = std::fs::read(&path).unwrap();
            assert_eq!(
                blake3::hash(&text).to_hex().as_str(),
                digest,
                "{} changed: a released contract never changes; put the change in wit/policy.wit under a new version",
                path.display()
            );
            let package = format!("package {PACKAGE}@{version};");
            assert!(
                String::from_utf8_lossy(&text).contains(&package),
                "{}",
                path.display()
            );
        }
    }

    /// `wit/policy.wit` is the newest released version, as released: an edit to
    /// it without a new version is what broke every 0.1.0 policy once.
    #[test]
    fn the_current_contract_is_the_newest_released_one() {
        let current = std::fs::read_to_string(wit().join("policy.wit")).unwrap();
        let released = wit().join(format!(
            "released/{}/policy.wit",
            Contract::LATEST.version()
        ));
        assert!(
            current == std::fs::read_to_string(&released).unwrap(),
            "wit/policy.wit differs from {}: a change to the contract needs a new version (see docs/authoring/contract.md)",
            released.display()
        );
    }

    fn exports(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn each_released_version_is_detected_and_the_newest_wins() {
        for c in RELEASED {
            assert_eq!(detect(&[c.interface("policy")]).unwrap(), c);
        }
        let both = exports(&["loopbox:policy/policy@0.1.0", "loopbox:policy/policy@0.2.0"]);
        assert_eq!(detect(&both).unwrap(), Contract::V0_2);
        assert_eq!(supported(), "0.1.0, 0.2.0, 0.3.0 and 0.4.0");
    }

    #[test]
    fn a_newer_or_unknown_contract_says_what_it_needs_and_what_is_supported() {
        let e = detect(&exports(&["loopbox:policy/policy@9.0.0"]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("built for contract `loopbox:policy@9.0.0`, newer than this loopbox, which supports 0.1.0, 0.2.0, 0.3.0 and 0.4.0: upgrade loopbox"),
            "{e}"
        );
        let e = detect(&exports(&["loopbox:policy/policy@0.5.0"]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("newer than this loopbox"), "{e}");
        let e = detect(&exports(&["loopbox:policy/policy@0.0.9"]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("never released") && e.contains("0.1.0, 0.2.0, 0.3.0 and 0.4.0"),
            "{e}"
        );
        let e = detect(&exports(&["wasi:cli/run@0.2.0"]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("component of another world")
                && e.contains("supports contracts 0.1.0, 0.2.0, 0.3.0 and 0.4.0"),
            "{e}"
        );
    }
}
