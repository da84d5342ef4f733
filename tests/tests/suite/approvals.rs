//! Human in the loop (docs/ARCHITECTURE.md, "The PEP pipeline"): approvals
//! decided from supervisorctl while the
//! agent waits, denials, timeouts, session scope, destructive double
//! confirmation, auto_approve, and who may decide.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

use tollgate_e2e::harness::{OTHER_UID, Supervisor, authed, root_or_skip};
use tollgate_proto::v1 as pb;

const OPERATORS_ONLY: &str = "[session]\nsession_can_approve = false\napproval_timeout_s = 30\n[llm]\nprovider = \"script\"\n";

async fn open(sup: &Supervisor, ws: &std::path::Path, mode: &str) -> pb::OpenSessionResponse {
    let mut c = sup.agent_client().await;
    c.open_session(pb::OpenSessionRequest {
        workspace: ws.display().to_string(),
        mode: mode.to_string(),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
}

/// Starts a CallTool in the background.
fn call(
    sup: &Supervisor,
    token: &str,
    tool: &str,
    args: serde_json::Value,
) -> tokio::task::JoinHandle<pb::CallToolResponse> {
    let socket = sup.agent_socket.clone();
    let token = token.to_string();
    let tool = tool.to_string();
    tokio::spawn(async move {
        let mut c = tollgate_e2e::harness::agent_client(&socket).await;
        c.call_tool(authed(
            pb::CallToolRequest {
                call_id: "c1".to_string(),
                tool,
                arguments_json: args.to_string(),
            },
            &token,
        ))
        .await
        .unwrap()
        .into_inner()
    })
}

/// Waits for a pending approval to show up in `supervisorctl approvals --json`.
fn wait_pending(sup: &Supervisor) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = sup.ctl(&["approvals", "--json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        if let Some(a) = v.as_array().and_then(|a| a.first()) {
            return a.clone();
        }
        assert!(Instant::now() < deadline, "no approval appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn code(r: &pb::CallToolResponse) -> pb::DenialCode {
    r.denied
        .as_ref()
        .map(|d| d.code())
        .unwrap_or(pb::DenialCode::Unspecified)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_approved_from_supervisorctl_while_the_agent_waits() {
    let sup = Supervisor::builder().config(OPERATORS_ONLY).start();
    let ws = sup.dirs.workspace("ws", 0);
    std::fs::write(ws.join("README.md"), "old content\n").unwrap();
    let s = open(&sup, &ws, "default").await;
    // Read first, so the overwrite is not destructive (the session has seen it).
    let read = call(
        &sup,
        &s.token,
        "read_file",
        serde_json::json!({"path": "README.md"}),
    )
    .await
    .unwrap();
    assert!(read.ok);
    let pending = call(
        &sup,
        &s.token,
        "write_file",
        serde_json::json!({"path": "README.md", "content": "new\n"}),
    );
    let a = wait_pending(&sup);
    assert_eq!(a["tool"], "write_file");
    assert_eq!(a["session"], s.session_id.as_str());
    assert_eq!(a["destructive"], false);
    assert!(
        a["consequence"]
            .as_str()
            .unwrap()
            .contains("overwrite README.md (existing 12 bytes will be lost)"),
        "{a}"
    );
    let diff = a["diff"].as_str().unwrap();
    assert!(
        diff.contains("-old content") && diff.contains("+new"),
        "diff preview: {diff}"
    );
    assert!(a["deadline_unix_ms"].as_i64().unwrap() > a["created_unix_ms"].as_i64().unwrap());
    // The people's table shows it too.
    let table = String::from_utf8(sup.ctl(&["approvals"]).stdout).unwrap();
    assert!(
        table.contains(a["id"].as_str().unwrap()) && table.contains("overwrite README.md"),
        "{table}"
    );
    let out = sup.ctl(&["approve", a["id"].as_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("approved by uid 0 via operator"));
    let r = pending.await.unwrap();
    assert!(r.ok, "{r:?}");
    assert_eq!(r.allowed_by, "approved");
    assert_eq!(
        std::fs::read_to_string(ws.join("README.md")).unwrap(),
        "new\n"
    );
    let events = sup.session_records(&s.session_id);
    let decided = events
        .iter()
        .find(|e| e["event"] == "approval_decided")
        .unwrap();
    assert_eq!(decided["outcome"], "approved");
    assert_eq!(decided["by"], "uid 0 via operator");
    // Deciding it again names who decided.
    let again = sup.ctl(&["deny", a["id"].as_str().unwrap()]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already approved by uid 0 via operator")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_denied_tells_the_model_not_to_retry() {
    let sup = Supervisor::builder().config(OPERATORS_ONLY).start();
    let ws = sup.dirs.workspace("ws", 0);
    let s = open(&sup, &ws, "default").await;
    let pending = call(
        &sup,
        &s.token,
        "write_file",
        serde_json::json!({"path": "notes.md", "content": "hello"}),
    );
    let a = wait_pending(&sup);
    assert_eq!(a["consequence"], "create notes.md (5 bytes)");
    let out = sup.ctl(&["deny", a["id"].as_str().unwrap(), "--reason", "not now"]);
    assert!(out.status.success());
    let r = pending.await.unwrap();
    assert_eq!(code(&r), pb::DenialCode::UserDenied);
    let reason = &r.denied.as_ref().unwrap().reason;
    assert!(
        reason.starts_with("user denied: create notes.md (5 bytes). Do not retry this call; ask the user or change approach."),
        "{reason}"
    );
    assert!(reason.contains("not now"));
    assert!(!ws.join("notes.md").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_that_times_out() {
    let sup = Supervisor::builder()
        .config("[session]\nsession_can_approve = false\napproval_timeout_s = 1\n[llm]\nprovider = \"script\"\n")
        .start();
    let ws = sup.dirs.workspace("ws", 0);
    let s = open(&sup, &ws, "default").await;
    let r = call(
        &sup,
        &s.token,
        "run_bash",
        serde_json::json!({"command": "echo hi"}),
    )
    .await
    .unwrap();
    assert_eq!(code(&r), pb::DenialCode::ApprovalTimeout);
    assert!(
        r.denied
            .unwrap()
            .reason
            .starts_with("no one approved in time: run `echo hi`")
    );
    let all: serde_json::Value =
        serde_json::from_slice(&sup.ctl(&["approvals", "--all", "--json"]).stdout).unwrap();
    assert_eq!(all[0]["status"], "timeout");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_scope_allows_the_same_target_again() {
    let sup = Supervisor::builder().config(OPERATORS_ONLY).start();
    let ws = sup.dirs.workspace("ws", 0);
    let s = open(&sup, &ws, "default").await;
    let cmd = serde_json::json!({"command": "echo scoped"});
    let pending = call(&sup, &s.token, "run_bash", cmd.clone());
    let a = wait_pending(&sup);
    assert!(
        sup.ctl(&["approve", a["id"].as_str().unwrap(), "--scope", "session"])
            .status
            .success()
    );
    let first = pending.await.unwrap();
    assert!(first.ok, "{first:?}");
    assert_eq!(first.allowed_by, "approved(session-scope)");
    // The same command again: no approval.
    let second = call(&sup, &s.token, "run_bash", cmd).await.unwrap();
    assert!(second.ok, "{second:?}");
    assert_eq!(second.allowed_by, "allowed(session-scope)");
    assert!(second.output.contains("scoped"));
    // A different command still asks.
    let other = call(
        &sup,
        &s.token,
        "run_bash",
        serde_json::json!({"command": "echo other"}),
    );
    let b = wait_pending(&sup);
    assert_ne!(a["id"], b["id"]);
    assert!(
        sup.ctl(&["deny", b["id"].as_str().unwrap()])
            .status
            .success()
    );
    assert_eq!(code(&other.await.unwrap()), pb::DenialCode::UserDenied);
    let events = sup.session_records(&s.session_id);
    assert!(
        events.iter().any(
            |e| e["event"] == "permission_check" && e["allowed_by"] == "allowed(session-scope)"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destructive_approvals_need_the_typed_target() {
    let sup = Supervisor::builder().config(OPERATORS_ONLY).start();
    let ws = sup.dirs.workspace("ws", 0);
    std::fs::write(ws.join("README.md"), "precious\n").unwrap();
    let s = open(&sup, &ws, "default").await;
    // Empty content over an existing file: destructive.
    let pending = call(
        &sup,
        &s.token,
        "write_file",
        serde_json::json!({"path": "README.md", "content": ""}),
    );
    let a = wait_pending(&sup);
    assert_eq!(a["destructive"], true);
    assert_eq!(a["target"], "README.md");
    let id = a["id"].as_str().unwrap();
    // One confirmation is not enough.
    let once = sup.ctl(&["approve", id]);
    assert_eq!(once.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&once.stderr).contains("--confirm"),
        "{}",
        String::from_utf8_lossy(&once.stderr)
    );
    // A wrong target is refused, and the approval stays pending.
    let wrong = sup.ctl(&["approve", id, "--confirm", "readme.md"]);
    assert_eq!(wrong.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("does not match"));
    assert_eq!(wait_pending(&sup)["id"], a["id"]);
    assert_eq!(
        std::fs::read_to_string(ws.join("README.md")).unwrap(),
        "precious\n"
    );
    // The typed target approves.
    let ok = sup.ctl(&["approve", id, "--confirm", "README.md"]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let r = pending.await.unwrap();
    assert!(r.ok, "{r:?}");
    assert_eq!(std::fs::read_to_string(ws.join("README.md")).unwrap(), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_approve_never_approves_a_destructive_call() {
    let sup = Supervisor::builder()
        .config("[session]\nauto_approve = true\nsession_can_approve = false\napproval_timeout_s = 30\n[llm]\nprovider = \"script\"\n")
        .start();
    let ws = sup.dirs.workspace("ws", 0);
    std::fs::write(ws.join("keep.txt"), "keep\n").unwrap();
    let s = open(&sup, &ws, "default").await;
    // The non-destructive ask tier runs without a person.
    let r = call(
        &sup,
        &s.token,
        "run_bash",
        serde_json::json!({"command": "echo auto"}),
    )
    .await
    .unwrap();
    assert!(r.ok, "{r:?}");
    assert_eq!(r.allowed_by, "auto-allow(config)");
    // A destructive call still waits for a person (and is denied here).
    let pending = call(
        &sup,
        &s.token,
        "run_bash",
        serde_json::json!({"command": "rm -r src"}),
    );
    let a = wait_pending(&sup);
    assert_eq!(a["destructive"], true);
    assert!(
        sup.ctl(&["deny", a["id"].as_str().unwrap()])
            .status
            .success()
    );
    assert_eq!(code(&pending.await.unwrap()), pb::DenialCode::UserDenied);
    let events = sup.session_records(&s.session_id);
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "permission_check" && e["allowed_by"] == "auto-allow(config)")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn who_may_decide() {
    if !root_or_skip("who_may_decide") {
        return;
    }
    let sup = Supervisor::builder()
        .config("[session]\nsession_can_approve = true\napproval_timeout_s = 30\n[llm]\nprovider = \"script\"\n")
        .start();
    let ws = sup.dirs.workspace("ws", 0);
    let s = open(&sup, &ws, "default").await;
    let pending = call(
        &sup,
        &s.token,
        "run_bash",
        serde_json::json!({"command": "echo decided"}),
    );
    let a = wait_pending(&sup);
    let id = a["id"].as_str().unwrap();
    // A second uid that is not an operator cannot reach operator.sock.
    let out = sup
        .ctl_cmd_as(OTHER_UID)
        .args(["approve", id])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .to_lowercase()
            .contains("permission denied")
    );
    // Nor can it decide through a session of its own.
    let ws2 = sup.dirs.workspace("ws-other", OTHER_UID);
    let opened = std::process::Command::new(sup.dirs.staged_bin("e2e-client"))
        .args([
            sup.agent_socket.to_str().unwrap(),
            "-",
            "open",
            ws2.to_str().unwrap(),
        ])
        .uid(OTHER_UID)
        .gid(OTHER_UID)
        .output()
        .unwrap();
    let opened = String::from_utf8_lossy(&opened.stdout).to_string();
    let token = opened.split_whitespace().nth(2).expect("token").to_string();
    let decided = std::process::Command::new(sup.dirs.staged_bin("e2e-client"))
        .args([sup.agent_socket.to_str().unwrap(), &token, "decide", id])
        .uid(OTHER_UID)
        .gid(OTHER_UID)
        .output()
        .unwrap();
    let decided = String::from_utf8_lossy(&decided.stdout).to_string();
    assert!(decided.contains("belongs to another session"), "{decided}");
    // Unknown approvals are named.
    let out = sup.ctl(&["approve", "ap_nonexistent"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("approval ap_nonexistent is unknown"));
    // The session itself may decide (session_can_approve = true).
    let mine = std::process::Command::new(sup.dirs.staged_bin("e2e-client"))
        .args([sup.agent_socket.to_str().unwrap(), &s.token, "decide", id])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&mine.stdout).starts_with("OK"),
        "{}",
        String::from_utf8_lossy(&mine.stdout)
    );
    let r = pending.await.unwrap();
    assert!(r.ok, "{r:?}");
    let events = sup.session_records(&s.session_id);
    let decided = events
        .iter()
        .find(|e| e["event"] == "approval_decided")
        .unwrap();
    assert_eq!(decided["by"], "uid 0 via session");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnecting_agent_withdraws_its_approvals() {
    let sup = Supervisor::builder().config(OPERATORS_ONLY).start();
    let ws = sup.dirs.workspace("ws", 0);
    let s = open(&sup, &ws, "default").await;
    let pending = call(
        &sup,
        &s.token,
        "run_bash",
        serde_json::json!({"command": "echo never"}),
    );
    let a = wait_pending(&sup);
    // The agent goes away mid-wait.
    pending.abort();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let all: serde_json::Value =
            serde_json::from_slice(&sup.ctl(&["approvals", "--all", "--json"]).stdout).unwrap();
        let row = all
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == a["id"])
            .cloned()
            .unwrap();
        if row["status"] == "withdrawn" {
            break;
        }
        assert!(Instant::now() < deadline, "approval not withdrawn: {row}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = sup.ctl(&["approve", a["id"].as_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already withdrawn"));
    let events = sup.session_records(&s.session_id);
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "approval_decided" && e["outcome"] == "withdrawn")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_shows_approvals_and_decisions_as_json_lines() {
    let sup = Supervisor::builder().config(OPERATORS_ONLY).start();
    let ws = sup.dirs.workspace("ws", 0);
    let mut watch = sup
        .ctl_cmd()
        .args(["watch", "--json"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let s = open(&sup, &ws, "default").await;
    let pending = call(
        &sup,
        &s.token,
        "run_bash",
        serde_json::json!({"command": "echo watched"}),
    );
    let a = wait_pending(&sup);
    assert!(
        sup.ctl(&["approve", a["id"].as_str().unwrap()])
            .status
            .success()
    );
    assert!(pending.await.unwrap().ok);
    assert!(sup.ctl(&["revoke", &s.session_id]).status.success());
    std::thread::sleep(Duration::from_millis(300));
    let _ = watch.kill();
    let out = watch.wait_with_output().unwrap();
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect();
    let events: Vec<&str> = lines.iter().map(|l| l["event"].as_str().unwrap()).collect();
    for want in [
        "session_opened",
        "permission_check",
        "approval_requested",
        "approval_decided",
        "tool_started",
        "tool_result",
        "session_revoked",
    ] {
        assert!(events.contains(&want), "watch missed {want}: {events:?}");
    }
}

/// A write through the file tools to a path the host runs by
/// itself needs a person's typed confirmation in every mode: auto_approve
/// does not approve it, an approval with session scope does not approve the
/// next one, and dangerouslySkipPermissions refuses it outright; what the
/// operator sees says what would run it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_the_host_runs_by_itself_is_never_approved_without_a_typed_confirmation() {
    let sup = Supervisor::builder()
        .config(
            "[session]\nauto_approve = true\nsession_can_approve = false\napproval_timeout_s = 30\n\
             max_mode = \"dangerouslySkipPermissions\"\nallow_dangerously_skip = true\n\
             [llm]\nprovider = \"script\"\n",
        )
        .start();
    let ws = sup.dirs.workspace("ws", 0);
    let s = open(&sup, &ws, "acceptEdits").await;
    let envrc = serde_json::json!({"path": ".envrc", "content": "export A=1\n"});
    // An ordinary write runs unasked in acceptEdits; this one waits.
    let plain = call(
        &sup,
        &s.token,
        "write_file",
        serde_json::json!({"path": "notes.txt", "content": "x\n"}),
    )
    .await
    .unwrap();
    assert!(plain.ok, "{plain:?}");
    let pending = call(&sup, &s.token, "write_file", envrc.clone());
    let a = wait_pending(&sup);
    assert_eq!(a["destructive"], true, "{a}");
    assert_eq!(a["target"], ".envrc");
    assert!(
        a["consequence"]
            .as_str()
            .unwrap()
            .ends_with("; direnv runs this when a shell enters the directory"),
        "{a}"
    );
    let id = a["id"].as_str().unwrap();
    assert_eq!(
        sup.ctl(&["approve", id, "--scope", "session"])
            .status
            .code(),
        Some(1)
    );
    assert!(
        sup.ctl(&["approve", id, "--scope", "session", "--confirm", ".envrc"])
            .status
            .success()
    );
    let r = pending.await.unwrap();
    assert!(r.ok, "{r:?}");
    assert_eq!(r.allowed_by, "approved(session-scope)");
    assert_eq!(
        std::fs::read_to_string(ws.join(".envrc")).unwrap(),
        "export A=1\n"
    );
    // The same write again: the session-scope approval does not cover it.
    let again = call(&sup, &s.token, "write_file", envrc.clone());
    let b = wait_pending(&sup);
    assert_ne!(a["id"], b["id"]);
    assert_eq!(b["destructive"], true);
    assert!(
        sup.ctl(&["deny", b["id"].as_str().unwrap()])
            .status
            .success()
    );
    assert_eq!(code(&again.await.unwrap()), pb::DenialCode::UserDenied);
    // Inside .git: refused whatever anyone says.
    let r = call(
        &sup,
        &s.token,
        "write_file",
        serde_json::json!({"path": ".git/config", "content": "[core]\n"}),
    )
    .await
    .unwrap();
    assert_eq!(code(&r), pb::DenialCode::PolicyDenied);
    assert_eq!(r.denied.as_ref().unwrap().rule, "floor:git-internals");
    // dangerouslySkipPermissions refuses it outright, in any letter case.
    let d = open(&sup, &ws, "dangerouslySkipPermissions").await;
    let r = call(
        &sup,
        &d.token,
        "write_file",
        serde_json::json!({"path": ".VSCode/tasks.json", "content": "{}"}),
    )
    .await
    .unwrap();
    assert_eq!(code(&r), pb::DenialCode::PolicyDenied, "{r:?}");
    let denial = r.denied.unwrap();
    assert_eq!(denial.rule, "confirm:host-exec");
    assert!(
        denial.reason.contains("VS Code runs tasks"),
        "{}",
        denial.reason
    );
    assert!(!ws.join(".VSCode").exists());
    // Both .envrc writes were recorded as destructive asks, never allowed.
    let events = sup.session_records(&s.session_id);
    let checks: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| {
            e["event"] == "permission_check" && e["tool"] == "write_file" && e["target"] == ".envrc"
        })
        .collect();
    assert_eq!(checks.len(), 2, "{checks:?}");
    for c in checks {
        assert_eq!(
            (&c["decision"], &c["destructive"], &c["rule"]),
            (
                &serde_json::json!("ask"),
                &serde_json::json!(true),
                &serde_json::json!("confirm:host-exec")
            ),
            "{c}"
        );
    }
}
