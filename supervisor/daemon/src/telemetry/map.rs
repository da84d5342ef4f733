//! From one audit event to one OpenTelemetry signal (a log record and a
//! span share it): the only place that knows which audit fields become
//! which attributes. Names follow Claude Code's OpenTelemetry events where
//! they mean the same (`tool_decision`, `tool_result`, `api_request`,
//! `api_error`; attributes `tool_name`, `decision`, `source`, `success`,
//! `duration_ms`, `tool_parameters`, `session.id`).
//!
//! Without `log_tool_details`, nothing derived from a tool's arguments or
//! output leaves the host: no arguments, targets, consequences, reasons or
//! output excerpts (a reason can quote a path, a consequence a command).
//! With it, those are included after the audit log's redaction.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use opentelemetry::KeyValue;
use opentelemetry::logs::Severity;
use tollgate_audit::Redactor;
use tollgate_audit::event::{
    ApprovalDecided, ApprovalOutcome, Event, LlmCallError, LlmResponse, PermissionCheck,
    SessionEnded, ToolResult, ToolStatus, Verdict,
};

/// Whether telemetry looks at an event: the six it exports, and
/// `session_opened`/`session_closed` for the client table.
pub fn wanted(event: &Event) -> bool {
    match event {
        Event::PermissionCheck(_)
        | Event::ApprovalDecided(_)
        | Event::ToolResult(_)
        | Event::SessionRevoked(_)
        | Event::LlmResponse(_)
        | Event::LlmCallError(_)
        | Event::SessionOpened(_)
        | Event::SessionClosed(_) => true,
        Event::LlmRetry(_)
        | Event::AuditOpened(_)
        | Event::AuditFileClosed(_)
        | Event::Config(_)
        | Event::HostAddresses(_)
        | Event::Recovered(_)
        | Event::Shutdown(_)
        | Event::AuditRefused(_)
        | Event::SandboxExec(_)
        | Event::SandboxError(_)
        | Event::TokenRotated(_)
        | Event::DiskFloorStop(_)
        | Event::ApprovalRequested(_)
        | Event::ToolStarted(_)
        | Event::JobStarted(_)
        | Event::JobEnded(_)
        | Event::LlmRequest(_)
        | Event::CostLimitHit(_)
        | Event::ClientTurnEnd(_)
        | Event::ClientToolResult(_)
        | Event::McpServerStarted(_)
        | Event::McpServerExited(_)
        | Event::McpEgress(_)
        | Event::NetConnection(_)
        | Event::SandboxDenial(_)
        | Event::GitExposed(_)
        | Event::NetworkRule(_)
        | Event::NetSecret(_)
        | Event::CacheCleared(_)
        | Event::QuestionAsked(_)
        | Event::ContextTrim(_)
        | Event::IterationCapHit(_)
        | Event::Abort(_)
        | Event::TurnSummary(_) => false,
    }
}

/// One audit event, as the recorder offered it.
#[derive(Debug, Clone)]
pub struct Item {
    pub ts: SystemTime,
    pub session: String,
    pub event: Event,
}

/// Who opened a session, remembered from its `session_opened` record.
#[derive(Debug, Clone, Default)]
pub struct Client {
    pub uid: u64,
    pub name: String,
}

/// Sessions' clients, learned from the stream itself.
#[derive(Debug, Default)]
pub struct Clients(HashMap<String, Client>);

impl Clients {
    /// Updates the table from `item`; true when the item is only
    /// bookkeeping (nothing to export).
    pub fn observe(&mut self, item: &Item) -> bool {
        match &item.event {
            Event::SessionOpened(o) => {
                self.0.insert(
                    item.session.clone(),
                    Client {
                        uid: o.uid,
                        name: o.client.clone(),
                    },
                );
                true
            }
            Event::SessionClosed(_) => {
                self.0.remove(&item.session);
                true
            }
            Event::PermissionCheck(_)
            | Event::ApprovalDecided(_)
            | Event::ToolResult(_)
            | Event::SessionRevoked(_)
            | Event::LlmResponse(_)
            | Event::LlmCallError(_)
            | Event::LlmRetry(_)
            | Event::AuditOpened(_)
            | Event::AuditFileClosed(_)
            | Event::Config(_)
            | Event::HostAddresses(_)
            | Event::Recovered(_)
            | Event::Shutdown(_)
            | Event::AuditRefused(_)
            | Event::SandboxExec(_)
            | Event::SandboxError(_)
            | Event::TokenRotated(_)
            | Event::DiskFloorStop(_)
            | Event::ApprovalRequested(_)
            | Event::ToolStarted(_)
            | Event::JobStarted(_)
            | Event::JobEnded(_)
            | Event::LlmRequest(_)
            | Event::CostLimitHit(_)
            | Event::ClientTurnEnd(_)
            | Event::ClientToolResult(_)
            | Event::McpServerStarted(_)
            | Event::McpServerExited(_)
            | Event::McpEgress(_)
            | Event::NetConnection(_)
            | Event::SandboxDenial(_)
            | Event::GitExposed(_)
            | Event::NetworkRule(_)
            | Event::NetSecret(_)
            | Event::CacheCleared(_)
            | Event::QuestionAsked(_)
            | Event::ContextTrim(_)
            | Event::IterationCapHit(_)
            | Event::Abort(_)
            | Event::TurnSummary(_) => false,
        }
    }

    fn get(&self, session: &str) -> Option<&Client> {
        self.0.get(session)
    }

    /// A revoked session's client is needed for its own signal, then dropped.
    pub fn forget_after(&mut self, item: &Item) {
        if let Event::SessionRevoked(_) = item.event {
            self.0.remove(&item.session);
        }
    }
}

/// What one audit event becomes: the same name, times and attributes for
/// the log record and the span.
#[derive(Debug, Clone, PartialEq)]
pub struct Signal {
    pub name: &'static str,
    pub session: String,
    pub start: SystemTime,
    pub end: SystemTime,
    pub severity: Severity,
    /// One line for the log body (no argument-derived text unless details).
    pub body: String,
    pub attributes: Vec<KeyValue>,
    /// Set for a failed tool run or LLM call: the span's error status.
    pub error: Option<String>,
}

/// Argument-derived attributes, included (redacted) only with
/// `log_tool_details`.
struct Details<'a> {
    on: bool,
    redactor: &'a Redactor,
}

impl Details<'_> {
    fn push(&self, attrs: &mut Vec<KeyValue>, key: &'static str, value: Option<&str>) {
        if self.on
            && let Some(v) = value
        {
            attrs.push(KeyValue::new(key, self.redactor.redact(v)));
        }
    }
}

/// Maps one audit event to its signal. `details`: `log_tool_details`.
/// Bookkeeping events give `None`.
pub fn signal(
    item: &Item,
    clients: &Clients,
    details: bool,
    redactor: &Redactor,
) -> Option<Signal> {
    let mut s = Signal {
        name: "",
        session: item.session.clone(),
        start: item.ts,
        end: item.ts,
        severity: Severity::Info,
        body: String::new(),
        attributes: vec![KeyValue::new("session.id", item.session.clone())],
        error: None,
    };
    if let Some(c) = clients.get(&item.session) {
        s.attributes.push(KeyValue::new("client.uid", c.uid as i64));
        if !c.name.is_empty() {
            s.attributes
                .push(KeyValue::new("client.name", c.name.clone()));
        }
    }
    let d = Details {
        on: details,
        redactor,
    };
    match &item.event {
        Event::PermissionCheck(c) => decision(&mut s, c, &d),
        Event::ApprovalDecided(a) => approval(&mut s, a, &d),
        Event::ToolResult(r) => tool_result(&mut s, r, &d),
        Event::SessionRevoked(e) => revocation(&mut s, e, redactor),
        Event::LlmResponse(r) => llm_response(&mut s, r),
        Event::LlmCallError(e) => llm_error(&mut s, e, &d),
        Event::LlmRetry(_)
        | Event::SessionOpened(_)
        | Event::SessionClosed(_)
        | Event::AuditOpened(_)
        | Event::AuditFileClosed(_)
        | Event::Config(_)
        | Event::HostAddresses(_)
        | Event::Recovered(_)
        | Event::Shutdown(_)
        | Event::AuditRefused(_)
        | Event::SandboxExec(_)
        | Event::SandboxError(_)
        | Event::TokenRotated(_)
        | Event::DiskFloorStop(_)
        | Event::ApprovalRequested(_)
        | Event::ToolStarted(_)
        | Event::JobStarted(_)
        | Event::JobEnded(_)
        | Event::LlmRequest(_)
        | Event::CostLimitHit(_)
        | Event::ClientTurnEnd(_)
        | Event::ClientToolResult(_)
        | Event::McpServerStarted(_)
        | Event::McpServerExited(_)
        | Event::McpEgress(_)
        | Event::NetConnection(_)
        | Event::SandboxDenial(_)
        | Event::GitExposed(_)
        | Event::NetworkRule(_)
        | Event::NetSecret(_)
        | Event::CacheCleared(_)
        | Event::QuestionAsked(_)
        | Event::ContextTrim(_)
        | Event::IterationCapHit(_)
        | Event::Abort(_)
        | Event::TurnSummary(_) => return None,
    }
    Some(s)
}

/// `permission_check` → `tollgate.tool_decision`.
fn decision(s: &mut Signal, c: &PermissionCheck, d: &Details<'_>) {
    s.name = "tollgate.tool_decision";
    let decision = c.decision.as_str();
    let attrs = &mut s.attributes;
    attrs.push(KeyValue::new("tool_name", c.tool.clone()));
    attrs.push(KeyValue::new("decision", decision.to_string()));
    attrs.push(KeyValue::new("source", decision_source(c).to_string()));
    attrs.push(KeyValue::new("code", c.code.clone()));
    push_rule(attrs, c.rule.as_deref());
    attrs.push(KeyValue::new("destructive", c.destructive.unwrap_or(false)));
    d.push(attrs, "tool_parameters", c.args.as_deref());
    d.push(attrs, "target", c.target.as_deref());
    d.push(attrs, "consequence", c.consequence.as_deref());
    d.push(attrs, "reason", Some(&c.reason));
    if c.decision == Verdict::Deny {
        s.severity = Severity::Warn;
    }
    s.body = format!("{} {decision} ({})", c.tool, c.code);
}

/// `approval_decided` → `tollgate.approval_decision`.
fn approval(s: &mut Signal, a: &ApprovalDecided, d: &Details<'_>) {
    s.name = "tollgate.approval_decision";
    let outcome = a.outcome.as_str();
    let attrs = &mut s.attributes;
    attrs.push(KeyValue::new("tool_name", a.tool.clone()));
    attrs.push(KeyValue::new("decision", outcome.to_string()));
    attrs.push(KeyValue::new("source", a.by.clone()));
    attrs.push(KeyValue::new("approval.id", a.approval_id.clone()));
    if let Some(scope) = a.scope.as_deref().filter(|s| !s.is_empty()) {
        attrs.push(KeyValue::new("scope", scope.to_string()));
    }
    push_rule(attrs, a.rule.clone().flatten().as_deref());
    d.push(attrs, "target", a.target.as_deref());
    d.push(attrs, "reason", a.reason.as_deref());
    if a.outcome != ApprovalOutcome::Approved {
        s.severity = Severity::Warn;
    }
    s.body = format!("approval for {} {outcome}", a.tool);
}

/// `tool_result` → `tollgate.tool_result`, a span as long as the run.
fn tool_result(s: &mut Signal, r: &ToolResult, d: &Details<'_>) {
    s.name = "tollgate.tool_result";
    let status = r.status.as_str();
    let duration = Duration::from_millis(r.duration_ms);
    let attrs = &mut s.attributes;
    attrs.push(KeyValue::new("tool_name", r.tool.clone()));
    attrs.push(KeyValue::new("success", r.status == ToolStatus::Ok));
    attrs.push(KeyValue::new("status", status.to_string()));
    attrs.push(KeyValue::new("duration_ms", duration.as_millis() as i64));
    if let Some(code) = r.exit() {
        attrs.push(KeyValue::new("exit_code", code));
    }
    attrs.push(KeyValue::new("output_bytes", r.bytes as i64));
    attrs.push(KeyValue::new("truncated", r.truncated));
    d.push(attrs, "output", r.output.as_deref());
    s.start = s.end.checked_sub(duration).unwrap_or(s.end);
    if r.status != ToolStatus::Ok {
        s.severity = Severity::Warn;
        s.error = Some(format!("{} {status}", r.tool));
    }
    s.body = format!(
        "{} finished: {status} in {} ms",
        r.tool,
        duration.as_millis()
    );
}

/// `session_revoked` → `tollgate.session_revoked`.
fn revocation(s: &mut Signal, e: &SessionEnded, redactor: &Redactor) {
    s.name = "tollgate.session_revoked";
    let attrs = &mut s.attributes;
    attrs.push(KeyValue::new("state", e.state.clone()));
    attrs.push(KeyValue::new("source", e.by.clone().unwrap_or_default()));
    attrs.push(KeyValue::new("reason", redactor.redact(&e.reason)));
    attrs.push(KeyValue::new(
        "tool_calls",
        e.tool_calls.unwrap_or(0) as i64,
    ));
    attrs.push(KeyValue::new("cost_usd", e.cost_usd.unwrap_or(0.0)));
    s.severity = Severity::Warn;
    s.body = format!("session {}", e.state);
}

/// `llm_response` → `tollgate.api_request`.
fn llm_response(s: &mut Signal, r: &LlmResponse) {
    s.name = "tollgate.api_request";
    let duration = Duration::from_millis(r.duration_ms);
    let (input, output) = r
        .usage
        .map_or((0, 0), |u| (u.prompt_tokens, u.completion_tokens));
    let attrs = &mut s.attributes;
    attrs.push(KeyValue::new("model", r.model.clone()));
    attrs.push(KeyValue::new("provider", r.provider.clone()));
    attrs.push(KeyValue::new("duration_ms", duration.as_millis() as i64));
    attrs.push(KeyValue::new("input_tokens", input as i64));
    attrs.push(KeyValue::new("output_tokens", output as i64));
    attrs.push(KeyValue::new("cost_usd", r.cost_usd));
    attrs.push(KeyValue::new("finish_reason", r.finish_reason.clone()));
    s.start = s.end.checked_sub(duration).unwrap_or(s.end);
    s.body = format!("llm call: {} ms", duration.as_millis());
}

/// `llm_call_error` → `tollgate.api_error`.
fn llm_error(s: &mut Signal, e: &LlmCallError, d: &Details<'_>) {
    s.name = "tollgate.api_error";
    let duration = Duration::from_millis(e.duration_ms);
    let kind = e.kind.as_str();
    let attrs = &mut s.attributes;
    attrs.push(KeyValue::new("model", e.model.clone()));
    attrs.push(KeyValue::new("provider", e.provider.clone()));
    attrs.push(KeyValue::new("duration_ms", duration.as_millis() as i64));
    attrs.push(KeyValue::new("error", kind.to_string()));
    d.push(attrs, "reason", Some(&e.reason));
    s.start = s.end.checked_sub(duration).unwrap_or(s.end);
    s.severity = Severity::Error;
    s.error = Some(format!("llm call failed: {kind}"));
    s.body = format!("llm call failed: {kind}");
}

/// Who or what let a call through (Claude Code's `source`): `policy` for a
/// refusal or an ask, else the recorder's `allowed_by`.
fn decision_source(c: &PermissionCheck) -> &str {
    match c.allowed_by.as_deref() {
        None | Some("") => "policy",
        Some(by) => by,
    }
}

fn push_rule(attrs: &mut Vec<KeyValue>, rule: Option<&str>) {
    if let Some(rule) = rule.filter(|r| !r.is_empty()) {
        attrs.push(KeyValue::new("rule", rule.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::Value as OtelValue;
    use serde_json::{Value, json};

    use super::*;

    /// An attribute's value by key.
    fn attribute<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a OtelValue> {
        attrs
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| &kv.value)
    }

    fn item(event: &str, fields: Value) -> Item {
        let event = match Event::read(event, fields.as_object().unwrap()) {
            tollgate_audit::event::Parsed::Known(e) => e,
            tollgate_audit::event::Parsed::Unknown { event, why } => panic!("{event}: {why}"),
        };
        Item {
            ts: SystemTime::UNIX_EPOCH + Duration::from_secs(1_000),
            session: "sess".to_string(),
            event,
        }
    }

    fn opened(uid: u64, client: &str) -> Value {
        json!({"uid": uid, "gid": uid, "pid": 1, "workspace": "/w", "mode": "default",
               "tools": [], "max_tool_calls": 1, "max_cost_usd": 1.0, "client": client,
               "sandbox": "native", "system_prompt_chars": 0})
    }

    fn clients() -> Clients {
        let mut c = Clients::default();
        c.observe(&item("session_opened", opened(1000, "agent call")));
        c
    }

    fn decision() -> Value {
        json!({
            "call_id": "c1", "tool": "run_bash", "decision": "deny", "code": "DENIED_BINARY",
            "rule": "floor:binary", "reason": "curl is denied: curl https://x/?k=ghp_0123456789abcdefghijklmnopqrstuvwxyzAB",
            "consequence": "run `curl …`", "destructive": false, "target": "curl https://x",
            "args": "{\"command\":\"curl https://x/?k=ghp_0123456789abcdefghijklmnopqrstuvwxyzAB\"}",
        })
    }

    #[test]
    fn a_decision_carries_session_tool_rule_verdict_and_client_but_no_arguments() {
        let s = signal(
            &item("permission_check", decision()),
            &clients(),
            false,
            &Redactor::default(),
        )
        .unwrap();
        assert_eq!(s.name, "tollgate.tool_decision");
        assert_eq!(s.severity, Severity::Warn);
        let a = |k| attribute(&s.attributes, k).map(|v| v.to_string());
        assert_eq!(a("session.id").as_deref(), Some("sess"));
        assert_eq!(a("tool_name").as_deref(), Some("run_bash"));
        assert_eq!(a("decision").as_deref(), Some("deny"));
        assert_eq!(a("source").as_deref(), Some("policy"));
        assert_eq!(a("code").as_deref(), Some("DENIED_BINARY"));
        assert_eq!(a("rule").as_deref(), Some("floor:binary"));
        assert_eq!(a("client.uid").as_deref(), Some("1000"));
        assert_eq!(a("client.name").as_deref(), Some("agent call"));
        for k in ["tool_parameters", "target", "consequence", "reason"] {
            assert_eq!(a(k), None, "{k} leaked without log_tool_details");
        }
        let everything = format!("{s:?}");
        assert!(!everything.contains("curl"), "{everything}");
    }

    #[test]
    fn details_are_included_redacted_when_asked() {
        let s = signal(
            &item("permission_check", decision()),
            &clients(),
            true,
            &Redactor::default(),
        )
        .unwrap();
        let params = attribute(&s.attributes, "tool_parameters")
            .unwrap()
            .to_string();
        assert!(params.contains("curl https://x/?k="), "{params}");
        assert!(!params.contains("ghp_0123456789"), "{params}");
        assert!(params.contains("REDACTED"), "{params}");
        let reason = attribute(&s.attributes, "reason").unwrap().to_string();
        assert!(!reason.contains("ghp_0123456789"), "{reason}");
    }

    #[test]
    fn a_tool_result_is_a_span_as_long_as_the_run() {
        let s = signal(
            &item(
                "tool_result",
                json!({"call_id": "c1", "tool": "run_bash", "status": "error", "exit_code": 2,
                       "bytes": 10, "truncated": false, "duration_ms": 250, "output": "secret out"}),
            ),
            &clients(),
            false,
            &Redactor::default(),
        )
        .unwrap();
        assert_eq!(
            s.end.duration_since(s.start).unwrap(),
            Duration::from_millis(250)
        );
        assert_eq!(s.error.as_deref(), Some("run_bash error"));
        let a = |k| attribute(&s.attributes, k).map(|v| v.to_string());
        assert_eq!(a("success").as_deref(), Some("false"));
        assert_eq!(a("exit_code").as_deref(), Some("2"));
        assert_eq!(a("duration_ms").as_deref(), Some("250"));
        assert_eq!(a("output"), None);
    }

    #[test]
    fn bookkeeping_events_are_not_exported_and_revocation_forgets_the_client() {
        let mut c = clients();
        let opened = item("session_opened", opened(7, ""));
        assert!(c.observe(&opened));
        assert!(signal(&opened, &c, false, &Redactor::default()).is_none());
        let revoked = item(
            "session_revoked",
            json!({"state": "revoked", "by": "operator", "reason": "stop"}),
        );
        assert!(!c.observe(&revoked));
        let s = signal(&revoked, &c, false, &Redactor::default()).unwrap();
        assert_eq!(s.name, "tollgate.session_revoked");
        assert_eq!(
            attribute(&s.attributes, "client.uid").unwrap().to_string(),
            "7"
        );
        c.forget_after(&revoked);
        assert!(c.get("sess").is_none());
    }

    #[test]
    fn every_mapped_kind_has_a_name_and_the_others_are_ignored() {
        let approval = json!({"approval_id": "a", "tool": "t", "outcome": "denied", "by": "op"});
        let result = json!({"call_id": "c", "tool": "t", "status": "ok", "bytes": 0,
                            "truncated": false, "duration_ms": 0});
        let response = json!({"provider": "p", "model": "m", "turn": 0, "duration_ms": 0,
                              "usage": null, "cost_usd": 0.0, "session_cost_usd": 0.0,
                              "finish_reason": "stop", "content": "", "tool_calls": [],
                              "calls": [], "calls_total": 0});
        let error = json!({"provider": "p", "kind": "connect", "reason": "r", "turn": 0,
                           "model": "m", "duration_ms": 0});
        let ended = json!({"state": "closed", "reason": "r"});
        let started = json!({"call_id": "c", "tool": "t", "allowed_by": "allowed", "target": ""});
        for (event, fields, name) in [
            (
                "permission_check",
                decision(),
                Some("tollgate.tool_decision"),
            ),
            (
                "approval_decided",
                approval,
                Some("tollgate.approval_decision"),
            ),
            ("tool_result", result, Some("tollgate.tool_result")),
            (
                "session_revoked",
                ended.clone(),
                Some("tollgate.session_revoked"),
            ),
            ("llm_response", response, Some("tollgate.api_request")),
            ("llm_call_error", error, Some("tollgate.api_error")),
            ("session_opened", opened(1, "c"), None),
            ("session_closed", ended, None),
            ("tool_started", started, None),
            ("recovered", json!({"detail": "d"}), None),
        ] {
            let it = item(event, fields);
            let wanted_kind = name.is_some() || event.starts_with("session_");
            assert_eq!(wanted(&it.event), wanted_kind, "{event}");
            let s = signal(&it, &Clients::default(), false, &Redactor::default());
            assert_eq!(s.map(|s| s.name), name, "{event}");
        }
    }
}
