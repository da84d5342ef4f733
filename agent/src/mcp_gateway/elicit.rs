//! Asks of a gateway session put to the person at the MCP client, as
//! `agent mcp` does: when the config lets the session approve and the client
//! declared form elicitation in its `initialize`, each approval the
//! supervisor raises is also sent to the client as an `elicitation/create`
//! request of this process's own (ids `tollgate-elicit-…`, answered here,
//! never relayed to the server). The answer goes back on the session's
//! approvals stream; the first answer wins, operators included, and an
//! elicitation someone else settled first is cancelled.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::ElicitResult;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tollgate_proto::{Approval, ApprovalDecision};

use crate::client::{ControlStream, ServerEvent};
use crate::mcp::{decision, message, schema_json};
use crate::term;
use crate::text::escape_display;

/// The id prefix of this process's own requests to the client.
const ID_PREFIX: &str = "tollgate-elicit-";

/// What the relay and the pump share.
#[derive(Default)]
pub struct Elicit {
    /// The client declared form elicitation in its initialize.
    pub can_ask: AtomicBool,
    /// Our requests in flight: id → where the answer goes.
    waiting: Mutex<HashMap<String, oneshot::Sender<Value>>>,
}

impl Elicit {
    /// Notes the client's capabilities from its `initialize` request.
    pub fn saw_client_message(&self, v: &Value) {
        if v.get("method").and_then(Value::as_str) == Some("initialize") {
            let e = v.pointer("/params/capabilities/elicitation");
            // `{}` (2025-06-18) or one naming `form` (2025-11-25).
            let form = e.is_some_and(|e| {
                e.as_object()
                    .is_some_and(|o| o.is_empty() || o.contains_key("form"))
            });
            self.can_ask.store(form, Ordering::SeqCst);
        }
    }

    /// Takes the client's answer to one of our requests; false when the
    /// message is not one (it goes to the server).
    pub fn take_answer(&self, v: &Value) -> bool {
        if v.get("method").is_some() {
            return false;
        }
        let Some(id) = v.get("id").and_then(Value::as_str) else {
            return false;
        };
        if !id.starts_with(ID_PREFIX) {
            return false;
        }
        if let Ok(mut w) = self.waiting.lock()
            && let Some(tx) = w.remove(id)
        {
            let _ = tx.send(v.clone());
        }
        true
    }
}

/// Reads the session's approvals stream until it ends.
pub async fn pump(mut control: ControlStream, shared: Arc<Elicit>, out: mpsc::Sender<Vec<u8>>) {
    let (decide_tx, mut decide_rx) = mpsc::channel::<ApprovalDecision>(16);
    let mut open: HashMap<String, oneshot::Sender<()>> = HashMap::new();
    loop {
        tokio::select! {
            ev = control.rx.recv() => match ev {
                Some(ServerEvent::Requested(a)) => {
                    if !shared.can_ask.load(Ordering::SeqCst) {
                        term::diag(&format!(
                            "agent mcp-gateway: approval {} is waiting for an operator: {} (supervisorctl approve {})",
                            a.id, escape_display(&a.consequence, false), a.id
                        ));
                        continue;
                    }
                    let (tx, rx) = oneshot::channel();
                    open.insert(a.id.clone(), tx);
                    tokio::spawn(ask(a, Arc::clone(&shared), out.clone(), decide_tx.clone(), rx));
                }
                Some(ServerEvent::Resolved(r)) => {
                    if let Some(tx) = open.remove(&r.approval_id) {
                        let _ = tx.send(());
                    }
                }
                Some(ServerEvent::Error(msg)) => term::diag(&format!(
                    "agent mcp-gateway: the supervisor did not accept a decision: {}",
                    escape_display(&msg, false)
                )),
                Some(ServerEvent::Ended { .. } | ServerEvent::Closed(_)) | None => return,
            },
            Some(d) = decide_rx.recv() => control.decide(d).await,
        }
    }
}

/// One elicitation: request, then the answer, a settlement or the deadline.
async fn ask(
    a: Approval,
    shared: Arc<Elicit>,
    out: mpsc::Sender<Vec<u8>>,
    decide: mpsc::Sender<ApprovalDecision>,
    settled: oneshot::Receiver<()>,
) {
    let id = format!("{ID_PREFIX}{}", a.id);
    let (tx, rx) = oneshot::channel();
    if let Ok(mut w) = shared.waiting.lock() {
        w.insert(id.clone(), tx);
    }
    let req = json!({"jsonrpc": "2.0", "id": id, "method": "elicitation/create", "params": {
        "message": message(&a), "requestedSchema": Value::Object(schema_json(&a))}});
    let _ = out.send(line(&req)).await;
    term::diag(&format!(
        "agent mcp-gateway: approval {} put to the person through the MCP client; operators can decide too (supervisorctl approve {})",
        a.id, a.id
    ));
    let left = Duration::from_millis(u64::try_from(a.deadline_unix_ms - now_ms()).unwrap_or(0));
    let answer = tokio::select! {
        r = rx => r.ok(),
        _ = settled => None,
        _ = tokio::time::sleep(left) => None,
    };
    let Some(answer) = answer else {
        if let Ok(mut w) = shared.waiting.lock() {
            w.remove(&id);
        }
        let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": id, "reason": "the approval was settled"}});
        let _ = out.send(line(&cancel)).await;
        return;
    };
    let parsed = answer
        .get("result")
        .cloned()
        .and_then(|r| serde_json::from_value::<ElicitResult>(r).ok());
    match parsed.and_then(|r| decision(&a, &r)) {
        Some(d) => {
            let _ = decide.send(d).await;
        }
        None => term::diag(&format!(
            "agent mcp-gateway: the approval form for {} was dismissed or not answered; it stays with the operators",
            a.id
        )),
    }
}

/// One JSON-RPC message as a stdout line.
pub fn line(v: &Value) -> Vec<u8> {
    let mut b = v.to_string().into_bytes();
    b.push(b'\n');
    b
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
