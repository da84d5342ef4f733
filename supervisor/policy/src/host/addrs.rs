//! The host's own addresses, read now: every address of every interface of
//! this network namespace, both families and every scope, with
//! getifaddrs(3) (a netlink dump: secondary addresses, tentative IPv6
//! addresses and the addresses of links that are down included; Docker's
//! bridge gateways are interface addresses like any other). The supervisor
//! keeps them fresh (its `host_addrs.rs`); `supervisorctl policy test` and
//! the bench read them once.

use std::net::IpAddr;
use std::sync::Arc;

use crate::{HostAddrs, HostAddrsError};

/// The set as last read, or why it could not be read.
pub type Snapshot = Arc<Result<HostAddrs, HostAddrsError>>;

/// Every address of every interface, now.
pub fn read_host_addrs() -> Result<HostAddrs, HostAddrsError> {
    let list =
        nix::ifaddrs::getifaddrs().map_err(|e| HostAddrsError(format!("getifaddrs: {e}")))?;
    let mut addrs = Vec::new();
    for ifa in list {
        let Some(a) = ifa.address else { continue };
        let ip = if let Some(v4) = a.as_sockaddr_in() {
            IpAddr::V4(v4.ip())
        } else if let Some(v6) = a.as_sockaddr_in6() {
            IpAddr::V6(v6.ip())
        } else {
            continue; // AF_PACKET: a link, not an address
        };
        addrs.push((ip, ifa.interface_name));
    }
    Ok(HostAddrs::new(addrs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hosts_loopback_addresses_are_read() {
        let set = read_host_addrs().unwrap();
        assert_eq!(set.interface_of("127.0.0.1".parse().unwrap()), Some("lo"));
    }
}
