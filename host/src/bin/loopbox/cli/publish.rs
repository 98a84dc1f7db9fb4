//! `loopbox publish PATH REF`: push a policy to an OCI registry, with the
//! needs it declares embedded and, with `--key`, signed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::Args;
use serde_json::json;

use super::{Failure, exit};
use loopbox::config::Config;
use loopbox::dist::admit::digest;
use loopbox::dist::needs::Needs;
use loopbox::dist::reference::Reference;
use loopbox::dist::registry::{ComponentInfo, Registry};
use loopbox::dist::sections;
use loopbox::dist::sign::SecretKey;
use loopbox::project::{Manifest, build};
use loopbox::wasm::policy::PolicySource;

#[derive(Debug, Args)]
#[command(
    after_help = "Exit codes:\n  0  published\n  1  the registry refused or could not be reached, or the build failed\n  2  bad arguments, key, needs file or component"
)]
pub struct PublishArgs {
    /// A policy project directory (built first; its policy.toml [needs] are embedded) or a .wasm component
    path: PathBuf,
    /// Where to publish: oci://REGISTRY/REPOSITORY:TAG
    reference: String,
    /// Sign with this key (made by `loopbox key new FILE`)
    #[arg(long, value_name = "FILE", required_unless_present = "unsigned")]
    key: Option<PathBuf>,
    /// Publish without a signature (users must then accept it with unsigned = true)
    #[arg(long, conflicts_with = "key")]
    unsigned: bool,
    /// A TOML file of the needs to embed (exec, scripts, network, prompts), for a .wasm PATH
    #[arg(long, value_name = "FILE")]
    needs: Option<PathBuf>,
    /// Print one JSON object on stdout
    #[arg(long)]
    pub(super) json: bool,
}

pub fn execute(args: PublishArgs, workspace: &Path) -> Result<i32, Failure> {
    let reference = Reference::parse(&args.reference).map_err(Failure::usage)?;
    let key = match &args.key {
        Some(k) => Some(SecretKey::read(k).map_err(Failure::usage)?),
        None => None,
    };
    let path = workspace.join(&args.path);
    let (component, mut needs) = if path.is_dir() {
        let manifest = Manifest::read(&path).map_err(Failure::usage)?;
        loopbox::errln!("building {}", manifest.name);
        let out = build::build(&path, &manifest).map_err(|e| Failure {
            code: exit::FAILURE,
            error: e.context(format!("failed to build `{}`", path.display())),
        })?;
        (out, manifest.needs)
    } else {
        (path.clone(), None)
    };
    if let Some(file) = &args.needs {
        let text =
            loopbox::files::read_text(file, 1 << 20, "needs file").map_err(Failure::usage)?;
        needs = Some(toml::from_str(&text).map_err(|e| {
            Failure::usage(anyhow::anyhow!(
                "`{}` is not a needs file: {e}",
                file.display()
            ))
        })?);
    }

    // Load it as loopbox would: only a policy is published.
    let (config, _) = Config::discover(None, workspace).map_err(Failure::usage)?;
    let policy = super::runtime(&config, workspace)?
        .load(&PolicySource::Path(component.clone()))
        .map_err(Failure::usage)?;
    let mut bytes = policy.wasm.to_vec();
    if let Some(n) = &needs {
        bytes = n.embed(&bytes).map_err(Failure::usage)?;
    }
    let needs = match needs {
        Some(n) => n,
        None => Needs::read(&bytes)
            .map_err(Failure::usage)?
            .unwrap_or_default(),
    };
    bytes = match &key {
        Some(k) => k.sign(&bytes).map_err(Failure::usage)?,
        None => sections::strip(&bytes, &[sections::SIGNATURE]).map_err(Failure::usage)?,
    };

    let info = ComponentInfo {
        exports: policy.interface.exports.clone(),
        imports: policy.interface.imports.clone(),
        target: Some(format!("loopbox:policy/{}", policy.world.name())),
    };
    let annotations = BTreeMap::from([(
        "org.opencontainers.image.title".to_string(),
        reference.short_name().to_string(),
    )]);
    let manifest = Registry::new(&reference)
        .push(&reference, &bytes, info, annotations)
        .map_err(|e| Failure {
            code: exit::FAILURE,
            error: e.context(format!("failed to publish to `{reference}`")),
        })?;
    let signer = key.as_ref().map(SecretKey::public);
    if args.json {
        let report = json!({
            "reference": reference.to_string(), "manifest": manifest, "digest": digest(&bytes),
            "size_bytes": bytes.len(), "signed_by": signer, "needs": needs,
        });
        loopbox::outln!("{report}");
    } else {
        loopbox::outln!(
            "published {reference}@{manifest} ({}, {} bytes, {}); it asks for: {}",
            digest(&bytes),
            bytes.len(),
            signer.map_or("unsigned".to_string(), |k| format!("signed by {k}")),
            needs.summary()
        );
    }
    Ok(exit::OK)
}
