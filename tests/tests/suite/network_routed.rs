//! The routed client shell under `[network]` (docs/THREAT_MODEL.md
//! "Network"): the real Claude Code, offline against the mock model, its
//! Bash routed into tollgate's native sandbox behind the network wall.
//! A test host answers HTTP on two public-looking addresses in a network
//! namespace of the test's own; `[network] allow` names the first. The
//! model's `curl` to it gets the page; its `curl` to the second is refused,
//! and the tool output the model receives ends with the `network: refused`
//! line naming the host and the operator's command.
//!
//! Without the clients (or root) the test says `skipped: …`, except under
//! TOLLGATE_REQUIRE_CLIENTS=1 (CI), where it fails.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use tollgate_e2e::clients::{NetNs, Run, Which, clients_or_skip, var_tmp_dir};
use tollgate_e2e::harness::Supervisor;
use tollgate_e2e::model_mock::{ModelMock, Turn};
use tollgate_e2e::net_host::{self, TestHost};

/// An unprivileged uid for the session.
const USER: u32 = 64125;

const PAGE: &str = r#"
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = ("ROUTED-PAGE-OK host=" + self.headers.get("Host", "") + "\n").encode()
        self.send_response(200); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("0.0.0.0", 8080), H).serve_forever()
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_s_routed_shell_reaches_the_allowed_host_and_is_told_of_the_refused_one() {
    let Some(clients) = clients_or_skip("claude_code_s_routed_shell_under_network") else {
        return;
    };
    let a = net_host::addrs(70, 217, 2);
    let (allowed, unlisted) = (a.public[0].clone(), a.public[1].clone());
    let dir = tempfile::tempdir().unwrap();
    let _host = TestHost::start(a, PAGE, &[], dir.path(), 8080);
    let config = format!(
        "[session]\napproval_timeout_s = 30\n[clients]\nmode = \"dangerouslySkipPermissions\"\n[llm]\nprovider = \"script\"\n[network]\nallow = [\"{allowed}:8080\"]\n"
    );
    let sup = Supervisor::builder()
        .config(&config)
        .sandbox("native")
        .start();
    let ws = sup.dirs.workspace("ws", USER);
    let ns = NetNs::new();
    let turns = vec![
        Turn::Shell(format!("curl -sS --max-time 20 http://{allowed}:8080/ok")),
        Turn::Shell(format!(
            "curl -sS --max-time 20 http://{unlisted}:8080/no; echo CURL-EXIT=$?"
        )),
    ];
    let m = ModelMock::serve(Which::Claude, ns.listen(), &turns);
    let scratch = var_tmp_dir("tollgate-e2e-netrouted-");
    let run = Run {
        prompt: "fetch the pages".to_string(),
        ..Run::claude_routed(&sup, &clients, (USER, &ws), scratch.path(), m.base_url())
    };
    let mut cmd = run.command(&ns);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let told = m.told(0);
    assert!(
        told.contains(&format!("ROUTED-PAGE-OK host={allowed}:8080")),
        "what the model saw: {told}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let told = m.told(1);
    assert!(
        told.contains("403") || told.contains("CURL-EXIT="),
        "what the model saw: {told}"
    );
    assert!(!told.contains("ROUTED-PAGE-OK"), "{told}");
    assert!(
        told.contains(&format!(
            "network: refused {unlisted}:8080 (not in [network] allow; an operator can run: supervisorctl net allow "
        )),
        "what the model saw: {told}"
    );
    // Both connections are in the session's records, attributed.
    let recs: Vec<serde_json::Value> = sup
        .audit_files("audit-")
        .iter()
        .flat_map(|p| tollgate_e2e::harness::read_records(p))
        .filter(|r| r["event"] == "net_connection")
        .collect();
    assert!(
        recs.iter()
            .any(|r| r["phase"] == "open" && r["host"] == allowed.as_str()),
        "{recs:#?}"
    );
    assert!(
        recs.iter()
            .any(|r| r["phase"] == "refused" && r["host"] == unlisted.as_str()),
        "{recs:#?}"
    );
}
