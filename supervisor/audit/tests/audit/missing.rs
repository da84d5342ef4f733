//! A whole file deleted: the supervisor log names every session file and the
//! log before it, and `missing::check` reports the ones that are gone.

use std::path::{Path, PathBuf};

use serde_json::json;
use tollgate_audit::missing::{NamedAs, check};
use tollgate_audit::{Audit, AuditFile, SyncMode};

use crate::common::{files_in, tmp};

/// One supervisor run: a supervisor log naming one session file that is
/// opened, written and closed, as the daemon does it. Returns the session
/// file. Each run is a new `Audit` on the same directory, so its supervisor
/// log links to the previous run's.
fn run(dir: &Path, session: &str) -> PathBuf {
    run_with(dir, session, true)
}

/// [`run`]; without `record_open`, the supervisor log records only the
/// file's close (as if its open record had been lost).
fn run_with(dir: &Path, session: &str, record_open: bool) -> PathBuf {
    let audit = Audit::open(dir, SyncMode::Always, None).unwrap();
    let f: std::sync::Arc<AuditFile> = audit.open_session(session).unwrap();
    f.append(session, "session_opened", json!({})).unwrap();
    let sup = audit.supervisor_log().unwrap();
    if record_open {
        sup.append(
            session,
            "session_opened",
            json!({"audit_file": f.path().display().to_string()}),
        )
        .unwrap();
    }
    f.append(session, "tool_result", json!({"ok": true}))
        .unwrap();
    audit.anchor(&f, session).unwrap();
    audit.flush().unwrap();
    // Supervisor logs are named to the microsecond; keep runs apart.
    std::thread::sleep(std::time::Duration::from_millis(2));
    f.path().to_path_buf()
}

fn supervisor_logs(dir: &Path) -> Vec<PathBuf> {
    files_in(dir)
        .into_iter()
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("supervisor-")
        })
        .collect()
}

fn name(p: &Path) -> String {
    p.file_name().unwrap().to_str().unwrap().to_string()
}

#[test]
fn an_intact_directory_has_nothing_missing() {
    let t = tmp();
    let dir = t.path().join("audit");
    run(&dir, "whole1");
    run(&dir, "whole2");
    let report = check(&files_in(&dir)).unwrap();
    assert!(report.missing.is_empty(), "{:?}", report.missing);
    assert!(report.retired.is_empty(), "{:?}", report.retired);
}

#[test]
fn a_deleted_session_file_is_named_with_its_line_and_anchored_head() {
    let t = tmp();
    let dir = t.path().join("audit");
    let gone = run(&dir, "gone1");
    let kept = run(&dir, "kept1");
    std::fs::remove_file(&gone).unwrap();

    let report = check(&files_in(&dir)).unwrap();
    assert_eq!(report.missing.len(), 1, "{:?}", report.missing);
    let m = &report.missing[0];
    assert_eq!(m.log, supervisor_logs(&dir)[0]);
    assert_eq!(m.named.file, name(&gone));
    assert_eq!(
        m.named.named_as,
        NamedAs::SessionFile {
            session: "gone1".into()
        }
    );
    // Line 1 is audit_opened; line 2 names the file as the session opens.
    assert_eq!(m.named.line, 2);
    let said = m.to_string();
    assert!(
        said.starts_with(&format!(
            "line 2: names {} (the audit file of session gone1",
            name(&gone)
        )),
        "{said}"
    );
    assert!(said.contains("which is missing"), "{said}");
    // The other run's file is not reported; given alone, a session file
    // names nothing.
    assert!(check(&[kept]).unwrap().missing.is_empty());

    // Only the close is recorded: still named, with the head it was
    // anchored at.
    let closed_only = run_with(&dir, "gone2", false);
    std::fs::remove_file(&closed_only).unwrap();
    let report = check(&files_in(&dir)).unwrap();
    assert_eq!(report.missing.len(), 2, "{:?}", report.missing);
    let m = &report.missing[1];
    assert_eq!(m.named.file, name(&closed_only));
    assert_eq!(m.named.line, 2);
    let head = m.named.head.clone().expect("the anchored head");
    assert_eq!(head.len(), 64);
    assert!(
        m.to_string().contains(&format!("anchored head {head}")),
        "{m}"
    );
}

#[test]
fn an_archived_session_file_counts_when_it_is_given() {
    let t = tmp();
    let dir = t.path().join("audit");
    let file = run(&dir, "arch1");
    let archive = t.path().join("archive");
    std::fs::create_dir(&archive).unwrap();
    let moved = archive.join(file.file_name().unwrap());
    std::fs::rename(&file, &moved).unwrap();

    let mut files = files_in(&dir);
    assert_eq!(check(&files).unwrap().missing.len(), 1);
    files.push(moved);
    let report = check(&files).unwrap();
    assert!(report.missing.is_empty(), "{:?}", report.missing);
}

#[test]
fn a_supervisor_log_removed_from_the_middle_is_a_gap_but_the_old_end_is_retired() {
    let t = tmp();
    let dir = t.path().join("audit");
    let first = run(&dir, "chain1");
    run(&dir, "chain2");
    run(&dir, "chain3");
    let logs = supervisor_logs(&dir);
    assert_eq!(logs.len(), 3);

    // The middle log, with the session file it names.
    std::fs::remove_file(&logs[1]).unwrap();
    std::fs::remove_file(
        files_in(&dir)
            .into_iter()
            .find(|p| name(p).starts_with("audit-chain2-"))
            .unwrap(),
    )
    .unwrap();
    let report = check(&files_in(&dir)).unwrap();
    assert_eq!(report.missing.len(), 1, "{:?}", report.missing);
    let m = &report.missing[0];
    assert_eq!(m.log, logs[2]);
    assert_eq!(m.named.file, name(&logs[1]));
    assert_eq!(m.named.named_as, NamedAs::PreviousLog);
    assert_eq!(m.named.line, 1);
    assert!(
        m.to_string()
            .contains("removed from the middle of the chain"),
        "{m}"
    );
    assert!(report.retired.is_empty());

    // Retire the oldest run too (its log and its session file): now the
    // remaining log simply starts the chain.
    std::fs::remove_file(&logs[0]).unwrap();
    std::fs::remove_file(&first).unwrap();
    let report = check(&files_in(&dir)).unwrap();
    assert!(report.missing.is_empty(), "{:?}", report.missing);
    assert_eq!(report.retired, vec![(logs[2].clone(), name(&logs[1]))]);
}

#[test]
fn the_next_run_records_what_the_previous_run_named_and_is_gone() {
    let t = tmp();
    let dir = t.path().join("audit");
    let gone = run(&dir, "prev1");
    run(&dir, "prev2");
    std::fs::remove_file(&gone).unwrap();
    // The third run looks only at the log just before it, which names
    // prev2's file, still there.
    run(&dir, "prev3");
    let first_record = |log: &Path| -> serde_json::Value {
        let text = std::fs::read_to_string(log).unwrap();
        serde_json::from_str(text.lines().next().unwrap()).unwrap()
    };
    let logs = supervisor_logs(&dir);
    assert_eq!(logs.len(), 3);
    assert!(first_record(&logs[2]).get("previous_missing").is_none());

    // Delete a file the newest log names; the next start records it.
    let named_by_last = files_in(&dir)
        .into_iter()
        .find(|p| name(p).starts_with("audit-prev3-"))
        .unwrap();
    std::fs::remove_file(&named_by_last).unwrap();
    run(&dir, "prev4");
    let logs = supervisor_logs(&dir);
    let rec = first_record(&logs[3]);
    assert_eq!(rec["event"], "audit_opened");
    assert_eq!(rec["previous"]["file"], json!(name(&logs[2])));
    assert_eq!(rec["previous_missing"], json!([name(&named_by_last)]));
}
