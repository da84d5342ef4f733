//! Every kind of audit record, as one typed schema.
//!
//! [`Event`] has one variant per record kind any writer emits, each with
//! its own struct of fields. The writer ([`crate::AuditFile::append_event`])
//! and every reader (`audit report`, the missing-file check, the anchor
//! book, `audit tail`, `supervisorctl watch`, the telemetry mapping) use
//! these types, so a new record kind fails to compile wherever it must be
//! handled (see docs/ARCHITECTURE.md, "Adding an audit event").
//!
//! The JSON is the format of release 0.1.0, unchanged: the tag is the
//! record's `"event"` member, the struct's fields are its other members
//! (the writer emits them in sorted key order, exactly as before), an
//! optional member that a writer leaves out is `skip_serializing_if`, and
//! one it writes as `null` is a plain `Option`. Reading is lenient, as the
//! readers were before: members this version does not know are ignored, a
//! missing member reads as empty (`""`, 0, `false`, none) except the enum
//! that says what happened (a verdict, an outcome, a status), and a record
//! whose kind or fields it cannot read is [`Parsed::Unknown`], never an
//! error. The hash chain is
//! checked on the raw bytes of each line, never on a re-serialization, so a
//! newer writer's extra members cannot break verification.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use crate::reserve::ReserveStatus;
use crate::{AuditError, SyncMode};

/// One audit record's event and fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    // The supervisor log's own bookkeeping (written by this crate).
    /// The first record of each supervisor log.
    AuditOpened(AuditOpened),
    /// A session file's head, anchored in the supervisor log.
    AuditFileClosed(AuditFileClosed),
    // The supervisor's run.
    /// The configuration a supervisor started with.
    Config(ConfigRecord),
    /// The host's own addresses (refused to webfetch), at start and on change.
    HostAddresses(HostAddresses),
    /// A sandbox a crashed predecessor left, reaped.
    Recovered(Recovered),
    /// The supervisor stopping.
    Shutdown(Shutdown),
    /// Calls refused because their record could not be written.
    AuditRefused(AuditRefused),
    /// `supervisorctl sandbox exec`.
    SandboxExec(SandboxExec),
    /// A sandbox that could not be destroyed.
    SandboxError(SandboxError),
    // A session's life.
    SessionOpened(SessionOpened),
    /// Closed by the agent, or the last record of any ended session.
    SessionClosed(SessionEnded),
    /// Revoked, killed or expired.
    SessionRevoked(SessionEnded),
    TokenRotated(TokenRotated),
    /// The workspace's filesystem fell under the disk floor.
    DiskFloorStop(DiskFloorStop),
    // Tool calls.
    /// The policy's verdict on one call.
    PermissionCheck(PermissionCheck),
    ApprovalRequested(ApprovalRequested),
    ApprovalDecided(ApprovalDecided),
    ToolStarted(ToolStarted),
    ToolResult(ToolResult),
    /// A background job of the session started (run_bash `background`, or
    /// a client's routed command run in the background).
    JobStarted(JobStarted),
    /// A background job ended: exited, killed by `kill_job` or its client,
    /// or ended with its session.
    JobEnded(JobEnded),
    // The model, through the Chat proxy.
    LlmRequest(LlmRequest),
    LlmResponse(LlmResponse),
    LlmCallError(LlmCallError),
    /// A model call the provider answered 429 or 5xx, tried again.
    LlmRetry(LlmRetry),
    CostLimitHit(CostLimitHit),
    // Coding clients (hooks) and the MCP gateway.
    /// A client's turn ended (its Stop hook).
    ClientTurnEnd(ClientTurnEnd),
    /// A client reports how a call it ran went.
    ClientToolResult(ClientToolResult),
    McpServerStarted(McpServerStarted),
    McpServerExited(McpServerExited),
    /// One connection an MCP server made through its `--allow-net` gateway.
    McpEgress(McpEgress),
    /// One connection a sandboxed command made through the network wall
    /// (opened, refused, closed), or a summary of refusals not recorded one
    /// by one.
    NetConnection(NetConnection),
    /// What a wall of the sandbox refused a command (one distinct refusal
    /// with its count), or a summary of those not recorded one by one.
    SandboxDenial(SandboxDenial),
    /// An operator's change to one live session's network lists
    /// (`supervisorctl net allow|deny`).
    NetworkRule(NetworkRule),
    NetSecret(NetSecret),
    /// An operator removed package caches (`supervisorctl cache clear`).
    CacheCleared(CacheCleared),
    // Reported by the agent (`ReportEvent`): fields as the agent sent them.
    QuestionAsked(AgentReport),
    ContextTrim(AgentReport),
    IterationCapHit(AgentReport),
    Abort(AgentReport),
    TurnSummary(AgentReport),
}

/// The event names an agent may report (`ReportEvent`); each reads back as
/// an [`Event`] holding an [`AgentReport`].
pub const AGENT_REPORTABLE: [&str; 5] = [
    "question_asked",
    "context_trim",
    "iteration_cap_hit",
    "abort",
    "turn_summary",
];

/// A record read back: one of the kinds above, or one this version cannot
/// read (a newer writer's kind, or fields of the wrong type).
#[derive(Debug, Clone, PartialEq)]
// Not boxed: readers match through it (`Parsed::Known(Event::…)`), and a
// parsed record lives only while one line is looked at.
#[allow(clippy::large_enum_variant)]
pub enum Parsed {
    Known(Event),
    Unknown { event: String, why: String },
}

impl Parsed {
    pub fn known(&self) -> Option<&Event> {
        match self {
            Parsed::Known(e) => Some(e),
            Parsed::Unknown { .. } => None,
        }
    }
}

impl Event {
    /// Reads a record's event from its name and its caller's fields.
    pub fn read(event: &str, fields: &Map<String, Value>) -> Parsed {
        let mut map = fields.clone();
        map.insert("event".to_string(), Value::String(event.to_string()));
        Event::read_object(map)
    }

    /// Reads a record's event from the whole record object (the
    /// writer-owned members are ignored).
    pub fn read_object(map: Map<String, Value>) -> Parsed {
        let event = match map.get("event") {
            Some(Value::String(s)) => s.clone(),
            _ => "(none)".to_string(),
        };
        match serde_json::from_value::<Event>(Value::Object(map)) {
            Ok(e) => Parsed::Known(e.without_writer_members()),
            Err(e) => Parsed::Unknown {
                event,
                why: e.to_string(),
            },
        }
    }

    /// An agent's report: `event` must be one of [`AGENT_REPORTABLE`].
    pub fn agent_report(event: &str, fields: Map<String, Value>) -> Option<Event> {
        let mut map = fields;
        map.insert("event".to_string(), Value::String(event.to_string()));
        let e = serde_json::from_value::<Event>(Value::Object(map)).ok()?;
        e.agent_fields().is_some().then_some(e)
    }

    /// The record's `"event"` member.
    pub fn name(&self) -> &'static str {
        match self {
            Event::AuditOpened(_) => "audit_opened",
            Event::AuditFileClosed(_) => "audit_file_closed",
            Event::Config(_) => "config",
            Event::HostAddresses(_) => "host_addresses",
            Event::Recovered(_) => "recovered",
            Event::Shutdown(_) => "shutdown",
            Event::AuditRefused(_) => "audit_refused",
            Event::SandboxExec(_) => "sandbox_exec",
            Event::SandboxError(_) => "sandbox_error",
            Event::SessionOpened(_) => "session_opened",
            Event::SessionClosed(_) => "session_closed",
            Event::SessionRevoked(_) => "session_revoked",
            Event::TokenRotated(_) => "token_rotated",
            Event::DiskFloorStop(_) => "disk_floor_stop",
            Event::PermissionCheck(_) => "permission_check",
            Event::ApprovalRequested(_) => "approval_requested",
            Event::ApprovalDecided(_) => "approval_decided",
            Event::ToolStarted(_) => "tool_started",
            Event::ToolResult(_) => "tool_result",
            Event::JobStarted(_) => "job_started",
            Event::JobEnded(_) => "job_ended",
            Event::LlmRequest(_) => "llm_request",
            Event::LlmResponse(_) => "llm_response",
            Event::LlmCallError(_) => "llm_call_error",
            Event::LlmRetry(_) => "llm_retry",
            Event::CostLimitHit(_) => "cost_limit_hit",
            Event::ClientTurnEnd(_) => "client_turn_end",
            Event::ClientToolResult(_) => "client_tool_result",
            Event::McpServerStarted(_) => "mcp_server_started",
            Event::McpServerExited(_) => "mcp_server_exited",
            Event::McpEgress(_) => "mcp_egress",
            Event::NetConnection(_) => "net_connection",
            Event::SandboxDenial(_) => "sandbox_denial",
            Event::NetworkRule(_) => "network_rule",
            Event::NetSecret(_) => "net_secret",
            Event::CacheCleared(_) => "cache_cleared",
            Event::QuestionAsked(_) => "question_asked",
            Event::ContextTrim(_) => "context_trim",
            Event::IterationCapHit(_) => "iteration_cap_hit",
            Event::Abort(_) => "abort",
            Event::TurnSummary(_) => "turn_summary",
        }
    }

    /// The caller's fields as the record holds them (no `"event"` member),
    /// in the order the writer emits them (sorted by key).
    pub fn fields(&self) -> Result<Map<String, Value>, AuditError> {
        match serde_json::to_value(self) {
            Ok(Value::Object(mut m)) => {
                m.remove("event");
                Ok(m)
            }
            Ok(_) => Err(AuditError::NotAnObject),
            Err(e) => Err(AuditError::Encode(e.to_string())),
        }
    }

    /// The `reason` an event states, if it has one (for one-line summaries).
    pub fn reason(&self) -> Option<&str> {
        match self {
            Event::SessionClosed(e) | Event::SessionRevoked(e) => Some(&e.reason),
            Event::DiskFloorStop(e) => Some(&e.reason),
            Event::PermissionCheck(e) => Some(&e.reason),
            Event::ApprovalDecided(e) => e.reason.as_deref(),
            Event::LlmCallError(e) => Some(&e.reason),
            Event::LlmRetry(e) => Some(&e.reason),
            Event::ClientToolResult(e) => e.reason.as_deref(),
            Event::McpServerExited(e) => Some(&e.reason),
            Event::JobEnded(e) => Some(&e.reason),
            Event::QuestionAsked(r)
            | Event::ContextTrim(r)
            | Event::IterationCapHit(r)
            | Event::Abort(r)
            | Event::TurnSummary(r) => r.fields.get("reason").and_then(Value::as_str),
            Event::AuditOpened(_)
            | Event::AuditFileClosed(_)
            | Event::Config(_)
            | Event::HostAddresses(_)
            | Event::Recovered(_)
            | Event::Shutdown(_)
            | Event::AuditRefused(_)
            | Event::SandboxExec(_)
            | Event::SandboxError(_)
            | Event::SessionOpened(_)
            | Event::TokenRotated(_)
            | Event::ApprovalRequested(_)
            | Event::ToolStarted(_)
            | Event::ToolResult(_)
            | Event::JobStarted(_)
            | Event::LlmRequest(_)
            | Event::LlmResponse(_)
            | Event::CostLimitHit(_)
            | Event::ClientTurnEnd(_)
            | Event::McpServerStarted(_)
            | Event::McpEgress(_)
            | Event::NetConnection(_)
            | Event::NetworkRule(_) => None,
            Event::NetSecret(_) | Event::CacheCleared(_) => None,
            Event::SandboxDenial(e) => Some(&e.reason),
        }
    }

    /// An agent's report, when this is one.
    pub fn agent_fields(&self) -> Option<&AgentReport> {
        match self {
            Event::QuestionAsked(r)
            | Event::ContextTrim(r)
            | Event::IterationCapHit(r)
            | Event::Abort(r)
            | Event::TurnSummary(r) => Some(r),
            Event::AuditOpened(_)
            | Event::AuditFileClosed(_)
            | Event::Config(_)
            | Event::HostAddresses(_)
            | Event::Recovered(_)
            | Event::Shutdown(_)
            | Event::AuditRefused(_)
            | Event::SandboxExec(_)
            | Event::SandboxError(_)
            | Event::SessionOpened(_)
            | Event::SessionClosed(_)
            | Event::SessionRevoked(_)
            | Event::TokenRotated(_)
            | Event::DiskFloorStop(_)
            | Event::PermissionCheck(_)
            | Event::ApprovalRequested(_)
            | Event::ApprovalDecided(_)
            | Event::ToolStarted(_)
            | Event::ToolResult(_)
            | Event::JobStarted(_)
            | Event::JobEnded(_)
            | Event::LlmRequest(_)
            | Event::LlmResponse(_)
            | Event::LlmCallError(_)
            | Event::LlmRetry(_)
            | Event::CostLimitHit(_)
            | Event::ClientTurnEnd(_)
            | Event::ClientToolResult(_)
            | Event::McpServerStarted(_)
            | Event::McpServerExited(_)
            | Event::McpEgress(_)
            | Event::NetConnection(_)
            | Event::NetworkRule(_)
            | Event::SandboxDenial(_) => None,
            Event::NetSecret(_) | Event::CacheCleared(_) => None,
        }
    }

    /// An agent report read from a whole record also caught the writer's
    /// own members in its flattened map: drop them.
    fn without_writer_members(mut self) -> Event {
        if let Event::QuestionAsked(r)
        | Event::ContextTrim(r)
        | Event::IterationCapHit(r)
        | Event::Abort(r)
        | Event::TurnSummary(r) = &mut self
        {
            for k in crate::record::RESERVED_KEYS {
                r.fields.remove(k);
            }
        }
        self
    }
}

/// Reads a member that may be absent (outer `None`), `null` (`Some(None)`)
/// or a value.
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// `audit_opened`: `previous` is the last supervisor log when it verified;
/// otherwise `previous_file`/`previous_error` say which and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AuditOpened {
    #[serde(default)]
    pub file: String,
    #[serde(default)]
    pub pid: u64,
    pub sync: SyncMode,
    #[serde(default)]
    pub previous: Option<PreviousLog>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_error: Option<String>,
    /// Files the previous log names that are gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_missing: Option<Vec<String>>,
}

/// The previous supervisor log's head, as `audit_opened` links it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PreviousLog {
    #[serde(default)]
    pub file: String,
    #[serde(default)]
    pub records: u64,
    #[serde(default)]
    pub head: String,
}

/// `audit_file_closed`: a session file's head, anchored. `late` (with the
/// time the session `closed`) when the disk was full at the time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AuditFileClosed {
    #[serde(default)]
    pub file: String,
    #[serde(default)]
    pub records: u64,
    #[serde(default)]
    pub head: String,
    #[serde(default, skip_serializing_if = "is_false")]
    pub late: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed: Option<String>,
}

/// `config`: what the supervisor started with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ConfigRecord {
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub pid: u64,
    #[serde(default)]
    pub uid: u64,
    #[serde(default)]
    pub config_file: Option<String>,
    #[serde(default)]
    pub state_dir: String,
    #[serde(default)]
    pub audit_dir: String,
    pub audit_sync: SyncMode,
    #[serde(default)]
    pub sandbox: String,
    #[serde(default)]
    pub sandbox_strength: String,
    #[serde(default)]
    pub sandbox_missing: Vec<String>,
    #[serde(default)]
    pub llm_provider: String,
    #[serde(default)]
    pub host_secret_env_count: u64,
    #[serde(default)]
    pub rules: RuleCounts,
    #[serde(default)]
    pub default_mode: String,
    #[serde(default)]
    pub max_mode: String,
    #[serde(default)]
    pub auto_approve: bool,
    #[serde(default)]
    pub audit_reserve: ReserveStatus,
    #[serde(default)]
    pub disk_min_free_mb: u64,
    /// The digest of the `[policy]` in force (docs/OPERATIONS.md
    /// "Reloading").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_digest: Option<String>,
    /// Present on the record of a reload attempt, accepted or refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reload: Option<ConfigReload>,
}

/// A reload attempt (`config` record's `reload`): who asked, what became of
/// it, the digest of the policy in force before it and of the new one
/// (absent when the new config could not be read that far), why it was
/// refused, and the settings that differ but apply only at the next start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ConfigReload {
    #[serde(default)]
    pub by: String,
    pub outcome: ReloadOutcome,
    #[serde(default)]
    pub old_digest: String,
    #[serde(default)]
    pub new_digest: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub needs_restart: Vec<String>,
}

/// What became of a reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ReloadOutcome {
    /// The new policy decides from then on.
    Accepted,
    /// The old config stays in force.
    Refused,
}

/// How many policy rules of each kind the config holds.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct RuleCounts {
    #[serde(default)]
    pub allow: u64,
    #[serde(default)]
    pub ask: u64,
    #[serde(default)]
    pub deny: u64,
}

/// `host_addresses`: the set (`count`, `addresses`), or the `error` that
/// kept it from being read and its `effect`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HostAddresses {
    #[serde(default)]
    pub trigger: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addresses: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Recovered {
    #[serde(default)]
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Shutdown {
    #[serde(default)]
    pub signal: String,
    #[serde(default)]
    pub sessions_revoked: u64,
    #[serde(default)]
    pub audit_refusals: u64,
    #[serde(default)]
    /// Session files whose anchor could not be written.
    pub unanchored: Vec<String>,
}

/// `audit_refused`: one refusal (`what`, `error`), or the count of an
/// interval's others (`more`, `interval_s`, `total`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AuditRefused {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub what: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub more: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_s: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SandboxExec {
    #[serde(default)]
    pub by: String,
    #[serde(default)]
    pub backend: String,
    #[serde(default)]
    pub workspace: String,
    #[serde(default)]
    pub uid: u64,
    #[serde(default)]
    pub argv: Vec<String>,
    #[serde(default)]
    pub timeout_s: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SandboxError {
    #[serde(default)]
    pub during: String,
    #[serde(default)]
    pub error: String,
}

/// `session_opened`, in the session's file and (with `audit_file`) in the
/// supervisor log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SessionOpened {
    #[serde(default)]
    pub uid: u64,
    #[serde(default)]
    pub gid: u64,
    #[serde(default)]
    pub pid: i64,
    #[serde(default)]
    pub workspace: String,
    #[serde(default)]
    pub mode: String,
    #[serde(default)]
    pub tools: Vec<String>,
    #[serde(default)]
    pub max_tool_calls: u64,
    #[serde(default)]
    pub max_cost_usd: f64,
    #[serde(default)]
    pub client: String,
    #[serde(default)]
    pub sandbox: String,
    #[serde(default)]
    pub system_prompt_chars: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_session_id: Option<String>,
    /// The session's file (supervisor log only): a path when written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_file: Option<String>,
}

/// `session_closed` / `session_revoked`. The short `session_closed` that
/// ends a revoked session's own file has `state` and `reason` only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SessionEnded {
    #[serde(default)]
    pub state: String,
    #[serde(default)]
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_in: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_out: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_error: Option<String>,
    /// The session's file (supervisor log only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_file: Option<String>,
}

impl SessionEnded {
    /// The short `session_closed` that ends a revoked session's own file.
    pub fn short(state: &str, reason: &str) -> SessionEnded {
        SessionEnded {
            state: state.to_string(),
            reason: reason.to_string(),
            by: None,
            tool_calls: None,
            tokens_in: None,
            tokens_out: None,
            cost_usd: None,
            sandbox_error: None,
            audit_file: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TokenRotated {
    #[serde(default)]
    pub expires_unix_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DiskFloorStop {
    #[serde(default)]
    pub workspace: String,
    #[serde(default)]
    pub free_mb: Option<u64>,
    #[serde(default)]
    pub floor_mb: u64,
    #[serde(default)]
    pub reason: String,
}

/// The policy's verdict (the engine's own type).
pub use tollgate_toolcall::Verdict;

/// `permission_check`. A call refused before the engine (the tool-call
/// cap) or a client's harmless bookkeeping has no consequence, target or
/// arguments; an MCP gateway call names its `server` and `mcp_tool`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PermissionCheck {
    #[serde(default)]
    pub call_id: String,
    #[serde(default)]
    pub tool: String,
    pub decision: Verdict,
    #[serde(default)]
    pub code: String,
    #[serde(default)]
    pub rule: Option<String>,
    /// The `policy.d/` drop-in that brought `rule`; absent for the config
    /// file's own rules, floors and modes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_file: Option<String>,
    #[serde(default)]
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consequence: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The arguments, capped (or `[REDACTED:secret-file]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<String>,
    /// Who let an allowed call through (`allowed`, `allowed(session-scope)`,
    /// `auto-allow(config)`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_tool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_tool: Option<String>,
}

/// `allowed_by` of a call allowed by a config's `auto_approve`.
pub const AUTO_ALLOWED: &str = "auto-allow(config)";
/// `allowed_by` of a call allowed by an earlier session-scope approval.
pub const SESSION_SCOPE: &str = "allowed(session-scope)";

/// `approval_requested`. `channel: "client"` when the client's own prompt
/// asks the person (no deadline then).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ApprovalRequested {
    #[serde(default)]
    pub approval_id: String,
    #[serde(default)]
    pub call_id: String,
    #[serde(default)]
    pub tool: String,
    #[serde(default)]
    pub consequence: String,
    #[serde(default)]
    pub destructive: bool,
    #[serde(default)]
    pub target: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_unix_ms: Option<i64>,
    #[serde(default)]
    pub rule: Option<String>,
    /// As in [`PermissionCheck`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
}

/// How an approval ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalOutcome {
    Approved,
    Denied,
    Timeout,
    Withdrawn,
}

impl ApprovalOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalOutcome::Approved => "approved",
            ApprovalOutcome::Denied => "denied",
            ApprovalOutcome::Timeout => "timeout",
            ApprovalOutcome::Withdrawn => "withdrawn",
        }
    }
}

/// `approval_decided`. `rule` is absent from a withdrawal, `null` when the
/// decision named none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ApprovalDecided {
    #[serde(default)]
    pub approval_id: String,
    #[serde(default)]
    pub tool: String,
    pub outcome: ApprovalOutcome,
    #[serde(default)]
    pub by: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub rule: Option<Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ToolStarted {
    #[serde(default)]
    pub call_id: String,
    #[serde(default)]
    pub tool: String,
    #[serde(default)]
    pub allowed_by: String,
    #[serde(default)]
    pub target: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_tool: Option<String>,
}

/// How a tool run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ToolStatus {
    Ok,
    Error,
    /// Stopped by tollgate (the sandbox, the disk floor, a cancel).
    Stopped,
}

impl ToolStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ToolStatus::Ok => "ok",
            ToolStatus::Error => "error",
            ToolStatus::Stopped => "stopped",
        }
    }
}

/// `tool_result`. `exit_code` is `null` for a tool that has none and
/// absent from an MCP gateway call; a routed command adds `routed` and
/// `signal`, a stopped one why (`stopped`), a failed MCP call `error`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ToolResult {
    #[serde(default)]
    pub call_id: String,
    #[serde(default)]
    pub tool: String,
    pub status: ToolStatus,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub exit_code: Option<Option<i64>>,
    #[serde(default)]
    pub bytes: u64,
    #[serde(default)]
    pub truncated: bool,
    #[serde(default)]
    pub duration_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<Stopped>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routed: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_tool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ToolResult {
    /// The exit code, when the tool has one.
    pub fn exit(&self) -> Option<i64> {
        self.exit_code.flatten()
    }
}

/// `job_started`: `command` as decided (redacted, cut to the excerpt's
/// length); `routed` when a client's hook routed it (its output goes to
/// the client, not to `job_output`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JobStarted {
    #[serde(default)]
    pub job_id: String,
    #[serde(default)]
    pub call_id: String,
    #[serde(default)]
    pub command: String,
    #[serde(default, skip_serializing_if = "is_false")]
    pub routed: bool,
}

/// How a background job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum JobEnd {
    /// It exited (or a signal of its own ended it).
    Exited,
    /// `kill_job`, or its client stopped it (Claude Code's TaskStop).
    Killed,
    /// Its session ended (closed, revoked, killed, expired) or its sandbox
    /// was stopped (the disk floor).
    SessionEnded,
    /// The sandbox failed under it.
    Failed,
}

/// `job_ended`: how, its exit code or signal when it has one, the bytes it
/// printed, how long it ran, and why in a sentence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JobEnded {
    #[serde(default)]
    pub job_id: String,
    #[serde(default)]
    pub call_id: String,
    pub how: JobEnd,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i64>,
    #[serde(default)]
    pub bytes: u64,
    #[serde(default)]
    pub duration_ms: u64,
    #[serde(default)]
    pub reason: String,
}

/// Why a run was stopped: the denial's code, rule and reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Stopped {
    #[serde(default)]
    pub code: String,
    #[serde(default)]
    pub rule: String,
    #[serde(default)]
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LlmRequest {
    #[serde(default)]
    pub provider: String,
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub turn: u64,
    #[serde(default)]
    pub messages: u64,
    #[serde(default)]
    pub tools: u64,
    #[serde(default)]
    pub last_role: String,
    #[serde(default)]
    /// Redacted and capped.
    pub last_content: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LlmResponse {
    #[serde(default)]
    pub provider: String,
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub turn: u64,
    #[serde(default)]
    pub duration_ms: u64,
    /// `null` when the provider reported none.
    #[serde(default)]
    pub usage: Option<Usage>,
    #[serde(default)]
    pub cost_usd: f64,
    #[serde(default)]
    pub session_cost_usd: f64,
    #[serde(default)]
    pub finish_reason: String,
    #[serde(default)]
    pub content: String,
    #[serde(default)]
    pub tool_calls: Vec<String>,
    #[serde(default)]
    pub calls: Vec<CallOnRecord>,
    #[serde(default)]
    pub calls_total: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
}

/// One tool call as the model sent it (redacted and capped).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CallOnRecord {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub arguments: String,
    #[serde(default)]
    /// The name was one of the tools offered.
    pub offered: bool,
    #[serde(default)]
    /// The arguments are a JSON object.
    pub json_object: bool,
}

/// What kind of failure an LLM call had.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LlmErrorKind {
    Timeout,
    Connect,
    HttpStatus,
    Malformed,
    TooLarge,
    Other,
}

impl LlmErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LlmErrorKind::Timeout => "timeout",
            LlmErrorKind::Connect => "connect",
            LlmErrorKind::HttpStatus => "http_status",
            LlmErrorKind::Malformed => "malformed",
            LlmErrorKind::TooLarge => "too_large",
            LlmErrorKind::Other => "other",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LlmCallError {
    #[serde(default)]
    pub provider: String,
    pub kind: LlmErrorKind,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub turn: u64,
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub duration_ms: u64,
    /// What the model sent, when it could not be used (redacted, capped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<String>,
}

/// `llm_retry`: the provider answered `status` (429 or 5xx) to attempt
/// `attempt` of turn `turn`; the call is tried again after `wait_ms`, which
/// is the provider's `Retry-After` when it sent one (`retry_after`, as
/// sent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LlmRetry {
    #[serde(default)]
    pub provider: String,
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub turn: u64,
    #[serde(default)]
    pub attempt: u64,
    #[serde(default)]
    pub status: u64,
    #[serde(default)]
    pub wait_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<String>,
    #[serde(default)]
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CostLimitHit {
    #[serde(default)]
    pub cost_usd: f64,
    #[serde(default)]
    pub max_cost_usd: f64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ClientTurnEnd {
    #[serde(default)]
    pub client: String,
}

/// `client_tool_result`: `unexpected` (with a `reason`) when tollgate had
/// no decision for the call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ClientToolResult {
    #[serde(default)]
    pub call_id: String,
    #[serde(default)]
    pub client_tool: String,
    #[serde(default)]
    pub tool: String,
    pub status: ToolStatus,
    #[serde(default)]
    pub duration_ms: Option<u64>,
    #[serde(default)]
    pub bytes: u64,
    #[serde(default)]
    pub output: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unexpected: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routed: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct McpServerStarted {
    #[serde(default)]
    pub server: String,
    #[serde(default)]
    /// Redacted.
    pub argv: String,
    #[serde(default)]
    pub backend: String,
    /// The `--allow-net` entries as the operator gave them (always written
    /// since the gateway could reach the network; absent in older logs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_net: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct McpServerExited {
    #[serde(default)]
    pub server: String,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub exit_code: Option<i64>,
    #[serde(default)]
    pub signal: Option<i64>,
}

/// `net_connection`: one phase of a connection through the network wall
/// (docs/INTERFACES.md "[network]"). `open` is written after the upstream
/// connect and before any byte flows; `close` when it ends; `refused` for a
/// refusal; `refusals_summary` counts refusals past the per-session bound.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NetConnection {
    /// `open`, `close`, `refused` or `refusals_summary`.
    #[serde(default)]
    pub phase: String,
    /// Joins a connection's `open` and `close`.
    #[serde(default)]
    pub conn: u64,
    /// `http-connect`, `http`, `socks5`.
    #[serde(default)]
    pub via: String,
    #[serde(default)]
    pub host: String,
    #[serde(default)]
    pub port: u16,
    /// The vetted address connected to; `null` when none.
    #[serde(default)]
    pub address: Option<String>,
    /// `allow` or `deny`.
    #[serde(default)]
    pub decision: String,
    /// The rule that decided: a `[network]` entry as written, or a named
    /// floor (`network:unlisted`, `floor:ssrf`, `network:sni`, …).
    #[serde(default)]
    pub rule: String,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub bytes_up: u64,
    #[serde(default)]
    pub bytes_down: u64,
    #[serde(default)]
    pub duration_ms: u64,
    /// `refusals_summary`: refusals not recorded one by one.
    #[serde(default)]
    pub suppressed: u64,
    /// The tool call the connection came from: the one running command's
    /// call id, or several joined by `|` when several ran at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// That call's command (several: one per line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
}

/// `network_rule`: an operator added `entry` to the session's `allow` or
/// `deny` (`verb`), effective for the session's next connections.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NetworkRule {
    #[serde(default)]
    pub verb: String,
    #[serde(default)]
    pub entry: String,
    /// Who: `uid 0 via operator`.
    #[serde(default)]
    pub by: String,
}

/// `cache_cleared`: package caches an operator removed (`supervisorctl
/// cache clear`), in the supervisor's log: whose, which directories, and
/// what they held (docs/OPERATIONS.md "Package caches").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CacheCleared {
    /// Who: `uid 0 via operator`.
    #[serde(default)]
    pub by: String,
    /// The owner asked for; empty: every owner.
    #[serde(default)]
    pub user: String,
    #[serde(default)]
    pub caches: Vec<String>,
    #[serde(default)]
    pub bytes: u64,
    #[serde(default)]
    pub files: u64,
}

/// `net_secret`: a `[[secrets]]` entry put into one request through the
/// network wall (`action` `put`), or its placeholder stripped from one to
/// a host it is not bound to (`stripped`, with why); `conn` joins it to
/// the connection's `net_connection` records (0: before any). It names the
/// secret, never its value (docs/THREAT_MODEL.md "Secrets").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NetSecret {
    #[serde(default)]
    pub secret: String,
    #[serde(default)]
    pub action: String,
    #[serde(default)]
    pub conn: u64,
    #[serde(default)]
    pub via: String,
    #[serde(default)]
    pub host: String,
    #[serde(default)]
    pub port: u16,
    #[serde(default)]
    pub reason: Option<String>,
    /// The tool call the connection came from, when known.
    #[serde(default)]
    pub call_id: Option<String>,
}

/// `sandbox_denial`: one distinct refusal of a command by a wall of the
/// sandbox (`phase` `refused`, with how many times), or (`phase`
/// `summary`) how many more were not recorded one by one and how many the
/// kernel dropped (docs/THREAT_MODEL.md, "Refusals, attributed").
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SandboxDenial {
    #[serde(default)]
    pub call_id: String,
    /// `refused` or `summary`.
    #[serde(default)]
    pub phase: String,
    /// `read`, `write`, `create`, `remove`, `rename`, `exec`, `link`,
    /// `truncate`, `ioctl`, `create device`.
    #[serde(default)]
    pub access: String,
    /// As the sandbox sees it, escaped.
    #[serde(default)]
    pub path: String,
    /// The rule's short name (`credential`, `outside_workspace`, ...).
    #[serde(default)]
    pub rule: String,
    /// The rule in words.
    #[serde(default)]
    pub reason: String,
    /// The refused process's argv[0] (escaped) and host pid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// How many times this refusal happened in the command.
    #[serde(default)]
    pub count: u64,
    /// `summary`: refusals not recorded one by one.
    #[serde(default)]
    pub suppressed: u64,
    /// `summary`: refusal records the kernel dropped while it ran.
    #[serde(default)]
    pub lost: u64,
    /// `command_output`: read from the command's own error message (the
    /// read-only root's `EROFS`, which no kernel record names), not from a
    /// kernel record; absent for a kernel record's refusal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inferred: Option<String>,
    /// A system call's argument that decided its refusal (`flags`, `mode`,
    /// `request`, `family`, `persona`); `reason` says what it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argument: Option<String>,
}

/// `mcp_egress`: one TCP connection an MCP server opened through its
/// `--allow-net` gateway, accepted (`address` it reached) or `refused` (why).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct McpEgress {
    #[serde(default)]
    pub server: String,
    /// The allowed host the connection was for.
    #[serde(default)]
    pub host: String,
    #[serde(default)]
    pub port: u16,
    /// The vetted address connected to; `null` when refused before one.
    #[serde(default)]
    pub address: Option<String>,
    /// Why the connection was refused; `null` when it was not.
    #[serde(default)]
    pub refused: Option<String>,
    /// How the connection ended.
    #[serde(default)]
    pub end: String,
    #[serde(default)]
    pub bytes_out: u64,
    #[serde(default)]
    pub bytes_in: u64,
    #[serde(default)]
    pub duration_ms: u64,
    /// In the one `end: "refusals_summary"` record a gateway writes when it
    /// refused more connections than it records one by one: how many it
    /// only counted.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub suppressed: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// An agent's report: the fields it sent (a JSON object, at most 16 KiB),
/// plus `reported_by: "agent"`. tollgate does not interpret them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AgentReport {
    #[serde(default)]
    pub reported_by: String,
    #[serde(flatten)]
    pub fields: Map<String, Value>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_match_the_serde_tags() {
        let e = Event::Recovered(Recovered {
            detail: "x".to_string(),
        });
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["event"], e.name());
        assert_eq!(
            e.fields().unwrap(),
            json!({"detail": "x"}).as_object().unwrap().clone()
        );
    }

    #[test]
    fn absent_null_and_present_stay_apart() {
        let rec = |fields: Value| {
            let Parsed::Known(Event::ToolResult(r)) =
                Event::read("tool_result", fields.as_object().unwrap())
            else {
                panic!("not a tool_result")
            };
            r
        };
        let base = json!({"call_id": "c", "tool": "t", "status": "ok", "bytes": 1,
                          "truncated": false, "duration_ms": 2});
        assert_eq!(rec(base.clone()).exit_code, None);
        let mut null = base.clone();
        null["exit_code"] = Value::Null;
        assert_eq!(rec(null.clone()).exit_code, Some(None));
        let mut two = base;
        two["exit_code"] = json!(2);
        assert_eq!(rec(two.clone()).exit(), Some(2));
        for v in [null, two] {
            let back = Event::ToolResult(rec(v.clone())).fields().unwrap();
            assert_eq!(Value::Object(back), v);
        }
    }

    #[test]
    fn unknown_kinds_and_unreadable_fields_are_unknown_not_errors() {
        let m = Map::new();
        assert!(matches!(
            Event::read("from_the_future", &m),
            Parsed::Unknown { .. }
        ));
        assert!(matches!(
            Event::read("tool_result", &m),
            Parsed::Unknown { .. }
        ));
    }

    #[test]
    fn unknown_members_are_ignored() {
        let f = json!({"detail": "d", "added_later": [1, 2]});
        assert_eq!(
            Event::read("recovered", f.as_object().unwrap()).known(),
            Some(&Event::Recovered(Recovered {
                detail: "d".to_string()
            }))
        );
    }

    #[test]
    fn agent_reports_are_only_the_reportable_kinds() {
        for name in AGENT_REPORTABLE {
            let f = json!({"reported_by": "agent", "n": 1});
            let e = Event::agent_report(name, f.as_object().unwrap().clone()).unwrap();
            assert_eq!(e.name(), name);
            assert_eq!(Value::Object(e.fields().unwrap()), f);
        }
        let f = json!({"reported_by": "agent"});
        for name in ["session_closed", "permission_check", "made_up"] {
            assert!(
                Event::agent_report(name, f.as_object().unwrap().clone()).is_none(),
                "{name}"
            );
        }
    }
    /// One record of every kind, with its optional members both ways.
    fn samples() -> Vec<Value> {
        vec![
            json!({"event": "audit_opened", "file": "f", "pid": 1, "sync": "always", "previous": null,
                   "previous_file": "p", "previous_error": "e", "previous_missing": ["m"]}),
            json!({"event": "audit_opened", "file": "f", "pid": 1, "sync": "batch",
                   "previous": {"file": "p", "records": 2, "head": "h"}}),
            json!({"event": "audit_file_closed", "file": "f", "records": 3, "head": "h"}),
            json!({"event": "audit_file_closed", "file": "f", "records": 3, "head": "h", "late": true, "closed": "t"}),
            json!({"event": "config", "version": "0.1.0", "pid": 1, "uid": 0, "config_file": null,
                   "state_dir": "s", "audit_dir": "a", "audit_sync": "always", "sandbox": "native",
                   "sandbox_strength": "full", "sandbox_missing": [], "llm_provider": "script",
                   "host_secret_env_count": 0, "rules": {"allow": 1, "ask": 2, "deny": 3},
                   "default_mode": "default", "max_mode": "default", "auto_approve": false,
                   "audit_reserve": {"target": 1, "held": 1, "drawing": false}, "disk_min_free_mb": 64}),
            json!({"event": "host_addresses", "trigger": "start", "count": 1, "addresses": ["::1 lo"]}),
            json!({"event": "host_addresses", "trigger": "netlink", "error": "e", "effect": "x"}),
            json!({"event": "recovered", "detail": "d"}),
            json!({"event": "shutdown", "signal": "SIGTERM", "sessions_revoked": 1, "audit_refusals": 0, "unanchored": []}),
            json!({"event": "audit_refused", "what": "w", "error": "e"}),
            json!({"event": "audit_refused", "more": 3, "interval_s": 10, "total": 9}),
            json!({"event": "sandbox_exec", "by": "b", "backend": "native", "workspace": "w", "uid": 1,
                   "argv": ["id"], "timeout_s": 5}),
            json!({"event": "sandbox_error", "during": "d", "error": "e"}),
            json!({"event": "session_opened", "uid": 1, "gid": 1, "pid": 2, "workspace": "w", "mode": "plan",
                   "tools": ["read_file"], "max_tool_calls": 3, "max_cost_usd": 0.5, "client": "c",
                   "sandbox": "docker", "system_prompt_chars": 9, "client_session_id": "x", "audit_file": "/a/f"}),
            json!({"event": "session_closed", "state": "closed", "reason": "r", "by": "agent", "tool_calls": 1,
                   "tokens_in": 2, "tokens_out": 3, "cost_usd": 0.25, "audit_file": "/a/f"}),
            json!({"event": "session_revoked", "state": "killed", "reason": "r", "by": "op", "tool_calls": 0,
                   "tokens_in": 0, "tokens_out": 0, "cost_usd": 0.0, "sandbox_error": "e"}),
            json!({"event": "token_rotated", "expires_unix_ms": 5}),
            json!({"event": "disk_floor_stop", "workspace": "w", "free_mb": null, "floor_mb": 64, "reason": "r"}),
            json!({"event": "permission_check", "call_id": "c", "tool": "t", "decision": "deny",
                   "code": "CAP_REACHED", "rule": "cap:max_tool_calls", "reason": "r"}),
            json!({"event": "permission_check", "call_id": "c", "tool": "mcp", "decision": "allow", "code": "OK",
                   "rule": null, "reason": "", "consequence": "x", "destructive": false, "target": "t",
                   "args": "{}", "allowed_by": "allowed", "server": "s", "mcp_tool": "m"}),
            json!({"event": "approval_requested", "approval_id": "a", "call_id": "c", "tool": "t",
                   "consequence": "x", "destructive": true, "target": "t", "deadline_unix_ms": 9, "rule": null}),
            json!({"event": "approval_requested", "approval_id": "a", "call_id": "c", "tool": "t",
                   "consequence": "x", "destructive": false, "target": "t", "rule": "r", "channel": "client"}),
            json!({"event": "approval_decided", "approval_id": "a", "tool": "t", "outcome": "withdrawn", "by": "b"}),
            json!({"event": "approval_decided", "approval_id": "a", "tool": "t", "outcome": "approved",
                   "scope": "session", "by": "b", "rule": null, "target": "t"}),
            json!({"event": "tool_started", "call_id": "c", "tool": "t", "allowed_by": "routed", "target": "x"}),
            json!({"event": "tool_result", "call_id": "c", "tool": "run_bash", "status": "stopped",
                   "exit_code": null, "bytes": 0, "truncated": false, "duration_ms": 1, "output": "",
                   "stopped": {"code": "POLICY_DENIED", "rule": "disk", "reason": "r"}}),
            json!({"event": "tool_result", "call_id": "c", "tool": "run_bash", "status": "ok", "routed": true,
                   "exit_code": 0, "signal": 0, "bytes": 1, "truncated": false, "duration_ms": 1, "output": "x"}),
            json!({"event": "tool_result", "call_id": "c", "tool": "mcp", "server": "s", "mcp_tool": "m",
                   "status": "stopped", "bytes": 0, "truncated": false, "duration_ms": 1, "error": "e"}),
            json!({"event": "llm_request", "provider": "p", "model": "m", "turn": 0, "messages": 2, "tools": 1,
                   "last_role": "user", "last_content": "hi"}),
            json!({"event": "llm_response", "provider": "p", "model": "m", "turn": 0, "duration_ms": 1,
                   "usage": {"prompt_tokens": 1, "completion_tokens": 2}, "cost_usd": 0.01,
                   "session_cost_usd": 0.02, "finish_reason": "stop", "content": "c", "tool_calls": ["t"],
                   "calls": [{"id": "i", "name": "t", "arguments": "{}", "offered": true, "json_object": true}],
                   "calls_total": 1}),
            json!({"event": "llm_call_error", "provider": "p", "kind": "too_large", "reason": "r", "turn": 1,
                   "model": "m", "duration_ms": 2, "response": "x"}),
            json!({"event": "cost_limit_hit", "cost_usd": 1.5, "max_cost_usd": 1.0}),
            json!({"event": "client_turn_end", "client": "claude"}),
            json!({"event": "client_tool_result", "call_id": "c", "client_tool": "Bash", "tool": "run_bash",
                   "status": "error", "duration_ms": null, "bytes": 0, "output": "", "unexpected": true, "reason": "r"}),
            json!({"event": "mcp_server_started", "server": "s", "argv": "a b", "backend": "native"}),
            json!({"event": "mcp_server_started", "server": "s", "argv": "a b", "backend": "docker",
                   "allow_net": ["api.example:443"]}),
            json!({"event": "mcp_server_started", "server": "s", "argv": "a b", "backend": "native",
                   "allow_net": []}),
            json!({"event": "mcp_server_exited", "server": "s", "reason": "r", "exit_code": null, "signal": 9}),
            json!({"event": "mcp_egress", "server": "s", "host": "api.example", "port": 443,
                   "address": "93.184.216.34:443", "refused": null, "end": "closed", "bytes_out": 10,
                   "bytes_in": 20, "duration_ms": 3}),
            json!({"event": "mcp_egress", "server": "s", "host": "api.example", "port": 443,
                   "address": null, "refused": "r", "end": "refused", "bytes_out": 0, "bytes_in": 0,
                   "duration_ms": 0}),
            json!({"event": "question_asked", "reported_by": "agent", "question": "q"}),
            json!({"event": "context_trim", "reported_by": "agent", "dropped_messages": 2}),
            json!({"event": "iteration_cap_hit", "reported_by": "agent"}),
            json!({"event": "abort", "reported_by": "agent", "reason": "ctrl-c"}),
            json!({"event": "turn_summary", "reported_by": "agent", "tool_calls": 1}),
        ]
    }

    #[test]
    fn every_kind_reads_back_as_itself_and_writes_the_same_members() {
        let mut seen = std::collections::BTreeSet::new();
        for sample in samples() {
            let mut fields = sample.as_object().unwrap().clone();
            let name = fields.remove("event").unwrap();
            let name = name.as_str().unwrap();
            let event = match Event::read(name, &fields) {
                Parsed::Known(e) => e,
                Parsed::Unknown { why, .. } => panic!("{name}: {why}"),
            };
            assert_eq!(event.name(), name);
            assert_eq!(event.fields().unwrap(), fields, "{name}");
            seen.insert(event.name());
        }
        // Event::name is exhaustive and checked against the tag above, so
        // this counts the variants covered: a new kind needs a sample.
        assert_eq!(seen.len(), 33, "a kind has no sample: {seen:?}");
    }
}
