//! Accepting connections: at most `server.max_connections` open at once (the
//! next waits in the kernel's backlog), and at most
//! `server.max_connections_per_ip` of them from one address (one more is
//! closed as soon as it is accepted, before any byte is read), each served over
//! HTTP/1.1 by hyper with a 10 s limit on sending a request's headers and
//! 64 KiB of them, so a client that opens connections and sends nothing, or
//! opens them again as fast as they are closed, cannot hold them all.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// How long a client may take to send a request's headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How many connections may be open at once, in all and from one address.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub connections: usize,
    pub per_ip: usize,
}

/// Connections open per address; an address leaves the map with its last one.
#[derive(Default)]
struct PerIp(Mutex<HashMap<IpAddr, usize>>);

/// One open connection of an address, counted until it is dropped.
struct Held {
    counts: Arc<PerIp>,
    ip: IpAddr,
}

impl PerIp {
    /// Count a connection from `ip`, unless it already has `max` open.
    fn take(counts: &Arc<PerIp>, ip: IpAddr, max: usize) -> Option<Held> {
        let mut map = counts.0.lock().unwrap_or_else(|p| p.into_inner());
        let n = map.entry(ip).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(Held {
            counts: counts.clone(),
            ip,
        })
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut map = self.counts.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = map.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.ip);
            }
        }
    }
}

/// Serve `app` on `listener`, forever.
pub async fn accept(listener: TcpListener, app: axum::Router, limits: Limits) {
    let slots = Arc::new(Semaphore::new(limits.connections));
    let per_ip = Arc::new(PerIp::default());
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let (stream, held) = match listener.accept().await {
            Ok((s, peer)) => match PerIp::take(&per_ip, peer.ip(), limits.per_ip) {
                Some(held) => (s, held),
                // Closed unread: this address holds its share already.
                None => continue,
            },
            Err(e) => {
                // Out of descriptors, say: wait, rather than spin.
                crate::errln!("loopbox serve: accepting a connection failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .max_buf_size(64 * 1024)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            drop((slot, held));
        });
    }
}
