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
            // Never read past it, so the blank line can only be at the end:
            // looking for it anywhere else made reading a head quadratic (a
            // 60 KB head took over 30 s, and the proxy's one thread with it).
            if head.ends_with(b"\r\n\r\n") {
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
pub(super) async fn inspect_tunnel<C>(
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
        let read = tokio::time::timeout_at(deadline, client.read(&mut buf[have..]));
        let n = if have == 0 {
            // The server speaking first (a greeting, a banner: no request and
            // no TLS client hello to come) ends the look at once, rather than
            // after the client has been silent for 30 s (a SOCKS or CONNECT
            // tunnel to such a server waited that long for its greeting).
            tokio::select! {
                r = read => match r {
                    Ok(Ok(n)) => n,
                    _ => return Ok(()),
                },
                _ = upstream.readable() => return Ok(()),
            }
        } else {
            match read.await {
                Ok(Ok(n)) => n,
                // Nothing sent (a server-speaks-first protocol) or the client left: nothing to check.
                _ => return Ok(()),
            }
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
    // Not a request line (a method, letters, then a space or tab): some
    // other protocol, passed on.
    let method = b
        .iter()
        .take(16)
        .take_while(|c| c.is_ascii_alphabetic())
        .count();
    if method == 0 || (b.len() > method && b[method] != b' ' && b[method] != b'\t') {
        return Look::Pass;
    }
    // The first line, once it has come: one naming an HTTP version (in any
    // case), or a CONNECT, is a request whatever else it holds. Lenient
    // servers and relaying proxies read what `httparse` will not (a tab, an
    // odd version, `Host : x`), so such a request is refused, not passed.
    let Some(end) = b.iter().position(|c| *c == b'\n') else {
        return Look::More;
    };
    let line = b[..end].to_ascii_lowercase();
    let request = line.windows(5).any(|w| w == b"http/") || line.starts_with(b"connect");
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(b) {
        Ok(httparse::Status::Partial) => Look::More,
        Err(e) if request => Look::Refuse(format!(
            "a request inside a tunnel to {} that cannot be read ({e}), so its host cannot be checked",
            target.host
        )),
        Err(_) => Look::Pass,
        Ok(httparse::Status::Complete(_)) => {
            let path = req.path.unwrap_or_default();
            if req
                .method
                .is_some_and(|m| m.eq_ignore_ascii_case("CONNECT"))
            {
                return Look::Refuse(format!(
                    "a CONNECT to `{}` inside a tunnel to {}",
                    trim(path),
                    target.host
                ));
            }
            // The scheme in any case: `HTTP://evil.test/` is evil.test too.
            let lower: String = path
                .chars()
                .take(8)
                .collect::<String>()
                .to_ascii_lowercase();
            let rest = if lower.starts_with("http://") {
                path.get(7..)
            } else if lower.starts_with("https://") {
                path.get(8..)
            } else {
                None
            };
            if let Some(rest) = rest {
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

    /// A head near `network.header_bytes` is read in time linear in its size:
    /// each read of at most 4 bytes searched the whole head so far for its
    /// end, so eight 60 KB heads were not read within the 30 s allowed (408)
    /// and kept the proxy's thread busy throughout.
    #[tokio::test]
    async fn a_large_request_head_is_read_in_linear_time() {
        let mut head = b"GET http://a.test/ HTTP/1.1\r\nX: ".to_vec();
        head.extend(std::iter::repeat_n(b'a', 60_000));
        head.extend(b"\r\n\r\n");
        let (mut client, mut server) = tokio::io::duplex(1 << 20);
        client.write_all(&head).await.unwrap();
        let t0 = std::time::Instant::now();
        let got = read_head(&mut server, None, 64 << 10).await.unwrap();
        assert_eq!(got.len(), head.len());
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(3),
            "a 60 KB head took {:?}",
            t0.elapsed()
        );
    }

    /// A request in a tunnel that `httparse` will not read, or whose method
    /// or scheme is not in capitals / lower case as the check expected, is
    /// still a request for another host to a lenient server or a relaying
    /// proxy at the allowed address: it was passed unread.
    #[test]
    fn a_tunnel_request_in_an_odd_spelling_for_another_host_is_refused() {
        let t = target("allowed.test", 80);
        for odd in [
            &b"GET HTTP://evil.test/ HTTP/1.0\r\n\r\n"[..],
            b"GET Http://evil.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
            b"CONNECT evil.test:443 HTTP/1.2\r\n\r\n",
            b"connect evil.test:443 HTTP/1.1\r\n\r\n",
            b"CONNECT\tevil.test:443 HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost : evil.test\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost:\x01evil.test\r\n\r\n",
        ] {
            assert!(
                matches!(look(odd, &t), Look::Refuse(_)),
                "{}",
                String::from_utf8_lossy(odd)
            );
        }
        // Other protocols still pass.
        assert!(matches!(look(b"SSH-2.0-OpenSSH\r\n", &t), Look::Pass));
        assert!(matches!(look(b"*1\r\n$4\r\nPING\r\n", &t), Look::Pass));
        assert!(matches!(
            look(b"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n", &t),
            Look::Pass
        ));
    }
}
