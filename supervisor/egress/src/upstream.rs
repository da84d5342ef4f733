//! `[network] upstream_proxy` (docs/INTERFACES.md "[network]"): an allowed
//! connection goes out through a corporate HTTP proxy by `CONNECT
//! host:port`, for TLS and plain HTTP alike. The decision, the records and
//! the checks of the client's first bytes (SNI, `Host`) are the same as
//! going straight out; the tunnel stands where the vetted address would.
//!
//! The SSRF guard, as far as a proxy allows: an address target is vetted
//! as ever; a name the host's resolver answers is refused when any of its
//! addresses is inward (unless `allow_private` holds it); a name the host
//! cannot resolve is the proxy's to resolve. The proxy's own address is the
//! operator's choice (usually private) and is not vetted.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tollgate_policy::network::{NetHost, UpstreamProxy};

use crate::Proxy;
use crate::connect::{RULE_SSRF, Upstream};
use crate::gate::{ConnRequest, ConnectionGate, Refusal};

/// A refusal the upstream proxy made, or a failure to reach it.
pub(crate) const RULE_UPSTREAM: &str = "network:upstream-proxy";

fn refusal(rule: &str, reason: String) -> Refusal {
    Refusal {
        rule: rule.to_string(),
        reason,
    }
}

/// Vets the target, connects to the proxy and asks it for a tunnel.
pub(crate) async fn open<G: ConnectionGate>(
    proxy: &Arc<Proxy<G>>,
    req: &ConnRequest,
    up: &UpstreamProxy,
    rule: String,
) -> Result<Upstream, Refusal> {
    vet_target(proxy, req).await?;
    let wait = proxy.limits.connect_timeout;
    let addr = proxy_address(proxy, up).await?;
    let shown = up.authority();
    let mut stream = tokio::time::timeout(wait, TcpStream::connect(addr))
        .await
        .map_err(|_| {
            let why = format!(
                "the upstream proxy {shown} ({addr}) did not accept within {} s",
                wait.as_secs()
            );
            refusal(RULE_UPSTREAM, why)
        })?
        .map_err(|e| {
            let why = format!("the upstream proxy {shown} ({addr}): {e}");
            refusal(RULE_UPSTREAM, why)
        })?;
    let _ = stream.set_nodelay(true);
    let target = req.target();
    let ask = async {
        let line = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
        stream
            .write_all(line.as_bytes())
            .await
            .map_err(|e| format!("sending CONNECT failed: {e}"))?;
        reply_status(&mut stream, proxy.limits.max_head_bytes).await
    };
    let status = match tokio::time::timeout(wait, ask).await {
        Ok(Ok(status)) => status,
        Ok(Err(why)) => {
            let why = format!("the upstream proxy {shown}, asked for {target}: {why}");
            return Err(refusal(RULE_UPSTREAM, why));
        }
        Err(_) => {
            let why = format!(
                "the upstream proxy {shown} did not answer CONNECT {target} within {} s",
                wait.as_secs()
            );
            return Err(refusal(RULE_UPSTREAM, why));
        }
    };
    if !(200..300).contains(&status.0) {
        let why = format!(
            "the upstream proxy {shown} refused CONNECT {target}: {:?}",
            status.1
        );
        return Err(refusal(RULE_UPSTREAM, why));
    }
    Ok(Upstream { stream, addr, rule })
}

/// An address is vetted; a name the host resolves must resolve outward
/// only; one it cannot resolve goes on to the proxy.
async fn vet_target<G: ConnectionGate>(
    proxy: &Arc<Proxy<G>>,
    req: &ConnRequest,
) -> Result<(), Refusal> {
    let ips = match &req.host {
        NetHost::Ip(ip) => vec![*ip],
        NetHost::Name(n) => {
            let wait = proxy.limits.connect_timeout;
            match tokio::time::timeout(wait, proxy.gate.resolve(n.as_str(), req.port)).await {
                Ok(Ok(ips)) => ips,
                Ok(Err(_)) | Err(_) => Vec::new(),
            }
        }
    };
    for ip in ips {
        proxy
            .gate
            .vet(req, ip)
            .map_err(|why| refusal(RULE_SSRF, why))?;
    }
    Ok(())
}

async fn proxy_address<G: ConnectionGate>(
    proxy: &Arc<Proxy<G>>,
    up: &UpstreamProxy,
) -> Result<SocketAddr, Refusal> {
    let ip = match &up.host {
        NetHost::Ip(ip) => *ip,
        NetHost::Name(n) => {
            let ips = proxy.gate.resolve(n.as_str(), up.port).await.map_err(|e| {
                let why = format!("the upstream proxy's name {n} does not resolve ({e})");
                refusal(RULE_UPSTREAM, why)
            })?;
            *ips.first().ok_or_else(|| {
                let why = format!("the upstream proxy's name {n} has no address");
                refusal(RULE_UPSTREAM, why)
            })?
        }
    };
    Ok(SocketAddr::new(ip.to_canonical(), up.port))
}

/// Reads the proxy's reply head one byte at a time, so that nothing after
/// it (a server that speaks first) is taken from the tunnel. Returns the
/// status code and the status line.
async fn reply_status(s: &mut TcpStream, max: usize) -> Result<(u16, String), String> {
    let mut head = Vec::with_capacity(128);
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > max {
            return Err(format!("its reply head is over {max} bytes"));
        }
        match s.read(&mut b).await {
            Ok(0) => return Err("it closed the connection without a reply".into()),
            Ok(_) => head.push(b[0]),
            Err(e) => return Err(format!("reading its reply failed: {e}")),
        }
    }
    let text = String::from_utf8_lossy(&head);
    let line: String = text
        .lines()
        .next()
        .unwrap_or("")
        .chars()
        .take(120)
        .collect();
    let mut parts = line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    let code = parts.next().and_then(|c| c.parse::<u16>().ok());
    match code {
        Some(code) if version.starts_with("HTTP/1.") => Ok((code, line)),
        _ => Err(format!("its reply {:?} is not HTTP", line)),
    }
}
