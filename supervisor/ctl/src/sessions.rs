//! status, sessions, show, revoke, kill.

use serde_json::{Value, json};
use tollgate_proto::v1 as pb;

use crate::client::{Client, status_error};
use crate::table;

pub fn session_json(s: &pb::SessionInfo) -> Value {
    json!({
        "id": s.id, "uid": s.uid, "gid": s.gid, "pid": s.pid, "workspace": s.workspace,
        "mode": s.permission_mode().text(), "state": s.session_state().text(), "created_unix_ms": s.created_unix_ms,
        "tools": s.tools, "tool_calls": s.tool_calls, "max_tool_calls": s.max_tool_calls,
        "tokens_in": s.tokens_in, "tokens_out": s.tokens_out, "cost_usd": s.cost_usd,
        "max_cost_usd": s.max_cost_usd, "pending_approvals": s.pending_approvals,
        "sandbox": crate::wire::session_sandbox(s), "end_reason": s.end_reason, "client": s.client,
        "client_session_id": s.client_session_id,
        "audit_file": s.audit_file, "token_expires_unix_ms": s.token_expires_unix_ms,
        "jobs": s.jobs.iter().map(job_json).collect::<Vec<_>>(),
    })
}

/// One background job of a session.
fn job_json(j: &pb::JobInfo) -> Value {
    json!({
        "id": j.id, "command": j.command, "state": j.job_state().text(),
        "started_unix_ms": j.started_unix_ms, "exit_code": j.exit_code,
        "bytes": j.bytes, "routed": j.routed,
    })
}

/// The JOBS column: how many run (`-` for none), and how many ended.
fn jobs_label(s: &pb::SessionInfo) -> String {
    let running = s
        .jobs
        .iter()
        .filter(|j| j.job_state() == pb::JobState::Running)
        .count();
    match (running, s.jobs.len() - running) {
        (0, 0) => "-".to_string(),
        (r, 0) => format!("{r} running"),
        (r, e) => format!("{r} running, {e} ended"),
    }
}

/// `show`: one line per job.
fn job_line(j: &pb::JobInfo) -> String {
    let state = match j.exit_code {
        Some(c) => format!("{} {c}", j.job_state().text()),
        None => j.job_state().text().to_string(),
    };
    format!(
        "{} {state}, started {}, {} bytes{}: {}",
        j.id,
        table::ago(j.started_unix_ms),
        j.bytes,
        if j.routed { ", routed" } else { "" },
        j.command
    )
}

/// How `status` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
    Prometheus,
}

pub async fn status(mut c: Client, format: Format) -> anyhow::Result<()> {
    let s = c
        .status(pb::StatusRequest {})
        .await
        .map_err(status_error)?
        .into_inner();
    match format {
        Format::Json => print_status_json(&s),
        Format::Prometheus => out!("{}", crate::prometheus::render(&s)),
        Format::Table => print_status_table(s),
    }
    Ok(())
}

fn records_json(r: Option<&pb::RecordCounts>) -> Value {
    let r = r.copied().unwrap_or_default();
    json!({
        "decisions": {"allow": r.decisions_allow, "ask": r.decisions_ask, "deny": r.decisions_deny},
        "egress": {"opened": r.egress_opened, "refused": r.egress_refused},
        "llm_retries": r.llm_retries,
    })
}

/// `status --json`: every field, connections and telemetry nested.
fn print_status_json(s: &pb::StatusResponse) {
    let fds = s.fds.unwrap_or_default();
    let conns = s.connections.clone().unwrap_or_default();
    outln!(
        "{}",
        json!({
            "version": s.version, "pid": s.pid, "uptime_s": s.uptime_s, "sandbox": crate::wire::status_sandbox(s),
            "sandbox_strength": s.sandbox_strength, "sessions_active": s.sessions_active,
            "approvals_pending": s.approvals_pending, "audit_dir": s.audit_dir,
            "audit_sync": s.audit_sync, "agent_socket": s.agent_socket,
            "operator_socket": s.operator_socket, "state_dir": s.state_dir,
            "docker_socket": s.docker_socket, "config_file": s.config_file,
            "fds": {
                "in_use": fds.in_use, "limit": fds.limit, "reserve": fds.reserve,
                "limit_at_start": fds.limit_at_start,
            },
            "connections": {
                "agent": {
                    "open": conns.agent_open, "max_per_uid": conns.max_per_uid,
                    "idle_timeout_s": conns.idle_timeout_s,
                    "refused_over_uid_cap": conns.refused_over_uid_cap,
                    "refused_over_fd_reserve": conns.refused_over_fd_reserve,
                    "refused_unidentified": conns.refused_unidentified,
                    "closed_idle": conns.closed_idle,
                    "top_uids": conns.top_uids.iter()
                        .map(|u| json!({"uid": u.uid, "open": u.open}))
                        .collect::<Vec<_>>(),
                },
                "operator": { "open": conns.operator_open },
            },
            "audit_refusals": s.audit_refusals, "audit_unanchored": s.audit_unanchored,
            "audit_reserve_bytes": s.audit_reserve_bytes,
            "audit_reserve_target_bytes": s.audit_reserve_target_bytes,
            "audit_reserve_drawing": s.audit_reserve_drawing,
            "disk_min_free_mb": s.disk_min_free_mb,
            "telemetry": telemetry_json(s.telemetry.as_ref()),
            "policy_digest": s.policy_digest,
            "last_reload": s.last_reload.as_ref().map(crate::reload::result_json),
            "records": records_json(s.records.as_ref()),
        })
    );
}

/// `status`: one line per row.
fn print_status_table(s: pb::StatusResponse) {
    let fds = s.fds.unwrap_or_default();
    let conns = s.connections.clone().unwrap_or_default();
    let config = if s.config_file.is_empty() {
        "built-in defaults".to_string()
    } else {
        s.config_file.clone()
    };
    let rows = [
        (
            "supervisor",
            format!(
                "running (pid {}, version {}, up {}s)",
                s.pid, s.version, s.uptime_s
            ),
        ),
        ("config", config),
        ("policy", format!("digest {}", s.policy_digest)),
        (
            "last reload",
            crate::reload::status_line(s.last_reload.as_ref()),
        ),
        (
            "sandbox",
            format!(
                "{}: {}",
                crate::wire::status_sandbox(&s),
                s.sandbox_strength
            ),
        ),
        ("sessions", format!("{} active", s.sessions_active)),
        ("approvals", format!("{} pending", s.approvals_pending)),
        ("decisions", decisions_line(s.records.as_ref())),
        ("audit", format!("{} (sync {})", s.audit_dir, s.audit_sync)),
        ("descriptors", descriptors_line(&fds)),
        ("connections", connections_line(&conns)),
        ("refused", refused_line(&conns)),
        ("audit reserve", reserve_line(&s)),
        (
            "audit refusals",
            format!(
                "{} since start (AUDIT_UNAVAILABLE){}",
                s.audit_refusals,
                if s.audit_unanchored.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; {} closed session file(s) await their anchor: {}",
                        s.audit_unanchored.len(),
                        s.audit_unanchored.join(", ")
                    )
                }
            ),
        ),
        (
            "disk floor",
            if s.disk_min_free_mb == 0 {
                "off ([sandbox] min_free_mb = 0)".to_string()
            } else {
                format!(
                    "{} MiB free kept on each workspace's filesystem",
                    s.disk_min_free_mb
                )
            },
        ),
        ("agent socket", s.agent_socket),
        ("operator socket", s.operator_socket),
        ("telemetry", telemetry_line(s.telemetry.as_ref())),
    ];
    for (k, v) in rows {
        outln!("{:<16} {}", format!("{k}:"), table::escape(&v));
    }
}

fn decisions_line(r: Option<&pb::RecordCounts>) -> String {
    let r = r.copied().unwrap_or_default();
    format!(
        "{} allowed, {} asked, {} denied since start; egress {} opened, {} refused; {} LLM retries",
        r.decisions_allow,
        r.decisions_ask,
        r.decisions_deny,
        r.egress_opened,
        r.egress_refused,
        r.llm_retries
    )
}

fn descriptors_line(f: &pb::FdStatus) -> String {
    format!(
        "{} of {} in use (the last {} kept for operators, the audit log, sandboxes and LLM calls)",
        f.in_use, f.limit, f.reserve
    )
}

fn connections_line(c: &pb::ConnectionStatus) -> String {
    let most = if c.top_uids.is_empty() {
        String::new()
    } else {
        let uids: Vec<String> = c
            .top_uids
            .iter()
            .map(|u| format!("uid {} {}", u.uid, u.open))
            .collect();
        format!("; most: {}", uids.join(", "))
    };
    format!(
        "agent.sock {} open (at most {} per uid, closed after {}s idle{most}); operator.sock {} open",
        c.agent_open, c.max_per_uid, c.idle_timeout_s, c.operator_open
    )
}

fn refused_line(c: &pb::ConnectionStatus) -> String {
    format!(
        "agent.sock: {} over the per-uid cap, {} over the descriptor budget, {} unidentified; {} closed idle",
        c.refused_over_uid_cap, c.refused_over_fd_reserve, c.refused_unidentified, c.closed_idle
    )
}

fn reserve_line(s: &pb::StatusResponse) -> String {
    const MIB: u64 = 1 << 20;
    if s.audit_reserve_target_bytes == 0 {
        return "none ([audit] reserve_mb = 0)".to_string();
    }
    let mut line = format!(
        "{} of {} MiB held",
        s.audit_reserve_bytes / MIB,
        s.audit_reserve_target_bytes / MIB
    );
    if s.audit_reserve_drawing {
        line.push_str(
            "; DRAWN ON: the audit disk is full, only refusals, revocations, anchors and shutdown are recorded",
        );
    } else if s.audit_reserve_bytes < s.audit_reserve_target_bytes {
        line.push_str("; the audit disk has no room for the rest yet");
    }
    line
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
        outln!("{}", Value::Array(v));
        return Ok(());
    }
    if list.is_empty() {
        outln!(
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
                s.session_state().text().to_string(),
                s.uid.to_string(),
                s.permission_mode().text().to_string(),
                format!("{}/{}", s.tool_calls, s.max_tool_calls),
                format!("${:.4}", s.cost_usd),
                s.pending_approvals.to_string(),
                table::ago(s.created_unix_ms),
                jobs_label(s),
                client_label(s),
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
            "JOBS",
            "CLIENT",
            "WORKSPACE",
        ],
        &rows,
    );
    Ok(())
}

/// The client, and its own session id for a client behind `agent hook`
/// (`claude-code 17dcfece…`).
fn client_label(s: &pb::SessionInfo) -> String {
    let client = if s.client.is_empty() { "-" } else { &s.client };
    if s.client_session_id.is_empty() {
        client.to_string()
    } else {
        let short: String = s.client_session_id.chars().take(8).collect();
        format!("{client} {short}…")
    }
}

pub async fn show(mut c: Client, id: String, json_out: bool) -> anyhow::Result<()> {
    let s = c
        .get_session(pb::GetSessionRequest { session_id: id })
        .await
        .map_err(status_error)?
        .into_inner();
    if json_out {
        outln!("{}", session_json(&s));
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
                s.session_state().text().to_string()
            } else {
                format!("{} ({})", s.session_state().text(), s.end_reason)
            },
        ),
        ("uid", format!("{} (gid {}, pid {})", s.uid, s.gid, s.pid)),
        ("client", s.client.clone()),
        ("client session", s.client_session_id.clone()),
        ("workspace", s.workspace.clone()),
        ("mode", s.permission_mode().text().to_string()),
        ("tools", tools),
        ("sandbox", crate::wire::session_sandbox(&s).to_string()),
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
        ("jobs", jobs_label(&s)),
    ];
    for (k, v) in rows {
        outln!("{:<11} {}", format!("{k}:"), table::escape(&v));
    }
    for j in &s.jobs {
        outln!("{:<11} {}", "", table::escape(&job_line(j)));
    }
    Ok(())
}

pub async fn revoke(
    mut c: Client,
    id: String,
    reason: Option<String>,
    json_out: bool,
) -> anyhow::Result<()> {
    let s = c
        .revoke_session(pb::RevokeSessionRequest {
            session_id: id,
            reason: reason.unwrap_or_default(),
        })
        .await
        .map_err(status_error)?
        .into_inner();
    if json_out {
        outln!("{}", session_json(&s));
    } else {
        outln!("revoked {} ({})", s.id, table::escape(&s.end_reason));
    }
    Ok(())
}

pub async fn kill(
    mut c: Client,
    id: Option<String>,
    all: bool,
    json_out: bool,
) -> anyhow::Result<()> {
    let r = c
        .kill_session(pb::KillSessionRequest {
            session_id: id.unwrap_or_default(),
            all,
            reason: String::new(),
        })
        .await
        .map_err(status_error)?
        .into_inner();
    if json_out {
        outln!("{}", json!({ "killed": r.killed }));
        return Ok(());
    }
    if r.killed.is_empty() {
        outln!("no sessions killed");
    }
    for id in r.killed {
        outln!("killed {id}");
    }
    Ok(())
}
