//! Verification of a file's hash chain: names the first broken line and says
//! what is wrong with it.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::AuditError;
pub use crate::chain::{ChainChecker, Problem, Record, parse_line};
use crate::chain::{lines, records};
use crate::event::{Event, Parsed};
use crate::missing::{NamedAs, named_by};
use crate::names::{FileKind, list_logs};

/// A chain that verified.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerifyOk {
    pub records: u64,
    /// Hash of the last record ([`GENESIS`] for an empty file).
    pub head: String,
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
            if let Parsed::Known(Event::SessionClosed(_) | Event::SessionRevoked(_)) = rec.event() {
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
