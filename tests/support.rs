//! Shared harness for the integration tests: the guests' component paths (built
//! from source by `build.rs`), one runtime per test process, and throwaway
//! workspaces each with their own store.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use loopbox::bindings::{Decision, Event};
use loopbox::config::Config;
use loopbox::db::Db;
use loopbox::run::RunContext;
use loopbox::ui::Ui;
use loopbox::wasm::fault::PolicyFault;
use loopbox::wasm::policy::{Policy, PolicySource};
use loopbox::wasm::runtime::Runtime;
use serde_json::Value;

/// A guest component built by this crate's build script.
pub fn guest(name: &str) -> PathBuf {
    PathBuf::from(match name {
        "ralph" => env!("LOOPBOX_GUEST_RALPH"),
        "todo-enforcer" => env!("LOOPBOX_GUEST_TODO_ENFORCER"),
        "fix-forward" => env!("LOOPBOX_GUEST_FIX_FORWARD"),
        "probe" => env!("LOOPBOX_GUEST_PROBE"),
        "ralph-py" => env!("LOOPBOX_GUEST_RALPH_PY"),
        "todo-enforcer-js" => env!("LOOPBOX_GUEST_TODO_ENFORCER_JS"),
        "tool-gate-js" => env!("LOOPBOX_GUEST_TOOL_GATE_JS"),
        "ralph-js" => env!("LOOPBOX_GUEST_RALPH_JS"),
        "green-tests-ts" => env!("LOOPBOX_GUEST_GREEN_TESTS_TS"),
        "ccw-py" => env!("LOOPBOX_GUEST_CCW_PY"),
        "misbehave-py" => env!("LOOPBOX_GUEST_MISBEHAVE_PY"),
        "misbehave-js" => env!("LOOPBOX_GUEST_MISBEHAVE_JS"),
        "misbehave-http-js" => env!("LOOPBOX_GUEST_MISBEHAVE_HTTP_JS"),
        other => panic!("no guest named {other}"),
    })
}

/// One engine for the whole test process, as in the CLI. Its component cache
/// is this process's own (`loopbox-test-cache-PID`, about 370 MB with the Python
/// and JavaScript guests); those of test processes that have ended are removed
/// first, so running the tests again and again does not fill the disk.
pub fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        let tmp = std::env::temp_dir();
        for entry in std::fs::read_dir(&tmp).into_iter().flatten().flatten() {
            let name = entry.file_name();
            let pid = name
                .to_str()
                .and_then(|n| n.strip_prefix("loopbox-test-cache-"))
                .and_then(|p| p.parse::<u32>().ok());
            if let Some(pid) = pid
                && !std::path::Path::new(&format!("/proc/{pid}")).exists()
            {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        let cache = tmp.join(format!("loopbox-test-cache-{}", std::process::id()));
        Runtime::new(cache).expect("runtime")
    })
}

/// A guest loaded once per process.
pub fn load(name: &str) -> Arc<Policy> {
    type Loaded = std::sync::Mutex<Vec<(String, Arc<Policy>)>>;
    static LOADED: OnceLock<Loaded> = OnceLock::new();
    let mut loaded = LOADED.get_or_init(Default::default).lock().unwrap();
    if let Some((_, p)) = loaded.iter().find(|(n, _)| n == name) {
        return p.clone();
    }
    let p = Arc::new(
        runtime()
            .load(&PolicySource::Path(guest(name)))
            .expect("guest loads"),
    );
    loaded.push((name.to_string(), p.clone()));
    p
}

/// A temporary workspace with a store.
pub struct Workspace {
    pub dir: tempfile::TempDir,
    pub db: Db,
}

impl Workspace {
    pub fn new() -> Workspace {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open_workspace(dir.path()).unwrap();
        Workspace { dir, db }
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn write(&self, rel: &str, contents: &str) {
        let p = self.dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, contents).unwrap();
    }

    /// Put the example project's scripted agent in this workspace, answering
    /// with `replies` in order (one per turn of a conversation); returns the
    /// `[agent]` config that uses it.
    pub fn scripted_agent(&self, replies: &[&str]) -> &'static str {
        let agent =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/project/agent/scripted-agent");
        self.write(
            "agent/scripted-agent",
            &std::fs::read_to_string(agent).unwrap(),
        );
        std::fs::set_permissions(
            self.root().join("agent/scripted-agent"),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        // One reply per line, as JSON string content (the agent turns `\n` back into newlines).
        let lines: Vec<String> = replies
            .iter()
            .map(|r| {
                serde_json::to_string(r)
                    .unwrap()
                    .trim_matches('"')
                    .to_string()
            })
            .collect();
        self.write(".scripted-agent/replies", &lines.join("\n"));
        "[agent]\ncommand = [\"./agent/scripted-agent\", \"{prompt}\"]\nresume = [\"--resume\", \"{session}\"]\noutput = \"json\"\n"
    }

    /// The prompts the scripted agent received, in order.
    pub fn agent_prompts(&self) -> Vec<String> {
        let text = std::fs::read_to_string(self.root().join(".scripted-agent/prompts"))
            .unwrap_or_default();
        text.split("\n---\n")
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect()
    }

    /// A new run of `policy` in this workspace under `config` (loopbox.toml text);
    /// ask-tier actions are declined.
    pub fn run(&self, policy: &Policy, config: &str) -> RunContext {
        self.run_with(
            policy,
            config,
            Arc::new(loopbox::exec::confirm::NoOneToAsk(
                "no one can be asked in this test",
            )),
        )
    }

    /// As [`Workspace::run`], with `confirm` answering ask-tier actions.
    pub fn run_with(
        &self,
        policy: &Policy,
        config: &str,
        confirm: Arc<dyn loopbox::exec::confirm::Confirm>,
    ) -> RunContext {
        self.run_access(
            policy,
            config,
            loopbox::run::Access {
                confirm,
                ..Default::default()
            },
        )
    }

    /// As [`Workspace::run`], with everything the front end adds.
    pub fn run_access(
        &self,
        policy: &Policy,
        config: &str,
        access: loopbox::run::Access,
    ) -> RunContext {
        let config = Config::parse(config, Path::new("test.toml")).expect("test config parses");
        let id = loopbox::run::new_run_id()
            + &format!(
                "{:04}",
                COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            );
        self.db
            .create_run(&id, &policy.source.to_string(), &policy.digest, "{}")
            .unwrap();
        RunContext::with_access(
            id,
            Arc::new(config),
            self.db.clone(),
            self.root(),
            Ui::quiet(),
            access,
        )
        .unwrap()
    }
}

impl Default for Workspace {
    fn default() -> Self {
        Workspace::new()
    }
}

static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Deliver one event and return its decision (or fault).
pub async fn deliver(
    ctx: &RunContext,
    policy: &Policy,
    event: Event,
) -> Result<Decision, PolicyFault> {
    ctx.deliver(policy, &event).await.expect("the store works")
}

/// Have the probe perform `op` (as `start`) and return what it observed (`done.data`).
pub async fn probe(ctx: &RunContext, op: Value) -> Result<Value, PolicyFault> {
    match deliver(ctx, &load("probe"), Event::Start(op.to_string())).await? {
        Decision::Done(o) => Ok(serde_json::from_str(o.data.as_deref().unwrap_or("null")).unwrap()),
        other => panic!("probe answered {other:?}"),
    }
}

/// The limit a fault names, if it is a limit.
pub fn limit_key(f: &PolicyFault) -> Option<&'static str> {
    match f {
        PolicyFault::Limit(l) => Some(l.limit.key()),
        _ => None,
    }
}

/// The run log's messages, in order.
pub fn log_messages(ctx: &RunContext) -> Vec<String> {
    ctx.db
        .log(&ctx.id)
        .unwrap()
        .into_iter()
        .map(|r| format!("[{}] {}", r.source, r.message))
        .collect()
}
