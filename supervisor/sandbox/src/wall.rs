//! The network wall inside one sandbox (docs/THREAT_MODEL.md "Network",
//! docs/INTERFACES.md "[network]"): what the supervisor serves in the
//! sandbox's own network namespace and how every other connection is sent
//! to it.
//!
//! The namespace keeps no way out: its only device is `lo`. The
//! supervisor enters it through a pidfd of the sandbox's init
//! ([`crate::egress::wall_in`]), adds a default route through `lo` (so a
//! connect to any address reaches the netfilter hooks instead of failing
//! with "network unreachable"), opens its listeners on loopback and loads
//! [`ruleset`] with `nft`: every TCP connection to an address that is not
//! the namespace's own is redirected to the transparent listener, UDP to
//! port 53 to the DNS stub, and every other packet that would leave
//! loopback is dropped. Sandboxed processes hold no capability over the
//! namespace, so they cannot change the rules or the routes.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, UdpSocket};

use tollgate_policy::sandbox_env::{WALL_ENV, WallVar};

/// The HTTP proxy (`CONNECT` and absolute-URI requests).
pub const HTTP_PROXY: SocketAddr = v4(3128);
/// The SOCKS5 proxy.
pub const SOCKS_PROXY: SocketAddr = v4(1080);
/// The DNS stub `/etc/resolv.conf` names.
pub const DNS_STUB: SocketAddr = v4(53);
/// Where the rules send every other TCP connection.
pub const TRANSPARENT_PORT: u16 = 15001;

/// Where the `nft` binary is looked for (never through PATH).
const NFT: &[&str] = &["/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft", "/bin/nft"];

const fn v4(port: u16) -> SocketAddr {
    SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), port)
}

/// The transparent listeners' addresses: IPv4, then IPv6.
pub fn transparent_addrs() -> [SocketAddr; 2] {
    [
        v4(TRANSPARENT_PORT),
        SocketAddr::new(Ipv6Addr::LOCALHOST.into(), TRANSPARENT_PORT),
    ]
}

/// The supervisor's sockets inside one sandbox's namespace.
#[derive(Debug)]
pub struct WallSockets {
    pub http: TcpListener,
    pub socks: TcpListener,
    /// The IPv4 one, and the IPv6 one when the namespace has IPv6.
    pub transparent: Vec<TcpListener>,
    pub dns: UdpSocket,
}

/// The sandbox's whole `/etc/resolv.conf`.
pub fn resolv_conf() -> String {
    format!(
        "# tollgate: the DNS stub of this sandbox (it never forwards a query)\nnameserver {}\noptions attempts:2 timeout:2\n",
        DNS_STUB.ip()
    )
}

/// git over ssh through the SOCKS proxy (docs/OPERATIONS.md "git over the
/// network"): OpenBSD `nc -X 5` carries the connection by name, so the wall
/// decides it like any other. Nothing prompts (`BatchMode=yes`: a sandboxed
/// command has no terminal), and a host in no known-hosts file is accepted
/// on first use while a changed key is still refused (`accept-new`: the
/// sandbox's home starts empty, so the owner's known hosts are not there;
/// the system's `/etc/ssh/ssh_known_hosts` is). Keys are the sandbox's own
/// (added to an `ssh-agent` a command starts): no key, agent socket or
/// known-hosts file of the owner's is in the sandbox.
pub fn git_ssh_command() -> String {
    format!(
        "ssh -o 'ProxyCommand=nc -X 5 -x {SOCKS_PROXY} %h %p' -o BatchMode=yes -o StrictHostKeyChecking=accept-new"
    )
}

/// The network wall's variables ([`WALL_ENV`]: the proxy variables, upper
/// and lower case, so that curl, git, pip, npm, cargo and Node find the
/// proxies with no configuration of their own, and `GIT_SSH_COMMAND`,
/// [`git_ssh_command`]) with their values.
pub fn proxy_env() -> Vec<(String, String)> {
    let http = format!("http://{HTTP_PROXY}");
    let socks = format!("socks5h://{SOCKS_PROXY}");
    WALL_ENV
        .iter()
        .map(|(k, var)| {
            let v = match var {
                WallVar::HttpProxy => http.clone(),
                WallVar::SocksProxy => socks.clone(),
                WallVar::NoProxy => "localhost,127.0.0.1,::1".to_string(),
                WallVar::GitSsh => git_ssh_command(),
            };
            (k.to_string(), v)
        })
        .collect()
}

/// The rules loaded into the sandbox's namespace.
pub fn ruleset() -> String {
    format!(
        "table inet tollgate_wall {{
  chain capture {{
    type nat hook output priority -100; policy accept;
    fib daddr type local return
    meta l4proto tcp redirect to :{TRANSPARENT_PORT}
    meta nfproto ipv4 udp dport 53 redirect to :{dns}
  }}
  chain leave {{
    type filter hook output priority 0; policy drop;
    fib daddr type local accept
  }}
}}
",
        dns = DNS_STUB.port()
    )
}

/// Loads [`ruleset`] with `nft`, from a thread that is in the sandbox's
/// network namespace (the child inherits it).
pub(crate) fn load_rules() -> Result<(), String> {
    use std::io::Write;
    let nft = NFT
        .iter()
        .find(|p| std::path::Path::new(p).is_file())
        .ok_or_else(|| {
            format!(
                "nft is not installed (looked at {}); the network wall needs it (Debian: apt-get install nftables)",
                NFT.join(", ")
            )
        })?;
    let mut child = std::process::Command::new(nft)
        .args(["-f", "-"])
        .env_clear()
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("run {nft}: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(ruleset().as_bytes())
            .map_err(|e| format!("write the rules to {nft}: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("wait for {nft}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{nft} refused the rules ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxies_are_announced_in_both_cases_and_loopback_is_not_proxied() {
        let env = proxy_env();
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("HTTPS_PROXY"), Some("http://127.0.0.1:3128"));
        assert_eq!(get("https_proxy"), Some("http://127.0.0.1:3128"));
        assert_eq!(get("all_proxy"), Some("socks5h://127.0.0.1:1080"));
        assert_eq!(get("NO_PROXY"), Some("localhost,127.0.0.1,::1"));
        assert_eq!(
            get("GIT_SSH_COMMAND"),
            Some(
                "ssh -o 'ProxyCommand=nc -X 5 -x 127.0.0.1:1080 %h %p' -o BatchMode=yes -o StrictHostKeyChecking=accept-new"
            )
        );
        assert_eq!(env.len(), 9);
    }

    #[test]
    fn the_rules_capture_tcp_and_drop_what_else_leaves() {
        let r = ruleset();
        assert!(r.contains("meta l4proto tcp redirect to :15001"), "{r}");
        assert!(r.contains("udp dport 53 redirect to :53"), "{r}");
        assert!(r.contains("policy drop;"), "{r}");
        assert!(resolv_conf().contains("\nnameserver 127.0.0.1\n"));
    }
}
