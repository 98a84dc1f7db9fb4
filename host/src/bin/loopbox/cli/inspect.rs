//! `loopbox inspect POLICY`: what a component is and what it could ask for;
//! for an installed policy (`inspect NAME`), beside what it is granted.

use std::path::Path;

use clap::Args;

use super::Failure;
use loopbox::config::Config;
use loopbox::dist::admit::{Admitted, Refused, judge};
use loopbox::dist::needs::Needs;
use loopbox::dist::sign::verify;
use loopbox::run::installed::Installed;
use loopbox::ui::Untrusted;
use loopbox::wasm::inspect::{Info, Inspection, InstalledReport, capabilities, producers};
use loopbox::wasm::policy::PolicySource;

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The policy: the NAME of a [policies.NAME] section, a path to a .wasm component, or builtin:NAME
    policy: String,
    /// Print one JSON object
    #[arg(long)]
    pub(super) json: bool,
}

pub fn execute(args: InspectArgs, workspace: &Path) -> Result<i32, Failure> {
    let (config, config_path) = Config::discover(None, workspace).map_err(Failure::usage)?;
    let installed = Installed::resolve(&config, config_path.as_deref(), workspace, &args.policy)
        .map_err(Failure::usage)?;
    let runtime = super::runtime(&config, workspace)?;
    let source = match &installed {
        Some(i) => i.source.clone(),
        None => PolicySource::parse(&args.policy),
    };
    let policy = runtime.load(&source).map_err(Failure::usage)?;

    // info() runs in a throwaway run with an in-memory store: inspecting grants nothing.
    let ctx = loopbox::run::lifecycle::throwaway(&policy, &config.limits, workspace)?;
    let info = super::tokio()?.block_on(ctx.info(&policy));

    let needs = Needs::read(&policy.wasm).unwrap_or_else(|e| {
        loopbox::errln!("warning: {}", Untrusted(&format!("{e:#}")));
        None
    });
    let signature = match verify(&policy.wasm).map(|s| judge(s, &config.trust, false)) {
        Ok(Ok(Admitted::Trusted { name, key })) => {
            format!("signed by `{name}` ({key}), listed in [trust.keys]")
        }
        Ok(Err(Refused::Untrusted(k))) => {
            format!("signed by {k}, a key [trust.keys] does not list")
        }
        Ok(_) => "unsigned".to_string(),
        Err(e) => format!("BAD: {e}"),
    };
    let installed = match installed {
        Some(i) => {
            let scoped = config.scoped(&i.name).map_err(Failure::usage)?;
            let beyond = needs
                .as_ref()
                .map(|n| {
                    n.beyond(
                        &scoped.shell,
                        scoped.agent.is_some(),
                        &scoped.workspace.read,
                    )
                    .lines()
                })
                .unwrap_or_default();
            Some(InstalledReport {
                name: i.name.clone(),
                source: i.entry.source.clone(),
                grants: grants_line(&scoped),
                beyond_grants: beyond,
                admission: match i.admit(&config, &policy.wasm) {
                    Ok(a) => format!("runs: {}", a.describe()),
                    Err(e) => format!("REFUSED: {e:#}"),
                },
                manifest: i.locked.as_ref().map(|l| l.manifest.clone()),
            })
        }
        None => None,
    };

    let (languages, processed_by) = producers(&policy.wasm);
    let report = Inspection {
        policy: installed
            .as_ref()
            .map_or(source.to_string(), |i| i.name.clone()),
        world: policy.world.name(),
        contract: policy.contract.to_string(),
        size_bytes: policy.size,
        digest: policy.digest.clone(),
        capabilities: capabilities(&policy),
        imports: policy.interface.imports.clone(),
        exports: policy.interface.exports.clone(),
        info_error: info.as_ref().err().map(|e| e.to_string()),
        info: info.ok().map(|i| Info {
            name: i.name,
            version: i.version,
            description: i.description,
        }),
        languages,
        processed_by,
        cached: policy.cache == loopbox::wasm::cache::CacheOutcome::Hit,
        needs,
        signature,
        installed,
    };
    if args.json {
        loopbox::outln!(
            "{}",
            serde_json::to_string_pretty(&report).expect("serializable")
        );
    } else {
        loopbox::outln!("{}", report.human().trim_end_matches('\n'));
    }
    Ok(super::exit::OK)
}

/// A scoped config's grants in one line: `exec [ls; cat x]; scripts no; network no; agent none`.
fn grants_line(config: &Config) -> String {
    let list = |rules: &[Vec<String>]| {
        let all: Vec<String> = rules
            .iter()
            .map(|r| loopbox::ui::sanitize(&r.join(" ")))
            .collect();
        if all.is_empty() {
            "none".into()
        } else {
            all.join("; ")
        }
    };
    let yes_no = |b: bool| if b { "yes" } else { "no" };
    let mut line = format!("exec [{}]", list(&config.shell.allow));
    if !config.shell.ask.is_empty() {
        line.push_str(&format!("; ask [{}]", list(&config.shell.ask)));
    }
    line.push_str(&format!(
        "; read [{}]; scripts {}; network {}; agent {}",
        if config.workspace.read.is_empty() {
            "none".to_string()
        } else {
            loopbox::ui::sanitize(&config.workspace.read.join(", "))
        },
        yes_no(config.shell.scripts),
        yes_no(config.shell.network),
        config.agent.as_ref().map_or("none", |a| a
            .command
            .first()
            .map_or("openai", String::as_str))
    ));
    line
}
