//! The supervisor's own contract (docs/INTERFACES.md): sessions and credentials, uid
//! binding, revocation, the operator CLI, health and reflection, and bad input.
//! Real `supervisor`, `supervisorctl` and a tonic client, over real sockets.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use tollgate_e2e::harness::{
    self, Dirs, OTHER_UID, Supervisor, authed, bin, fd_count, root_or_skip,
};
use tollgate_proto::v1 as pb;
use tonic::Code;

async fn open(sup: &Supervisor, ws: &std::path::Path) -> pb::OpenSessionResponse {
    let mut c = sup.agent_client().await;
    c.open_session(pb::OpenSessionRequest {
        workspace: ws.display().to_string(),
        client: "e2e".to_string(),
        ..Default::default()
    })
    .await
    .expect("open session")
    .into_inner()
}

async fn list_tools(sup: &Supervisor, token: &str) -> Result<usize, tonic::Status> {
    let mut c = sup.agent_client().await;
    c.list_tools(authed(pb::ListToolsRequest {}, token))
        .await
        .map(|r| r.into_inner().tools.len())
}

fn ctl_json(sup: &Supervisor, args: &[&str]) -> serde_json::Value {
    let out = sup.ctl(args);
    assert!(
        out.status.success(),
        "supervisorctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

/// Runs the e2e client as another uid.
fn client_as(uid: u32, sup: &Supervisor, token: &str, cmd: &str, arg: &str) -> String {
    let out = Command::new(sup.dirs.staged_bin("e2e-client"))
        .args([sup.agent_socket.to_str().unwrap(), token, cmd, arg])
        .uid(uid)
        .gid(uid)
        .output()
        .expect("run e2e-client");
    assert!(
        out.status.success(),
        "e2e-client: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test]
async fn ready_line_sockets_and_modes() {
    let sup = Supervisor::start();
    assert!(
        sup.ready.starts_with("supervisor: ready agent="),
        "{}",
        sup.ready
    );
    assert!(sup.ready.ends_with("sandbox=native"), "{}", sup.ready);
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&sup.agent_socket), 0o666);
    assert_eq!(mode(&sup.operator_socket), 0o600);
    let out = sup.ctl(&["status"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("0 active"), "{text}");
}

#[tokio::test]
async fn open_list_and_close_a_session() {
    let sup = Supervisor::start();
    let ws = sup.dirs.workspace("ws", 0);
    let s = open(&sup, &ws).await;
    assert_eq!(s.session_id.len(), 12);
    assert!(s.token.starts_with(&format!("{}.", s.session_id)));
    assert!(list_tools(&sup, &s.token).await.unwrap() >= 7);

    let shown = ctl_json(&sup, &["show", &s.session_id, "--json"]);
    assert_eq!(shown["state"], "active");
    assert_eq!(shown["workspace"], ws.display().to_string());

    let mut c = sup.agent_client().await;
    let closed = c
        .close_session(authed(pb::CloseSessionRequest {}, &s.token))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(closed.session.unwrap().state, "closed");
    let err = list_tools(&sup, &s.token).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    assert!(err.message().contains("closed"), "{}", err.message());
    // The session's audit log holds the opening and the closing.
    let events: Vec<String> = sup
        .session_records(&s.session_id)
        .iter()
        .map(|r| r["event"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(events.first().map(String::as_str), Some("session_opened"));
    assert!(events.contains(&"session_closed".to_string()), "{events:?}");
}

#[tokio::test]
async fn refresh_rotates_and_the_old_token_dies_at_once() {
    let sup = Supervisor::start();
    let ws = sup.dirs.workspace("ws", 0);
    let s = open(&sup, &ws).await;
    let mut c = sup.agent_client().await;
    let new = c
        .refresh_token(authed(pb::RefreshTokenRequest {}, &s.token))
        .await
        .unwrap()
        .into_inner();
    assert_ne!(new.token, s.token);
    let err = list_tools(&sup, &s.token).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    assert!(
        err.message().contains("wrong or rotated"),
        "{}",
        err.message()
    );
    assert!(list_tools(&sup, &new.token).await.is_ok());
    let events: Vec<serde_json::Value> = sup.session_records(&s.session_id);
    assert!(events.iter().any(|r| r["event"] == "token_rotated"));
}

#[tokio::test]
async fn revoke_rejects_the_token_and_sessions_shows_it() {
    let sup = Supervisor::start();
    let ws = sup.dirs.workspace("ws", 0);
    let s = open(&sup, &ws).await;
    let out = sup.ctl(&["revoke", &s.session_id, "--reason", "test revoke"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = list_tools(&sup, &s.token).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    assert!(err.message().contains("revoked"), "{}", err.message());
    let all = ctl_json(&sup, &["sessions", "--all", "--json"]);
    let row = all
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == s.session_id.as_str())
        .expect("revoked session listed");
    assert_eq!(row["state"], "revoked");
    assert_eq!(row["end_reason"], "test revoke");
    // The people's table says it too.
    let table = String::from_utf8(sup.ctl(&["sessions", "--all"]).stdout).unwrap();
    assert!(
        table
            .lines()
            .any(|l| l.contains(&s.session_id) && l.contains("revoked")),
        "{table}"
    );
    // A second revoke names the state instead of pretending.
    let again = sup.ctl(&["revoke", &s.session_id]);
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("already ended"));
}

#[tokio::test]
async fn kill_all_ends_every_session() {
    let sup = Supervisor::start();
    let ws = sup.dirs.workspace("ws", 0);
    let mut tokens = Vec::new();
    for _ in 0..3 {
        tokens.push(open(&sup, &ws).await.token);
    }
    let out = sup.ctl(&["kill", "--all"]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout)
            .matches("killed ")
            .count(),
        3
    );
    for t in &tokens {
        assert_eq!(
            list_tools(&sup, t).await.unwrap_err().code(),
            Code::Unauthenticated
        );
    }
    let active = ctl_json(&sup, &["sessions", "--json"]);
    assert_eq!(active.as_array().unwrap().len(), 0);
}

#[tokio::test]
async fn tokens_are_bound_to_the_uid_that_opened_the_session() {
    if !root_or_skip("tokens_are_bound_to_the_uid_that_opened_the_session") {
        return;
    }
    let sup = Supervisor::start();
    // Root's session, used by another uid: refused.
    let ws = sup.dirs.workspace("ws", 0);
    let s = open(&sup, &ws).await;
    let out = client_as(OTHER_UID, &sup, &s.token, "list-tools", "");
    assert!(out.starts_with("ERR PermissionDenied"), "{out}");
    assert!(
        out.contains(&format!("belongs to uid 0; the caller is uid {OTHER_UID}")),
        "{out}"
    );
    // The other uid's own session works for it, and is refused to root.
    let ws2 = sup.dirs.workspace("ws-other", OTHER_UID);
    let opened = client_as(OTHER_UID, &sup, "-", "open", ws2.to_str().unwrap());
    let mut parts = opened.split_whitespace();
    assert_eq!(parts.next(), Some("OK"), "{opened}");
    let _id = parts.next().unwrap();
    let token = parts.next().unwrap().to_string();
    assert!(client_as(OTHER_UID, &sup, &token, "list-tools", "").starts_with("OK"));
    let err = list_tools(&sup, &token).await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{}", err.message());
    // A workspace the caller does not own is refused.
    let refused = client_as(OTHER_UID, &sup, "-", "open", ws.to_str().unwrap());
    assert!(
        refused.starts_with("ERR InvalidArgument") && refused.contains("not by the caller"),
        "{refused}"
    );
    // operator.sock is not for other uids.
    let out = sup.ctl_cmd_as(OTHER_UID).arg("sessions").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("permission denied") || err.contains("Permission denied"),
        "{err}"
    );
}

#[tokio::test]
async fn bad_tokens_get_clear_statuses() {
    let sup = Supervisor::builder()
        .config("[session]\ntoken_ttl_s = 1\n[llm]\nprovider = \"script\"\n")
        .start();
    let ws = sup.dirs.workspace("ws", 0);
    let mut c = sup.agent_client().await;
    // No token.
    let err = c.list_tools(pb::ListToolsRequest {}).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    assert!(
        err.message().contains("missing bearer token"),
        "{}",
        err.message()
    );
    // Garbage token.
    let err = list_tools(&sup, "not-a-token").await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    assert!(err.message().contains("malformed"), "{}", err.message());
    // Right session, wrong secret.
    let s = open(&sup, &ws).await;
    let forged = format!("{}.{}", s.session_id, "A".repeat(43));
    let err = list_tools(&sup, &forged).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    assert!(err.message().contains("wrong"), "{}", err.message());
    // Unknown session.
    let err = list_tools(&sup, &format!("AAAAAAAAAAAA.{}", "B".repeat(43)))
        .await
        .unwrap_err();
    assert!(
        err.message().contains("no such session"),
        "{}",
        err.message()
    );
    // Expired (TTL 1 s).
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let err = list_tools(&sup, &s.token).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    assert!(
        err.message().contains("expired"),
        "expired token message: {}",
        err.message()
    );
    // Refresh cannot revive an expired token.
    let err = c
        .refresh_token(authed(pb::RefreshTokenRequest {}, &s.token))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
}

#[tokio::test]
async fn workspaces_that_are_not_allowed() {
    let sup = Supervisor::start();
    let dir = sup.dirs.root.path();
    let link = dir.join("root-link");
    std::os::unix::fs::symlink("/", &link).unwrap();
    let etc = dir.join("etc-link");
    std::os::unix::fs::symlink("/etc", &etc).unwrap();
    let file = dir.join("file");
    std::fs::write(&file, "x").unwrap();
    let with_ssh = sup.dirs.workspace("with-ssh", 0);
    std::fs::create_dir(with_ssh.join(".ssh")).unwrap();
    let cases = [
        (link.display().to_string(), "system directory"),
        (etc.display().to_string(), "system directory"),
        (file.display().to_string(), "not a directory"),
        ("relative".to_string(), "not an absolute path"),
        (
            dir.join("missing").display().to_string(),
            "cannot be resolved",
        ),
        (sup.dirs.state.display().to_string(), "overlaps"),
        (with_ssh.display().to_string(), "credential"),
        ("/root".to_string(), "system directory"),
    ];
    let mut c = sup.agent_client().await;
    for (ws, why) in cases {
        let err = c
            .open_session(pb::OpenSessionRequest {
                workspace: ws.clone(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{ws}: {}", err.message());
        assert!(err.message().contains(why), "{ws}: {}", err.message());
    }
}

#[tokio::test]
async fn mode_caps_and_unknown_tools_are_refused_at_open() {
    let sup = Supervisor::builder()
        .config("[session]\nmax_mode = \"acceptEdits\"\nallow_dangerously_skip = false\n[llm]\nprovider = \"script\"\n")
        .start();
    let ws = sup.dirs.workspace("ws", 0);
    let mut c = sup.agent_client().await;
    let err = c
        .open_session(pb::OpenSessionRequest {
            workspace: ws.display().to_string(),
            mode: "dangerouslySkipPermissions".to_string(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied);
    assert!(err.message().contains("forbids"), "{}", err.message());
    let err = c
        .open_session(pb::OpenSessionRequest {
            workspace: ws.display().to_string(),
            tools: vec!["read_file".to_string(), "launch_missiles".to_string()],
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains("launch_missiles"),
        "{}",
        err.message()
    );
    // --tools filters ListTools.
    let s = c
        .open_session(pb::OpenSessionRequest {
            workspace: ws.display().to_string(),
            tools: vec!["read_file".to_string(), "grep".to_string()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let tools = c
        .list_tools(authed(pb::ListToolsRequest {}, &s.token))
        .await
        .unwrap()
        .into_inner()
        .tools;
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, vec!["read_file", "grep"]);
}

#[tokio::test]
async fn system_prompts_with_host_secrets_are_refused() {
    let sup = Supervisor::builder()
        .env("TOLLGATE_TEST_API_KEY", "s3cr3t-value-for-test")
        .start();
    let ws = sup.dirs.workspace("ws", 0);
    let mut c = sup.agent_client().await;
    for prompt in [
        "Use {os.environ['HOME']}",
        "the key is TOLLGATE_TEST_API_KEY",
        "s3cr3t-value-for-test",
    ] {
        let err = c
            .open_session(pb::OpenSessionRequest {
                workspace: ws.display().to_string(),
                system_prompt: prompt.to_string(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::PermissionDenied, "{prompt}");
        assert!(
            !err.message().contains("s3cr3t-value"),
            "the refusal leaks the value: {}",
            err.message()
        );
    }
}

#[tokio::test]
async fn sessions_per_uid_are_capped() {
    let sup = Supervisor::builder()
        .config("[supervisor]\nmax_sessions_per_uid = 2\n[llm]\nprovider = \"script\"\n")
        .start();
    let ws = sup.dirs.workspace("ws", 0);
    open(&sup, &ws).await;
    open(&sup, &ws).await;
    let mut c = sup.agent_client().await;
    let err = c
        .open_session(pb::OpenSessionRequest {
            workspace: ws.display().to_string(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    assert!(
        err.message().contains("max_sessions_per_uid"),
        "{}",
        err.message()
    );
}

#[tokio::test]
async fn garbage_on_the_socket_harms_no_one() {
    let sup = Supervisor::start();
    let ws = sup.dirs.workspace("ws", 0);
    let s = open(&sup, &ws).await;
    for socket in [&sup.agent_socket, &sup.operator_socket] {
        for garbage in [
            &b"\x00\x01\x02garbage\xff\xfe"[..],
            b"GET / HTTP/1.1\r\n\r\n",
            &[0xAAu8; 70000][..],
        ] {
            let mut s = std::os::unix::net::UnixStream::connect(socket).unwrap();
            let _ = s.write_all(garbage);
            drop(s);
        }
    }
    // Half-open connections that never speak.
    let idle: Vec<_> = (0..20)
        .map(|_| std::os::unix::net::UnixStream::connect(&sup.agent_socket).unwrap())
        .collect();
    assert!(list_tools(&sup, &s.token).await.is_ok());
    assert!(sup.ctl(&["status"]).status.success());
    drop(idle);
}

#[tokio::test]
async fn a_config_typo_stops_the_start_and_names_the_line() {
    let dirs = Dirs::new();
    let config = dirs.root.path().join("bad.toml");
    std::fs::write(
        &config,
        "[session]\ndefault_mode = \"default\"\nauto_aprove = true\n",
    )
    .unwrap();
    let out = Command::new(bin("supervisor"))
        .arg("--config")
        .arg(&config)
        .arg("--state-dir")
        .arg(&dirs.state)
        .arg("--audit-dir")
        .arg(&dirs.audit)
        .output()
        .unwrap();
    // EX_CONFIG (docs/OPERATIONS.md "Checking a config, and exit codes").
    assert_eq!(out.status.code(), Some(78));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("supervisor: "), "{err}");
    assert!(
        err.contains("line 3") && err.contains("auto_aprove"),
        "{err}"
    );
    assert!(!dirs.state.join("agent.sock").exists());
}

#[tokio::test]
async fn sigterm_removes_the_sockets() {
    let mut sup = Supervisor::start();
    let ws = sup.dirs.workspace("ws", 0);
    let s = open(&sup, &ws).await;
    let status = sup.stop().expect("exit status");
    assert!(status.success(), "{status:?}");
    assert!(!sup.agent_socket.exists());
    assert!(!sup.operator_socket.exists());
    let events = sup.session_records(&s.session_id);
    let revoked = events
        .iter()
        .find(|r| r["event"] == "session_revoked")
        .expect("revoked on shutdown");
    assert!(revoked["reason"].as_str().unwrap().contains("SIGTERM"));
}

#[tokio::test]
async fn a_stale_socket_is_replaced_but_a_live_one_is_not() {
    let dirs = Dirs::new();
    // A stale socket file from a crashed run.
    let stale = std::os::unix::net::UnixListener::bind(dirs.state.join("agent.sock")).unwrap();
    drop(stale);
    let sup = Supervisor::builder().dirs(dirs).start();
    assert!(sup.ctl(&["status"]).status.success());
    // A second supervisor on the same state dir refuses to start.
    let out = Command::new(bin("supervisor"))
        .arg("--config")
        .arg(&sup.config_path)
        .arg("--state-dir")
        .arg(&sup.dirs.state)
        .arg("--audit-dir")
        .arg(sup.dirs.root.path().join("audit2"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("another supervisor is listening"));
    assert!(sup.ctl(&["status"]).status.success());
}

#[tokio::test]
async fn health_and_reflection_on_both_sockets() {
    let sup = Supervisor::start();
    for socket in [&sup.agent_socket, &sup.operator_socket] {
        let ch = harness::channel(socket).await;
        let mut health = tonic_health::pb::health_client::HealthClient::new(ch.clone());
        let r = health
            .check(tonic_health::pb::HealthCheckRequest {
                service: String::new(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            r.status,
            tonic_health::pb::health_check_response::ServingStatus::Serving as i32
        );
        use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
        use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
        use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
        let mut refl = ServerReflectionClient::new(ch);
        let req = tonic_reflection::pb::v1::ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut stream = refl
            .server_reflection_info(tokio_stream::iter(vec![req]))
            .await
            .unwrap()
            .into_inner();
        let resp = stream.message().await.unwrap().unwrap();
        let Some(MessageResponse::ListServicesResponse(list)) = resp.message_response else {
            panic!("no service list");
        };
        let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
        assert!(
            names.iter().any(|n| n == "tollgate.v1.AgentService"),
            "{names:?}"
        );
        assert!(
            names.iter().any(|n| n == "tollgate.v1.OperatorService"),
            "{names:?}"
        );
    }
}

#[tokio::test]
async fn hundred_concurrent_sessions_leak_no_fds() {
    // One uid opens 100 sessions on 100 connections at once: above the
    // default caps of both.
    let sup = Supervisor::builder()
        .config(
            "[supervisor]\nmax_sessions_per_uid = 200\nmax_connections_per_uid = 200\n\
             [llm]\nprovider = \"script\"\n",
        )
        .start();
    let ws = sup.dirs.workspace("ws", 0);
    // Warm up lazily opened things (the first session, thread pools).
    for _ in 0..3 {
        let s = open(&sup, &ws).await;
        let mut c = sup.agent_client().await;
        c.close_session(authed(pb::CloseSessionRequest {}, &s.token))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = fd_count(sup.pid());
    let mut tasks = Vec::new();
    for _ in 0..100 {
        let socket = sup.agent_socket.clone();
        let ws = ws.clone();
        tasks.push(tokio::spawn(async move {
            let mut c = harness::agent_client(&socket).await;
            let s = c
                .open_session(pb::OpenSessionRequest {
                    workspace: ws.display().to_string(),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            c.list_tools(authed(pb::ListToolsRequest {}, &s.token))
                .await
                .unwrap();
            s.token
        }));
    }
    let mut tokens = Vec::new();
    for t in tasks {
        tokens.push(t.await.unwrap());
    }
    let during = fd_count(sup.pid());
    assert!(
        during > before,
        "sessions hold their audit files open ({before} -> {during})"
    );
    let mut closes = Vec::new();
    for token in tokens {
        let socket = sup.agent_socket.clone();
        closes.push(tokio::spawn(async move {
            let mut c = harness::agent_client(&socket).await;
            c.close_session(authed(pb::CloseSessionRequest {}, &token))
                .await
                .unwrap();
        }));
    }
    for c in closes {
        c.await.unwrap();
    }
    // Connections close asynchronously; give them a moment.
    let mut after = fd_count(sup.pid());
    for _ in 0..50 {
        if after <= before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        after = fd_count(sup.pid());
    }
    assert!(
        after <= before,
        "fd leak: {before} before, {after} after 100 sessions"
    );
    let active = ctl_json(&sup, &["sessions", "--json"]);
    assert_eq!(active.as_array().unwrap().len(), 0);
}

#[tokio::test]
async fn agent_call_prints_the_contract_json() {
    let sup = Supervisor::start();
    let ws = sup.dirs.workspace("ws", 0);
    std::fs::write(ws.join("README.md"), "hello\n").unwrap();
    let out = sup
        .agent_cmd()
        .args([
            "call",
            "read_file",
            r#"{"path":"README.md"}"#,
            "--workspace",
        ])
        .arg(&ws)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], true);
    assert!(v["output"].as_str().unwrap().contains("hello"));
    assert_eq!(v["truncated"], false);
    // A denial: exit 3 and the structured denial.
    let out = sup
        .agent_cmd()
        .args([
            "call",
            "read_file",
            r#"{"path":"/etc/shadow"}"#,
            "--workspace",
        ])
        .arg(&ws)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["denied"]["code"], "POLICY_DENIED");
    assert!(v["denied"]["rule"].as_str().unwrap().starts_with("floor:"));
}

/// `supervisorctl bench` compares ListTools with a bare tonic server's
/// (`supervisorctl __grpc-floor`); that baseline is only fair if it sends the
/// very reply the supervisor sends, and only meaningful if it does no more.
#[tokio::test]
async fn the_bench_floor_server_sends_the_supervisors_list_tools_reply() {
    let sup = Supervisor::start();
    let ws = sup.dirs.workspace("ws", 0);
    let s = open(&sup, &ws).await;
    let mut c = sup.agent_client().await;
    let ours = c
        .list_tools(authed(pb::ListToolsRequest {}, &s.token))
        .await
        .unwrap()
        .into_inner();

    /// Killed when dropped, so a failed step leaves no server behind.
    struct Floor(std::process::Child);
    impl Drop for Floor {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let socket = sup.dirs.root.path().join("floor.sock");
    let mut floor = Floor(
        Command::new(bin("supervisorctl"))
            .arg("__grpc-floor")
            .arg(&socket)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut ready = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(floor.0.stdout.take().unwrap()),
        &mut ready,
    )
    .unwrap();
    assert_eq!(ready.trim(), "grpc-floor: ready");
    let mut bare = harness::agent_client(&socket).await;
    let theirs = bare
        .list_tools(pb::ListToolsRequest {})
        .await
        .unwrap()
        .into_inner();
    let other = bare
        .open_session(pb::OpenSessionRequest::default())
        .await
        .unwrap_err();
    drop(floor);

    assert!(ours.tools.len() >= 7);
    assert_eq!(ours, theirs);
    assert_eq!(other.code(), Code::Unimplemented);
}

/// A workspace whose git layout cannot be guarded (a symlinked
/// `.git`: the sandbox could repoint it; a workspace that is itself a git
/// directory) is refused at OpenSession, naming why; one with its hooks in
/// `core.hooksPath` opens, and a write there needs a typed confirmation.
#[tokio::test]
async fn a_git_layout_that_cannot_be_guarded_is_refused_at_open() {
    let sup = Supervisor::builder()
        .config(
            "[session]\nsession_can_approve = false\napproval_timeout_s = 1\n[llm]\nprovider = \"script\"\n",
        )
        .start();
    let mut c = sup.agent_client().await;
    let linked = sup.dirs.workspace("linked", 0);
    let elsewhere = sup.dirs.workspace("elsewhere", 0);
    std::os::unix::fs::symlink(&elsewhere, linked.join(".git")).unwrap();
    let bare = sup.dirs.workspace("bare", 0);
    for d in ["objects", "refs"] {
        std::fs::create_dir(bare.join(d)).unwrap();
    }
    std::fs::write(bare.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    for (ws, why) in [
        (&linked, ".git is a symlink"),
        (&bare, "is itself a git directory"),
    ] {
        let err = c
            .open_session(pb::OpenSessionRequest {
                workspace: ws.display().to_string(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::FailedPrecondition, "{}", err.message());
        assert!(err.message().contains(why), "{}", err.message());
    }
    let hooked = sup.dirs.workspace("hooked", 0);
    std::fs::create_dir(hooked.join(".git")).unwrap();
    std::fs::write(
        hooked.join(".git/config"),
        "[core]\n\thooksPath = tools/hooks\n",
    )
    .unwrap();
    let s = c
        .open_session(pb::OpenSessionRequest {
            workspace: hooked.display().to_string(),
            mode: "acceptEdits".to_string(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let r = sup
        .call_tool(
            &s.token,
            "write_file",
            serde_json::json!({"path": "tools/hooks/pre-commit", "content": "#!/bin/sh\n"}),
        )
        .await;
    // Nobody approves here: the ask times out, and nothing is written.
    assert_eq!(
        r.denied.as_ref().map(|d| d.code()),
        Some(pb::DenialCode::ApprovalTimeout),
        "{r:?}"
    );
    assert!(!hooked.join("tools/hooks/pre-commit").exists());
    let decided = sup
        .session_records(&s.session_id)
        .into_iter()
        .find(|e| e["event"] == "permission_check")
        .unwrap();
    assert_eq!(decided["rule"], "confirm:host-exec", "{decided}");
    assert_eq!(decided["destructive"], true, "{decided}");
}

/// `supervisorctl bench` runs tollgate-bench (supervisorctl links no bench
/// code) with its arguments as given: every flag docs/INTERFACES.md names
/// reaches it.
#[test]
fn supervisorctl_bench_runs_tollgate_bench_with_every_documented_flag() {
    let out = Command::new(bin("supervisorctl"))
        .args(["bench", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(help.contains("Usage: supervisorctl bench"), "{help}");
    for flag in [
        "--json",
        "--samples",
        "--quick",
        "--container-samples",
        "--dir",
        "--image",
        "--no-docker",
        "--audit-sync",
        "--keep",
    ] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
    let bad = Command::new(bin("supervisorctl"))
        .args(["bench", "--audit-sync", "sometimes"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    assert!(String::from_utf8_lossy(&bad.stderr).contains("not a sync mode"));
}

/// Without tollgate-bench beside it or on PATH (as installed from the
/// .deb), `supervisorctl bench` fails naming the binary it needs.
#[test]
fn supervisorctl_bench_without_the_bench_binary_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let lone = dir.path().join("supervisorctl");
    std::fs::copy(bin("supervisorctl"), &lone).unwrap();
    let out = Command::new(&lone)
        .args(["bench", "--quick"])
        .env("PATH", dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        err.contains("bench needs tollgate-bench, which is neither beside supervisorctl"),
        "{err}"
    );
    assert!(err.contains("nor on PATH"), "{err}");
}
