//! Operating the supervisor like the daemons operators already trust
//! (docs/OPERATIONS.md "Logs", "Checking a config", "Exit codes"): the real
//! `supervisor` binary, its stderr as a pipe, its exit codes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::process::CommandExt as _;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use tollgate_e2e::harness::{Dirs, Supervisor, TEST_CONFIG, authed, bin};
use tollgate_proto::v1 as pb;

/// sysexits.h EX_CONFIG.
const EX_CONFIG: i32 = 78;

/// Everything a stopped supervisor printed (its reader thread may still be
/// taking the last lines off the pipe).
fn stderr_after_stop(mut sup: Supervisor) -> String {
    let status = sup.stop().expect("supervisor was running");
    assert!(status.success(), "supervisor exited {status}");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let log = sup.stderr();
        if log.contains("shutting down") || std::time::Instant::now() > deadline {
            return log;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// No RUST_LOG and no `[log] level`: lifecycle events at info, as plain
/// text without a single ANSI escape (stderr is a pipe, not a terminal),
/// even with a terminal-ish TERM and a JOURNAL_STREAM that names some
/// other file.
#[tokio::test]
async fn logs_on_a_pipe_are_plain_text_with_lifecycle_at_info() {
    let sup = Supervisor::builder()
        .env("RUST_LOG", "")
        .env("TERM", "xterm-256color")
        .env("CLICOLOR_FORCE", "1")
        .env("JOURNAL_STREAM", "1:1")
        .start();
    let ws = sup.dirs.workspace("ws", 0);
    let mut c = sup.agent_client().await;
    let s = c
        .open_session(pb::OpenSessionRequest {
            workspace: ws.display().to_string(),
            client: "e2e".to_string(),
            ..Default::default()
        })
        .await
        .expect("open session")
        .into_inner();
    c.close_session(authed(pb::CloseSessionRequest {}, &s.token))
        .await
        .expect("close session");
    let log = stderr_after_stop(sup);
    assert!(!log.contains('\u{1b}'), "ANSI escape on a pipe:\n{log:?}");
    for event in ["ready", "session opened", "session ended", "shutting down"] {
        assert!(
            log.lines().any(|l| l.contains(" INFO ")
                && l.contains("tollgate::lifecycle")
                && l.contains(event)),
            "no info line for {event:?}:\n{log}"
        );
    }
    // The rest stays at warn: nothing else at info or below.
    let others: Vec<&str> = log
        .lines()
        .filter(|l| {
            (l.contains(" INFO ") || l.contains(" DEBUG ")) && !l.contains("tollgate::lifecycle")
        })
        .collect();
    assert!(others.is_empty(), "{others:#?}");
}

/// `[log] level = "info"` turns everything up to info (the host-address
/// reading at start is an info line outside the lifecycle target);
/// NO_COLOR keeps it plain.
#[test]
fn the_log_level_comes_from_the_config() {
    let sup = Supervisor::builder()
        .config(&format!("{TEST_CONFIG}\n[log]\nlevel = \"info\"\n"))
        .env("RUST_LOG", "")
        .env("NO_COLOR", "1")
        .start();
    let log = stderr_after_stop(sup);
    assert!(
        log.lines()
            .any(|l| l.contains(" INFO ") && l.contains("tollgate_supervisor::")),
        "no info line outside the lifecycle:\n{log}"
    );
    assert!(!log.contains('\u{1b}'), "{log:?}");
}

fn check_config(dirs: &Dirs, toml: &str) -> Output {
    let path = dirs.root.path().join("check.toml");
    std::fs::write(&path, toml).unwrap();
    Command::new(bin("supervisor"))
        .arg("--check-config")
        .arg("--config")
        .arg(&path)
        .arg("--state-dir")
        .arg(&dirs.state)
        .arg("--audit-dir")
        .arg(&dirs.audit)
        .env_remove("TOLLGATE_CONFIG")
        .output()
        .expect("run supervisor --check-config")
}

/// `--check-config`: 0 for a config a start accepts, 78 with the file and
/// line for a typo, 78 naming the rule for a rule that fails its own
/// example, the missing operator group, a missing LLM script; and it starts
/// nothing (no socket appears).
#[test]
fn check_config_exits_0_or_78_with_each_reason() {
    let dirs = Dirs::new();
    let ok = check_config(&dirs, TEST_CONFIG);
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(String::from_utf8_lossy(&ok.stdout).contains("config OK"));
    assert!(!dirs.state.join("agent.sock").exists());

    let typo = check_config(
        &dirs,
        "[session]\napproval_timeout_s = 30\nauto_aprove = true\n",
    );
    let err = String::from_utf8_lossy(&typo.stderr);
    assert_eq!(typo.status.code(), Some(EX_CONFIG), "{err}");
    assert!(
        err.contains("check.toml") && err.contains("line 3") && err.contains("auto_aprove"),
        "{err}"
    );

    let example = check_config(
        &dirs,
        "[policy]\nallow = [{ rule = \"run_bash(git status*)\", match = [\"git push\"] }]\n",
    );
    let err = String::from_utf8_lossy(&example.stderr);
    assert_eq!(example.status.code(), Some(EX_CONFIG), "{err}");
    assert!(err.contains("policy") && err.contains("git push"), "{err}");

    let several = check_config(
        &dirs,
        "[supervisor]\noperator_group = \"tollgate-no-such-group\"\n[llm]\nprovider = \"script\"\nscript = \"/nonexistent/script.json\"\n",
    );
    let err = String::from_utf8_lossy(&several.stderr);
    assert_eq!(several.status.code(), Some(EX_CONFIG), "{err}");
    assert!(err.contains("tollgate-no-such-group"), "{err}");
    assert!(err.contains("/nonexistent/script.json"), "{err}");
}

/// A config error stops a real start with 78 (so the unit's
/// RestartPreventExitStatus=78 applies), before any socket is bound.
#[test]
fn a_config_error_at_start_exits_78() {
    let dirs = Dirs::new();
    for toml in [
        "[sesion]\n",
        "[policy]\nallow = [{ rule = \"run_bash(git status*)\", match = [\"git push\"] }]\n",
        "[supervisor]\noperator_group = \"tollgate-no-such-group\"\n",
    ] {
        let path = dirs.root.path().join("bad.toml");
        std::fs::write(&path, toml).unwrap();
        let mut cmd = Command::new(bin("supervisor"));
        tollgate_launch::configure(&mut cmd, &path, &dirs.state, &dirs.audit);
        let out = cmd.stderr(Stdio::piped()).output().expect("run supervisor");
        assert_eq!(
            out.status.code(),
            Some(EX_CONFIG),
            "{toml}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!dirs.state.join("agent.sock").exists(), "{toml}");
    }
}

/// A supervisor whose name service has users and groups only in
/// libnss-extrausers: a private mount namespace (`unshare --mount`) with a
/// test-only /etc/nsswitch.conf and /var/lib/extrausers bind-mounted, then
/// exec of the supervisor (same pid). Clients run outside it, as the uids.
const NSS_OWNER: u32 = 61_244;
const NSS_OTHER: u32 = 61_245;
const NSS_OPS: u32 = 61_310;

fn nss_fixture(dirs: &Dirs) -> (std::path::PathBuf, std::path::PathBuf) {
    let fx = dirs.root.path().join("nss");
    let eu = fx.join("extrausers");
    std::fs::create_dir_all(&eu).unwrap();
    let home = dirs.workspace("tgx-home", NSS_OWNER);
    std::fs::write(
        eu.join("passwd"),
        format!(
            "tgx-owner2:x:{NSS_OWNER}:{NSS_OWNER}::{}:/bin/sh\ntgx-other2:x:{NSS_OTHER}:{NSS_OTHER}::/nonexistent:/bin/sh\n",
            home.display()
        ),
    )
    .unwrap();
    std::fs::write(
        eu.join("group"),
        format!("tgx-owner2:x:{NSS_OWNER}:\ntgx-other2:x:{NSS_OTHER}:\ntgx-ops2:x:{NSS_OPS}:tgx-owner2\n"),
    )
    .unwrap();
    std::fs::write(eu.join("shadow"), "").unwrap();
    std::fs::write(
        fx.join("nsswitch.conf"),
        "passwd: files extrausers\ngroup: files extrausers\nshadow: files\nhosts: files dns\n",
    )
    .unwrap();
    (fx, home)
}

/// Session owners, their homes and operator group membership come from the
/// name service: a user only extrausers knows has its home recognised (the
/// home itself is refused as a workspace, a project inside it is its
/// session), and `[supervisor] operator_group` names a group only
/// extrausers knows, whose member (by getgrouplist, not by its process's
/// groups) is an operator while a non-member holding the socket's group is
/// not.
#[test]
fn identity_comes_from_the_name_service() {
    if !tollgate_e2e::harness::root_or_skip("identity_comes_from_the_name_service") {
        return;
    }
    assert!(
        std::path::Path::new("/usr/lib/libnss_extrausers.so.2").exists(),
        "needs libnss-extrausers"
    );
    let dirs = Dirs::new();
    let (fx, home) = nss_fixture(&dirs);
    let script = "mount --bind \"$1/nsswitch.conf\" /etc/nsswitch.conf && \
                  mount --bind \"$1/extrausers\" /var/lib/extrausers && shift && exec \"$@\"";
    let fx_s = fx.display().to_string();
    let sup = Supervisor::builder()
        .config(&format!(
            "{TEST_CONFIG}\n[supervisor]\noperator_group = \"tgx-ops2\"\n"
        ))
        .wrapper(&[
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
            &fx_s,
        ])
        .dirs(dirs)
        .start();
    let client = sup.dirs.staged_bin("e2e-client");
    let open = |ws: &std::path::Path| {
        let out = Command::new(&client)
            .args([
                sup.agent_socket.to_str().unwrap(),
                "",
                "open",
                ws.to_str().unwrap(),
            ])
            .uid(NSS_OWNER)
            .gid(NSS_OWNER)
            .output()
            .expect("run e2e-client");
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let at_home = open(&home);
    assert!(at_home.starts_with("ERR "), "{at_home}");
    assert!(
        at_home.contains("home directory of tgx-owner2"),
        "{at_home}"
    );
    let project = home.join("project");
    std::fs::create_dir(&project).unwrap();
    nix::unistd::chown(&project, Some(NSS_OWNER.into()), Some(NSS_OWNER.into())).unwrap();
    let opened = open(&project);
    assert!(opened.starts_with("OK "), "{opened}");

    let ctl = sup.dirs.staged_bin("supervisorctl");
    let status_as = |uid: u32| {
        Command::new("setpriv")
            .arg(format!("--reuid={uid}"))
            .arg(format!("--regid={uid}"))
            .arg(format!("--groups={NSS_OPS}"))
            .arg(&ctl)
            .arg("--socket")
            .arg(&sup.operator_socket)
            .arg("status")
            .env_remove("TOLLGATE_OPERATOR_SOCKET")
            .output()
            .expect("run supervisorctl")
    };
    let member = status_as(NSS_OWNER);
    assert!(
        member.status.success(),
        "{}",
        String::from_utf8_lossy(&member.stderr)
    );
    let other = status_as(NSS_OTHER);
    let err = String::from_utf8_lossy(&other.stderr);
    assert!(!other.status.success(), "{err}");
    assert!(err.contains("not an operator"), "{err}");
}

async fn open_session(sup: &Supervisor, ws: &std::path::Path) -> pb::OpenSessionResponse {
    open_session_in(sup, ws, "dangerouslySkipPermissions").await
}

async fn open_session_in(
    sup: &Supervisor,
    ws: &std::path::Path,
    mode: &str,
) -> pb::OpenSessionResponse {
    let mut c = sup.agent_client().await;
    c.open_session(pb::OpenSessionRequest {
        workspace: ws.display().to_string(),
        client: "e2e".to_string(),
        mode: mode.to_string(),
        ..Default::default()
    })
    .await
    .expect("open session")
    .into_inner()
}

/// Waits for a line of the supervisor's stderr containing `what`, after
/// `seen` earlier ones.
fn wait_log(sup: &Supervisor, what: &str, seen: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while sup.stderr().matches(what).count() <= seen {
        assert!(
            std::time::Instant::now() < deadline,
            "no {what:?}:\n{}",
            sup.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn denied_rule(r: &pb::CallToolResponse) -> Option<String> {
    r.denied.as_ref().map(|d| d.rule.clone())
}

/// Waits for the first pending approval in `supervisorctl approvals --json`.
fn wait_pending(sup: &Supervisor) -> serde_json::Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
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
        assert!(std::time::Instant::now() < deadline, "no approval appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGHUP with a new policy: ten live sessions (one mid-command, one
/// waiting on an approval) all keep running, the approval is still
/// decidable and its call completes, the next decision uses the new rules;
/// then a broken config is refused with its reason and the new-old policy
/// stays in force.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_policy_without_revoking_sessions() {
    let mut sup = Supervisor::builder().env("RUST_LOG", "").start();
    let ws = sup.dirs.workspace("ws", 0);
    let mut sessions = Vec::new();
    for _ in 0..9 {
        sessions.push(open_session(&sup, &ws).await);
    }
    sessions.push(open_session_in(&sup, &ws, "default").await);
    let agent_socket = sup.agent_socket.clone();
    let token = sessions[9].token.clone();
    let asking = tokio::spawn(async move {
        let mut c = tollgate_e2e::harness::agent_client(&agent_socket).await;
        c.call_tool(authed(
            pb::CallToolRequest {
                call_id: "ask".to_string(),
                tool: "write_file".to_string(),
                arguments_json: serde_json::json!({"path": "asked.txt", "content": "x\n"})
                    .to_string(),
            },
            &token,
        ))
        .await
        .expect("CallTool")
        .into_inner()
    });
    let approval = wait_pending(&sup);
    let forbidden = serde_json::json!({"command": "echo forbidden-by-reload"});
    let before = sup
        .call_tool(&sessions[1].token, "run_bash", forbidden.clone())
        .await;
    assert!(before.ok, "{before:?}");

    // One session mid-command across the reload.
    let agent_socket = sup.agent_socket.clone();
    let token = sessions[0].token.clone();
    let long = tokio::spawn(async move {
        let mut c = tollgate_e2e::harness::agent_client(&agent_socket).await;
        c.call_tool(authed(
            pb::CallToolRequest {
                call_id: "long".to_string(),
                tool: "run_bash".to_string(),
                arguments_json: serde_json::json!({"command": "sleep 2; echo finished"})
                    .to_string(),
            },
            &token,
        ))
        .await
        .expect("CallTool")
        .into_inner()
    });
    tokio::time::sleep(Duration::from_millis(500)).await;

    std::fs::write(
        &sup.config_path,
        format!("{TEST_CONFIG}\n[policy]\ndeny = [\"run_bash(echo forbidden-by-reload*)\"]\n"),
    )
    .unwrap();
    sup.signal(nix::sys::signal::Signal::SIGHUP);
    wait_log(&sup, "config reloaded", 0);

    let long = long.await.unwrap();
    assert!(long.ok && long.output.contains("finished"), "{long:?}");
    let approved = sup.ctl(&["approve", approval["id"].as_str().unwrap()]);
    assert!(
        approved.status.success(),
        "{}",
        String::from_utf8_lossy(&approved.stderr)
    );
    let asked = asking.await.unwrap();
    assert!(asked.ok, "{asked:?}");
    assert!(ws.join("asked.txt").exists());
    let read = sup
        .call_tool(
            &sessions[9].token,
            "read_file",
            serde_json::json!({"path": "asked.txt"}),
        )
        .await;
    assert!(read.ok, "{read:?}");
    for s in &sessions[..9] {
        let r = sup
            .call_tool(&s.token, "run_bash", serde_json::json!({"command": "true"}))
            .await;
        assert!(r.ok, "session {} after the reload: {r:?}", s.session_id);
    }
    let after = sup
        .call_tool(&sessions[2].token, "run_bash", forbidden.clone())
        .await;
    assert!(!after.ok, "{after:?}");
    assert!(
        denied_rule(&after).is_some_and(|r| r.contains("forbidden-by-reload")),
        "{after:?}"
    );

    // A broken config, by `supervisorctl reload`: refused with its reason,
    // said in the log, in `status` and in the audit log; the policy stays.
    std::fs::write(&sup.config_path, "[policy]\ndeny = [\"run_bash(\"\n").unwrap();
    let refused = sup.ctl(&["reload"]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{err}");
    assert!(
        err.contains("reload refused") && err.contains("supervisor.toml"),
        "{err}"
    );
    wait_log(&sup, "config reload refused", 0);
    let still = sup
        .call_tool(&sessions[3].token, "run_bash", forbidden)
        .await;
    assert!(denied_rule(&still).is_some(), "{still:?}");
    let status = ctl_json(&sup, &["status", "--json"]);
    let last = &status["last_reload"];
    assert_eq!(last["accepted"], false, "{status}");
    assert!(
        last["by"]
            .as_str()
            .unwrap()
            .starts_with("supervisorctl reload (uid ")
    );
    assert!(last["reason"].as_str().unwrap().contains("supervisor.toml"));
    let table = String::from_utf8_lossy(&sup.ctl(&["status"]).stdout).to_string();
    assert!(
        table.contains("last reload:") && table.contains("REFUSED"),
        "{table}"
    );
    // Every session is still active.
    let list = ctl_json(&sup, &["sessions", "--json"]);
    assert_eq!(list.as_array().map(Vec::len), Some(10), "{list}");
    assert!(
        list.as_array()
            .unwrap()
            .iter()
            .all(|s| s["state"] == "active")
    );
    // The `config` records: the start's, then one per reload attempt with
    // the old and new digests chained.
    let records: Vec<serde_json::Value> = sup
        .audit_files("supervisor-")
        .iter()
        .flat_map(|p| tollgate_e2e::harness::read_records(p))
        .filter(|r| r["event"] == "config")
        .collect();
    assert_eq!(records.len(), 3, "{records:?}");
    let start_digest = records[0]["policy_digest"].as_str().unwrap();
    let (accepted, refused) = (&records[1]["reload"], &records[2]["reload"]);
    assert_eq!(accepted["outcome"], "accepted", "{accepted}");
    assert_eq!(accepted["by"], "SIGHUP");
    assert_eq!(accepted["old_digest"], start_digest);
    assert_ne!(accepted["new_digest"], start_digest);
    assert_eq!(records[1]["policy_digest"], accepted["new_digest"]);
    assert_eq!(records[1]["rules"]["deny"], 1);
    assert_eq!(refused["outcome"], "refused", "{refused}");
    assert_eq!(refused["old_digest"], accepted["new_digest"]);
    assert_eq!(refused["new_digest"], serde_json::Value::Null);
    assert!(
        refused["reason"].as_str().unwrap().contains("line"),
        "{refused}"
    );
    assert_eq!(records[2]["policy_digest"], accepted["new_digest"]);
    let verify = sup.ctl(&["audit", "verify", sup.dirs.audit.to_str().unwrap()]);
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
    let status = sup.stop().unwrap();
    assert!(status.success(), "{status}");
}

/// `supervisorctl ARGS` that must succeed, its stdout parsed as JSON.
fn ctl_json(sup: &Supervisor, args: &[&str]) -> serde_json::Value {
    let out = sup.ctl(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// What a restart would change is named: a reload that moves the state
/// and audit directories (set in the config, not on the command line)
/// puts its policy in force and says that the sockets and directories stay
/// where they are until a restart.
#[test]
fn a_reload_names_what_only_a_restart_changes() {
    let dirs = Dirs::new();
    let config = dirs.root.path().join("supervisor.toml");
    let settings = |state: &std::path::Path, audit: &std::path::Path| {
        format!(
            "{TEST_CONFIG}\n[supervisor]\nstate_dir = {:?}\n[audit]\ndir = {:?}\n",
            state.display().to_string(),
            audit.display().to_string()
        )
    };
    std::fs::write(&config, settings(&dirs.state, &dirs.audit)).unwrap();
    let mut child = Command::new(bin("supervisor"))
        .arg("--config")
        .arg(&config)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    let (log, ready) = tollgate_launch::wait_ready(&mut child, Duration::from_secs(30));
    assert!(ready.is_some(), "{}", tollgate_launch::text(&log));
    let socket = dirs.state.join("operator.sock");
    let ctl = |args: &[&str]| {
        Command::new(bin("supervisorctl"))
            .arg("--socket")
            .arg(&socket)
            .args(args)
            .output()
            .unwrap()
    };
    let elsewhere = dirs.root.path().join("elsewhere");
    std::fs::write(
        &config,
        settings(&elsewhere.join("state"), &elsewhere.join("audit")),
    )
    .unwrap();
    let out = ctl(&["reload", "--json"]);
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["accepted"], true, "{r}");
    let named: Vec<&str> = r["needs_restart"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert_eq!(
        named,
        [
            "[supervisor] state_dir (agent.sock and operator.sock live there)",
            "[audit] dir"
        ],
        "{r}"
    );
    let text = String::from_utf8_lossy(&ctl(&["reload"]).stdout).to_string();
    assert!(
        text.contains("needs a restart to apply: [audit] dir"),
        "{text}"
    );
    // Nothing moved: the sockets answer where they were.
    let status: serde_json::Value =
        serde_json::from_slice(&ctl(&["status", "--json"]).stdout).unwrap();
    assert_eq!(status["state_dir"], dirs.state.display().to_string());
    assert!(!elsewhere.exists());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(child.wait().unwrap().success());
}

/// The service manager's view (`Type=notify`): READY=1 once serving,
/// WATCHDOG=1 while `WATCHDOG_USEC` is set, RELOADING=1 (with
/// MONOTONIC_USEC) then READY=1 around a SIGHUP reload, STOPPING=1 on
/// SIGTERM: read from a real NOTIFY_SOCKET.
#[test]
fn the_service_manager_hears_ready_watchdog_reloading_and_stopping() {
    let notify_dir = tempfile::tempdir().unwrap();
    let path = notify_dir.path().join("notify");
    let notify = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut sup = Supervisor::builder()
        .env("NOTIFY_SOCKET", path.to_str().unwrap())
        .env("WATCHDOG_USEC", "200000")
        .start();
    let mut messages = Vec::new();
    let next_until = |want: &str, messages: &mut Vec<String>| {
        let mut buf = [0u8; 4096];
        loop {
            let n = notify
                .recv(&mut buf)
                .unwrap_or_else(|e| panic!("no {want:?} after {messages:?}: {e}"));
            let m = String::from_utf8_lossy(&buf[..n]).to_string();
            messages.push(m.clone());
            if m.lines().any(|l| l == want) {
                return m;
            }
        }
    };
    next_until("READY=1", &mut messages);
    next_until("WATCHDOG=1", &mut messages);
    next_until("WATCHDOG=1", &mut messages);
    sup.signal(nix::sys::signal::Signal::SIGHUP);
    let reloading = next_until("RELOADING=1", &mut messages);
    assert!(reloading.contains("MONOTONIC_USEC="), "{reloading}");
    let ready = next_until("READY=1", &mut messages);
    assert!(ready.contains("config reloaded"), "{ready}");
    // Stopping: stop() waits, so read what was sent meanwhile.
    let status = sup.stop().unwrap();
    assert!(status.success(), "{status}");
    next_until("STOPPING=1", &mut messages);
}

/// `policy.d/*.toml` beside the config: merged into the policy a start (and
/// `--check-config`) uses; a rule failing its example is named with its
/// drop-in; a reload picks up a new drop-in.
#[tokio::test]
async fn policy_drop_ins_are_merged_checked_and_reloaded() {
    let dirs = Dirs::new();
    let d = dirs.root.path().join("policy.d");
    std::fs::create_dir(&d).unwrap();
    std::fs::write(
        d.join("50-bad.toml"),
        "[policy]\nallow = [{ rule = \"run_bash(git status*)\", match = [\"git push\"] }]\n",
    )
    .unwrap();
    let bad = check_config(&dirs, TEST_CONFIG);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(EX_CONFIG), "{err}");
    assert!(err.contains("50-bad.toml"), "{err}");
    std::fs::remove_file(d.join("50-bad.toml")).unwrap();
    std::fs::write(
        d.join("10-team.toml"),
        "[policy]\ndeny = [\"run_bash(echo team-denied*)\"]\n",
    )
    .unwrap();
    let mut sup = Supervisor::builder().env("RUST_LOG", "").dirs(dirs).start();
    let ws = sup.dirs.workspace("ws", 0);
    let s = open_session(&sup, &ws).await;
    let r = sup
        .call_tool(
            &s.token,
            "run_bash",
            serde_json::json!({"command": "echo team-denied x"}),
        )
        .await;
    assert!(
        denied_rule(&r).is_some_and(|x| x.contains("team-denied")),
        "{r:?}"
    );
    std::fs::write(
        d.join("20-more.toml"),
        "[policy]\ndeny = [\"run_bash(echo later-denied*)\"]\n",
    )
    .unwrap();
    sup.signal(nix::sys::signal::Signal::SIGHUP);
    wait_log(&sup, "config reloaded", 0);
    let r = sup
        .call_tool(
            &s.token,
            "run_bash",
            serde_json::json!({"command": "echo later-denied x"}),
        )
        .await;
    assert!(
        denied_rule(&r).is_some_and(|x| x.contains("later-denied")),
        "{r:?}"
    );
    let r = sup
        .call_tool(
            &s.token,
            "run_bash",
            serde_json::json!({"command": "echo team-denied y"}),
        )
        .await;
    assert!(denied_rule(&r).is_some(), "{r:?}");
    // Each decision record names the drop-in its rule came from; a rule of
    // no drop-in names none.
    let files: Vec<Option<String>> = sup
        .session_records(&s.session_id)
        .iter()
        .filter(|r| r["event"] == "permission_check" && r["decision"] == "deny")
        .map(|r| r["rule_file"].as_str().map(str::to_string))
        .collect();
    let d = sup.dirs.root.path().join("policy.d");
    let name = |f: &str| Some(d.join(f).display().to_string());
    assert_eq!(
        files,
        [
            name("10-team.toml"),
            name("20-more.toml"),
            name("10-team.toml")
        ]
    );
    assert!(sup.stop().unwrap().success());
}

/// `[llm] api_key_credential` reads `$CREDENTIALS_DIRECTORY/NAME` (systemd
/// `LoadCredential=`); `api_key_file` must be the supervisor's own and
/// private: a group-readable one stops the start with 78 and is named by
/// `--check-config`.
#[test]
fn the_llm_key_comes_from_a_private_file_or_a_credential() {
    let creds = tempfile::tempdir().unwrap();
    let key = creds.path().join("tollgate-llm");
    std::fs::write(&key, "sk-credential-e2e\n").unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let sup = Supervisor::builder()
        .config(&format!(
            "{TEST_CONFIG}api_key_credential = \"tollgate-llm\"\n"
        ))
        .env("CREDENTIALS_DIRECTORY", creds.path().to_str().unwrap())
        .start();
    drop(sup);

    let dirs = Dirs::new();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o640)).unwrap();
    let toml = format!("{TEST_CONFIG}api_key_file = \"{}\"\n", key.display());
    let checked = check_config(&dirs, &toml);
    let err = String::from_utf8_lossy(&checked.stderr);
    assert_eq!(checked.status.code(), Some(EX_CONFIG), "{err}");
    assert!(err.contains("readable by no one else"), "{err}");
    let path = dirs.root.path().join("bad.toml");
    std::fs::write(&path, &toml).unwrap();
    let mut cmd = Command::new(bin("supervisor"));
    tollgate_launch::configure(&mut cmd, &path, &dirs.state, &dirs.audit);
    let out = cmd.output().expect("run supervisor");
    assert_eq!(
        out.status.code(),
        Some(EX_CONFIG),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains(key.to_str().unwrap()));
}

/// `supervisorctl ARGS --json`: its exit code, stdout as JSON (Null when
/// empty) and stderr as JSON (Null when empty).
fn ctl_json_any(
    sup: &Supervisor,
    args: &[&str],
) -> (Option<i32>, serde_json::Value, serde_json::Value) {
    let out = sup.ctl(args);
    let parse = |b: &[u8], what: &str| {
        if b.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_slice(b)
                .unwrap_or_else(|e| panic!("{args:?} {what}: {e}: {}", String::from_utf8_lossy(b)))
        }
    };
    (
        out.status.code(),
        parse(&out.stdout, "stdout"),
        parse(&out.stderr, "stderr"),
    )
}

/// Every command answers `--json` with one JSON document (JSON Lines for
/// the streams), and a failure under `--json` is one error object on
/// stderr, stdout empty: a usage error (exit 2), an unknown id (exit 1,
/// `not_found`), an unreachable socket (`connect`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_answers_json_and_fails_as_json() {
    let sup = Supervisor::start();
    let ws = sup.dirs.workspace("ws", 0);
    let s = open_session_in(&sup, &ws, "default").await;
    // Two approvals: one approved, one denied.
    let mut waiting = Vec::new();
    for (i, path) in ["a.txt", "b.txt"].iter().enumerate() {
        let agent_socket = sup.agent_socket.clone();
        let token = s.token.clone();
        let path = path.to_string();
        waiting.push(tokio::spawn(async move {
            let mut c = tollgate_e2e::harness::agent_client(&agent_socket).await;
            c.call_tool(authed(
                pb::CallToolRequest {
                    call_id: format!("w{i}"),
                    tool: "write_file".to_string(),
                    arguments_json: serde_json::json!({"path": path, "content": "x\n"}).to_string(),
                },
                &token,
            ))
            .await
            .expect("CallTool")
            .into_inner()
        }));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while ctl_json(&sup, &["approvals", "--json"])
            .as_array()
            .map_or(0, Vec::len)
            <= i
        {
            assert!(std::time::Instant::now() < deadline, "no approval {i}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let pending = ctl_json(&sup, &["approvals", "--json"]);
    let ids: Vec<&str> = pending
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["id"].as_str().unwrap())
        .collect();
    // Dynamic completion offers the pending approvals' and live sessions' ids.
    let complete = |words: &[&str]| {
        let out = Command::new(bin("supervisorctl"))
            .env("COMPLETE", "bash")
            .env("_CLAP_COMPLETE_INDEX", (words.len() - 1).to_string())
            .env("TOLLGATE_OPERATOR_SOCKET", &sup.operator_socket)
            .arg("--")
            .args(words)
            .output()
            .unwrap();
        // An empty word is offered the flags too.
        let mut got: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.starts_with("--"))
            .map(str::to_string)
            .collect();
        got.sort();
        got
    };
    let mut want: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(complete(&["supervisorctl", "approve", ""]), want);
    assert_eq!(
        complete(&["supervisorctl", "revoke", &s.session_id[..3]]),
        std::slice::from_ref(&s.session_id)
    );
    assert!(complete(&["supervisorctl", "revoke", "nomatch"]).is_empty());

    let approved = ctl_json(&sup, &["approve", ids[0], "--json"]);
    assert_eq!(approved["approval"], ids[0], "{approved}");
    assert_eq!(approved["outcome"], "approved");
    assert_eq!(approved["scope"], "once");
    let denied = ctl_json(&sup, &["deny", ids[1], "--reason", "no", "--json"]);
    assert_eq!(denied["outcome"], "denied", "{denied}");
    assert_eq!(denied["scope"], serde_json::Value::Null);
    for w in waiting {
        w.await.unwrap();
    }
    // The counters: the two asks are on record, in status and as Prometheus text.
    let status = ctl_json(&sup, &["status", "--json"]);
    assert_eq!(status["records"]["decisions"]["ask"], 2, "{status}");
    let prom = sup.ctl(&["status", "--prometheus"]);
    let text = String::from_utf8_lossy(&prom.stdout).to_string();
    assert!(prom.status.success(), "{text}");
    assert!(
        text.contains("tollgate_decisions_total{verdict=\"ask\"} 2\n"),
        "{text}"
    );
    assert!(text.contains("tollgate_sessions_active 1\n"), "{text}");
    assert!(
        text.contains("# TYPE tollgate_decisions_total counter\n"),
        "{text}"
    );
    let shown = ctl_json(&sup, &["show", &s.session_id, "--json"]);
    assert_eq!(shown["id"], s.session_id.as_str());
    let doctor = ctl_json_any(&sup, &["doctor", "--json"]);
    assert!(
        doctor.1["checks"].as_array().is_some_and(|c| !c.is_empty()),
        "{doctor:?}"
    );
    assert_eq!(doctor.0, Some(if doctor.1["ok"] == true { 0 } else { 1 }));
    let reload = ctl_json(&sup, &["reload", "--json"]);
    assert_eq!(reload["accepted"], true, "{reload}");
    let audit = sup.dirs.audit.display().to_string();
    let verify = ctl_json(&sup, &["audit", "verify", &audit, "--json"]);
    assert_eq!(verify["ok"], true, "{verify}");
    assert!(verify["files"].as_array().unwrap().len() >= 2, "{verify}");
    let exec = sup.ctl(&[
        "sandbox",
        "exec",
        "--workspace",
        ws.to_str().unwrap(),
        "--json",
        "--",
        "sh",
        "-c",
        "echo out; echo err >&2; exit 3",
    ]);
    assert_eq!(exec.status.code(), Some(3));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&exec.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        lines.contains(&serde_json::json!({"stdout": "out\n"})),
        "{lines:?}"
    );
    assert!(
        lines.contains(&serde_json::json!({"stderr": "err\n"})),
        "{lines:?}"
    );
    assert_eq!(lines.last().unwrap()["exit"]["code"], 3, "{lines:?}");
    let tail = sup.ctl(&["audit", "tail", &s.session_id, "--no-follow", "--json"]);
    let first: serde_json::Value = serde_json::from_str(
        String::from_utf8_lossy(&tail.stdout)
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(first["event"], "session_opened", "{first}");
    let revoked = ctl_json(&sup, &["revoke", &s.session_id, "--json"]);
    assert_eq!(revoked["state"], "revoked", "{revoked}");
    let killed = ctl_json(&sup, &["kill", "--all", "--json"]);
    assert!(killed["killed"].is_array(), "{killed}");

    // Failures under --json: one shape on stderr, nothing on stdout.
    let (code, out, err) = ctl_json_any(&sup, &["show", "nosuch", "--json"]);
    assert_eq!((code, &out), (Some(1), &serde_json::Value::Null), "{err}");
    assert_eq!(err["error"]["kind"], "not_found", "{err}");
    assert_eq!(err["error"]["exit_code"], 1);
    assert!(err["error"]["message"].as_str().unwrap().contains("nosuch"));
    let (code, _, err) = ctl_json_any(&sup, &["revoke", "--json"]);
    assert_eq!(code, Some(2), "{err}");
    assert_eq!(err["error"]["kind"], "usage", "{err}");
    let gone = sup.dirs.root.path().join("no.sock");
    let out = Command::new(bin("supervisorctl"))
        .args(["--socket", gone.to_str().unwrap(), "status", "--json"])
        .output()
        .unwrap();
    let err: serde_json::Value = serde_json::from_slice(&out.stderr).unwrap();
    assert_eq!(err["error"]["kind"], "connect", "{err}");
    assert!(out.stdout.is_empty());
    // Without --json the same failure is the usual line.
    let text = sup.ctl(&["show", "nosuch"]);
    assert!(String::from_utf8_lossy(&text.stderr).starts_with("supervisorctl: "));
}

/// A tool call that exercises `rule` with `example`, for `policy test`.
fn policy_test_line(rule: &str, example: &str) -> Option<serde_json::Value> {
    let (tool, _) = rule.split_once('(').unwrap_or((rule, ""));
    let args = match tool {
        "run_bash" => serde_json::json!({"command": example}),
        "read_file" => serde_json::json!({"path": example}),
        "write_file" => serde_json::json!({"path": example, "content": "x\n"}),
        "webfetch" => serde_json::json!({"url": example}),
        "mcp" => return Some(serde_json::json!({"tool": format!("mcp({example})")})),
        // glob_files, grep and edit_file take more than a path; their rules'
        // examples are checked when the drop-in loads.
        _ => return None,
    };
    Some(serde_json::json!({"tool": tool, "args": args}))
}

/// `policy import claude|codex FILE` prints a drop-in that, saved into
/// policy.d/ as it is, loads (every rule's examples hold), and `policy
/// test` decides each rule's own `match` examples by that rule, or, where a
/// built-in floor decides first (a denied binary, the always-confirm tier
/// of `git push`), with the verdict the rule's list gives; what does not
/// map is on stderr and in the file's comments.
#[test]
fn imported_client_rules_are_proved_by_policy_test() {
    let fixtures =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../supervisor/ctl/tests/fixtures");
    for (client, file, unmapped) in [
        ("claude", "claude-settings.json", "WebSearch"),
        ("codex", "codex.rules", "host_executable"),
    ] {
        let dirs = Dirs::new();
        let ws = dirs.workspace("ws", 0);
        let out = Command::new(bin("supervisorctl"))
            .args(["policy", "import", client])
            .arg(fixtures.join(file))
            .output()
            .unwrap();
        let (text, err) = (
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        );
        assert!(out.status.success(), "{client}: {err}");
        assert!(
            err.contains(&format!("not imported: {unmapped}")) || err.contains(unmapped),
            "{err}"
        );
        assert!(text.contains("# Not imported:"), "{text}");
        let config = dirs.root.path().join("supervisor.toml");
        std::fs::write(&config, "[session]\napproval_timeout_s = 30\n").unwrap();
        let drop_ins = dirs.root.path().join("policy.d");
        std::fs::create_dir_all(&drop_ins).unwrap();
        std::fs::write(drop_ins.join(format!("50-{client}.toml")), &text).unwrap();
        let parsed: toml::Value = toml::from_str(&text).unwrap();
        let mut lines = String::new();
        let mut want = Vec::new();
        for list in ["allow", "ask", "deny"] {
            for r in parsed["policy"]
                .get(list)
                .and_then(|v| v.as_array())
                .into_iter()
                .flatten()
            {
                let rule = r["rule"].as_str().unwrap();
                for ex in r["match"].as_array().unwrap() {
                    if let Some(line) = policy_test_line(rule, ex.as_str().unwrap()) {
                        lines.push_str(&format!("{line}\n"));
                        want.push((list.to_string(), format!("{list}: {rule}")));
                    }
                }
            }
        }
        assert!(want.len() >= 8, "{client}: {want:?}");
        let mut child = Command::new(bin("supervisorctl"))
            .args(["policy", "test", "--config"])
            .arg(&config)
            .arg("--workspace")
            .arg(&ws)
            // webfetch's SSRF floor needs the names resolved; pinned, offline.
            .args(["--resolve", "docs.rs=93.184.215.14"])
            .args(["--resolve", "example.org=93.184.215.14"])
            .args(["--resolve", "pastebin.com=93.184.215.14"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write as _;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(lines.as_bytes())
            .unwrap();
        let answers = child.wait_with_output().unwrap();
        assert!(answers.status.success(), "{client}");
        let got: Vec<(String, String)> = String::from_utf8_lossy(&answers.stdout)
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                let rule = v["rule"].as_str().unwrap_or("").to_string();
                (v["decision"].as_str().unwrap_or("").to_string(), rule)
            })
            .collect();
        assert_eq!(got.len(), want.len(), "{client}: {got:?}");
        let mut by_rule = 0;
        for ((verdict, rule), (list, imported)) in got.iter().zip(&want) {
            assert_eq!(
                verdict, list,
                "{client}: {imported} decided {verdict} by {rule}"
            );
            if rule == imported {
                by_rule += 1;
            } else {
                assert!(
                    rule.starts_with("floor:") || rule.starts_with("confirm:"),
                    "{client}: {imported} decided by {rule}"
                );
            }
        }
        assert!(by_rule * 4 >= want.len() * 3, "{client}: {got:?}");
    }
}

/// `audit archive --before DATE DIR`: two closed runs (each a supervisor log
/// and its session's file) move out while a third supervisor runs; what
/// stays verifies (its oldest log following a retired one) and so does the
/// archive; the running supervisor's log never moves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_runs_are_archived_and_both_chains_still_verify() {
    let keep = tempfile::tempdir().unwrap();
    let audit = keep.path().join("audit");
    let dirs_on = |audit: &std::path::Path| {
        let mut d = Dirs::new();
        d.audit = audit.to_path_buf();
        d
    };
    for _ in 0..2 {
        let mut sup = Supervisor::builder().dirs(dirs_on(&audit)).start();
        let ws = sup.dirs.workspace("ws", 0);
        open_session(&sup, &ws).await;
        assert!(sup.stop().unwrap().success());
    }
    let sup = Supervisor::builder().dirs(dirs_on(&audit)).start();
    let ws = sup.dirs.workspace("ws", 0);
    open_session(&sup, &ws).await;
    let logs = sup.audit_files("supervisor-");
    assert_eq!(logs.len(), 3, "{logs:?}");
    let newest = logs[2].file_name().unwrap().to_str().unwrap().to_string();
    let before = newest
        .strip_prefix("supervisor-")
        .and_then(|n| n.strip_suffix(".jsonl"))
        .unwrap()
        .to_string();
    let archive = keep.path().join("archive");
    let r = ctl_json(
        &sup,
        &[
            "audit",
            "archive",
            "--before",
            &before,
            archive.to_str().unwrap(),
            "--json",
        ],
    );
    assert_eq!(r["logs"], 2, "{r}");
    assert_eq!(r["session_files"], 2, "{r}");
    assert_eq!(r["left_verifies"], true, "{r}");
    assert_eq!(r["archive_verifies"], true, "{r}");
    assert_eq!(sup.audit_files("supervisor-").len(), 1);
    assert_eq!(sup.audit_files("audit-").len(), 1);
    for dir in [&audit, &archive] {
        let v = sup.ctl(&["audit", "verify", dir.to_str().unwrap()]);
        assert!(
            v.status.success(),
            "{}: {}{}",
            dir.display(),
            String::from_utf8_lossy(&v.stdout),
            String::from_utf8_lossy(&v.stderr)
        );
    }
    let left = sup.ctl(&["audit", "verify", audit.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&left.stderr).contains("retired"));
    // Nothing newer moves, and the newest log never does.
    let again = sup.ctl(&[
        "audit",
        "archive",
        "--before",
        "2999-01-01",
        archive.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&again.stdout).to_string();
    assert!(again.status.success(), "{text}");
    assert!(text.contains("moved 0 supervisor log(s)"), "{text}");
    assert!(
        text.contains(&newest) && text.contains("newest supervisor log"),
        "{text}"
    );
    let bad = sup.ctl(&[
        "audit",
        "archive",
        "--before",
        "soon",
        archive.to_str().unwrap(),
    ]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--before"));
}
