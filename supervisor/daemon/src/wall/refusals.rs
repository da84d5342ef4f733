//! The `network: refused …` lines a command's result ends with
//! (docs/INTERFACES.md "[network]"): every connection the wall refused
//! while the command ran, one line per host and port, deduplicated, with
//! the reason and, for a host the lists do not hold, the operator's command
//! that would allow it.

use std::collections::VecDeque;
use std::sync::Mutex;

use tollgate_egress::{ConnRequest, Refusal};
use tollgate_policy::network::UNLISTED_RULE;

/// Refusals kept for the lines; older ones fall off (a command that was
/// refused more often than this still gets a line for each of the last).
const KEPT: usize = 256;

/// One session's refusals, numbered.
#[derive(Default)]
pub(crate) struct RefusalNotes {
    inner: Mutex<Notes>,
}

#[derive(Default)]
struct Notes {
    next: u64,
    kept: VecDeque<(u64, Note)>,
}

/// One refusal, as the line shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Note {
    host: String,
    port: u16,
    reason: String,
    /// The host and port a `supervisorctl net allow` would name, when the
    /// lists' silence refused it (a deny entry, the SSRF guard, a
    /// mismatched SNI are not lifted by allowing the host).
    allow: Option<String>,
}

impl RefusalNotes {
    /// The number the next refusal gets: taken before a command runs.
    pub(crate) fn mark(&self) -> u64 {
        self.lock().next
    }

    pub(crate) fn note(&self, req: &ConnRequest, r: &Refusal) {
        let host = req.host.url_host();
        let target = req.target();
        let reason = r
            .reason
            .trim_end_matches("; an operator can add it to [network] allow")
            .trim_start_matches(&format!("{target} is "))
            .to_string();
        let allow = (r.rule == UNLISTED_RULE).then(|| match req.port {
            80 | 443 => host.clone(),
            p => format!("{host}:{p}"),
        });
        let mut n = self.lock();
        let seq = n.next;
        n.next += 1;
        if n.kept.len() == KEPT {
            n.kept.pop_front();
        }
        n.kept.push_back((
            seq,
            Note {
                host,
                port: req.port,
                reason,
                allow,
            },
        ));
    }

    /// One line per host and port refused since `mark`, in the order first
    /// refused.
    pub(crate) fn lines_since(&self, mark: u64, session: &str) -> Vec<String> {
        let n = self.lock();
        let mut seen: Vec<(&str, u16)> = Vec::new();
        let mut lines = Vec::new();
        for (_, note) in n.kept.iter().filter(|(seq, _)| *seq >= mark) {
            if seen.contains(&(note.host.as_str(), note.port)) {
                continue;
            }
            seen.push((note.host.as_str(), note.port));
            lines.push(line(note, session));
        }
        lines
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Notes> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn line(n: &Note, session: &str) -> String {
    let hint = match &n.allow {
        Some(h) => format!("; an operator can run: supervisorctl net allow {session} {h}"),
        None => String::new(),
    };
    let reason: String = n
        .reason
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    format!("network: refused {}:{} ({reason}{hint})", n.host, n.port)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_egress::Via;
    use tollgate_policy::network::NetHost;

    fn req(host: &str, port: u16) -> ConnRequest {
        ConnRequest {
            session: "S".into(),
            host: NetHost::parse(host).unwrap(),
            port,
            via: Via::Transparent,
            peer: "127.0.0.1:9".parse().unwrap(),
        }
    }

    fn unlisted(target: &str) -> Refusal {
        Refusal {
            rule: UNLISTED_RULE.into(),
            reason: format!(
                "{target} is not in [network] allow; an operator can add it to [network] allow"
            ),
        }
    }

    #[test]
    fn one_line_per_host_and_port_since_the_mark_with_the_operators_command() {
        let n = RefusalNotes::default();
        n.note(&req("old.example", 443), &unlisted("old.example:443"));
        let mark = n.mark();
        for _ in 0..3 {
            n.note(&req("evil.example", 443), &unlisted("evil.example:443"));
        }
        n.note(&req("evil.example", 8443), &unlisted("evil.example:8443"));
        let ssrf = Refusal {
            rule: "floor:ssrf".into(),
            reason: "`in.example` resolves to 10.0.0.1, which is a private address".into(),
        };
        n.note(&req("in.example", 443), &ssrf);
        assert_eq!(
            n.lines_since(mark, "S1"),
            vec![
                "network: refused evil.example:443 (not in [network] allow; an operator can run: supervisorctl net allow S1 evil.example)",
                "network: refused evil.example:8443 (not in [network] allow; an operator can run: supervisorctl net allow S1 evil.example:8443)",
                "network: refused in.example:443 (`in.example` resolves to 10.0.0.1, which is a private address)",
            ]
        );
        assert!(n.lines_since(n.mark(), "S1").is_empty());
    }
}
