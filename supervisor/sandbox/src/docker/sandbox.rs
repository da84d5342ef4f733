//! One session container as a live sandbox: its state, what watches it, and
//! how it ends (the kill switch, a removal from outside, the engine going
//! away, the supervisor going away).
//!
//! Commands run through the container's resident exec agent over one
//! connection ([`super::agent`], [`super::exec`]); the engine is only needed
//! to create, watch and remove the container. The connection is the
//! container's lifeline: when it closes (the sandbox is destroyed or dropped,
//! the supervisor dies, the engine goes away), the agent, pid 1, kills
//! everything and exits, and the container stops.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bollard::Docker;
use bollard::query_parameters::{RemoveContainerOptionsBuilder, WaitContainerOptionsBuilder};
use futures_util::StreamExt;

use super::agent::AgentLink;
use super::errors::{is_engine_gone, status_code};
use super::leftover::{self, Leftover, Probe};
use crate::SandboxError;

/// How long a container whose agent went away gets to be reported stopped by
/// the engine (pid 1's exit reaches the engine a moment after the socket closes).
const SETTLE: Duration = Duration::from_secs(2);
const SETTLE_STEP: Duration = Duration::from_millis(20);

/// How long a removal someone else started may take before destroy gives up
/// (and the container's placeholders wait for the next start's reaper).
const REMOVAL_WAIT: Duration = Duration::from_secs(15);

/// One session's container.
pub struct DockerSandbox {
    pub(super) docker: Docker,
    pub(super) id: String,
    pub(super) name: String,
    pub(super) session_id: String,
    pub(super) workspace: PathBuf,
    /// The session's environment: every command gets exactly this.
    pub(super) env: Vec<(String, String)>,
    /// The engine's socket (for messages).
    pub(super) socket: PathBuf,
    pub(super) alive: Arc<AtomicBool>,
    /// Set by the watcher when the engine itself went away.
    pub(super) engine_gone: Arc<AtomicBool>,
    pub(super) destroyed: AtomicBool,
    pub(super) watcher: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    pub(super) backstop_grace: Duration,
    pub(super) kill_grace: Duration,
    pub(super) link: Arc<AgentLink>,
    /// What the agent reported about itself, as checked.
    pub(super) posture: String,
    /// A pidfd on the container's init (the agent), when the engine is on
    /// this host.
    pub(super) init: Option<std::os::fd::OwnedFd>,
    /// The placeholders the container's mounts hold; released once the
    /// container is removed.
    pub(super) reservation: std::sync::Mutex<Option<crate::host_exec::reserve::Reservation>>,
    /// The image's shell ([`crate::Shell`]), found when the container started.
    pub(super) shell: crate::Shell,
}

impl std::fmt::Debug for DockerSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerSandbox")
            .field("container", &self.name)
            .field("id", &short(&self.id))
            .field("session", &self.session_id)
            .field("alive", &self.is_alive())
            .finish()
    }
}

pub(super) fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

impl DockerSandbox {
    /// The container's id.
    pub fn container_id(&self) -> &str {
        &self.id
    }

    /// The container's name (`tollgate-<session>`).
    pub fn container_name(&self) -> &str {
        &self.name
    }

    /// True when the kill switch can kill the container's init directly
    /// (engine on this host), not only through the engine.
    pub fn has_fast_kill(&self) -> bool {
        self.init.is_some()
    }

    /// What the resident agent reported about itself when it started (and
    /// the backend checked): pid 1, the session's uid and gid, no_new_privs,
    /// seccomp, no capabilities.
    pub fn agent_posture(&self) -> &str {
        &self.posture
    }

    /// The image's shell asked inside the container, when its root cannot
    /// be looked at from here (an engine on another host): bash runs
    /// `true`, or the image has none.
    pub(super) async fn probe_shell(&self) -> crate::Shell {
        use crate::Sandbox as _;
        for path in ["/bin/bash", "/usr/bin/bash"] {
            let (tx, _rx) = tokio::sync::mpsc::channel(4);
            let req = crate::ExecRequest {
                argv: vec![path.to_string(), "-c".to_string(), "true".to_string()],
                cwd: None,
                timeout: Duration::from_secs(10),
                merge_stderr: true,
            };
            let ran = self
                .exec(req, tx, tokio_util::sync::CancellationToken::new())
                .await;
            if ran.is_ok_and(|o| o.exit_code == Some(0)) {
                return crate::Shell::Bash(path);
            }
        }
        crate::Shell::Sh
    }

    pub(super) fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst) && !self.link.is_closed()
    }

    /// Marks the sandbox dead when the container stops, whoever stopped it,
    /// or when the engine goes away; either way the agent's connection is
    /// closed, so nothing of the container keeps running unwatched.
    pub(super) fn watch(&self) {
        let docker = self.docker.clone();
        let id = self.id.clone();
        let alive = Arc::clone(&self.alive);
        let engine_gone = Arc::clone(&self.engine_gone);
        let shared = Arc::clone(&self.link.shared);
        let handle = tokio::spawn(async move {
            let opts = WaitContainerOptionsBuilder::new()
                .condition("not-running")
                .build();
            let mut s = docker.wait_container(&id, Some(opts));
            tokio::select! {
                item = s.next() => {
                    if let Some(Err(e)) = &item
                        && is_engine_gone(e)
                    {
                        engine_gone.store(true, Ordering::SeqCst);
                    }
                }
                // The connection ended first: the container is on its way down.
                _ = shared.closed.cancelled() => {}
            }
            alive.store(false, Ordering::SeqCst);
            shared.close();
        });
        if let Ok(mut w) = self.watcher.lock() {
            *w = Some(handle);
        }
    }

    fn stop_watching(&self) {
        if let Ok(mut w) = self.watcher.lock()
            && let Some(h) = w.take()
        {
            h.abort();
        }
    }

    pub(super) fn engine_gone_error(
        &self,
        during: &str,
        e: &dyn std::fmt::Display,
    ) -> SandboxError {
        self.alive.store(false, Ordering::SeqCst);
        SandboxError::Gone(format!(
            "docker engine at {} went away during {during} in container {}: {e}; \
             its leftovers are reaped at the next supervisor start",
            self.socket.display(),
            self.name
        ))
    }

    /// Is the container still there and running? `Err(Gone)` when it is not.
    pub(super) async fn check_container(&self, what: &str) -> Result<(), SandboxError> {
        match self.docker.inspect_container(&self.id, None).await {
            Ok(info) => {
                let state = info.state.unwrap_or_default();
                if state.running == Some(true) {
                    Ok(())
                } else {
                    self.alive.store(false, Ordering::SeqCst);
                    Err(SandboxError::Gone(format!(
                        "container {} was stopped from outside during {what} (status {}, exit code {})",
                        self.name,
                        state.status.map(|s| s.to_string()).unwrap_or_default(),
                        state.exit_code.unwrap_or(-1)
                    )))
                }
            }
            Err(e) if status_code(&e) == Some(404) => {
                self.alive.store(false, Ordering::SeqCst);
                Err(SandboxError::Gone(format!(
                    "container {} was removed from outside during {what}",
                    self.name
                )))
            }
            Err(e) if is_engine_gone(&e) => Err(self.engine_gone_error(what, &e)),
            Err(e) => Err(SandboxError::Engine {
                doing: format!("inspecting container {}", self.name),
                error: e.to_string(),
            }),
        }
    }

    /// Why the agent's connection is gone, once it is: destroyed by us, the
    /// engine gone, the agent refused for breaking the protocol, or the
    /// container stopped or removed from outside. A container still running
    /// without its agent is destroyed.
    pub(super) async fn gone_error(&self, what: &str) -> SandboxError {
        self.alive.store(false, Ordering::SeqCst);
        if self.destroyed.load(Ordering::SeqCst) {
            return SandboxError::Gone(format!(
                "container {} was destroyed during {what} (the kill switch, or its session ended)",
                self.name
            ));
        }
        if self.engine_gone.load(Ordering::SeqCst) {
            return self.engine_gone_error(what, &"the connection to it broke");
        }
        if let Some(why) = self.link.shared.broken() {
            let _ = self.destroy_now().await;
            return SandboxError::Gone(format!(
                "the exec agent of container {} broke the protocol during {what} ({why}); \
                 the container was destroyed",
                self.name
            ));
        }
        let deadline = tokio::time::Instant::now() + SETTLE;
        loop {
            if let Err(e) = self.check_container(what).await {
                return e;
            }
            if tokio::time::Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(SETTLE_STEP).await;
        }
        let _ = self.destroy_now().await;
        SandboxError::Gone(format!(
            "the exec agent of container {} went away during {what} while the container still ran; \
             the container was destroyed",
            self.name
        ))
    }

    /// Kills and removes the container: the kill switch.
    async fn remove(&self) -> Result<(), SandboxError> {
        let opts = RemoveContainerOptionsBuilder::new()
            .force(true)
            .v(true)
            .build();
        match self.docker.remove_container(&self.id, Some(opts)).await {
            Ok(()) => Ok(()),
            Err(e) if status_code(&e) == Some(404) => Ok(()),
            // "removal already in progress": someone else (a concurrent
            // destroy, the engine) is removing it; wait until it is gone
            // (seconds on a loaded host: until then its placeholders stay).
            Err(e) if status_code(&e) == Some(409) => {
                let deadline = tokio::time::Instant::now() + REMOVAL_WAIT;
                while tokio::time::Instant::now() < deadline {
                    match self.docker.inspect_container(&self.id, None).await {
                        Err(e) if status_code(&e) == Some(404) => return Ok(()),
                        _ => tokio::time::sleep(Duration::from_millis(20)).await,
                    }
                }
                Err(SandboxError::StillRemoving {
                    name: self.name.clone(),
                    secs: REMOVAL_WAIT.as_secs(),
                })
            }
            Err(e) if is_engine_gone(&e) => Err(SandboxError::Unavailable(format!(
                "cannot remove container {}: docker engine at {} is not reachable: {e}; \
                 start the engine (dockerd): leftovers are reaped at the next supervisor start",
                self.name,
                self.socket.display()
            ))),
            Err(e) => Err(SandboxError::Engine {
                doing: format!("removing container {}", self.name),
                error: e.to_string(),
            }),
        }
    }

    /// The kill switch: SIGKILL to the container's init through its pidfd
    /// (the kernel then kills the whole pid namespace) and waits for it, ends
    /// the agent's connection, then removes the container through the engine.
    pub(super) async fn destroy_now(&self) -> Result<(), SandboxError> {
        self.alive.store(false, Ordering::SeqCst);
        self.destroyed.store(true, Ordering::SeqCst);
        if let Some(fd) = self.init.as_ref().and_then(|f| f.try_clone().ok())
            && super::pidfd::kill(&fd)
        {
            let _ = tokio::task::spawn_blocking(move || {
                super::pidfd::wait_exit(&fd, Duration::from_secs(2))
            })
            .await;
            // The engine learns of the exit a moment later. A forced removal
            // in between makes it kill a container that is no longer running,
            // which fails, and Docker 20.10 then leaves the container marked
            // "Removal In Progress" for good (its placeholders with it).
            self.settle_stopped().await;
        }
        self.link.shared.close();
        self.stop_watching();
        let removed = self.remove().await;
        match &removed {
            Ok(()) => drop(self.take_reservation()),
            // Tried again until the engine confirms it gone; the lease
            // follows (docker/leftover.rs).
            Err(e) => {
                if let Some(r) = self.take_reservation() {
                    let left = Leftover::new(&self.name, r, 1, e.to_string());
                    leftover::follow_on_thread(self.docker.clone(), self.id.clone(), left);
                }
            }
        }
        removed
    }

    /// Waits (up to [`SETTLE`]) until the engine reports the container not
    /// running, or gone.
    async fn settle_stopped(&self) {
        let deadline = tokio::time::Instant::now() + SETTLE;
        while tokio::time::Instant::now() < deadline {
            match self.docker.inspect_container(&self.id, None).await {
                Ok(info) if info.state.as_ref().and_then(|s| s.running) == Some(true) => {
                    tokio::time::sleep(SETTLE_STEP).await;
                }
                _ => return,
            }
        }
    }

    fn take_reservation(&self) -> Option<crate::host_exec::reserve::Reservation> {
        self.reservation
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

impl Drop for DockerSandbox {
    fn drop(&mut self) {
        self.stop_watching();
        if self.destroyed.load(Ordering::SeqCst) {
            self.link.shared.close();
            // destroy() released the placeholders when it removed the
            // container, or handed them to a retry when it could not; a
            // destroy cut short leaves them here: retried as well.
            if let Some(r) = self.take_reservation() {
                let left = Leftover::new(&self.name, r, 0, "its destroy was cut short".into());
                leftover::follow_on_thread(self.docker.clone(), self.id.clone(), left);
            }
            return;
        }
        // Dropped without destroy(): remove the container anyway, on a thread
        // of its own so that neither a runtime shutting down nor a blocking
        // caller keeps it alive. The agent's connection is closed after the
        // removal (closing it first would race the engine's kill with the
        // container's own stop), or when the thread cannot run: either way
        // the agent then takes the container's processes down. The next
        // supervisor start reaps whatever is left.
        let docker = self.docker.clone();
        let id = self.id.clone();
        let name = self.name.clone();
        let link = Arc::clone(&self.link);
        let reservation = self.take_reservation();
        let spawned = std::thread::Builder::new()
            .name("tollgate-docker-drop".to_string())
            .spawn(move || {
                if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    let removed = rt.block_on(async {
                        let mut last = Probe::Remains("not tried".to_string());
                        for _ in 0..50 {
                            last = leftover::remove_once(&docker, &id).await;
                            if last == Probe::Gone {
                                break;
                            }
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        last
                    });
                    link.shared.close();
                    match (removed, reservation) {
                        (Probe::Gone, r) => drop(r),
                        // Still there: tried again, its lease following.
                        (Probe::Remains(e), Some(r)) => {
                            let left = Leftover::new(&name, r, 50, e);
                            rt.block_on(leftover::follow(left, leftover::SCHEDULE, || {
                                leftover::remove_once(&docker, &id)
                            }));
                        }
                        (Probe::Remains(_), None) => {}
                    }
                    return;
                }
                link.shared.close();
            });
        if spawned.is_err() {
            self.link.shared.close();
        }
    }
}
