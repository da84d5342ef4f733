//! `agent mcp` end to end (docs/MCP.md): the real `agent mcp` process over
//! stdio, driven by rmcp's client, against a real supervisor. Each test says
//! what it pins: the tool list is ListTools with honest hints; a call runs
//! through the PEP, the sandbox and the audit; a denial is `isError` with
//! tollgate's sentence; approvals reach the person through an MCP
//! elicitation (first answer wins, operators included); revocation ends the
//! call in flight and every later one; and bad input gets a clear error
//! without anything running unrecorded or any process left behind.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;
use crate::mcp_support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_support::{ctl, events, ready, verify_audit, wait_for_approval};
use mcp_support::*;
use rmcp::model::{ElicitResult, ElicitationAction, ProtocolVersion};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tollgate_e2e::harness::{Supervisor, agent_client, authed};

const VERSIONS: [ProtocolVersion; 2] =
    [ProtocolVersion::V_2025_06_18, ProtocolVersion::V_2025_11_25];

fn start(backend: &str, extra: &str) -> (Supervisor, PathBuf) {
    let sup = Supervisor::builder()
        .config(&format!("{extra}\n{CONFIG}"))
        .sandbox(backend)
        .start();
    let ws = sup.dirs.workspace("ws", nix::unistd::getuid().as_raw());
    (sup, ws)
}

/// The supervisor's own ListTools for a session in `ws`: name → schema.
async fn list_tools_grpc(sup: &Supervisor, ws: &Path) -> Vec<(String, Value)> {
    let mut c = agent_client(&sup.agent_socket).await;
    let open = c
        .open_session(tollgate_proto::v1::OpenSessionRequest {
            workspace: ws.to_string_lossy().into_owned(),
            client: "test".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let tools = c
        .list_tools(authed(tollgate_proto::v1::ListToolsRequest {}, &open.token))
        .await
        .unwrap()
        .into_inner()
        .tools;
    c.close_session(authed(
        tollgate_proto::v1::CloseSessionRequest {},
        &open.token,
    ))
    .await
    .unwrap();
    tools
        .into_iter()
        .map(|t| (t.name, serde_json::from_str(&t.parameters_json).unwrap()))
        .collect()
}

fn hints(read_only: bool, destructive: bool, idempotent: bool, open_world: bool) -> Value {
    json!({"readOnlyHint": read_only, "destructiveHint": destructive,
           "idempotentHint": idempotent, "openWorldHint": open_world})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_is_list_tools_with_honest_hints_on_both_protocol_versions() {
    if !ready("mcp_tools_list") {
        return;
    }
    let (sup, ws) = start("native", "");
    let schemas = list_tools_grpc(&sup, &ws).await;
    let expected = [
        ("read_file", hints(true, false, true, false)),
        ("glob_files", hints(true, false, true, false)),
        ("grep", hints(true, false, true, false)),
        ("write_file", hints(false, true, true, false)),
        ("edit_file", hints(false, true, false, false)),
        ("run_bash", hints(false, true, false, true)),
        ("job_output", hints(true, false, false, false)),
        ("kill_job", hints(false, false, true, false)),
        ("webfetch", hints(false, false, false, true)),
    ];
    for version in VERSIONS {
        let agent = McpAgent::start(&sup, &ws, &[], TestClient::new(version.clone(), None)).await;
        let info = agent.client().peer_info().unwrap();
        assert_eq!(info.protocol_version, version, "negotiated version");
        assert_eq!(info.server_info.as_ref().unwrap().name, "tollgate");
        assert!(info.capabilities.tools.is_some());
        let tools: Vec<Value> = agent
            .client()
            .list_all_tools()
            .await
            .unwrap()
            .iter()
            .map(|t| serde_json::to_value(t).unwrap())
            .collect();
        let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, expected.iter().map(|(n, _)| *n).collect::<Vec<_>>());
        for (tool, (name, want)) in tools.iter().zip(&expected) {
            assert_eq!(&tool["annotations"], want, "{name}");
            let schema = &schemas.iter().find(|(n, _)| n == name).unwrap().1;
            assert_eq!(
                &tool["inputSchema"], schema,
                "{name}: the schema is ListTools'"
            );
        }
        // The planning tools run in tollgate's own loop: not offered here.
        let r = agent.call("todo_list", json!({})).await;
        let (text, is_error) = text_of(&r);
        assert!(
            is_error && text.starts_with("Error: todo_list runs in tollgate's own agent loop"),
            "{r}"
        );
        let (status, err) = agent.finish().await;
        assert!(status.success(), "{status}: {err}");
    }
}

/// run_bash through MCP runs in the session's sandbox (seccomp and no new
/// privileges, as the wall sets them) and is recorded like any CallTool.
async fn a_call_runs_in_the_sandbox_and_is_audited(
    backend: &str,
    extra: &str,
    version: ProtocolVersion,
) {
    let (sup, ws) = start(backend, extra);
    let agent = McpAgent::start(
        &sup,
        &ws,
        &["--mode", "dangerouslySkipPermissions"],
        TestClient::new(version, None),
    )
    .await;
    let r = agent
        .call(
            "run_bash",
            json!({"command": "grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status; echo made > made.txt"}),
        )
        .await;
    let (text, is_error) = text_of(&r);
    assert!(!is_error, "{r}");
    assert!(text.contains("NoNewPrivs:\t1"), "{text}");
    assert!(text.contains("Seccomp:\t2"), "{text}");
    assert_eq!(
        std::fs::read_to_string(ws.join("made.txt")).unwrap(),
        "made\n"
    );
    let r = agent.call("read_file", json!({"path": "made.txt"})).await;
    assert_eq!(text_of(&r), ("     1\tmade\n".to_string(), false));
    let session = agent.session.clone();
    let (status, err) = agent.finish().await;
    assert!(status.success(), "{status}: {err}");
    let records = sup.session_records(&session);
    let check = records
        .iter()
        .find(|r| r["event"] == "permission_check" && r["tool"] == "run_bash")
        .unwrap();
    assert_eq!(check["decision"], "allow");
    assert!(
        check["call_id"].as_str().unwrap().starts_with("mcp-"),
        "{check}"
    );
    let result = records
        .iter()
        .find(|r| r["event"] == "tool_result" && r["tool"] == "run_bash")
        .unwrap();
    assert_eq!(
        (result["status"].clone(), result["exit_code"].clone()),
        (json!("ok"), json!(0))
    );
    let opened = records
        .iter()
        .find(|r| r["event"] == "session_opened")
        .unwrap();
    assert!(opened.to_string().contains("agent mcp"), "{opened}");
    assert_eq!(
        events(&records).last().map(String::as_str),
        Some("session_closed")
    );
    verify_audit(&sup);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_runs_in_the_native_sandbox_and_is_audited() {
    if !ready("mcp_call_native") {
        return;
    }
    for version in VERSIONS {
        a_call_runs_in_the_sandbox_and_is_audited("native", "", version).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_runs_in_the_docker_sandbox_and_is_audited() {
    if !docker_or_skip("mcp_call_docker") {
        return;
    }
    let image = format!(
        "[sandbox]\nimage = \"tollgate-sandbox:{}-minimal\"\n",
        env!("CARGO_PKG_VERSION")
    );
    a_call_runs_in_the_sandbox_and_is_audited("docker", &image, ProtocolVersion::V_2025_11_25)
        .await;
}

fn docker_or_skip(test: &str) -> bool {
    if !ready(test) {
        return false;
    }
    let image = format!("tollgate-sandbox:{}-minimal", env!("CARGO_PKG_VERSION"));
    let ok = std::process::Command::new("docker")
        .args(["image", "inspect", &image])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return true;
    }
    let why = format!("needs a docker engine with {image} (sandbox-image/build.sh --minimal)");
    if std::env::var("TOLLGATE_REQUIRE_DOCKER").as_deref() == Ok("1") {
        panic!("{test}: {why}");
    }
    eprintln!("{test}: skipped: {why}");
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denial_is_an_error_result_with_tollgates_sentence() {
    if !ready("mcp_denial") {
        return;
    }
    let (sup, ws) = start("native", "");
    let agent = McpAgent::start(
        &sup,
        &ws,
        &["--mode", "dangerouslySkipPermissions"],
        TestClient::new(ProtocolVersion::V_2025_06_18, None),
    )
    .await;
    let r = agent
        .call("run_bash", json!({"command": "curl http://example.com"}))
        .await;
    assert_eq!(
        text_of(&r),
        (
            "Permission denied: `curl` is on the denied-binaries list: this supervisor has no [network] section, so the sandbox reaches no host. Use the webfetch tool for http(s) URLs, or ask the user to allow the hosts you need in the supervisor's [network] allow list.".to_string(),
            true
        ),
        "{r}"
    );
    let r = agent
        .call("read_file", json!({"path": "../../etc/passwd"}))
        .await;
    let (text, is_error) = text_of(&r);
    assert!(is_error && text.starts_with("Permission denied: "), "{r}");
    // An unknown tool and bad arguments name the problem.
    let r = agent.call("rm_rf", json!({})).await;
    assert_eq!(
        text_of(&r),
        (
            "Error: unknown tool 'rm_rf'. Available tools: read_file, glob_files, grep, write_file, edit_file, run_bash, job_output, kill_job, webfetch".to_string(),
            true
        )
    );
    let r = agent.call("read_file", json!({"pth": "a"})).await;
    let (text, is_error) = text_of(&r);
    assert!(
        is_error && text.starts_with("Error: invalid arguments: unknown field `pth`"),
        "{r}"
    );
    let session = agent.session.clone();
    let (status, err) = agent.finish().await;
    assert!(status.success(), "{status}: {err}");
    // Every one of them was decided by the PEP and recorded.
    let codes: Vec<String> = sup
        .session_records(&session)
        .iter()
        .filter(|r| r["event"] == "permission_check")
        .map(|r| {
            format!(
                "{} {}",
                r["tool"].as_str().unwrap(),
                r["code"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(codes.len(), 4, "{codes:?}");
    assert!(
        codes[0].starts_with("run_bash ") && codes[0].ends_with("POLICY_DENIED"),
        "{codes:?}"
    );
    assert_eq!(codes[2], "rm_rf UNKNOWN_TOOL");
    assert_eq!(codes[3], "read_file INVALID_ARGS");
    verify_audit(&sup);
}

/// Starts `agent mcp` with a client that hands elicitations to the test.
async fn with_elicitation(
    sup: &Supervisor,
    ws: &Path,
    version: ProtocolVersion,
) -> (McpAgent, mpsc::UnboundedReceiver<Elicitation>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let agent = McpAgent::start(sup, ws, &[], TestClient::new(version, Some(tx))).await;
    (agent, rx)
}

async fn next_elicitation(rx: &mut mpsc::UnboundedReceiver<Elicitation>) -> Elicitation {
    tokio::time::timeout(Duration::from_secs(60), rx.recv())
        .await
        .expect("an elicitation within a minute")
        .expect("the client is alive")
}

fn accept(content: Value) -> ElicitResult {
    ElicitResult::new(ElicitationAction::Accept).with_content(content)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elicitation_approves_once_and_for_the_session() {
    if !ready("mcp_elicit_approve") {
        return;
    }
    for version in VERSIONS {
        let (sup, ws) = start("native", "");
        let (agent, mut rx) = with_elicitation(&sup, &ws, version).await;
        // default mode asks for a write: the person approves it once.
        let call = tokio::spawn({
            let peer = agent.client().peer().clone();
            async move {
                let mut p = rmcp::model::CallToolRequestParams::new("write_file");
                p.arguments = json!({"path": "notes.md", "content": "hello\n"})
                    .as_object()
                    .cloned();
                peer.call_tool(p).await
            }
        });
        let e = next_elicitation(&mut rx).await;
        assert!(
            e.message.starts_with("⚠ About to create notes.md"),
            "{}",
            e.message
        );
        assert_eq!(e.schema["required"], json!(["decision"]));
        assert_eq!(
            e.schema["properties"]["decision"]["enum"],
            json!(["once", "session", "deny"])
        );
        assert!(e.schema["properties"].get("confirm").is_none());
        e.reply.send(accept(json!({"decision": "once"}))).unwrap();
        let r = serde_json::to_value(call.await.unwrap().unwrap()).unwrap();
        assert!(!text_of(&r).1, "{r}");
        assert_eq!(
            std::fs::read_to_string(ws.join("notes.md")).unwrap(),
            "hello\n"
        );

        // A command approved for the session runs again without asking.
        let call = tokio::spawn({
            let peer = agent.client().peer().clone();
            async move {
                let mut p = rmcp::model::CallToolRequestParams::new("run_bash");
                p.arguments = json!({"command": "echo again"}).as_object().cloned();
                peer.call_tool(p).await
            }
        });
        let e = next_elicitation(&mut rx).await;
        e.reply
            .send(accept(json!({"decision": "session"})))
            .unwrap();
        let r = serde_json::to_value(call.await.unwrap().unwrap()).unwrap();
        assert_eq!(text_of(&r), ("again\n".to_string(), false));
        let r = agent
            .call("run_bash", json!({"command": "echo again"}))
            .await;
        assert_eq!(text_of(&r), ("again\n".to_string(), false));
        assert!(
            rx.try_recv().is_err(),
            "no second elicitation for a session grant"
        );

        let session = agent.session.clone();
        let (status, err) = agent.finish().await;
        assert!(status.success(), "{status}: {err}");
        let decided: Vec<Value> = sup
            .session_records(&session)
            .into_iter()
            .filter(|r| r["event"] == "approval_decided")
            .collect();
        assert_eq!(decided.len(), 2, "{decided:?}");
        for d in &decided {
            assert_eq!(d["outcome"], "approved");
            assert!(d["by"].as_str().unwrap().ends_with("via session"), "{d}");
        }
        assert_eq!(decided[1]["scope"], "session");
        verify_audit(&sup);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elicitation_deny_reaches_the_model_as_the_contracts_sentence() {
    if !ready("mcp_elicit_deny") {
        return;
    }
    let (sup, ws) = start("native", "");
    let (agent, mut rx) = with_elicitation(&sup, &ws, ProtocolVersion::V_2025_11_25).await;
    for answer in [
        ElicitResult::new(ElicitationAction::Decline),
        accept(json!({"decision": "deny"})),
    ] {
        let call = tokio::spawn({
            let peer = agent.client().peer().clone();
            async move {
                let mut p = rmcp::model::CallToolRequestParams::new("write_file");
                p.arguments = json!({"path": "no.md", "content": "x"})
                    .as_object()
                    .cloned();
                peer.call_tool(p).await
            }
        });
        let e = next_elicitation(&mut rx).await;
        e.reply.send(answer).unwrap();
        let r = serde_json::to_value(call.await.unwrap().unwrap()).unwrap();
        assert_eq!(
            text_of(&r),
            (
                "user denied: create no.md (1 byte). Do not retry this call; ask the user or change approach.".to_string(),
                true
            ),
            "{r}"
        );
        assert!(!ws.join("no.md").exists());
    }
    let (status, err) = agent.finish().await;
    assert!(status.success(), "{status}: {err}");
    verify_audit(&sup);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destructive_call_needs_the_target_typed_in_the_form() {
    if !ready("mcp_elicit_destructive") {
        return;
    }
    let (sup, ws) = start("native", "");
    std::fs::write(ws.join("README.md"), "# original\n").unwrap();
    let (agent, mut rx) = with_elicitation(&sup, &ws, ProtocolVersion::V_2025_06_18).await;
    for (typed, approved) in [("README", false), ("README.md", true)] {
        let call = tokio::spawn({
            let peer = agent.client().peer().clone();
            async move {
                let mut p = rmcp::model::CallToolRequestParams::new("write_file");
                p.arguments = json!({"path": "README.md", "content": "# replaced\n"})
                    .as_object()
                    .cloned();
                peer.call_tool(p).await
            }
        });
        let e = next_elicitation(&mut rx).await;
        assert!(e.message.contains("DESTRUCTIVE"), "{}", e.message);
        assert_eq!(
            e.schema["properties"]["decision"]["enum"],
            json!(["once", "deny"])
        );
        assert!(
            e.schema["properties"]["confirm"].is_object(),
            "{}",
            e.schema
        );
        e.reply
            .send(accept(json!({"decision": "once", "confirm": typed})))
            .unwrap();
        let r = serde_json::to_value(call.await.unwrap().unwrap()).unwrap();
        assert_eq!(!text_of(&r).1, approved, "{typed}: {r}");
        let now = std::fs::read_to_string(ws.join("README.md")).unwrap();
        assert_eq!(
            now,
            if approved {
                "# replaced\n"
            } else {
                "# original\n"
            }
        );
    }
    let (status, err) = agent.finish().await;
    assert!(status.success(), "{status}: {err}");
    verify_audit(&sup);
}

/// An operator answers first: the call runs, and the person's form is
/// cancelled (notifications/cancelled reaches the client).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_answers_first_and_the_form_is_withdrawn() {
    if !ready("mcp_elicit_operator_first") {
        return;
    }
    let (sup, ws) = start("native", "");
    let (agent, mut rx) = with_elicitation(&sup, &ws, ProtocolVersion::V_2025_11_25).await;
    let call = tokio::spawn({
        let peer = agent.client().peer().clone();
        async move {
            let mut p = rmcp::model::CallToolRequestParams::new("run_bash");
            p.arguments = json!({"command": "echo by-operator"}).as_object().cloned();
            peer.call_tool(p).await
        }
    });
    let e = next_elicitation(&mut rx).await;
    let sup_ref = &sup;
    let approval = tokio::task::block_in_place(|| wait_for_approval(sup_ref));
    let id = approval["id"].as_str().unwrap().to_string();
    let (code, out, err) = tokio::task::block_in_place(|| ctl(sup_ref, &["approve", &id]));
    assert_eq!(code, 0, "{out}{err}");
    let r = serde_json::to_value(call.await.unwrap().unwrap()).unwrap();
    assert_eq!(text_of(&r), ("by-operator\n".to_string(), false));
    tokio::time::timeout(Duration::from_secs(30), e.cancelled)
        .await
        .expect("the form is cancelled once the operator decided")
        .expect("cancelled, not dropped");
    // The person's late answer changes nothing.
    drop(e.reply);
    let session = agent.session.clone();
    let (status, err) = agent.finish().await;
    assert!(status.success(), "{status}: {err}");
    let decided = sup
        .session_records(&session)
        .into_iter()
        .find(|r| r["event"] == "approval_decided")
        .unwrap();
    assert!(
        decided["by"].as_str().unwrap().ends_with("via operator"),
        "{decided}"
    );
    verify_audit(&sup);
}

/// A client without elicitation: the ask waits for the operators, and their
/// denial is the model's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_elicitation_operators_decide() {
    if !ready("mcp_operators_decide") {
        return;
    }
    let (sup, ws) = start("native", "");
    let agent = McpAgent::start(
        &sup,
        &ws,
        &[],
        TestClient::new(ProtocolVersion::V_2025_06_18, None),
    )
    .await;
    let call = tokio::spawn({
        let peer = agent.client().peer().clone();
        async move {
            let mut p = rmcp::model::CallToolRequestParams::new("run_bash");
            p.arguments = json!({"command": "echo never"}).as_object().cloned();
            peer.call_tool(p).await
        }
    });
    let sup_ref = &sup;
    let approval = tokio::task::block_in_place(|| wait_for_approval(sup_ref));
    let id = approval["id"].as_str().unwrap().to_string();
    let (code, out, err) = tokio::task::block_in_place(|| ctl(sup_ref, &["deny", &id]));
    assert_eq!(code, 0, "{out}{err}");
    let r = serde_json::to_value(call.await.unwrap().unwrap()).unwrap();
    let (text, is_error) = text_of(&r);
    assert!(
        is_error && text.starts_with("user denied: run `echo never`"),
        "{r}"
    );
    assert!(
        agent
            .stderr()
            .contains(&format!("approval {id} is waiting for an operator")),
        "{}",
        agent.stderr()
    );
    let (status, err) = agent.finish().await;
    assert!(status.success(), "{status}: {err}");
    verify_audit(&sup);
}

/// `supervisorctl revoke` / `kill` from another process while a command
/// runs: the call ends with an error naming the reason, its process is gone,
/// every later call fails the same way, and `agent mcp` exits 3 once the
/// client leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_or_kill_mid_call_ends_it_and_every_later_call_with_the_reason() {
    if !ready("mcp_revoke") {
        return;
    }
    for verb in ["revoke", "kill"] {
        let (sup, ws) = start("native", "");
        let agent = McpAgent::start(
            &sup,
            &ws,
            &["--mode", "dangerouslySkipPermissions"],
            TestClient::new(ProtocolVersion::V_2025_11_25, None),
        )
        .await;
        let marker = format!("91.{}", std::process::id());
        let call = tokio::spawn({
            let peer = agent.client().peer().clone();
            let cmd = format!("sleep {marker}");
            async move {
                let mut p = rmcp::model::CallToolRequestParams::new("run_bash");
                p.arguments = json!({"command": cmd}).as_object().cloned();
                peer.call_tool(p).await
            }
        });
        wait_for_record(&sup, &agent.session, "tool_started", "run_bash").await;
        wait_for_process(&marker).await;
        let reason = format!("mcp test {verb}");
        let args: Vec<&str> = match verb {
            "revoke" => vec!["revoke", &agent.session, "--reason", &reason],
            _ => vec!["kill", &agent.session],
        };
        let sup_ref = &sup;
        let (code, out, err) = tokio::task::block_in_place(|| ctl(sup_ref, &args));
        assert_eq!(code, 0, "{out}{err}");
        let r = serde_json::to_value(call.await.unwrap().unwrap()).unwrap();
        let (text, is_error) = text_of(&r);
        assert!(
            is_error && text.starts_with("session revoked: "),
            "{verb}: {r}"
        );
        if verb == "revoke" {
            assert!(text.contains(&reason), "the reason is named: {text}");
        }
        assert!(gone(&marker).await, "the sleep was killed");
        let later = agent.call("read_file", json!({"path": "x"})).await;
        assert_eq!(
            text_of(&later),
            (text.clone(), true),
            "later calls fail the same way"
        );
        let session = agent.session.clone();
        let (status, err) = agent.finish().await;
        assert_eq!(status.code(), Some(3), "{verb}: {err}");
        let records = sup.session_records(&session);
        assert!(
            events(&records).contains(&"session_revoked".to_string()),
            "{records:?}"
        );
        verify_audit(&sup);
    }
}

/// Inputs no client should send, line by line: each gets a clear error,
/// nothing reaches the supervisor before `initialize`, and the server keeps
/// answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_early_calls_and_unknown_methods_get_clear_errors() {
    if !ready("mcp_bad_input") {
        return;
    }
    let (sup, ws) = start("native", "");
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    let mut raw = Raw::start(&sup, &ws, &["--mode", "dangerouslySkipPermissions"]);
    raw.send_bytes(b"\x00\xffthis is not json\n").await;
    let r = raw.recv().await;
    assert_eq!(r["error"]["code"], -32700, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("parse error: the line is not JSON")
    );
    raw.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "run_bash", "arguments": {"command": "echo early > early.txt"}}}))
        .await;
    let r = raw.recv().await;
    assert_eq!(
        (r["id"].clone(), r["error"]["code"].clone()),
        (json!(1), json!(-32600)),
        "{r}"
    );
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("the server is not initialized: `tools/call` came before `initialize`"),
        "{r}"
    );
    let init = raw.initialize("2025-06-18").await;
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18", "{init}");
    raw.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe-all"}))
        .await;
    let r = raw.recv().await;
    assert_eq!(
        (r["id"].clone(), r["error"]["code"].clone()),
        (json!(2), json!(-32601)),
        "{r}"
    );
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("resources/subscribe-all"),
        "{r}"
    );
    raw.send(&json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"nom": "x"}}))
        .await;
    let r = raw.recv().await;
    assert_eq!(
        (r["id"].clone(), r["error"]["code"].clone()),
        (json!(3), json!(-32602)),
        "{r}"
    );
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("missing field `name`"),
        "{r}"
    );
    raw.send(&json!({"jsonrpc": "2.0", "id": 4})).await;
    let r = raw.recv().await;
    assert_eq!(
        (r["id"].clone(), r["error"]["code"].clone()),
        (json!(4), json!(-32600)),
        "{r}"
    );
    // Still serving.
    raw.send(&json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": {"name": "read_file", "arguments": {"path": "a.txt"}}}))
        .await;
    let r = raw.recv().await;
    assert_eq!(r["id"], 5);
    assert_eq!(r["result"]["content"][0]["text"], "     1\ta\n", "{r}");
    let session = session_of(&raw.stderr).await;
    let (status, err) = raw.finish().await;
    assert!(status.success(), "{status}: {err}");
    assert!(
        !ws.join("early.txt").exists(),
        "the call before initialize did not run"
    );
    let tools: Vec<String> = sup
        .session_records(&session)
        .iter()
        .filter(|r| r["event"] == "permission_check")
        .map(|r| r["tool"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        tools,
        vec!["read_file"],
        "only the call after initialize reached the PEP"
    );
    verify_audit(&sup);
}

/// A 10 MB request reaches the supervisor, which refuses it with its reason;
/// a line past the 16 MiB cap is discarded unread and answered. The server
/// keeps serving after both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_requests_are_refused_with_a_reason_and_the_server_stays_up() {
    if !ready("mcp_huge") {
        return;
    }
    let (sup, ws) = start("native", "");
    let mut raw = Raw::start(&sup, &ws, &["--mode", "dangerouslySkipPermissions"]);
    raw.initialize("2025-11-25").await;
    let content = "x".repeat(10 * 1000 * 1000);
    raw.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "write_file", "arguments": {"path": "big.txt", "content": content}}}))
        .await;
    let r = raw.recv().await;
    assert_eq!(r["id"], 1);
    assert_eq!(
        r["result"]["isError"],
        true,
        "{}",
        &r.to_string()[..r.to_string().len().min(500)]
    );
    let text = r["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("Error: the supervisor could not run the call: ")
            && text.contains("too large"),
        "{text}"
    );
    assert!(!ws.join("big.txt").exists());
    let mut line = vec![b' '; 17 * 1024 * 1024];
    line.push(b'\n');
    raw.send_bytes(&line).await;
    let r = raw.recv().await;
    assert_eq!(r["error"]["code"], -32600, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("request too large"),
        "{r}"
    );
    raw.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "run_bash", "arguments": {"command": "echo still here"}}}))
        .await;
    let r = raw.recv().await;
    assert_eq!(r["result"]["content"][0]["text"], "still here\n", "{r}");
    let (status, err) = raw.finish().await;
    assert!(status.success(), "{status}: {err}");
    verify_audit(&sup);
}

/// The client goes away while a command runs (it closes the connection, as
/// MCP's stdio shutdown says; or SIGTERM; or SIGKILL of `agent mcp`): the
/// command is killed and its outcome recorded; on a close or SIGTERM `agent
/// mcp` exits 0 and closes the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_mid_call_leaves_nothing_behind() {
    if !ready("mcp_disconnect") {
        return;
    }
    for how in ["close", "SIGTERM", "SIGKILL"] {
        let (sup, ws) = start("native", "");
        let agent = McpAgent::start(
            &sup,
            &ws,
            &["--mode", "dangerouslySkipPermissions"],
            TestClient::new(ProtocolVersion::V_2025_06_18, None),
        )
        .await;
        let marker = format!("92.{}", std::process::id());
        let peer = agent.client().peer().clone();
        let cmd = format!("sleep {marker}");
        let mut call = tokio::spawn(async move {
            let mut p = rmcp::model::CallToolRequestParams::new("run_bash");
            p.arguments = json!({"command": cmd}).as_object().cloned();
            peer.call_tool(p).await
        });
        wait_for_record(&sup, &agent.session, "tool_started", "run_bash").await;
        wait_for_process(&marker).await;
        let session = agent.session.clone();
        let pid = nix::unistd::Pid::from_raw(agent.child.id().unwrap() as i32);
        match how {
            "SIGTERM" => nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap(),
            "SIGKILL" => nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap(),
            _ => {}
        }
        // On SIGTERM the last answer comes before the connection closes:
        // wait for it before closing the client's side (finish), which
        // would otherwise race it.
        let early = if how == "SIGTERM" {
            Some(
                tokio::time::timeout(Duration::from_secs(30), &mut call)
                    .await
                    .expect("no answer after SIGTERM")
                    .unwrap(),
            )
        } else {
            None
        };
        let (status, err) = agent.finish().await;
        match how {
            "SIGKILL" => assert_eq!(
                std::os::unix::process::ExitStatusExt::signal(&status),
                Some(9)
            ),
            _ => assert!(status.success(), "{how}: {status}: {err}"),
        }
        let answer = match early {
            Some(a) => a,
            None => call.await.unwrap(),
        };
        match how {
            // The last answer says why.
            "SIGTERM" => {
                let r = serde_json::to_value(answer.unwrap()).unwrap();
                assert_eq!(
                    text_of(&r),
                    (
                        "Error: agent mcp is stopping (SIGTERM); the call was cancelled"
                            .to_string(),
                        true
                    )
                );
            }
            _ => assert!(answer.is_err(), "{how}: the client got no result"),
        }
        let result = wait_for_record(&sup, &session, "tool_result", "run_bash").await;
        assert_eq!(result["status"], "stopped", "{how}: {result}");
        assert!(gone(&marker).await, "{how}: the command was killed");
        if how != "SIGKILL" {
            let records = sup.session_records(&session);
            assert_eq!(
                events(&records).last().map(String::as_str),
                Some("session_closed"),
                "{how}"
            );
        }
        verify_audit(&sup);
    }
}
