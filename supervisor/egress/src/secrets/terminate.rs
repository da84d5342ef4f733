//! A connection to a host some secret of the session is bound to
//! (docs/THREAT_MODEL.md "Secrets"): TLS from the sandbox ends here, with
//! a leaf of the session's CA for the decided name; the request head is
//! rewritten ([`super::rewrite`]); TLS to the host is opened again and the
//! host's certificate verified; the answer comes back through the masker.
//! One request per connection (`Connection: close`), except an upgrade
//! (WebSocket), relayed both ways once the host agrees.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use rustls::AlertDescription;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tollgate_policy::network::NetHost;

use super::rewrite::{self, Dest, Wire};
use super::{Masker, SessionSecrets};
use crate::connect::Upstream;
use crate::gate::{ConnId, ConnRequest, ConnStats, ConnectionGate, Refusal, SecretUse};
use crate::head::read_head;
use crate::{Proxy, http};

pub(crate) const RULE_SECRET_TLS: &str = "network:secret-tls";
pub(crate) const RULE_SECRET_REQUEST: &str = "network:secret-request";
pub(crate) const RULE_UPSTREAM_TLS: &str = "network:upstream-tls";

/// How long a held partial value waits for the next bytes before it is
/// sent (a quiet WebSocket must not stall on it).
const QUIET: Duration = Duration::from_millis(100);

/// A stream that first gives back bytes already read from it.
struct Rewind<S> {
    early: Vec<u8>,
    at: usize,
    inner: S,
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.at < self.early.len() {
            let n = (self.early.len() - self.at).min(buf.remaining());
            let at = self.at;
            buf.put_slice(&self.early[at..at + n]);
            self.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

fn refusal(rule: &str, reason: String) -> Refusal {
    Refusal {
        rule: rule.to_string(),
        reason,
    }
}

/// Terminates, rewrites, connects on, relays. Every refusal is recorded.
pub(crate) async fn run<G: ConnectionGate>(
    proxy: &Arc<Proxy<G>>,
    req: &ConnRequest,
    client: TcpStream,
    up: Upstream,
    early: Vec<u8>,
    secrets: &Arc<SessionSecrets>,
) {
    // The proxy writes this socket itself (its handshake flight, the
    // answer), in pieces: with Nagle's algorithm each piece after the first
    // waited for the client's delayed ACK, about 40 ms per connection
    // (docs/PERFORMANCE.md, History).
    let _ = client.set_nodelay(true);
    let mut tls = match accept(secrets, req, client, early).await {
        Ok(t) => t,
        Err(r) => return proxy.gate.refused(req, &r),
    };
    let l = &proxy.limits;
    let (head, rest) = match read_head(&mut tls, l.max_head_bytes, l.head_timeout).await {
        Ok(h) => h,
        Err(why) => return proxy.gate.refused(req, &no_request(req, why)),
    };
    let dest = Dest {
        host: &req.host,
        port: req.port,
        wire: Wire::Tls,
    };
    let text = String::from_utf8_lossy(&head);
    let out = match rewrite::request(secrets, &text, &dest) {
        Ok(o) => o,
        Err(why) => {
            let r = refusal(RULE_SECRET_REQUEST, why);
            proxy.gate.refused(req, &r);
            let _ = tls.write_all(&http::forbidden(req, &r)).await;
            let _ = tls.shutdown().await;
            return;
        }
    };
    let id = match proxy.gate.opened(req, up.addr, &up.rule) {
        Ok(id) => id,
        Err(why) => {
            return proxy
                .gate
                .refused(req, &refusal(crate::connect::RULE_RECORD, why));
        }
    };
    record_uses(proxy, req, id, &out);
    let started = Instant::now();
    let stats = match connect_on(secrets, req, up.stream).await {
        Ok(upstream) => carry(secrets, tls, upstream, &out.head, &rest).await,
        Err(r) => {
            proxy.gate.refused(req, &r);
            let _ = tls.write_all(&bad_gateway(req, &r)).await;
            let _ = tls.shutdown().await;
            ConnStats::default()
        }
    };
    proxy.gate.closed(
        id,
        ConnStats {
            duration: started.elapsed(),
            ..stats
        },
    );
}

type ClientTls = tokio_rustls::server::TlsStream<Rewind<TcpStream>>;
type HostTls = tokio_rustls::client::TlsStream<TcpStream>;

/// The sandbox's side: a leaf for the decided name. A client that refuses
/// it (it pins certificates, or does not trust the session's bundle) or
/// offers no HTTP/1.1 is refused with that reason: nothing is sent on,
/// with or without the secret.
async fn accept(
    secrets: &SessionSecrets,
    req: &ConnRequest,
    client: TcpStream,
    early: Vec<u8>,
) -> Result<ClientTls, Refusal> {
    let config = secrets
        .ca
        .server_config(&req.host.to_string())
        .map_err(|e| refusal(RULE_SECRET_TLS, e))?;
    let stream = Rewind {
        early,
        at: 0,
        inner: client,
    };
    TlsAcceptor::from(config)
        .accept(stream)
        .await
        .map_err(|e| refusal(RULE_SECRET_TLS, accept_reason(req, &e)))
}

/// No request came in the terminated connection. A client that pins the
/// host's key completes the handshake with the session's leaf, then leaves.
fn no_request(req: &ConnRequest, why: String) -> Refusal {
    if why.contains("closed before") {
        let t = req.target();
        return refusal(
            RULE_SECRET_TLS,
            format!(
                "the client closed the connection to {t} after the TLS handshake without a request: a client pinning certificates does this; a secret is bound to {t}, so its connections go only through the proxy's TLS"
            ),
        );
    }
    refusal(RULE_SECRET_REQUEST, why)
}

fn accept_reason(req: &ConnRequest, e: &io::Error) -> String {
    let t = req.target();
    let tls = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>());
    match tls {
        Some(rustls::Error::AlertReceived(
            AlertDescription::BadCertificate
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateUnknown
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::AccessDenied,
        )) => format!(
            "the client refused the session's certificate for {t}: it pins certificates or does not trust the session CA bundle (SSL_CERT_FILE); a secret is bound to {t}, so its connections go only through the proxy's TLS, never on without the secret"
        ),
        Some(rustls::Error::NoApplicationProtocol) => format!(
            "the client offered no HTTP/1.1 (ALPN) for {t}; connections to a host a secret is bound to are carried as HTTP/1.1 only"
        ),
        _ => format!("the TLS handshake with the client for {t} failed: {e}"),
    }
}

/// The host's side, verified against the host's trust store and
/// `[network] trust_ca` for the decided name.
async fn connect_on(
    secrets: &SessionSecrets,
    req: &ConnRequest,
    tcp: TcpStream,
) -> Result<HostTls, Refusal> {
    let name = match &req.host {
        NetHost::Name(n) => ServerName::try_from(n.as_str().to_string())
            .map_err(|e| refusal(RULE_UPSTREAM_TLS, format!("{}: {e}", req.target())))?,
        NetHost::Ip(ip) => ServerName::IpAddress((*ip).into()),
    };
    TlsConnector::from(Arc::clone(&secrets.upstream))
        .connect(name, tcp)
        .await
        .map_err(|e| {
            refusal(
                RULE_UPSTREAM_TLS,
                format!(
                    "the TLS connection to {} failed: {e} (its certificate is checked against the host's trust store and [network] trust_ca)",
                    req.target()
                ),
            )
        })
}

fn record_uses<G: ConnectionGate>(
    proxy: &Proxy<G>,
    req: &ConnRequest,
    id: ConnId,
    out: &rewrite::Rewritten,
) {
    for name in &out.used {
        proxy.gate.secret(req, Some(id), SecretUse::put(name));
    }
    for (name, why) in &out.stripped {
        proxy
            .gate
            .secret(req, Some(id), SecretUse::stripped(name, why));
    }
}

/// Sends the head and what followed it, then relays both ways, the
/// answer through the masker. Counts plaintext bytes.
async fn carry(
    secrets: &SessionSecrets,
    client: ClientTls,
    mut host: HostTls,
    head: &[u8],
    rest: &[u8],
) -> ConnStats {
    let mut stats = ConnStats::default();
    if host.write_all(head).await.is_err() || host.write_all(rest).await.is_err() {
        return stats;
    }
    stats.bytes_up = (head.len() + rest.len()) as u64;
    let (mut cr, mut cw) = tokio::io::split(client);
    let (mut hr, mut hw) = tokio::io::split(host);
    let up = async {
        let n = tokio::io::copy(&mut cr, &mut hw).await.unwrap_or(0);
        let _ = hw.shutdown().await;
        n
    };
    let down = async {
        let n = masked_copy(&mut hr, &mut cw, Masker::new(secrets.values())).await;
        let _ = cw.shutdown().await;
        n
    };
    let (a, b) = tokio::join!(up, down);
    stats.bytes_up += a;
    stats.bytes_down = b;
    stats
}

async fn masked_copy<R, W>(r: &mut R, w: &mut W, mut m: Masker) -> u64
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 16 * 1024];
    let mut total = 0u64;
    loop {
        let read = if m.held() > 0 {
            match tokio::time::timeout(QUIET, r.read(&mut buf)).await {
                Ok(x) => x,
                Err(_) => {
                    let out = m.flush();
                    if w.write_all(&out).await.is_err() || w.flush().await.is_err() {
                        return total;
                    }
                    total += out.len() as u64;
                    continue;
                }
            }
        } else {
            r.read(&mut buf).await
        };
        let out = match read {
            Ok(0) | Err(_) => m.flush(),
            Ok(n) => m.push(&buf[..n]),
        };
        let done = matches!(read, Ok(0) | Err(_));
        if w.write_all(&out).await.is_err() || w.flush().await.is_err() {
            return total;
        }
        total += out.len() as u64;
        if done {
            return total;
        }
    }
}

fn bad_gateway(req: &ConnRequest, r: &Refusal) -> Vec<u8> {
    let mut v = http::forbidden(req, r);
    if let Some(rest) = v.strip_prefix(b"HTTP/1.1 403 Forbidden".as_slice()) {
        let mut out = b"HTTP/1.1 502 Bad Gateway".to_vec();
        out.extend_from_slice(rest);
        v = out;
    }
    v
}
