//! `supervisorctl net` on the wire: a change's verb, and a session's lists
//! with each entry's verdict and source in both the enums and the
//! deprecated words (docs/INTERFACES.md "Additions: wire enums").

use tollgate_policy::network::{OverlayVerb, Unlisted};
use tollgate_proto::v1 as pb;

use crate::network::operator::{EntrySource, Listed, Listing};

/// The verb a change asks for: `net_verb`, and the deprecated `verb` only
/// when it is unspecified; why not when neither names allow or deny.
pub fn asked_verb(r: &pb::NetChangeRequest) -> Result<OverlayVerb, String> {
    let wire = pb::NetVerdict::try_from(r.net_verb)
        .map_err(|_| format!("unknown verb (enum value {})", r.net_verb))?;
    match wire {
        pb::NetVerdict::Allow => Ok(OverlayVerb::Allow),
        pb::NetVerdict::Deny => Ok(OverlayVerb::Deny),
        pb::NetVerdict::Unspecified => match r.verb.as_str() {
            "allow" => Ok(OverlayVerb::Allow),
            "deny" => Ok(OverlayVerb::Deny),
            other => Err(format!("unknown verb {other:?} (expected allow or deny)")),
        },
    }
}

/// An entry's verdict (or a change's verb) on the wire.
pub fn net_verdict(v: OverlayVerb) -> pb::NetVerdict {
    match v {
        OverlayVerb::Allow => pb::NetVerdict::Allow,
        OverlayVerb::Deny => pb::NetVerdict::Deny,
    }
}

fn net_source(s: EntrySource) -> pb::NetSource {
    match s {
        EntrySource::Supervisor => pb::NetSource::Supervisor,
        EntrySource::Operator => pb::NetSource::Operator,
        EntrySource::Approval => pb::NetSource::Approval,
    }
}

fn net_unlisted(u: Unlisted) -> pb::NetUnlisted {
    match u {
        Unlisted::Deny => pb::NetUnlisted::Deny,
        Unlisted::Ask => pb::NetUnlisted::Ask,
    }
}

fn net_entry(l: Listed) -> pb::NetEntry {
    let (verdict, source) = (net_verdict(l.verdict), net_source(l.source));
    pb::NetEntry {
        entry: l.entry,
        verdict: verdict.text().to_string(),
        source: source.text().to_string(),
        net_verdict: verdict as i32,
        net_source: source as i32,
    }
}

/// `net list`'s answer (and `net allow|deny`'s).
pub fn net_list(l: Listing) -> pb::NetListResponse {
    let unlisted = net_unlisted(l.unlisted);
    pb::NetListResponse {
        session_id: l.session_id,
        unlisted: unlisted.text().to_string(),
        net_unlisted: unlisted as i32,
        entries: l.entries.into_iter().map(net_entry).collect(),
        allow_private: l.allow_private,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(net_verb: i32, verb: &str) -> pb::NetChangeRequest {
        pb::NetChangeRequest {
            net_verb,
            verb: verb.to_string(),
            ..Default::default()
        }
    }

    #[test]
    fn a_change_is_read_enum_first_then_the_deprecated_verb() {
        for v in [OverlayVerb::Allow, OverlayVerb::Deny] {
            let wire = net_verdict(v);
            assert_eq!(wire.text(), v.as_str());
            assert_eq!(asked_verb(&change(wire as i32, "")), Ok(v));
            assert_eq!(asked_verb(&change(0, v.as_str())), Ok(v));
        }
        // The enum wins over a word that disagrees.
        let deny = pb::NetVerdict::Deny as i32;
        assert_eq!(asked_verb(&change(deny, "allow")), Ok(OverlayVerb::Deny));
        assert!(asked_verb(&change(0, "")).is_err());
        assert!(asked_verb(&change(0, "ask")).is_err());
        assert!(asked_verb(&change(99, "allow")).is_err());
    }

    #[test]
    fn a_listing_carries_each_enum_and_its_word() {
        let listed = |entry: &str, verdict, source| Listed {
            entry: entry.to_string(),
            verdict,
            source,
        };
        let l = net_list(Listing {
            session_id: "s1".to_string(),
            unlisted: Unlisted::Ask,
            entries: vec![
                listed("a.example", OverlayVerb::Deny, EntrySource::Supervisor),
                listed("b.example", OverlayVerb::Allow, EntrySource::Operator),
                listed("c.example:443", OverlayVerb::Allow, EntrySource::Approval),
            ],
            allow_private: vec!["10.0.0.0/8".to_string()],
        });
        assert_eq!(
            (l.unlisted.as_str(), l.net_unlisted()),
            ("ask", pb::NetUnlisted::Ask)
        );
        let seen: Vec<_> = l
            .entries
            .iter()
            .map(|e| {
                (
                    e.verdict.as_str(),
                    e.source.as_str(),
                    e.net_verdict(),
                    e.net_source(),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                (
                    "deny",
                    "supervisor",
                    pb::NetVerdict::Deny,
                    pb::NetSource::Supervisor
                ),
                (
                    "allow",
                    "operator",
                    pb::NetVerdict::Allow,
                    pb::NetSource::Operator
                ),
                (
                    "allow",
                    "approval",
                    pb::NetVerdict::Allow,
                    pb::NetSource::Approval
                ),
            ]
        );
        assert_eq!(net_unlisted(Unlisted::Deny).text(), "deny");
        assert_eq!(l.allow_private, ["10.0.0.0/8"]);
    }
}
