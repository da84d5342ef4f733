//! The DNS stub a sandbox's `/etc/resolv.conf` names. It never forwards:
//! an `A` question for a well-formed name is answered with the name's
//! synthetic address ([`SyntheticMap`]); `AAAA` and every other type get an
//! empty answer (clients fall back to IPv4); a name that is not a valid DNS
//! name gets NXDOMAIN; a malformed message gets FORMERR or nothing.

use std::sync::Arc;

use tokio::net::UdpSocket;
use tollgate_policy::network::DnsName;

use crate::synth::SyntheticMap;

/// Seconds a client may keep an answer (the map is stable for the session).
pub const ANSWER_TTL: u32 = 300;

const TYPE_A: u16 = 1;
const CLASS_IN: u16 = 1;
const RCODE_FORMERR: u8 = 1;
const RCODE_SERVFAIL: u8 = 2;
const RCODE_NXDOMAIN: u8 = 3;
const RCODE_NOTIMP: u8 = 4;

/// Answers on `sock` until it fails.
pub async fn serve_dns(map: Arc<SyntheticMap>, sock: UdpSocket) {
    let mut buf = [0u8; 512];
    while let Ok((n, peer)) = sock.recv_from(&mut buf).await {
        if let Some(out) = answer(&map, &buf[..n]) {
            let _ = sock.send_to(&out, peer).await;
        }
    }
}

/// The reply to one query message, or `None` for bytes not worth one.
pub fn answer(map: &SyntheticMap, q: &[u8]) -> Option<Vec<u8>> {
    if q.len() < 12 || q[2] & 0x80 != 0 {
        return None; // too short, or itself a response
    }
    let opcode = (q[2] >> 3) & 0x0f;
    let qdcount = u16::from_be_bytes([q[4], q[5]]);
    if opcode != 0 {
        return Some(header_only(q, RCODE_NOTIMP));
    }
    if qdcount != 1 {
        return Some(header_only(q, RCODE_FORMERR));
    }
    let Some((name, end)) = read_qname(q, 12) else {
        return Some(header_only(q, RCODE_FORMERR));
    };
    if q.len() < end + 4 {
        return Some(header_only(q, RCODE_FORMERR));
    }
    let qtype = u16::from_be_bytes([q[end], q[end + 1]]);
    let qclass = u16::from_be_bytes([q[end + 2], q[end + 3]]);
    let question = &q[12..end + 4];
    let Ok(name) = DnsName::parse(&name) else {
        return Some(reply(q, question, RCODE_NXDOMAIN, None));
    };
    if qtype != TYPE_A || qclass != CLASS_IN {
        return Some(reply(q, question, 0, None));
    }
    match map.address_for(&name) {
        Some(a) => Some(reply(q, question, 0, Some(a.octets()))),
        None => Some(reply(q, question, RCODE_SERVFAIL, None)),
    }
}

/// The question's name as dotted text (labels of printable ASCII only; no
/// compression pointers in a question), and where it ends.
fn read_qname(q: &[u8], mut at: usize) -> Option<(String, usize)> {
    let mut name = String::new();
    loop {
        let len = usize::from(*q.get(at)?);
        at += 1;
        if len == 0 {
            break;
        }
        if len > 63 {
            return None;
        }
        let label = q.get(at..at + len)?;
        if !label.iter().all(|b| b.is_ascii_graphic() && *b != b'.') {
            return None;
        }
        if !name.is_empty() {
            name.push('.');
        }
        name.push_str(std::str::from_utf8(label).ok()?);
        at += len;
        if name.len() > 253 {
            return None;
        }
    }
    Some((name, at))
}

fn flags(q: &[u8], rcode: u8) -> [u8; 2] {
    // QR, the query's RD, AA; RA; the rcode.
    [0x80 | 0x04 | (q[2] & 0x01), 0x80 | rcode]
}

fn header_only(q: &[u8], rcode: u8) -> Vec<u8> {
    let f = flags(q, rcode);
    vec![q[0], q[1], f[0], f[1], 0, 0, 0, 0, 0, 0, 0, 0]
}

fn reply(q: &[u8], question: &[u8], rcode: u8, a: Option<[u8; 4]>) -> Vec<u8> {
    let f = flags(q, rcode);
    let an = u8::from(a.is_some());
    let mut out = vec![q[0], q[1], f[0], f[1], 0, 1, 0, an, 0, 0, 0, 0];
    out.extend_from_slice(question);
    if let Some(addr) = a {
        out.extend([0xc0, 12]); // the name: a pointer to the question's
        out.extend(TYPE_A.to_be_bytes());
        out.extend(CLASS_IN.to_be_bytes());
        out.extend(ANSWER_TTL.to_be_bytes());
        out.extend(4u16.to_be_bytes());
        out.extend(addr);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(name: &str, qtype: u16) -> Vec<u8> {
        let mut q = vec![0xab, 0xcd, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for l in name.split('.').filter(|l| !l.is_empty()) {
            q.push(l.len() as u8);
            q.extend(l.as_bytes());
        }
        q.push(0);
        q.extend(qtype.to_be_bytes());
        q.extend(CLASS_IN.to_be_bytes());
        q
    }

    #[test]
    fn a_questions_get_the_synthetic_address_and_others_nothing() {
        let m = SyntheticMap::default();
        let r = answer(&m, &query("Data.Example.", TYPE_A)).unwrap();
        assert_eq!(&r[..4], &[0xab, 0xcd, 0x85, 0x80]);
        assert_eq!(&r[6..8], &[0, 1], "one answer");
        let addr: [u8; 4] = r[r.len() - 4..].try_into().unwrap();
        let name = DnsName::parse("data.example").unwrap();
        assert_eq!(m.address_for(&name).unwrap().octets(), addr);
        let r = answer(&m, &query("data.example", 28)).unwrap();
        assert_eq!((r[3] & 0x0f, &r[6..8]), (0, &[0u8, 0][..]), "AAAA: empty");
    }

    #[test]
    fn bad_names_and_messages_are_refused_without_a_lookup() {
        let m = SyntheticMap::default();
        let r = answer(&m, &query("exa_mple.org", TYPE_A)).unwrap();
        assert_eq!(r[3] & 0x0f, RCODE_NXDOMAIN);
        let mut q = query("a.example", TYPE_A);
        q[4..6].copy_from_slice(&[0, 2]);
        assert_eq!(answer(&m, &q).unwrap()[3] & 0x0f, RCODE_FORMERR);
        let mut q = query("a.example", TYPE_A);
        q[12] = 0xc0; // a pointer where a label belongs
        assert_eq!(answer(&m, &q).unwrap()[3] & 0x0f, RCODE_FORMERR);
        let q = query("a.example", TYPE_A);
        assert_eq!(
            answer(&m, &q[..q.len() - 2]).unwrap()[3] & 0x0f,
            RCODE_FORMERR
        );
        assert!(answer(&m, &[0; 5]).is_none());
        let mut resp = query("a.example", TYPE_A);
        resp[2] |= 0x80;
        assert!(answer(&m, &resp).is_none(), "a response is not answered");
        let long = vec!["a".repeat(60); 5].join(".");
        assert_eq!(
            answer(&m, &query(&long, TYPE_A)).unwrap()[3] & 0x0f,
            RCODE_FORMERR
        );
    }
}
