//! The HTTP side of the proxy: a request head read whole (bounded in size and
//! time) and parsed by `httparse`; CONNECT opens a tunnel, a request in
//! absolute form is sent on in origin form with `Connection: close`; a Host
//! header that names another host than the target is refused either way.
//! Inside a tunnel the first bytes are looked at: a TLS client hello whose
//! server name differs from the target, or a plain HTTP request for another
//! host (or a CONNECT, relayed through an allowed proxy), ends it.

use std::sync::Arc;

use base64::Engine as _;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::super::rules::Host;
use super::tls::Hello;
use super::{Connection, HEAD_TIMEOUT, Refused, Shared, Side, Target, open, refuse_http, relay};

/// Read a head (through the blank line) that began with `first`; Err names
/// the status and why.
async fn read_head<R: AsyncRead + Unpin>(
    r: &mut R,
    first: Option<u8>,
    max: usize,
) -> Result<Vec<u8>, (u16, String)> {
    let mut head: Vec<u8> = first.into_iter().collect();
    let mut buf = [0u8; 4096];
    let read = async {
        loop {
            if head.windows(4).any(|w| w == b"\r\n\r\n") {
                return Ok(());
            }
            if head.len() > max {
                return Err((
                    431,
                    format!("the request head is over network.header_bytes = {max}"),
                ));
            }
            // One byte past the blank line is never read: it belongs to the body.
            let want = if head.ends_with(b"\r\n\r") {
                1
            } else if head.ends_with(b"\r\n") {
                2
            } else if head.ends_with(b"\r") {
                3
            } else {
                4
            };
            let n = r
                .read(&mut buf[..want])
                .await
                .map_err(|e| (400, format!("reading the request failed: {e}")))?;
            if n == 0 {
                return Err((400, "the client closed before its request ended".into()));
            }
            head.extend_from_slice(&buf[..n]);
        }
    };
    match tokio::time::timeout(HEAD_TIMEOUT, read).await {
        Ok(r) => r.map(|()| head),
        Err(_) => Err((408, "the request head took over 30 s".into())),
    }
}

/// `host:port` (or `[v6]:port`) as a target; `default` when the port is left out.
fn authority(s: &str, default: Option<u16>) -> Result<Target, String> {
    let (host, port) = match s.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') && (!h.contains(':') || h.ends_with(']')) => (h, Some(p)),
        _ => (s, None),
    };
    let port = match port {
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("`{p}` is not a port"))?,
        None => default.ok_or_else(|| format!("`{s}` names no port"))?,
    };
    Ok(Target {
        host: Host::parse(host)?,
        port,
    })
}

/// The parts of a head the proxy acts on.
struct Request {
    method: String,
    target: Target,
    /// The path and query, for a plain request; None for CONNECT.
    origin: Option<String>,
    version: u8,
    headers: Vec<(String, Vec<u8>)>,
}

fn parse(head: &[u8], side: &Side) -> Result<Request, (u16, String)> {
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err((400, "an incomplete request head".into())),
        Err(e) => return Err((400, format!("a malformed request: {e}"))),
    }
    let method = req.method.unwrap_or_default().to_string();
    let path = req.path.unwrap_or_default();
    let headers: Vec<(String, Vec<u8>)> = req
        .headers
        .iter()
        .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
        .collect();
    if let Some(token) = &side.token {
        let want = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("loopbox:{token}"))
        );
        let given = headers.iter().find(|(n, _)| n == "proxy-authorization");
        let ok = given.is_some_and(|(_, v)| {
            use subtle::ConstantTimeEq;
            v.len() == want.len() && bool::from(v.as_slice().ct_eq(want.as_bytes()))
        });
        if !ok {
            return Err((407, "this proxy serves only the run's own sandbox".into()));
        }
    }
    let (target, origin) = if method == "CONNECT" {
        (authority(path, None).map_err(|e| (400, e))?, None)
    } else {
        let rest = path.strip_prefix("http://").ok_or_else(|| {
            (
                400,
                format!(
                    "`{}` is not an absolute http:// URL (use CONNECT for https)",
                    trim(path)
                ),
            )
        })?;
        let (auth, origin) = match rest.find(['/', '?']) {
            Some(i) => (&rest[..i], rest[i..].to_string()),
            None => (rest, "/".to_string()),
        };
        if auth.contains('@') {
            return Err((400, "a URL with user information".into()));
        }
        let origin = if origin.starts_with('?') {
            format!("/{origin}")
        } else {
            origin
        };
        (
            authority(auth, Some(80)).map_err(|e| (400, e))?,
            Some(origin),
        )
    };
    // A Host header naming another host than the target is a request for that host.
    for (name, value) in &headers {
        if name == "host" {
            let v = String::from_utf8_lossy(value);
            let named = authority(&v, Some(target.port))
                .map_err(|e| (400, format!("the Host header: {e}")))?;
            if named.host != target.host {
                return Err((
                    403,
                    format!("the Host header names {}, not {}", named.host, target.host),
                ));
            }
        }
    }
    Ok(Request {
        method,
        target,
        origin,
        version: req.version.unwrap_or(1),
        headers,
    })
}

fn trim(s: &str) -> String {
    s.chars().take(200).collect()
}

/// Serve one HTTP proxy request whose first byte was read already.
pub(in crate::exec::egress) async fn serve<C>(
    client: &mut C,
    first: u8,
    side: &Arc<Side>,
    shared: &Arc<Shared>,
) -> Option<Connection>
where
    C: AsyncRead + AsyncWrite + Unpin + crate::exec::egress::splice::Socket,
{
    let head = match read_head(client, Some(first), shared.config.header_bytes).await {
        Ok(h) => h,
        Err((status, why)) => {
            let _ = refuse_http(client, status, &why).await;
            return None;
        }
    };
    let req = match parse(&head, side) {
        Ok(r) => r,
        Err((status, why)) => {
            let _ = refuse_http(client, status, &why).await;
            return None;
        }
    };
    let (upstream, mut rec) = match open(&req.target, side, shared).await {
        Ok(ok) => ok,
        Err(refused) => {
            let Refused {
                rec,
                why,
                unreachable,
            } = *refused;
            let status = if unreachable { 502 } else { 403 };
            let _ = refuse_http(client, status, &why).await;
            return Some(rec);
        }
    };
    let mut upstream = upstream;
    match &req.origin {
        None => {
            if client
                .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .await
                .is_err()
            {
                return Some(rec);
            }
            if let Err(why) = inspect_tunnel(client, &mut upstream, &req.target, shared).await {
                rec.allowed = false;
                rec.rule = why;
                return Some(rec);
            }
        }
        Some(origin) => {
            let mut out = format!("{} {} HTTP/1.{}\r\n", req.method, origin, req.version);
            let mut has_host = false;
            for (name, value) in &req.headers {
                if matches!(
                    name.as_str(),
                    "proxy-authorization" | "proxy-connection" | "connection" | "keep-alive"
                ) {
                    continue;
                }
                has_host |= name == "host";
                out.push_str(name);
                out.push_str(": ");
                out.push_str(&String::from_utf8_lossy(value));
                out.push_str("\r\n");
            }
            if !has_host {
                out.push_str(&format!(
                    "host: {}:{}\r\n",
                    req.target.host, req.target.port
                ));
            }
            out.push_str("connection: close\r\n\r\n");
            if shared.spend(out.len()).is_err() {
                rec.rule.push_str("; cut at network.max_bytes");
                return Some(rec);
            }
            if upstream.write_all(out.as_bytes()).await.is_err() {
                return Some(rec);
            }
            rec.bytes_out = out.len() as u64;
        }
    }
    relay(&*client, upstream, &mut rec, shared).await;
    Some(rec)
}

/// Look at what a client first sends through a tunnel, and pass it on when it
/// is for the target: a TLS client hello's server name, or a plain request's
/// host, must be the target's (an address target takes any server name).
async fn inspect_tunnel<C>(
    client: &mut C,
    upstream: &mut tokio::net::TcpStream,
    target: &Target,
    shared: &Shared,
) -> Result<(), String>
where
    C: AsyncRead + AsyncWrite + Unpin + crate::exec::egress::splice::Socket,
{
    let mut buf = vec![0u8; 16 << 10];
    let mut have = 0;
    let deadline = tokio::time::Instant::now() + HEAD_TIMEOUT;
    loop {
        let n = match tokio::time::timeout_at(deadline, client.read(&mut buf[have..])).await {
            Ok(Ok(n)) => n,
            // Nothing sent (a server-speaks-first protocol) or the client left: nothing to check.
            _ => return Ok(()),
        };
        if n == 0 {
            return Ok(());
        }
        have += n;
        match look(&buf[..have], target) {
            Look::Pass => break,
            Look::Refuse(why) => return Err(why),
            Look::More if have < buf.len() => continue,
            // What cannot be checked is not let through.
            Look::More => {
                return Err(format!(
                    "the first {} KiB of the tunnel are not a whole request or TLS client hello, so its host cannot be checked",
                    buf.len() >> 10
                ));
            }
        }
    }
    shared.spend(have)?;
    upstream
        .write_all(&buf[..have])
        .await
        .map_err(|e| format!("sending to {} failed: {e}", target.host))
}

enum Look {
    Pass,
    More,
    Refuse(String),
}

fn look(b: &[u8], target: &Target) -> Look {
    // Servers skip blank lines before a request (RFC 9112 2.2): so does this.
    let blank = b
        .iter()
        .take_while(|c| **c == b'\r' || **c == b'\n')
        .count();
    if blank == b.len() {
        return Look::More;
    }
    let b = &b[blank..];
    if b[0] == 0x16 {
        return match super::tls::read(b) {
            Hello::More => Look::More,
            Hello::NoName => Look::Pass,
            Hello::Unreadable(why) => Look::Refuse(format!(
                "the tunnel's TLS client hello cannot be checked: {why}"
            )),
            Hello::Name(name) => match (Host::parse(&name), &target.host) {
                (_, Host::Ip(_)) => Look::Pass,
                (Ok(h), t) if &h == t => Look::Pass,
                (_, t) => Look::Refuse(format!(
                    "the TLS server name `{}` is not {t}, the tunnel's host",
                    trim(&name)
                )),
            },
        };
    }
    // Not a request line (`METHOD ` in capitals): some other protocol, passed on.
    let method = b
        .iter()
        .take(16)
        .take_while(|c| c.is_ascii_uppercase())
        .count();
    if method == 0 || (b.len() > method && b[method] != b' ') {
        return Look::Pass;
    }
    if b.len() == method {
        return Look::More;
    }
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(b) {
        Ok(httparse::Status::Partial) => Look::More,
        Err(_) => Look::Pass,
        Ok(httparse::Status::Complete(_)) => {
            let path = req.path.unwrap_or_default();
            if req.method == Some("CONNECT") {
                return Look::Refuse(format!(
                    "a CONNECT to `{}` inside a tunnel to {}",
                    trim(path),
                    target.host
                ));
            }
            if let Some(rest) = path
                .strip_prefix("http://")
                .or_else(|| path.strip_prefix("https://"))
            {
                let auth = rest.split(['/', '?']).next().unwrap_or_default();
                if authority(auth, Some(80)).map(|t| t.host) != Ok(target.host.clone()) {
                    return Look::Refuse(format!(
                        "a request for `{}` inside a tunnel to {}",
                        trim(auth),
                        target.host
                    ));
                }
            }
            for h in req.headers.iter() {
                if h.name.eq_ignore_ascii_case("host") {
                    let v = String::from_utf8_lossy(h.value);
                    let named = authority(&v, Some(target.port)).map(|t| t.host);
                    if named.as_ref().ok() != Some(&target.host) {
                        return Look::Refuse(format!(
                            "a Host header of `{}` inside a tunnel to {}",
                            trim(&v),
                            target.host
                        ));
                    }
                }
            }
            Look::Pass
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(h: &str, port: u16) -> Target {
        Target {
            host: Host::parse(h).unwrap(),
            port,
        }
    }

    #[test]
    fn authorities_parse_with_and_without_ports() {
        let t = authority("Example.com:8443", None).unwrap();
        assert_eq!((t.host, t.port), (Host::Name("example.com".into()), 8443));
        let t = authority("[::1]:80", None).unwrap();
        assert_eq!(t.host, Host::Ip("::1".parse().unwrap()));
        assert_eq!(authority("a.b", Some(80)).unwrap().port, 80);
        assert!(authority("a.b", None).is_err());
        assert!(authority("a.b:0", None).is_err());
        assert!(authority("2130706433:80", None).is_err());
    }

    #[test]
    fn a_tunnel_carrying_a_request_for_another_host_is_refused() {
        let t = target("allowed.test", 80);
        assert!(matches!(
            look(b"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n", &t),
            Look::Pass
        ));
        assert!(matches!(
            look(b"GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n", &t),
            Look::Refuse(_)
        ));
        assert!(matches!(
            look(b"GET http://evil.test/ HTTP/1.1\r\n\r\n", &t),
            Look::Refuse(_)
        ));
        assert!(matches!(
            look(b"CONNECT evil.test:443 HTTP/1.1\r\n\r\n", &t),
            Look::Refuse(_)
        ));
        assert!(matches!(look(b"GET / HTTP/1.1\r\nHo", &t), Look::More));
        assert!(matches!(look(b"SSH-2.0-OpenSSH\r\n", &t), Look::Pass));
        assert!(matches!(
            look(b"\r\nCONNECT evil.test:443 HTTP/1.1\r\n\r\n", &t),
            Look::Refuse(_)
        ));
        assert!(matches!(look(b"\r\n", &t), Look::More));
    }
}
