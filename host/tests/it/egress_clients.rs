//! Real clients through the egress proxy (issue 44): `git clone` and `curl`
//! over HTTPS from a local TLS server, Node's own HTTP client, and the real
//! `claude` CLI (pinned in `host/tests/agents`, installed by
//! `scripts/test.sh` with `npm ci`) talking to a fake provider, under bwrap
//! and under Landlock. Every server is on loopback (127.0.0.1, 127.0.0.2);
//! nothing here may reach another address, and in the sandbox the proxy
//! refuses whatever the test did not allow.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::{Value, json};

use crate::egress::{answer, bare_repo, origin, probe_op, sandboxes, script, stdout, workspace};

/// A local HTTPS origin: a certificate for `127.0.0.1` signed by a test CA
/// (`ca.crt`), serving what the plain origin serves (a bare repository for
/// git's dumb HTTP protocol among it), remembering every request line.
struct TlsOrigin {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
    ca: PathBuf,
    _root: tempfile::TempDir,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("failed to run openssl (the test makes its certificates with it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn tls_origin() -> &'static TlsOrigin {
    static ORIGIN: OnceLock<TlsOrigin> = OnceLock::new();
    ORIGIN.get_or_init(|| {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};

        let root = tempfile::tempdir().unwrap();
        let d = root.path();
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
        let mut ca = vec!["req", "-x509", "-nodes", "-days", "2"];
        ca.extend(ec);
        ca.extend([
            "-subj",
            "/CN=loopbox test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
        ]);
        openssl(d, &ca);
        let mut csr = vec!["req", "-new", "-nodes"];
        csr.extend(ec);
        csr.extend([
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ]);
        openssl(d, &csr);
        std::fs::write(
            d.join("ext"),
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        openssl(
            d,
            &[
                "x509",
                "-req",
                "-in",
                "server.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                "ext",
                "-out",
                "server.crt",
            ],
        );
        bare_repo(d);
        let certs = CertificateDer::pem_file_iter(d.join("server.crt"))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(d.join("server.key")).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = Arc::new(
            rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(certs, key)
                .unwrap(),
        );
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (served, log) = (d.to_path_buf(), seen.clone());
        std::thread::spawn(move || {
            for s in listener.incoming().flatten() {
                let (served, log, config) = (served.clone(), log.clone(), config.clone());
                let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
                let _ = s.set_write_timeout(Some(Duration::from_secs(10)));
                std::thread::spawn(move || {
                    let conn = rustls::ServerConnection::new(config).unwrap();
                    let mut tls = rustls::StreamOwned::new(conn, s);
                    answer(&mut tls, &served, &log);
                    tls.conn.send_close_notify();
                    let _ = tls.flush();
                });
            }
        });
        TlsOrigin {
            port,
            seen,
            ca: d.join("ca.crt"),
            _root: root,
        }
    })
}

#[test]
fn git_clones_over_https_from_a_local_server_through_the_proxy() {
    let t = tls_origin();
    let p = t.port;
    for sb in sandboxes() {
        let dir = workspace(sb, &format!("allow = [\"127.0.0.1:{p}\"]"));
        // Under Landlock nothing new may be made in the workspace's root.
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::copy(&t.ca, dir.path().join("ca.pem")).unwrap();
        let url = format!("https://127.0.0.1:{p}");
        let (v, log) = script(
            dir.path(),
            &format!(
                // Without the CA the server is not trusted: TLS goes end to
                // end, the proxy only carries it.
                "git clone -q {url}/repo.git sub/untrusted 2>&1 | grep -io 'certificate' | head -1 | sed 's/^/untrusted: /'; \
                 GIT_SSL_CAINFO=\"$PWD/ca.pem\" git clone -q {url}/repo.git sub/cloned && cat sub/cloned/README; \
                 curl -sS --max-time 20 --cacert ca.pem {url}/curl-tls-{sb}"
            ),
        );
        let out = stdout(&v);
        assert!(
            out.to_lowercase().contains("untrusted: certificate"),
            "{sb}: {v}\n{log}"
        );
        assert!(out.contains("cloned through the proxy"), "{sb}: {v}\n{log}");
        assert!(
            out.contains(&format!("origin says hello to 127.0.0.1:{p}")),
            "{sb}: {v}\n{log}"
        );
        let seen = t.seen.lock().unwrap().clone();
        assert!(
            seen.iter()
                .any(|l| l.starts_with("GET /repo.git/info/refs")),
            "{seen:?}"
        );
        assert!(
            seen.iter().any(|l| l.contains(&format!("/curl-tls-{sb}"))),
            "{seen:?}"
        );
        assert!(
            log.contains(&format!(
                "network: commands 127.0.0.1:{p} allowed (network.allow[0] (127.0.0.1:{p}))"
            )),
            "{sb}: {log}"
        );
        println!(
            "{sb}: git clone over https: {}",
            out.trim().replace('\n', " | ")
        );
    }
}

/// Whether this Node's `fetch` honours `HTTP_PROXY` (with
/// `NODE_USE_ENV_PROXY=1`, which loopbox sets): 22.21+, 24.5+ and later.
fn node_fetch_uses_proxy() -> bool {
    let o = std::process::Command::new("node")
        .arg("--version")
        .output()
        .expect("these tests need node (scripts/test.sh installs it)");
    let v = String::from_utf8_lossy(&o.stdout);
    let mut n = v
        .trim()
        .trim_start_matches('v')
        .split('.')
        .map(|x| x.parse::<u32>().unwrap_or(0));
    let (major, minor) = (n.next().unwrap_or(0), n.next().unwrap_or(0));
    major >= 25 || (major == 24 && minor >= 5) || (major == 22 && minor >= 21)
}

/// Node's own clients in the sandbox: `http.request` to the proxy with an
/// absolute URL, a CONNECT tunnel with TLS inside it, and `fetch`.
const NODE_CLIENTS: &str = r#"
const http = require("http"), tls = require("tls"), fs = require("fs");
const [port, tport, tag] = process.argv.slice(2);
setTimeout(() => { console.log("node: TIMEOUT"); process.exit(3); }, 40000).unref();
const proxy = new URL(process.env.HTTP_PROXY);
const auth = proxy.password
  ? { "Proxy-Authorization": "Basic " + Buffer.from(`${decodeURIComponent(proxy.username)}:${decodeURIComponent(proxy.password)}`).toString("base64") }
  : {};
function absolute() {
  return new Promise((ok) => {
    const req = http.request({ host: proxy.hostname, port: proxy.port, method: "GET",
      path: `http://127.0.0.1:${port}/node-http-${tag}`, headers: { Host: `127.0.0.1:${port}`, ...auth } }, (res) => {
      let b = ""; res.on("data", (d) => (b += d)); res.on("end", () => ok(`http ${res.statusCode} ${b.trim()}`));
    });
    req.on("error", (e) => ok(`http error ${e.code || e.message}`));
    req.end();
  });
}
function tunnel() {
  return new Promise((ok) => {
    const req = http.request({ host: proxy.hostname, port: proxy.port, method: "CONNECT",
      path: `127.0.0.1:${tport}`, headers: { Host: `127.0.0.1:${tport}`, ...auth } });
    req.on("connect", (res, socket) => {
      if (res.statusCode !== 200) return ok(`https CONNECT ${res.statusCode}`);
      const t = tls.connect({ socket, host: "127.0.0.1", ca: fs.readFileSync("ca.pem") }, () => {
        t.write(`GET /node-https-${tag} HTTP/1.1\r\nHost: 127.0.0.1:${tport}\r\nConnection: close\r\n\r\n`);
      });
      let b = ""; t.on("data", (d) => (b += d));
      t.on("end", () => ok(`https ${b.split("\r\n")[0]} ${b.split("\r\n\r\n")[1].trim()}`));
      t.on("error", (e) => ok(`https error ${e.code || e.message}`));
    });
    req.on("error", (e) => ok(`https error ${e.code || e.message}`));
    req.end();
  });
}
async function viaFetch() {
  try {
    const r = await fetch(`http://127.0.0.1:${port}/node-fetch-${tag}`, { signal: AbortSignal.timeout(10000) });
    return `fetch ${r.status} ${(await r.text()).trim()}`;
  } catch (e) {
    return `fetch failed: ${e.cause ? e.cause.code || e.cause.message : e.message}`;
  }
}
(async () => {
  console.log(`node ${process.version}`);
  console.log(await absolute());
  console.log(await tunnel());
  console.log(await viaFetch());
  process.exit(0);
})();
"#;

#[test]
fn node_reaches_allowed_origins_through_the_proxy_with_its_http_client() {
    let (o, t) = (origin(), tls_origin());
    let (p, tp) = (o.port, t.port);
    // Node 20's global fetch (undici) ignores HTTP_PROXY whatever the
    // environment says: NODE_USE_ENV_PROXY=1, which loopbox sets, is honoured
    // from 22.21 and 24.5 on. On an older Node, fetch has no way out (the
    // sandbox has no other route) and the test says so; Node's `http` module
    // reaches the proxy as any client that is told where it is does.
    let fetch_proxied = node_fetch_uses_proxy();
    for sb in sandboxes() {
        let dir = workspace(
            sb,
            &format!("allow = [\"127.0.0.1:{p}\", \"127.0.0.1:{tp}\"]"),
        );
        std::fs::write(dir.path().join("clients.js"), NODE_CLIENTS).unwrap();
        std::fs::copy(&t.ca, dir.path().join("ca.pem")).unwrap();
        let (v, log) = script(dir.path(), &format!("node clients.js {p} {tp} {sb} 2>&1"));
        let out = stdout(&v);
        let line = |k: &str| {
            out.lines()
                .find(|l| l.starts_with(k))
                .unwrap_or_else(|| panic!("{sb}: no `{k}` line: {out}\n{log}"))
                .to_string()
        };
        assert_eq!(
            line("http "),
            format!("http 200 origin says hello to 127.0.0.1:{p}"),
            "{sb}: {out}\n{log}"
        );
        assert_eq!(
            line("https "),
            format!("https HTTP/1.1 200 OK origin says hello to 127.0.0.1:{tp}"),
            "{sb}: {out}\n{log}"
        );
        let fetched = o
            .seen
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains(&format!("/node-fetch-{sb}")));
        if fetch_proxied {
            assert!(line("fetch").starts_with("fetch 200"), "{sb}: {out}");
            assert!(fetched, "{sb}: {out}");
        } else {
            assert!(line("fetch").starts_with("fetch failed"), "{sb}: {out}");
            assert!(!fetched, "{sb}: fetch got out without the proxy: {out}");
        }
        assert!(
            o.seen
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.contains(&format!("/node-http-{sb}"))),
            "{sb}"
        );
        assert!(
            t.seen
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.contains(&format!("/node-https-{sb}"))),
            "{sb}"
        );
        for (i, port) in [p, tp].into_iter().enumerate() {
            assert!(
                log.contains(&format!(
                    "network: commands 127.0.0.1:{port} allowed (network.allow[{i}] (127.0.0.1:{port}))"
                )),
                "{sb}: {log}"
            );
        }
        println!("{sb}: {}", out.trim().replace('\n', " | "));
    }
}

/// One request the fake provider saw.
#[derive(Debug, Clone)]
struct Asked {
    /// The address it came in on (127.0.0.1 or 127.0.0.2).
    at: String,
    line: String,
    api_key: Option<String>,
    body: String,
}

/// A fake Anthropic Messages API on `127.0.0.1:port`, and on
/// `127.0.0.2:port`, where nothing may ever arrive: every message gets a
/// one-text-block reply (streamed when asked), token counts a number,
/// anything else a 404.
struct Provider {
    port: u16,
    seen: Arc<Mutex<Vec<Asked>>>,
}

const REPLY: &str = "hello from the fake provider";

impl Provider {
    fn start() -> Provider {
        let seen = Arc::new(Mutex::new(Vec::new()));
        for _ in 0..20 {
            let one = TcpListener::bind("127.0.0.1:0").unwrap();
            let port = one.local_addr().unwrap().port();
            let Ok(two) = TcpListener::bind(("127.0.0.2", port)) else {
                continue;
            };
            for l in [one, two] {
                let seen = seen.clone();
                std::thread::spawn(move || {
                    for s in l.incoming().flatten() {
                        let seen = seen.clone();
                        std::thread::spawn(move || provide(s, &seen));
                    }
                });
            }
            return Provider { port, seen };
        }
        panic!("no port free on both 127.0.0.1 and 127.0.0.2");
    }

    fn seen(&self) -> Vec<Asked> {
        self.seen.lock().unwrap().clone()
    }
}

fn provide(s: TcpStream, seen: &Mutex<Vec<Asked>>) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
    let at = s
        .local_addr()
        .map(|a| a.ip().to_string())
        .unwrap_or_default();
    let mut r = BufReader::new(&s);
    // Keep-alive: requests one after another until the client closes.
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let (mut length, mut chunked, mut api_key) = (0usize, false, None);
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            if h == "\r\n" {
                break;
            }
            let (k, v) = h.split_once(':').unwrap_or((&h, ""));
            let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_string());
            match k.as_str() {
                "content-length" => length = v.parse().unwrap_or(0),
                "transfer-encoding" => chunked = v.eq_ignore_ascii_case("chunked"),
                "x-api-key" => api_key = Some(v),
                _ => {}
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                let mut size = String::new();
                if r.read_line(&mut size).unwrap_or(0) == 0 {
                    return;
                }
                let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or(""), 16)
                    .unwrap_or(0);
                let mut chunk = vec![0; n + 2];
                if r.read_exact(&mut chunk).is_err() {
                    return;
                }
                body.extend_from_slice(&chunk[..n]);
                if n == 0 {
                    break;
                }
            }
        } else {
            body.resize(length.min(16 << 20), 0);
            if r.read_exact(&mut body).is_err() {
                return;
            }
        }
        let body = String::from_utf8_lossy(&body).into_owned();
        seen.lock().unwrap().push(Asked {
            at: at.clone(),
            line: line.trim().to_string(),
            api_key,
            body: body.clone(),
        });
        let request: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        let path = line.split(' ').nth(1).unwrap_or("/");
        let model = request["model"].as_str().unwrap_or("claude-test");
        let (status, kind, out) = if path.starts_with("/v1/messages/count_tokens") {
            (
                "200 OK",
                "application/json",
                json!({"input_tokens": 12}).to_string(),
            )
        } else if path.starts_with("/v1/messages") && request["stream"] == true {
            ("200 OK", "text/event-stream", stream(model))
        } else if path.starts_with("/v1/messages") {
            let m = message(model, json!([{"type": "text", "text": REPLY}]));
            ("200 OK", "application/json", m.to_string())
        } else {
            let e = json!({"type": "error", "error": {"type": "not_found_error", "message": "not here"}});
            ("404 Not Found", "application/json", e.to_string())
        };
        let head = format!(
            "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nrequest-id: req_loopbox\r\n\r\n",
            out.len()
        );
        if (&s).write_all(head.as_bytes()).is_err() || (&s).write_all(out.as_bytes()).is_err() {
            return;
        }
    }
}

fn message(model: &str, content: Value) -> Value {
    json!({
        "id": "msg_loopbox", "type": "message", "role": "assistant", "model": model,
        "content": content, "stop_reason": "end_turn", "stop_sequence": null,
        "usage": {"input_tokens": 12, "output_tokens": 6}
    })
}

/// The reply as the Messages API streams it (server-sent events).
fn stream(model: &str) -> String {
    let mut start = message(model, json!([]));
    start["stop_reason"] = Value::Null;
    let events = [
        (
            "message_start",
            json!({"type": "message_start", "message": start}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": REPLY}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 6}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ];
    events
        .iter()
        .map(|(e, d)| format!("event: {e}\ndata: {d}\n\n"))
        .collect()
}

/// Where `npm ci` in `host/tests/agents` put the `claude` command.
fn claude_bin() -> PathBuf {
    let dir = crate::common::repo().join("host/tests/agents");
    let bin = dir.join("node_modules/.bin");
    assert!(
        bin.join("claude").is_file(),
        "the claude CLI is not installed: run ./scripts/test.sh, or `npm ci` in {}",
        dir.display()
    );
    bin
}

#[test]
fn the_real_claude_cli_reaches_its_provider_only_through_the_proxy() {
    let bin = claude_bin();
    let provider = Provider::start();
    let p = provider.port;
    for sb in sandboxes() {
        // The agent's state (~/.claude, ~/.claude.json) in a home of its own,
        // outside /tmp (a bubblewrap sandbox's /tmp is its own).
        let home = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        std::fs::create_dir(home.path().join(".claude")).unwrap();
        let dir = tempfile::tempdir().unwrap();
        // No preset: api.anthropic.com and the rest are refused like any
        // other host, so nothing can leave the machine whatever claude tries.
        std::fs::write(
            dir.path().join("loopbox.toml"),
            format!(
                "[shell]\npath = \"{}:/usr/local/bin:/usr/bin:/bin\"\nsandbox = \"{sb}\"\n\n\
                 [agent]\nrunner = \"claude\"\ntimeout_ms = 120000\n\
                 pass_env = [\"HOME\", \"ANTHROPIC_API_KEY\", \"ANTHROPIC_BASE_URL\", \"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC\", \"DISABLE_TELEMETRY\", \"DISABLE_AUTOUPDATER\", \"DISABLE_ERROR_REPORTING\"]\n\n\
                 [network]\nallow = [\"127.0.0.1:{p}\"]\nagent_preset = false\n",
                bin.display()
            ),
        )
        .unwrap();
        let home_s = home.path().to_string_lossy().into_owned();
        // claude's telemetry, error reports and update checks are off too,
        // though the proxy would refuse them anyway.
        let ask = |base: &str, text: &str| {
            let env = [
                ("HOME", home_s.as_str()),
                ("ANTHROPIC_API_KEY", "sk-ant-loopbox-test-dummy"),
                ("ANTHROPIC_BASE_URL", base),
                ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
                ("DISABLE_TELEMETRY", "1"),
                ("DISABLE_AUTOUPDATER", "1"),
                ("DISABLE_ERROR_REPORTING", "1"),
            ];
            probe_op(dir.path(), &json!({"op": "prompt", "text": text}), &env)
        };

        // Allowed: the request reaches the provider, the reply comes back.
        let text = format!("say hello from {sb}");
        let (v, log) = ask(&format!("http://127.0.0.1:{p}"), &text);
        let asked: Vec<Asked> = provider
            .seen()
            .into_iter()
            .filter(|a| a.body.contains(&text))
            .collect();
        assert!(!asked.is_empty(), "{sb}: {:?}\n{v}\n{log}", provider.seen());
        for a in &asked {
            assert_eq!(a.at, "127.0.0.1", "{a:?}");
            assert!(a.line.starts_with("POST /v1/messages"), "{a:?}");
            assert_eq!(
                a.api_key.as_deref(),
                Some("sk-ant-loopbox-test-dummy"),
                "{a:?}"
            );
        }
        assert_eq!(v["ok"]["exit_code"], 0, "{sb}: {v}\n{log}");
        assert_eq!(v["ok"]["stdout"], REPLY, "{sb}: {v}\n{log}");
        // Its state went where it may write: its home, not the workspace.
        let state: Vec<_> = std::fs::read_dir(home.path().join(".claude"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(!state.is_empty(), "{sb}: nothing in ~/.claude");
        assert!(
            log.contains(&format!(
                "network: agent 127.0.0.1:{p} allowed (network.allow[0] (127.0.0.1:{p}))"
            )),
            "{sb}: {log}"
        );
        for l in log.lines().filter(|l| l.contains(" allowed (")) {
            assert!(l.contains(&format!("127.0.0.1:{p} allowed")), "{sb}: {l}");
        }
        println!(
            "{sb}: claude asked the provider {} time(s): {:?}; it said {}; ~/.claude has {state:?}; {}",
            asked.len(),
            asked.iter().map(|a| &a.line).collect::<Vec<_>>(),
            v["ok"]["stdout"],
            network_lines(&log)
        );

        // Not allowed: the proxy refuses, and nothing reaches 127.0.0.2.
        let text = format!("say hello to a host not granted from {sb}");
        let (v, log) = ask(&format!("http://127.0.0.2:{p}"), &text);
        assert!(
            log.contains(&format!("network: agent 127.0.0.2:{p} refused")),
            "{sb}: {v}\n{log}"
        );
        assert!(
            !provider.seen().iter().any(|a| a.at != "127.0.0.1"),
            "{sb}: {:?}",
            provider.seen()
        );
        assert_ne!(v["ok"]["exit_code"], 0, "{sb}: {v}\n{log}");
        assert!(
            v["ok"]["stdout"]
                .as_str()
                .is_some_and(|o| o.contains("403 loopbox refused this connection")),
            "{sb}: {v}\n{log}"
        );
        println!(
            "{sb}: not granted: claude said {:?}; {}",
            v["ok"]["stdout"],
            network_lines(&log)
        );
        // Whatever else claude tried, only the provider was let through.
        for l in log.lines().filter(|l| l.contains(" allowed (")) {
            assert!(l.contains(&format!("127.0.0.1:{p} allowed")), "{sb}: {l}");
        }
    }
}

/// The run log's network lines, joined.
fn network_lines(log: &str) -> String {
    log.lines()
        .filter(|l| l.contains("network: "))
        .collect::<Vec<_>>()
        .join(" | ")
}
