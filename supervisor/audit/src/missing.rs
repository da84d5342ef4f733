//! Files a supervisor log names that are gone.
//!
//! A hash chain catches an edited, cut or reordered record, but not a whole
//! file deleted. The supervisor log names every other file: each session's
//! audit file when the session opens (`session_opened`, `audit_file`) and
//! again when it closes (`audit_file_closed`, with the head), and the previous
//! supervisor log (`audit_opened`, `previous`). So verifying a supervisor log
//! also checks that each file it names is still there: beside the log, or
//! among the files being verified (an archive, say).
//!
//! Retention removes whole runs from the old end: a supervisor log together
//! with the session files it names. The oldest supervisor log left then names
//! a previous log that is gone, which is expected and not reported as
//! missing ([`Missing`] is only for a previous log when an older one is still
//! present, a gap in the middle of the chain). [`Report::retired`] lists it.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};

use crate::AuditError;
use crate::chain::records;
use crate::event::{AuditFileClosed, AuditOpened, Event, Parsed, PreviousLog, SessionOpened};
use crate::names::{FileKind, LogName, list_logs, parse_file_name};

/// How a supervisor log names a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NamedAs {
    /// A session's audit file, opened (no head yet) or closed (its head).
    SessionFile { session: String },
    /// The supervisor log before this one, with its head.
    PreviousLog,
}

/// One mention of another file in a supervisor log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    /// 1-based line of the record that names it.
    pub line: u64,
    /// The file's name (no directory).
    pub file: String,
    pub head: Option<String>,
    pub named_as: NamedAs,
}

/// The files the records of a supervisor log name, in order, read from the
/// records that verify (a broken log's records after the break are ignored).
/// A file named twice (opened, then closed) appears twice.
pub fn named_by(data: &[u8]) -> Vec<Named> {
    let mut out = Vec::new();
    for (i, rec) in records(data).enumerate() {
        let Parsed::Known(event) = rec.event() else {
            continue;
        };
        if let Some((file, head, named_as)) = names_in_record(&event, &rec.session)
            && !file.is_empty()
        {
            out.push(Named {
                line: i as u64 + 1,
                file,
                head,
                named_as,
            });
        }
    }
    out
}

/// The file one record names, with the head it records for it.
fn names_in_record(event: &Event, session: &str) -> Option<(String, Option<String>, NamedAs)> {
    let session_file = || NamedAs::SessionFile {
        session: session.to_string(),
    };
    match event {
        Event::AuditOpened(AuditOpened {
            previous: Some(PreviousLog { file, head, .. }),
            ..
        }) => Some((file.clone(), Some(head.clone()), NamedAs::PreviousLog)),
        // The previous log did not verify when this one started: named,
        // with no head.
        Event::AuditOpened(AuditOpened {
            previous: None,
            previous_file,
            ..
        }) => Some((previous_file.clone()?, None, NamedAs::PreviousLog)),
        // A path when written; only its name is kept.
        Event::SessionOpened(SessionOpened { audit_file, .. }) => {
            Some((base_name(audit_file.as_deref()?), None, session_file()))
        }
        Event::AuditFileClosed(AuditFileClosed { file, head, .. }) => {
            Some((file.clone(), Some(head.clone()), session_file()))
        }
        Event::Config(_)
        | Event::HostAddresses(_)
        | Event::Recovered(_)
        | Event::Shutdown(_)
        | Event::AuditRefused(_)
        | Event::SandboxExec(_)
        | Event::SandboxError(_)
        | Event::SessionClosed(_)
        | Event::SessionRevoked(_)
        | Event::TokenRotated(_)
        | Event::DiskFloorStop(_)
        | Event::PermissionCheck(_)
        | Event::ApprovalRequested(_)
        | Event::ApprovalDecided(_)
        | Event::ToolStarted(_)
        | Event::ToolResult(_)
        | Event::JobStarted(_)
        | Event::JobEnded(_)
        | Event::LlmRequest(_)
        | Event::LlmResponse(_)
        | Event::LlmCallError(_)
        | Event::LlmRetry(_)
        | Event::CostLimitHit(_)
        | Event::ClientTurnEnd(_)
        | Event::ClientToolResult(_)
        | Event::McpServerStarted(_)
        | Event::McpServerExited(_)
        | Event::McpEgress(_)
        | Event::NetConnection(_)
        | Event::SandboxDenial(_)
        | Event::GitExposed(_)
        | Event::NetworkRule(_)
        | Event::NetSecret(_)
        | Event::CacheCleared(_)
        | Event::QuestionAsked(_)
        | Event::ContextTrim(_)
        | Event::IterationCapHit(_)
        | Event::Abort(_)
        | Event::TurnSummary(_) => None,
    }
}

fn base_name(path: &str) -> String {
    Path::new(path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A file named by a supervisor log that is not there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    /// The supervisor log that names it.
    pub log: PathBuf,
    pub named: Named,
}

impl fmt::Display for Missing {
    /// `line N: names FILE (…), which is missing: …` (the caller puts the
    /// log's path in front).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = &self.named;
        let head = n
            .head
            .as_deref()
            .map(|h| format!(", anchored head {h}"))
            .unwrap_or_default();
        match &n.named_as {
            NamedAs::SessionFile { session } => write!(
                f,
                "line {}: names {} (the audit file of session {session}{head}), which is missing: \
                 not beside this log and not among the files given (deleted?)",
                n.line, n.file
            ),
            NamedAs::PreviousLog => write!(
                f,
                "line {}: names the previous supervisor log {}{head}, which is missing while an \
                 older supervisor log is present: a log was removed from the middle of the chain",
                n.line, n.file
            ),
        }
    }
}

/// What [`check`] found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Report {
    pub missing: Vec<Missing>,
    /// Supervisor logs (among the files given) whose previous log is gone
    /// with every log before it: the old end of the chain, retired.
    pub retired: Vec<(PathBuf, String)>,
}

/// Checks that every file named by the supervisor logs among `files` is
/// present: among `files` (by name, in any directory) or in the directory of
/// the log that names it. Session files (by name) name nothing and are not
/// read again.
pub fn check(files: &[PathBuf]) -> Result<Report, AuditError> {
    let mut given: HashSet<String> = HashSet::new();
    for f in files {
        if let Some(n) = f.file_name() {
            given.insert(n.to_string_lossy().into_owned());
        }
    }
    let mut report = Report::default();
    let mut present_by_dir: HashMap<PathBuf, HashSet<String>> = HashMap::new();
    for log in files {
        let is_session_file = log
            .file_name()
            .and_then(|n| parse_file_name(&n.to_string_lossy()))
            .is_some_and(|n| matches!(n.kind, FileKind::Session(_)));
        if is_session_file {
            continue;
        }
        let data = std::fs::read(log).map_err(|e| AuditError::io(log, e))?;
        let named = named_by(&data);
        if named.is_empty() {
            continue;
        }
        let dir = match log.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        // Each directory is listed once, however many logs it holds.
        let present = match present_by_dir.entry(dir) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => {
                let mut present = given.clone();
                present.extend(names_in(e.key())?);
                e.insert(present)
            }
        };
        check_log(log, named, present, &mut report);
    }
    Ok(report)
}

/// The audit file names in `dir`.
pub(crate) fn names_in(dir: &Path) -> Result<impl Iterator<Item = String>, AuditError> {
    Ok(list_logs(dir)?
        .into_iter()
        .filter_map(|(_, p)| p.file_name().map(|n| n.to_string_lossy().into_owned())))
}

/// [`check`] for one supervisor log, given what it names ([`named_by`]),
/// against the names that count as `present`.
pub(crate) fn check_log(
    log: &Path,
    named: Vec<Named>,
    present: &HashSet<String>,
    report: &mut Report,
) {
    for n in named {
        if present.contains(&n.file) {
            continue;
        }
        if n.named_as == NamedAs::PreviousLog && !older_log_present(&n.file, present) {
            report.retired.push((log.to_path_buf(), n.file));
            continue;
        }
        // A session file named when opened and again when closed is
        // reported once, at its first mention.
        if !report
            .missing
            .iter()
            .any(|m| m.log == log && m.named.file == n.file)
        {
            report.missing.push(Missing {
                log: log.to_path_buf(),
                named: n,
            });
        }
    }
}

/// Whether a supervisor log older than `file` is among `present`. A name
/// that does not parse as a supervisor log's cannot be placed in the chain,
/// so it counts as a gap.
fn older_log_present(file: &str, present: &HashSet<String>) -> bool {
    let Some(gone) = parse_file_name(file).filter(|n| n.kind == FileKind::Supervisor) else {
        return true;
    };
    present
        .iter()
        .filter_map(|p| parse_file_name(p))
        .any(|p: LogName| p.kind == FileKind::Supervisor && (&p.ts, p.n) < (&gone.ts, gone.n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> HashSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_previous_log_is_a_gap_only_when_an_older_one_is_present() {
        let gone = "supervisor-20261129T100000.000000Z.jsonl";
        let older = "supervisor-20261129T090000.000000Z.jsonl";
        let newer = "supervisor-20261129T110000.000000Z.jsonl";
        let session = "audit-abc-20261129T080000.000000Z.jsonl";
        assert!(!older_log_present(gone, &set(&[newer, session])));
        assert!(older_log_present(gone, &set(&[older, newer])));
        // Same second, collision suffix: -1 comes after the plain name.
        let gone_1 = "supervisor-20261129T100000.000000Z-1.jsonl";
        assert!(older_log_present(gone_1, &set(&[gone])));
        // A name that cannot be placed is a gap.
        assert!(older_log_present("renamed.jsonl", &set(&[])));
    }
}
