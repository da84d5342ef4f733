//! `supervisorctl audit archive --before DATE DIR`: moves whole closed
//! runs out of the audit directory, oldest first (docs/OPERATIONS.md
//! "Archiving the audit log"). A run is a supervisor log with the session
//! files it names; [`crate::missing`] already reads the oldest log left as
//! following a retired one, so the chain that stays verifies, and the
//! archive verifies on its own (each of its logs with its session files).
//!
//! A supervisor log moves only when it was created before DATE, a later
//! log exists (the newest is the one a running supervisor writes), every
//! log before it moves too (no gap in the chain), and no log that stays
//! names one of its session files (a session still open when its log was
//! replaced stays, with its log).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::AuditError;
use crate::missing::named_by;
use crate::names::{FileKind, list_logs};

/// The files to move, in the order they go.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    pub logs: Vec<PathBuf>,
    pub session_files: Vec<PathBuf>,
    /// Why the run after the last one planned stays (empty when none
    /// before DATE stays).
    pub stops: String,
}

/// `DATE` as the timestamp form of audit file names
/// (`YYYYMMDDTHHMMSS.ffffffZ`): `YYYY-MM-DD` (midnight UTC),
/// `YYYY-MM-DDTHH:MM:SSZ`, or that form itself.
pub fn cutoff(date: &str) -> Result<String, String> {
    let compact: String = date.chars().filter(|c| *c != '-' && *c != ':').collect();
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let ok = match compact.len() {
        8 if digits(&compact) => return Ok(format!("{compact}T000000.000000Z")),
        16 => {
            digits(&compact[..8])
                && &compact[8..9] == "T"
                && digits(&compact[9..15])
                && compact.ends_with('Z')
        }
        23 => crate::names::parse_file_name(&format!("supervisor-{compact}.jsonl")).is_some(),
        _ => false,
    };
    if !ok {
        return Err(format!(
            "{date:?} is not a date: write YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ (UTC)"
        ));
    }
    Ok(if compact.len() == 16 {
        format!("{}.000000Z", &compact[..15])
    } else {
        compact
    })
}

/// What [`archive`] would move from `dir` for `before` (a [`cutoff`]).
pub fn plan(dir: &Path, before: &str) -> Result<Plan, AuditError> {
    let all = list_logs(dir)?;
    let logs: Vec<&PathBuf> = all
        .iter()
        .filter(|(n, _)| n.kind == FileKind::Supervisor)
        .map(|(_, p)| p)
        .collect();
    let names = |p: &Path| -> Result<Vec<String>, AuditError> {
        let data = std::fs::read(p).map_err(|e| AuditError::io(p, e))?;
        Ok(named_by(&data).into_iter().map(|n| n.file).collect())
    };
    let mut named: Vec<HashSet<String>> = Vec::new();
    for p in &logs {
        named.push(names(p)?.into_iter().collect());
    }
    let created = |p: &Path| {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        crate::names::parse_file_name(name)
            .map(|n| n.ts)
            .unwrap_or_default()
    };
    let mut out = Plan::default();
    for (i, log) in logs.iter().enumerate() {
        let why = if created(log).as_str() >= before {
            break;
        } else if i + 1 == logs.len() {
            "it is the newest supervisor log, the one a running supervisor writes"
        } else if named[i + 1..]
            .iter()
            .any(|later| !later.is_disjoint(&named[i]))
        {
            "a later supervisor log names one of its session files (a session that outlived it)"
        } else {
            out.logs.push((*log).clone());
            for f in &named[i] {
                let p = dir.join(f);
                if f.starts_with("audit-") && p.exists() && !out.session_files.contains(&p) {
                    out.session_files.push(p);
                }
            }
            continue;
        };
        out.stops = format!("{} stays: {why}", log.display());
        break;
    }
    out.session_files.sort();
    Ok(out)
}

/// Moves a file into `to`: a rename, or across filesystems a copy made
/// durable before the original is removed.
fn move_into(file: &Path, to: &Path) -> Result<PathBuf, AuditError> {
    let name = file.file_name().unwrap_or_default();
    let dest = to.join(name);
    if dest.exists() {
        return Err(AuditError::io(
            &dest,
            std::io::Error::new(std::io::ErrorKind::AlreadyExists, "already in the archive"),
        ));
    }
    match std::fs::rename(file, &dest) {
        Ok(()) => return Ok(dest),
        Err(e) if e.raw_os_error() == Some(nix::errno::Errno::EXDEV as i32) => {}
        Err(e) => return Err(AuditError::io(file, e)),
    }
    std::fs::copy(file, &dest).map_err(|e| AuditError::io(&dest, e))?;
    std::fs::File::open(&dest)
        .and_then(|f| f.sync_all())
        .map_err(|e| AuditError::io(&dest, e))?;
    std::fs::remove_file(file).map_err(|e| AuditError::io(file, e))?;
    Ok(dest)
}

/// Moves what [`plan`] names from `dir` into `to` (created 0700 if
/// absent): the session files first, then their logs, oldest first, then
/// syncs both directories. Returns the files' new paths.
pub fn archive(dir: &Path, to: &Path, plan: &Plan) -> Result<Vec<PathBuf>, AuditError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(to)
        .map_err(|e| AuditError::io(to, e))?;
    let mut moved = Vec::new();
    for f in plan.session_files.iter().chain(&plan.logs) {
        moved.push(move_into(f, to)?);
    }
    for d in [to, dir] {
        std::fs::File::open(d)
            .and_then(|f| f.sync_all())
            .map_err(|e| AuditError::io(d, e))?;
    }
    Ok(moved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_become_file_name_timestamps() {
        assert_eq!(cutoff("2026-12-02").unwrap(), "20261202T000000.000000Z");
        assert_eq!(
            cutoff("2026-12-02T16:20:05Z").unwrap(),
            "20261202T162005.000000Z"
        );
        assert_eq!(
            cutoff("20261202T162005.123456Z").unwrap(),
            "20261202T162005.123456Z"
        );
        for bad in ["yesterday", "2026-12", "2026-12-02T16:20", ""] {
            assert!(cutoff(bad).is_err(), "{bad}");
        }
    }
}
