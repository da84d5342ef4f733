//! The wire: the one place the gate's types become protobuf and back
//! (docs/INTERFACES.md is the contract for what goes out).

use std::sync::atomic::Ordering;

use tollgate_audit::event::JobEnd;
use tollgate_gate::approvals::{Answer, Approval, DecideError, Notice, Resolved, Scope, Status};
use tollgate_gate::session::{Session, State, unix_ms};
use tollgate_gate::{CallTool, Denial, ExitStatus, ShellOut, ToolAnswer};
use tollgate_policy::Code;
use tollgate_proto::v1 as pb;
use tollgate_sandbox::BackendKind;

pub mod chat;
pub mod network;

/// The proto code for an engine code (allow and ask have none).
pub fn code_of(c: Code) -> pb::DenialCode {
    match c {
        Code::Ok | Code::ApprovalRequired => pb::DenialCode::Unspecified,
        Code::UnknownTool => pb::DenialCode::UnknownTool,
        Code::NotInAllowlist => pb::DenialCode::NotInAllowlist,
        Code::InvalidArgs => pb::DenialCode::InvalidArgs,
        Code::PolicyDenied => pb::DenialCode::PolicyDenied,
        Code::UserDenied => pb::DenialCode::UserDenied,
        Code::ApprovalTimeout => pb::DenialCode::ApprovalTimeout,
        Code::CapReached => pb::DenialCode::CapReached,
        Code::SessionRevoked => pb::DenialCode::SessionRevoked,
        Code::SandboxUnavailable => pb::DenialCode::SandboxUnavailable,
        Code::AuditUnavailable => pb::DenialCode::AuditUnavailable,
    }
}

pub fn denial(d: Denial) -> pb::Denial {
    pb::Denial {
        code: code_of(d.code) as i32,
        reason: d.reason,
        rule: d.rule,
        consequence: d.consequence,
        destructive: d.destructive,
    }
}

pub fn call_tool(req: pb::CallToolRequest) -> CallTool {
    CallTool {
        call_id: req.call_id,
        tool: req.tool,
        arguments_json: req.arguments_json,
    }
}

pub fn tool_answer(a: ToolAnswer) -> pb::CallToolResponse {
    pb::CallToolResponse {
        ok: a.ok,
        output: a.output,
        exit_code: a.exit_code,
        truncated: a.truncated,
        duration_ms: a.duration_ms,
        denied: a.denied.map(denial),
        error: a.error,
        allowance: allowance(&a.allowed_by) as i32,
        allowed_by: a.allowed_by,
        code: a
            .failure
            .map(|f| f.as_str().to_string())
            .unwrap_or_default(),
    }
}

/// The enum beside `allowed_by`'s text (docs/INTERFACES.md "Wire enums").
fn allowance(allowed_by: &str) -> pb::AllowedBy {
    match allowed_by {
        "allowed" => pb::AllowedBy::Rule,
        tollgate_audit::event::SESSION_SCOPE => pb::AllowedBy::SessionScope,
        "approved" => pb::AllowedBy::Approval,
        tollgate_audit::event::AUTO_ALLOWED => pb::AllowedBy::Config,
        "routed" => pb::AllowedBy::Routed,
        _ => pb::AllowedBy::Unspecified,
    }
}

/// A tool of the registry as `ListTools` sends it.
pub fn tool_spec(t: &tollgate_policy::ToolSpec) -> pb::ToolSpec {
    pb::ToolSpec {
        name: t.name.to_string(),
        description: t.description.to_string(),
        class: t.class.as_str().to_string(),
        parameters_json: t.parameters.to_string(),
        tool_class: pb::ToolClass::from_text(t.class.as_str()) as i32,
    }
}

/// A PreToolUse's answer with its decision in both fields (the text is
/// deprecated, docs/INTERFACES.md "Wire enums"); the rest is filled by the caller.
pub fn hook_decided(d: pb::HookDecision) -> pb::HookEventResponse {
    let text = match d {
        pb::HookDecision::Unspecified => "",
        pb::HookDecision::Allow => "allow",
        pb::HookDecision::Deny => "deny",
        pb::HookDecision::Ask => "ask",
    };
    pb::HookEventResponse {
        decision: text.to_string(),
        hook_decision: d as i32,
        ..Default::default()
    }
}

pub fn approval(a: Approval) -> pb::Approval {
    pb::Approval {
        id: a.id,
        session_id: a.session_id,
        tool: a.tool,
        consequence: a.consequence,
        diff: a.diff,
        destructive: a.destructive,
        target: a.target,
        created_unix_ms: a.created_unix_ms,
        deadline_unix_ms: a.deadline_unix_ms,
        rule: a.rule,
        reason: a.reason,
        arguments_json: a.arguments_json,
        status: a.status.as_str().to_string(),
        uid: a.uid,
        approval_status: approval_status(a.status) as i32,
    }
}

/// An approval's status on the wire.
pub fn approval_status(s: Status) -> pb::ApprovalStatus {
    match s {
        Status::Pending => pb::ApprovalStatus::Pending,
        Status::Approved => pb::ApprovalStatus::Approved,
        Status::Denied => pb::ApprovalStatus::Denied,
        Status::Timeout => pb::ApprovalStatus::Timeout,
        Status::Withdrawn => pb::ApprovalStatus::Withdrawn,
    }
}

fn approval_scope(s: Scope) -> pb::ApprovalScope {
    match s {
        Scope::Once => pb::ApprovalScope::Once,
        Scope::Session => pb::ApprovalScope::Session,
    }
}

/// A person's decision as the gate's approvals table takes it: its
/// `approval_scope`, or the deprecated `scope` text when that is unspecified.
pub fn answer(d: pb::ApprovalDecision) -> Result<Answer, DecideError> {
    let scope = match d.approval_scope() {
        pb::ApprovalScope::Once => Scope::Once,
        pb::ApprovalScope::Session => Scope::Session,
        pb::ApprovalScope::Unspecified => Scope::parse(&d.scope).map_err(DecideError::BadScope)?,
    };
    Ok(Answer {
        approval_id: d.approval_id,
        approve: d.approve,
        scope,
        confirm: d.confirm,
        reason: d.reason,
    })
}

fn resolved(r: Resolved) -> pb::ApprovalResolved {
    pb::ApprovalResolved {
        approval_id: r.approval_id,
        outcome: r.outcome.as_str().to_string(),
        approval_outcome: approval_status(r.outcome) as i32,
        decided_by: r.decided_by,
        scope: r.scope.map(|s| s.as_str().to_string()).unwrap_or_default(),
        approval_scope: r
            .scope
            .map_or(pb::ApprovalScope::Unspecified, approval_scope) as i32,
        reason: r.reason,
    }
}

/// A message of the session's control stream.
pub fn notice(n: Notice) -> pb::ApprovalServerMsg {
    use pb::approval_server_msg::Msg;
    let msg = match n {
        Notice::Requested(a) => Msg::Requested(approval(*a)),
        Notice::Resolved(r) => Msg::Resolved(resolved(*r)),
        Notice::Ended { code, reason } => Msg::Ended(pb::SessionEnded {
            code: code_of(code) as i32,
            reason,
        }),
    };
    pb::ApprovalServerMsg { msg: Some(msg) }
}

fn exit_status(e: ExitStatus) -> pb::ExitStatus {
    pb::ExitStatus {
        code: e.code,
        signal: e.signal,
        timed_out: e.timed_out,
    }
}

impl From<ShellOut> for Routed {
    fn from(o: ShellOut) -> Routed {
        use pb::sandbox_exec_output::Out;
        let out = match o {
            ShellOut::Stdout(b) => Out::Stdout(b),
            ShellOut::Stderr(b) => Out::Stderr(b),
            ShellOut::Exit(e) => Out::Exit(exit_status(e)),
        };
        Routed(pb::SandboxExecOutput { out: Some(out) })
    }
}

/// A routed command's output message, as the hook service streams it.
#[derive(Debug)]
pub struct Routed(pub pb::SandboxExecOutput);

/// What `supervisorctl sessions` and `show` print of a session.
pub fn session_info(s: &Session, pending_approvals: u32, sandbox: BackendKind) -> pb::SessionInfo {
    let usage = s.usage();
    pb::SessionInfo {
        id: s.id.clone(),
        uid: s.uid,
        gid: s.gid,
        workspace: s.workspace.display().to_string(),
        mode: s.mode.as_str().to_string(),
        permission_mode: permission_mode(s.mode) as i32,
        state: s.state().as_str().to_string(),
        session_state: session_state(s.state()) as i32,
        created_unix_ms: unix_ms(s.created),
        tools: s
            .tools
            .as_ref()
            .map(|t| t.iter().cloned().collect())
            .unwrap_or_default(),
        tool_calls: s.tool_calls.load(Ordering::SeqCst),
        max_tool_calls: s.caps.max_tool_calls,
        tokens_in: usage.tokens_in,
        tokens_out: usage.tokens_out,
        cost_usd: usage.cost_usd,
        max_cost_usd: s.caps.max_cost_usd,
        pending_approvals,
        sandbox: sandbox.as_str().to_string(),
        sandbox_backend: sandbox_backend(sandbox) as i32,
        end_reason: s.end_reason(),
        client: s.client.clone(),
        pid: s.pid,
        audit_file: s.audit.path().display().to_string(),
        token_expires_unix_ms: unix_ms(s.token_expires()),
        client_session_id: s.client_session_id.clone(),
        jobs: s.jobs.list().into_iter().map(job_info).collect(),
    }
}

/// A session's mode on the wire.
pub fn permission_mode(m: tollgate_policy::Mode) -> pb::PermissionMode {
    use tollgate_policy::Mode as M;
    match m {
        M::Default => pb::PermissionMode::Default,
        M::AcceptEdits => pb::PermissionMode::AcceptEdits,
        M::Plan => pb::PermissionMode::Plan,
        M::DontAsk => pb::PermissionMode::DontAsk,
        M::DangerouslySkipPermissions => pb::PermissionMode::DangerouslySkipPermissions,
    }
}

/// A wire mode as the session's mode; `None` for unspecified.
pub fn mode_of(m: pb::PermissionMode) -> Option<tollgate_policy::Mode> {
    use tollgate_policy::Mode as M;
    match m {
        pb::PermissionMode::Unspecified => None,
        pb::PermissionMode::Default => Some(M::Default),
        pb::PermissionMode::AcceptEdits => Some(M::AcceptEdits),
        pb::PermissionMode::Plan => Some(M::Plan),
        pb::PermissionMode::DontAsk => Some(M::DontAsk),
        pb::PermissionMode::DangerouslySkipPermissions => Some(M::DangerouslySkipPermissions),
    }
}

/// The mode an open request asks for: `permission_mode`, and the deprecated
/// `mode` only when it is unspecified (docs/INTERFACES.md "Additions: wire
/// enums"); `None` when it asks for none.
pub fn asked_mode(
    req: &pb::OpenSessionRequest,
) -> Result<Option<tollgate_policy::Mode>, tollgate_policy::PolicyError> {
    let wire = pb::PermissionMode::try_from(req.permission_mode).map_err(|_| {
        tollgate_policy::PolicyError::UnknownMode(format!("enum value {}", req.permission_mode))
    })?;
    match mode_of(wire) {
        Some(m) => Ok(Some(m)),
        None if req.mode.is_empty() => Ok(None),
        None => tollgate_policy::Mode::parse(&req.mode).map(Some),
    }
}

fn session_state(s: State) -> pb::SessionState {
    match s {
        State::Active => pb::SessionState::Active,
        State::Revoked => pb::SessionState::Revoked,
        State::Killed => pb::SessionState::Killed,
        State::Closed => pb::SessionState::Closed,
        State::Expired => pb::SessionState::Expired,
    }
}

/// One background job, its command redacted.
fn job_info(j: tollgate_gate::jobs::JobView) -> pb::JobInfo {
    pb::JobInfo {
        id: j.id,
        command: j.command,
        state: match j.state {
            None => "running",
            Some(how) => tollgate_gate::jobs::end_name(how),
        }
        .to_string(),
        job_state: job_state(j.state) as i32,
        started_unix_ms: unix_ms(j.started),
        exit_code: j.exit_code,
        bytes: j.bytes,
        routed: j.routed,
    }
}

/// A job's state on the wire: running (`None`), or how it ended.
fn job_state(end: Option<JobEnd>) -> pb::JobState {
    match end {
        None => pb::JobState::Running,
        Some(JobEnd::Exited) => pb::JobState::Exited,
        Some(JobEnd::Killed) => pb::JobState::Killed,
        Some(JobEnd::SessionEnded) => pb::JobState::SessionEnded,
        Some(JobEnd::Failed) => pb::JobState::Failed,
    }
}

/// A sandbox backend on the wire.
pub fn sandbox_backend(k: BackendKind) -> pb::SandboxBackend {
    match k {
        BackendKind::Native => pb::SandboxBackend::Native,
        BackendKind::Docker => pb::SandboxBackend::Docker,
    }
}

/// The backend a `sandbox exec` asks for: `sandbox_backend`, and the
/// deprecated `backend` only when it is unspecified; `None` when it asks
/// for none (the supervisor's own), why not when it names no backend.
pub fn asked_backend(
    r: &pb::SandboxExecRequest,
) -> Result<Option<tollgate_config::BackendChoice>, String> {
    use tollgate_config::BackendChoice as B;
    let wire = pb::SandboxBackend::try_from(r.sandbox_backend)
        .map_err(|_| format!("unknown sandbox backend (enum value {})", r.sandbox_backend))?;
    match wire {
        pb::SandboxBackend::Native => Ok(Some(B::Native)),
        pb::SandboxBackend::Docker => Ok(Some(B::Docker)),
        pb::SandboxBackend::Unspecified if r.backend.is_empty() => Ok(None),
        pb::SandboxBackend::Unspecified => B::parse(&r.backend).map(Some),
    }
}

/// The client a hook event is from: `client_kind`, and the deprecated
/// `client` only when it is unspecified; `None` when neither names one.
pub fn hook_client(r: &pb::HookEventRequest) -> Option<tollgate_policy::clients::Client> {
    use tollgate_policy::clients::Client;
    match pb::ClientKind::try_from(r.client_kind) {
        Ok(pb::ClientKind::ClaudeCode) => Some(Client::ClaudeCode),
        Ok(pb::ClientKind::Codex) => Some(Client::Codex),
        Ok(pb::ClientKind::Unspecified) => Client::parse(&r.client),
        Err(_) => None,
    }
}

/// The configured `[sandbox] cache` on the wire.
pub fn cache_mode(m: tollgate_config::CacheMode) -> pb::CacheMode {
    use tollgate_config::CacheMode as C;
    match m {
        C::Owner => pb::CacheMode::Owner,
        C::Workspace => pb::CacheMode::Workspace,
        C::Off => pb::CacheMode::Off,
    }
}

/// One line of `supervisorctl doctor` (docs/INTERFACES.md "doctor").
pub fn doctor_check(c: tollgate_sandbox::DoctorCheck) -> pb::DoctorCheck {
    use tollgate_sandbox::CheckStatus as S;
    let status = match c.status {
        S::Ok => pb::CheckStatus::Ok,
        S::Warn => pb::CheckStatus::Warn,
        S::Fail => pb::CheckStatus::Fail,
    };
    pb::DoctorCheck {
        name: c.name,
        status: status as i32,
        detail: c.detail,
        hint: c.hint,
    }
}

#[cfg(test)]
mod tests {
    use tollgate_policy::Mode;

    use super::*;

    #[test]
    fn every_mode_goes_to_the_wire_and_back() {
        for m in Mode::ALL {
            assert_eq!(mode_of(permission_mode(m)), Some(m));
            assert_eq!(permission_mode(m).text(), m.as_str());
        }
        assert_eq!(mode_of(pb::PermissionMode::Unspecified), None);
    }

    fn open(permission_mode: i32, mode: &str) -> pb::OpenSessionRequest {
        pb::OpenSessionRequest {
            permission_mode,
            mode: mode.to_string(),
            ..Default::default()
        }
    }

    #[test]
    fn an_open_request_is_read_enum_first_then_the_deprecated_string() {
        let plan = pb::PermissionMode::Plan as i32;
        assert_eq!(asked_mode(&open(plan, "")).unwrap(), Some(Mode::Plan));
        // The enum wins over a string that disagrees.
        assert_eq!(
            asked_mode(&open(plan, "dontAsk")).unwrap(),
            Some(Mode::Plan)
        );
        assert_eq!(
            asked_mode(&open(0, "acceptEdits")).unwrap(),
            Some(Mode::AcceptEdits)
        );
        assert_eq!(asked_mode(&open(0, "")).unwrap(), None);
        assert!(asked_mode(&open(0, "sudo")).is_err());
        assert!(asked_mode(&open(99, "")).is_err());
        let dont_ask = permission_mode(Mode::DontAsk) as i32;
        assert_eq!(
            asked_mode(&open(dont_ask, "dontAsk")).unwrap(),
            Some(Mode::DontAsk)
        );
    }

    #[test]
    fn a_job_state_and_its_deprecated_word_agree() {
        let ends = [
            JobEnd::Exited,
            JobEnd::Killed,
            JobEnd::SessionEnded,
            JobEnd::Failed,
        ];
        assert_eq!(job_state(None).text(), "running");
        for how in ends {
            assert_eq!(
                job_state(Some(how)).text(),
                tollgate_gate::jobs::end_name(how)
            );
        }
    }

    #[test]
    fn a_backend_and_its_deprecated_word_agree() {
        for k in [BackendKind::Native, BackendKind::Docker] {
            assert_eq!(sandbox_backend(k).text(), k.as_str());
        }
    }

    fn exec(sandbox_backend: i32, backend: &str) -> pb::SandboxExecRequest {
        pb::SandboxExecRequest {
            sandbox_backend,
            backend: backend.to_string(),
            ..Default::default()
        }
    }

    #[test]
    fn a_sandbox_exec_is_read_enum_first_then_the_deprecated_backend() {
        use tollgate_config::BackendChoice as B;
        let docker = pb::SandboxBackend::Docker as i32;
        assert_eq!(asked_backend(&exec(docker, "")), Ok(Some(B::Docker)));
        // The enum wins over a word that disagrees.
        assert_eq!(asked_backend(&exec(docker, "native")), Ok(Some(B::Docker)));
        let native = pb::SandboxBackend::Native as i32;
        assert_eq!(asked_backend(&exec(native, "")), Ok(Some(B::Native)));
        assert_eq!(asked_backend(&exec(0, "native")), Ok(Some(B::Native)));
        assert_eq!(asked_backend(&exec(0, "docker")), Ok(Some(B::Docker)));
        assert_eq!(asked_backend(&exec(0, "")), Ok(None));
        assert!(asked_backend(&exec(0, "podman")).is_err());
        assert!(asked_backend(&exec(99, "native")).is_err());
    }

    fn hook(client_kind: i32, client: &str) -> pb::HookEventRequest {
        pb::HookEventRequest {
            client_kind,
            client: client.to_string(),
            ..Default::default()
        }
    }

    #[test]
    fn a_hook_event_is_read_enum_first_then_the_deprecated_client() {
        use tollgate_policy::clients::Client;
        for c in Client::ALL {
            let wire = pb::ClientKind::from_text(c.as_str()).unwrap();
            assert_eq!(hook_client(&hook(wire as i32, "")), Some(c));
            assert_eq!(hook_client(&hook(0, c.as_str())), Some(c));
        }
        let codex = pb::ClientKind::Codex as i32;
        assert_eq!(
            hook_client(&hook(codex, "claude-code")),
            Some(Client::Codex)
        );
        assert_eq!(hook_client(&hook(0, "")), None);
        assert_eq!(hook_client(&hook(0, "cursor")), None);
        assert_eq!(hook_client(&hook(99, "codex")), None);
    }

    #[test]
    fn a_cache_mode_and_its_deprecated_word_agree() {
        use tollgate_config::CacheMode as C;
        for m in [C::Owner, C::Workspace, C::Off] {
            assert_eq!(cache_mode(m).text(), m.as_str());
        }
    }
}
