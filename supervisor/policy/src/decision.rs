//! The engine's answer.

use std::net::SocketAddr;

use serde::Serialize;

/// Allow, ask or deny (one type, from the engine to the audit log).
pub use tollgate_toolcall::Verdict;

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
    /// The `policy.d/` drop-in that brought `rule`, as the gate found it
    /// (the engine knows no files); `None` for the config file's own rules
    /// and for floors and modes.
    #[serde(skip)]
    pub rule_file: Option<String>,
}

impl Decision {
    /// One decision for several calls made as one (a patch that touches
    /// several files): the strictest verdict wins. A deny is the first deny,
    /// whole (its reason names its file); otherwise the first part with the
    /// winning verdict gives the code, reason and rule, the consequences and
    /// targets of every part are joined, and the call is destructive or
    /// touches a secret when any part does.
    pub fn combine(parts: Vec<Decision>) -> Decision {
        let Some(verdict) = parts.iter().map(|d| d.verdict).max() else {
            return Decision::deny(
                Code::InvalidArgs,
                "the call names nothing to decide, so it is refused.",
                Some("schema"),
            );
        };
        if parts.len() == 1 || verdict == Verdict::Deny {
            return parts
                .into_iter()
                .find(|d| d.verdict == verdict)
                .unwrap_or_else(|| {
                    Decision::deny(Code::PolicyDenied, "no decision", Some("combine"))
                });
        }
        let join = |f: fn(&Decision) -> &str, sep: &str| {
            parts
                .iter()
                .map(f)
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(sep)
        };
        let consequence = join(|d| &d.consequence, "; ");
        let target = join(|d| &d.target, ", ");
        let destructive = parts.iter().any(|d| d.destructive);
        let secret = parts.iter().any(|d| d.secret);
        let first = parts.into_iter().find(|d| d.verdict == verdict);
        let Some(mut d) = first else {
            return Decision::deny(Code::PolicyDenied, "no decision", Some("combine"));
        };
        d.consequence = consequence;
        d.target = target;
        d.destructive = destructive;
        d.secret = secret;
        d.path = None;
        d.fetch = None;
        d
    }

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
            rule_file: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(verdict: Verdict, consequence: &str, target: &str, destructive: bool) -> Decision {
        Decision {
            verdict,
            code: match verdict {
                Verdict::Allow => Code::Ok,
                Verdict::Ask => Code::ApprovalRequired,
                Verdict::Deny => Code::PolicyDenied,
            },
            reason: format!("{consequence}: {}", verdict.as_str()),
            rule: Some(format!("rule-{consequence}")),
            destructive,
            consequence: consequence.to_string(),
            target: target.to_string(),
            path: Some(target.into()),
            fetch: None,
            secret: false,
            rule_file: None,
        }
    }

    #[test]
    fn combine_takes_the_strictest_and_joins_the_rest() {
        let d = Decision::combine(vec![
            part(Verdict::Allow, "create a", "a", false),
            part(Verdict::Ask, "overwrite b", "b", true),
            part(Verdict::Allow, "create c", "c", false),
        ]);
        assert_eq!(d.verdict, Verdict::Ask);
        assert_eq!(d.rule.as_deref(), Some("rule-overwrite b"));
        assert_eq!(d.consequence, "create a; overwrite b; create c");
        assert_eq!(d.target, "a, b, c");
        assert!(d.destructive);
        assert_eq!(d.path, None);

        let d = Decision::combine(vec![
            part(Verdict::Allow, "create a", "a", false),
            part(Verdict::Deny, "write /etc/x", "/etc/x", false),
            part(Verdict::Deny, "write /etc/y", "/etc/y", false),
        ]);
        assert_eq!(d, part(Verdict::Deny, "write /etc/x", "/etc/x", false));

        let one = part(Verdict::Allow, "create a", "a", false);
        assert_eq!(Decision::combine(vec![one.clone()]), one);
        assert_eq!(Decision::combine(vec![]).verdict, Verdict::Deny);
    }
}
