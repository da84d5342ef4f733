//! A request head on its way to a host (docs/THREAT_MODEL.md "Secrets"):
//! each placeholder in a header value (as written, or inside `Basic`
//! credentials, as git's credential exchange sends it) is replaced by its
//! value when the connection is TLS the proxy terminated toward a host the
//! secret is bound to, and the header line is dropped otherwise. A head
//! whose framing two parsers could read differently (`Transfer-Encoding`
//! with `Content-Length`, two lengths, a folded line, a bare CR or LF) is
//! refused, so no second request can hide in the first one's body.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use tollgate_policy::network::NetHost;
use tollgate_policy::secrets::SecretFormat;

use super::SessionSecrets;

/// How the request travels on from the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wire {
    /// Inside TLS the proxy terminated and opened again to the host.
    Tls,
    /// Plain HTTP: no secret is ever put in.
    Plain,
}

/// The head as sent on, and what happened to which secret.
#[derive(Debug)]
pub(crate) struct Rewritten {
    pub head: Vec<u8>,
    /// Names of the secrets put in.
    pub used: Vec<String>,
    /// `(name, why)` of the placeholders stripped.
    pub stripped: Vec<(String, String)>,
}

/// The connection a head is for.
pub(crate) struct Dest<'a> {
    pub host: &'a NetHost,
    pub port: u16,
    pub wire: Wire,
}

impl Dest<'_> {
    fn target(&self) -> String {
        format!("{}:{}", self.host.url_host(), self.port)
    }
}

/// Rewrites `head` (request line, header lines, blank line) for `dest`.
/// The error is why the request is refused.
pub(crate) fn request(s: &SessionSecrets, head: &str, dest: &Dest) -> Result<Rewritten, String> {
    let body = head
        .strip_suffix("\r\n\r\n")
        .ok_or("the request head does not end in a blank line")?;
    let mut lines = body.split("\r\n");
    let line = lines.next().unwrap_or("");
    let headers: Vec<(&str, &str)> = lines.map(split_header).collect::<Result<_, _>>()?;
    check_framing(line, &headers)?;
    if dest.wire == Wire::Tls {
        check_host(&headers, dest)?;
    }
    let mut out = Rewritten {
        head: format!("{line}\r\n").into_bytes(),
        used: Vec::new(),
        stripped: Vec::new(),
    };
    let injected = injected(s, dest);
    let set_here: Vec<&str> = injected
        .iter()
        .filter_map(|&i| s.held[i].secret.binding.header.as_deref())
        .collect();
    for (name, value) in &headers {
        if dest.wire == Wire::Tls && drops(name, &set_here) {
            continue;
        }
        if let Some(v) = secret_pass(s, dest, name, value, &mut out) {
            out.head
                .extend_from_slice(format!("{name}: {v}\r\n").as_bytes());
        }
    }
    if dest.wire == Wire::Tls {
        for &i in &injected {
            let h = &s.held[i].secret;
            let v = formatted(&h.binding.format, &h.value);
            let name = h.binding.header.as_deref().unwrap_or("Authorization");
            out.head
                .extend_from_slice(format!("{name}: {v}\r\n").as_bytes());
            note_use(&mut out, &h.binding.name);
        }
        let upgrade = wants_upgrade(&headers);
        out.head.extend_from_slice(if upgrade {
            b"Connection: Upgrade\r\n".as_slice()
        } else {
            b"Connection: close\r\n".as_slice()
        });
    }
    out.head.extend_from_slice(b"\r\n");
    for n in &out.used {
        if let Some(i) = s.held.iter().position(|h| h.name() == n) {
            s.count_use(i);
        }
    }
    for (n, _) in &out.stripped {
        if let Some(i) = s.held.iter().position(|h| h.name() == n) {
            s.count_strip(i);
        }
    }
    Ok(out)
}

fn split_header(l: &str) -> Result<(&str, &str), String> {
    let shown = || {
        l.chars()
            .take(60)
            .collect::<String>()
            .escape_debug()
            .to_string()
    };
    if l.starts_with([' ', '\t']) {
        return Err(format!(
            "a folded header line ({:?}) is refused (RFC 9112 5.2): one header per line",
            shown()
        ));
    }
    if l.contains(['\r', '\n', '\0']) {
        return Err(format!(
            "a bare CR, LF or NUL inside a header line ({:?}) is refused",
            shown()
        ));
    }
    let Some((k, v)) = l.split_once(':') else {
        return Err(format!("a header line without ':' ({:?})", shown()));
    };
    if !tollgate_policy::secrets::is_header_name(k) {
        return Err(format!("a header name {:?} is not a token", shown()));
    }
    Ok((k, v.trim_matches([' ', '\t'])))
}

/// `Transfer-Encoding` with `Content-Length`, or two different lengths:
/// the smuggling shapes (RFC 9112 6.3).
fn check_framing(line: &str, headers: &[(&str, &str)]) -> Result<(), String> {
    let is = |k: &str, want: &str| k.eq_ignore_ascii_case(want);
    let te = headers.iter().any(|(k, _)| is(k, "transfer-encoding"));
    let mut lengths: Vec<&str> = headers
        .iter()
        .filter(|(k, _)| is(k, "content-length"))
        .flat_map(|(_, v)| v.split(','))
        .map(str::trim)
        .collect();
    lengths.dedup();
    if te && !lengths.is_empty() {
        return Err(
            "a request with both Transfer-Encoding and Content-Length is refused (request smuggling)"
                .into(),
        );
    }
    if lengths.len() > 1 || lengths.iter().any(|v| v.parse::<u64>().is_err()) {
        return Err(format!(
            "a request with Content-Length {lengths:?} is refused: one decimal length"
        ));
    }
    if !line.ends_with(" HTTP/1.1") && !line.ends_with(" HTTP/1.0") {
        return Err("only HTTP/1.0 and HTTP/1.1 requests are carried here".into());
    }
    Ok(())
}

/// Inside a terminated connection the request's `Host` must be the host
/// the connection was decided (and its certificate verified) for: a
/// shared front end must not route a secret to another of its sites.
fn check_host(headers: &[(&str, &str)], d: &Dest) -> Result<(), String> {
    let hosts: Vec<&str> = headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("host"))
        .map(|(_, v)| *v)
        .collect();
    let [h] = hosts[..] else {
        return Err(format!(
            "a request to {} must carry one Host header; it carries {}",
            d.target(),
            hosts.len()
        ));
    };
    let same = tollgate_policy::network::split_port(h)
        .ok()
        .is_some_and(|(name, port)| {
            port.unwrap_or(d.port) == d.port && NetHost::parse(name).is_ok_and(|n| &n == d.host)
        });
    if same {
        Ok(())
    } else {
        Err(format!(
            "the request's Host {:?} differs from {}, the host this connection was decided for",
            h.escape_debug().to_string(),
            d.target()
        ))
    }
}

/// The secrets whose `header` the proxy sets on this request.
fn injected(s: &SessionSecrets, d: &Dest) -> Vec<usize> {
    (0..s.held.len())
        .filter(|&i| {
            let b = &s.held[i].secret.binding;
            b.header.is_some() && b.binds(d.host, d.port)
        })
        .collect()
}

/// Hop-by-hop headers and those the proxy sets itself are not sent on.
fn drops(name: &str, set_here: &[&str]) -> bool {
    let hop = [
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
    ];
    hop.iter().any(|h| name.eq_ignore_ascii_case(h))
        || set_here.iter().any(|h| name.eq_ignore_ascii_case(h))
}

fn wants_upgrade(headers: &[(&str, &str)]) -> bool {
    let has_upgrade = headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("upgrade"));
    let conn_says = headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("connection")
            && v.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
    });
    has_upgrade && conn_says
}

fn note_use(out: &mut Rewritten, name: &str) {
    if !out.used.iter().any(|n| n == name) {
        out.used.push(name.to_string());
    }
}

/// The header's value with each placeholder replaced, or `None` when the
/// line is dropped (a placeholder that may not go there).
fn secret_pass(
    s: &SessionSecrets,
    d: &Dest,
    name: &str,
    value: &str,
    out: &mut Rewritten,
) -> Option<String> {
    let basic = basic_credentials(name, value);
    let mut literal = value.to_string();
    let mut decoded = basic.clone();
    let mut changed_basic = false;
    let mut keep = true;
    for h in &s.held {
        let ph = h.placeholder();
        let in_basic = decoded.as_deref().is_some_and(|c| c.contains(&ph));
        if !literal.contains(&ph) && !in_basic {
            continue;
        }
        let b = &h.secret.binding;
        if d.wire == Wire::Tls && b.binds(d.host, d.port) {
            literal = literal.replace(&ph, &h.secret.value);
            if let Some(c) = decoded.as_mut().filter(|_| in_basic) {
                *c = c.replace(&ph, &h.secret.value);
                changed_basic = true;
            }
            note_use(out, &b.name);
        } else {
            keep = false;
            out.stripped
                .push((b.name.clone(), strip_reason(b.binds(d.host, d.port), d)));
        }
    }
    if !keep {
        return None;
    }
    Some(match decoded.filter(|_| changed_basic) {
        Some(c) => format!("Basic {}", STANDARD.encode(c)),
        None => literal,
    })
}

fn strip_reason(bound: bool, d: &Dest) -> String {
    if bound {
        format!(
            "a secret is put in only inside TLS the proxy terminates; this request to {} is plain HTTP",
            d.target()
        )
    } else {
        format!("the secret is not bound to {}", d.target())
    }
}

/// The user:password of `Authorization: Basic …`, decoded.
fn basic_credentials(name: &str, value: &str) -> Option<String> {
    if !name.eq_ignore_ascii_case("authorization")
        && !name.eq_ignore_ascii_case("proxy-authorization")
    {
        return None;
    }
    let (scheme, rest) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = STANDARD.decode(rest.trim()).ok()?;
    String::from_utf8(raw).ok()
}

/// The value as `format` writes it.
pub(crate) fn formatted(format: &SecretFormat, value: &str) -> String {
    match format {
        SecretFormat::Template { before, after } => format!("{before}{value}{after}"),
        SecretFormat::Basic => format!("Basic {}", STANDARD.encode(value)),
        SecretFormat::BasicUser(u) => format!("Basic {}", STANDARD.encode(format!("{u}:{value}"))),
    }
}
