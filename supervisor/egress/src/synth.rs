//! The per-session map from names to synthetic addresses: the DNS stub
//! answers each well-formed name with one, and the proxies (and the
//! transparent path) turn an address back into the name it stands for. No
//! name is resolved on the host for an answer (docs/THREAT_MODEL.md,
//! "Network": DNS carries nothing out).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Mutex;

use tollgate_policy::network::DnsName;

/// The synthetic range: 198.18.0.0/15 (RFC 2544, benchmarking), never
/// routed, so no real host is ever shadowed by an answer.
pub const SYNTH_BASE: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 0);
/// Addresses in the range, less the network address.
const SYNTH_SIZE: u32 = (1 << 17) - 1;

/// Names one session may have addresses for at once.
pub const MAX_SYNTH_NAMES: usize = 65_536;

#[derive(Default)]
struct Maps {
    by_name: HashMap<DnsName, Ipv4Addr>,
    by_addr: HashMap<Ipv4Addr, DnsName>,
}

/// One session's map. Stable: a name keeps its address for the session.
#[derive(Default)]
pub struct SyntheticMap {
    maps: Mutex<Maps>,
}

impl SyntheticMap {
    /// The address for `name`, given on first sight; `None` when the
    /// session already holds [`MAX_SYNTH_NAMES`] names.
    pub fn address_for(&self, name: &DnsName) -> Option<Ipv4Addr> {
        let mut m = self.maps.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(a) = m.by_name.get(name) {
            return Some(*a);
        }
        if m.by_name.len() >= MAX_SYNTH_NAMES {
            return None;
        }
        let n = m.by_name.len() as u32 % SYNTH_SIZE + 1;
        let a = Ipv4Addr::from(u32::from(SYNTH_BASE) + n);
        m.by_name.insert(name.clone(), a);
        m.by_addr.insert(a, name.clone());
        Some(a)
    }

    /// The name `ip` was given for, if it is one of the map's addresses.
    pub fn name_of(&self, ip: IpAddr) -> Option<DnsName> {
        let IpAddr::V4(v4) = ip.to_canonical() else {
            return None;
        };
        let m = self.maps.lock().unwrap_or_else(|e| e.into_inner());
        m.by_addr.get(&v4).cloned()
    }

    /// Whether `ip` is in the synthetic range (mapped or not).
    pub fn in_range(ip: IpAddr) -> bool {
        match ip.to_canonical() {
            IpAddr::V4(v4) => u32::from(v4) >> 17 == u32::from(SYNTH_BASE) >> 17,
            IpAddr::V6(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_get_stable_distinct_addresses_in_the_range_and_back() {
        let m = SyntheticMap::default();
        let a = DnsName::parse("a.example").unwrap();
        let b = DnsName::parse("B.example.").unwrap();
        let (x, y) = (m.address_for(&a).unwrap(), m.address_for(&b).unwrap());
        assert_ne!(x, y);
        assert_eq!(m.address_for(&a), Some(x));
        assert!(SyntheticMap::in_range(x.into()) && SyntheticMap::in_range(y.into()));
        assert!(!SyntheticMap::in_range(IpAddr::from([198, 20, 0, 1])));
        assert_eq!(m.name_of(y.into()), Some(b));
        assert_eq!(m.name_of(IpAddr::from([198, 18, 9, 9])), None);
        assert_eq!(m.name_of(IpAddr::from(x.to_ipv6_mapped())), Some(a));
    }
}
