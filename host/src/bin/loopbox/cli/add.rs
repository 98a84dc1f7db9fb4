//! `loopbox add SOURCE`: install a policy under grants of its own. It fetches
//! the component (from an OCI registry, checked against its digests, or a local
//! file), checks its signature against `[trust.keys]`, shows what it imports
//! and the grants it asks for, and only after the user approves writes
//! `[policies.NAME]` into `loopbox.toml` and its signer into `loopbox.lock`
//! (with its pins, for a registry policy). Adding a name that is installed
//! upgrades it: what the new version asks beyond the current grants, and a
//! signer other than the one recorded, are shown and need approval again.

use std::path::{Path, PathBuf};

use clap::Args;
use serde_json::json;

use super::drive::read_answer;
use super::{Failure, exit};
use loopbox::config::{CONFIG_FILE, Config};
use loopbox::dist::admit::{Admitted, Refused, digest, judge};
use loopbox::dist::grant::{Grant, apply};
use loopbox::dist::lock::{LocalSigner, Lock, Locked, path_for};
use loopbox::dist::needs::Needs;
use loopbox::dist::reference::{Reference, SCHEME};
use loopbox::dist::registry::Registry;
use loopbox::dist::sign::verify;
use loopbox::run::installed::store;
use loopbox::ui::Ui;
use loopbox::wasm::inspect::capabilities;
use loopbox::wasm::policy::PolicySource;

#[derive(Debug, Args)]
#[command(
    after_help = "Exit codes:\n  0  added (or upgraded)\n  1  the registry could not be reached or refused\n  2  refused: not approved, unsigned or signed by an untrusted key, tampered, not a policy, or a bad config"
)]
pub struct AddArgs {
    /// oci://REGISTRY/REPOSITORY:TAG, or a path to a .wasm component
    source: String,
    /// Install it as [policies.NAME] (default: the repository's or file's name)
    #[arg(long)]
    name: Option<String>,
    /// Approve the grants it asks for without asking (for scripts: nothing is approved otherwise)
    #[arg(long)]
    yes: bool,
    /// Accept it unsigned, or signed by a key [trust.keys] does not list (writes unsigned = true)
    #[arg(long)]
    allow_unsigned: bool,
    /// Config file to install into (default: loopbox.toml in the workspace)
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Print one JSON object on stdout
    #[arg(long)]
    pub(super) json: bool,
}

/// The component and where it came from.
struct Fetched {
    bytes: Vec<u8>,
    source: String,
    /// For a registry policy: what goes in the lock (and the stored copy's path).
    locked: Option<Locked>,
    path: PathBuf,
    default_name: String,
}

pub fn execute(args: AddArgs, workspace: &Path) -> Result<i32, Failure> {
    let config_file = args
        .config
        .clone()
        .unwrap_or_else(|| workspace.join(CONFIG_FILE));
    let (config, _) =
        Config::discover(args.config.as_deref(), workspace).map_err(Failure::usage)?;
    let fetched = fetch(&args.source, &config, workspace)?;
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| fetched.default_name.clone());
    let current = config.policies.get(&name).cloned();
    let label = format!("`{name}` ({})", fetched.source);

    // Who signed it, before anything is compiled.
    let signature = verify(&fetched.bytes)
        .map_err(|e| Failure::usage(e.context(format!("{label} is refused"))))?;
    let unsigned_ok = args.allow_unsigned || current.as_ref().is_some_and(|c| c.unsigned);
    let admitted = judge(signature, &config.trust, unsigned_ok).map_err(|refused| {
        Failure::usage(match refused {
            Refused::Untrusted(k) => anyhow::anyhow!(
                "{label} is signed by {k}, a key [trust.keys] does not list; nothing was changed. \
                 If you trust its author, add `AUTHOR = \"{k}\"` under [trust.keys] in loopbox.toml, or pass --allow-unsigned"
            ),
            Refused::Unsigned => anyhow::anyhow!(
                "{label} is unsigned; nothing was changed. Ask its author for a signed build, \
                 or pass --allow-unsigned if you trust it as it is"
            ),
        })
    })?;
    let signed_line = match &admitted {
        Admitted::Unsigned { signer: Some(k) } => {
            format!("signed by {k}, which [trust.keys] does not list (accepted: --allow-unsigned)")
        }
        Admitted::Unsigned { signer: None } => "unsigned (accepted: --allow-unsigned)".to_string(),
        trusted => trusted.describe(),
    };
    let trusted_key = match &admitted {
        Admitted::Trusted { key, .. } => Some(key.clone()),
        _ => None,
    };
    let signer = match &admitted {
        Admitted::Trusted { key, .. } | Admitted::Unsigned { signer: Some(key) } => Some(key),
        _ => None,
    };
    let digest = digest(&fetched.bytes);

    let needs = Needs::read(&fetched.bytes)
        .map_err(|e| Failure::usage(e.context(format!("{label} is refused"))))?
        .unwrap_or_default();
    let runtime = super::runtime(&config, workspace)?;
    let policy = runtime
        .load(&PolicySource::Path(fetched.path.clone()))
        .map_err(Failure::usage)?;
    let caps = capabilities(&policy);

    // What to approve: everything it asks for, or on an upgrade what it asks beyond the grants it has.
    let (asked, upgrade) = match &current {
        None => (needs.clone(), false),
        Some(c) => (
            needs.beyond(&c.shell, c.agent.is_some(), &c.workspace.read),
            true,
        ),
    };
    let mut review = vec![
        format!("{:<12}{name}", "policy"),
        format!("{:<12}{}", "source", fetched.source),
        format!("{:<12}{digest}", "digest"),
        format!("{:<12}{signed_line}", "signature"),
        format!("{:<12}loopbox:policy/{}", "world", policy.world.name()),
        format!(
            "{:<12}{}",
            "imports",
            if caps.is_empty() {
                "none".into()
            } else {
                caps.join(", ")
            }
        ),
        format!("{:<12}{}", "asks for", needs.summary()),
    ];
    if let Some(c) = &current {
        review.insert(
            1,
            format!("{:<12}upgrading [policies.{name}] (now {})", "", c.source),
        );
    }
    let diff = asked.lines();
    if upgrade && !diff.is_empty() {
        review.push(format!("it asks for more than [policies.{name}] grants:"));
        review.extend(diff.iter().map(|l| format!("  + {l}")));
    } else if !upgrade {
        review.push(format!("[policies.{name}] will grant: {}", asked.summary()));
    }
    // Who signed the version installed now (what the lock recorded), against who
    // signed this one: another key is a trust decision of its own, from a
    // registry or a local file alike.
    let lock_path = path_for(Some(&config_file), workspace);
    let lock = Lock::read(&lock_path).map_err(Failure::usage)?;
    let recorded = lock
        .policies
        .get(&name)
        .map(|l| l.signed_by.as_ref())
        .or_else(|| lock.local.get(&name).map(|l| l.signed_by.as_ref()));
    let signer_change = match (&current, recorded) {
        (Some(c), Some(old)) if old != signer => Some((c, old)),
        // A local policy added before its signer was recorded: nobody approved one yet.
        (Some(c), None) if fetched.locked.is_none() && !c.source.starts_with("builtin:") => {
            Some((c, None))
        }
        _ => None,
    }
    .map(|(c, old)| {
        let who = |key: Option<&String>| match key {
            Some(k) => match config.trust.name_of(k) {
                Some(n) => format!("`{n}` ({k})"),
                None => format!("{k}, a key [trust.keys] does not list"),
            },
            None if c.unsigned => "unsigned (or not recorded)".to_string(),
            None => "not recorded".to_string(),
        };
        // The new side has no record to miss: no signer is an unsigned component.
        let new = signer.map_or_else(|| "unsigned".to_string(), |k| who(Some(k)));
        format!("{} -> {new}", who(old))
    });
    if let Some(change) = &signer_change {
        review.push(format!(
            "it is signed by another key than the version installed now: {change}"
        ));
    }
    let needs_yes = !upgrade || !diff.is_empty() || signer_change.is_some();
    for line in &review {
        // Needs, signer and names come from the component: escaped, one line each.
        loopbox::errln!("{}", loopbox::ui::Untrusted(line));
    }
    if needs_yes && !args.yes {
        let question = if upgrade && signer_change.is_some() && !diff.is_empty() {
            "Accept the new signer, and grant what it asks for beyond its current grants?"
        } else if signer_change.is_some() {
            "Accept the new signer?"
        } else if upgrade {
            "Grant what it asks for beyond its current grants?"
        } else {
            "Install it with these grants?"
        };
        let ok = read_answer(&Ui::quiet(), question, "[y/N] ")
            .is_some_and(|a| matches!(a.trim(), "y" | "Y" | "yes"));
        if !ok {
            return Err(Failure::usage(anyhow::anyhow!(
                "{label} was not approved; nothing was changed. Approve at a terminal, or pass --yes"
            )));
        }
    }

    // Write the config (checked before it replaces the old one), then the lock.
    let old = if config_file.exists() {
        loopbox::files::read_text(&config_file, loopbox::files::MAX_CONFIG_BYTES, "config")
            .map_err(Failure::usage)?
    } else {
        String::new()
    };
    // `add` is the user's own edit, approved above: a config that was trusted (or
    // that `add` creates whole) stays trusted, and one that was not stays not.
    let trust = loopbox::trust::TrustStore::for_user().ok();
    let keep_trusted = trust.as_ref().is_some_and(|t| {
        !config_file.exists()
            || t.standing(&config_file, &loopbox::trust::digest(old.as_bytes()))
                .is_ok_and(|s| s == loopbox::trust::Standing::Trusted)
    });
    let grant = Grant {
        name: name.clone(),
        source: fetched.source.clone(),
        digest: fetched.locked.is_none().then(|| digest.clone()),
        unsigned: trusted_key.is_none(),
        approved: asked.clone(),
    };
    let text = apply(&old, &grant)
        .and_then(|t| Config::parse(&t, &config_file).map(|_| t))
        .map_err(|e| {
            Failure::usage(e.context(format!(
                "{label} cannot be written into `{}`",
                config_file.display()
            )))
        })?;
    let mut lock = lock;
    match &fetched.locked {
        Some(locked) => {
            lock.local.remove(&name);
            lock.policies.insert(
                name.clone(),
                Locked {
                    signed_by: signer.cloned(),
                    ..locked.clone()
                },
            );
        }
        None => {
            lock.policies.remove(&name);
            lock.local.insert(
                name.clone(),
                LocalSigner {
                    source: fetched.source.clone(),
                    digest: digest.clone(),
                    signed_by: signer.cloned(),
                },
            );
        }
    }
    lock.write(&lock_path).map_err(Failure::internal)?;
    loopbox::files::write_atomically(&config_file, text.as_bytes()).map_err(Failure::internal)?;
    if let Some(t) = trust.filter(|_| keep_trusted) {
        t.approve(&config_file, &loopbox::trust::digest(text.as_bytes()))
            .map_err(Failure::internal)?;
    }

    if args.json {
        let report = json!({
            "name": name, "source": fetched.source, "digest": digest,
            "manifest": fetched.locked.as_ref().map(|l| &l.manifest),
            "signed_by": signer, "trusted": trusted_key.is_some(),
            "needs": needs, "approved": asked, "upgraded": upgrade,
        });
        loopbox::outln!("{report}");
    } else {
        loopbox::outln!(
            "{} `{name}` into [policies.{name}] of {}; run it with `loopbox run {name}`",
            if upgrade { "upgraded" } else { "added" },
            config_file.display()
        );
    }
    Ok(exit::OK)
}

/// The component `source` names, fetched and (from a registry) kept in the store.
fn fetch(source: &str, config: &Config, workspace: &Path) -> Result<Fetched, Failure> {
    let local = workspace.join(source);
    let is_file = !source.starts_with(SCHEME) && (source.ends_with(".wasm") || local.exists());
    if is_file {
        let bytes = PolicySource::Path(local.clone())
            .read()
            .map_err(Failure::usage)?
            .into_owned();
        let stem = local
            .file_stem()
            .map(|s| s.to_string_lossy().to_string())
            .unwrap_or_default();
        return Ok(Fetched {
            bytes,
            source: source.to_string(),
            locked: None,
            path: local,
            default_name: policy_name(&stem),
        });
    }
    let reference = Reference::parse(source).map_err(Failure::usage)?;
    loopbox::errln!("fetching {reference}");
    let pulled = Registry::new(&reference)
        .pull(&reference, None)
        .map_err(|e| Failure {
            code: exit::FAILURE,
            error: e.context(format!("failed to fetch `{reference}`")),
        })?;
    let path = store(config)
        .put(&pulled.layer, &pulled.component)
        .map_err(Failure::internal)?;
    Ok(Fetched {
        source: reference.to_string(),
        locked: Some(Locked {
            source: reference.to_string(),
            manifest: pulled.manifest,
            component: pulled.layer,
            digest: digest(&pulled.component),
            signed_by: None,
        }),
        bytes: pulled.component,
        path,
        default_name: policy_name(reference.short_name()),
    })
}

/// A `[policies.NAME]` name from a file or repository name.
fn policy_name(raw: &str) -> String {
    let name: String = raw
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .take(64)
        .collect();
    if name.is_empty() {
        "policy".into()
    } else {
        name
    }
}
