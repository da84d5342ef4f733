//! The SOCKS5 proxy (RFC 1928): no authentication, CONNECT by name or
//! address only (BIND and UDP ASSOCIATE are "command not supported"). A
//! refusal is the matching reply code: 0x02 for a policy or SSRF refusal,
//! 0x04 for a name that does not resolve, 0x05 for a refused connect.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tollgate_policy::network::NetHost;

use crate::Proxy;
use crate::connect::{self, RULE_CONNECT, RULE_RESOLVE};
use crate::gate::{ConnRequest, ConnectionGate, Via};

pub const REPLY_OK: u8 = 0x00;
pub const REPLY_NOT_ALLOWED: u8 = 0x02;
pub const REPLY_HOST_UNREACHABLE: u8 = 0x04;
pub const REPLY_REFUSED: u8 = 0x05;
pub const REPLY_COMMAND: u8 = 0x07;
pub const REPLY_ADDRESS_TYPE: u8 = 0x08;

/// Accepts on `listener` until it fails; one task per connection.
pub async fn serve_socks<G: ConnectionGate>(proxy: Arc<Proxy<G>>, listener: TcpListener) {
    while let Ok((s, peer)) = listener.accept().await {
        let proxy = Arc::clone(&proxy);
        tokio::spawn(async move { handle(proxy, s, peer).await });
    }
}

fn reply(code: u8) -> [u8; 10] {
    [5, code, 0, 1, 0, 0, 0, 0, 0, 0]
}

async fn handle<G: ConnectionGate>(proxy: Arc<Proxy<G>>, mut s: TcpStream, peer: SocketAddr) {
    let Some(_slot) = proxy.slot() else {
        proxy.gate.bad_request(
            &proxy.session,
            peer,
            "the session's connection cap is reached",
        );
        let _ = s.write_all(&reply(REPLY_NOT_ALLOWED)).await;
        return;
    };
    let wait = proxy.limits.head_timeout;
    let (host, port) = match tokio::time::timeout(wait, greet(&mut s)).await {
        Ok(Ok(t)) => t,
        Ok(Err((code, why))) => {
            proxy.gate.bad_request(&proxy.session, peer, &why);
            if let Some(code) = code {
                let _ = s.write_all(&reply(code)).await;
            }
            return;
        }
        Err(_) => {
            let why = format!(
                "the SOCKS request did not arrive within {} s",
                wait.as_secs()
            );
            return proxy.gate.bad_request(&proxy.session, peer, &why);
        }
    };
    let host = match proxy.host_for(host) {
        Ok(h) => h,
        Err(why) => {
            proxy.gate.bad_request(&proxy.session, peer, &why);
            let _ = s.write_all(&reply(REPLY_HOST_UNREACHABLE)).await;
            return;
        }
    };
    let req = ConnRequest {
        session: proxy.session.clone(),
        host,
        port,
        via: Via::Socks5,
        peer,
    };
    let mut up = match connect::open(&proxy, &req).await {
        Ok(u) => u,
        Err(r) => {
            let code = match r.rule.as_str() {
                RULE_RESOLVE => REPLY_HOST_UNREACHABLE,
                RULE_CONNECT => REPLY_REFUSED,
                _ => REPLY_NOT_ALLOWED,
            };
            let _ = s.write_all(&reply(code)).await;
            return;
        }
    };
    if s.write_all(&reply(REPLY_OK)).await.is_err() {
        return;
    }
    match connect::first_bytes(&proxy, &req, &mut s, &up).await {
        Ok(early) => connect::deliver(&proxy, &req, s, up, early).await,
        Err(r) => {
            proxy.gate.refused(&req, &r);
            let _ = up.stream.shutdown().await;
        }
    }
}

type SocksError = (Option<u8>, String);

/// The greeting and the request. An error carries the reply to send (none
/// for a client that is not speaking SOCKS5).
async fn greet(s: &mut TcpStream) -> Result<(NetHost, u16), SocksError> {
    let io = |e: std::io::Error| (None, format!("the SOCKS client went away: {e}"));
    let mut hdr = [0u8; 2];
    s.read_exact(&mut hdr).await.map_err(io)?;
    if hdr[0] == 4 {
        // SOCKS4 "request rejected": its reply is 8 bytes, code 0x5b.
        let _ = s.write_all(&[0, 0x5b, 0, 0, 0, 0, 0, 0]).await;
        return Err((None, "a SOCKS4 greeting; only SOCKS5 is served".into()));
    }
    if hdr[0] != 5 {
        return Err((
            None,
            format!("not a SOCKS5 greeting (version byte {:#04x})", hdr[0]),
        ));
    }
    let mut methods = vec![0u8; usize::from(hdr[1])];
    s.read_exact(&mut methods).await.map_err(io)?;
    if !methods.contains(&0) {
        let _ = s.write_all(&[5, 0xff]).await;
        return Err((
            None,
            "the SOCKS5 client offers no method without authentication".into(),
        ));
    }
    s.write_all(&[5, 0]).await.map_err(io)?;
    let mut req = [0u8; 4];
    s.read_exact(&mut req).await.map_err(io)?;
    if req[0] != 5 {
        return Err((Some(REPLY_COMMAND), "a malformed SOCKS5 request".into()));
    }
    if req[1] != 1 {
        let what = match req[1] {
            2 => "BIND",
            3 => "UDP ASSOCIATE",
            _ => "an unknown command",
        };
        return Err((
            Some(REPLY_COMMAND),
            format!("SOCKS5 {what} is not served; only CONNECT"),
        ));
    }
    let host = read_addr(s, req[3]).await?;
    let mut port = [0u8; 2];
    s.read_exact(&mut port).await.map_err(io)?;
    let port = u16::from_be_bytes(port);
    if port == 0 {
        return Err((Some(REPLY_NOT_ALLOWED), "SOCKS5 CONNECT to port 0".into()));
    }
    Ok((host, port))
}

async fn read_addr(s: &mut TcpStream, atyp: u8) -> Result<NetHost, SocksError> {
    let io = |e: std::io::Error| (None, format!("the SOCKS client went away: {e}"));
    match atyp {
        1 => {
            let mut a = [0u8; 4];
            s.read_exact(&mut a).await.map_err(io)?;
            Ok(NetHost::Ip(IpAddr::from(a)))
        }
        4 => {
            let mut a = [0u8; 16];
            s.read_exact(&mut a).await.map_err(io)?;
            Ok(NetHost::Ip(IpAddr::from(a)))
        }
        3 => {
            let mut n = [0u8; 1];
            s.read_exact(&mut n).await.map_err(io)?;
            let mut name = vec![0u8; usize::from(n[0])];
            s.read_exact(&mut name).await.map_err(io)?;
            let name = String::from_utf8(name).map_err(|_| {
                (
                    Some(REPLY_NOT_ALLOWED),
                    "a SOCKS5 host name that is not UTF-8".to_string(),
                )
            })?;
            NetHost::parse(&name).map_err(|why| (Some(REPLY_NOT_ALLOWED), why))
        }
        other => Err((
            Some(REPLY_ADDRESS_TYPE),
            format!("SOCKS5 address type {other} is unknown"),
        )),
    }
}
