//! `loopbox doctor`: what this machine and workspace support, and what
//! `loopbox run` would use: the OS sandboxes, the configured sandbox, what it
//! protects and hides, the compiled-component cache, the store, the agent,
//! what running as root changes, and the shell rules that cannot be safe
//! (`["sed"]`, whose language runs commands, allows `sed` alone).

use std::path::Path;

use clap::Args;
use serde_json::json;

use super::{Failure, exit};
use loopbox::config::Config;
use loopbox::exec::sandbox::{Sandbox, support};

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Config file (default: loopbox.toml in the workspace)
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    /// Print one JSON object
    #[arg(long)]
    pub(super) json: bool,
}

pub fn execute(args: DoctorArgs, workspace: &Path) -> Result<i32, Failure> {
    let (config, config_path) =
        Config::discover(args.config.as_deref(), workspace).map_err(Failure::usage)?;
    let s = support();
    let sandbox = Sandbox::decide(config.shell.sandbox, s);
    let landlock = match s.landlock_usable() {
        Ok(abi) => format!("yes (ABI {abi})"),
        Err(e) => format!("no: {e}"),
    };
    let bwrap = match &s.bwrap {
        Ok(p) => format!("yes ({})", p.display()),
        Err(e) => format!("no: {e}"),
    };
    let chosen = match &sandbox {
        Sandbox::None { why } => format!("none ({why})"),
        Sandbox::Unavailable(why) => format!("UNAVAILABLE: {why}; every command will be refused"),
        other => other.name(),
    };
    let cache =
        loopbox::wasm::cache::ComponentCache::default_dir(config.engine.cache_dir.as_deref());
    let root = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_path_buf());
    let agent = match &config.agent {
        None => "none configured ([agent] in loopbox.toml)".to_string(),
        // `runner = "openai"`: a server, no program to look for.
        Some(a) if a.program().is_none() => a.describe(),
        Some(a) => {
            let program = a.describe();
            match config
                .shell
                .child_env(&root)
                .resolve_program(&program, &root)
            {
                // bwrap's /tmp is private: what holds the program there is bound back.
                Some(p)
                    if matches!(sandbox, Sandbox::Bwrap(_))
                        && p.starts_with("/tmp")
                        && !p.starts_with(&root) =>
                {
                    format!(
                        "{program} ({}; under /tmp, so bound read-only into the sandbox's private /tmp)",
                        p.display()
                    )
                }
                Some(p) => format!("{program} ({})", p.display()),
                None => format!(
                    "{program} NOT FOUND on shell.path = `{}`",
                    config.shell.path
                ),
            }
        }
    };
    // YAML loops run their shell actions with bash, as little-loops does.
    let bash = match config.shell.child_env(&root).resolve_program("bash", &root) {
        Some(p) => format!(
            "YAML loops' shell actions run with bash ({}), as in little-loops; other policies' scripts with sh",
            p.display()
        ),
        None => format!(
            "NOT FOUND on shell.path = `{}`: YAML loops' shell actions, which run with bash as in little-loops, will be refused (`loopbox validate LOOP.yaml` names the lines that need bash)",
            config.shell.path
        ),
    };
    let landlock_limits = match s.landlock_usable() {
        Ok(abi) => format!(
            "cannot keep a missing protected name from being created, so commands create nothing in the workspace root; {}; {}",
            if abi >= 6 {
                "abstract UNIX sockets and signals scoped (ABI 6+)"
            } else {
                "no socket or signal scopes (ABI 6+ has them)"
            },
            if abi >= 9 {
                "UNIX sockets confined to the workspace (ABI 9+)"
            } else {
                "UNIX sockets refused unless shell.unix_sockets (ABI 9+ confines them)"
            }
        ),
        Err(_) => "-".into(),
    };
    let protected = loopbox::exec::sandbox::protect::NAMES
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| !config.shell.writable.iter().any(|w| w == n))
        .collect::<Vec<_>>()
        .join(" ");
    let hidden = loopbox::exec::sandbox::hide::Hidden::new(&config.shell, &root);
    let hidden_now = hidden.for_commands(&hidden.agent_state(config.agent.as_ref()));
    let hidden_line = if hidden_now.is_empty() {
        "nothing here yet (credential stores in ~ and shell.hide, unreadable in the sandbox)"
            .to_string()
    } else {
        let shown: Vec<String> = hidden_now.iter().map(|p| hidden.show(p)).collect();
        format!("{} (unreadable in the sandbox)", shown.join(" "))
    };
    // Rules that cannot mean what they seem to (`["sed"]`: sed's language runs commands).
    let rule_warnings = loopbox::exec::grants::rule_warnings(
        std::iter::once(&config.shell).chain(config.policies.values().map(|p| &p.shell)),
        &root,
    );
    // SAFETY: geteuid(2) cannot fail.
    let root_user = unsafe { libc::geteuid() } == 0;
    let root_line = if sandbox.is_enforced() {
        "yes: commands and the agent run with no capabilities and no_new_privs, and seccomp refuses mount, mknod, bpf, perf_event_open, reboot, module loading and the like; /etc/shadow, /etc/gshadow, private host keys and root's credential stores (in /root too) are hidden"
    } else {
        "yes, and with no sandbox enforced commands run with root's full rights"
    };
    let config_line = config_path
        .as_ref()
        .map_or("none (defaults: nothing granted)".to_string(), |p| {
            p.display().to_string()
        });
    if args.json {
        let v = json!({
            "landlock": s.landlock.as_ref().ok(), "landlock_error": s.landlock.as_ref().err(),
            "bwrap": s.bwrap.as_ref().ok(), "bwrap_error": s.bwrap.as_ref().err(),
            "sandbox": sandbox.name(), "sandbox_enforced": sandbox.is_enforced(), "sandbox_note": chosen,
            "config": config_path, "cache_dir": cache, "agent": agent, "network": config.shell.network, "egress": network_line(&sandbox, &config),
            "landlock_limits": landlock_limits, "protected": protected, "unix_sockets": config.shell.unix_sockets,
            "hidden": hidden_now, "root": root_user, "loop_shell": bash,
            "rule_warnings": rule_warnings,
        });
        loopbox::outln!(
            "{}",
            serde_json::to_string_pretty(&v).expect("serializable")
        );
    } else {
        let line = |k: &str, v: &str| loopbox::outln!("{k:<18}{v}");
        line("landlock", &landlock);
        line("bubblewrap", &bwrap);
        line(
            "sandbox",
            &format!(
                "{chosen} (shell.sandbox = \"{}\")",
                config.shell.sandbox.name()
            ),
        );
        if root_user {
            line("root", root_line);
        }
        line("network", &network_line(&sandbox, &config));
        line(
            "protected",
            &format!(
                "{protected}, the config, the policy, the agent program (read-only in the sandbox)"
            ),
        );
        line("hidden", &hidden_line);
        if s.landlock_usable().is_ok() {
            line("landlock limits", &landlock_limits);
        }
        line("config", &config_line);
        line("component cache", &cache.display().to_string());
        line("agent", &agent);
        line("loop shell", &bash);
        for w in &rule_warnings {
            line("rule warning", w);
        }
    }
    // Non-zero when commands could not run as configured.
    Ok(if matches!(sandbox, Sandbox::Unavailable(_)) {
        exit::FAILURE
    } else {
        exit::OK
    })
}

/// How commands and the agent reach the network here: only through the
/// run's proxy, and what holds them to it.
fn network_line(sandbox: &Sandbox, config: &loopbox::config::Config) -> String {
    let granted = if config.shell.network {
        "commands: any public host (shell.network = true; name hosts in [network] allow instead)"
            .to_string()
    } else if config.network.allow.is_empty() {
        "commands: none ([network] allows nothing)".to_string()
    } else {
        format!(
            "commands: {} destination(s) in [network] allow",
            config.network.allow.len()
        )
    };
    let how = match sandbox {
        Sandbox::Bwrap(_) => "only through loopbox's proxy: each sandbox has a network namespace of its own, the proxy's port made in it".to_string(),
        Sandbox::Landlock(abi) if *abi >= 4 => format!("only through loopbox's proxy: Landlock ABI {abi} allows TCP connects to its port alone, seccomp refuses UDP and raw sockets"),
        Sandbox::Landlock(abi) => format!("refused: Landlock ABI {abi} cannot confine TCP (ABI 4 can); commands that need the network fail with the reason"),
        Sandbox::None { .. } => "not enforced (no sandbox): the proxy variables are set, nothing holds a program to them".to_string(),
        Sandbox::Unavailable(_) => "refused: no sandbox can be enforced".to_string(),
    };
    format!("{how}; {granted}")
}
