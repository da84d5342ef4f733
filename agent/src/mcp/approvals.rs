//! The session's control stream under `agent mcp`: approvals, and the end of
//! the session.
//!
//! An `ask` is always offered to operators by the supervisor. When the config
//! lets the session approve (the supervisor then sends it on this stream) and
//! the MCP client declared form elicitation, it is also put to the person
//! through an MCP elicitation: approve once, approve for the session, or deny;
//! a destructive call offers no session scope and needs its target typed. The
//! answer goes back through the same stream the interactive agent answers on,
//! so the supervisor's approval table decides which answer came first; when
//! someone else decided first, the elicitation is cancelled.
//!
//! A dismissed elicitation (`cancel`) decides nothing: the approval stays
//! with the operators until its deadline.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rmcp::model::{
    ClientResult, ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationSchema, ServerRequest,
};
use rmcp::service::{ElicitationMode, Peer, PeerRequestOptions, RoleServer};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tollgate_proto::{Approval, ApprovalDecision, ApprovalScope};

use crate::approval;
use crate::client::{ControlStream, ServerEvent};
use crate::error::AgentError;
use crate::term;
use crate::text::escape_display;

use super::server::Ended;

/// Lines of diff put into an elicitation; the supervisor caps the diff too.
const MAX_DIFF_LINES: usize = 60;

/// The MCP connection's peer, once it has initialized.
pub type PeerCell = Arc<OnceLock<Peer<RoleServer>>>;

/// Reads the control stream until the session ends. Sets `ended` with the
/// reason when the supervisor revokes or kills the session or goes away.
pub async fn pump(mut control: ControlStream, ended: Ended, peer: PeerCell) {
    let (decide_tx, mut decide_rx) = mpsc::channel::<ApprovalDecision>(16);
    // Elicitations in flight, by approval id: a message there cancels one.
    let mut open: HashMap<String, oneshot::Sender<String>> = HashMap::new();
    loop {
        tokio::select! {
            ev = control.rx.recv() => {
                let why = match ev {
                    Some(ServerEvent::Requested(a)) => {
                        offer(a, &peer, &decide_tx, &mut open);
                        continue;
                    }
                    Some(ServerEvent::Resolved(r)) => {
                        if let Some(tx) = open.remove(&r.approval_id) {
                            let _ = tx.send(approval::resolved_line(&r));
                        }
                        continue;
                    }
                    Some(ServerEvent::Error(msg)) => {
                        term::diag(&format!(
                            "agent mcp: the supervisor did not accept a decision: {}",
                            escape_display(&msg, false)
                        ));
                        continue;
                    }
                    Some(ServerEvent::Ended { reason, .. }) => AgentError::Revoked(reason).to_string(),
                    Some(ServerEvent::Closed(msg)) => AgentError::Lost(msg).to_string(),
                    None => AgentError::Lost("the session's stream ended".into()).to_string(),
                };
                ended.send_if_modified(|cur| {
                    if cur.is_none() {
                        *cur = Some(why.clone());
                        true
                    } else {
                        false
                    }
                });
                term::diag(&format!("agent mcp: {}", escape_display(&why, false)));
                for (_, tx) in open.drain() {
                    let _ = tx.send("the session ended".into());
                }
                return;
            }
            Some(d) = decide_rx.recv() => control.decide(d).await,
        }
    }
}

/// Puts an approval to the person when the client can ask them.
fn offer(
    a: Approval,
    peer: &PeerCell,
    decide: &mpsc::Sender<ApprovalDecision>,
    open: &mut HashMap<String, oneshot::Sender<String>>,
) {
    let asks = peer.get().filter(|p| {
        p.supported_elicitation_modes()
            .contains(&ElicitationMode::Form)
    });
    let Some(peer) = asks else {
        term::diag(&format!(
            "agent mcp: approval {} is waiting for an operator: {} (supervisorctl approve {}); the MCP client cannot ask (no form elicitation)",
            a.id,
            escape_display(&a.consequence, false),
            a.id
        ));
        return;
    };
    term::diag(&format!(
        "agent mcp: approval {} put to the person through the MCP client; operators can decide too (supervisorctl approve {})",
        a.id, a.id
    ));
    let (tx, rx) = oneshot::channel();
    open.insert(a.id.clone(), tx);
    tokio::spawn(elicit(peer.clone(), a, decide.clone(), rx));
}

enum Waited {
    Answer(Result<Result<ClientResult, rmcp::ServiceError>, oneshot::error::RecvError>),
    Settled(String),
    Deadline,
}

/// One elicitation, from request to decision (or cancellation).
async fn elicit(
    peer: Peer<RoleServer>,
    a: Approval,
    decide: mpsc::Sender<ApprovalDecision>,
    settled: oneshot::Receiver<String>,
) {
    let schema = match ElicitationSchema::from_json_schema(schema_json(&a)) {
        Ok(s) => s,
        Err(e) => {
            term::diag(&format!("agent mcp: cannot build the approval form: {e}"));
            return;
        }
    };
    let params = ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: message(&a),
        requested_schema: schema,
    };
    let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
    let mut handle = match peer
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await
    {
        Ok(h) => h,
        Err(e) => {
            term::diag(&format!(
                "agent mcp: could not ask through the MCP client ({e}); approval {} stays with the operators",
                a.id
            ));
            return;
        }
    };
    let left = Duration::from_millis(u64::try_from(a.deadline_unix_ms - now_ms()).unwrap_or(0));
    let waited = tokio::select! {
        r = &mut handle.rx => Waited::Answer(r),
        why = settled => Waited::Settled(why.unwrap_or_else(|_| "the session ended".into())),
        _ = tokio::time::sleep(left) => Waited::Deadline,
    };
    let answer = match waited {
        Waited::Answer(Ok(Ok(ClientResult::ElicitResult(r)))) => r,
        Waited::Answer(Ok(Ok(_))) => {
            term::diag(
                "agent mcp: the MCP client answered the approval form with something else; it stays with the operators",
            );
            return;
        }
        Waited::Answer(Ok(Err(e))) => {
            term::diag(&format!(
                "agent mcp: the MCP client did not answer the approval form ({e}); approval {} stays with the operators",
                a.id
            ));
            return;
        }
        Waited::Answer(Err(_)) => return,
        Waited::Settled(why) => {
            let _ = handle.cancel(Some(why)).await;
            return;
        }
        Waited::Deadline => {
            let _ = handle
                .cancel(Some("the approval's deadline passed".into()))
                .await;
            return;
        }
    };
    if let Some(d) = decision(&a, &answer) {
        let _ = decide.send(d).await;
    } else {
        term::diag(&format!(
            "agent mcp: the approval form for {} was dismissed; it stays with the operators",
            a.id
        ));
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The decision for an answered form; `None` when the person dismissed it.
/// Anything but a clear approval (with the exact target typed, for a
/// destructive call) is a denial. The denial carries no reason: the model is
/// told exactly the contract's sentence.
pub fn decision(a: &Approval, answer: &ElicitResult) -> Option<ApprovalDecision> {
    let deny = approval::decision(a, false, ApprovalScope::Once);
    match answer.action {
        ElicitationAction::Accept => {}
        ElicitationAction::Decline => return Some(deny),
        ElicitationAction::Cancel => return None,
        // A future action is not an approval.
        _ => return Some(deny),
    }
    let content = answer.content.as_ref();
    let field = |k: &str| content.and_then(|c| c.get(k)).and_then(Value::as_str);
    let scope = match field("decision") {
        Some("once") => ApprovalScope::Once,
        Some("session") if !a.destructive => ApprovalScope::Session,
        _ => return Some(deny),
    };
    let mut confirm = String::new();
    if a.destructive {
        let typed = field("confirm").unwrap_or("");
        if !approval::confirmation_matches(a, typed) {
            return Some(deny);
        }
        confirm = typed.to_string();
    }
    Some(ApprovalDecision {
        confirm,
        ..approval::decision(a, true, scope)
    })
}

/// The form: a decision, and for a destructive call the target typed.
/// Plain `enum` + `enumNames` (valid in 2025-06-18 and still in 2025-11-25).
pub fn schema_json(a: &Approval) -> serde_json::Map<String, Value> {
    let (values, names) = if a.destructive {
        (json!(["once", "deny"]), json!(["Approve once", "Deny"]))
    } else {
        (
            json!(["once", "session", "deny"]),
            json!([
                "Approve once",
                "Approve for the rest of this session",
                "Deny"
            ]),
        )
    };
    let mut properties = json!({
        "decision": {
            "type": "string",
            "title": "Decision",
            "enum": values,
            "enumNames": names,
        }
    });
    if a.destructive {
        properties["confirm"] = json!({
            "type": "string",
            "title": "Type the target to confirm",
            "description": format!("To approve, type exactly: {}", a.target),
        });
    }
    let schema = json!({
        "type": "object",
        "properties": properties,
        "required": ["decision"],
    });
    match schema {
        Value::Object(m) => m,
        _ => serde_json::Map::new(),
    }
}

/// What the person reads: the consequence first, then the details and diff.
pub fn message(a: &Approval) -> String {
    let mut lines = vec![approval::headline(a)];
    let mut details = format!("{} · approval {}", escape_display(&a.tool, false), a.id);
    if !a.rule.is_empty() {
        details.push_str(&format!(" · rule {}", escape_display(&a.rule, false)));
    }
    lines.push(details);
    if !a.diff.trim().is_empty() {
        let total = a.diff.lines().count();
        lines.extend(
            a.diff
                .lines()
                .take(MAX_DIFF_LINES)
                .map(|l| escape_display(l, false)),
        );
        if total > MAX_DIFF_LINES {
            lines.push(format!("… {} more diff lines", total - MAX_DIFF_LINES));
        }
    } else if !a.arguments_json.is_empty() {
        lines.push(format!(
            "arguments: {}",
            escape_display(&crate::text::truncate_chars(&a.arguments_json, 400), false)
        ));
    }
    if a.destructive {
        lines.push(format!(
            "This cannot be undone. To approve, choose \"Approve once\" and type the target exactly: {}",
            escape_display(&a.target, false)
        ));
    }
    lines.push(format!(
        "Operators can decide too (supervisorctl approve {}); the first answer wins.",
        a.id
    ));
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approval(destructive: bool) -> Approval {
        Approval {
            id: "ap1".into(),
            session_id: "s".into(),
            tool: "run_bash".into(),
            consequence: "run `rm -r build` in the sandbox (no network)".into(),
            destructive,
            target: "rm -r build".into(),
            deadline_unix_ms: 1,
            ..Default::default()
        }
    }

    fn answer(action: ElicitationAction, content: Option<Value>) -> ElicitResult {
        let r = ElicitResult::new(action);
        match content {
            Some(c) => r.with_content(c),
            None => r,
        }
    }

    fn verdict(a: &Approval, r: &ElicitResult) -> Option<(bool, String, String)> {
        decision(a, r).map(|d| (d.approve, d.scope, d.confirm))
    }

    #[test]
    fn approve_once_or_for_the_session() {
        let a = approval(false);
        let once = answer(ElicitationAction::Accept, Some(json!({"decision": "once"})));
        assert_eq!(
            verdict(&a, &once),
            Some((true, "once".into(), String::new()))
        );
        let session = answer(
            ElicitationAction::Accept,
            Some(json!({"decision": "session"})),
        );
        assert_eq!(
            verdict(&a, &session),
            Some((true, "session".into(), String::new()))
        );
    }

    #[test]
    fn anything_unclear_is_a_denial_and_a_dismissal_decides_nothing() {
        let a = approval(false);
        let deny = Some((false, "once".to_string(), String::new()));
        for r in [
            answer(ElicitationAction::Accept, Some(json!({"decision": "deny"}))),
            answer(
                ElicitationAction::Accept,
                Some(json!({"decision": "yes please"})),
            ),
            answer(ElicitationAction::Accept, Some(json!({}))),
            answer(ElicitationAction::Accept, None),
            answer(ElicitationAction::Decline, None),
        ] {
            assert_eq!(verdict(&a, &r), deny, "{r:?}");
        }
        assert_eq!(verdict(&a, &answer(ElicitationAction::Cancel, None)), None);
    }

    #[test]
    fn a_destructive_call_needs_the_exact_target_and_is_never_for_the_session() {
        let a = approval(true);
        let deny = Some((false, "once".to_string(), String::new()));
        let typed = answer(
            ElicitationAction::Accept,
            Some(json!({"decision": "once", "confirm": "rm -r build"})),
        );
        assert_eq!(
            verdict(&a, &typed),
            Some((true, "once".into(), "rm -r build".into()))
        );
        for r in [
            answer(ElicitationAction::Accept, Some(json!({"decision": "once"}))),
            answer(
                ElicitationAction::Accept,
                Some(json!({"decision": "once", "confirm": "rm -r build "})),
            ),
            answer(
                ElicitationAction::Accept,
                Some(json!({"decision": "session", "confirm": "rm -r build"})),
            ),
        ] {
            assert_eq!(verdict(&a, &r), deny, "{r:?}");
        }
    }

    #[test]
    fn the_form_is_a_valid_elicitation_schema() {
        for destructive in [false, true] {
            let a = approval(destructive);
            let s = ElicitationSchema::from_json_schema(schema_json(&a)).unwrap();
            let wire = serde_json::to_value(&s).unwrap();
            assert_eq!(wire["required"], json!(["decision"]));
            assert_eq!(
                wire["properties"].get("confirm").is_some(),
                destructive,
                "{wire}"
            );
            let values = wire["properties"]["decision"]["enum"]
                .as_array()
                .unwrap()
                .len();
            assert_eq!(values, if destructive { 2 } else { 3 }, "{wire}");
        }
    }

    #[test]
    fn the_message_leads_with_the_consequence() {
        let m = message(&approval(true));
        let lines: Vec<&str> = m.lines().collect();
        assert_eq!(
            lines[0],
            "⚠ About to run `rm -r build` in the sandbox (no network) — DESTRUCTIVE: cannot be undone"
        );
        assert!(m.contains("type the target exactly: rm -r build"), "{m}");
        assert!(
            m.ends_with("(supervisorctl approve ap1); the first answer wins."),
            "{m}"
        );
    }
}
