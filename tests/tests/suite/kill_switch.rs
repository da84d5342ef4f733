//! The kill switch (docs/OPERATIONS.md, "Watching and stopping"): revoke,
//! kill and kill --all stop an
//! in-flight `sleep 1000` and its background child at once; the agent sees
//! SESSION_REVOKED; SIGTERM cleans up; after a `kill -9` of the supervisor the
//! next start reaps the orphaned sandbox and records it.
//!
//! Each test's sleeps carry a unique duration so parallel tests never see each
//! other's processes. How long the kill took is printed (the 100 ms target is
//! measured by `supervisorctl bench`); the assertion is that it happened.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use tollgate_e2e::harness::{Dirs, Supervisor, authed, docker, docker_or_skip, root_or_skip};
use tollgate_proto::v1 as pb;

/// Host pids whose command line is exactly `sleep <arg>`.
fn sleeps(arg: &str) -> Vec<i32> {
    let want = format!("sleep\0{arg}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| {
                    c.ends_with(want.as_bytes())
                        && (c.len() == want.len() || c[..c.len() - want.len()].ends_with(b"/"))
                })
                .unwrap_or(false)
        })
        .collect()
}

fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

struct InFlight {
    session: String,
    token: String,
    call: tokio::task::JoinHandle<Result<pb::CallToolResponse, tonic::Status>>,
}

/// Opens a session and starts `sleep ARG & sleep ARG` in its sandbox; returns
/// once both sleeps run.
async fn start_sleeps(sup: &Supervisor, arg: &str) -> InFlight {
    start_command(sup, arg, &format!("sleep {arg} & sleep {arg}")).await
}

/// Opens a session and starts `command` in it, which must leave two
/// processes `sleep ARG` running; returns once both are.
async fn start_command(sup: &Supervisor, arg: &str, command: &str) -> InFlight {
    let command = command.to_string();
    let ws = sup.dirs.workspace(&format!("ws-{arg}"), 0);
    let s = sup.open_skip_session(&ws).await;
    let socket = sup.agent_socket.clone();
    let token = s.token.clone();
    let call = tokio::spawn(async move {
        let mut c = tollgate_e2e::harness::agent_client(&socket).await;
        c.call_tool(authed(
            pb::CallToolRequest {
                call_id: "k".to_string(),
                tool: "run_bash".to_string(),
                arguments_json: serde_json::json!({ "command": command }).to_string(),
            },
            &token,
        ))
        .await
        .map(|r| r.into_inner())
    });
    wait_for("both sleeps", Duration::from_secs(20), || {
        sleeps(arg).len() == 2
    });
    InFlight {
        session: s.session_id,
        token: s.token,
        call,
    }
}

/// Waits for the call to come back revoked and the sleeps to be gone;
/// returns how long that took after `t0`.
async fn assert_stopped(sup: &Supervisor, f: InFlight, arg: &str, t0: Instant) -> Duration {
    let resp = tokio::time::timeout(Duration::from_secs(5), f.call)
        .await
        .expect("the in-flight call returned")
        .unwrap()
        .expect("the call got an answer");
    wait_for("sleeps to die", Duration::from_secs(5), || {
        sleeps(arg).is_empty()
    });
    let took = t0.elapsed();
    let d = resp.denied.expect("the call was stopped");
    assert_eq!(d.code(), pb::DenialCode::SessionRevoked, "{d:?}");
    // The token is dead too.
    let mut c = sup.agent_client().await;
    let err = c
        .list_tools(authed(pb::ListToolsRequest {}, &f.token))
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unauthenticated);
    let events = sup.session_records(&f.session);
    assert!(
        events.iter().any(|e| e["event"] == "session_revoked"),
        "no session_revoked record"
    );
    // The cancelled call's own records come before the anchored head.
    let files = sup.audit_files(&format!("audit-{}-", f.session));
    let mut args = vec!["audit".to_string(), "verify".to_string()];
    args.extend(files.iter().map(|p| p.display().to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = sup.ctl(&args);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("head matches the anchor"),
        "{text}"
    );
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_stops_the_command_and_its_background_child() {
    if !root_or_skip("revoke_stops_the_command_and_its_background_child") {
        return;
    }
    let sup = Supervisor::start();
    let arg = "1000.1101";
    let f = start_sleeps(&sup, arg).await;
    let mut op = sup.operator_client().await;
    let t0 = Instant::now();
    op.revoke_session(pb::RevokeSessionRequest {
        session_id: f.session.clone(),
        reason: "runaway".to_string(),
    })
    .await
    .unwrap();
    let rpc = t0.elapsed();
    let took = assert_stopped(&sup, f, arg, t0).await;
    eprintln!(
        "kill switch (revoke): RPC returned after {rpc:?}, everything stopped after {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_one_session() {
    if !root_or_skip("kill_one_session") {
        return;
    }
    let sup = Supervisor::start();
    let arg = "1000.2202";
    let f = start_sleeps(&sup, arg).await;
    let t0 = Instant::now();
    let out = sup.ctl(&["kill", &f.session]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let took = assert_stopped(&sup, f, arg, t0).await;
    eprintln!("kill switch (supervisorctl kill, including process start): {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_all_sessions() {
    if !root_or_skip("kill_all_sessions") {
        return;
    }
    let sup = Supervisor::start();
    let a = start_sleeps(&sup, "1000.3303").await;
    let b = start_sleeps(&sup, "1000.3304").await;
    let mut op = sup.operator_client().await;
    let t0 = Instant::now();
    let killed = op
        .kill_session(pb::KillSessionRequest {
            all: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .killed;
    assert_eq!(killed.len(), 2);
    let ta = assert_stopped(&sup, a, "1000.3303", t0).await;
    let tb = assert_stopped(&sup, b, "1000.3304", t0).await;
    eprintln!("kill switch (kill --all, 2 sessions): {ta:?} / {tb:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_sees_session_revoked_and_exits_3() {
    if !root_or_skip("the_agent_sees_session_revoked_and_exits_3") {
        return;
    }
    let sup = Supervisor::start();
    let ws = sup.dirs.workspace("ws", 0);
    let arg = "1000.4404";
    let child = sup
        .agent_cmd()
        .args(["call", "run_bash"])
        .arg(serde_json::json!({ "command": format!("sleep {arg}") }).to_string())
        .args(["--mode", "dangerouslySkipPermissions", "--workspace"])
        .arg(&ws)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the sleep", Duration::from_secs(20), || {
        sleeps(arg).len() == 1
    });
    let list: serde_json::Value =
        serde_json::from_slice(&sup.ctl(&["sessions", "--json"]).stdout).unwrap();
    let id = list[0]["id"].as_str().unwrap().to_string();
    assert!(
        sup.ctl(&["revoke", &id, "--reason", "operator stop"])
            .status
            .success()
    );
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("SESSION_REVOKED") || text.contains("revoked"),
        "{text}"
    );
    assert!(sleeps(arg).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_revokes_everything_and_kills_sandboxes() {
    if !root_or_skip("sigterm_revokes_everything_and_kills_sandboxes") {
        return;
    }
    let mut sup = Supervisor::start();
    let arg = "1000.5505";
    let f = start_sleeps(&sup, arg).await;
    let status = sup.stop().expect("exited");
    assert!(status.success(), "{status:?}");
    wait_for("sleeps to die", Duration::from_secs(5), || {
        sleeps(arg).is_empty()
    });
    let resp = tokio::time::timeout(Duration::from_secs(5), f.call)
        .await
        .expect("call returned");
    // The call either got its SESSION_REVOKED answer or lost its connection.
    if let Ok(Ok(r)) = resp {
        assert_eq!(r.denied.unwrap().code(), pb::DenialCode::SessionRevoked);
    }
    assert!(!sup.agent_socket.exists() && !sup.operator_socket.exists());
    assert!(
        !sup.dirs
            .state
            .join("sandboxes")
            .join(format!("{}.json", f.session))
            .exists()
    );
    let sup_log = sup.audit_files("supervisor-");
    let records: Vec<serde_json::Value> = sup_log
        .iter()
        .flat_map(|p| tollgate_e2e::harness::read_records(p))
        .collect();
    assert!(records.iter().any(|r| r["event"] == "shutdown"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_kill_9_the_next_start_reaps_and_records() {
    if !root_or_skip("after_kill_9_the_next_start_reaps_and_records") {
        return;
    }
    let dirs = Dirs::new();
    let state = dirs.state.clone();
    let audit = dirs.audit.clone();
    let mut sup = Supervisor::builder().dirs(dirs).start();
    let arg = "1000.6606";
    let f = start_sleeps(&sup, arg).await;
    let record = state.join("sandboxes").join(format!("{}.json", f.session));
    assert!(
        record.exists(),
        "the sandbox's state record exists while it runs"
    );
    let cgroups = recorded_cgroups(&record);
    assert!(
        !cgroups.is_empty() && cgroups.iter().all(|d| d.is_dir()),
        "a root supervisor's sandbox has cgroup directories while it runs: {cgroups:?}"
    );
    sup.crash();
    f.call.abort();
    // A second supervisor on the same state and audit dirs.
    let dirs2 = same_dirs(&state, &audit);
    let sup2 = Supervisor::builder().dirs(dirs2).start();
    wait_for("sleeps to die", Duration::from_secs(5), || {
        sleeps(arg).is_empty()
    });
    let recovered = recovered_records(&sup2, &f.session);
    assert_eq!(
        recovered.len(),
        1,
        "one recovered record for {}: {recovered:#?}",
        f.session
    );
    assert!(!record.exists(), "the state record is gone after reaping");
    let left: Vec<&std::path::PathBuf> = cgroups.iter().filter(|d| d.exists()).collect();
    assert!(
        left.is_empty(),
        "cgroup directories left after reaping: {left:?}"
    );
    let detail = recovered[0].to_string();
    assert!(
        detail.contains("removed its cgroups"),
        "the recovered record says the cgroups went: {detail}"
    );
    drop(sup);
}

/// The cgroup directories a native sandbox's state record lists (empty when
/// the host gave it none).
fn recorded_cgroups(record: &std::path::Path) -> Vec<std::path::PathBuf> {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(record).unwrap()).unwrap();
    v["cgroups"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|d| d.as_str().map(Into::into))
                .collect()
        })
        .unwrap_or_default()
}

/// After a `kill -9` of the supervisor (docs/OPERATIONS.md, "The Docker
/// sandbox"), a Docker session's
/// container stops on its own (its resident agent loses its connection and
/// takes everything down) within 2 s, before any restart; the next start
/// still removes it and records `recovered`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_kill_9_a_docker_container_stops_within_2_s_and_the_next_start_records_it() {
    let test = "after_kill_9_a_docker_container_stops_within_2_s_and_the_next_start_records_it";
    if !root_or_skip(test) || !docker_or_skip(test) {
        return;
    }
    let dirs = Dirs::new();
    let state = dirs.state.clone();
    let audit = dirs.audit.clone();
    let config = tollgate_e2e::harness::docker_config("");
    let mut sup = Supervisor::builder()
        .config(&config)
        .sandbox("docker")
        .dirs(dirs)
        .start();
    let arg = "100.7707";
    let f = start_sleeps(&sup, arg).await;
    let filter = format!("label=tollgate.session={}", f.session);
    let id = docker(&["ps", "-q", "--filter", &filter]).unwrap_or_default();
    assert!(!id.is_empty(), "no running container for {}", f.session);
    let running = || docker(&["inspect", "--format", "{{.State.Running}}", &id]);
    assert_eq!(running().as_deref(), Some("true"));

    let t0 = Instant::now();
    sup.crash();
    f.call.abort();
    wait_for(
        "the container's sleeps to die",
        Duration::from_secs(2),
        || sleeps(arg).is_empty(),
    );
    wait_for("the container to stop", Duration::from_secs(2), || {
        running().as_deref() != Some("true")
    });
    eprintln!(
        "kill -9 of the supervisor: container {id} stopped after {:?}",
        t0.elapsed()
    );

    // A second supervisor on the same state and audit dirs removes it.
    let dirs2 = same_dirs(&state, &audit);
    let sup2 = Supervisor::builder()
        .config(&config)
        .sandbox("docker")
        .dirs(dirs2)
        .start();
    assert_eq!(running(), None, "container {id} is still there");
    let recovered = recovered_records(&sup2, &f.session);
    assert_eq!(
        recovered.len(),
        1,
        "one recovered record for {}: {recovered:#?}",
        f.session
    );
    drop(sup);
}

/// Regression (found by the `agent mcp` tests): a call whose client
/// went away (Ctrl-C in the agent, a killed `agent mcp`) was recorded as
/// `stopped` while its command ran on in the sandbox, because the PEP dropped
/// the executor before it could act on the cancellation. The session stays
/// open here, so nothing else kills the command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_client_goes_away_kills_its_command() {
    if !root_or_skip("a_call_whose_client_goes_away_kills_its_command") {
        return;
    }
    let sup = Supervisor::start();
    for round in 0..5 {
        let arg = format!("1000.{}{round}", std::process::id());
        let f = start_sleeps(&sup, &arg).await;
        f.call.abort();
        wait_for("the command to be killed", Duration::from_secs(10), || {
            sleeps(&arg).is_empty()
        });
        // The session lives on: only the call was cancelled.
        let mut c = sup.agent_client().await;
        c.list_tools(authed(pb::ListToolsRequest {}, &f.token))
            .await
            .expect("the session is still open");
        // The outcome is written once the executor returns, a moment after
        // the command is gone.
        let outcome = || {
            sup.session_records(&f.session)
                .into_iter()
                .find(|r| r["event"] == "tool_result")
        };
        wait_for(
            "the outcome to be recorded",
            Duration::from_secs(10),
            || outcome().is_some(),
        );
        let stopped = outcome().expect("the outcome is recorded");
        assert_eq!(stopped["status"], "stopped", "{stopped}");
    }
}

/// On the Docker backend, through the whole supervisor: a command
/// that ignores SIGTERM, closes its stdout and leaves a double-forked
/// `setsid` child behind (which ignores SIGTERM too) is killed with
/// everything it started on revoke, and again on the session's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_revoke_and_session_end_kill_a_command_that_hides() {
    let test = "docker_revoke_and_session_end_kill_a_command_that_hides";
    if !root_or_skip(test) || !docker_or_skip(test) {
        return;
    }
    let config = tollgate_e2e::harness::docker_config("");
    let sup = Supervisor::builder()
        .config(&config)
        .sandbox("docker")
        .start();
    for (round, end) in ["revoke", "close"].into_iter().enumerate() {
        let arg = format!("1000.{}{round}", std::process::id() % 10_000);
        let hiding = format!(
            "trap '' TERM; (setsid sh -c \"trap '' TERM; exec sleep {arg}\" &); exec >&-; sleep {arg}"
        );
        let f = start_command(&sup, &arg, &hiding).await;
        match end {
            "revoke" => {
                let mut op = sup.operator_client().await;
                op.revoke_session(pb::RevokeSessionRequest {
                    session_id: f.session.clone(),
                    reason: "hiding".to_string(),
                })
                .await
                .unwrap();
            }
            _ => {
                let mut c = sup.agent_client().await;
                c.close_session(authed(pb::CloseSessionRequest {}, &f.token))
                    .await
                    .unwrap();
            }
        }
        wait_for(
            &format!("{end}: the command and its setsid child to die"),
            Duration::from_secs(10),
            || sleeps(&arg).is_empty(),
        );
        let answered = tokio::time::timeout(Duration::from_secs(10), f.call)
            .await
            .expect("the in-flight call came back")
            .unwrap();
        if let Ok(r) = answered {
            assert!(!r.ok, "{end}: the call did not end as stopped: {r:?}");
        }
        let events = sup.session_records(&f.session);
        assert!(
            events
                .iter()
                .any(|e| e["event"] == "tool_result" && e["status"] == "stopped"),
            "{end}: no stopped tool_result: {events:#?}"
        );
    }
}

/// A second supervisor's dirs: the first one's state and audit dirs.
fn same_dirs(state: &std::path::Path, audit: &std::path::Path) -> Dirs {
    Dirs {
        root: tempfile::tempdir().unwrap(),
        state: state.to_path_buf(),
        audit: audit.to_path_buf(),
    }
}

/// The `recovered` records a supervisor wrote for `session`.
fn recovered_records(sup: &Supervisor, session: &str) -> Vec<serde_json::Value> {
    sup.audit_files("supervisor-")
        .iter()
        .flat_map(|p| tollgate_e2e::harness::read_records(p))
        .filter(|r| r["event"] == "recovered" && r["session"] == session)
        .collect()
}

/// A supervisor restarted with the other backend configured (docs/OPERATIONS.md,
/// "The supervisor's privileged steps", step 7) still reaps and records what
/// its predecessor left with the first one: here a native sandbox, reaped by
/// a supervisor configured for Docker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_with_docker_configured_reaps_a_native_sandbox_left_behind() {
    let test = "a_start_with_docker_configured_reaps_a_native_sandbox_left_behind";
    if !root_or_skip(test) || !docker_or_skip(test) {
        return;
    }
    let dirs = Dirs::new();
    let (state, audit) = (dirs.state.clone(), dirs.audit.clone());
    let mut sup = Supervisor::builder().dirs(dirs).start();
    let arg = "1000.8808";
    let f = start_sleeps(&sup, arg).await;
    let record = state.join("sandboxes").join(format!("{}.json", f.session));
    assert!(record.exists(), "the native sandbox's state record exists");
    sup.crash();
    f.call.abort();
    let dirs2 = same_dirs(&state, &audit);
    let sup2 = Supervisor::builder()
        .config(&tollgate_e2e::harness::docker_config(""))
        .sandbox("docker")
        .dirs(dirs2)
        .start();
    wait_for("the native sleeps to die", Duration::from_secs(10), || {
        sleeps(arg).is_empty()
    });
    wait_for("a recovered record", Duration::from_secs(10), || {
        !recovered_records(&sup2, &f.session).is_empty()
    });
    assert_eq!(recovered_records(&sup2, &f.session).len(), 1);
    assert!(!record.exists(), "the state record is gone after reaping");
    drop(sup);
}

/// The other direction: a Docker container left behind is removed and
/// recorded by a supervisor restarted with the native backend configured.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_with_native_configured_reaps_a_docker_container_left_behind() {
    let test = "a_start_with_native_configured_reaps_a_docker_container_left_behind";
    if !root_or_skip(test) || !docker_or_skip(test) {
        return;
    }
    let dirs = Dirs::new();
    let (state, audit) = (dirs.state.clone(), dirs.audit.clone());
    let config = tollgate_e2e::harness::docker_config("");
    let mut sup = Supervisor::builder()
        .config(&config)
        .sandbox("docker")
        .dirs(dirs)
        .start();
    let arg = "100.9909";
    let f = start_sleeps(&sup, arg).await;
    let filter = format!("label=tollgate.session={}", f.session);
    let listed = || docker(&["ps", "-aq", "--filter", &filter]).unwrap_or_default();
    assert!(!listed().is_empty(), "no container for {}", f.session);
    sup.crash();
    f.call.abort();
    let dirs2 = same_dirs(&state, &audit);
    let sup2 = Supervisor::builder()
        .config(&config)
        .sandbox("native")
        .dirs(dirs2)
        .start();
    wait_for(
        "the container to be removed",
        Duration::from_secs(20),
        || listed().is_empty(),
    );
    wait_for("a recovered record", Duration::from_secs(10), || {
        !recovered_records(&sup2, &f.session).is_empty()
    });
    assert_eq!(recovered_records(&sup2, &f.session).len(), 1);
    drop(sup);
}
