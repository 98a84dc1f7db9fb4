//! The network as a grant (`[network]`): real clients (curl, Python, git) in
//! the sandbox reach a local origin only through loopbox's proxy, under bwrap
//! and under Landlock, and every way around it is refused with its reason.
//! Servers are on loopback only.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{Value, json};

use crate::common;

/// A local origin: serves files under its root (a git repository for
/// `git clone`), anything else as `origin says hello`, and remembers every
/// request line it saw.
pub(crate) struct Origin {
    pub(crate) port: u16,
    pub(crate) seen: Arc<Mutex<Vec<String>>>,
    _root: tempfile::TempDir,
}

pub(crate) fn origin() -> &'static Origin {
    static ORIGIN: OnceLock<Origin> = OnceLock::new();
    ORIGIN.get_or_init(|| {
        let root = tempfile::tempdir().unwrap();
        bare_repo(root.path());
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (served, log) = (root.path().to_path_buf(), seen.clone());
        std::thread::spawn(move || {
            for s in listener.incoming().flatten() {
                let (served, log) = (served.clone(), log.clone());
                let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(10)));
                std::thread::spawn(move || answer(s, &served, &log));
            }
        });
        Origin {
            port,
            seen,
            _root: root,
        }
    })
}

/// A repository `repo` in `root` with one commit (its `README` says `cloned
/// through the proxy`), and its bare clone `repo.git` ready for git's dumb
/// HTTP protocol.
pub(crate) fn bare_repo(root: &Path) {
    let repo = root.join("repo");
    let git = |args: &[&str], cwd: &Path| {
        let o = std::process::Command::new("git")
            .args(args)
            .current_dir(cwd)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .unwrap();
        assert!(o.status.success(), "git {args:?}: {o:?}");
    };
    std::fs::create_dir(&repo).unwrap();
    git(&["init", "-q", "-b", "main"], &repo);
    std::fs::write(repo.join("README"), "cloned through the proxy\n").unwrap();
    git(&["add", "README"], &repo);
    git(&["commit", "-qm", "one"], &repo);
    git(&["clone", "-q", "--bare", "repo", "repo.git"], root);
    git(&["update-server-info"], &root.join("repo.git"));
}

/// Answer one request on `s` (plain TCP, or TLS): a file under `root`, a
/// redirect for `/redirect/HOST:PORT`, else `origin says hello to HOST`;
/// its request line goes to `seen`.
pub(crate) fn answer(mut s: impl Read + Write, root: &Path, seen: &Mutex<Vec<String>>) {
    let mut r = BufReader::new(&mut s);
    let mut line = String::new();
    if r.read_line(&mut line).is_err() {
        return;
    }
    let mut host = String::new();
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
            break;
        }
        if h.to_ascii_lowercase().starts_with("host:") {
            host = h[5..].trim().to_string();
        }
    }
    drop(r);
    seen.lock().unwrap().push(line.trim().to_string());
    let path = line.split(' ').nth(1).unwrap_or("/");
    let path = path.split('?').next().unwrap_or("/");
    if let Some(to) = path.strip_prefix("/redirect/") {
        let _ = s.write_all(
            format!("HTTP/1.1 302 Found\r\nLocation: http://{to}/\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").as_bytes(),
        );
        return;
    }
    let file = root.join(path.trim_start_matches('/'));
    let body = if path.len() > 1 && file.is_file() {
        std::fs::read(&file).unwrap()
    } else if path.len() > 1 && path.starts_with("/repo.git") {
        let _ = s
            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        return;
    } else {
        format!("origin says hello to {host}\n").into_bytes()
    };
    let _ = s.write_all(
        format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    );
    let _ = s.write_all(&body);
    let _ = s.flush();
}

/// The sandboxes this machine can run the tests under.
pub(crate) fn sandboxes() -> Vec<&'static str> {
    let s = loopbox::exec::sandbox::support();
    let mut v = Vec::new();
    if s.bwrap.is_ok() {
        v.push("bwrap");
    }
    if s.landlock_usable().is_ok_and(|abi| abi >= 4) {
        v.push("landlock");
    }
    assert!(
        !v.is_empty() || std::env::var_os("CI").is_none(),
        "CI has bwrap and Landlock 4+"
    );
    v
}

pub(crate) fn workspace(sandbox: &str, network: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("loopbox.toml"),
        format!("[shell]\nscripts = true\nsandbox = \"{sandbox}\"\n\n[network]\n{network}\n"),
    )
    .unwrap();
    dir
}

/// Run `source` with `sh -c` in the sandbox; its output, and the run's log.
pub(crate) fn script(dir: &Path, source: &str) -> (Value, String) {
    probe_op(
        dir,
        &json!({"op": "script", "source": source, "timeout_ms": 60000}),
        &[],
    )
}

/// Run the probe guest with `op` as its input, loopbox's environment having
/// `env` besides the test's own; the op's result, and the run's log.
pub(crate) fn probe_op(dir: &Path, op: &Value, env: &[(&str, &str)]) -> (Value, String) {
    let probe = common::probe().to_string_lossy().into_owned();
    let args = ["run", &probe, "--input", &op.to_string(), "--json"];
    let o = common::loopbox_with(dir, &args, env, std::time::Duration::from_secs(300));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    let id = v["id"]
        .as_str()
        .or(v["run_id"].as_str())
        .unwrap_or_default()
        .to_string();
    let log = common::loopbox(dir, &["runs", "log", &id]);
    let log =
        String::from_utf8_lossy(&log.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(!v["outcome"]["data"].is_null(), "{v}\n{log}");
    (v["outcome"]["data"].clone(), log)
}

pub(crate) fn stdout(v: &Value) -> String {
    v["ok"]["stdout"]
        .as_str()
        .unwrap_or_else(|| panic!("{v}"))
        .to_string()
}

#[test]
fn real_clients_reach_an_allowed_origin_only_through_the_proxy() {
    let o = origin();
    let p = o.port;
    for sb in sandboxes() {
        let dir = workspace(sb, &format!("allow = [\"127.0.0.1:{p}\"]"));
        // Under Landlock nothing new may be made in the workspace's root.
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let (v, log) = script(
            dir.path(),
            &format!(
                "curl -sS --max-time 20 http://127.0.0.1:{p}/curl-{sb}; \
                 /usr/bin/python3 -c 'import urllib.request; print(urllib.request.urlopen(\"http://127.0.0.1:{p}/python-{sb}\", timeout=20).read().decode())'; \
                 git clone -q http://127.0.0.1:{p}/repo.git sub/cloned && cat sub/cloned/README"
            ),
        );
        let out = stdout(&v);
        assert_eq!(
            out.matches("origin says hello to 127.0.0.1").count(),
            2,
            "{sb}: {v}\n{log}"
        );
        assert!(out.contains("cloned through the proxy"), "{sb}: {v}\n{log}");
        let seen = o.seen.lock().unwrap().clone();
        assert!(
            seen.iter().any(|l| l.contains(&format!("/curl-{sb}"))),
            "{seen:?}"
        );
        assert!(
            log.contains(&format!(
                "network: commands 127.0.0.1:{p} allowed (network.allow[0] (127.0.0.1:{p}))"
            )),
            "{sb}: {log}"
        );
    }
}

#[test]
fn every_way_around_the_rules_is_refused_with_its_reason() {
    let o = origin();
    let p = o.port;
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let up = udp.local_addr().unwrap().port();
    for sb in sandboxes() {
        // Names and `*` only: no rule names a special address.
        let dir = workspace(
            sb,
            "allow = [\"localhost\", \"*\"]\ndeny = [\"*.internal\"]",
        );
        let tag = format!("bypass-{sb}");
        let refused = "| grep -i x-loopbox-refused";
        let cases = [
            // A direct connect that ignores the proxy variables.
            format!(
                "curl -sS --noproxy '*' --max-time 5 http://127.0.0.1:{p}/{tag} || echo DIRECT-FAILED"
            ),
            // An address literal, a name resolving to loopback, cloud metadata.
            format!("curl -s -i --max-time 10 http://127.0.0.2:{p}/{tag} {refused}"),
            format!("curl -s -i --max-time 10 http://localhost:{p}/{tag} {refused}"),
            format!("curl -s -i --max-time 10 http://169.254.169.254/{tag} {refused}"),
            // An IPv4-mapped IPv6 form of loopback.
            format!("curl -s -g -i --max-time 10 'http://[::ffff:127.0.0.1]:{p}/{tag}' {refused}"),
            // A denied name, before any lookup.
            format!("curl -s -i --max-time 10 http://db.internal/{tag} {refused}"),
            // SOCKS by address (curl resolves the name itself) and by name.
            format!(
                "curl -sS --max-time 10 -x \"$(echo $ALL_PROXY | sed 's/socks5h/socks5/')\" http://localhost:{p}/{tag} || echo SOCKS-IP-REFUSED"
            ),
            format!(
                "curl -sS --max-time 10 -x \"$ALL_PROXY\" http://localhost:{p}/{tag} || echo SOCKS-NAME-REFUSED"
            ),
            // UDP straight to a listener on the host.
            format!(
                "/usr/bin/python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b\"{tag}\", (\"127.0.0.1\", {up}))' 2>&1 | tail -1; echo UDP-DONE"
            ),
            // An address in decimal and in octal, sent as they are.
            format!(
                "/usr/bin/python3 -c 'import os,socket,urllib.parse as u; x=u.urlsplit(os.environ[\"HTTP_PROXY\"]); import base64; a=base64.b64encode(f\"{{x.username}}:{{x.password}}\".encode()).decode()\nfor h in (\"2130706433\", \"0177.0.0.1\"):\n s=socket.create_connection((x.hostname, x.port)); s.sendall(f\"GET http://{{h}}:{p}/{tag} HTTP/1.1\\r\\nProxy-Authorization: Basic {{a}}\\r\\n\\r\\n\".encode()); print(s.recv(4096).decode().split(chr(13))[1])'"
            ),
        ];
        let (v, log) = script(dir.path(), &cases.join("; echo ---; "));
        let out = stdout(&v);
        let parts: Vec<&str> = out.split("---\n").collect();
        assert_eq!(parts.len(), cases.len(), "{sb}: {out}\n{log}");
        let want = [
            "DIRECT-FAILED",
            "127.0.0.2 is a loopback address, which a name or `*` never reaches",
            "localhost resolves to 127.0.0.1, a loopback address",
            "169.254.169.254 is a link-local (cloud metadata) address",
            "127.0.0.1 is a loopback address",
            "network.deny[0] (*.internal)",
            "SOCKS-IP-REFUSED",
            "SOCKS-NAME-REFUSED",
            "UDP-DONE",
            "in a form other than the standard one",
        ];
        for (i, w) in want.iter().enumerate() {
            assert!(
                parts[i].contains(w),
                "{sb}: case {i} wants `{w}`: {}\n{out}\n{log}",
                parts[i]
            );
        }
        assert_eq!(parts[9].matches("standard").count(), 2, "{sb}: {out}");
        let seen = o.seen.lock().unwrap().clone();
        assert!(
            !seen.iter().any(|l| l.contains(&tag)),
            "{sb}: the origin was reached: {seen:?}"
        );
        let mut buf = [0u8; 64];
        assert!(udp.recv(&mut buf).is_err(), "{sb}: a datagram got out");
        assert!(
            log.contains("refused: network.deny[0] (*.internal)"),
            "{sb}: {log}"
        );
    }
}

/// TCP Fast Open connects without connect(2): `sendto(MSG_FASTOPEN)` (and
/// `sendmsg`) went past Landlock's TCP rules to any loopback port (kernel
/// 6.18: the origin answered the sandbox). Refused by the seccomp filter.
#[test]
fn a_tcp_fast_open_send_does_not_connect_past_the_proxy() {
    let o = origin();
    let p = o.port;
    for sb in sandboxes() {
        let dir = workspace(sb, "allow = [\"x.test\"]");
        let tag = format!("fastopen-{sb}");
        let (v, log) = script(
            dir.path(),
            &format!(
                "/usr/bin/python3 -c '\nimport socket\nfor how in (\"sendto\", \"sendmsg\"):\n s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)\n m = b\"GET /{tag} HTTP/1.0\\r\\n\\r\\n\"; a = (\"127.0.0.1\", {p})\n try:\n  s.sendto(m, socket.MSG_FASTOPEN, a) if how == \"sendto\" else s.sendmsg([m], [], socket.MSG_FASTOPEN, a)\n  print(how, \"REACHED\", s.recv(100))\n except OSError as e:\n  print(how, \"refused\", e.errno)\n'"
            ),
        );
        let out = stdout(&v);
        assert_eq!(out.matches("refused 13").count(), 2, "{sb}: {v}\n{log}");
        let seen = o.seen.lock().unwrap().clone();
        assert!(
            !seen.iter().any(|l| l.contains(&tag)),
            "{sb}: the origin was reached: {seen:?}"
        );
    }
}

/// A flood of idle connections to the proxy: each was held for the head's
/// 30 s before `max_connections` was looked at, so a script could take every
/// file descriptor loopbox had (20000 here, from six processes); accept then
/// failed with EMFILE, which ended the accept loop, and the run's proxy was
/// gone (`Connection refused`) for the rest of the run. Now a connection
/// over the limit is closed within a second, and the proxy lives on.
#[test]
fn a_flood_of_idle_connections_is_closed_and_the_proxy_lives_on() {
    for sb in sandboxes() {
        let dir = workspace(sb, "allow = [\"x.test\"]\nmax_connections = 16");
        let (v, log) = script(
            dir.path(),
            "/usr/bin/python3 -c '\nimport os, socket, time, urllib.parse as u\nx = u.urlsplit(os.environ[\"HTTP_PROXY\"])\nsocks = [socket.create_connection((x.hostname, x.port), timeout=5) for _ in range(200)]\ntime.sleep(2.5)\nclosed = 0\nfor s in socks:\n s.settimeout(0.01)\n try:\n  closed += s.recv(1) == b\"\"\n except socket.timeout:\n  pass\n except OSError:\n  closed += 1\nprint(\"closed\", closed)\nfor s in socks: s.close()\n'; \
             sleep 1; curl -s -i --max-time 10 http://y.test/ | grep -i x-loopbox-refused",
        );
        let out = stdout(&v);
        let closed: usize = out
            .split_whitespace()
            .skip_while(|w| *w != "closed")
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{sb}: {out}\n{log}"));
        assert!(
            closed >= 180,
            "{sb}: only {closed} of 200 closed: {out}\n{log}"
        );
        assert!(
            out.contains("no rule in `network.allow` matches y.test:80"),
            "{sb}: the proxy is gone: {out}\n{log}"
        );
    }
}

#[test]
fn tunnels_for_another_host_and_malformed_requests_are_refused_and_the_proxy_lives_on() {
    let o = origin();
    let p = o.port;
    for sb in sandboxes() {
        let dir = workspace(sb, &format!("allow = [\"127.0.0.1:{p}\", \"*\"]"));
        let tag = format!("tunnel-{sb}");
        // Raw requests to the proxy from Python, in the sandbox: the proxy's
        // address and token come from HTTP_PROXY.
        let py = format!(
            r#"
import base64, os, socket, urllib.parse
u = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
auth = "Proxy-Authorization: Basic " + base64.b64encode(f"{{u.username}}:{{u.password}}".encode()).decode() + "\r\n" if u.password else ""
def ask(data, read=True):
    s = socket.create_connection((u.hostname, u.port), timeout=20)
    s.sendall(data)
    if not read:
        return s
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b: break
            out += b
    except Exception as e:
        out += repr(e).encode()
    return out.decode(errors="replace")
def first(r):
    return r.split("\r\n")[0] + " | " + "".join(l for l in r.split("\r\n") if l.lower().startswith("x-loopbox-refused"))
print("host-header", first(ask(f"CONNECT 127.0.0.1:{p} HTTP/1.1\r\nHost: evil.test\r\n{{auth}}\r\n".encode())))
s = ask(f"CONNECT 127.0.0.1:{p} HTTP/1.1\r\n{{auth}}\r\n".encode(), read=False)
s.recv(1024)
s.sendall(b"GET http://evil.test/{tag}-abs HTTP/1.1\r\nHost: evil.test\r\n\r\n")
print("inner", repr(s.recv(1024)))
print("absolute", first(ask(f"GET http://127.0.0.1:{p}/{tag}-host HTTP/1.1\r\nHost: evil.test\r\n{{auth}}\r\n".encode())))
print("garbage", first(ask(b"\x00\xff garbage\r\n\r\n")))
print("huge", first(ask(b"GET http://127.0.0.1/ HTTP/1.1\r\nX: " + b"a" * (1 << 20) + b"\r\n\r\n")))
half = ask(b"GET http://127.0.0.1/ HT", read=False)
half.shutdown(socket.SHUT_WR)
print("half", repr(half.recv(1024)[:12]))
print("after", first(ask(f"GET http://127.0.0.1:{p}/{tag}-ok HTTP/1.1\r\n{{auth}}\r\n".encode())))
# A TLS client hello naming evil.test, cut into records of one byte each.
n = b"evil.test"
sni = (len(n) + 3).to_bytes(2, "big") + b"\x00" + len(n).to_bytes(2, "big") + n
ext = b"\x00\x00" + len(sni).to_bytes(2, "big") + sni
body = b"\x03\x03" + bytes(32) + bytes([0, 0, 2, 0x13, 0x01, 1, 0]) + len(ext).to_bytes(2, "big") + ext
hs = b"\x01" + len(body).to_bytes(3, "big") + body
s = ask(f"CONNECT localhost:{p} HTTP/1.1\r\n{{auth}}\r\n".encode(), read=False)
s.recv(1024)
s.sendall(b"".join(b"\x16\x03\x01\x00\x01" + hs[i:i + 1] for i in range(len(hs))))
print("split", repr(s.recv(1024)))
"#
        );
        std::fs::write(dir.path().join("raw.py"), py).unwrap();
        let (v, log) = script(
            dir.path(),
            &format!(
                "/usr/bin/python3 raw.py; curl -s -i -L --max-time 10 http://127.0.0.1:{p}/redirect/127.0.0.2:{p} | grep -i '^x-loopbox' | sed 's/^/redirect /'"
            ),
        );
        let out = stdout(&v);
        let line = |k: &str| {
            out.lines()
                .find(|l| l.starts_with(k))
                .unwrap_or_else(|| panic!("{k}: {out}\n{v}\n{log}"))
                .to_string()
        };
        assert!(
            line("host-header").contains("403")
                && line("host-header").contains("the Host header names evil.test"),
            "{out}"
        );
        assert_eq!(line("inner"), "inner b''", "{out}");
        assert!(line("absolute").contains("403"), "{out}");
        assert!(line("garbage").contains("400"), "{out}");
        assert!(
            line("huge").contains("431") || line("huge").contains("Error"),
            "{out}"
        );
        assert!(line("after").contains("200 OK"), "{out}");
        assert_eq!(line("split"), "split b''", "{out}");
        assert!(
            log.contains("refused: the TLS server name `evil.test` is not localhost"),
            "a hello split over records is read whole: {log}"
        );
        assert!(
            line("redirect").contains("127.0.0.2 is a loopback address"),
            "{out}"
        );
        let seen = o.seen.lock().unwrap().clone();
        assert!(
            seen.iter().any(|l| l.contains(&format!("{tag}-ok"))),
            "{seen:?}"
        );
        assert!(
            !seen
                .iter()
                .any(|l| l.contains(&format!("{tag}-abs")) || l.contains(&format!("{tag}-host"))),
            "{seen:?}"
        );
        assert!(
            log.contains("is not 127.0.0.1, the tunnel's host")
                || log.contains("inside a tunnel to 127.0.0.1"),
            "{log}"
        );
    }
}

#[test]
fn without_a_network_grant_nothing_gets_out_and_a_bad_rule_names_its_key() {
    let o = origin();
    let p = o.port;
    for sb in sandboxes() {
        let dir = workspace(sb, "");
        let (v, _) = script(
            dir.path(),
            &format!(
                "echo \"proxy=[$HTTP_PROXY]\"; curl -sS --max-time 5 http://127.0.0.1:{p}/none-{sb} || echo NO-NETWORK"
            ),
        );
        let out = stdout(&v);
        assert!(
            out.contains("proxy=[]") && out.contains("NO-NETWORK"),
            "{sb}: {out}"
        );
    }
    let dir = workspace("auto", "allow = [\"0177.0.0.1\"]");
    let probe = common::probe().to_string_lossy().into_owned();
    let o = common::loopbox(dir.path(), &["run", &probe, "--input", "{}"]);
    assert_eq!(common::code(&o), 2, "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr).into_owned() + &String::from_utf8_lossy(&o.stdout);
    assert!(err.contains("`network.allow[0]` = \"0177.0.0.1\""), "{err}");
}

#[test]
fn each_connection_is_in_runs_show() {
    let o = origin();
    let p = o.port;
    let sb = sandboxes()[0];
    let dir = workspace(sb, &format!("allow = [\"127.0.0.1:{p}\"]"));
    let (_, log) = script(
        dir.path(),
        &format!(
            "curl -s --max-time 10 http://127.0.0.1:{p}/show; curl -s --max-time 10 http://127.0.0.9:{p}/show"
        ),
    );
    let id = log_run_id(dir.path());
    let o = common::loopbox(dir.path(), &["runs", "show", &id, "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let net = v["network"]
        .as_array()
        .unwrap_or_else(|| panic!("{v:#}\n{log}"));
    assert_eq!(net.len(), 2, "{v:#}");
    assert_eq!(net[0]["allowed"], true);
    assert_eq!(net[0]["host"], "127.0.0.1");
    assert_eq!(net[0]["port"], p);
    assert_eq!(net[0]["address"], "127.0.0.1");
    assert!(net[0]["bytes_in"].as_u64().unwrap() > 0, "{v:#}");
    assert!(net[0]["bytes_out"].as_u64().unwrap() > 0, "{v:#}");
    assert_eq!(net[1]["allowed"], false);
    assert!(
        net[1]["rule"]
            .as_str()
            .unwrap()
            .contains("no rule in `network.allow`"),
        "{v:#}"
    );
    // Never a path: the record holds no `/show`.
    assert!(
        !serde_json::to_string(net).unwrap().contains("/show"),
        "{v:#}"
    );
    let text = common::loopbox(dir.path(), &["runs", "show", &id]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("network:  2 connection(s), 1 refused"),
        "{text}"
    );
}

/// The id of the workspace's newest run.
fn log_run_id(dir: &Path) -> String {
    let o = common::loopbox(dir, &["runs", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let runs = v
        .as_array()
        .or(v["runs"].as_array())
        .unwrap_or_else(|| panic!("{v}"))
        .clone();
    runs[0]["id"].as_str().unwrap().to_string()
}

/// A destination under `network.ask` is refused while its approval waits,
/// and reached by the same run once a person approves it.
#[test]
fn an_ask_tier_destination_waits_for_a_yes_then_the_run_reaches_it() {
    let o = origin();
    let p = o.port;
    let sb = sandboxes()[0];
    let dir = workspace(sb, &format!("ask = [\"127.0.0.1:{p}\"]"));
    let tag = format!("asked-{sb}");
    let source = format!(
        "for i in $(seq 1 150); do out=$(curl -s -i --max-time 5 http://127.0.0.1:{p}/{tag}); \
         case \"$out\" in *'200 OK'*) echo REACHED; exit 0;; esac; \
         [ $i = 1 ] && echo \"$out\" | grep -i x-loopbox-refused; sleep 0.2; done; echo GAVE-UP"
    );
    let op = json!({"op": "script", "source": source, "timeout_ms": 60000});
    let probe = common::probe().to_string_lossy().into_owned();
    let child = common::trusted_command(dir.path())
        .arg("-C")
        .arg(dir.path())
        .args(["run", &probe, "--input", &op.to_string(), "--json"])
        .env(
            "LOOPBOX_CACHE_DIR",
            std::env::temp_dir().join("loopbox-cli-test-cache"),
        )
        .env("CI", "true")
        .current_dir(dir.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The pending approval, once the proxy asked for it.
    let started = std::time::Instant::now();
    let (id, approval, digest) = loop {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "no approval was asked for"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
        let o = common::loopbox(dir.path(), &["runs", "--json"]);
        let Ok(v) = serde_json::from_slice::<Value>(&o.stdout) else {
            continue;
        };
        let Some(run) = v
            .as_array()
            .or(v["runs"].as_array())
            .and_then(|r| r.first().cloned())
        else {
            continue;
        };
        let id = run["id"].as_str().unwrap().to_string();
        let s = common::loopbox(dir.path(), &["runs", "show", &id, "--json"]);
        let Ok(s) = serde_json::from_slice::<Value>(&s.stdout) else {
            continue;
        };
        if let Some(a) = s["approvals"]
            .as_array()
            .and_then(|a| a.iter().find(|a| a["status"] == "pending"))
        {
            assert!(
                a["what"]
                    .as_str()
                    .unwrap()
                    .contains(&format!("commands connecting to 127.0.0.1:{p}")),
                "{a}"
            );
            break (
                id,
                a["id"].as_str().unwrap().to_string(),
                a["digest"].as_str().unwrap().to_string(),
            );
        }
    };
    assert!(
        !o.seen.lock().unwrap().iter().any(|l| l.contains(&tag)),
        "reached before the yes"
    );
    let yes = common::loopbox(
        dir.path(),
        &[
            "runs",
            "approve",
            &id,
            "--approval",
            &approval,
            "--digest",
            &digest,
        ],
    );
    assert_eq!(common::code(&yes), 0, "{yes:?}");
    let out = child.wait_with_output().unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    let stdout = stdout(&v["outcome"]["data"]);
    assert!(stdout.contains("waiting for approval"), "{stdout}");
    assert!(stdout.contains("REACHED"), "{stdout}");
    assert!(o.seen.lock().unwrap().iter().any(|l| l.contains(&tag)));
    let log = common::loopbox(dir.path(), &["runs", "log", &id]);
    let log = String::from_utf8_lossy(&log.stdout);
    assert!(
        log.contains(&format!(
            "allowed (network.ask[0] (127.0.0.1:{p}), approved)"
        )),
        "{log}"
    );
}

/// A loopback server whose every connection gets `answer` (run on its own thread).
fn serving(answer: fn(TcpStream)) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || answer(s));
        }
    });
    port
}

/// The proxy's byte, idle and total-time limits each end a connection and
/// say so in the run log.
#[test]
fn the_byte_idle_and_connection_time_limits_end_connections_with_their_names() {
    let big = serving(|mut s| {
        let mut head = [0u8; 4096];
        let _ = std::io::Read::read(&mut s, &mut head);
        let body = vec![b'x'; 1 << 20];
        let _ = s.write_all(
            format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).as_bytes(),
        );
        let _ = s.write_all(&body);
    });
    let silent = serving(|s| {
        std::thread::sleep(std::time::Duration::from_secs(20));
        drop(s);
    });
    let trickle = serving(|mut s| {
        for _ in 0..200 {
            if s.write_all(b"x").is_err() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    });
    let sb = sandboxes()[0];
    let dir = workspace(
        sb,
        &format!(
            "allow = [\"127.0.0.1:{big}\", \"127.0.0.1:{silent}\", \"127.0.0.1:{trickle}\"]\nmax_bytes = 65536\nidle_timeout_ms = 500\nconnection_timeout_ms = 2000"
        ),
    );
    // Each run has a budget of its own: one limit a run.
    let (v, log) = script(
        dir.path(),
        &format!(
            "curl -s --max-time 10 http://127.0.0.1:{big}/ | wc -c; curl -s -i --max-time 10 http://127.0.0.1:{big}/ | grep -i x-loopbox-refused"
        ),
    );
    let out = stdout(&v);
    let got: u64 = out.lines().next().unwrap().trim().parse().unwrap();
    assert!(
        got < 65536,
        "{got} bytes came through a 64 KiB budget: {out}"
    );
    assert!(log.contains("cut at network.max_bytes"), "{log}");
    assert!(
        out.contains("the run moved more than network.max_bytes = 65536"),
        "{out}\n{log}"
    );
    let (_, log) = script(
        dir.path(),
        &format!("curl -s --max-time 10 -o /dev/null http://127.0.0.1:{silent}/"),
    );
    assert!(
        log.contains("closed, idle for network.idle_timeout_ms"),
        "{log}"
    );
    let (_, log) = script(
        dir.path(),
        &format!(
            "curl -s --max-time 10 -o /dev/null -x \"$ALL_PROXY\" telnet://127.0.0.1:{trickle} </dev/null"
        ),
    );
    assert!(
        log.contains("closed, open for network.connection_timeout_ms"),
        "{log}"
    );
}

/// A local OpenAI-compatible server: every chat completion answers `fake
/// says hi`; it remembers each request's first line.
fn fake_openai() -> (u16, Arc<Mutex<Vec<String>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let log = log.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let (mut first, mut line, mut length) = (String::new(), String::new(), 0);
                r.read_line(&mut first).unwrap();
                while r.read_line(&mut line).is_ok_and(|n| n > 2) {
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap();
                    }
                    line.clear();
                }
                let mut body = vec![0; length];
                r.read_exact(&mut body).unwrap();
                log.lock().unwrap().push(first.trim().to_string());
                let reply = json!({"choices": [{"message": {"content": "fake says hi"}}], "usage": {"prompt_tokens": 3, "completion_tokens": 3}}).to_string();
                let mut s = s;
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                    reply.len()
                );
            });
        }
    });
    (port, seen)
}

/// The `openai` runner's requests, which loopbox makes itself rather than a
/// sandboxed CLI, go through the run's proxy too: its `base_url` is the
/// agent's preset and each request is in the run's network record; with the
/// preset off a rule must allow it, and one that does not is refused.
#[test]
fn the_openai_runners_requests_pass_the_runs_network_rules() {
    let (port, seen) = fake_openai();
    let config = |network: &str| {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("loopbox.toml"),
            format!(
                "[agent]\nrunner = \"openai\"\n\n[agent.openai]\nbase_url = \"http://127.0.0.1:{port}/v1\"\nmodel = \"m\"\n\n[network]\n{network}\n"
            ),
        )
        .unwrap();
        dir
    };
    let prompt = json!({"op": "prompt", "text": "hello"});
    // The preset: its base_url, named exactly, so a loopback address too.
    let dir = config("");
    let (v, _) = probe_op(dir.path(), &prompt, &[]);
    assert!(v.to_string().contains("fake says hi"), "{v}");
    assert_eq!(seen.lock().unwrap().len(), 1);
    let id = log_run_id(dir.path());
    let show = common::loopbox(dir.path(), &["runs", "show", &id, "--json"]);
    let show: Value = serde_json::from_slice(&show.stdout).unwrap();
    let net = show["network"]
        .as_array()
        .unwrap_or_else(|| panic!("{show:#}"));
    assert_eq!(net.len(), 1, "{show:#}");
    assert_eq!(net[0]["side"], "agent", "{show:#}");
    assert_eq!(net[0]["allowed"], true, "{show:#}");
    assert!(
        net[0]["rule"]
            .as_str()
            .unwrap()
            .contains(&format!("the openai agent's preset (127.0.0.1:{port})")),
        "{show:#}"
    );
    // No preset and no rule: nothing to reach, said before any request.
    let dir = config("agent_preset = false");
    let (v, _) = probe_op(dir.path(), &prompt, &[]);
    assert!(v.to_string().contains("may reach no host"), "{v}");
    // No preset, a rule for another port: the proxy refuses it.
    let dir = config(&format!(
        "agent_preset = false\nallow = [\"127.0.0.1:{}\"]",
        port ^ 1
    ));
    let (v, log) = probe_op(dir.path(), &prompt, &[]);
    assert!(
        v.to_string().contains("the run's network rules refused"),
        "{v}\n{log}"
    );
    assert_eq!(seen.lock().unwrap().len(), 1, "reached past the rules");
}

/// `shell.network = true` keeps its meaning (any public host for commands)
/// and says to narrow it once, when the proxy starts, not at every event;
/// a private address is still not reached through it.
#[test]
fn shell_network_true_is_any_public_host_with_one_warning() {
    let o = origin();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("loopbox.toml"),
        "[shell]\nscripts = true\nnetwork = true\n",
    )
    .unwrap();
    let (v, log) = script(
        dir.path(),
        &format!(
            "for i in 1 2; do curl -s -i --max-time 10 http://127.0.0.1:{}/ | grep -i x-loopbox-refused; done",
            o.port
        ),
    );
    let out = stdout(&v);
    assert_eq!(
        out.matches("a name or `*` never reaches").count(),
        2,
        "{out}"
    );
    assert_eq!(
        log.matches("shell.network = true lets commands reach any public host")
            .count(),
        1,
        "{log}"
    );
}

/// A request inside a tunnel that the proxy's reader (`httparse`) will not
/// read, or whose scheme or method is not spelled as it expected, was passed
/// on unread: `GET HTTP://evil.test/ HTTP/1.0` (a relaying proxy at the
/// allowed address goes to evil.test), `CONNECT evil.test:443 HTTP/1.2`,
/// `connect ...`, a Host header with a space before its colon. Each reached
/// the allowed origin; now each ends the tunnel.
#[test]
fn a_tunnel_request_for_another_host_in_an_odd_spelling_is_refused() {
    let o = origin();
    let p = o.port;
    for sb in sandboxes() {
        let dir = workspace(sb, &format!("allow = [\"127.0.0.1:{p}\"]"));
        let tag = format!("odd-{sb}");
        let py = format!(
            r#"
import base64, os, socket, urllib.parse
u = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
auth = "Proxy-Authorization: Basic " + base64.b64encode(f"{{u.username}}:{{u.password}}".encode()).decode() + "\r\n" if u.password else ""
for i, inner in enumerate([
    b"GET HTTP://evil.test/{tag}-0 HTTP/1.0\r\n\r\n",
    b"CONNECT {tag}-1.evil.test:443 HTTP/1.2\r\n\r\n",
    b"connect {tag}-2.evil.test:443 HTTP/1.1\r\n\r\n",
    b"GET /{tag}-3 HTTP/1.1\r\nHost : evil.test\r\n\r\n",
]):
    s = socket.create_connection((u.hostname, u.port), timeout=20)
    s.sendall(f"CONNECT 127.0.0.1:{p} HTTP/1.1\r\n{{auth}}\r\n".encode())
    s.recv(1024)
    s.sendall(inner)
    try:
        print("case", i, repr(s.recv(1024)[:40]))
    except Exception as e:
        print("case", i, repr(e))
"#
        );
        std::fs::write(dir.path().join("odd.py"), py).unwrap();
        let (v, log) = script(dir.path(), "/usr/bin/python3 odd.py");
        let out = stdout(&v);
        assert_eq!(out.matches("case ").count(), 4, "{sb}: {out}\n{log}");
        let seen = o.seen.lock().unwrap().clone();
        let reached: Vec<&String> = seen.iter().filter(|l| l.contains(&tag)).collect();
        assert!(
            reached.is_empty(),
            "{sb}: a request for evil.test reached the origin through the tunnel: {reached:?}\n{out}\n{log}"
        );
    }
}

/// Every connection was a line of the run log, held in loopbox's memory
/// until the step ended: a command refused in a loop grew loopbox (40 000
/// refusals under bwrap: RSS from 53 to 85 MB) and the stored log (40 000
/// lines) without any limit. Now the first
/// `MAX_LOGGED` are logged, then one line says the rest are in the record only.
#[test]
fn a_loop_of_refused_connections_does_not_grow_the_run_log_without_limit() {
    let n = loopbox::exec::egress::proxy::MAX_LOGGED as usize + 500;
    for sb in sandboxes() {
        let dir = workspace(sb, "allow = [\"x.test\"]");
        let py = format!(
            r#"
import base64, os, socket, urllib.parse
u = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
auth = "Proxy-Authorization: Basic " + base64.b64encode(f"{{u.username}}:{{u.password}}".encode()).decode() + "\r\n" if u.password else ""
req = f"GET http://y.test/ HTTP/1.1\r\n{{auth}}\r\n".encode()
refused = 0
for i in range({n}):
    s = socket.create_connection((u.hostname, u.port), timeout=20)
    s.sendall(req)
    refused += b"403" in s.recv(4096)
    s.close()
print("refused", refused)
"#
        );
        std::fs::write(dir.path().join("flood.py"), py).unwrap();
        let (v, log) = script(dir.path(), "/usr/bin/python3 flood.py");
        let out = stdout(&v);
        assert!(out.contains(&format!("refused {n}")), "{sb}: {out}");
        let lines = log
            .lines()
            .filter(|l| l.contains("network: commands"))
            .count();
        assert!(
            lines <= loopbox::exec::egress::proxy::MAX_LOGGED as usize,
            "{sb}: {lines} connection lines in the run log for {n} connections"
        );
        assert!(
            log.contains("later ones are not in the log"),
            "{sb}: {}",
            &log[log.len().saturating_sub(2000)..]
        );
    }
}

/// A SOCKS5 tunnel was relayed without the look a CONNECT tunnel gets at
/// its first bytes: through `ALL_PROXY` a Host header, an absolute URI or a
/// relayed CONNECT for another host, and a TLS client hello naming another
/// server, each reached the allowed origin (under bwrap and Landlock). Now
/// each ends the tunnel as it does in a CONNECT.
#[test]
fn a_socks_tunnel_for_another_host_is_refused_as_a_connect_is() {
    let o = origin();
    let p = o.port;
    for sb in sandboxes() {
        let dir = workspace(sb, &format!("allow = [\"127.0.0.1:{p}\", \"localhost\"]"));
        let tag = format!("socks-{sb}");
        let py = format!(
            r#"
import os, socket, struct, urllib.parse
u = urllib.parse.urlsplit(os.environ["ALL_PROXY"])
def socks(host, port):
    s = socket.create_connection((u.hostname, u.port), timeout=20)
    if u.password:
        s.sendall(b"\x05\x01\x02"); assert s.recv(2) == b"\x05\x02"
        us, pw = u.username.encode(), u.password.encode()
        s.sendall(b"\x01" + bytes([len(us)]) + us + bytes([len(pw)]) + pw); assert s.recv(2)[1] == 0
    else:
        s.sendall(b"\x05\x01\x00"); assert s.recv(2) == b"\x05\x00"
    h = host.encode()
    s.sendall(b"\x05\x01\x00\x03" + bytes([len(h)]) + h + struct.pack(">H", port))
    r = s.recv(10); assert r[1] == 0, r
    return s
n = b"{tag}-3.evil.test"
sni = (len(n) + 3).to_bytes(2, "big") + b"\x00" + len(n).to_bytes(2, "big") + n
ext = b"\x00\x00" + len(sni).to_bytes(2, "big") + sni
body = b"\x03\x03" + bytes(32) + bytes([0, 0, 2, 0x13, 0x01, 1, 0]) + len(ext).to_bytes(2, "big") + ext
hs = b"\x01" + len(body).to_bytes(3, "big") + body
for i, inner in enumerate([
    b"GET /{tag}-0 HTTP/1.1\r\nHost: evil.test\r\n\r\n",
    b"CONNECT {tag}-1.evil.test:443 HTTP/1.1\r\n\r\n",
    b"GET http://evil.test/{tag}-2 HTTP/1.1\r\n\r\n",
    b"\x16\x03\x01" + len(hs).to_bytes(2, "big") + hs,
]):
    s = socks("localhost", {p})
    s.sendall(inner)
    try:
        print("case", i, repr(s.recv(40)))
    except Exception as e:
        print("case", i, repr(e))
s = socks("localhost", {p})
s.sendall(b"GET /{tag}-ok HTTP/1.1\r\nHost: localhost\r\n\r\n")
print("ok", repr(s.recv(40)))
"#
        );
        std::fs::write(dir.path().join("socks.py"), py).unwrap();
        let (v, log) = script(dir.path(), "/usr/bin/python3 socks.py");
        let out = stdout(&v);
        assert!(out.contains("ok b'HTTP/1.1 200 OK"), "{sb}: {out}\n{log}");
        let seen = o.seen.lock().unwrap().clone();
        let reached: Vec<&String> = seen
            .iter()
            .filter(|l| l.contains(&tag) && !l.contains(&format!("{tag}-ok")))
            .collect();
        assert!(
            reached.is_empty(),
            "{sb}: a request for another host reached the origin through SOCKS: {reached:?}\n{out}\n{log}"
        );
        // The TLS hello is the origin's request line only as bytes: its
        // refusal is in the log.
        assert!(
            log.contains(&format!(
                "the TLS server name `{tag}-3.evil.test` is not localhost"
            )),
            "{sb}: {log}"
        );
    }
}

/// The real binary (which makes itself non-dumpable) as a user who is not
/// root: a networked command under bwrap reaches the allowed origin. An
/// earlier design made the namespace in a child sharing that non-dumpable
/// memory, whose own uid map then belonged to root: every networked command
/// of every non-root user failed to start, and tests run as root never saw it.
#[test]
fn a_user_who_is_not_root_runs_a_networked_command_under_bwrap() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !sandboxes().contains(&"bwrap") {
        return; // only root can become another user; CI runs as root
    }
    let o = origin();
    let p = o.port;
    let dir = tempfile::tempdir_in("/tmp").unwrap();
    let (home, ws) = (dir.path().join("home"), dir.path().join("ws"));
    let ws = ws.as_path();
    std::fs::create_dir(&home).unwrap();
    std::fs::create_dir(ws).unwrap();
    std::fs::write(
        ws.join("loopbox.toml"),
        format!("[shell]\nscripts = true\nsandbox = \"bwrap\"\n\n[network]\nallow = [\"127.0.0.1:{p}\"]\n"),
    )
    .unwrap();
    std::fs::copy(common::probe(), ws.join("probe.wasm")).unwrap();
    let nobody = |args: &[&str]| {
        std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(common::BIN)
            .args(args)
            .current_dir(ws)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", &home)
            .env("XDG_DATA_HOME", home.join(".data"))
            .env("LOOPBOX_CACHE_DIR", home.join(".cache"))
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    assert!(
        std::process::Command::new("chown")
            .args(["-R", "65534:65534"])
            .arg(dir.path())
            .status()
            .unwrap()
            .success()
    );
    let t = nobody(&["trust"]);
    assert!(t.status.success(), "{}", String::from_utf8_lossy(&t.stderr));
    let op = json!({"op": "script", "source": format!("curl -sS --max-time 20 http://127.0.0.1:{p}/as-nobody"), "timeout_ms": 60000});
    let o = nobody(&["run", "probe.wasm", "--input", &op.to_string(), "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    let out = v["outcome"]["data"]["ok"]["stdout"]
        .as_str()
        .unwrap_or_default();
    assert!(
        out.contains("origin says hello to 127.0.0.1"),
        "{v}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
