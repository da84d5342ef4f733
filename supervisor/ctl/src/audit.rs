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
/// unanchored; see docs/INTERFACES.md). `--json` prints one object at the end.
pub fn verify(args: &[PathBuf], head: Option<&str>, json_out: bool) -> u8 {
    let files = match expand(args) {
        Ok(files) => files,
        Err(e) => return crate::errors::report(&e, json_out),
    };
    let mut v = Verdicts::new(json_out);
    if verify_chains(&files, head, &mut v) {
        verify_presence(&files, &mut v);
    }
    v.finish()
}

/// Each file's chain (and anchor); false once one is broken.
fn verify_chains(files: &[PathBuf], head: Option<&str>, v: &mut Verdicts) -> bool {
    let mut books: HashMap<PathBuf, HashMap<String, Anchor>> = HashMap::new();
    for f in files {
        let state: Option<Anchor> = match head {
            Some(h) => Some(Anchor::Head(h.to_string())),
            None => {
                let dir = match f.parent() {
                    Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
                    _ => PathBuf::from("."),
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
        match (verify_file(f, expected), &state) {
            (Ok(ok), Some(Anchor::Missing { session, ended })) => {
                let why = unanchored_why(&table::escape(session), *ended);
                v.unanchored(f, ok.records, &why);
            }
            (Ok(ok), _) => v.ok(f, ok.records, expected.is_some()),
            (Err(e @ VerifyError::Broken { .. }), _) => {
                v.broken(f, &e.to_string());
                return false;
            }
            (Err(e), _) => {
                v.error(&e.to_string());
                return false;
            }
        }
    }
    true
}

/// Whole files deleted: every file a supervisor log names must be there.
fn verify_presence(files: &[PathBuf], v: &mut Verdicts) {
    match tollgate_audit::missing::check(files) {
        Ok(report) => {
            for (log, previous) in &report.retired {
                v.note(format!(
                    "{} follows {}, which is not here with any log before it (retired); the chain is checked from this log on",
                    table::escape(&log.display().to_string()),
                    table::escape(previous)
                ));
            }
            for m in &report.missing {
                v.missing(&m.log, &m.to_string());
            }
        }
        Err(e) => v.error(&e.to_string()),
    }
}

/// What `audit verify` found: printed as found (text), or gathered and
/// printed once (`--json`: `{"ok", "files": [{"file", "status": "ok" |
/// "unanchored" | "broken", "records", "anchored", "detail"}], "missing":
/// [{"log", "detail"}], "notes": [...], "error"}`).
struct Verdicts {
    json: bool,
    failed: bool,
    unanchored: usize,
    files: Vec<serde_json::Value>,
    missing: Vec<serde_json::Value>,
    notes: Vec<String>,
    error: Option<String>,
}

impl Verdicts {
    fn new(json: bool) -> Verdicts {
        Verdicts {
            json,
            failed: false,
            unanchored: 0,
            files: Vec::new(),
            missing: Vec::new(),
            notes: Vec::new(),
            error: None,
        }
    }

    fn file(
        &mut self,
        f: &Path,
        (status, anchored): (&str, bool),
        records: Option<u64>,
        detail: &str,
    ) {
        self.files.push(serde_json::json!({
            "file": f.display().to_string(), "status": status, "records": records,
            "anchored": anchored, "detail": detail,
        }));
    }

    fn ok(&mut self, f: &Path, records: u64, anchored: bool) {
        let detail = if anchored {
            " (head matches the anchor)"
        } else {
            ""
        };
        if !self.json {
            outln!("{}: ok: {records} records{detail}", shown(f));
        }
        self.file(f, ("ok", anchored), Some(records), detail.trim());
    }

    fn unanchored(&mut self, f: &Path, records: u64, why: &str) {
        self.unanchored += 1;
        let detail = format!(
            "no head of this file was recorded outside it, so records cut from its end would go unnoticed ({why})"
        );
        if !self.json {
            outln!("{}: unanchored: {records} records; {detail}", shown(f));
        }
        self.file(f, ("unanchored", false), Some(records), &detail);
    }

    fn broken(&mut self, f: &Path, detail: &str) {
        self.failed = true;
        if !self.json {
            outln!("{}: {}", shown(f), table::escape(detail));
        }
        self.file(f, ("broken", false), None, detail);
    }

    fn missing(&mut self, log: &Path, detail: &str) {
        self.failed = true;
        if !self.json {
            outln!("{}: {}", shown(log), table::escape(detail));
        }
        self.missing.push(serde_json::json!({
            "log": log.display().to_string(), "detail": detail,
        }));
    }

    fn note(&mut self, note: String) {
        if !self.json {
            eprintln!("supervisorctl: note: {note}");
        }
        self.notes.push(note);
    }

    fn error(&mut self, e: &str) {
        self.failed = true;
        if !self.json {
            eprintln!("supervisorctl: {}", table::escape(e));
        }
        self.error = Some(e.to_string());
    }

    /// The closing note or object; the exit code.
    fn finish(mut self) -> u8 {
        if self.unanchored > 0 {
            let n = self.unanchored;
            self.note(format!(
                "{n} file(s) unanchored: their chains hold, but their ends cannot be checked until the supervisor anchors them"
            ));
        }
        if self.json {
            outln!(
                "{}",
                serde_json::json!({
                    "ok": !self.failed, "files": self.files, "missing": self.missing,
                    "notes": self.notes, "error": self.error,
                })
            );
        }
        u8::from(self.failed)
    }
}

fn shown(f: &Path) -> String {
    table::escape(&f.display().to_string())
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
pub async fn tail(dir: &Path, session: &str, follow: bool, json: bool) -> anyhow::Result<()> {
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
            json,
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

/// `audit archive --before DATE DIR`: moves whole closed runs older than
/// DATE from the audit directory into DIR, then verifies what stays and
/// what moved (exit 1 when either does not verify).
pub fn archive(audit_dir: &Path, before: &str, to: &Path, json_out: bool) -> anyhow::Result<u8> {
    use tollgate_audit::archive;
    let cutoff = archive::cutoff(before).map_err(|e| anyhow!("--before: {e}"))?;
    let plan = archive::plan(audit_dir, &cutoff)?;
    let moved = archive::archive(audit_dir, to, &plan)?;
    let left_ok = quiet_verify(audit_dir);
    let archive_ok = moved.is_empty() || quiet_verify(to);
    if json_out {
        outln!(
            "{}",
            serde_json::json!({
                "moved": moved.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
                "logs": plan.logs.len(), "session_files": plan.session_files.len(),
                "stopped": (!plan.stops.is_empty()).then_some(&plan.stops),
                "left_verifies": left_ok, "archive_verifies": archive_ok,
            })
        );
    } else {
        outln!(
            "moved {} supervisor log(s) and {} session file(s) to {}",
            plan.logs.len(),
            plan.session_files.len(),
            table::escape(&to.display().to_string())
        );
        if !plan.stops.is_empty() {
            outln!("{}", table::escape(&plan.stops));
        }
        outln!(
            "{}: {}; {}: {}",
            table::escape(&audit_dir.display().to_string()),
            if left_ok {
                "verifies"
            } else {
                "DOES NOT VERIFY"
            },
            table::escape(&to.display().to_string()),
            if archive_ok {
                "verifies"
            } else {
                "DOES NOT VERIFY"
            },
        );
    }
    Ok(u8::from(!(left_ok && archive_ok)))
}

/// Whether every chain of `dir` holds and every file its logs name is
/// there (as `audit verify DIR` checks, without printing).
fn quiet_verify(dir: &Path) -> bool {
    let Ok(files) = expand(&[dir.to_path_buf()]) else {
        return false;
    };
    let book = anchor_book(dir).unwrap_or_default();
    let chains = files.iter().all(|f| {
        let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let expected = match book.get(name) {
            Some(Anchor::Head(h)) => Some(h.as_str()),
            _ => None,
        };
        verify_file(f, expected).is_ok()
    });
    chains && tollgate_audit::missing::check(&files).is_ok_and(|r| r.missing.is_empty())
}
