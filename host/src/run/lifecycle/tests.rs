//! The verbs' refusals, without Wasm: each is decided before a policy loads.

use std::path::{Path, PathBuf};

use super::*;
use crate::config::Config;
use crate::run::RunExtras;
use crate::run::launch::Failed;
use crate::run::trust::Tenancy;
use crate::trust::TrustStore;

/// A workspace with `loopbox.toml` holding `config`, and a trust store outside it.
struct Place {
    ws: tempfile::TempDir,
    store_dir: tempfile::TempDir,
}

impl Place {
    fn new(config: &str) -> Place {
        let p = Place {
            ws: tempfile::tempdir().unwrap(),
            store_dir: tempfile::tempdir().unwrap(),
        };
        p.write(config);
        p
    }
    fn ws(&self) -> &Path {
        self.ws.path()
    }
    fn config(&self) -> PathBuf {
        self.ws().join(crate::files::CONFIG_FILE)
    }
    fn write(&self, config: &str) {
        std::fs::write(self.config(), config).unwrap();
    }
    fn store(&self) -> TrustStore {
        TrustStore::at(self.store_dir.path().join("trusted"))
    }
    fn trust_it(&self) {
        let found = Config::discover_hashed(None, self.ws()).unwrap();
        self.store()
            .approve(&self.config(), found.blake3.as_deref().unwrap())
            .unwrap();
    }
}

const CLI: Changes<'static> = Changes {
    accept_config: false,
    how_to_accept_config: "pass --accept-config-change",
    allow_policy: false,
    how_to_allow_policy: "pass --allow-policy-change",
};

fn err(r: Result<impl Sized, LaunchError>) -> LaunchError {
    match r {
        Ok(_) => panic!("expected a refusal"),
        Err(e) => e,
    }
}

#[test]
fn a_start_under_an_untrusted_config_is_refused_until_the_user_trusts_it() {
    let p = Place::new("[shell]\nallow = [[\"ls\"]]\n");
    let trust = Trust::UserStore(p.store());
    let e = err(start(&trust, Launch::new(p.ws(), "builtin:ralph")));
    assert_eq!(e.kind, Failed::Usage);
    let canonical = p.config().canonicalize().unwrap();
    assert_eq!(
        e.error.to_string(),
        format!(
            "`{}` is not trusted yet (new, or changed since you trusted it): review it, then run `loopbox trust {}`",
            canonical.display(),
            canonical.display()
        )
    );
    p.trust_it();
    let prepared = start(&trust, Launch::new(p.ws(), "builtin:ralph")).unwrap();
    // The grants are pinned at start, for every later resume to be held to.
    let pinned = prepared.options.grants.as_ref().expect("pinned");
    assert_eq!(
        pinned["config"]["shell"]["allow"],
        serde_json::json!([["ls"]])
    );
}

/// An approver that says no, and one that approves: asked only after the store refused.
struct Person(bool);

impl crate::run::trust::Approver for Person {
    fn approve(
        &self,
        store: &TrustStore,
        found: &crate::config::Discovered,
        refused: &crate::trust::NotTrusted,
    ) -> Result<(), LaunchError> {
        if !self.0 {
            return Err(LaunchError::usage(anyhow!("{refused}; declined")));
        }
        let (Some(path), Some(hash)) = (&found.path, &found.blake3) else {
            unreachable!("a refused config has a file")
        };
        store.approve(path, hash).map_err(LaunchError::internal)?;
        Ok(())
    }
}

#[test]
fn a_person_asked_about_an_untrusted_config_decides_and_the_store_remembers() {
    let p = Place::new("");
    let no = Person(false);
    let e = err(start(
        &Trust::UserStoreOrAsk(p.store(), &no),
        Launch::new(p.ws(), "builtin:ralph"),
    ));
    assert!(e.error.to_string().ends_with("; declined"), "{:#}", e.error);
    let yes = Person(true);
    start(
        &Trust::UserStoreOrAsk(p.store(), &yes),
        Launch::new(p.ws(), "builtin:ralph"),
    )
    .unwrap();
    // Approved once: the store alone lets it through now.
    start(
        &Trust::UserStore(p.store()),
        Launch::new(p.ws(), "builtin:ralph"),
    )
    .unwrap();
}

/// A run started under the workspace's config, recorded as `loopbox run` records it.
fn started_run(p: &Place, digest: &str) -> (Db, RunRecord) {
    let prepared = start(
        &Trust::UserStore(p.store()),
        Launch::new(p.ws(), "builtin:ralph"),
    )
    .expect("trusted");
    let db = Db::open_workspace(p.ws()).unwrap();
    db.create_driven_run("r1", &prepared.shown(), digest, "{}", &prepared.options)
        .unwrap();
    let run = db.existing_run("r1").unwrap();
    (db, run)
}

#[test]
fn a_resume_whose_grants_changed_is_refused_as_changed_and_nothing_is_recorded() {
    let p = Place::new("[shell]\nallow = [[\"ls\"]]\n");
    p.trust_it();
    let (db, run) = started_run(&p, "d1");
    // The user edits the config, and trusts the edit: the run still keeps its grants.
    p.write("[shell]\nallow = [[\"ls\"], [\"sh\"]]\nnetwork = true\n");
    p.trust_it();
    let trust = Trust::UserStore(p.store());
    let e = err(resume(&trust, p.ws(), &db, &run, &CLI, None));
    assert_eq!(e.kind, Failed::Changed);
    assert_eq!(
        e.error.to_string(),
        "the grants changed since run r1 started (shell.allow, shell.network); a run keeps the grants it started with, \
         so an edit made during a run cannot widen them. Restore the config, or pass --accept-config-change"
    );
    assert_eq!(
        db.existing_run("r1").unwrap().options.grants,
        run.options.grants
    );
}

#[test]
fn a_resume_under_a_config_no_longer_trusted_is_refused_before_anything_else() {
    let p = Place::new("[shell]\nallow = [[\"ls\"]]\n");
    p.trust_it();
    let (db, run) = started_run(&p, "d1");
    p.write("[shell]\nallow = [[\"ls\"], [\"sh\"]]\n");
    let e = err(resume(
        &Trust::UserStore(p.store()),
        p.ws(),
        &db,
        &run,
        &CLI,
        None,
    ));
    assert_eq!(e.kind, Failed::Usage);
    assert!(
        e.error.to_string().contains("is not trusted yet"),
        "{:#}",
        e.error
    );
}

#[test]
fn a_hook_session_is_not_resumed_by_the_verb() {
    let p = Place::new("");
    p.trust_it();
    let db = Db::open_workspace(p.ws()).unwrap();
    db.create_hook_run("h1", "builtin:ralph", "d1", "{}", serde_json::json!({}))
        .unwrap();
    let run = db.existing_run("h1").unwrap();
    let e = err(resume(
        &Trust::UserStore(p.store()),
        p.ws(),
        &db,
        &run,
        &CLI,
        None,
    ));
    assert_eq!(e.kind, Failed::Usage);
    assert!(
        e.error.to_string().contains("is an agent hook session"),
        "{:#}",
        e.error
    );
}

#[test]
fn a_changed_policy_digest_is_refused_unless_allowed_and_then_recorded() {
    let p = Place::new("");
    p.trust_it();
    let (db, run) = started_run(&p, "aaaaaaaaaaaaaaaa");
    let source = PolicySource::parse("builtin:ralph");
    assert!(!hold_policy(&db, &run, &source, "aaaaaaaaaaaaaaaa", &CLI).unwrap());
    let e = err(hold_policy(&db, &run, &source, "bbbbbbbbbbbbbbbb", &CLI));
    assert_eq!(e.kind, Failed::Changed);
    assert_eq!(
        e.error.to_string(),
        "the policy `builtin:ralph` changed since run r1 started (digest aaaaaaaaaaaa then, bbbbbbbbbbbb now); \
         replaying its journal with different code can go wrong. Restore the original policy, or pass --allow-policy-change"
    );
    assert_eq!(
        db.existing_run("r1").unwrap().policy_digest,
        "aaaaaaaaaaaaaaaa"
    );
    let allowed = Changes {
        allow_policy: true,
        ..CLI
    };
    assert!(hold_policy(&db, &run, &source, "bbbbbbbbbbbbbbbb", &allowed).unwrap());
    assert_eq!(
        db.existing_run("r1").unwrap().policy_digest,
        "bbbbbbbbbbbbbbbb"
    );
}

/// A tenant whose runs take at most 1000 turns, and that installs nothing by the name `ghost`.
struct Tenant {
    file: PathBuf,
}

impl Tenancy for Tenant {
    fn config_file(&self) -> anyhow::Result<PathBuf> {
        Ok(self.file.clone())
    }
    fn not_installed(&self, name: &str) -> anyhow::Error {
        anyhow!("the tenant has no policy `{name}` installed")
    }
    fn check(&self, config: &Config, _policy: Option<&Path>) -> anyhow::Result<()> {
        anyhow::ensure!(
            config.run.max_turns <= 1000,
            "at most 1000 turns for this tenant"
        );
        Ok(())
    }
    fn extras(&self) -> RunExtras {
        RunExtras {
            home: Some(PathBuf::from("/tenant/home")),
            ..RunExtras::default()
        }
    }
}

#[test]
fn a_tenants_run_reads_its_config_is_bounded_by_it_and_gets_its_resources() {
    let p = Place::new("[policies.other]\nsource = \"builtin:ralph\"\n");
    // The tenant's own file, not the workspace's (which the store never trusted).
    let file = p.store_dir.path().join("tenant.toml");
    std::fs::write(&file, "[policies.fix]\nsource = \"builtin:ralph\"\n").unwrap();
    let tenant = Tenant { file: file.clone() };
    let trust = Trust::TenantConfig(&tenant);
    let e = err(start(&trust, Launch::new(p.ws(), "ghost")));
    assert_eq!(
        e.error.to_string(),
        "the tenant has no policy `ghost` installed"
    );
    let prepared = start(&trust, Launch::new(p.ws(), "fix")).unwrap();
    assert_eq!(prepared.config_path.as_deref(), Some(file.as_path()));
    assert_eq!(prepared.options.policy_name.as_deref(), Some("fix"));
    assert_eq!(
        prepared.extras.home.as_deref(),
        Some(Path::new("/tenant/home"))
    );
    // Its bounds are checked on the config as the run sees it (--max-turns applied).
    let e = err(start(
        &trust,
        Launch::new(p.ws(), "fix").max_turns(Some(1001)),
    ));
    assert_eq!(e.error.to_string(), "at most 1000 turns for this tenant");
}
