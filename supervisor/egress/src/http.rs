//! The HTTP proxy: `CONNECT host:port` for TLS (and anything else), and
//! absolute-URI requests for plain HTTP (`GET http://host/path`), whose
//! `Host` must be the decided host. A refusal is `403` with a one-line
//! body and `X-Tollgate-Refused: host=…; port=…; rule=…`.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tollgate_policy::network::{NetHost, split_port};

use crate::Proxy;
use crate::connect::{self, RULE_CAP, RULE_HOST};

const RULE_BAD: &str = "network:bad-request";
use crate::gate::{ConnRequest, ConnectionGate, Refusal, Via};
use crate::head::read_head;
use crate::plain::Requests;

/// Accepts on `listener` until it fails; one task per connection.
pub async fn serve_http<G: ConnectionGate>(proxy: Arc<Proxy<G>>, listener: TcpListener) {
    while let Ok((s, peer)) = listener.accept().await {
        let proxy = Arc::clone(&proxy);
        tokio::spawn(async move { handle(proxy, s, peer).await });
    }
}

/// A request's line, parsed.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    via: Via,
    host: NetHost,
    port: u16,
    /// Plain HTTP: the origin-form request line to send upstream.
    line: Option<String>,
}

async fn handle<G: ConnectionGate>(proxy: Arc<Proxy<G>>, mut s: TcpStream, peer: SocketAddr) {
    let Some(_slot) = proxy.slot() else {
        let why = format!(
            "the session has {} connections open, the most one session may hold",
            proxy.limits.max_connections
        );
        proxy.gate.bad_request(&proxy.session, peer, &why);
        let _ = s.write_all(&bad_response(RULE_CAP, &why)).await;
        return;
    };
    let l = &proxy.limits;
    let (head, rest) = match read_head(&mut s, l.max_head_bytes, l.head_timeout).await {
        Ok(h) => h,
        Err(why) => return refuse_bad(&proxy, s, peer, &why).await,
    };
    let text = String::from_utf8_lossy(&head).into_owned();
    let target = match parse_line(&text).and_then(|t| {
        let host = proxy.host_for(t.host)?;
        Ok(Target { host, ..t })
    }) {
        Ok(t) => t,
        Err(why) => return refuse_bad(&proxy, s, peer, &why).await,
    };
    let req = ConnRequest {
        session: proxy.session.clone(),
        host: target.host.clone(),
        port: target.port,
        via: target.via,
        peer,
    };
    if let Some(line) = &target.line {
        if let Err(r) = check_host_header(&text, &req) {
            proxy.gate.refused(&req, &r);
            let _ = s.write_all(&forbidden(&req, &r)).await;
            return;
        }
        plain(&proxy, &req, s, &text, line, &rest).await;
    } else {
        tunnel(&proxy, &req, s, &rest).await;
    }
}

async fn refuse_bad<G: ConnectionGate>(
    p: &Arc<Proxy<G>>,
    mut s: TcpStream,
    peer: SocketAddr,
    why: &str,
) {
    p.gate.bad_request(&p.session, peer, why);
    let _ = s.write_all(&bad_response(RULE_BAD, why)).await;
}

async fn tunnel<G: ConnectionGate>(
    p: &Arc<Proxy<G>>,
    req: &ConnRequest,
    mut s: TcpStream,
    rest: &[u8],
) {
    let up = match connect::open(p, req).await {
        Ok(u) => u,
        Err(r) => {
            let _ = s.write_all(&forbidden(req, &r)).await;
            return;
        }
    };
    if s.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await
        .is_err()
    {
        return;
    }
    let mut early = rest.to_vec();
    if early.is_empty() {
        match connect::first_bytes(p, req, &mut s, &up).await {
            Ok(b) => early = b,
            Err(r) => {
                p.gate.refused(req, &r);
                return; // the tunnel is up: closing it is the refusal
            }
        }
    }
    connect::deliver(p, req, s, up, early).await;
}

async fn plain<G: ConnectionGate>(
    p: &Arc<Proxy<G>>,
    req: &ConnRequest,
    mut s: TcpStream,
    head: &str,
    line: &str,
    rest: &[u8],
) {
    // The first request's body framed, every later request checked.
    let guard = match Requests::after(head, true, p.limits.max_head_bytes) {
        Ok(g) => g.stripping(p.secrets.clone()),
        Err(r) => {
            p.gate.refused(req, &r);
            let _ = s.write_all(&forbidden(req, &r)).await;
            return;
        }
    };
    let up = match connect::open(p, req).await {
        Ok(u) => u,
        Err(r) => {
            let _ = s.write_all(&forbidden(req, &r)).await;
            return;
        }
    };
    let mut out = upstream_head(head, line).into_bytes();
    if let Some(secrets) = &p.secrets {
        match strip_placeholders(p, req, secrets, &out) {
            Ok(h) => out = h,
            Err(r) => {
                let _ = s.write_all(&forbidden(req, &r)).await;
                return;
            }
        }
    }
    let flow = connect::Flow {
        early: out,
        guard: Some((guard, rest.to_vec())),
    };
    connect::relay_flow(p, req, s, up, flow).await;
}

/// A plain request never carries a secret: each placeholder is stripped
/// and recorded (docs/THREAT_MODEL.md "Secrets"); a head framed two ways
/// is refused.
fn strip_placeholders<G: ConnectionGate>(
    p: &Arc<Proxy<G>>,
    req: &ConnRequest,
    secrets: &crate::SessionSecrets,
    head: &[u8],
) -> Result<Vec<u8>, Refusal> {
    use crate::secrets::rewrite::{Dest, Wire, request};
    let dest = Dest {
        host: &req.host,
        port: req.port,
        wire: Wire::Plain,
    };
    let out = request(secrets, &String::from_utf8_lossy(head), &dest).map_err(|why| {
        let r = Refusal {
            rule: crate::secrets::terminate::RULE_SECRET_REQUEST.to_string(),
            reason: why,
        };
        p.gate.refused(req, &r);
        r
    })?;
    for (name, why) in &out.stripped {
        p.gate
            .secret(req, None, crate::SecretUse::stripped(name, why));
    }
    Ok(out.head)
}

/// A request line as a refusal may show it: its first 120 characters,
/// escaped.
pub(crate) fn shown_line(line: &str) -> String {
    line.chars()
        .take(120)
        .collect::<String>()
        .escape_debug()
        .to_string()
}

/// The request line: `CONNECT host:port HTTP/1.x` or `METHOD
/// http://host[:port]/path HTTP/1.x`.
fn parse_line(head: &str) -> Result<Target, String> {
    let line = head.split("\r\n").next().unwrap_or("");
    let shown = || shown_line(line);
    let parts: Vec<&str> = line.split(' ').collect();
    let [method, target, version] = parts[..] else {
        return Err(format!("malformed request line {:?}", shown()));
    };
    if !version.starts_with("HTTP/1.")
        || method.is_empty()
        || !method.bytes().all(|b| b.is_ascii_uppercase())
    {
        return Err(format!("malformed request line {:?}", shown()));
    }
    if method == "CONNECT" {
        let (h, port) = split_port(target)?;
        let port = port.ok_or_else(|| format!("CONNECT {:?} has no port", shown()))?;
        return Ok(Target {
            via: Via::HttpConnect,
            host: NetHost::parse(h)?,
            port,
            line: None,
        });
    }
    let Some(after) = target.strip_prefix("http://") else {
        return Err(format!(
            "{:?} is not an absolute http:// request; use CONNECT for https",
            shown()
        ));
    };
    let end = after.find(['/', '?', '#']).unwrap_or(after.len());
    let (authority, path) = after.split_at(end);
    if authority.contains('@') {
        return Err("a URL with a user name or password is refused".into());
    }
    let (h, port) = split_port(authority)?;
    let path = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    };
    Ok(Target {
        via: Via::HttpPlain,
        host: NetHost::parse(h)?,
        port: port.unwrap_or(80),
        line: Some(format!("{method} {path} {version}")),
    })
}

/// A plain request's `Host`, when present, must be the decided host and port.
pub(crate) fn check_host_header(head: &str, req: &ConnRequest) -> Result<(), Refusal> {
    for h in head.split("\r\n").skip(1) {
        let Some((k, v)) = h.split_once(':') else {
            continue;
        };
        if !k.trim().eq_ignore_ascii_case("host") {
            continue;
        }
        let v = v.trim();
        let same = split_port(v).ok().is_some_and(|(host, port)| {
            port.unwrap_or(80) == req.port && NetHost::parse(host).is_ok_and(|h| h == req.host)
        });
        if !same {
            return Err(Refusal {
                rule: RULE_HOST.to_string(),
                reason: format!(
                    "the request's Host {:?} differs from {}, the host it was decided for",
                    v.escape_debug().to_string(),
                    req.target()
                ),
            });
        }
    }
    Ok(())
}

/// The head sent upstream: origin-form line, no proxy headers, one
/// request per connection asked for (`Connection: close`); a client that
/// sends another anyway has it checked ([`crate::plain`]).
pub(crate) fn upstream_head(head: &str, line: &str) -> String {
    let mut out = format!("{line}\r\n");
    for h in head.trim_end_matches("\r\n").split("\r\n").skip(1) {
        let k = h
            .split(':')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        if matches!(
            k.as_str(),
            "proxy-connection" | "proxy-authorization" | "connection" | "keep-alive"
        ) {
            continue;
        }
        out.push_str(h);
        out.push_str("\r\n");
    }
    out.push_str("Connection: close\r\n\r\n");
    out
}

/// The one-line body and header of a refusal.
pub fn forbidden(req: &ConnRequest, r: &Refusal) -> Vec<u8> {
    let body = format!(
        "network: refused {} ({})\n",
        req.target(),
        one_line(&r.reason)
    );
    format!(
        "HTTP/1.1 403 Forbidden\r\nX-Tollgate-Refused: host={}; port={}; rule={}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        req.host.url_host(),
        req.port,
        one_line(&r.rule),
        body.len()
    )
    .into_bytes()
}

fn bad_response(rule: &str, why: &str) -> Vec<u8> {
    let body = format!("network: refused ({})\n", one_line(why));
    format!(
        "HTTP/1.1 400 Bad Request\r\nX-Tollgate-Refused: rule={rule}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_lines_parse_or_are_refused() {
        let t = parse_line("CONNECT a.example:443 HTTP/1.1\r\n").unwrap();
        assert_eq!(
            (t.via, t.port, t.host.to_string()),
            (Via::HttpConnect, 443, "a.example".into())
        );
        let t = parse_line("GET http://A.example:8080/x?y HTTP/1.1\r\n").unwrap();
        assert_eq!(t.line.as_deref(), Some("GET /x?y HTTP/1.1"));
        assert_eq!(t.port, 8080);
        let t = parse_line("GET http://a.example HTTP/1.0\r\n").unwrap();
        assert_eq!((t.line.as_deref(), t.port), (Some("GET / HTTP/1.0"), 80));
        for bad in [
            "CONNECT a.example HTTP/1.1",
            "CONNECT  a.example:443 HTTP/1.1",
            "CONNECT a.example:99999 HTTP/1.1",
            "GET /local HTTP/1.1",
            "GET https://a.example/ HTTP/1.1",
            "GET http://u:p@a.example/ HTTP/1.1",
            "get http://a.example/ HTTP/1.1",
            "GET http://a.example/ SPDY/3",
            "\u{16}\u{3}\u{1}",
            "",
        ] {
            assert!(parse_line(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_refusal_names_host_port_and_rule_in_one_line() {
        let req = ConnRequest {
            session: "s".into(),
            host: NetHost::parse("evil.example").unwrap(),
            port: 443,
            via: Via::HttpConnect,
            peer: "127.0.0.1:1".parse().unwrap(),
        };
        let r = Refusal {
            rule: "network:unlisted".into(),
            reason: "evil.example:443 is not in [network] allow\nx".into(),
        };
        let text = String::from_utf8(forbidden(&req, &r)).unwrap();
        assert!(text.starts_with("HTTP/1.1 403 "), "{text}");
        assert!(
            text.contains(
                "X-Tollgate-Refused: host=evil.example; port=443; rule=network:unlisted\r\n"
            ),
            "{text}"
        );
        assert!(text.ends_with("\r\n\r\nnetwork: refused evil.example:443 (evil.example:443 is not in [network] allow x)\n"), "{text}");
    }
}
