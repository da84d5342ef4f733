//! Socket activation (docs/OPERATIONS.md, "Running under systemd"): the real
//! `supervisor` started the way
//! systemd starts it from tollgate.socket and tollgate-operator.socket — its
//! sockets already bound and listening on fds 3 and 4, `LISTEN_FDS`,
//! `LISTEN_PID` (its own pid) and `LISTEN_FDNAMES` set, `NOTIFY_SOCKET`
//! pointing at a datagram socket that receives `READY=1` — and the bad
//! inputs: no sockets, sockets meant for another pid, a missing fd, a
//! datagram socket, a socket that does not listen, a world-writable
//! operator.sock, the wrong count.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read as _;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixDatagram, UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tollgate_e2e::harness::{Dirs, bin};

/// Sockets as a service manager would hold them: bound, listening, with
/// the modes the units set.
struct Units {
    dir: PathBuf,
    agent: PathBuf,
    operator: PathBuf,
}

impl Units {
    fn new(dirs: &Dirs) -> Units {
        let dir = dirs.root.path().join("run");
        std::fs::create_dir(&dir).unwrap();
        Units {
            agent: dir.join("agent.sock"),
            operator: dir.join("operator.sock"),
            dir,
        }
    }

    fn listen(&self, path: &Path, mode: u32) -> OwnedFd {
        let l = UnixListener::bind(path).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
        OwnedFd::from(l)
    }
}

/// Starts `supervisor ARGS` with `fds` on 3, 4, … and `LISTEN_PID` set to
/// its own pid (through `sh -c 'LISTEN_PID=$$ exec …'`, as systemd sets it
/// in the process it execs), plus `env`.
fn spawn_with_fds(
    dirs: &Dirs,
    fds: Vec<OwnedFd>,
    env: &[(&str, &str)],
    listen_pid_is_self: bool,
    args: &[&str],
) -> Child {
    let config = dirs.root.path().join("supervisor.toml");
    std::fs::write(&config, "[llm]\nprovider = \"script\"\n").unwrap();
    let script = if listen_pid_is_self {
        r#"LISTEN_PID=$$ exec "$0" "$@""#
    } else {
        r#"exec "$0" "$@""#
    };
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(script)
        .arg(bin("supervisor"))
        .arg("--config")
        .arg(&config)
        .arg("--state-dir")
        .arg(&dirs.state)
        .arg("--audit-dir")
        .arg(&dirs.audit)
        .args(args)
        .env_remove("LISTEN_FDS")
        .env_remove("LISTEN_PID")
        .env_remove("LISTEN_FDNAMES")
        .env_remove("NOTIFY_SOCKET")
        .env_remove("TOLLGATE_CONFIG")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let raw: Vec<i32> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    // SAFETY: only async-signal-safe calls (fcntl, dup2, close) between fork
    // and exec; `raw` was built before the fork and is only read.
    unsafe {
        cmd.pre_exec(move || {
            // First out of the way (a source fd may be 3 or 4 itself), then
            // into place; dup2 leaves the new fd without FD_CLOEXEC.
            let mut high = Vec::with_capacity(raw.len());
            for fd in &raw {
                let h = libc::fcntl(*fd, libc::F_DUPFD_CLOEXEC, 100);
                if h < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                high.push(h);
            }
            for (i, h) in high.iter().enumerate() {
                if libc::dup2(*h, 3 + i as i32) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            // Nothing else on the fds after ours (a "missing fd" must be missing).
            for fd in (3 + raw.len() as i32)..8 {
                libc::close(fd);
            }
            Ok(())
        });
    }
    let child = cmd.spawn().expect("spawn supervisor");
    drop(fds);
    child
}

/// Waits up to 30 s for the child to exit; returns (exit code, stderr).
fn exit_of(mut child: Child) -> (Option<i32>, String) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            return (status.code(), err);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("supervisor did not exit within 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Reads stderr until the ready line (the shared reader, which keeps
/// draining it so the supervisor never blocks on stderr).
fn ready_line(child: &mut Child) -> String {
    let (log, ready) = tollgate_launch::wait_ready(child, Duration::from_secs(30));
    match ready {
        Some(line) => line,
        None => {
            let _ = child.kill();
            panic!(
                "supervisor exited without its ready line, or printed none within 30 s; stderr:\n{}",
                tollgate_launch::text(&log)
            );
        }
    }
}

fn sigterm(child: &mut Child) -> Option<i32> {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s.code();
        }
        assert!(Instant::now() < deadline, "no exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn passed_sockets_are_served_readiness_is_notified_and_the_sockets_stay() {
    let dirs = Dirs::new();
    let units = Units::new(&dirs);
    let agent = units.listen(&units.agent, 0o666);
    let operator = units.listen(&units.operator, 0o660);
    let notify_path = dirs.root.path().join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();

    let mut child = spawn_with_fds(
        &dirs,
        vec![agent, operator],
        &[
            ("LISTEN_FDS", "2"),
            ("LISTEN_FDNAMES", "agent:operator"),
            ("NOTIFY_SOCKET", notify_path.to_str().unwrap()),
        ],
        true,
        &["--socket-activation"],
    );
    let ready = ready_line(&mut child);
    assert_eq!(
        ready,
        format!(
            "supervisor: ready agent={} operator={} sandbox=native",
            units.agent.display(),
            units.operator.display()
        )
    );
    let mut buf = [0u8; 512];
    let n = notify.recv(&mut buf).expect("READY=1 on NOTIFY_SOCKET");
    let msg = String::from_utf8_lossy(&buf[..n]).to_string();
    assert!(msg.lines().any(|l| l == "READY=1"), "{msg}");
    assert!(
        msg.contains(&format!("STATUS=serving agent={}", units.agent.display())),
        "{msg}"
    );
    // The supervisor created no sockets of its own.
    assert!(!dirs.state.join("agent.sock").exists());
    assert!(!dirs.state.join("operator.sock").exists());

    // Both passed sockets serve: an operator call and a whole agent call.
    let status = Command::new(bin("supervisorctl"))
        .arg("--socket")
        .arg(&units.operator)
        .args(["status", "--json"])
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(v["operator_socket"], units.operator.display().to_string());
    let ws = dirs.workspace("ws", nix::unistd::getuid().as_raw());
    std::fs::write(ws.join("hello.txt"), "hi from the workspace\n").unwrap();
    let call = Command::new(bin("agent"))
        .env("TOLLGATE_SOCKET", &units.agent)
        .args([
            "call",
            "read_file",
            r#"{"path":"hello.txt"}"#,
            "--workspace",
        ])
        .arg(&ws)
        .output()
        .unwrap();
    assert!(
        call.status.success(),
        "{}",
        String::from_utf8_lossy(&call.stderr)
    );
    let out: serde_json::Value = serde_json::from_slice(&call.stdout).unwrap();
    assert_eq!(out["ok"], true, "{out}");
    assert!(
        out["output"]
            .as_str()
            .unwrap()
            .contains("hi from the workspace")
    );

    // STOPPING=1, exit 0, and the manager's socket files are left in place.
    assert_eq!(sigterm(&mut child), Some(0));
    let n = notify.recv(&mut buf).expect("STOPPING=1 on NOTIFY_SOCKET");
    assert_eq!(String::from_utf8_lossy(&buf[..n]).trim(), "STOPPING=1");
    assert!(units.agent.exists() && units.operator.exists());
    assert!(units.dir.exists());
}

#[test]
fn names_may_be_missing_when_the_socket_files_say_which_is_which() {
    let dirs = Dirs::new();
    let units = Units::new(&dirs);
    // Passed in the other order, without LISTEN_FDNAMES.
    let operator = units.listen(&units.operator, 0o600);
    let agent = units.listen(&units.agent, 0o666);
    let mut child = spawn_with_fds(
        &dirs,
        vec![operator, agent],
        &[("LISTEN_FDS", "2")],
        true,
        &[],
    );
    let ready = ready_line(&mut child);
    assert!(
        ready.contains(&format!("agent={} ", units.agent.display()))
            && ready.contains(&format!("operator={} ", units.operator.display())),
        "{ready}"
    );
    assert_eq!(sigterm(&mut child), Some(0));
}

#[test]
fn socket_activation_without_sockets_is_refused_at_start() {
    let dirs = Dirs::new();
    let child = spawn_with_fds(&dirs, vec![], &[], true, &["--socket-activation"]);
    let (code, err) = exit_of(child);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("--socket-activation: no sockets were passed (LISTEN_FDS is not set)"),
        "{err}"
    );
    assert!(
        !dirs.state.join("agent.sock").exists(),
        "no socket of its own"
    );
}

#[test]
fn sockets_meant_for_another_process_are_not_taken() {
    let dirs = Dirs::new();
    let units = Units::new(&dirs);
    let fds = || {
        vec![
            units.listen(&units.agent, 0o666),
            units.listen(&units.operator, 0o600),
        ]
    };
    // Required: a clear error naming the pid.
    let child = spawn_with_fds(
        &dirs,
        fds(),
        &[("LISTEN_FDS", "2"), ("LISTEN_PID", "1")],
        false,
        &["--socket-activation"],
    );
    let (code, err) = exit_of(child);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("the passed sockets are meant for process \"1\" (LISTEN_PID)"),
        "{err}"
    );
    // Not required: ignored, and the supervisor binds its own.
    std::fs::remove_file(&units.agent).unwrap();
    std::fs::remove_file(&units.operator).unwrap();
    let mut child = spawn_with_fds(
        &dirs,
        fds(),
        &[("LISTEN_FDS", "2"), ("LISTEN_PID", "1")],
        false,
        &[],
    );
    let ready = ready_line(&mut child);
    assert!(
        ready.contains(&format!(
            "agent={}",
            dirs.state.join("agent.sock").display()
        )),
        "{ready}"
    );
    assert_eq!(sigterm(&mut child), Some(0));
}

#[test]
fn a_missing_fd_is_refused() {
    let dirs = Dirs::new();
    let units = Units::new(&dirs);
    let agent = units.listen(&units.agent, 0o666);
    // LISTEN_FDS says two, only fd 3 is there.
    let child = spawn_with_fds(
        &dirs,
        vec![agent],
        &[("LISTEN_FDS", "2"), ("LISTEN_FDNAMES", "agent:operator")],
        true,
        &["--socket-activation"],
    );
    let (code, err) = exit_of(child);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("an fd is not open"), "{err}");
}

#[test]
fn the_wrong_count_is_refused() {
    let dirs = Dirs::new();
    let units = Units::new(&dirs);
    let agent = units.listen(&units.agent, 0o666);
    let child = spawn_with_fds(
        &dirs,
        vec![agent],
        &[("LISTEN_FDS", "1"), ("LISTEN_FDNAMES", "agent")],
        true,
        &[],
    );
    let (code, err) = exit_of(child);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("the service manager passed 1 socket(s) (LISTEN_FDS=1); tollgate expects 2"),
        "{err}"
    );
}

#[test]
fn a_datagram_socket_is_refused() {
    let dirs = Dirs::new();
    let units = Units::new(&dirs);
    let agent = units.listen(&units.agent, 0o666);
    let dgram = OwnedFd::from(UnixDatagram::bind(&units.operator).unwrap());
    let child = spawn_with_fds(
        &dirs,
        vec![agent, dgram],
        &[("LISTEN_FDS", "2"), ("LISTEN_FDNAMES", "agent:operator")],
        true,
        &["--socket-activation"],
    );
    let (code, err) = exit_of(child);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("the socket passed as fd 4 (\"operator\") is not a unix stream socket"),
        "{err}"
    );
}

#[test]
fn a_stream_socket_that_does_not_listen_is_refused() {
    let dirs = Dirs::new();
    let units = Units::new(&dirs);
    let agent = units.listen(&units.agent, 0o666);
    let (a, _b) = UnixStream::pair().unwrap();
    let child = spawn_with_fds(
        &dirs,
        vec![agent, OwnedFd::from(a)],
        &[("LISTEN_FDS", "2"), ("LISTEN_FDNAMES", "agent:operator")],
        true,
        &[],
    );
    let (code, err) = exit_of(child);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("the socket passed as fd 4 (\"operator\") is not listening"),
        "{err}"
    );
}

#[test]
fn a_world_writable_operator_socket_is_refused() {
    let dirs = Dirs::new();
    let units = Units::new(&dirs);
    let agent = units.listen(&units.agent, 0o666);
    let operator = units.listen(&units.operator, 0o666);
    let child = spawn_with_fds(
        &dirs,
        vec![agent, operator],
        &[("LISTEN_FDS", "2"), ("LISTEN_FDNAMES", "agent:operator")],
        true,
        &["--socket-activation"],
    );
    let (code, err) = exit_of(child);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "operator socket {} passed by the service manager is open to every user (mode 666)",
            units.operator.display()
        )),
        "{err}"
    );
}

#[test]
fn two_agent_sockets_are_refused() {
    let dirs = Dirs::new();
    let units = Units::new(&dirs);
    let agent = units.listen(&units.agent, 0o666);
    let other = units.listen(&units.dir.join("other.sock"), 0o666);
    let child = spawn_with_fds(
        &dirs,
        vec![agent, other],
        &[("LISTEN_FDS", "2"), ("LISTEN_FDNAMES", "agent:agent")],
        true,
        &[],
    );
    let (code, err) = exit_of(child);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("the service manager passed two agent sockets"),
        "{err}"
    );
}

/// The same protocol from systemd's own tool instead of this file's harness:
/// `systemd-socket-activate` binds and listens on both paths, names the fds
/// with `--fdname`, waits for the first connection and only then execs the
/// supervisor in its own process (so `LISTEN_PID` is systemd's setting, not
/// ours). The first `supervisorctl status` is that connection: it is held in
/// the listen backlog until the supervisor serves, as under tollgate.socket.
#[test]
fn systemd_socket_activate_starts_the_supervisor_on_the_first_connection() {
    let tool = Path::new("/usr/bin/systemd-socket-activate");
    assert!(
        tool.exists(),
        "{} is missing: install the systemd package (.ci/run does)",
        tool.display()
    );
    let dirs = Dirs::new();
    let units = Units::new(&dirs);
    let config = dirs.root.path().join("supervisor.toml");
    std::fs::write(&config, "[llm]\nprovider = \"script\"\n").unwrap();
    let notify_path = dirs.root.path().join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut child = Command::new(tool)
        .arg("--listen")
        .arg(&units.agent)
        .arg("--listen")
        .arg(&units.operator)
        .arg("--fdname=agent:operator")
        .arg(format!("--setenv=NOTIFY_SOCKET={}", notify_path.display()))
        .arg("--setenv=RUST_LOG=warn")
        .arg(bin("supervisor"))
        .arg("--config")
        .arg(&config)
        .arg("--state-dir")
        .arg(&dirs.state)
        .arg("--audit-dir")
        .arg(&dirs.audit)
        .arg("--socket-activation")
        .env_remove("LISTEN_FDS")
        .env_remove("LISTEN_PID")
        .env_remove("LISTEN_FDNAMES")
        .env_remove("NOTIFY_SOCKET")
        .env_remove("TOLLGATE_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    // systemd-socket-activate made the socket files; nothing is served yet.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(units.agent.exists() && units.operator.exists()) {
        assert!(
            Instant::now() < deadline,
            "no sockets from systemd-socket-activate"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "systemd-socket-activate exited"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!dirs.state.join("agent.sock").exists());

    // The first connection starts the supervisor and is answered by it.
    let status = Command::new(bin("supervisorctl"))
        .arg("--socket")
        .arg(&units.operator)
        .args(["status", "--json"])
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(v["operator_socket"], units.operator.display().to_string());
    assert_eq!(v["agent_socket"], units.agent.display().to_string());
    let ready = ready_line(&mut child);
    assert_eq!(
        ready,
        format!(
            "supervisor: ready agent={} operator={} sandbox=native",
            units.agent.display(),
            units.operator.display()
        )
    );
    let mut buf = [0u8; 512];
    let n = notify.recv(&mut buf).expect("READY=1 on NOTIFY_SOCKET");
    let msg = String::from_utf8_lossy(&buf[..n]).to_string();
    assert!(msg.lines().any(|l| l == "READY=1"), "{msg}");
    // It serves on systemd's sockets and made none of its own.
    assert!(!dirs.state.join("agent.sock").exists());
    assert!(!dirs.state.join("operator.sock").exists());
    assert_eq!(sigterm(&mut child), Some(0));
}
