//! The daemon's side of the network wall (docs/INTERFACES.md "[network]",
//! docs/THREAT_MODEL.md "Network"): each connection a session's sandbox
//! opens through the proxies of `tollgate-egress` is decided by the
//! `[network]` policy, its addresses vetted against the host's own as of
//! now, and recorded (`net_connection`: `open` before any byte flows,
//! `close` with bytes and duration, `refused`). Refusals past a bound are
//! counted and summarised when the session's gate ends, so a sandbox
//! hammering refused hosts cannot grow the log without limit.
//!
//! `unlisted = "ask"` is refused with a reason saying asking is not
//! available yet: never granted.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tollgate_audit::event::{Event, NetConnection};
use tollgate_egress::{ConnId, ConnRequest, ConnStats, ConnectionGate, GateVerdict, Refusal};
use tollgate_policy::HostAddrs;
use tollgate_policy::network::{NetVerdict, NetworkPolicy, UNLISTED_RULE};

/// Refusals one session records one by one; later ones are counted.
pub(crate) const MAX_REFUSED_RECORDS: u64 = 64;

/// Where the gate's records go and where the host's addresses come from.
pub(crate) trait NetSink: Send + Sync + 'static {
    /// Appends one record durably; the error is why it could not be.
    fn record(&self, event: Event) -> Result<(), String>;
    /// The host's own addresses as of now.
    fn host_addrs(&self) -> Result<HostAddrs, String>;
}

/// A session's log and the supervisor's view of the host's addresses.
pub(crate) struct SessionSink {
    pub sup: Arc<crate::supervisor::Supervisor>,
    pub audit: Arc<tollgate_audit::AuditFile>,
    pub session: String,
}

impl NetSink for SessionSink {
    /// Durable like a decision (the configured sync), and essential: a
    /// full disk draws on the audit reserve.
    fn record(&self, event: Event) -> Result<(), String> {
        self.sup
            .recorder
            .write(
                crate::events::Log::Session(&self.audit, &self.session),
                event,
                tollgate_audit::Durable::AsConfigured,
                tollgate_audit::Priority::Essential,
            )
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    fn host_addrs(&self) -> Result<HostAddrs, String> {
        use tollgate_policy::Resolver;
        self.sup
            .resolver()
            .host_addrs()
            .cloned()
            .map_err(|e| e.to_string())
    }
}

/// One session's gate.
pub(crate) struct NetworkGate<S: NetSink> {
    policy: Arc<NetworkPolicy>,
    sink: S,
    next: AtomicU64,
    refused: AtomicU64,
    /// The open connections' requests, for their close records.
    open: Mutex<HashMap<u64, (ConnRequest, SocketAddr, String)>>,
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

    fn base(req: &ConnRequest, phase: &str) -> NetConnection {
        NetConnection {
            phase: phase.to_string(),
            conn: 0,
            via: req.via.as_str().to_string(),
            host: req.host.to_string(),
            port: req.port,
            address: None,
            decision: "deny".to_string(),
            rule: String::new(),
            reason: None,
            bytes_up: 0,
            bytes_down: 0,
            duration_ms: 0,
            suppressed: 0,
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
                ..NetConnection::default_closed()
            };
            self.write(summary);
        }
    }
}

trait DefaultClosed {
    fn default_closed() -> Self;
}

impl DefaultClosed for NetConnection {
    fn default_closed() -> NetConnection {
        NetConnection {
            phase: String::new(),
            conn: 0,
            via: String::new(),
            host: String::new(),
            port: 0,
            address: None,
            decision: String::new(),
            rule: String::new(),
            reason: None,
            bytes_up: 0,
            bytes_down: 0,
            duration_ms: 0,
            suppressed: 0,
        }
    }
}

impl<S: NetSink> ConnectionGate for NetworkGate<S> {
    async fn decide(&self, req: &ConnRequest) -> GateVerdict {
        let d = self.policy.decide(&req.host, req.port);
        match d.verdict {
            NetVerdict::Allow => GateVerdict::Allow { rule: d.rule },
            NetVerdict::Deny => GateVerdict::Deny(Refusal {
                rule: d.rule,
                reason: format!("{}; an operator can add it to [network] allow", d.reason),
            }),
            NetVerdict::Ask => GateVerdict::Deny(Refusal {
                rule: UNLISTED_RULE.to_string(),
                reason: format!(
                    "{}; asking for a host is not available yet, so it is refused, never granted",
                    d.reason
                ),
            }),
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
        let rec = NetConnection {
            conn: id,
            address: Some(addr.to_string()),
            decision: "allow".to_string(),
            rule: rule.to_string(),
            ..Self::base(req, "open")
        };
        self.sink
            .record(Event::NetConnection(rec))
            .map_err(|e| format!("the connection's audit record could not be written ({e})"))?;
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.insert(id, (req.clone(), addr, rule.to_string()));
        Ok(ConnId(id))
    }

    fn refused(&self, req: &ConnRequest, r: &Refusal) {
        if self.count_refusal() {
            self.write(NetConnection {
                rule: r.rule.clone(),
                reason: Some(r.reason.clone()),
                ..Self::base(req, "refused")
            });
        }
    }

    fn bad_request(&self, _session: &str, peer: SocketAddr, why: &str) {
        if self.count_refusal() {
            self.write(NetConnection {
                phase: "refused".to_string(),
                decision: "deny".to_string(),
                rule: "network:bad-request".to_string(),
                reason: Some(format!("from {peer}: {why}")),
                ..NetConnection::default_closed()
            });
        }
    }

    fn closed(&self, id: ConnId, s: ConnStats) {
        let entry = {
            let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
            open.remove(&id.0)
        };
        let Some((req, addr, rule)) = entry else {
            return;
        };
        self.write(NetConnection {
            conn: id.0,
            address: Some(addr.to_string()),
            decision: "allow".to_string(),
            rule,
            bytes_up: s.bytes_up,
            bytes_down: s.bytes_down,
            duration_ms: millis(s.duration),
            ..Self::base(&req, "close")
        });
    }

    /// `net_secret`: the secret's name, never its value.
    fn secret(&self, req: &ConnRequest, conn: Option<ConnId>, e: tollgate_egress::SecretUse<'_>) {
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
        };
        if let Err(err) = self.sink.record(Event::NetSecret(rec)) {
            tracing::warn!("net_secret record not written: {err}");
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_egress::Via;
    use tollgate_policy::network::{NetHost, NetworkConfig, Unlisted};

    #[derive(Default)]
    struct Records(Mutex<Vec<NetConnection>>);

    impl NetSink for Arc<Records> {
        fn record(&self, event: Event) -> Result<(), String> {
            let Event::NetConnection(c) = event else {
                return Err("not a net record".into());
            };
            self.0.lock().unwrap().push(c);
            Ok(())
        }
        fn host_addrs(&self) -> Result<HostAddrs, String> {
            Ok(HostAddrs::new([(
                "93.184.216.9".parse().unwrap(),
                "eth0".to_string(),
            )]))
        }
    }

    fn gate(unlisted: Unlisted) -> (NetworkGate<Arc<Records>>, Arc<Records>) {
        let c = NetworkConfig {
            allow: vec!["ok.example".into()],
            unlisted,
            ..NetworkConfig::default()
        };
        let recs = Arc::new(Records::default());
        let p = Arc::new(NetworkPolicy::from_config(&c).unwrap());
        (NetworkGate::new(p, Arc::clone(&recs)), recs)
    }

    fn req(host: &str) -> ConnRequest {
        ConnRequest {
            session: "s".into(),
            host: NetHost::parse(host).unwrap(),
            port: 443,
            via: Via::HttpConnect,
            peer: "127.0.0.1:5".parse().unwrap(),
        }
    }

    #[tokio::test]
    async fn ask_is_refused_never_granted_and_says_so() {
        let (g, _) = gate(Unlisted::Ask);
        let GateVerdict::Deny(r) = g.decide(&req("new.example")).await else {
            panic!("granted")
        };
        assert_eq!(r.rule, UNLISTED_RULE);
        assert!(r.reason.contains("not available yet"), "{}", r.reason);
        assert!(matches!(
            g.decide(&req("ok.example")).await,
            GateVerdict::Allow { .. }
        ));
    }

    #[test]
    fn open_and_close_are_recorded_and_the_host_addresses_are_refused() {
        let (g, recs) = gate(Unlisted::Deny);
        let r = req("ok.example");
        assert!(
            g.vet(&r, "93.184.216.9".parse().unwrap())
                .unwrap_err()
                .contains("eth0")
        );
        assert!(g.vet(&r, "10.0.0.1".parse().unwrap()).is_err());
        let id = g
            .opened(&r, "93.184.216.34:443".parse().unwrap(), "ok.example")
            .unwrap();
        g.closed(
            id,
            ConnStats {
                bytes_up: 5,
                bytes_down: 7,
                duration: Duration::from_millis(3),
            },
        );
        let l = recs.0.lock().unwrap().clone();
        assert_eq!(
            (l[0].phase.as_str(), l[0].decision.as_str(), l[0].conn),
            ("open", "allow", id.0)
        );
        assert_eq!(l[0].address.as_deref(), Some("93.184.216.34:443"));
        assert_eq!(
            (
                l[1].phase.as_str(),
                l[1].bytes_up,
                l[1].bytes_down,
                l[1].duration_ms
            ),
            ("close", 5, 7, 3)
        );
    }

    #[test]
    fn refusals_are_bounded_then_summarised() {
        let (g, recs) = gate(Unlisted::Deny);
        let refusal = Refusal {
            rule: UNLISTED_RULE.into(),
            reason: "x".into(),
        };
        for _ in 0..1000 {
            g.refused(&req("evil.example"), &refusal);
        }
        drop(g);
        let l = recs.0.lock().unwrap().clone();
        assert_eq!(l.len() as u64, MAX_REFUSED_RECORDS + 1);
        let last = l.last().unwrap();
        assert_eq!(
            (last.phase.as_str(), last.suppressed),
            ("refusals_summary", 1000 - MAX_REFUSED_RECORDS)
        );
    }
}
