//! tollgate-egress: the proxies a sandbox's only way out goes through
//! (docs/ARCHITECTURE.md "Network", docs/THREAT_MODEL.md "Network").
//!
//! Each connection is decided by name through a [`ConnectionGate`] (the
//! daemon's policy, audit and, later, approvals), resolved on the host only
//! once allowed, every resolved address vetted (the SSRF guard) and one
//! vetted address connected to. A TLS ClientHello must name the decided
//! host (SNI); a plain-HTTP request's Host must be it. Refusals answer in
//! the protocol: HTTP 403 with `X-Tollgate-Refused`, a SOCKS5 reply code.

#![forbid(unsafe_code)]

mod connect;
pub mod dns;
mod gate;
mod head;
pub mod http;
mod plain;
pub mod secrets;
pub mod sni;
pub mod socks;
pub mod synth;
pub mod transparent;
mod upstream;

pub use dns::serve_dns;
pub use gate::{
    ConnId, ConnRequest, ConnStats, ConnectionGate, GateVerdict, Refusal, SecretUse, Via,
};
pub use http::serve_http;
pub use secrets::{SecretCounters, SessionSecret, SessionSecrets};
pub use socks::serve_socks;
pub use synth::SyntheticMap;
pub use transparent::serve_transparent;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use tollgate_policy::network::{NetHost, UpstreamProxy};

/// Bounds of one proxy (one sandbox's session).
#[derive(Debug, Clone)]
pub struct Limits {
    /// Connections open at once; more are refused at once.
    pub max_connections: usize,
    /// Longest wait for a request head (slowloris) or a ClientHello.
    pub head_timeout: Duration,
    /// Largest request head.
    pub max_head_bytes: usize,
    /// Longest wait for the upstream TCP connect.
    pub connect_timeout: Duration,
    /// A relayed connection that moves no byte either way for this long is
    /// closed (a server that never answers, a client that went quiet).
    pub idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 256,
            head_timeout: Duration::from_secs(10),
            max_head_bytes: 16 * 1024,
            connect_timeout: Duration::from_secs(15),
            idle_timeout: Duration::from_secs(300),
        }
    }
}

/// What a session's proxies carry beside their gate and bounds.
#[derive(Default)]
pub struct Options {
    pub secrets: Option<Arc<SessionSecrets>>,
    pub upstream: Option<UpstreamProxy>,
}

/// One session's proxies: its gate, its bounds, its open connections.
pub struct Proxy<G> {
    pub session: String,
    pub gate: G,
    pub limits: Limits,
    /// The names the session's DNS stub gave addresses for.
    pub names: Arc<SyntheticMap>,
    /// The session's secrets: connections to their hosts are terminated
    /// (docs/THREAT_MODEL.md "Secrets"); `None`: every tunnel is end to end.
    pub secrets: Option<Arc<SessionSecrets>>,
    /// `[network] upstream_proxy`: allowed connections go out through it by
    /// `CONNECT`; `None`: straight to the vetted address.
    pub upstream: Option<UpstreamProxy>,
    open: AtomicUsize,
    /// Cancelled when the session's wall ends (revoke, kill, the sandbox
    /// gone): every open connection is closed and its close recorded.
    stop: CancellationToken,
}

impl<G: ConnectionGate> Proxy<G> {
    pub fn new(session: String, gate: G, limits: Limits) -> Arc<Proxy<G>> {
        Self::with_secrets(session, gate, limits, None)
    }

    /// A session's proxies that put `secrets` in toward their hosts.
    pub fn with_secrets(
        session: String,
        gate: G,
        limits: Limits,
        secrets: Option<Arc<SessionSecrets>>,
    ) -> Arc<Proxy<G>> {
        let options = Options {
            secrets,
            upstream: None,
        };
        Self::with_options(session, gate, limits, options)
    }

    /// A session's proxies with their secrets and their upstream proxy.
    pub fn with_options(session: String, gate: G, limits: Limits, o: Options) -> Arc<Proxy<G>> {
        Arc::new(Proxy {
            session,
            gate,
            limits,
            names: Arc::default(),
            secrets: o.secrets,
            upstream: o.upstream,
            open: AtomicUsize::new(0),
            stop: CancellationToken::new(),
        })
    }

    /// Closes every open connection (each records its close) and refuses
    /// new ones from now on.
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// Resolves once [`Proxy::stop`] was called.
    pub async fn stopped(&self) {
        self.stop.cancelled().await
    }

    pub fn is_stopped(&self) -> bool {
        self.stop.is_cancelled()
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// The host a connection is decided for: a synthetic address the DNS
    /// stub gave is the name it stands for; an unknown one is refused.
    pub fn host_for(&self, host: NetHost) -> Result<NetHost, String> {
        match host {
            NetHost::Ip(ip) if SyntheticMap::in_range(ip) => {
                self.names.name_of(ip).map(NetHost::Name).ok_or_else(|| {
                    format!("{ip} is not an address this sandbox's DNS stub gave for any name")
                })
            }
            h => Ok(h),
        }
    }

    /// A slot for one connection, or `None` when the cap is reached.
    fn slot(self: &Arc<Self>) -> Option<Slot<G>> {
        if self.is_stopped() {
            return None;
        }
        let n = self.open.fetch_add(1, Ordering::AcqRel);
        if n >= self.limits.max_connections {
            self.open.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Slot(Arc::clone(self)))
    }
}

/// Held while a connection is open.
struct Slot<G>(Arc<Proxy<G>>);

impl<G> Drop for Slot<G> {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}
