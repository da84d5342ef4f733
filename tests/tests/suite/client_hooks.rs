//! `agent hook` against a real supervisor (and against sockets that fail),
//! driven with the events Claude Code and Codex send (docs/CLIENTS.md). It needs
//! neither client: these are the hook's own promises.
//!
//! Fails closed: supervisor down, socket missing or refused, a deadline
//! passed, an internal error, malformed / oversized / unknown events — each
//! exits 2 with one line on stderr. Bad input (a missing tool_name or cwd, a
//! relative or non-UTF-8 path, a bad session id, another uid's session,
//! parallel hooks, a cwd that is a symlink or not a directory) is refused
//! with a clear reason and lets nothing through. Also: the mapping of
//! client tools (unknown ones denied, harmless ones allowed, patches file by
//! file, MCP tools by `mcp(SERVER.TOOL)` rules), asks handed to the client
//! or to operators, revoke and kill reaching the client and a routed
//! command, the routed command's uid binding and single use, and the
//! session's lifecycle (SessionEnd, idle timeout).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tollgate_e2e::harness::{Dirs, OTHER_UID, Supervisor, bin, root_or_skip};

const SKIP_MODE: &str = "[session]\napproval_timeout_s = 30\n[clients]\nmode = \"dangerouslySkipPermissions\"\n[llm]\nprovider = \"script\"\n";

/// Runs `agent hook` with `stdin`; `extra` are more flags.
/// `agent` is the binary to run: a supervisor's staged copy
/// (`Dirs::staged_bin`) wherever another uid runs it, or a command it
/// rewrites does (the build's own may sit where only root can enter).
fn hook_at(agent: &Path, socket: &Path, stdin: &[u8], extra: &[&str], uid: Option<u32>) -> Output {
    let mut cmd = Command::new(agent);
    cmd.arg("hook").arg("--socket").arg(socket).args(extra);
    cmd.env_remove("TOLLGATE_SOCKET")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(u) = uid {
        cmd.uid(u).gid(u);
    }
    let mut child = cmd.spawn().expect("spawn agent hook");
    let mut input = child.stdin.take().unwrap();
    // A hook may refuse before it reads everything: a broken pipe is fine.
    let _ = input.write_all(stdin);
    drop(input);
    child.wait_with_output().expect("agent hook")
}

fn hook(sup: &Supervisor, ev: &Value) -> Output {
    hook_at(
        &sup.dirs.staged_bin("agent"),
        &sup.agent_socket,
        ev.to_string().as_bytes(),
        &[],
        None,
    )
}

fn event(name: &str, session: &str, cwd: &Path, tool: &str, input: Value, id: &str) -> Value {
    json!({
        "session_id": session,
        "transcript_path": "/nonexistent/t.jsonl",
        "cwd": cwd,
        "hook_event_name": name,
        "tool_name": tool,
        "tool_input": input,
        "tool_use_id": id,
    })
}

fn pre(session: &str, cwd: &Path, tool: &str, input: Value, id: &str) -> Value {
    event("PreToolUse", session, cwd, tool, input, id)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Exit 2, nothing on stdout, exactly one line on stderr containing `want`.
fn assert_blocked(o: &Output, want: &str) {
    let err = stderr(o);
    assert_eq!(
        o.status.code(),
        Some(2),
        "not blocked: {err} / {}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(o.stdout.is_empty(), "a blocked hook printed an answer");
    assert_eq!(err.lines().count(), 1, "one line on stderr: {err}");
    assert!(
        err.starts_with("agent hook: ") && err.contains(want),
        "{err}"
    );
    assert!(err.contains("blocked"), "{err}");
}

/// The PreToolUse answer: (decision, reason, the whole JSON).
fn answer(o: &Output) -> (String, String, Value) {
    assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&o.stdout)));
    let s = &v["hookSpecificOutput"];
    (
        s["permissionDecision"].as_str().unwrap_or("").to_string(),
        s["permissionDecisionReason"]
            .as_str()
            .unwrap_or("")
            .to_string(),
        v,
    )
}

fn one_session(sup: &Supervisor) -> Vec<Value> {
    let files = sup.audit_files("audit-");
    assert_eq!(files.len(), 1, "{files:?}");
    tollgate_e2e::harness::read_records(&files[0])
}

#[test]
fn supervisor_down_or_socket_missing_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let ev = pre(
        "s1",
        dir.path(),
        "Read",
        json!({"file_path": "/etc/hostname"}),
        "t1",
    );
    let o = hook_at(
        &bin("agent"),
        &dir.path().join("agent.sock"),
        ev.to_string().as_bytes(),
        &[],
        None,
    );
    assert_blocked(&o, "cannot reach the supervisor");
}

#[test]
fn a_socket_nobody_listens_on_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let ev = pre(
        "s1",
        dir.path(),
        "Read",
        json!({"file_path": "/etc/hostname"}),
        "t1",
    );
    let o = hook_at(&bin("agent"), &path, ev.to_string().as_bytes(), &[], None);
    assert_blocked(&o, "cannot reach the supervisor");
}

#[test]
fn a_deadline_passed_blocks_before_the_clients_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    // Accepts and never answers.
    let held = std::thread::spawn(move || {
        let mut conns = Vec::new();
        while let Ok((c, _)) = listener.accept() {
            conns.push(c);
            if conns.len() > 4 {
                break;
            }
        }
    });
    let ev = pre(
        "s1",
        dir.path(),
        "Read",
        json!({"file_path": "/etc/hostname"}),
        "t1",
    );
    let o = hook_at(
        &bin("agent"),
        &path,
        ev.to_string().as_bytes(),
        &["--timeout", "2"],
        None,
    );
    // Its own deadline (a second before the client's 2 s) ended the wait.
    assert_blocked(&o, "no answer from the supervisor within 1.0s");
    drop(held);
}

/// A supervisor-side failure (here: a server that answers every event with
/// an internal error, or with a decision the hook does not know) blocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_internal_error_blocks() {
    use tollgate_proto::v1 as pb;
    use tollgate_proto::v1::client_hooks_server::{ClientHooks, ClientHooksServer};

    struct Broken(bool);
    #[tonic::async_trait]
    impl ClientHooks for Broken {
        async fn event(
            &self,
            _: tonic::Request<pb::HookEventRequest>,
        ) -> Result<tonic::Response<pb::HookEventResponse>, tonic::Status> {
            if self.0 {
                Err(tonic::Status::internal("the policy engine failed"))
            } else {
                Ok(tonic::Response::new(pb::HookEventResponse {
                    decision: "maybe".into(),
                    ..Default::default()
                }))
            }
        }
        type ExecStream = std::pin::Pin<
            Box<
                dyn futures_util::Stream<Item = Result<pb::SandboxExecOutput, tonic::Status>>
                    + Send,
            >,
        >;
        async fn exec(
            &self,
            _: tonic::Request<pb::HookExecRequest>,
        ) -> Result<tonic::Response<Self::ExecStream>, tonic::Status> {
            Err(tonic::Status::internal("no"))
        }
    }
    for (errors, want) in [
        (true, "the policy engine failed"),
        (false, "not allow, deny or ask"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.sock");
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(ClientHooksServer::new(Broken(errors)))
                .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener)),
        );
        let ev = pre(
            "s1",
            dir.path(),
            "Read",
            json!({"file_path": "/etc/hostname"}),
            "t1",
        );
        let o = tokio::task::spawn_blocking(move || {
            hook_at(&bin("agent"), &path, ev.to_string().as_bytes(), &[], None)
        })
        .await
        .unwrap();
        assert_blocked(&o, want);
        server.abort();
    }
}

#[test]
fn malformed_oversized_and_unknown_events_block_and_harm_nothing() {
    let sup = Supervisor::builder().config(SKIP_MODE).start();
    let ws = sup.dirs.workspace("ws", 0);
    let mut huge = pre(
        "s1",
        &ws,
        "Write",
        json!({"file_path": ws.join("big"), "content": ""}),
        "t1",
    );
    huge["tool_input"]["content"] = json!("x".repeat(10 << 20));
    let mut unknown = pre("s1", &ws, "Read", json!({}), "t1");
    unknown["hook_event_name"] = json!("UserPromptSubmit");
    for (bytes, want) in [
        (
            b"{\"hook_event_name\": \"PreToolUse\", ".to_vec(),
            "not valid JSON",
        ),
        (b"[]".to_vec(), "not a JSON object"),
        (huge.to_string().into_bytes(), "larger than 4 MiB"),
        (
            unknown.to_string().into_bytes(),
            "unknown event \"UserPromptSubmit\"",
        ),
        (
            [
                &br#"{"session_id":"s1","cwd":"/w"#[..],
                &[0xff],
                &br#"","hook_event_name":"PreToolUse"}"#[..],
            ]
            .concat(),
            "not UTF-8",
        ),
    ] {
        assert_blocked(
            &hook_at(
                &sup.dirs.staged_bin("agent"),
                &sup.agent_socket,
                &bytes,
                &[],
                None,
            ),
            want,
        );
    }
    assert!(!ws.join("big").exists());
    // The supervisor is fine: the next event is answered.
    let ok = hook(
        &sup,
        &pre("s1", &ws, "TodoWrite", json!({"todos": []}), "t2"),
    );
    assert_eq!(answer(&ok).0, "allow");
}

#[test]
fn bad_fields_are_refused_naming_them() {
    let sup = Supervisor::builder().config(SKIP_MODE).start();
    let ws = sup.dirs.workspace("ws", 0);
    let read = || pre("s1", &ws, "Read", json!({"file_path": ws.join("a")}), "t1");
    let without = |k: &str| {
        let mut e = read();
        e.as_object_mut().unwrap().remove(k);
        e
    };
    let with = |k: &str, v: Value| {
        let mut e = read();
        e[k] = v;
        e
    };
    for (ev, want) in [
        (without("tool_name"), "`tool_name` is missing"),
        (without("cwd"), "`cwd` is missing"),
        (with("session_id", json!("a/b")), "is not a session id"),
        (with("session_id", json!("..")), "is not a session id"),
        (
            with("session_id", json!("x".repeat(1000))),
            "1000 bytes long",
        ),
        (with("cwd", json!("relative/dir")), "relative path"),
    ] {
        assert_blocked(&hook(&sup, &ev), want);
    }
    // A relative path inside tool_input: the call is denied, with the reason.
    let (d, reason, _) = answer(&hook(
        &sup,
        &pre("s1", &ws, "Read", json!({"file_path": "a.txt"}), "t2"),
    ));
    assert_eq!(d, "deny");
    assert!(reason.contains("relative path `a.txt`"), "{reason}");
}

#[test]
fn an_event_for_another_uids_session_is_refused() {
    if !root_or_skip("an_event_for_another_uids_session_is_refused") {
        return;
    }
    let sup = Supervisor::builder().config(SKIP_MODE).start();
    let ws = sup.dirs.workspace("ws", 0);
    let ev = pre("shared-1", &ws, "TodoWrite", json!({}), "t1");
    assert_eq!(answer(&hook(&sup, &ev)).0, "allow");
    let ev2 = pre(
        "shared-1",
        &ws,
        "Bash",
        json!({"command": "touch STOLEN"}),
        "t2",
    );
    let o = hook_at(
        &sup.dirs.staged_bin("agent"),
        &sup.agent_socket,
        ev2.to_string().as_bytes(),
        &[],
        Some(OTHER_UID),
    );
    assert_blocked(&o, "belongs to uid 0; the caller is uid 64123");
    assert!(!ws.join("STOLEN").exists());
}

#[test]
fn parallel_hooks_of_one_session_open_it_once() {
    let sup = Supervisor::builder().config(SKIP_MODE).start();
    let ws = sup.dirs.workspace("ws", 0);
    std::fs::write(ws.join("a.txt"), "x").unwrap();
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let socket = sup.agent_socket.clone();
            let ev = pre(
                "par-1",
                &ws,
                "Read",
                json!({"file_path": ws.join("a.txt")}),
                &format!("t{i}"),
            );
            std::thread::spawn(move || {
                hook_at(&bin("agent"), &socket, ev.to_string().as_bytes(), &[], None)
            })
        })
        .collect();
    for h in handles {
        assert_eq!(answer(&h.join().unwrap()).0, "allow");
    }
    let records = one_session(&sup);
    assert_eq!(
        records
            .iter()
            .filter(|r| r["event"] == "session_opened")
            .count(),
        1
    );
    assert_eq!(
        records
            .iter()
            .filter(|r| r["event"] == "permission_check")
            .count(),
        8
    );
}

#[test]
fn a_cwd_that_is_a_symlink_or_not_a_directory_is_refused() {
    let sup = Supervisor::builder().config(SKIP_MODE).start();
    let ws = sup.dirs.workspace("ws", 0);
    let link = sup.dirs.root.path().join("link");
    std::os::unix::fs::symlink(&ws, &link).unwrap();
    std::fs::write(ws.join("file"), "x").unwrap();
    let todo = |cwd: &Path| pre("cwd-1", cwd, "TodoWrite", json!({}), "t1");
    assert_blocked(&hook(&sup, &todo(&link)), "is a symlink");
    assert_blocked(&hook(&sup, &todo(&ws.join("file"))), "is not a directory");
    assert_blocked(
        &hook(&sup, &todo(&ws.join("nope"))),
        "cannot be a workspace",
    );
    assert!(
        sup.audit_files("audit-").is_empty(),
        "no session was opened"
    );
}

#[test]
fn client_tools_are_mapped_and_the_table_is_an_allowlist() {
    let sup = Supervisor::builder()
        .config("[session]\napproval_timeout_s = 30\n[clients]\nmode = \"acceptEdits\"\n[policy]\nallow = [\"mcp(docs.*)\"]\ndeny = [\"mcp(github.delete_*)\"]\n[llm]\nprovider = \"script\"\n")
        .start();
    let ws = sup.dirs.workspace("ws", 0);
    let s = "map-1";
    let d = |tool: &str, input: Value, id: &str| answer(&hook(&sup, &pre(s, &ws, tool, input, id)));
    assert_eq!(d("TodoWrite", json!({"todos": []}), "t1").0, "allow");
    let (dec, reason, _) = d("Skill", json!({"skill": "x"}), "t2");
    assert_eq!(dec, "deny");
    assert!(reason.contains("no rule for the tool `Skill`"), "{reason}");
    assert_eq!(d("mcp__docs__search", json!({"q": "x"}), "t3").0, "allow");
    let (dec, reason, _) = d("mcp__github__delete_repo", json!({}), "t4");
    assert_eq!(dec, "deny");
    assert!(reason.contains("mcp(github.delete_*)"), "{reason}");
    // A patch, file by file: one file outside the workspace denies it all.
    let outside = sup.dirs.root.path().join("outside.txt");
    let patch = format!(
        "*** Begin Patch\n*** Add File: inside.txt\n+ok\n*** Add File: {}\n+no\n*** End Patch\n",
        outside.display()
    );
    let (dec, reason, _) = d("apply_patch", json!({"command": patch}), "t5");
    assert_eq!(dec, "deny");
    assert!(reason.contains("outside the workspace"), "{reason}");
    let inside = "*** Begin Patch\n*** Add File: inside.txt\n+ok\n*** Add File: docs/b.md\n+b\n*** End Patch\n";
    assert_eq!(
        d("apply_patch", json!({"command": inside}), "t6").0,
        "allow"
    );
    let records = one_session(&sup);
    let check = |id: &str| {
        records
            .iter()
            .find(|r| r["event"] == "permission_check" && r["call_id"] == id)
            .unwrap_or_else(|| panic!("no decision for {id}"))
            .clone()
    };
    assert_eq!(check("t1")["rule"], "clients:harmless");
    assert_eq!(check("t2")["rule"], "clients:unknown-tool");
    assert_eq!(check("t3")["tool"], "mcp");
    assert_eq!(check("t6")["tool"], "apply_patch");
    assert_eq!(
        check("t6")["consequence"],
        "create inside.txt (3 bytes); create docs/b.md (2 bytes)"
    );
}

#[test]
fn a_report_for_a_call_tollgate_never_allowed_is_flagged() {
    let sup = Supervisor::builder().config(SKIP_MODE).start();
    let ws = sup.dirs.workspace("ws", 0);
    let mut post = event(
        "PostToolUse",
        "post-1",
        &ws,
        "Bash",
        json!({"command": "ls"}),
        "never",
    );
    post["tool_response"] = json!({"stdout": "AKIAIOSFODNN7EXAMPLE a.txt", "stderr": ""});
    let o = hook(&sup, &post);
    assert_eq!(
        (o.status.code(), o.stdout.is_empty()),
        (Some(0), true),
        "{}",
        stderr(&o)
    );
    let r = one_session(&sup)
        .into_iter()
        .find(|r| r["event"] == "client_tool_result")
        .unwrap();
    assert_eq!(r["unexpected"], true);
    assert_eq!(r["call_id"], "never");
    assert!(
        !r["output"]
            .as_str()
            .unwrap()
            .contains("AKIAIOSFODNN7EXAMPLE"),
        "{r}"
    );
}

/// An ask: Claude Code's own prompt asks the person (when the session may
/// approve), and the outcome comes from PostToolUse; a destructive one goes
/// to operators only; Codex's always go to operators.
#[test]
fn asks_go_to_the_clients_prompt_or_to_operators() {
    let sup = Supervisor::builder()
        .config("[session]\napproval_timeout_s = 1\n[llm]\nprovider = \"script\"\n")
        .start();
    let ws = sup.dirs.workspace("ws", 0);
    std::fs::write(ws.join("old.txt"), "precious").unwrap();
    let write = |name: &str, id: &str| {
        pre(
            "ask-1",
            &ws,
            "Write",
            json!({"file_path": ws.join(name), "content": "new"}),
            id,
        )
    };
    let (d, reason, _) = answer(&hook(&sup, &write("new.txt", "t1")));
    assert_eq!(d, "ask");
    assert!(reason.contains("create new.txt"), "{reason}");
    let mut post = event("PostToolUse", "ask-1", &ws, "Write", json!({}), "t1");
    post["tool_response"] = json!({"type": "create"});
    assert_eq!(hook(&sup, &post).status.code(), Some(0));
    // Destructive (overwriting a file the session never read): operators
    // only, with the typed confirmation; nobody answers, so it is denied.
    let (d, reason, _) = answer(&hook(&sup, &write("old.txt", "t2")));
    assert_eq!(d, "deny");
    assert!(reason.contains("no one approved in time"), "{reason}");
    // Codex: never handed back.
    let mut codex = pre("ask-2", &ws, "Bash", json!({"command": "ls"}), "t3");
    codex["turn_id"] = json!("turn-1");
    let o = hook_at(
        &sup.dirs.staged_bin("agent"),
        &sup.agent_socket,
        codex.to_string().as_bytes(),
        &["--client", "codex"],
        None,
    );
    let (d, reason, _) = answer(&o);
    assert_eq!(d, "deny");
    assert!(reason.contains("no one approved in time"), "{reason}");
    let records: Vec<Value> = sup
        .audit_files("audit-")
        .iter()
        .flat_map(|p| tollgate_e2e::harness::read_records(p))
        .collect();
    let mut decided: Vec<(String, String)> = records
        .iter()
        .filter(|r| r["event"] == "approval_decided")
        .map(|r| {
            (
                r["outcome"].as_str().unwrap().to_string(),
                r["by"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    decided.sort();
    assert_eq!(
        decided,
        vec![
            (
                "approved".to_string(),
                "uid 0 via client prompt".to_string()
            ),
            ("timeout".to_string(), "deadline".to_string()),
            ("timeout".to_string(), "deadline".to_string()),
        ]
    );
    let requested = |id: &str| {
        records
            .iter()
            .find(|r| r["event"] == "approval_requested" && r["call_id"] == id)
            .unwrap_or_else(|| panic!("no approval for {id}"))
            .clone()
    };
    assert_eq!(requested("t1")["channel"], "client");
    assert_eq!(requested("t2")["destructive"], true);
    assert!(requested("t3").get("channel").is_none());
}

/// Revoke: the next event gets a deny and `continue: false` with the
/// operator's reason (Codex: the reason in the deny, since Codex fails open
/// on `continue` in a PreToolUse answer).
#[test]
fn revoke_reaches_the_clients_next_event() {
    let sup = Supervisor::builder().config(SKIP_MODE).start();
    let ws = sup.dirs.workspace("ws", 0);
    let todo = |id: &str| pre("rev-1", &ws, "TodoWrite", json!({}), id);
    let (_, _, first) = answer(&hook(&sup, &todo("t1")));
    let id = one_session(&sup)[0]["session"]
        .as_str()
        .unwrap()
        .to_string();
    let out = sup.ctl(&["revoke", &id, "--reason", "enough for today"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(first.get("continue").is_none());
    let (d, reason, v) = answer(&hook(&sup, &todo("t2")));
    assert_eq!(d, "deny");
    assert!(reason.contains("revoked (enough for today)"), "{reason}");
    assert_eq!(v["continue"], false);
    assert_eq!(v["stopReason"], "enough for today");
    // Other events just stop.
    let o = hook(&sup, &event("Stop", "rev-1", &ws, "", json!({}), "x"));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v,
        json!({"continue": false, "stopReason": "enough for today"})
    );

    // Codex: its own session (the client is part of the key).
    let codex = |id: &str| {
        let mut e = pre("rev-2", &ws, "TodoWrite", json!({}), id);
        e["turn_id"] = json!("turn-1");
        hook_at(
            &sup.dirs.staged_bin("agent"),
            &sup.agent_socket,
            e.to_string().as_bytes(),
            &["--client", "codex"],
            None,
        )
    };
    let o = codex("t3");
    assert_eq!(
        (o.status.code(), o.stdout.is_empty()),
        (Some(0), true),
        "a plain allow prints nothing for Codex"
    );
    let listed: Value = serde_json::from_slice(&sup.ctl(&["sessions", "--json"]).stdout).unwrap();
    let codex_session = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["client_session_id"] == "rev-2" && s["client"] == "codex")
        .expect("the codex session is listed")["id"]
        .as_str()
        .unwrap()
        .to_string();
    let out = sup.ctl(&["revoke", &codex_session, "--reason", "enough for today"]);
    assert!(out.status.success());
    let (d, reason, v) = answer(&codex("t4"));
    assert_eq!(d, "deny");
    assert!(v.get("continue").is_none(), "{v}");
    assert!(
        reason.contains("The session is over: enough for today"),
        "{reason}"
    );
}

/// The routed command (what an allowed Bash is rewritten to).
fn routed(sup: &Supervisor, session: &str, ws: &Path, command: &str, id: &str) -> String {
    let (d, _, v) = answer(&hook(
        sup,
        &pre(
            session,
            ws,
            "Bash",
            json!({"command": command, "timeout": 60000}),
            id,
        ),
    ));
    assert_eq!(d, "allow");
    let input = &v["hookSpecificOutput"]["updatedInput"];
    assert_eq!(input["timeout"], 60000, "the other fields are kept");
    input["command"].as_str().unwrap().to_string()
}

fn sh(command: &str, cwd: &Path, uid: Option<u32>) -> Command {
    let mut c = Command::new("sh");
    c.args(["-c", command]).current_dir(cwd);
    if let Some(u) = uid {
        c.uid(u).gid(u);
    }
    c
}

#[test]
fn a_routed_command_runs_once_for_its_uid_with_its_own_streams() {
    if !root_or_skip("a_routed_command_runs_once_for_its_uid_with_its_own_streams") {
        return;
    }
    let sup = Supervisor::builder().config(SKIP_MODE).start();
    let ws = sup.dirs.workspace("ws", 0);
    let cmd = routed(
        &sup,
        "route-1",
        &ws,
        "echo out; echo err >&2; pwd; exit 3",
        "t1",
    );
    assert!(!cmd.contains('\n'));
    // Another uid reads the id from a process list: useless to it, and it
    // does not burn it.
    let other = sh(&cmd, Path::new("/"), Some(OTHER_UID)).output().unwrap();
    assert_eq!(other.status.code(), Some(126));
    assert!(
        stderr(&other).contains("belongs to uid 0"),
        "{}",
        stderr(&other)
    );
    // Whatever the client's shell is handed, the decided command runs.
    let o = sh(&cmd, Path::new("/"), None).output().unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!("out\n{}\n", ws.display())
    );
    assert_eq!(stderr(&o), "err\n");
    let again = sh(&cmd, Path::new("/"), None).output().unwrap();
    assert_eq!(again.status.code(), Some(126));
    assert!(stderr(&again).contains("already run"), "{}", stderr(&again));
    let records = one_session(&sup);
    let result = records
        .iter()
        .find(|r| r["event"] == "tool_result")
        .unwrap();
    assert_eq!(
        (result["exit_code"].as_i64(), result["routed"].as_bool()),
        (Some(3), Some(true))
    );
}

/// The same through the Docker backend: the routed command runs in the
/// session's container.
#[test]
fn a_routed_command_runs_in_the_docker_sandbox() {
    if !root_or_skip("a_routed_command_runs_in_the_docker_sandbox") {
        return;
    }
    let sup = Supervisor::builder()
        .config(SKIP_MODE)
        .sandbox("docker")
        .start();
    let ws = sup.dirs.workspace("ws", 0);
    let cmd = routed(
        &sup,
        "docker-1",
        &ws,
        "echo out; echo err >&2; pwd; grep -c : /proc/net/dev; exit 3",
        "t1",
    );
    let o = sh(&cmd, Path::new("/"), None).output().unwrap();
    if o.status.code() == Some(126) {
        let why = format!("the docker backend is unavailable: {}", stderr(&o).trim());
        if std::env::var("TOLLGATE_REQUIRE_DOCKER").as_deref() == Ok("1") {
            panic!("{why}");
        }
        eprintln!("a_routed_command_runs_in_the_docker_sandbox: skipped: {why}");
        return;
    }
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    // The workspace is the working directory; the only interface is lo.
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!("out\n{}\n1\n", ws.display())
    );
    assert_eq!(stderr(&o), "err\n");
    let records = one_session(&sup);
    let opened = &records[0];
    assert_eq!(opened["sandbox"], "docker");
    let result = records
        .iter()
        .find(|r| r["event"] == "tool_result")
        .unwrap();
    assert_eq!(result["routed"], true);
}

#[test]
fn route_shell_off_decides_without_rewriting() {
    let sup = Supervisor::builder()
        .config("[clients]\nroute_shell = false\nmode = \"dangerouslySkipPermissions\"\n[llm]\nprovider = \"script\"\n")
        .start();
    let ws = sup.dirs.workspace("ws", 0);
    let (d, _, v) = answer(&hook(
        &sup,
        &pre("off-1", &ws, "Bash", json!({"command": "ls"}), "t1"),
    ));
    assert_eq!(d, "allow");
    assert!(v["hookSpecificOutput"].get("updatedInput").is_none(), "{v}");
}

/// Host pids whose command line is exactly `sleep <arg>`.
fn sleeps(arg: &str) -> Vec<i32> {
    let want = format!("sleep\0{arg}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| c.ends_with(want.as_bytes()))
                .unwrap_or(false)
        })
        .collect()
}

#[test]
fn kill_stops_a_running_routed_command() {
    let sup = Supervisor::builder().config(SKIP_MODE).start();
    let ws = sup.dirs.workspace("ws", 0);
    let secs = format!("{}", 900 + std::process::id() % 90);
    let cmd = routed(
        &sup,
        "kill-1",
        &ws,
        &format!("sleep {secs}; touch SLEPT"),
        "t1",
    );
    let mut child = sh(&cmd, &ws, None)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while sleeps(&secs).is_empty() {
        assert!(Instant::now() < deadline, "the routed sleep never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    let id = one_session(&sup)[0]["session"]
        .as_str()
        .unwrap()
        .to_string();
    let t0 = Instant::now();
    let out = sup.ctl(&["kill", &id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = child.wait().unwrap();
    eprintln!(
        "routed command's client exited {:?} after the kill",
        t0.elapsed()
    );
    assert_eq!(status.code(), Some(137));
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(err.contains("the session was killed"), "{err}");
    assert!(sleeps(&secs).is_empty(), "the sandboxed sleep survived");
    assert!(!ws.join("SLEPT").exists());
}

#[test]
fn session_end_closes_and_the_next_event_opens_afresh() {
    let sup = Supervisor::builder().config(SKIP_MODE).start();
    let ws = sup.dirs.workspace("ws", 0);
    let mut start = event("SessionStart", "life-1", &ws, "", json!({}), "x");
    start["source"] = json!("startup");
    assert_eq!(hook(&sup, &start).status.code(), Some(0));
    let mut end = event("SessionEnd", "life-1", &ws, "", json!({}), "x");
    end["reason"] = json!("other");
    assert_eq!(hook(&sup, &end).status.code(), Some(0));
    let records = one_session(&sup);
    let closed = records
        .iter()
        .find(|r| r["event"] == "session_closed")
        .unwrap();
    assert_eq!(closed["reason"], "the client ended its session (other)");
    // A resumed conversation gets a fresh session.
    assert_eq!(
        answer(&hook(
            &sup,
            &pre("life-1", &ws, "TodoWrite", json!({}), "t1")
        ))
        .0,
        "allow"
    );
    assert_eq!(sup.audit_files("audit-").len(), 2);
}

#[test]
fn an_idle_client_session_is_closed() {
    let sup = Supervisor::builder()
        .config("[clients]\nidle_timeout_s = 1\n[llm]\nprovider = \"script\"\n")
        .start();
    let ws = sup.dirs.workspace("ws", 0);
    assert_eq!(
        answer(&hook(
            &sup,
            &pre("idle-1", &ws, "TodoWrite", json!({}), "t1")
        ))
        .0,
        "allow"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let records = one_session(&sup);
        if let Some(c) = records.iter().find(|r| r["event"] == "session_closed") {
            assert_eq!(c["reason"], "no event from the client for 1s");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the idle session was never closed"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn print_config_names_the_socket_and_a_timeout_the_hook_beats() {
    let out = Command::new(bin("agent"))
        .args([
            "hook",
            "print-config",
            "claude",
            "--socket",
            "/run/tollgate/agent.sock",
            "--timeout",
            "60",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let h = &v["hooks"]["PreToolUse"][0]["hooks"][0];
    let cmd = h["command"].as_str().unwrap();
    let agent = PathBuf::from(cmd.split(' ').next().unwrap());
    assert!(agent.is_absolute() && agent.ends_with("agent"), "{cmd}");
    assert!(
        cmd.ends_with(" hook --client claude-code --socket /run/tollgate/agent.sock --timeout 60"),
        "{cmd}"
    );
    assert_eq!(h["timeout"], 60);
}

// ---- what a client's own tool reaches, and the lesser findings ------------

/// A Grep that would read a secret file is allowed narrowed: the client
/// gets the input with the file left out, and the model a note saying so.
#[test]
fn a_grep_that_would_read_a_secret_file_is_answered_narrowed() {
    let sup = Supervisor::builder().config(SKIP_MODE).start();
    let ws = sup.dirs.workspace("ws", 0);
    std::fs::write(ws.join(".env"), "TOKEN=x\n").unwrap();
    std::fs::create_dir(ws.join("keys")).unwrap();
    std::fs::write(ws.join("keys/deploy.pem"), "k\n").unwrap();
    std::fs::write(ws.join("a.rs"), "fn a() {}\n").unwrap();
    let (dec, reason, v) = answer(&hook(
        &sup,
        &pre(
            "grep-1",
            &ws,
            "Grep",
            json!({"pattern": "TOKEN", "glob": "*.rs,.env", "output_mode": "content"}),
            "t1",
        ),
    ));
    assert_eq!(dec, "allow");
    let out = &v["hookSpecificOutput"];
    assert_eq!(
        out["updatedInput"],
        json!({"pattern": "TOKEN", "glob": "*.rs,.env !**/.env", "output_mode": "content"})
    );
    let note = "tollgate left `.env` out of this search: it looks like a secret file (keys, passwords, tokens). Read it to ask the user for it.";
    assert_eq!(out["additionalContext"], format!("tollgate: {note}"));
    assert!(reason.ends_with(note), "{reason}");
    // No glob, so every secret is reached; a search that reaches none runs
    // as asked.
    let (_, _, v) = answer(&hook(
        &sup,
        &pre("grep-1", &ws, "Grep", json!({"pattern": "x"}), "t2"),
    ));
    assert_eq!(
        v["hookSpecificOutput"]["updatedInput"]["glob"],
        "!**/.env !**/keys/deploy.pem"
    );
    let (_, _, v) = answer(&hook(
        &sup,
        &pre(
            "grep-1",
            &ws,
            "Grep",
            json!({"pattern": "x", "path": ws.join("a.rs")}),
            "t3",
        ),
    ));
    assert!(v["hookSpecificOutput"].get("updatedInput").is_none(), "{v}");
}

/// The finding: the routed command's `#` comment (what Claude Code shows,
/// and asks about) kept bidi and invisible characters and was cut at 160
/// characters without a mark.
#[test]
fn a_routed_commands_comment_escapes_and_marks_what_is_cut() {
    let sup = Supervisor::builder().config(SKIP_MODE).start();
    let ws = sup.dirs.workspace("ws", 0);
    let command = format!(
        "echo \u{202e}txt.exe\u{200b}; echo {}; echo tail-marker",
        "y".repeat(600)
    );
    let cmd = routed(&sup, "comment-1", &ws, &command, "t1");
    let comment = cmd.split_once(" # ").unwrap().1;
    assert!(
        comment.starts_with("echo \\u{202e}txt.exe\\u{200b}; echo yyy"),
        "{comment}"
    );
    assert!(!comment.contains('\u{202e}') && !comment.contains('\u{200b}'));
    assert!(
        comment.ends_with("… [cut: 153 more characters]"),
        "{comment}"
    );
    // The whole command is in the approval record's target.
    let records = one_session(&sup);
    let check = records
        .iter()
        .find(|r| r["event"] == "permission_check")
        .unwrap();
    assert!(
        check["consequence"]
            .as_str()
            .unwrap()
            .contains("more characters]"),
        "{check}"
    );
    assert!(check["target"].as_str().unwrap().ends_with("tail-marker"));
}

/// The finding: the tool's input (`mcp_server`, which the model writes)
/// chose where `mcp__A__B__C` split, so a call passed for another server's.
#[test]
fn an_mcp_calls_input_cannot_choose_its_server() {
    let sup = Supervisor::builder()
        .config("[clients]\nmode = \"dangerouslySkipPermissions\"\n[policy]\nallow = [\"mcp(a__b.*)\"]\ndeny = [\"mcp(a.*)\"]\n[llm]\nprovider = \"script\"\n")
        .start();
    let ws = sup.dirs.workspace("ws", 0);
    let call = |id: &str, named: Option<Value>| {
        let mut ev = pre(
            "mcp-split-1",
            &ws,
            "mcp__a__b__c",
            json!({"mcp_server": "a__b"}),
            id,
        );
        if let Some(n) = named {
            ev["mcp_server"] = n;
        }
        answer(&hook(&sup, &ev))
    };
    // The input's name is not heard: both splits decide, deny wins.
    let (dec, reason, _) = call("t1", None);
    assert_eq!(dec, "deny");
    assert!(reason.contains("mcp(a.*)"), "{reason}");
    // The client's own name picks the split.
    assert_eq!(
        call("t2", Some(json!({"name": "a__b", "source": "user"}))).0,
        "allow"
    );
    assert_eq!(
        call("t3", Some(json!({"name": "a", "source": "user"}))).0,
        "deny"
    );
}

/// The finding: after a supervisor restart, the first event for a client
/// session id claimed it for whichever local user sent it; the resumed
/// session's owner was then locked out (and the id was another user's).
#[test]
fn after_a_restart_another_uid_cannot_claim_a_client_session() {
    if !root_or_skip("after_a_restart_another_uid_cannot_claim_a_client_session") {
        return;
    }
    let owner = OTHER_UID;
    let intruder = OTHER_UID + 1;
    let dirs = Dirs::new();
    let (state, audit) = (dirs.state.clone(), dirs.audit.clone());
    let mut sup = Supervisor::builder().config(SKIP_MODE).dirs(dirs).start();
    let ws = sup.dirs.workspace("ws", owner);
    let other_ws = sup.dirs.workspace("other", intruder);
    let agent = sup.dirs.staged_bin("agent");
    let as_uid = |sup: &Supervisor, uid: u32, cwd: &Path, id: &str| {
        let ev = pre("resume-1", cwd, "TodoWrite", json!({}), id);
        hook_at(
            &agent,
            &sup.agent_socket,
            ev.to_string().as_bytes(),
            &[],
            Some(uid),
        )
    };
    assert_eq!(answer(&as_uid(&sup, owner, &ws, "t1")).0, "allow");
    sup.stop();
    let dirs2 = Dirs {
        root: tempfile::tempdir().unwrap(),
        state,
        audit,
    };
    let sup2 = Supervisor::builder().config(SKIP_MODE).dirs(dirs2).start();
    assert_blocked(
        &as_uid(&sup2, intruder, &other_ws, "t2"),
        &format!(
            "claude-code session resume-1 belongs to uid {owner}; the caller is uid {intruder}"
        ),
    );
    // The owner resumes.
    assert_eq!(answer(&as_uid(&sup2, owner, &ws, "t3")).0, "allow");
}
