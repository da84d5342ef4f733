//! `agent mcp-gateway` end to end (docs/MCP.md): the real `agent
//! mcp-gateway` process, driven over stdio by rmcp's client, in front of a
//! real supervisor that runs a wrapped MCP server in the session's sandbox.
//! The server is a small one written here (`SHELL_SERVER`, Python) that
//! runs shell commands and writes files wherever it is told and checks
//! nothing itself: whatever it cannot do, the sandbox stopped.
//!
//! Pinned here: a write outside the workspace fails because of the sandbox
//! (and one inside works); a tool denied by `mcp(NAME.TOOL)` is gone from
//! `tools/list` and a call to it never reaches the server; an unnamed tool
//! asks and an operator decides; every call is recorded (server, tool,
//! arguments, decision, result size, duration) and `audit verify` passes;
//! revoke mid-call ends the call with the reason, the server's process tree
//! is killed and the gateway exits 3; a server that writes garbage, answers
//! requests it was never sent, or crashes leaves the client with a clear
//! end and no process behind.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;
use crate::mcp_support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_support::{ctl, ready, verify_audit, wait_for_approval};
use mcp_support::{McpAgent, TestClient, text_of, wait_exit};
use rmcp::model::{CallToolRequestParams, ProtocolVersion};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::process::Command;
use tollgate_e2e::harness::{Supervisor, bin};

// The wrapped server: mcp_support/shell_server.py.
use mcp_support::SHELL_SERVER;

/// Rules: every tool of `shell` allowed but `danger`; `asked` only by mode.
const RULES: &str = r#"
[policy]
allow = ["mcp(shell.*)"]
deny = ["mcp(shell.danger)"]

[session]
approval_timeout_s = 60
session_can_approve = false

[llm]
provider = "script"
"#;

fn start(backend: &str, config: &str) -> (Supervisor, PathBuf) {
    start_for(backend, config, nix::unistd::getuid().as_raw())
}

/// An unprivileged uid for the sessions that must not be root's.
const USER: u32 = 64124;

fn start_for(backend: &str, config: &str, uid: u32) -> (Supervisor, PathBuf) {
    let sup = Supervisor::builder()
        .config(config)
        .sandbox(backend)
        .start();
    let ws = sup.dirs.workspace("ws", uid);
    std::fs::write(ws.join(".shell_server.py"), SHELL_SERVER).unwrap();
    (sup, ws)
}

/// Starts `agent mcp-gateway` with an rmcp client on its stdio (a
/// [`McpAgent`]).
struct Gateway;

impl Gateway {
    async fn start(sup: &Supervisor, ws: &Path, name: &str, extra: &[&str]) -> McpAgent {
        let mut args: Vec<&str> = extra.to_vec();
        args.extend(["--", "python3", ".shell_server.py"]);
        Gateway::spawn(sup, ws, name, &args).await
    }

    async fn start_command(sup: &Supervisor, ws: &Path, name: &str, command: &[&str]) -> McpAgent {
        let mut args = vec!["--"];
        args.extend_from_slice(command);
        Gateway::spawn(sup, ws, name, &args).await
    }

    async fn spawn(sup: &Supervisor, ws: &Path, name: &str, args: &[&str]) -> McpAgent {
        let client = TestClient::new(ProtocolVersion::V_2025_06_18, None);
        Gateway::spawn_with(sup, ws, name, args, client).await
    }

    async fn spawn_with(
        sup: &Supervisor,
        ws: &Path,
        name: &str,
        args: &[&str],
        client: TestClient,
    ) -> McpAgent {
        Gateway::spawn_as(sup, ws, name, args, client, None).await
    }

    /// As `uid` when given (through setpriv, the agent binary staged where
    /// that uid can run it).
    async fn spawn_as(
        sup: &Supervisor,
        ws: &Path,
        name: &str,
        args: &[&str],
        client: TestClient,
        uid: Option<u32>,
    ) -> McpAgent {
        let mut cmd = match uid {
            Some(u) => {
                let mut c = Command::new("setpriv");
                c.args([
                    format!("--reuid={u}"),
                    format!("--regid={u}"),
                    "--clear-groups".to_string(),
                    "--".to_string(),
                ])
                .arg(sup.dirs.staged_bin("agent"));
                c
            }
            None => Command::new(bin("agent")),
        };
        let mut child = cmd
            .arg("mcp-gateway")
            .args(["--name", name])
            .args(args)
            .env("TOLLGATE_SOCKET", &sup.agent_socket)
            .current_dir(ws)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn agent mcp-gateway");
        let stderr = mcp_support::collect_stderr(&mut child);
        McpAgent::connect(child, stderr, client).await
    }
}

/// Processes whose command line contains `needle`.
fn processes_with(needle: &str) -> Vec<u32> {
    let me = std::process::id();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| {
                    String::from_utf8_lossy(&c)
                        .replace('\0', " ")
                        .contains(needle)
                })
                .unwrap_or(false)
        })
        .collect()
}

async fn wait_gone(needle: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if processes_with(needle).is_empty() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

fn records_of<'a>(records: &'a [Value], event: &str, mcp_tool: &str) -> Vec<&'a Value> {
    records
        .iter()
        .filter(|r| r["event"] == event && r["mcp_tool"] == mcp_tool)
        .collect()
}

/// The server checks nothing; the sandbox stops what leaves the workspace,
/// the policy removes and refuses the denied tool, and every call is on
/// record. For a root session and an unprivileged one (`uid`).
async fn sandbox_denial_and_audit(backend: &str, extra: &str, uid: Option<u32>) {
    let owner = uid.unwrap_or_else(|| nix::unistd::getuid().as_raw());
    let (sup, ws) = start_for(backend, &format!("{extra}\n{RULES}"), owner);
    let args = ["--", "python3", ".shell_server.py"];
    let client = TestClient::new(ProtocolVersion::V_2025_06_18, None);
    let gw = Gateway::spawn_as(&sup, &ws, "shell", &args, client, uid).await;

    let names = gw.tool_names().await;
    assert!(names.contains(&"run_shell".to_string()), "{names:?}");
    assert!(
        !names.contains(&"danger".to_string()),
        "a denied tool is listed: {names:?}"
    );

    // Outside the workspace: a directory of the test's own, writable on the
    // host, and /etc.
    let outside = sup.dirs.root.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    for path in [
        outside.join("escaped.txt"),
        PathBuf::from("/etc/tollgate-gateway-escape"),
    ] {
        let r = gw
            .call(
                "write_file",
                json!({"path": path.to_str().unwrap(), "content": "escaped"}),
            )
            .await;
        let (text, is_error) = text_of(&r);
        assert!(is_error, "{}: {r}", path.display());
        // The call was allowed and forwarded: this is the server's own
        // OSError (ENOENT, EROFS or EACCES), from the sandbox.
        assert!(
            text.contains("[Errno ") && !text.contains("policy"),
            "the server's own failure (the sandbox stopped it): {text}"
        );
        assert!(!path.exists(), "{} was written", path.display());
    }
    let r = gw.call("read_file", json!({"path": "/etc/shadow"})).await;
    let (text, is_error) = text_of(&r);
    let host_shadow = std::fs::read_to_string("/etc/shadow").unwrap_or_default();
    assert!(
        host_shadow.is_empty() || !text.contains(host_shadow.trim()),
        "the host's /etc/shadow was read: {r}"
    );
    if backend == "native" || uid.is_some() {
        // Landlock hides it; in a container a root session reads the
        // image's own file (not the host's), a non-root one nothing.
        assert!(is_error && text.contains("Error"), "read /etc/shadow: {r}");
    }

    // Inside: works, as the session's user.
    let r = gw
        .call(
            "write_file",
            json!({"path": ws.join("inside.txt").to_str().unwrap(), "content": "in"}),
        )
        .await;
    assert!(!text_of(&r).1, "{r}");
    assert_eq!(
        std::fs::read_to_string(ws.join("inside.txt")).unwrap(),
        "in"
    );
    let r = gw
        .call(
            "run_shell",
            json!({"command": "echo ran > ran.txt; echo UID-$(id -u); grep '^Seccomp:' /proc/self/status; \
                   python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 53), 2)' 2>/dev/null && echo NET || echo NO-NET"}),
        )
        .await;
    let (text, is_error) = text_of(&r);
    assert!(!is_error, "{r}");
    assert!(text.contains("NO-NET"), "{text}");
    assert!(text.contains(&format!("UID-{owner}\n")), "{text}");
    if backend == "native" {
        assert!(text.contains("Seccomp:\t2"), "{text}");
    }
    assert!(ws.join("ran.txt").exists());

    // The denied tool: refused here, never sent.
    let r = gw.call("danger", json!({})).await;
    let (text, is_error) = text_of(&r);
    assert!(is_error && text.contains("deny: mcp(shell.danger)"), "{r}");
    assert!(
        !ws.join("DANGER-RAN").exists(),
        "the denied call reached the server"
    );

    let session = gw.session.clone();
    let (status, err) = gw.finish().await;
    assert!(status.success(), "{status}: {err}");
    assert!(
        wait_gone(".shell_server.py").await,
        "the server outlived its gateway"
    );

    let records = sup.session_records(&session);
    let checks = records_of(&records, "permission_check", "write_file");
    assert_eq!(checks.len(), 3, "{checks:?}");
    for c in &checks {
        assert_eq!(c["tool"], "mcp");
        assert_eq!(c["server"], "shell");
        assert_eq!(c["decision"], "allow");
        assert_eq!(c["rule"], "allow: mcp(shell.*)");
        assert!(c["args"].as_str().unwrap().contains("content"), "{c}");
    }
    let denied = records_of(&records, "permission_check", "danger");
    assert_eq!(denied.len(), 1);
    assert_eq!(denied[0]["decision"], "deny");
    assert!(records_of(&records, "tool_started", "danger").is_empty());
    let results = records_of(&records, "tool_result", "run_shell");
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["status"], "ok");
    assert!(results[0]["bytes"].as_u64().unwrap() > 0);
    assert!(results[0]["duration_ms"].is_u64());
    let events: Vec<&str> = records.iter().filter_map(|r| r["event"].as_str()).collect();
    assert!(events.contains(&"mcp_server_started"), "{events:?}");
    assert!(events.contains(&"mcp_server_exited"), "{events:?}");
    verify_audit(&sup);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_checks_nothing_is_held_by_the_native_sandbox() {
    if !ready("mcp_gateway_native") {
        return;
    }
    sandbox_denial_and_audit("native", "", None).await;
    sandbox_denial_and_audit("native", "", Some(USER)).await;
}

/// The same through the Docker backend, in the full image (the minimal one
/// has no Python): the server runs in the session's container.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_checks_nothing_is_held_by_the_docker_sandbox() {
    let Some(image) = full_image_or_skip("mcp_gateway_docker") else {
        return;
    };
    let extra = format!("[sandbox]\nimage = \"{image}\"\n");
    sandbox_denial_and_audit("docker", &extra, None).await;
    sandbox_denial_and_audit("docker", &extra, Some(USER)).await;
}

/// The full sandbox image, or `None` after a `skipped:` line (a failure
/// under TOLLGATE_REQUIRE_DOCKER=1 or TOLLGATE_REQUIRE_DOCKER_FULL=1).
fn full_image_or_skip(test: &str) -> Option<String> {
    if !ready(test) {
        return None;
    }
    let image = format!("tollgate-sandbox:{}", env!("CARGO_PKG_VERSION"));
    let ok = std::process::Command::new("docker")
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

/// Where `.ci/run` installs `@modelcontextprotocol/server-filesystem`.
fn fs_server_or_skip(test: &str) -> Option<PathBuf> {
    if !ready(test) {
        return None;
    }
    let dir = std::env::var_os("TOLLGATE_MCP_SERVERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/tollgate-mcp"));
    let script = dir.join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    if script.is_file() && std::path::Path::new("/usr/bin/node").exists() {
        return Some(script);
    }
    let why = format!(
        "needs node and {} (npm install --prefix {} @modelcontextprotocol/server-filesystem@2026.8.31, as .ci/run does)",
        script.display(),
        dir.display()
    );
    if std::env::var("TOLLGATE_REQUIRE_CLIENTS").as_deref() == Ok("1") {
        panic!("{test}: {why} (TOLLGATE_REQUIRE_CLIENTS=1)");
    }
    eprintln!("{test}: skipped: {why}");
    None
}

/// The real `@modelcontextprotocol/server-filesystem`, given `/` as its
/// allowed directory and a client that declares no roots (with roots it
/// would confine itself, hiding the sandbox): its reads and writes inside
/// the workspace work; reading /etc/shadow and writing outside the
/// workspace fail because of the sandbox (its own checks allow all of /);
/// `mcp(fs.write_file)` in deny removes that tool from tools/list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_filesystem_server_is_held_by_the_sandbox_not_its_own_checks() {
    let Some(script) = fs_server_or_skip("mcp_gateway_server_filesystem") else {
        return;
    };
    let config = "[policy]\nallow = [\"mcp(fs.*)\"]\ndeny = [\"mcp(fs.write_file)\"]\n[llm]\nprovider = \"script\"\n";
    let (sup, ws) = start("native", config);
    std::fs::write(ws.join("notes.txt"), "inside the workspace\n").unwrap();
    let outside = sup.dirs.root.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("host-secret.txt"), "HOST-ONLY\n").unwrap();
    let gw =
        Gateway::start_command(&sup, &ws, "fs", &["node", script.to_str().unwrap(), "/"]).await;

    let names = gw.tool_names().await;
    assert!(names.contains(&"read_text_file".to_string()), "{names:?}");
    assert!(names.contains(&"create_directory".to_string()), "{names:?}");
    assert!(
        !names.contains(&"write_file".to_string()),
        "mcp(fs.write_file) is denied but listed: {names:?}"
    );
    let r = gw
        .call(
            "read_text_file",
            json!({"path": ws.join("notes.txt").to_str().unwrap()}),
        )
        .await;
    assert_eq!(text_of(&r), ("inside the workspace\n".to_string(), false));

    for path in [
        PathBuf::from("/etc/shadow"),
        outside.join("host-secret.txt"),
    ] {
        let r = gw
            .call("read_text_file", json!({"path": path.to_str().unwrap()}))
            .await;
        let (text, is_error) = text_of(&r);
        assert!(is_error, "{}: {r}", path.display());
        assert!(
            !text.contains("HOST-ONLY") && !text.contains("root:"),
            "{}: {text}",
            path.display()
        );
        assert!(
            !text.contains("Access denied - path outside allowed directories"),
            "the server's own check refused it, not the sandbox: {text}"
        );
    }
    // Writing outside fails from the sandbox.
    let r = gw
        .call(
            "create_directory",
            json!({"path": outside.join("made-by-fs").to_str().unwrap()}),
        )
        .await;
    assert!(text_of(&r).1, "{r}");
    assert!(
        !outside.join("made-by-fs").exists(),
        "the server wrote outside the workspace"
    );
    // Inside: an edit works. (A new path does not: the server lists each
    // directory from its allowed `/` down to resolve Unicode spellings, and
    // the sandbox does not let it list `/`.)
    let r = gw
        .call(
            "edit_file",
            json!({"path": ws.join("notes.txt").to_str().unwrap(),
                   "edits": [{"oldText": "inside", "newText": "edited inside"}]}),
        )
        .await;
    assert!(!text_of(&r).1, "{r}");
    assert_eq!(
        std::fs::read_to_string(ws.join("notes.txt")).unwrap(),
        "edited inside the workspace\n"
    );
    let r = gw
        .call(
            "edit_file",
            json!({"path": outside.join("host-secret.txt").to_str().unwrap(),
                   "edits": [{"oldText": "HOST", "newText": "EDITED"}]}),
        )
        .await;
    assert!(text_of(&r).1, "{r}");
    assert_eq!(
        std::fs::read_to_string(outside.join("host-secret.txt")).unwrap(),
        "HOST-ONLY\n",
        "the server edited a file outside the workspace"
    );
    // The denied tool: refused before the server.
    let r = gw
        .call(
            "write_file",
            json!({"path": ws.join("w.txt").to_str().unwrap(), "content": "x"}),
        )
        .await;
    let (text, is_error) = text_of(&r);
    assert!(is_error && text.contains("deny: mcp(fs.write_file)"), "{r}");
    assert!(!ws.join("w.txt").exists());

    let session = gw.session.clone();
    let (status, err) = gw.finish().await;
    assert!(status.success(), "{status}: {err}");
    assert!(
        wait_gone(script.to_str().unwrap()).await,
        "the server outlived its gateway"
    );
    let records = sup.session_records(&session);
    assert_eq!(
        records_of(&records, "permission_check", "write_file")[0]["decision"],
        "deny"
    );
    assert!(!records_of(&records, "tool_result", "read_text_file").is_empty());
    verify_audit(&sup);
}

/// A tool no rule names asks; an operator approves one call and denies the
/// next, and each outcome reaches the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unnamed_tool_asks_and_an_operator_decides() {
    if !ready("mcp_gateway_ask") {
        return;
    }
    let config = RULES.replace("allow = [\"mcp(shell.*)\"]", "allow = []");
    let (sup, ws) = start("native", &config);
    let gw = Gateway::start(&sup, &ws, "shell", &["--mode", "default"]).await;
    for (verb, want_error) in [("approve", false), ("deny", true)] {
        let peer = gw.client().peer().clone();
        let call = tokio::spawn(async move {
            let mut p = CallToolRequestParams::new("run_shell");
            p.arguments = json!({"command": "echo approved-run >> asked.txt"})
                .as_object()
                .cloned();
            peer.call_tool(p).await
        });
        let sup_ref = &sup;
        let approval = tokio::task::block_in_place(|| wait_for_approval(sup_ref));
        assert_eq!(approval["tool"], "mcp", "{approval}");
        assert_eq!(approval["target"], "shell.run_shell", "{approval}");
        let id = approval["id"].as_str().unwrap().to_string();
        let (code, out, err) = tokio::task::block_in_place(|| ctl(sup_ref, &[verb, &id]));
        assert_eq!(code, 0, "{out}{err}");
        let r = serde_json::to_value(call.await.unwrap().unwrap()).unwrap();
        let (text, is_error) = text_of(&r);
        assert_eq!(is_error, want_error, "{verb}: {r}");
        if want_error {
            assert!(text.starts_with("user denied"), "{text}");
        }
    }
    assert_eq!(
        std::fs::read_to_string(ws.join("asked.txt")).unwrap(),
        "approved-run\n",
        "the approved call ran once, the denied one never"
    );
    let (status, err) = gw.finish().await;
    assert!(status.success(), "{status}: {err}");
    verify_audit(&sup);
}

/// With `session_can_approve` and a client that declared elicitation, an
/// ask is put to the person through the client (as `agent mcp` does): an
/// accepted form runs the call once, a declined one denies it with the
/// contract's sentence; both protocol versions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_is_put_to_the_person_through_an_elicitation() {
    if !ready("mcp_gateway_elicit") {
        return;
    }
    let config = RULES
        .replace("allow = [\"mcp(shell.*)\"]", "allow = []")
        .replace("session_can_approve = false", "session_can_approve = true");
    for version in [ProtocolVersion::V_2025_06_18, ProtocolVersion::V_2025_11_25] {
        let (sup, ws) = start("native", &config);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let client = TestClient::new(version.clone(), Some(tx));
        let args = ["--mode", "default", "--", "python3", ".shell_server.py"];
        let gw = Gateway::spawn_with(&sup, &ws, "shell", &args, client).await;
        for (answer, want_error) in [
            (
                rmcp::model::ElicitResult::new(rmcp::model::ElicitationAction::Accept)
                    .with_content(json!({"decision": "once"})),
                false,
            ),
            (
                rmcp::model::ElicitResult::new(rmcp::model::ElicitationAction::Decline),
                true,
            ),
        ] {
            let peer = gw.client().peer().clone();
            let call = tokio::spawn(async move {
                let mut p = CallToolRequestParams::new("run_shell");
                p.arguments = json!({"command": "echo elicited >> elicited.txt"})
                    .as_object()
                    .cloned();
                peer.call_tool(p).await
            });
            let e = tokio::time::timeout(Duration::from_secs(60), rx.recv())
                .await
                .expect("no elicitation came")
                .unwrap();
            assert!(
                e.message.contains("shell.run_shell") || e.message.contains("run_shell"),
                "{}",
                e.message
            );
            assert!(
                e.schema["properties"]["decision"].is_object(),
                "{}",
                e.schema
            );
            e.reply.send(answer).unwrap();
            let r = serde_json::to_value(call.await.unwrap().unwrap()).unwrap();
            let (text, is_error) = text_of(&r);
            assert_eq!(is_error, want_error, "{r}");
            if want_error {
                assert!(text.starts_with("user denied"), "{text}");
            }
        }
        assert_eq!(
            std::fs::read_to_string(ws.join("elicited.txt")).unwrap(),
            "elicited\n"
        );
        let session = gw.session.clone();
        let (status, err) = gw.finish().await;
        assert!(status.success(), "{status}: {err}");
        let records = sup.session_records(&session);
        let decided: Vec<&Value> = records
            .iter()
            .filter(|r| r["event"] == "approval_decided")
            .collect();
        assert_eq!(decided.len(), 2, "{decided:?}");
        assert!(
            decided[0]["by"].as_str().unwrap().contains("via session"),
            "{:?}",
            decided[0]
        );
        verify_audit(&sup);
    }
}

/// Revoke mid-call: the call ends with the reason, the server's whole
/// process tree is killed, the gateway exits 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_mid_call_ends_it_and_kills_the_server_tree() {
    if !ready("mcp_gateway_revoke") {
        return;
    }
    let (sup, ws) = start("native", RULES);
    let gw = Gateway::start(&sup, &ws, "shell", &[]).await;
    let marker = format!("93.{}", std::process::id());
    let peer = gw.client().peer().clone();
    let cmd = format!("sleep {marker}");
    let call = tokio::spawn(async move {
        let mut p = CallToolRequestParams::new("run_shell");
        p.arguments = json!({"command": cmd}).as_object().cloned();
        peer.call_tool(p).await
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while processes_with(&format!("sleep {marker}")).is_empty() {
        assert!(Instant::now() < deadline, "the command never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let sup_ref = &sup;
    let session = gw.session.clone();
    let (code, out, err) = tokio::task::block_in_place(|| {
        ctl(
            sup_ref,
            &["revoke", &session, "--reason", "gateway test revoke"],
        )
    });
    assert_eq!(code, 0, "{out}{err}");
    let r = serde_json::to_value(call.await.unwrap().unwrap()).unwrap();
    let (text, is_error) = text_of(&r);
    assert!(
        is_error && text.contains("revoked") && text.contains("gateway test revoke"),
        "{r}"
    );
    assert!(
        wait_gone(&format!("sleep {marker}")).await,
        "the command survived"
    );
    assert!(wait_gone(".shell_server.py").await, "the server survived");
    let mut gw = gw;
    let status = wait_exit(&mut gw.child, &gw.stderr).await;
    assert_eq!(status.code(), Some(3), "{}", gw.stderr());
    let records = sup.session_records(&session);
    let result = records_of(&records, "tool_result", "run_shell");
    assert_eq!(result.len(), 1, "{records:?}");
    assert_eq!(result[0]["status"], "stopped");
    verify_audit(&sup);
}

/// A server that writes garbage and answers a request it was never sent:
/// both are dropped with a note and the client goes on; a 50 MiB line is
/// dropped unbuffered and a flood of notifications passed on; a call it
/// never answers ends at the run timeout; when it crashes,
/// the client's connection ends, the gateway exits 1 and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misbehaving_server_is_contained_and_its_crash_ends_the_gateway() {
    if !ready("mcp_gateway_misbehave") {
        return;
    }
    let config = format!("[sandbox]\nrun_timeout_s = 2\nmax_run_timeout_s = 2\n{RULES}");
    let (sup, ws) = start("native", &config);
    let gw = Gateway::start(&sup, &ws, "shell", &[]).await;
    let r = gw.call("misbehave", json!({"how": "garbage"})).await;
    assert_eq!(text_of(&r), ("misbehaved".to_string(), false));
    let r = gw
        .call("run_shell", json!({"command": "echo still-here"}))
        .await;
    assert!(text_of(&r).0.contains("still-here"), "{r}");
    let err = gw.stderr();
    assert!(
        err.contains("dropped a line from the server that is not JSON: this is not json"),
        "{err}"
    );
    assert!(
        err.contains("a request it was never sent (id 424242)"),
        "{err}"
    );

    // A tool it does not have: decided and recorded like any call, and its
    // JSON-RPC error reaches the client.
    let mut p = CallToolRequestParams::new("ghost");
    p.arguments = json!({}).as_object().cloned();
    let e = gw.client().call_tool(p).await.unwrap_err();
    assert!(e.to_string().contains("unknown tool ghost"), "{e}");
    // A line of 50 MiB and 2000 notifications: dropped / passed on, the
    // call still answered.
    let r = gw.call("misbehave", json!({"how": "flood"})).await;
    assert_eq!(text_of(&r), ("flooded".to_string(), false));
    assert!(
        gw.stderr().contains("dropped a line of 52428800 bytes"),
        "{}",
        gw.stderr()
    );
    // No answer: the call ends at the sandbox's longest run timeout.
    let r = gw.call("misbehave", json!({"how": "hang"})).await;
    let (text, is_error) = text_of(&r);
    assert!(is_error && text.contains("did not answer within 2s"), "{r}");

    let peer = gw.client().peer().clone();
    let crash = tokio::spawn(async move {
        let mut p = CallToolRequestParams::new("misbehave");
        p.arguments = json!({"how": "crash"}).as_object().cloned();
        peer.call_tool(p).await
    });
    let answer = tokio::time::timeout(Duration::from_secs(60), crash)
        .await
        .expect("the crash left the client hanging")
        .unwrap();
    // Either the error result for the call in flight or the connection's
    // end: never a hang.
    if let Ok(r) = answer {
        let r = serde_json::to_value(r).unwrap();
        let (text, is_error) = text_of(&r);
        assert!(is_error && text.contains("ended before it answered"), "{r}");
    }
    let session = gw.session.clone();
    let mut gw = gw;
    let status = wait_exit(&mut gw.child, &gw.stderr).await;
    assert_eq!(status.code(), Some(1), "{}", gw.stderr());
    assert!(
        gw.stderr().contains("the MCP server exited with status 3"),
        "{}",
        gw.stderr()
    );
    assert!(wait_gone(".shell_server.py").await);
    let records = sup.session_records(&session);
    let ghost = records_of(&records, "tool_result", "ghost");
    assert_eq!(ghost.len(), 1, "{records:?}");
    assert_eq!(ghost[0]["status"], "error");
    let crashed = records_of(&records, "tool_result", "misbehave");
    assert!(
        crashed.iter().any(|r| r["status"] == "stopped"),
        "{crashed:?}"
    );
    let exited = records
        .iter()
        .find(|r| r["event"] == "mcp_server_exited")
        .unwrap();
    assert_eq!(exited["exit_code"], 3);
    verify_audit(&sup);
}

/// A client that sends garbage, a 10 MB line, and then goes away mid-call:
/// it gets a JSON-RPC error for each bad line, the gateway keeps serving,
/// and when it leaves, the call's command and the server are killed, the
/// outcome is recorded, the gateway exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_client_gets_clear_errors_and_its_departure_leaves_nothing_behind() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    if !ready("mcp_gateway_bad_client") {
        return;
    }
    let (sup, ws) = start("native", RULES);
    let mut child = Command::new(bin("agent"))
        .args([
            "mcp-gateway",
            "--name",
            "shell",
            "--",
            "python3",
            ".shell_server.py",
        ])
        .env("TOLLGATE_SOCKET", &sup.agent_socket)
        .current_dir(&ws)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let stderr = Arc::new(Mutex::new(String::new()));
    let mut err = child.stderr.take().unwrap();
    let s2 = Arc::clone(&stderr);
    tokio::spawn(async move {
        let mut chunk = [0u8; 4096];
        while let Ok(n) = err.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            s2.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&chunk[..n]));
        }
    });
    let mut next = async || -> Value {
        let l = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("no answer")
            .unwrap()
            .expect("stdout closed");
        serde_json::from_str(&l).unwrap()
    };
    stdin.write_all(b"this is not json\n").await.unwrap();
    let r = next().await;
    assert_eq!(r["error"]["code"], -32700, "{r}");
    let mut big = vec![b'x'; 10 * 1024 * 1024];
    big.push(b'\n');
    stdin.write_all(&big).await.unwrap();
    let r = next().await;
    assert_eq!(r["error"]["code"], -32600, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("too large"),
        "{r}"
    );
    // Still serving.
    stdin
        .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"t\",\"version\":\"0\"}}}\n")
        .await
        .unwrap();
    let r = next().await;
    assert_eq!(r["id"], 1);
    assert!(r["result"]["serverInfo"].is_object(), "{r}");
    let marker = format!("94.{}", std::process::id());
    let call = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{{\"name\":\"run_shell\",\"arguments\":{{\"command\":\"sleep {marker}\"}}}}}}\n"
    );
    stdin.write_all(call.as_bytes()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while processes_with(&format!("sleep {marker}")).is_empty() {
        assert!(Instant::now() < deadline, "the command never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(stdin);
    let status = wait_exit(&mut child, &stderr).await;
    assert!(status.success(), "{status}: {}", stderr.lock().unwrap());
    assert!(
        wait_gone(&format!("sleep {marker}")).await,
        "the command survived its client"
    );
    assert!(
        wait_gone(".shell_server.py").await,
        "the server survived its client"
    );
    let files = sup.audit_files("audit-");
    let records: Vec<Value> = files
        .iter()
        .flat_map(|f| tollgate_e2e::harness::read_records(f))
        .collect();
    let result = records_of(&records, "tool_result", "run_shell");
    assert_eq!(result.len(), 1, "{records:?}");
    assert_eq!(result[0]["status"], "stopped");
    verify_audit(&sup);
}

/// The redaction finding on the MCP path: the real filesystem server reads a
/// Latin-1 `settings.ini` (bytes that are not UTF-8) holding an AWS and a
/// Stripe key; what reaches the client, and the audit log, has both masked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_tool_results_mask_secrets_in_a_latin1_file() {
    let Some(script) = fs_server_or_skip("mcp_tool_results_mask_secrets_in_a_latin1_file") else {
        return;
    };
    let config = "[policy]\nallow = [\"mcp(fs.*)\"]\n[llm]\nprovider = \"script\"\n";
    let (sup, ws) = start("native", config);
    let (file, _) = super::sandbox_exec::latin1_settings();
    std::fs::write(ws.join("settings.ini"), &file).unwrap();
    let gw =
        Gateway::start_command(&sup, &ws, "fs", &["node", script.to_str().unwrap(), "/"]).await;
    let r = gw
        .call(
            "read_text_file",
            json!({"path": ws.join("settings.ini").to_str().unwrap()}),
        )
        .await;
    let (text, is_error) = text_of(&r);
    assert!(!is_error, "{r}");
    assert!(
        text.contains("aws_key_id=[REDACTED:aws-access-key]")
            && text.contains("stripe=[REDACTED:stripe-key]")
            && text.contains(" fin"),
        "{text}"
    );
    let stripe = format!("sk_{}_", "live");
    assert!(
        !text.contains("AKIAIOSFODNN7EXAMPLE") && !text.contains(&stripe),
        "{text}"
    );
    let session = gw.session.clone();
    let (status, err) = gw.finish().await;
    assert!(status.success(), "{status}: {err}");
    let records = serde_json::to_string(&sup.session_records(&session)).unwrap();
    assert!(
        !records.contains("AKIAIOSFODNN7EXAMPLE") && !records.contains(&stripe),
        "a key reached the audit log"
    );
}

/// The MCP finding: the wrapped server's requests to the client
/// (`sampling/createMessage`, `roots/list`) and the client's `resources/*`,
/// `prompts/*` passed undecided. Now each is decided by `mcp(SERVER.METHOD)`
/// rules (refused unless one allows it) and recorded: a refused one gets a
/// JSON-RPC error that says why, an allowed one passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_server_requests_and_client_resources_are_decided_and_recorded() {
    if !ready("mcp_server_requests_and_client_resources_are_decided_and_recorded") {
        return;
    }
    let config = RULES.replace(
        "allow = [\"mcp(shell.*)\"]",
        "allow = [\"mcp(shell.*)\", \"mcp(shell.roots/list)\", \"mcp(shell.resources/list)\"]",
    );
    let (sup, ws) = start("native", &config);
    let gw = Gateway::start(&sup, &ws, "shell", &[]).await;

    // The server asks the client's model: refused, saying why.
    let r = gw
        .call("ask_client", json!({"method": "sampling/createMessage"}))
        .await;
    let (text, _) = text_of(&r);
    let answer: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{text}"));
    let msg = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        answer["error"]["code"] == -32001
            && msg.contains("refused the MCP server's `sampling/createMessage`")
            && msg.contains("mcp(shell.sampling/createMessage)"),
        "{answer}"
    );
    // The server reads the client's roots: allowed by its rule, answered.
    let r = gw.call("ask_client", json!({"method": "roots/list"})).await;
    let (text, _) = text_of(&r);
    let answer: Value = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{text}"));
    assert!(answer["result"]["roots"].is_array(), "{answer}");

    // The client lists resources (allowed) and prompts (no rule: refused).
    let listed = gw.client().list_resources(None).await.unwrap();
    assert_eq!(listed.resources.len(), 1, "{listed:?}");
    let err = gw
        .client()
        .list_prompts(None)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("refused the client's `prompts/list`") && err.contains("no rule allows it"),
        "{err}"
    );

    let session = gw.session.clone();
    let (status, stderr) = gw.finish().await;
    assert!(status.success(), "{status}: {stderr}");
    let records = sup.session_records(&session);
    for (method, decision) in [
        ("sampling/createMessage", "deny"),
        ("roots/list", "allow"),
        ("resources/list", "allow"),
        ("prompts/list", "deny"),
    ] {
        let found = records_of(&records, "permission_check", method);
        assert_eq!(found.len(), 1, "{method}: {records:?}");
        assert_eq!(found[0]["decision"], decision, "{method}");
        assert_eq!(found[0]["server"], "shell", "{method}");
    }
    verify_audit(&sup);
}

/// The same finding with the real filesystem server: a client that declares
/// roots is asked for them by the server at start; with no rule naming
/// `roots/list` the request is refused and recorded (the server says so and
/// keeps its own directories), and its tools still work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_filesystem_server_cannot_read_the_clients_roots_unasked() {
    let Some(script) =
        fs_server_or_skip("the_real_filesystem_server_cannot_read_the_clients_roots_unasked")
    else {
        return;
    };
    let config = "[policy]\nallow = [\"mcp(fs.*)\"]\n[llm]\nprovider = \"script\"\n";
    let (sup, ws) = start("native", config);
    std::fs::write(ws.join("notes.txt"), "inside\n").unwrap();
    let caps: rmcp::model::ClientCapabilities =
        serde_json::from_value(json!({"roots": {"listChanged": false}})).unwrap();
    let client = TestClient {
        info: rmcp::model::ClientConfig::new(
            caps,
            rmcp::model::Implementation::new("tollgate-e2e", "0"),
        )
        .with_protocol_version(ProtocolVersion::V_2025_06_18),
        elicitations: None,
    };
    let args = ["--", "node", script.to_str().unwrap(), "/"];
    let gw = Gateway::spawn_with(&sup, &ws, "fs", &args, client).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let refused = loop {
        let records = sup.session_records(&gw.session);
        if let Some(r) = records_of(&records, "permission_check", "roots/list").first() {
            break (*r).clone();
        }
        assert!(
            Instant::now() < deadline,
            "no roots/list record; stderr:\n{}",
            gw.stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(refused["decision"], "deny", "{refused}");
    assert_eq!(refused["rule"], "mcp:method-default", "{refused}");
    let r = gw
        .call(
            "read_text_file",
            json!({"path": ws.join("notes.txt").to_str().unwrap()}),
        )
        .await;
    assert_eq!(text_of(&r), ("inside\n".to_string(), false));
    let stderr = gw.stderr();
    assert!(
        stderr.contains("refused the MCP server's `roots/list`"),
        "{stderr}"
    );
    let (status, err) = gw.finish().await;
    assert!(status.success(), "{status}: {err}");
    verify_audit(&sup);
}
