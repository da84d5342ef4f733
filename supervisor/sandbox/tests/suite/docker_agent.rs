//! The Docker backend's resident exec agent against the real engine
//! (docs/OPERATIONS.md "The Docker sandbox"): the protocol fuzzed from the host
//! side with real containers; commands that leave their process group (setsid,
//! double fork, ignoring SIGTERM, closing their output) still killed on cancel,
//! timeout, destroy and command end; 50 concurrent commands in one container;
//! and the bad inputs (100 MB of output, invalid UTF-8, stdin held open or
//! never read, an image without a shell, a container removed mid-call). Each
//! test checks that it left no container behind.
//!
//! Skips (printing `skipped: needs docker`) when no engine is reachable, unless
//! `TOLLGATE_REQUIRE_DOCKER=1`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::docker as docker_common;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use docker_common::{
    TEST_GID, TEST_UID, Workspace, containers_of, docker_backend_in, spec, state_dir,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tollgate_exec_agent::wire::{self, FrameReader, FromAgent, Start, ToAgent};
use tollgate_sandbox::docker::{AgentFiles, DockerBackend, DockerSandbox, create_body};
use tollgate_sandbox::{ExecOutcome, ExecRequest, Output, Sandbox, SandboxError};

const T: Duration = Duration::from_secs(60);

fn req(argv: &[&str], timeout: Duration, merge: bool) -> ExecRequest {
    ExecRequest {
        argv: argv.iter().map(|s| (*s).to_string()).collect(),
        cwd: None,
        timeout,
        merge_stderr: merge,
    }
}

fn sh(script: &str) -> ExecRequest {
    req(&["sh", "-c", script], T, false)
}

/// Runs a command (with optional stdin), collecting its output in order.
async fn run(
    sb: &DockerSandbox,
    r: ExecRequest,
    stdin: Option<Bytes>,
) -> (Result<ExecOutcome, SandboxError>, Vec<u8>, Vec<u8>) {
    let (tx, mut rx) = mpsc::channel(16);
    let collect = tokio::spawn(async move {
        let (mut o, mut e) = (Vec::new(), Vec::new());
        while let Some(x) = rx.recv().await {
            match x {
                Output::Stdout(b) => o.extend_from_slice(&b),
                Output::Stderr(b) => e.extend_from_slice(&b),
            }
        }
        (o, e)
    });
    let res = sb
        .exec_with_stdin(r, stdin, tx, CancellationToken::new())
        .await;
    let (o, e) = collect.await.unwrap();
    (res, o, e)
}

async fn assert_nothing_left(state: &Path) {
    assert_eq!(containers_of(state).await, Vec::<String>::new());
}

fn engine() -> bollard::Docker {
    bollard::Docker::connect_with_local_defaults().unwrap()
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

async fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ------------------------------------------------------------------ fuzzing

/// A container built exactly as the backend builds one, but whose agent
/// talks to this test's own listener.
struct RawAgent {
    docker: bollard::Docker,
    id: String,
    stream: UnixStream,
}

impl RawAgent {
    async fn start(backend: &DockerBackend, state: &Path, ws: &Path, n: usize) -> RawAgent {
        let cfg = backend.config();
        let dir = state.join("raw-agent");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let sock = dir.join(format!("{n}.sock"));
        let _ = std::fs::remove_file(&sock);
        let listener = UnixListener::bind(&sock).unwrap();
        std::os::unix::fs::chown(&sock, Some(TEST_UID), Some(TEST_GID)).unwrap();
        let sp = spec(ws);
        let mounts = tollgate_sandbox::docker::plan_mounts(ws, &[]).unwrap();
        let files = AgentFiles {
            binary: cfg.exec_agent.canonicalize().unwrap(),
            socket: sock.clone(),
            no_links_beneath: Vec::new(),
            gitconfig: None,
        };
        let seccomp: serde_json::Value = serde_json::from_str(&cfg.seccomp_profile).unwrap();
        let body = create_body(
            &sp,
            &mounts,
            &files,
            &cfg.image,
            state,
            &seccomp.to_string(),
        )
        .unwrap();
        let docker = engine();
        let name = tollgate_sandbox::docker::container_name(&sp.session_id);
        let created = docker
            .create_container(
                Some(
                    bollard::query_parameters::CreateContainerOptionsBuilder::new()
                        .name(&name)
                        .build(),
                ),
                body,
            )
            .await
            .unwrap();
        docker.start_container(&created.id, None).await.unwrap();
        listener.set_nonblocking(true).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let stream = loop {
            match listener.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    assert!(Instant::now() < deadline, "the agent did not connect");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(e) => panic!("accept: {e}"),
            }
        };
        drop(listener);
        let _ = std::fs::remove_file(&sock);
        stream.set_nonblocking(false).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut raw = RawAgent {
            docker,
            id: created.id,
            stream,
        };
        // Its first frame is its hello.
        let frames = raw.frames_until(|f| matches!(f, FromAgent::Hello(_)));
        assert!(
            matches!(frames.as_slice(), [FromAgent::Hello(_)]),
            "{frames:?}"
        );
        raw
    }

    /// Reads frames until `stop` matches one or the agent closes the stream.
    fn frames_until(&mut self, stop: impl Fn(&FromAgent) -> bool) -> Vec<FromAgent> {
        let mut r = FrameReader::new();
        let mut out = Vec::new();
        let mut buf = [0u8; 65536];
        loop {
            while let Some((t, body)) = r.next_frame().unwrap() {
                let f = FromAgent::parse(t, &body).unwrap();
                let done = stop(&f);
                out.push(f);
                if done {
                    return out;
                }
            }
            match self.stream.read(&mut buf) {
                Ok(0) => return out,
                Ok(n) => r.push(&buf[..n]),
                Err(e) => panic!("reading from the agent: {e}"),
            }
        }
    }

    /// Waits until the container stopped; returns its exit code.
    async fn exit_code(&self) -> i64 {
        for _ in 0..500 {
            let st = self
                .docker
                .inspect_container(&self.id, None)
                .await
                .unwrap()
                .state
                .unwrap();
            if st.running != Some(true) {
                return st.exit_code.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("container {} still runs after 10 s", self.id);
    }

    async fn remove(self) {
        let _ = self
            .docker
            .remove_container(
                &self.id,
                Some(
                    bollard::query_parameters::RemoveContainerOptionsBuilder::new()
                        .force(true)
                        .build(),
                ),
            )
            .await;
    }
}

fn touch_start(id: u64, marker: &Path) -> ToAgent {
    ToAgent::Start(Start {
        id,
        deadline_ms: 10_000,
        merge_stderr: true,
        stdin_pipe: false,
        cwd: b"/".to_vec(),
        argv: vec![
            b"touch".to_vec(),
            marker.as_os_str().as_encoded_bytes().to_vec(),
        ],
        env: vec![(b"PATH".to_vec(), b"/usr/bin:/bin".to_vec())],
    })
}

/// One fuzz case: what is sent, whether the test then closes its end, and
/// the agent's exit code (0: closed between frames; 2: refused input).
struct Case {
    name: &'static str,
    bytes: Vec<u8>,
    close: bool,
    exit: i64,
}

fn cases(marker: &Path) -> Vec<Case> {
    let whole = touch_start(1, marker).to_bytes();
    let mut v = Vec::new();
    // A Start frame cut short anywhere: in its length, its type, its fields,
    // one byte before its end. Never run.
    for cut in [2, 4, 5, 13, 30, whole.len() / 2, whole.len() - 1] {
        v.push(Case {
            name: "cut start",
            bytes: whole[..cut].to_vec(),
            close: true,
            exit: 2,
        });
    }
    // Nothing at all, then end of stream.
    v.push(Case {
        name: "clean close",
        bytes: Vec::new(),
        close: true,
        exit: 0,
    });
    // A whole frame with one field made invalid: unknown flag bits.
    let mut bad_flags = whole.clone();
    bad_flags[5 + 16] = 0xff;
    v.push(Case {
        name: "bad flags",
        bytes: bad_flags,
        close: false,
        exit: 2,
    });
    // A NUL inside an argv word (the body's length stays right).
    let mut nul = whole.clone();
    let at = nul.windows(5).position(|w| w == b"touch").unwrap();
    nul[at + 2] = 0;
    v.push(Case {
        name: "NUL in argv",
        bytes: nul,
        close: false,
        exit: 2,
    });
    // A length the protocol never allows: refused at once, not read.
    let mut huge = (u32::MAX).to_be_bytes().to_vec();
    huge.push(0x10);
    v.push(Case {
        name: "huge length",
        bytes: huge,
        close: false,
        exit: 2,
    });
    // An unknown frame type, and plain noise.
    let mut unknown = 9u32.to_be_bytes().to_vec();
    unknown.extend_from_slice(&[0x99, 0, 0, 0, 0, 0, 0, 0, 1]);
    v.push(Case {
        name: "unknown type",
        bytes: unknown,
        close: false,
        exit: 2,
    });
    let mut noise = Vec::new();
    let mut x: u32 = 0x1234_5678;
    for _ in 0..200 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        noise.push(x as u8);
    }
    // Its first bytes make a length the agent accepts: it waits for the
    // rest of that frame, which never comes.
    noise[0] = 0;
    noise[1] = 0;
    v.push(Case {
        name: "noise",
        bytes: noise,
        close: true,
        exit: 2,
    });
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_cut_frames_end_the_agent_cleanly_and_never_run_a_command() {
    let state = state_dir("fuzz");
    let Some(backend) = docker_backend_in(&state).await else {
        return;
    };
    let ws = Workspace::new("fuzz");
    // Everything runs as the test uid, which may create files in the workspace.
    let all = cases(&ws.path.join("marker"));
    let n = all.len();
    let mut tasks = Vec::new();
    let backend = Arc::new(backend);
    for (i, case) in all.into_iter().enumerate() {
        let (backend, state, ws) = (Arc::clone(&backend), state.clone(), ws.path.clone());
        tasks.push(tokio::spawn(async move {
            let raw = RawAgent::start(&backend, &state, &ws, i).await;
            let (name, exit) = (case.name, case.exit);
            let (raw, frames) = tokio::task::spawn_blocking(move || {
                let mut raw = raw;
                raw.stream.write_all(&case.bytes).unwrap();
                if case.close {
                    raw.stream.shutdown(std::net::Shutdown::Write).unwrap();
                }
                // The agent closes the stream: after a Fatal frame saying
                // why, or (a clean close) after nothing.
                let frames = raw.frames_until(|_| false);
                (raw, frames)
            })
            .await
            .unwrap();
            let fatal = frames.iter().any(|f| matches!(f, FromAgent::Fatal { .. }));
            assert_eq!(fatal, exit != 0, "{name}: {frames:?}");
            assert!(
                frames.iter().all(|f| matches!(f, FromAgent::Fatal { .. })),
                "{name}: a command ran: {frames:?}"
            );
            let code = raw.exit_code().await;
            assert_eq!(code, exit, "{name}");
            raw.remove().await;
            name
        }));
    }
    let mut done = Vec::new();
    for t in tasks {
        done.push(t.await.unwrap());
    }
    assert_eq!(done.len(), n);
    assert!(!ws.path.join("marker").exists(), "a half-read command ran");
    // The control: the same frame, whole, does run.
    let mut raw = RawAgent::start(&backend, &state, &ws.path, n).await;
    raw.stream
        .write_all(&touch_start(1, &ws.path.join("marker")).to_bytes())
        .unwrap();
    let frames = raw.frames_until(|f| matches!(f, FromAgent::Exited(_)));
    assert!(
        matches!(frames.last(), Some(FromAgent::Exited(x)) if x.status == wire::Status::Code(0)),
        "{frames:?}"
    );
    assert!(ws.path.join("marker").exists());
    raw.stream.shutdown(std::net::Shutdown::Both).unwrap();
    assert_eq!(raw.exit_code().await, 0);
    raw.remove().await;
    assert_nothing_left(&state).await;
}

// ------------------------------------------------------- escaping commands

/// A command that closes its output, ignores SIGTERM, and leaves two
/// processes outside its process group: one after `setsid`, one after a
/// double fork; all three sleep with `tag` in their argument.
fn escaper(tag: &str) -> ExecRequest {
    sh(&format!(
        "exec >&- 2>&- </dev/null; trap '' TERM HUP INT; \
         ( setsid sh -c \"trap '' TERM; exec sleep {tag}1\" & ); \
         ( ( exec sleep {tag}2 & ) & ); \
         exec sleep {tag}3"
    ))
}

fn all_three(tag: &str) -> bool {
    (1..=3).all(|i| sleeps(&format!("{tag}{i}")).len() == 1)
}

fn none_left(tag: &str) -> bool {
    (1..=3).all(|i| sleeps(&format!("{tag}{i}")).is_empty())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_that_leave_the_group_die_on_cancel_timeout_destroy_and_command_end() {
    let state = state_dir("escape");
    let Some(backend) = docker_backend_in(&state).await else {
        return;
    };
    let ws = Workspace::new("escape");
    let pid = std::process::id();
    let sb = Arc::new(backend.create_sandbox(&spec(&ws.path)).await.unwrap());

    // Cancel.
    let tag = format!("4242.{pid}1");
    let cancel = CancellationToken::new();
    let task = {
        let (sb, cancel, r) = (Arc::clone(&sb), cancel.clone(), escaper(&tag));
        tokio::spawn(async move {
            let (tx, _rx) = mpsc::channel(4);
            sb.exec(r, tx, cancel).await
        })
    };
    wait_for("three sleeps", Duration::from_secs(20), || all_three(&tag)).await;
    cancel.cancel();
    let o = task.await.unwrap().unwrap();
    assert!(o.cancelled, "{o:?}");
    wait_for(
        "the sleeps to die after cancel",
        Duration::from_secs(5),
        || none_left(&tag),
    )
    .await;
    assert!(sb.is_alive());

    // The timeout (the agent's own deadline).
    let tag = format!("4242.{pid}2");
    let mut r = escaper(&tag);
    r.timeout = Duration::from_secs(3);
    let (res, _, _) = run(&sb, r, None).await;
    let o = res.unwrap();
    assert!(o.timed_out && !o.cancelled, "{o:?}");
    wait_for(
        "the sleeps to die after the timeout",
        Duration::from_secs(5),
        || none_left(&tag),
    )
    .await;

    // The command ends on its own: what it left behind goes with it.
    let tag = format!("4242.{pid}3");
    let (res, out, _) = run(
        &sb,
        sh(&format!(
            "( setsid sleep {tag}1 & ); ( ( sleep {tag}2 & ) & ); sleep {tag}3 & sleep 0.5; echo done"
        )),
        None,
    )
    .await;
    assert_eq!(res.unwrap().exit_code, Some(0));
    assert_eq!(out, b"done\n");
    wait_for("the leftovers to die", Duration::from_secs(5), || {
        none_left(&tag)
    })
    .await;

    // Destroy (revoke, kill and session end all come here).
    let tag = format!("4242.{pid}4");
    let task = {
        let (sb, r) = (Arc::clone(&sb), escaper(&tag));
        tokio::spawn(async move {
            let (tx, _rx) = mpsc::channel(4);
            sb.exec(r, tx, CancellationToken::new()).await
        })
    };
    wait_for("three sleeps", Duration::from_secs(20), || all_three(&tag)).await;
    sb.destroy().await.unwrap();
    assert!(none_left(&tag), "destroy returned with processes left");
    match task.await.unwrap() {
        Ok(o) => assert!(o.exit_code != Some(0), "{o:?}"),
        Err(SandboxError::Gone(m)) => assert!(m.contains(sb.container_name()), "{m}"),
        Err(e) => panic!("unexpected error: {e}"),
    }
    assert_nothing_left(&state).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_commands_in_one_container_keep_their_output_apart() {
    let state = state_dir("fifty");
    let Some(backend) = docker_backend_in(&state).await else {
        return;
    };
    let ws = Workspace::new("fifty");
    let mut sp = spec(&ws.path);
    // 50 commands: a shepherd, a shell and its children each.
    sp.limits.pids = 400;
    sp.limits.memory_mb = 512;
    let sb = Arc::new(backend.create_sandbox(&sp).await.unwrap());
    let lines = 400;
    let mut tasks = Vec::new();
    for n in 0..50 {
        let sb = Arc::clone(&sb);
        tasks.push(tokio::spawn(async move {
            let script = format!(
                "i=0; while [ $i -lt {lines} ]; do echo \"c{n}-$i\"; i=$((i+1)); done; \
                 echo \"c{n} to stderr\" >&2; exit $(({n} % 7))"
            );
            let (res, out, err) = run(&sb, sh(&script), None).await;
            (n, res.unwrap(), out, err)
        }));
    }
    for t in tasks {
        let (n, o, out, err) = t.await.unwrap();
        let want: String = (0..lines).map(|i| format!("c{n}-{i}\n")).collect();
        assert_eq!(o.exit_code, Some(n % 7), "command {n}: {o:?}");
        assert_eq!(String::from_utf8(out).unwrap(), want, "command {n}");
        assert_eq!(String::from_utf8(err).unwrap(), format!("c{n} to stderr\n"));
    }
    sb.destroy().await.unwrap();
    assert_nothing_left(&state).await;
}

// ----------------------------------------------------------------- bad input

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_output_and_stdin_give_a_clear_result_and_never_hang() {
    let state = state_dir("badin");
    let Some(backend) = docker_backend_in(&state).await else {
        return;
    };
    let ws = Workspace::new("badin");
    let sb = backend.create_sandbox(&spec(&ws.path)).await.unwrap();

    // 100 MB of output: all of it arrives, counted, and the command ends.
    let (tx, mut rx) = mpsc::channel(16);
    let count = tokio::spawn(async move {
        let mut n = 0usize;
        while let Some(Output::Stdout(b) | Output::Stderr(b)) = rx.recv().await {
            n += b.len();
        }
        n
    });
    let o = sb
        .exec(
            req(&["head", "-c", "100000000", "/dev/zero"], T, false),
            tx,
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!((o.exit_code, count.await.unwrap()), (Some(0), 100_000_000));

    // Bytes that are not UTF-8 arrive as they were written.
    let (res, out, _) = run(&sb, sh("printf '\\377\\376a\\300\\n'"), None).await;
    assert_eq!(res.unwrap().exit_code, Some(0));
    assert_eq!(out, b"\xff\xfea\xc0\n");

    // stdin: read whole; never read (the command exits first); mostly not
    // read (4 MiB offered, 5 bytes taken); held by a process left behind.
    let (res, out, _) = run(
        &sb,
        req(&["cat"], T, false),
        Some(Bytes::from_static(b"hello\n")),
    )
    .await;
    assert_eq!(
        (res.unwrap().exit_code, out),
        (Some(0), b"hello\n".to_vec())
    );
    let big = Bytes::from(vec![b'x'; 4 * 1024 * 1024]);
    let (res, _, _) = run(&sb, req(&["true"], T, false), Some(big.clone())).await;
    assert_eq!(res.unwrap().exit_code, Some(0));
    let (res, out, _) = run(&sb, req(&["head", "-c", "5"], T, false), Some(big)).await;
    assert_eq!((res.unwrap().exit_code, out), (Some(0), b"xxxxx".to_vec()));
    let (res, out, _) = run(
        &sb,
        sh("cat > /dev/null & echo left"),
        Some(Bytes::from_static(b"data")),
    )
    .await;
    assert_eq!((res.unwrap().exit_code, out), (Some(0), b"left\n".to_vec()));
    // No stdin at all is /dev/null: a reader sees end of file at once.
    let (res, out, _) = run(&sb, sh("cat; echo eof"), None).await;
    assert_eq!((res.unwrap().exit_code, out), (Some(0), b"eof\n".to_vec()));
    // Too much stdin is refused before anything runs.
    let (tx, _rx) = mpsc::channel(1);
    let huge = Bytes::from(vec![0u8; tollgate_sandbox::docker::MAX_STDIN + 1]);
    match sb
        .exec_with_stdin(
            req(&["true"], T, false),
            Some(huge),
            tx,
            CancellationToken::new(),
        )
        .await
    {
        Err(SandboxError::Refused(m)) => assert!(m.contains("stdin"), "{m}"),
        other => panic!("expected Refused, got {other:?}"),
    }
    // A command cannot take the agent down: pid 1 of the container ignores
    // what comes from inside, `kill -9 -1` spares it (the command and its
    // shepherd die, and that is reported), and SIGSTOP does not stop it.
    let (res, out, _) = run(&sb, sh("kill -KILL 1; kill -STOP 1; echo sent"), None).await;
    assert_eq!((res.unwrap().exit_code, out), (Some(0), b"sent\n".to_vec()));
    let (res, _, _) = run(&sb, sh("kill -9 -1; sleep 5"), None).await;
    let o = res.unwrap();
    assert_eq!((o.exit_code, o.signal), (None, Some(9)), "{o:?}");
    // The sandbox is still whole after all of it.
    let (res, out, _) = run(&sb, sh("echo fine"), None).await;
    assert_eq!((res.unwrap().exit_code, out), (Some(0), b"fine\n".to_vec()));
    sb.destroy().await.unwrap();
    assert_nothing_left(&state).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_without_a_shell_still_runs_the_agent_and_says_sh_is_missing() {
    let state = state_dir("noshell");
    let Some(backend) = docker_backend_in(&state).await else {
        return;
    };
    // An image of one file: no shell, no libc, nothing to run.
    let tag = format!("tollgate-test-noshell:{}", docker_common::unique("img"));
    let root = state.join("rootfs");
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::write(root.join("etc/hostname"), "empty\n").unwrap();
    let tar = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "tar -C {} -cf - . | docker import - {tag} >/dev/null",
            root.display()
        ))
        .status()
        .unwrap();
    assert!(tar.success());
    let mut cfg = backend.config().clone();
    cfg.image = tag.clone();
    let result = async {
        let b = DockerBackend::connect(cfg).await.unwrap();
        let ws = Workspace::new("noshell");
        let sb = b.create_sandbox(&spec(&ws.path)).await.unwrap();
        let (res, out, err) = run(&sb, sh("true"), None).await;
        let o = res.unwrap();
        sb.destroy().await.unwrap();
        (o, out, err)
    }
    .await;
    let _ = engine()
        .remove_image(
            &tag,
            None::<bollard::query_parameters::RemoveImageOptions>,
            None,
        )
        .await;
    let (o, out, err) = result;
    assert_eq!(o.exit_code, Some(127), "{o:?}");
    assert_eq!(out, b"");
    assert_eq!(
        String::from_utf8_lossy(&err),
        "sandbox: sh: No such file or directory\n"
    );
    assert_nothing_left(&state).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_removed_from_outside_mid_call_is_reported_gone() {
    let state = state_dir("rmmid");
    let Some(backend) = docker_backend_in(&state).await else {
        return;
    };
    let ws = Workspace::new("rmmid");
    let sb = Arc::new(backend.create_sandbox(&spec(&ws.path)).await.unwrap());
    let tag = format!("4343.{}", std::process::id());
    let task = {
        let (sb, tag) = (Arc::clone(&sb), tag.clone());
        tokio::spawn(async move {
            let (tx, _rx) = mpsc::channel(4);
            sb.exec(sh(&format!("sleep {tag}")), tx, CancellationToken::new())
                .await
        })
    };
    wait_for("the sleep", Duration::from_secs(20), || {
        sleeps(&tag).len() == 1
    })
    .await;
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
    match task.await.unwrap() {
        Err(SandboxError::Gone(m)) => assert!(
            m.contains(sb.container_name()) && m.contains("from outside"),
            "{m}"
        ),
        other => panic!("expected Gone, got {other:?}"),
    }
    assert!(sleeps(&tag).is_empty());
    assert!(!sb.is_alive());
    sb.destroy().await.unwrap();
    assert_nothing_left(&state).await;
}
