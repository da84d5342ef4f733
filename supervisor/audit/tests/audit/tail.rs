//! `audit tail`: finding a session's files and following them.

use std::io::Write;
use std::sync::Arc;

use serde_json::json;
use tollgate_audit::tail::{
    FollowOptions, Follower, TailItem, follow_session, format_record, latest_session_file,
    session_files,
};
use tollgate_audit::verify::Problem;
use tollgate_audit::{Audit, AuditError, SyncMode};

use crate::common::{read_lines, tmp, write_lines};

#[test]
fn session_files_match_the_whole_session_id() {
    let t = tmp();
    let dir = t.path().join("audit");
    let audit = Audit::open(&dir, SyncMode::Always, None).unwrap();
    let a = audit.open_session("abc").unwrap();
    let _b = audit.open_session("abc-def").unwrap();
    let a2 = audit.open_session("abc").unwrap();
    let _s = audit.supervisor_log().unwrap();
    assert_eq!(
        session_files(&dir, "abc").unwrap(),
        [a.path().to_path_buf(), a2.path().to_path_buf()]
    );
    assert_eq!(latest_session_file(&dir, "abc").unwrap(), a2.path());
    assert!(matches!(
        latest_session_file(&dir, "nope"),
        Err(AuditError::NoSessionFile { .. })
    ));
    assert!(matches!(
        session_files(&dir, "../x"),
        Err(AuditError::InvalidSession { .. })
    ));
}

#[test]
fn follower_returns_complete_new_lines_and_checks_the_chain() {
    let t = tmp();
    let dir = t.path().join("audit");
    let audit = Audit::open(&dir, SyncMode::Always, None).unwrap();
    let src = audit.open_session("src1").unwrap();
    for i in 0..4 {
        src.append("src1", "tool_result", json!({"i": i})).unwrap();
    }
    let lines = read_lines(src.path());
    // A copy we write by hand, to control partial lines.
    let copy = t.path().join("copy.jsonl");
    std::fs::write(&copy, format!("{}\n{}\n", lines[0], lines[1])).unwrap();
    let mut fol = Follower::open(&copy).unwrap();
    let got = fol.poll().unwrap();
    assert_eq!(got.len(), 2);
    assert!(matches!(&got[1], TailItem::Record { line: 2, record } if record.seq == 2));
    assert!(fol.poll().unwrap().is_empty());

    let mut fh = std::fs::OpenOptions::new()
        .append(true)
        .open(&copy)
        .unwrap();
    let (h1, h2) = lines[2].split_at(30);
    fh.write_all(h1.as_bytes()).unwrap();
    assert!(
        fol.poll().unwrap().is_empty(),
        "a partial line is held back"
    );
    fh.write_all(format!("{h2}\n").as_bytes()).unwrap();
    let got = fol.poll().unwrap();
    assert!(
        matches!(&got[..], [TailItem::Record { line: 3, record }] if record.fields["i"] == json!(2))
    );

    // A line out of place is flagged, and later lines are shown unchecked.
    fh.write_all(format!("{}\n{}\n", lines[0], lines[3]).as_bytes())
        .unwrap();
    let got = fol.poll().unwrap();
    match &got[..] {
        [
            TailItem::Broken {
                line: 4,
                problem:
                    Some(Problem::Inserted {
                        expected: 4,
                        found: 1,
                    }),
                ..
            },
            TailItem::Broken {
                line: 5,
                problem: None,
                ..
            },
        ] => {}
        other => panic!("{other:?}"),
    }
    assert!(!fol.intact());
}

#[test]
fn follow_session_prints_until_closed() {
    let t = tmp();
    let dir = t.path().join("audit");
    let audit = Audit::open(&dir, SyncMode::Batch, None).unwrap();
    let f = audit.open_session("live1").unwrap();
    f.append("live1", "session_opened", json!({"workspace": "/w"}))
        .unwrap();
    let writer = {
        let f = Arc::clone(&f);
        std::thread::spawn(move || {
            for i in 0..20 {
                f.append(
                    "live1",
                    "tool_result",
                    json!({"i": i, "out": "ok\u{1b}[31m"}),
                )
                .unwrap();
            }
            f.append("live1", "session_closed", json!({"reason": "done"}))
                .unwrap();
        })
    };
    let mut out = Vec::new();
    let opts = FollowOptions {
        poll: std::time::Duration::from_millis(10),
        json: false,
        until_closed: true,
    };
    let intact = follow_session(&dir, "live1", &opts, &mut out, &|| false).unwrap();
    writer.join().unwrap();
    assert!(intact);
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 22, "{text}");
    assert!(
        lines[0].contains(" #1 session_opened session=\"live1\" workspace=\"/w\""),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].contains(" #2 tool_result session=\"live1\" i=0 out=\"ok\\u001b[31m\""),
        "{}",
        lines[1]
    );
    assert!(lines[21].contains(" #22 session_closed "), "{}", lines[21]);
    assert!(!text.contains('\u{1b}'));

    // JSON output, stopping at once.
    let mut out = Vec::new();
    let opts = FollowOptions { json: true, ..opts };
    follow_session(&dir, "live1", &opts, &mut out, &|| true).unwrap();
    let first: serde_json::Value =
        serde_json::from_str(String::from_utf8(out).unwrap().lines().next().unwrap()).unwrap();
    assert_eq!(first["event"], json!("session_opened"));
    assert_eq!(first["seq"], json!(1));
}

#[test]
fn follow_session_flags_a_tampered_line() {
    let t = tmp();
    let dir = t.path().join("audit");
    let audit = Audit::open(&dir, SyncMode::Always, None).unwrap();
    let f = audit.open_session("bad1").unwrap();
    for i in 0..3 {
        f.append("bad1", "tool_result", json!({"i": i})).unwrap();
    }
    let mut lines = read_lines(f.path());
    lines[1] = lines[1].replace("\"i\":1", "\"i\":9");
    write_lines(f.path(), &lines);
    let mut out = Vec::new();
    let intact =
        follow_session(&dir, "bad1", &FollowOptions::default(), &mut out, &|| true).unwrap();
    assert!(!intact);
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains("!! line 2: record edited: its hash does not match its content: {"),
        "{text}"
    );
    assert!(text.contains("!! line 3 (unchecked): "), "{text}");
}

#[test]
fn long_values_are_cut_in_the_human_format() {
    let t = tmp();
    let audit = Audit::open(&t.path().join("audit"), SyncMode::Always, None).unwrap();
    let f = audit.open_session("long1").unwrap();
    f.append("long1", "tool_result", json!({"out": "y".repeat(1000)}))
        .unwrap();
    let rec = tollgate_audit::verify::parse_line(read_lines(f.path())[0].as_bytes()).unwrap();
    let shown = format_record(&rec);
    assert!(shown.ends_with("…(+800 chars)"), "{shown}");
}
