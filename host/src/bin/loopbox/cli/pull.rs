//! `loopbox pull [NAME...]`: fetch what `loopbox.lock` pins into the local
//! store, so installed registry policies run offline. It fetches by manifest
//! digest, never by tag: a tag that moved since `loopbox add` changes nothing.
//! It approves nothing: a registry policy the lock does not pin is reported,
//! for `loopbox add` to review.

use std::path::{Path, PathBuf};

use clap::Args;
use serde_json::json;

use super::{Failure, exit};
use loopbox::config::Config;
use loopbox::dist::admit::digest;
use loopbox::dist::lock::{Lock, path_for};
use loopbox::dist::reference::Reference;
use loopbox::dist::registry::Registry;
use loopbox::run::installed::{is_registry, store};

#[derive(Debug, Args)]
#[command(
    after_help = "Exit codes:\n  0  every pinned policy is here\n  1  a registry could not be reached, or sent something that does not match the lock\n  2  a registry policy in the config is not in loopbox.lock (`loopbox add` it), or a bad config or lock"
)]
pub struct PullArgs {
    /// Only these installed policies (default: all of them)
    names: Vec<String>,
    /// Config file (default: loopbox.toml in the workspace)
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Print one JSON object on stdout
    #[arg(long)]
    pub(super) json: bool,
}

pub fn execute(args: PullArgs, workspace: &Path) -> Result<i32, Failure> {
    let (config, config_path) =
        Config::discover(args.config.as_deref(), workspace).map_err(Failure::usage)?;
    let lock = Lock::read(&path_for(config_path.as_deref(), workspace)).map_err(Failure::usage)?;
    let store = store(&config);
    let wanted = |n: &String| args.names.is_empty() || args.names.contains(n);
    for n in &args.names {
        if !config.policies.contains_key(n) {
            return Err(Failure::usage(anyhow::anyhow!(
                "there is no [policies.{n}] in the config"
            )));
        }
    }
    let unpinned: Vec<&String> = config
        .policies
        .iter()
        .filter(|(n, e)| wanted(n) && is_registry(&e.source) && !lock.policies.contains_key(*n))
        .map(|(n, _)| n)
        .collect();

    let mut report = Vec::new();
    let mut failed = None;
    for (name, locked) in lock.policies.iter().filter(|(n, _)| wanted(n)) {
        let here = store
            .path(&locked.component)
            .ok()
            .and_then(|p| loopbox::files::read_capped(&p, loopbox::files::MAX_COMPONENT_BYTES).ok())
            .is_some_and(|b| digest(&b) == locked.digest);
        if here {
            report.push(json!({"name": name, "source": locked.source, "fetched": false}));
            continue;
        }
        let result = Reference::parse(&locked.source).and_then(|r| {
            loopbox::errln!("fetching {name} ({}@{})", locked.source, locked.manifest);
            let pulled = Registry::new(&r).pull(&r, Some(&locked.manifest))?;
            if pulled.layer != locked.component || digest(&pulled.component) != locked.digest {
                anyhow::bail!(
                    "the registry's {} holds component {}, not the {} ({}) loopbox.lock pins; nothing was stored",
                    locked.manifest,
                    pulled.layer,
                    locked.component,
                    locked.digest
                );
            }
            store.put(&locked.component, &pulled.component)
        });
        match result {
            Ok(_) => report.push(json!({"name": name, "source": locked.source, "fetched": true})),
            // The first failure is the command's error; any later ones are printed here.
            Err(e) if failed.is_some() => loopbox::errln!(
                "error: failed to pull `{name}`: {}",
                loopbox::ui::Untrusted(&format!("{e:#}"))
            ),
            Err(e) => failed = Some(e.context(format!("failed to pull `{name}`"))),
        }
    }
    if args.json {
        loopbox::outln!("{}", json!({"policies": report, "unpinned": unpinned}));
    } else {
        for r in &report {
            loopbox::outln!(
                "{}: {} ({})",
                r["name"].as_str().unwrap_or_default(),
                if r["fetched"] == true {
                    "fetched"
                } else {
                    "already here"
                },
                r["source"].as_str().unwrap_or_default()
            );
        }
    }
    if let Some(e) = failed {
        return Err(Failure {
            code: exit::FAILURE,
            error: e,
        });
    }
    if !unpinned.is_empty() {
        let list: Vec<String> = unpinned.iter().map(|n| format!("`{n}`")).collect();
        return Err(Failure::usage(anyhow::anyhow!(
            "{} in the config but not in loopbox.lock: `loopbox add SOURCE --name NAME` reviews and pins each",
            list.join(", ")
        )));
    }
    Ok(exit::OK)
}
