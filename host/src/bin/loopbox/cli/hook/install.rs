//! `loopbox hook install|uninstall AGENT`: add or remove exactly one entry in
//! the agent's settings file, every other byte kept, and trust the config the
//! hook will obey.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};

use super::super::{Failure, exit};
use super::codex_trust;
use super::command::{hook_command, native_matcher};
use super::{EntryArgs, Scope, in_workspace};
use loopbox::hook::agents::{Agent, EventSpec};
use loopbox::hook::settings::{self, HookEntry};
use loopbox::hook::transcript;

/// The settings file an entry of `agent` goes into for `scope`.
fn settings_path(agent: Agent, scope: Scope, workspace: &Path) -> Result<PathBuf> {
    let home = || {
        std::env::var_os("HOME")
            .map(PathBuf::from)
            .context("HOME is not set, so the user's settings cannot be found")
    };
    let env_dir = |var: &str| {
        std::env::var_os(var)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    Ok(match (agent, scope) {
        (Agent::ClaudeCode, Scope::Project) => workspace.join(".claude/settings.json"),
        (Agent::ClaudeCode, Scope::Local) => workspace.join(".claude/settings.local.json"),
        (Agent::ClaudeCode, Scope::User) => transcript::claude_config_dir()
            .context("HOME is not set, so the user's settings cannot be found")?
            .join("settings.json"),
        (Agent::Codex, Scope::Project) => workspace.join(".codex/hooks.json"),
        (Agent::Codex, Scope::User) => match env_dir("CODEX_HOME") {
            Some(dir) => dir.join("hooks.json"),
            None => home()?.join(".codex/hooks.json"),
        },
        (Agent::Gemini, Scope::Project) => workspace.join(".gemini/settings.json"),
        (Agent::Gemini, Scope::User) => home()?.join(".gemini/settings.json"),
        (_, Scope::Local) => bail!(
            "{} has no local scope (only Claude Code does); use --scope project or --scope user",
            agent.title()
        ),
    })
}

fn check_event(agent: Agent, e: &EntryArgs) -> Result<EventSpec, Failure> {
    if !agent.known(&e.event) {
        let names: Vec<&str> = agent.events().iter().map(|s| s.name).collect();
        return Err(Failure::usage(anyhow!(
            "unknown {} hook event `{}`; its events are: {}",
            agent.title(),
            e.event,
            names.join(", ")
        )));
    }
    if e.event == "WorktreeCreate" {
        return Err(Failure::usage(anyhow!(
            "a WorktreeCreate hook must create the worktree and print its path, which a loop policy does not do"
        )));
    }
    let spec = agent.event(&e.event);
    if e.matcher.is_some() && !spec.matcher {
        return Err(Failure::usage(anyhow!(
            "{} {} hooks take no matcher; leave out --matcher",
            agent.title(),
            e.event
        )));
    }
    Ok(spec)
}

pub(super) fn edit(
    agent: Agent,
    e: EntryArgs,
    workspace: Option<&Path>,
    install: bool,
) -> Result<i32, Failure> {
    check_event(agent, &e)?;
    if e.trust && (agent != Agent::Codex || !install) {
        return Err(Failure::usage(anyhow!(
            "--trust is for `hook install codex`: only Codex asks you to review a hook before it runs"
        )));
    }
    let workspace = workspace.unwrap_or(Path::new("."));
    let path = settings_path(agent, e.scope, workspace).map_err(Failure::usage)?;
    let (command, portable_command) =
        hook_command(agent, &e, workspace, install).map_err(Failure::usage)?;
    let pins_digest = command.contains(" --digest ");
    let entry = HookEntry {
        event: e.event.clone(),
        matcher: e.matcher.as_deref().map(|m| native_matcher(agent, m)),
        command,
        timeout: e.timeout.map(|t| agent.timeout_field(t)),
    };
    let original = match loopbox::files::read_capped(&path, loopbox::files::MAX_CONFIG_BYTES) {
        Ok(bytes) => String::from_utf8(bytes)
            .map_err(|_| Failure::usage(anyhow!("`{}` is not UTF-8 text", path.display())))?,
        Err(err) if err.is_not_found() => String::new(),
        Err(err) => {
            return Err(Failure::usage(anyhow!(
                "cannot read `{}`: {err}",
                path.display()
            )));
        }
    };
    let changed = if install {
        settings::install(&original, &entry)
    } else {
        settings::uninstall(&original, &entry)
    };
    let changed = changed.map_err(|m| Failure::usage(anyhow!("`{}`: {m}", path.display())))?;
    let command = entry.command.clone();
    let what = format!(
        "{} {} hook for {}{}",
        agent.title(),
        e.event,
        e.policy,
        entry
            .matcher
            .as_ref()
            .map_or(String::new(), |m| format!(" (matcher {m})"))
    );
    match changed {
        Some(text) => {
            write_atomically(&path, &text).map_err(Failure::internal)?;
            loopbox::outln!(
                "{} the {what} in {}",
                if install { "installed" } else { "removed" },
                path.display()
            );
            if install && !portable_command && e.scope == Scope::Project {
                loopbox::outln!(
                    "note: the command names paths of this machine (loopbox is not on PATH, or the policy is outside the project); \
                     for a settings file others share, put loopbox on PATH and the policy in the project, or use --scope {}",
                    if agent == Agent::ClaudeCode {
                        "local"
                    } else {
                        "user"
                    }
                );
            }
            if install {
                trust_config(&e, workspace)?;
            }
            if install && e.scope != Scope::User {
                loopbox::outln!(
                    "note: the hook answers only in this workspace (--root){}; on another machine or clone, run `loopbox hook install` there",
                    if pins_digest {
                        ", and runs only this build of the policy (--digest): after rebuilding it, run `loopbox hook install` again"
                    } else {
                        ""
                    }
                );
            }
            if install && agent == Agent::Codex && !e.trust {
                loopbox::outln!(
                    "note: Codex reads a project's .codex/hooks.json only when the project is trusted, and runs a new or changed hook only after you review it \
                     (/hooks in Codex; for `codex exec`, run this again with --trust)"
                );
            }
        }
        None if install => loopbox::outln!("the {what} is already installed in {}", path.display()),
        None => loopbox::outln!("no {what} in {}; nothing to remove", path.display()),
    }
    if e.trust {
        let codex = codex_trust::codex_on_path().map_err(Failure::usage)?;
        let key = codex_trust::trust(&codex, workspace, &path, &command).map_err(Failure::usage)?;
        loopbox::outln!("Codex trusts the hook ({key}), as if you had reviewed it in /hooks");
    }
    Ok(exit::OK)
}

/// `hook install` is the user's word for the config the hook will obey: record it, showing what it grants.
fn trust_config(e: &EntryArgs, workspace: &Path) -> Result<(), Failure> {
    let path = match &e.config {
        Some(c) => in_workspace(workspace, c),
        None => workspace.join(loopbox::files::CONFIG_FILE),
    };
    if !path.is_file() {
        return Ok(());
    }
    let found = super::super::trust::approve_written(&path, workspace)?;
    loopbox::outln!(
        "trusted `{}`, which the hook obeys; it grants:",
        path.display()
    );
    for line in loopbox::trust::grants(&found.config) {
        loopbox::outln!("  {line}");
    }
    Ok(())
}

fn write_atomically(path: &Path, text: &str) -> Result<()> {
    let dir = path.parent().expect("settings path has a parent");
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create `{}`", dir.display()))?;
    let name = path
        .file_name()
        .map_or("settings".into(), |n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(".{name}.loopbox-{}", std::process::id()));
    std::fs::write(&tmp, text).with_context(|| format!("cannot write `{}`", tmp.display()))?;
    if let Ok(meta) = std::fs::metadata(path) {
        let _ = std::fs::set_permissions(&tmp, meta.permissions());
    }
    std::fs::rename(&tmp, path).with_context(|| format!("cannot replace `{}`", path.display()))?;
    if !path.is_file() {
        bail!("`{}` was not written", path.display());
    }
    Ok(())
}
