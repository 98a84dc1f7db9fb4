//! `loopbox serve` over real HTTP on loopback: the real binary as the server
//! process, started once for this test binary ([`shared`]) with three tenants
//! and a token of every role, and once more by the tests that kill or stop it.
//! Requests go over a plain TCP socket ([`http`]), so a test can send what no
//! well-behaved client would (an oversized body, a forged header).
//!
//! The engine comes from `LOOPBOX_TEST_ENGINE`: unset (or `sqlite`), each
//! server keeps its store in its data directory's `loopbox.db`; `postgres`,
//! every server the tests prepare gets a fresh schema of this binary's one
//! PostgreSQL ([`engine_store`]), `serve` only queues, and the harness starts a
//! `loopbox worker` beside it to drive the runs. `scripts/test.sh` runs this
//! module once per engine; a test that only makes sense on one engine says
//! why and returns early on the other ([`on_postgres`]).

mod access;
mod bad_input;
mod cli;
mod config_edit;
mod crash;
mod egress;
mod env;
mod hitl;
mod homes;
mod leftovers;
mod load;
pub mod loops;
mod ops;
mod panics;
mod pg_restart;
mod promises;
mod quota;
mod runs;
mod scale;
mod spend;
mod wakeups;
mod web;
mod webhooks;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{BIN, probe};

pub const ROLES: [&str; 4] = ["viewer", "operator", "approver", "admin"];

/// A tenant's loopbox.toml for the tests: the probe installed, `echo`, `cat`
/// and `sleep` allowed, and appending to `count.txt` needing an approval.
pub fn tenant_config() -> String {
    let probe = probe().display().to_string();
    format!(
        "[shell]\nallow = [[\"echo\"], [\"cat\"], [\"sleep\"]]\n\n\
         [policies.probe]\nsource = {probe:?}\nunsigned = true\n\n\
         [policies.probe.shell]\nallow = [[\"echo\"], [\"cat\"], [\"sleep\"]]\nask = [[\"tee\", \"-a\", \"count.txt\"]]\n"
    )
}

/// One server: its process, its directory (roots under `roots/`, data in
/// `data/`), its address, and its tokens by (tenant, role).
pub struct Srv {
    pub dir: PathBuf,
    pub config: PathBuf,
    pub addr: String,
    pub tokens: BTreeMap<(String, String), String>,
    pub child: Option<Child>,
    /// A PostgreSQL store (`LOOPBOX_STORE`) in place of `data/loopbox.db`.
    pub store: Option<String>,
    /// On a PostgreSQL store, the `loopbox worker` that drives the runs
    /// (started and killed with the server).
    pub worker: Option<Child>,
    /// The server's component cache (`LOOPBOX_CACHE_DIR`).
    pub cache: PathBuf,
    /// Variables set in the server's and its worker's environment only (a
    /// fault to inject, `HOME`), never in this test process's.
    pub env: Vec<(String, String)>,
}

/// `cmd` with `store` as its `LOOPBOX_STORE` (none: the data directory's file).
fn on_store<'c>(cmd: &'c mut Command, store: Option<&str>) -> &'c mut Command {
    match store {
        Some(s) => cmd.env("LOOPBOX_STORE", s),
        None => cmd.env_remove("LOOPBOX_STORE"),
    }
}

/// `loopbox serve ARGS` against `config` (the server config), run to its end.
pub fn serve_cmd(config: &Path, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .arg("serve")
        .arg("--config")
        .arg(config)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Whether this run of the suite is on the PostgreSQL engine (`LOOPBOX_TEST_ENGINE=postgres`).
pub fn on_postgres() -> bool {
    match std::env::var("LOOPBOX_TEST_ENGINE").as_deref() {
        Ok("postgres") => true,
        Ok("sqlite") | Err(_) => false,
        Ok(other) => panic!("LOOPBOX_TEST_ENGINE={other:?}: say `sqlite` or `postgres`"),
    }
}

/// The store a server of this run gets: a fresh schema on this binary's
/// PostgreSQL on that engine, else none (the data directory's file).
pub fn engine_store() -> Option<String> {
    on_postgres().then(|| {
        loopbox::db::engine::pg_server::PgServer::shared(false)
            .and_then(|pg| pg.fresh_store())
            .unwrap_or_else(|e| panic!("{e:#}"))
    })
}

impl Srv {
    /// Lay out a server in `dir`: `tenants` (name, extra lines of its
    /// `[tenants.NAME]`), each with a root holding `proj/`, its config set
    /// and a token of every role, on this run's engine ([`engine_store`]).
    /// Not started yet.
    pub fn prepare(dir: &Path, server_lines: &str, tenants: &[(&str, &str)]) -> Srv {
        Srv::prepare_on(dir, server_lines, tenants, engine_store().as_deref())
    }

    /// [`Srv::prepare`], keeping everything in the PostgreSQL store `store`.
    pub fn prepare_on(
        dir: &Path,
        server_lines: &str,
        tenants: &[(&str, &str)],
        store: Option<&str>,
    ) -> Srv {
        let mut text =
            format!("[server]\nlisten = \"127.0.0.1:0\"\ndata = \"data\"\n{server_lines}\n");
        for (t, extra) in tenants {
            std::fs::create_dir_all(dir.join("roots").join(t).join("proj")).unwrap();
            text.push_str(&format!(
                "[tenants.{t}]\nroots = [\"roots/{t}\"]\n{extra}\n"
            ));
        }
        let config = dir.join("loopbox-server.toml");
        std::fs::write(&config, text).unwrap();
        let tc = dir.join("tenant.toml");
        std::fs::write(&tc, tenant_config()).unwrap();
        let mut tokens = BTreeMap::new();
        for (t, _) in tenants {
            let out = on_store(&mut Command::new(BIN), store)
                .args(["serve", "--config"])
                .arg(&config)
                .args(["tenant-config", "--tenant", t, "--set"])
                .arg(&tc)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            for role in ROLES {
                let name = format!("{role}-1");
                let out = on_store(&mut Command::new(BIN), store)
                    .arg("serve")
                    .arg("--config")
                    .arg(&config)
                    .args([
                        "token", "create", "--tenant", t, "--role", role, "--name", &name,
                    ])
                    .stdin(Stdio::null())
                    .output()
                    .unwrap();
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                let token = String::from_utf8(out.stdout).unwrap().trim().to_string();
                tokens.insert((t.to_string(), role.to_string()), token);
            }
        }
        Srv {
            dir: dir.to_path_buf(),
            config,
            addr: String::new(),
            tokens,
            child: None,
            store: store.map(String::from),
            worker: None,
            cache: std::env::temp_dir().join("loopbox-cli-test-cache"),
            env: Vec::new(),
        }
    }

    /// Set `tenant`'s loopbox.toml to `text`, as an operator does.
    pub fn set_config(&self, tenant: &str, text: &str) {
        let file = self.dir.join(format!("{tenant}-config.toml"));
        std::fs::write(&file, text).unwrap();
        let out = on_store(&mut Command::new(BIN), self.store.as_deref())
            .args(["serve", "--config"])
            .arg(&self.config)
            .args(["tenant-config", "--tenant", tenant, "--set"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Start the server process; returns once it listens.
    pub fn start(&mut self) {
        let mut cmd = Command::new(BIN);
        on_store(&mut cmd, self.store.as_deref());
        cmd.arg("serve")
            .arg("--config")
            .arg(&self.config)
            .env("LOOPBOX_CACHE_DIR", &self.cache)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            // What the server's own environment holds never reaches a tenant's run.
            .env("SECRET_KEY", "the server's own key")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let (child, first) = spawn_tied(cmd);
        let addr = first
            .split("http://")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or_else(|| panic!("the server did not say where it listens: {first:?}"));
        self.addr = addr.to_string();
        self.child = Some(child);
        if self.store.is_some() {
            // The server's URL, which its runs' messages name (`--server URL`).
            let url = format!("http://{}", self.addr);
            self.worker =
                Some(self.spawn_worker_with(&["--lease-ms", "1000"], &[("LOOPBOX_SERVER", &url)]));
        }
    }

    /// A `loopbox worker ARGS` on this server's config and store; returns once it works.
    pub fn spawn_worker(&self, args: &[&str]) -> Child {
        self.spawn_worker_with(args, &[])
    }

    /// [`Srv::spawn_worker`] with variables set in the worker's environment
    /// only: a variable set in this test process's environment would reach
    /// every process any test spawns meanwhile.
    pub fn spawn_worker_with(&self, args: &[&str], env: &[(&str, &str)]) -> Child {
        let mut cmd = Command::new(BIN);
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd.envs(env.iter().copied());
        on_store(&mut cmd, self.store.as_deref());
        cmd.arg("worker")
            .arg("--config")
            .arg(&self.config)
            .args(args)
            // The server's cache: the worker compiles the same policies, and
            // hides that directory from the commands it runs as the server does.
            .env("LOOPBOX_CACHE_DIR", &self.cache)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let (child, first) = spawn_tied(cmd);
        assert!(
            first.contains("working"),
            "the worker did not start: {first:?}"
        );
        child
    }

    /// `loopbox serve ARGS` on this server's config and store, run to its end.
    pub fn serve_cmd(&self, args: &[&str]) -> std::process::Output {
        on_store(&mut Command::new(BIN), self.store.as_deref())
            .arg("serve")
            .arg("--config")
            .arg(&self.config)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    pub fn token(&self, tenant: &str, role: &str) -> &str {
        &self.tokens[&(tenant.to_string(), role.to_string())]
    }

    pub fn root(&self, tenant: &str) -> PathBuf {
        self.dir.join("roots").join(tenant).canonicalize().unwrap()
    }

    /// The server's store, to read behind its back: its PostgreSQL schema, or its file.
    pub fn store(&self) -> loopbox::db::Db {
        match &self.store {
            Some(url) => loopbox::db::Db::open_postgres(url).unwrap(),
            None => loopbox::db::Db::open_read_only(&self.dir.join("data/loopbox.db")).unwrap(),
        }
    }

    /// A request with `token` as bearer.
    pub fn call(&self, method: &str, path: &str, token: &str, body: Option<Value>) -> Resp {
        let auth = format!("Bearer {token}");
        let body = body.map(|b| b.to_string());
        http(
            &self.addr,
            method,
            path,
            &[
                ("Authorization", &auth),
                ("Content-Type", "application/json"),
            ],
            body.as_deref().map(str::as_bytes),
        )
    }

    pub fn get(&self, path: &str, token: &str) -> Resp {
        self.call("GET", path, token, None)
    }

    pub fn post(&self, path: &str, token: &str, body: Value) -> Resp {
        self.call("POST", path, token, Some(body))
    }

    /// Start a probe run in `tenant`'s `proj` with `op` as its input; its id.
    pub fn start_probe(&self, tenant: &str, op: Value) -> String {
        let r = self.post(
            "/api/v1/runs",
            self.token(tenant, "operator"),
            json!({"policy": "probe", "workspace": "proj", "input": op}),
        );
        assert_eq!(r.status, 201, "{}", r.body);
        r.json()["id"].as_str().unwrap().to_string()
    }

    /// Wait until run `id` (of `tenant`) has a status `done` says is it; its last view.
    pub fn wait_run(&self, tenant: &str, id: &str, done: impl Fn(&Value) -> bool) -> Value {
        let started = Instant::now();
        loop {
            let r = self.get(&format!("/api/v1/runs/{id}"), self.token(tenant, "viewer"));
            assert_eq!(r.status, 200, "{}", r.body);
            let v = r.json();
            if done(&v) {
                return v;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "run {id} never got there: {v:#}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Wait for run `id` to end; its view.
    pub fn wait_final(&self, tenant: &str, id: &str) -> Value {
        self.wait_run(tenant, id, |v| {
            matches!(
                v["status"].as_str(),
                Some("done" | "failed" | "escalated" | "cancelled")
            )
        })
    }

    /// The pending approval of run `id`, once it is asked.
    pub fn pending_approval(&self, tenant: &str, id: &str) -> Value {
        let v = self.wait_run(tenant, id, |v| {
            v["status"] == "waiting"
                && v["approvals"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|a| a["status"] == "pending"))
        });
        v["approvals"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["status"] == "pending")
            .unwrap()
            .clone()
    }

    pub fn kill9(&mut self) {
        if let Some(mut w) = self.worker.take() {
            w.kill().unwrap();
            w.wait().unwrap();
        }
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// SIGTERM, then wait for the process to exit; its exit status.
    pub fn term(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().unwrap();
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        let started = Instant::now();
        loop {
            if let Some(s) = c.try_wait().unwrap() {
                return s;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the server did not stop within 20 s of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Srv {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The server every test without special needs shares: tenants alpha, beta,
/// gamma, delta (roomy; delta for the bad-input tests alone), web (the
/// dashboard's), tiny (small quotas) and one per module below, started once.
pub fn shared() -> &'static Srv {
    static SHARED: OnceLock<Srv> = OnceLock::new();
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    SHARED.get_or_init(|| {
        let dir = DIR.get_or_init(scratch).path();
        let roomy = "max_running = 4\nmax_queued = 60\n";
        // creds' env file: the server's (mode 0600), never a tenant command's to read.
        let env_file = dir.join("creds.env");
        std::fs::write(&env_file, "FILE_KEY=creds' file key\n").unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&env_file, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let mut srv = Srv::prepare(
            dir,
            "max_running = 6\nmax_body_bytes = 65536\n",
            &[
                ("alpha", roomy),
                ("beta", roomy),
                ("gamma", roomy),
                ("delta", roomy),
                // The dashboard's browser tests (web.rs).
                ("web", roomy),
                // `loopbox runs --server` (cli.rs).
                ("cli", roomy),
                // YAML loops as runs (loops.rs, and the browser's `loop`).
                ("loops", roomy),
                ("webloop", roomy),
                (
                    "tiny",
                    "max_running = 1\nmax_queued = 1\nactions_per_hour = 3\n",
                ),
                // `human_approval` answered over the API (hitl.rs).
                ("hitl", roomy),
                // `${env.NAME}` in a served loop (env.rs).
                (
                    "envs",
                    "env = { LOOP_VAR = \"envs' value\", PGPASSWORD = \"envs' pg\" }\n",
                ),
                (
                    "creds",
                    "env = { SECRET_KEY = \"creds' own key\" }\nenv_file = \"creds.env\"\n",
                ),
            ],
        );
        // creds' agent prints the credential it was given.
        let agent = dir.join("agent.sh");
        // ... and whether it can read beta's root.
        let theirs = dir.join("roots/beta/proj/agent-secret.txt");
        std::fs::write(&theirs, "beta's\n").unwrap();
        std::fs::write(
            &agent,
            format!(
                "#!/bin/sh\necho \"key=$SECRET_KEY home=$HOME beta=$(cat {} 2>/dev/null || echo hidden)\"\n",
                theirs.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
        let text = format!(
            "{}\n[policies.probe.agent]\ncommand = [{:?}, \"{{prompt}}\"]\noutput = \"text\"\npass_env = [\"SECRET_KEY\", \"HOME\"]\n",
            tenant_config(),
            agent.display().to_string()
        );
        srv.set_config("creds", &text);
        // Outside /tmp, which bubblewrap's private /tmp would hide anyway: the
        // cache holds every tenant's compiled policies, none a command's to read.
        srv.cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("serve-component-cache");
        srv.start();
        // The harness exits the process without dropping statics: the server
        // goes with it (its parent-death signal), and its directory here.
        extern "C" fn cleanup() {
            if let Some(d) = DIR.get() {
                let _ = std::fs::remove_dir_all(d.path());
            }
        }
        // SAFETY: registers a function with no arguments that only removes a directory.
        unsafe { libc::atexit(cleanup) };
        srv
    })
}

/// A directory for a server and its tenants' roots, outside `/tmp`: bubblewrap
/// gives every command a private `/tmp`, which would hide roots there whatever
/// the server does.
pub fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

/// A response: status, headers (lower-case names) and body.
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The JSON error's message.
    pub fn error(&self) -> String {
        self.json()["error"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

/// One HTTP/1.1 request on a fresh connection (`Connection: close`), read to its end.
pub fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Resp {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        req.push_str(&format!("Content-Length: {}\r\n", b.len()));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    if let Some(b) = body {
        // A server that refuses early may close before reading it all.
        let _ = s.write_all(b);
    }
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    parse_response(&raw)
}

pub fn parse_response(raw: &[u8]) -> Resp {
    let text = String::from_utf8_lossy(raw).to_string();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no response: {text:?}"));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {head:?}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        unchunk(body)
    } else {
        body.to_string()
    };
    Resp {
        status,
        headers,
        body,
    }
}

fn unchunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            out.push_str(&rest[..n.min(rest.len())]);
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].strip_prefix("\r\n").unwrap_or(&rest[n..]);
    }
    out
}

/// Spawn `cmd` (its stdout piped) so that it dies with this test process, even
/// when that is killed, and read the first line it prints.
fn spawn_tied(mut cmd: Command) -> (Child, String) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl only sets this child's parent-death signal; no allocation, no lock.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    // The parent-death signal comes when the spawning *thread* ends: spawned
    // from a thread that lives as long as this process.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        tx.send(cmd.spawn()).unwrap();
        loop {
            std::thread::park();
        }
    });
    let mut child = rx.recv().unwrap().unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    (child, first)
}
