//! The MCP gateway's channel: one `tools/call` of a wrapped MCP server
//! (`agent mcp-gateway`), through the same [`crate::authorize()`] as every
//! call (the tool-call cap, the engine's `mcp(NAME.TOOL)` decision, grants
//! and `auto_approve`, its record durable before anything is forwarded, an
//! approval when the verdict is ask), then forwarded to the server in the
//! session's sandbox, bounded by the sandbox's longest run timeout, and its
//! outcome recorded.

use std::future::Future;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tollgate_audit::Event;
use tollgate_audit::event as audit;
use tollgate_policy::{Code, MCP_RULE_TOOL, McpToolCall, ToolCall};

use crate::authorize::authorize;
use crate::call::{Gate, Proposed};
use crate::denial::{Denial, audit_unavailable, denial, revoked};
use crate::host::Ctx;
use crate::records::{self, record};

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

/// One `tools/call` as the gateway received it.
#[derive(Debug, Clone, Copy)]
pub struct McpCall<'a> {
    pub server: &'a str,
    pub tool: &'a str,
    pub call_id: &'a str,
    pub args: &'a Value,
}

/// Decides, records and forwards one `tools/call`: `forward` sends the
/// request to the server and waits for its answer. `Err` is the denial
/// when the call was not forwarded or got no answer.
pub async fn mcp_tool_call<F, Fut>(
    cx: &Ctx,
    c: McpCall<'_>,
    cancel: &CancellationToken,
    forward: F,
) -> Result<McpAnswer, Denial>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<McpAnswer, String>>,
{
    let started = Instant::now();
    let call = McpToolCall {
        server: c.server.to_string(),
        tool: c.tool.to_string(),
    };
    let raw_args = cx.host.redactor().redact(&c.args.to_string());
    let p = Proposed {
        call_id: c.call_id,
        tool: MCP_RULE_TOOL,
        raw_args: &raw_args,
        mcp: Some(&call),
    };
    let proposal = vec![ToolCall {
        tool: MCP_RULE_TOOL.to_string(),
        args: c.args.clone(),
    }];
    let gate = Gate::call_tool(cx.host.config());
    let cleared = authorize(cx, p, Ok(proposal), &gate, cancel).await?;
    record(
        cx,
        Event::ToolStarted(audit::ToolStarted {
            call_id: c.call_id.to_string(),
            tool: MCP_RULE_TOOL.to_string(),
            allowed_by: cleared.allowed_by.to_string(),
            target: cleared.decision.target.clone(),
            server: Some(call.server.clone()),
            mcp_tool: Some(call.tool.clone()),
        }),
    )
    .map_err(|e| audit_unavailable(cx, MCP_RULE_TOOL, &e))?;
    // Connections the server opens meanwhile are attributed to this call,
    // and the hosts refused end its result, as a command's do
    // (docs/INTERFACES.md "[network]").
    let shown = format!("{MCP_RULE_TOOL}({}.{})", c.server, c.tool);
    let running = cx.session.net.running(c.call_id, &shown);
    let net = crate::exec::net_lines::mark(cx);
    let outcome = forward_mcp(cx, c.server, cancel, forward).await;
    drop(running);
    let refused = crate::exec::net_lines::refused_since(cx, net);
    let outcome = outcome.map(|a| with_refusals(a, &refused));
    let duration_ms = started.elapsed().as_millis() as u64;
    record_mcp_outcome(cx, c.call_id, &call, &outcome, duration_ms);
    outcome.map_err(|reason| {
        if cx.session.is_active() {
            // An MCP decision is never destructive.
            let d = &cleared.decision;
            denial(Code::SandboxUnavailable, reason, "mcp-gateway", Some(d))
        } else {
            revoked(&cx.session)
        }
    })
}

/// The answer with the `network: refused` lines as one more text block
/// of its result; unchanged when there are none.
fn with_refusals(mut a: McpAnswer, refused: &str) -> McpAnswer {
    let text = refused.trim_start_matches('\n');
    if text.is_empty() {
        return a;
    }
    if let Some(blocks) = a
        .response
        .pointer_mut("/result/content")
        .and_then(Value::as_array_mut)
    {
        blocks.push(serde_json::json!({"type": "text", "text": text}));
        a.bytes += text.len();
    }
    a
}

/// Forwards the call and waits for the server's answer, bounded by the
/// sandbox's longest run timeout and by the call's cancellation.
async fn forward_mcp<F, Fut>(
    cx: &Ctx,
    server: &str,
    cancel: &CancellationToken,
    forward: F,
) -> Result<McpAnswer, String>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<McpAnswer, String>>,
{
    let limit = Duration::from_secs(cx.host.config().sandbox.max_run_timeout_s);
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
        _ = cancel.cancelled() => Err(if cx.session.is_active() {
            "the call was cancelled before the MCP server answered.".to_string()
        } else {
            revoked(&cx.session).reason
        }),
    }
}

/// The MCP call's `tool_result`, riding on the next fsync.
fn record_mcp_outcome(
    cx: &Ctx,
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
    records::record_outcome(cx, result);
}
