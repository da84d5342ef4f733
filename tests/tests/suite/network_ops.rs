//! `supervisorctl net allow|deny|list SESSION` against a live supervisor
//! (docs/OPERATIONS.md "Network"): the lists in the order they are checked,
//! an operator's change recorded in the session's log before it takes
//! effect, and the refusals an operator can make sense of.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use tollgate_e2e::harness::Supervisor;
use tollgate_proto::v1 as pb;

const NETWORK: &str = "[llm]\nprovider = \"script\"\n[network]\nallow = [\"*.example.org\", \"git.example.net:22\"]\ndeny = [\"upload.example.org\"]\nunlisted = \"ask\"\nallow_private = [\"10.20.0.0/16\"]\n";

async fn open(sup: &Supervisor) -> String {
    let ws = sup.dirs.workspace("ws", 0);
    let mut c = sup.agent_client().await;
    c.open_session(pb::OpenSessionRequest {
        workspace: ws.display().to_string(),
        mode: "default".to_string(),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
    .session_id
}

fn ctl_ok(sup: &Supervisor, args: &[&str]) -> String {
    let out = sup.ctl(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn ctl_err(sup: &Supervisor, args: &[&str]) -> String {
    let out = sup.ctl(args);
    assert!(!out.status.success(), "{args:?} succeeded");
    String::from_utf8(out.stderr).unwrap()
}

fn entries(v: &serde_json::Value) -> Vec<(String, String, String)> {
    v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap().to_string();
            (s("verdict"), s("entry"), s("source"))
        })
        .collect()
}

fn t(a: &str, b: &str, c: &str) -> (String, String, String) {
    (a.to_string(), b.to_string(), c.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_allows_and_denies_hosts_of_a_live_session_recorded() {
    let sup = Supervisor::builder().config(NETWORK).start();
    let sid = open(&sup).await;
    let v: serde_json::Value =
        serde_json::from_str(&ctl_ok(&sup, &["net", "list", &sid, "--json"])).unwrap();
    assert_eq!(v["session"], sid.as_str());
    assert_eq!(v["unlisted"], "ask");
    assert_eq!(v["allow_private"], serde_json::json!(["10.20.0.0/16"]));
    assert_eq!(
        entries(&v),
        [
            t("deny", "upload.example.org", "supervisor"),
            t("allow", "*.example.org", "supervisor"),
            t("allow", "git.example.net:22", "supervisor"),
        ]
    );
    let out = ctl_ok(&sup, &["net", "allow", &sid, "registry.example:8443"]);
    assert_eq!(
        out,
        format!(
            "registry.example:8443 allowed for session {sid} (its next connections; recorded)\n"
        )
    );
    ctl_ok(&sup, &["net", "deny", &sid, "a.example.org"]);
    let v: serde_json::Value =
        serde_json::from_str(&ctl_ok(&sup, &["net", "list", &sid, "--json"])).unwrap();
    assert_eq!(
        entries(&v),
        [
            t("deny", "upload.example.org", "supervisor"),
            t("deny", "a.example.org", "operator"),
            t("allow", "*.example.org", "supervisor"),
            t("allow", "git.example.net:22", "supervisor"),
            t("allow", "registry.example:8443", "operator"),
        ]
    );
    let table = ctl_ok(&sup, &["net", "list", &sid]);
    assert!(
        table.contains("registry.example:8443") && table.contains("operator"),
        "{table}"
    );
    assert!(table.contains("unlisted hosts: ask"), "{table}");
    // The supervisor's deny is checked first: an allowance it would beat is
    // refused, saying so.
    let e = ctl_err(&sup, &["net", "allow", &sid, "upload.example.org"]);
    assert!(
        e.contains("upload.example.org")
            && e.contains("is checked first and would still refuse it"),
        "{e}"
    );
    for bad in [
        "*.com",
        "exa mple.org",
        "example.org:0",
        "https://example.org",
    ] {
        let e = ctl_err(&sup, &["net", "allow", &sid, bad]);
        assert!(e.contains("is refused"), "{bad}: {e}");
    }
    // An id that is neither a session nor a sandbox exec: looked for as both.
    for args in [
        vec!["net", "allow", "nosuchsession", "example.org"],
        vec!["net", "list", "nosuchsession"],
    ] {
        let out = sup.ctl(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {out:?}");
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(
            e.contains("nosuchsession is unknown: no session has that id (running or ended), nor does any sandbox exec (running, or one of the last 256 that ended)"),
            "{args:?}: {e}"
        );
    }
    // Each change is in the session's log, with who made it.
    let recs: Vec<serde_json::Value> = sup
        .session_records(&sid)
        .into_iter()
        .filter(|r| r["event"] == "network_rule")
        .collect();
    assert_eq!(recs.len(), 2, "{recs:?}");
    assert_eq!(
        (&recs[0]["verb"], &recs[0]["entry"], &recs[0]["by"]),
        (
            &serde_json::json!("allow"),
            &serde_json::json!("registry.example:8443"),
            &serde_json::json!("uid 0 via operator")
        )
    );
    assert_eq!(recs[1]["verb"], "deny");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_network_section_net_says_sandboxes_have_no_network() {
    let sup = Supervisor::builder()
        .config("[llm]\nprovider = \"script\"\n")
        .start();
    let sid = open(&sup).await;
    for args in [
        vec!["net", "list", sid.as_str()],
        vec!["net", "allow", sid.as_str(), "example.org"],
    ] {
        let e = ctl_err(&sup, &args);
        assert!(
            e.contains("no [network] section, so sandboxes have no network at all"),
            "{e}"
        );
    }
    assert!(
        !sup.session_records(&sid)
            .iter()
            .any(|r| r["event"] == "network_rule")
    );
}
