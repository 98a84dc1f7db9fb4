//! Real clients through the egress proxy (issue 44): `git clone` and `curl`
//! over HTTPS from a local TLS server, and Node's own HTTP client, under
//! bwrap and under Landlock. Every server is on loopback;
//! nothing here may reach another address, and in the sandbox the proxy
//! refuses whatever the test did not allow.

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::egress::{answer, bare_repo, origin, sandboxes, script, stdout, workspace};

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
