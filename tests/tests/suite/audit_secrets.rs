//! Audit log and secrets hygiene end to end (docs/THREAT_MODEL.md): fail closed on a full
//! disk, refuse a badly permissioned audit dir, name a corrupted line, redact
//! secrets in tool results and LLM traffic, keep the sandbox environment to
//! the allowlist, and never print a token anywhere.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use tollgate_e2e::harness::{Dirs, Supervisor, authed, bin, root_or_skip};
use tollgate_proto::v1 as pb;

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

struct Tmpfs(std::path::PathBuf);

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_tool_calls_and_the_supervisor_keeps_running() {
    if !root_or_skip("a_full_disk_refuses_tool_calls_and_the_supervisor_keeps_running") {
        return;
    }
    let dirs = Dirs::new();
    std::fs::create_dir(&dirs.audit).unwrap();
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs"])
        .arg(&dirs.audit)
        .status()
        .unwrap();
    assert!(ok.success(), "mount tmpfs");
    let _mount = Tmpfs(dirs.audit.clone());
    let audit = dirs.audit.clone();
    let sup = Supervisor::builder().dirs(dirs).start();
    let ws = sup.dirs.workspace("ws", 0);
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    let s = open(&sup, &ws, "default").await;
    assert!(
        sup.call_tool(&s.token, "read_file", serde_json::json!({"path": "a.txt"}))
            .await
            .ok
    );
    // Fill the disk.
    let filler = audit.join("filler");
    let _ = Command::new("dd")
        .args(["if=/dev/zero", "bs=4k", "count=100000"])
        .arg(format!("of={}", filler.display()))
        .stderr(std::process::Stdio::null())
        .status();
    // The file's last page may still hold a few records; the disk is full
    // within a handful of calls.
    let mut r = pb::CallToolResponse::default();
    for _ in 0..50 {
        r = sup
            .call_tool(&s.token, "read_file", serde_json::json!({"path": "a.txt"}))
            .await;
        if r.denied.is_some() {
            break;
        }
    }
    let d = r.denied.expect("refused once the disk is full");
    assert_eq!(d.code(), pb::DenialCode::AuditUnavailable, "{d:?}");
    assert!(
        d.reason.contains("audit log cannot be written"),
        "{}",
        d.reason
    );
    assert!(r.output.is_empty(), "nothing ran");
    // The supervisor keeps running and says why new sessions cannot open.
    assert!(sup.ctl(&["status"]).status.success());
    let mut c = sup.agent_client().await;
    let err = c
        .open_session(pb::OpenSessionRequest {
            workspace: ws.display().to_string(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(
        err.message().contains("AUDIT_UNAVAILABLE"),
        "{}",
        err.message()
    );
    // Space again: work resumes, and what was written verifies.
    std::fs::remove_file(&filler).unwrap();
    let s2 = open(&sup, &ws, "default").await;
    assert!(
        sup.call_tool(&s2.token, "read_file", serde_json::json!({"path": "a.txt"}))
            .await
            .ok
    );
    let files = sup.audit_files(&format!("audit-{}-", s2.session_id));
    let out = sup.ctl(&["audit", "verify", files[0].to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[tokio::test]
async fn an_audit_dir_with_wrong_permissions_stops_the_start() {
    let dirs = Dirs::new();
    std::fs::create_dir(&dirs.audit).unwrap();
    std::fs::set_permissions(&dirs.audit, std::fs::Permissions::from_mode(0o777)).unwrap();
    let config = dirs.root.path().join("c.toml");
    std::fs::write(&config, "[llm]\nprovider = \"script\"\n").unwrap();
    let out = Command::new(bin("supervisor"))
        .arg("--config")
        .arg(&config)
        .arg("--state-dir")
        .arg(&dirs.state)
        .arg("--audit-dir")
        .arg(&dirs.audit)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("supervisor: audit directory"), "{err}");
    assert!(err.contains("chmod"), "the refusal carries a hint: {err}");
    assert!(!dirs.state.join("agent.sock").exists());
}

#[tokio::test]
async fn verify_names_a_tampered_line_and_the_next_run_starts_a_new_log() {
    let dirs = Dirs::new();
    let state = dirs.state.clone();
    let audit = dirs.audit.clone();
    let mut sup = Supervisor::builder().dirs(dirs).start();
    let ws = sup.dirs.workspace("ws", 0);
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    let s = open(&sup, &ws, "default").await;
    for _ in 0..3 {
        assert!(
            sup.call_tool(&s.token, "read_file", serde_json::json!({"path": "a.txt"}))
                .await
                .ok
        );
    }
    sup.stop();
    let file = sup
        .audit_files(&format!("audit-{}-", s.session_id))
        .remove(0);
    let ok = Command::new(bin("supervisorctl"))
        .args(["audit", "verify"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(ok.status.success());
    // Edit line 3.
    let text = std::fs::read_to_string(&file).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines[2] = lines[2].replacen("read_file", "READ_FILE", 1);
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let out = Command::new(bin("supervisorctl"))
        .args(["audit", "verify"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains(&format!("{}: line 3:", file.display())),
        "{said}"
    );
    // Truncating the tail (dropping whole records) is caught by the anchor.
    let cut: Vec<&str> = text.lines().collect();
    std::fs::write(&file, cut[..cut.len() - 2].join("\n") + "\n").unwrap();
    let out = Command::new(bin("supervisorctl"))
        .args(["audit", "verify"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // Corrupt this run's supervisor log; the next start does not append to it.
    let sup_log = sup.audit_files("supervisor-").remove(0);
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&sup_log)
        .unwrap();
    std::io::Write::write_all(&mut f, b"{\"garbage\":").unwrap();
    drop(f);
    let before = std::fs::read(&sup_log).unwrap();
    let dirs2 = Dirs {
        root: tempfile::tempdir().unwrap(),
        state,
        audit,
    };
    let sup2 = Supervisor::builder().dirs(dirs2).start();
    let logs = sup2.audit_files("supervisor-");
    assert_eq!(logs.len(), 2, "a new supervisor log: {logs:?}");
    assert_eq!(
        std::fs::read(&sup_log).unwrap(),
        before,
        "the broken log is left as it was"
    );
    let first = &tollgate_e2e::harness::read_records(&logs[1])[0];
    assert_eq!(first["event"], "audit_opened");
    assert!(
        first["previous_error"]
            .as_str()
            .unwrap_or("")
            .contains("broken"),
        "{first}"
    );
    drop(sup);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_redacted_and_the_sandbox_env_is_the_allowlist() {
    if !root_or_skip("secrets_are_redacted_and_the_sandbox_env_is_the_allowlist") {
        return;
    }
    let host_secret = "hsv-9f8e7d6c5b4a39281706";
    let sup = Supervisor::builder()
        .env("MY_SERVICE_TOKEN", host_secret)
        .env("GITHUB_TOKEN", "ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
        .start();
    let ws = sup.dirs.workspace("ws", 0);
    std::fs::write(
        ws.join("leak.txt"),
        format!("aws AKIAABCDEFGHIJKLMNOP\nhost {host_secret}\n"),
    )
    .unwrap();
    let s = open(&sup, &ws, "dangerouslySkipPermissions").await;
    let r = sup
        .call_tool(
            &s.token,
            "read_file",
            serde_json::json!({"path": "leak.txt"}),
        )
        .await;
    assert!(r.ok);
    assert!(
        !r.output.contains("AKIAABCDEFGHIJKLMNOP") && !r.output.contains(host_secret),
        "{}",
        r.output
    );
    assert!(r.output.contains("[REDACTED"), "{}", r.output);
    // The sandbox sees only the allowlist.
    let r = sup
        .call_tool(
            &s.token,
            "run_bash",
            serde_json::json!({"command": "env | cut -d= -f1 | sort"}),
        )
        .await;
    assert!(r.ok, "{r:?}");
    let names: Vec<&str> = r
        .output
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('['))
        .collect();
    let allowed = [
        "AGENT_SESSION_ID",
        "AGENT_SESSION_TOKEN",
        "HOME",
        "LANG",
        "LC_ALL",
        "PATH",
        "PWD",
        "SHLVL",
        "TERM",
        // Set by the sandbox to its own /tmp (docs/INTERFACES.md: the
        // environment the policy judges a command by).
        "TMPDIR",
        "USER",
        "_",
        // The per-owner package caches' variables (docs/OPERATIONS.md
        // "Package caches"): paths inside the sandbox, no secret.
        "npm_config_cache",
        "PIP_CACHE_DIR",
        "CARGO_HOME",
        "GOMODCACHE",
        "BUN_INSTALL_CACHE_DIR",
        "YARN_CACHE_FOLDER",
    ];
    for n in &names {
        assert!(
            allowed.contains(n),
            "unexpected variable in the sandbox: {n} (all: {names:?})"
        );
    }
    assert!(!names.contains(&"GITHUB_TOKEN") && !names.contains(&"MY_SERVICE_TOKEN"));
    // The sandbox-scoped token is refused by the control API.
    let r = sup
        .call_tool(
            &s.token,
            "run_bash",
            serde_json::json!({"command": "printf %s \"$AGENT_SESSION_TOKEN\" | base64 -w0"}),
        )
        .await;
    let decoded =
        String::from_utf8(base64_decode(r.output.trim()).expect("base64 of the sandbox token"))
            .unwrap();
    assert!(decoded.contains(".sbx."), "{decoded}");
    let mut c = sup.agent_client().await;
    let err = c
        .list_tools(authed(pb::ListToolsRequest {}, &decoded))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::PermissionDenied);
    assert!(
        err.message().contains("sandbox-scoped"),
        "{}",
        err.message()
    );
    // The audit log holds no secret either.
    let files = sup.audit_files("");
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(
            !text.contains("AKIAABCDEFGHIJKLMNOP") && !text.contains(host_secret),
            "{} leaks a secret",
            f.display()
        );
    }
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let table = |c: u8| -> Option<u8> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        })
    };
    let bytes: Vec<u8> = s.bytes().filter(|&b| b != b'=').collect();
    let mut out = Vec::new();
    for chunk in bytes.chunks(4) {
        let v: Vec<u8> = chunk.iter().map(|&c| table(c)).collect::<Option<_>>()?;
        let n = v.iter().fold(0u32, |acc, &x| (acc << 6) | u32::from(x)) << (6 * (4 - v.len()));
        let b = n.to_be_bytes();
        out.extend_from_slice(&b[1..v.len()]);
    }
    Some(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_token_is_ever_printed() {
    if !root_or_skip("no_token_is_ever_printed") {
        return;
    }
    let script_dir = tempfile::tempdir().unwrap();
    let script = script_dir.path().join("turns.json");
    std::fs::write(&script, r#"[{"content":"hello","tool_calls":[]}]"#).unwrap();
    let sup = Supervisor::builder()
        .config(&format!(
            "[session]\nsession_can_approve = false\napproval_timeout_s = 1\n[llm]\nprovider = \"script\"\nscript = \"{}\"\n",
            script.display()
        ))
        .env("RUST_LOG", "trace")
        .start();
    let ws = sup.dirs.workspace("ws", 0);
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    let s = open(&sup, &ws, "default").await;
    let mut tokens = vec![s.token.clone()];
    let mut c = sup.agent_client().await;
    let r = c
        .refresh_token(authed(pb::RefreshTokenRequest {}, &s.token))
        .await
        .unwrap()
        .into_inner();
    tokens.push(r.token.clone());
    let token = r.token;
    assert!(
        sup.call_tool(&token, "read_file", serde_json::json!({"path": "a.txt"}))
            .await
            .ok
    );
    let _ = sup
        .call_tool(
            &token,
            "run_bash",
            serde_json::json!({"command": "echo hi"}),
        )
        .await;
    let _ = c
        .chat(authed(
            pb::ChatRequest {
                messages: vec![pb::ChatMessage {
                    role: "user".to_string(),
                    content: Some(format!("my token is {token}")),
                    ..Default::default()
                }],
                tools: Vec::new(),
            },
            &token,
        ))
        .await
        .unwrap();
    let _ = c
        .list_tools(authed(
            pb::ListToolsRequest {},
            &format!("{}.{}", s.session_id, "Z".repeat(43)),
        ))
        .await;
    let mut printed = String::new();
    for args in [
        vec!["sessions", "--all", "--json"],
        vec!["show", s.session_id.as_str(), "--json"],
        vec!["approvals", "--all", "--json"],
        vec!["status"],
    ] {
        let out = sup.ctl(&args);
        printed.push_str(&String::from_utf8_lossy(&out.stdout));
        printed.push_str(&String::from_utf8_lossy(&out.stderr));
    }
    // An agent run prints too.
    let out = sup
        .agent_cmd()
        .args(["call", "read_file", r#"{"path":"a.txt"}"#, "--workspace"])
        .arg(&ws)
        .env("RUST_LOG", "trace")
        .output()
        .unwrap();
    printed.push_str(&String::from_utf8_lossy(&out.stdout));
    printed.push_str(&String::from_utf8_lossy(&out.stderr));
    assert!(sup.ctl(&["revoke", &s.session_id]).status.success());
    printed.push_str(&sup.stderr());
    for f in sup.audit_files("") {
        printed.push_str(&std::fs::read_to_string(f).unwrap());
    }
    assert!(printed.len() > 1000, "the run printed and logged something");
    for t in &tokens {
        let secret = t.split_once('.').unwrap().1;
        if let Some(at) = printed.find(secret) {
            let start = printed[..at]
                .char_indices()
                .rev()
                .nth(300)
                .map(|(i, _)| i)
                .unwrap_or(0);
            let end = (at + 100).min(printed.len());
            panic!(
                "a token's secret was printed or logged, here:\n{}",
                &printed[start..end]
            );
        }
    }
}

#[tokio::test]
async fn verify_names_a_deleted_session_file() {
    let sup = Supervisor::start();
    let ws = sup.dirs.workspace("ws", 0);
    std::fs::write(ws.join("a.txt"), "a\n").unwrap();
    let s = open(&sup, &ws, "default").await;
    assert!(
        sup.call_tool(&s.token, "read_file", serde_json::json!({"path": "a.txt"}))
            .await
            .ok
    );
    let mut c = sup.agent_client().await;
    c.close_session(authed(pb::CloseSessionRequest {}, &s.token))
        .await
        .unwrap();
    let verify = |files: &[std::path::PathBuf]| {
        let mut cmd = Command::new(bin("supervisorctl"));
        cmd.args(["audit", "verify"]).args(files);
        cmd.output().unwrap()
    };
    let all = sup.audit_files("");
    let out = verify(&all);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // Delete the session's whole file: every chain left still verifies, but
    // the supervisor log names the file, so verify fails and says which.
    let file = sup
        .audit_files(&format!("audit-{}-", s.session_id))
        .remove(0);
    std::fs::remove_file(&file).unwrap();
    // The directory stands for every audit file in it.
    let out = verify(std::slice::from_ref(&sup.dirs.audit));
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stdout);
    let log = sup.audit_files("supervisor-").remove(0);
    let name = file.file_name().unwrap().to_str().unwrap();
    assert!(
        said.contains(&format!("{}: line ", log.display()))
            && said.contains(&format!(
                "names {name} (the audit file of session {}",
                s.session_id
            ))
            && said.contains("which is missing"),
        "{said}"
    );

    // A directory with no audit files in it is not a pass.
    let empty = sup.dirs.root.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let out = verify(std::slice::from_ref(&empty));
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("holds no audit files"), "{err}");
}
