//! `[network] upstream_proxy`: a corporate HTTP proxy that allowed
//! connections go out through, by `CONNECT` (docs/INTERFACES.md
//! "[network]"). Parsing only; the egress crate connects.

use super::{NetHost, split_port};

/// `http://HOST:PORT`, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamProxy {
    pub host: NetHost,
    pub port: u16,
}

impl UpstreamProxy {
    /// `http://HOST:PORT` (a trailing `/` is fine); no other scheme, no
    /// user name or password, no path.
    pub fn parse(raw: &str) -> Result<UpstreamProxy, String> {
        let bad = |why: &str| {
            format!(
                "[network] upstream_proxy {:?} is refused: {why}; hint: http://HOST:PORT, e.g. http://proxy.corp.example:3128",
                raw.escape_debug().to_string()
            )
        };
        let Some(rest) = raw.strip_prefix("http://") else {
            return Err(bad(
                "only an http:// proxy (spoken to with CONNECT) is served",
            ));
        };
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.contains('@') {
            return Err(bad("a user name or password is not supported"));
        }
        if authority.contains(['/', '?', '#']) {
            return Err(bad("a proxy URL has no path"));
        }
        let (host, port) = split_port(authority).map_err(|e| bad(&e))?;
        let port = port.ok_or_else(|| bad("the port is missing"))?;
        let host = NetHost::parse(host).map_err(|e| bad(&e))?;
        Ok(UpstreamProxy { host, port })
    }

    /// `host:port`, `[v6]` bracketed.
    pub fn authority(&self) -> String {
        format!("{}:{}", self.host.url_host(), self.port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http_proxy_with_a_port_parses_and_anything_else_is_refused() {
        let p = UpstreamProxy::parse("http://Proxy.Corp.example:3128/").unwrap();
        assert_eq!(p.authority(), "proxy.corp.example:3128");
        let p = UpstreamProxy::parse("http://[2001:db8::1]:8080").unwrap();
        assert_eq!(p.authority(), "[2001:db8::1]:8080");
        let p = UpstreamProxy::parse("http://10.1.2.3:3128").unwrap();
        assert_eq!(p.port, 3128);
        for (bad, why) in [
            ("https://proxy.example:3128", "only an http://"),
            ("socks5://proxy.example:1080", "only an http://"),
            ("proxy.example:3128", "only an http://"),
            ("http://proxy.example", "port is missing"),
            ("http://u:p@proxy.example:3128", "user name"),
            ("http://proxy.example:3128/x", "no path"),
            ("http://proxy.example:0", "port"),
            ("http://:3128", "empty"),
        ] {
            let e = UpstreamProxy::parse(bad).unwrap_err();
            assert!(
                e.contains(why) && e.contains("[network] upstream_proxy"),
                "{bad}: {e}"
            );
        }
    }
}
