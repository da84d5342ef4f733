//! The `[network]` section: which hosts a sandboxed command may reach, by
//! name, deny first (docs/INTERFACES.md "[network]", docs/THREAT_MODEL.md
//! "Network"). Pure: the proxies in `tollgate-egress` ask [`NetworkPolicy`]
//! and the SSRF guard, and do the I/O.

mod host;
mod overlay;
mod rule;
#[cfg(test)]
mod tests;
mod upstream;

use std::net::IpAddr;

use ipnet::IpNet;
use serde::Deserialize;

pub use host::{DnsName, MAX_NAME_BYTES, NetHost};
pub use overlay::{MAX_OVERLAY_RULES, NetOverlay, OverlayVerb, ask_allowed_in, operator_rule};
pub use rule::{DEFAULT_PORTS, HostPattern, NetRule, split_port};
pub use upstream::UpstreamProxy;

use crate::host_addrs::HostAddrs;

/// Most entries in `allow` plus `deny`.
pub const MAX_NET_RULES: usize = 1024;

/// The rule named by a decision for a host no entry lists.
pub const UNLISTED_RULE: &str = "network:unlisted";

/// `[network] unlisted`: what a host no entry lists gets.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Unlisted {
    #[default]
    Deny,
    Ask,
}

/// `[network]` as written in supervisor.toml.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NetworkConfig {
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default)]
    pub deny: Vec<String>,
    #[serde(default)]
    pub unlisted: Unlisted,
    /// CIDRs an allowed name may resolve to despite the SSRF guard.
    #[serde(default)]
    pub allow_private: Vec<String>,
    /// PEM files of extra CAs (a corporate one) the egress proxy trusts,
    /// beside the host's trust store, when it connects on to a host a
    /// secret is bound to (docs/INTERFACES.md "[[secrets]]").
    #[serde(default)]
    pub trust_ca: Vec<String>,
    /// `http://HOST:PORT`: allowed connections go out through this HTTP
    /// proxy by `CONNECT` (a corporate proxy as the only way out).
    #[serde(default)]
    pub upstream_proxy: Option<String>,
}

/// The section, parsed and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkPolicy {
    allow: Vec<NetRule>,
    deny: Vec<NetRule>,
    unlisted: Unlisted,
    allow_private: Vec<IpNet>,
    upstream_proxy: Option<UpstreamProxy>,
}

/// What a connection gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetVerdict {
    Allow,
    Deny,
    Ask,
}

/// A decision, the rule that made it (an entry as written, or
/// [`UNLISTED_RULE`]) and why, in one sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetDecision {
    pub verdict: NetVerdict,
    pub rule: String,
    pub reason: String,
}

impl NetworkPolicy {
    /// Parses every entry; the error names the key and the entry.
    pub fn from_config(c: &NetworkConfig) -> Result<NetworkPolicy, String> {
        if c.allow.len() + c.deny.len() > MAX_NET_RULES {
            return Err(format!(
                "[network] allow and deny hold {} entries; at most {MAX_NET_RULES}",
                c.allow.len() + c.deny.len()
            ));
        }
        Ok(NetworkPolicy {
            allow: parse_list("allow", &c.allow)?,
            deny: parse_list("deny", &c.deny)?,
            unlisted: c.unlisted,
            allow_private: parse_private(&c.allow_private)?,
            upstream_proxy: c
                .upstream_proxy
                .as_deref()
                .map(UpstreamProxy::parse)
                .transpose()?,
        })
    }

    pub fn unlisted(&self) -> Unlisted {
        self.unlisted
    }

    /// The `allow` entries as written.
    pub fn allow_entries(&self) -> impl Iterator<Item = &str> {
        self.allow.iter().map(|r| r.text.as_str())
    }

    /// The `deny` entries as written.
    pub fn deny_entries(&self) -> impl Iterator<Item = &str> {
        self.deny.iter().map(|r| r.text.as_str())
    }

    /// The `allow_private` ranges, normalised.
    pub fn allow_private(&self) -> &[IpNet] {
        &self.allow_private
    }

    /// `upstream_proxy`, parsed: where allowed connections go on to.
    pub fn upstream_proxy(&self) -> Option<&UpstreamProxy> {
        self.upstream_proxy.as_ref()
    }

    /// Deny first, then allow, then `unlisted`.
    pub fn decide(&self, host: &NetHost, port: u16) -> NetDecision {
        let target = format!("{}:{port}", host.url_host());
        if let Some(r) = self.deny.iter().find(|r| r.matches(host, port)) {
            return NetDecision {
                verdict: NetVerdict::Deny,
                rule: r.text.clone(),
                reason: format!("{target} is in [network] deny ({:?})", r.text),
            };
        }
        if let Some(r) = self.allow.iter().find(|r| r.matches(host, port)) {
            return NetDecision {
                verdict: NetVerdict::Allow,
                rule: r.text.clone(),
                reason: format!("{target} is in [network] allow ({:?})", r.text),
            };
        }
        let (verdict, reason) = match self.unlisted {
            Unlisted::Deny => (
                NetVerdict::Deny,
                format!("{target} is not in [network] allow"),
            ),
            Unlisted::Ask => (
                NetVerdict::Ask,
                format!("{target} is not in [network] allow, and unlisted = \"ask\""),
            ),
        };
        NetDecision {
            verdict,
            rule: UNLISTED_RULE.to_string(),
            reason,
        }
    }

    /// The SSRF guard at connect time for one address an allowed name
    /// resolved to: refused when loopback, private, link-local, metadata or
    /// the host's own, unless `allow_private` holds it.
    pub fn vet_address(&self, ip: IpAddr, own: &HostAddrs, name: &str) -> Result<(), String> {
        let ip = ip.to_canonical();
        if self.allow_private.iter().any(|n| n.contains(&ip)) {
            return Ok(());
        }
        match crate::ssrf::refused_address(ip, own, || format!("`{name}` resolves to {ip}, which"))
        {
            Some(reason) => Err(reason),
            None => Ok(()),
        }
    }
}

fn parse_list(key: &str, specs: &[String]) -> Result<Vec<NetRule>, String> {
    specs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            NetRule::parse(s).map_err(|why| {
                format!(
                    "[network] {key}[{i}] {:?} is refused: {why}; hint: HOST, *.DOMAIN or an address, with an optional :PORT",
                    s.escape_debug().to_string()
                )
            })
        })
        .collect()
}

fn parse_private(specs: &[String]) -> Result<Vec<IpNet>, String> {
    specs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let bad = |why: String| {
                format!(
                    "[network] allow_private[{i}] {:?} is refused: {why}",
                    s.escape_debug().to_string()
                )
            };
            let net: IpNet = s
                .parse()
                .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| bad("not a CIDR such as 10.20.0.0/16".to_string()))?;
            let loopback: [IpAddr; 2] = [[127, 0, 0, 1].into(), std::net::Ipv6Addr::LOCALHOST.into()];
            if net.prefix_len() == 0 || loopback.iter().any(|l| net.contains(l)) {
                return Err(bad(
                    "loopback, the unspecified address and whole address families are never reachable from a sandbox".to_string(),
                ));
            }
            Ok(net.trunc())
        })
        .collect()
}
