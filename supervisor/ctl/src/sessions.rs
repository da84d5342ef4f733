//! status, sessions, show, revoke, kill.

use serde_json::{Value, json};
use tollgate_proto::v1 as pb;

use crate::client::{Client, status_error};
use crate::table;

pub fn session_json(s: &pb::SessionInfo) -> Value {
    json!({
        "id": s.id, "uid": s.uid, "gid": s.gid, "pid": s.pid, "workspace": s.workspace,
        "mode": s.mode, "state": s.state, "created_unix_ms": s.created_unix_ms,
        "tools": s.tools, "tool_calls": s.tool_calls, "max_tool_calls": s.max_tool_calls,
        "tokens_in": s.tokens_in, "tokens_out": s.tokens_out, "cost_usd": s.cost_usd,
        "max_cost_usd": s.max_cost_usd, "pending_approvals": s.pending_approvals,
        "sandbox": s.sandbox, "end_reason": s.end_reason, "client": s.client,
        "audit_file": s.audit_file, "token_expires_unix_ms": s.token_expires_unix_ms,
    })
}

pub async fn status(mut c: Client, json_out: bool) -> anyhow::Result<()> {
    let s = c
        .status(pb::StatusRequest {})
        .await
        .map_err(status_error)?
        .into_inner();
    if json_out {
        println!(
            "{}",
            json!({
                "version": s.version, "pid": s.pid, "uptime_s": s.uptime_s, "sandbox": s.sandbox,
                "sandbox_strength": s.sandbox_strength, "sessions_active": s.sessions_active,
                "approvals_pending": s.approvals_pending, "audit_dir": s.audit_dir,
                "audit_sync": s.audit_sync, "agent_socket": s.agent_socket,
                "operator_socket": s.operator_socket, "state_dir": s.state_dir,
                "telemetry": telemetry_json(s.telemetry.as_ref()),
            })
        );
        return Ok(());
    }
    let rows = [
        (
            "supervisor",
            format!(
                "running (pid {}, version {}, up {}s)",
                s.pid, s.version, s.uptime_s
            ),
        ),
        ("sandbox", format!("{}: {}", s.sandbox, s.sandbox_strength)),
        ("sessions", format!("{} active", s.sessions_active)),
        ("approvals", format!("{} pending", s.approvals_pending)),
        ("audit", format!("{} (sync {})", s.audit_dir, s.audit_sync)),
        ("agent socket", s.agent_socket),
        ("operator socket", s.operator_socket),
        ("telemetry", telemetry_line(s.telemetry.as_ref())),
    ];
    for (k, v) in rows {
        println!("{:<16} {}", format!("{k}:"), table::escape(&v));
    }
    Ok(())
}

fn telemetry_json(t: Option<&pb::TelemetryStatus>) -> serde_json::Value {
    match t {
        None => json!({"enabled": false}),
        Some(t) => json!({
            "enabled": t.enabled, "endpoint": t.endpoint, "queued": t.queued,
            "queue_size": t.queue_size, "exported": t.exported, "dropped": t.dropped,
            "failed": t.failed, "last_error": t.last_error, "log_tool_details": t.log_tool_details,
        }),
    }
}

/// `off`, or where events go and what was lost.
fn telemetry_line(t: Option<&pb::TelemetryStatus>) -> String {
    let Some(t) = t else {
        return "off".to_string();
    };
    let mut line = format!(
        "otlp {}: {} exported, {} dropped (queue full), {} failed, {}/{} queued",
        t.endpoint, t.exported, t.dropped, t.failed, t.queued, t.queue_size
    );
    if !t.last_error.is_empty() {
        line.push_str(&format!(" — last error: {}", t.last_error));
    }
    line
}

pub async fn list(mut c: Client, json_out: bool, all: bool) -> anyhow::Result<()> {
    let list = c
        .list_sessions(pb::ListSessionsRequest { include_ended: all })
        .await
        .map_err(status_error)?
        .into_inner()
        .sessions;
    if json_out {
        let v: Vec<Value> = list.iter().map(session_json).collect();
        println!("{}", Value::Array(v));
        return Ok(());
    }
    if list.is_empty() {
        println!(
            "no sessions{}",
            if all {
                ""
            } else {
                " (use --all for ended ones)"
            }
        );
        return Ok(());
    }
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|s| {
            vec![
                s.id.clone(),
                s.state.clone(),
                s.uid.to_string(),
                s.mode.clone(),
                format!("{}/{}", s.tool_calls, s.max_tool_calls),
                format!("${:.4}", s.cost_usd),
                s.pending_approvals.to_string(),
                table::ago(s.created_unix_ms),
                s.workspace.clone(),
            ]
        })
        .collect();
    table::print(
        &[
            "SESSION",
            "STATE",
            "UID",
            "MODE",
            "CALLS",
            "COST",
            "PENDING",
            "OPENED",
            "WORKSPACE",
        ],
        &rows,
    );
    Ok(())
}

pub async fn show(mut c: Client, id: String, json_out: bool) -> anyhow::Result<()> {
    let s = c
        .get_session(pb::GetSessionRequest { session_id: id })
        .await
        .map_err(status_error)?
        .into_inner();
    if json_out {
        println!("{}", session_json(&s));
        return Ok(());
    }
    let tools = if s.tools.is_empty() {
        "all".to_string()
    } else {
        s.tools.join(",")
    };
    let rows = [
        ("session", s.id.clone()),
        (
            "state",
            if s.end_reason.is_empty() {
                s.state.clone()
            } else {
                format!("{} ({})", s.state, s.end_reason)
            },
        ),
        ("uid", format!("{} (gid {}, pid {})", s.uid, s.gid, s.pid)),
        ("client", s.client.clone()),
        ("workspace", s.workspace.clone()),
        ("mode", s.mode.clone()),
        ("tools", tools),
        ("sandbox", s.sandbox.clone()),
        (
            "tool calls",
            format!("{} of {}", s.tool_calls, s.max_tool_calls),
        ),
        (
            "llm",
            format!(
                "{} tokens in, {} out, ${:.4} of ${:.2}",
                s.tokens_in, s.tokens_out, s.cost_usd, s.max_cost_usd
            ),
        ),
        ("approvals", format!("{} pending", s.pending_approvals)),
        ("opened", table::ago(s.created_unix_ms)),
        ("audit", s.audit_file.clone()),
    ];
    for (k, v) in rows {
        println!("{:<11} {}", format!("{k}:"), table::escape(&v));
    }
    Ok(())
}

pub async fn revoke(mut c: Client, id: String, reason: Option<String>) -> anyhow::Result<()> {
    let s = c
        .revoke_session(pb::RevokeSessionRequest {
            session_id: id,
            reason: reason.unwrap_or_default(),
        })
        .await
        .map_err(status_error)?
        .into_inner();
    println!("revoked {} ({})", s.id, table::escape(&s.end_reason));
    Ok(())
}

pub async fn kill(mut c: Client, id: Option<String>, all: bool) -> anyhow::Result<()> {
    let r = c
        .kill_session(pb::KillSessionRequest {
            session_id: id.unwrap_or_default(),
            all,
            reason: String::new(),
        })
        .await
        .map_err(status_error)?
        .into_inner();
    if r.killed.is_empty() {
        println!("no sessions killed");
    }
    for id in r.killed {
        println!("killed {id}");
    }
    Ok(())
}
