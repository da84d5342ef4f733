//! Approvals: an `ask` decision waiting for a person (docs/ARCHITECTURE.md,
//! "The PEP pipeline", step 5).
//!
//! Each pending approval holds a one-shot channel to the waiting call. The
//! first decision takes the sender out of the table, so it wins; everyone
//! after it is told who decided. This module only keeps the table and checks
//! a decision is well-formed; `ask.rs` waits, audits and acts. These are
//! domain types: the daemon's `wire.rs` turns them into protobuf.

use std::collections::{HashMap, VecDeque};

use parking_lot::Mutex;
use tokio::sync::oneshot;
use tollgate_policy::Code;

/// How an approval ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Approved { scope: Scope },
    Denied { reason: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Once,
    Session,
}

impl Scope {
    pub fn parse(s: &str) -> Result<Scope, String> {
        match s {
            "" | "once" => Ok(Scope::Once),
            "session" => Ok(Scope::Session),
            other => Err(format!(
                "unknown approval scope {other:?} (expected once or session)"
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Once => "once",
            Scope::Session => "session",
        }
    }
}

/// Where an approval stands: pending, or how it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Pending,
    Approved,
    Denied,
    Timeout,
    Withdrawn,
}

impl Status {
    /// The name the wire and the listings use.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Approved => "approved",
            Status::Denied => "denied",
            Status::Timeout => "timeout",
            Status::Withdrawn => "withdrawn",
        }
    }

    /// The audit log's name for an ended approval (`None` while pending).
    pub fn outcome(self) -> Option<tollgate_audit::event::ApprovalOutcome> {
        use tollgate_audit::event::ApprovalOutcome as O;
        match self {
            Status::Pending => None,
            Status::Approved => Some(O::Approved),
            Status::Denied => Some(O::Denied),
            Status::Timeout => Some(O::Timeout),
            Status::Withdrawn => Some(O::Withdrawn),
        }
    }
}

/// An approval as operators and the session see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    pub id: String,
    pub session_id: String,
    pub tool: String,
    pub consequence: String,
    /// Unified diff preview for write_file / edit_file (capped).
    pub diff: String,
    pub destructive: bool,
    /// The normalised target; a destructive approval is confirmed by typing it.
    pub target: String,
    pub created_unix_ms: i64,
    pub deadline_unix_ms: i64,
    pub rule: String,
    pub reason: String,
    /// Redacted, truncated arguments for display.
    pub arguments_json: String,
    pub status: Status,
    pub uid: u32,
}

/// A person's answer to an approval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub approval_id: String,
    pub approve: bool,
    pub scope: Scope,
    /// For a destructive approval: the target, typed again.
    pub confirm: String,
    pub reason: String,
}

/// What the session's control stream is told. The payloads are boxed: the
/// stream's ring holds 64 of these for every session, idle or not
/// (docs/PERFORMANCE.md "supervisor RSS").
#[derive(Debug, Clone, PartialEq)]
pub enum Notice {
    Requested(Box<Approval>),
    Resolved(Box<Resolved>),
    /// The session ended: the code and why.
    Ended {
        code: Code,
        reason: String,
    },
}

/// An approval ended: how, by whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub approval_id: String,
    pub outcome: Status,
    pub decided_by: String,
    pub scope: Option<Scope>,
    pub reason: String,
}

impl Resolved {
    /// Ended with `outcome` by `by`, with no scope and no reason.
    pub fn new(id: &str, outcome: Status, by: &str) -> Resolved {
        Resolved {
            approval_id: id.to_string(),
            outcome,
            decided_by: by.to_string(),
            scope: None,
            reason: String::new(),
        }
    }
}

/// A decision and who made it ("uid 0 via operator", "uid 1000 via session").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    pub outcome: Outcome,
    pub decided_by: String,
}

struct Pending {
    approval: Approval,
    tx: oneshot::Sender<Resolution>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecideError {
    #[error("approval {0} is unknown")]
    Unknown(String),
    #[error("approval {id} was already {status}{by}")]
    AlreadyDecided {
        id: String,
        status: String,
        by: String,
    },
    #[error(
        "approval {id} is destructive ({consequence}): confirm by typing the target, e.g. --confirm {target:?}"
    )]
    NeedsConfirm {
        id: String,
        consequence: String,
        target: String,
    },
    #[error("confirmation {given:?} does not match the target {target:?} of approval {id}")]
    ConfirmMismatch {
        id: String,
        given: String,
        target: String,
    },
    #[error("approval {0} belongs to another session")]
    OtherSession(String),
    #[error("{0}")]
    BadScope(String),
}

const DECIDED_KEPT: usize = 512;

/// The table of approvals.
#[derive(Default)]
pub struct Approvals {
    pending: Mutex<HashMap<String, Pending>>,
    /// Decided approvals (newest last), with `status` set, for listings and
    /// "already decided" answers.
    decided: Mutex<VecDeque<(Approval, String)>>,
}

impl Approvals {
    /// Registers a pending approval; the receiver yields its resolution.
    pub fn open(&self, approval: Approval) -> oneshot::Receiver<Resolution> {
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .insert(approval.id.clone(), Pending { approval, tx });
        rx
    }

    /// Decides a pending approval. `session` restricts the decision to that
    /// session's approvals (decisions from the agent's own stream).
    pub fn decide(
        &self,
        d: &Answer,
        decided_by: &str,
        session: Option<&str>,
    ) -> Result<Approval, DecideError> {
        let scope = d.scope;
        let mut pending = self.pending.lock();
        let Some(p) = pending.get(&d.approval_id) else {
            drop(pending);
            return Err(self.not_pending(&d.approval_id));
        };
        if let Some(sid) = session
            && p.approval.session_id != sid
        {
            return Err(DecideError::OtherSession(d.approval_id.clone()));
        }
        if d.approve && p.approval.destructive {
            if d.confirm.is_empty() {
                return Err(DecideError::NeedsConfirm {
                    id: d.approval_id.clone(),
                    consequence: p.approval.consequence.clone(),
                    target: p.approval.target.clone(),
                });
            }
            if d.confirm != p.approval.target {
                return Err(DecideError::ConfirmMismatch {
                    id: d.approval_id.clone(),
                    given: d.confirm.clone(),
                    target: p.approval.target.clone(),
                });
            }
        }
        let Some(p) = pending.remove(&d.approval_id) else {
            return Err(DecideError::Unknown(d.approval_id.clone()));
        };
        drop(pending);
        let outcome = if d.approve {
            Outcome::Approved { scope }
        } else {
            Outcome::Denied {
                reason: d.reason.clone(),
            }
        };
        let mut approval = p.approval;
        approval.status = if d.approve {
            Status::Approved
        } else {
            Status::Denied
        };
        self.remember(approval.clone(), decided_by);
        // The waiter may be gone (call cancelled a moment ago); the decision
        // still stands in the record.
        let _ = p.tx.send(Resolution {
            outcome,
            decided_by: decided_by.to_string(),
        });
        Ok(approval)
    }

    /// Ends a pending approval without a person (timeout, withdrawn). Returns
    /// it when it was still pending (so the caller audits exactly once).
    pub fn close(&self, id: &str, status: Status, by: &str) -> Option<Approval> {
        let p = self.pending.lock().remove(id)?;
        let mut approval = p.approval;
        approval.status = status;
        self.remember(approval.clone(), by);
        Some(approval)
    }

    fn remember(&self, approval: Approval, by: &str) {
        let mut decided = self.decided.lock();
        decided.push_back((approval, by.to_string()));
        while decided.len() > DECIDED_KEPT {
            decided.pop_front();
        }
    }

    fn not_pending(&self, id: &str) -> DecideError {
        let decided = self.decided.lock();
        match decided.iter().rev().find(|(a, _)| a.id == id) {
            Some((a, by)) => DecideError::AlreadyDecided {
                id: id.to_string(),
                status: match a.status {
                    Status::Timeout => "timed out".to_string(),
                    other => other.as_str().to_string(),
                },
                by: if by.is_empty() {
                    String::new()
                } else {
                    format!(" by {by}")
                },
            },
            None => DecideError::Unknown(id.to_string()),
        }
    }

    pub fn list(&self, include_decided: bool) -> Vec<Approval> {
        let mut v: Vec<Approval> = self
            .pending
            .lock()
            .values()
            .map(|p| p.approval.clone())
            .collect();
        v.sort_by_key(|a| a.created_unix_ms);
        if include_decided {
            v.extend(self.decided.lock().iter().map(|(a, _)| a.clone()));
        }
        v
    }

    pub fn pending_for(&self, session: &str) -> Vec<Approval> {
        self.pending
            .lock()
            .values()
            .filter(|p| p.approval.session_id == session)
            .map(|p| p.approval.clone())
            .collect()
    }

    pub fn pending_count(&self) -> usize {
        self.pending.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approval(id: &str, destructive: bool) -> Approval {
        Approval {
            id: id.to_string(),
            session_id: "S".to_string(),
            tool: "write_file".to_string(),
            consequence: "overwrite README.md".to_string(),
            destructive,
            target: "README.md".to_string(),
            diff: String::new(),
            created_unix_ms: 0,
            deadline_unix_ms: 0,
            rule: String::new(),
            reason: String::new(),
            arguments_json: String::new(),
            status: Status::Pending,
            uid: 0,
        }
    }

    fn decision(id: &str, approve: bool, confirm: &str) -> Answer {
        Answer {
            approval_id: id.to_string(),
            approve,
            scope: Scope::Once,
            confirm: confirm.to_string(),
            reason: String::new(),
        }
    }

    #[test]
    fn first_decision_wins() {
        let a = Approvals::default();
        let mut rx = a.open(approval("A1", false));
        a.decide(&decision("A1", true, ""), "uid 0 via operator", None)
            .unwrap();
        let err = a
            .decide(&decision("A1", false, ""), "uid 5 via session", None)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "approval A1 was already approved by uid 0 via operator"
        );
        let r = rx.try_recv().unwrap();
        assert_eq!(r.outcome, Outcome::Approved { scope: Scope::Once });
    }

    #[test]
    fn unknown_is_an_error() {
        let a = Approvals::default();
        assert_eq!(
            a.decide(&decision("nope", true, ""), "x", None)
                .unwrap_err(),
            DecideError::Unknown("nope".to_string())
        );
    }

    #[test]
    fn destructive_needs_the_typed_target() {
        let a = Approvals::default();
        let _rx = a.open(approval("D1", true));
        assert!(matches!(
            a.decide(&decision("D1", true, ""), "x", None),
            Err(DecideError::NeedsConfirm { .. })
        ));
        assert!(matches!(
            a.decide(&decision("D1", true, "readme.md"), "x", None),
            Err(DecideError::ConfirmMismatch { .. })
        ));
        // Still pending after wrong confirmations; denying needs no confirmation.
        a.decide(&decision("D1", false, ""), "x", None).unwrap();
    }

    #[test]
    fn sessions_decide_only_their_own() {
        let a = Approvals::default();
        let _rx = a.open(approval("A2", false));
        assert_eq!(
            a.decide(&decision("A2", true, ""), "x", Some("OTHER"))
                .unwrap_err(),
            DecideError::OtherSession("A2".to_string())
        );
        a.decide(&decision("A2", true, ""), "x", Some("S")).unwrap();
    }

    #[test]
    fn closed_approvals_report_their_status() {
        let a = Approvals::default();
        let _rx = a.open(approval("T1", false));
        assert!(a.close("T1", Status::Timeout, "").is_some());
        assert!(a.close("T1", Status::Timeout, "").is_none());
        assert_eq!(
            a.decide(&decision("T1", true, ""), "x", None)
                .unwrap_err()
                .to_string(),
            "approval T1 was already timed out"
        );
    }
}
