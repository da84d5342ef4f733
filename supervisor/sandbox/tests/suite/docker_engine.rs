//! The engine dying mid-exec, for real.
//!
//! Stopping the machine's own dockerd would break everyone else using it, so
//! this test starts a *second* dockerd of its own: its own socket, data root,
//! exec root (so its own containerd), pidfile, config file and cgroup parent,
//! no bridge and no iptables rules. It imports the
//! minimal image into it, starts a long command in a session container,
//! SIGKILLs that dockerd, and checks: the exec ends with `Gone` naming the
//! socket, the sandbox is dead, destroy says the engine is unreachable; then it
//! restarts the same dockerd, and a new backend's `reap_orphans` removes the
//! container, so nothing is left behind. Finally it stops the dockerd and
//! removes everything it made.
//!
//! Needs root and `dockerd`; skips otherwise, unless TOLLGATE_REQUIRE_DOCKER=1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::docker as docker_common;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use docker_common::{Workspace, skip, spec, state_dir};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tollgate_sandbox::docker::DockerBackend;
use tollgate_sandbox::{Backend, ExecRequest, Output, Sandbox, SandboxError};

/// A private dockerd, stopped and cleaned up on drop.
struct Engine {
    dir: PathBuf,
    socket: PathBuf,
    child: Option<Child>,
}

impl Engine {
    fn new() -> Engine {
        let dir = PathBuf::from(format!("/tmp/tollgate-dockerd-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("daemon.json"), "{}\n").unwrap();
        Engine {
            socket: dir.join("docker.sock"),
            dir,
            child: None,
        }
    }

    /// Starts dockerd and waits until it answers.
    async fn start(&mut self) {
        let log = std::fs::File::create(self.dir.join("dockerd.log")).unwrap();
        let child = Command::new("dockerd")
            .arg("--config-file")
            .arg(self.dir.join("daemon.json"))
            .arg("--data-root")
            .arg(self.dir.join("data"))
            .arg("--exec-root")
            .arg(self.dir.join("exec"))
            .arg("--pidfile")
            .arg(self.dir.join("dockerd.pid"))
            .arg("--host")
            .arg(format!("unix://{}", self.socket.display()))
            .arg("--cgroup-parent")
            .arg(self.cgroup_parent())
            .args(["--bridge", "none", "--iptables=false", "--ip6tables=false"])
            .args(["--ip-masq=false", "--log-level", "warn"])
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        for _ in 0..900 {
            if let Ok(d) = bollard::Docker::connect_with_unix(
                &self.socket.to_string_lossy(),
                5,
                bollard::API_DEFAULT_VERSION,
            ) && d.ping().await.is_ok()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "private dockerd did not come up; log: {}",
            std::fs::read_to_string(self.dir.join("dockerd.log")).unwrap_or_default()
        );
    }

    fn cgroup_parent(&self) -> String {
        format!("tollgate-test-dockerd-{}", std::process::id())
    }

    /// The engine dies: SIGKILL to dockerd and the containerd it started (one
    /// process group). The containers' shims live on, as after a real crash.
    fn crash(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(c.id() as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = c.wait();
        }
        std::thread::sleep(Duration::from_millis(200));
        reap_orphans_of_the_engine();
    }

    /// SIGKILL to everything this engine ever started that is still there:
    /// processes under its directory (containerd, shims) and in its cgroups.
    fn kill_leftovers(&self) {
        let dir = self.dir.to_string_lossy().into_owned();
        let cg = format!("/{}/", self.cgroup_parent());
        let Ok(rd) = std::fs::read_dir("/proc") else {
            return;
        };
        for e in rd.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
            if String::from_utf8_lossy(&cmd).contains(&dir) || cgroup.contains(&cg) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        std::thread::sleep(Duration::from_millis(300));
        if let Ok(hier) = std::fs::read_dir("/sys/fs/cgroup") {
            for h in hier.flatten() {
                let root = h.path().join(self.cgroup_parent());
                if let Ok(children) = std::fs::read_dir(&root) {
                    for c in children.flatten() {
                        let _ = std::fs::remove_dir(c.path());
                    }
                }
                let _ = std::fs::remove_dir(&root);
            }
        }
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(c.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            for _ in 0..300 {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.stop();
        self.kill_leftovers();
        reap_orphans_of_the_engine();
        // Whatever the daemon left mounted under its roots, then the roots.
        if let Ok(mounts) = std::fs::read_to_string("/proc/self/mountinfo") {
            let mut under: Vec<&str> = mounts
                .lines()
                .filter_map(|l| l.split(' ').nth(4))
                .filter(|m| Path::new(m).starts_with(&self.dir))
                .collect();
            under.sort_by_key(|m| std::cmp::Reverse(m.len()));
            for m in under {
                let _ = nix::mount::umount2(m, nix::mount::MntFlags::MNT_DETACH);
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// This process is a child subreaper (see the test), so dockerd's orphans
/// (its containerd, the shims) are reparented here: reap the dead ones, or a
/// zombie containerd's pid would look alive to the restarted dockerd.
fn reap_orphans_of_the_engine() {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    while let Ok(st) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
        if st == WaitStatus::StillAlive {
            break;
        }
    }
}

fn usable() -> Result<(), String> {
    if !nix::unistd::geteuid().is_root() {
        return Err("a private dockerd needs root".to_string());
    }
    match Command::new("dockerd").arg("--version").output() {
        Ok(o) if o.status.success() => {}
        _ => return Err("dockerd is not installed".to_string()),
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_dying_mid_exec_ends_the_session_cleanly() {
    if let Err(why) = usable() {
        skip::<()>(&why);
        return;
    }
    // The engine's orphans come to this process, not to an init that may not
    // reap them.
    nix::sys::prctl::set_child_subreaper(true).unwrap();
    let mut engine = Engine::new();
    engine.start().await;
    // The minimal image, imported into the private engine without a registry.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sandbox-image/build.sh");
    let out = Command::new(&script)
        .arg("--minimal")
        .env("DOCKER_HOST", format!("unix://{}", engine.socket.display()))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let state = state_dir("engine");
    let mut cfg = docker_common::config(&state);
    cfg.socket = engine.socket.clone();
    let backend = DockerBackend::connect(cfg.clone()).await.unwrap();
    let ws = Workspace::new("engine");
    let sb = std::sync::Arc::new(backend.create_sandbox(&spec(&ws.path)).await.unwrap());
    let (tx, mut rx) = mpsc::channel(4);
    let task = {
        let sb = std::sync::Arc::clone(&sb);
        tokio::spawn(async move {
            sb.exec(
                ExecRequest {
                    argv: vec!["sh".into(), "-c".into(), "echo started; sleep 305".into()],
                    cwd: None,
                    timeout: Duration::from_secs(60),
                    merge_stderr: true,
                },
                tx,
                CancellationToken::new(),
            )
            .await
        })
    };
    assert_eq!(rx.recv().await.unwrap(), Output::Stdout("started\n".into()));

    engine.crash();

    let sock = engine.socket.display().to_string();
    match task.await.unwrap() {
        Err(SandboxError::Gone(m)) => {
            assert!(m.contains(&sock) && m.contains("went away"), "{m}")
        }
        other => panic!("expected Gone, got {other:?}"),
    }
    assert!(!sb.is_alive());
    let (tx, _rx) = mpsc::channel(1);
    let again = sb
        .exec(
            ExecRequest {
                argv: vec!["true".into()],
                cwd: None,
                timeout: Duration::from_secs(10),
                merge_stderr: false,
            },
            tx,
            CancellationToken::new(),
        )
        .await;
    assert!(matches!(again, Err(SandboxError::Gone(_))), "{again:?}");
    match sb.destroy().await {
        Err(SandboxError::Unavailable(m)) => {
            assert!(m.contains(&sock) && m.contains("start the engine"), "{m}")
        }
        other => panic!("expected Unavailable from destroy, got {other:?}"),
    }
    // A new backend cannot even connect while the engine is down.
    match DockerBackend::connect(cfg.clone()).await {
        Err(SandboxError::Unavailable(m)) => assert!(m.contains(&sock), "{m}"),
        other => panic!("expected Unavailable, got {other:?}"),
    }

    // The engine comes back; the next supervisor start reaps the container.
    engine.start().await;
    let restarted = DockerBackend::connect(cfg).await.unwrap();
    let reaped = restarted.reap_orphans().await.unwrap();
    assert_eq!(reaped.len(), 1, "{reaped:?}");
    assert!(
        reaped[0].detail.contains(&sb.container_id()[..12]),
        "{reaped:?}"
    );
    assert_eq!(restarted.reap_orphans().await.unwrap(), Vec::new());
    let d = restarted.client();
    let all = d
        .list_containers(Some(
            bollard::query_parameters::ListContainersOptionsBuilder::new()
                .all(true)
                .build(),
        ))
        .await
        .unwrap();
    assert!(all.is_empty(), "{all:?}");
    drop(restarted);
    drop(backend);
    drop(sb);
    engine.stop();
    let _ = std::fs::remove_dir_all(&state);
}
