//! What `loopbox inspect` reports about a component: its world, the contract
//! version it was built for, the capabilities it could ask for, its exports, its own `info()`, its size and
//! the toolchain that produced it (from the producers custom sections).

use serde::Serialize;

use crate::ui::{Untrusted, one_line};
use crate::wasm::policy::{PACKAGE, Policy};

#[derive(Debug, Clone, Serialize)]
pub struct Inspection {
    pub policy: String,
    pub world: &'static str,
    /// The contract it was built for: `loopbox:policy@0.4.0`.
    pub contract: String,
    pub size_bytes: usize,
    pub digest: String,
    /// loopbox capabilities the component imports: what it could ask for.
    pub capabilities: Vec<String>,
    /// Every import, WASI included.
    pub imports: Vec<String>,
    pub exports: Vec<String>,
    pub info: Option<Info>,
    pub info_error: Option<String>,
    /// Source languages named in producers sections (`Rust`, `Python`, ...).
    pub languages: Vec<String>,
    /// `name version` of each tool that processed it.
    pub processed_by: Vec<String>,
    pub cached: bool,
    /// What it declares it needs (`loopbox-needs`), if it declares anything.
    pub needs: Option<crate::dist::needs::Needs>,
    /// Who signed it: `unsigned`, `signed by KEY`, or why its signature is bad.
    pub signature: String,
    /// When inspected by name: how `[policies.NAME]` installs it.
    pub installed: Option<InstalledReport>,
}

/// An installed policy's grants beside what it imports and asks for.
#[derive(Debug, Clone, Serialize)]
pub struct InstalledReport {
    pub name: String,
    pub source: String,
    /// `[policies.NAME]`'s grants, in one line.
    pub grants: String,
    /// What its needs ask beyond those grants (empty when covered).
    pub beyond_grants: Vec<String>,
    /// Whether a run would admit it, and why (or why not).
    pub admission: String,
    /// The manifest digest `loopbox.lock` pins, for a registry policy.
    pub manifest: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Info {
    pub name: String,
    pub version: String,
    pub description: String,
}

pub fn capabilities(policy: &Policy) -> Vec<String> {
    let prefix = format!("{PACKAGE}/");
    policy
        .interface
        .imports
        .iter()
        .filter_map(|i| i.strip_prefix(&prefix))
        .map(|i| i.split('@').next().unwrap_or(i).to_string())
        .filter(|i| i != "types")
        .collect()
}

/// `(languages, processed-by)` from every producers section in the binary, deduplicated.
pub fn producers(wasm: &[u8]) -> (Vec<String>, Vec<String>) {
    let mut languages = Vec::new();
    let mut tools = Vec::new();
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        let Ok(wasmparser::Payload::CustomSection(section)) = payload else {
            continue;
        };
        let wasmparser::KnownCustom::Producers(reader) = section.as_known() else {
            continue;
        };
        for field in reader.into_iter().flatten() {
            for value in field.values.into_iter().flatten() {
                let entry = if value.version.is_empty() {
                    value.name.to_string()
                } else {
                    format!("{} {}", value.name, value.version)
                };
                let list = match field.name {
                    "language" => &mut languages,
                    "processed-by" => &mut tools,
                    _ => continue,
                };
                if !list.contains(&entry) {
                    list.push(entry);
                }
            }
        }
    }
    (languages, tools)
}

impl Inspection {
    /// The report as text for a terminal. Everything in it but loopbox's own
    /// labels came from the component (its `info()`, producers, needs, import
    /// names) or the config, so each value is shown as [`Untrusted`] text:
    /// escaped, and a newline in it cannot start a line of the report.
    pub fn human(&self) -> String {
        let mut s = String::new();
        let mut line = |k: &str, v: String| s.push_str(&format!("{k:<13}{}\n", Untrusted(&v)));
        line("policy", self.policy.clone());
        match &self.info {
            Some(i) => line(
                "info",
                format!(
                    "{} {}: {}",
                    one_line(&i.name),
                    one_line(&i.version),
                    i.description
                ),
            ),
            None => line(
                "info",
                format!(
                    "unavailable ({})",
                    self.info_error.as_deref().unwrap_or("?")
                ),
            ),
        }
        line("world", format!("loopbox:policy/{}", self.world));
        line("contract", self.contract.clone());
        let list = |items: &[String], none: &str| {
            if items.is_empty() {
                none.to_string()
            } else {
                items
                    .iter()
                    .map(|i| one_line(i))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        line("capabilities", list(&self.capabilities, "none"));
        line("exports", list(&self.exports, ""));
        line("size", format!("{} bytes", self.size_bytes));
        line("language", list(&self.languages, "unknown"));
        line("built with", list(&self.processed_by, "unknown"));
        line("digest", format!("blake3:{}", self.digest));
        line("signature", self.signature.clone());
        line(
            "asks for",
            self.needs
                .as_ref()
                .map_or("nothing declared".into(), |n| n.summary()),
        );
        if let Some(i) = &self.installed {
            line(
                "installed",
                format!("[policies.{}] from {}", i.name, i.source),
            );
            if let Some(m) = &i.manifest {
                line("locked", m.clone());
            }
            line("granted", i.grants.clone());
            if !i.beyond_grants.is_empty() {
                line("not granted", i.beyond_grants.join("; "));
            }
            line("admission", i.admission.clone());
        }
        // One import a line, aligned under the first: each is escaped to one line.
        let imports: Vec<String> = self.imports.iter().map(|i| one_line(i)).collect();
        s.push_str(&format!(
            "{:<13}{}\n",
            "imports",
            imports.join("\n             ")
        ));
        s
    }
}
