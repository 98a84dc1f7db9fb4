//! The SOCKS5 side of the proxy (RFC 1928, with RFC 1929's username and
//! password where the listener demands its token): CONNECT only; BIND and UDP
//! ASSOCIATE are refused as unsupported, so no datagram leaves a sandbox.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::super::rules::Host;
use super::{Connection, HEAD_TIMEOUT, Refused, Shared, Side, Target, open, relay};

/// Reply codes.
const GENERAL_FAILURE: u8 = 1;
const NOT_ALLOWED: u8 = 2;
const HOST_UNREACHABLE: u8 = 4;
const COMMAND_NOT_SUPPORTED: u8 = 7;
const ADDRESS_NOT_SUPPORTED: u8 = 8;

async fn reply<W: AsyncWrite + Unpin>(w: &mut W, code: u8) {
    let _ = w.write_all(&[5, code, 0, 1, 0, 0, 0, 0, 0, 0]).await;
}

/// The handshake up to the request: the target, or the reply code to refuse with.
async fn handshake<C>(c: &mut C, side: &Side) -> Result<Target, Option<(u8, String)>>
where
    C: AsyncRead + AsyncWrite + Unpin + crate::exec::egress::splice::Socket,
{
    let io = |_| None;
    let n = c.read_u8().await.map_err(io)? as usize;
    let mut methods = vec![0u8; n];
    c.read_exact(&mut methods).await.map_err(io)?;
    let want = if side.token.is_some() { 2 } else { 0 };
    if !methods.contains(&want) {
        let _ = c.write_all(&[5, 0xff]).await;
        return Err(None);
    }
    c.write_all(&[5, want]).await.map_err(io)?;
    if let Some(token) = &side.token {
        let _ver = c.read_u8().await.map_err(io)?;
        let ulen = c.read_u8().await.map_err(io)? as usize;
        let mut user = vec![0u8; ulen];
        c.read_exact(&mut user).await.map_err(io)?;
        let plen = c.read_u8().await.map_err(io)? as usize;
        let mut pass = vec![0u8; plen];
        c.read_exact(&mut pass).await.map_err(io)?;
        use subtle::ConstantTimeEq;
        let ok = pass.len() == token.len() && bool::from(pass.as_slice().ct_eq(token.as_bytes()));
        let _ = c.write_all(&[1, if ok { 0 } else { 1 }]).await;
        if !ok {
            return Err(None);
        }
    }
    let mut head = [0u8; 4];
    c.read_exact(&mut head).await.map_err(io)?;
    if head[0] != 5 {
        return Err(Some((GENERAL_FAILURE, "not a SOCKS5 request".into())));
    }
    let host = match head[3] {
        1 => {
            let mut a = [0u8; 4];
            c.read_exact(&mut a).await.map_err(io)?;
            Host::Ip(Ipv4Addr::from(a).into())
        }
        4 => {
            let mut a = [0u8; 16];
            c.read_exact(&mut a).await.map_err(io)?;
            Host::Ip(super::super::addr::canonical(Ipv6Addr::from(a).into()))
        }
        3 => {
            let n = c.read_u8().await.map_err(io)? as usize;
            let mut name = vec![0u8; n];
            c.read_exact(&mut name).await.map_err(io)?;
            let name = String::from_utf8_lossy(&name);
            Host::parse(&name).map_err(|e| Some((ADDRESS_NOT_SUPPORTED, e)))?
        }
        t => return Err(Some((ADDRESS_NOT_SUPPORTED, format!("address type {t}")))),
    };
    let port = c.read_u16().await.map_err(io)?;
    if head[1] != 1 {
        return Err(Some((
            COMMAND_NOT_SUPPORTED,
            "only CONNECT: no BIND, no UDP".into(),
        )));
    }
    Ok(Target { host, port })
}

pub(in crate::exec::egress) async fn serve<C>(
    client: &mut C,
    side: &Arc<Side>,
    shared: &Arc<Shared>,
) -> Option<Connection>
where
    C: AsyncRead + AsyncWrite + Unpin + crate::exec::egress::splice::Socket,
{
    let target = match tokio::time::timeout(HEAD_TIMEOUT, handshake(client, side)).await {
        Ok(Ok(t)) => t,
        Ok(Err(Some((code, _why)))) => {
            reply(client, code).await;
            return None;
        }
        _ => return None,
    };
    match open(&target, side, shared).await {
        Ok((mut upstream, mut rec)) => {
            reply(client, 0).await;
            // The same look at the first bytes as a CONNECT tunnel gets: a
            // SOCKS tunnel was relayed unread, so a TLS server name, a Host
            // header, an absolute URI or a relayed CONNECT for another host
            // went through it to the allowed address.
            if let Err(why) =
                super::http::inspect_tunnel(client, &mut upstream, &target, shared).await
            {
                rec.allowed = false;
                rec.rule = why;
                return Some(rec);
            }
            relay(&*client, upstream, &mut rec, shared).await;
            Some(rec)
        }
        Err(refused) => {
            let Refused {
                rec, unreachable, ..
            } = *refused;
            let code = if unreachable {
                HOST_UNREACHABLE
            } else {
                NOT_ALLOWED
            };
            reply(client, code).await;
            Some(rec)
        }
    }
}
