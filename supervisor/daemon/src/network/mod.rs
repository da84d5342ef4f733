//! The daemon's side of the network wall (docs/INTERFACES.md "[network]",
//! docs/THREAT_MODEL.md "Network"): each connection a session's sandbox
//! opens through the proxies of `tollgate-egress` is decided by the
//! `[network]` policy and what an operator changed of the session's lists
//! (deny first), asked through the gate's approvals when `unlisted = "ask"`,
//! its addresses vetted against the host's own as of now, and recorded
//! (`net_connection`: `open` before any byte flows, `close` with bytes and
//! duration, `refused`), each attributed to the tool call and command that
//! ran when it opened. Refusals past a bound are counted and summarised when
//! the session's gate ends, so a sandbox hammering refused hosts cannot grow
//! the log without limit.

mod exec_sink;
pub(crate) mod operator;
mod sink;
#[cfg(test)]
mod tests;
mod wall_sink;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tollgate_audit::event::{Event, NetConnection};
use tollgate_egress::{ConnId, ConnRequest, ConnStats, ConnectionGate, GateVerdict, Refusal};
use tollgate_gate::approvals::Scope;
use tollgate_gate::network::{Attribution, NetAsk};
use tollgate_policy::network::{NetDecision, NetVerdict, NetworkPolicy};

pub(crate) use exec_sink::ExecSink;
pub(crate) use sink::{NetSink, SessionSink};
pub(crate) use wall_sink::WallSink;

/// Refusals one session records one by one; later ones are counted.
pub(crate) const MAX_REFUSED_RECORDS: u64 = 64;

/// What allowed a connection an operator or a person approved.
pub(crate) const APPROVED_ONCE: &str = "approved";
pub(crate) const APPROVED_SESSION: &str = "approved(session-scope)";
pub(crate) const GRANTED_SESSION: &str = "allowed(session-scope)";

/// An open connection, for its close record.
struct Open {
    req: ConnRequest,
    addr: SocketAddr,
    rule: String,
    who: Attribution,
}

/// One session's gate.
pub(crate) struct NetworkGate<S: NetSink> {
    policy: Arc<NetworkPolicy>,
    sink: S,
    next: AtomicU64,
    refused: AtomicU64,
    open: Mutex<HashMap<u64, Open>>,
}

impl<S: NetSink> NetworkGate<S> {
    pub(crate) fn new(policy: Arc<NetworkPolicy>, sink: S) -> NetworkGate<S> {
        NetworkGate {
            policy,
            sink,
            next: AtomicU64::new(1),
            refused: AtomicU64::new(0),
            open: Mutex::default(),
        }
    }

    fn record_of(req: &ConnRequest, phase: &str, who: &Attribution) -> NetConnection {
        NetConnection {
            phase: phase.to_string(),
            via: req.via.as_str().to_string(),
            host: req.host.to_string(),
            port: req.port,
            call_id: non_empty(&who.call_id),
            command: non_empty(&who.command),
            ..empty_record()
        }
    }

    /// Counts a refusal; `true` while it is still recorded one by one.
    fn count_refusal(&self) -> bool {
        self.refused.fetch_add(1, Ordering::Relaxed) < MAX_REFUSED_RECORDS
    }

    fn write(&self, event: NetConnection) {
        if let Err(e) = self.sink.record(Event::NetConnection(event)) {
            tracing::warn!("net_connection record not written: {e}");
        }
    }

    /// A refusal of the lists: the policy's sentence (the tool result's
    /// `network: refused` line adds the operator's way on, `wall::refusals`).
    fn refusal(&self, d: NetDecision) -> Refusal {
        Refusal {
            rule: d.rule,
            reason: d.reason,
        }
    }

    /// `unlisted = "ask"`: a grant for the session, or a person's answer.
    async fn ask(&self, req: &ConnRequest, d: NetDecision) -> GateVerdict {
        let target = req.target();
        if self.sink.granted(&target) {
            return GateVerdict::Allow {
                rule: GRANTED_SESSION.to_string(),
            };
        }
        let who = self.sink.attribution();
        let host = req.host.to_string();
        let a = NetAsk {
            target: &target,
            host: &host,
            port: req.port,
            via: req.via.as_str(),
            reason: &d.reason,
            rule: &d.rule,
            call_id: &who.call_id,
            command: &who.command,
            wait: self.sink.approval_wait(),
        };
        match self.sink.ask(a).await {
            Ok(Scope::Once) => GateVerdict::Allow {
                rule: APPROVED_ONCE.to_string(),
            },
            Ok(Scope::Session) => GateVerdict::Allow {
                rule: APPROVED_SESSION.to_string(),
            },
            Err(reason) => GateVerdict::Deny(Refusal {
                rule: d.rule,
                reason,
            }),
        }
    }
}

impl<S: NetSink> Drop for NetworkGate<S> {
    fn drop(&mut self) {
        let n = self.refused.load(Ordering::Relaxed);
        if n > MAX_REFUSED_RECORDS {
            let summary = NetConnection {
                phase: "refusals_summary".to_string(),
                decision: "deny".to_string(),
                reason: Some(format!(
                    "{n} connections were refused; the first {MAX_REFUSED_RECORDS} are recorded one by one"
                )),
                suppressed: n - MAX_REFUSED_RECORDS,
                ..empty_record()
            };
            self.write(summary);
        }
    }
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

fn empty_record() -> NetConnection {
    NetConnection {
        phase: String::new(),
        conn: 0,
        via: String::new(),
        host: String::new(),
        port: 0,
        address: None,
        decision: "deny".to_string(),
        rule: String::new(),
        reason: None,
        bytes_up: 0,
        bytes_down: 0,
        duration_ms: 0,
        suppressed: 0,
        call_id: None,
        command: None,
    }
}

impl<S: NetSink> ConnectionGate for NetworkGate<S> {
    async fn decide(&self, req: &ConnRequest) -> GateVerdict {
        let overlay = self.sink.overlay();
        let d = self.policy.decide_with(&overlay, &req.host, req.port);
        match d.verdict {
            NetVerdict::Allow => GateVerdict::Allow { rule: d.rule },
            NetVerdict::Deny => GateVerdict::Deny(self.refusal(d)),
            NetVerdict::Ask => self.ask(req, d).await,
        }
    }

    fn vet(&self, req: &ConnRequest, ip: IpAddr) -> Result<(), String> {
        let own = self.sink.host_addrs().map_err(|e| {
            format!("{e}, so no address can be told apart from the supervisor's own")
        })?;
        self.policy.vet_address(ip, &own, &req.host.to_string())
    }

    fn opened(&self, req: &ConnRequest, addr: SocketAddr, rule: &str) -> Result<ConnId, String> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let who = self.sink.attribution();
        let rec = NetConnection {
            conn: id,
            address: Some(addr.to_string()),
            decision: "allow".to_string(),
            rule: rule.to_string(),
            ..Self::record_of(req, "open", &who)
        };
        self.sink
            .record(Event::NetConnection(rec))
            .map_err(|e| format!("the connection's audit record could not be written ({e})"))?;
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let o = Open {
            req: req.clone(),
            addr,
            rule: rule.to_string(),
            who,
        };
        open.insert(id, o);
        Ok(ConnId(id))
    }

    fn refused(&self, req: &ConnRequest, r: &Refusal) {
        if self.count_refusal() {
            let who = self.sink.attribution();
            self.write(NetConnection {
                rule: r.rule.clone(),
                reason: Some(r.reason.clone()),
                ..Self::record_of(req, "refused", &who)
            });
        }
    }

    fn bad_request(&self, _session: &str, peer: SocketAddr, why: &str) {
        if self.count_refusal() {
            let who = self.sink.attribution();
            self.write(NetConnection {
                phase: "refused".to_string(),
                rule: "network:bad-request".to_string(),
                reason: Some(format!("from {peer}: {why}")),
                call_id: non_empty(&who.call_id),
                command: non_empty(&who.command),
                ..empty_record()
            });
        }
    }

    fn closed(&self, id: ConnId, s: ConnStats) {
        let entry = {
            let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
            open.remove(&id.0)
        };
        let Some(o) = entry else {
            return;
        };
        self.write(NetConnection {
            conn: id.0,
            address: Some(o.addr.to_string()),
            decision: "allow".to_string(),
            rule: o.rule,
            bytes_up: s.bytes_up,
            bytes_down: s.bytes_down,
            duration_ms: millis(s.duration),
            reason: s
                .idle_closed
                .map(|d| format!("closed: no byte moved either way for {} s", d.as_secs())),
            ..Self::record_of(&o.req, "close", &o.who)
        });
    }

    /// `net_secret`: the secret's name, never its value; the call the
    /// connection came from, when it is open.
    fn secret(&self, req: &ConnRequest, conn: Option<ConnId>, e: tollgate_egress::SecretUse<'_>) {
        let call_id = conn.and_then(|c| {
            let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
            open.get(&c.0).and_then(|o| non_empty(&o.who.call_id))
        });
        let rec = tollgate_audit::event::NetSecret {
            secret: e.secret.to_string(),
            action: if e.stripped.is_some() {
                "stripped"
            } else {
                "put"
            }
            .to_string(),
            conn: conn.map_or(0, |c| c.0),
            via: req.via.as_str().to_string(),
            host: req.host.to_string(),
            port: req.port,
            reason: e.stripped.map(str::to_string),
            call_id,
        };
        if let Err(err) = self.sink.record(Event::NetSecret(rec)) {
            tracing::warn!("net_secret record not written: {err}");
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
