//! The SSRF guard (docs/THREAT_MODEL.md, "The walls, by layer", 3).
//!
//! The scheme allowlist runs first, on the raw text, before anything looks at
//! the host (for non-special schemes the `url` crate returns the host as an
//! opaque string). The host is then parsed as browsers do (decimal, octal,
//! hex and short IPv4 forms, IDNA, percent-decoding), every address it stands
//! for is classified, and a name that does not resolve is refused. The vetted
//! addresses go back with the decision so the fetch connects to them and
//! nothing else (no second lookup: DNS rebinding).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use ipnet::{Ipv4Net, Ipv6Net};
use url::{Host, Url};

use crate::decision::VettedFetch;
use crate::display::shorten;
use crate::facts::Resolver;
use crate::host_addrs::{HostAddrs, HostAddrsError};
use crate::registry::MAX_URL_BYTES;

/// Why a URL is refused, and what the fetch would have done.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct UrlRefusal {
    pub reason: String,
    pub consequence: String,
}

pub(crate) const RULE: &str = "floor:ssrf";

fn refuse(reason: String, consequence: String) -> UrlRefusal {
    UrlRefusal {
        reason,
        consequence,
    }
}

/// The URL as shown in reasons and consequences.
fn show(u: &str) -> String {
    shorten(u, 200)
}

/// Vets one URL: scheme, host, every resolved address.
pub(crate) fn vet(raw: &str, dns: &dyn Resolver) -> Result<VettedFetch, UrlRefusal> {
    let what = format!("fetch {}", show(raw));
    if raw.len() > MAX_URL_BYTES {
        return Err(refuse(
            format!(
                "the URL is {} bytes long; the limit is {MAX_URL_BYTES}.",
                raw.len()
            ),
            "fetch a very long URL".to_string(),
        ));
    }
    check_raw_scheme(raw, &what)?;
    let url = parse_http(raw, &what)?;
    let what = format!("fetch {}", show(url.as_str()));
    let port = port_of(&url, &what)?;
    let host = url.host_str().unwrap_or("").to_string();
    let literal = matches!(url.host(), Some(Host::Ipv4(_) | Host::Ipv6(_)));
    let ips = host_ips(&url, dns, &what)?;
    let own = dns
        .host_addrs()
        .map_err(|e| refuse(unknown_host_addrs(&e), what.clone()))?;
    let mut addrs = Vec::with_capacity(ips.len());
    for ip in ips {
        let via = || {
            if literal {
                ip.to_string()
            } else {
                format!("`{}` resolves to {ip}, which", show(&host))
            }
        };
        if let Some(reason) = refused_address(ip, own, via) {
            return Err(refuse(reason, what));
        }
        let ip = ip.to_canonical();
        let sa = SocketAddr::new(ip, port);
        if !addrs.contains(&sa) {
            addrs.push(sa);
        }
    }
    Ok(VettedFetch {
        url: url.as_str().to_string(),
        host,
        addrs,
    })
}

/// Scheme first, on the raw text, exactly as the URL parser will read it
/// (it skips leading spaces and controls, and drops tabs and newlines).
fn check_raw_scheme(raw: &str, what: &str) -> Result<(), UrlRefusal> {
    let trimmed = raw.trim_start_matches(|c: char| c <= ' ');
    let Some(colon) = trimmed.find(':') else {
        return Err(refuse(
            format!(
                "`{}` is not an absolute URL; give a full http:// or https:// URL.",
                show(raw)
            ),
            what.to_string(),
        ));
    };
    let scheme: String = trimmed[..colon]
        .chars()
        .filter(|c| !matches!(c, '\t' | '\n' | '\r'))
        .collect::<String>()
        .to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return Err(refuse(
            format!(
                "only http and https URLs can be fetched, not `{}:`; files and other services are out of reach by design.",
                show(&scheme)
            ),
            what.to_string(),
        ));
    }
    Ok(())
}

/// The parsed URL, http or https.
fn parse_http(raw: &str, what: &str) -> Result<Url, UrlRefusal> {
    let url = match Url::parse(raw) {
        Ok(u) => u,
        Err(e) => {
            return Err(refuse(
                format!("`{}` is not a valid URL ({e}).", show(raw)),
                what.to_string(),
            ));
        }
    };
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err(refuse(
            format!(
                "only http and https URLs can be fetched, not `{}:`.",
                url.scheme()
            ),
            what.to_string(),
        ));
    }
    Ok(url)
}

/// The port to connect to (never 0).
fn port_of(url: &Url, what: &str) -> Result<u16, UrlRefusal> {
    let Some(port) = url.port_or_known_default() else {
        return Err(refuse(
            format!("`{}` has no port.", show(url.as_str())),
            what.to_string(),
        ));
    };
    if port == 0 {
        return Err(refuse(
            format!(
                "`{}` uses port 0, which cannot be connected to.",
                show(url.as_str())
            ),
            what.to_string(),
        ));
    }
    Ok(port)
}

/// The host's addresses: the literal one, or what the name resolves to
/// (names that are the supervisor's own, or do not resolve, are refused).
fn host_ips(url: &Url, dns: &dyn Resolver, what: &str) -> Result<Vec<IpAddr>, UrlRefusal> {
    let what = || what.to_string();
    match url.host() {
        None => Err(refuse(
            format!("`{}` has no host.", show(url.as_str())),
            what(),
        )),
        Some(Host::Ipv4(v4)) => Ok(vec![IpAddr::V4(v4)]),
        Some(Host::Ipv6(v6)) => Ok(vec![IpAddr::V6(v6)]),
        Some(Host::Domain(d)) => {
            let name = d.trim_end_matches('.').to_ascii_lowercase();
            if name.is_empty() {
                return Err(refuse(
                    format!("`{}` has an empty host name.", show(url.as_str())),
                    what(),
                ));
            }
            if let Some(why) = blocked_name(&name) {
                return Err(refuse(
                    format!(
                        "`{}` is {why}; the fetch could reach services on the supervisor's own machine or network. Only public addresses can be fetched.",
                        show(&name)
                    ),
                    what(),
                ));
            }
            match dns.resolve(&name) {
                Ok(ips) if !ips.is_empty() => Ok(ips),
                Ok(_) => Err(refuse(
                    format!(
                        "`{}` resolves to no address; the fetch is refused (names that do not resolve are never fetched).",
                        show(&name)
                    ),
                    what(),
                )),
                Err(e) => Err(refuse(
                    format!(
                        "{}; names that do not resolve are never fetched. Check the host name.",
                        shorten(&e.to_string(), 200)
                    ),
                    what(),
                )),
            }
        }
    }
}

/// Why `ip` may not be connected to, if it may not: its class, or that it is
/// one of the host's own addresses. `via` names it in the sentence (built
/// only for a refusal).
pub(crate) fn refused_address(
    ip: IpAddr,
    own: &HostAddrs,
    via: impl Fn() -> String,
) -> Option<String> {
    if let Some(why) = blocked_ip(ip) {
        return Some(format!(
            "{} is {why}; only public addresses can be fetched, so the supervisor's machine, private networks and cloud metadata stay out of reach.",
            via()
        ));
    }
    own_address(ip, own).map(|interface| {
        format!(
            "{} is an address of the supervisor's own host (interface {}); a fetch there would reach the services on the supervisor's machine, which answer on its public addresses too. Only other hosts can be fetched.",
            via(),
            show(interface)
        )
    })
}

fn unknown_host_addrs(e: &HostAddrsError) -> String {
    format!(
        "{e}, so no address can be told apart from the supervisor's own; every fetch is refused until they can be read again. Tell the operator."
    )
}

/// The connector check: whether the fetch may connect to `ip` now (its
/// class, and the host's own addresses as `dns` knows them now).
pub(crate) fn vet_address(ip: IpAddr, dns: &dyn Resolver) -> Result<(), String> {
    let own = dns.host_addrs().map_err(|e| unknown_host_addrs(&e))?;
    match refused_address(ip, own, || ip.to_string()) {
        Some(reason) => Err(reason),
        None => Ok(()),
    }
}

/// The interface holding `ip` when it is one of the host's own addresses,
/// directly, IPv4-mapped, or as the IPv4 address a 6to4 address carries.
fn own_address(ip: IpAddr, own: &HostAddrs) -> Option<&str> {
    if let Some(interface) = own.interface_of(ip) {
        return Some(interface);
    }
    match ip {
        IpAddr::V6(v6) if SIX_TO_FOUR.contains(&v6) => {
            let embedded = Ipv4Addr::from(((u128::from(v6) >> 80) & 0xFFFF_FFFF) as u32);
            own.interface_of(IpAddr::V4(embedded))
        }
        IpAddr::V4(_) | IpAddr::V6(_) => None,
    }
}

/// "fetch https://… (93.184.216.34)".
pub(crate) fn consequence(f: &VettedFetch) -> String {
    let ips: Vec<String> = f.addrs.iter().map(|a| a.ip().to_string()).collect();
    format!("fetch {} ({})", show(&f.url), ips.join(", "))
}

/// Names refused without asking DNS.
fn blocked_name(name: &str) -> Option<&'static str> {
    if name == "localhost" || name.ends_with(".localhost") {
        return Some("a loopback name (localhost)");
    }
    if matches!(
        name,
        "metadata"
            | "metadata.google.internal"
            | "metadata.goog"
            | "instance-data"
            | "instance-data.ec2.internal"
    ) {
        return Some("a cloud metadata host name");
    }
    None
}

/// An IPv4 network in a table: `v4(a, b, c, d, len)`.
const fn v4(a: u8, b: u8, c: u8, d: u8, len: u8) -> Ipv4Net {
    Ipv4Net::new_assert(Ipv4Addr::new(a, b, c, d), len)
}

/// An IPv6 network in a table, by its eight 16-bit groups.
const fn v6(g: [u16; 8], len: u8) -> Ipv6Net {
    Ipv6Net::new_assert(
        Ipv6Addr::new(g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7]),
        len,
    )
}

const V4_BLOCKED: &[(Ipv4Net, &str)] = &[
    (
        v4(0, 0, 0, 0, 8),
        "in 0.0.0.0/8 (\"this network\", unspecified)",
    ),
    (v4(10, 0, 0, 0, 8), "a private address (10.0.0.0/8)"),
    (
        v4(100, 64, 0, 0, 10),
        "a carrier-grade NAT address (100.64.0.0/10)",
    ),
    (v4(127, 0, 0, 0, 8), "a loopback address"),
    (
        v4(169, 254, 0, 0, 16),
        "a link-local address (169.254.0.0/16, home of cloud metadata services)",
    ),
    (v4(172, 16, 0, 0, 12), "a private address (172.16.0.0/12)"),
    (
        v4(192, 0, 0, 0, 24),
        "an IETF protocol address (192.0.0.0/24)",
    ),
    (
        v4(192, 0, 2, 0, 24),
        "a documentation address (192.0.2.0/24)",
    ),
    (
        v4(192, 88, 99, 0, 24),
        "a 6to4 relay address (192.88.99.0/24)",
    ),
    (v4(192, 168, 0, 0, 16), "a private address (192.168.0.0/16)"),
    (
        v4(198, 18, 0, 0, 15),
        "a benchmarking address (198.18.0.0/15)",
    ),
    (
        v4(198, 51, 100, 0, 24),
        "a documentation address (198.51.100.0/24)",
    ),
    (
        v4(203, 0, 113, 0, 24),
        "a documentation address (203.0.113.0/24)",
    ),
    (v4(224, 0, 0, 0, 4), "a multicast address (224.0.0.0/4)"),
    (
        v4(240, 0, 0, 0, 4),
        "a reserved or broadcast address (240.0.0.0/4)",
    ),
];

/// Why an IPv4 address may not be fetched, if it may not.
pub(crate) fn blocked_v4(ip: Ipv4Addr) -> Option<&'static str> {
    V4_BLOCKED
        .iter()
        .find_map(|(net, why)| net.contains(&ip).then_some(*why))
}

const V6_BLOCKED: &[(Ipv6Net, &str)] = &[
    (
        v6([0x64, 0xff9b, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0], 96),
        "a NAT64 address (64:ff9b::/96)",
    ),
    (
        v6([0x64, 0xff9b, 0x1, 0x0, 0x0, 0x0, 0x0, 0x0], 48),
        "a local NAT64 address (64:ff9b:1::/48)",
    ),
    (
        v6([0x100, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0], 64),
        "a discard-only address (100::/64)",
    ),
    (
        v6([0x2001, 0xdb8, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0], 32),
        "a documentation address (2001:db8::/32)",
    ),
    (
        v6([0x2001, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0], 23),
        "an IETF protocol address (2001::/23, including Teredo)",
    ),
    (
        v6([0x3fff, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0], 20),
        "a documentation address (3fff::/20)",
    ),
    (
        v6([0x5f00, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0], 16),
        "a segment-routing address (5f00::/16)",
    ),
    (
        v6([0xfc00, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0], 7),
        "a unique local address (fc00::/7)",
    ),
    (
        v6([0xfe80, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0], 10),
        "a link-local address (fe80::/10)",
    ),
    (
        v6([0xfec0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0], 10),
        "a site-local address (fec0::/10)",
    ),
    (
        v6([0xff00, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0], 8),
        "a multicast address (ff00::/8)",
    ),
];

/// The special IPv6 ranges judged by what they carry or are, not by the
/// table: `::/96` (IPv4-compatible), `::ffff:0:0:0/96` (IPv4-translated),
/// `2002::/16` (6to4).
const V4_COMPATIBLE: Ipv6Net = v6([0, 0, 0, 0, 0, 0, 0, 0], 96);
const V4_TRANSLATED: Ipv6Net = v6([0, 0, 0, 0, 0xffff, 0, 0, 0], 96);
const SIX_TO_FOUR: Ipv6Net = v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16);

/// Why an address may not be fetched, if it may not. IPv4-mapped,
/// IPv4-compatible, IPv4-translated and 6to4 forms are judged by the IPv4
/// address they carry.
pub(crate) fn blocked_ip(ip: IpAddr) -> Option<String> {
    match ip {
        IpAddr::V4(v4) => blocked_v4(v4).map(str::to_string),
        IpAddr::V6(v6) => blocked_v6(v6),
    }
}

fn blocked_v6(ip: Ipv6Addr) -> Option<String> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return blocked_v4(v4).map(|why| format!("{why}, written as IPv4-mapped IPv6"));
    }
    if ip.is_unspecified() {
        return Some("the unspecified address (::)".to_string());
    }
    if ip.is_loopback() {
        return Some("the IPv6 loopback address (::1)".to_string());
    }
    if V4_COMPATIBLE.contains(&ip) {
        return Some("a deprecated IPv4-compatible IPv6 address (::/96)".to_string());
    }
    if V4_TRANSLATED.contains(&ip) {
        return Some("an IPv4-translated IPv6 address (::ffff:0:0:0/96)".to_string());
    }
    if SIX_TO_FOUR.contains(&ip) {
        let embedded = Ipv4Addr::from(((u128::from(ip) >> 80) & 0xFFFF_FFFF) as u32);
        if let Some(why) = blocked_v4(embedded) {
            return Some(format!("a 6to4 address carrying {embedded}, {why}"));
        }
        return None;
    }
    V6_BLOCKED
        .iter()
        .find(|(net, _)| net.contains(&ip))
        .map(|(_, why)| why.to_string())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::facts::ResolveError;

    struct Table(
        HashMap<&'static str, Vec<IpAddr>>,
        Result<HostAddrs, HostAddrsError>,
    );

    impl Resolver for Table {
        fn resolve(&self, host: &str) -> Result<Vec<IpAddr>, ResolveError> {
            self.0
                .get(host)
                .cloned()
                .ok_or_else(|| ResolveError::NotFound(host.to_string()))
        }
        fn host_addrs(&self) -> Result<&HostAddrs, HostAddrsError> {
            self.1.as_ref().map_err(Clone::clone)
        }
    }

    fn dns() -> Table {
        let mut t = HashMap::new();
        t.insert("example.com", vec!["93.184.216.34".parse().unwrap()]);
        t.insert("localtest.me", vec!["127.0.0.1".parse().unwrap()]);
        t.insert(
            "mixed.example",
            vec![
                "93.184.216.34".parse().unwrap(),
                "10.0.0.1".parse().unwrap(),
            ],
        );
        t.insert("empty.example", vec![]);
        t.insert(
            "v6.example",
            vec!["2606:2800:220:1:248:1893:25c8:1946".parse().unwrap()],
        );
        t.insert("own.example", vec!["8.8.8.8".parse().unwrap()]);
        t.insert(
            "partly-own.example",
            vec![
                "93.184.216.34".parse().unwrap(),
                "2001:4860:4860::8888".parse().unwrap(),
            ],
        );
        Table(t, Ok(HostAddrs::default()))
    }

    /// The same names, on a host whose dummy0 holds 8.8.8.8 and
    /// 2001:4860:4860::8888 (and whose lo holds 127.0.0.1).
    fn on_host() -> Table {
        let mut t = dns();
        t.1 = Ok(HostAddrs::new([
            ("8.8.8.8".parse().unwrap(), "dummy0".to_string()),
            (
                "2001:4860:4860::8888".parse().unwrap(),
                "dummy0".to_string(),
            ),
            ("127.0.0.1".parse().unwrap(), "lo".to_string()),
        ]));
        t
    }

    #[test]
    fn the_hosts_own_addresses_are_refused_in_every_spelling() {
        let dns = on_host();
        let e = vet("http://8.8.8.8/x", &dns).unwrap_err();
        assert_eq!(
            e.reason,
            "8.8.8.8 is an address of the supervisor's own host (interface dummy0); a fetch there would reach the services on the supervisor's machine, which answer on its public addresses too. Only other hosts can be fetched."
        );
        assert_eq!(e.consequence, "fetch http://8.8.8.8/x");
        for (url, says) in [
            (
                "http://[2001:4860:4860::8888]:8080/",
                "2001:4860:4860::8888 is an address of the supervisor's own host (interface dummy0)",
            ),
            (
                "http://[::ffff:8.8.8.8]/",
                "::ffff:8.8.8.8 is an address of the supervisor's own host (interface dummy0)",
            ),
            ("http://134744072/", "8.8.8.8 is an address"),
            ("http://0x8.0x8.0x8.0x8/", "8.8.8.8 is an address"),
            (
                "http://[2002:808:808::1]/",
                "2002:808:808::1 is an address of the supervisor's own host (interface dummy0)",
            ),
            (
                "https://own.example./",
                "`own.example.` resolves to 8.8.8.8, which is an address of the supervisor's own host (interface dummy0)",
            ),
            (
                "http://partly-own.example/",
                "`partly-own.example` resolves to 2001:4860:4860::8888, which is an address of the supervisor's own host",
            ),
        ] {
            let e = vet(url, &dns).unwrap_err();
            assert!(e.reason.starts_with(says), "{url}: {}", e.reason);
        }
        // Other hosts' public addresses still pass.
        for url in [
            "http://8.8.4.4/",
            "http://[2001:4860:4860::8844]/",
            "http://example.com/",
            "http://[2002:5db8:d822::1]/",
        ] {
            assert!(vet(url, &dns).is_ok(), "{url}");
        }
        // A class refusal keeps its own, more specific reason.
        let e = vet("http://127.0.0.1/", &dns).unwrap_err();
        assert!(e.reason.contains("a loopback address"), "{}", e.reason);
    }

    #[test]
    fn the_connector_check_refuses_classes_and_own_addresses() {
        let dns = on_host();
        assert_eq!(vet_address("93.184.216.34".parse().unwrap(), &dns), Ok(()));
        assert_eq!(
            vet_address("8.8.8.8".parse().unwrap(), &dns),
            Err("8.8.8.8 is an address of the supervisor's own host (interface dummy0); a fetch there would reach the services on the supervisor's machine, which answer on its public addresses too. Only other hosts can be fetched.".to_string())
        );
        let e = vet_address("169.254.169.254".parse().unwrap(), &dns).unwrap_err();
        assert!(
            e.starts_with("169.254.169.254 is a link-local address"),
            "{e}"
        );
        let mut unknown = dns;
        unknown.1 = Err(HostAddrsError("getifaddrs: EMFILE".to_string()));
        let e = vet_address("93.184.216.34".parse().unwrap(), &unknown).unwrap_err();
        assert!(e.contains("could not be read (getifaddrs: EMFILE)"), "{e}");
    }

    #[test]
    fn unknown_host_addresses_refuse_every_fetch() {
        let mut dns = dns();
        dns.1 = Err(HostAddrsError("getifaddrs: EMFILE".to_string()));
        let e = vet("http://93.184.216.34/", &dns).unwrap_err();
        assert_eq!(
            e.reason,
            "the supervisor's own host addresses could not be read (getifaddrs: EMFILE), so no address can be told apart from the supervisor's own; every fetch is refused until they can be read again. Tell the operator."
        );
        assert!(vet("http://example.com/", &dns).is_err());
    }

    #[test]
    fn public_addresses_pass_with_pinned_addresses() {
        let f = vet("https://example.com:443/path?q=169.254.169.254", &dns()).unwrap();
        assert_eq!(f.host, "example.com");
        assert_eq!(f.addrs, vec!["93.184.216.34:443".parse().unwrap()]);
        assert_eq!(
            consequence(&f),
            "fetch https://example.com/path?q=169.254.169.254 (93.184.216.34)"
        );
        let f = vet("http://[::ffff:93.184.216.34]/", &dns()).unwrap();
        assert_eq!(f.addrs, vec!["93.184.216.34:80".parse().unwrap()]);
        assert!(vet("http://1572395042/", &dns()).is_ok());
        assert!(vet("http://172.15.255.255/", &dns()).is_ok());
        assert!(vet("http://100.128.0.1/", &dns()).is_ok());
        assert!(vet("http://93.184.216.34:8080/", &dns()).is_ok());
        assert!(vet("http://v6.example/", &dns()).is_ok());
        assert!(vet("http://[2002:5db8:d822::1]/", &dns()).is_ok());
    }

    #[test]
    fn every_listed_range_is_blocked() {
        for ip in [
            "0.0.0.0",
            "10.1.2.3",
            "100.64.0.1",
            "100.127.255.255",
            "127.0.0.1",
            "169.254.169.254",
            "172.16.0.1",
            "172.31.255.255",
            "192.0.0.1",
            "192.0.2.1",
            "192.168.1.1",
            "198.18.0.1",
            "198.19.255.255",
            "198.51.100.7",
            "203.0.113.7",
            "224.0.0.1",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "::7f00:1",
            "::ffff:127.0.0.1",
            "::ffff:0:7f00:1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b::808:808",
            "2002:7f00:1::",
            "2001:db8::1",
            "2001::1",
            "100::1",
            "fc00::1",
            "fd00::1",
            "fe80::1",
            "febf:ffff::1",
            "fec0::1",
            "ff02::1",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert!(blocked_ip(ip).is_some(), "{ip} passed");
        }
        for ip in ["1.1.1.1", "8.8.8.8", "93.184.216.34", "2606:4700::1111"] {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(blocked_ip(ip), None, "{ip}");
        }
    }

    #[test]
    fn schemes_are_checked_before_hosts() {
        for u in [
            "file:///etc/passwd",
            "gopher://127.0.0.1:6379/_INFO",
            "gopher://example.com/",
            "ldap://127.0.0.1/",
            "javascript:alert(1)",
            " \tfile:///etc/passwd",
            "example.com/x",
            "//127.0.0.1/",
        ] {
            let e = vet(u, &dns()).unwrap_err();
            assert!(
                e.reason.contains("only http and https") || e.reason.contains("not an absolute"),
                "{u:?}: {e:?}"
            );
        }
    }

    #[test]
    fn names_fail_closed() {
        let e = vet("http://metadata/computeMetadata/v1/", &dns()).unwrap_err();
        assert!(e.reason.contains("metadata"), "{e:?}");
        let e = vet("http://nowhere.invalid/", &dns()).unwrap_err();
        assert!(e.reason.contains("does not resolve"), "{e:?}");
        let e = vet("http://empty.example/", &dns()).unwrap_err();
        assert!(e.reason.contains("no address"), "{e:?}");
        let e = vet("http://localtest.me/", &dns()).unwrap_err();
        assert!(e.reason.contains("resolves to 127.0.0.1"), "{e:?}");
        let e = vet("http://mixed.example/", &dns()).unwrap_err();
        assert!(e.reason.contains("10.0.0.1"), "{e:?}");
        for u in [
            "http://localhost/",
            "http://LOCALHOST./",
            "http://a.localhost/",
            "http://localhost%2e/",
        ] {
            assert!(vet(u, &dns()).is_err(), "{u}");
        }
    }

    #[test]
    fn parser_tricks_are_seen_through() {
        for u in [
            "http://2130706433/",
            "http://0x7f.1/",
            "http://017700000001/",
            "http://127.0.0.1./",
            "http://0/",
            "http://[::ffff:7f00:1]/",
            "http://evil.com@127.0.0.1/",
            "http://127.0.0.1:80\\@example.com/",
            "https:127.0.0.1",
            "http://127.0.0\t.1/",
            "ht\ttp://127.0.0.1/",
            "http://①②⑦.⓪.⓪.①/",
            "http://0x100000000/",
            "http://256.256.256.256/",
            "http://[fe80::1%25eth0]/",
            "http:///",
            "http://:80/",
            "http://127.0.0.1%00.example.com/",
            "http://93.184.216.34:0/",
        ] {
            assert!(vet(u, &dns()).is_err(), "{u:?}");
        }
        assert!(vet("http://127.0.0.1@example.com/", &dns()).is_ok());
        assert!(vet("http://example.com#@127.0.0.1/", &dns()).is_ok());
    }

    #[test]
    fn reasons_escape_what_they_show() {
        let e = vet("gopher\n://x", &dns()).unwrap_err();
        assert!(
            !e.reason.contains('\n') && !e.consequence.contains('\n'),
            "{e:?}"
        );
    }
}
