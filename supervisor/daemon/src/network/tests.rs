//! The gate's decisions and records with a sink standing in for the
//! session (the gate's own tests ask real approvals; the end-to-end suite
//! runs a supervisor).

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tollgate_audit::event::{Event, NetConnection};
use tollgate_egress::{ConnStats, ConnectionGate, GateVerdict, Refusal, Via};
use tollgate_gate::approvals::Scope;
use tollgate_gate::network::{Attribution, NetAsk};
use tollgate_policy::HostAddrs;
use tollgate_policy::network::{
    NetHost, NetOverlay, NetworkConfig, NetworkPolicy, OverlayVerb, UNLISTED_RULE, Unlisted,
};

use super::*;

#[derive(Default)]
struct Fake {
    records: Mutex<Vec<NetConnection>>,
    overlay: Mutex<NetOverlay>,
    grants: Mutex<Vec<String>>,
    who: Mutex<Attribution>,
    /// The answer the next ask gets, and the asks seen.
    answer: Mutex<Option<Result<Scope, String>>>,
    asked: Mutex<Vec<String>>,
}

impl NetSink for Arc<Fake> {
    fn record(&self, event: Event) -> Result<(), String> {
        let Event::NetConnection(c) = event else {
            return Err("not a net record".into());
        };
        self.records.lock().unwrap().push(c);
        Ok(())
    }
    fn host_addrs(&self) -> Result<HostAddrs, String> {
        Ok(HostAddrs::new([(
            "93.184.216.9".parse().unwrap(),
            "eth0".to_string(),
        )]))
    }
    fn session_id(&self) -> &str {
        "S1"
    }
    fn overlay(&self) -> NetOverlay {
        self.overlay.lock().unwrap().clone()
    }
    fn granted(&self, target: &str) -> bool {
        self.grants.lock().unwrap().iter().any(|g| g == target)
    }
    fn attribution(&self) -> Attribution {
        self.who.lock().unwrap().clone()
    }
    fn approval_wait(&self) -> Duration {
        Duration::from_secs(7)
    }
    fn ask<'a>(&'a self, a: NetAsk<'a>) -> impl Future<Output = Result<Scope, String>> + Send + 'a {
        self.asked.lock().unwrap().push(format!(
            "{} {} {} {}s",
            a.target,
            a.call_id,
            a.command,
            a.wait.as_secs()
        ));
        let r = self
            .answer
            .lock()
            .unwrap()
            .take()
            .unwrap_or_else(|| Err("nobody".into()));
        if r == Ok(Scope::Session) {
            self.grants.lock().unwrap().push(a.target.to_string());
        }
        async move { r }
    }
}

fn policy(unlisted: Unlisted) -> Arc<NetworkPolicy> {
    let c = NetworkConfig {
        allow: vec!["ok.example".into()],
        deny: vec!["bad.example".into()],
        unlisted,
        ..NetworkConfig::default()
    };
    Arc::new(NetworkPolicy::from_config(&c).unwrap())
}

fn gate(unlisted: Unlisted) -> (NetworkGate<Arc<Fake>>, Arc<Fake>) {
    let fake = Arc::new(Fake::default());
    (NetworkGate::new(policy(unlisted), Arc::clone(&fake)), fake)
}

fn req(host: &str, port: u16) -> ConnRequest {
    ConnRequest {
        session: "S1".into(),
        host: NetHost::parse(host).unwrap(),
        port,
        via: Via::HttpConnect,
        peer: "127.0.0.1:5".parse().unwrap(),
    }
}

fn refused(v: GateVerdict) -> Refusal {
    match v {
        GateVerdict::Deny(r) => r,
        GateVerdict::Allow { rule } => panic!("allowed by {rule}"),
    }
}

fn allowed(v: GateVerdict) -> String {
    match v {
        GateVerdict::Allow { rule } => rule,
        GateVerdict::Deny(r) => panic!("refused: {}", r.reason),
    }
}

#[tokio::test]
async fn unlisted_is_refused_with_the_operators_command_and_nothing_is_asked() {
    let (g, fake) = gate(Unlisted::Deny);
    let r = refused(g.decide(&req("evil.example", 443)).await);
    assert_eq!(r.rule, UNLISTED_RULE);
    assert_eq!(
        r.reason,
        "evil.example:443 is not in [network] allow; an operator can run: supervisorctl net allow S1 evil.example"
    );
    let r = refused(g.decide(&req("evil.example", 8443)).await);
    assert!(
        r.reason
            .ends_with("supervisorctl net allow S1 evil.example:8443"),
        "{}",
        r.reason
    );
    let r = refused(g.decide(&req("bad.example", 443)).await);
    assert_eq!(r.rule, "bad.example");
    assert!(!r.reason.contains("supervisorctl"), "{}", r.reason);
    assert!(fake.asked.lock().unwrap().is_empty());
}

#[tokio::test]
async fn ask_waits_for_a_person_once_or_for_the_session() {
    let (g, fake) = gate(Unlisted::Ask);
    *fake.who.lock().unwrap() = Attribution {
        call_id: "c9".into(),
        command: "npm install".into(),
    };
    *fake.answer.lock().unwrap() = Some(Ok(Scope::Once));
    assert_eq!(
        allowed(g.decide(&req("new.example", 443)).await),
        APPROVED_ONCE
    );
    // Once: the next connection is asked again; denied, it is refused with
    // the person's sentence.
    *fake.answer.lock().unwrap() = Some(Err("user denied: connect to new.example:443".into()));
    let r = refused(g.decide(&req("new.example", 443)).await);
    assert_eq!(
        (r.rule.as_str(), r.reason.as_str()),
        (UNLISTED_RULE, "user denied: connect to new.example:443")
    );
    *fake.answer.lock().unwrap() = Some(Ok(Scope::Session));
    assert_eq!(
        allowed(g.decide(&req("new.example", 443)).await),
        APPROVED_SESSION
    );
    // For the session: no more asks for that host and port.
    assert_eq!(
        allowed(g.decide(&req("new.example", 443)).await),
        GRANTED_SESSION
    );
    assert_eq!(
        *fake.asked.lock().unwrap(),
        ["new.example:443 c9 npm install 7s"; 3]
    );
    // Listed hosts are never asked.
    assert_eq!(
        allowed(g.decide(&req("ok.example", 443)).await),
        "ok.example"
    );
    assert_eq!(
        refused(g.decide(&req("bad.example", 443)).await).rule,
        "bad.example"
    );
    assert_eq!(fake.asked.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn the_operators_entries_decide_a_live_session_deny_first() {
    let (g, fake) = gate(Unlisted::Deny);
    let p = policy(Unlisted::Deny);
    fake.overlay
        .lock()
        .unwrap()
        .add(&p, OverlayVerb::Allow, "new.example")
        .unwrap();
    assert_eq!(
        allowed(g.decide(&req("new.example", 443)).await),
        "operator:net allow new.example"
    );
    fake.overlay
        .lock()
        .unwrap()
        .add(&p, OverlayVerb::Deny, "ok.example")
        .unwrap();
    let r = refused(g.decide(&req("ok.example", 443)).await);
    assert_eq!(r.rule, "operator:net deny ok.example");
}

#[test]
fn open_and_close_are_recorded_with_the_call_and_command_and_the_host_addresses_are_refused() {
    let (g, fake) = gate(Unlisted::Deny);
    *fake.who.lock().unwrap() = Attribution {
        call_id: "c1".into(),
        command: "curl https://ok.example/".into(),
    };
    let r = req("ok.example", 443);
    assert!(
        g.vet(&r, "93.184.216.9".parse().unwrap())
            .unwrap_err()
            .contains("eth0")
    );
    assert!(g.vet(&r, "10.0.0.1".parse().unwrap()).is_err());
    let id = g
        .opened(&r, "93.184.216.34:443".parse().unwrap(), "ok.example")
        .unwrap();
    // The command ended before the connection did: the close still names it.
    *fake.who.lock().unwrap() = Attribution::default();
    g.closed(
        id,
        ConnStats {
            bytes_up: 5,
            bytes_down: 7,
            duration: Duration::from_millis(3),
        },
    );
    let l = fake.records.lock().unwrap().clone();
    let open = NetConnection {
        phase: "open".into(),
        conn: id.0,
        via: "http-connect".into(),
        host: "ok.example".into(),
        port: 443,
        address: Some("93.184.216.34:443".into()),
        decision: "allow".into(),
        rule: "ok.example".into(),
        call_id: Some("c1".into()),
        command: Some("curl https://ok.example/".into()),
        ..empty_record()
    };
    assert_eq!(l[0], open);
    let close = NetConnection {
        phase: "close".into(),
        bytes_up: 5,
        bytes_down: 7,
        duration_ms: 3,
        ..open
    };
    assert_eq!(l[1], close);
    assert_eq!(l.len(), 2);
}

#[test]
fn refusals_are_bounded_then_summarised() {
    let (g, fake) = gate(Unlisted::Deny);
    let refusal = Refusal {
        rule: UNLISTED_RULE.into(),
        reason: "x".into(),
    };
    for i in 0..1000 {
        if i % 2 == 0 {
            g.refused(&req("evil.example", 443), &refusal);
        } else {
            g.bad_request("S1", "127.0.0.1:9".parse().unwrap(), "SOCKS4");
        }
    }
    drop(g);
    let l = fake.records.lock().unwrap().clone();
    assert_eq!(l.len() as u64, MAX_REFUSED_RECORDS + 1);
    let last = l.last().unwrap();
    assert_eq!(
        (last.phase.as_str(), last.suppressed),
        ("refusals_summary", 1000 - MAX_REFUSED_RECORDS)
    );
    assert_eq!(l[1].rule, "network:bad-request");
}
