//! The `network: refused …` lines a command's result ends with
//! (docs/INTERFACES.md "[network]"): every connection the wall refused
//! while the command ran, one line per host and port, deduplicated, with
//! the gate's reason (which, for a host the lists do not hold, names the
//! operator's command that would allow it).

use std::collections::VecDeque;
use std::sync::Mutex;

use tollgate_egress::{ConnRequest, Refusal};
use tollgate_policy::network::{DEFAULT_PORTS, UNLISTED_RULE};

/// How a line for a host the lists do not hold says who can allow it.
const OPERATOR_HINT: &str = "an operator can run:";

/// The same for a `sandbox exec`, which has no session to change.
const EXEC_HINT: &str = "to [network] allow in supervisor.toml";

/// Refusals kept for the lines; older ones fall off (a command that was
/// refused more often than this still gets a line for each of the last).
const KEPT: usize = 256;

/// One session's refusals, numbered.
#[derive(Default)]
pub(crate) struct RefusalNotes {
    inner: Mutex<Notes>,
    /// A `sandbox exec`'s: an unlisted host's line names supervisor.toml,
    /// not `supervisorctl net allow`.
    exec: bool,
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
}

impl RefusalNotes {
    /// The notes of one `sandbox exec`.
    pub(crate) fn for_exec() -> RefusalNotes {
        RefusalNotes {
            exec: true,
            ..RefusalNotes::default()
        }
    }

    /// The number the next refusal gets: taken before a command runs.
    pub(crate) fn mark(&self) -> u64 {
        self.lock().next
    }

    pub(crate) fn note(&self, req: &ConnRequest, r: &Refusal) {
        let host = req.host.url_host();
        let target = req.target();
        let mut reason = r
            .reason
            .trim_start_matches(&format!("{target} is "))
            .to_string();
        if r.rule == UNLISTED_RULE && !reason.contains(OPERATOR_HINT) && !reason.contains(EXEC_HINT)
        {
            let entry = if DEFAULT_PORTS.contains(&req.port) {
                host.clone()
            } else {
                target.clone()
            };
            // "…change approach.; an operator…" reads badly: the hint
            // continues the sentence.
            reason.truncate(reason.trim_end_matches('.').len());
            if self.exec {
                reason.push_str(&format!("; an operator can add {entry} {EXEC_HINT}"));
            } else {
                reason.push_str(&format!(
                    "; {OPERATOR_HINT} supervisorctl net allow {} {entry}",
                    req.session
                ));
            }
        }
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
            },
        ));
    }

    /// One line per host and port refused since `mark`, in the order first
    /// refused.
    pub(crate) fn lines_since(&self, mark: u64) -> Vec<String> {
        let n = self.lock();
        let mut seen: Vec<(&str, u16)> = Vec::new();
        let mut lines = Vec::new();
        for (_, note) in n.kept.iter().filter(|(seq, _)| *seq >= mark) {
            if seen.contains(&(note.host.as_str(), note.port)) {
                continue;
            }
            seen.push((note.host.as_str(), note.port));
            lines.push(line(note));
        }
        lines
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Notes> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn line(n: &Note) -> String {
    let reason: String = n
        .reason
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    format!("network: refused {}:{} ({reason})", n.host, n.port)
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
                "{target} is not in [network] allow; an operator can run: supervisorctl net allow S1 {}",
                target.trim_end_matches(":443")
            ),
        }
    }

    #[test]
    fn one_line_per_host_and_port_since_the_mark_with_the_gates_reason() {
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
            n.lines_since(mark),
            vec![
                "network: refused evil.example:443 (not in [network] allow; an operator can run: supervisorctl net allow S1 evil.example)",
                "network: refused evil.example:8443 (not in [network] allow; an operator can run: supervisorctl net allow S1 evil.example:8443)",
                "network: refused in.example:443 (`in.example` resolves to 10.0.0.1, which is a private address)",
            ]
        );
        assert!(n.lines_since(n.mark()).is_empty());
    }

    #[test]
    fn an_execs_line_for_an_unlisted_host_names_supervisor_toml() {
        let n = RefusalNotes::for_exec();
        let r = Refusal {
            rule: UNLISTED_RULE.into(),
            reason: "evil.example:8443 is not in [network] allow".into(),
        };
        n.note(&req("evil.example", 8443), &r);
        assert_eq!(
            n.lines_since(0),
            vec![
                "network: refused evil.example:8443 (not in [network] allow; an operator can add evil.example:8443 to [network] allow in supervisor.toml)"
            ]
        );
    }
}
