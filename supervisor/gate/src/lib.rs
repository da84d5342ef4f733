//! tollgate-gate: the policy enforcement point. The one place that calls
//! the policy engine, then the audit log, then the tool executors and the
//! sandbox backends, for every channel a call comes in by: the agent's
//! CallTool, a client's hook (and its routed shell command), the MCP
//! gateway (docs/ARCHITECTURE.md "The PEP pipeline").
//!
//! Order for every call:
//! 1. the session is active and the call is counted against its cap;
//! 2. the policy engine (allowlist, validation, hard floor, rules,
//!    always-confirm, mode), then session-scope grants and `auto_approve`
//!    for the non-destructive ask tier, then the disk floor;
//! 3. the decision record, durable before anything runs (no record, no
//!    run: AUDIT_UNAVAILABLE);
//! 4. an approval when the verdict is ask;
//! 5. execution, with `tool_started` before and `tool_result` after.
//!
//! Steps 1 to 4 are [`authorize()`], which every channel runs. The gate
//! speaks no protobuf: its types become the wire's in the daemon's
//! `wire.rs`. It must never run a tool whose decision record was not
//! written, never release output before the records it depends on are
//! durable, and never weaken a sandbox.

#![forbid(unsafe_code)]

pub mod approvals;
mod ask;
mod authorize;
mod call;
mod call_tool;
pub mod credentials;
mod denial;
pub mod disk;
mod exec;
mod host;
pub mod in_force;
pub mod jobs;
mod mcp;
pub mod network;
mod records;
mod routed;
pub mod session;
#[cfg(test)]
mod tests;

pub use authorize::{authorize, record_harmless};
pub use call::{CallTool, Cleared, Failure, Gate, Proposed, ToolAnswer};
pub use call_tool::call_tool;
pub use denial::{Denial, denial_of, revoked};
pub use exec::inferred::ReadOnlyRoot;
pub use exec::notes::WallNotes;
pub use exec::sandbox::{session_sandbox, warm_sandbox};
pub use host::{Ctx, Host};
pub use in_force::InForce;
pub use mcp::{McpAnswer, McpCall, mcp_tool_call};
pub use records::{AUDIT_EXCERPT, excerpt, excerpt_of};
pub use routed::{ExitStatus, ROUTED_NOT_RUN, RoutedCommand, ShellOut, run_routed};
