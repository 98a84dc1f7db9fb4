//! Webhooks: a tenant's admin names URLs its events go to, and the server
//! sends each queued delivery (`db/webhooks.rs`) there, signed, retried with
//! backoff, under the destination rules of the tenant's runs' egress.
//!
//! - Where: `http://` or `https://`, a host in its one standard form (no
//!   `2130706433`, no user in the URL), every address it resolves to checked
//!   when the webhook is made and again at each delivery, on the addresses
//!   actually connected to (a name that later resolves elsewhere is checked
//!   there): never the server's own addresses or its store's, and a private,
//!   loopback or link-local one (cloud metadata) only where the operator
//!   opened it to the tenant (`[tenants.NAME.network] private`), as for its
//!   runs ([`crate::exec::egress::guard::Guard`]). No redirect is followed,
//!   no proxy from the environment is used, the whole exchange has a timeout
//!   and at most [`ANSWER_BYTES`] of the answer are read.
//! - What: JSON `{"id", "type", "created_at_ms", "tenant", "data", "url"}`
//!   (`url` the dashboard's page of it), or `{"text"}` for Slack.
//! - Signed: `loopbox-signature: t=UNIX,v1=HEX`, HEX the HMAC-SHA256 under
//!   the webhook's secret of `UNIX.BODY`; `loopbox-event-id` repeats the id a
//!   receiver drops a repeat by (delivery is at least once).

use std::io::Read;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::Server;
use crate::db::webhooks::{Attempt, Due};
use crate::exec::egress::addr;
use crate::exec::egress::guard::Guard;
use crate::exec::egress::rules::{Fence, Host};

/// The longest URL a webhook may have.
pub const MAX_URL: usize = 2048;
/// The whole exchange with a receiver, connecting included.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// What is read of a receiver's answer (for the delivery log), at most.
pub const ANSWER_BYTES: u64 = 512;
/// Deliveries sent at once by one server.
const BATCH: i64 = 16;
/// Deliveries of one tenant in flight at once (across servers on one store):
/// a tenant whose receivers never answer holds two slots, not all.
const PER_TENANT: i64 = 2;
/// Connecting to a receiver, within [`TIMEOUT`].
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How often the queue is looked at.
const TICK: Duration = Duration::from_millis(500);
/// How long a delivered or given-up delivery stays in the log.
pub const KEEP_MS: i64 = 7 * 24 * 3600 * 1000;
/// How often the log's old rows are removed.
const SWEEP_EVERY_MS: i64 = 10 * 60 * 1000;

/// A webhook's URL, read.
#[derive(Debug, Clone)]
pub struct Target {
    pub host: Host,
    pub port: u16,
}

/// Read `url` as a webhook's: `http(s)://HOST[:PORT]/PATH`, nothing else.
pub fn target(url: &str) -> Result<Target, String> {
    if url.len() > MAX_URL || url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(format!(
            "a webhook's URL is at most {MAX_URL} characters, without spaces or control characters"
        ));
    }
    let uri: http::Uri = url
        .parse()
        .map_err(|_| format!("`{}` is not a URL", crate::ui::one_line(url)))?;
    let port = match uri.scheme_str() {
        Some("https") => 443,
        Some("http") => 80,
        _ => {
            return Err(format!(
                "`{}` is not an http:// or https:// URL",
                crate::ui::one_line(url)
            ));
        }
    };
    let auth = uri
        .authority()
        .ok_or_else(|| format!("`{}` names no host", crate::ui::one_line(url)))?;
    if auth.as_str().contains('@') {
        return Err("a webhook's URL carries no user or password: put a secret in its path, or rely on its signature".into());
    }
    let host = Host::parse(auth.host())?;
    Ok(Target {
        host,
        port: auth.port_u16().unwrap_or(port),
    })
}

/// Whether `ip:port` may be a webhook's destination for a tenant guarded by `guard`.
pub fn check_ip(guard: &Guard, ip: IpAddr, port: u16) -> Result<(), String> {
    let ip = addr::canonical(ip);
    if guard.is_own(ip) {
        return Err(format!(
            "{ip} is an address of loopbox's own server or store, which no webhook reaches"
        ));
    }
    if let Some(why) = addr::special(ip)
        && !guard.opens(ip, port)
    {
        return Err(format!(
            "{ip}:{port} is a {why} address, which a webhook reaches only where the server's operator opened it to the tenant (`tenants.NAME.network.private` in the server config)"
        ));
    }
    Ok(())
}

/// Check `url` now, as a delivery would: its form, and every address its host
/// resolves to. A name that resolves to none is refused (it could not be checked).
pub async fn check_url(guard: &Guard, url: &str) -> Result<Target, String> {
    let t = target(url)?;
    let addrs: Vec<SocketAddr> = match &t.host {
        Host::Ip(ip) => vec![SocketAddr::new(*ip, t.port)],
        Host::Name(n) => tokio::net::lookup_host((n.as_str(), t.port))
            .await
            .map_err(|e| {
                format!("`{n}` cannot be resolved ({e}); give a name this server resolves")
            })?
            .collect(),
    };
    for a in &addrs {
        check_ip(guard, a.ip(), a.port()).map_err(|why| match &t.host {
            Host::Name(n) => format!("{n} resolves to {why}"),
            Host::Ip(_) => why,
        })?;
    }
    Ok(t)
}

/// ureq's resolver, refusing a destination the tenant may not reach: the
/// addresses it returns are the only ones connected to.
#[derive(Debug)]
struct Guarded(Guard);

impl ureq::unversioned::resolver::Resolver for Guarded {
    fn resolve(
        &self,
        uri: &http::Uri,
        config: &ureq::config::Config,
        timeout: ureq::unversioned::transport::NextTimeout,
    ) -> Result<ureq::unversioned::resolver::ResolvedSocketAddrs, ureq::Error> {
        let addrs = ureq::unversioned::resolver::DefaultResolver::default()
            .resolve(uri, config, timeout)?;
        for a in addrs.iter() {
            check_ip(&self.0, a.ip(), a.port()).map_err(|why| {
                ureq::Error::Io(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    why,
                ))
            })?;
        }
        Ok(addrs)
    }
}

/// `loopbox-signature`'s value for `body` sent at `t` (unix seconds).
pub fn signature(secret: &str, t: i64, body: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_bytes());
    let mut ctx = ring::hmac::Context::with_key(&key);
    ctx.update(format!("{t}.").as_bytes());
    ctx.update(body);
    let tag = ctx.sign();
    let hex: String = tag.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("t={t},v1={hex}")
}

/// A new webhook secret: `whsec_` and 256 random bits.
pub fn new_secret() -> anyhow::Result<String> {
    Ok(format!("whsec_{}", super::auth::secret::random_text()?))
}

/// The dashboard's page of an event, under the server's URL `base`.
fn link(base: &str, kind: &str, data: &Value) -> String {
    let base = base.trim_end_matches('/');
    match (kind, data["run"].as_str()) {
        ("approval.pending", _) => format!("{base}/approvals"),
        (_, Some(run)) => format!("{base}/runs/{run}"),
        _ => format!("{base}/runs"),
    }
}

/// Text a run wrote (a command, a reason) as Slack shows it literally: its
/// control characters `&`, `<`, `>` escaped as Slack asks, so no `<!channel>`,
/// mention or `<URL|label>` link can be planted, and backquotes (which Slack
/// cannot escape) made plain quotes, so none closes a code span early.
fn slack_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '`' => out.push('\''),
            c => out.push(c),
        }
    }
    out
}

/// The body of `d`, as its webhook's format says.
pub fn body(d: &Due, base: &str) -> Vec<u8> {
    let url = link(base, &d.kind, &d.data);
    let v = if d.format == "slack" {
        let what = slack_text(&match d.kind.as_str() {
            "approval.pending" => format!(
                "an approval waits: {}",
                d.data["what"].as_str().unwrap_or("an action")
            ),
            "approval.decided" => format!(
                "approval {} {}",
                d.data["approval"].as_str().unwrap_or_default(),
                d.data["status"].as_str().unwrap_or_default()
            ),
            "run.finished" => format!(
                "run {} {}",
                d.data["run"].as_str().unwrap_or_default(),
                d.data["status"].as_str().unwrap_or_default()
            ),
            _ => d.data["message"].as_str().unwrap_or(&d.kind).to_string(),
        });
        json!({"text": format!("loopbox, tenant {}: {what} <{}|open>", slack_text(&d.tenant), slack_text(&url))})
    } else {
        json!({
            "id": d.event_id,
            "type": d.kind,
            "created_at_ms": d.created_at_ms,
            "tenant": d.tenant,
            "data": d.data,
            "url": url,
        })
    };
    v.to_string().into_bytes()
}

/// Send `d` once, to the addresses `guard` lets through; how it went.
pub fn send(d: &Due, guard: &Guard, base: &str) -> Attempt {
    if let Err(why) = target(&d.url) {
        return Attempt::Failed(None, why);
    }
    let config = ureq::Agent::config_builder()
        .timeout_global(Some(TIMEOUT))
        .timeout_connect(Some(CONNECT_TIMEOUT))
        .max_redirects(0)
        .proxy(None)
        .http_status_as_error(false)
        .max_response_header_size(16 * 1024)
        .user_agent(concat!("loopbox-webhook/", env!("CARGO_PKG_VERSION")))
        .build();
    let agent = ureq::Agent::with_parts(
        config,
        ureq::unversioned::transport::DefaultConnector::new(),
        Guarded(guard.clone()),
    );
    let body = body(d, base);
    let t = crate::db::now_ms() / 1000;
    let sent = agent
        .post(&d.url)
        .header("content-type", "application/json")
        .header("loopbox-event", &d.kind)
        .header("loopbox-event-id", &d.event_id)
        .header("loopbox-signature", signature(&d.secret, t, &body))
        .send(&body[..]);
    match sent {
        Ok(mut r) => {
            let status = r.status().as_u16();
            if r.status().is_success() {
                return Attempt::Delivered(status);
            }
            let mut answer = String::new();
            let _ = r
                .body_mut()
                .as_reader()
                .take(ANSWER_BYTES)
                .read_to_string(&mut answer);
            let redirect = if r.status().is_redirection() {
                " (a redirect is not followed: give the URL it leads to)"
            } else {
                ""
            };
            Attempt::Failed(
                Some(status),
                format!(
                    "the receiver answered {status}{redirect}: {}",
                    answer.trim()
                ),
            )
        }
        Err(ureq::Error::Io(e)) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            Attempt::Failed(None, format!("refused: {e}"))
        }
        Err(e) => Attempt::Failed(None, format!("{e}")),
    }
}

/// Deliver the queue until the task is aborted: each tick, claim what is
/// due and send it, each under its tenant's guard.
pub async fn deliver(server: Arc<Server>) {
    if !server.data.is_shared()
        && let Err(e) = server.store.db().release_deliveries()
    {
        crate::errln!("loopbox serve: webhooks: releasing old claims failed: {e:#}");
    }
    // Sends in flight; each tick fills the free slots, never waiting for a
    // slow receiver's batch to end before another tenant's goes out.
    let mut sending = tokio::task::JoinSet::new();
    let mut swept = 0i64;
    loop {
        tokio::time::sleep(TICK).await;
        while sending.try_join_next().is_some() {}
        let now = crate::db::now_ms();
        if now - swept > SWEEP_EVERY_MS {
            swept = now;
            let s = server.clone();
            let _ = tokio::task::spawn_blocking(move || {
                if let Err(e) = s.store.db().sweep_deliveries(now - KEEP_MS) {
                    crate::errln!("loopbox serve: webhooks: removing old deliveries failed: {e:#}");
                }
            })
            .await;
        }
        let free = BATCH - sending.len() as i64;
        if free <= 0 {
            continue;
        }
        let s = server.clone();
        let due = tokio::task::spawn_blocking(move || {
            s.store.db().claim_deliveries(now, free, PER_TENANT)
        })
        .await;
        let due = match due {
            Ok(Ok(d)) => d,
            Ok(Err(e)) => {
                crate::errln!("loopbox serve: webhooks: reading the queue failed: {e:#}");
                continue;
            }
            Err(_) => continue,
        };
        for d in due {
            let s = server.clone();
            sending.spawn_blocking(move || {
                let guard = match s.tenants.get(&d.tenant) {
                    Some(t) => Guard::for_tenant(s.guarded.clone(), &t.network),
                    None => Guard::own(s.guarded.clone()),
                };
                let how = if s.tenants.get(&d.tenant).is_none() {
                    Attempt::Failed(
                        None,
                        format!("tenant `{}` is no longer in the server config", d.tenant),
                    )
                } else {
                    send(&d, &guard, crate::ui::server_url().unwrap_or_default())
                };
                // What a receiver or the network said is untrusted: one line, escaped.
                let how = match how {
                    Attempt::Failed(status, why) => {
                        Attempt::Failed(status, crate::ui::one_line(&why))
                    }
                    delivered => delivered,
                };
                if let Err(e) = s.store.db().record_attempt(&d, &how) {
                    crate::errln!(
                        "loopbox serve: webhooks: recording delivery {} failed: {e:#}",
                        d.id
                    );
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_read_in_its_one_form_and_private_addresses_need_the_operator() {
        for bad in [
            "ftp://example.com/x",
            "http://2130706433/",
            "http://0x7f.1/",
            "http://0177.0.0.1/",
            "http://user:pw@example.com/",
            "http://exa mple.com/",
            "/relative",
        ] {
            assert!(target(bad).is_err(), "{bad}");
        }
        let t = target("https://hooks.example.com/x?y=1").unwrap();
        assert_eq!(
            (t.host, t.port),
            (Host::Name("hooks.example.com".into()), 443)
        );
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let own = Guard::own(vec![ip("127.0.0.1")]);
        for (a, port) in [
            ("169.254.169.254", 80),
            ("127.0.0.2", 8080),
            ("::ffff:127.0.0.1", 80),
            ("::ffff:a9fe:a9fe", 80),
            ("10.0.0.5", 80),
            ("0.0.0.0", 80),
        ] {
            assert!(check_ip(&own, ip(a), port).is_err(), "{a}");
        }
        check_ip(&own, ip("93.184.216.34"), 443).unwrap();
        let opened = Guard::for_tenant(
            vec![ip("127.0.0.1")],
            &crate::exec::egress::guard::TenantNetwork {
                private: vec!["127.0.0.0/8".into()],
                ..Default::default()
            },
        );
        check_ip(&opened, ip("127.0.0.2"), 8080).unwrap();
        // The server's own address stays refused whatever the operator opened.
        let e = check_ip(&opened, ip("127.0.0.1"), 9).unwrap_err();
        assert!(e.contains("loopbox's own server"), "{e}");
    }

    /// The JSON body carries the event's id and its dashboard link; the
    /// Slack one is a `text` naming the tenant and linking the page.
    #[test]
    fn a_body_links_the_dashboard_in_json_or_slack_form() {
        let mut d = Due {
            id: "evt_1.wh_1".into(),
            event_id: "evt_1".into(),
            tenant: "alpha".into(),
            kind: "run.finished".into(),
            data: json!({"run": "r1", "status": "failed"}),
            created_at_ms: 5,
            attempts: 0,
            url: "https://hooks.example.com/x".into(),
            format: "json".into(),
            secret: "whsec_k".into(),
        };
        let v: Value = serde_json::from_slice(&body(&d, "https://lbx.example/")).unwrap();
        assert_eq!(
            v,
            json!({"id": "evt_1", "type": "run.finished", "created_at_ms": 5, "tenant": "alpha",
                   "data": {"run": "r1", "status": "failed"}, "url": "https://lbx.example/runs/r1"})
        );
        d.format = "slack".into();
        let v: Value = serde_json::from_slice(&body(&d, "https://lbx.example")).unwrap();
        assert_eq!(
            v,
            json!({"text": "loopbox, tenant alpha: run r1 failed <https://lbx.example/runs/r1|open>"})
        );
        // What a run wrote is shown as written: no mention, link or code span
        // of its own (the attack: a command naming `<!channel>` and a link).
        d.kind = "approval.pending".into();
        d.data = json!({"run": "r1", "what": "exec `echo 'x` <!channel> <https://evil.example/a|approve> & `'`"});
        let v: Value = serde_json::from_slice(&body(&d, "https://lbx.example")).unwrap();
        assert_eq!(
            v["text"],
            "loopbox, tenant alpha: an approval waits: exec 'echo 'x' &lt;!channel&gt; &lt;https://evil.example/a|approve&gt; &amp; ''' <https://lbx.example/approvals|open>"
        );
    }

    /// At delivery the addresses a name resolves to are checked again, and
    /// only those are connected to: a name that has come to resolve to
    /// loopback (DNS rebinding) is refused without a connection.
    #[test]
    fn a_delivery_to_a_name_now_resolving_to_loopback_is_refused() {
        let d = Due {
            id: "e.w".into(),
            event_id: "e".into(),
            tenant: "t".into(),
            kind: "run.finished".into(),
            data: json!({}),
            created_at_ms: 0,
            attempts: 0,
            url: "http://localhost:9/hook".into(),
            format: "json".into(),
            secret: "s".into(),
        };
        let guard = Guard::own(vec!["127.0.0.1".parse().unwrap()]);
        match send(&d, &guard, "http://x") {
            Attempt::Failed(None, why) => assert!(why.starts_with("refused: "), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    /// The signature a receiver recomputes: HMAC-SHA256 of `t.body`
    /// (checked against the value Python's `hmac` gives for the same input).
    #[test]
    fn the_signature_is_the_hmac_of_the_time_and_the_body() {
        assert_eq!(
            signature("whsec_k", 1700000000, b"{}"),
            "t=1700000000,v1=8b20524faff2b12e1089e404a8cf60fbe577e5320e899ebff7329ebbcb9ada22"
        );
    }
}
