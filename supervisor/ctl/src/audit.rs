//! audit verify, tail, report.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context as _, anyhow};
use tollgate_audit::tail::{FollowOptions, follow_session};
use tollgate_audit::verify::{Anchor, anchor_book};
use tollgate_audit::{VerifyError, verify_file};

use crate::client::{Client, status_error};
use crate::table;

/// The audit directory the supervisor uses.
pub async fn dir_from_supervisor(mut c: Client) -> anyhow::Result<PathBuf> {
    let s = c
        .status(tollgate_proto::v1::StatusRequest {})
        .await
        .map_err(status_error)?
        .into_inner();
    Ok(PathBuf::from(s.audit_dir))
}

/// Verifies each file; returns the exit code (1 on the first broken file).
/// Each file is checked against `head` when given, else against the head the
/// supervisor anchored for it in its own log (when the file sits in an audit
/// directory with supervisor logs), which also catches a truncated tail. Then
/// each file a supervisor log among them names must be present (beside it or
/// among `files`), which catches a whole file deleted. A session file a
/// supervisor log names with no anchor anywhere prints `unanchored:` instead
/// of `ok:` and does not change the exit code (an open session is always
/// unanchored; see docs/INTERFACES.md).
pub fn verify(args: &[PathBuf], head: Option<&str>) -> u8 {
    let files = match expand(args) {
        Ok(files) => files,
        Err(e) => {
            eprintln!("supervisorctl: {}", table::escape(&e.to_string()));
            return 1;
        }
    };
    let files = files.as_slice();
    let mut books: HashMap<PathBuf, HashMap<String, Anchor>> = HashMap::new();
    let mut code = 0;
    let mut unanchored = 0usize;
    for f in files {
        let state: Option<Anchor> = match head {
            Some(h) => Some(Anchor::Head(h.to_string())),
            None => {
                let dir = f
                    .parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_else(|| PathBuf::from("."));
                let dir = if dir.as_os_str().is_empty() {
                    PathBuf::from(".")
                } else {
                    dir
                };
                let book = books
                    .entry(dir.clone())
                    .or_insert_with(|| anchor_book(&dir).unwrap_or_default());
                f.file_name()
                    .and_then(|n| n.to_str())
                    .and_then(|n| book.get(n).cloned())
            }
        };
        let expected = match &state {
            Some(Anchor::Head(h)) => Some(h.as_str()),
            Some(Anchor::Missing { .. }) | None => None,
        };
        let shown = table::escape(&f.display().to_string());
        match (verify_file(f, expected), &state) {
            (Ok(ok), Some(Anchor::Missing { session, ended })) => {
                unanchored += 1;
                outln!(
                    "{shown}: unanchored: {} records; no head of this file was recorded outside it, so records cut from its end would go unnoticed ({})",
                    ok.records,
                    unanchored_why(&table::escape(session), *ended)
                );
            }
            (Ok(ok), _) => outln!(
                "{shown}: ok: {} records{}",
                ok.records,
                if expected.is_some() {
                    " (head matches the anchor)"
                } else {
                    ""
                }
            ),
            (Err(e @ VerifyError::Broken { .. }), _) => {
                outln!("{shown}: {}", table::escape(&e.to_string()));
                code = 1;
            }
            (Err(e), _) => {
                eprintln!("supervisorctl: {}", table::escape(&e.to_string()));
                code = 1;
            }
        }
        if code != 0 {
            return code;
        }
    }
    if unanchored > 0 {
        eprintln!(
            "supervisorctl: note: {unanchored} file(s) unanchored: their chains hold, but their ends cannot be checked until the supervisor anchors them"
        );
    }
    // Whole files deleted: every file a supervisor log names must be there.
    match tollgate_audit::missing::check(files) {
        Ok(report) => {
            for (log, previous) in &report.retired {
                eprintln!(
                    "supervisorctl: note: {} follows {}, which is not here with any log before it (retired); the chain is checked from this log on",
                    table::escape(&log.display().to_string()),
                    table::escape(previous)
                );
            }
            for m in &report.missing {
                outln!(
                    "{}: {}",
                    table::escape(&m.log.display().to_string()),
                    table::escape(&m.to_string())
                );
                code = 1;
            }
        }
        Err(e) => {
            eprintln!("supervisorctl: {}", table::escape(&e.to_string()));
            code = 1;
        }
    }
    code
}

/// Why a session file has no anchor, as far as the supervisor logs tell.
fn unanchored_why(session: &str, ended: bool) -> String {
    if ended {
        format!(
            "session {session} ended without one: the audit disk was full when it closed and the supervisor has not written it since, or the supervisor stopped first"
        )
    } else {
        format!("session {session} may still be open: its head is anchored when it ends")
    }
}

/// The files to verify: each argument that is a directory stands for every
/// audit file in it (oldest first).
fn expand(args: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for a in args {
        if !a.is_dir() {
            out.push(a.clone());
            continue;
        }
        let logs = tollgate_audit::list_logs(a)?;
        if logs.is_empty() {
            anyhow::bail!(
                "{} holds no audit files (*.jsonl named by the supervisor)",
                a.display()
            );
        }
        out.extend(logs.into_iter().map(|(_, p)| p));
    }
    Ok(out)
}

/// Prints a session's log and follows it until the session closes or Ctrl-C.
pub async fn tail(dir: &Path, session: &str, follow: bool) -> anyhow::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = Arc::clone(&stop);
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        stop2.store(true, Ordering::SeqCst);
    });
    let dir = dir.to_path_buf();
    let session = session.to_string();
    let intact = tokio::task::spawn_blocking(move || {
        let opts = FollowOptions {
            until_closed: true,
            ..FollowOptions::default()
        };
        let mut out = crate::out::Stdout;
        let stop_now = move || !follow || stop.load(Ordering::SeqCst);
        follow_session(&dir, &session, &opts, &mut out, &stop_now)
    })
    .await
    .context("the tail task failed")??;
    if intact {
        Ok(())
    } else {
        Err(anyhow!("the log's chain is broken (see the !! lines)"))
    }
}

pub fn report(paths: &[PathBuf], json_out: bool) -> anyhow::Result<()> {
    let r = tollgate_audit::report::report(paths)?;
    if json_out {
        outln!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        out!("{r}");
    }
    Ok(())
}
