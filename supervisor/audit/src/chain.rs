//! One file's hash chain, line by line: parsing a record, checking it
//! against its own hash and against the record before it.

use std::collections::HashSet;
use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::{Map, Value};

use crate::event::{Event, Parsed};
use crate::record::{GENESIS, HASH_SUFFIX_LEN, PREV_MEMBER_LEN, VERSION, chain_hash, is_hex64};

/// What is wrong with a line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("truncated last line (no newline at the end of the file, or cut mid-record)")]
    Truncated,
    #[error("empty line")]
    EmptyLine,
    #[error("bad JSON: {0}")]
    BadJson(String),
    #[error("not an audit record: {0}")]
    Malformed(String),
    #[error("record edited: its hash does not match its content")]
    Edited,
    #[error("record deleted: seq {found} where {expected} was expected ({})", missing(.expected, .found))]
    Deleted { expected: u64, found: u64 },
    #[error(
        "records reordered: seq {found} where {expected} was expected (seq {expected} is at line {at})"
    )]
    Reordered { expected: u64, found: u64, at: u64 },
    #[error("record inserted: seq {found} where {expected} was expected")]
    Inserted { expected: u64, found: u64 },
    #[error("record inserted or replaced: prev does not match the hash of the record before it")]
    PrevMismatch,
    #[error(
        "records missing at the end: the file ends at seq {records} with head {head}, but the expected head {expected} is not in it (truncated or rewritten)"
    )]
    HeadMismatch {
        records: u64,
        head: String,
        expected: String,
    },
    #[error(
        "records appended after the expected head {expected} (line {head_line}); the file goes on to seq {records}"
    )]
    AfterHead {
        expected: String,
        head_line: u64,
        records: u64,
    },
}

fn missing(expected: &u64, found: &u64) -> String {
    if *found == expected + 1 {
        format!("seq {expected} missing")
    } else {
        format!("seq {expected} to {} missing", found - 1)
    }
}

/// One parsed, chain-checked record.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub seq: u64,
    pub ts: String,
    pub session: String,
    pub event: String,
    /// The caller's fields (everything but the seven writer-owned members).
    pub fields: Map<String, Value>,
    pub prev: String,
    pub hash: String,
}

impl Record {
    /// The record's event, typed ([`Parsed::Unknown`] for a kind or fields
    /// this version cannot read).
    pub fn event(&self) -> Parsed {
        Event::read(&self.event, &self.fields)
    }
}

/// Checks lines one at a time against the chain (used by [`verify_file`] and
/// by `audit tail`).
#[derive(Debug, Clone)]
pub struct ChainChecker {
    next_seq: u64,
    prev: String,
}

impl Default for ChainChecker {
    fn default() -> ChainChecker {
        ChainChecker::new()
    }
}

impl ChainChecker {
    pub fn new() -> ChainChecker {
        ChainChecker {
            next_seq: 1,
            prev: GENESIS.to_string(),
        }
    }

    /// Records accepted so far.
    pub fn records(&self) -> u64 {
        self.next_seq - 1
    }

    /// Hash of the last accepted record.
    pub fn head(&self) -> &str {
        &self.prev
    }

    /// Checks the next line (without its `\n`) and advances on success.
    pub fn check(&mut self, line: &[u8]) -> Result<Record, Problem> {
        let rec = parse_line(line)?;
        if rec.seq != self.next_seq {
            return Err(if rec.seq > self.next_seq {
                Problem::Deleted {
                    expected: self.next_seq,
                    found: rec.seq,
                }
            } else {
                Problem::Inserted {
                    expected: self.next_seq,
                    found: rec.seq,
                }
            });
        }
        if rec.prev != self.prev {
            return Err(Problem::PrevMismatch);
        }
        self.next_seq += 1;
        self.prev.clone_from(&rec.hash);
        Ok(rec)
    }
}

/// Parses one line and checks it against its own hash (not the chain).
pub fn parse_line(line: &[u8]) -> Result<Record, Problem> {
    if line.is_empty() {
        return Err(Problem::EmptyLine);
    }
    let members = match serde_json::from_slice::<TopLevel>(line) {
        Ok(t) => t.0,
        Err(e) => return Err(Problem::BadJson(e.to_string())),
    };
    let mut seen = HashSet::new();
    for (k, _) in &members {
        if !seen.insert(k.as_str()) {
            return Err(Problem::Malformed(format!("duplicate member {k:?}")));
        }
    }
    let mut map: Map<String, Value> = members.into_iter().collect();
    let v = map.remove("v").and_then(|v| v.as_u64());
    if v != Some(VERSION) {
        return Err(Problem::Malformed(format!(
            "\"v\" must be {VERSION} (this verifier knows version {VERSION} only)"
        )));
    }
    let seq = take_u64(&mut map, "seq")?;
    let ts = take_str(&mut map, "ts")?;
    let session = take_str(&mut map, "session")?;
    let event = take_str(&mut map, "event")?;
    let prev = take_str(&mut map, "prev")?;
    let hash = take_str(&mut map, "hash")?;
    if !is_hex64(prev.as_bytes()) || !is_hex64(hash.as_bytes()) {
        return Err(Problem::Malformed(
            "prev and hash must be 64 lowercase hex digits".to_string(),
        ));
    }
    // The layout the hash is defined over: {"v":1,"seq":…, …,"prev":"…","hash":"…"}
    let min = 13 + PREV_MEMBER_LEN + HASH_SUFFIX_LEN;
    let n = line.len();
    let layout_ok = n >= min
        && line.starts_with(b"{\"v\":1,\"seq\":")
        && &line[n - HASH_SUFFIX_LEN..n - HASH_SUFFIX_LEN + 9] == b",\"hash\":\""
        && &line[n - HASH_SUFFIX_LEN + 9..n - 2] == hash.as_bytes()
        && &line[n - 2..] == b"\"}"
        && &line[n - HASH_SUFFIX_LEN - PREV_MEMBER_LEN..][..9] == b",\"prev\":\""
        && &line[n - HASH_SUFFIX_LEN - PREV_MEMBER_LEN + 9..][..64] == prev.as_bytes()
        && line[n - HASH_SUFFIX_LEN - 1] == b'"';
    if !layout_ok {
        return Err(Problem::Malformed(
            "members out of order: a record starts {\"v\":1,\"seq\": and ends ,\"prev\":\"…\",\"hash\":\"…\"}"
                .to_string(),
        ));
    }
    let mut body = Vec::with_capacity(n - HASH_SUFFIX_LEN + 1);
    body.extend_from_slice(&line[..n - HASH_SUFFIX_LEN]);
    body.push(b'}');
    if chain_hash(&prev, &body) != hash {
        return Err(Problem::Edited);
    }
    Ok(Record {
        seq,
        ts,
        session,
        event,
        fields: map,
        prev,
        hash,
    })
}

fn take_u64(map: &mut Map<String, Value>, key: &str) -> Result<u64, Problem> {
    map.remove(key)
        .and_then(|v| v.as_u64())
        .ok_or_else(|| Problem::Malformed(format!("missing or non-integer {key:?}")))
}

fn take_str(map: &mut Map<String, Value>, key: &str) -> Result<String, Problem> {
    match map.remove(key) {
        Some(Value::String(s)) => Ok(s),
        _ => Err(Problem::Malformed(format!("missing or non-string {key:?}"))),
    }
}

/// A top-level JSON object as its members in order, duplicates kept (serde_json's
/// map would silently keep only the last of two equal keys).
struct TopLevel(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for TopLevel {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<TopLevel, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TopLevel;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<TopLevel, A::Error> {
                let mut members = Vec::new();
                while let Some((k, v)) = a.next_entry::<String, Value>()? {
                    members.push((k, v));
                }
                Ok(TopLevel(members))
            }
        }
        d.deserialize_map(V)
    }
}

/// Splits a file's bytes into lines: (line without `\n`, has newline).
pub(crate) fn lines(data: &[u8]) -> impl Iterator<Item = (&[u8], bool)> {
    let mut pos = 0;
    std::iter::from_fn(move || {
        if pos >= data.len() {
            return None;
        }
        let rest = &data[pos..];
        match rest.iter().position(|&b| b == b'\n') {
            Some(i) => {
                pos += i + 1;
                Some((&rest[..i], true))
            }
            None => {
                pos = data.len();
                Some((rest, false))
            }
        }
    })
}

/// The records of a file's bytes that verify, up to the first break.
pub(crate) fn records(data: &[u8]) -> impl Iterator<Item = Record> + '_ {
    let mut checker = ChainChecker::new();
    lines(data).map_while(move |(line, has_newline)| {
        if has_newline {
            checker.check(line).ok()
        } else {
            None
        }
    })
}
