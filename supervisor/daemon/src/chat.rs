//! The Chat proxy: the agent's model calls go through the supervisor, which
//! holds the key, counts usage, prices it, and enforces the cost cap and the
//! LLM timeout (docs/ARCHITECTURE.md "The LLM proxy" and "Reference:
//! modes, tools, budgets").

use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::Value;
use tollgate_audit::event::{self, Event, LlmErrorKind};
use tollgate_audit::{Durable, Priority};
use tollgate_proto::v1 as pb;
use tonic::Status;

use crate::events::Log;
use crate::llm::{self, LlmError};
use crate::sessions::Session;
use crate::supervisor::Supervisor;

/// How much of a message goes into the audit record.
const EXCERPT: usize = 1024;
/// How much of one tool call's arguments goes into the audit record.
const CALL_ARGS_EXCERPT: usize = 2048;
/// How much of a tool call's name.
const CALL_NAME_EXCERPT: usize = 128;
/// How many of a response's tool calls are recorded one by one.
const CALLS_RECORDED: usize = 32;

pub async fn chat(
    sup: &Arc<Supervisor>,
    session: &Arc<Session>,
    req: pb::ChatRequest,
) -> Result<pb::ChatResponse, Status> {
    let cap = session.caps.max_cost_usd;
    let spent = session.usage().cost_usd;
    // Spending nothing never hits the cap (free local models, the script).
    if spent > 0.0 && spent >= cap {
        return Ok(cost_cap_hit(sup, session, spent, cap));
    }
    let turn = session.script_turn.fetch_add(1, Ordering::SeqCst);
    record_request(sup, session, &req, turn)?;
    let call = Call {
        turn,
        called: std::time::Instant::now(),
    };
    let result = tokio::select! {
        r = complete_with_retries(sup, session, &req, turn) => r,
        _ = session.cancel.cancelled() => {
            return Err(Status::permission_denied(format!(
                "SESSION_REVOKED: the session was {}: {}", session.state().as_str(), session.end_reason()
            )));
        }
    };
    let completion = match result? {
        Ok(c) => c,
        Err(e) => return Err(llm_failed(sup, session, e, &call)),
    };
    let cost = llm::cost(
        completion.usage,
        sup.config.llm.price_in_per_1k,
        sup.config.llm.price_out_per_1k,
    );
    let (pin, pout) = completion.usage.unwrap_or((0, 0));
    let total = session.add_usage(pin, pout, cost);
    record_response(sup, session, &req, &completion, &call, cost, total.cost_usd)?;
    Ok(pb::ChatResponse {
        message: Some(completion.message),
        usage: Some(pb::Usage {
            reported: completion.usage.is_some(),
            prompt_tokens: pin,
            completion_tokens: pout,
        }),
        cost_usd: cost,
        session_cost_usd: total.cost_usd,
        finish_reason: completion.finish_reason,
        denied: None,
    })
}

/// The model call, tried again while the provider answers 429 or 5xx, at
/// most `[llm] retries` times, each retry after the provider's
/// `Retry-After` (else 1 s, 2 s, 4 s, …) and recorded as `llm_retry`
/// before the wait (docs/OPERATIONS.md "The LLM key and its network"). A
/// wait over `[llm] max_retry_wait_s` ends the call with the provider's
/// answer. `Err` only when a retry's record cannot be written.
async fn complete_with_retries(
    sup: &Supervisor,
    session: &Session,
    req: &pb::ChatRequest,
    turn: u32,
) -> Result<Result<llm::Completion, LlmError>, Status> {
    let settings = &sup.config.llm;
    let mut attempt = 0u32;
    loop {
        let r = sup
            .llm
            .complete(req, &session.model, session.caps.llm_timeout, turn)
            .await;
        let Err(LlmError::Status {
            status,
            body,
            retry_after,
        }) = r
        else {
            return Ok(r);
        };
        let again = Err(LlmError::Status {
            status,
            body: body.clone(),
            retry_after: retry_after.clone(),
        });
        if !llm::retryable(status) || attempt >= settings.retries {
            return Ok(again);
        }
        let asked = retry_after
            .as_deref()
            .and_then(|v| llm::retry_after(v, std::time::SystemTime::now()));
        let wait = asked.unwrap_or(std::time::Duration::from_secs(1 << attempt.min(5)));
        if wait.as_secs() > settings.max_retry_wait_s {
            return Ok(again);
        }
        attempt += 1;
        let retry = event::LlmRetry {
            provider: sup.llm.name().to_string(),
            model: session.model.clone(),
            turn: u64::from(turn),
            attempt: u64::from(attempt),
            status: u64::from(status),
            wait_ms: wait.as_millis() as u64,
            retry_after: retry_after.map(|v| capped(sup, &v, 128)),
            reason: capped(sup, &body, EXCERPT),
        };
        record(sup, session, Event::LlmRetry(retry))?;
        tokio::time::sleep(wait).await;
    }
}

/// One model call: its turn, and when it was made.
struct Call {
    turn: u32,
    called: std::time::Instant,
}

/// The `llm_request` record: what is about to be asked.
fn record_request(
    sup: &Supervisor,
    session: &Session,
    req: &pb::ChatRequest,
    turn: u32,
) -> Result<(), Status> {
    let last = req.messages.last();
    record(
        sup,
        session,
        Event::LlmRequest(event::LlmRequest {
            provider: sup.llm.name().to_string(),
            model: session.model.clone(),
            turn: u64::from(turn),
            messages: req.messages.len() as u64,
            tools: req.tools.len() as u64,
            last_role: last.map(|m| m.role.clone()).unwrap_or_default(),
            last_content: excerpt(sup, last.and_then(|m| m.content.as_deref()).unwrap_or("")),
        }),
    )
}

/// A failed model call: the `llm_call_error` record, and the status the
/// agent gets (redacted).
fn llm_failed(sup: &Supervisor, session: &Session, e: LlmError, call: &Call) -> Status {
    let (turn, called) = (call.turn, call.called);
    let kind = match &e {
        LlmError::Timeout(_) => LlmErrorKind::Timeout,
        LlmError::Connect { .. } => LlmErrorKind::Connect,
        LlmError::Status { .. } => LlmErrorKind::HttpStatus,
        LlmError::Malformed { .. } => LlmErrorKind::Malformed,
        LlmError::TooLarge(_) => LlmErrorKind::TooLarge,
        LlmError::Other(_) => LlmErrorKind::Other,
    };
    let message = sup.redactor.redact(&e.to_string());
    // What the model sent, when it could not be used (a tool call
    // without a name, say): on record, redacted and capped.
    let response = match &e {
        LlmError::Malformed {
            body: Some(body), ..
        } => Some(capped(sup, body, CALL_ARGS_EXCERPT)),
        _ => None,
    };
    let failed = event::LlmCallError {
        provider: sup.llm.name().to_string(),
        kind,
        reason: message.clone(),
        turn: u64::from(turn),
        model: session.model.clone(),
        duration_ms: called.elapsed().as_millis() as u64,
        response,
    };
    if let Err(status) = record(sup, session, Event::LlmCallError(failed)) {
        return status;
    }
    match e {
        LlmError::Timeout(_) => Status::deadline_exceeded(message),
        LlmError::Connect { .. }
        | LlmError::Status { .. }
        | LlmError::Malformed { .. }
        | LlmError::TooLarge(_)
        | LlmError::Other(_) => Status::unavailable(message),
    }
}

/// The `llm_response` record: usage, cost and the tool calls asked for.
fn record_response(
    sup: &Supervisor,
    session: &Session,
    req: &pb::ChatRequest,
    completion: &llm::Completion,
    call: &Call,
    cost: f64,
    session_cost: f64,
) -> Result<(), Status> {
    let (turn, called) = (call.turn, call.called);
    let tool_names: Vec<String> = completion
        .message
        .tool_calls
        .iter()
        .map(|c| c.name.clone())
        .collect();
    let offered: Vec<&str> = req.tools.iter().map(|t| t.name.as_str()).collect();
    let calls = calls_on_record(sup, &completion.message.tool_calls, &offered);
    let response = event::LlmResponse {
        provider: sup.llm.name().to_string(),
        model: session.model.clone(),
        turn: u64::from(turn),
        duration_ms: called.elapsed().as_millis() as u64,
        usage: completion.usage.map(|(p, c)| event::Usage {
            prompt_tokens: p,
            completion_tokens: c,
        }),
        cost_usd: cost,
        session_cost_usd: session_cost,
        finish_reason: completion.finish_reason.clone(),
        content: excerpt(sup, completion.message.content.as_deref().unwrap_or("")),
        tool_calls: tool_names,
        calls,
        calls_total: completion.message.tool_calls.len() as u64,
    };
    record(sup, session, Event::LlmResponse(response))
}

fn cost_cap_hit(sup: &Supervisor, session: &Session, spent: f64, cap: f64) -> pb::ChatResponse {
    let reason = format!(
        "the session's cost limit of ${cap:.2} is reached (${spent:.4} spent). Stop now and summarise what you did and what remains."
    );
    let _ = sup.recorder.write(
        Log::Session(&session.audit, &session.id),
        Event::CostLimitHit(event::CostLimitHit {
            cost_usd: spent,
            max_cost_usd: cap,
        }),
        Durable::AsConfigured,
        Priority::Ordinary,
    );
    pb::ChatResponse {
        message: Some(pb::ChatMessage {
            role: "assistant".to_string(),
            content: Some(format!("Cost limit reached: {reason}")),
            ..Default::default()
        }),
        usage: Some(pb::Usage::default()),
        cost_usd: 0.0,
        session_cost_usd: spent,
        finish_reason: "cost_limit".to_string(),
        denied: Some(pb::Denial {
            code: pb::DenialCode::CapReached as i32,
            reason,
            rule: "cap:max_cost_usd".to_string(),
            ..Default::default()
        }),
    }
}

/// The model's tool calls as it sent them, before the agent judges them (it
/// refuses a made-up tool name or arguments that are not JSON without ever
/// calling the supervisor, so this is their only record): id, name and the
/// raw argument text, redacted and capped; whether the name was one of the
/// tools offered and whether the arguments are a JSON object.
fn calls_on_record(
    sup: &Supervisor,
    calls: &[pb::ChatToolCall],
    offered: &[&str],
) -> Vec<event::CallOnRecord> {
    calls
        .iter()
        .take(CALLS_RECORDED)
        .map(|c| event::CallOnRecord {
            id: capped(sup, &c.id, CALL_NAME_EXCERPT),
            name: capped(sup, &c.name, CALL_NAME_EXCERPT),
            arguments: capped(sup, &c.arguments, CALL_ARGS_EXCERPT),
            offered: offered.contains(&c.name.as_str()),
            json_object: serde_json::from_str::<Value>(&c.arguments).is_ok_and(|v| v.is_object()),
        })
        .collect()
}

fn excerpt(sup: &Supervisor, text: &str) -> String {
    capped(sup, text, EXCERPT)
}

/// `text` redacted, then cut to `cap` bytes with a note of its length (the
/// redaction comes first, so a secret cut in two is still found).
fn capped(sup: &Supervisor, text: &str, cap: usize) -> String {
    let red = sup.redactor.redact(text);
    if red.len() <= cap {
        return red;
    }
    let mut end = cap;
    while !red.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} chars)", &red[..end], red.chars().count())
}

fn record(sup: &Supervisor, session: &Session, event: Event) -> Result<(), Status> {
    sup.recorder
        .write(
            Log::Session(&session.audit, &session.id),
            event,
            Durable::AsConfigured,
            Priority::Ordinary,
        )
        .map(|_| ())
        .map_err(|e| {
            sup.audit_refused(
                &session.id,
                &format!("a model call of session {}", session.id),
                &e,
            );
            Status::unavailable(format!(
                "AUDIT_UNAVAILABLE: the audit log cannot be written: {e}"
            ))
        })
}
