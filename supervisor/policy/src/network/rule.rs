//! One `[network] allow` or `deny` entry: `HOST`, `*.DOMAIN` (subdomains
//! only, never the apex) or an address, with an optional `:PORT` (absent:
//! 443 and 80). docs/INTERFACES.md, "[network]".

use std::net::IpAddr;

use super::host::{DnsName, NetHost};

/// The ports an entry without `:PORT` opens: HTTPS and HTTP.
pub const DEFAULT_PORTS: [u16; 2] = [443, 80];

/// What an entry's host part matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// Exactly this name.
    Exact(DnsName),
    /// Every strict subdomain of this name (`*.x`: `a.x`, `a.b.x`, not `x`).
    Subdomains(DnsName),
    /// This address, written as a literal.
    Ip(IpAddr),
}

impl HostPattern {
    pub fn matches(&self, host: &NetHost) -> bool {
        match (self, host) {
            (HostPattern::Exact(n), NetHost::Name(h)) => n == h,
            (HostPattern::Subdomains(d), NetHost::Name(h)) => h.is_subdomain_of(d),
            (HostPattern::Ip(a), NetHost::Ip(b)) => a.to_canonical() == b.to_canonical(),
            _ => false,
        }
    }
}

/// One entry, parsed, with its text as written (the `rule` of a decision).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetRule {
    pub pattern: HostPattern,
    pub ports: Vec<u16>,
    pub text: String,
}

impl NetRule {
    /// Parses one entry; the error says why, without the key (the caller
    /// names it).
    pub fn parse(spec: &str) -> Result<NetRule, String> {
        let (host, port) = split_port(spec)?;
        let pattern = match host.strip_prefix("*.") {
            Some(domain) => {
                let d = DnsName::parse(domain)?;
                if d.labels() < 2 {
                    return Err(format!(
                        "`*.{d}` would match a whole top-level domain; name a domain you trust"
                    ));
                }
                HostPattern::Subdomains(d)
            }
            None if host.contains('*') => {
                return Err(
                    "a wildcard is only `*.` at the start (`*.example.org`: its subdomains)"
                        .to_string(),
                );
            }
            None => match NetHost::parse(host)? {
                NetHost::Name(n) => HostPattern::Exact(n),
                NetHost::Ip(ip) => HostPattern::Ip(ip.to_canonical()),
            },
        };
        let ports = port.map_or_else(|| DEFAULT_PORTS.to_vec(), |p| vec![p]);
        Ok(NetRule {
            pattern,
            ports,
            text: spec.to_string(),
        })
    }

    pub fn matches(&self, host: &NetHost, port: u16) -> bool {
        self.ports.contains(&port) && self.pattern.matches(host)
    }
}

/// `host:port` → (`host`, Some(port)); a bare IPv6 address has no port;
/// `[v6]:port` keeps the brackets.
pub fn split_port(spec: &str) -> Result<(&str, Option<u16>), String> {
    if spec.parse::<std::net::Ipv6Addr>().is_ok() {
        return Ok((spec, None));
    }
    let colon = if spec.starts_with('[') {
        match spec.find(']') {
            Some(end) => spec[end..].find(':').map(|c| end + c),
            None => return Err("an IPv6 address in [ has no closing ]".to_string()),
        }
    } else {
        spec.rfind(':')
    };
    let Some(colon) = colon else {
        return Ok((spec, None));
    };
    let (host, port) = (&spec[..colon], &spec[colon + 1..]);
    match port.parse::<u16>() {
        Ok(p) if p >= 1 && port.bytes().all(|b| b.is_ascii_digit()) => Ok((host, Some(p))),
        _ => Err(format!(
            "port `{}` is not a number from 1 to 65535",
            port.escape_debug()
        )),
    }
}
