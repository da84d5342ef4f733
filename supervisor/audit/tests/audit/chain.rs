//! The writer: record layout, chain, hash recipe, redaction, escaping,
//! file modes, the supervisor log and head anchoring.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::sync::Arc;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tollgate_audit::verify::{Problem, verify_dir};
use tollgate_audit::{
    Appended, Audit, AuditError, GENESIS, Redactor, SyncMode, VerifyError, verify_file,
};

use crate::common::{files_in, parse, read_lines, tmp, write_lines};

#[test]
fn appended_records_chain_and_verify() {
    let t = tmp();
    let audit = Audit::open(&t.path().join("audit"), SyncMode::Always, None).unwrap();
    let f = audit.open_session("sessA1").unwrap();
    assert_eq!(
        f.head(),
        Appended {
            seq: 0,
            hash: GENESIS.to_string()
        }
    );
    let mut heads = Vec::new();
    for i in 0..5 {
        heads.push(
            f.append(
                "sessA1",
                "tool_started",
                json!({"i": i, "tool": "read_file"}),
            )
            .unwrap(),
        );
    }
    assert_eq!(
        heads.iter().map(|h| h.seq).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5]
    );
    assert_eq!(f.head(), heads[4]);
    let ok = verify_file(f.path(), Some(&heads[4].hash)).unwrap();
    assert_eq!(ok.records, 5);
    assert_eq!(ok.head, heads[4].hash);

    let lines = read_lines(f.path());
    let mut prev = GENESIS.to_string();
    for (i, line) in lines.iter().enumerate() {
        let rec = parse(line);
        assert_eq!(rec["seq"], json!(i + 1));
        assert_eq!(rec["prev"], json!(prev));
        assert_eq!(rec["hash"], json!(heads[i].hash));
        assert_eq!(rec["session"], json!("sessA1"));
        assert_eq!(rec["event"], json!("tool_started"));
        prev = heads[i].hash.clone();
    }
}

#[test]
fn layout_and_hash_follow_the_documented_recipe() {
    let t = tmp();
    let audit = Audit::open(&t.path().join("audit"), SyncMode::Always, None).unwrap();
    let f = audit.open_session("layout1").unwrap();
    f.append(
        "layout1",
        "permission_check",
        json!({"tool": "run_bash", "decision": "deny"}),
    )
    .unwrap();
    f.append("layout1", "tool_result", json!({"exit_code": 0}))
        .unwrap();
    let lines = read_lines(f.path());
    let first = &lines[0];
    // Member order: v, seq, ts, session, event, fields, prev, hash.
    let re = regex::Regex::new(
        r#"^\{"v":1,"seq":1,"ts":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z","session":"layout1","event":"permission_check","decision":"deny","tool":"run_bash","prev":"0{64}","hash":"[0-9a-f]{64}"\}$"#,
    )
    .unwrap();
    assert!(re.is_match(first), "{first}");
    // An outside tool's check: sha256(prev ‖ line without the hash member).
    for line in &lines {
        let b = line.as_bytes();
        let n = b.len();
        assert_eq!(&b[n - 75..n - 66], b",\"hash\":\"");
        let mut body = b[..n - 75].to_vec();
        body.push(b'}');
        let prev = parse(line)["prev"].as_str().unwrap().to_string();
        let mut h = Sha256::new();
        h.update(prev.as_bytes());
        h.update(&body);
        assert_eq!(hex::encode(h.finalize()), line[n - 66..n - 2]);
    }
}

#[test]
fn bad_records_are_refused_and_nothing_is_written() {
    let t = tmp();
    let audit = Audit::open(&t.path().join("audit"), SyncMode::Always, None).unwrap();
    let f = audit.open_session("bad1").unwrap();
    for field in ["v", "seq", "ts", "session", "event", "prev", "hash"] {
        let mut m = serde_json::Map::new();
        m.insert(field.to_string(), json!("x"));
        match f.append("bad1", "e", Value::Object(m)) {
            Err(AuditError::ReservedField { field: got }) => assert_eq!(got, field),
            other => panic!("{field}: {other:?}"),
        }
    }
    assert!(matches!(
        f.append("bad1", "e", json!([1, 2])),
        Err(AuditError::NotAnObject)
    ));
    for ev in ["", "Bad Event", "x\ny", &"e".repeat(65)] {
        assert!(
            matches!(
                f.append("bad1", ev, json!({})),
                Err(AuditError::InvalidEvent { .. })
            ),
            "{ev:?}"
        );
    }
    assert_eq!(std::fs::metadata(f.path()).unwrap().len(), 0);
    // Null fields mean none.
    f.append("bad1", "ok", Value::Null).unwrap();
    assert_eq!(verify_file(f.path(), None).unwrap().records, 1);
    for id in ["", "../x", "a/b", "a b", &"s".repeat(65)] {
        assert!(
            matches!(
                audit.open_session(id),
                Err(AuditError::InvalidSession { .. })
            ),
            "{id:?}"
        );
    }
}

#[test]
fn strings_are_redacted_before_they_reach_the_file() {
    let t = tmp();
    let dir = t.path().join("audit");
    let audit = Audit::open(&dir, SyncMode::Always, None).unwrap();
    let secret = "s3cr3t-canary-value-XYZ";
    audit.set_redactor(Redactor::new(vec![secret.to_string()]));
    let f = audit.open_session("redact1").unwrap();
    let mut fields = json!({
        "output": format!("env: TOKEN={secret}\nAKIAIOSFODNN7EXAMPLE value {secret}."),
        "nested": {"args": [format!("curl -H 'Authorization: Bearer {secret}'")]},
    });
    fields[secret] = json!("a key that is a secret");
    f.append("redact1", "tool_result", fields).unwrap();
    let sup = audit.supervisor_log().unwrap();
    sup.append(
        "",
        "config",
        json!({"api_key_env": "OPENAI_API_KEY", "note": secret}),
    )
    .unwrap();
    drop(audit);
    for path in files_in(&dir) {
        let raw = std::fs::read_to_string(&path).unwrap();
        assert!(!raw.contains(secret), "{}: {raw}", path.display());
        assert!(!raw.contains("AKIAIOSFODNN7EXAMPLE"), "{raw}");
        verify_file(&path, None).unwrap();
    }
    let rec = parse(&read_lines(f.path())[0]);
    assert_eq!(
        rec["output"],
        json!(
            "env: TOKEN=[REDACTED:secret-assignment]\n[REDACTED:aws-access-key] value [REDACTED:secret-env]."
        )
    );
    assert_eq!(
        rec["nested"],
        json!({"args": ["curl -H 'Authorization: Bearer [REDACTED:authorization]'"]})
    );
    assert_eq!(
        rec["[REDACTED:secret-env]"],
        json!("a key that is a secret")
    );
}

#[test]
fn debug_output_never_shows_a_secret() {
    let t = tmp();
    let audit = Audit::open(&t.path().join("audit"), SyncMode::Batch, None).unwrap();
    let secret = "tok-DEBUG-canary-123456";
    audit.set_redactor(Redactor::new(vec![secret.to_string()]));
    let f = audit.open_session("dbg1").unwrap();
    let scan = tollgate_audit::scan_vars([("MY_TOKEN".to_string(), secret.to_string())]);
    let printed = format!(
        "{audit:?} {f:?} {:?} {scan:?} {:?}",
        audit.redactor(),
        Redactor::new(vec![secret.to_string()])
    );
    assert!(!printed.contains(secret), "{printed}");
    assert!(!printed.contains("canary"), "{printed}");
}

#[test]
fn log_injection_and_terminal_controls_are_escaped() {
    let t = tmp();
    let audit = Audit::open(&t.path().join("audit"), SyncMode::Always, None).unwrap();
    let f = audit.open_session("inject1").unwrap();
    let path_arg = "notes\nINFO approved path=/etc/shadow.txt";
    let spoof = "invoice\u{202e}fdp.exe \u{1b}[2J\u{9b}31m\u{7f}\u{2028}x\r";
    f.append(
        "inject1",
        "permission_check",
        json!({"path": path_arg, "command": spoof}),
    )
    .unwrap();
    f.append("inject1", "tool_result", json!({"ok": true}))
        .unwrap();
    let raw = std::fs::read(f.path()).unwrap();
    // Two records, two newlines: nothing in a value made a line of its own.
    assert_eq!(raw.iter().filter(|&&b| b == b'\n').count(), 2);
    let text = String::from_utf8(raw).unwrap();
    for bad in ['\u{1b}', '\r', '\u{202e}', '\u{9b}', '\u{7f}', '\u{2028}'] {
        assert!(!text.contains(bad), "raw {bad:?} in the log");
    }
    assert!(text.contains(r#"notes\nINFO approved path=/etc/shadow.txt"#));
    assert!(text.contains(r"invoice\u202efdp.exe \u001b[2J\u009b31m\u007f\u2028x\r"));
    // And the values read back exactly.
    let rec = parse(text.lines().next().unwrap());
    assert_eq!(rec["path"], json!(path_arg));
    assert_eq!(rec["command"], json!(spoof));
    verify_file(f.path(), None).unwrap();
}

#[test]
fn directory_and_files_get_private_modes() {
    let t = tmp();
    let dir = t.path().join("var/lib/tollgate/audit");
    let audit = Audit::open(&dir, SyncMode::Always, None).unwrap();
    assert_eq!(
        std::fs::metadata(&dir).unwrap().permissions().mode() & 0o7777,
        0o700
    );
    let f = audit.open_session("modes1").unwrap();
    let sup = audit.supervisor_log().unwrap();
    for p in [f.path(), sup.path()] {
        assert_eq!(
            std::fs::metadata(p).unwrap().permissions().mode() & 0o7777,
            0o600
        );
    }
    assert!(f.file_name().starts_with("audit-modes1-"));
    assert!(f.file_name().ends_with(".jsonl"));
    assert!(sup.file_name().starts_with("supervisor-"));
}

#[test]
fn operator_group_gets_read_access() {
    if !crate::common::have_root() {
        return;
    }
    let t = tmp();
    let dir = t.path().join("audit");
    let gid = 65534;
    let audit = Audit::open(&dir, SyncMode::Always, Some(gid)).unwrap();
    let meta = std::fs::metadata(&dir).unwrap();
    assert_eq!(
        (meta.permissions().mode() & 0o7777, meta.gid()),
        (0o750, gid)
    );
    let f = audit.open_session("group1").unwrap();
    let meta = std::fs::metadata(f.path()).unwrap();
    assert_eq!(
        (meta.permissions().mode() & 0o7777, meta.gid()),
        (0o640, gid)
    );
    // Reopening the same directory with the same group is fine.
    drop(audit);
    Audit::open(&dir, SyncMode::Always, Some(gid)).unwrap();
}

#[test]
fn supervisor_log_is_one_per_run_and_links_the_previous_run() {
    let t = tmp();
    let dir = t.path().join("audit");
    let (first_name, first_head) = {
        let audit = Audit::open(&dir, SyncMode::Always, None).unwrap();
        let sup = audit.supervisor_log().unwrap();
        let again = audit.supervisor_log().unwrap();
        assert!(Arc::ptr_eq(&sup, &again));
        let rec = parse(&read_lines(sup.path())[0]);
        assert_eq!(rec["event"], json!("audit_opened"));
        assert_eq!(rec["previous"], Value::Null);
        assert_eq!(rec["sync"], json!("always"));
        sup.append("", "config", json!({"secret_env_count": 3}))
            .unwrap();
        let head = sup.append("", "shutdown", json!({})).unwrap();
        (sup.file_name(), head)
    };
    let audit = Audit::open(&dir, SyncMode::Always, None).unwrap();
    let sup = audit.supervisor_log().unwrap();
    assert_ne!(sup.file_name(), first_name);
    let rec = parse(&read_lines(sup.path())[0]);
    assert_eq!(
        rec["previous"],
        json!({"file": first_name, "records": 3, "head": first_head.hash})
    );
}

#[test]
fn a_broken_previous_supervisor_log_is_reported_and_not_extended() {
    let t = tmp();
    let dir = t.path().join("audit");
    let old_path = {
        let audit = Audit::open(&dir, SyncMode::Always, None).unwrap();
        let sup = audit.supervisor_log().unwrap();
        sup.append("", "config", json!({"n": 1})).unwrap();
        sup.append("", "config", json!({"n": 2})).unwrap();
        sup.path().to_path_buf()
    };
    let mut lines = read_lines(&old_path);
    lines[1] = lines[1].replace("\"n\":1", "\"n\":7");
    write_lines(&old_path, &lines);
    let before = std::fs::read(&old_path).unwrap();

    let audit = Audit::open(&dir, SyncMode::Always, None).unwrap();
    let sup = audit.supervisor_log().unwrap();
    assert_ne!(sup.path(), old_path);
    let rec = parse(&read_lines(sup.path())[0]);
    assert_eq!(rec["previous"], Value::Null);
    assert_eq!(
        rec["previous_file"],
        json!(old_path.file_name().unwrap().to_str().unwrap())
    );
    assert_eq!(
        rec["previous_error"],
        json!(
            "previous supervisor log broken at line 2: record edited: its hash does not match its content"
        )
    );
    // The broken file was left exactly as it was.
    assert_eq!(std::fs::read(&old_path).unwrap(), before);
}

#[test]
fn anchored_heads_catch_records_cut_from_the_end() {
    let t = tmp();
    let dir = t.path().join("audit");
    let audit = Audit::open(&dir, SyncMode::Batch, None).unwrap();
    let f = audit.open_session("anchor1").unwrap();
    for i in 0..5 {
        f.append("anchor1", "tool_result", json!({"i": i})).unwrap();
    }
    let anchored = audit.anchor(&f, "anchor1").unwrap();
    assert_eq!(anchored.seq, 2); // audit_opened, then audit_file_closed
    let other = audit.open_session("anchor2").unwrap();
    other
        .append("anchor2", "session_opened", json!({}))
        .unwrap();
    audit.flush().unwrap();

    let verdicts = verify_dir(&dir).unwrap();
    assert_eq!(verdicts.len(), 3);
    for v in &verdicts {
        assert!(v.result.is_ok(), "{}: {:?}", v.path.display(), v.result);
    }
    let v = verdicts.iter().find(|v| v.path == f.path()).unwrap();
    assert_eq!(v.expected_head.as_deref(), Some(f.head().hash.as_str()));

    // Cut the last record: only the anchor notices.
    let mut lines = read_lines(f.path());
    lines.pop();
    write_lines(f.path(), &lines);
    assert_eq!(verify_file(f.path(), None).unwrap().records, 4);
    let v = verify_dir(&dir)
        .unwrap()
        .into_iter()
        .find(|v| v.path == f.path())
        .unwrap();
    match v.result {
        Err(VerifyError::Broken {
            line: 5,
            problem: Problem::HeadMismatch { records: 4, .. },
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn batch_mode_records_verify_after_flush_and_after_drop() {
    let t = tmp();
    let dir = t.path().join("audit");
    let audit = Audit::open(&dir, SyncMode::Batch, None).unwrap();
    assert_eq!(audit.sync_mode(), SyncMode::Batch);
    let a = audit.open_session("batchA").unwrap();
    let b = audit.open_session("batchB").unwrap();
    for i in 0..500 {
        a.append("batchA", "e", json!({"i": i})).unwrap();
        b.append("batchB", "e", json!({"i": i})).unwrap();
    }
    let d = a
        .append_durable("batchA", "permission_check", json!({"decision": "allow"}))
        .unwrap();
    assert_eq!(d.seq, 501);
    audit.flush().unwrap();
    assert_eq!(verify_file(a.path(), Some(&d.hash)).unwrap().records, 501);
    assert_eq!(verify_file(b.path(), None).unwrap().records, 500);
    // A file that outlives its Audit still appends (and syncs inline).
    drop(audit);
    let last = b.append("batchB", "e", json!({"late": true})).unwrap();
    b.sync().unwrap();
    assert_eq!(
        verify_file(b.path(), Some(&last.hash)).unwrap().records,
        501
    );
}
