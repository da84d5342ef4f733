//! The report: counts per tool and rule, approvals attributed to rules,
//! suggestions with their thresholds.

use std::io::Write;

use serde_json::json;
use tollgate_audit::report::{Counts, RuleRow, SuggestionKind, Thresholds, report, report_with};
use tollgate_audit::{Audit, AuditFile, SyncMode};

use crate::common::tmp;

fn check(
    f: &AuditFile,
    s: &str,
    tool: &str,
    decision: &str,
    rule: Option<&str>,
    extra: serde_json::Value,
) {
    let mut fields = json!({
        "tool": tool,
        "decision": decision,
        "code": "OK",
        "rule": rule,
        "reason": "r",
        "consequence": "c",
    });
    for (k, v) in extra.as_object().unwrap() {
        fields[k] = v.clone();
    }
    f.append(s, "permission_check", fields).unwrap();
}

fn approval(f: &AuditFile, s: &str, id: &str, tool: &str, outcome: &str, destructive: bool) {
    f.append(
        s,
        "approval_requested",
        json!({"approval_id": id, "tool": tool, "consequence": "c", "destructive": destructive}),
    )
    .unwrap();
    f.append(
        s,
        "approval_decided",
        json!({"approval_id": id, "tool": tool, "outcome": outcome, "scope": "once", "by": "uid 0 (operator)"}),
    )
    .unwrap();
}

#[test]
fn counts_and_suggestions() {
    let t = tmp();
    let dir = t.path().join("audit");
    let audit = Audit::open(&dir, SyncMode::Batch, None).unwrap();
    let a = audit.open_session("repA").unwrap();
    let b = audit.open_session("repB").unwrap();
    let ask_cargo = Some("ask: run_bash(cargo *)");
    // 50 confirmations of one ask rule, split over two sessions: relax.
    for i in 0..50 {
        let (f, s) = if i % 2 == 0 {
            (&a, "repA")
        } else {
            (&b, "repB")
        };
        check(f, s, "run_bash", "ask", ask_cargo, json!({}));
        approval(f, s, &format!("ap{i}"), "run_bash", "approved", false);
    }
    // One timeout on the same rule (not a refusal).
    check(&a, "repA", "run_bash", "ask", ask_cargo, json!({}));
    approval(&a, "repA", "apT", "run_bash", "timeout", false);
    // webfetch denied 6 times by the mode: missing allow rule.
    for _ in 0..6 {
        check(
            &a,
            "repA",
            "webfetch",
            "deny",
            Some("mode:dontAsk"),
            json!({}),
        );
    }
    // read_file hits the floor 5 times.
    for _ in 0..5 {
        check(
            &b,
            "repB",
            "read_file",
            "deny",
            Some("floor:path-scope"),
            json!({}),
        );
    }
    // write_file asked 5 times and refused each time: a deny rule?
    for i in 0..5 {
        check(
            &b,
            "repB",
            "write_file",
            "ask",
            Some("mode:default"),
            json!({}),
        );
        approval(&b, "repB", &format!("w{i}"), "write_file", "denied", false);
    }
    // Allowed reads: plain, session scope, auto-allow.
    for by in [
        None,
        None,
        None,
        Some("allowed(session-scope)"),
        Some("allowed(session-scope)"),
        Some("auto-allow(config)"),
    ] {
        let extra = match by {
            Some(b) => json!({"allowed_by": b}),
            None => json!({}),
        };
        check(
            &a,
            "repA",
            "read_file",
            "allow",
            Some("allow: read_file(**)"),
            extra,
        );
    }
    // A destructive ask approved 60 times is never a candidate to relax.
    for i in 0..60 {
        check(
            &a,
            "repA",
            "run_bash",
            "ask",
            Some("confirm:git-push-force"),
            json!({}),
        );
        approval(&a, "repA", &format!("d{i}"), "run_bash", "approved", true);
    }
    let sup = audit.supervisor_log().unwrap();
    sup.append("", "config", json!({"secret_env_count": 2}))
        .unwrap();
    audit.flush().unwrap();
    // A stray line a report must survive.
    let mut fh = std::fs::OpenOptions::new()
        .append(true)
        .open(b.path())
        .unwrap();
    fh.write_all(b"garbage\n").unwrap();

    let r = report(std::slice::from_ref(&dir)).unwrap();
    assert_eq!(r.files, 3);
    assert_eq!(r.sessions, 2);
    assert_eq!(r.unreadable_lines, 1);
    assert_eq!(r.events["permission_check"], 50 + 1 + 6 + 5 + 5 + 6 + 60);
    assert_eq!(r.events["approval_decided"], 50 + 1 + 5 + 60);
    let row = |tool: &str, rule: &str, counts: Counts| RuleRow {
        tool: tool.to_string(),
        rule: rule.to_string(),
        counts,
    };
    assert_eq!(
        r.rules,
        vec![
            row(
                "read_file",
                "allow: read_file(**)",
                Counts {
                    allowed: 6,
                    auto_allowed: 1,
                    session_scope: 2,
                    ..Counts::default()
                }
            ),
            row(
                "read_file",
                "floor:path-scope",
                Counts {
                    denied: 5,
                    ..Counts::default()
                }
            ),
            row(
                "run_bash",
                "ask: run_bash(cargo *)",
                Counts {
                    asked: 51,
                    approved: 50,
                    expired: 1,
                    ..Counts::default()
                }
            ),
            row(
                "run_bash",
                "confirm:git-push-force",
                Counts {
                    asked: 60,
                    approved: 60,
                    destructive: 60,
                    ..Counts::default()
                }
            ),
            row(
                "webfetch",
                "mode:dontAsk",
                Counts {
                    denied: 6,
                    ..Counts::default()
                }
            ),
            row(
                "write_file",
                "mode:default",
                Counts {
                    asked: 5,
                    rejected: 5,
                    ..Counts::default()
                }
            ),
        ]
    );
    let tools: Vec<(&str, u64, u64)> = r
        .tools
        .iter()
        .map(|t| (t.tool.as_str(), t.counts.asked, t.counts.denied))
        .collect();
    assert_eq!(
        tools,
        [
            ("read_file", 0, 5),
            ("run_bash", 111, 0),
            ("webfetch", 0, 6),
            ("write_file", 5, 0)
        ]
    );
    let got: Vec<(SuggestionKind, &str, u64)> = r
        .suggestions
        .iter()
        .map(|s| (s.kind, s.rule.as_str(), s.count))
        .collect();
    assert_eq!(
        got,
        [
            (SuggestionKind::Relax, "ask: run_bash(cargo *)", 50),
            (SuggestionKind::MissingAllowRule, "mode:dontAsk", 6),
            (SuggestionKind::DenyRule, "mode:default", 5),
            (SuggestionKind::Floor, "floor:path-scope", 5),
        ]
    );
    assert_eq!(
        r.suggestions[0].text,
        "ask rule `ask: run_bash(cargo *)` for run_bash confirmed 50 times and never denied: candidate to relax (an allow rule)"
    );
    assert_eq!(
        r.suggestions[1].text,
        "tool webfetch denied 6 times by rule `mode:dontAsk`: a missing allow rule?"
    );

    let text = r.to_string();
    assert!(text.starts_with("audit report: 3 files, "), "{text}");
    assert!(text.contains("TOOL"), "{text}");
    let cargo_line = text
        .lines()
        .find(|l| {
            l.contains("ask: run_bash(cargo *)") && !l.contains("suggest") && !l.contains("- ")
        })
        .unwrap();
    let cells: Vec<&str> = cargo_line.split_whitespace().rev().take(8).collect();
    // DENIED EXPIRED REJECTED APPROVED ASKED SESSION AUTO ALLOWED, reversed.
    assert_eq!(cells, ["0", "1", "0", "50", "51", "0", "0", "0"]);
    assert!(text.contains("candidate to relax"), "{text}");
    assert!(text.contains("relax: approved >= 50"), "{text}");

    // JSON for --json.
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(v["rules"][2]["approved"], json!(50));
    assert_eq!(v["suggestions"][0]["kind"], json!("relax"));
    assert_eq!(v["thresholds"]["relax_min_approved"], json!(50));

    // Thresholds are parameters.
    let strict = Thresholds {
        relax_min_approved: 51,
        missing_rule_min_denied: 7,
        deny_min_rejected: 6,
    };
    let r2 = report_with(&[a.path().to_path_buf(), b.path().to_path_buf()], &strict).unwrap();
    assert_eq!(r2.files, 2);
    assert!(r2.suggestions.is_empty(), "{:?}", r2.suggestions);
}

#[test]
fn approvals_follow_call_ids_and_explicit_rules() {
    let t = tmp();
    let audit = Audit::open(&t.path().join("audit"), SyncMode::Always, None).unwrap();
    let f = audit.open_session("link1").unwrap();
    // Two asks for the same tool under different rules, then the approvals in
    // the opposite order, linked by call_id.
    check(
        &f,
        "link1",
        "run_bash",
        "ask",
        Some("ask: run_bash(make *)"),
        json!({"call_id": "c1"}),
    );
    check(
        &f,
        "link1",
        "run_bash",
        "ask",
        Some("mode:default"),
        json!({"call_id": "c2"}),
    );
    f.append(
        "link1",
        "approval_requested",
        json!({"approval_id": "a2", "tool": "run_bash", "call_id": "c2"}),
    )
    .unwrap();
    f.append(
        "link1",
        "approval_requested",
        json!({"approval_id": "a1", "tool": "run_bash", "call_id": "c1"}),
    )
    .unwrap();
    f.append(
        "link1",
        "approval_decided",
        json!({"approval_id": "a1", "tool": "run_bash", "outcome": "denied"}),
    )
    .unwrap();
    f.append(
        "link1",
        "approval_decided",
        json!({"approval_id": "a2", "tool": "run_bash", "outcome": "approved"}),
    )
    .unwrap();
    // An explicit rule on the approval wins.
    check(
        &f,
        "link1",
        "edit_file",
        "ask",
        Some("mode:default"),
        json!({}),
    );
    f.append(
        "link1",
        "approval_requested",
        json!({"approval_id": "a3", "tool": "edit_file", "rule": "mode:default"}),
    )
    .unwrap();
    f.append(
        "link1",
        "approval_decided",
        json!({"approval_id": "a3", "tool": "edit_file", "outcome": "withdrawn"}),
    )
    .unwrap();
    // A decision whose request is not in the input at all.
    f.append(
        "link1",
        "approval_decided",
        json!({"approval_id": "zz", "tool": "grep", "outcome": "approved"}),
    )
    .unwrap();

    let r = report(&[f.path().to_path_buf()]).unwrap();
    let rows: Vec<(&str, &str, u64, u64, u64, u64)> = r
        .rules
        .iter()
        .map(|x| {
            (
                x.tool.as_str(),
                x.rule.as_str(),
                x.counts.asked,
                x.counts.approved,
                x.counts.rejected,
                x.counts.expired,
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("edit_file", "mode:default", 1, 0, 0, 1),
            ("grep", "-", 0, 1, 0, 0),
            ("run_bash", "ask: run_bash(make *)", 1, 0, 1, 0),
            ("run_bash", "mode:default", 1, 1, 0, 0),
        ]
    );
}

#[test]
fn empty_report_says_so() {
    let t = tmp();
    let dir = t.path().join("audit");
    let _audit = Audit::open(&dir, SyncMode::Always, None).unwrap();
    let r = report(&[dir]).unwrap();
    assert_eq!(r.records, 0);
    let text = r.to_string();
    assert!(text.contains("no permission checks recorded"), "{text}");
    assert!(text.contains("  none"), "{text}");
    assert!(report(&[t.path().join("missing")]).is_err());
}

#[test]
fn hosts_are_listed_with_their_connections_refusals_and_bytes() {
    let t = tmp();
    let dir = t.path().join("audit");
    let audit = Audit::open(&dir, SyncMode::Batch, None).unwrap();
    let f = audit.open_session("netS").unwrap();
    let net = |phase: &str, host: &str, extra: serde_json::Value| {
        let mut fields =
            json!({"phase": phase, "host": host, "port": 443, "decision": "allow", "rule": "r"});
        for (k, v) in extra.as_object().unwrap() {
            fields[k] = v.clone();
        }
        f.append("netS", "net_connection", fields).unwrap();
    };
    for i in 0..3 {
        net("open", "ok.example", json!({"conn": i}));
        net(
            "close",
            "ok.example",
            json!({"conn": i, "bytes_up": 10, "bytes_down": 1000}),
        );
    }
    net("refused", "evil.example", json!({"decision": "deny"}));
    net(
        "refused",
        "",
        json!({"port": 0, "decision": "deny", "rule": "network:bad-request"}),
    );
    net(
        "refusals_summary",
        "",
        json!({"port": 0, "decision": "deny", "suppressed": 500}),
    );
    drop(f);
    let r = report(&[dir]).unwrap();
    let rows: Vec<(String, u16, u64, u64, u64, u64)> = r
        .hosts
        .iter()
        .map(|h| {
            (
                h.host.clone(),
                h.port,
                h.opened,
                h.refused,
                h.bytes_up,
                h.bytes_down,
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("(bad request)".to_string(), 0, 0, 501, 0, 0),
            ("ok.example".to_string(), 443, 3, 0, 30, 3000),
            ("evil.example".to_string(), 443, 0, 1, 0, 0),
        ]
    );
    let text = r.to_string();
    assert!(
        text.contains("network (net_connection records per host):"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["ok.example", "443", "3", "0", "30", "3000"]),
        "{text}"
    );
}
