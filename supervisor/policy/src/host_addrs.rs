//! The addresses of the supervisor's own host, as a fact the SSRF guard
//! looks up (docs/THREAT_MODEL.md, "The walls, by layer").
//!
//! The address classes the guard refuses (loopback, private, link-local, …)
//! do not cover the host's own public addresses: a service bound to 0.0.0.0
//! is refused at 127.0.0.1 and answers at the host's public IP. So every
//! address assigned to any interface of the host (both families, every
//! scope; Docker's bridge gateways are interface addresses too) comes in
//! here, read by the daemon at start and again whenever the kernel announces
//! an address change. The engine never reads it itself: it arrives through
//! [`crate::Resolver::host_addrs`].

use std::net::IpAddr;

/// Every address of the host, each with the interface that holds it.
/// Addresses are kept canonical (an IPv4-mapped IPv6 address is stored as
/// its IPv4 address), sorted, one entry per address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostAddrs {
    sorted: Vec<(IpAddr, String)>,
}

/// The empty set, for resolvers of tests and tools that have no host.
static NONE: HostAddrs = HostAddrs { sorted: Vec::new() };

/// Why the host's addresses are not known (every fetch is then refused).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the supervisor's own host addresses could not be read ({0})")]
pub struct HostAddrsError(pub String);

impl HostAddrs {
    /// The set of `(address, interface)` pairs given. When an address is on
    /// several interfaces, the first interface name (in sorted order) is kept.
    pub fn new(addrs: impl IntoIterator<Item = (IpAddr, String)>) -> HostAddrs {
        let mut sorted: Vec<(IpAddr, String)> = addrs
            .into_iter()
            .map(|(ip, name)| (ip.to_canonical(), name))
            .collect();
        sorted.sort();
        sorted.dedup_by(|b, a| a.0 == b.0);
        HostAddrs { sorted }
    }

    /// An empty set with a `'static` lifetime: a resolver for a test or an
    /// offline tool that models no host returns this.
    pub fn none() -> &'static HostAddrs {
        &NONE
    }

    /// The interface holding `ip`, if `ip` is an address of the host.
    /// IPv4-mapped IPv6 forms match their IPv4 address.
    pub fn interface_of(&self, ip: IpAddr) -> Option<&str> {
        let ip = ip.to_canonical();
        self.sorted
            .binary_search_by(|(a, _)| a.cmp(&ip))
            .ok()
            .map(|i| self.sorted[i].1.as_str())
    }

    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }

    /// The addresses and their interfaces, sorted by address.
    pub fn iter(&self) -> impl Iterator<Item = (IpAddr, &str)> {
        self.sorted.iter().map(|(ip, name)| (*ip, name.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn lookups_are_canonical_and_name_the_interface() {
        let h = HostAddrs::new([
            (ip("8.8.8.8"), "dummy0".to_string()),
            (ip("2001:4860:4860::8888"), "dummy0".to_string()),
            (ip("::ffff:192.0.2.10"), "eth0".to_string()),
            (ip("8.8.8.8"), "br0".to_string()),
        ]);
        assert_eq!(h.len(), 3);
        assert_eq!(h.interface_of(ip("8.8.8.8")), Some("br0"));
        assert_eq!(h.interface_of(ip("::ffff:8.8.8.8")), Some("br0"));
        assert_eq!(h.interface_of(ip("192.0.2.10")), Some("eth0"));
        assert_eq!(h.interface_of(ip("2001:4860:4860::8888")), Some("dummy0"));
        assert_eq!(h.interface_of(ip("8.8.4.4")), None);
        assert_eq!(h.interface_of(ip("2001:4860:4860::8844")), None);
        assert!(HostAddrs::none().is_empty());
        assert_eq!(
            h.iter().map(|(a, _)| a.to_string()).collect::<Vec<_>>(),
            ["8.8.8.8", "192.0.2.10", "2001:4860:4860::8888"]
        );
    }
}
