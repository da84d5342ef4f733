//! What an operator changed of one live session's network
//! (`supervisorctl net allow|deny SESSION HOST[:PORT]`,
//! docs/OPERATIONS.md "Network"), and the layered decision: the
//! supervisor's `deny`, the operator's denials, the supervisor's `allow`,
//! the operator's allowances, then `unlisted`. The session itself never
//! changes either list: only an operator does, over operator.sock.

use super::rule::NetRule;
use super::{NetDecision, NetHost, NetVerdict, NetworkPolicy};
use crate::Mode;

/// Most entries an operator may add to one session.
pub const MAX_OVERLAY_RULES: usize = 256;

/// The rule a decision names when an operator's entry made it.
pub fn operator_rule(verb: &str, entry: &str) -> String {
    format!("operator:net {verb} {entry}")
}

/// One session's operator entries, in the order they were added.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetOverlay {
    pub allow: Vec<NetRule>,
    pub deny: Vec<NetRule>,
}

/// `net allow` or `net deny`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverlayVerb {
    Allow,
    Deny,
}

impl OverlayVerb {
    pub fn as_str(self) -> &'static str {
        match self {
            OverlayVerb::Allow => "allow",
            OverlayVerb::Deny => "deny",
        }
    }
}

impl NetOverlay {
    /// Adds `spec` to one list and takes the same entry out of the other.
    /// An allowance the supervisor's `deny` would beat anyway is refused,
    /// saying so, instead of being kept as a promise it cannot keep.
    pub fn add(
        &mut self,
        policy: &NetworkPolicy,
        verb: OverlayVerb,
        spec: &str,
    ) -> Result<NetRule, String> {
        let rule = NetRule::parse(spec).map_err(|why| {
            format!("{spec:?} is refused: {why}; hint: HOST or *.DOMAIN, with an optional :PORT")
        })?;
        if verb == OverlayVerb::Allow
            && let Some(d) = policy.denied_by(&rule)
        {
            return Err(format!(
                "{spec:?} is refused: the supervisor's [network] deny entry {d:?} is checked first and would still refuse it; change supervisor.toml instead"
            ));
        }
        if self.allow.len() + self.deny.len() >= MAX_OVERLAY_RULES {
            return Err(format!(
                "the session already holds {MAX_OVERLAY_RULES} operator entries"
            ));
        }
        let same = |r: &NetRule| r.pattern == rule.pattern && r.ports == rule.ports;
        self.allow.retain(|r| !same(r));
        self.deny.retain(|r| !same(r));
        match verb {
            OverlayVerb::Allow => self.allow.push(rule.clone()),
            OverlayVerb::Deny => self.deny.push(rule.clone()),
        }
        Ok(rule)
    }
}

impl NetworkPolicy {
    /// Deny first: the supervisor's `deny`, the operator's denials, the
    /// supervisor's `allow`, the operator's allowances, then `unlisted`.
    pub fn decide_with(&self, overlay: &NetOverlay, host: &NetHost, port: u16) -> NetDecision {
        let d = self.decide(host, port);
        let listed = d.rule != super::UNLISTED_RULE;
        if d.verdict == NetVerdict::Deny && listed {
            return d;
        }
        let target = format!("{}:{port}", host.url_host());
        if let Some(r) = overlay.deny.iter().find(|r| r.matches(host, port)) {
            return NetDecision {
                verdict: NetVerdict::Deny,
                rule: operator_rule("deny", &r.text),
                reason: format!(
                    "{target} was denied for this session by an operator ({:?})",
                    r.text
                ),
            };
        }
        if d.verdict == NetVerdict::Allow {
            return d;
        }
        if let Some(r) = overlay.allow.iter().find(|r| r.matches(host, port)) {
            return NetDecision {
                verdict: NetVerdict::Allow,
                rule: operator_rule("allow", &r.text),
                reason: format!(
                    "{target} was allowed for this session by an operator ({:?})",
                    r.text
                ),
            };
        }
        d
    }

    /// The supervisor's `deny` entry that refuses every host and port
    /// `rule` would allow, if one does.
    fn denied_by(&self, rule: &NetRule) -> Option<String> {
        use super::rule::HostPattern;
        let host = match &rule.pattern {
            HostPattern::Exact(n) => NetHost::Name(n.clone()),
            HostPattern::Ip(ip) => NetHost::Ip(*ip),
            HostPattern::Subdomains(_) => return None,
        };
        rule.ports.iter().find_map(|p| {
            let d = self.decide(&host, *p);
            (d.verdict == NetVerdict::Deny && d.rule != super::UNLISTED_RULE).then_some(d.rule)
        })
    }
}

/// Whether a session in `mode` may be asked about an unlisted host: only
/// where a person answers asks. Elsewhere the ask is refused, never
/// granted (dangerouslySkipPermissions included).
pub fn ask_allowed_in(mode: Mode) -> Result<(), String> {
    match mode {
        Mode::Default | Mode::AcceptEdits => Ok(()),
        Mode::DangerouslySkipPermissions => Err(
            "the session runs in dangerouslySkipPermissions, where an ask for a host is refused, never granted".to_string(),
        ),
        Mode::DontAsk => Err("the session runs in dontAsk, where nothing is asked".to_string()),
        Mode::Plan => Err("the session runs in plan mode, where nothing connects".to_string()),
    }
}
