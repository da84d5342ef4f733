//! The transparent path: a TCP connection the sandbox's capture rules
//! redirected here (a tool that ignores the proxy variables: `curl
//! --noproxy '*'`, a raw socket, a Go or Java client). Its host is its
//! original destination: a synthetic address the DNS stub gave stands for
//! its name ([`crate::Proxy::host_for`]), any other address is decided as
//! itself. Then the same path as the proxies: decide, resolve, vet, connect,
//! check the first bytes (a ClientHello's SNI; a plain-HTTP request's Host),
//! record, relay. A refusal resets the connection.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tollgate_policy::network::NetHost;

use crate::Proxy;
use crate::connect::{self, RULE_CAP, RULE_HOST};
use crate::gate::{ConnRequest, ConnectionGate, Refusal, Via};
use crate::plain::looks_like_http;

/// Accepts on `listener` until it fails; one task per connection.
pub async fn serve_transparent<G: ConnectionGate>(proxy: Arc<Proxy<G>>, listener: TcpListener) {
    while let Ok((s, peer)) = listener.accept().await {
        let proxy = Arc::clone(&proxy);
        tokio::spawn(async move { handle(proxy, s, peer).await });
    }
}

async fn handle<G: ConnectionGate>(proxy: Arc<Proxy<G>>, mut s: TcpStream, peer: SocketAddr) {
    let Some(_slot) = proxy.slot() else {
        let why = format!(
            "the session has {} connections open, the most one session may hold ({RULE_CAP})",
            proxy.limits.max_connections
        );
        proxy.gate.bad_request(&proxy.session, peer, &why);
        return reset(s);
    };
    let req = match request(&proxy, &s, peer) {
        Ok(r) => r,
        Err(why) => {
            proxy.gate.bad_request(&proxy.session, peer, &why);
            return reset(s);
        }
    };
    let Ok(up) = connect::open(&proxy, &req).await else {
        return reset(s); // recorded by open
    };
    let checked = match connect::first_bytes(&proxy, &req, &mut s, &up).await {
        Ok(early) => plain_http_host(&proxy, &req, &mut s, early).await,
        Err(r) => Err(r),
    };
    match checked {
        // Plain HTTP: every request on the connection checked.
        Ok(early) => {
            let flow = connect::flow_of(&proxy, early);
            connect::relay_flow(&proxy, &req, s, up, flow).await
        }
        Err(r) => {
            proxy.gate.refused(&req, &r);
            reset(s);
        }
    }
}

/// The connection's request: its original destination, turned back into a
/// name when it is a synthetic address.
fn request<G: ConnectionGate>(
    proxy: &Proxy<G>,
    s: &TcpStream,
    peer: SocketAddr,
) -> Result<ConnRequest, String> {
    let dst = original_destination(s)?;
    if dst.ip().is_loopback() || dst.ip().is_unspecified() {
        return Err(format!(
            "a connection to the transparent listener itself ({dst}), not one the capture rules redirected"
        ));
    }
    let host = proxy.host_for(NetHost::Ip(dst.ip().to_canonical()))?;
    Ok(ConnRequest {
        session: proxy.session.clone(),
        host,
        port: dst.port(),
        via: Via::Transparent,
        peer,
    })
}

/// Where the connection was going before the rules redirected it
/// (`SO_ORIGINAL_DST`, from the connection tracking entry).
fn original_destination(s: &TcpStream) -> Result<SocketAddr, String> {
    use nix::sys::socket::{getsockopt, sockopt};
    let local = s
        .local_addr()
        .map_err(|e| format!("the connection's own address: {e}"))?;
    let r = if local.is_ipv4() {
        getsockopt(s, sockopt::OriginalDst).map(|a| {
            let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            SocketAddr::new(ip.into(), u16::from_be(a.sin_port))
        })
    } else {
        getsockopt(s, sockopt::Ip6tOriginalDst).map(|a| {
            let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
            SocketAddr::new(ip.into(), u16::from_be(a.sin6_port))
        })
    };
    r.map_err(|e| format!("the connection's original destination is unknown ({e})"))
}

/// A plain-HTTP request on the transparent path must name the decided host
/// (its `Host`), as on the proxy: one allowed name cannot carry another.
/// Reads the rest of the head (bounded) when the first bytes did not hold it.
async fn plain_http_host<G: ConnectionGate>(
    proxy: &Arc<Proxy<G>>,
    req: &ConnRequest,
    s: &mut TcpStream,
    mut early: Vec<u8>,
) -> Result<Vec<u8>, Refusal> {
    if !looks_like_http(&early) {
        return Ok(early);
    }
    let l = &proxy.limits;
    let deadline = tokio::time::Instant::now() + l.head_timeout;
    while !early.windows(4).any(|w| w == b"\r\n\r\n") {
        if early.len() > l.max_head_bytes {
            return Err(host_refusal(req, "its request head is too long to check"));
        }
        let mut chunk = [0u8; 4096];
        let n = match tokio::time::timeout_at(deadline, s.read(&mut chunk)).await {
            Ok(Ok(n)) if n > 0 => n,
            Ok(_) => return Ok(early), // closed: nothing more to send on
            Err(_) => return Err(host_refusal(req, "its request head did not arrive in time")),
        };
        early.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&early).into_owned();
    crate::http::check_host_header(&head, req)?;
    Ok(early)
}

fn host_refusal(req: &ConnRequest, why: &str) -> Refusal {
    Refusal {
        rule: RULE_HOST.to_string(),
        reason: format!("the plain HTTP request to {}: {why}", req.target()),
    }
}

/// Closes with a reset: the transparent path's refusal.
/// (`SO_LINGER` of zero: the close sends RST at once and never blocks.)
pub(crate) fn reset(s: TcpStream) {
    let zero = nix::libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    let _ = nix::sys::socket::setsockopt(&s, nix::sys::socket::sockopt::Linger, &zero);
    drop(s);
}
