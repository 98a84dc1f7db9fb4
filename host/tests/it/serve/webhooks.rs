//! Webhooks against a real receiver: a Python `http.server` on 127.0.0.2
//! (the operator opened `127.0.0.0/8` to the tenant; the server listens on
//! 127.0.0.1) that checks each delivery's `loopbox-signature` with Python's
//! own `hmac` and records what came. Each event type arrives signed; a
//! receiver answering 500 gets the same event id again; a delivery queued
//! when the server stops is sent by the next one; a webhook aimed at the
//! server, the store, cloud metadata, a name resolving to loopback or an
//! address in another form is refused; only an admin sets webhooks, and a
//! tenant sees its own deliveries only.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Srv, scratch, tenant_config};
use crate::common;

/// The receiver: answers 500 while `DIR/fail` holds a count above 0 (taking
/// one off each time), else 204; appends `{event_id, body, sig_ok, answered}`
/// to `DIR/got.jsonl`. The secrets are `DIR/secrets`, one a line.
const RECEIVER: &str = r#"
import hashlib, hmac, http.server, json, os, sys, threading, time
d = sys.argv[1]
# Gone with the test process: its end closes our stdin.
threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get('content-length', 0)))
        sig = self.headers.get('loopbox-signature', '')
        parts = dict(p.split('=', 1) for p in sig.split(',') if '=' in p)
        secrets = open(os.path.join(d, 'secrets')).read().split()
        t = parts.get('t', '')
        ok = any(hmac.compare_digest(hmac.new(s.encode(), t.encode() + b'.' + body, hashlib.sha256).hexdigest(), parts.get('v1', '')) for s in secrets)
        ok = ok and t.isdigit() and abs(time.time() - int(t)) < 300
        fail = os.path.join(d, 'fail')
        n = int(open(fail).read() or 0) if os.path.exists(fail) else 0
        code = 500 if n > 0 else 204
        if n > 0:
            open(fail, 'w').write(str(n - 1))
        with open(os.path.join(d, 'got.jsonl'), 'a') as f:
            f.write(json.dumps({'event_id': self.headers.get('loopbox-event-id'), 'event': self.headers.get('loopbox-event'), 'body': json.loads(body), 'sig_ok': ok, 'answered': code}) + '\n')
        self.send_response(code)
        self.end_headers()
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(('127.0.0.2', int(sys.argv[2])), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"#;

/// A receiver in `dir`, on `port` (0: any); killed when dropped.
struct Receiver {
    dir: PathBuf,
    port: u16,
    child: Child,
}

impl Receiver {
    fn start(dir: &Path, port: u16) -> Receiver {
        std::fs::create_dir_all(dir).unwrap();
        let script = dir.join("receiver.py");
        std::fs::write(&script, RECEIVER).unwrap();
        if !dir.join("secrets").exists() {
            std::fs::write(dir.join("secrets"), "").unwrap();
        }
        let mut child = Command::new("python3")
            .arg(&script)
            .arg(dir)
            .arg(port.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("the receiver did not start: {line:?}"));
        Receiver {
            dir: dir.to_path_buf(),
            port,
            child,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.2:{}/{path}", self.port)
    }

    fn trust(&self, secret: &str) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(self.dir.join("secrets"))
            .unwrap();
        writeln!(f, "{secret}").unwrap();
    }

    fn fail_next(&self, n: u32) {
        std::fs::write(self.dir.join("fail"), n.to_string()).unwrap();
    }

    fn got(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.join("got.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Wait until what came satisfies `done`; what came.
    fn wait(&self, what: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let started = Instant::now();
        loop {
            let got = self.got();
            if done(&got) {
                return got;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the receiver never got {what}: {got:#?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Wait until `tenant`'s delivery log has a delivery `done` says is it (the
/// receiver records a delivery before the server hears its answer); that one.
fn wait_logged(srv: &Srv, tenant: &str, done: impl Fn(&Value) -> bool) -> Value {
    let started = Instant::now();
    loop {
        let r = srv.get("/api/v1/webhooks/deliveries", srv.token(tenant, "admin"));
        assert_eq!(r.status, 200, "{}", r.body);
        let log = r.json();
        if let Some(d) = log["deliveries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| done(d))
        {
            return d.clone();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the delivery log never showed it: {log:#}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Make a webhook of `tenant` for `events` at `url` as its admin; its id and secret.
fn add(srv: &Srv, tenant: &str, url: &str, events: &[&str]) -> (String, String) {
    let r = srv.post(
        "/api/v1/webhooks",
        srv.token(tenant, "admin"),
        json!({"url": url, "events": events}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let v = r.json();
    (
        v["webhook"]["id"].as_str().unwrap().to_string(),
        v["secret"].as_str().unwrap().to_string(),
    )
}

/// A server with tenants `hooks` (loopback opened by the operator, a $0.25
/// daily budget, the probe and ralph on the costly agent) and `other`.
fn prepare(dir: &Path) -> Srv {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy(
        common::repo().join("host/tests/fixtures/agents/costly-claude"),
        bin.join("claude"),
    )
    .unwrap();
    let open = "\n[tenants.{}.network]\nprivate = [\"127.0.0.0/8\"]\n";
    let srv = Srv::prepare(
        dir,
        "",
        &[
            (
                "hooks",
                &format!(
                    "max_cost_usd_per_day = 0.25\n{}",
                    open.replace("{}", "hooks")
                ),
            ),
            ("other", &open.replace("{}", "other")),
        ],
    );
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display());
    srv.set_config(
        "hooks",
        &format!(
            "{}\n[policies.ralph]\nsource = \"builtin:ralph\"\n\n[policies.ralph.shell]\npath = \"{path}\"\n\n\
             [policies.ralph.agent]\nrunner = \"claude\"\nwritable = []\npass_env = []\n",
            tenant_config()
        ),
    );
    srv
}

struct Shared {
    srv: Srv,
    receiver: Receiver,
    _dir: tempfile::TempDir,
}

/// The module's server and receiver, started once.
fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let dir = scratch();
        let mut srv = prepare(dir.path());
        srv.start();
        let receiver = Receiver::start(&dir.path().join("receiver"), 0);
        Shared {
            srv,
            receiver,
            _dir: dir,
        }
    })
}

#[test]
fn each_event_arrives_signed_and_a_refused_delivery_comes_again_with_its_id() {
    let Shared { srv, receiver, .. } = shared();
    let (_, secret) = add(
        srv,
        "hooks",
        &receiver.url("all"),
        &[
            "approval.pending",
            "approval.decided",
            "run.finished",
            "budget.reached",
        ],
    );
    receiver.trust(&secret);
    // The first delivery is answered 500: it must come again, with the same id.
    receiver.fail_next(1);
    let run = srv.start_probe(
        "hooks",
        json!({"op": "exec", "argv": ["tee", "-a", "count.txt"], "stdin": "ran\n"}),
    );
    let a = srv.pending_approval("hooks", &run);
    let r = srv.post(
        &format!("/api/v1/approvals/{}/approve", a["id"].as_str().unwrap()),
        srv.token("hooks", "approver"),
        json!({"digest": a["digest"]}),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(srv.wait_final("hooks", &run)["status"], "done");
    // $0.10, then $0.20: the tenant's $0.25 is used, the run fails.
    let spent = super::spend::start_ralph_as(srv, "hooks");
    assert_eq!(srv.wait_final("hooks", &spent)["status"], "failed");

    let kinds = [
        "approval.pending",
        "approval.decided",
        "run.finished",
        "budget.reached",
    ];
    let got = receiver.wait("every event, and the refused one again", |g| {
        let ok: Vec<&Value> = g.iter().filter(|d| d["answered"] == 204).collect();
        kinds.iter().all(|k| ok.iter().any(|d| d["event"] == *k))
            && ok.iter().filter(|d| d["event"] == "run.finished").count() >= 2
            && g.iter().any(|d| d["answered"] == 500)
    });
    for d in &got {
        assert_eq!(
            d["sig_ok"], true,
            "a delivery's signature did not verify: {d:#}"
        );
        assert_eq!(d["body"]["id"], d["event_id"], "{d:#}");
        assert_eq!(d["body"]["tenant"], "hooks", "{d:#}");
        assert!(
            d["body"]["url"]
                .as_str()
                .unwrap()
                .starts_with(&format!("http://{}/", srv.addr)),
            "{d:#}"
        );
    }
    let refused = got.iter().find(|d| d["answered"] == 500).unwrap();
    assert!(
        got.iter()
            .any(|d| d["answered"] == 204 && d["event_id"] == refused["event_id"]),
        "the event answered 500 never came again with its id: {got:#?}"
    );
    let pending = got
        .iter()
        .find(|d| d["event"] == "approval.pending")
        .unwrap();
    assert_eq!(pending["body"]["data"]["approval"], a["id"]);
    assert!(
        pending["body"]["url"]
            .as_str()
            .unwrap()
            .ends_with("/approvals")
    );
    let decided = got
        .iter()
        .find(|d| d["event"] == "approval.decided")
        .unwrap();
    assert_eq!(decided["body"]["data"]["status"], "approved");
    assert_eq!(decided["body"]["data"]["decided_by"], "hooks/approver-1");
    let finished: Vec<&Value> = got
        .iter()
        .filter(|d| d["event"] == "run.finished" && d["answered"] == 204)
        .collect();
    assert!(
        finished
            .iter()
            .any(|d| d["body"]["data"]["run"] == run.as_str()
                && d["body"]["data"]["status"] == "done"),
        "{finished:#?}"
    );
    assert!(
        finished
            .iter()
            .any(|d| d["body"]["data"]["run"] == spent.as_str()
                && d["body"]["data"]["status"] == "failed"),
        "{finished:#?}"
    );
    let budget = got.iter().find(|d| d["event"] == "budget.reached").unwrap();
    assert_eq!(
        budget["body"]["data"]["budget"],
        "tenants.hooks.max_cost_usd_per_day"
    );
    // Once per budget and day, however many turns it refused.
    assert_eq!(
        got.iter()
            .filter(|d| d["event"] == "budget.reached" && d["answered"] == 204)
            .count(),
        1
    );

    // The delivery log: the tenant's admin sees the retried delivery's two attempts.
    let retried = wait_logged(srv, "hooks", |d| {
        d["event_id"] == refused["event_id"] && d["status"] == "delivered"
    });
    assert_eq!(retried["attempts"], 2, "{retried:#}");

    // Tenant `other` sees none of it.
    let theirs = srv
        .get("/api/v1/webhooks/deliveries", srv.token("other", "admin"))
        .json();
    assert_eq!(theirs["deliveries"], json!([]), "{theirs:#}");
    let theirs = srv
        .get("/api/v1/webhooks", srv.token("other", "admin"))
        .json();
    assert_eq!(theirs["webhooks"], json!([]), "{theirs:#}");
    // Nor can it delete hooks' webhook.
    let id = srv
        .get("/api/v1/webhooks", srv.token("hooks", "admin"))
        .json()["webhooks"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = srv.call(
        "DELETE",
        &format!("/api/v1/webhooks/{id}"),
        srv.token("other", "admin"),
        None,
    );
    assert_eq!(r.status, 404, "{}", r.body);
    // The dashboard's page shows the tenant its deliveries, and the other tenant none of them.
    let page = srv.get("/webhooks", srv.token("hooks", "admin"));
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains(refused["event_id"].as_str().unwrap()),
        "{}",
        page.body
    );
    let page = srv.get("/webhooks", srv.token("other", "admin"));
    assert!(!page.body.contains(refused["event_id"].as_str().unwrap()));
}

#[test]
fn only_an_admin_sets_webhooks_and_the_secret_is_shown_once() {
    let Shared { srv, receiver, .. } = shared();
    for role in ["viewer", "operator", "approver"] {
        let r = srv.post(
            "/api/v1/webhooks",
            srv.token("other", role),
            json!({"url": receiver.url("x"), "events": ["run.finished"]}),
        );
        assert_eq!(r.status, 403, "{role}: {}", r.body);
        assert!(r.error().contains("admin"), "{role}: {}", r.body);
        let r = srv.get("/api/v1/webhooks", srv.token("other", role));
        assert_eq!(r.status, 403, "{role}: {}", r.body);
        let r = srv.get("/webhooks", srv.token("other", role));
        assert_eq!(r.status, 403, "{role}: {}", r.body);
    }
    let (id, secret) = add(srv, "other", &receiver.url("once"), &["run.finished"]);
    let listed = srv.get("/api/v1/webhooks", srv.token("other", "admin"));
    assert!(
        listed.body.contains(&id) && !listed.body.contains(&secret),
        "{}",
        listed.body
    );
    let audit = srv.get("/api/v1/audit", srv.token("other", "admin")).body;
    assert!(
        audit.contains("webhook.create") && !audit.contains(&secret),
        "{audit}"
    );
    let r = srv.call(
        "DELETE",
        &format!("/api/v1/webhooks/{id}"),
        srv.token("other", "admin"),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.body);
}

#[test]
fn a_webhook_at_the_server_the_store_metadata_or_loopback_in_disguise_is_refused() {
    let Shared { srv, receiver, .. } = shared();
    let port = srv.addr.rsplit(':').next().unwrap().to_string();
    let mut bad: Vec<String> = vec![
        // The server itself, though the operator opened 127.0.0.0/8.
        format!("http://{}/api/v1/runs", srv.addr),
        format!("http://localhost:{port}/"),
        format!("http://[::ffff:127.0.0.1]:{port}/"),
        format!("http://2130706433:{port}/"),
        format!("http://0x7f.0.0.1:{port}/"),
        format!("http://0177.0.0.1:{port}/"),
        format!("http://0.0.0.0:{port}/"),
        "http://169.254.169.254/latest/meta-data/".into(),
        "http://[::ffff:169.254.169.254]/".into(),
        "http://[::1]:9/".into(),
        "http://10.0.0.1/".into(),
        format!("http://user:pw@127.0.0.2:{}/", receiver.port),
        "file:///etc/passwd".into(),
    ];
    // The store, where it listens on TCP.
    if let Some(url) = &srv.store {
        let hostport = url.split('@').nth(1).unwrap().split('/').next().unwrap();
        bad.push(format!("http://{hostport}/"));
    }
    for url in &bad {
        let r = srv.post(
            "/api/v1/webhooks",
            srv.token("hooks", "admin"),
            json!({"url": url, "events": ["run.finished"]}),
        );
        assert_eq!(r.status, 400, "{url}: {}", r.body);
        assert!(r.error().contains("cannot be used"), "{url}: {}", r.body);
    }
    let listed = srv
        .get("/api/v1/webhooks", srv.token("hooks", "admin"))
        .json();
    for w in listed["webhooks"].as_array().unwrap() {
        assert!(
            !bad.contains(&w["url"].as_str().unwrap().to_string()),
            "{w}"
        );
    }
}

/// A tenant whose operator opened nothing private cannot aim at loopback;
/// and a delivery queued while the server is down is sent by the next one.
#[test]
fn a_delivery_queued_when_the_server_stops_is_sent_after_its_restart() {
    let dir = scratch();
    let mut srv = Srv::prepare(
        dir.path(),
        "",
        &[
            (
                "solo",
                "\n[tenants.solo.network]\nprivate = [\"127.0.0.2/32\"]\n",
            ),
            ("closed", ""),
        ],
    );
    srv.start();
    let receiver = Receiver::start(&dir.path().join("receiver"), 0);
    let r = srv.post(
        "/api/v1/webhooks",
        srv.token("closed", "admin"),
        json!({"url": receiver.url("x"), "events": ["run.finished"]}),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.error().contains("opened it to the tenant"), "{}", r.body);

    let (_, secret) = add(
        &srv,
        "solo",
        &receiver.url("restart"),
        &["approval.pending"],
    );
    receiver.trust(&secret);
    // Refused until the server is stopped: the delivery stays queued.
    receiver.fail_next(1000);
    let run = srv.start_probe(
        "solo",
        json!({"op": "exec", "argv": ["tee", "-a", "count.txt"], "stdin": "x\n"}),
    );
    srv.pending_approval("solo", &run);
    let first = receiver.wait("a first attempt", |g| !g.is_empty());
    let id = first[0]["event_id"].as_str().unwrap().to_string();
    assert!(srv.term().success());
    receiver.fail_next(0);
    let before = receiver.got().len();
    srv.start();
    let got = receiver.wait("the queued delivery after the restart", |g| {
        g.iter().skip(before).any(|d| d["answered"] == 204)
    });
    let sent = got
        .iter()
        .skip(before)
        .find(|d| d["answered"] == 204)
        .unwrap();
    assert_eq!(sent["event_id"], id.as_str());
    assert_eq!(sent["sig_ok"], true);
    let logged = wait_logged(&srv, "solo", |d| {
        d["event_id"] == id.as_str() && d["status"] == "delivered"
    });
    assert!(logged["attempts"].as_i64().unwrap() >= 2, "{logged:#}");
}

/// A tenant whose receivers never answer holds two sending slots, not all:
/// another tenant's delivery goes out at once. (Before, each tick's batch of
/// 16 waited for its slowest send: 20 silent webhooks held every tenant's
/// events back 10 s a batch, found by an attack with 61 s and 267 s delays.)
#[test]
fn a_tenant_whose_receivers_never_answer_does_not_hold_back_another() {
    let dir = scratch();
    let mut srv = prepare(dir.path());
    srv.start();
    let receiver = Receiver::start(&dir.path().join("receiver"), 0);
    // Accepts and never answers (each connection kept open until the test ends).
    let silent = std::net::TcpListener::bind("127.0.0.3:0").unwrap();
    let silent_url = format!("http://{}/never", silent.local_addr().unwrap());
    let held = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    {
        let held = held.clone();
        std::thread::spawn(move || {
            for s in silent.incoming().flatten() {
                held.lock().unwrap().push(s);
            }
        });
    }
    for _ in 0..20 {
        add(&srv, "hooks", &silent_url, &["run.finished"]);
    }
    for _ in 0..2 {
        let run = srv.start_probe("hooks", json!({"op": "exec", "argv": ["echo", "x"]}));
        srv.wait_final("hooks", &run);
    }
    // 40 deliveries of `hooks` are due; `other`'s comes after them.
    let (_, secret) = add(&srv, "other", &receiver.url("fair"), &["run.finished"]);
    receiver.trust(&secret);
    let run = srv.start_probe("other", json!({"op": "exec", "argv": ["echo", "y"]}));
    srv.wait_final("other", &run);
    let ended = Instant::now();
    receiver.wait("other's run.finished", |g| {
        g.iter()
            .any(|d| d["answered"] == 204 && d["body"]["tenant"] == "other")
    });
    assert!(
        ended.elapsed() < Duration::from_secs(5),
        "other's delivery took {:?} behind hooks' silent receivers",
        ended.elapsed()
    );
    // Never more than two of `hooks` at its receiver at once.
    assert!(
        held.lock().unwrap().len() <= 2 + 2,
        "{}",
        held.lock().unwrap().len()
    );
}

/// A YAML loop's `human_approval` question is an approval waiting too: the
/// tenant's `approval.pending` webhooks hear of it, with the question.
#[test]
fn a_loops_question_to_a_person_is_an_approval_pending() {
    // A server of its own: the shared one's tenants count their deliveries.
    let dir = scratch();
    let mut srv = prepare(dir.path());
    srv.start();
    let srv = &srv;
    let receiver = Receiver::start(&dir.path().join("receiver"), 0);
    let (_, secret) = add(srv, "hooks", &receiver.url("asked"), &["approval.pending"]);
    receiver.trust(&secret);
    srv.set_config("hooks", "[shell]\nscripts = true\n");
    std::fs::write(
        srv.root("hooks").join("proj/ask.yaml"),
        "name: ask\ninitial: ask\nstates:\n  ask:\n    action: 'Ship <it>?'\n    action_type: human_approval\n    on_yes: done\n    on_no: done\n  done:\n    terminal: true\n",
    )
    .unwrap();
    let r = srv.post(
        "/api/v1/runs",
        srv.token("hooks", "operator"),
        json!({"loop": "ask.yaml", "workspace": "proj"}),
    );
    assert_eq!(r.status, 201, "{}", r.body);
    let id = r.json()["id"].as_str().unwrap().to_string();
    let got = receiver.wait("the question's approval.pending", |g| {
        g.iter()
            .any(|d| d["event"] == "approval.pending" && d["body"]["data"]["run"] == id.as_str())
    });
    let d = got
        .iter()
        .find(|d| d["body"]["data"]["run"] == id.as_str())
        .unwrap();
    assert_eq!(d["sig_ok"], true, "{d:#}");
    assert!(
        d["body"]["data"]["question"]
            .as_str()
            .is_some_and(|q| q.contains("Ship <it>?")),
        "{d:#}"
    );
    assert!(
        d["body"]["url"].as_str().unwrap().ends_with("/approvals"),
        "{d:#}"
    );
}
