//! The Docker backend against the real engine: container settings, exec,
//! timeouts, cancel, the kill switch, orphans, and every bad-input case of
//! docs/OPERATIONS.md "The Docker sandbox" (engine not running, image missing,
//! engine dying mid-exec, container killed from outside, forbidden mounts), and
//! what the engine does with a seccomp profile naming a call it does not know.
//! Each test checks that it left no container behind. What the seccomp profile
//! refuses is in the escape table (`common/escape_cases.rs`), which
//! `sandbox.rs` runs against both backends, as root and non-root sessions.
//!
//! Skips (printing `skipped: needs docker`) when no engine is reachable, unless
//! `TOLLGATE_REQUIRE_DOCKER=1`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::docker as docker_common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bollard::query_parameters::KillContainerOptionsBuilder;
use docker_common::{
    TEST_GID, TEST_UID, Workspace, containers_of, docker_backend_in, spec, state_dir,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tollgate_sandbox::docker::DockerBackend;
use tollgate_sandbox::{
    Backend, CheckStatus, ExecOutcome, ExecRequest, Output, Sandbox, SandboxError,
};

const T: Duration = Duration::from_secs(30);

fn req(argv: &[&str], timeout: Duration, merge: bool) -> ExecRequest {
    ExecRequest {
        argv: argv.iter().map(|s| (*s).to_string()).collect(),
        cwd: None,
        timeout,
        merge_stderr: merge,
    }
}

/// Runs a command, collecting its output in order.
async fn run(sb: &dyn Sandbox, r: ExecRequest) -> (Result<ExecOutcome, SandboxError>, Vec<Output>) {
    let (tx, mut rx) = mpsc::channel(16);
    let collect = tokio::spawn(async move {
        let mut v = Vec::new();
        while let Some(o) = rx.recv().await {
            v.push(o);
        }
        v
    });
    let res = sb.exec(r, tx, CancellationToken::new()).await;
    (res, collect.await.unwrap())
}

fn stdout(v: &[Output]) -> String {
    v.iter()
        .filter_map(|o| match o {
            Output::Stdout(b) => Some(String::from_utf8_lossy(b).into_owned()),
            Output::Stderr(_) => None,
        })
        .collect()
}

fn stderr(v: &[Output]) -> String {
    v.iter()
        .filter_map(|o| match o {
            Output::Stderr(b) => Some(String::from_utf8_lossy(b).into_owned()),
            Output::Stdout(_) => None,
        })
        .collect()
}

async fn sh(sb: &dyn Sandbox, script: &str) -> (ExecOutcome, String) {
    let (res, out) = run(sb, req(&["sh", "-c", script], T, true)).await;
    (res.unwrap(), stdout(&out))
}

/// Processes in the container other than init (the exec agent), the
/// checking command itself and its own shepherd (a fork of the agent, same
/// command line): what an exec left behind. A second shepherd is one too.
async fn stragglers(sb: &dyn Sandbox) -> Vec<String> {
    let (o, out) = sh(
        sb,
        "s=0; for p in /proc/[0-9]*; do n=${p#/proc/}; [ \"$n\" = 1 ] && continue; \
         [ \"$n\" = $$ ] && continue; c=$(cat $p/cmdline 2>/dev/null | tr '\\0' ' '); \
         [ -z \"$c\" ] && continue; \
         case \"$c\" in '/.tollgate/exec-agent '*) s=$((s+1)); continue;; esac; \
         case \"$c\" in *'/proc/[0-9]*'*|'cat '*|'tr '*) continue;; esac; \
         echo \"$n $c\"; done; [ $s -gt 1 ] && echo \"$s shepherds\"; true",
    )
    .await;
    assert_eq!(o.exit_code, Some(0), "{out}");
    out.lines().map(str::to_string).collect()
}

/// Polls until no straggler is left (bounded), then returns what is left.
async fn stragglers_settled(sb: &dyn Sandbox) -> Vec<String> {
    let mut left = Vec::new();
    for _ in 0..50 {
        left = stragglers(sb).await;
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    left
}

async fn assert_nothing_left(state: &Path) {
    assert_eq!(containers_of(state).await, Vec::<String>::new());
}

struct Setup {
    state: PathBuf,
    backend: DockerBackend,
    ws: Workspace,
}

async fn setup(tag: &str) -> Option<Setup> {
    let state = state_dir(tag);
    let backend = docker_backend_in(&state).await?;
    Some(Setup {
        state,
        backend,
        ws: Workspace::new(tag),
    })
}

fn engine() -> bollard::Docker {
    bollard::Docker::connect_with_local_defaults().unwrap()
}

#[tokio::test]
async fn container_has_every_setting_of_the_brief() {
    let Some(s) = setup("settings").await else {
        return;
    };
    let sp = spec(&s.ws.path);
    let sb = s.backend.create_sandbox(&sp).await.unwrap();
    let info = engine()
        .inspect_container(sb.container_id(), None)
        .await
        .unwrap();
    let cfg = info.config.unwrap();
    let h = info.host_config.unwrap();
    assert_eq!(
        cfg.user.as_deref(),
        Some(&*format!("{TEST_UID}:{TEST_GID}"))
    );
    assert_eq!(
        cfg.labels.unwrap().get("tollgate.session"),
        Some(&sp.session_id)
    );
    assert_eq!(h.network_mode.as_deref(), Some("none"));
    assert_eq!(h.readonly_rootfs, Some(true));
    assert_eq!(h.cap_drop, Some(vec!["ALL".to_string()]));
    assert_eq!(h.privileged, Some(false));
    // pid 1 is the resident exec agent itself, not docker's init.
    assert_eq!(h.init, Some(false));
    assert_eq!(h.memory, Some(256 * 1024 * 1024));
    assert_eq!(h.memory_swap, Some(256 * 1024 * 1024));
    assert_eq!(h.pids_limit, Some(64));
    assert_eq!(h.nano_cpus, Some(1_000_000_000));
    let sec = h.security_opt.unwrap();
    assert!(
        sec.contains(&"no-new-privileges:true".to_string()),
        "{sec:?}"
    );
    assert!(sec.iter().any(|o| o.starts_with("seccomp=")), "{sec:?}");
    // Besides docker's own files: the workspace, rw, same path;
    // (docs/OPERATIONS.md "What the host runs by itself: before any sandbox
    // starts") each name the host runs by itself, read-only at its own path (an
    // empty placeholder here, where none existed); and, read-only, the exec
    // agent's binary and its (now closed) socket.
    let mut mounts: Vec<(String, String, bool)> = info
        .mounts
        .unwrap()
        .into_iter()
        .map(|m| (m.source.unwrap(), m.destination.unwrap(), m.rw.unwrap()))
        .collect();
    mounts.sort();
    let ws = s.ws.path.to_string_lossy().into_owned();
    let agent = s.backend.config().exec_agent.canonicalize().unwrap();
    let sock = s
        .state
        .join("exec-agent")
        .join(format!("{}.sock", sp.session_id));
    let mut want = vec![
        (ws.clone(), ws.clone(), true),
        (
            agent.to_string_lossy().into_owned(),
            "/.tollgate/exec-agent".to_string(),
            false,
        ),
        (
            sock.to_string_lossy().into_owned(),
            "/.tollgate/agent.sock".to_string(),
            false,
        ),
    ];
    for n in tollgate_policy::host_exec::names() {
        let p = format!("{ws}/{n}");
        want.push((p.clone(), p, false));
    }
    want.sort();
    assert_eq!(mounts, want);
    // The socket accepted its one connection and is gone from the host.
    assert!(!sock.exists());
    // pid 1 runs that very file (from the host, not from the image), with
    // the session's posture.
    let init = info.state.unwrap().pid.unwrap();
    use std::os::unix::fs::MetadataExt;
    let (exe, bin) = (
        std::fs::metadata(format!("/proc/{init}/exe")).unwrap(),
        std::fs::metadata(&agent).unwrap(),
    );
    assert_eq!((exe.dev(), exe.ino()), (bin.dev(), bin.ino()));
    assert_eq!(
        sb.agent_posture(),
        format!("pid 1 uid={TEST_UID} gid={TEST_GID} NoNewPrivs=1 Seccomp=2 caps=0 (protocol 1)")
    );

    // From the inside.
    let (o, out) = sh(
        &sb,
        "grep -E '^(NoNewPrivs|Seccomp|CapEff|CapBnd|CapPrm):' /proc/self/status; id -u; id -g; pwd",
    )
    .await;
    assert_eq!(o.exit_code, Some(0), "{out}");
    assert_eq!(
        out,
        format!(
            "CapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\n\
             NoNewPrivs:\t1\nSeccomp:\t2\n{TEST_UID}\n{TEST_GID}\n{ws}\n"
        )
    );
    // Only the loopback interface; the read-only rootfs; a private sized /tmp.
    let (_, out) = sh(&sb, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '").await;
    assert_eq!(out, "lo\n");
    let (o, _) = sh(&sb, "touch /etc/x 2>/dev/null").await;
    assert_eq!(o.exit_code, Some(1));
    let (o, out) = sh(
        &sb,
        "touch /tmp/x && df -m /tmp | tail -n 1 | awk '{print $2}'",
    )
    .await;
    assert_eq!((o.exit_code, out.as_str()), (Some(0), "32\n"));
    // A file made in the workspace belongs to the session owner on the host.
    let (o, _) = sh(&sb, "echo hi > made-inside").await;
    assert_eq!(o.exit_code, Some(0));
    let meta = std::fs::metadata(s.ws.path.join("made-inside")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (TEST_UID, TEST_GID));
    // The environment is exactly the session's (the agent passes it whole,
    // as the native backend does; nothing of Docker's is added).
    let (res, out) = run(&sb, req(&["env"], T, false)).await;
    assert_eq!(res.unwrap().exit_code, Some(0));
    let mut got: Vec<String> = stdout(&out).lines().map(str::to_string).collect();
    got.sort();
    let mut want: Vec<String> = sp.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    want.sort();
    assert_eq!(got, want);
    // rlimits: nofile, fsize (busybox counts 512-byte blocks), core.
    let (_, out) = sh(&sb, "ulimit -n; ulimit -f; ulimit -c").await;
    assert_eq!(out, format!("256\n{}\n0\n", 64 * 1024 * 2));

    sb.destroy().await.unwrap();
    assert_nothing_left(&s.state).await;
}

#[tokio::test]
async fn exec_streams_in_order_and_returns_the_exit_code() {
    let Some(s) = setup("exec").await else { return };
    let sb = s.backend.create_sandbox(&spec(&s.ws.path)).await.unwrap();

    // Separate streams.
    let (res, out) = run(
        &sb,
        req(
            &["sh", "-c", "echo out1; echo err1 >&2; echo out2; exit 3"],
            T,
            false,
        ),
    )
    .await;
    let o = res.unwrap();
    assert_eq!(
        (o.exit_code, o.signal, o.timed_out, o.cancelled),
        (Some(3), None, false, false)
    );
    assert_eq!(stdout(&out), "out1\nout2\n");
    assert_eq!(stderr(&out), "err1\n");

    // Merged: one stream in the exact order.
    let (res, out) = run(
        &sb,
        req(
            &["sh", "-c", "echo a; echo b >&2; echo c; echo d >&2"],
            T,
            true,
        ),
    )
    .await;
    assert_eq!(res.unwrap().exit_code, Some(0));
    assert_eq!(stdout(&out), "a\nb\nc\nd\n");
    assert_eq!(stderr(&out), "");

    // argv is passed as is, no shell in between.
    let (res, out) = run(&sb, req(&["echo", "a b", "$HOME", "'q'"], T, false)).await;
    assert_eq!(res.unwrap().exit_code, Some(0));
    assert_eq!(stdout(&out), "a b $HOME 'q'\n");

    // Signals, a missing command, cwd.
    let (res, _) = run(&sb, req(&["sh", "-c", "kill -SEGV $$"], T, false)).await;
    let o = res.unwrap();
    assert_eq!((o.exit_code, o.signal), (None, Some(11)));
    let (res, out) = run(&sb, req(&["no-such-command"], T, false)).await;
    assert_eq!(res.unwrap().exit_code, Some(127));
    assert!(stderr(&out).contains("no-such-command"), "{out:?}");
    std::fs::create_dir(s.ws.path.join("sub")).unwrap();
    let mut r = req(&["pwd"], T, false);
    r.cwd = Some(s.ws.path.join("sub"));
    let (res, out) = run(&sb, r).await;
    assert_eq!(res.unwrap().exit_code, Some(0));
    assert_eq!(
        stdout(&out),
        format!("{}\n", s.ws.path.join("sub").display())
    );

    // The wrapper's descriptors do not leak into the command.
    let (res, out) = run(&sb, req(&["ls", "/proc/self/fd"], T, false)).await;
    assert_eq!(res.unwrap().exit_code, Some(0));
    assert_eq!(stdout(&out), "0\n1\n2\n3\n", "fd 3 is ls's own directory");

    // 2 MiB of output arrives whole.
    let (res, out) = run(
        &sb,
        req(&["sh", "-c", "head -c 2097152 /dev/zero"], T, false),
    )
    .await;
    assert_eq!(res.unwrap().exit_code, Some(0));
    let n: usize = out
        .iter()
        .map(|o| match o {
            Output::Stdout(b) | Output::Stderr(b) => b.len(),
        })
        .sum();
    assert_eq!(n, 2 * 1024 * 1024);

    // Background children are gone when the exec returns.
    let (o, out) = sh(&sb, "sleep 300 & sleep 301 & echo started").await;
    assert_eq!((o.exit_code, out.as_str()), (Some(0), "started\n"));
    assert_eq!(stragglers_settled(&sb).await, Vec::<String>::new());

    sb.destroy().await.unwrap();
    assert_nothing_left(&s.state).await;
}

#[tokio::test]
async fn output_arrives_while_the_command_runs() {
    let Some(s) = setup("stream").await else {
        return;
    };
    let sb = Arc::new(s.backend.create_sandbox(&spec(&s.ws.path)).await.unwrap());
    let (tx, mut rx) = mpsc::channel(4);
    let cancel = CancellationToken::new();
    let task = {
        let sb = Arc::clone(&sb);
        let cancel = cancel.clone();
        tokio::spawn(async move {
            sb.exec(
                req(
                    &["sh", "-c", "echo first; read x < /dev/zero; sleep 600"],
                    T,
                    true,
                ),
                tx,
                cancel,
            )
            .await
        })
    };
    let first = rx.recv().await.unwrap();
    assert_eq!(first, Output::Stdout("first\n".into()));
    // The command is still running (it sleeps until cancelled).
    assert!(!task.is_finished());
    cancel.cancel();
    let o = task.await.unwrap().unwrap();
    assert!(o.cancelled && !o.timed_out, "{o:?}");
    sb.destroy().await.unwrap();
    assert_nothing_left(&s.state).await;
}

#[tokio::test]
async fn a_closed_output_channel_never_blocks_and_a_slow_reader_gets_every_byte() {
    let Some(s) = setup("slowreader").await else {
        return;
    };
    let sb = s.backend.create_sandbox(&spec(&s.ws.path)).await.unwrap();
    // Nobody reads: the receiver is dropped at once.
    let (tx, rx) = mpsc::channel(1);
    drop(rx);
    let o = sb
        .exec(
            req(&["sh", "-c", "head -c 1048576 /dev/zero; exit 4"], T, false),
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(o.exit_code, Some(4));
    // A receiver that is never drained: one slot, then full, while 32 MiB
    // would come out. It holds the command up (back-pressure, as on the
    // native backend; nothing is dropped) until the command's deadline.
    let (tx, _rx) = mpsc::channel(1);
    let o = sb
        .exec(
            req(
                &["sh", "-c", "head -c 33554432 /dev/zero; exit 5"],
                Duration::from_secs(3),
                false,
            ),
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert!(o.timed_out && o.exit_code != Some(5), "{o:?}");
    // A reader that pauses longer than any stall allowance (7 s) before it
    // reads, then reads slowly, still gets every byte.
    let (tx, mut rx) = mpsc::channel(1);
    let paused = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(7)).await;
        let mut n = 0usize;
        while let Some(Output::Stdout(b)) = rx.recv().await {
            n += b.len();
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        n
    });
    let o = sb
        .exec(
            req(&["head", "-c", "8388608", "/dev/zero"], T, false),
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!((o.exit_code, paused.await.unwrap()), (Some(0), 8 << 20));
    // A slow reader that keeps reading gets every byte.
    let (tx, mut rx) = mpsc::channel(2);
    let slow = tokio::spawn(async move {
        let mut n = 0usize;
        while let Some(Output::Stdout(b)) = rx.recv().await {
            n += b.len();
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        n
    });
    let o = sb
        .exec(
            req(&["head", "-c", "25165824", "/dev/zero"], T, false),
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!((o.exit_code, slow.await.unwrap()), (Some(0), 24 << 20));
    sb.destroy().await.unwrap();
    assert_nothing_left(&s.state).await;
}

#[tokio::test]
async fn timeout_is_enforced_inside_the_container_and_kills_the_group() {
    let Some(s) = setup("timeout").await else {
        return;
    };
    // The supervisor's own backstop is pushed out of reach: only the
    // in-container timeout can end this command.
    let mut cfg = s.backend.config().clone();
    cfg.backstop_grace = Duration::from_secs(3600);
    let backend = DockerBackend::connect(cfg).await.unwrap();
    let sb = backend.create_sandbox(&spec(&s.ws.path)).await.unwrap();
    let marker = s.ws.path.join("after-timeout");
    let script = format!(
        "echo begin; sleep 100 | cat; sleep 101 & wait; touch {}",
        marker.display()
    );
    let (res, out) = run(
        &sb,
        req(&["sh", "-c", &script], Duration::from_secs(1), true),
    )
    .await;
    let o = res.unwrap();
    assert!(o.timed_out && !o.cancelled, "{o:?}");
    assert_eq!((o.exit_code, o.signal), (None, Some(9)));
    assert_eq!(stdout(&out), "begin\n");
    assert!(!marker.exists());
    assert_eq!(stragglers_settled(&sb).await, Vec::<String>::new());
    // The sandbox is still usable.
    let (o, out) = sh(&sb, "echo still here").await;
    assert_eq!((o.exit_code, out.as_str()), (Some(0), "still here\n"));
    sb.destroy().await.unwrap();
    assert_nothing_left(&s.state).await;
}

#[tokio::test]
async fn cancel_kills_the_process_group_and_the_sandbox_lives_on() {
    let Some(s) = setup("cancel").await else {
        return;
    };
    let sb = Arc::new(s.backend.create_sandbox(&spec(&s.ws.path)).await.unwrap());
    let (tx, mut rx) = mpsc::channel(4);
    let cancel = CancellationToken::new();
    let task = {
        let sb = Arc::clone(&sb);
        let cancel = cancel.clone();
        tokio::spawn(async move {
            sb.exec(
                req(
                    &[
                        "sh",
                        "-c",
                        "sleep 300 & sleep 301 | cat & echo started; wait",
                    ],
                    T,
                    true,
                ),
                tx,
                cancel,
            )
            .await
        })
    };
    assert_eq!(rx.recv().await.unwrap(), Output::Stdout("started\n".into()));
    cancel.cancel();
    let o = task.await.unwrap().unwrap();
    assert!(o.cancelled && !o.timed_out, "{o:?}");
    assert_eq!((o.exit_code, o.signal), (None, Some(9)));
    assert!(sb.is_alive());
    assert_eq!(stragglers_settled(&*sb).await, Vec::<String>::new());
    // Cancelled before it starts: nothing runs.
    let c = CancellationToken::new();
    c.cancel();
    let (tx, _rx) = mpsc::channel(1);
    let marker = s.ws.path.join("never");
    let o = sb
        .exec(req(&["touch", &marker.to_string_lossy()], T, false), tx, c)
        .await
        .unwrap();
    assert!(o.cancelled);
    assert!(!marker.exists());
    sb.destroy().await.unwrap();
    assert_nothing_left(&s.state).await;
}

#[tokio::test]
async fn a_supervisor_that_goes_away_takes_its_commands_with_it() {
    let Some(s) = setup("dropexec").await else {
        return;
    };
    let sb = Arc::new(s.backend.create_sandbox(&spec(&s.ws.path)).await.unwrap());
    let (tx, mut rx) = mpsc::channel(4);
    let task = {
        let sb = Arc::clone(&sb);
        tokio::spawn(async move {
            sb.exec(
                req(&["sh", "-c", "echo started; sleep 302"], T, true),
                tx,
                CancellationToken::new(),
            )
            .await
        })
    };
    assert_eq!(rx.recv().await.unwrap(), Output::Stdout("started\n".into()));
    // The exec future is dropped mid-run (as when the supervisor dies): the
    // exec connection closes and the wrapper kills the command.
    task.abort();
    let _ = task.await;
    assert_eq!(stragglers_settled(&*sb).await, Vec::<String>::new());
    sb.destroy().await.unwrap();
    assert_nothing_left(&s.state).await;
}

#[tokio::test]
async fn destroy_is_the_kill_switch() {
    let Some(s) = setup("destroy").await else {
        return;
    };
    let sb = Arc::new(s.backend.create_sandbox(&spec(&s.ws.path)).await.unwrap());
    let id = sb.container_id().to_string();
    let (tx, mut rx) = mpsc::channel(4);
    let task = {
        let sb = Arc::clone(&sb);
        tokio::spawn(async move {
            sb.exec(
                req(&["sh", "-c", "echo started; sleep 303"], T, true),
                tx,
                CancellationToken::new(),
            )
            .await
        })
    };
    assert_eq!(rx.recv().await.unwrap(), Output::Stdout("started\n".into()));
    // Root and a local engine: the kill goes straight to the container's init.
    assert!(sb.has_fast_kill());
    let info = engine().inspect_container(&id, None).await.unwrap();
    let init = info.state.unwrap().pid.unwrap();
    sb.destroy().await.unwrap();
    assert!(!sb.is_alive());
    assert!(!Path::new(&format!("/proc/{init}")).exists());
    // The container is gone, not just stopped.
    let e = engine().inspect_container(&id, None).await.unwrap_err();
    assert_eq!(tollgate_sandbox::docker::status_code(&e), Some(404), "{e}");
    // The in-flight exec ends: with an outcome or as Gone, never hanging.
    match task.await.unwrap() {
        Ok(o) => assert!(o.exit_code != Some(0), "{o:?}"),
        Err(SandboxError::Gone(m)) => assert!(m.contains(sb.container_name()), "{m}"),
        Err(e) => panic!("unexpected error: {e}"),
    }
    // Idempotent; later execs say Gone.
    sb.destroy().await.unwrap();
    let (res, _) = run(&*sb, req(&["true"], T, false)).await;
    assert!(matches!(res, Err(SandboxError::Gone(_))), "{res:?}");
    assert_nothing_left(&s.state).await;
}

#[tokio::test]
async fn a_container_killed_from_outside_is_reported_gone() {
    let Some(s) = setup("killed").await else {
        return;
    };
    let sb = Arc::new(s.backend.create_sandbox(&spec(&s.ws.path)).await.unwrap());
    let (tx, mut rx) = mpsc::channel(4);
    let task = {
        let sb = Arc::clone(&sb);
        tokio::spawn(async move {
            sb.exec(
                req(&["sh", "-c", "echo started; sleep 304"], T, true),
                tx,
                CancellationToken::new(),
            )
            .await
        })
    };
    assert_eq!(rx.recv().await.unwrap(), Output::Stdout("started\n".into()));
    engine()
        .kill_container(
            sb.container_id(),
            Some(KillContainerOptionsBuilder::new().signal("SIGKILL").build()),
        )
        .await
        .unwrap();
    match task.await.unwrap() {
        Err(SandboxError::Gone(m)) => {
            assert!(
                m.contains("from outside") && m.contains(sb.container_name()),
                "{m}"
            )
        }
        other => panic!("expected Gone, got {other:?}"),
    }
    assert!(!sb.is_alive());
    let (res, _) = run(&*sb, req(&["true"], T, false)).await;
    match res {
        Err(SandboxError::Gone(m)) => assert!(m.contains(sb.container_name()), "{m}"),
        other => panic!("expected Gone, got {other:?}"),
    }
    // The session ends cleanly: destroy removes the dead container.
    sb.destroy().await.unwrap();
    assert_nothing_left(&s.state).await;
}

#[tokio::test]
async fn a_container_removed_between_execs_is_reported_gone() {
    let Some(s) = setup("removed").await else {
        return;
    };
    let sb = s.backend.create_sandbox(&spec(&s.ws.path)).await.unwrap();
    let (o, _) = sh(&sb, "true").await;
    assert_eq!(o.exit_code, Some(0));
    engine()
        .remove_container(
            sb.container_id(),
            Some(
                bollard::query_parameters::RemoveContainerOptionsBuilder::new()
                    .force(true)
                    .build(),
            ),
        )
        .await
        .unwrap();
    let (res, _) = run(&sb, req(&["true"], T, false)).await;
    match res {
        Err(SandboxError::Gone(m)) => assert!(m.contains(sb.container_name()), "{m}"),
        other => panic!("expected Gone, got {other:?}"),
    }
    assert!(!sb.is_alive());
    sb.destroy().await.unwrap();
    assert_nothing_left(&s.state).await;
}

#[tokio::test]
async fn the_engine_not_running_is_unavailable_with_the_socket_and_a_hint() {
    // Needs no engine at all.
    let state = state_dir("noengine");
    // A socket path where nothing listens: once missing, once a dead socket file.
    let missing = state.join("missing.sock");
    let dead = state.join("dead.sock");
    drop(std::os::unix::net::UnixListener::bind(&dead).unwrap());
    for sock in [&missing, &dead] {
        let mut cfg = docker_common::config(&state);
        cfg.socket = sock.clone();
        let e = DockerBackend::connect(cfg.clone()).await.unwrap_err();
        match &e {
            SandboxError::Unavailable(m) => {
                assert!(m.contains(&sock.display().to_string()), "{m}");
                assert!(
                    m.contains("start the engine (dockerd) or use --sandbox native"),
                    "{m}"
                );
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
        let checks = tollgate_sandbox::docker::doctor_checks(&cfg).await;
        assert_eq!(checks[0].name, "docker engine");
        assert_eq!(checks[0].status, CheckStatus::Warn);
        assert!(checks[0].detail.contains(&sock.display().to_string()));
        // What to do is said once, without the error kind's prefix.
        let line = format!("{} {:?}", checks[0].detail, checks[0].hint);
        assert_eq!(line.matches("start the engine").count(), 1, "{line}");
        assert!(
            !checks[0].detail.starts_with("sandbox unavailable"),
            "{line}"
        );
        let checks = tollgate_sandbox::docker::doctor_checks_for(&cfg, true).await;
        assert_eq!(checks[0].status, CheckStatus::Fail);
    }
    let _ = std::fs::remove_dir_all(&state);
}

#[tokio::test]
async fn a_missing_image_is_unavailable_with_a_hint_to_build_it() {
    let Some(s) = setup("noimage").await else {
        return;
    };
    let mut cfg = s.backend.config().clone();
    cfg.image = "tollgate-sandbox:0.0.0-does-not-exist-minimal".to_string();
    match DockerBackend::connect(cfg.clone()).await.unwrap_err() {
        SandboxError::Unavailable(m) => {
            assert!(
                m.contains("tollgate-sandbox:0.0.0-does-not-exist-minimal"),
                "{m}"
            );
            assert!(m.contains("sandbox-image/build.sh --minimal"), "{m}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    let checks = tollgate_sandbox::docker::doctor_checks(&cfg).await;
    let img = checks.iter().find(|c| c.name == "docker image").unwrap();
    assert_eq!(img.status, CheckStatus::Warn);
    assert!(img.detail.contains("build.sh"), "{img:?}");
    // The image vanishing after connect: create says the same.
    let mut good = s.backend.config().clone();
    good.image = format!("tollgate-test-vanishing:{}", docker_common::unique("img"));
    let docker = engine();
    docker
        .tag_image(
            &tollgate_sandbox::docker::minimal_image(),
            Some(
                bollard::query_parameters::TagImageOptionsBuilder::new()
                    .repo(good.image.split(':').next().unwrap())
                    .tag(good.image.split(':').nth(1).unwrap())
                    .build(),
            ),
        )
        .await
        .unwrap();
    let backend = DockerBackend::connect(good.clone()).await.unwrap();
    docker
        .remove_image(
            &good.image,
            None::<bollard::query_parameters::RemoveImageOptions>,
            None,
        )
        .await
        .unwrap();
    match backend.create_sandbox(&spec(&s.ws.path)).await.unwrap_err() {
        SandboxError::Unavailable(m) => assert!(m.contains("build.sh"), "{m}"),
        other => panic!("expected Unavailable, got {other:?}"),
    }
    let checks = tollgate_sandbox::docker::doctor_checks(s.backend.config()).await;
    assert_eq!(
        checks
            .iter()
            .map(|c| (c.name.as_str(), c.status))
            .collect::<Vec<_>>(),
        vec![
            ("docker engine", CheckStatus::Ok),
            ("docker image", CheckStatus::Ok),
            ("docker seccomp", CheckStatus::Ok),
            ("docker exec agent", CheckStatus::Ok),
            ("docker resident agent", CheckStatus::Ok)
        ],
        "{checks:#?}"
    );
    assert_nothing_left(&s.state).await;
}

/// docs/OPERATIONS.md "The Docker sandbox": without a usable resident exec
/// agent (missing, or a dynamically linked file that could not run in the
/// image) no Docker sandbox starts, the refusal names the file and the config
/// key, and nothing is created.
#[tokio::test]
async fn no_sandbox_starts_without_a_usable_exec_agent() {
    let Some(s) = setup("noagent").await else {
        return;
    };
    let missing = s.state.join("no-such-exec-agent");
    let dynamic = std::env::current_exe().unwrap();
    for (path, why) in [
        (missing, "No such file or directory"),
        (dynamic, "dynamically linked"),
    ] {
        let mut cfg = s.backend.config().clone();
        cfg.exec_agent = path.clone();
        let backend = DockerBackend::connect(cfg).await.unwrap();
        match backend.create_sandbox(&spec(&s.ws.path)).await {
            Err(SandboxError::Unavailable(m)) => assert!(
                m.contains(&path.display().to_string())
                    && m.contains(why)
                    && m.contains("docker_exec_agent"),
                "{m}"
            ),
            other => panic!("expected Unavailable for {}, got {other:?}", path.display()),
        }
        assert!(
            backend.strength().missing.iter().any(|m| m.contains(why)),
            "{:?}",
            backend.strength()
        );
        assert_nothing_left(&s.state).await;
    }
    let _ = std::fs::remove_dir_all(&s.state);
}

#[tokio::test]
async fn forbidden_mounts_are_refused_before_anything_is_created() {
    let Some(s) = setup("forbidden").await else {
        return;
    };
    // A fake home with credentials, handed in as the daemon does: the
    // policy's table resolved against the home, in the spec's hidden paths.
    let home = Workspace::new("home");
    std::fs::create_dir_all(home.path.join(".ssh")).unwrap();
    std::fs::create_dir_all(home.path.join("project")).unwrap();
    let hidden = Workspace::new("hidden");
    let backend = DockerBackend::connect(s.backend.config().clone())
        .await
        .unwrap();
    let mut hidden_paths = vec![hidden.path.clone()];
    hidden_paths.extend(tollgate_policy::credentials::resolve([home.path.as_path()]));
    let cases: Vec<(PathBuf, &str)> = vec![
        (s.state.clone(), "state directory"),
        (s.state.join("audit"), "the supervisor's"),
        (PathBuf::from("/run"), "docker"),
        (PathBuf::from("/var/run"), "docker"),
        (PathBuf::from("/"), "/"),
        (home.path.clone(), ".ssh"),
        (home.path.join(".ssh"), ".ssh"),
        (hidden.path.clone(), "hides"),
    ];
    for (ws, why) in cases {
        let mut sp = spec(&ws);
        sp.hidden = hidden_paths.clone();
        match backend.create_sandbox(&sp).await {
            Err(SandboxError::Refused(m)) => assert!(m.contains(why), "{ws:?}: {m}"),
            other => panic!("{ws:?}: expected Refused, got {other:?}"),
        }
    }
    // The project inside the same home is fine.
    let mut sp = spec(&home.path.join("project"));
    sp.hidden = hidden_paths;
    let sb = backend.create_sandbox(&sp).await.unwrap();
    sb.destroy().await.unwrap();
    assert_nothing_left(&s.state).await;
}

#[tokio::test]
async fn reap_orphans_removes_what_a_crashed_supervisor_left_and_only_that() {
    let Some(s) = setup("reap").await else { return };
    let other = setup("reap-other").await.unwrap();
    let sp = spec(&s.ws.path);
    let leftover = s.backend.create_sandbox(&sp).await.unwrap();
    let id = leftover.container_id().to_string();
    // A crashed supervisor runs no destructors.
    std::mem::forget(leftover);
    // Another supervisor's container (another state dir) on the same engine.
    let theirs = other
        .backend
        .create_sandbox(&spec(&other.ws.path))
        .await
        .unwrap();

    let restarted = docker_backend_in(&s.state).await.unwrap();
    let reaped = restarted.reap_orphans().await.unwrap();
    assert_eq!(reaped.len(), 1, "{reaped:?}");
    assert_eq!(reaped[0].session_id, sp.session_id);
    assert!(reaped[0].detail.contains(&id[..12]), "{reaped:?}");
    assert_nothing_left(&s.state).await;
    assert!(theirs.is_alive());
    assert_eq!(containers_of(&other.state).await.len(), 1);
    // Nothing more to reap.
    assert_eq!(restarted.reap_orphans().await.unwrap(), Vec::new());
    theirs.destroy().await.unwrap();
    assert_nothing_left(&other.state).await;
}

#[tokio::test]
async fn a_sandbox_dropped_without_destroy_is_removed() {
    let Some(s) = setup("dropped").await else {
        return;
    };
    let sb = s.backend.create_sandbox(&spec(&s.ws.path)).await.unwrap();
    drop(sb);
    let mut left = containers_of(&s.state).await;
    for _ in 0..100 {
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        left = containers_of(&s.state).await;
    }
    assert_eq!(left, Vec::<String>::new());
}

#[tokio::test]
async fn resource_limits_hold() {
    let Some(s) = setup("limits").await else {
        return;
    };
    let sb = s.backend.create_sandbox(&spec(&s.ws.path)).await.unwrap();
    // pids: 64 for the whole container.
    let (o, out) = sh(
        &sb,
        "(i=0; while [ $i -lt 100 ]; do sleep 30 & i=$((i+1)); done) 2>/dev/null; \
         set -- /proc/[0-9]*; echo $#",
    )
    .await;
    assert_eq!(o.exit_code, Some(0), "{out}");
    let n: usize = out.trim().parse().unwrap();
    assert!((50..=64).contains(&n), "{n} processes with pids 64");
    // fsize: 64 MiB per file, in the workspace.
    let (o, out) = sh(
        &sb,
        "head -c 70000000 /dev/zero > big 2>/dev/null; echo $?; wc -c < big",
    )
    .await;
    assert_eq!(o.exit_code, Some(0));
    assert_eq!(
        out,
        format!("{}\n{}\n", 128 + 25, 64 * 1024 * 1024),
        "SIGXFSZ at 64 MiB"
    );
    // /tmp: 32 MiB.
    let (_, out) = sh(
        &sb,
        "head -c 40000000 /dev/zero > /tmp/fill 2>/dev/null; echo $?",
    )
    .await;
    assert_eq!(out, "1\n", "ENOSPC on the sized /tmp");
    sb.destroy().await.unwrap();
    assert_nothing_left(&s.state).await;
}

/// runc skips a syscall name its libseccomp does not know (`fchmodat2`
/// before libseccomp 2.5.5; this engine's Debian build knows it): the
/// container still starts, and the call meets runc's ENOSYS stub or the
/// profile's default EPERM. So an engine that cannot read fchmodat2's rule
/// still refuses it: here the rule is renamed to a name no libseccomp
/// knows, a root session issues syscall 452 with S_ISUID, and the host
/// finds no setuid file.
#[tokio::test]
async fn fchmodat2_stays_refused_where_the_engine_does_not_know_its_name() {
    let Some(s) = setup("unknown-name").await else {
        return;
    };
    let mut profile: serde_json::Value =
        serde_json::from_str(tollgate_sandbox::docker::DEFAULT_SECCOMP_PROFILE).unwrap();
    let mut renamed = 0;
    for rule in profile["syscalls"].as_array_mut().unwrap() {
        if rule["names"] == serde_json::json!(["fchmodat2"]) {
            rule["names"] = serde_json::json!(["tollgate_unknown_fchmodat2"]);
            renamed += 1;
        }
    }
    assert_eq!(renamed, 1, "the shipped profile has one fchmodat2 rule");
    let mut cfg = s.backend.config().clone();
    cfg.seccomp_profile = profile.to_string();
    let backend = DockerBackend::connect(cfg).await.unwrap();
    std::os::unix::fs::chown(&s.ws.path, Some(0), Some(0)).unwrap();
    let bin = common::install_probe(&s.ws.path, 0);
    let mut sp = spec(&s.ws.path);
    (sp.uid, sp.gid) = (0, 0);
    let sb = backend.create_sandbox(&sp).await.unwrap();
    let (res, out) = run(&sb, req(&[&bin, "setid-doors", "4000"], T, false)).await;
    assert_eq!(res.unwrap().exit_code, Some(0), "{out:?}");
    let got = stdout(&out);
    sb.destroy().await.unwrap();
    for door in ["fchmodat2", "fchmodat2-nofollow", "plain-fchmodat2"] {
        let line = got
            .lines()
            .find(|l| l.split(' ').next() == Some(door))
            .unwrap_or_else(|| panic!("no {door} line in {got}"));
        assert!(
            line == format!("{door} EPERM") || line == format!("{door} ENOSYS"),
            "{line}: fchmodat2 must stay refused when the engine skips its rule"
        );
    }
    // Every other door answers as with the shipped profile.
    let others: Vec<&str> = got
        .lines()
        .filter(|l| !l.contains("fchmodat2") && !l.starts_with("plain-mode"))
        .collect();
    let want: Vec<&str> = common::escape_cases::DOORS_REFUSED
        .lines()
        .filter(|l| !l.contains("fchmodat2") && !l.starts_with("plain-mode"))
        .collect();
    assert_eq!(others, want);
    assert_eq!(
        common::escape_cases::set_id_entries(&s.ws.path),
        Vec::<String>::new(),
        "set-id files on the host"
    );
    assert_nothing_left(&s.state).await;
}

#[tokio::test]
async fn git_hooks_and_config_are_read_only_inside() {
    let Some(s) = setup("git").await else { return };
    let git = s.ws.path.join(".git");
    std::fs::create_dir_all(git.join("hooks")).unwrap();
    std::fs::write(git.join("config"), "[core]\n\tbare = false\n").unwrap();
    for p in [&git, &git.join("hooks"), &git.join("config")] {
        std::os::unix::fs::chown(p, Some(TEST_UID), Some(TEST_GID)).unwrap();
    }
    let sb = s.backend.create_sandbox(&spec(&s.ws.path)).await.unwrap();
    let (o, out) = sh(
        &sb,
        "echo x > .git/hooks/pre-commit 2>/dev/null; echo hooks=$?; \
         echo x >> .git/config 2>/dev/null; echo config=$?; \
         grep -c bare .git/config; echo ok > .git/HEAD 2>/dev/null; echo head=$?",
    )
    .await;
    assert_eq!(o.exit_code, Some(0), "{out}");
    // All of .git is read-only, HEAD too (docs/THREAT_MODEL.md "What the
    // host runs by itself").
    assert_eq!(
        out,
        "sh: can't create .git/hooks/pre-commit: Read-only file system\nhooks=1\n\
         sh: can't create .git/config: Read-only file system\nconfig=1\n1\n\
         sh: can't create .git/HEAD: Read-only file system\nhead=1\n"
    );
    assert!(!git.join("hooks/pre-commit").exists());
    assert!(!git.join("HEAD").exists());
    sb.destroy().await.unwrap();
    // A symlinked hooks directory is refused before anything is created.
    std::fs::remove_dir(git.join("hooks")).unwrap();
    std::os::unix::fs::symlink("/etc", git.join("hooks")).unwrap();
    match s.backend.create_sandbox(&spec(&s.ws.path)).await {
        Err(SandboxError::Refused(m)) => assert!(m.contains("hooks is a symlink"), "{m}"),
        other => panic!("expected Refused, got {other:?}"),
    }
    assert_nothing_left(&s.state).await;
}

#[tokio::test]
async fn a_mount_that_is_not_what_was_checked_is_refused() {
    let Some(s) = setup("swap").await else { return };
    let sb = s.backend.create_sandbox(&spec(&s.ws.path)).await.unwrap();
    let docker = engine();
    // The placeholders exist now: the same paths the backend mounted.
    let protect = tollgate_sandbox::host_exec::plan(
        &s.ws.path,
        &tollgate_policy::host_exec::names(),
        None,
        spec(&s.ws.path).git_dir,
    )
    .unwrap();
    let plan = tollgate_sandbox::docker::plan_mounts(&s.ws.path, &protect.binds).unwrap();
    assert!(
        plan.len() > tollgate_policy::host_exec::HOST_EXEC.len(),
        "{plan:?}"
    );
    tollgate_sandbox::docker::verify_mounts(&docker, sb.container_id(), &plan)
        .await
        .unwrap();
    // As if the path had been swapped after the check: another inode.
    let mut swapped = plan.clone();
    swapped[0].ino += 1;
    match tollgate_sandbox::docker::verify_mounts(&docker, sb.container_id(), &swapped).await {
        Err(SandboxError::Refused(m)) => assert!(m.contains("changed while"), "{m}"),
        other => panic!("expected Refused, got {other:?}"),
    }
    sb.destroy().await.unwrap();
    assert_nothing_left(&s.state).await;
}

#[tokio::test]
async fn argv_cwd_and_statuses_pass_through_the_agent_unchanged() {
    let Some(s) = setup("argv").await else { return };
    let sb = s.backend.create_sandbox(&spec(&s.ws.path)).await.unwrap();
    std::fs::create_dir(s.ws.path.join("sub dir")).unwrap();
    let tricky = [
        "printf",
        "%s|",
        "two words",
        "",
        "it's",
        "a\nb",
        "$HOME `id` $(id) \\ \"q\"",
        "*",
        "--",
        "ünï",
    ];
    let mut in_sub = req(&["pwd"], T, false);
    in_sub.cwd = Some(s.ws.path.join("sub dir"));
    // (request, exit code, signal, stdout, stderr)
    type Case = (ExecRequest, Option<i32>, Option<i32>, String, String);
    let cases: Vec<Case> = vec![
        (
            req(&tricky, T, false),
            Some(0),
            None,
            "two words||it's|a\nb|$HOME `id` $(id) \\ \"q\"|*|--|ünï|".to_string(),
            String::new(),
        ),
        (
            req(&["sh", "-c", "echo out; echo err >&2; exit 7"], T, false),
            Some(7),
            None,
            "out\n".to_string(),
            "err\n".to_string(),
        ),
        (
            req(&["sh", "-c", "echo out; echo err >&2; exit 7"], T, true),
            Some(7),
            None,
            "out\nerr\n".to_string(),
            String::new(),
        ),
        (
            req(&["sh", "-c", "kill -TERM $$"], T, false),
            None,
            Some(15),
            String::new(),
            String::new(),
        ),
        (
            in_sub,
            Some(0),
            None,
            format!("{}\n", s.ws.path.join("sub dir").display()),
            String::new(),
        ),
        (
            req(&["no-such-command"], T, false),
            Some(127),
            None,
            String::new(),
            "sandbox: no-such-command: No such file or directory\n".to_string(),
        ),
        // The agent's ignored SIGPIPE does not reach commands: they start
        // with no signal ignored, and a writer into a closed pipe dies of it.
        (
            req(&["grep", "SigIgn", "/proc/self/status"], T, false),
            Some(0),
            None,
            "SigIgn:\t0000000000000000\n".to_string(),
            String::new(),
        ),
        (
            req(&["sh", "-c", "yes | head -n 1"], T, false),
            Some(0),
            None,
            "y\n".to_string(),
            String::new(),
        ),
    ];
    // Several rounds: the agent serves each the same way.
    for round in 0..3 {
        for (r, code, sig, o, e) in &cases {
            let (res, out) = run(&sb, r.clone()).await;
            let got = res.unwrap();
            assert_eq!(
                (got.exit_code, got.signal, stdout(&out), stderr(&out)),
                (*code, *sig, o.clone(), e.clone()),
                "round {round}: {:?}",
                r.argv
            );
        }
    }
    // A cwd that does not exist fails without running the command.
    let mut missing_cwd = req(&["sh", "-c", "echo ran"], T, false);
    missing_cwd.cwd = Some(s.ws.path.join("missing"));
    let (res, out) = run(&sb, missing_cwd).await;
    assert_eq!(res.unwrap().exit_code, Some(126));
    assert_eq!(stdout(&out), "");
    assert!(stderr(&out).contains("cannot enter"), "{out:?}");
    sb.destroy().await.unwrap();
    assert_nothing_left(&s.state).await;
}
