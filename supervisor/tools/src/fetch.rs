//! webfetch, run by the supervisor (never the sandbox), connecting only to
//! the addresses the policy vetted.
//!
//! How each hop is pinned:
//! - before anything is sent, the hop's URL is checked against its
//!   [`VettedFetch`]: http or https, the URL's host is the vetted host, a
//!   literal-IP host is one of the vetted addresses, and there is at least
//!   one address;
//! - the client has no proxy (`no_proxy()`: an inherited HTTPS_PROXY would
//!   resolve the name itself), no automatic redirects, no retries, and a
//!   resolver that answers the vetted host with the vetted addresses (port
//!   taken from the URL) and refuses every other name: there is no second
//!   DNS lookup to rebind;
//! - right before connecting, every pinned address goes through
//!   [`HopVetter::vet_peer`] (the connector check: the daemon refuses an
//!   address that is, as of now, one of its own host's);
//! - after connecting, the response's peer address must be one of the vetted
//!   addresses, else the hop fails closed.
//!
//! A 3xx with a Location is resolved against the current URL and handed to
//! the [`HopVetter`] (the policy's SSRF guard) again; at most
//! `max_redirects` hops are followed. The body is streamed and stops at
//! `max_bytes`; one deadline covers every hop and the body.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{ACCEPT, ACCEPT_ENCODING, CONTENT_TYPE, HeaderValue, LOCATION};
use tollgate_policy::VettedFetch;
use url::Url;

use crate::html::{Rendering, html_to_text};
use crate::paths::escape_bytes;
use crate::{ToolError, ToolOutput, cap_text};

/// Vets a redirect target the way the policy vetted the first URL, and each
/// address right before the fetch connects to it.
pub trait HopVetter: Send + Sync {
    /// `Ok` with the addresses to pin, or `Err` with the reason it is refused.
    fn vet(&self, url: &str) -> Result<VettedFetch, String>;

    /// The connector check: `Err` with the reason when `ip`, about to be
    /// connected to, must not be (the daemon: it is, as of now, an address
    /// of the supervisor's own host; the set is read again for this).
    fn vet_peer(&self, ip: IpAddr) -> Result<(), String>;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchLimits {
    /// Body bytes read at most (the rest is not fetched), and the output cap.
    pub max_bytes: usize,
    /// One deadline for the whole fetch: every hop, connect and body.
    pub timeout: Duration,
    /// Redirects followed at most (5 in tollgate).
    pub max_redirects: u8,
}

impl Default for FetchLimits {
    fn default() -> Self {
        FetchLimits {
            max_bytes: 100 * 1024,
            timeout: Duration::from_secs(30),
            max_redirects: 5,
        }
    }
}

const SNIFF_BYTES: usize = 8192;

/// Fetches `first` (already vetted), connecting ONLY to its vetted
/// addresses; on a redirect, re-vets the Location (resolved against the
/// current URL) with `vetter` and follows up to `max_redirects` hops. Returns
/// a header block (final URL, status, content type, byte count, redirects),
/// a blank line, then the body: HTML converted to text, other text as is,
/// binary summarised. Capped at `max_bytes`.
pub async fn webfetch(
    first: &VettedFetch,
    limits: &FetchLimits,
    vetter: &dyn HopVetter,
) -> Result<ToolOutput, ToolError> {
    match tokio::time::timeout(limits.timeout, fetch_hops(first, limits, vetter)).await {
        Ok(result) => result,
        Err(_) => Err(ToolError::FetchTimeout {
            url: show_url(&first.url),
            timeout: limits.timeout,
        }),
    }
}

async fn fetch_hops(
    first: &VettedFetch,
    limits: &FetchLimits,
    vetter: &dyn HopVetter,
) -> Result<ToolOutput, ToolError> {
    let mut hop = first.clone();
    let mut chain: Vec<String> = Vec::new();
    loop {
        let url = check_vetted(&hop)?;
        check_peers(&hop, &url, vetter)?;
        let client = pinned_client(&hop, &url, limits)?;
        let response = client
            .get(url.clone())
            .header(ACCEPT, "text/html, text/plain;q=0.9, */*;q=0.5")
            .header(ACCEPT_ENCODING, "identity")
            .send()
            .await
            .map_err(|e| request_error(&url, limits, &hop, e))?;
        check_peer(&response, &hop, &url)?;

        let status = response.status();
        if status.is_redirection()
            && let Some(location) = response.headers().get(LOCATION)
        {
            let location = location.to_str().map_err(|_| ToolError::RedirectRefused {
                url: escape_bytes(location.as_bytes(), 200),
                reason: "the Location header is not ASCII".into(),
            })?;
            let next = url.join(location).map_err(|e| ToolError::RedirectRefused {
                url: escape_bytes(location.as_bytes(), 200),
                reason: format!("not a valid URL relative to {url}: {e}"),
            })?;
            chain.push(format!("{} {}", status.as_u16(), show_url(url.as_str())));
            if chain.len() > usize::from(limits.max_redirects) {
                return Err(ToolError::TooManyRedirects {
                    url: show_url(&first.url),
                    max: limits.max_redirects,
                });
            }
            hop = vet_hop(vetter, next.as_str()).map_err(|reason| ToolError::RedirectRefused {
                url: show_url(next.as_str()),
                reason,
            })?;
            continue;
        }
        return read_body(response, url, chain, limits).await;
    }
}

/// Calls the vetter, which may resolve names (blocking): on a multi-thread
/// runtime the worker thread is handed over to other tasks while it does.
fn vet_hop(vetter: &dyn HopVetter, url: &str) -> Result<VettedFetch, String> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(|| vetter.vet(url)),
        _ => vetter.vet(url),
    }
}

/// Checks a hop against what was vetted, before anything is sent.
fn check_vetted(hop: &VettedFetch) -> Result<Url, ToolError> {
    let invalid = |reason: String| ToolError::InvalidUrl {
        url: show_url(&hop.url),
        reason,
    };
    let url = Url::parse(&hop.url).map_err(|e| invalid(e.to_string()))?;
    match url.scheme() {
        "http" | "https" => {}
        other => return Err(invalid(format!("scheme {other:?} is not http or https"))),
    }
    let Some(host) = url.host_str() else {
        return Err(invalid("it has no host".into()));
    };
    if !host.eq_ignore_ascii_case(&hop.host) && host.trim_matches(['[', ']']) != hop.host {
        return Err(invalid(format!(
            "its host {host} is not the vetted host {}",
            escape_bytes(hop.host.as_bytes(), 200)
        )));
    }
    if hop.addrs.is_empty() {
        return Err(invalid("the policy vetted no address for it".into()));
    }
    let literal = match url.host() {
        Some(url::Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
        Some(url::Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
        _ => None,
    };
    if let Some(ip) = literal
        && !hop
            .addrs
            .iter()
            .any(|a| a.ip().to_canonical() == ip.to_canonical())
    {
        return Err(invalid(format!(
            "its address {ip} is not one the policy vetted ({})",
            list_addrs(&hop.addrs)
        )));
    }
    Ok(url)
}

/// The connector check, on every address the client may connect to for
/// this hop (the pinned resolver hands it these and no other), right before
/// connecting: one refused address refuses the hop.
fn check_peers(hop: &VettedFetch, url: &Url, vetter: &dyn HopVetter) -> Result<(), ToolError> {
    for addr in pinned_addrs(hop, url) {
        if let Err(reason) = vet_peer(vetter, addr.ip()) {
            return Err(ToolError::PeerRefused {
                url: show_url(url.as_str()),
                addr: addr.to_string(),
                reason,
            });
        }
    }
    Ok(())
}

/// [`HopVetter::vet_peer`] (which may read the host's addresses) handed
/// over like [`vet_hop`].
fn vet_peer(vetter: &dyn HopVetter, ip: IpAddr) -> Result<(), String> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(|| vetter.vet_peer(ip)),
        _ => vetter.vet_peer(ip),
    }
}

/// The vetted addresses with the URL's port.
fn pinned_addrs(hop: &VettedFetch, url: &Url) -> Vec<SocketAddr> {
    let port = url.port_or_known_default().unwrap_or(80);
    hop.addrs
        .iter()
        .map(|a| SocketAddr::new(a.ip(), port))
        .collect()
}

/// Answers the vetted host with the vetted addresses; refuses any other name.
struct PinnedResolver {
    host: String,
    addrs: Vec<SocketAddr>,
}

impl reqwest::dns::Resolve for PinnedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let answer: Result<reqwest::dns::Addrs, Box<dyn std::error::Error + Send + Sync>> =
            if name.as_str().eq_ignore_ascii_case(&self.host) {
                Ok(Box::new(self.addrs.clone().into_iter()))
            } else {
                Err(format!("{} is not the vetted host", name.as_str()).into())
            };
        Box::pin(std::future::ready(answer))
    }
}

fn pinned_client(
    hop: &VettedFetch,
    url: &Url,
    limits: &FetchLimits,
) -> Result<reqwest::Client, ToolError> {
    let host = url.host_str().unwrap_or_default().to_ascii_lowercase();
    let addrs = pinned_addrs(hop, url);
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .retry(reqwest::retry::never())
        .referer(false)
        .resolve_to_addrs(&host, &addrs)
        .dns_resolver(Arc::new(PinnedResolver { host, addrs }))
        .connect_timeout(limits.timeout)
        .timeout(limits.timeout)
        .pool_max_idle_per_host(0)
        .user_agent(concat!("tollgate-webfetch/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| ToolError::Fetch {
            url: show_url(url.as_str()),
            reason: format!("cannot build the HTTP client: {}", error_chain(&e)),
        })
}

/// After connecting: the peer must be one of the vetted addresses.
fn check_peer(response: &reqwest::Response, hop: &VettedFetch, url: &Url) -> Result<(), ToolError> {
    let allowed = pinned_addrs(hop, url);
    match response.remote_addr() {
        Some(peer)
            if allowed.iter().any(|a| {
                a.ip().to_canonical() == peer.ip().to_canonical() && a.port() == peer.port()
            }) =>
        {
            Ok(())
        }
        peer => Err(ToolError::AddressMismatch {
            url: show_url(url.as_str()),
            got: peer.map_or_else(|| "an unknown address".to_string(), |p| p.to_string()),
            vetted: list_addrs(&allowed),
        }),
    }
}

fn request_error(
    url: &Url,
    limits: &FetchLimits,
    hop: &VettedFetch,
    e: reqwest::Error,
) -> ToolError {
    if e.is_timeout() {
        return ToolError::FetchTimeout {
            url: show_url(url.as_str()),
            timeout: limits.timeout,
        };
    }
    let reason = if e.is_connect() {
        format!(
            "cannot connect to {} ({})",
            list_addrs(&pinned_addrs(hop, url)),
            error_chain(&e)
        )
    } else {
        error_chain(&e)
    };
    ToolError::Fetch {
        url: show_url(url.as_str()),
        reason,
    }
}

/// The error and its sources, joined with ": ".
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !text.contains(&s_text) {
            text.push_str(": ");
            text.push_str(&s_text);
        }
        source = s.source();
    }
    text
}

fn list_addrs(addrs: &[SocketAddr]) -> String {
    addrs
        .iter()
        .map(SocketAddr::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn show_url(url: &str) -> String {
    escape_bytes(url.as_bytes(), 500)
}

/// What the body is, from the Content-Type and a sniff of the first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyKind {
    Html,
    Text,
    Binary,
}

fn body_kind(content_type: Option<&str>, head: &[u8]) -> BodyKind {
    let sniff = &head[..head.len().min(SNIFF_BYTES)];
    if sniff.contains(&0) {
        return BodyKind::Binary;
    }
    let mime = content_type
        .and_then(|ct| ct.split(';').next())
        .map(|m| m.trim().to_ascii_lowercase())
        .unwrap_or_default();
    match mime.as_str() {
        "text/html" | "application/xhtml+xml" => BodyKind::Html,
        "" => {
            let start =
                String::from_utf8_lossy(&sniff[..sniff.len().min(512)]).to_ascii_lowercase();
            let start = start.trim_start();
            if start.starts_with("<!doctype html") || start.starts_with("<html") {
                BodyKind::Html
            } else {
                match std::str::from_utf8(sniff) {
                    Ok(_) => BodyKind::Text,
                    // Cut inside a char at the end of the sniff window.
                    Err(e) if e.error_len().is_none() => BodyKind::Text,
                    Err(_) => BodyKind::Binary,
                }
            }
        }
        m if m.starts_with("text/")
            || m.ends_with("+json")
            || m.ends_with("+xml")
            || matches!(
                m,
                "application/json"
                    | "application/xml"
                    | "application/javascript"
                    | "application/ecmascript"
                    | "application/x-javascript"
                    | "application/toml"
                    | "application/yaml"
                    | "application/x-yaml"
                    | "application/x-sh"
                    | "application/sql"
                    | "application/graphql"
            ) =>
        {
            BodyKind::Text
        }
        _ => BodyKind::Binary,
    }
}

async fn read_body(
    mut response: reqwest::Response,
    url: Url,
    chain: Vec<String>,
    limits: &FetchLimits,
) -> Result<ToolOutput, ToolError> {
    let status = response.status();
    let content_type = response
        .headers()
        .get(CONTENT_TYPE)
        .map(|v: &HeaderValue| escape_bytes(v.as_bytes(), 200));
    let mut body: Vec<u8> = Vec::new();
    let mut cut = false;
    while let Some(chunk) = response.chunk().await.map_err(|e| {
        if e.is_timeout() {
            ToolError::FetchTimeout {
                url: show_url(url.as_str()),
                timeout: limits.timeout,
            }
        } else {
            ToolError::Fetch {
                url: show_url(url.as_str()),
                reason: format!("reading the body failed: {}", error_chain(&e)),
            }
        }
    })? {
        let room = limits.max_bytes - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            cut = true;
            break;
        }
        body.extend_from_slice(&chunk);
    }
    drop(response);

    let kind = body_kind(content_type.as_deref(), &body);
    let mut head = String::new();
    head.push_str(&format!("URL: {}\n", show_url(url.as_str())));
    head.push_str(&format!(
        "Status: {} {}\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    ));
    head.push_str(&format!(
        "Content-Type: {}\n",
        content_type.as_deref().unwrap_or("(none)")
    ));
    if cut {
        head.push_str(&format!(
            "Bytes: {} (stopped at max_bytes; the rest was not fetched)\n",
            body.len()
        ));
    } else {
        head.push_str(&format!("Bytes: {}\n", body.len()));
    }
    if !chain.is_empty() {
        head.push_str(&format!(
            "Redirects: {} ({} -> {})\n",
            chain.len(),
            chain.join(" -> "),
            show_url(url.as_str())
        ));
    }
    head.push('\n');

    let text = match kind {
        BodyKind::Binary => format!(
            "binary content ({} bytes{}, not shown)\n",
            body.len(),
            content_type
                .as_deref()
                .map(|c| format!(" of {c}"))
                .unwrap_or_default()
        ),
        BodyKind::Text => String::from_utf8_lossy(&body).into_owned(),
        BodyKind::Html => {
            let (text, how) = html_to_text(body).await?;
            match how {
                Rendering::Rendered => {}
                Rendering::Stripped => head.insert_str(
                    head.len() - 1,
                    "Note: the HTML is nested too deeply to render; tags were stripped\n",
                ),
            }
            text
        }
    };
    let mut out = cap_text(
        &text,
        limits.max_bytes,
        "fetch a more specific URL or ask for a larger max_bytes",
    );
    out.text.insert_str(0, &head);
    out.truncated |= cut;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vetted(url: &str, host: &str, addrs: &[&str]) -> VettedFetch {
        VettedFetch {
            url: url.into(),
            host: host.into(),
            addrs: addrs.iter().map(|a| a.parse().unwrap()).collect(),
        }
    }

    #[test]
    fn a_literal_ip_must_be_one_of_the_vetted_addresses() {
        let v = vetted("http://127.0.0.1:8080/", "127.0.0.1", &["127.0.0.2:8080"]);
        let err = check_vetted(&v).unwrap_err();
        assert!(matches!(err, ToolError::InvalidUrl { .. }), "{err}");
        let v = vetted("http://127.0.0.1:8080/", "127.0.0.1", &["127.0.0.1:8080"]);
        assert!(check_vetted(&v).is_ok());
        let v = vetted("http://[::1]:8080/", "::1", &["[::1]:8080"]);
        assert!(check_vetted(&v).is_ok());
    }

    #[test]
    fn host_scheme_and_empty_addresses_are_checked() {
        for v in [
            vetted("http://a.test/", "b.test", &["192.0.2.1:80"]),
            vetted("ftp://a.test/", "a.test", &["192.0.2.1:21"]),
            vetted("http://a.test/", "a.test", &[]),
            vetted("not a url", "a.test", &["192.0.2.1:80"]),
        ] {
            assert!(check_vetted(&v).is_err(), "{v:?}");
        }
    }

    #[test]
    fn pinned_addresses_take_the_urls_port() {
        let v = vetted(
            "https://a.test/x",
            "a.test",
            &["192.0.2.1:0", "192.0.2.2:80"],
        );
        let url = check_vetted(&v).unwrap();
        assert_eq!(
            pinned_addrs(&v, &url),
            vec![
                "192.0.2.1:443".parse::<SocketAddr>().unwrap(),
                "192.0.2.2:443".parse().unwrap()
            ]
        );
    }

    #[test]
    fn body_kinds() {
        assert_eq!(
            body_kind(Some("text/html; charset=utf-8"), b"<p>"),
            BodyKind::Html
        );
        assert_eq!(body_kind(Some("application/json"), b"{}"), BodyKind::Text);
        assert_eq!(body_kind(Some("text/plain"), b"a\0b"), BodyKind::Binary);
        assert_eq!(body_kind(Some("image/png"), b"\x89PNG"), BodyKind::Binary);
        assert_eq!(body_kind(None, b"<!DOCTYPE html><p>x"), BodyKind::Html);
        assert_eq!(body_kind(None, b"plain words"), BodyKind::Text);
        assert_eq!(body_kind(None, b"\xff\xfe\xfd"), BodyKind::Binary);
    }
}
