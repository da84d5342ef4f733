//! Denials: why a call was refused, in words for the model. The code is the
//! engine's [`Code`] (one type, from the policy to the wire); the daemon's
//! `wire.rs` turns a [`Denial`] into protobuf.

use tollgate_policy::{Code, Decision};

use crate::host::Ctx;
use crate::session::Session;

/// A structured refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    pub code: Code,
    /// Written for the model: what happened and what to do instead.
    pub reason: String,
    /// The rule that matched, empty when no named rule applies.
    pub rule: String,
    /// What the call would have done, in words.
    pub consequence: String,
    pub destructive: bool,
}

/// The one constructor of a denial: its code, the sentence for the model,
/// the rule, and `about` the decision it concerns (its consequence, and
/// whether it was destructive).
pub fn denial(code: Code, reason: String, rule: &str, about: Option<&Decision>) -> Denial {
    Denial {
        code,
        reason,
        rule: rule.to_string(),
        consequence: about.map(|d| d.consequence.clone()).unwrap_or_default(),
        destructive: about.is_some_and(|d| d.destructive),
    }
}

/// The denial of an engine's (or the pipeline's) decision.
pub fn denial_of(d: &Decision) -> Denial {
    let rule = d.rule.as_deref().unwrap_or_default();
    denial(d.code, d.reason.clone(), rule, Some(d))
}

/// The session ended (revoked, killed, closed, expired): stop.
pub fn revoked(session: &Session) -> Denial {
    let why = session.end_reason();
    let reason = format!(
        "the session was {} ({}). Stop.",
        session.state().as_str(),
        if why.is_empty() {
            "no reason given"
        } else {
            &why
        }
    );
    denial(Code::SessionRevoked, reason, "session", None)
}

/// A call refused because its audit record could not be written: counted
/// and logged (rate-limited) by the supervisor, and said to the model.
pub(crate) fn audit_unavailable(cx: &Ctx, tool: &str, e: &tollgate_audit::AuditError) -> Denial {
    cx.host.audit_refused(
        &cx.session.id,
        &format!("{tool} call of session {}", cx.session.id),
        e,
    );
    audit_unavailable_denial(e)
}

/// A call refused because what its record needs (an approval's id) could
/// not be made.
pub(crate) fn audit_unavailable_msg(e: &dyn std::fmt::Display) -> Denial {
    tracing::error!(error = %e, "refusing the call");
    audit_unavailable_denial(e)
}

fn audit_unavailable_denial(e: &dyn std::fmt::Display) -> Denial {
    let reason = format!(
        "the audit log cannot be written ({e}), so nothing may run. Tell the user; do not retry until it is fixed."
    );
    denial(Code::AuditUnavailable, reason, "floor:audit", None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_denial_carries_its_decision_or_nothing() {
        let mut d = Decision::deny(Code::PolicyDenied, "no", Some("r"));
        d.consequence = "run `x`".into();
        d.destructive = true;
        let got = denial(Code::UserDenied, "why".into(), "approval", Some(&d));
        assert_eq!(
            got,
            Denial {
                code: Code::UserDenied,
                reason: "why".into(),
                rule: "approval".into(),
                consequence: "run `x`".into(),
                destructive: true,
            }
        );
        let bare = denial(Code::CapReached, "cap".into(), "cap:max_tool_calls", None);
        assert_eq!((bare.consequence.as_str(), bare.destructive), ("", false));
        assert_eq!(denial_of(&d).rule, "r");
    }
}
