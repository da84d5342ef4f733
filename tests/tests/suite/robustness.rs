//! Faults that used to leave the supervisor
//! unable to serve, or left debris. Each test creates the fault with real
//! processes over real sockets: a connection flood from another uid, an
//! engine socket that appears after start, a native sandbox's cgroups at a
//! clean exit, a closed pipe, an error said twice.
//!
//! "Answers within a second" is asserted as a deadline around the call (it
//! answered before the deadline), not measured as a benchmark.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tollgate_e2e::harness::{Dirs, OTHER_UID, Supervisor, authed, bin, root_or_skip};
use tollgate_proto::v1 as pb;

/// Every answer under a flood must come before this.
const DEADLINE: Duration = Duration::from_secs(1);

/// The supervisor's descriptor limit in the flood tests (hard and soft),
/// and the reserve: agent.sock may use descriptors below 1024 - 96 = 928.
/// (The native sandbox sets its own RLIMIT_NOFILE to 1024, which it cannot
/// raise above the supervisor's hard limit: 1024 is the lowest that works.)
const FD_LIMIT: usize = 1024;
const FD_RESERVE: usize = 96;
/// More connections than the supervisor has descriptors.
const FLOOD: usize = FD_LIMIT + 176;

/// Runs `cmd` and returns its output; fails the test unless it ended
/// before [`DEADLINE`].
fn answers_in_time(what: &str, cmd: &mut Command) -> Output {
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not answer within {DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn status_json(sup: &Supervisor) -> serde_json::Value {
    let out = sup.ctl(&["status", "--json"]);
    assert!(out.status.success(), "status: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Waits (bounded) until `f` holds of `status --json`, and returns it.
fn wait_for_status(
    sup: &Supervisor,
    what: &str,
    f: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        let s = status_json(sup);
        if f(&s) {
            return s;
        }
        assert!(Instant::now() < until, "{what}; last status: {s}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// True when some "A: A" appears: a kind said twice by two layers.
fn says_a_prefix_twice(msg: &str) -> bool {
    let norm = msg.to_lowercase().replace('_', " ");
    let parts: Vec<&str> = norm.split(": ").map(str::trim).collect();
    parts
        .windows(2)
        .any(|w| !w[0].is_empty() && w[1].starts_with(w[0]))
}

#[test]
fn the_prefix_check_finds_what_it_should() {
    assert!(says_a_prefix_twice(
        "sandbox unavailable: sandbox unavailable: docker engine not reachable"
    ));
    assert!(says_a_prefix_twice(
        "SANDBOX_UNAVAILABLE: sandbox unavailable: docker engine not reachable"
    ));
    assert!(!says_a_prefix_twice(
        "SANDBOX_UNAVAILABLE: docker engine not reachable at unix:///x: gone"
    ));
}

/// Connections held open by another uid: `e2e-client flood`.
struct Flood {
    child: Child,
}

impl Flood {
    fn start(dirs: &Dirs, socket: &Path, uid: u32, n: usize) -> Flood {
        let mut child = Command::new(dirs.staged_bin("e2e-client"))
            .args([socket.to_str().unwrap(), "-", "flood", &n.to_string()])
            .uid(uid)
            .gid(uid)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the flood connected");
        assert_eq!(line.trim(), format!("OK held {n}"), "flood");
        Flood { child }
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn flood_config(extra_supervisor: &str) -> String {
    format!(
        "[supervisor]\nfd_reserve = {FD_RESERVE}\nidle_connection_timeout_s = 120\n{extra_supervisor}\n\
         [session]\napproval_timeout_s = 30\n\n[llm]\nprovider = \"script\"\n"
    )
}

fn start_with_fd_limit(config: &str) -> Supervisor {
    let nofile = format!("--nofile={FD_LIMIT}:{FD_LIMIT}");
    Supervisor::builder()
        .config(config)
        .wrapper(&["prlimit", &nofile, "--"])
        .start()
}

async fn open(
    c: &mut tollgate_proto::v1::agent_service_client::AgentServiceClient<tonic::transport::Channel>,
    ws: &Path,
    mode: &str,
) -> pb::OpenSessionResponse {
    c.open_session(pb::OpenSessionRequest {
        workspace: ws.display().to_string(),
        mode: mode.to_string(),
        client: "e2e".to_string(),
        ..Default::default()
    })
    .await
    .expect("open session")
    .into_inner()
}

async fn call(
    c: &mut tollgate_proto::v1::agent_service_client::AgentServiceClient<tonic::transport::Channel>,
    token: &str,
    tool: &str,
    args: serde_json::Value,
) -> pb::CallToolResponse {
    c.call_tool(authed(
        pb::CallToolRequest {
            call_id: tool.to_string(),
            tool: tool.to_string(),
            arguments_json: args.to_string(),
        },
        token,
    ))
    .await
    .expect("CallTool")
    .into_inner()
}

/// The operator commands that must always answer.
fn operator_commands_answer(sup: &Supervisor) {
    for args in [&["status"][..], &["sessions"], &["kill", "--all"]] {
        let out = answers_in_time(
            &format!("supervisorctl {}", args.join(" ")),
            sup.ctl_cmd().args(args),
        );
        assert!(
            out.status.success(),
            "supervisorctl {args:?}: {}",
            text(&out.stderr)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_from_one_uid_locks_out_neither_other_uids_nor_operators() {
    if !root_or_skip("a_flood_from_one_uid_locks_out_neither_other_uids_nor_operators") {
        return;
    }
    // The default per-uid cap (64) applies.
    let sup = start_with_fd_limit(&flood_config(""));
    let ws = sup.dirs.workspace("ws", 0);
    std::fs::write(ws.join("notes.txt"), "still here\n").unwrap();

    let flood = Flood::start(&sup.dirs, &sup.agent_socket, OTHER_UID, FLOOD);
    let s = wait_for_status(&sup, "the flooding uid holds its cap", |s| {
        s["connections"]["agent"]["open"] == 64
            && s["connections"]["agent"]["refused_over_uid_cap"]
                .as_u64()
                .unwrap_or(0)
                >= (FLOOD - 64) as u64
    });
    assert_eq!(
        s["connections"]["agent"]["top_uids"][0],
        serde_json::json!({"uid": OTHER_UID, "open": 64}),
        "{s}"
    );
    assert_eq!(s["fds"]["limit"], FD_LIMIT as u64, "{s}");
    assert!(
        s["fds"]["in_use"].as_u64().unwrap() < FD_LIMIT as u64,
        "{s}"
    );

    // Meanwhile another uid opens a session and calls a tool...
    let answered = tokio::time::timeout(DEADLINE, async {
        let mut c = sup.agent_client().await;
        let opened = open(&mut c, &ws, "default").await;
        let r = call(
            &mut c,
            &opened.token,
            "read_file",
            serde_json::json!({"path": "notes.txt"}),
        )
        .await;
        (opened, r)
    })
    .await
    .expect("another uid's calls answered within 1 s during the flood");
    assert!(answered.1.denied.is_none(), "{:?}", answered.1);
    assert!(answered.1.output.contains("still here"), "{:?}", answered.1);

    // ... and every operator command answers, the kill switch included.
    operator_commands_answer(&sup);
    let shown = sup.ctl(&["show", &answered.0.session_id, "--json"]);
    let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["state"], "killed", "{shown}");

    // When the flood lets go, its uid's connections are given back.
    drop(flood);
    wait_for_status(&sup, "the flood's connections are given back", |s| {
        s["connections"]["agent"]["open"] == 0
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fd_reserve_keeps_operators_and_sandboxes_going_when_agents_take_the_rest() {
    if !root_or_skip("the_fd_reserve_keeps_operators_and_sandboxes_going_when_agents_take_the_rest")
    {
        return;
    }
    // No per-uid cap to speak of: the descriptor reserve is the wall.
    let sup = start_with_fd_limit(&flood_config("max_connections_per_uid = 100000"));
    let ws = sup.dirs.workspace("ws", 0);
    // A session opened before the flood, on a connection it keeps.
    let mut c = sup.agent_client().await;
    let before = open(&mut c, &ws, "dangerouslySkipPermissions").await;

    let _flood = Flood::start(&sup.dirs, &sup.agent_socket, OTHER_UID, FLOOD);
    let s = wait_for_status(&sup, "agent.sock reaches the descriptor budget", |s| {
        s["connections"]["agent"]["refused_over_fd_reserve"]
            .as_u64()
            .unwrap_or(0)
            > 0
    });
    let open_agents = s["connections"]["agent"]["open"].as_u64().unwrap();
    assert!(
        open_agents < (FD_LIMIT - FD_RESERVE) as u64 && open_agents > 64,
        "agent connections below the ceiling, and many of them: {s}"
    );
    assert!(
        s["fds"]["in_use"].as_u64().unwrap() <= (FD_LIMIT - FD_RESERVE) as u64 + 8,
        "{s}"
    );

    // The reserve: a sandbox starts and runs for the session that was open...
    let r = tokio::time::timeout(
        DEADLINE * 5,
        call(
            &mut c,
            &before.token,
            "run_bash",
            serde_json::json!({"command": "echo sandbox-ok"}),
        ),
    )
    .await
    .expect("run_bash answered during the flood");
    assert!(r.denied.is_none(), "{r:?}");
    assert!(r.output.contains("sandbox-ok"), "{r:?}");
    // ... a new agent connection is refused at once (not left hanging) ...
    let out = answers_in_time(
        "agent call while agent.sock has no descriptors left",
        sup.agent_cmd()
            .args(["call", "read_file", r#"{"path":"x"}"#, "--workspace"])
            .arg(&ws),
    );
    assert!(!out.status.success(), "{}", text(&out.stdout));
    // ... and operators keep every command, the kill switch included.
    operator_commands_answer(&sup);
    let shown = sup.ctl(&["show", &before.session_id, "--json"]);
    let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["state"], "killed", "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_uid_over_its_connection_cap_is_refused_at_once_and_told_why() {
    if !root_or_skip("a_uid_over_its_connection_cap_is_refused_at_once_and_told_why") {
        return;
    }
    let sup = Supervisor::builder()
        .config(&flood_config("max_connections_per_uid = 4"))
        .start();
    let ws_other = sup.dirs.workspace("ws-other", OTHER_UID);
    let client = sup.dirs.staged_bin("e2e-client");
    let open_as_other = || {
        answers_in_time(
            "an OpenSession over the per-uid cap",
            Command::new(&client)
                .args([
                    sup.agent_socket.to_str().unwrap(),
                    "-",
                    "open",
                    ws_other.to_str().unwrap(),
                ])
                .uid(OTHER_UID)
                .gid(OTHER_UID),
        )
    };

    let flood = Flood::start(&sup.dirs, &sup.agent_socket, OTHER_UID, 4);
    wait_for_status(&sup, "the uid holds its 4", |s| {
        s["connections"]["agent"]["open"] == 4
    });
    let out = text(&open_as_other().stdout);
    assert_eq!(
        out.trim(),
        format!(
            "ERR ResourceExhausted uid {OTHER_UID} already holds 4 connections to agent.sock \
             ([supervisor] max_connections_per_uid); close one or reuse a connection"
        )
    );
    // The agent binary says the same, once.
    let agent = answers_in_time(
        "agent call over the per-uid cap",
        Command::new(sup.dirs.staged_bin("agent"))
            .env("TOLLGATE_SOCKET", &sup.agent_socket)
            .args(["call", "read_file", r#"{"path":"x"}"#, "--workspace"])
            .arg(&ws_other)
            .uid(OTHER_UID)
            .gid(OTHER_UID),
    );
    assert_eq!(
        text(&agent.stdout).trim(),
        format!(
            r#"{{"ok":false,"error":"could not open a session: uid {OTHER_UID} already holds 4 connections to agent.sock ([supervisor] max_connections_per_uid); close one or reuse a connection"}}"#
        )
    );
    // Another uid (root here) is not affected by this uid's cap.
    let root_ws = sup.dirs.workspace("ws", 0);
    let agent = answers_in_time(
        "agent call of another uid",
        sup.agent_cmd()
            .args(["call", "read_file", r#"{"path":"x"}"#, "--workspace"])
            .arg(&root_ws),
    );
    assert!(
        text(&agent.stdout).contains("x does not exist"),
        "{}",
        text(&agent.stdout)
    );
    let s = status_json(&sup);
    assert!(
        s["connections"]["agent"]["refused_over_uid_cap"]
            .as_u64()
            .unwrap()
            >= 1,
        "{s}"
    );
    assert!(
        sup.stderr()
            .contains("refused a connection: uid 64123 already holds 4 connections"),
        "{}",
        sup.stderr()
    );

    // Once it lets go, the same uid is served again.
    drop(flood);
    wait_for_status(&sup, "the uid's connections are given back", |s| {
        s["connections"]["agent"]["open"] == 0
    });
    let out = text(&open_as_other().stdout);
    assert!(out.starts_with("OK "), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_and_busy_ones_are_not() {
    if !root_or_skip("idle_connections_are_closed_and_busy_ones_are_not") {
        return;
    }
    let sup = Supervisor::builder()
        .config(
            "[supervisor]\nidle_connection_timeout_s = 1\n\n[session]\napproval_timeout_s = 30\n\n\
             [llm]\nprovider = \"script\"\n",
        )
        .start();
    let ws = sup.dirs.workspace("ws", 0);

    // A connection that never sends a request is closed.
    let raw = std::os::unix::net::UnixStream::connect(&sup.agent_socket).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = [0u8; 4096];
    let mut got_eof = false;
    for _ in 0..16 {
        match std::io::Read::read(&mut &raw, &mut buf) {
            Ok(0) => {
                got_eof = true;
                break;
            }
            // The server's HTTP/2 preface comes first.
            Ok(_) => continue,
            Err(e) => panic!("the idle connection was not closed: {e}"),
        }
    }
    assert!(got_eof, "the idle connection was not closed");
    let s = status_json(&sup);
    assert!(
        s["connections"]["agent"]["closed_idle"].as_u64().unwrap() >= 1,
        "{s}"
    );

    // A call in flight far longer than the timeout is not cut off.
    let mut c = sup.agent_client().await;
    let opened = open(&mut c, &ws, "dangerouslySkipPermissions").await;
    let r = call(
        &mut c,
        &opened.token,
        "run_bash",
        serde_json::json!({"command": "sleep 3; echo slept"}),
    )
    .await;
    assert!(r.denied.is_none(), "{r:?}");
    assert!(r.output.contains("slept"), "{r:?}");
    assert_eq!(r.exit_code, Some(0), "{r:?}");

    // An open stream (the agent's control stream) keeps its connection.
    let (tx, rx) = tokio::sync::mpsc::channel::<pb::ApprovalClientMsg>(4);
    let mut control = sup.agent_client().await;
    let mut stream = control
        .approvals(authed(
            tokio_stream::wrappers::ReceiverStream::new(rx),
            &opened.token,
        ))
        .await
        .expect("control stream")
        .into_inner();
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Revoking the session ends the stream with the reason: the stream was
    // still there to hear it.
    let revoked = sup.ctl(&["revoke", &opened.session_id, "--reason", "test over"]);
    assert!(revoked.status.success(), "{}", text(&revoked.stderr));
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let msg = stream
                .message()
                .await
                .expect("the control stream was still open");
            match msg.and_then(|m| m.msg) {
                Some(pb::approval_server_msg::Msg::Ended(e)) => return e,
                Some(_) => continue,
                None => panic!("the control stream ended without the session's end"),
            }
        }
    })
    .await
    .expect("the control stream answered");
    assert_eq!(ended.reason, "test over");
    drop(tx);

    // A client idle past the timeout reconnects by itself on its next call.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let mut c2 = sup.agent_client().await;
    let again = open(&mut c2, &ws, "default").await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let tools = c2
        .list_tools(authed(pb::ListToolsRequest {}, &again.token))
        .await
        .expect("a call after the idle close");
    assert!(!tools.into_inner().tools.is_empty());
}

/// Forwards a Unix socket to the Docker engine's, until stopped.
struct EngineProxy {
    path: PathBuf,
    tasks: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl EngineProxy {
    fn start(path: &Path, engine: &'static str) -> EngineProxy {
        let listener = tokio::net::UnixListener::bind(path).unwrap();
        let tasks: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let t2 = Arc::clone(&tasks);
        let accept = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    break;
                };
                let conn = tokio::spawn(async move {
                    if let Ok(mut out) = tokio::net::UnixStream::connect(engine).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                    }
                });
                t2.lock().unwrap().push(conn.abort_handle());
            }
        });
        tasks.lock().unwrap().push(accept.abort_handle());
        EngineProxy {
            path: path.to_path_buf(),
            tasks,
        }
    }

    /// The engine goes away: every forwarded connection too.
    fn stop(&self) {
        for t in self.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for EngineProxy {
    fn drop(&mut self) {
        self.stop();
    }
}

const ENGINE: &str = "/var/run/docker.sock";

fn docker_or_skip(test: &str) -> bool {
    if !root_or_skip(test) {
        return false;
    }
    let image = format!("tollgate-sandbox:{}-minimal", env!("CARGO_PKG_VERSION"));
    let ok = Command::new("docker")
        .args(["image", "inspect", &image])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return true;
    }
    let why = format!(
        "needs a docker engine at {ENGINE} with {image} (sandbox-image/build.sh --minimal)"
    );
    if std::env::var("TOLLGATE_REQUIRE_DOCKER").as_deref() == Ok("1") {
        panic!("{test}: {why}");
    }
    eprintln!("{test}: skipped: {why}");
    false
}

fn doctor(sup: &Supervisor) -> String {
    let out = sup
        .ctl_cmd()
        .arg("doctor")
        .env_remove("TOLLGATE_CONFIG")
        .output()
        .unwrap();
    text(&out.stdout)
}

fn docker_line(doctor: &str) -> String {
    doctor
        .lines()
        .find(|l| l.contains("docker engine:"))
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_that_comes_back_is_used_again_without_a_restart() {
    if !docker_or_skip("an_engine_that_comes_back_is_used_again_without_a_restart") {
        return;
    }
    let dirs = Dirs::new();
    let engine = dirs.root.path().join("engine.sock");
    let image = format!("tollgate-sandbox:{}-minimal", env!("CARGO_PKG_VERSION"));
    let config = format!(
        "[sandbox]\nbackend = \"docker\"\ndocker_socket = \"{}\"\nimage = \"{image}\"\n\n\
         [session]\napproval_timeout_s = 30\n\n[llm]\nprovider = \"script\"\n",
        engine.display()
    );
    let mut sup = Supervisor::builder().config(&config).dirs(dirs).start();
    assert!(sup.ready.ends_with("sandbox=docker"), "{}", sup.ready);
    let where_ = format!("docker engine not reachable at unix://{}", engine.display());

    // Down: status says so, naming the configured socket, and says exactly
    // what is refused; doctor checks that socket, not the default one.
    let status = text(&sup.ctl(&["status"]).stdout);
    assert!(status.contains(&where_), "{status}");
    assert!(
        status.contains("(run_bash and sandbox exec are refused until the docker engine"),
        "{status}"
    );
    assert!(!status.contains("sessions are refused"), "{status}");
    let line = docker_line(&doctor(&sup));
    assert!(line.starts_with("fail docker engine:"), "{line}");
    assert!(line.contains(&where_), "{line}");
    assert!(!line.contains(ENGINE), "{line}");

    // Sessions still open; a command is refused, the reason said once.
    let mut c = sup.agent_client().await;
    let ws = sup.dirs.workspace("ws", 0);
    let opened = open(&mut c, &ws, "dangerouslySkipPermissions").await;
    let r = call(
        &mut c,
        &opened.token,
        "run_bash",
        serde_json::json!({"command": "echo engine-ok"}),
    )
    .await;
    let denied = r.denied.expect("refused while the engine is down");
    assert_eq!(denied.code, pb::DenialCode::SandboxUnavailable as i32);
    assert!(
        denied
            .reason
            .starts_with(&format!("sandbox unavailable: {where_}: ")),
        "{}",
        denied.reason
    );
    assert!(
        denied.reason.ends_with(
            "; start the engine (dockerd) or use --sandbox native. The command did not run."
        ),
        "{}",
        denied.reason
    );
    assert!(!says_a_prefix_twice(&denied.reason), "{}", denied.reason);
    assert_eq!(denied.reason.matches("sandbox unavailable").count(), 1);
    // The operator's probe says it once too.
    let exec = sup
        .ctl_cmd()
        .args(["sandbox", "exec", "--workspace"])
        .arg(&ws)
        .args(["--", "true"])
        .output()
        .unwrap();
    let err = text(&exec.stderr);
    assert!(
        err.starts_with(&format!("supervisorctl: SANDBOX_UNAVAILABLE: {where_}: ")),
        "{err}"
    );
    assert!(!says_a_prefix_twice(&err), "{err}");

    // The engine's socket appears: the next call works, no restart.
    let proxy = EngineProxy::start(&engine, ENGINE);
    let r = call(
        &mut c,
        &opened.token,
        "run_bash",
        serde_json::json!({"command": "echo engine-ok"}),
    )
    .await;
    assert!(r.denied.is_none(), "{r:?}");
    assert!(r.output.contains("engine-ok"), "{r:?}");
    let status = text(&sup.ctl(&["status"]).stdout);
    assert!(status.contains("docker: docker "), "{status}");
    assert!(
        status.contains(&format!("at {}", engine.display())),
        "{status}"
    );
    assert!(!status.contains("MISSING"), "{status}");
    let line = docker_line(&doctor(&sup));
    assert!(line.starts_with("ok   docker engine:"), "{line}");
    assert!(line.contains(&engine.display().to_string()), "{line}");

    // It goes away again: status says so now, not what it saw before.
    proxy.stop();
    let status = text(&sup.ctl(&["status"]).stdout);
    assert!(status.contains(&where_), "{status}");
    // And back, so the session's container can be removed at the end.
    let proxy = EngineProxy::start(&engine, ENGINE);
    let status = text(&sup.ctl(&["status"]).stdout);
    assert!(!status.contains("MISSING"), "{status}");
    assert!(sup.stop().is_some_and(|s| s.success()));
    let left = Command::new("docker")
        .args([
            "ps",
            "-aq",
            "--filter",
            &format!("label=tollgate.session={}", opened.session_id),
        ])
        .output()
        .unwrap();
    assert_eq!(text(&left.stdout).trim(), "", "container left behind");
    drop(proxy);
}

/// This supervisor's per-instance cgroup directories holding `session`.
fn instance_dirs_of(session: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(hierarchies) = std::fs::read_dir("/sys/fs/cgroup") else {
        return found;
    };
    for h in hierarchies.filter_map(Result::ok) {
        let parent = h.path().join("tollgate");
        let Ok(instances) = std::fs::read_dir(&parent) else {
            continue;
        };
        for i in instances.filter_map(Result::ok) {
            if i.path().join(session).is_dir() {
                found.push(i.path());
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_exit_leaves_no_cgroup_directory_behind() {
    if !root_or_skip("a_clean_exit_leaves_no_cgroup_directory_behind") {
        return;
    }
    let mut sup = Supervisor::builder().sandbox("native").start();
    let ws = sup.dirs.workspace("ws", 0);
    let mut c = sup.agent_client().await;
    let opened = open(&mut c, &ws, "dangerouslySkipPermissions").await;
    let r = call(
        &mut c,
        &opened.token,
        "run_bash",
        serde_json::json!({"command": "echo in-cgroups"}),
    )
    .await;
    assert!(r.output.contains("in-cgroups"), "{r:?}");
    let dirs = instance_dirs_of(&opened.session_id);
    assert!(
        !dirs.is_empty(),
        "the native sandbox of a root supervisor runs in cgroups"
    );
    drop(c);

    let status = sup.stop().expect("stopped");
    assert!(status.success(), "{status:?}");
    for d in &dirs {
        assert!(
            !d.exists(),
            "{} left behind after a clean exit",
            d.display()
        );
    }
    assert!(
        !sup.dirs.state.join("sandboxes").exists(),
        "the sandbox records' directory left behind"
    );
}

/// A pipe whose reading end is already closed: any write to it fails with
/// EPIPE, as when `| head -1` has exited.
fn closed_pipe() -> Stdio {
    let (reader, writer) = nix::unistd::pipe().unwrap();
    drop(reader);
    Stdio::from(writer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cli_exits_quietly_when_its_reader_goes_away() {
    if !root_or_skip("every_cli_exits_quietly_when_its_reader_goes_away") {
        return;
    }
    let sup = Supervisor::builder()
        .config(
            "[supervisor]\nmax_sessions_per_uid = 100\n\n[session]\napproval_timeout_s = 30\n\n\
             [llm]\nprovider = \"script\"\n",
        )
        .start();
    let ws = sup.dirs.workspace("ws", 0);
    // Many sessions, most of them ended.
    let mut c = sup.agent_client().await;
    let mut last = String::new();
    for i in 0..40 {
        let s = open(&mut c, &ws, "default").await;
        last = s.session_id.clone();
        if i % 4 != 0 {
            c.close_session(authed(pb::CloseSessionRequest {}, &s.token))
                .await
                .unwrap();
        }
    }
    let audit = sup.dirs.audit.display().to_string();
    let cases: Vec<Vec<&str>> = vec![
        vec!["sessions", "--all"],
        vec!["sessions", "--all", "--json"],
        vec!["status"],
        vec!["status", "--json"],
        vec!["show", &last],
        vec!["approvals", "--all"],
        vec!["doctor"],
        vec!["audit", "verify", &audit],
        vec!["audit", "report", &audit],
        vec!["audit", "tail", &last, "--no-follow", "--dir", &audit],
        vec!["kill", "--all"],
    ];
    for args in cases {
        let out = sup
            .ctl_cmd()
            .args(&args)
            .stdout(closed_pipe())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(141),
            "supervisorctl {args:?}: {}",
            text(&out.stderr)
        );
        assert_eq!(
            text(&out.stderr),
            "",
            "supervisorctl {args:?} said something"
        );
    }
    // policy test reads stdin: one line in, its answer to the closed pipe.
    let mut child = sup
        .ctl_cmd()
        .args(["policy", "test", "--workspace"])
        .arg(&ws)
        .stdin(Stdio::piped())
        .stdout(closed_pipe())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all(b"{\"tool\":\"read_file\",\"args\":{\"path\":\"a\"}}\n")
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(141), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "");

    // The agent: no panic and no message; it still closes its session.
    std::fs::write(ws.join("f.txt"), "x\n").unwrap();
    let out = sup
        .agent_cmd()
        .args(["call", "read_file", r#"{"path":"f.txt"}"#, "--workspace"])
        .arg(&ws)
        .stdout(closed_pipe())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "");
    let sessions: serde_json::Value =
        serde_json::from_slice(&sup.ctl(&["sessions", "--json"]).stdout).unwrap();
    assert_eq!(
        sessions,
        serde_json::json!([]),
        "the agent's session is closed"
    );

    // The supervisor writes only to stderr: closed, it still starts, serves
    // and stops cleanly.
    let dirs = Dirs::new();
    let config = dirs.root.path().join("quiet.toml");
    std::fs::write(&config, tollgate_e2e::harness::TEST_CONFIG).unwrap();
    let mut quiet = Command::new(bin("supervisor"))
        .arg("--config")
        .arg(&config)
        .arg("--state-dir")
        .arg(&dirs.state)
        .arg("--audit-dir")
        .arg(&dirs.audit)
        .env_remove("TOLLGATE_CONFIG")
        .stdin(Stdio::null())
        .stdout(closed_pipe())
        .stderr(closed_pipe())
        .spawn()
        .unwrap();
    let operator = dirs.state.join("operator.sock");
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let up = Command::new(bin("supervisorctl"))
            .arg("--socket")
            .arg(&operator)
            .arg("status")
            .output()
            .unwrap();
        if up.status.success() {
            break;
        }
        if let Some(status) = quiet.try_wait().unwrap() {
            panic!("the supervisor with a closed stderr exited: {status}");
        }
        assert!(Instant::now() < until, "the supervisor never answered");
        std::thread::sleep(Duration::from_millis(50));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(quiet.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = quiet.wait().unwrap();
    assert!(status.success(), "{status:?}");
}
