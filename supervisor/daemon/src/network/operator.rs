//! `supervisorctl net allow|deny|list SESSION` on operator.sock: what one
//! live session may reach, and an operator's change to it, recorded in the
//! session's log (`network_rule`) before it takes effect: no record, no
//! change (docs/OPERATIONS.md "Network").

use tollgate_audit::event::{Event, NetworkRule};
use tollgate_audit::{Durable, Priority};
use tollgate_gate::network::NETWORK_TOOL;
use tollgate_gate::session::Session;
use tollgate_policy::network::{NetworkPolicy, OverlayVerb, Unlisted};
use tollgate_proto::v1 as pb;
use tonic::Status;

use crate::events::Log;
use crate::supervisor::Supervisor;

/// The supervisor's `[network]`, or why a session has no network to change.
fn policy(sup: &Supervisor) -> Result<NetworkPolicy, Status> {
    match sup.config.network_policy() {
        Ok(Some(p)) => Ok(p),
        Ok(None) => Err(Status::failed_precondition(
            "supervisor.toml has no [network] section, so sandboxes have no network at all; add one (docs/OPERATIONS.md, \"Network\")",
        )),
        Err(e) => Err(Status::failed_precondition(e)),
    }
}

/// Adds `entry` to the session's `allow` or `deny`: recorded first.
pub(crate) fn change(
    sup: &Supervisor,
    session: &Session,
    r: &pb::NetChangeRequest,
    by: &str,
) -> Result<pb::NetListResponse, Status> {
    let policy = policy(sup)?;
    let verb = crate::wire::network::asked_verb(r).map_err(Status::invalid_argument)?;
    let mut overlay = session.net.overlay.lock();
    let mut next = overlay.clone();
    let rule = next
        .add(&policy, verb, &r.entry)
        .map_err(Status::invalid_argument)?;
    let record = Event::NetworkRule(NetworkRule {
        verb: verb.as_str().to_string(),
        entry: rule.text,
        by: by.to_string(),
    });
    sup.recorder
        .write(
            Log::Session(&session.audit, &session.id),
            record,
            Durable::AsConfigured,
            Priority::Essential,
        )
        .map_err(|e| {
            Status::unavailable(format!(
                "AUDIT_UNAVAILABLE: the change was not made, its record could not be written: {e}"
            ))
        })?;
    *overlay = next;
    drop(overlay);
    Ok(list_of(&policy, session))
}

/// Where a listed entry comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EntrySource {
    /// `[network]` in supervisor.toml.
    Supervisor,
    /// `supervisorctl net allow|deny`.
    Operator,
    /// Approved for the session.
    Approval,
}

/// One entry of a session's lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Listed {
    pub entry: String,
    pub verdict: OverlayVerb,
    pub source: EntrySource,
}

/// What one session may reach, in the order it is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Listing {
    pub session_id: String,
    pub unlisted: Unlisted,
    pub entries: Vec<Listed>,
    pub allow_private: Vec<String>,
}

/// What the session may reach, in the order it is checked.
pub(crate) fn list(sup: &Supervisor, session: &Session) -> Result<pb::NetListResponse, Status> {
    Ok(list_of(&policy(sup)?, session))
}

fn list_of(policy: &NetworkPolicy, session: &Session) -> pb::NetListResponse {
    use EntrySource as Src;
    use OverlayVerb::{Allow, Deny};
    let entry = |e: &str, verdict, source| Listed {
        entry: e.to_string(),
        verdict,
        source,
    };
    let overlay = session.net.overlay.lock().clone();
    let mut entries: Vec<Listed> = policy
        .deny_entries()
        .map(|e| entry(e, Deny, Src::Supervisor))
        .collect();
    entries.extend(
        overlay
            .deny
            .iter()
            .map(|r| entry(&r.text, Deny, Src::Operator)),
    );
    entries.extend(
        policy
            .allow_entries()
            .map(|e| entry(e, Allow, Src::Supervisor)),
    );
    entries.extend(
        overlay
            .allow
            .iter()
            .map(|r| entry(&r.text, Allow, Src::Operator)),
    );
    entries.extend(
        session
            .grants_of(NETWORK_TOOL)
            .iter()
            .map(|t| entry(t, Allow, Src::Approval)),
    );
    crate::wire::network::net_list(Listing {
        session_id: session.id.clone(),
        unlisted: policy.unlisted(),
        entries,
        allow_private: policy
            .allow_private()
            .iter()
            .map(|n| n.to_string())
            .collect(),
    })
}
