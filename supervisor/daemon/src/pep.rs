//! The policy enforcement point: the one place that calls the policy engine,
//! then the audit log, then the tool executors and sandbox backends.
//!
//! Order for every CallTool (docs/ARCHITECTURE.md "The PEP pipeline"):
//! 1. session check (done by the auth layer) and the tool-call cap;
//! 2. the policy engine: allowlist, validation, hard floor, rules,
//!    always-confirm, mode (its step 2); then session-scope grants and
//!    `auto_approve` for the non-destructive ask tier;
//! 3. the decision record, durable before anything runs (no record, no run:
//!    AUDIT_UNAVAILABLE);
//! 4. an approval when the verdict is ask;
//! 5. execution, with `tool_started` before and `tool_result` after (a
//!    read-only tool reads while that record's fsync runs, and its output is
//!    released only after it).
//!
//! Steps 1–4 are [`authorize`], which both channels run: `CallTool` (then
//! step 5 here) and a client's hook (`hooks/`: Claude Code or Codex runs the
//! tool itself after the decision, which is therefore durable before the
//! answer). A client's routed shell command is step 5 for `run_bash`:
//! [`run_routed`] runs the command its PreToolUse decided.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tollgate_audit::Event;
use tollgate_audit::event as audit;
use tollgate_policy::{
    Code, Context, Decision, MCP_RULE_TOOL, McpToolCall, Tool, ToolCall, ToolName, Verdict,
};
use tollgate_proto::v1 as pb;
use tollgate_sandbox::{ExecRequest, Output, Sandbox};
use tollgate_tools::{FetchLimits, HopVetter, ToolOutput};

use crate::approvals::{Outcome, Scope};
use crate::backends::{SandboxOwner, SpecFor, sandbox_spec};
use crate::host_addrs::Trigger;
use crate::sessions::{Session, unix_ms};
use crate::supervisor::Supervisor;
use tollgate_policy::host::{RealFs, SystemResolver};

/// How much of a tool's arguments and output goes into the audit record.
const AUDIT_EXCERPT: usize = 2048;

/// How a channel wants a call gated: when the decision must be durable, how
/// long an approval may wait, whether an ask goes back to the caller.
#[derive(Debug, Clone)]
pub struct Gate {
    /// The decision record must be on disk when [`authorize`] returns: the
    /// caller acts on it elsewhere (a client runs the tool itself). Without
    /// it, an allowed call's record rides on the fsync of its `tool_started`,
    /// written next by the caller.
    pub durable_now: bool,
    /// How long an approval waits for a person.
    pub approval_wait: Duration,
    /// A non-destructive ask is handed back to the caller, whose own prompt
    /// asks the person (`session_can_approve` for a client hook), instead of
    /// waiting here. A destructive one never is.
    pub delegate_ask: bool,
    /// The client's own name for the tool, recorded beside tollgate's.
    pub client_tool: Option<String>,
}

impl Gate {
    /// CallTool's gate: execution follows in the supervisor.
    fn call_tool(sup: &Supervisor) -> Gate {
        Gate {
            durable_now: false,
            approval_wait: Duration::from_secs(sup.config.session.approval_timeout_s),
            delegate_ask: false,
            client_tool: None,
        }
    }
}

/// A call the pipeline cleared, up to execution.
#[derive(Debug)]
pub struct Cleared {
    pub decision: Decision,
    /// The calls as the engine checked them, typed: what execution runs.
    pub calls: Vec<Tool>,
    /// allowed | allowed(session-scope) | auto-allow(config) | approved |
    /// approved(session-scope); `delegated(client)` when handed back.
    pub allowed_by: &'static str,
    /// The ask was handed back to the caller's own prompt: nobody approved
    /// it here.
    pub delegated: Option<String>,
}

/// How long a cancelled call's executor may take to stop what it started
/// (kill the command's process group and reap it) before it is dropped.
const CANCEL_GRACE: Duration = Duration::from_secs(2);

/// Runs one tool call through the whole pipeline. Cancelling `cancel` (the
/// client went away, the session was revoked) stops it at whatever stage it
/// is in; the records say so.
pub async fn call_tool(
    sup: &Arc<Supervisor>,
    session: &Arc<Session>,
    req: pb::CallToolRequest,
    cancel: CancellationToken,
) -> pb::CallToolResponse {
    let started = Instant::now();
    let call_id = req.call_id.chars().take(128).collect::<String>();
    let tool = req.tool.clone();
    let calls = proposed_call(&req);
    let gate = Gate::call_tool(sup);
    let raw = &req.arguments_json;
    let cleared = match authorize(sup, session, &call_id, &tool, raw, calls, &gate, &cancel).await {
        Ok(c) => c,
        Err(d) => return denied(d),
    };
    let Some(call) = cleared.calls.first() else {
        // A cleared CallTool always holds its one checked call.
        let d = denial(
            Code::PolicyDenied,
            "the call was cleared without its arguments; it is refused".to_string(),
            "floor:engine-failure",
            None,
        );
        return denied(d);
    };
    let result = match run(sup, session, &call_id, call, &cleared, &cancel).await {
        Ok(r) => r,
        Err(d) => return denied(d),
    };
    let duration_ms = started.elapsed().as_millis() as u64;
    let mut response = response_of(sup, session, result, &cleared, duration_ms);
    record_outcome(
        sup,
        session,
        &call_id,
        &tool,
        &cleared.decision,
        &response,
        duration_ms,
    );
    if !response.ok && response.denied.is_none() && response.error.is_empty() {
        response.error = "the tool failed without a message".to_string();
    }
    response
}

/// CallTool's request as the engine's input: arguments that are not JSON
/// never reach the engine, and a tool the model is never offered (an MCP
/// gate) is not one it can call.
#[allow(clippy::result_large_err)] // the refusal is a whole decision, recorded as such
fn proposed_call(req: &pb::CallToolRequest) -> Result<Vec<ToolCall>, Decision> {
    let tool = &req.tool;
    if !tollgate_policy::offered(tool) && tollgate_policy::lookup(tool).is_some() {
        return Err(Decision::deny(
            Code::UnknownTool,
            format!(
                "there is no tool named `{tool}` for this agent. The available tools are: {}.",
                tollgate_policy::registry()
                    .iter()
                    .map(|t| t.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Some("registry"),
        ));
    }
    match serde_json::from_str::<Value>(&req.arguments_json) {
        Ok(args) => Ok(vec![ToolCall {
            tool: tool.clone(),
            args,
        }]),
        Err(e) => Err(Decision::deny(
            Code::InvalidArgs,
            format!("the arguments for {tool} are not valid JSON ({e}); send a JSON object"),
            Some("schema"),
        )),
    }
}

/// Step 5: execute, between the `tool_started` record and the outcome. A
/// read-only tool in `always` mode reads while the fsync runs, and its
/// output is released only once the decision is durable (see
/// `read_while_durable`); every other tool waits for the fsync before it
/// starts. `Err` is the denial when a record could not be written.
async fn run(
    sup: &Arc<Supervisor>,
    session: &Arc<Session>,
    call_id: &str,
    call: &Tool,
    cleared: &Cleared,
    cancel: &CancellationToken,
) -> Result<Result<Done, ExecError>, pb::Denial> {
    let tool = call.name().as_str();
    let decision = &cleared.decision;
    let overlap = read_only(call.name()) && session.audit.append_waits();
    let started_record = Event::ToolStarted(audit::ToolStarted {
        call_id: call_id.to_string(),
        tool: tool.to_string(),
        allowed_by: cleared.allowed_by.to_string(),
        target: decision.target.clone(),
        server: None,
        mcp_tool: None,
    });
    if let Err(e) = record_as(sup, session, started_record, overlap) {
        return Err(audit_unavailable(sup, session, tool, &e));
    }
    let run = async {
        let run = execute(sup, session, call, decision, cancel);
        if overlap {
            read_while_durable(run, || sup.recorder.sync(&session.audit)).await
        } else {
            Ok(run.await)
        }
    };
    // On cancellation the executor still gets a moment: a sandboxed command
    // is killed by the backend's exec loop, which acts on `cancel` only while
    // it is polled. Dropping it at once left the command running.
    tokio::pin!(run);
    let ran = tokio::select! {
        r = &mut run => Some(r),
        _ = cancel.cancelled() => tokio::time::timeout(CANCEL_GRACE, &mut run).await.ok(),
    };
    match ran {
        Some(Ok(r)) => Ok(r),
        Some(Err(e)) => Err(audit_unavailable(sup, session, tool, &e)),
        None => Ok(Err(ExecError::Cancelled)),
    }
}

/// What the executor's result tells the agent: the redacted output, the
/// tool's error, or why it was stopped.
fn response_of(
    sup: &Supervisor,
    session: &Session,
    result: Result<Done, ExecError>,
    cleared: &Cleared,
    duration_ms: u64,
) -> pb::CallToolResponse {
    let decision = &cleared.decision;
    let allowed_by = cleared.allowed_by;
    let stopped = |d: pb::Denial| pb::CallToolResponse {
        denied: Some(d),
        duration_ms,
        ..Default::default()
    };
    match result {
        Ok(done) => {
            let text = sup.redactor.redact(&done.output.text);
            pb::CallToolResponse {
                ok: true,
                output: text,
                exit_code: done.exit_code,
                truncated: done.output.truncated,
                duration_ms,
                allowed_by: allowed_by.to_string(),
                ..Default::default()
            }
        }
        Err(ExecError::Tool(msg)) => pb::CallToolResponse {
            ok: false,
            error: sup.redactor.redact(&msg),
            duration_ms,
            allowed_by: allowed_by.to_string(),
            ..Default::default()
        },
        Err(ExecError::Sandbox(reason)) => stopped(denial(
            Code::SandboxUnavailable,
            reason,
            "sandbox",
            Some(decision),
        )),
        Err(ExecError::DiskFloor(reason)) => stopped(denial(
            Code::PolicyDenied,
            reason,
            DISK_RULE,
            Some(decision),
        )),
        Err(ExecError::Cancelled) if session.is_active() => stopped(denial(
            Code::UserDenied,
            "the call was cancelled by the user before it finished.".to_string(),
            "cancel",
            Some(decision),
        )),
        Err(ExecError::Cancelled) => stopped(revoked(session)),
    }
}

/// The `tool_result` record. It rides on the next fsync (the action has
/// already run).
fn record_outcome(
    sup: &Supervisor,
    session: &Session,
    call_id: &str,
    tool: &str,
    decision: &Decision,
    response: &pb::CallToolResponse,
    duration_ms: u64,
) {
    let status = if response.ok {
        audit::ToolStatus::Ok
    } else if response.denied.is_some() {
        audit::ToolStatus::Stopped
    } else {
        audit::ToolStatus::Error
    };
    let excerpt = if decision.secret {
        "[REDACTED:secret-file]".to_string()
    } else {
        excerpt_of(if response.ok {
            &response.output
        } else {
            &response.error
        })
    };
    let outcome = audit::ToolResult {
        call_id: call_id.to_string(),
        tool: tool.to_string(),
        status,
        exit_code: Some(response.exit_code.map(i64::from)),
        bytes: response.output.len() as u64,
        truncated: response.truncated,
        duration_ms,
        output: Some(excerpt),
        // Why it was stopped (the disk floor, the sandbox, a cancel).
        stopped: response.denied.as_ref().map(|d| audit::Stopped {
            code: pb::DenialCode::try_from(d.code)
                .unwrap_or(pb::DenialCode::Unspecified)
                .as_str_name()
                .to_string(),
            rule: d.rule.clone(),
            reason: d.reason.clone(),
        }),
        routed: None,
        signal: None,
        server: None,
        mcp_tool: None,
        error: None,
    };
    let _ = sup
        .recorder
        .to_file_deferred(&session.audit, &session.id, Event::ToolResult(outcome));
}

/// Whether a tool writes to the workspace's filesystem (refused under the
/// disk floor, see `disk.rs`): every write tool, and run_bash (what it runs
/// may write anything); webfetch, an MCP server's tool (it runs in its own
/// sandbox, not through the PEP's executors) and the read and agent-side
/// tools do not.
fn writes_to_disk(tool: ToolName) -> bool {
    match tool {
        ToolName::WriteFile | ToolName::EditFile | ToolName::RunBash => true,
        ToolName::ReadFile
        | ToolName::GlobFiles
        | ToolName::Grep
        | ToolName::Webfetch
        | ToolName::Mcp
        | ToolName::TodoAppend
        | ToolName::TodoList
        | ToolName::TodoUpdate
        | ToolName::ReadScratchpad
        | ToolName::WriteScratchpad
        | ToolName::AskQuestion => false,
    }
}

/// The rule a disk-floor refusal names.
const DISK_RULE: &str = "floor:disk";

/// What the engine made of a channel's calls.
struct Decided {
    decision: Decision,
    args: Value,
    calls: Vec<Tool>,
}

/// Steps 1 to 4 of the pipeline, shared by every channel (CallTool, a
/// client's hook): the session and its cap, the engine (one decision, or one
/// per part combined, strictest first), session-scope grants and
/// `auto_approve`, the durable decision record, and the approval. Returns
/// the cleared call, or the denial to send.
///
/// `calls` is what the engine decides, or an early refusal (arguments that
/// are not JSON, a client tool tollgate has no rule for), recorded like any
/// other decision.
#[allow(clippy::too_many_arguments)]
pub async fn authorize(
    sup: &Arc<Supervisor>,
    session: &Arc<Session>,
    call_id: &str,
    tool: &str,
    raw_args: &str,
    calls: Result<Vec<ToolCall>, Decision>,
    gate: &Gate,
    cancel: &CancellationToken,
) -> Result<Cleared, pb::Denial> {
    // Step 1: the session and its cap.
    take_call(sup, session, call_id, tool)?;
    // Step 2: the engine.
    let calls = match calls {
        Ok(calls) => calls,
        Err(d) => {
            let _ = audit_decision(sup, session, call_id, tool, raw_args, &d, "", false, gate);
            return Err(denial_of(&d));
        }
    };
    let Decided {
        mut decision,
        args,
        calls,
    } = decide_calls(sup, session, tool, raw_args, calls).await;
    let allowed_by = apply_grants(sup, session, tool, &mut decision);
    apply_disk_floor(sup, session, &calls, &mut decision);
    // Step 3: the decision record, durable before the action. Unless the
    // caller needs it on disk now, an allowed call's record is made durable
    // by the fsync of its `tool_started` record, written next: one fsync for
    // both, before the tool runs.
    let durable_next = decision.verdict == Verdict::Allow && !gate.durable_now;
    if let Err(e) = audit_decision(
        sup,
        session,
        call_id,
        tool,
        raw_args,
        &decision,
        allowed_by,
        durable_next,
        gate,
    ) {
        return Err(audit_unavailable(sup, session, tool, &e));
    }
    // Step 4: the approval, for an ask.
    let decided = Decided {
        decision,
        args,
        calls,
    };
    let (allowed_by, delegated) = settle(
        sup, session, call_id, tool, &decided, allowed_by, gate, cancel,
    )
    .await?;
    Ok(Cleared {
        decision: decided.decision,
        calls: decided.calls,
        allowed_by,
        delegated,
    })
}

/// Step 1: the session is still active, and the call is counted against
/// its tool-call cap (past the cap: recorded and refused).
fn take_call(
    sup: &Supervisor,
    session: &Session,
    call_id: &str,
    tool: &str,
) -> Result<(), pb::Denial> {
    if !session.is_active() {
        return Err(revoked(session));
    }
    if session.take_tool_call() {
        return Ok(());
    }
    let reason = format!(
        "the session's tool-call cap ({}) is reached. Stop calling tools and summarise what you did and what remains.",
        session.caps.max_tool_calls
    );
    let _ = record(
        sup,
        session,
        Event::PermissionCheck(audit::PermissionCheck {
            call_id: call_id.to_string(),
            tool: tool.to_string(),
            decision: audit::Verdict::Deny,
            code: "CAP_REACHED".to_string(),
            rule: Some("cap:max_tool_calls".to_string()),
            reason: reason.clone(),
            consequence: None,
            destructive: None,
            target: None,
            args: None,
            allowed_by: None,
            client_tool: None,
            server: None,
            mcp_tool: None,
        }),
    );
    Err(denial(Code::CapReached, reason, "cap:max_tool_calls", None))
}

/// Step 2: the engine's decision on the calls (one, or one per part,
/// combined strictest first), and the calls it checked.
async fn decide_calls(
    sup: &Arc<Supervisor>,
    session: &Arc<Session>,
    tool: &str,
    raw_args: &str,
    mut calls: Vec<ToolCall>,
) -> Decided {
    if calls.len() == 1 {
        let call = calls.remove(0);
        let len = if call.tool == tool {
            raw_args.len()
        } else {
            call.args.to_string().len()
        };
        let args = call.args.clone();
        let (decision, checked) = decide(sup, session, call, len).await;
        return Decided {
            decision,
            args,
            calls: checked.into_iter().collect(),
        };
    }
    let mut parts = Vec::with_capacity(calls.len());
    let mut checked = Vec::with_capacity(calls.len());
    for c in &calls {
        let len = c.args.to_string().len();
        let (d, t) = decide(sup, session, c.clone(), len).await;
        parts.push(d);
        checked.extend(t);
    }
    let list = calls
        .into_iter()
        .map(|c| json!({"tool": c.tool, "args": c.args}))
        .collect::<Vec<_>>();
    Decided {
        decision: Decision::combine(parts),
        args: Value::Array(list),
        calls: checked,
    }
}

/// Grants and auto-approve apply only to the non-destructive ask tier.
/// Returns what allowed the call (`allowed` when neither did).
fn apply_grants(
    sup: &Supervisor,
    session: &Session,
    tool: &str,
    decision: &mut Decision,
) -> &'static str {
    if decision.verdict != Verdict::Ask || decision.destructive {
        return "allowed";
    }
    if session.has_grant(tool, &decision.target) {
        decision.verdict = Verdict::Allow;
        "allowed(session-scope)"
    } else if sup.config.session.auto_approve {
        decision.verdict = Verdict::Allow;
        "auto-allow(config)"
    } else {
        "allowed"
    }
}

/// The disk floor: a call that writes is refused while the workspace's
/// filesystem is under `[sandbox] min_free_mb` (refused before any
/// approval is asked for; checked again just before it runs).
fn apply_disk_floor(sup: &Supervisor, session: &Session, calls: &[Tool], decision: &mut Decision) {
    let writes = calls.iter().any(|c| writes_to_disk(c.name()));
    if decision.verdict != Verdict::Deny
        && writes
        && let Err(low) = sup.disk.check(&session.workspace)
    {
        decision.verdict = Verdict::Deny;
        decision.code = Code::PolicyDenied;
        decision.reason = low.refused();
        decision.rule = Some(DISK_RULE.to_string());
    }
}

/// Step 4: what the verdict becomes. A denial is sent; a non-destructive
/// ask the gate delegates goes back to the caller's own prompt; any other
/// ask waits for an approval. Returns what allowed the call and, when
/// delegated, the approval's id.
#[allow(clippy::too_many_arguments)]
async fn settle(
    sup: &Arc<Supervisor>,
    session: &Arc<Session>,
    call_id: &str,
    tool: &str,
    decided: &Decided,
    allowed_by: &'static str,
    gate: &Gate,
    cancel: &CancellationToken,
) -> Result<(&'static str, Option<String>), pb::Denial> {
    let decision = &decided.decision;
    match decision.verdict {
        Verdict::Deny => Err(denial_of(decision)),
        Verdict::Ask if gate.delegate_ask && !decision.destructive => {
            let id = delegate_to_client(sup, session, call_id, tool, decision)?;
            Ok(("delegated(client)", Some(id)))
        }
        Verdict::Ask => {
            // The diff preview is of the channel's own call only (not of a
            // patch's parts).
            let own = match decided.calls.as_slice() {
                [c] if c.name().as_str() == tool => Some(c),
                _ => None,
            };
            let approval = Ask {
                call_id,
                tool,
                args: &decided.args,
                call: own,
                d: decision,
                timeout: gate.approval_wait,
            };
            let by = ask(sup, session, &approval, cancel).await?;
            Ok((by, None))
        }
        Verdict::Allow => Ok((allowed_by, None)),
    }
}

/// A non-destructive ask handed back to the caller: the client's own prompt
/// asks the person; the outcome is recorded when the client reports the
/// call. Returns the approval's id.
fn delegate_to_client(
    sup: &Supervisor,
    session: &Session,
    call_id: &str,
    tool: &str,
    decision: &Decision,
) -> Result<String, pb::Denial> {
    let id = approval_id().map_err(|e| audit_unavailable_msg(&e))?;
    record(
        sup,
        session,
        Event::ApprovalRequested(audit::ApprovalRequested {
            approval_id: id.clone(),
            call_id: call_id.to_string(),
            tool: tool.to_string(),
            consequence: decision.consequence.clone(),
            destructive: false,
            target: decision.target.clone(),
            deadline_unix_ms: None,
            rule: decision.rule.clone(),
            channel: Some("client".to_string()),
        }),
    )
    .map_err(|e| audit_unavailable(sup, session, tool, &e))?;
    Ok(id)
}

/// Tools whose only effect is the output they return (no write, no process,
/// no network): they may start reading before their decision is durable.
fn read_only(tool: ToolName) -> bool {
    match tool {
        ToolName::ReadFile | ToolName::GlobFiles | ToolName::Grep => true,
        ToolName::WriteFile
        | ToolName::EditFile
        | ToolName::RunBash
        | ToolName::Webfetch
        | ToolName::Mcp
        | ToolName::TodoAppend
        | ToolName::TodoList
        | ToolName::TodoUpdate
        | ToolName::ReadScratchpad
        | ToolName::WriteScratchpad
        | ToolName::AskQuestion => false,
    }
}

/// Starts `work` (polls it once: a file tool hands its job to the owner's
/// thread), then runs `sync` (the fsync that makes the decision and
/// `tool_started` records durable), then finishes `work`. The fsync and the
/// read overlap, but nothing of the output leaves before the records are on
/// disk: if `sync` fails, the output is dropped and the call refused.
async fn read_while_durable<T>(
    work: impl std::future::Future<Output = T>,
    sync: impl FnOnce() -> Result<(), tollgate_audit::AuditError>,
) -> Result<T, tollgate_audit::AuditError> {
    let mut work = std::pin::pin!(work);
    let mut early = None;
    std::future::poll_fn(|cx| {
        if let std::task::Poll::Ready(v) = work.as_mut().poll(cx) {
            early = Some(v);
        }
        std::task::Poll::Ready(())
    })
    .await;
    sync()?;
    match early {
        Some(v) => Ok(v),
        None => Ok(work.await),
    }
}

/// Arguments up to this size are decided on the async thread that received
/// them (a typical command takes microseconds); longer ones on the blocking
/// pool.
const INLINE_DECISION_BYTES: usize = 8 << 10;

/// Whether deciding the tool may ask the network (DNS): then it is decided
/// on the blocking pool, with the host-address snapshot.
fn asks_the_network(tool: ToolName) -> bool {
    match tool {
        ToolName::Webfetch => true,
        ToolName::ReadFile
        | ToolName::GlobFiles
        | ToolName::Grep
        | ToolName::WriteFile
        | ToolName::EditFile
        | ToolName::RunBash
        | ToolName::Mcp
        | ToolName::TodoAppend
        | ToolName::TodoList
        | ToolName::TodoUpdate
        | ToolName::ReadScratchpad
        | ToolName::WriteScratchpad
        | ToolName::AskQuestion => false,
    }
}

/// Runs the engine for a call: checks it (the registry, the session's
/// tools, the schema; the arguments typed once) and decides it. The checked
/// call comes back with the decision, `None` when the check refused it.
async fn decide(
    sup: &Arc<Supervisor>,
    session: &Arc<Session>,
    call: ToolCall,
    arguments_len: usize,
) -> (Decision, Option<Tool>) {
    let ctx = Context {
        workspace: session.workspace.clone(),
        mode: session.mode,
        tools: session.tools.clone(),
        home: session.home.clone(),
        protected: sup.protected_paths(),
        read_files: session.read_files(),
        repo: session.repo.clone(),
    };
    let tool = match sup.engine.check(&call, &ctx) {
        Ok(t) => t,
        Err(refused) => return (refused, None),
    };
    if !asks_the_network(tool.name()) && arguments_len <= INLINE_DECISION_BYTES {
        // Pure and microseconds: decide right here. Only webfetch asks the
        // network facts, so this resolver carries no host-address snapshot
        // (were one asked for, the answer would be "unknown": refused).
        let d = sup
            .engine
            .decide_checked(&tool, &ctx, &RealFs, &SystemResolver::default());
        return (d, Some(tool));
    }
    // DNS may block, and a long script may take milliseconds to parse:
    // decide off the async threads, which serve every session.
    let sup2 = Arc::clone(sup);
    tokio::task::spawn_blocking(move || {
        let d = sup2
            .engine
            .decide_checked(&tool, &ctx, &RealFs, &sup2.resolver());
        (d, Some(tool))
    })
    .await
    .unwrap_or_else(|e| {
        let d = Decision::deny(
            Code::PolicyDenied,
            format!("the policy engine failed on this call ({e}); the call is refused"),
            Some("floor:engine-failure"),
        );
        (d, None)
    })
}

/// The `permission_check` record. `durable_next`: a durable record follows
/// before anything acts on this decision, so this one need not wait for its
/// own fsync.
#[allow(clippy::too_many_arguments)]
fn audit_decision(
    sup: &Supervisor,
    session: &Session,
    call_id: &str,
    tool: &str,
    raw_args: &str,
    d: &Decision,
    allowed_by: &str,
    durable_next: bool,
    gate: &Gate,
) -> Result<(), tollgate_audit::AuditError> {
    let check = audit::PermissionCheck {
        call_id: call_id.to_string(),
        tool: tool.to_string(),
        decision: audit_verdict(d.verdict),
        code: d.code.as_str().to_string(),
        rule: d.rule.clone(),
        reason: d.reason.clone(),
        consequence: Some(d.consequence.clone()),
        destructive: Some(d.destructive),
        target: Some(d.target.clone()),
        args: Some(if d.secret {
            "[REDACTED:secret-file]".to_string()
        } else {
            excerpt_of(raw_args)
        }),
        allowed_by: (d.verdict == Verdict::Allow && !allowed_by.is_empty())
            .then(|| allowed_by.to_string()),
        client_tool: gate.client_tool.clone(),
        server: None,
        mcp_tool: None,
    };
    record_as(sup, session, Event::PermissionCheck(check), durable_next)
}

/// An approval to ask for: the call, its decision, how long to wait.
struct Ask<'a> {
    call_id: &'a str,
    /// The tool the records name (the channel's).
    tool: &'a str,
    /// The arguments as the approval shows them.
    args: &'a Value,
    /// The checked call, when it is the channel's own (for the diff
    /// preview of a write or an edit).
    call: Option<&'a Tool>,
    d: &'a Decision,
    timeout: Duration,
}

/// How an approval ended.
enum Resolution {
    /// Someone decided (or the decision came in the instant of the deadline).
    Decided(crate::approvals::Resolution),
    /// The deadline passed.
    TimedOut,
    /// The call was cancelled first (the agent went away, the session
    /// ended): the denial to send.
    Withdrawn(pb::Denial),
}

/// An approval: offered to operators and (when allowed) the session itself;
/// waits for the first decision, the deadline, or cancellation.
async fn ask(
    sup: &Arc<Supervisor>,
    session: &Arc<Session>,
    a: &Ask<'_>,
    cancel: &CancellationToken,
) -> Result<&'static str, pb::Denial> {
    let (id, rx) = open_approval(sup, session, a).await?;
    match await_resolution(sup, session, a, &id, rx, cancel).await {
        Resolution::Decided(r) => match r.outcome {
            Outcome::Approved { scope } => Ok(approved(sup, session, a, &id, scope, &r.decided_by)),
            Outcome::Denied { reason } => {
                Err(user_denied(sup, session, a, &id, &r.decided_by, &reason))
            }
        },
        Resolution::TimedOut => Err(timed_out(sup, session, a, &id)),
        Resolution::Withdrawn(d) => Err(d),
    }
}

/// The approval with its consequence, diff preview and deadline, opened in
/// the table, recorded (`approval_requested`) and shown to the session when
/// it may approve. Returns its id and where its decision arrives.
async fn open_approval(
    sup: &Arc<Supervisor>,
    session: &Arc<Session>,
    a: &Ask<'_>,
) -> Result<
    (
        String,
        tokio::sync::oneshot::Receiver<crate::approvals::Resolution>,
    ),
    pb::Denial,
> {
    let (call_id, tool, d) = (a.call_id, a.tool, a.d);
    let id = approval_id().map_err(|e| audit_unavailable_msg(&e))?;
    let now = SystemTime::now();
    let diff = match a.call {
        Some(call) => preview(sup, session, call, d).await,
        None => String::new(),
    };
    let approval = pb::Approval {
        id: id.clone(),
        session_id: session.id.clone(),
        tool: tool.to_string(),
        consequence: d.consequence.clone(),
        diff,
        destructive: d.destructive,
        target: d.target.clone(),
        created_unix_ms: unix_ms(now),
        deadline_unix_ms: unix_ms(now + a.timeout),
        rule: d.rule.clone().unwrap_or_default(),
        reason: d.reason.clone(),
        arguments_json: if d.secret {
            "[REDACTED:secret-file]".to_string()
        } else {
            excerpt_of(&sup.redactor.redact(&a.args.to_string()))
        },
        status: "pending".to_string(),
        uid: session.uid,
    };
    let rx = sup.approvals.open(approval.clone());
    if let Err(e) = record(
        sup,
        session,
        Event::ApprovalRequested(audit::ApprovalRequested {
            approval_id: id.clone(),
            call_id: call_id.to_string(),
            tool: tool.to_string(),
            consequence: d.consequence.clone(),
            destructive: d.destructive,
            target: d.target.clone(),
            deadline_unix_ms: Some(approval.deadline_unix_ms),
            rule: d.rule.clone(),
            channel: None,
        }),
    ) {
        sup.approvals.close(&id, "withdrawn", "supervisor");
        return Err(audit_unavailable(sup, session, tool, &e));
    }
    if sup.config.session.session_can_approve {
        let _ = session.control.send(pb::ApprovalServerMsg {
            msg: Some(pb::approval_server_msg::Msg::Requested(approval.clone())),
        });
    }
    Ok((id, rx))
}

/// The first of: a decision, the deadline, the call's cancellation.
async fn await_resolution(
    sup: &Supervisor,
    session: &Session,
    a: &Ask<'_>,
    id: &str,
    mut rx: tokio::sync::oneshot::Receiver<crate::approvals::Resolution>,
    cancel: &CancellationToken,
) -> Resolution {
    let resolution = tokio::select! {
        r = &mut rx => r.ok(),
        _ = tokio::time::sleep(a.timeout) => {
            match sup.approvals.close(id, "timeout", "deadline") {
                Some(_) => None,
                // Decided in the same instant: that decision stands.
                None => rx.await.ok(),
            }
        }
        _ = cancel.cancelled() => return Resolution::Withdrawn(withdrawn(sup, session, a, id)),
    };
    match resolution {
        Some(r) => Resolution::Decided(r),
        None => Resolution::TimedOut,
    }
}

/// The call was cancelled while its approval waited: the approval is
/// withdrawn (recorded when it was still open).
fn withdrawn(sup: &Supervisor, session: &Session, a: &Ask<'_>, id: &str) -> pb::Denial {
    let (tool, d) = (a.tool, a.d);
    let who = if session.is_active() {
        "agent disconnected"
    } else {
        "session ended"
    };
    if sup.approvals.close(id, "withdrawn", who).is_some() {
        let _ = record(
            sup,
            session,
            Event::ApprovalDecided(decided(
                id,
                tool,
                audit::ApprovalOutcome::Withdrawn,
                who,
                None,
            )),
        );
        notify_resolved(session, id, "withdrawn", who, "", "");
    }
    if session.is_active() {
        denial(
            Code::UserDenied,
            format!(
                "user denied: {}. The call was withdrawn before anyone decided.",
                d.consequence
            ),
            "approval",
            Some(d),
        )
    } else {
        revoked(session)
    }
}

/// Approved, once or for the session (then the grant is kept): recorded;
/// returns what allowed the call.
fn approved(
    sup: &Supervisor,
    session: &Session,
    a: &Ask<'_>,
    id: &str,
    scope: Scope,
    decided_by: &str,
) -> &'static str {
    let (tool, d) = (a.tool, a.d);
    let by = match scope {
        Scope::Session => {
            session.grant(tool, &d.target);
            "approved(session-scope)"
        }
        Scope::Once => "approved",
    };
    let _ = record(
        sup,
        session,
        Event::ApprovalDecided(audit::ApprovalDecided {
            scope: Some(scope.as_str().to_string()),
            ..decided(
                id,
                tool,
                audit::ApprovalOutcome::Approved,
                decided_by,
                Some(d),
            )
        }),
    );
    notify_resolved(session, id, "approved", decided_by, scope.as_str(), "");
    by
}

/// Denied by a person: recorded; the denial says not to retry, with the
/// person's reason.
fn user_denied(
    sup: &Supervisor,
    session: &Session,
    a: &Ask<'_>,
    id: &str,
    decided_by: &str,
    reason: &str,
) -> pb::Denial {
    let (tool, d) = (a.tool, a.d);
    let _ = record(
        sup,
        session,
        Event::ApprovalDecided(audit::ApprovalDecided {
            reason: Some(reason.to_string()),
            ..decided(
                id,
                tool,
                audit::ApprovalOutcome::Denied,
                decided_by,
                Some(d),
            )
        }),
    );
    notify_resolved(session, id, "denied", decided_by, "", reason);
    let mut text = format!(
        "user denied: {}. Do not retry this call; ask the user or change approach.",
        d.consequence
    );
    if !reason.is_empty() {
        text.push_str(&format!(" The user said: {}", reason.replace('\n', " ")));
    }
    let rule = d.rule.clone().unwrap_or_default();
    denial(Code::UserDenied, text, &rule, Some(d))
}

/// Nobody decided before the deadline: recorded; refused.
fn timed_out(sup: &Supervisor, session: &Session, a: &Ask<'_>, id: &str) -> pb::Denial {
    let (tool, d) = (a.tool, a.d);
    let secs = a.timeout.as_secs();
    let _ = record(
        sup,
        session,
        Event::ApprovalDecided(decided(
            id,
            tool,
            audit::ApprovalOutcome::Timeout,
            "deadline",
            Some(d),
        )),
    );
    notify_resolved(session, id, "timeout", "deadline", "", "");
    let rule = d.rule.clone().unwrap_or_default();
    denial(
        Code::ApprovalTimeout,
        format!(
            "no one approved in time: {} (waited {secs}s). Do not retry this call; ask the user or change approach.",
            d.consequence
        ),
        &rule,
        Some(d),
    )
}

fn notify_resolved(
    session: &Session,
    id: &str,
    outcome: &str,
    by: &str,
    scope: &str,
    reason: &str,
) {
    let _ = session.control.send(pb::ApprovalServerMsg {
        msg: Some(pb::approval_server_msg::Msg::Resolved(
            pb::ApprovalResolved {
                approval_id: id.to_string(),
                outcome: outcome.to_string(),
                decided_by: by.to_string(),
                scope: scope.to_string(),
                reason: reason.to_string(),
            },
        )),
    });
}

/// The diff preview for writes and edits.
async fn preview(sup: &Supervisor, session: &Session, call: &Tool, d: &Decision) -> String {
    const CAP: usize = 16 * 1024;
    let Some(path) = d.path.as_deref() else {
        return String::new();
    };
    let r = match call {
        Tool::WriteFile(a) => session.files.preview_write(path, &a.content, CAP).await,
        Tool::EditFile(a) => {
            let all = a.replace_all.unwrap_or(false);
            session
                .files
                .preview_edit(path, &a.old_string, &a.new_string, all, CAP)
                .await
        }
        Tool::ReadFile(_)
        | Tool::GlobFiles(_)
        | Tool::Grep(_)
        | Tool::RunBash(_)
        | Tool::Webfetch(_)
        | Tool::Mcp(_)
        | Tool::TodoAppend(_)
        | Tool::TodoList(_)
        | Tool::TodoUpdate(_)
        | Tool::ReadScratchpad(_)
        | Tool::WriteScratchpad(_)
        | Tool::AskQuestion(_) => return String::new(),
    };
    match r {
        Ok(diff) if d.secret => format!("(diff of a secret file withheld; {} bytes)", diff.len()),
        Ok(diff) => tollgate_policy::escape_preview(&sup.redactor.redact(&diff)),
        Err(e) => format!("(no preview: {e})"),
    }
}

/// What a tool produced.
struct Done {
    output: ToolOutput,
    exit_code: Option<i32>,
}

impl From<ToolOutput> for Done {
    fn from(output: ToolOutput) -> Done {
        Done {
            output,
            exit_code: None,
        }
    }
}

enum ExecError {
    /// The tool ran (or tried to) and failed: a message for the model.
    Tool(String),
    /// No sandbox could be had.
    Sandbox(String),
    /// The disk floor refused the write, or stopped the command.
    DiskFloor(String),
    Cancelled,
}

/// Runs a cleared call: the file tools beneath the workspace as its owner,
/// run_bash in the session's sandbox, webfetch to the vetted address.
async fn execute(
    sup: &Arc<Supervisor>,
    session: &Arc<Session>,
    call: &Tool,
    d: &Decision,
    cancel: &CancellationToken,
) -> Result<Done, ExecError> {
    let cap = sup.config.session.output_cap_bytes;
    let files = &session.files;
    match call {
        Tool::ReadFile(a) => {
            let p = resolved_path(call, d)?;
            let o = files.read_file(&p, a.offset, a.limit, cap).await;
            let o = o.map_err(tool_err)?;
            session.mark_read(p);
            Ok(o.into())
        }
        Tool::WriteFile(a) => {
            disk_floor(sup, session)?;
            let p = resolved_path(call, d)?;
            let o = files.write_file(&p, &a.content).await.map_err(tool_err)?;
            session.mark_read(p);
            Ok(o.into())
        }
        Tool::EditFile(a) => {
            disk_floor(sup, session)?;
            let p = resolved_path(call, d)?;
            let all = a.replace_all.unwrap_or(false);
            let o = files.edit_file(&p, &a.old_string, &a.new_string, all).await;
            let o = o.map_err(tool_err)?;
            session.mark_read(p);
            Ok(o.into())
        }
        Tool::GlobFiles(a) => Ok(files
            .glob_files(&a.pattern, d.path.as_deref(), cap)
            .await
            .map_err(tool_err)?
            .into()),
        Tool::Grep(a) => {
            let ignore_case = a.ignore_case.unwrap_or(false);
            let o = files.grep(
                &a.pattern,
                d.path.as_deref(),
                a.glob.as_deref(),
                ignore_case,
                cap,
            );
            Ok(o.await.map_err(tool_err)?.into())
        }
        Tool::RunBash(a) => run_bash(sup, session, &a.command, a.timeout_s, cancel).await,
        Tool::Webfetch(a) => webfetch(sup, a.max_bytes, d).await,
        Tool::Mcp(_)
        | Tool::TodoAppend(_)
        | Tool::TodoList(_)
        | Tool::TodoUpdate(_)
        | Tool::ReadScratchpad(_)
        | Tool::WriteScratchpad(_)
        | Tool::AskQuestion(_) => Err(ExecError::Tool(format!(
            "{} runs in the agent, not in the supervisor",
            call.name()
        ))),
    }
}

/// The path the policy resolved for a file tool.
fn resolved_path(call: &Tool, d: &Decision) -> Result<std::path::PathBuf, ExecError> {
    d.path
        .clone()
        .ok_or_else(|| ExecError::Tool(format!("{}: the policy resolved no path", call.name())))
}

/// The disk floor, checked again right before a write.
fn disk_floor(sup: &Supervisor, session: &Session) -> Result<(), ExecError> {
    sup.disk
        .check(&session.workspace)
        .map_err(|low| ExecError::DiskFloor(low.refused()))
}

/// webfetch: to the address the policy vetted, every redirect re-vetted.
async fn webfetch(
    sup: &Arc<Supervisor>,
    max_bytes: Option<u64>,
    d: &Decision,
) -> Result<Done, ExecError> {
    let Some(first) = &d.fetch else {
        return Err(ExecError::Tool(
            "webfetch: the policy vetted no address".to_string(),
        ));
    };
    let max = max_bytes
        .map(|m| (m as usize).min(sup.config.session.fetch_max_bytes))
        .unwrap_or(sup.config.session.fetch_max_bytes);
    let limits = FetchLimits {
        max_bytes: max,
        timeout: Duration::from_secs(sup.config.session.fetch_timeout_s),
        max_redirects: 5,
    };
    let vetter = Vetter {
        sup: Arc::clone(sup),
    };
    let o = tollgate_tools::webfetch(first, &limits, &vetter)
        .await
        .map_err(tool_err)?;
    let cap = sup.config.session.output_cap_bytes;
    Ok(tollgate_tools::cap_text(&o.text, cap, "pass a smaller max_bytes").into())
}

fn tool_err(e: tollgate_tools::ToolError) -> ExecError {
    ExecError::Tool(e.to_string())
}

/// Re-vets each webfetch redirect hop with the same SSRF guard, and each
/// address right before the fetch connects to it against the host's own
/// addresses read again now (an address may have become the host's since
/// the decision: an approval can take minutes).
struct Vetter {
    sup: Arc<Supervisor>,
}

impl HopVetter for Vetter {
    fn vet(&self, url: &str) -> Result<tollgate_policy::VettedFetch, String> {
        self.sup
            .engine
            .vet_url(url, &self.sup.resolver())
            .map_err(|d| d.reason)
    }

    fn vet_peer(&self, ip: std::net::IpAddr) -> Result<(), String> {
        let now = self.sup.host_addrs.read_now(Trigger::Connector);
        self.sup
            .engine
            .vet_address(ip, &SystemResolver::default().with_host(now))
    }
}

/// The session's sandbox, created on first use, or why there is none (for
/// `agent mcp-gateway`, which runs its server in it).
pub(crate) async fn session_sandbox(
    sup: &Supervisor,
    session: &Session,
) -> Result<Arc<dyn Sandbox>, String> {
    sandbox_of(sup, session).await.map_err(|e| match e {
        ExecError::Tool(m) | ExecError::Sandbox(m) | ExecError::DiskFloor(m) => m,
        ExecError::Cancelled => "the session ended".to_string(),
    })
}

/// The session's sandbox, created on first use.
/// Builds a session's sandbox ahead of its first command, in the
/// background: a client session whose shell is routed gets it while the
/// client waits for its model, not on its first Bash call. A failure here
/// is only logged: the first command builds again and reports its own.
pub fn warm_sandbox(sup: &Arc<Supervisor>, session: &Arc<Session>) {
    let (sup, session) = (Arc::clone(sup), Arc::clone(session));
    tokio::spawn(async move {
        let Some(_work) = session.begin() else {
            return;
        };
        if let Err(ExecError::Sandbox(e) | ExecError::Tool(e) | ExecError::DiskFloor(e)) =
            sandbox_of(&sup, &session).await
        {
            tracing::debug!(session = %session.id, "the sandbox built ahead of use failed: {e}");
        }
    });
}

async fn sandbox_of(sup: &Supervisor, session: &Session) -> Result<Arc<dyn Sandbox>, ExecError> {
    let sb = session
        .sandbox
        .get_or_create(|| async {
            let token = session.sandbox_token_text.lock().clone();
            let owner = SandboxOwner {
                uid: session.uid,
                gid: session.gid,
                name: session.user.clone(),
                home: session.home.clone(),
            };
            let spec = sandbox_spec(
                sup,
                SpecFor {
                    session_id: &session.id,
                    workspace: &session.workspace,
                    workspace_id: tollgate_sandbox::WorkspaceId::from_pair(session.files.id()),
                    owner: &owner,
                    credentials: &session.credentials,
                    sandbox_token: token.as_deref(),
                    egress: session.egress.get().cloned(),
                },
            );
            session.backend.create(&spec).await
        })
        .await
        .map_err(|e| ExecError::Sandbox(format!("{e}. The command did not run.")))?;
    // The session ended while its sandbox was being built: end_session
    // found none to destroy, so destroy it here.
    if !session.is_active()
        && let Some(sb) = session.sandbox.take()
    {
        let _ = sb.destroy().await;
        return Err(ExecError::Cancelled);
    }
    Ok(sb)
}

async fn run_bash(
    sup: &Supervisor,
    session: &Session,
    command: &str,
    timeout_s: Option<u64>,
    cancel: &CancellationToken,
) -> Result<Done, ExecError> {
    sup.disk
        .check(&session.workspace)
        .map_err(|low| ExecError::DiskFloor(low.refused()))?;
    let sb = sandbox_of(sup, session).await?;
    if !session.is_active() {
        return Err(ExecError::Cancelled);
    }
    // A stop left for an earlier command is not this one's.
    session.disk_stop.lock().take();
    let cfg = &sup.config.sandbox;
    let timeout = Duration::from_secs(
        timeout_s
            .unwrap_or(cfg.run_timeout_s)
            .clamp(1, cfg.max_run_timeout_s),
    );
    let cap = sup.config.session.output_cap_bytes;
    let (tx, rx) = mpsc::channel::<Output>(64);
    let req = ExecRequest {
        argv: vec!["sh".to_string(), "-c".to_string(), command.to_string()],
        cwd: Some(session.workspace.clone()),
        timeout,
        merge_stderr: true,
    };
    let collector = tokio::spawn(collect_output(rx, cap));
    let outcome = {
        // The disk watcher looks often while this runs (see disk.rs).
        let _running = sup.disk.command();
        sb.exec(req, tx, cancel.child_token()).await
    };
    let (kept, total) = collector.await.unwrap_or_default();
    if let Some(reason) = session.disk_stop.lock().take() {
        return Err(ExecError::DiskFloor(reason));
    }
    let outcome = outcome.map_err(|e| match e {
        tollgate_sandbox::SandboxError::Gone(_) if !session.is_active() => ExecError::Cancelled,
        other => ExecError::Sandbox(format!("{other}. The command may not have completed.")),
    })?;
    if outcome.cancelled {
        return Err(ExecError::Cancelled);
    }
    Ok(command_output(&kept, total, cap, &outcome, timeout))
}

/// A command's merged output: at most a little over the cap is kept, the
/// rest counted.
async fn collect_output(mut rx: mpsc::Receiver<Output>, cap: usize) -> (Vec<u8>, u64) {
    let mut kept: Vec<u8> = Vec::new();
    let mut total: u64 = 0;
    while let Some(chunk) = rx.recv().await {
        let bytes = match &chunk {
            Output::Stdout(b) | Output::Stderr(b) => b,
        };
        total += bytes.len() as u64;
        let room = (cap + 4).saturating_sub(kept.len());
        kept.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }
    (kept, total)
}

/// What the model sees of a finished command: its output capped (with how
/// much was cut), then whether it timed out or was killed, and its exit code.
fn command_output(
    kept: &[u8],
    total: u64,
    cap: usize,
    outcome: &tollgate_sandbox::ExecOutcome,
    timeout: Duration,
) -> Done {
    let text = String::from_utf8_lossy(kept).into_owned();
    let mut capped = tollgate_tools::cap_text(
        &text,
        cap,
        "redirect output to a file and read it with read_file offset/limit",
    );
    if (total as usize) > kept.len() && !capped.truncated {
        capped.truncated = true;
        capped.text.push_str(&format!(
            "\n[output truncated: {} more bytes not shown; redirect output to a file and read it with read_file offset/limit]",
            total as usize - kept.len()
        ));
    }
    let mut text = capped.text;
    if outcome.timed_out {
        text.push_str(&format!(
            "\n[command timed out after {}s and was killed]",
            timeout.as_secs()
        ));
    } else if let Some(sig) = outcome.signal {
        text.push_str(&format!("\n[command killed by signal {sig}]"));
    }
    Done {
        output: ToolOutput {
            text,
            truncated: capped.truncated,
        },
        exit_code: Some(outcome.exit_code.unwrap_or(-1)),
    }
}

/// A client's own bookkeeping tool (planning, todos, tool search): allowed
/// without the engine, and recorded, durable, like any decision.
pub fn record_harmless(
    sup: &Supervisor,
    session: &Session,
    call_id: &str,
    client_tool: &str,
) -> Result<String, pb::Denial> {
    let reason = format!(
        "`{}` is the client's own bookkeeping; it touches nothing outside the client.",
        tollgate_policy::escape_for_display(client_tool)
    );
    record(
        sup,
        session,
        Event::PermissionCheck(audit::PermissionCheck {
            call_id: call_id.to_string(),
            tool: client_tool.to_string(),
            client_tool: Some(client_tool.to_string()),
            decision: audit::Verdict::Allow,
            code: "OK".to_string(),
            rule: Some("clients:harmless".to_string()),
            reason: reason.clone(),
            allowed_by: Some("allowed".to_string()),
            consequence: None,
            destructive: None,
            target: None,
            args: None,
            server: None,
            mcp_tool: None,
        }),
    )
    .map_err(|e| audit_unavailable(sup, session, client_tool, &e))?;
    Ok(reason)
}

/// A routed shell command: what a client's hook decided, claimed by its
/// rewritten command. Runs in the session's sandbox like `run_bash` (the
/// workspace as working directory, no network, the sandbox's limits), with
/// `tool_started` (durable) before and `tool_result` after, and streams its
/// stdout and stderr as they come, redacted line by line and capped at
/// `output_cap_bytes` (past it, one notice on stderr), then its exit status.
/// Cancelling `cancel` (the client went away, the session ended) kills it.
pub async fn run_routed(
    sup: &Arc<Supervisor>,
    session: &Arc<Session>,
    route: &crate::hooks::Route,
    out: &mpsc::Sender<pb::SandboxExecOutput>,
    cancel: CancellationToken,
) {
    let started = Instant::now();
    let sb = match start_routed(sup, session, route).await {
        Ok(sb) => sb,
        Err(text) => return fail_routed(out, &text).await,
    };
    let cfg = &sup.config.sandbox;
    let timeout = Duration::from_secs(
        route
            .timeout_s
            .unwrap_or(cfg.run_timeout_s)
            .clamp(1, cfg.max_run_timeout_s),
    );
    let req = ExecRequest {
        argv: vec!["sh".to_string(), "-c".to_string(), route.command.clone()],
        cwd: Some(session.workspace.clone()),
        timeout,
        merge_stderr: false,
    };
    let (tx, rx) = mpsc::channel::<Output>(64);
    let forward = tokio::spawn(forward_routed(
        rx,
        out.clone(),
        sup.redactor.clone(),
        sup.config.session.output_cap_bytes,
    ));
    let outcome = {
        // The disk watcher looks often while this runs (see disk.rs).
        let _running = sup.disk.command();
        sb.exec(req, tx, cancel.child_token()).await
    };
    let streamed = forward.await.unwrap_or_default();
    let duration_ms = started.elapsed().as_millis() as u64;
    let (status, exit, note) = routed_end(session, &outcome, timeout);
    if let Some(note) = note {
        send_routed(out, stderr_line(&format!("\ntollgate: {note}\n"))).await;
    }
    record_routed_outcome(sup, session, route, status, &exit, &streamed, duration_ms);
    send_routed(out, pb::sandbox_exec_output::Out::Exit(exit)).await;
}

/// Before a routed command runs: its `tool_started` record (durable), the
/// disk floor, the session's sandbox. `Err` is the sentence for the caller.
async fn start_routed(
    sup: &Arc<Supervisor>,
    session: &Arc<Session>,
    route: &crate::hooks::Route,
) -> Result<Arc<dyn Sandbox>, String> {
    let started_record = Event::ToolStarted(audit::ToolStarted {
        call_id: route.call_id.clone(),
        tool: "run_bash".to_string(),
        allowed_by: "routed".to_string(),
        target: route.target.clone(),
        server: None,
        mcp_tool: None,
    });
    if let Err(e) = record(sup, session, started_record) {
        return Err(audit_unavailable(sup, session, "run_bash", &e).reason);
    }
    if let Err(low) = sup.disk.check(&session.workspace) {
        return Err(low.refused());
    }
    match sandbox_of(sup, session).await {
        Ok(sb) => Ok(sb),
        Err(
            ExecError::Sandbox(reason) | ExecError::Tool(reason) | ExecError::DiskFloor(reason),
        ) => Err(reason),
        Err(ExecError::Cancelled) => Err(revoked(session).reason),
    }
}

async fn send_routed(out: &mpsc::Sender<pb::SandboxExecOutput>, o: pb::sandbox_exec_output::Out) {
    let _ = out.send(pb::SandboxExecOutput { out: Some(o) }).await;
}

fn stderr_line(text: &str) -> pb::sandbox_exec_output::Out {
    pb::sandbox_exec_output::Out::Stderr(text.as_bytes().to_vec())
}

/// A routed command tollgate could not run at all: why, on its stderr, and
/// [`ROUTED_NOT_RUN`].
async fn fail_routed(out: &mpsc::Sender<pb::SandboxExecOutput>, text: &str) {
    send_routed(out, stderr_line(&format!("tollgate: {text}\n"))).await;
    let exit = pb::ExitStatus {
        code: ROUTED_NOT_RUN,
        signal: 0,
        timed_out: false,
    };
    send_routed(out, pb::sandbox_exec_output::Out::Exit(exit)).await;
}

/// How a routed command ended: the status on record, the exit status its
/// caller sees, and a line for its stderr when tollgate stopped it.
fn routed_end(
    session: &Session,
    outcome: &Result<tollgate_sandbox::ExecOutcome, tollgate_sandbox::SandboxError>,
    timeout: Duration,
) -> (audit::ToolStatus, pb::ExitStatus, Option<String>) {
    let exit = |code, signal, timed_out| pb::ExitStatus {
        code,
        signal,
        timed_out,
    };
    let stopped = !session.is_active() || outcome.as_ref().is_ok_and(|o| o.cancelled);
    match outcome {
        _ if stopped => {
            let why = if session.is_active() {
                "the call was cancelled (the client went away)".to_string()
            } else {
                revoked(session).reason
            };
            (audit::ToolStatus::Stopped, exit(-1, 9, false), Some(why))
        }
        Ok(o) if o.timed_out => {
            let why = format!(
                "the command timed out after {}s and was killed",
                timeout.as_secs()
            );
            (audit::ToolStatus::Ok, exit(-1, 9, true), Some(why))
        }
        Ok(o) => (
            audit::ToolStatus::Ok,
            exit(o.exit_code.unwrap_or(-1), o.signal.unwrap_or(0), false),
            None,
        ),
        Err(e) => {
            let why = match e {
                tollgate_sandbox::SandboxError::Gone(_) if !session.is_active() => {
                    revoked(session).reason
                }
                other => format!("{other}. The command may not have completed."),
            };
            (
                audit::ToolStatus::Stopped,
                exit(ROUTED_NOT_RUN, 0, false),
                Some(why),
            )
        }
    }
}

/// The routed command's `tool_result`. It rides on the next fsync (the
/// command has already run); it is in the file before the caller hears the
/// exit status.
fn record_routed_outcome(
    sup: &Supervisor,
    session: &Session,
    route: &crate::hooks::Route,
    status: audit::ToolStatus,
    exit: &pb::ExitStatus,
    streamed: &Streamed,
    duration_ms: u64,
) {
    let _ = sup.recorder.to_file_deferred(
        &session.audit,
        &session.id,
        Event::ToolResult(audit::ToolResult {
            call_id: route.call_id.clone(),
            tool: "run_bash".to_string(),
            status,
            exit_code: Some(Some(i64::from(exit.code))),
            bytes: streamed.total,
            truncated: streamed.truncated,
            duration_ms,
            output: Some(excerpt_of(&streamed.head)),
            stopped: None,
            routed: Some(true),
            signal: Some(i64::from(exit.signal)),
            server: None,
            mcp_tool: None,
            error: None,
        }),
    );
}

/// The exit code a routed command's caller sees when tollgate could not run
/// it at all (the audit log, the sandbox): 126, "cannot execute".
pub const ROUTED_NOT_RUN: i32 = 126;

/// What a routed command printed, as far as the records go.
#[derive(Debug, Default)]
struct Streamed {
    total: u64,
    truncated: bool,
    /// The first bytes (redacted), for the audit excerpt.
    head: String,
}

/// Forwards a routed command's output: per stream, whole lines redacted
/// (a line is held until its end, or until it reaches 8 KiB), up to `cap`
/// bytes in all, then one notice on stderr; the rest is counted, not sent.
async fn forward_routed(
    mut rx: mpsc::Receiver<Output>,
    out: mpsc::Sender<pb::SandboxExecOutput>,
    redactor: tollgate_audit::Redactor,
    cap: usize,
) -> Streamed {
    const HOLD: usize = 8 << 10;
    let mut fw = Forwarder {
        st: Streamed::default(),
        sent: 0,
        redactor,
        cap,
    };
    let mut pending: [Vec<u8>; 2] = [Vec::new(), Vec::new()];
    while let Some(chunk) = rx.recv().await {
        let (which, bytes) = match &chunk {
            Output::Stdout(b) => (0, b),
            Output::Stderr(b) => (1, b),
        };
        fw.st.total += bytes.len() as u64;
        let buf = &mut pending[which];
        buf.extend_from_slice(bytes);
        let cut = match buf.iter().rposition(|&b| b == b'\n') {
            Some(nl) => nl + 1,
            None if buf.len() >= HOLD => buf.len(),
            None => continue,
        };
        let ready: Vec<u8> = buf.drain(..cut).collect();
        for m in fw.emit(which, &ready) {
            if out
                .send(pb::SandboxExecOutput { out: Some(m) })
                .await
                .is_err()
            {
                return fw.st;
            }
        }
    }
    for (which, buf) in pending.iter_mut().enumerate() {
        let rest = std::mem::take(buf);
        if rest.is_empty() {
            continue;
        }
        for m in fw.emit(which, &rest) {
            let _ = out.send(pb::SandboxExecOutput { out: Some(m) }).await;
        }
    }
    fw.st
}

/// What [`forward_routed`] has sent so far, and how it redacts and caps.
struct Forwarder {
    st: Streamed,
    sent: usize,
    redactor: tollgate_audit::Redactor,
    cap: usize,
}

impl Forwarder {
    /// The messages for whole lines of stream `which` (0 stdout, 1 stderr):
    /// redacted, within the cap, and the one notice when the cap is reached.
    fn emit(&mut self, which: usize, bytes: &[u8]) -> Vec<pb::sandbox_exec_output::Out> {
        let cap = self.cap;
        let text = match std::str::from_utf8(bytes) {
            Ok(t) => self.redactor.redact(t).into_bytes(),
            // Binary output passes as it is (no secret value is binary text).
            Err(_) => bytes.to_vec(),
        };
        if self.st.head.len() < AUDIT_EXCERPT {
            self.st.head.push_str(&String::from_utf8_lossy(&text));
        }
        let room = cap.saturating_sub(self.sent);
        let part = &text[..text.len().min(room)];
        self.sent += part.len();
        let mut msgs = Vec::new();
        if !part.is_empty() {
            msgs.push(if which == 0 {
                pb::sandbox_exec_output::Out::Stdout(part.to_vec())
            } else {
                pb::sandbox_exec_output::Out::Stderr(part.to_vec())
            });
        }
        if part.len() < text.len() && !self.st.truncated {
            self.st.truncated = true;
            msgs.push(pb::sandbox_exec_output::Out::Stderr(
                format!(
                    "\ntollgate: output truncated at {cap} bytes; the rest was not sent (redirect it to a file and read it in parts)\n"
                )
                .into_bytes(),
            ));
        }
        msgs
    }
}

/// A wrapped MCP server's answer to a forwarded `tools/call`, already capped
/// and redacted by the gateway: what goes back to the client, and what the
/// audit records of it.
pub struct McpAnswer {
    /// The JSON-RPC response for the client.
    pub response: Value,
    pub bytes: usize,
    pub truncated: bool,
    /// The server said the call failed (`isError`, or a JSON-RPC error).
    pub is_error: bool,
}

/// One `tools/call` of a wrapped MCP server (`agent mcp-gateway`), through
/// the same steps as [`call_tool`]: the tool-call cap, the engine's
/// `mcp(NAME.TOOL)` decision, its record (durable before anything is
/// forwarded), an approval when the verdict is ask, then `forward` (which
/// sends the request to the server in the session's sandbox and waits for
/// its answer), bounded by the sandbox's longest run timeout, and its
/// outcome record. `Err` is the sentence for the model when the call was
/// not forwarded or got no answer.
#[allow(clippy::too_many_arguments)]
pub async fn mcp_tool_call<F, Fut>(
    sup: &Arc<Supervisor>,
    session: &Arc<Session>,
    server: &str,
    tool: &str,
    call_id: &str,
    args: &Value,
    cancel: &CancellationToken,
    forward: F,
) -> Result<McpAnswer, pb::Denial>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<McpAnswer, String>>,
{
    let started = Instant::now();
    if !session.is_active() {
        return Err(revoked(session));
    }
    let call = McpToolCall {
        server: server.to_string(),
        tool: tool.to_string(),
    };
    let (decision, allowed_by) = decide_mcp_call(sup, session, call_id, &call, args)?;
    let allowed_by = match decision.verdict {
        Verdict::Deny => return Err(denial_of(&decision)),
        Verdict::Ask => {
            let approval = Ask {
                call_id,
                tool: MCP_RULE_TOOL,
                args,
                call: None,
                d: &decision,
                timeout: Duration::from_secs(sup.config.session.approval_timeout_s),
            };
            ask(sup, session, &approval, cancel).await?
        }
        Verdict::Allow => allowed_by,
    };
    record(
        sup,
        session,
        Event::ToolStarted(audit::ToolStarted {
            call_id: call_id.to_string(),
            tool: MCP_RULE_TOOL.to_string(),
            allowed_by: allowed_by.to_string(),
            target: decision.target.clone(),
            server: Some(server.to_string()),
            mcp_tool: Some(tool.to_string()),
        }),
    )
    .map_err(|e| audit_unavailable(sup, session, MCP_RULE_TOOL, &e))?;
    let outcome = forward_mcp(sup, session, server, cancel, forward).await;
    let duration_ms = started.elapsed().as_millis() as u64;
    record_mcp_outcome(sup, session, call_id, &call, &outcome, duration_ms);
    outcome.map_err(|reason| {
        if session.is_active() {
            // An MCP decision is never destructive.
            denial(
                Code::SandboxUnavailable,
                reason,
                "mcp-gateway",
                Some(&decision),
            )
        } else {
            revoked(session)
        }
    })
}

/// Steps 1 to 3 for an MCP server's tool: the tool-call cap, the engine's
/// `mcp(NAME.TOOL)` decision, grants and `auto_approve`, and the decision
/// record (durable before anything is forwarded). Returns the decision and
/// what allowed it.
fn decide_mcp_call(
    sup: &Supervisor,
    session: &Session,
    call_id: &str,
    call: &McpToolCall,
    args: &Value,
) -> Result<(Decision, &'static str), pb::Denial> {
    let (server, tool) = (&call.server, &call.tool);
    let raw_args = sup.redactor.redact(&args.to_string());
    let mut decision = if session.take_tool_call() {
        sup.engine.decide_mcp(call, session.mode)
    } else {
        Decision::deny(
            Code::CapReached,
            format!(
                "the session's tool-call cap ({}) is reached. Stop calling tools and summarise what you did and what remains.",
                session.caps.max_tool_calls
            ),
            Some("cap:max_tool_calls"),
        )
    };
    // An MCP decision is never destructive: the grants apply to every ask.
    let allowed_by = apply_grants(sup, session, MCP_RULE_TOOL, &mut decision);
    let check = audit::PermissionCheck {
        call_id: call_id.to_string(),
        tool: MCP_RULE_TOOL.to_string(),
        decision: audit_verdict(decision.verdict),
        code: decision.code.as_str().to_string(),
        rule: decision.rule.clone(),
        reason: decision.reason.clone(),
        consequence: Some(decision.consequence.clone()),
        destructive: Some(decision.destructive),
        target: Some(decision.target.clone()),
        args: Some(excerpt_of(&raw_args)),
        allowed_by: (decision.verdict == Verdict::Allow).then(|| allowed_by.to_string()),
        client_tool: None,
        server: Some(server.to_string()),
        mcp_tool: Some(tool.to_string()),
    };
    let durable_next = decision.verdict == Verdict::Allow;
    record_as(sup, session, Event::PermissionCheck(check), durable_next)
        .map_err(|e| audit_unavailable(sup, session, MCP_RULE_TOOL, &e))?;
    Ok((decision, allowed_by))
}

/// Forwards the call and waits for the server's answer, bounded by the
/// sandbox's longest run timeout and by the call's cancellation.
async fn forward_mcp<F, Fut>(
    sup: &Supervisor,
    session: &Session,
    server: &str,
    cancel: &CancellationToken,
    forward: F,
) -> Result<McpAnswer, String>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<McpAnswer, String>>,
{
    let limit = Duration::from_secs(sup.config.sandbox.max_run_timeout_s);
    // Biased: an answer (or the server's end) already there is reported as
    // such, even when the call is being cancelled at the same moment.
    tokio::select! {
        biased;
        r = tokio::time::timeout(limit, forward()) => match r {
            Ok(r) => r,
            Err(_) => Err(format!(
                "the MCP server `{server}` did not answer within {}s; the call was abandoned.",
                limit.as_secs()
            )),
        },
        _ = cancel.cancelled() => Err(if session.is_active() {
            "the call was cancelled before the MCP server answered.".to_string()
        } else {
            revoked(session).reason
        }),
    }
}

/// The MCP call's `tool_result`, riding on the next fsync.
fn record_mcp_outcome(
    sup: &Supervisor,
    session: &Session,
    call_id: &str,
    call: &McpToolCall,
    outcome: &Result<McpAnswer, String>,
    duration_ms: u64,
) {
    let (server, tool) = (&call.server, &call.tool);
    let (status, bytes, truncated, error) = match outcome {
        Ok(a) if a.is_error => (audit::ToolStatus::Error, a.bytes, a.truncated, None),
        Ok(a) => (audit::ToolStatus::Ok, a.bytes, a.truncated, None),
        Err(why) => (audit::ToolStatus::Stopped, 0, false, Some(why.clone())),
    };
    let result = audit::ToolResult {
        call_id: call_id.to_string(),
        tool: MCP_RULE_TOOL.to_string(),
        status,
        exit_code: None,
        bytes: bytes as u64,
        truncated,
        duration_ms,
        output: None,
        stopped: None,
        routed: None,
        signal: None,
        server: Some(server.to_string()),
        mcp_tool: Some(tool.to_string()),
        error,
    };
    let _ = sup
        .recorder
        .to_file_deferred(&session.audit, &session.id, Event::ToolResult(result));
}

fn record(
    sup: &Supervisor,
    session: &Session,
    event: Event,
) -> Result<(), tollgate_audit::AuditError> {
    record_as(sup, session, event, false)
}

/// [`record`], or with `deferred` riding on the file's next fsync (a durable
/// step follows before anything acts on it).
fn record_as(
    sup: &Supervisor,
    session: &Session,
    event: Event,
    deferred: bool,
) -> Result<(), tollgate_audit::AuditError> {
    let (file, id) = (&session.audit, &session.id);
    let written = if deferred {
        sup.recorder.to_file_deferred(file, id, event)
    } else {
        sup.recorder.to_file(file, id, event)
    };
    written.map(|_| ())
}

/// The policy's verdict as the audit log writes it.
fn audit_verdict(v: Verdict) -> audit::Verdict {
    match v {
        Verdict::Allow => audit::Verdict::Allow,
        Verdict::Ask => audit::Verdict::Ask,
        Verdict::Deny => audit::Verdict::Deny,
    }
}

/// An `approval_decided` record; with the decision `d` it names its rule
/// and target (a withdrawal names neither).
fn decided(
    id: &str,
    tool: &str,
    outcome: audit::ApprovalOutcome,
    by: &str,
    d: Option<&Decision>,
) -> audit::ApprovalDecided {
    audit::ApprovalDecided {
        approval_id: id.to_string(),
        tool: tool.to_string(),
        outcome,
        by: by.to_string(),
        scope: None,
        reason: None,
        rule: d.map(|d| d.rule.clone()),
        target: d.map(|d| d.target.clone()),
        call_id: None,
    }
}

pub fn excerpt_of(text: &str) -> String {
    if text.len() <= AUDIT_EXCERPT {
        return text.to_string();
    }
    let mut end = AUDIT_EXCERPT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &text[..end], text.len())
}

fn approval_id() -> Result<String, crate::credentials::CredentialError> {
    Ok(format!(
        "ap_{}",
        &crate::credentials::new_session_id()?[..10]
    ))
}

/// The one constructor of a denial: its code, the sentence for the model,
/// the rule, and `about` the decision it concerns (its consequence, and
/// whether it was destructive).
fn denial(code: Code, reason: String, rule: &str, about: Option<&Decision>) -> pb::Denial {
    pb::Denial {
        code: code_of(code) as i32,
        reason,
        rule: rule.to_string(),
        consequence: about.map(|d| d.consequence.clone()).unwrap_or_default(),
        destructive: about.is_some_and(|d| d.destructive),
    }
}

/// The denial of an engine's (or the pipeline's) decision.
pub fn denial_of(d: &Decision) -> pb::Denial {
    let rule = d.rule.as_deref().unwrap_or_default();
    denial(d.code, d.reason.clone(), rule, Some(d))
}

/// The proto code for an engine code.
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

fn denied(d: pb::Denial) -> pb::CallToolResponse {
    pb::CallToolResponse {
        ok: false,
        denied: Some(d),
        ..Default::default()
    }
}

pub fn revoked(session: &Session) -> pb::Denial {
    let why = session.end_reason();
    let reason = format!(
        "the session was {} ({}). Stop.",
        session.state().as_str(),
        if why.is_empty() {
            "no reason given"
        } else {
            &why
        }
    );
    denial(Code::SessionRevoked, reason, "session", None)
}

/// A call refused because its audit record could not be written: counted
/// and logged (rate-limited) by the supervisor, and said to the model.
fn audit_unavailable(
    sup: &Supervisor,
    session: &Session,
    tool: &str,
    e: &tollgate_audit::AuditError,
) -> pb::Denial {
    sup.audit_refused(
        &session.id,
        &format!("{tool} call of session {}", session.id),
        e,
    );
    audit_unavailable_denial(e)
}

fn audit_unavailable_msg(e: &dyn std::fmt::Display) -> pb::Denial {
    tracing::error!(error = %e, "refusing the call");
    audit_unavailable_denial(e)
}

fn audit_unavailable_denial(e: &dyn std::fmt::Display) -> pb::Denial {
    let reason = format!(
        "the audit log cannot be written ({e}), so nothing may run. Tell the user; do not retry until it is fixed."
    );
    denial(Code::AuditUnavailable, reason, "floor:audit", None)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    #[test]
    fn the_disk_floor_applies_to_the_tools_that_write() {
        let writing: Vec<&str> = tollgate_policy::registry()
            .iter()
            .filter(|t| writes_to_disk(t.tool))
            .map(|t| t.name)
            .collect();
        assert_eq!(writing, ["write_file", "edit_file", "run_bash"]);
        assert!(!writes_to_disk(ToolName::Mcp));
    }

    #[test]
    fn only_the_tools_that_only_read_overlap_the_fsync() {
        let reading: Vec<ToolName> = ToolName::ALL
            .into_iter()
            .filter(|t| read_only(*t))
            .collect();
        assert_eq!(
            reading,
            [ToolName::ReadFile, ToolName::GlobFiles, ToolName::Grep]
        );
        assert!(reading.iter().all(|t| !writes_to_disk(*t)));
    }

    #[test]
    fn a_denial_carries_its_decision_or_nothing() {
        let mut d = Decision::deny(Code::PolicyDenied, "no", Some("r"));
        d.consequence = "run `x`".into();
        d.destructive = true;
        let got = denial(Code::UserDenied, "why".into(), "approval", Some(&d));
        assert_eq!(
            got,
            pb::Denial {
                code: pb::DenialCode::UserDenied as i32,
                reason: "why".into(),
                rule: "approval".into(),
                consequence: "run `x`".into(),
                destructive: true,
            }
        );
        let bare = denial(Code::CapReached, "cap".into(), "cap:max_tool_calls", None);
        assert_eq!((bare.consequence.as_str(), bare.destructive), ("", false));
        assert_eq!(denial_of(&d).rule, "r");
    }

    #[tokio::test]
    async fn routed_output_is_redacted_capped_and_noticed_once() {
        use pb::sandbox_exec_output::Out;
        let (tx, rx) = mpsc::channel(8);
        let (out, mut got) = mpsc::channel(16);
        let redactor = tollgate_audit::Redactor::new(vec!["hunter2-secret".to_string()]);
        let fw = tokio::spawn(forward_routed(rx, out, redactor, 20));
        tx.send(Output::Stdout(b"pw=hunter2-secret\n".to_vec().into()))
            .await
            .unwrap();
        tx.send(Output::Stderr(b"0123456789abcdef\n".to_vec().into()))
            .await
            .unwrap();
        tx.send(Output::Stdout(b"more\n".to_vec().into()))
            .await
            .unwrap();
        drop(tx);
        let st = fw.await.unwrap();
        let mut msgs = Vec::new();
        while let Ok(m) = got.try_recv() {
            msgs.push(m.out.unwrap());
        }
        let text = |o: &Out| match o {
            Out::Stdout(b) | Out::Stderr(b) => String::from_utf8_lossy(b).into_owned(),
            Out::Exit(_) => String::new(),
        };
        let all: String = msgs.iter().map(text).collect();
        assert!(!all.contains("hunter2-secret"), "{all}");
        assert_eq!(
            all.matches("output truncated at 20 bytes").count(),
            1,
            "{all}"
        );
        assert!(!all.contains("more"), "{all}");
        assert!(st.truncated);
        assert_eq!(st.total, 18 + 17 + 5);
        assert!(!st.head.contains("hunter2-secret"));
    }

    #[tokio::test]
    async fn a_read_starts_before_the_fsync_and_is_released_after_it() {
        let started = AtomicBool::new(false);
        let synced = AtomicBool::new(false);
        let work = async {
            started.store(true, Ordering::SeqCst);
            // Not done on the first poll, like a job on the owner's thread.
            tokio::task::yield_now().await;
            assert!(synced.load(Ordering::SeqCst), "finished before the fsync");
            "content"
        };
        let out = read_while_durable(work, || {
            assert!(started.load(Ordering::SeqCst), "the read had not started");
            synced.store(true, Ordering::SeqCst);
            Ok(())
        })
        .await;
        assert_eq!(out.ok(), Some("content"));
    }

    #[tokio::test]
    async fn a_failed_fsync_drops_the_output() {
        let work = async { "secret content" };
        let out = read_while_durable(work, || {
            Err(tollgate_audit::AuditError::Broken {
                path: "/audit/x.jsonl".into(),
                reason: "fdatasync failed: EIO".into(),
            })
        })
        .await;
        let err = out.expect_err("the output must not be released");
        assert!(err.to_string().contains("fdatasync failed"), "{err}");
    }
}
