//! What the proxies ask of the daemon: a decision by name, the SSRF guard
//! for each resolved address, and the records.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tollgate_policy::network::NetHost;

/// Which of the proxies a connection came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    HttpConnect,
    HttpPlain,
    Socks5,
    /// A connection the sandbox's capture rules redirected (a tool that
    /// ignores the proxy variables); its host is its original destination.
    Transparent,
}

impl Via {
    pub fn as_str(self) -> &'static str {
        match self {
            Via::HttpConnect => "http-connect",
            Via::HttpPlain => "http",
            Via::Socks5 => "socks5",
            Via::Transparent => "transparent",
        }
    }
}

/// One connection a sandboxed process asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnRequest {
    pub session: String,
    pub host: NetHost,
    pub port: u16,
    pub via: Via,
    /// The sandbox side of the connection (its process is found from it).
    pub peer: SocketAddr,
}

impl ConnRequest {
    /// `host:port`, `[v6]` bracketed.
    pub fn target(&self) -> String {
        format!("{}:{}", self.host.url_host(), self.port)
    }
}

/// The gate's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateVerdict {
    Allow { rule: String },
    Deny(Refusal),
}

/// Why a connection is refused, and the rule that refused it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub rule: String,
    pub reason: String,
}

/// The gate's handle on an opened connection's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnId(pub u64);

/// How a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConnStats {
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub duration: Duration,
}

/// What happened to a secret on one request (docs/THREAT_MODEL.md
/// "Secrets"); the record names the secret, never its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SecretUse<'a> {
    pub secret: &'a str,
    /// `None`: its value was put in; `Some(why)`: its placeholder was
    /// stripped from a request to a host it may not go to.
    pub stripped: Option<&'a str>,
}

impl<'a> SecretUse<'a> {
    pub fn put(secret: &'a str) -> SecretUse<'a> {
        SecretUse {
            secret,
            stripped: None,
        }
    }
    pub fn stripped(secret: &'a str, why: &'a str) -> SecretUse<'a> {
        SecretUse {
            secret,
            stripped: Some(why),
        }
    }
}

/// The daemon's side: decide, vet, record. `opened` is called after the
/// upstream connect and before any byte flows either way; `closed` once,
/// when both directions are done; `refused` for every refusal, after the
/// decision or later (SSRF, SNI, Host, the cap, a bad request).
pub trait ConnectionGate: Send + Sync + 'static {
    fn decide(&self, req: &ConnRequest) -> impl Future<Output = GateVerdict> + Send;
    /// The SSRF guard for one address `req.host` resolved to.
    fn vet(&self, req: &ConnRequest, ip: IpAddr) -> Result<(), String>;
    /// The host's resolver, asked only once a name is allowed.
    fn resolve(
        &self,
        name: &str,
        port: u16,
    ) -> impl Future<Output = std::io::Result<Vec<IpAddr>>> + Send {
        let q = format!("{name}:{port}");
        async move {
            Ok(tokio::net::lookup_host(q)
                .await?
                .map(|sa| sa.ip())
                .collect())
        }
    }
    /// The opening record; an error (the record could not be written)
    /// refuses the connection before any byte flows.
    fn opened(&self, req: &ConnRequest, addr: SocketAddr, rule: &str) -> Result<ConnId, String>;
    fn refused(&self, req: &ConnRequest, refusal: &Refusal);
    /// A request that names no host it could be decided for (a malformed
    /// CONNECT line, a SOCKS4 greeting, a head too long or too slow).
    fn bad_request(&self, session: &str, peer: SocketAddr, why: &str);
    fn closed(&self, id: ConnId, stats: ConnStats);
    /// A secret put into a request, or its placeholder stripped from one;
    /// `conn` is the connection's opening record, when it has one (a plain
    /// request's strip comes before it). Only a session with secrets calls
    /// it; no default, so a wrapping gate cannot drop it unawares.
    fn secret(&self, req: &ConnRequest, conn: Option<ConnId>, event: SecretUse<'_>);
}
