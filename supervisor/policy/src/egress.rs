//! `agent mcp-gateway --allow-net HOST[:PORT]…` (docs/CLIENTS.md, "MCP
//! servers that need the network"): the grammar of
//! one entry, and the limits on the list. Only syntax here; whether a host
//! may be reached is the SSRF guard's ([`crate::Engine::vet_url`]), asked by
//! the daemon at start and again at every connection.

use std::net::IpAddr;

use url::{Host, Url};

/// Most `--allow-net` entries one wrapped server may have.
pub const MAX_EGRESS_HOSTS: usize = 16;

/// The ports an entry without `:PORT` opens: HTTPS and HTTP.
pub const DEFAULT_EGRESS_PORTS: [u16; 2] = [443, 80];

/// The host of an entry, normalised (lower case, IDNA, no trailing dot).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EgressHost {
    Name(String),
    Ip(IpAddr),
}

impl EgressHost {
    /// As written in a URL: `[v6]` bracketed.
    pub fn url_host(&self) -> String {
        match self {
            EgressHost::Name(n) => n.clone(),
            EgressHost::Ip(IpAddr::V4(v4)) => v4.to_string(),
            EgressHost::Ip(IpAddr::V6(v6)) => format!("[{v6}]"),
        }
    }
}

impl std::fmt::Display for EgressHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.url_host())
    }
}

/// One `--allow-net` entry: a host and the ports it may be reached on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressEntry {
    pub host: EgressHost,
    pub ports: Vec<u16>,
}

/// Parses every entry; refuses an empty entry, a bad host or port, and more
/// than [`MAX_EGRESS_HOSTS`] entries. The error is a sentence naming the
/// entry, with a hint.
pub fn parse_allow_net(specs: &[String]) -> Result<Vec<EgressEntry>, String> {
    if specs.len() > MAX_EGRESS_HOSTS {
        return Err(format!(
            "--allow-net names {} hosts; at most {MAX_EGRESS_HOSTS} are allowed (wrap a server that needs fewer hosts)",
            specs.len()
        ));
    }
    let mut out: Vec<EgressEntry> = Vec::new();
    for spec in specs {
        let entry = parse_entry(spec)?;
        match out.iter_mut().find(|e| e.host == entry.host) {
            Some(e) => {
                for p in entry.ports {
                    if !e.ports.contains(&p) {
                        e.ports.push(p);
                    }
                }
            }
            None => out.push(entry),
        }
    }
    Ok(out)
}

/// One `HOST`, `HOST:PORT`, `IPV4[:PORT]`, `IPV6` or `[IPV6][:PORT]`.
pub fn parse_entry(spec: &str) -> Result<EgressEntry, String> {
    let shown = spec.escape_debug().to_string();
    let bad = |why: &str| {
        format!(
            "--allow-net {shown:?} is refused: {why}; hint: give HOST or HOST:PORT, e.g. api.github.com or 93.184.216.34:80"
        )
    };
    if spec.is_empty() || spec.len() > 253 + 8 {
        return Err(bad("the entry is empty or too long"));
    }
    if spec
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || "/@?#\\%".contains(c))
    {
        return Err(bad(
            "it must be a bare host, without a scheme, path, user or spaces",
        ));
    }
    // A bare IPv6 address has colons of its own: no port then.
    if let Ok(v6) = spec.parse::<std::net::Ipv6Addr>() {
        return Ok(EgressEntry {
            host: EgressHost::Ip(IpAddr::V6(v6)),
            ports: DEFAULT_EGRESS_PORTS.to_vec(),
        });
    }
    let (host_part, port) = split_port(spec).map_err(|w| bad(&w))?;
    let url = Url::parse(&format!("http://{host_part}/"))
        .map_err(|e| bad(&format!("`{host_part}` is not a valid host ({e})")))?;
    let host = match url.host() {
        Some(Host::Ipv4(v4)) => EgressHost::Ip(IpAddr::V4(v4)),
        Some(Host::Ipv6(v6)) => EgressHost::Ip(IpAddr::V6(v6)),
        Some(Host::Domain(d)) => {
            let name = d.trim_end_matches('.').to_ascii_lowercase();
            if name.is_empty()
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
            {
                return Err(bad(&format!("`{host_part}` is not a host name")));
            }
            EgressHost::Name(name)
        }
        None => return Err(bad("it has no host")),
    };
    let ports = match port {
        Some(p) => vec![p],
        None => DEFAULT_EGRESS_PORTS.to_vec(),
    };
    Ok(EgressEntry { host, ports })
}

/// `host:port` → (`host`, Some(port)); `[v6]:port` keeps the brackets.
fn split_port(spec: &str) -> Result<(&str, Option<u16>), String> {
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
        _ => Err(format!("port `{port}` is not a number from 1 to 65535")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(s: &str) -> Result<EgressEntry, String> {
        parse_entry(s)
    }

    #[test]
    fn hosts_ports_and_literals() {
        let e = one("API.Example.com.").unwrap();
        assert_eq!(e.host, EgressHost::Name("api.example.com".to_string()));
        assert_eq!(e.ports, vec![443, 80]);
        let e = one("93.184.216.34:80").unwrap();
        assert_eq!(e.host, EgressHost::Ip("93.184.216.34".parse().unwrap()));
        assert_eq!(e.ports, vec![80]);
        let e = one("[2606:2800:220:1::1]:8443").unwrap();
        assert_eq!(e.host.url_host(), "[2606:2800:220:1::1]");
        assert_eq!(e.ports, vec![8443]);
        let e = one("2606:2800:220:1::1").unwrap();
        assert_eq!(e.ports, vec![443, 80]);
        // The URL parser's forms of an IPv4 address are that address.
        assert_eq!(
            one("0x5db8d822").unwrap().host,
            EgressHost::Ip("93.184.216.34".parse().unwrap())
        );
    }

    #[test]
    fn bad_entries_are_refused_naming_them() {
        for bad in [
            "",
            "host:0",
            "host:65536",
            "host:-1",
            "host:+80",
            "host:",
            "http://host",
            "user@host",
            "host/path",
            "a b",
            "host\n",
            "[::1",
            "exa_mple.com",
        ] {
            let e = one(bad).unwrap_err();
            assert!(
                e.contains("--allow-net") && e.contains("hint"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn the_list_is_bounded_and_merged() {
        let many: Vec<String> = (0..17).map(|i| format!("h{i}.example")).collect();
        assert!(parse_allow_net(&many).unwrap_err().contains("at most 16"));
        let l =
            parse_allow_net(&["a.example:80".to_string(), "a.example:8080".to_string()]).unwrap();
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].ports, vec![80, 8080]);
    }
}
