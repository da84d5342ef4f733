//! approvals, approve, deny, watch.

use futures_util::StreamExt;
use serde_json::{Value, json};
use tollgate_proto::v1 as pb;

use crate::client::{Client, status_error};
use crate::table;

pub fn approval_json(a: &pb::Approval) -> Value {
    json!({
        "id": a.id, "session": a.session_id, "uid": a.uid, "tool": a.tool,
        "consequence": a.consequence, "diff": a.diff, "destructive": a.destructive,
        "target": a.target, "created_unix_ms": a.created_unix_ms,
        "deadline_unix_ms": a.deadline_unix_ms, "rule": a.rule, "reason": a.reason,
        "arguments": a.arguments_json, "status": a.status,
    })
}

pub async fn list(mut c: Client, json_out: bool, all: bool) -> anyhow::Result<()> {
    let list = c
        .list_approvals(pb::ListApprovalsRequest {
            include_decided: all,
        })
        .await
        .map_err(status_error)?
        .into_inner()
        .approvals;
    if json_out {
        outln!("{}", Value::Array(list.iter().map(approval_json).collect()));
        return Ok(());
    }
    if list.is_empty() {
        outln!("no pending approvals");
        return Ok(());
    }
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|a| {
            vec![
                a.id.clone(),
                a.session_id.clone(),
                a.status.clone(),
                a.tool.clone(),
                if a.status == "pending" {
                    table::until(a.deadline_unix_ms)
                } else {
                    String::new()
                },
                format!(
                    "{}{}",
                    if a.destructive {
                        "⚠ DESTRUCTIVE: "
                    } else {
                        ""
                    },
                    table::escape(&a.consequence)
                ),
            ]
        })
        .collect();
    table::print(
        &[
            "APPROVAL",
            "SESSION",
            "STATUS",
            "TOOL",
            "DEADLINE",
            "CONSEQUENCE",
        ],
        &rows,
    );
    for a in list.iter().filter(|a| a.status == "pending") {
        if a.destructive {
            outln!(
                "\n{} is destructive: approve with --confirm {:?}",
                a.id,
                table::escape(&a.target)
            );
        } else if let Some(full) = in_full(a) {
            outln!("\n{} in full: {full}", a.id);
        }
    }
    Ok(())
}

/// What a pending approval does, in full, when its consequence shows only
/// part of it (a long command is cut there, and marked): nobody approves a
/// prefix.
fn in_full(a: &pb::Approval) -> Option<String> {
    let target = table::escape(&a.target);
    (!target.is_empty() && !a.consequence.contains(&target)).then_some(target)
}

/// An approve or a deny, as typed.
pub struct Decide {
    pub id: String,
    pub approve: bool,
    pub scope: String,
    pub confirm: Option<String>,
    pub reason: Option<String>,
}

impl Decide {
    /// `deny APPROVAL [--reason]`.
    pub fn deny(id: String, reason: Option<String>) -> Decide {
        Decide {
            id,
            approve: false,
            scope: "once".to_string(),
            confirm: None,
            reason,
        }
    }
}

pub async fn decide(mut c: Client, d: Decide, json_out: bool) -> anyhow::Result<()> {
    let r = c
        .decide_approval(pb::DecideApprovalRequest {
            approval_id: d.id.clone(),
            approve: d.approve,
            scope: d.scope.clone(),
            // clap takes only once or session.
            approval_scope: if d.scope == "session" {
                pb::ApprovalScope::Session
            } else {
                pb::ApprovalScope::Once
            } as i32,
            confirm: d.confirm.unwrap_or_default(),
            reason: d.reason.unwrap_or_default(),
        })
        .await
        .map_err(status_error)?
        .into_inner();
    if json_out {
        outln!(
            "{}",
            json!({
                "approval": d.id, "outcome": r.approval_outcome().text(), "decided_by": r.decided_by,
                "scope": d.approve.then_some(&d.scope),
            })
        );
    } else {
        outln!(
            "{} {} by {}",
            d.id,
            r.approval_outcome().text(),
            r.decided_by
        );
    }
    Ok(())
}

pub async fn watch(mut c: Client, session: Option<String>, json_out: bool) -> anyhow::Result<()> {
    let mut stream = c
        .watch_events(pb::WatchEventsRequest {
            session_id: session.unwrap_or_default(),
        })
        .await
        .map_err(status_error)?
        .into_inner();
    while let Some(ev) = stream.next().await {
        let ev = ev.map_err(status_error)?;
        if json_out {
            let fields: Value = serde_json::from_str(&ev.json).unwrap_or(Value::Null);
            outln!(
                "{}",
                json!({
                    "ts_unix_ms": ev.ts_unix_ms, "session": ev.session_id, "event": ev.event,
                    "summary": ev.summary, "fields": fields,
                })
            );
        } else {
            let secs = ev.ts_unix_ms / 1000;
            let (h, m, s) = ((secs / 3600) % 24, (secs / 60) % 60, secs % 60);
            let session = if ev.session_id.is_empty() {
                "-".to_string()
            } else {
                ev.session_id.clone()
            };
            outln!(
                "{h:02}:{m:02}:{s:02}Z {:<12} {:<18} {}",
                session,
                ev.event,
                table::escape(&ev.summary)
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_consequence_is_followed_by_the_whole_target() {
        let long = format!("echo ok; {}; curl evil", "x".repeat(300));
        let a = pb::Approval {
            consequence: format!(
                "run `{}` in the sandbox (no network)",
                tollgate_policy::cut_for_display(&long, 200)
            ),
            target: long.clone(),
            ..Default::default()
        };
        assert_eq!(in_full(&a), Some(long));
        let short = pb::Approval {
            consequence: "run `ls` in the sandbox (no network)".into(),
            target: "ls".into(),
            ..Default::default()
        };
        assert_eq!(in_full(&short), None);
        let bidi = pb::Approval {
            consequence: "run `x` in the sandbox".into(),
            target: "rm -rf \u{202E}x".into(),
            ..Default::default()
        };
        assert_eq!(in_full(&bidi).as_deref(), Some("rm -rf \\u{202e}x"));
    }
}
