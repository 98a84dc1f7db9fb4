//! The command line a hook entry runs: this loopbox, the policy and config as
//! every clone can name them, and what `install` pins (event, workspace, digest).

use std::path::Path;

use anyhow::{Context, Result, anyhow};
use clap::ValueEnum;

use super::super::json_arg;
use super::{EntryArgs, Scope, in_workspace};
use loopbox::config::Config;
use loopbox::exec::grants::shell_quote;
use loopbox::hook::agents::Agent;
use loopbox::wasm::policy::PolicySource;

/// `path` as the hook command should name it: relative to the workspace when inside it, so a
/// shared settings file works on every clone; absolute otherwise.
fn portable(workspace: &Path, path: &Path, what: &str) -> Result<String> {
    let real = path
        .canonicalize()
        .with_context(|| format!("{what} `{}` not found", path.display()))?;
    let root = workspace
        .canonicalize()
        .with_context(|| format!("the workspace `{}` cannot be used", workspace.display()))?;
    Ok(match real.strip_prefix(&root) {
        Ok(rel) if !rel.as_os_str().is_empty() => rel.to_string_lossy().into_owned(),
        _ => real.to_string_lossy().into_owned(),
    })
}

/// The first file called `name` in the directories of PATH.
pub(super) fn on_path(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// The program to put in a hook command: `loopbox` when that is this binary on PATH, else its absolute path.
fn program() -> Result<(String, bool)> {
    let exe =
        std::env::current_exe().context("cannot find the loopbox executable to put in the hook")?;
    let exe = exe.canonicalize().unwrap_or(exe);
    let on_path = on_path("loopbox").and_then(|p| p.canonicalize().ok());
    Ok(match on_path {
        Some(p) if p == exe => ("loopbox".to_string(), true),
        _ => (exe.to_string_lossy().into_owned(), false),
    })
}

/// The command line the agent runs for this entry, and whether it names only what every machine has.
///
/// It pins what was installed: the event (so an input loopbox cannot read is still
/// answered as that event), the workspace (`--root`, for the project and local
/// scopes: a `cwd` elsewhere, a planted `sub/loopbox.toml` included, is never
/// adopted) and a component's blake3 (`--digest`: another file at that path is refused).
pub(super) fn hook_command(
    agent: Agent,
    e: &EntryArgs,
    workspace: &Path,
    pin: bool,
) -> Result<(String, bool)> {
    let (program, on_path) = program()?;
    let config_file = e.config.as_ref().map(|c| in_workspace(workspace, c));
    let installed = Config::discover(config_file.as_deref(), workspace)?
        .0
        .policies
        .contains_key(&e.policy);
    let mut digest = None;
    let policy = match PolicySource::parse(&e.policy) {
        // An installed name travels as itself: the hook resolves it from the config.
        _ if installed => e.policy.clone(),
        PolicySource::Builtin(_) => e.policy.clone(),
        PolicySource::Path(p) => {
            let file = in_workspace(workspace, &p);
            // Uninstalling matches a hook whatever digest it pinned.
            if pin {
                let bytes = loopbox::files::read_capped(&file, loopbox::files::MAX_COMPONENT_BYTES)
                    .map_err(|err| anyhow!("policy `{}` cannot be read: {err}", file.display()))?;
                digest = Some(blake3::hash(&bytes).to_hex().to_string());
            }
            // A user-wide hook runs in every project: a relative path would name each project's own file.
            if e.scope == Scope::User {
                file.canonicalize()
                    .with_context(|| format!("policy `{}` not found", file.display()))?
                    .to_string_lossy()
                    .into_owned()
            } else {
                portable(workspace, &p, "policy")?
            }
        }
    };
    let mut portable_paths = !Path::new(&policy).is_absolute();
    let mut argv = vec![
        program,
        "hook".into(),
        agent.id().into(),
        "--policy".into(),
        policy,
        "--event".into(),
        e.event.clone(),
    ];
    if e.scope != Scope::User {
        let root = workspace
            .canonicalize()
            .with_context(|| format!("the workspace `{}` cannot be used", workspace.display()))?;
        argv.extend(["--root".into(), root.to_string_lossy().into_owned()]);
    }
    if let Some(d) = digest {
        argv.extend(["--digest".into(), d]);
    }
    if let Some(input) = &e.input {
        argv.push("--input".into());
        argv.push(
            json_arg("--input", input)
                .map_err(|f| f.error)?
                .trim()
                .to_string(),
        );
    }
    if let Some(c) = &e.config {
        let c = if e.scope == Scope::User {
            in_workspace(workspace, c)
                .canonicalize()
                .with_context(|| format!("config `{}` not found", c.display()))?
                .to_string_lossy()
                .into_owned()
        } else {
            portable(workspace, c, "config")?
        };
        portable_paths &= !Path::new(&c).is_absolute();
        argv.extend(["--config".into(), c]);
    }
    if let Some(o) = e.on_error {
        argv.extend([
            "--on-error".into(),
            o.to_possible_value()
                .expect("no skipped variants")
                .get_name()
                .to_string(),
        ]);
    }
    if let Some(t) = e.timeout {
        argv.extend(["--timeout".into(), t.to_string()]);
    }
    // The agents run hook commands through a shell.
    Ok((
        argv.iter()
            .map(|a| shell_quote(a))
            .collect::<Vec<_>>()
            .join(" "),
        on_path && portable_paths,
    ))
}

/// Gemini CLI matches its own tool names: `Bash` becomes `run_shell_command`, in each `|` alternative.
pub(super) fn native_matcher(agent: Agent, matcher: &str) -> String {
    matcher
        .split('|')
        .map(|m| agent.native_tool_name(m).unwrap_or(m))
        .collect::<Vec<_>>()
        .join("|")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemini_matchers_use_its_tool_names() {
        assert_eq!(
            native_matcher(Agent::Gemini, "Bash|Edit|custom_tool"),
            "run_shell_command|replace|custom_tool"
        );
        assert_eq!(native_matcher(Agent::ClaudeCode, "Bash|Edit"), "Bash|Edit");
    }
}
