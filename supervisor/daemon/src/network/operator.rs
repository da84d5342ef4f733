//! `supervisorctl net allow|deny|list SESSION` on operator.sock: what one
//! live session may reach, and an operator's change to it, recorded in the
//! session's log (`network_rule`) before it takes effect: no record, no
//! change (docs/OPERATIONS.md "Network").

use tollgate_audit::event::{Event, NetworkRule};
use tollgate_audit::{Durable, Priority};
use tollgate_gate::network::NETWORK_TOOL;
use tollgate_gate::session::Session;
use tollgate_policy::network::{NetOverlay, NetworkPolicy, OverlayVerb, Unlisted};
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
    Ok(session_lists(&policy, session))
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
    Ok(session_lists(&policy(sup)?, session))
}

fn session_lists(policy: &NetworkPolicy, session: &Session) -> pb::NetListResponse {
    let overlay = session.net.overlay.lock().clone();
    let grants = session.grants_of(NETWORK_TOOL);
    let of = Lists {
        id: &session.id,
        overlay: &overlay,
        grants: &grants,
        unlisted: None,
    };
    list_of(policy, &of)
}

/// What a running `sandbox exec` may reach: the supervisor's lists alone
/// (ExecSink), and an unlisted host is refused even under `unlisted =
/// "ask"`, since an exec asks no one (docs/INTERFACES.md "[network]").
pub(crate) fn exec_list(sup: &Supervisor, id: &str) -> Result<pb::NetListResponse, Status> {
    let of = Lists {
        id,
        overlay: &NetOverlay::default(),
        grants: &[],
        unlisted: Some(Unlisted::Deny),
    };
    Ok(list_of(&policy(sup)?, &of))
}

/// `net allow|deny` of a running `sandbox exec`: refused, saying why and
/// what changes what it may reach. The entry is checked as for a session.
pub(crate) fn exec_change(sup: &Supervisor, r: &pb::NetChangeRequest) -> Status {
    let asked = policy(sup).and_then(|p| {
        let verb = crate::wire::network::asked_verb(r).map_err(Status::invalid_argument)?;
        Ok((p, verb))
    });
    let (policy, verb) = match asked {
        Ok(pv) => pv,
        Err(s) => return s,
    };
    let rule = match NetOverlay::default().add(&policy, verb, &r.entry) {
        Ok(rule) => rule,
        Err(e) => return Status::invalid_argument(e),
    };
    let (list, how) = match verb {
        OverlayVerb::Allow => ("allow", "reach"),
        OverlayVerb::Deny => ("deny", "be refused"),
    };
    Status::failed_precondition(format!(
        "{id} is a sandbox exec, not a session: an exec's connections are decided by supervisor.toml's [network] lists alone, which no operator's net allow or net deny changes; for a sandbox exec to {how} {e}, add {e} to [network] {list} in supervisor.toml and restart the supervisor (a reload keeps [network]); to change one session's lists, run the command in a session and use supervisorctl net {v} SESSION {e}",
        id = r.session_id,
        e = rule.text,
        v = verb.as_str(),
    ))
}

/// Whose lists one answer shows, beside the supervisor's.
struct Lists<'a> {
    id: &'a str,
    overlay: &'a NetOverlay,
    grants: &'a [String],
    /// What an unlisted host gets, when not the policy's.
    unlisted: Option<Unlisted>,
}

fn list_of(policy: &NetworkPolicy, of: &Lists<'_>) -> pb::NetListResponse {
    use EntrySource as Src;
    use OverlayVerb::{Allow, Deny};
    let entry = |e: &str, verdict, source| Listed {
        entry: e.to_string(),
        verdict,
        source,
    };
    let operator = |rules: &[tollgate_policy::network::NetRule], verdict| {
        rules
            .iter()
            .map(|r| entry(&r.text, verdict, Src::Operator))
            .collect::<Vec<_>>()
    };
    let mut entries: Vec<Listed> = policy
        .deny_entries()
        .map(|e| entry(e, Deny, Src::Supervisor))
        .collect();
    entries.extend(operator(&of.overlay.deny, Deny));
    entries.extend(
        policy
            .allow_entries()
            .map(|e| entry(e, Allow, Src::Supervisor)),
    );
    entries.extend(operator(&of.overlay.allow, Allow));
    entries.extend(of.grants.iter().map(|t| entry(t, Allow, Src::Approval)));
    crate::wire::network::net_list(Listing {
        session_id: of.id.to_string(),
        unlisted: of.unlisted.unwrap_or(policy.unlisted()),
        entries,
        allow_private: policy
            .allow_private()
            .iter()
            .map(|n| n.to_string())
            .collect(),
    })
}
