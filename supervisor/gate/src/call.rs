//! The call as a channel proposes it, and how the channel wants it gated.
//! Every channel (CallTool, a client's hook, the MCP gateway, a sandbox's
//! network connection) goes through the one [`crate::authorize()`].

use std::time::Duration;

use tollgate_policy::{Decision, McpToolCall};
use tollgate_toolcall::Tool;

/// A call as its channel proposed it: the id the records carry, the tool
/// the records name (the channel's), and its arguments as received.
#[derive(Debug, Clone, Copy)]
pub struct Proposed<'a> {
    pub call_id: &'a str,
    pub tool: &'a str,
    pub raw_args: &'a str,
    /// The MCP gateway's channel: the wrapped server's tool, decided by its
    /// `mcp(NAME.TOOL)` rules.
    pub mcp: Option<&'a McpToolCall>,
}

/// CallTool's request: a tool call of the agent.
#[derive(Debug, Clone, Default)]
pub struct CallTool {
    /// The model's tool_call id, echoed into the audit log.
    pub call_id: String,
    pub tool: String,
    /// The arguments object as JSON text, exactly as the model produced it.
    pub arguments_json: String,
}

/// CallTool's answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolAnswer {
    /// The tool ran and succeeded (run_bash: it ran, whatever its exit code).
    pub ok: bool,
    /// Output for the model, capped and redacted.
    pub output: String,
    /// run_bash only.
    pub exit_code: Option<i32>,
    pub truncated: bool,
    pub duration_ms: u64,
    /// Set when the gate refused or stopped the call.
    pub denied: Option<crate::Denial>,
    /// Set when the tool was allowed but failed.
    pub error: String,
    /// How the call was allowed.
    pub allowed_by: String,
    /// Why a tool that ran did not succeed, when a code says it.
    pub failure: Option<Failure>,
}

/// Why a tool that ran did not succeed (`ok: false` with this code, its
/// output kept; docs/INTERFACES.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// run_bash: killed when its timeout passed.
    Timeout,
}

impl Failure {
    pub fn as_str(self) -> &'static str {
        match self {
            Failure::Timeout => "TIMEOUT",
        }
    }
}

/// How a channel wants a call gated: when the decision must be durable, how
/// long an approval may wait, whether an ask goes back to the caller.
#[derive(Debug, Clone)]
pub struct Gate {
    /// The decision record must be on disk when [`crate::authorize()`] returns: the
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
    pub fn call_tool(config: &tollgate_config::Config) -> Gate {
        Gate {
            durable_now: false,
            approval_wait: Duration::from_secs(config.session.approval_timeout_s),
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
