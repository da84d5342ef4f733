//! Audit file names: `audit-<session>-<UTC>[-N].jsonl` and
//! `supervisor-<UTC>[-N].jsonl`, parsed and listed. Knows nothing of what
//! the files hold.

use std::fs;
use std::path::{Path, PathBuf};

use crate::AuditError;

/// What an audit file belongs to, from its name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FileKind {
    Supervisor,
    Session(String),
}

/// A parsed audit file name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogName {
    /// `YYYYMMDDTHHMMSS.ffffffZ`: sorts by creation time.
    pub ts: String,
    /// The collision suffix (`-N`), 0 when absent.
    pub n: u32,
    pub kind: FileKind,
}

/// Parses `audit-<session>-<UTC>[-N].jsonl` or `supervisor-<UTC>[-N].jsonl`.
pub fn parse_file_name(name: &str) -> Option<LogName> {
    let stem = name.strip_suffix(".jsonl")?;
    let (stem, n) = if ends_with_ts(stem) {
        (stem, 0)
    } else {
        let (head, suffix) = stem.rsplit_once('-')?;
        if suffix.is_empty() || !suffix.bytes().all(|b| b.is_ascii_digit()) || !ends_with_ts(head) {
            return None;
        }
        (head, suffix.parse().ok()?)
    };
    let ts = &stem[stem.len() - TS_LEN..];
    let rest = &stem[..stem.len() - TS_LEN];
    let kind = if rest == "supervisor-" {
        FileKind::Supervisor
    } else {
        let session = rest.strip_prefix("audit-")?.strip_suffix('-')?;
        if !valid_session(session) {
            return None;
        }
        FileKind::Session(session.to_string())
    };
    Some(LogName {
        ts: ts.to_string(),
        n,
        kind,
    })
}

const TS_LEN: usize = 23; // 20261129T214737.123456Z

fn ends_with_ts(s: &str) -> bool {
    if s.len() < TS_LEN {
        return false;
    }
    let t = &s.as_bytes()[s.len() - TS_LEN..];
    t.iter().enumerate().all(|(i, b)| match i {
        8 => *b == b'T',
        15 => *b == b'.',
        22 => *b == b'Z',
        _ => b.is_ascii_digit(),
    })
}

pub(crate) fn valid_session(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Lists the audit files of `dir` with their parsed names, oldest first.
pub fn list_logs(dir: &Path) -> Result<Vec<(LogName, PathBuf)>, AuditError> {
    let mut out = Vec::new();
    let rd = fs::read_dir(dir).map_err(|e| AuditError::io(dir, e))?;
    for entry in rd {
        let entry = entry.map_err(|e| AuditError::io(dir, e))?;
        let name = entry.file_name();
        if let Some(parsed) = name.to_str().and_then(parse_file_name) {
            out.push((parsed, entry.path()));
        }
    }
    out.sort_by(|a, b| (&a.0.ts, a.0.n, &a.0.kind).cmp(&(&b.0.ts, b.0.n, &b.0.kind)));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_parse_back() {
        let n = parse_file_name("audit-Ab3_x-9zQ1w2-20261129T214737.123456Z.jsonl").unwrap();
        assert_eq!(
            n,
            LogName {
                ts: "20261129T214737.123456Z".to_string(),
                n: 0,
                kind: FileKind::Session("Ab3_x-9zQ1w2".to_string()),
            }
        );
        let n = parse_file_name("supervisor-20261129T214737.123456Z-3.jsonl").unwrap();
        assert_eq!((n.kind, n.n), (FileKind::Supervisor, 3));
        // A session id that itself ends in digits after a dash.
        let n = parse_file_name("audit-abc-12-20261129T214737.123456Z.jsonl").unwrap();
        assert_eq!(n.kind, FileKind::Session("abc-12".to_string()));
        for bad in [
            "audit--20261129T214737.123456Z.jsonl",
            "audit-x-20261129T214737.123456Z.json",
            "audit-x-2026112T214737.123456Z.jsonl",
            "notes.jsonl",
            "audit-a/b-20261129T214737.123456Z.jsonl",
            "supervisor-20261129T214737.123456Z-.jsonl",
        ] {
            assert_eq!(parse_file_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn session_ids_are_checked() {
        assert!(valid_session("abcDEF012_-x"));
        assert!(!valid_session(""));
        assert!(!valid_session("../etc"));
        assert!(!valid_session("a b"));
        assert!(!valid_session(&"x".repeat(65)));
    }
}
