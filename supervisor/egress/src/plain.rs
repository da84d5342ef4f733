//! Plain HTTP request by request, on the client's side of a relayed
//! connection (docs/THREAT_MODEL.md "Network"): the first request's body
//! is framed (`Content-Length` or chunked; both, or another transfer
//! coding, is refused), and every later request on the same connection (a
//! kept-alive or pipelined one) has its head checked like the first: its
//! request line and `Host` must name the decided host and port, so one
//! allowed name cannot carry another after the first request either. In a
//! session with secrets every head, the first and each later one, has its
//! placeholders stripped (plain HTTP never carries a secret,
//! docs/THREAT_MODEL.md "Secrets"); the strips wait in [`Requests`] for
//! the relay to record them.

use std::sync::Arc;

use tollgate_policy::network::{NetHost, split_port};

use crate::SessionSecrets;
use crate::connect::RULE_HOST;
use crate::gate::{ConnRequest, Refusal};
use crate::secrets::rewrite::{self, Dest, Wire};
use crate::secrets::terminate::RULE_SECRET_REQUEST;

/// The rule of a request whose framing cannot be followed.
pub(crate) const RULE_FRAMING: &str = "network:bad-request";

/// Longest chunk-size line.
const MAX_CHUNK_LINE: usize = 1024;

fn refusal(rule: &str, reason: String) -> Refusal {
    Refusal {
        rule: rule.to_string(),
        reason,
    }
}

/// A request method then a space: the start of a plain HTTP request.
pub(crate) fn looks_like_http(early: &[u8]) -> bool {
    let method = early.iter().take_while(|b| b.is_ascii_uppercase()).count();
    (3..=10).contains(&method) && early.get(method) == Some(&b' ')
}

/// The start of a plain HTTP request, or too little of one to tell
/// (`GE`): a client cannot pass its head in small pieces unchecked.
pub(crate) fn may_be_http(early: &[u8]) -> bool {
    let method = early.iter().take_while(|b| b.is_ascii_uppercase()).count();
    looks_like_http(early) || (method == early.len() && (1..=10).contains(&method))
}

/// Where the current request's body is.
#[derive(Debug, PartialEq, Eq)]
enum Body {
    /// No body left: the next byte starts a request head.
    Done,
    Length(u64),
    Chunked(Chunk),
}

#[derive(Debug, PartialEq, Eq)]
enum Chunk {
    /// Reading a chunk-size line.
    Size(Vec<u8>),
    Data(u64),
    /// The CRLF after a chunk's data: bytes of it left.
    DataEnd(u8),
    /// Trailer lines after the last chunk; the length of the current one.
    Trailer(usize),
}

impl Body {
    /// The framing a request head declares.
    fn of(head: &str) -> Result<Body, String> {
        let (mut te, mut cl) = (Vec::new(), Vec::new());
        for h in head.split("\r\n").skip(1) {
            let Some((k, v)) = h.split_once(':') else {
                continue;
            };
            let k = k.trim().to_ascii_lowercase();
            if k == "transfer-encoding" {
                te.extend(v.split(',').map(|c| c.trim().to_ascii_lowercase()));
            } else if k == "content-length" {
                cl.extend(v.split(',').map(|c| c.trim().to_string()));
            }
        }
        if !te.is_empty() {
            if !cl.is_empty() {
                return Err("the request has both Transfer-Encoding and Content-Length".into());
            }
            if te.last().map(String::as_str) != Some("chunked") {
                return Err(format!(
                    "the request's transfer coding {te:?} does not end in chunked"
                ));
            }
            return Ok(Body::Chunked(Chunk::Size(Vec::new())));
        }
        let Some(first) = cl.first() else {
            return Ok(Body::Done);
        };
        if cl.iter().any(|c| c != first) || !first.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!(
                "the request's Content-Length {cl:?} is not one number"
            ));
        }
        match first.parse::<u64>() {
            Ok(0) => Ok(Body::Done),
            Ok(n) => Ok(Body::Length(n)),
            Err(_) => Err(format!(
                "the request's Content-Length {first:?} is not a number"
            )),
        }
    }

    /// How many bytes at the start of `buf` belong to this body.
    fn take(&mut self, buf: &[u8]) -> Result<usize, String> {
        match self {
            Body::Done => Ok(0),
            Body::Length(left) => {
                let n = (*left).min(buf.len() as u64);
                *left -= n;
                if *left == 0 {
                    *self = Body::Done;
                }
                Ok(n as usize)
            }
            Body::Chunked(_) => {
                let mut used = 0;
                while used < buf.len() && *self != Body::Done {
                    used += self.chunked_step(&buf[used..])?;
                }
                Ok(used)
            }
        }
    }

    /// One step of a chunked body; returns the bytes it used.
    fn chunked_step(&mut self, buf: &[u8]) -> Result<usize, String> {
        let Body::Chunked(c) = self else {
            return Ok(0);
        };
        let b = buf[0];
        let mut finished = false;
        let used = match c {
            Chunk::Size(line) if b == b'\n' => {
                let text = String::from_utf8_lossy(line);
                let size = text.split(';').next().unwrap_or("").trim();
                let n = u64::from_str_radix(size, 16)
                    .map_err(|_| format!("a chunk size {size:?} that is not hexadecimal"))?;
                *c = if n == 0 {
                    Chunk::Trailer(0)
                } else {
                    Chunk::Data(n)
                };
                1
            }
            Chunk::Size(line) => {
                if line.len() >= MAX_CHUNK_LINE {
                    return Err("a chunk-size line over 1 KiB".into());
                }
                if b != b'\r' {
                    line.push(b);
                }
                1
            }
            Chunk::Data(left) => {
                let n = (*left).min(buf.len() as u64);
                *left -= n;
                if *left == 0 {
                    *c = Chunk::DataEnd(2);
                }
                n as usize
            }
            Chunk::DataEnd(left) => {
                *left -= 1;
                if *left == 0 {
                    *c = Chunk::Size(Vec::new());
                }
                1
            }
            Chunk::Trailer(len) => {
                match b {
                    b'\n' if *len == 0 => finished = true,
                    b'\n' => *len = 0,
                    b'\r' => {}
                    _ if *len >= MAX_CHUNK_LINE => {
                        return Err("a trailer line over 1 KiB".into());
                    }
                    _ => *len += 1,
                }
                1
            }
        };
        if finished {
            *self = Body::Done;
        }
        Ok(used)
    }
}

/// The client's requests on one plain-HTTP connection.
#[derive(Debug)]
pub(crate) struct Requests {
    body: Body,
    head: Vec<u8>,
    /// The HTTP proxy's path: later heads go upstream in origin form without
    /// proxy headers, like the first; the transparent path sends them as
    /// they are.
    rewrite: bool,
    max_head: usize,
    /// The session's secrets, whose placeholders each head is stripped of.
    secrets: Option<Arc<SessionSecrets>>,
    /// `(secret, why)` of the placeholders stripped and not yet recorded.
    stripped: Vec<(String, String)>,
}

impl Requests {
    /// After the first head (checked and sent already): its body is next.
    pub(crate) fn after(head: &str, rewrite: bool, max_head: usize) -> Result<Requests, Refusal> {
        let body = Body::of(head).map_err(|why| refusal(RULE_FRAMING, why))?;
        Ok(Requests {
            body,
            head: Vec::new(),
            rewrite,
            max_head,
            secrets: None,
            stripped: Vec::new(),
        })
    }

    /// Before any head: the first is checked like every other.
    pub(crate) fn fresh(rewrite: bool, max_head: usize) -> Requests {
        Requests {
            body: Body::Done,
            head: Vec::new(),
            rewrite,
            max_head,
            secrets: None,
            stripped: Vec::new(),
        }
    }

    /// Every head from now on stripped of `secrets`' placeholders.
    pub(crate) fn stripping(mut self, secrets: Option<Arc<SessionSecrets>>) -> Requests {
        self.secrets = secrets;
        self
    }

    /// The placeholders stripped since the last call, for the record.
    pub(crate) fn take_stripped(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.stripped)
    }

    /// Takes the client's next bytes; returns what goes upstream, or the
    /// refusal of a request that may not (nothing of it is sent).
    pub(crate) fn feed(&mut self, mut buf: &[u8], req: &ConnRequest) -> Result<Vec<u8>, Refusal> {
        let mut out = Vec::with_capacity(buf.len());
        while !buf.is_empty() {
            if self.body != Body::Done {
                let n = self.body.take(buf).map_err(|why| {
                    refusal(
                        RULE_FRAMING,
                        format!("the request to {}: {why}", req.target()),
                    )
                })?;
                out.extend_from_slice(&buf[..n]);
                buf = &buf[n..];
                continue;
            }
            let b = buf[0];
            buf = &buf[1..];
            if self.head.is_empty() && (b == b'\r' || b == b'\n') {
                continue; // blank lines before a request line are ignored
            }
            self.head.push(b);
            if self.head.len() > self.max_head {
                let why = format!(
                    "a later request's head on the connection to {} is over {} bytes",
                    req.target(),
                    self.max_head
                );
                return Err(refusal(RULE_HOST, why));
            }
            if self.head.ends_with(b"\r\n\r\n") {
                out.extend(self.next_head(req)?);
            }
        }
        Ok(out)
    }

    /// A complete head: checked, framed, rewritten when the proxy's.
    fn next_head(&mut self, req: &ConnRequest) -> Result<Vec<u8>, Refusal> {
        let head = String::from_utf8_lossy(&std::mem::take(&mut self.head)).into_owned();
        let line = request_line(&head, req)?;
        crate::http::check_host_header(&head, req)?;
        self.body = Body::of(&head).map_err(|why| refusal(RULE_FRAMING, why))?;
        let out = if self.rewrite {
            crate::http::upstream_head(&head, &line)
        } else {
            head
        };
        let Some(secrets) = &self.secrets else {
            return Ok(out.into_bytes());
        };
        let dest = Dest {
            host: &req.host,
            port: req.port,
            wire: Wire::Plain,
        };
        let done = rewrite::request(secrets, &out, &dest)
            .map_err(|why| refusal(RULE_SECRET_REQUEST, why))?;
        self.stripped.extend(done.stripped);
        Ok(done.head)
    }
}

/// A later request's line: origin form, or absolute form naming the
/// decided host and port. Returns it in origin form.
fn request_line(head: &str, req: &ConnRequest) -> Result<String, Refusal> {
    let line = head.split("\r\n").next().unwrap_or("");
    let shown = || crate::http::shown_line(line);
    let parts: Vec<&str> = line.split(' ').collect();
    let [method, target, version] = parts[..] else {
        let why = format!(
            "a later request on the connection to {} has a malformed line {:?}",
            req.target(),
            shown()
        );
        return Err(refusal(RULE_FRAMING, why));
    };
    let Some(after) = target.strip_prefix("http://") else {
        return Ok(line.to_string());
    };
    let end = after.find(['/', '?', '#']).unwrap_or(after.len());
    let (authority, path) = after.split_at(end);
    let same = !authority.contains('@')
        && split_port(authority).ok().is_some_and(|(h, port)| {
            port.unwrap_or(80) == req.port && NetHost::parse(h).is_ok_and(|h| h == req.host)
        });
    if !same {
        let why = format!(
            "a later request on the connection names {:?}, but the connection was decided for {}; one allowed name cannot carry another",
            authority.escape_debug().to_string(),
            req.target()
        );
        return Err(refusal(RULE_HOST, why));
    }
    let path = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    };
    Ok(format!("{method} {path} {version}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::Via;

    fn req() -> ConnRequest {
        ConnRequest {
            session: "s".into(),
            host: NetHost::parse("ok.example").unwrap(),
            port: 80,
            via: Via::HttpPlain,
            peer: "127.0.0.1:1".parse().unwrap(),
        }
    }

    #[test]
    fn plain_http_is_told_from_other_first_bytes() {
        assert!(looks_like_http(b"GET / HTTP/1.1\r\n"));
        assert!(looks_like_http(b"OPTIONS * HTTP/1.1"));
        assert!(!looks_like_http(b"\x16\x03\x01\x02"));
        assert!(!looks_like_http(b"SSH-2.0-OpenSSH"));
        assert!(!looks_like_http(b"get / HTTP/1.1"));
        assert!(!looks_like_http(b""));
        assert!(may_be_http(b"GE") && may_be_http(b"GET /"));
        assert!(!may_be_http(b"") && !may_be_http(b"SSH-2.0") && !may_be_http(b"\x16\x03"));
    }

    #[test]
    fn bodies_are_framed_and_a_later_head_is_checked() {
        let r = req();
        let mut q =
            Requests::after("POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\n", true, 4096).unwrap();
        // The body holds what looks like a head: it is body, sent as is.
        assert_eq!(q.feed(b"GET h", &r).unwrap(), b"GET h");
        let out = q
            .feed(
                b"GET http://ok.example/b HTTP/1.1\r\nHost: ok.example\r\n\r\n",
                &r,
            )
            .unwrap();
        assert_eq!(
            out,
            b"GET /b HTTP/1.1\r\nHost: ok.example\r\nConnection: close\r\n\r\n"
        );
        let e = q
            .feed(b"GET /c HTTP/1.1\r\nHost: evil.example\r\n\r\n", &r)
            .unwrap_err();
        assert_eq!(e.rule, "network:host-header");
        let mut q = Requests::fresh(false, 4096);
        let e = q
            .feed(b"GET http://evil.example/ HTTP/1.1\r\n\r\n", &r)
            .unwrap_err();
        assert!(e.reason.contains("evil.example"), "{}", e.reason);
    }

    fn forge() -> (Arc<SessionSecrets>, String) {
        let binding = tollgate_policy::secrets::SecretBinding::parse(
            "forge",
            &["bound.example".to_string()],
            None,
            None,
        )
        .unwrap();
        let held = crate::SessionSecret {
            binding: Arc::new(binding),
            value: "REAL-unit-value".into(),
            env: Some("FORGE_TOKEN".into()),
            counters: Arc::default(),
        };
        let s = SessionSecrets::new("s", vec![held], &[]).unwrap();
        let ph = s.env()[0].1.clone();
        (Arc::new(s), ph)
    }

    #[test]
    fn a_later_head_loses_its_placeholders_and_says_so() {
        let r = req();
        let (secrets, ph) = forge();
        let mut q = Requests::after("GET / HTTP/1.1\r\nHost: ok.example\r\n\r\n", true, 4096)
            .unwrap()
            .stripping(Some(secrets));
        let later = format!(
            "GET http://ok.example/b HTTP/1.1\r\nHost: ok.example\r\nAuthorization: Bearer {ph}\r\nX-Kept: 1\r\n\r\n"
        );
        let out = q.feed(later.as_bytes(), &r).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "GET /b HTTP/1.1\r\nHost: ok.example\r\nX-Kept: 1\r\nConnection: close\r\n\r\n"
        );
        assert_eq!(
            q.take_stripped(),
            [(
                "forge".to_string(),
                "the secret is not bound to ok.example:80".to_string()
            )]
        );
        assert!(q.take_stripped().is_empty());
        // A tunnel's first head, as it is (no proxy rewrite), likewise.
        let (secrets, ph) = forge();
        let mut q = Requests::fresh(false, 4096).stripping(Some(secrets));
        let first = format!("GET / HTTP/1.1\r\nHost: ok.example\r\nX-Token: {ph}\r\n\r\n");
        let out = q.feed(first.as_bytes(), &r).unwrap();
        assert_eq!(out, b"GET / HTTP/1.1\r\nHost: ok.example\r\n\r\n");
        assert_eq!(q.take_stripped().len(), 1);
    }

    #[test]
    fn chunked_bodies_end_where_they_say() {
        let r = req();
        let mut q = Requests::after(
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            false,
            4096,
        )
        .unwrap();
        let body = b"3;x=y\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\nT: v\r\n\r\n";
        // Byte by byte: the state survives every split.
        let mut out = Vec::new();
        for b in body {
            out.extend(q.feed(&[*b], &r).unwrap());
        }
        assert_eq!(out, body);
        assert_eq!(q.body, Body::Done);
        let e = q
            .feed(b"GET / HTTP/1.1\r\nHost: evil.example\r\n\r\n", &r)
            .unwrap_err();
        assert_eq!(e.rule, "network:host-header");
        for bad in [
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        ] {
            assert!(Requests::after(bad, true, 4096).is_err(), "{bad}");
        }
        let mut q = Requests::after(
            "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            false,
            4096,
        )
        .unwrap();
        assert!(q.feed(b"zz\r\n", &r).is_err());
    }
}
