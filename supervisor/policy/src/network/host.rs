//! One host as a connection names it: a DNS name, normalised, or an address.
//! Numeric spellings (`0x7f.1`, `2130706433`, `127.1`) are addresses, read as
//! browsers and the C library read them, never names (docs/THREAT_MODEL.md,
//! "Network").

use std::net::IpAddr;

use url::Host;

/// Longest DNS name in its presentation form (RFC 1035).
pub const MAX_NAME_BYTES: usize = 253;
/// Longest label.
const MAX_LABEL_BYTES: usize = 63;

/// A DNS name: ASCII after IDNA (UTS 46) normalisation, lower case, no
/// trailing dot, every label 1 to 63 letters, digits or inner hyphens.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DnsName(String);

impl DnsName {
    /// Normalises `raw`; the error says why it is not a name.
    pub fn parse(raw: &str) -> Result<DnsName, String> {
        match NetHost::parse(raw)? {
            NetHost::Name(n) => Ok(n),
            NetHost::Ip(ip) => Err(format!(
                "`{}` is the address {ip}, not a name",
                raw.escape_debug()
            )),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `self` is a strict subdomain of `domain` (`a.b.x` of `x`,
    /// never `x` itself, never `evilx`).
    pub fn is_subdomain_of(&self, domain: &DnsName) -> bool {
        let (s, d) = (self.0.as_str(), domain.0.as_str());
        s.len() > d.len() + 1 && s.ends_with(d) && s.as_bytes()[s.len() - d.len() - 1] == b'.'
    }

    /// How many labels the name has.
    pub fn labels(&self) -> usize {
        self.0.split('.').count()
    }
}

impl std::fmt::Display for DnsName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The host a connection asked for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NetHost {
    Name(DnsName),
    Ip(IpAddr),
}

impl NetHost {
    /// A host as written in a CONNECT line, a SOCKS request, a Host header
    /// or a rule: `[v6]` or a bare v6 address, any IPv4 spelling, or a name.
    pub fn parse(raw: &str) -> Result<NetHost, String> {
        let shown = raw.escape_debug().to_string();
        if raw.is_empty() {
            return Err("the host is empty".to_string());
        }
        if raw.len() > MAX_NAME_BYTES + 1 {
            return Err(format!(
                "the host is {} bytes long; a DNS name has at most {MAX_NAME_BYTES}",
                raw.len()
            ));
        }
        if let Ok(v6) = raw.parse::<std::net::Ipv6Addr>() {
            return Ok(NetHost::Ip(IpAddr::V6(v6)));
        }
        if raw
            .bytes()
            .any(|b| b.is_ascii_control() || b" /@?#\\%:[]".contains(&b))
            && !raw.starts_with('[')
        {
            return Err(format!(
                "`{shown}` is not a host: it holds a space, a control character or URL punctuation"
            ));
        }
        // The WHATWG host parser: IDNA, then IPv4 in every numeric spelling.
        match Host::parse(raw) {
            Ok(Host::Ipv4(v4)) => Ok(NetHost::Ip(IpAddr::V4(v4))),
            Ok(Host::Ipv6(v6)) => Ok(NetHost::Ip(IpAddr::V6(v6))),
            Ok(Host::Domain(_)) => normalise_name(raw).map(NetHost::Name),
            Err(e) => Err(format!("`{shown}` is not a valid host ({e})")),
        }
    }

    /// As written in a URL or CONNECT line: `[v6]` bracketed.
    pub fn url_host(&self) -> String {
        match self {
            NetHost::Name(n) => n.0.clone(),
            NetHost::Ip(IpAddr::V4(v4)) => v4.to_string(),
            NetHost::Ip(IpAddr::V6(v6)) => format!("[{v6}]"),
        }
    }
}

impl std::fmt::Display for NetHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.url_host())
    }
}

/// IDNA (UTS 46, strict: no underscores or other non-LDH code points), lower
/// case, one trailing dot dropped, then the label and length limits.
fn normalise_name(raw: &str) -> Result<DnsName, String> {
    let shown = raw.escape_debug().to_string();
    let bare = raw.strip_suffix('.').unwrap_or(raw);
    let ascii = idna::domain_to_ascii_strict(bare)
        .map_err(|_| format!("`{shown}` is not a valid DNS name (IDNA)"))?
        .to_ascii_lowercase();
    if ascii.is_empty() || ascii.len() > MAX_NAME_BYTES {
        return Err(format!(
            "`{shown}` is {} bytes as a DNS name; the limit is {MAX_NAME_BYTES}",
            ascii.len()
        ));
    }
    for label in ascii.split('.') {
        let ldh = label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if label.is_empty()
            || label.len() > MAX_LABEL_BYTES
            || !ldh
            || label.starts_with('-')
            || label.ends_with('-')
        {
            return Err(format!(
                "`{shown}` is not a valid DNS name: label `{}` must be 1 to {MAX_LABEL_BYTES} letters, digits or inner hyphens",
                label.escape_debug()
            ));
        }
    }
    Ok(DnsName(ascii))
}
