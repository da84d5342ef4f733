//! CallTool: the agent's channel. Steps 1 to 4 are [`crate::authorize()`];
//! step 5 runs the cleared call between its `tool_started` record and its
//! `tool_result` (a read-only tool reads while that record's fsync runs,
//! and its output is released only after it).

use std::time::{Duration, Instant};

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tollgate_audit::Event;
use tollgate_audit::event as audit;
use tollgate_policy::{Code, Decision, Tool, ToolCall};

use crate::authorize::{DISK_RULE, authorize};
use crate::call::{CallTool, Cleared, Gate, Proposed, ToolAnswer};
use crate::denial::{Denial, audit_unavailable, denial, revoked};
use crate::exec::{Done, ExecError, execute};
use crate::host::Ctx;
use crate::records::{self, excerpt, record_as};

/// How long a cancelled call's executor may take to stop what it started
/// (kill the command's process group and reap it) before it is dropped.
const CANCEL_GRACE: Duration = Duration::from_secs(2);

/// Runs one tool call through the whole pipeline. Cancelling `cancel` (the
/// client went away, the session was revoked) stops it at whatever stage it
/// is in; the records say so.
pub async fn call_tool(cx: &Ctx, req: CallTool, cancel: CancellationToken) -> ToolAnswer {
    let started = Instant::now();
    let call_id = req.call_id.chars().take(128).collect::<String>();
    let tool = req.tool.clone();
    let calls = proposed_call(&req);
    let gate = Gate::call_tool(cx.host.config());
    let p = Proposed {
        call_id: &call_id,
        tool: &tool,
        raw_args: &req.arguments_json,
        mcp: None,
    };
    let cleared = match authorize(cx, p, calls, &gate, &cancel).await {
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
    let result = match run(cx, &call_id, call, &cleared, &cancel).await {
        Ok(r) => r,
        Err(d) => return denied(d),
    };
    let duration_ms = started.elapsed().as_millis() as u64;
    let mut response = response_of(cx, result, &cleared, duration_ms);
    record_outcome(cx, p, &cleared.decision, &response, duration_ms);
    if !response.ok && response.denied.is_none() && response.error.is_empty() {
        response.error = "the tool failed without a message".to_string();
    }
    response
}

/// CallTool's request as the engine's input: arguments that are not JSON
/// never reach the engine, and a tool the model is never offered (an MCP
/// gate) is not one it can call.
#[allow(clippy::result_large_err)] // the refusal is a whole decision, recorded as such
fn proposed_call(req: &CallTool) -> Result<Vec<ToolCall>, Decision> {
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
    cx: &Ctx,
    call_id: &str,
    call: &Tool,
    cleared: &Cleared,
    cancel: &CancellationToken,
) -> Result<Result<Done, ExecError>, Denial> {
    let tool = call.name().as_str();
    let decision = &cleared.decision;
    let overlap = call.name().facts().only_reads() && cx.session.audit.append_waits();
    let started_record = Event::ToolStarted(audit::ToolStarted {
        call_id: call_id.to_string(),
        tool: tool.to_string(),
        allowed_by: cleared.allowed_by.to_string(),
        target: decision.target.clone(),
        server: None,
        mcp_tool: None,
    });
    if let Err(e) = record_as(cx, started_record, overlap) {
        return Err(audit_unavailable(cx, tool, &e));
    }
    // A connection the command opens is attributed to this call.
    let _running = match call {
        Tool::RunBash(a) => Some(cx.session.net.running(call_id, &a.command)),
        _ => None,
    };
    let run = async {
        let run = execute(cx, call_id, call, decision, cancel);
        if overlap {
            read_while_durable(run, || cx.host.sync(&cx.session.audit)).await
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
        Some(Err(e)) => Err(audit_unavailable(cx, tool, &e)),
        None => Ok(Err(ExecError::Cancelled)),
    }
}

/// What the executor's result tells the agent: the redacted output, the
/// tool's error, or why it was stopped.
fn response_of(
    cx: &Ctx,
    result: Result<Done, ExecError>,
    cleared: &Cleared,
    duration_ms: u64,
) -> ToolAnswer {
    let decision = &cleared.decision;
    let allowed_by = cleared.allowed_by;
    let stopped = |d: Denial| ToolAnswer {
        denied: Some(d),
        duration_ms,
        ..Default::default()
    };
    match result {
        Ok(done) => {
            let text = if done.redacted {
                done.output.text
            } else {
                cx.host.redactor().redact(&done.output.text)
            };
            // A command killed at its timeout did not succeed: said with
            // its code, and what it printed until then kept.
            let (failure, error) = match done.timed_out {
                Some(t) => (
                    Some(crate::Failure::Timeout),
                    format!(
                        "the command timed out after {}s and was killed; its output until then is kept. Give it a longer timeout_s (within the host's cap), run less at once, or redirect long output to a file.",
                        t.as_secs()
                    ),
                ),
                None => (None, String::new()),
            };
            ToolAnswer {
                ok: failure.is_none(),
                output: text,
                exit_code: done.exit_code,
                truncated: done.output.truncated,
                duration_ms,
                allowed_by: allowed_by.to_string(),
                failure,
                error,
                ..Default::default()
            }
        }
        Err(ExecError::Tool(msg)) => ToolAnswer {
            ok: false,
            error: cx.host.redactor().redact(&msg),
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
        Err(ExecError::Cancelled) if cx.session.is_active() => stopped(denial(
            Code::UserDenied,
            "the call was cancelled by the user before it finished.".to_string(),
            "cancel",
            Some(decision),
        )),
        Err(ExecError::Cancelled) => stopped(revoked(&cx.session)),
    }
}

/// The `tool_result` record. It rides on the next fsync (the action has
/// already run).
fn record_outcome(
    cx: &Ctx,
    p: Proposed<'_>,
    decision: &Decision,
    response: &ToolAnswer,
    duration_ms: u64,
) {
    let status = if response.ok {
        audit::ToolStatus::Ok
    } else if response.denied.is_some() {
        audit::ToolStatus::Stopped
    } else {
        audit::ToolStatus::Error
    };
    // A timed-out command's record keeps its output, like a finished one's.
    let shown = if response.ok || response.failure.is_some() {
        &response.output
    } else {
        &response.error
    };
    let excerpt = excerpt(decision.secret, shown);
    let outcome = audit::ToolResult {
        call_id: p.call_id.to_string(),
        tool: p.tool.to_string(),
        status,
        exit_code: Some(response.exit_code.map(i64::from)),
        bytes: response.output.len() as u64,
        truncated: response.truncated,
        duration_ms,
        output: Some(excerpt),
        // Why it was stopped (the disk floor, the sandbox, a cancel).
        stopped: response.denied.as_ref().map(|d| audit::Stopped {
            code: d.code.as_str().to_string(),
            rule: d.rule.clone(),
            reason: d.reason.clone(),
        }),
        routed: None,
        signal: None,
        server: None,
        mcp_tool: None,
        error: response
            .failure
            .map(|f| format!("{}: {}", f.as_str(), response.error)),
    };
    records::record_outcome(cx, outcome);
}

/// Starts `work` (polls it once: a file tool hands its job to the owner's
/// thread), then runs `sync` (the fsync that makes the decision and
/// `tool_started` records durable), then finishes `work`. The fsync and the
/// read overlap, but nothing of the output leaves before the records are on
/// disk: if `sync` fails, the output is dropped and the call refused.
pub(crate) async fn read_while_durable<T>(
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

fn denied(d: Denial) -> ToolAnswer {
    ToolAnswer {
        ok: false,
        denied: Some(d),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

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
