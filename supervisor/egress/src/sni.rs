//! The server name of a TLS ClientHello (RFC 8446 4.1.2, RFC 6066 3), read
//! from the first record without decrypting anything.

/// What the first bytes a client sent say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hello {
    /// Not a TLS handshake record.
    NotTls,
    /// A handshake record, not all of it here yet.
    Incomplete,
    /// A ClientHello with no server_name extension.
    NoSni,
    Sni(String),
    /// A handshake record that is not a well-formed ClientHello.
    Malformed,
}

/// Reads `buf`, the first bytes a client sent.
pub fn client_hello(buf: &[u8]) -> Hello {
    if buf.is_empty() || buf[0] != 0x16 {
        return Hello::NotTls;
    }
    if buf.len() < 5 {
        return Hello::Incomplete;
    }
    let len = usize::from(u16::from_be_bytes([buf[3], buf[4]]));
    if buf.len() < 5 + len {
        return Hello::Incomplete;
    }
    parse_handshake(&buf[5..5 + len]).unwrap_or(Hello::Malformed)
}

/// A cursor over a byte slice; every read is bounds-checked.
struct Cur<'a>(&'a [u8]);

impl<'a> Cur<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<usize> {
        self.take(1).map(|b| usize::from(b[0]))
    }
    fn u16(&mut self) -> Option<usize> {
        self.take(2)
            .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
    }
    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()?;
        self.take(n)
    }
    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()?;
        self.take(n)
    }
}

fn parse_handshake(rec: &[u8]) -> Option<Hello> {
    let mut c = Cur(rec);
    if c.u8()? != 1 {
        return None; // not a ClientHello
    }
    let len = c.take(3)?;
    let len = (usize::from(len[0]) << 16) | (usize::from(len[1]) << 8) | usize::from(len[2]);
    let mut h = Cur(c.take(len)?);
    h.take(2 + 32)?; // legacy_version, random
    h.vec8()?; // legacy_session_id
    h.vec16()?; // cipher_suites
    h.vec8()?; // legacy_compression_methods
    if h.0.is_empty() {
        return Some(Hello::NoSni);
    }
    let mut exts = Cur(h.vec16()?);
    while !exts.0.is_empty() {
        let kind = exts.u16()?;
        let body = exts.vec16()?;
        if kind == 0 {
            return server_name(body);
        }
    }
    Some(Hello::NoSni)
}

fn server_name(body: &[u8]) -> Option<Hello> {
    let mut list = Cur(Cur(body).vec16()?);
    while !list.0.is_empty() {
        let kind = list.u8()?;
        let name = list.vec16()?;
        if kind == 0 {
            return Some(match std::str::from_utf8(name) {
                Ok(n) => Hello::Sni(n.to_string()),
                Err(_) => Hello::Malformed,
            });
        }
    }
    Some(Hello::NoSni)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ClientHello carrying `sni` (or none).
    pub(crate) fn hello(sni: Option<&str>) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend([7u8; 32]);
        body.extend([0, 0, 2, 0x13, 0x01, 1, 0]);
        let mut exts = Vec::new();
        if let Some(n) = sni {
            let n = n.as_bytes();
            let list_len = (n.len() + 3) as u16;
            exts.extend([0, 0]);
            exts.extend((list_len + 2).to_be_bytes());
            exts.extend(list_len.to_be_bytes());
            exts.push(0);
            exts.extend((n.len() as u16).to_be_bytes());
            exts.extend(n);
        }
        body.extend((exts.len() as u16).to_be_bytes());
        body.extend(exts);
        let mut hs = vec![1, 0];
        hs.extend((body.len() as u16).to_be_bytes());
        hs.extend(body);
        let mut rec = vec![0x16, 3, 1];
        rec.extend((hs.len() as u16).to_be_bytes());
        rec.extend(hs);
        rec
    }

    #[test]
    fn names_and_their_absence_are_read() {
        assert_eq!(
            client_hello(&hello(Some("a.example"))),
            Hello::Sni("a.example".into())
        );
        assert_eq!(client_hello(&hello(None)), Hello::NoSni);
        let h = hello(Some("a.example"));
        assert_eq!(client_hello(&h[..h.len() - 1]), Hello::Incomplete);
        assert_eq!(client_hello(b"GET / HTTP/1.1\r\n"), Hello::NotTls);
        let mut bad = h.clone();
        bad[5] = 2; // a ServerHello
        assert_eq!(client_hello(&bad), Hello::Malformed);
        let mut cut = h;
        cut[8] = 0xff; // a handshake longer than its record
        assert_eq!(client_hello(&cut), Hello::Malformed);
    }
}
