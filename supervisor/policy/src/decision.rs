//! The engine's answer.

use std::net::SocketAddr;

use serde::Serialize;

/// Allow, ask or deny. Ordered so the strictest wins: `Allow < Ask < Deny`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Allow,
    Ask,
    Deny,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Ask => "ask",
            Verdict::Deny => "deny",
        }
    }
}

/// Machine-readable code. The denial codes match the proto's `DenialCode`
/// names; `Ok` and `ApprovalRequired` go with allow and ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Code {
    Ok,
    ApprovalRequired,
    UnknownTool,
    NotInAllowlist,
    InvalidArgs,
    PolicyDenied,
    UserDenied,
    ApprovalTimeout,
    CapReached,
    SessionRevoked,
    SandboxUnavailable,
    AuditUnavailable,
}

impl Code {
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Ok => "OK",
            Code::ApprovalRequired => "APPROVAL_REQUIRED",
            Code::UnknownTool => "UNKNOWN_TOOL",
            Code::NotInAllowlist => "NOT_IN_ALLOWLIST",
            Code::InvalidArgs => "INVALID_ARGS",
            Code::PolicyDenied => "POLICY_DENIED",
            Code::UserDenied => "USER_DENIED",
            Code::ApprovalTimeout => "APPROVAL_TIMEOUT",
            Code::CapReached => "CAP_REACHED",
            Code::SessionRevoked => "SESSION_REVOKED",
            Code::SandboxUnavailable => "SANDBOX_UNAVAILABLE",
            Code::AuditUnavailable => "AUDIT_UNAVAILABLE",
        }
    }
}

/// What a webfetch may connect to: the URL and the addresses the SSRF guard
/// vetted. The fetch must connect to one of these and nothing else.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VettedFetch {
    pub url: String,
    pub host: String,
    pub addrs: Vec<SocketAddr>,
}

/// The decision on one tool call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    #[serde(rename = "decision")]
    pub verdict: Verdict,
    pub code: Code,
    /// A sentence for the model (and the person reading the audit log).
    pub reason: String,
    /// The rule that matched: `deny: run_bash(curl*)`, `floor:path-scope`,
    /// `mode:default`, ... `None` when nothing named applies.
    pub rule: Option<String>,
    /// Always-confirm tier: needs a typed second confirmation; refused in
    /// dangerouslySkipPermissions.
    pub destructive: bool,
    /// What the call would do, in words.
    pub consequence: String,
    /// The normalised target (workspace-relative path, command text, URL):
    /// the key for session-scope approvals and what a destructive
    /// confirmation must type.
    #[serde(skip)]
    pub target: String,
    /// For path tools: the resolved absolute path the call may touch.
    #[serde(skip)]
    pub path: Option<std::path::PathBuf>,
    /// For webfetch: the vetted URL and addresses to pin.
    #[serde(skip)]
    pub fetch: Option<VettedFetch>,
    /// The call touches a workspace secret file: its content is redacted in the audit.
    #[serde(skip)]
    pub secret: bool,
}

impl Decision {
    /// A deny with no rule, target or path: the common shape of early refusals.
    pub fn deny(code: Code, reason: impl Into<String>, rule: Option<&str>) -> Decision {
        Decision {
            verdict: Verdict::Deny,
            code,
            reason: reason.into(),
            rule: rule.map(str::to_string),
            destructive: false,
            consequence: String::new(),
            target: String::new(),
            path: None,
            fetch: None,
            secret: false,
        }
    }
}
