//! The byte layout of one record: timestamps, JSON escaping, the hash.
//!
//! Everything here is pure (no I/O) so the writer and the verifier share one
//! definition of the format.

use std::io;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use sha2::{Digest, Sha256};

/// `prev` of the first record of every file: 64 ASCII zeros.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Keys the writer owns; a caller's field may not use them.
pub const RESERVED_KEYS: [&str; 7] = ["v", "seq", "ts", "session", "event", "prev", "hash"];

/// The record format version written in `"v"`.
pub const VERSION: u64 = 1;

/// `,"hash":"` + 64 hex + `"}`: the fixed-length tail of every line.
pub(crate) const HASH_SUFFIX_LEN: usize = 9 + 64 + 2;
/// `,"prev":"` + 64 hex + `"`: what precedes the hash member.
pub(crate) const PREV_MEMBER_LEN: usize = 9 + 64 + 1;

/// A UTC instant with microsecond precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Timestamp {
    secs: i64,
    micros: u32,
}

impl Timestamp {
    pub fn now() -> Timestamp {
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => Timestamp {
                secs: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                micros: d.subsec_micros(),
            },
            // A clock before 1970: record the epoch rather than fail the write.
            Err(_) => Timestamp { secs: 0, micros: 0 },
        }
    }

    pub fn from_unix(secs: i64, micros: u32) -> Timestamp {
        Timestamp {
            secs,
            micros: micros.min(999_999),
        }
    }

    fn parts(self) -> (i64, u32, u32, u32, u32, u32) {
        let days = self.secs.div_euclid(86_400);
        let rem = self.secs.rem_euclid(86_400);
        let (y, m, d) = civil_from_days(days);
        let h = u32::try_from(rem / 3600).unwrap_or(0);
        let mi = u32::try_from((rem % 3600) / 60).unwrap_or(0);
        let s = u32::try_from(rem % 60).unwrap_or(0);
        (y, m, d, h, mi, s)
    }

    /// `2026-11-29T21:47:37.123456Z`
    pub fn rfc3339(self) -> String {
        let (y, m, d, h, mi, s) = self.parts();
        format!(
            "{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{:06}Z",
            self.micros
        )
    }

    /// `20261129T214737.123456Z`: for file names (no colons, sorts by time).
    pub fn compact(self) -> String {
        let (y, m, d, h, mi, s) = self.parts();
        format!("{y:04}{m:02}{d:02}T{h:02}{mi:02}{s:02}.{:06}Z", self.micros)
    }
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian
/// calendar (Howard Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11]
    let d = doy - (153 * mp + 2) / 5 + 1; // [1, 31]
    let m = if mp < 10 { mp + 3 } else { mp - 9 }; // [1, 12]
    let y = yoe + era * 400 + i64::from(m <= 2);
    (
        y,
        u32::try_from(m).unwrap_or(1),
        u32::try_from(d).unwrap_or(1),
    )
}

/// Characters JSON would let through raw but that a terminal or an editor may
/// act on: DEL and the C1 controls (a C1 CSI starts an escape sequence on some
/// terminals), and the invisible/bidirectional formatting characters used to
/// make a log line read differently from what it holds.
pub(crate) fn needs_extra_escape(c: char) -> bool {
    matches!(c,
        '\u{7f}'..='\u{9f}'
        | '\u{061c}'
        | '\u{180e}'
        | '\u{200b}'..='\u{200f}'
        | '\u{2028}'..='\u{202e}'
        | '\u{2060}'..='\u{2069}'
        | '\u{feff}'
        | '\u{fff9}'..='\u{fffb}')
}

/// serde_json's compact output, plus `\uXXXX` escapes for the characters of
/// [`needs_extra_escape`]. The result is still plain JSON and parses back to
/// the same strings.
struct SafeFormatter;

impl serde_json::ser::Formatter for SafeFormatter {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        if fragment.bytes().all(|b| b < 0x7f) {
            return writer.write_all(fragment.as_bytes());
        }
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            if needs_extra_escape(c) {
                writer.write_all(&fragment.as_bytes()[start..i])?;
                // All escaped characters are in the BMP: one \uXXXX each.
                write!(writer, "\\u{:04x}", u32::from(c))?;
                start = i + c.len_utf8();
            }
        }
        writer.write_all(&fragment.as_bytes()[start..])
    }
}

/// Appends the JSON encoding of `value` to `out`, escaped as the log needs.
pub(crate) fn write_json<T: Serialize + ?Sized>(
    out: &mut Vec<u8>,
    value: &T,
) -> Result<(), serde_json::Error> {
    let mut ser = serde_json::Serializer::with_formatter(out, SafeFormatter);
    value.serialize(&mut ser)
}

/// A JSON value as one line, escaped as the log writes it (no raw control,
/// C1 or bidirectional characters): safe to show on a terminal.
pub fn to_safe_json<T: Serialize + ?Sized>(value: &T) -> String {
    let mut out = Vec::new();
    match write_json(&mut out, value) {
        Ok(()) => String::from_utf8_lossy(&out).into_owned(),
        Err(e) => format!("<unserialisable: {e}>"),
    }
}

/// sha256(prev_hex ‖ body) as 64 lowercase hex, where `body` is the line
/// without its hash member (ending in `"}`).
pub fn chain_hash(prev_hex: &str, body: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(prev_hex.as_bytes());
    h.update(body);
    hex::encode(h.finalize())
}

pub(crate) fn is_hex64(s: &[u8]) -> bool {
    s.len() == 64 && s.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Builds the complete line (with `\n`) for one record and returns it with
/// its hash. `middle` is `,"session":…,"event":…` followed by the caller's
/// fields, each member starting with a comma, already encoded.
pub(crate) fn build_line(seq: u64, ts: Timestamp, middle: &[u8], prev: &str) -> (Vec<u8>, String) {
    let ts = ts.rfc3339();
    let mut line =
        Vec::with_capacity(40 + ts.len() + middle.len() + PREV_MEMBER_LEN + HASH_SUFFIX_LEN + 2);
    line.extend_from_slice(b"{\"v\":1,\"seq\":");
    line.extend_from_slice(seq.to_string().as_bytes());
    line.extend_from_slice(b",\"ts\":\"");
    line.extend_from_slice(ts.as_bytes());
    line.push(b'"');
    line.extend_from_slice(middle);
    line.extend_from_slice(b",\"prev\":\"");
    line.extend_from_slice(prev.as_bytes());
    line.extend_from_slice(b"\"}");
    let hash = chain_hash(prev, &line);
    line.pop(); // the closing brace goes after the hash member
    line.extend_from_slice(b",\"hash\":\"");
    line.extend_from_slice(hash.as_bytes());
    line.extend_from_slice(b"\"}\n");
    (line, hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_match_known_days() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
        assert_eq!(civil_from_days(20_786), (2026, 11, 29));
    }

    #[test]
    fn timestamps_format_with_microseconds() {
        // 2026-11-29T21:47:37.000123Z
        let t = Timestamp::from_unix(20_786 * 86_400 + 21 * 3600 + 47 * 60 + 37, 123);
        assert_eq!(t.rfc3339(), "2026-11-29T21:47:37.000123Z");
        assert_eq!(t.compact(), "20261129T214737.000123Z");
        assert_eq!(
            Timestamp::from_unix(0, 0).rfc3339(),
            "1970-01-01T00:00:00.000000Z"
        );
    }

    #[test]
    fn safe_json_escapes_controls_c1_and_bidi_but_roundtrips() {
        let s = "a\nb\u{1b}[31m\u{7f}\u{9b}x\u{202e}gnp.exe\u{2066}é✓";
        let enc = to_safe_json(s);
        assert_eq!(
            enc,
            "\"a\\nb\\u001b[31m\\u007f\\u009bx\\u202egnp.exe\\u2066é✓\""
        );
        let back: String = serde_json::from_str(&enc).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn line_layout_and_hash_are_as_documented() {
        let t = Timestamp::from_unix(0, 5);
        let (line, hash) = build_line(1, t, b",\"session\":\"s\",\"event\":\"e\",\"k\":1", GENESIS);
        let text = String::from_utf8(line).unwrap();
        let expected_body = format!(
            "{{\"v\":1,\"seq\":1,\"ts\":\"1970-01-01T00:00:00.000005Z\",\"session\":\"s\",\"event\":\"e\",\"k\":1,\"prev\":\"{GENESIS}\"}}"
        );
        let mut h = Sha256::new();
        h.update(GENESIS.as_bytes());
        h.update(expected_body.as_bytes());
        assert_eq!(hash, hex::encode(h.finalize()));
        let expected_line = format!(
            "{},\"hash\":\"{hash}\"}}\n",
            &expected_body[..expected_body.len() - 1]
        );
        assert_eq!(text, expected_line);
        assert!(is_hex64(hash.as_bytes()));
    }
}
