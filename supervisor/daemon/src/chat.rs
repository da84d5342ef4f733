//! The Chat proxy: the agent's model calls go through the supervisor, which
//! holds the key, counts usage, prices it, and enforces the cost cap and the
//! LLM timeout (BRIEF sections 10 and 11).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::{Value, json};
use tollgate_proto::v1 as pb;
use tonic::Status;

use crate::llm::{self, LlmError};
use crate::sessions::Session;
use crate::supervisor::Supervisor;

/// How much of a message goes into the audit record.
const EXCERPT: usize = 1024;

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
    let last = req.messages.last();
    record(
        sup,
        session,
        "llm_request",
        json!({
            "provider": sup.llm.name(),
            "model": session.model,
            "turn": turn,
            "messages": req.messages.len(),
            "tools": req.tools.len(),
            "last_role": last.map(|m| m.role.clone()).unwrap_or_default(),
            "last_content": excerpt(sup, last.and_then(|m| m.content.as_deref()).unwrap_or("")),
        }),
    )?;
    let called = std::time::Instant::now();
    let result = tokio::select! {
        r = sup.llm.complete(&req, &session.model, session.caps.llm_timeout, turn) => r,
        _ = session.cancel.cancelled() => {
            return Err(Status::permission_denied(format!(
                "SESSION_REVOKED: the session was {}: {}", session.state().as_str(), session.end_reason()
            )));
        }
    };
    let completion = match result {
        Ok(c) => c,
        Err(e) => {
            let kind = match &e {
                LlmError::Timeout(_) => "timeout",
                LlmError::Connect { .. } => "connect",
                LlmError::Status { .. } => "http_status",
                LlmError::Malformed(_) => "malformed",
                LlmError::TooLarge(_) => "too_large",
                LlmError::Other(_) => "other",
            };
            let message = sup.redactor.redact(&e.to_string());
            record(
                sup,
                session,
                "llm_call_error",
                json!({
                    "provider": sup.llm.name(), "kind": kind, "reason": message, "turn": turn,
                    "model": session.model, "duration_ms": called.elapsed().as_millis() as u64,
                }),
            )?;
            return Err(match e {
                LlmError::Timeout(_) => Status::deadline_exceeded(message),
                LlmError::Connect { .. }
                | LlmError::Status { .. }
                | LlmError::Malformed(_)
                | LlmError::TooLarge(_)
                | LlmError::Other(_) => Status::unavailable(message),
            });
        }
    };
    let cost = llm::cost(
        completion.usage,
        sup.config.llm.price_in_per_1k,
        sup.config.llm.price_out_per_1k,
    );
    let (pin, pout) = completion.usage.unwrap_or((0, 0));
    let total = session.add_usage(pin, pout, cost);
    let tool_names: Vec<&str> = completion
        .message
        .tool_calls
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    record(
        sup,
        session,
        "llm_response",
        json!({
            "provider": sup.llm.name(),
            "model": session.model,
            "turn": turn,
            "duration_ms": called.elapsed().as_millis() as u64,
            "usage": match completion.usage {
                Some((p, c)) => json!({"prompt_tokens": p, "completion_tokens": c}),
                None => Value::Null,
            },
            "cost_usd": cost,
            "session_cost_usd": total.cost_usd,
            "finish_reason": completion.finish_reason,
            "content": excerpt(sup, completion.message.content.as_deref().unwrap_or("")),
            "tool_calls": tool_names,
        }),
    )?;
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

fn cost_cap_hit(sup: &Supervisor, session: &Session, spent: f64, cap: f64) -> pb::ChatResponse {
    let reason = format!(
        "the session's cost limit of ${cap:.2} is reached (${spent:.4} spent). Stop now and summarise what you did and what remains."
    );
    let _ = sup.recorder.to_file(
        &session.audit,
        &session.id,
        "cost_limit_hit",
        json!({"cost_usd": spent, "max_cost_usd": cap}),
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

fn excerpt(sup: &Supervisor, text: &str) -> String {
    let red = sup.redactor.redact(text);
    if red.len() <= EXCERPT {
        return red;
    }
    let mut end = EXCERPT;
    while !red.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} chars)", &red[..end], red.chars().count())
}

fn record(sup: &Supervisor, session: &Session, event: &str, fields: Value) -> Result<(), Status> {
    sup.recorder
        .to_file(&session.audit, &session.id, event, fields)
        .map(|_| ())
        .map_err(|e| {
            Status::unavailable(format!(
                "AUDIT_UNAVAILABLE: the audit log cannot be written: {e}"
            ))
        })
}
