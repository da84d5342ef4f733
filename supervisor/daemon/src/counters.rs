//! Counts of what the audit log recorded since start, by kind: decisions by
//! verdict, egress connections opened and refused, LLM retries. Counted by
//! the one writer ([`crate::events::Recorder`]) after a record is written,
//! so a count never includes what is not on record; shown by `supervisorctl
//! status` (and `--prometheus`; docs/OPERATIONS.md "Metrics").

use std::sync::atomic::{AtomicU64, Ordering};

use tollgate_audit::Event;
use tollgate_audit::event::Verdict;
use tollgate_proto::v1 as pb;

#[derive(Debug, Default)]
pub struct Counters {
    allow: AtomicU64,
    ask: AtomicU64,
    deny: AtomicU64,
    egress_opened: AtomicU64,
    egress_refused: AtomicU64,
    llm_retries: AtomicU64,
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    /// Counts `event`, just written.
    pub fn count(&self, event: &Event) {
        match event {
            Event::PermissionCheck(c) => add(
                match c.decision {
                    Verdict::Allow => &self.allow,
                    Verdict::Ask => &self.ask,
                    Verdict::Deny => &self.deny,
                },
                1,
            ),
            Event::NetConnection(n) => match n.phase.as_str() {
                "open" => add(&self.egress_opened, 1),
                "refused" => add(&self.egress_refused, 1),
                "refusals_summary" => add(&self.egress_refused, n.suppressed),
                _ => {}
            },
            Event::LlmRetry(_) => add(&self.llm_retries, 1),
            _ => {}
        }
    }

    /// The counts now, for `status`.
    pub fn status(&self) -> pb::RecordCounts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        pb::RecordCounts {
            decisions_allow: get(&self.allow),
            decisions_ask: get(&self.ask),
            decisions_deny: get(&self.deny),
            egress_opened: get(&self.egress_opened),
            egress_refused: get(&self.egress_refused),
            llm_retries: get(&self.llm_retries),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_audit::event::{NetConnection, PermissionCheck};

    fn check(decision: Verdict) -> Event {
        Event::PermissionCheck(PermissionCheck {
            call_id: String::new(),
            tool: "run_bash".into(),
            decision,
            code: String::new(),
            rule: None,
            rule_file: None,
            reason: String::new(),
            consequence: None,
            destructive: None,
            target: None,
            args: None,
            allowed_by: None,
            client_tool: None,
            server: None,
            mcp_tool: None,
        })
    }

    fn net(phase: &str, suppressed: u64) -> Event {
        let mut n: NetConnection = serde_json::from_value(serde_json::json!({})).unwrap();
        n.phase = phase.to_string();
        n.suppressed = suppressed;
        Event::NetConnection(n)
    }

    #[test]
    fn each_kind_is_counted_where_it_belongs() {
        let c = Counters::default();
        for e in [
            check(Verdict::Allow),
            check(Verdict::Allow),
            check(Verdict::Ask),
            check(Verdict::Deny),
            net("open", 0),
            net("close", 0),
            net("refused", 0),
            net("refusals_summary", 40),
        ] {
            c.count(&e);
        }
        let s = c.status();
        assert_eq!(
            (s.decisions_allow, s.decisions_ask, s.decisions_deny),
            (2, 1, 1)
        );
        assert_eq!((s.egress_opened, s.egress_refused), (1, 41));
        assert_eq!(s.llm_retries, 0);
    }
}
