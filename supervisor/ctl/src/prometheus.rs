//! `status --prometheus`: what `status` shows, as Prometheus text
//! exposition (version 0.0.4), for a node exporter's textfile collector or
//! a scrape through a small wrapper (docs/OPERATIONS.md "Metrics").

use std::fmt::Write as _;

use tollgate_proto::v1 as pb;

/// One metric: its name, type, help and samples (labels, value).
struct Metric<'a> {
    name: &'a str,
    kind: &'a str,
    help: &'a str,
    samples: Vec<(String, u64)>,
}

fn one(name: &'static str, kind: &'static str, help: &'static str, v: u64) -> Metric<'static> {
    Metric {
        name,
        kind,
        help,
        samples: vec![(String::new(), v)],
    }
}

fn by(label: &str, values: &[(&str, u64)]) -> Vec<(String, u64)> {
    values
        .iter()
        .map(|(l, v)| (format!("{{{label}=\"{l}\"}}"), *v))
        .collect()
}

/// A label value with `\`, `"` and newlines escaped.
fn label_value(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The status's counts, and the samples each metric has.
struct Counts {
    fds: pb::FdStatus,
    conns: pb::ConnectionStatus,
    rec: pb::RecordCounts,
    tel: pb::TelemetryStatus,
}

fn counts(s: &pb::StatusResponse) -> Counts {
    Counts {
        fds: s.fds.unwrap_or_default(),
        conns: s.connections.clone().unwrap_or_default(),
        rec: s.records.unwrap_or_default(),
        tel: s.telemetry.clone().unwrap_or_default(),
    }
}

fn metrics(s: &pb::StatusResponse) -> Vec<Metric<'static>> {
    let c = counts(s);
    let mut v = gauges(s, &c);
    v.extend(counters(s, &c));
    v
}

/// What is true now.
fn gauges(s: &pb::StatusResponse, c: &Counts) -> Vec<Metric<'static>> {
    let (fds, conns) = (&c.fds, &c.conns);
    let reload_ok = s.last_reload.as_ref().map_or(1, |r| u64::from(r.accepted));
    vec![
        Metric {
            name: "tollgate_info",
            kind: "gauge",
            help: "The supervisor's version and sandbox backend.",
            samples: vec![(
                format!(
                    "{{version=\"{}\",sandbox=\"{}\"}}",
                    label_value(&s.version),
                    label_value(&s.sandbox)
                ),
                1,
            )],
        },
        one(
            "tollgate_uptime_seconds",
            "gauge",
            "Seconds since the supervisor started.",
            s.uptime_s,
        ),
        one(
            "tollgate_sessions_active",
            "gauge",
            "Sessions open now.",
            u64::from(s.sessions_active),
        ),
        one(
            "tollgate_approvals_pending",
            "gauge",
            "Approvals waiting for a decision.",
            u64::from(s.approvals_pending),
        ),
        Metric {
            name: "tollgate_connections_open",
            kind: "gauge",
            help: "Connections open now, by socket.",
            samples: by(
                "socket",
                &[
                    ("agent", u64::from(conns.agent_open)),
                    ("operator", u64::from(conns.operator_open)),
                ],
            ),
        },
        one(
            "tollgate_fds_in_use",
            "gauge",
            "File descriptors the supervisor holds.",
            fds.in_use,
        ),
        one(
            "tollgate_fds_limit",
            "gauge",
            "RLIMIT_NOFILE as the supervisor runs.",
            fds.limit,
        ),
        one(
            "tollgate_audit_reserve_bytes",
            "gauge",
            "Bytes the audit directory's reserve holds.",
            s.audit_reserve_bytes,
        ),
        one(
            "tollgate_audit_unanchored_files",
            "gauge",
            "Closed session files whose anchor is not written yet.",
            s.audit_unanchored.len() as u64,
        ),
        one(
            "tollgate_last_reload_accepted",
            "gauge",
            "1 unless the last reload since start was refused.",
            reload_ok,
        ),
    ]
}

/// What happened since start.
fn counters(s: &pb::StatusResponse, c: &Counts) -> Vec<Metric<'static>> {
    let (conns, rec, tel) = (&c.conns, &c.rec, &c.tel);
    vec![
        Metric {
            name: "tollgate_decisions_total",
            kind: "counter",
            help: "Decisions recorded since start, by verdict.",
            samples: by(
                "verdict",
                &[
                    ("allow", rec.decisions_allow),
                    ("ask", rec.decisions_ask),
                    ("deny", rec.decisions_deny),
                ],
            ),
        },
        Metric {
            name: "tollgate_egress_connections_total",
            kind: "counter",
            help: "Sandboxed commands' connections through the network wall, opened or refused.",
            samples: by(
                "outcome",
                &[
                    ("opened", rec.egress_opened),
                    ("refused", rec.egress_refused),
                ],
            ),
        },
        one(
            "tollgate_llm_retries_total",
            "counter",
            "Model calls tried again after a 429 or 5xx.",
            rec.llm_retries,
        ),
        one(
            "tollgate_audit_refusals_total",
            "counter",
            "Calls and sessions refused because the audit log could not be written.",
            s.audit_refusals,
        ),
        Metric {
            name: "tollgate_connections_refused_total",
            kind: "counter",
            help: "agent.sock connections refused, by reason.",
            samples: by(
                "reason",
                &[
                    ("uid_cap", conns.refused_over_uid_cap),
                    ("fd_reserve", conns.refused_over_fd_reserve),
                    ("unidentified", conns.refused_unidentified),
                ],
            ),
        },
        one(
            "tollgate_connections_closed_idle_total",
            "counter",
            "agent.sock connections closed for being idle.",
            conns.closed_idle,
        ),
        Metric {
            name: "tollgate_telemetry_events_total",
            kind: "counter",
            help: "Audit events offered to the OpenTelemetry export, by outcome.",
            samples: by(
                "outcome",
                &[
                    ("exported", tel.exported),
                    ("dropped", tel.dropped),
                    ("failed", tel.failed),
                ],
            ),
        },
    ]
}

/// The exposition text.
pub fn render(s: &pb::StatusResponse) -> String {
    let mut out = String::new();
    for m in metrics(s) {
        let _ = writeln!(out, "# HELP {} {}", m.name, m.help);
        let _ = writeln!(out, "# TYPE {} {}", m.name, m.kind);
        for (labels, v) in m.samples {
            let _ = writeln!(out, "{}{labels} {v}", m.name);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sample_follows_its_help_and_type_and_parses() {
        let s = pb::StatusResponse {
            version: "0.1.0".into(),
            sandbox: "native".into(),
            sessions_active: 3,
            records: Some(pb::RecordCounts {
                decisions_allow: 7,
                decisions_deny: 2,
                ..Default::default()
            }),
            ..Default::default()
        };
        let text = render(&s);
        let mut declared = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert!(kind == "gauge" || kind == "counter", "{line}");
                declared.push(name.to_string());
                continue;
            }
            if line.starts_with("# HELP ") {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').unwrap();
            value.parse::<u64>().unwrap();
            let name = series.split('{').next().unwrap();
            assert_eq!(declared.last().map(String::as_str), Some(name), "{line}");
            assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
            if name.ends_with("_total") {
                assert!(text.contains(&format!("# TYPE {name} counter")), "{name}");
            }
        }
        assert!(text.contains("tollgate_sessions_active 3\n"), "{text}");
        assert!(text.contains("tollgate_decisions_total{verdict=\"allow\"} 7\n"));
        assert!(text.contains("tollgate_decisions_total{verdict=\"deny\"} 2\n"));
        assert!(text.contains("tollgate_info{version=\"0.1.0\",sandbox=\"native\"} 1\n"));
        assert_eq!(label_value("a\"b\\c"), "a\\\"b\\\\c");
    }
}
