//! Steps 1 to 4 of the pipeline (docs/ARCHITECTURE.md "The PEP pipeline"),
//! shared by every channel: the session and its tool-call cap, the engine,
//! session-scope grants and `auto_approve`, the disk floor, the decision
//! record (durable before anything runs: no record, no run), and the
//! approval.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tollgate_audit::Event;
use tollgate_audit::event as audit;
use tollgate_policy::host::{RealFs, SystemResolver};
use tollgate_policy::{Code, Context, Decision, Tool, ToolCall, Verdict};
use tollgate_toolcall::Runs;

use crate::ask::Ask;
use crate::call::{Cleared, Gate, Proposed};
use crate::denial::{Denial, audit_unavailable, audit_unavailable_msg, denial, denial_of, revoked};
use crate::host::Ctx;
use crate::in_force::InForce;
use crate::records::{approval_id, excerpt, record, record_as};

/// The rule a disk-floor refusal names.
pub(crate) const DISK_RULE: &str = "floor:disk";

/// What the engine made of a channel's calls.
struct Decided {
    decision: Decision,
    args: Value,
    calls: Vec<Tool>,
    /// What allowed it, before any approval.
    allowed_by: &'static str,
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
pub async fn authorize(
    cx: &Ctx,
    p: Proposed<'_>,
    calls: Result<Vec<ToolCall>, Decision>,
    gate: &Gate,
    cancel: &CancellationToken,
) -> Result<Cleared, Denial> {
    // Step 1: the session and its cap.
    take_call(cx, p)?;
    // Step 2: the engine.
    let calls = match calls {
        Ok(calls) => calls,
        Err(d) => {
            let _ = audit_decision(cx, p, (&d, ""), gate);
            return Err(denial_of(&d));
        }
    };
    let mut decided = decide_calls(cx, p, calls).await;
    decided.allowed_by = apply_grants(cx, p.tool, &mut decided.decision);
    apply_disk_floor(cx, &decided.calls, &mut decided.decision);
    // Step 3: the decision record, durable before the action. Unless the
    // caller needs it on disk now, an allowed call's record is made durable
    // by the fsync of its `tool_started` record, written next: one fsync for
    // both, before the tool runs.
    let made = (&decided.decision, decided.allowed_by);
    if let Err(e) = audit_decision(cx, p, made, gate) {
        return Err(audit_unavailable(cx, p.tool, &e));
    }
    // Step 4: the approval, for an ask.
    let (allowed_by, delegated) = settle(cx, p, &decided, gate, cancel).await?;
    Ok(Cleared {
        decision: decided.decision,
        calls: decided.calls,
        allowed_by,
        delegated,
    })
}

/// Step 1: the session is still active, and the call is counted against
/// its tool-call cap (past the cap: recorded and refused).
fn take_call(cx: &Ctx, p: Proposed<'_>) -> Result<(), Denial> {
    let (call_id, tool) = (p.call_id, p.tool);
    if !cx.session.is_active() {
        return Err(revoked(&cx.session));
    }
    if cx.session.take_tool_call() {
        return Ok(());
    }
    let reason = format!(
        "the session's tool-call cap ({}) is reached. Stop calling tools and summarise what you did and what remains.",
        cx.session.caps.max_tool_calls
    );
    let _ = record(
        cx,
        Event::PermissionCheck(audit::PermissionCheck {
            call_id: call_id.to_string(),
            tool: tool.to_string(),
            decision: audit::Verdict::Deny,
            code: Code::CapReached.as_str().to_string(),
            rule: Some("cap:max_tool_calls".to_string()),
            rule_file: None,
            reason: reason.clone(),
            consequence: None,
            destructive: None,
            target: None,
            args: None,
            allowed_by: None,
            client_tool: None,
            server: p.mcp.map(|m| m.server.clone()),
            mcp_tool: p.mcp.map(|m| m.tool.clone()),
        }),
    );
    Err(denial(Code::CapReached, reason, "cap:max_tool_calls", None))
}

/// Step 2: the engine's decision on the calls (one, or one per part,
/// combined strictest first), and the calls it checked.
async fn decide_calls(cx: &Ctx, p: Proposed<'_>, mut calls: Vec<ToolCall>) -> Decided {
    let (tool, raw_args) = (p.tool, p.raw_args);
    // One policy for every part and for the record (a reload may put
    // another in force meanwhile).
    let policy = cx.host.engine();
    if let Some(m) = p.mcp {
        // An MCP server's tool: decided by its `mcp(NAME.TOOL)` rules; there
        // is no typed call to run, the gateway forwards it.
        let args = calls.pop().map(|c| c.args).unwrap_or(Value::Null);
        return Decided {
            decision: named(&policy, policy.decide_mcp(m, cx.session.mode)),
            args,
            calls: Vec::new(),
            allowed_by: "allowed",
        };
    }
    if calls.len() == 1 {
        let call = calls.remove(0);
        let len = if call.tool == tool {
            raw_args.len()
        } else {
            call.args.to_string().len()
        };
        let args = call.args.clone();
        let (decision, checked) = decide(cx, &policy, call, len).await;
        return Decided {
            decision,
            args,
            calls: checked.into_iter().collect(),
            allowed_by: "allowed",
        };
    }
    let mut parts = Vec::with_capacity(calls.len());
    let mut checked = Vec::with_capacity(calls.len());
    for c in &calls {
        let len = c.args.to_string().len();
        let (d, t) = decide(cx, &policy, c.clone(), len).await;
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
        allowed_by: "allowed",
    }
}

/// Grants and auto-approve apply only to the non-destructive ask tier.
/// Returns what allowed the call (`allowed` when neither did).
pub(crate) fn apply_grants(cx: &Ctx, tool: &str, decision: &mut Decision) -> &'static str {
    if decision.verdict != Verdict::Ask || decision.destructive {
        return "allowed";
    }
    if cx.session.has_grant(tool, &decision.target) {
        decision.verdict = Verdict::Allow;
        "allowed(session-scope)"
    } else if cx.host.config().session.auto_approve {
        decision.verdict = Verdict::Allow;
        "auto-allow(config)"
    } else {
        "allowed"
    }
}

/// The disk floor: a call that writes is refused while the workspace's
/// filesystem is under `[sandbox] min_free_mb` (refused before any
/// approval is asked for; checked again just before it runs).
fn apply_disk_floor(cx: &Ctx, calls: &[Tool], decision: &mut Decision) {
    let writes = calls.iter().any(|c| c.name().facts().writes_workspace);
    if decision.verdict != Verdict::Deny
        && writes
        && let Err(low) = cx.host.disk().check(&cx.session.workspace)
    {
        decision.verdict = Verdict::Deny;
        decision.code = Code::PolicyDenied;
        decision.reason = low.refused();
        decision.rule = Some(DISK_RULE.to_string());
        decision.rule_file = None;
    }
}

/// Step 4: what the verdict becomes. A denial is sent; a non-destructive
/// ask the gate delegates goes back to the caller's own prompt; any other
/// ask waits for an approval. Returns what allowed the call and, when
/// delegated, the approval's id.
async fn settle(
    cx: &Ctx,
    p: Proposed<'_>,
    decided: &Decided,
    gate: &Gate,
    cancel: &CancellationToken,
) -> Result<(&'static str, Option<String>), Denial> {
    let (call_id, tool) = (p.call_id, p.tool);
    let decision = &decided.decision;
    match decision.verdict {
        Verdict::Deny => Err(denial_of(decision)),
        Verdict::Ask if gate.delegate_ask && !decision.destructive => {
            let id = delegate_to_client(cx, call_id, tool, decision)?;
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
                channel: None,
            };
            let by = crate::ask::ask(cx, &approval, cancel).await?;
            Ok((by, None))
        }
        Verdict::Allow => Ok((decided.allowed_by, None)),
    }
}

/// A non-destructive ask handed back to the caller: the client's own prompt
/// asks the person; the outcome is recorded when the client reports the
/// call. Returns the approval's id.
fn delegate_to_client(
    cx: &Ctx,
    call_id: &str,
    tool: &str,
    decision: &Decision,
) -> Result<String, Denial> {
    let id = approval_id().map_err(|e| audit_unavailable_msg(&e))?;
    record(
        cx,
        Event::ApprovalRequested(audit::ApprovalRequested {
            approval_id: id.clone(),
            call_id: call_id.to_string(),
            tool: tool.to_string(),
            consequence: decision.consequence.clone(),
            destructive: false,
            target: decision.target.clone(),
            deadline_unix_ms: None,
            rule: decision.rule.clone(),
            rule_file: decision.rule_file.clone(),
            channel: Some("client".to_string()),
        }),
    )
    .map_err(|e| audit_unavailable(cx, tool, &e))?;
    Ok(id)
}

/// Arguments up to this size are decided on the async thread that received
/// them (a typical command takes microseconds); longer ones on the blocking
/// pool.
const INLINE_DECISION_BYTES: usize = 8 << 10;

/// Runs the engine for a call: checks it (the registry, the session's
/// tools, the schema; the arguments typed once) and decides it. The checked
/// call comes back with the decision, `None` when the check refused it.
async fn decide(
    cx: &Ctx,
    policy: &Arc<InForce>,
    call: ToolCall,
    arguments_len: usize,
) -> (Decision, Option<Tool>) {
    let mut ctx = Context {
        workspace: cx.session.workspace.clone(),
        mode: cx.session.mode,
        tools: cx.session.tools.clone(),
        home: cx.session.home.clone(),
        protected: cx.host.protected_paths(),
        read_files: cx.session.read_files(),
        repo: cx.session.repo.clone(),
        sandbox: None,
    };
    let tool = match policy.check(&call, &ctx) {
        Ok(t) => t,
        Err(refused) => return (refused, None),
    };
    // Only a command judges the sandbox it runs in; reading the view takes
    // an lstat per toolchain directory, which a file tool's decision skips.
    if tool.name().facts().runs == Runs::Sandbox {
        ctx.sandbox = cx.host.sandbox_view(&cx.session);
    }
    if !tool.name().facts().decides_with_dns && arguments_len <= INLINE_DECISION_BYTES {
        // Pure and microseconds: decide right here. Only webfetch asks the
        // network facts, so this resolver carries no host-address snapshot
        // (were one asked for, the answer would be "unknown": refused).
        let d = policy.decide_checked(&tool, &ctx, &RealFs, &SystemResolver::default());
        return (named(policy, d), Some(tool));
    }
    // DNS may block, and a long script may take milliseconds to parse:
    // decide off the async threads, which serve every cx.session.
    let (host, policy) = (Arc::clone(&cx.host), Arc::clone(policy));
    tokio::task::spawn_blocking(move || {
        let d = policy.decide_checked(&tool, &ctx, &RealFs, &host.resolver());
        (named(&policy, d), Some(tool))
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

/// `d` with the drop-in its rule came from (docs/OPERATIONS.md "Shared
/// policy"), for its records.
fn named(policy: &InForce, mut d: Decision) -> Decision {
    d.rule_file = policy.rule_file(d.rule.as_deref());
    d
}

/// The `permission_check` record. An allowed call's rides on the fsync of
/// the durable record that follows before anything acts on it (unless the
/// gate wants it on disk now).
fn audit_decision(
    cx: &Ctx,
    p: Proposed<'_>,
    (d, allowed_by): (&Decision, &str),
    gate: &Gate,
) -> Result<(), tollgate_audit::AuditError> {
    let (call_id, tool) = (p.call_id, p.tool);
    let durable_next = d.verdict == Verdict::Allow && !gate.durable_now;
    let check = audit::PermissionCheck {
        call_id: call_id.to_string(),
        tool: tool.to_string(),
        decision: d.verdict,
        code: d.code.as_str().to_string(),
        rule: d.rule.clone(),
        rule_file: d.rule_file.clone(),
        reason: d.reason.clone(),
        consequence: Some(d.consequence.clone()),
        destructive: Some(d.destructive),
        target: Some(d.target.clone()),
        args: Some(excerpt(d.secret, p.raw_args)),
        allowed_by: (d.verdict == Verdict::Allow && !allowed_by.is_empty())
            .then(|| allowed_by.to_string()),
        client_tool: gate.client_tool.clone(),
        server: p.mcp.map(|m| m.server.clone()),
        mcp_tool: p.mcp.map(|m| m.tool.clone()),
    };
    record_as(cx, Event::PermissionCheck(check), durable_next)
}

/// A client's own bookkeeping tool (planning, todos, tool search): allowed
/// without the engine, and recorded, durable, like any decision.
pub fn record_harmless(cx: &Ctx, call_id: &str, client_tool: &str) -> Result<String, Denial> {
    let reason = format!(
        "`{}` is the client's own bookkeeping; it touches nothing outside the client.",
        tollgate_policy::escape_for_display(client_tool)
    );
    record(
        cx,
        Event::PermissionCheck(audit::PermissionCheck {
            call_id: call_id.to_string(),
            tool: client_tool.to_string(),
            client_tool: Some(client_tool.to_string()),
            decision: audit::Verdict::Allow,
            code: "OK".to_string(),
            rule: Some("clients:harmless".to_string()),
            rule_file: None,
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
    .map_err(|e| audit_unavailable(cx, client_tool, &e))?;
    Ok(reason)
}

#[cfg(test)]
mod tests {
    use tollgate_toolcall::ToolName;

    #[test]
    fn the_disk_floor_applies_to_the_tools_that_write() {
        let writing: Vec<&str> = tollgate_policy::registry()
            .iter()
            .filter(|t| t.facts.writes_workspace)
            .map(|t| t.name)
            .collect();
        assert_eq!(writing, ["write_file", "edit_file", "run_bash"]);
        assert!(!ToolName::Mcp.facts().writes_workspace);
    }

    #[test]
    fn only_the_tools_that_only_read_overlap_the_fsync() {
        let reading: Vec<ToolName> = ToolName::ALL
            .into_iter()
            .filter(|t| t.facts().only_reads())
            .collect();
        assert_eq!(
            reading,
            [ToolName::ReadFile, ToolName::GlobFiles, ToolName::Grep]
        );
        let dns: Vec<ToolName> = ToolName::ALL
            .into_iter()
            .filter(|t| t.facts().decides_with_dns)
            .collect();
        assert_eq!(dns, [ToolName::Webfetch]);
    }
}
