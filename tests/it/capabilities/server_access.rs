//! What a server adds to a run (`run::Access`): where `pass_env` finds its
//! values (a tenant's own credentials, never the server's environment), paths
//! commands never see (other tenants' roots), and a quota shared with other
//! runs that refuses an action with its name and value.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use loopbox::exec::child_env::HostEnv;
use loopbox::limits::quota::{Quota, Spend};
use loopbox_tests::*;
use serde_json::json;

use super::err_kind;

#[tokio::test]
async fn pass_env_reads_the_tenants_values_and_never_the_servers() {
    #[allow(clippy::disallowed_methods)]
    // the host reads it from its own environment, in this process
    // SAFETY: set once for this test binary's lifetime; no test reads it back concurrently.
    unsafe {
        std::env::set_var("LOOPBOX_TEST_SERVER_SECRET", "server-only")
    };
    let ws = Workspace::new();
    let tenant = BTreeMap::from([("TENANT_KEY".to_string(), "t-123".to_string())]);
    let ctx = ws.run_access(
        &load("probe"),
        "[shell]\nallow = [[\"printenv\"]]\npass_env = [\"TENANT_KEY\", \"LOOPBOX_TEST_SERVER_SECRET\"]",
        loopbox::run::Access {
            host_env: HostEnv::Given(Arc::new(tenant)),
            ..Default::default()
        },
    );
    let v = probe(
        &ctx,
        json!({"op": "exec", "argv": ["printenv", "TENANT_KEY"]}),
    )
    .await
    .unwrap();
    assert_eq!(v["ok"]["stdout"], "t-123\n", "{v}");
    let v = probe(
        &ctx,
        json!({"op": "exec", "argv": ["printenv", "LOOPBOX_TEST_SERVER_SECRET"]}),
    )
    .await
    .unwrap();
    assert_eq!(
        (v["ok"]["exit_code"].as_i64(), v["ok"]["stdout"].as_str()),
        (Some(1), Some("")),
        "the server's own variable never reaches a tenant's command: {v}"
    );
}

#[tokio::test]
async fn an_extra_hidden_path_cannot_be_read_by_a_command() {
    let ws = Workspace::new();
    // Outside /tmp, which every command gets a private one of.
    let other = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::write(other.path().join("secret.txt"), "tenant b's data").unwrap();
    let secret = other.path().join("secret.txt");
    let config = "[shell]\nallow = [[\"cat\"]]";
    // Without it hidden, the command reads it (so the test can fail).
    let open = ws.run(&load("probe"), config);
    let v = probe(&open, json!({"op": "exec", "argv": ["cat", secret]}))
        .await
        .unwrap();
    assert_eq!(v["ok"]["stdout"], "tenant b's data", "{v}");
    let ctx = ws.run_access(
        &load("probe"),
        config,
        loopbox::run::Access {
            hidden: vec![other.path().canonicalize().unwrap()],
            ..Default::default()
        },
    );
    let v = probe(&ctx, json!({"op": "exec", "argv": ["cat", secret]}))
        .await
        .unwrap();
    assert_ne!(v["ok"]["exit_code"], 0, "{v}");
    assert!(
        !v.to_string().contains("tenant b's data"),
        "a hidden path leaked: {v}"
    );
}

/// A quota of `n` actions, shared by every run given it; it records what was spent.
struct Actions {
    left: AtomicU32,
    spent: Mutex<Vec<Spend>>,
}

impl Quota for Actions {
    fn spend(&self, spend: Spend) -> Result<(), String> {
        if spend == Spend::Action
            && self
                .left
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_err()
        {
            return Err(
                "the tenant used all 1 of its actions this hour (tenants.t.actions_per_hour = 1)"
                    .into(),
            );
        }
        self.spent.lock().unwrap().push(spend);
        Ok(())
    }
}

#[tokio::test]
async fn a_shared_quota_refuses_the_action_past_it_naming_the_key() {
    let ws = Workspace::new();
    let quota = Arc::new(Actions {
        left: AtomicU32::new(1),
        spent: Mutex::new(Vec::new()),
    });
    let access = || loopbox::run::Access {
        quota: Some(quota.clone() as Arc<dyn Quota>),
        ..Default::default()
    };
    let config = "[shell]\nallow = [[\"echo\"]]";
    // Two runs share it: the second run's action is the one past it.
    let first = ws.run_access(&load("probe"), config, access());
    let v = probe(&first, json!({"op": "exec", "argv": ["echo", "one"]}))
        .await
        .unwrap();
    assert_eq!(v["ok"]["stdout"], "one\n", "{v}");
    let second = ws.run_access(&load("probe"), config, access());
    let v = probe(&second, json!({"op": "exec", "argv": ["echo", "two"]}))
        .await
        .unwrap();
    let (kind, msg) = err_kind(&v);
    assert_eq!(kind, "budget-exhausted", "{v}");
    assert!(msg.contains("tenants.t.actions_per_hour = 1"), "{msg}");
    assert_eq!(*quota.spent.lock().unwrap(), [Spend::Action]);
}
