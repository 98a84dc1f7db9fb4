//! `loopbox serve` and its dashboard, whole process over real HTTP on
//! loopback: the real binary as the server, the probe test policy built from
//! source, requests over plain TCP (a fresh connection each, as a browser's
//! first request is).
//!
//! `cargo bench -p loopbox --bench serve` prints one table:
//! - the dashboard's runs page with 10,000 runs in the store (signed in, the
//!   first page of 50, rendered), goal at most 100 ms;
//! - `GET /api/v1/runs/ID` of a finished run, goal p50 at most 5 ms;
//! - an approval click (the dashboard's approve form, posted with the
//!   session cookie and CSRF token) to the command started (the journal's
//!   start time of the approved action, on the same clock), goal p50 at most 100 ms;
//! - the server's memory with 200 runs waiting for approvals, goal under 200 MB;
//! - the memory of a fresh server after 200 concurrent requests and 50 runs,
//!   once they are over, goal under 100 MB.
//!
//! `cargo test --all-targets` runs it once, small, as a smoke test.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_loopbox");

struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// One request on a fresh connection, read to its end.
fn http(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Resp {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let status = lines.next().unwrap().split_whitespace().nth(1).unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    // Bodies here are sent whole (Content-Length) or chunked: unchunk the latter.
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let mut out = String::new();
        let mut rest = body;
        while let Some((size, tail)) = rest.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 || tail.len() < n {
                break;
            }
            out.push_str(&tail[..n]);
            rest = tail[n..].trim_start_matches("\r\n");
        }
        out
    } else {
        body.to_string()
    };
    Resp {
        status: status.parse().unwrap(),
        headers,
        body,
    }
}

fn serve_cmd(config: &Path, args: &[&str]) -> String {
    let out = Command::new(BIN)
        .arg("serve")
        .arg("--config")
        .arg(config)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn row(name: &str, mut v: Vec<f64>, goal: &str) {
    v.sort_by(f64::total_cmp);
    println!(
        "{name:<52} {:>9.2} ms {:>9.2} ms {:>6}   {goal}",
        percentile(&v, 0.5),
        percentile(&v, 0.99),
        v.len()
    );
}

/// `VmRSS` and `VmHWM` of process `pid`, in MB.
fn memory(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb = |key: &str| -> f64 {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0.0)
    };
    (kb("VmRSS:") / 1024.0, kb("VmHWM:") / 1024.0)
}

struct Server {
    child: Child,
    addr: String,
    admin: String,
    cookie: String,
    csrf: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn api(&self, method: &str, path: &str, body: Option<Value>) -> Resp {
        let auth = format!("Bearer {}", self.admin);
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        http(
            &self.addr,
            method,
            path,
            &[
                ("Authorization", &auth),
                ("Content-Type", "application/json"),
            ],
            body.as_bytes(),
        )
    }

    fn start(&self, op: Value) -> String {
        let r = self.api(
            "POST",
            "/api/v1/runs",
            Some(json!({"policy": "probe", "workspace": "proj", "input": op})),
        );
        assert_eq!(r.status, 201, "{}", r.body);
        r.json()["id"].as_str().unwrap().to_string()
    }

    fn wait(&self, id: &str, done: impl Fn(&Value) -> bool) -> Value {
        let t = Instant::now();
        loop {
            let v = self.api("GET", &format!("/api/v1/runs/{id}"), None).json();
            if done(&v) {
                return v;
            }
            assert!(t.elapsed() < Duration::from_secs(120), "run {id}: {v}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn page(&self, path: &str) -> Resp {
        http(&self.addr, "GET", path, &[("Cookie", &self.cookie)], b"")
    }
}

/// Lay out a server in `dir` with one tenant (`bench`, the probe installed, `tee
/// -a count.txt` asking for approval), `runs` rows already in its store, start
/// it and sign in to its dashboard.
fn server(dir: &Path, probe: &Path, runs: usize) -> Server {
    std::fs::create_dir_all(dir.join("roots/bench/proj")).unwrap();
    let config = dir.join("loopbox-server.toml");
    std::fs::write(
        &config,
        // Connections per address raised for the burst below, all from 127.0.0.1.
        "[server]\nlisten = \"127.0.0.1:0\"\ndata = \"data\"\nmax_running = 8\nmax_log_streams = 16\nmax_connections_per_ip = 512\n\n\
         [tenants.bench]\nroots = [\"roots/bench\"]\nmax_running = 8\nmax_queued = 1000\n",
    )
    .unwrap();
    let tc = dir.join("tenant.toml");
    std::fs::write(
        &tc,
        format!(
            "[policies.probe]\nsource = {:?}\nunsigned = true\n\n[policies.probe.shell]\nallow = [[\"echo\"]]\nask = [[\"tee\", \"-a\", \"count.txt\"]]\n",
            probe.display().to_string()
        ),
    )
    .unwrap();
    serve_cmd(
        &config,
        &[
            "tenant-config",
            "--tenant",
            "bench",
            "--set",
            tc.to_str().unwrap(),
        ],
    );
    let admin = serve_cmd(
        &config,
        &[
            "token", "create", "--tenant", "bench", "--role", "admin", "--name", "admin",
        ],
    );
    // The store's other runs, written straight in: finished runs of this tenant.
    let db = rusqlite::Connection::open(dir.join("data/loopbox.db")).unwrap();
    db.execute(
        "WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < ?1)
         INSERT INTO runs (id, policy, policy_digest, input, status, created_at, updated_at, seed, options, tenant, workspace, started_by, outcome, actions)
         SELECT printf('rold%06d', i), '/p/probe.wasm', 'd', '{}', CASE i % 5 WHEN 0 THEN 'failed' ELSE 'done' END,
                1700000000000 + i * 1000, 1700000000000 + i * 1000 + 500, 's', '{\"policy_name\": \"probe\"}', 'bench',
                '/w', 'bench/admin', '{\"success\": true, \"summary\": \"an older run\"}', i % 7 FROM k",
        [runs as i64],
    )
    .unwrap();
    drop(db);
    let mut child = Command::new(BIN)
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .env("LOOPBOX_CACHE_DIR", dir.join("cache"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let addr = first
        .split("http://")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address: {first:?}"))
        .to_string();
    // Sign in as a browser does: the form, its cookie and field, the post.
    let form = http(&addr, "GET", "/login", &[], b"");
    let login = form
        .header("set-cookie")
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let field = login.split_once('=').unwrap().1.to_string();
    let body =
        serde_urlencoded::to_string([("csrf_token", field.as_str()), ("token", &admin)]).unwrap();
    let r = http(
        &addr,
        "POST",
        "/login",
        &[
            ("Cookie", &login),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        body.as_bytes(),
    );
    assert_eq!(r.status, 303, "{}", r.body);
    let cookie = r
        .headers
        .iter()
        .find(|(k, v)| k == "set-cookie" && v.starts_with("loopbox_session="))
        .map(|(_, v)| v.split(';').next().unwrap().to_string())
        .unwrap();
    let who = http(&addr, "GET", "/api/v1/session", &[("Cookie", &cookie)], b"").json();
    Server {
        child,
        addr,
        admin,
        cookie,
        csrf: who["csrf_token"].as_str().unwrap().to_string(),
    }
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let (store_runs, samples, approvals, waiting) = if full {
        (10_000, 200, 40, 200)
    } else {
        (200, 3, 2, 5)
    };
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf();
    let probe = loopbox_guest_build::Repo::containing(&repo)
        .build_rust_guests(&["probe"])
        .remove(0)
        .1;
    // Outside /tmp: bubblewrap gives each command a private /tmp, which would hide the roots.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let srv = server(dir.path(), &probe, store_runs);
    let pid = srv.child.id();

    println!(
        "{:<52} {:>12} {:>12} {:>6}   goal",
        "loopbox serve, one process, requests over loopback", "p50", "p99", "n"
    );
    // 1. The runs page, 10,000 runs in the store.
    let first = srv.page("/runs");
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(
        first.body.matches("<tr>").count(),
        51,
        "a header and 50 runs"
    );
    let mut page = vec![];
    let mut older = vec![];
    for _ in 0..samples {
        let t = Instant::now();
        let r = srv.page("/runs");
        page.push(ms(t.elapsed()));
        assert_eq!(r.status, 200);
        let t = Instant::now();
        let r = srv.page(&format!(
            "/runs?status=done&before=rold{:06}",
            store_runs / 2
        ));
        older.push(ms(t.elapsed()));
        assert_eq!(r.status, 200);
    }
    row(
        &format!("runs page, {store_runs} runs in the store"),
        page,
        "at most 100 ms",
    );
    row("runs page, status filter, page from the middle", older, "");

    // 2. One run as JSON.
    let done = srv.start(json!({"op": "exec", "argv": ["echo", "hello"]}));
    srv.wait(&done, |v| v["status"] == "done");
    let mut show = vec![];
    let mut show_page = vec![];
    for _ in 0..samples {
        let t = Instant::now();
        let r = srv.api("GET", &format!("/api/v1/runs/{done}"), None);
        show.push(ms(t.elapsed()));
        assert_eq!(r.status, 200);
        let t = Instant::now();
        let r = srv.page(&format!("/runs/{done}"));
        show_page.push(ms(t.elapsed()));
        assert_eq!(r.status, 200);
    }
    row("GET /api/v1/runs/ID", show, "p50 at most 5 ms");
    row("the run's dashboard page", show_page, "");

    // 3. An approval click to the command started, one run at a time.
    let mut click = vec![];
    for i in 0..approvals {
        let run = srv.start(
            json!({"op": "exec", "argv": ["tee", "-a", "count.txt"], "stdin": format!("{i}\n")}),
        );
        let v = srv.wait(&run, |v| {
            v["approvals"]
                .as_array()
                .is_some_and(|a| a.iter().any(|a| a["status"] == "pending"))
        });
        let a = &v["approvals"][0];
        let body = serde_urlencoded::to_string([
            ("csrf_token", srv.csrf.as_str()),
            ("digest", a["digest"].as_str().unwrap()),
            ("reason", "bench"),
        ])
        .unwrap();
        let clicked = loopbox::db::now_ms();
        let r = http(
            &srv.addr,
            "POST",
            &format!("/approvals/{}/approve?from=run", a["id"].as_str().unwrap()),
            &[
                ("Cookie", &srv.cookie),
                ("Content-Type", "application/x-www-form-urlencoded"),
                ("Origin", &format!("http://{}", srv.addr)),
            ],
            body.as_bytes(),
        );
        assert_eq!(r.status, 303, "{}", r.body);
        let v = srv.wait(&run, |v| v["status"] == "done");
        let started =
            loopbox::serve::web::page::parse_rfc3339(v["journal"][0]["started"].as_str().unwrap())
                .unwrap();
        assert_eq!(v["journal"][0]["exit_code"], 0, "{v}");
        click.push((started - clicked) as f64);
    }
    row(
        "approval click to the command started",
        click,
        "p50 at most 100 ms",
    );

    // 4. Runs waiting for approvals: the server's memory.
    let (before, _) = memory(pid);
    let ids: Vec<String> = (0..waiting)
        .map(|i| {
            srv.start(json!({"op": "exec", "argv": ["tee", "-a", "count.txt"], "stdin": format!("w{i}\n")}))
        })
        .collect();
    let t = Instant::now();
    loop {
        let n = srv
            .api("GET", "/api/v1/approvals?status=pending&limit=1000", None)
            .json()["approvals"]
            .as_array()
            .unwrap()
            .len();
        if n == waiting {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(600),
            "{n} of {waiting} asked"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (rss, peak) = memory(pid);
    let inbox = {
        let t = Instant::now();
        let r = srv.page("/approvals");
        assert_eq!(r.status, 200);
        assert_eq!(
            r.body.matches("class=\"card approval\"").count(),
            waiting.min(100)
        );
        ms(t.elapsed())
    };
    println!(
        "\n{} runs waiting for approvals (the last asking {:.1} s after the last start):",
        ids.len(),
        t.elapsed().as_secs_f64()
    );
    println!(
        "  resident memory {rss:.1} MB (before them {before:.1} MB; peak of the process {peak:.1} MB)   goal under 200 MB"
    );
    println!("  the approvals inbox with them (the first 100): {inbox:.1} ms");
    drop(srv);

    // 5. A burst, then quiet: what a fresh server keeps once it is over.
    let (requests, runs) = if full { (200, 50) } else { (20, 5) };
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let srv = server(dir.path(), &probe, store_runs);
    let pid = srv.child.id();
    let done = srv.start(json!({"op": "exec", "argv": ["echo", "hello"]}));
    srv.wait(&done, |v| v["status"] == "done");
    let (before, _) = memory(pid);
    let t = Instant::now();
    let gate = &std::sync::Barrier::new(requests + runs);
    std::thread::scope(|s| {
        let srv = &srv;
        for i in 0..requests {
            let done = &done;
            s.spawn(move || {
                gate.wait();
                let r = match i % 4 {
                    0 => srv.page("/runs"),
                    1 => srv.api("GET", "/api/v1/runs?limit=200", None),
                    2 => srv.page(&format!("/runs/{done}")),
                    _ => srv.page("/approvals"),
                };
                assert_eq!(r.status, 200, "{}", r.body);
            });
        }
        for i in 0..runs {
            s.spawn(move || {
                gate.wait();
                let id = srv.start(json!({"op": "exec", "argv": ["echo", format!("r{i}")]}));
                srv.wait(&id, |v| v["status"] == "done");
            });
        }
    });
    let burst = t.elapsed();
    std::thread::sleep(Duration::from_secs(2));
    let (rss, peak) = memory(pid);
    println!(
        "\n{requests} concurrent requests and {runs} runs at once on a fresh server (over in {:.1} s), 2 s later:",
        burst.as_secs_f64()
    );
    let threads = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .count();
    println!(
        "  resident memory {rss:.1} MB (before them {before:.1} MB; peak of the process {peak:.1} MB; {threads} threads)   goal under 100 MB"
    );
}
