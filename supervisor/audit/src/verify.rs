//! Verification of a file's hash chain: names the first broken line and says
//! what is wrong with it.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::AuditError;
use crate::dir::{FileKind, list_logs};
use crate::missing::{NamedAs, named_by};
use crate::record::{GENESIS, HASH_SUFFIX_LEN, PREV_MEMBER_LEN, VERSION, chain_hash, is_hex64};

/// A chain that verified.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerifyOk {
    pub records: u64,
    /// Hash of the last record ([`GENESIS`] for an empty file).
    pub head: String,
}

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

/// Why a file did not verify.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Displays as `line N: <problem>`.
    #[error("line {line}: {problem}")]
    Broken {
        /// 1-based line number.
        line: u64,
        problem: Problem,
        /// The chain up to the line before.
        last_good: VerifyOk,
    },
}

impl VerifyError {
    /// The 1-based line named, if the chain (not the file system) is at fault.
    pub fn line(&self) -> Option<u64> {
        match self {
            VerifyError::Io { .. } => None,
            VerifyError::Broken { line, .. } => Some(*line),
        }
    }

    pub fn problem(&self) -> Option<&Problem> {
        match self {
            VerifyError::Io { .. } => None,
            VerifyError::Broken { problem, .. } => Some(problem),
        }
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

/// Verifies a file's chain. With `expected_head` (the hash recorded outside
/// the file when it was closed), also catches records cut from its end.
///
/// The first problem found is returned with its 1-based line: an edited
/// record (its hash no longer matches), a deleted one (a gap in `seq`), an
/// inserted or duplicated one (a `seq` already used, or a `prev` that does
/// not match), reordered records, a truncated last line, bad JSON, and a
/// head mismatch (named at the line after the last record).
pub fn verify_file(path: &Path, expected_head: Option<&str>) -> Result<VerifyOk, VerifyError> {
    let data = std::fs::read(path).map_err(|e| VerifyError::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    verify_bytes(&data, expected_head)
}

/// [`verify_file`] on bytes already read.
pub fn verify_bytes(data: &[u8], expected_head: Option<&str>) -> Result<VerifyOk, VerifyError> {
    let mut checker = ChainChecker::new();
    let mut head_line = None;
    let mut line_no = 0u64;
    let total = lines(data).count() as u64;
    for (line, has_newline) in lines(data) {
        line_no += 1;
        let problem = if !has_newline {
            Problem::Truncated
        } else {
            match checker.check(line) {
                Ok(rec) => {
                    if expected_head == Some(rec.hash.as_str()) {
                        head_line = Some(line_no);
                    }
                    continue;
                }
                Err(Problem::BadJson(_)) if line_no == total && is_eof_error(line) => {
                    Problem::Truncated
                }
                Err(Problem::Deleted { expected, found }) => {
                    match find_seq(data, line_no, expected) {
                        Some(at) => Problem::Reordered {
                            expected,
                            found,
                            at,
                        },
                        None => Problem::Deleted { expected, found },
                    }
                }
                Err(p) => p,
            }
        };
        return Err(VerifyError::Broken {
            line: line_no,
            problem,
            last_good: VerifyOk {
                records: checker.records(),
                head: checker.head().to_string(),
            },
        });
    }
    let ok = VerifyOk {
        records: checker.records(),
        head: checker.head().to_string(),
    };
    if let Some(expected) = expected_head
        && expected != ok.head
    {
        let problem = match head_line {
            Some(h) => Problem::AfterHead {
                expected: expected.to_string(),
                head_line: h,
                records: ok.records,
            },
            None => Problem::HeadMismatch {
                records: ok.records,
                head: ok.head.clone(),
                expected: expected.to_string(),
            },
        };
        let line = head_line.map_or(ok.records + 1, |h| h + 1);
        let last_good = match head_line {
            Some(h) => VerifyOk {
                records: h,
                head: expected.to_string(),
            },
            None => ok,
        };
        return Err(VerifyError::Broken {
            line,
            problem,
            last_good,
        });
    }
    Ok(ok)
}

fn is_eof_error(line: &[u8]) -> bool {
    match serde_json::from_slice::<Value>(line) {
        Err(e) => e.is_eof(),
        Ok(_) => false,
    }
}

/// The line (after `after`) holding a record with `seq`, if any.
fn find_seq(data: &[u8], after: u64, seq: u64) -> Option<u64> {
    #[derive(Deserialize)]
    struct SeqOnly {
        seq: u64,
    }
    lines(data)
        .enumerate()
        .skip(usize::try_from(after).ok()?)
        .find(|(_, (l, _))| serde_json::from_slice::<SeqOnly>(l).is_ok_and(|s| s.seq == seq))
        .map(|(i, _)| i as u64 + 1)
}

/// The verdict on one file of a directory.
#[derive(Debug)]
pub struct FileVerdict {
    pub path: PathBuf,
    /// The head checked against, if one was recorded outside the file.
    pub expected_head: Option<String>,
    pub result: Result<VerifyOk, VerifyError>,
}

/// Heads recorded outside the files they anchor, by file name: from
/// `audit_file_closed` records and from each supervisor log's `audit_opened`
/// link to the previous one. Read from the supervisor logs that verify up to
/// where the anchor is (a broken log's records after the break are ignored).
pub fn anchors(dir: &Path) -> Result<HashMap<String, String>, AuditError> {
    Ok(anchor_book(dir)?
        .into_iter()
        .filter_map(|(file, a)| match a {
            Anchor::Head(head) => Some((file, head)),
            Anchor::Missing { .. } => None,
        })
        .collect())
}

/// What the supervisor logs of a directory record about a file they name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Anchor {
    /// Its head, recorded outside it (a session file when its session ended,
    /// a supervisor log by the next run's first record).
    Head(String),
    /// A session file whose session a supervisor log opened, with no head
    /// recorded anywhere: records cut from its end would go unnoticed.
    Missing {
        session: String,
        /// The session's end is on record (or the run that opened it is
        /// over): the anchor should be there and is not (the audit disk was
        /// full when the session closed, or the supervisor stopped before
        /// writing it). Otherwise the session may still be open.
        ended: bool,
    },
}

/// [`Anchor`] by file name, for every file the supervisor logs of `dir` name.
pub fn anchor_book(dir: &Path) -> Result<HashMap<String, Anchor>, AuditError> {
    let logs: Vec<PathBuf> = list_logs(dir)?
        .into_iter()
        .filter(|(name, _)| name.kind == FileKind::Supervisor)
        .map(|(_, p)| p)
        .collect();
    let mut out = HashMap::new();
    for (i, path) in logs.iter().enumerate() {
        let data = std::fs::read(path).map_err(|e| AuditError::io(path, e))?;
        let run_over = i + 1 < logs.len();
        let mut opened: HashMap<String, String> = HashMap::new();
        let mut ended: HashSet<String> = HashSet::new();
        for named in named_by(&data) {
            match (named.head, named.named_as) {
                (Some(head), _) => {
                    out.insert(named.file, Anchor::Head(head));
                }
                (None, NamedAs::SessionFile { session }) => {
                    opened.insert(named.file, session);
                }
                (None, NamedAs::PreviousLog) => {}
            }
        }
        for rec in records(&data) {
            if matches!(rec.event.as_str(), "session_closed" | "session_revoked") {
                ended.insert(rec.session);
            }
        }
        for (file, session) in opened {
            if matches!(out.get(&file), Some(Anchor::Head(_))) {
                continue;
            }
            let ended = run_over || ended.contains(&session);
            out.insert(file, Anchor::Missing { session, ended });
        }
    }
    Ok(out)
}

/// The records of a file's bytes that verify, up to the first break.
fn records(data: &[u8]) -> impl Iterator<Item = Record> + '_ {
    let mut checker = ChainChecker::new();
    lines(data).map_while(move |(line, has_newline)| {
        if has_newline {
            checker.check(line).ok()
        } else {
            None
        }
    })
}

/// Verifies every audit file in `dir` (oldest first), each against its
/// anchored head when one was recorded.
pub fn verify_dir(dir: &Path) -> Result<Vec<FileVerdict>, AuditError> {
    let anchors = anchors(dir)?;
    let mut out = Vec::new();
    for (_, path) in list_logs(dir)? {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let expected_head = anchors.get(&name).cloned();
        let result = verify_file(&path, expected_head.as_deref());
        out.push(FileVerdict {
            path,
            expected_head,
            result,
        });
    }
    Ok(out)
}
