//! The MCP protocol requests the gateway decides (docs/INTERFACES.md, "MCP
//! gateway"): the wrapped server's requests to the client
//! (`sampling/createMessage`, `elicitation/create`, `roots/list`, …) and the
//! client's `resources/*` and `prompts/*`. Each is decided by the rules
//! `mcp(SERVER.METHOD)` (refused unless one allows it) and recorded as a
//! `permission_check` before it is passed on; one that cannot be recorded
//! is refused.

use serde_json::Value;
use tollgate_audit::event as audit;
use tollgate_audit::{Durable, Event, Priority};
use tollgate_policy::Verdict;

use crate::events::Log;
use crate::sessions::Session;
use crate::supervisor::Supervisor;

/// The JSON-RPC error code of a request tollgate refused (implementation
/// defined range).
pub const REFUSED: i64 = -32001;

/// Who sent a decided request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asker {
    Client,
    Server,
}

/// Decides and records `method` (JSON-RPC id `id`) of the server `server`'s
/// connection; `Err` is the refusal's message, saying why.
pub fn decide(
    sup: &Supervisor,
    session: &Session,
    server: &str,
    (method, id): (&str, &Value),
    from: Asker,
) -> Result<(), String> {
    let policy = sup.engine.load();
    let d = policy.decide_mcp_method(server, method);
    let who = match from {
        Asker::Client => "the client's",
        Asker::Server => "the MCP server's",
    };
    let check = audit::PermissionCheck {
        call_id: format!("mcp-gw-{server}-{method}-{id}")
            .chars()
            .take(160)
            .collect(),
        tool: tollgate_policy::MCP_RULE_TOOL.to_string(),
        decision: match d.verdict {
            Verdict::Allow => audit::Verdict::Allow,
            Verdict::Ask => audit::Verdict::Ask,
            Verdict::Deny => audit::Verdict::Deny,
        },
        code: d.code.as_str().to_string(),
        rule: d.rule.clone(),
        rule_file: policy.rule_file(d.rule.as_deref()),
        reason: d.reason.clone(),
        consequence: Some(d.consequence.clone()),
        destructive: None,
        target: Some(d.target.clone()),
        args: None,
        allowed_by: None,
        client_tool: None,
        server: Some(server.to_string()),
        mcp_tool: Some(method.to_string()),
    };
    if let Err(e) = sup.recorder.write(
        Log::Session(&session.audit, &session.id),
        Event::PermissionCheck(check),
        Durable::AsConfigured,
        Priority::Ordinary,
    ) {
        sup.audit_refused(&session.id, &format!("an MCP `{method}` request"), &e);
        return Err(format!(
            "tollgate refused {who} `{method}` request: its record cannot be written (AUDIT_UNAVAILABLE: {e})"
        ));
    }
    match d.verdict {
        Verdict::Allow => Ok(()),
        Verdict::Ask | Verdict::Deny => Err(format!(
            "tollgate refused {who} `{method}` request: {}",
            d.reason
        )),
    }
}
