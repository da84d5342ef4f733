//! tollgate-policy: the pure decision core of the policy enforcement point.
//!
//! Given a tool call the model proposed and the session it belongs to, the
//! [`Engine`] decides allow, ask or deny, and says why in words both the model
//! and a person understand. It owns the tool registry, argument validation, the
//! hard floor (path scope, secrets, shell analysis, the SSRF guard), the
//! configured rules, the always-confirm tier and the modes.
//!
//! It must never do I/O of its own: filesystem facts, DNS answers and the
//! host's own addresses come in through the [`FsFacts`] and [`Resolver`]
//! traits, so it is unit-tested and fuzzed without a disk or a network. It
//! must never execute anything. The real implementations of those traits
//! (the host filesystem, the system resolver, the host's addresses and
//! users) live in [`host`], behind the `host` feature, which the engine
//! never calls.

#![forbid(unsafe_code)]

#[doc(hidden)]
pub mod bench_input;
pub mod clients;
mod config;
pub mod credentials;
mod decision;
mod display;
pub mod egress;
mod engine;
mod facts;
#[cfg(feature = "host")]
pub mod host;
mod host_addrs;
pub mod host_exec;
mod mcp;
mod mode;
pub mod network;
mod paths;
pub mod policy_test;
mod registry;
mod rules;
pub mod secrets;
mod shell;
mod ssrf;
mod validate;

pub use config::{LiftPattern, PolicyConfig, RuleSpec};
pub use decision::{Code, Decision, Verdict, VettedFetch};
pub use display::{cut_for_display, escape_for_display, escape_preview};
pub use engine::{Context, Engine};
pub use facts::{
    FileFacts, FileKind, FsFacts, ResolveError, Resolver, SearchFacts, SearchWalk, Walked,
};
pub use host_addrs::{HostAddrs, HostAddrsError};
pub use mcp::{MCP_RULE_TOOL, McpToolCall, check_server_name, is_decided_method};
pub use mode::{Mode, ModeCap};
pub use paths::is_secret_file_name;
pub use registry::{
    RUN_BASH_DESCRIPTION, RUN_BASH_SH_DESCRIPTION, RUN_BASH_SHELL_UNKNOWN_DESCRIPTION, ToolClass,
    ToolSpec, gated_tools, lookup, offered, registry, spec,
};
pub use rules::rule_label;
pub use shell::parsing_untrusted_input;
pub use shell::patterns::{Pattern as ShellPattern, PatternSet as ShellPatternSet};
/// The tools as types (see the `tollgate-toolcall` crate).
pub use tollgate_toolcall::{self as tool, Tool, ToolCall, ToolName};

/// Errors building an [`Engine`] from configuration.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("invalid rule {rule:?}: {reason}")]
    InvalidRule { rule: String, reason: String },
    #[error("rule {rule:?} fails its own example {example:?}: {reason}")]
    ExampleFailed {
        rule: String,
        example: String,
        reason: String,
    },
    #[error(
        "unknown mode {0:?} (expected default, acceptEdits, plan, dontAsk or dangerouslySkipPermissions)"
    )]
    UnknownMode(String),
    #[error("mode {mode} is not permitted: {reason}")]
    ModeNotPermitted { mode: Mode, reason: String },
}
