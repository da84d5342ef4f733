//! What `supervisorctl status` counts, as named metrics: one list that
//! `status --prometheus` prints as Prometheus text and the supervisor
//! exports as OTLP metrics (docs/OPERATIONS.md "Metrics"). Data only: the
//! names, types and help of the numbers a [`pb::StatusResponse`] holds.

use crate::v1 as pb;

/// One metric: its name, type (`gauge` or `counter`), help and samples,
/// each its labels (name, value) and value.
#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    pub name: &'static str,
    pub kind: &'static str,
    pub help: &'static str,
    pub samples: Vec<(Vec<(&'static str, String)>, u64)>,
}

fn one(name: &'static str, kind: &'static str, help: &'static str, v: u64) -> Metric {
    Metric {
        name,
        kind,
        help,
        samples: vec![(Vec::new(), v)],
    }
}

fn by(label: &'static str, values: &[(&str, u64)]) -> Vec<(Vec<(&'static str, String)>, u64)> {
    values
        .iter()
        .map(|(l, v)| (vec![(label, (*l).to_string())], *v))
        .collect()
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

pub fn of_status(s: &pb::StatusResponse) -> Vec<Metric> {
    let c = counts(s);
    let mut v = gauges(s, &c);
    v.extend(counters(s, &c));
    v
}

/// What is true now.
fn gauges(s: &pb::StatusResponse, c: &Counts) -> Vec<Metric> {
    let (fds, conns) = (&c.fds, &c.conns);
    let reload_ok = s.last_reload.as_ref().map_or(1, |r| u64::from(r.accepted));
    vec![
        Metric {
            name: "tollgate_info",
            kind: "gauge",
            help: "The supervisor's version and sandbox backend.",
            samples: vec![(
                vec![
                    ("version", s.version.clone()),
                    ("sandbox", s.sandbox.clone()),
                ],
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
fn counters(s: &pb::StatusResponse, c: &Counts) -> Vec<Metric> {
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
