//! A log written by release 0.1.0 (`tests/fixtures/release-0.1.0`, see its
//! README) still verifies, reports exactly as that release reported it, and
//! reads as typed events whose fields write back the same members.

use std::path::PathBuf;

use serde_json::{Map, Value};
use tollgate_audit::event::{Event, Parsed};
use tollgate_audit::verify::{parse_line, verify_dir};

use crate::common::read_lines;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/release-0.1.0")
}

fn audit_dir() -> PathBuf {
    fixture().join("audit")
}

fn saved(name: &str) -> String {
    std::fs::read_to_string(fixture().join(name)).unwrap()
}

#[test]
fn the_release_0_1_0_log_verifies_file_by_file_against_its_anchors() {
    let verdicts = verify_dir(&audit_dir()).unwrap();
    assert_eq!(verdicts.len(), 9);
    // What release 0.1.0 printed: "<path>: ok: N records …" (or
    // "unanchored: N records" for the file a SIGKILL left unanchored).
    let expected: Vec<(String, u64)> = saved("verify.txt")
        .lines()
        .filter_map(|l| {
            let (path, rest) = l.split_once(": ")?;
            let name = path.strip_prefix("audit/")?;
            let n = rest.split_whitespace().nth(1)?.parse().ok()?;
            Some((name.to_string(), n))
        })
        .collect();
    assert_eq!(expected.len(), 9, "{expected:?}");
    for (v, (name, records)) in verdicts.iter().zip(&expected) {
        let ok = v
            .result
            .as_ref()
            .unwrap_or_else(|e| panic!("{}: {e}", v.path.display()));
        assert_eq!(v.path.file_name().unwrap().to_string_lossy(), *name);
        assert_eq!(ok.records, *records, "{name}");
    }
    let anchored = verdicts
        .iter()
        .filter(|v| v.expected_head.is_some())
        .count();
    assert_eq!(
        anchored, 7,
        "two files without an anchor: the newest supervisor log and the crashed session's"
    );
}

#[test]
fn the_report_is_what_release_0_1_0_printed() {
    let r = tollgate_audit::report::report(&[audit_dir()]).unwrap();
    assert_eq!(r.to_string(), saved("report.txt"));
    assert_eq!(
        format!("{}\n", serde_json::to_string_pretty(&r).unwrap()),
        saved("report.json")
    );
}

/// Every record the release wrote is a known kind, and its typed form
/// writes back exactly the members it was read from (same keys, same
/// values; the writer emits them sorted, as the release did): so records
/// written through the types are the bytes the release wrote.
#[test]
fn every_record_reads_as_a_typed_event_that_writes_back_the_same_members() {
    let mut kinds = std::collections::BTreeSet::new();
    let mut files = std::fs::read_dir(audit_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect::<Vec<_>>();
    files.sort();
    for path in files {
        for line in read_lines(&path) {
            let rec = parse_line(line.as_bytes()).unwrap();
            let event = match rec.event() {
                Parsed::Known(e) => e,
                Parsed::Unknown { event, why } => {
                    panic!("{}: {event} does not read: {why}", path.display())
                }
            };
            assert_eq!(event.name(), rec.event);
            let back: Map<String, Value> = event.fields().unwrap();
            assert_eq!(back, rec.fields, "{}: {}", path.display(), rec.event);
            kinds.insert(event.name());
        }
    }
    assert_eq!(kinds.len(), 17, "{kinds:?}");
}

/// The members of a record written through the types come out in the order
/// the release wrote them, byte for byte.
#[test]
fn a_typed_record_writes_the_release_bytes() {
    let line = read_lines(&audit_dir().join("audit-G8o-9C5EYWuF-20261201T201513.716938Z.jsonl"))
        .into_iter()
        .find(|l| l.contains("\"event\":\"tool_result\""))
        .unwrap();
    let rec = parse_line(line.as_bytes()).unwrap();
    let Parsed::Known(event @ Event::ToolResult(_)) = rec.event() else {
        panic!("not a tool_result")
    };
    let mut members = String::new();
    for (k, v) in event.fields().unwrap() {
        members.push_str(&format!(",{}:{}", Value::String(k), v));
    }
    let start = line.find(",\"bytes\"").unwrap();
    let end = line.find(",\"prev\"").unwrap();
    assert_eq!(members, line[start..end]);
}
