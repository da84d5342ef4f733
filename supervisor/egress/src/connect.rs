//! The path every proxied connection takes once its host is known: decide,
//! resolve (allowed names only), vet every address, connect to one, check
//! the first client bytes against the decided name, record, relay.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tollgate_policy::network::NetHost;

use crate::Proxy;
use crate::gate::{ConnRequest, ConnStats, ConnectionGate, GateVerdict, Refusal};
use crate::sni::{Hello, client_hello};

/// Rule names of refusals the policy's lists did not make.
pub(crate) const RULE_SSRF: &str = "floor:ssrf";
pub(crate) const RULE_RESOLVE: &str = "network:resolve";
pub(crate) const RULE_CONNECT: &str = "network:connect";
pub(crate) const RULE_SNI: &str = "network:sni";
pub(crate) const RULE_HOST: &str = "network:host-header";
pub(crate) const RULE_RECORD: &str = "network:audit";
pub(crate) const RULE_CAP: &str = "network:connection-cap";

/// An upstream connection, allowed and connected, nothing sent yet.
pub(crate) struct Upstream {
    pub stream: TcpStream,
    pub addr: SocketAddr,
    pub rule: String,
}

fn refusal(rule: &str, reason: String) -> Refusal {
    Refusal {
        rule: rule.to_string(),
        reason,
    }
}

/// Decides, resolves, vets and connects. A refusal is recorded here.
pub(crate) async fn open<G: ConnectionGate>(
    proxy: &Arc<Proxy<G>>,
    req: &ConnRequest,
) -> Result<Upstream, Refusal> {
    let r = open_inner(proxy, req).await;
    if let Err(ref why) = r {
        proxy.gate.refused(req, why);
    }
    r
}

async fn open_inner<G: ConnectionGate>(
    proxy: &Arc<Proxy<G>>,
    req: &ConnRequest,
) -> Result<Upstream, Refusal> {
    let rule = match proxy.gate.decide(req).await {
        GateVerdict::Allow { rule } => rule,
        GateVerdict::Deny(r) => return Err(r),
    };
    let ips = match &req.host {
        NetHost::Ip(ip) => vec![*ip],
        NetHost::Name(n) => proxy
            .gate
            .resolve(n.as_str(), req.port)
            .await
            .map_err(|e| {
                refusal(
                    RULE_RESOLVE,
                    format!("{} does not resolve ({e})", req.target()),
                )
            })?,
    };
    if ips.is_empty() {
        return Err(refusal(
            RULE_RESOLVE,
            format!("{} has no address", req.target()),
        ));
    }
    for ip in &ips {
        proxy
            .gate
            .vet(req, *ip)
            .map_err(|why| refusal(RULE_SSRF, why))?;
    }
    let addr = SocketAddr::new(ips[0].to_canonical(), req.port);
    let stream = tokio::time::timeout(proxy.limits.connect_timeout, TcpStream::connect(addr))
        .await
        .map_err(|_| {
            refusal(
                RULE_CONNECT,
                format!(
                    "{} ({addr}) did not accept within {} s",
                    req.target(),
                    proxy.limits.connect_timeout.as_secs()
                ),
            )
        })?
        .map_err(|e| refusal(RULE_CONNECT, format!("{} ({addr}): {e}", req.target())))?;
    let _ = stream.set_nodelay(true);
    Ok(Upstream { stream, addr, rule })
}

/// Waits for whichever side speaks first. A client that speaks first is
/// checked: a ClientHello must carry the decided name as SNI. A server
/// that speaks first (ssh, smtp) is not TLS. Returns the client's first
/// bytes, already read.
pub(crate) async fn first_bytes<G: ConnectionGate>(
    proxy: &Arc<Proxy<G>>,
    req: &ConnRequest,
    client: &mut TcpStream,
    up: &Upstream,
) -> Result<Vec<u8>, Refusal> {
    let mut buf = Vec::new();
    let wait = proxy.limits.head_timeout;
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let mut chunk = [0u8; 4096];
        tokio::select! {
            r = client.read(&mut chunk) => match r {
                Ok(0) | Err(_) => return Ok(buf),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            },
            _ = up.stream.readable(), if buf.is_empty() => return Ok(buf),
            _ = tokio::time::sleep_until(deadline) => {
                return Err(refusal(RULE_SNI, format!("the TLS ClientHello for {} did not arrive within {} s", req.target(), wait.as_secs())));
            }
        }
        match check_hello(req, &buf) {
            Some(Ok(())) => return Ok(buf),
            Some(Err(r)) => return Err(r),
            None if buf.len() > 64 * 1024 => {
                return Err(refusal(
                    RULE_SNI,
                    "the TLS ClientHello is over 64 KiB".into(),
                ));
            }
            None => {}
        }
    }
}

/// `None`: not all of a ClientHello yet.
fn check_hello(req: &ConnRequest, buf: &[u8]) -> Option<Result<(), Refusal>> {
    let sni = match client_hello(buf) {
        Hello::Incomplete => return None,
        Hello::NotTls => return Some(Ok(())),
        Hello::Sni(n) => n,
        Hello::NoSni => {
            return Some(match req.host {
                NetHost::Ip(_) => Ok(()),
                NetHost::Name(_) => Err(refusal(
                    RULE_SNI,
                    format!(
                        "the TLS ClientHello for {} names no server (SNI); a connection decided by name must name it",
                        req.target()
                    ),
                )),
            });
        }
        Hello::Malformed => {
            return Some(Err(refusal(
                RULE_SNI,
                format!("the TLS ClientHello for {} is malformed", req.target()),
            )));
        }
    };
    let same = NetHost::parse(&sni).is_ok_and(|h| h == req.host);
    Some(if same {
        Ok(())
    } else {
        Err(refusal(
            RULE_SNI,
            format!(
                "the TLS ClientHello names {:?}, but the connection was decided for {}; one allowed name cannot carry another",
                sni.escape_debug().to_string(),
                req.target()
            ),
        ))
    })
}

/// Carries an opened connection: terminated when some secret of the
/// session is bound to its host and the client speaks TLS
/// (docs/THREAT_MODEL.md "Secrets"), relayed end to end otherwise.
pub(crate) async fn deliver<G: ConnectionGate>(
    proxy: &Arc<Proxy<G>>,
    req: &ConnRequest,
    client: TcpStream,
    up: Upstream,
    early: Vec<u8>,
) {
    if let Some(s) = proxy
        .secrets
        .as_ref()
        .filter(|s| s.binds(&req.host, req.port))
        && matches!(client_hello(&early), Hello::Sni(_) | Hello::NoSni)
    {
        let s = Arc::clone(s);
        return crate::secrets::terminate::run(proxy, req, client, up, early, &s).await;
    }
    relay(proxy, req, client, up, &early).await;
}

/// Records the opening, sends what the client already sent, relays both
/// ways and records the close.
pub(crate) async fn relay<G: ConnectionGate>(
    proxy: &Arc<Proxy<G>>,
    req: &ConnRequest,
    mut client: TcpStream,
    mut up: Upstream,
    early: &[u8],
) {
    let id = match proxy.gate.opened(req, up.addr, &up.rule) {
        Ok(id) => id,
        Err(why) => {
            proxy.gate.refused(req, &refusal(RULE_RECORD, why));
            return;
        }
    };
    let started = Instant::now();
    let mut stats = ConnStats::default();
    if up.stream.write_all(early).await.is_ok() {
        stats.bytes_up = early.len() as u64;
        let (up_n, down_n) = (AtomicU64::new(0), AtomicU64::new(0));
        let (cr, cw) = client.split();
        let (ur, uw) = up.stream.split();
        tokio::select! {
            _ = async { tokio::join!(pipe(cr, uw, &up_n), pipe(ur, cw, &down_n)) } => {}
            // The wall ends (revoke, kill): closed now, counted so far.
            _ = proxy.stopped() => {}
        }
        stats.bytes_up += up_n.load(Ordering::Relaxed);
        stats.bytes_down = down_n.load(Ordering::Relaxed);
    }
    stats.duration = started.elapsed();
    proxy.gate.closed(id, stats);
}

/// One direction, counted as it goes, until EOF (then half-closed) or an
/// error on either side.
async fn pipe(
    mut from: tokio::net::tcp::ReadHalf<'_>,
    mut to: tokio::net::tcp::WriteHalf<'_>,
    count: &AtomicU64,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
        count.fetch_add(n as u64, Ordering::Relaxed);
    }
    let _ = to.shutdown().await;
}
