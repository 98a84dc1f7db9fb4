//! What the network proxy costs (issue 44): a small HTTP GET and a 100 MB
//! download from an origin on 127.0.0.1, directly against through the proxy,
//! and the start of a sandboxed `true` under bubblewrap without and with the
//! network (the namespace loopbox makes, the proxy listening in it). Only
//! loopback is used.
//!
//! `cargo bench -p loopbox --bench egress` prints four tables, the variants of
//! each interleaved (every other round in reverse) so machine noise hits them
//! alike:
//!
//! 1. a GET of 2 bytes, one connection per request (connect, request, the whole
//!    response): directly; through the proxy's loopback port with its token
//!    (what a Landlock child does), as a plain request and as a CONNECT tunnel;
//!    and on a listening socket the proxy adopted without a token (what a
//!    bwrap sandbox's port 3128 is);
//! 2. a 100 MB download the same ways, in MB/s;
//! 3. curl on the host directly against curl inside a bwrap sandbox through
//!    the sandbox's port 3128 (the whole path of a networked command under
//!    bwrap), both figures curl's own, and, for
//!    scale, curl through socat with a 1 MiB buffer (where socat is installed):
//!    what any relay process costs on this machine's loopback;
//! 4. a sandboxed `true`, prepared (`Confines::prepare`) and spawned and waited
//!    for, with no `[network]` and with one (`allow = ["127.0.0.1:1"]`), against
//!    spawning `true` bare, each spawned as loopbox spawns a command
//!    (`exec::process::run`). Both run in a network namespace of their own; with
//!    the network loopbox makes it (a user namespace, loopback up, a listening
//!    socket handed back and adopted by the proxy) instead of bwrap. The proxy
//!    is started once before, as a run does at its first networked command.
//!
//! `cargo test --all-targets` runs it once, small, as a smoke test; tables 3
//! and 4 are left out where bubblewrap (or curl) is not usable.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use loopbox::exec::config::ShellConfig;
use loopbox::exec::egress::{Egress, EgressSide, Endpoint, NetworkConfig};
use loopbox::exec::process::{self, Spec};
use loopbox::exec::sandbox::{self, Confines, Prepared, Sandbox, hide, protect};

const BIN: &str = env!("CARGO_BIN_EXE_loopbox");

/// An origin on loopback, one connection at a time, each closed after its
/// response: `/big` is `big` bytes, anything else 2.
fn origin(big: usize) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let chunk = vec![b'x'; 256 << 10];
        for mut s in listener.incoming().flatten() {
            let _ = s.set_nodelay(true);
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let len = if head.starts_with(b"GET /big ") {
                big
            } else {
                2
            };
            let reply =
                format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n");
            if s.write_all(reply.as_bytes()).is_err() {
                continue;
            }
            if len == 2 {
                let _ = s.write_all(b"ok");
                continue;
            }
            let mut left = len;
            while left > 0 {
                let n = left.min(chunk.len());
                if s.write_all(&chunk[..n]).is_err() {
                    break;
                }
                left -= n;
            }
        }
    });
    port
}

/// How a client reaches the origin.
#[derive(Clone, Copy)]
enum Via<'a> {
    Direct,
    /// The proxy's loopback port and token, a request in absolute form.
    Port(&'a Endpoint),
    /// The same port, a CONNECT tunnel.
    Tunnel(&'a Endpoint),
    /// The proxy's Unix socket (no token), a request in absolute form.
    /// A listening socket the proxy adopted, as a sandbox's port 3128 (no token).
    Adopted(u16),
}

use Via::*;

trait Stream: Read + Write {}
impl<T: Read + Write> Stream for T {}

fn auth(e: &Endpoint) -> String {
    let b = base64::engine::general_purpose::STANDARD.encode(format!("loopbox:{}", e.token));
    format!("Proxy-Authorization: Basic {b}\r\n")
}

/// One GET of `path` from the origin on `port`, on a fresh connection: the
/// response's size, checked to be a whole 200 with `body` bytes.
fn get(via: Via, port: u16, path: &str, body: usize) -> usize {
    let host = format!("127.0.0.1:{port}");
    let tcp = |p: u16| -> Box<dyn Stream> {
        let s = TcpStream::connect(("127.0.0.1", p)).unwrap();
        s.set_nodelay(true).unwrap();
        Box::new(s)
    };
    let (mut s, request): (Box<dyn Stream>, String) = match via {
        Direct => (
            tcp(port),
            format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
        ),
        Port(e) => (
            tcp(e.port),
            format!(
                "GET http://{host}{path} HTTP/1.1\r\nHost: {host}\r\n{}\r\n",
                auth(e)
            ),
        ),
        Adopted(p) => (
            tcp(p),
            format!("GET http://{host}{path} HTTP/1.1\r\nHost: {host}\r\n\r\n"),
        ),
        Tunnel(e) => {
            let mut s = tcp(e.port);
            let connect = format!("CONNECT {host} HTTP/1.1\r\nHost: {host}\r\n{}\r\n", auth(e));
            s.write_all(connect.as_bytes()).unwrap();
            // The proxy says nothing more until the tunnel carries something.
            let mut head = Vec::new();
            let mut b = [0u8; 256];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = s.read(&mut b).unwrap();
                assert!(n > 0, "the proxy closed the tunnel: {head:?}");
                head.extend_from_slice(&b[..n]);
            }
            assert!(head.starts_with(b"HTTP/1.1 200"), "{head:?}");
            (
                s,
                format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
            )
        }
    };
    s.write_all(request.as_bytes()).unwrap();
    let mut buf = vec![0u8; 256 << 10];
    let mut first = Vec::new();
    let mut total = 0;
    loop {
        let n = s.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        if first.len() < 64 {
            first.extend_from_slice(&buf[..n.min(64)]);
        }
        total += n;
    }
    assert!(
        first.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&first)
    );
    assert!(total > body, "{total} bytes for a body of {body}");
    total
}

/// One small GET, timed.
fn small_get(via: Via<'_>, port: u16) -> impl Fn() -> Duration + '_ {
    move || {
        timed(|| {
            get(via, port, "/", 2);
        })
    }
}

/// One download of `big` bytes, in MB/s.
fn download(via: Via<'_>, port: u16, big: usize) -> impl Fn() -> f64 + '_ {
    move || {
        let t = Instant::now();
        get(via, port, "/big", big);
        big as f64 / (1 << 20) as f64 / t.elapsed().as_secs_f64()
    }
}

fn pct(s: &mut [Duration], p: f64) -> Duration {
    s.sort();
    s[((s.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Run `rows` `n` times each, interleaved (every other round in reverse).
fn interleaved<T>(n: usize, rows: &[&dyn Fn() -> T]) -> Vec<Vec<T>> {
    let mut out: Vec<Vec<T>> = rows.iter().map(|_| Vec::new()).collect();
    for round in 0..n {
        let mut order: Vec<usize> = (0..rows.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            out[i].push(rows[i]());
        }
    }
    out
}

fn timed(f: impl FnOnce()) -> Duration {
    let t = Instant::now();
    f();
    t.elapsed()
}

/// A program's path on `PATH`.
/// socat relaying a loopback port to `port` with a 1 MiB buffer, if socat
/// is installed: the process (killed when dropped) and its port.
fn socat_relay(port: u16) -> Option<(KillOnDrop, u16)> {
    let socat = which("socat")?;
    let free = std::net::TcpListener::bind("127.0.0.1:0").ok()?;
    let at = free.local_addr().ok()?.port();
    drop(free);
    let child = std::process::Command::new(socat)
        .args([
            "-b",
            "1048576",
            &format!("TCP-LISTEN:{at},bind=127.0.0.1,fork,reuseaddr"),
            &format!("TCP:127.0.0.1:{port}"),
        ])
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    // Listening once a connection is taken.
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", at)).is_ok() {
            return Some((KillOnDrop(child), at));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Spawn a prepared command as loopbox does (a cleared environment, the
/// filters' descriptors as 3, 4, ...) and wait for it: its stdout.
/// Run `p` as loopbox runs a command (`exec::process::run`), with PATH and
/// `extra_env`; its stdout, once it exited 0.
fn spawn(p: Prepared, cwd: &Path, extra_env: &[(String, String)]) -> String {
    thread_local! {
        static RT: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
    }
    let mut env = vec![(
        "PATH".to_string(),
        std::env::var("PATH").unwrap_or_default(),
    )];
    env.extend(p.env.iter().cloned());
    env.extend(extra_env.iter().cloned());
    let program = p.program.display().to_string();
    let spec = Spec {
        program: p.program,
        arg0: p.arg0,
        args: p.args,
        cwd: cwd.to_path_buf(),
        env,
        stdin: None,
        timeout: Duration::from_secs(120),
        output_cap: 1 << 20,
        rlimits: None,
        confinement: p.confinement,
        pass_fd: p.pass_fd,
        net: p.net,
    };
    let keep = (p._tmp, p._hold);
    let out = RT
        .with(|rt| rt.block_on(process::run(spec)))
        .expect("spawn");
    drop(keep);
    assert_eq!(
        out.exit_code,
        Some(0),
        "{program} failed: {}\n{}",
        out.stdout,
        out.stderr
    );
    out.stdout
}

fn main() {
    // `cargo test --all-targets` runs this once as a smoke test; the tables are for `cargo bench`.
    let bench = std::env::args().any(|a| a == "--bench");
    let (n_get, n_big, big, n_start, n_curl): (usize, usize, usize, usize, usize) = if bench {
        (2000, 6, 100 << 20, 200, 400)
    } else {
        (4, 1, 4 << 20, 2, 4)
    };
    let big_mb = big as f64 / (1 << 20) as f64;
    let port = origin(big);
    let config = NetworkConfig {
        allow: vec![format!("127.0.0.1:{port}")],
        // Every download of the run goes through this one proxy.
        max_bytes: 1 << 50,
        ..NetworkConfig::default()
    };
    let egress = Egress::standalone(&config).unwrap();
    let side: Arc<EgressSide> = egress
        .commands()
        .expect("the commands may reach the origin");
    let end = side.endpoint().unwrap();
    let sandbox_port = TcpListener::bind("127.0.0.1:0").unwrap();
    let adopted_port = sandbox_port.local_addr().unwrap().port();
    sandbox_port.set_nonblocking(true).unwrap();
    let _adopted = side.adopt(sandbox_port).unwrap();
    // Once each, out of the samples (the first connection, the proxy's thread).
    for via in [Direct, Port(&end), Tunnel(&end), Adopted(adopted_port)] {
        get(via, port, "/", 2);
    }

    let names = [
        "direct",
        "proxy, TCP port + token",
        "proxy, TCP port + token, CONNECT tunnel",
        "proxy, adopted port (a bwrap sandbox's way)",
    ];
    let small = |via| small_get(via, port);
    let (a, b, c, d) = (
        small(Direct),
        small(Port(&end)),
        small(Tunnel(&end)),
        small(Adopted(adopted_port)),
    );
    let mut samples = interleaved(n_get, &[&a, &b, &c, &d]);
    let floor = pct(&mut samples[0], 0.5);
    println!(
        "\nGET of 2 bytes from 127.0.0.1, a connection per request: connect to last byte ({n_get} interleaved samples each)"
    );
    println!(
        "{:<46} {:>10} {:>10} {:>12}",
        "way", "p50", "p99", "p50 added"
    );
    for (name, s) in names.iter().zip(samples.iter_mut()) {
        let (p50, p99) = (pct(s, 0.5), pct(s, 0.99));
        println!(
            "{:<46} {:>7.3} ms {:>7.3} ms {:>+9.3} ms",
            name,
            ms(p50),
            ms(p99),
            ms(p50) - ms(floor)
        );
    }
    println!("goal: at most 1 ms added at p50");

    let download = |via| download(via, port, big);
    let (a, b, c, d) = (
        download(Direct),
        download(Port(&end)),
        download(Tunnel(&end)),
        download(Adopted(adopted_port)),
    );
    let speeds = interleaved(n_big, &[&a, &b, &c, &d]);
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let direct = median(&speeds[0]);
    println!("\n{big_mb:.0} MB download from 127.0.0.1 ({n_big} interleaved rounds; median)");
    println!(
        "{:<46} {:>10} {:>10} {:>10}",
        "way", "MB/s", "slowest", "of direct"
    );
    for (name, s) in names.iter().zip(&speeds) {
        let m = median(s);
        let min = s.iter().copied().fold(f64::INFINITY, f64::min);
        println!(
            "{:<46} {:>10.0} {:>10.0} {:>9.0}%",
            name,
            m,
            min,
            100.0 * m / direct
        );
    }
    println!("goal: at least 80% of direct");

    let bwrap = match &sandbox::support().bwrap {
        Ok(p) => p.clone(),
        Err(why) => {
            println!("\nbubblewrap is not usable here ({why}): no sandbox tables");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("ws")).unwrap();
    let ws = dir.path().join("ws").canonicalize().unwrap();
    let shell = ShellConfig::default();
    let plain = Confines {
        workspace: ws.clone(),
        protected: protect::paths(&ws, &shell.writable, &[PathBuf::from(BIN)]),
        egress: None,
        unix_sockets: false,
        writable_outside: Vec::new(),
        hidden: hide::Hidden::new(&shell, &ws).for_commands(&[]),
        tmp_bytes: shell.tmp_bytes,
    };
    let networked = Confines {
        egress: Some(side.clone()),
        ..plain.clone()
    };
    let sandbox = Sandbox::Bwrap(bwrap);
    let run = |c: &Confines, program: &Path, args: Vec<String>, env: &[(String, String)]| {
        let p = c
            .prepare(&sandbox, program.to_path_buf(), None, args, &ws)
            .unwrap();
        spawn(p, &ws, env)
    };

    if let Some(curl) = which("curl") {
        let url = |path: &str| format!("http://127.0.0.1:{port}{path}");
        // One curl per round, a fresh connection per URL (the origin closes each).
        let per_round = if bench { 50 } else { 2 };
        let curl_args = |path: &str, n: usize, what: &str| {
            let mut a: Vec<String> = ["-sS", "--fail", "-w", what].map(String::from).into();
            for _ in 0..n {
                a.extend(["-o".into(), "/dev/null".into(), url(path)]);
            }
            a
        };
        let figures = |out: String| -> Vec<f64> {
            out.split_whitespace().map(|x| x.parse().unwrap()).collect()
        };
        // 0: on the host, directly; 1: on the host, through the proxy's port
        // with its token (a Landlock child's variables); 2: in bwrap, through
        // the sandbox's port 3128.
        let landlock_env = end.env(true);
        // 3: through socat with a 1 MiB buffer, for scale: what any relay
        // process costs on this machine's loopback.
        let relay = socat_relay(port);
        let relay_url = |a: Vec<String>| -> Vec<String> {
            let to = format!("127.0.0.1:{}", relay.as_ref().map_or(0, |r| r.1));
            a.into_iter()
                .map(|x| x.replace(&format!("127.0.0.1:{port}"), &to))
                .collect()
        };
        let curl_way = |way: usize, args: Vec<String>| match way {
            3 => figures(spawn(
                Prepared::unconfined(curl.clone(), None, relay_url(args)),
                &ws,
                &[],
            )),
            0 => figures(spawn(
                Prepared::unconfined(curl.clone(), None, args),
                &ws,
                &[],
            )),
            1 => figures(spawn(
                Prepared::unconfined(curl.clone(), None, args),
                &ws,
                &landlock_env,
            )),
            _ => figures(run(&networked, &curl, args, &[])),
        };
        let small = |way| move || curl_way(way, curl_args("/", per_round, "%{time_total}\n"));
        let (a, b, c, d) = (small(0), small(1), small(2), small(3));
        let ways: Vec<&dyn Fn() -> Vec<f64>> = if relay.is_some() {
            vec![&a, &b, &c, &d]
        } else {
            vec![&a, &b, &c]
        };
        let rounds = n_curl.div_ceil(per_round);
        let times = interleaved(rounds, &ways);
        let big = |way| move || curl_way(way, curl_args("/big", 1, "%{speed_download}\n"));
        let (a, b, c, d) = (big(0), big(1), big(2), big(3));
        let ways: Vec<&dyn Fn() -> Vec<f64>> = if relay.is_some() {
            vec![&a, &b, &c, &d]
        } else {
            vec![&a, &b, &c]
        };
        let speeds = interleaved(n_big, &ways);
        println!(
            "\ncurl on the host, directly and through the proxy's port, and in a bwrap sandbox through its port 3128 ({} GETs, {n_big} downloads each, interleaved; curl's own figures)",
            rounds * per_round
        );
        println!(
            "{:<46} {:>10} {:>10} {:>12}",
            "way", "GET p50", "GET p99", "p50 added"
        );
        let names = [
            "curl, direct",
            "curl, proxy TCP port + token (as Landlock)",
            "curl in bwrap, through its port 3128",
            "curl through socat -b 1048576 (for scale)",
        ];
        let mut floor = 0.0;
        for (i, (name, t)) in names.iter().zip(&times).enumerate() {
            let mut t: Vec<Duration> = t
                .iter()
                .flatten()
                .map(|s| Duration::from_secs_f64(*s))
                .collect();
            let (p50, p99) = (pct(&mut t, 0.5), pct(&mut t, 0.99));
            if i == 0 {
                floor = ms(p50);
            }
            println!(
                "{:<46} {:>7.3} ms {:>7.3} ms {:>+9.3} ms",
                name,
                ms(p50),
                ms(p99),
                ms(p50) - floor
            );
        }
        println!(
            "{:<46} {:>10} {:>10} {:>12}",
            format!("{big_mb:.0} MB download"),
            "MB/s",
            "slowest",
            "of direct"
        );
        let mb: Vec<Vec<f64>> = speeds
            .iter()
            .map(|s| s.iter().flatten().map(|b| b / (1 << 20) as f64).collect())
            .collect();
        let direct = median(&mb[0]);
        for (name, s) in names.iter().zip(&mb) {
            let m = median(s);
            let min = s.iter().copied().fold(f64::INFINITY, f64::min);
            println!(
                "{:<46} {:>10.0} {:>10.0} {:>11.0}%",
                name,
                m,
                min,
                100.0 * m / direct
            );
        }
    } else {
        println!("\nno curl on PATH: no table of a sandbox's path");
    }

    let t = which("true").expect("`true` on PATH");
    let bare = || {
        timed(|| {
            drop(spawn(
                Prepared::unconfined(t.clone(), None, Vec::new()),
                &ws,
                &[],
            ))
        })
    };
    let without = || timed(|| drop(run(&plain, &t, Vec::new(), &[])));
    let with = || timed(|| drop(run(&networked, &t, Vec::new(), &[])));
    for f in [&bare as &dyn Fn() -> Duration, &without, &with] {
        f();
    }
    let mut samples = interleaved(n_start, &[&bare, &without, &with]);
    let base = pct(&mut samples[1], 0.5);
    println!(
        "\na sandboxed `true`: prepared, spawned and waited for ({n_start} interleaved samples each)"
    );
    println!(
        "{:<46} {:>10} {:>10} {:>12}",
        "command", "p50", "p99", "of bwrap"
    );
    let names = [
        "spawn `true`, no sandbox",
        "bwrap `true`, no network",
        "bwrap `true`, network (its namespace, adopted)",
    ];
    for (name, s) in names.iter().zip(samples.iter_mut()) {
        let (p50, p99) = (pct(s, 0.5), pct(s, 0.99));
        println!(
            "{:<46} {:>7.2} ms {:>7.2} ms {:>11.2}x",
            name,
            ms(p50),
            ms(p99),
            p50.as_secs_f64() / base.as_secs_f64()
        );
    }
    println!("goal: at most 1.2x");
}
