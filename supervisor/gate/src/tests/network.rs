//! The network channel: a connection to an unlisted host asked like a tool
//! call, its records, scopes, and the modes that never ask.

use std::time::Duration;

use tollgate_policy::{Code, Mode};

use super::fixture::Fixture;
use crate::approvals::Scope;
use crate::network::{NETWORK_TOOL, NetAsk, ask_connection};

fn ask_for<'a>(command: &'a str, wait: Duration) -> NetAsk<'a> {
    NetAsk {
        target: "new.example:443",
        host: "new.example",
        port: 443,
        via: "http-connect",
        reason: "new.example:443 is not in [network] allow, and unlisted = \"ask\"",
        rule: "network:unlisted",
        call_id: "call-7",
        command,
        wait,
    }
}

#[tokio::test]
async fn an_asked_connection_shows_host_port_and_command_and_is_approved_once() {
    let fx = Fixture::new();
    let cx = fx.cx();
    let a = ask_for("curl -s https://new.example/x", Duration::from_secs(30));
    let (r, ()) = tokio::join!(ask_connection(&cx, &a), async {
        fx.pending().await;
        let p = fx.host.approvals.list(false);
        assert_eq!(p.len(), 1);
        let p = &p[0];
        assert_eq!(
            (p.tool.as_str(), p.target.as_str(), p.rule.as_str()),
            (NETWORK_TOOL, "new.example:443", "network:unlisted")
        );
        assert_eq!(
            p.consequence,
            "connect to new.example:443, opened by `curl -s https://new.example/x`"
        );
        let args: serde_json::Value = serde_json::from_str(&p.arguments_json).unwrap();
        assert_eq!(
            args,
            serde_json::json!({"host": "new.example", "port": 443, "via": "http-connect",
                "command": "curl -s https://new.example/x"})
        );
        fx.answer(true, Scope::Once).await;
    });
    assert_eq!(r.unwrap(), Scope::Once);
    assert_eq!(
        fx.written(),
        ["approval_requested", "approval_decided approved"]
    );
    assert!(!fx.session.has_grant(NETWORK_TOOL, "new.example:443"));
}

#[tokio::test]
async fn approved_for_the_session_the_host_and_port_are_granted() {
    let fx = Fixture::new();
    let cx = fx.cx();
    let a = ask_for("", Duration::from_secs(30));
    let (r, ()) = tokio::join!(ask_connection(&cx, &a), fx.answer(true, Scope::Session));
    assert_eq!(r.unwrap(), Scope::Session);
    assert!(fx.session.has_grant(NETWORK_TOOL, "new.example:443"));
    assert!(!fx.session.has_grant(NETWORK_TOOL, "new.example:80"));
}

#[tokio::test]
async fn denied_and_timed_out_asks_refuse_with_the_reason() {
    let fx = Fixture::new();
    let cx = fx.cx();
    let a = ask_for("npm install", Duration::from_secs(30));
    let (r, ()) = tokio::join!(ask_connection(&cx, &a), fx.answer(false, Scope::Once));
    let d = r.unwrap_err();
    assert_eq!(d.code, Code::UserDenied);
    assert!(d.reason.contains("The user said: not now"), "{}", d.reason);
    let a = ask_for("npm install", Duration::from_millis(50));
    let d = ask_connection(&cx, &a).await.unwrap_err();
    assert_eq!(d.code, Code::ApprovalTimeout);
    assert!(d.reason.contains("no one approved in time"), "{}", d.reason);
    assert_eq!(
        fx.written(),
        [
            "approval_requested",
            "approval_decided denied",
            "approval_requested",
            "approval_decided timeout"
        ]
    );
}

#[tokio::test]
async fn dangerously_skip_permissions_refuses_the_ask_and_asks_nobody() {
    for mode in [Mode::DangerouslySkipPermissions, Mode::DontAsk] {
        let fx = Fixture::with_mode(mode);
        let a = ask_for("curl x", Duration::from_secs(30));
        let d = ask_connection(&fx.cx(), &a).await.unwrap_err();
        assert_eq!(
            (d.code, d.rule.as_str()),
            (Code::PolicyDenied, "network:unlisted")
        );
        assert!(
            d.reason
                .starts_with("new.example:443 is not in [network] allow"),
            "{}",
            d.reason
        );
        assert!(fx.host.approvals.list(true).is_empty(), "{mode:?}");
        assert!(fx.written().is_empty(), "{:?}", fx.written());
    }
}

#[test]
fn connections_are_attributed_to_the_commands_running_now() {
    let fx = Fixture::new();
    let net = &fx.session.net;
    assert_eq!(net.attribution().command, "");
    let a = net.running("c1", "npm install");
    assert_eq!(
        (
            net.attribution().call_id.as_str(),
            net.attribution().command.as_str()
        ),
        ("c1", "npm install")
    );
    {
        let _b = net.running("c2", "pip install x");
        assert_eq!(net.attribution().call_id, "c1|c2");
    }
    drop(a);
    assert_eq!(net.attribution().call_id, "");
}
