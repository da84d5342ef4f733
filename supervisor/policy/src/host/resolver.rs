//! DNS behind [`Resolver`]: the system resolver, or `--resolve HOST=IP`
//! pins, and the host's own addresses (a [`Snapshot`], read by
//! [`crate::host::read_host_addrs`]). Any resolver error is an `Err`, so a
//! name that does not resolve is never fetched (fail closed).

use std::collections::HashMap;
use std::net::{IpAddr, ToSocketAddrs};
use std::sync::Arc;

use crate::host::Snapshot;
use crate::{HostAddrs, HostAddrsError, ResolveError, Resolver};

/// The system resolver, with optional pins (`supervisorctl policy test
/// --resolve HOST=IP`), and the host's own addresses (docs/THREAT_MODEL.md,
/// "The walls, by layer"). Pinned
/// names never reach the system resolver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemResolver {
    /// Lower-case host names without a trailing dot.
    pub pins: HashMap<String, Vec<IpAddr>>,
    /// The host's own addresses: the supervisor's `HostAddrWatch`
    /// snapshot (kept fresh by the daemon), or a one-off read.
    pub host: Snapshot,
}

/// Without pins, and without the host's addresses: a fetch judged with it
/// is refused (fail closed) until [`SystemResolver::with_host`] gives them.
impl Default for SystemResolver {
    fn default() -> SystemResolver {
        SystemResolver {
            pins: HashMap::new(),
            host: Arc::new(Err(HostAddrsError(
                "this resolver was built without them".to_string(),
            ))),
        }
    }
}

impl SystemResolver {
    /// This resolver, judging against these host addresses.
    pub fn with_host(mut self, host: Snapshot) -> SystemResolver {
        self.host = host;
        self
    }

    /// A resolver with these pins (names are normalised).
    pub fn with_pins(pins: impl IntoIterator<Item = (String, IpAddr)>) -> SystemResolver {
        let mut r = SystemResolver::default();
        for (host, ip) in pins {
            r.pin(&host, ip);
        }
        r
    }

    /// Adds an address for `host` (several pins for one name accumulate).
    pub fn pin(&mut self, host: &str, ip: IpAddr) {
        let ips = self.pins.entry(normalise(host)).or_default();
        if !ips.contains(&ip) {
            ips.push(ip);
        }
    }

    /// Parses a `HOST=IP` pin as given on the command line.
    pub fn parse_pin(spec: &str) -> Result<(String, IpAddr), String> {
        let (host, ip) = spec
            .split_once('=')
            .ok_or_else(|| format!("pin {spec:?} is not HOST=IP"))?;
        let host = host.trim();
        if host.is_empty() {
            return Err(format!("pin {spec:?} has an empty host"));
        }
        let ip = ip
            .trim()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .map_err(|e| format!("pin {spec:?}: {e}"))?;
        Ok((host.to_string(), ip))
    }
}

fn normalise(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

impl Resolver for SystemResolver {
    fn host_addrs(&self) -> Result<&HostAddrs, HostAddrsError> {
        self.host.as_ref().as_ref().map_err(Clone::clone)
    }

    fn resolve(&self, host: &str) -> Result<Vec<IpAddr>, ResolveError> {
        if let Some(ips) = self.pins.get(&normalise(host)) {
            return Ok(ips.clone());
        }
        if host.is_empty() || host.contains('\0') {
            return Err(ResolveError::NotFound(host.escape_debug().to_string()));
        }
        let addrs = (host, 0u16)
            .to_socket_addrs()
            .map_err(|e| ResolveError::Failed(host.escape_debug().to_string(), e.to_string()))?;
        let mut ips: Vec<IpAddr> = Vec::new();
        for a in addrs {
            if !ips.contains(&a.ip()) {
                ips.push(a.ip());
            }
        }
        if ips.is_empty() {
            return Err(ResolveError::NotFound(host.escape_debug().to_string()));
        }
        Ok(ips)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_come_first_and_are_normalised() {
        let r = SystemResolver::with_pins([
            ("Example.COM.".to_string(), "93.184.216.34".parse().unwrap()),
            (
                "example.com".to_string(),
                "2606:2800:220:1::1".parse().unwrap(),
            ),
        ]);
        assert_eq!(
            r.resolve("example.com").unwrap(),
            vec![
                "93.184.216.34".parse::<IpAddr>().unwrap(),
                "2606:2800:220:1::1".parse::<IpAddr>().unwrap()
            ]
        );
        assert_eq!(r.resolve("EXAMPLE.com.").unwrap().len(), 2);
    }

    #[test]
    fn parse_pin_accepts_host_equals_ip() {
        assert_eq!(
            SystemResolver::parse_pin("docs.rs=18.1.2.3").unwrap(),
            ("docs.rs".to_string(), "18.1.2.3".parse().unwrap())
        );
        assert_eq!(
            SystemResolver::parse_pin("v6.example=[::1]").unwrap().1,
            "::1".parse::<IpAddr>().unwrap()
        );
        assert!(SystemResolver::parse_pin("docs.rs").is_err());
        assert!(SystemResolver::parse_pin("=1.2.3.4").is_err());
        assert!(SystemResolver::parse_pin("x=999.1.1.1").is_err());
    }

    #[test]
    fn the_system_resolver_answers_and_fails_closed() {
        let r = SystemResolver::default();
        // /etc/hosts names localhost on every Debian system.
        let ips = r.resolve("localhost").unwrap();
        assert!(ips.iter().all(|ip| ip.is_loopback()), "{ips:?}");
        assert_eq!(
            r.resolve("127.0.0.1").unwrap(),
            vec!["127.0.0.1".parse::<IpAddr>().unwrap()]
        );
        // RFC 6761: .invalid never resolves.
        assert!(r.resolve("no-such-host.invalid").is_err());
        assert!(r.resolve("a\0b").is_err());
        assert!(r.resolve("").is_err());
    }
}
