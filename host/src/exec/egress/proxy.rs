//! The egress proxy: the one way out of a sandbox. It speaks HTTP (CONNECT,
//! and plain requests in absolute form) and SOCKS5 on one listener, telling
//! them apart by the first byte, and for every request decides by the
//! [`Rules`], resolves the name itself, checks each address it would connect
//! to, and connects only to one that passed: a name that resolves to a
//! loopback or metadata address, or a tunnel whose first request or TLS
//! server name names another host, is refused. A refusal is a 403 with an
//! `X-Loopbox-Refused` header (SOCKS: "not allowed by ruleset"), and every
//! connection, allowed or not, goes to the run log and the run's record.
//!
//! Bounded throughout: a request head's size and the time to send it,
//! connections open at once, bytes per run, idle and total time per
//! connection (`[network]`'s limits). Nothing a peer sends is held beyond one
//! head and one copy buffer per direction.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::rules::{Host, NetworkConfig, Rules, Tier};
use crate::exec::confirm::{Answer, AskRequest, Confirm};
use crate::runlog::RunLog;

/// How long a client may take to send its request head (or SOCKS handshake).
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a connection over `max_connections` may take to say which
/// protocol it speaks, so that it can be refused in that protocol.
const OVER_LIMIT_WAIT: Duration = Duration::from_secs(1);
/// How long the proxy waits before accepting again after accept failed (no
/// file descriptor left, say): the listener stays for the rest of the run.
pub(super) const ACCEPT_RETRY: Duration = Duration::from_millis(50);
/// The connections of one run (in one process) each given a line of the run
/// log; later ones are in the run's record only (`runs show`), up to its own
/// limit. The log is held in memory until the step ends, so a command making
/// connections in a loop grew loopbox's memory (and the stored log) without
/// any limit.
pub const MAX_LOGGED: u64 = 1000;

/// How long resolving a name and connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

pub use crate::db::network::Connection;

/// What every listener of one run shares: its limits, where connections are
/// recorded, who approves, its counters.
pub struct Shared {
    config: NetworkConfig,
    log: RunLog,
    /// The store and the run each connection is recorded for.
    store: Option<(crate::db::Db, String)>,
    /// On a server: addresses never reached (the server's own, the store's),
    /// and the private ones its operator opened to the tenant.
    guard: Option<super::guard::Guard>,
    /// Who answers for a destination under `ask` (the run's approvals).
    confirm: Option<Arc<dyn Confirm>>,
    open: AtomicU32,
    bytes: AtomicU64,
    /// Connections kept so far (logged up to [`MAX_LOGGED`], recorded up to
    /// the store's `MAX_PER_RUN`).
    kept: AtomicU64,
    /// The destinations a person said yes to in this run: `(side, host, port)`.
    approved: Mutex<HashSet<(String, String, u16)>>,
}

impl Shared {
    pub fn new(config: NetworkConfig, run: super::RunSide) -> Arc<Shared> {
        let super::RunSide {
            log,
            store,
            guard,
            confirm,
        } = run;
        Arc::new(Shared {
            config,
            log,
            store,
            guard,
            confirm,
            open: AtomicU32::new(0),
            bytes: AtomicU64::new(0),
            kept: AtomicU64::new(0),
            approved: Mutex::default(),
        })
    }

    /// Connections open now (each counted until its record is kept).
    pub fn open(&self) -> u32 {
        self.open.load(Ordering::Relaxed)
    }

    fn keep(&self, c: Connection) {
        let n = self.kept.fetch_add(1, Ordering::Relaxed) + 1;
        if n as i64 > crate::db::network::MAX_PER_RUN {
            return;
        }
        if n > MAX_LOGGED {
            if n == MAX_LOGGED + 1 {
                self.log.host(
                    "warn",
                    format!(
                        "network: over {MAX_LOGGED} connections; later ones are not in the log, only in the run's record (`loopbox runs show`)"
                    ),
                );
            }
            self.record(c);
            return;
        }
        let line = if c.allowed {
            format!(
                "network: {} {}:{} allowed ({}), {} B out, {} B in, {} ms",
                c.side, c.host, c.port, c.rule, c.bytes_out, c.bytes_in, c.ms
            )
        } else {
            format!(
                "network: {} {}:{} refused: {}",
                c.side, c.host, c.port, c.rule
            )
        };
        self.log.host(if c.allowed { "info" } else { "warn" }, line);
        self.record(c);
    }

    /// `c` in the store's record of the run, and its span.
    fn record(&self, c: Connection) {
        if let Some((db, run)) = &self.store {
            crate::telemetry::connection(run, &c);
            let (db, run, c) = (db.clone(), run.clone(), c.clone());
            // The store may wait on a lock: never on the proxy's one thread.
            tokio::task::spawn_blocking(move || {
                let _ = db.record_connection(&run, &c);
            });
        }
    }

    /// Take `n` bytes of the run's budget.
    fn spend(&self, n: usize) -> Result<(), String> {
        let total = self.bytes.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
        if total > self.config.max_bytes {
            return Err(self.over_budget());
        }
        Ok(())
    }

    fn over_budget(&self) -> String {
        format!(
            "the run moved more than network.max_bytes = {} through the proxy",
            self.config.max_bytes
        )
    }
}

/// One listener's view: whose connections (commands or agent), under which
/// rules, and the token a TCP listener demands (None: a Unix socket only the
/// sandbox reaches).
pub struct Side {
    pub name: &'static str,
    pub rules: Rules,
    pub token: Option<String>,
}

/// A connection slot; released when dropped.
struct Slot<'a>(&'a Shared);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Serve one client connection to its end. Never panics on what a client sends.
pub async fn serve<S>(mut client: S, side: Arc<Side>, shared: Arc<Shared>)
where
    S: AsyncRead + AsyncWrite + Unpin + super::splice::Socket,
{
    let open = shared.open.fetch_add(1, Ordering::Relaxed) + 1;
    let _slot = Slot(&shared);
    let max = shared.config.max_connections;
    // Over the limit a connection is closed at once, or, just over it, given
    // its refusal after a short wait for its first byte: never held for the
    // head's 30 s, so a flood of idle connections cannot take every file
    // descriptor loopbox has (on a server, every tenant's).
    if open > max.saturating_mul(2) {
        return;
    }
    let wait = if open > max {
        OVER_LIMIT_WAIT
    } else {
        HEAD_TIMEOUT
    };
    let mut first = [0u8; 1];
    let Ok(Ok(1)) = tokio::time::timeout(wait, client.read(&mut first)).await else {
        return;
    };
    if open > max {
        let why = format!(
            "the run has {} connections open, network.max_connections",
            shared.config.max_connections
        );
        if first[0] == 5 {
            let _ = client.write_all(&[5, 0xff]).await;
        } else {
            let _ = refuse_http(&mut client, 503, &why).await;
        }
        return;
    }
    let started = Instant::now();
    let outcome = if first[0] == 5 {
        socks::serve(&mut client, &side, &shared).await
    } else {
        http::serve(&mut client, first[0], &side, &shared).await
    };
    let Some(mut c) = outcome else { return };
    c.ms = started.elapsed().as_millis() as u64;
    shared.keep(c);
}

/// Where a request wants to go, and what the proxy made of it.
struct Target {
    host: Host,
    port: u16,
}

/// Decide and connect: the upstream stream and the record's first fields, or
/// the refusal.
async fn open(
    target: &Target,
    side: &Side,
    shared: &Shared,
) -> Result<(TcpStream, Connection), Box<Refused>> {
    let mut rec = Connection {
        at_ms: crate::db::now_ms(),
        side: side.name.to_string(),
        host: target.host.to_string(),
        port: target.port,
        address: None,
        allowed: false,
        rule: String::new(),
        bytes_out: 0,
        bytes_in: 0,
        ms: 0,
    };
    // A run that spent its bytes opens nothing more.
    if shared.bytes.load(Ordering::Relaxed) > shared.config.max_bytes {
        return Err(Refused::new(rec, shared.over_budget(), false));
    }
    let verdict = side.rules.decide(&target.host, target.port);
    let refuse = |rec: Connection, why: String| Err(Refused::new(rec, why, false));
    let unreachable = |rec: Connection, why: String| Err(Refused::new(rec, why, true));
    match (verdict.tier, verdict.rule) {
        (Tier::Allow, Some(rule)) => rec.rule = rule,
        (Tier::Ask, Some(rule)) => match ask(target, side, shared, &rule).await {
            Ok(()) => rec.rule = format!("{rule}, approved"),
            Err(why) => return refuse(rec, why),
        },
        (_, Some(rule)) => return refuse(rec, rule),
        (_, None) => {
            let hint = side.rules.hint(&target.host, target.port);
            return refuse(rec, hint);
        }
    }
    let addrs: Vec<IpAddr> = match &target.host {
        Host::Ip(ip) => vec![*ip],
        Host::Name(n) => {
            let found = tokio::time::timeout(
                CONNECT_TIMEOUT,
                tokio::net::lookup_host((n.as_str(), target.port)),
            )
            .await;
            match found {
                Ok(Ok(a)) => a.map(|a| a.ip()).collect(),
                Ok(Err(e)) => return unreachable(rec, format!("{n} cannot be resolved: {e}")),
                Err(_) => return unreachable(rec, format!("resolving {n} timed out")),
            }
        }
    };
    let mut first_refusal = None;
    let mut last_error = None;
    for ip in addrs {
        if let Err(why) = side.rules.check_address(
            &target.host,
            ip,
            target.port,
            shared.guard.as_ref().map(|g| g as &dyn super::rules::Fence),
        ) {
            first_refusal.get_or_insert(why);
            continue;
        }
        let addr = SocketAddr::new(ip, target.port);
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => {
                rec.address = Some(ip.to_string());
                rec.allowed = true;
                let _ = s.set_nodelay(true);
                return Ok((s, rec));
            }
            Ok(Err(e)) => last_error = Some(format!("connecting to {addr} failed: {e}")),
            Err(_) => last_error = Some(format!("connecting to {addr} timed out")),
        }
    }
    // A refusal wins over a failure: the person reading it must learn it was the rules.
    match first_refusal {
        Some(why) => refuse(rec, why),
        None => {
            let why = last_error.unwrap_or_else(|| format!("{} has no address", target.host));
            unreachable(rec, why)
        }
    }
}

/// Why a connection was not made: its record, the reason, and whether the
/// destination was out of reach (no address, a failed or timed-out lookup or
/// connect) rather than refused by the rules: a 502 and SOCKS's "host
/// unreachable" then, not a 403 and "not allowed by ruleset".
pub(super) struct Refused {
    pub rec: Connection,
    pub why: String,
    pub unreachable: bool,
}

impl Refused {
    fn new(mut rec: Connection, why: String, unreachable: bool) -> Box<Refused> {
        rec.rule = why.clone();
        Box::new(Refused {
            rec,
            why,
            unreachable,
        })
    }
}

/// A destination under `ask`: a yes given earlier in the run (in this process
/// or, recorded as an approval, in one that drove the run before), or a person's
/// answer now (at the terminal), or a pending approval recorded for this exact
/// destination and the run (`loopbox runs approve`, the API, the dashboard),
/// the connection refused until it is decided.
async fn ask(target: &Target, side: &Side, shared: &Shared, rule: &str) -> Result<(), String> {
    let key = (side.name.to_string(), target.host.to_string(), target.port);
    if shared
        .approved
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains(&key)
    {
        return Ok(());
    }
    let Some(confirm) = shared.confirm.clone() else {
        return Err(format!(
            "{rule} needs a person's yes, and nobody can be asked here"
        ));
    };
    let request = AskRequest {
        what: format!(
            "{} connecting to {}:{}",
            side.name, target.host, target.port
        ),
        rule: rule.to_string(),
        request: serde_json::json!({
            "kind": "network", "side": side.name,
            "host": target.host.to_string(), "port": target.port,
        }),
        position: None,
    };
    // Approved before in this run, in this process or one that ran it before
    // (a resume, another worker): not asked again.
    let answer = tokio::task::spawn_blocking(move || {
        if confirm.approved_before(&request)? {
            return Ok(Answer::Approved);
        }
        confirm.confirm(&request)
    })
    .await
    .map_err(|e| format!("asking about {rule} failed: {e}"))?;
    match answer {
        Ok(Answer::Approved) => {
            shared
                .approved
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key);
            Ok(())
        }
        Ok(Answer::Declined(why)) | Ok(Answer::NoOneToAsk(why)) => {
            Err(format!("{rule} needs a person's yes: {why}"))
        }
        Ok(Answer::Wait(a)) => Err(format!(
            "{rule} needs a person's yes: waiting for approval {} (`{}`); try again once it is given",
            a.id,
            crate::ui::runs_command(&format!("approve {} --approval {}", a.run_id, a.id))
        )),
        Err(e) => Err(format!("asking about {rule} failed: {e:#}")),
    }
}

/// Carry both ways until both ends are done (by the faster of `splice(2)` and
/// a copy for these sockets, see [`super::splice`]), counting bytes against
/// the run's budget and closing on idle or total time.
async fn relay<C>(client: &C, upstream: TcpStream, rec: &mut Connection, shared: &Shared)
where
    C: super::splice::Socket,
{
    let t0 = Instant::now();
    let last = AtomicU64::new(0);
    let (out, inn) = (AtomicU64::new(0), AtomicU64::new(0));
    let idle = Duration::from_millis(shared.config.idle_timeout_ms);
    let watch = async {
        loop {
            tokio::time::sleep(idle / 4).await;
            let now = t0.elapsed().as_millis() as u64;
            if now.saturating_sub(last.load(Ordering::Relaxed)) >= idle.as_millis() as u64 {
                return "idle for network.idle_timeout_ms";
            }
        }
    };
    // Each chunk: the connection is not idle, and the run pays for it first.
    fn step<'a>(
        count: &'a AtomicU64,
        last: &'a AtomicU64,
        t0: Instant,
        shared: &'a Shared,
    ) -> impl FnMut(usize) -> bool + 'a {
        move |n| {
            last.store(t0.elapsed().as_millis() as u64, Ordering::Relaxed);
            count.fetch_add(n as u64, Ordering::Relaxed);
            shared.spend(n).is_ok()
        }
    }
    let total = Duration::from_millis(shared.config.connection_timeout_ms);
    let way = super::splice::Way::between::<C, TcpStream>();
    let both = async {
        tokio::join!(
            super::splice::one_way(way, client, &upstream, step(&out, &last, t0, shared)),
            super::splice::one_way(way, &upstream, client, step(&inn, &last, t0, shared))
        )
    };
    let ended = tokio::select! {
        (a, b) = both => a.and(b).err().map(|_| "no pipe could be made for it (file descriptors exhausted)"),
        why = watch => Some(why),
        _ = tokio::time::sleep(total) => Some("open for network.connection_timeout_ms"),
    };
    rec.bytes_out += out.load(Ordering::Relaxed);
    rec.bytes_in = inn.load(Ordering::Relaxed);
    if shared.bytes.load(Ordering::Relaxed) > shared.config.max_bytes {
        rec.rule.push_str("; cut at network.max_bytes");
    } else if let Some(why) = ended {
        rec.rule.push_str(&format!("; closed, {why}"));
    }
}

/// A header value with nothing a client could misread: printable ASCII only.
fn header_safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .take(1024)
        .collect()
}

async fn refuse_http<W: AsyncWrite + Unpin>(
    w: &mut W,
    status: u16,
    why: &str,
) -> std::io::Result<()> {
    let reason = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        407 => "Proxy Authentication Required",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        _ => "Service Unavailable",
    };
    let body = format!("loopbox refused this connection: {why}\n");
    let auth = if status == 407 {
        "Proxy-Authenticate: Basic realm=\"loopbox\"\r\n"
    } else {
        ""
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nX-Loopbox-Refused: {}\r\n{auth}Content-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        header_safe(why),
        body.len()
    );
    w.write_all(head.as_bytes()).await?;
    w.write_all(body.as_bytes()).await?;
    w.flush().await
}

pub(super) mod http;
pub(super) mod socks;
mod tls;
