//! The path every proxied connection takes once its host is known: decide,
//! resolve (allowed names only), vet every address, connect to one, check
//! the first client bytes against the decided name, record, relay.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tollgate_policy::network::NetHost;

use crate::Proxy;
use crate::gate::{ConnRequest, ConnStats, ConnectionGate, GateVerdict, Refusal};
use crate::plain::Requests;
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
    if let Some(u) = &proxy.upstream {
        return crate::upstream::open(proxy, req, u, rule).await;
    }
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
    let flow = flow_of(proxy, early);
    relay_flow(proxy, req, client, up, flow).await;
}

/// A tunnel's flow: plain HTTP in it is checked request by request (its
/// `Host` the decided host, on every request), anything else relayed as is.
pub(crate) fn flow_of<G>(proxy: &Proxy<G>, early: Vec<u8>) -> Flow {
    if !crate::plain::may_be_http(&early) {
        return Flow { early, guard: None };
    }
    let requests = Requests::fresh(false, proxy.limits.max_head_bytes);
    Flow {
        early: Vec::new(),
        guard: Some((requests, early)),
    }
}

/// What a relay starts with: bytes checked already, sent first; and, for
/// plain HTTP, the client's requests to check one by one
/// ([`crate::plain`]) with the bytes not fed to them yet.
pub(crate) struct Flow {
    pub early: Vec<u8>,
    pub guard: Option<(Requests, Vec<u8>)>,
}

/// Records the opening, sends what the client already sent, relays both
/// ways until both are done or neither moved a byte for the idle bound,
/// and records the close. The client's side is checked request by request
/// when the flow has a guard. A later request that is refused is not sent: the
/// server's side ends (its answers to the earlier ones delivered), then
/// the client gets the refusal (a `403` on the HTTP proxy, a reset on the
/// transparent path), recorded.
pub(crate) async fn relay_flow<G: ConnectionGate>(
    proxy: &Arc<Proxy<G>>,
    req: &ConnRequest,
    mut client: TcpStream,
    mut up: Upstream,
    flow: Flow,
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
    let mut refused = None;
    if up.stream.write_all(&flow.early).await.is_ok() {
        stats.bytes_up = flow.early.len() as u64;
        let shared = Shared {
            last: Activity::new(),
            idle: proxy.limits.idle_timeout,
            refused: AtomicBool::new(false),
        };
        let (up_n, down_n) = (AtomicU64::new(0), AtomicU64::new(0));
        let mut guard = flow.guard;
        let (cr, cw) = client.split();
        let (ur, uw) = up.stream.split();
        let checked = guard.as_mut().map(|(g, pending)| (g, pending, req));
        let both = async {
            tokio::join!(
                pump(cr, uw, &up_n, &shared, checked),
                pump(ur, cw, &down_n, &shared, None)
            )
        };
        tokio::select! {
            ((a, r), (b, _)) = both => {
                if a || b {
                    stats.idle_closed = Some(shared.idle);
                }
                refused = r;
            },
            // The wall ends (revoke, kill): closed now, counted so far.
            _ = proxy.stopped() => {}
        }
        stats.bytes_up += up_n.load(Ordering::Relaxed);
        stats.bytes_down = down_n.load(Ordering::Relaxed);
    }
    if let Some(r) = refused {
        proxy.gate.refused(req, &r);
        if req.via == crate::Via::Transparent {
            crate::transparent::reset(client);
        } else {
            let _ = client.write_all(&crate::http::forbidden(req, &r)).await;
            let _ = client.shutdown().await;
        }
    }
    stats.duration = started.elapsed();
    proxy.gate.closed(id, stats);
}

/// What the two directions of a relay share.
struct Shared {
    last: Activity,
    idle: std::time::Duration,
    /// The client's side was refused: the server's side leaves the client
    /// open for the refusal.
    refused: AtomicBool,
}

/// When a byte last moved either way.
struct Activity {
    start: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }
    fn touch(&self) {
        let now = self.start.elapsed().as_millis() as u64;
        self.last_ms.store(now, Ordering::Relaxed);
    }
    fn idle_for(&self) -> std::time::Duration {
        let last = self.last_ms.load(Ordering::Relaxed);
        self.start
            .elapsed()
            .saturating_sub(std::time::Duration::from_millis(last))
    }
}

/// The client's requests to check, what was not fed to them yet, and the
/// connection they are checked for.
type Checked<'a> = (&'a mut Requests, &'a mut Vec<u8>, &'a ConnRequest);

/// One direction, counted as it goes, until EOF (then half-closed), an
/// error on either side, both directions idle for the bound, or (checked)
/// a refused request. Returns whether idleness ended it, and the refusal.
async fn pump(
    mut from: tokio::net::tcp::ReadHalf<'_>,
    mut to: tokio::net::tcp::WriteHalf<'_>,
    count: &AtomicU64,
    shared: &Shared,
    mut checked: Option<Checked<'_>>,
) -> (bool, Option<Refusal>) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut refused = None;
    let mut pending = checked
        .as_mut()
        .map(|(_, p, _)| std::mem::take(*p))
        .unwrap_or_default();
    let idled = loop {
        let n = if !pending.is_empty() {
            let n = pending.len();
            buf[..n].copy_from_slice(&pending);
            pending.clear();
            n
        } else {
            match tokio::time::timeout(shared.idle, from.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break false,
                Ok(Ok(n)) => n,
                Err(_) if shared.last.idle_for() >= shared.idle => break true,
                Err(_) => continue,
            }
        };
        let out = match checked.as_mut() {
            None => std::borrow::Cow::Borrowed(&buf[..n]),
            Some((g, _, req)) => match g.feed(&buf[..n], req) {
                Ok(v) => std::borrow::Cow::Owned(v),
                Err(r) => {
                    shared.refused.store(true, Ordering::Relaxed);
                    refused = Some(r);
                    break false;
                }
            },
        };
        if to.write_all(&out).await.is_err() {
            break false;
        }
        count.fetch_add(out.len() as u64, Ordering::Relaxed);
        shared.last.touch();
    };
    if checked.is_some() || !shared.refused.load(Ordering::Relaxed) {
        let _ = to.shutdown().await;
    }
    (idled, refused)
}
