//! `agent mcp-gateway --allow-net` end to end (docs/CLIENTS.md, "MCP servers
//! that need the network": no network unless --allow-net names hosts that
//! the SSRF guard vets), on both backends.
//!
//! A "public" web server answers on two public-looking addresses inside a
//! network namespace this test creates, behind a veth pair (the pattern of
//! webfetch.rs, every name, subnet and address unique to this process). A
//! wrapped MCP server that runs shell commands and checks nothing
//! (mcp_support/shell_server.py) fetches through the gateway:
//! - with `--allow-net A:80` its fetch of http://A/ works (forwarded by the
//!   supervisor, never routed) and is an `mcp_egress` record; its fetch of
//!   the second public address, of the veth's private address and of A on
//!   another port fails;
//! - without --allow-net the same fetch fails (no network);
//! - `169.254.169.254`, `localhost`, `10.1.2.3`, `[::1]`,
//!   `metadata.google.internal` and a name resolving inward are refused at
//!   start with the guard's sentence naming the host;
//! - a name: the supervisor runs in a private mount namespace with an
//!   /etc/hosts of the test's own, so a name resolves for it without
//!   touching the host's /etc; the sandbox's /etc/hosts points the name at
//!   the listener; when the name later resolves inward, the connection is
//!   refused and recorded;
//! - natively, another port of the forwarded address reaches nothing (the
//!   sandbox's namespace is the wall), a bind on its loopback works, and
//!   the posture (seccomp, no_new_privs, no capabilities) is unchanged;
//! - revoke ends an open forwarded connection (recorded) with the session;
//! - under `[network]` (no --allow-net) the server is behind the network
//!   wall like every sandboxed command (docs/THREAT_MODEL.md "Network"): its
//!   fetch of an allowed host goes through the proxy variables, an unlisted
//!   one gets the 403 whose body names host, port and why, a raw socket to
//!   it is reset, and the tool result ends with the `network: refused` line;
//!   each is a `net_connection` record.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;
use crate::mcp_support;

use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_support::{ready, verify_audit};
use mcp_support::{McpAgent, SHELL_SERVER, TestClient, text_of, wait_exit};
use rmcp::model::{CallToolRequestParams, ProtocolVersion};
use serde_json::{Value, json};
use tokio::process::{Child, Command};
use tollgate_e2e::harness::{Supervisor, bin, read_records};
use tollgate_e2e::net_host::{self, TestHost};

const RULES: &str = r#"
[policy]
allow = ["mcp(shell.*)"]

[session]
session_can_approve = false

[llm]
provider = "script"
"#;

/// One test's names and addresses (unique to this process and test: the
/// tests of this file run at once): two public addresses the test host
/// answers on, and the /30 of the veth pair (host side .1, namespace .2).
struct Addrs {
    tag: u32,
    a: String,
    b: String,
    peer_side: String,
    host: net_host::Addrs,
}

fn addrs(test: u32) -> Addrs {
    let host = net_host::addrs(test, 214, 2);
    Addrs {
        tag: host.tag,
        a: host.public[0].clone(),
        b: host.public[1].clone(),
        peer_side: host.peer_side.clone(),
        host,
    }
}

/// The test's "public" web server (tollgate_e2e::net_host), serving
/// `docroot`.
struct NetHost;

impl NetHost {
    fn start(a: &Addrs, docroot: &Path) -> TestHost {
        TestHost::start(a.host.clone(), SERVER, &[], docroot, 80)
    }
}

/// Files from the cwd, on port 80 and 8080 of every address.
const SERVER: &str = r#"
import http.server, threading
class H(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a): pass
for port in (8080,):
    s = http.server.ThreadingHTTPServer(('0.0.0.0', port), H)
    threading.Thread(target=s.serve_forever, daemon=True).start()
http.server.ThreadingHTTPServer(('0.0.0.0', 80), H).serve_forever()
"#;

const PAGE: &str = "EGRESS-PAGE-OK";

/// A running `agent mcp-gateway --name shell ARGS -- python3 .shell_server.py`.
struct Gateway(McpAgent);

impl std::ops::Deref for Gateway {
    type Target = McpAgent;
    fn deref(&self) -> &McpAgent {
        &self.0
    }
}

impl std::ops::DerefMut for Gateway {
    fn deref_mut(&mut self) -> &mut McpAgent {
        &mut self.0
    }
}

fn spawn_gateway(sup: &Supervisor, ws: &Path, extra: &[&str]) -> (Child, Arc<Mutex<String>>) {
    let mut child = Command::new(bin("agent"))
        .arg("mcp-gateway")
        .args(["--name", "shell"])
        .args(extra)
        .args(["--", "python3", ".shell_server.py"])
        .env("TOLLGATE_SOCKET", &sup.agent_socket)
        .current_dir(ws)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn agent mcp-gateway");
    let stderr = mcp_support::collect_stderr(&mut child);
    (child, stderr)
}

impl Gateway {
    async fn start(sup: &Supervisor, ws: &Path, extra: &[&str]) -> Gateway {
        let (child, stderr) = spawn_gateway(sup, ws, extra);
        let client = TestClient::new(ProtocolVersion::V_2025_06_18, None);
        Gateway(McpAgent::connect(child, stderr, client).await)
    }

    /// `run_shell` with a Python fetch of `url`: (output, is_error).
    async fn fetch(&self, url: &str) -> (String, bool) {
        self.shell(&format!(
            "python3 -c 'import sys, urllib.request; print(\"GOT\", urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' {url}"
        ))
        .await
    }

    /// `run_shell COMMAND`: (output, is_error).
    async fn shell(&self, command: &str) -> (String, bool) {
        text_of(&self.shell_result(command).await)
    }

    /// `run_shell COMMAND`: every text block of the result, one per line.
    async fn shell_all(&self, command: &str) -> String {
        let r = self.shell_result(command).await;
        let blocks = r["content"].as_array().cloned().unwrap_or_default();
        let texts: Vec<&str> = blocks.iter().filter_map(|b| b["text"].as_str()).collect();
        texts.join("\n")
    }

    async fn shell_result(&self, command: &str) -> Value {
        self.call("run_shell", json!({ "command": command })).await
    }

    async fn finish(self) {
        self.0.finish().await;
    }
}

/// Starts a gateway that must be refused before its server runs; returns
/// the agent's stderr.
async fn refused_start(sup: &Supervisor, ws: &Path, extra: &[&str]) -> String {
    let (mut child, stderr) = spawn_gateway(sup, ws, extra);
    let status = wait_exit(&mut child, &stderr).await;
    let text = stderr.lock().unwrap().clone();
    assert!(!status.success(), "{extra:?} was not refused:\n{text}");
    text
}

fn egress_records(sup: &Supervisor, session: &str) -> Vec<Value> {
    sup.session_records(session)
        .into_iter()
        .filter(|r| r["event"] == "mcp_egress")
        .collect()
}

async fn wait_egress_records(sup: &Supervisor, session: &str, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = egress_records(sup, session);
        if r.len() >= n || Instant::now() > deadline {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn start_sup(backend: &str, extra: &str, wrapper: &[&str]) -> (Supervisor, PathBuf) {
    let sup = Supervisor::builder()
        .config(&format!("{extra}\n{RULES}"))
        .sandbox(backend)
        .wrapper(wrapper)
        .start();
    let ws = sup.dirs.workspace("ws", nix::unistd::getuid().as_raw());
    std::fs::write(ws.join(".shell_server.py"), SHELL_SERVER).unwrap();
    (sup, ws)
}

fn docroot() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("page.txt"), PAGE).unwrap();
    d
}

/// Forwarded to the allowed address and port only; nothing without the flag;
/// every connection on record.
async fn only_the_allowed_host(backend: &str, extra: &str, test: u32) {
    let a = addrs(test);
    let root = docroot();
    let _host = NetHost::start(&a, root.path());
    let (sup, ws) = start_sup(backend, extra, &[]);

    // Without --allow-net: no network at all.
    let gw = Gateway::start(&sup, &ws, &[]).await;
    let (text, is_error) = gw.fetch(&format!("http://{}/page.txt", a.a)).await;
    assert!(
        is_error && !text.contains(PAGE),
        "fetched without --allow-net: {text}"
    );
    gw.finish().await;

    let allow = format!("{}:80", a.a);
    let gw = Gateway::start(&sup, &ws, &["--allow-net", &allow]).await;
    let (text, is_error) = gw.fetch(&format!("http://{}/page.txt", a.a)).await;
    assert!(
        !is_error && text.contains(&format!("GOT {PAGE}")),
        "the allowed fetch: {text}\nstderr:\n{}",
        gw.stderr()
    );
    for url in [
        format!("http://{}/page.txt", a.b),
        format!("http://{}/page.txt", a.peer_side),
        format!("http://{}:8080/page.txt", a.a),
        "http://1.1.1.1/".to_string(),
    ] {
        let (text, is_error) = gw.fetch(&url).await;
        assert!(
            is_error && !text.contains(PAGE),
            "{url} was fetched: {text}"
        );
    }
    if backend == "native" {
        // The sandbox's own namespace is the wall (Landlock leaves TCP to
        // it): another port of the forwarded address has nothing behind it
        // there, and a bind on its loopback serves the sandbox alone; the
        // posture of every command is unchanged.
        let (text, _) = gw.fetch(&format!("http://{}:8080/page.txt", a.a)).await;
        assert!(text.contains("Errno 111"), "connect to port 8080: {text}");
        let (text, is_error) = gw
            .shell(
                "grep -E '^(Seccomp|NoNewPrivs|CapEff):' /proc/self/status; \
                 python3 -c 'import socket; s = socket.socket(); s.bind((\"127.0.0.1\", 8081)); print(\"BOUND\")'",
            )
            .await;
        assert!(!is_error && text.contains("BOUND"), "bind: {text}");
        assert!(text.contains("Seccomp:\t2"), "{text}");
        assert!(text.contains("NoNewPrivs:\t1"), "{text}");
        assert!(text.contains("CapEff:\t0000000000000000"), "{text}");
    }
    let session = gw.session.clone();
    let records = wait_egress_records(&sup, &session, 1).await;
    gw.finish().await;
    // Only the allowed connection reached the supervisor: the others had
    // nowhere to go inside the sandbox.
    assert_eq!(records.len(), 1, "{records:#?}");
    let r = &records[0];
    assert_eq!(r["server"], "shell", "{r}");
    assert_eq!(r["host"], a.a.as_str(), "{r}");
    assert_eq!(r["port"], 80, "{r}");
    assert_eq!(r["address"], format!("{}:80", a.a).as_str(), "{r}");
    assert!(r["refused"].is_null(), "{r}");
    assert!(r["bytes_out"].as_u64().unwrap() > 0, "{r}");
    assert!(r["bytes_in"].as_u64().unwrap() > PAGE.len() as u64, "{r}");
    assert!(r["duration_ms"].is_u64(), "{r}");
    let started: Vec<Value> = sup
        .session_records(&session)
        .into_iter()
        .filter(|r| r["event"] == "mcp_server_started")
        .collect();
    assert_eq!(started[0]["allow_net"], json!([allow]), "{started:?}");
    verify_audit(&sup);
}

/// Refused at start, with the guard's sentence naming the host; the
/// server never ran.
async fn inward_hosts_are_refused_at_start(backend: &str, extra: &str) {
    let (sup, ws) = start_sup(backend, extra, &[]);
    for (host, says) in [
        ("169.254.169.254", "169.254.169.254"),
        ("localhost", "localhost"),
        ("10.1.2.3:443", "10.1.2.3"),
        ("[::1]", "::1"),
        ("metadata.google.internal", "metadata"),
        ("example.com:0", "port"),
        ("http://example.com", "bare host"),
    ] {
        let text = refused_start(&sup, &ws, &["--allow-net", host]).await;
        assert!(
            text.contains("--allow-net") && text.contains(says),
            "{host}: {text}"
        );
    }
    // Refused before the sandbox: no server ever started.
    let started: Vec<Value> = sup
        .audit_files("audit-")
        .iter()
        .flat_map(|p| read_records(p))
        .filter(|r| r["event"] == "mcp_server_started")
        .collect();
    assert!(started.is_empty(), "a refused start ran: {started:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_forwards_only_the_allowed_host() {
    if !ready("mcp_gateway_net_native") {
        return;
    }
    only_the_allowed_host("native", "", 0).await;
    inward_hosts_are_refused_at_start("native", "").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_forwards_only_the_allowed_host() {
    let Some(image) = full_image_or_skip("mcp_gateway_net_docker") else {
        return;
    };
    let extra = format!("[sandbox]\nimage = \"{image}\"\n");
    only_the_allowed_host("docker", &extra, 1).await;
    inward_hosts_are_refused_at_start("docker", &extra).await;
}

/// A name: resolved by the supervisor (an /etc/hosts of this test's own, in
/// the supervisor's private mount namespace), pointed at the listener by
/// the sandbox's /etc/hosts; a name resolving inward is refused at start,
/// and one that turns inward later is refused at connect and recorded.
async fn a_name(backend: &str, extra: &str, test: u32) {
    let a = addrs(test);
    let root = docroot();
    let _host = NetHost::start(&a, root.path());
    let name = format!("egress-{}.example.com", a.tag);
    let inward = format!("inward-{}.example.com", a.tag);
    let hosts = root.path().join("hosts");
    let base = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    let write_hosts = |ip_for_name: &str| {
        // In place (not renamed): the bind mount keeps this inode.
        std::fs::write(
            &hosts,
            format!("{base}\n{ip_for_name} {name}\n10.1.2.3 {inward}\n"),
        )
        .unwrap();
    };
    write_hosts(&a.a);
    let script = format!("mount --bind {} /etc/hosts && exec \"$@\"", hosts.display());
    let wrapper = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        &script,
        "sh",
    ];
    let (sup, ws) = start_sup(backend, extra, &wrapper);

    let text = refused_start(&sup, &ws, &["--allow-net", &inward]).await;
    assert!(
        text.contains(&inward) && text.contains("10.1.2.3"),
        "{inward}: {text}"
    );

    let allow = format!("{name}:80");
    let gw = Gateway::start(&sup, &ws, &["--allow-net", &allow]).await;
    let (text, is_error) = gw.fetch(&format!("http://{name}/page.txt")).await;
    assert!(
        !is_error && text.contains(&format!("GOT {PAGE}")),
        "the allowed name: {text}\nstderr:\n{}",
        gw.stderr()
    );
    // Rebinding: the name now resolves inward; the next connection is
    // refused and recorded.
    write_hosts("10.1.2.3");
    let (text, is_error) = gw.fetch(&format!("http://{name}/page.txt")).await;
    assert!(
        is_error && !text.contains(PAGE),
        "fetched after rebinding: {text}"
    );
    let session = gw.session.clone();
    let records = wait_egress_records(&sup, &session, 2).await;
    gw.finish().await;
    assert_eq!(records.len(), 2, "{records:#?}");
    assert_eq!(records[0]["host"], name.as_str(), "{records:?}");
    assert_eq!(records[0]["address"], format!("{}:80", a.a).as_str());
    assert!(records[0]["bytes_in"].as_u64().unwrap() > 0);
    assert_eq!(records[1]["host"], name.as_str());
    assert!(records[1]["address"].is_null(), "{}", records[1]);
    let why = records[1]["refused"].as_str().unwrap_or_default();
    assert!(why.contains("10.1.2.3"), "{why}");
    verify_audit(&sup);
}

/// A sandbox that hammers a refused host cannot grow the audit log without
/// bound: 64 refusals are recorded one by one, the rest counted into one
/// `refusals_summary` record when the gateway ends.
async fn refused_egress_records_are_bounded(backend: &str, extra: &str, test: u32) {
    let a = addrs(test);
    let root = docroot();
    let _host = NetHost::start(&a, root.path());
    let name = format!("hammer-{}.example.com", a.tag);
    let hosts = root.path().join("hosts");
    let base = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
    let write_hosts = |ip: &str| {
        std::fs::write(&hosts, format!("{base}\n{ip} {name}\n")).unwrap();
    };
    write_hosts(&a.a);
    let script = format!("mount --bind {} /etc/hosts && exec \"$@\"", hosts.display());
    let wrapper = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        &script,
        "sh",
    ];
    let (sup, ws) = start_sup(backend, extra, &wrapper);
    let allow = format!("{name}:80");
    let gw = Gateway::start(&sup, &ws, &["--allow-net", &allow]).await;
    // Now inward: every connection from inside is refused at connect.
    write_hosts("10.1.2.3");
    let hammer = format!(
        "python3 -c 'import socket\nfor _ in range(100):\n    s = socket.socket()\n    try:\n        s.connect((\"{name}\", 80)); s.recv(1)\n    except OSError:\n        pass\n    s.close()\nprint(\"hammered\")'"
    );
    let (text, _) = gw.shell(&hammer).await;
    assert!(text.contains("hammered"), "{text}");
    let session = gw.session.clone();
    wait_egress_records(&sup, &session, 64).await;
    gw.finish().await;
    let records = wait_egress_records(&sup, &session, 65).await;
    let one_by_one = records
        .iter()
        .filter(|r| r["end"] != "refusals_summary")
        .count();
    let summaries: Vec<_> = records
        .iter()
        .filter(|r| r["end"] == "refusals_summary")
        .collect();
    assert_eq!(one_by_one, 64, "{records:#?}");
    assert_eq!(summaries.len(), 1, "{records:#?}");
    assert_eq!(summaries[0]["suppressed"], 36, "{}", summaries[0]);
    assert!(
        summaries[0]["refused"]
            .as_str()
            .unwrap_or_default()
            .contains("100 connections were refused"),
        "{}",
        summaries[0]
    );
    verify_audit(&sup);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_refused_egress_records_are_bounded() {
    if !ready("mcp_gateway_net_native_bounded") {
        return;
    }
    refused_egress_records_are_bounded("native", "", 6).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_forwards_a_name_and_refuses_it_once_it_turns_inward() {
    if !ready("mcp_gateway_net_native_name") {
        return;
    }
    a_name("native", "", 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_forwards_a_name_and_refuses_it_once_it_turns_inward() {
    let Some(image) = full_image_or_skip("mcp_gateway_net_docker_name") else {
        return;
    };
    a_name("docker", &format!("[sandbox]\nimage = \"{image}\"\n"), 3).await;
}

/// The full sandbox image (Python for the wrapped server), or `None` after
/// a `skipped:` line (a failure under TOLLGATE_REQUIRE_DOCKER=1).
pub(crate) fn full_image_or_skip(test: &str) -> Option<String> {
    if !ready(test) {
        return None;
    }
    let image = format!("tollgate-sandbox:{}", env!("CARGO_PKG_VERSION"));
    let ok = StdCommand::new("docker")
        .args(["image", "inspect", &image])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return Some(image);
    }
    let why = format!("needs a docker engine with {image} (sandbox-image/build.sh)");
    let require = |v: &str| std::env::var(v).as_deref() == Ok("1");
    if require("TOLLGATE_REQUIRE_DOCKER") || require("TOLLGATE_REQUIRE_DOCKER_FULL") {
        panic!("{test}: {why}");
    }
    eprintln!("{test}: skipped: {why}");
    None
}

/// Revoke while a forwarded connection is open: the connection ends with the
/// session (recorded, with the reason), and the gateway exits 3.
async fn revoke_ends_the_forwarded_connections(backend: &str, extra: &str, test: u32) {
    let a = addrs(test);
    let root = docroot();
    let _host = NetHost::start(&a, root.path());
    let (sup, ws) = start_sup(backend, extra, &[]);
    let allow = format!("{}:80", a.a);
    let gw = Gateway::start(&sup, &ws, &["--allow-net", &allow]).await;
    let peer = gw.client.as_ref().unwrap().peer().clone();
    let cmd = format!(
        "python3 -c 'import socket, sys, time; s = socket.create_connection((sys.argv[1], 80)); open(\"connected\", \"w\").close(); time.sleep(600)' {}",
        a.a
    );
    let call = tokio::spawn(async move {
        let mut p = CallToolRequestParams::new("run_shell");
        p.arguments = json!({ "command": cmd }).as_object().cloned();
        peer.call_tool(p).await
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ws.join("connected").exists() {
        assert!(
            Instant::now() < deadline,
            "the connection never opened; stderr:\n{}",
            gw.stderr()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let session = gw.session.clone();
    let sup_ref = &sup;
    let (code, out, err) = tokio::task::block_in_place(|| {
        agent_support::ctl(
            sup_ref,
            &["revoke", &session, "--reason", "egress test revoke"],
        )
    });
    assert_eq!(code, 0, "{out}{err}");
    let r = serde_json::to_value(call.await.unwrap().unwrap()).unwrap();
    assert!(text_of(&r).1, "{r}");
    let mut gw = gw;
    let status = wait_exit(&mut gw.0.child, &gw.0.stderr).await;
    assert_eq!(status.code(), Some(3), "{}", gw.stderr());
    let records = wait_egress_records(&sup, &session, 1).await;
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!(records[0]["address"], allow.as_str(), "{}", records[0]);
    assert_eq!(records[0]["end"], "the gateway ended", "{}", records[0]);
    verify_audit(&sup);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_revoke_ends_the_forwarded_connections() {
    if !ready("mcp_gateway_net_native_revoke") {
        return;
    }
    revoke_ends_the_forwarded_connections("native", "", 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_revoke_ends_the_forwarded_connections() {
    let Some(image) = full_image_or_skip("mcp_gateway_net_docker_revoke") else {
        return;
    };
    let extra = format!("[sandbox]\nimage = \"{image}\"\n");
    revoke_ends_the_forwarded_connections("docker", &extra, 5).await;
}

/// Under `[network]`: the gateway's server reaches the allowed host through
/// the wall and is refused the unlisted one, with the reason.
async fn behind_the_wall(backend: &str, extra: &str, test: u32) {
    let a = addrs(test);
    let root = docroot();
    let _host = NetHost::start(&a, root.path());
    let network = format!("[network]\nallow = [\"{}:80\"]\n", a.a);
    let (sup, ws) = start_sup(backend, &format!("{extra}\n{network}"), &[]);
    let gw = Gateway::start(&sup, &ws, &[]).await;
    let (text, is_error) = gw.fetch(&format!("http://{}/page.txt", a.a)).await;
    assert!(
        !is_error && text.contains(&format!("GOT {PAGE}")),
        "the allowed fetch: {text}\nstderr:\n{}",
        gw.stderr()
    );
    let refused = format!(
        "python3 -c 'import sys, urllib.request, urllib.error\ntry: urllib.request.urlopen(sys.argv[1], timeout=20)\nexcept urllib.error.HTTPError as e: print(\"REFUSED\", e.code, e.read().decode())' http://{}/page.txt",
        a.b
    );
    let text = gw.shell_all(&refused).await;
    let b = format!("{}:80", a.b);
    assert!(
        text.contains(&format!(
            "REFUSED 403 network: refused {b} ({b} is not in [network] allow)"
        )),
        "the unlisted fetch: {text}"
    );
    let line = format!(
        "network: refused {b} (not in [network] allow; an operator can run: supervisorctl net allow {}",
        gw.session
    );
    assert!(text.contains(&line), "the result's line: {text}");
    // A raw socket that ignores the proxy variables: reset, never connected.
    // Everything it gets is read (to the end, or 64 KiB: an HTTP/1.0 server
    // closes after its answer), so the page cannot hide behind a short
    // first read.
    let raw = format!(
        "python3 -c 'import socket, sys\ngot = b\"\"\ntry:\n  s = socket.create_connection((sys.argv[1], 80), timeout=20); s.sendall(b\"GET /page.txt HTTP/1.0\\r\\n\\r\\n\")\n  while len(got) < 65536:\n    c = s.recv(4096)\n    if not c: break\n    got += c\n  print(\"CLOSED\")\nexcept OSError as e: print(\"RESET\", type(e).__name__, e)\nprint(\"GOT\", got.decode(errors=\"replace\"))' {}",
        a.b
    );
    let text = gw.shell_all(&raw).await;
    assert!(
        text.contains("GOT "),
        "the raw socket did not finish: {text}"
    );
    assert!(
        !text.contains(PAGE) && !text.contains("TimeoutError"),
        "the raw socket: {text}"
    );
    let session = gw.session.clone();
    gw.finish().await;
    let recs: Vec<Value> = sup
        .session_records(&session)
        .into_iter()
        .filter(|r| r["event"] == "net_connection")
        .collect();
    assert!(
        recs.iter().any(|r| r["phase"] == "open"
            && r["host"] == a.a.as_str()
            && r["address"] == format!("{}:80", a.a).as_str()),
        "{recs:#?}"
    );
    let refusals: Vec<&Value> = recs
        .iter()
        .filter(|r| r["phase"] == "refused" && r["host"] == a.b.as_str())
        .collect();
    assert!(
        refusals.iter().any(|r| r["via"] == "http")
            && refusals.iter().any(|r| r["via"] == "transparent"),
        "{recs:#?}"
    );
    // Attributed to the MCP call that ran when each opened.
    assert!(
        recs.iter()
            .all(|r| r["command"] == "mcp(shell.run_shell)" && r["call_id"].is_string()),
        "{recs:#?}"
    );
    assert!(egress_records(&sup, &session).is_empty(), "no forwards");
    verify_audit(&sup);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_gateway_server_behind_the_network_wall() {
    if !ready("mcp_gateway_net_native_wall") {
        return;
    }
    behind_the_wall("native", "", 87).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_gateway_server_behind_the_network_wall() {
    let Some(image) = full_image_or_skip("mcp_gateway_net_docker_wall") else {
        return;
    };
    let extra = format!("[sandbox]\nimage = \"{image}\"\n");
    behind_the_wall("docker", &extra, 88).await;
}
