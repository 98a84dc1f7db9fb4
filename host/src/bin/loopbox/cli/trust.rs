//! `loopbox trust [PATH]`: approve a config file once, after reviewing what it
//! grants; `--list` and `--revoke PATH`. `loopbox run` and the hooks obey only
//! approved configs (see `loopbox::trust`); `run` asks on a terminal instead.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::anyhow;
use clap::Args;
use serde_json::json;

use super::{Failure, exit};
use loopbox::config::{Config, Discovered};
use loopbox::run::launch::LaunchError;
use loopbox::run::trust::Approver;
use loopbox::trust::{NotTrusted, TrustStore};

#[derive(Debug, Args)]
pub struct TrustArgs {
    /// The config file to approve (default: loopbox.toml in the workspace)
    path: Option<PathBuf>,
    /// List the approved configs, and whether each still matches its file
    #[arg(long, conflicts_with_all = ["path", "revoke"])]
    list: bool,
    /// Forget the approval of this config file
    #[arg(long, value_name = "PATH", conflicts_with = "path")]
    revoke: Option<PathBuf>,
    /// Print the result as JSON on stdout
    #[arg(long)]
    pub(super) json: bool,
}

pub fn execute(args: TrustArgs, workspace: &Path) -> Result<i32, Failure> {
    let store = TrustStore::for_user().map_err(Failure::usage)?;
    if args.list {
        return list(&store, args.json);
    }
    if let Some(path) = &args.revoke {
        let was = store.revoke(path).map_err(Failure::usage)?;
        if args.json {
            loopbox::outln!("{}", json!({"path": path, "revoked": was}));
        } else if was {
            loopbox::outln!("`{}` is no longer trusted", path.display());
        } else {
            loopbox::outln!("`{}` was not trusted; nothing to revoke", path.display());
        }
        return Ok(exit::OK);
    }
    let path = args
        .path
        .clone()
        .unwrap_or_else(|| workspace.join(loopbox::files::CONFIG_FILE));
    if !path.exists() {
        return Err(Failure::usage(anyhow!(
            "there is no config `{}` to trust; name one, or create it first",
            path.display()
        )));
    }
    let found = Config::discover_hashed(Some(&path), workspace).map_err(Failure::usage)?;
    let approval = record(&store, &found)?;
    let grants = loopbox::trust::grants(&found.config);
    if args.json {
        loopbox::outln!(
            "{}",
            json!({"path": approval.path, "blake3": approval.blake3, "trusted": true, "grants": grants})
        );
    } else {
        loopbox::outln!("`{}` grants:", approval.path.display());
        for line in &grants {
            loopbox::outln!("  {line}");
        }
        loopbox::outln!(
            "trusted `{}` (blake3 {}); a change to it needs `loopbox trust` again",
            approval.path.display(),
            &approval.blake3[..16]
        );
    }
    Ok(exit::OK)
}

fn record(store: &TrustStore, found: &Discovered) -> Result<loopbox::trust::Approval, Failure> {
    let (Some(path), Some(hash)) = (&found.path, &found.blake3) else {
        return Err(Failure::usage(anyhow!("no config file to trust")));
    };
    store.approve(path, hash).map_err(Failure::internal)
}

fn list(store: &TrustStore, json: bool) -> Result<i32, Failure> {
    let all = store.list().map_err(Failure::internal)?;
    let now = |a: &loopbox::trust::Approval| match loopbox::files::read_capped(
        &a.path,
        loopbox::files::MAX_CONFIG_BYTES,
    ) {
        Ok(bytes) if loopbox::trust::digest(&bytes) == a.blake3 => "trusted",
        Ok(_) => "changed since",
        Err(_) => "missing",
    };
    if json {
        let items: Vec<_> = all
            .iter()
            .map(|a| json!({"path": a.path, "blake3": a.blake3, "trusted_at": loopbox::ui::rfc3339(a.at_ms), "status": now(a)}))
            .collect();
        loopbox::outln!("{}", serde_json::Value::Array(items));
        return Ok(exit::OK);
    }
    if all.is_empty() {
        loopbox::outln!("no config is trusted yet (in {})", store.dir().display());
    }
    for a in &all {
        loopbox::outln!("{}  {}  {}", a.path.display(), &a.blake3[..16], now(a));
    }
    Ok(exit::OK)
}

/// The person at the terminal of `loopbox run` and `loopbox runs`: asked about
/// a config the user's store refuses, with what it grants shown; without a
/// terminal (or with `CI` set) the store's refusal stands (exit 2).
pub struct AtTerminal;

impl Approver for AtTerminal {
    fn approve(
        &self,
        store: &TrustStore,
        found: &Discovered,
        untrusted: &NotTrusted,
    ) -> Result<(), LaunchError> {
        // As the run's other questions: no terminal, or `CI` set, means no one to ask.
        if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal())
            || std::env::var_os("CI").is_some()
        {
            return Err(LaunchError::usage(untrusted.clone()));
        }
        let mut err = std::io::stderr().lock();
        let _ = writeln!(
            err,
            "loopbox: `{}` is {}; it grants:",
            untrusted.path.display(),
            match untrusted.standing {
                loopbox::trust::Standing::Changed => "changed since you trusted it",
                _ => "new to loopbox",
            }
        );
        for line in loopbox::trust::grants(&found.config) {
            let _ = writeln!(err, "  {line}");
        }
        let _ = write!(err, "trust it and run? [y/N] ");
        let _ = err.flush();
        drop(err);
        let mut answer = String::new();
        let _ = std::io::stdin().lock().read_line(&mut answer);
        if matches!(answer.trim(), "y" | "Y" | "yes") {
            record(store, found).map_err(|f| LaunchError::internal(f.error))?;
            Ok(())
        } else {
            Err(LaunchError::usage(anyhow!(
                "{untrusted}; declined, nothing ran"
            )))
        }
    }
}

/// The user's trust store, for a run's [`loopbox::run::trust::Trust`].
pub fn user_store() -> Result<TrustStore, Failure> {
    TrustStore::for_user().map_err(Failure::usage)
}

/// After loopbox itself wrote `path` (`new`, `hook install`): record the approval of what it wrote.
pub fn approve_written(path: &Path, workspace: &Path) -> Result<Discovered, Failure> {
    let store = TrustStore::for_user().map_err(Failure::usage)?;
    let found = Config::discover_hashed(Some(path), workspace).map_err(Failure::usage)?;
    record(&store, &found)?;
    Ok(found)
}
