//! Tamper tests for verify: each names the exact line.

use std::path::{Path, PathBuf};

use serde_json::json;
use tollgate_audit::record::chain_hash;
use tollgate_audit::verify::Problem;
use tollgate_audit::{Appended, Audit, SyncMode, VerifyError, VerifyOk, verify_file};

use crate::common::{parse, read_lines, tmp, write_lines};

/// A file of 10 records; returns its path and the heads.
fn ten(dir: &Path) -> (PathBuf, Vec<Appended>) {
    let audit = Audit::open(&dir.join("audit"), SyncMode::Always, None).unwrap();
    let f = audit.open_session("tamper1").unwrap();
    let heads = (1..=10)
        .map(|i| {
            f.append(
                "tamper1",
                "tool_result",
                json!({"i": i, "out": format!("line {i}")}),
            )
            .unwrap()
        })
        .collect();
    assert_eq!(verify_file(f.path(), None).unwrap().records, 10);
    (f.path().to_path_buf(), heads)
}

fn broken(path: &Path, head: Option<&str>) -> (u64, Problem, VerifyOk) {
    match verify_file(path, head) {
        Err(VerifyError::Broken {
            line,
            problem,
            last_good,
        }) => (line, problem, last_good),
        other => panic!("expected a broken chain, got {other:?}"),
    }
}

#[test]
fn edited_field_is_named() {
    let t = tmp();
    let (path, heads) = ten(t.path());
    let mut lines = read_lines(&path);
    lines[2] = lines[2].replace("\"i\":3", "\"i\":4");
    write_lines(&path, &lines);
    let (line, problem, last_good) = broken(&path, None);
    assert_eq!((line, problem), (3, Problem::Edited));
    assert_eq!(
        last_good,
        VerifyOk {
            records: 2,
            head: heads[1].hash.clone()
        }
    );
    let err = verify_file(&path, None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "line 3: record edited: its hash does not match its content"
    );
}

#[test]
fn edited_record_with_its_own_hash_recomputed_breaks_the_next_link() {
    let t = tmp();
    let (path, _) = ten(t.path());
    let mut lines = read_lines(&path);
    // Rewrite line 3 consistently with itself (as a forger without the
    // later lines would): the link from line 4 breaks.
    let edited = lines[2].replace("\"out\":\"line 3\"", "\"out\":\"all good\"");
    let prev = parse(&edited)["prev"].as_str().unwrap().to_string();
    let n = edited.len();
    let body = format!("{}}}", &edited[..n - 75]);
    let hash = chain_hash(&prev, body.as_bytes());
    lines[2] = format!("{},\"hash\":\"{hash}\"}}", &edited[..n - 75]);
    write_lines(&path, &lines);
    let (line, problem, _) = broken(&path, None);
    assert_eq!((line, problem), (4, Problem::PrevMismatch));
}

#[test]
fn deleted_line_is_named() {
    let t = tmp();
    let (path, _) = ten(t.path());
    let mut lines = read_lines(&path);
    lines.remove(3);
    write_lines(&path, &lines);
    let (line, problem, _) = broken(&path, None);
    assert_eq!(
        (line, problem),
        (
            4,
            Problem::Deleted {
                expected: 4,
                found: 5
            }
        )
    );
    assert_eq!(
        verify_file(&path, None).unwrap_err().to_string(),
        "line 4: record deleted: seq 5 where 4 was expected (seq 4 missing)"
    );
}

#[test]
fn inserted_copy_of_a_line_is_named() {
    let t = tmp();
    let (path, _) = ten(t.path());
    let mut lines = read_lines(&path);
    let copy = lines[1].clone();
    lines.insert(6, copy); // becomes line 7
    write_lines(&path, &lines);
    let (line, problem, _) = broken(&path, None);
    assert_eq!(
        (line, problem),
        (
            7,
            Problem::Inserted {
                expected: 7,
                found: 2
            }
        )
    );
}

#[test]
fn inserted_foreign_line_is_named() {
    let t = tmp();
    let (path, _) = ten(t.path());
    let mut lines = read_lines(&path);
    lines.insert(
        4,
        r#"{"v":1,"seq":5,"event":"approval_decided","outcome":"approved"}"#.to_string(),
    );
    write_lines(&path, &lines);
    let (line, problem, _) = broken(&path, None);
    assert_eq!(line, 5);
    assert!(matches!(problem, Problem::Malformed(_)), "{problem:?}");
}

#[test]
fn forged_insertion_with_valid_hash_is_caught_at_the_next_line() {
    let t = tmp();
    let (path, heads) = ten(t.path());
    let mut lines = read_lines(&path);
    // A forger who knows the format writes a perfectly chained seq 5 after
    // line 4; the original seq 5 (now line 6) no longer fits.
    let body = format!(
        "{{\"v\":1,\"seq\":5,\"ts\":\"2026-01-01T00:00:00.000000Z\",\"session\":\"tamper1\",\"event\":\"approval_decided\",\"outcome\":\"approved\",\"prev\":\"{}\"}}",
        heads[3].hash
    );
    let hash = chain_hash(&heads[3].hash, body.as_bytes());
    lines.insert(
        4,
        format!("{},\"hash\":\"{hash}\"}}", &body[..body.len() - 1]),
    );
    write_lines(&path, &lines);
    let (line, problem, _) = broken(&path, None);
    assert_eq!(
        (line, problem),
        (
            6,
            Problem::Inserted {
                expected: 6,
                found: 5
            }
        )
    );
}

#[test]
fn swapped_lines_are_named_as_reordered() {
    let t = tmp();
    let (path, _) = ten(t.path());
    let mut lines = read_lines(&path);
    lines.swap(4, 5); // lines 5 and 6
    write_lines(&path, &lines);
    let (line, problem, _) = broken(&path, None);
    assert_eq!(
        (line, problem),
        (
            5,
            Problem::Reordered {
                expected: 5,
                found: 6,
                at: 6
            }
        )
    );
}

#[test]
fn truncated_last_line_is_named() {
    let t = tmp();
    let (path, heads) = ten(t.path());
    let data = std::fs::read(&path).unwrap();
    std::fs::write(&path, &data[..data.len() - 40]).unwrap();
    let (line, problem, last_good) = broken(&path, None);
    assert_eq!((line, problem), (10, Problem::Truncated));
    assert_eq!(last_good.head, heads[8].hash);

    // Cut mid-record but followed by a newline: still a truncated last line.
    let mut cut = data[..data.len() - 40].to_vec();
    cut.push(b'\n');
    std::fs::write(&path, &cut).unwrap();
    let (line, problem, _) = broken(&path, None);
    assert_eq!((line, problem), (10, Problem::Truncated));

    // Only the final newline missing.
    std::fs::write(&path, &data[..data.len() - 1]).unwrap();
    let (line, problem, _) = broken(&path, None);
    assert_eq!((line, problem), (10, Problem::Truncated));
}

#[test]
fn removed_last_record_is_caught_only_with_the_expected_head() {
    let t = tmp();
    let (path, heads) = ten(t.path());
    let mut lines = read_lines(&path);
    lines.pop();
    write_lines(&path, &lines);
    assert_eq!(
        verify_file(&path, None).unwrap(),
        VerifyOk {
            records: 9,
            head: heads[8].hash.clone()
        }
    );
    let (line, problem, _) = broken(&path, Some(&heads[9].hash));
    assert_eq!(
        (line, problem),
        (
            10,
            Problem::HeadMismatch {
                records: 9,
                head: heads[8].hash.clone(),
                expected: heads[9].hash.clone()
            }
        )
    );
}

#[test]
fn records_after_the_expected_head_are_named() {
    let t = tmp();
    let (path, heads) = ten(t.path());
    let (line, problem, last_good) = broken(&path, Some(&heads[7].hash));
    assert_eq!(
        (line, problem),
        (
            9,
            Problem::AfterHead {
                expected: heads[7].hash.clone(),
                head_line: 8,
                records: 10
            }
        )
    );
    assert_eq!(last_good.records, 8);
    // And the right head passes.
    assert_eq!(
        verify_file(&path, Some(&heads[9].hash)).unwrap().records,
        10
    );
}

#[test]
fn bad_json_is_named() {
    let t = tmp();
    let (path, _) = ten(t.path());
    let mut lines = read_lines(&path);
    lines[4] = "{\"v\":1,\"seq\":5,,}".to_string();
    write_lines(&path, &lines);
    let (line, problem, _) = broken(&path, None);
    assert_eq!(line, 5);
    assert!(matches!(problem, Problem::BadJson(_)), "{problem:?}");

    lines[4] = "not json at all".to_string();
    write_lines(&path, &lines);
    let (line, problem, _) = broken(&path, None);
    assert_eq!(line, 5);
    assert!(matches!(problem, Problem::BadJson(_)), "{problem:?}");
}

#[test]
fn empty_line_is_named() {
    let t = tmp();
    let (path, _) = ten(t.path());
    let mut lines = read_lines(&path);
    lines.insert(2, String::new());
    write_lines(&path, &lines);
    let (line, problem, _) = broken(&path, None);
    assert_eq!((line, problem), (3, Problem::EmptyLine));
}

#[test]
fn duplicate_members_are_refused() {
    let t = tmp();
    let (path, _) = ten(t.path());
    let mut lines = read_lines(&path);
    // A second "event" member, which a lenient reader would let win.
    lines[5] = lines[5].replace(
        "\"event\":\"tool_result\"",
        "\"event\":\"tool_result\",\"event\":\"nothing\"",
    );
    write_lines(&path, &lines);
    let (line, problem, _) = broken(&path, None);
    assert_eq!(
        (line, problem),
        (
            6,
            Problem::Malformed("duplicate member \"event\"".to_string())
        )
    );
}

#[test]
fn empty_file_verifies_as_genesis() {
    let t = tmp();
    let p = t.path().join("audit-x-20260101T000000.000000Z.jsonl");
    std::fs::write(&p, b"").unwrap();
    assert_eq!(
        verify_file(&p, Some(tollgate_audit::GENESIS)).unwrap(),
        VerifyOk {
            records: 0,
            head: tollgate_audit::GENESIS.to_string()
        }
    );
    assert!(matches!(
        verify_file(&t.path().join("missing.jsonl"), None),
        Err(VerifyError::Io { .. })
    ));
}
