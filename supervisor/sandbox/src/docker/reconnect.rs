//! The Docker backend as the supervisor holds it: connected on demand.
//!
//! An engine that is down when the supervisor starts, or goes away later,
//! is not the end: the next call that needs it tries again. Attempts are
//! made one at a time, and after a failure the next is not made before a
//! backoff (250 ms, doubling, at most 2 s), unless the engine's socket file
//! changed meanwhile (it appeared, or was replaced): then the very next call
//! tries at once. `refresh` (what `supervisorctl status` shows) always
//! checks the engine as it is now.
//!
//! Containers a crashed predecessor left are reaped on the first successful
//! connection, under the same lock as the attempt, so no sandbox is created
//! on the engine before they are gone.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{DockerBackend, DockerConfig, unreachable, unreachable_because};
use crate::{Backend, BackendKind, Reaped, Sandbox, SandboxError, SandboxSpec, Strength};

/// The first wait after a failed attempt; it doubles with each failure.
pub const RETRY_MIN: Duration = Duration::from_millis(250);
/// The longest wait between attempts.
pub const RETRY_MAX: Duration = Duration::from_secs(2);
/// The longest one attempt (connect, version, info, image) may take.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest a liveness check of a connected engine may take.
const PING_TIMEOUT: Duration = Duration::from_secs(3);

/// Told about containers reaped on a connection made after start.
pub type OnReaped = Arc<dyn Fn(Vec<Reaped>) + Send + Sync>;

/// Identity of the socket file: (device, inode), None when absent.
type SocketId = Option<(u64, u64)>;

fn socket_id(path: &Path) -> SocketId {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

enum Link {
    Up(Arc<DockerBackend>),
    Down(Down),
}

struct Down {
    /// Why the last attempt failed (without the "sandbox unavailable" kind).
    reason: String,
    failures: u32,
    retry_at: Instant,
    socket: SocketId,
}

fn backoff(failures: u32) -> Duration {
    let shift = failures.saturating_sub(1).min(16);
    RETRY_MIN.saturating_mul(1 << shift).min(RETRY_MAX)
}

/// A Docker backend that connects (again) when a call needs the engine.
pub struct Reconnecting {
    cfg: DockerConfig,
    link: tokio::sync::Mutex<Link>,
    /// The strength as last seen, for the synchronous [`Backend::strength`].
    known: Mutex<Strength>,
    reaped: AtomicBool,
    /// False during the attempt made at start, whose reaping the caller
    /// does itself ([`Backend::reap_orphans`]).
    reap_on_connect: AtomicBool,
    on_reaped: OnReaped,
    /// The image's shell, learned from the last sandbox built.
    shell: Mutex<Option<crate::Shell>>,
}

impl std::fmt::Debug for Reconnecting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reconnecting")
            .field("socket", &self.cfg.socket)
            .field("strength", &self.strength())
            .finish_non_exhaustive()
    }
}

fn unavailable(reason: &str) -> Strength {
    Strength {
        backend: BackendKind::Docker,
        summary: "docker backend unavailable".to_string(),
        missing: vec![reason.to_string()],
    }
}

impl Reconnecting {
    /// Tries the engine once now; whatever the outcome, the backend is
    /// returned (a down engine is tried again by the next call).
    pub async fn connect(cfg: DockerConfig, on_reaped: OnReaped) -> Reconnecting {
        let now = Instant::now();
        let r = Reconnecting {
            link: tokio::sync::Mutex::new(Link::Down(Down {
                reason: "not tried yet".to_string(),
                failures: 0,
                retry_at: now,
                socket: None,
            })),
            known: Mutex::new(unavailable("not tried yet")),
            reaped: AtomicBool::new(false),
            reap_on_connect: AtomicBool::new(false),
            on_reaped,
            cfg,
            shell: Mutex::new(None),
        };
        let _ = r.up(true).await;
        r.reap_on_connect.store(true, Ordering::SeqCst);
        r
    }

    pub fn config(&self) -> &DockerConfig {
        &self.cfg
    }

    fn set_known(&self, s: Strength) {
        *self.known.lock().unwrap_or_else(|e| e.into_inner()) = s;
    }

    /// The connected backend; connects first when the engine was down and
    /// an attempt is due (`force`: regardless of the backoff).
    async fn up(&self, force: bool) -> Result<Arc<DockerBackend>, SandboxError> {
        let mut link = self.link.lock().await;
        let (failures, was_down) = match &*link {
            Link::Up(b) => return Ok(Arc::clone(b)),
            Link::Down(d) => {
                let socket = socket_id(&self.cfg.socket);
                let now = Instant::now();
                if !force && socket == d.socket && now < d.retry_at {
                    return Err(SandboxError::Unavailable(d.reason.clone()));
                }
                (d.failures, d.failures > 0)
            }
        };
        let socket = socket_id(&self.cfg.socket);
        let attempt =
            tokio::time::timeout(ATTEMPT_TIMEOUT, DockerBackend::connect(self.cfg.clone()))
                .await
                .unwrap_or_else(|_| {
                    Err(unreachable_because(
                        &self.cfg.socket,
                        format!("no answer within {}s", ATTEMPT_TIMEOUT.as_secs()),
                    ))
                });
        match attempt {
            Ok(b) => {
                let b = Arc::new(b);
                if was_down {
                    tracing::info!(socket = %self.cfg.socket.display(), "docker engine reachable again");
                }
                // Before any sandbox is made on this engine: what a crashed
                // predecessor left (only once; later reconnections find our own).
                if self.reap_on_connect.load(Ordering::SeqCst)
                    && !self.reaped.load(Ordering::SeqCst)
                {
                    match b.reap_orphans().await {
                        Ok(r) => {
                            self.reaped.store(true, Ordering::SeqCst);
                            if !r.is_empty() {
                                (self.on_reaped)(r);
                            }
                        }
                        Err(e) => tracing::warn!(error = %e, "reaping orphaned containers failed"),
                    }
                }
                self.set_known(b.strength());
                *link = Link::Up(Arc::clone(&b));
                Ok(b)
            }
            Err(e) => {
                let failures = failures.saturating_add(1);
                let now = Instant::now();
                let reason = e.detail();
                self.set_known(unavailable(&reason));
                *link = Link::Down(Down {
                    reason,
                    failures,
                    retry_at: now + backoff(failures),
                    socket,
                });
                Err(e)
            }
        }
    }

    /// Marks the engine down when `b` (still the current link) no longer
    /// answers; the next call reconnects.
    async fn check(&self, b: &Arc<DockerBackend>) -> Option<String> {
        let ping = tokio::time::timeout(PING_TIMEOUT, b.client().ping()).await;
        let reason = match ping {
            Ok(Ok(_)) => return None,
            Ok(Err(e)) => unreachable(&self.cfg.socket, &e).detail(),
            Err(_) => unreachable_because(
                &self.cfg.socket,
                format!("no answer to a ping within {}s", PING_TIMEOUT.as_secs()),
            )
            .detail(),
        };
        let mut link = self.link.lock().await;
        if matches!(&*link, Link::Up(cur) if Arc::ptr_eq(cur, b)) {
            tracing::warn!(socket = %self.cfg.socket.display(), "docker engine went away");
            let now = Instant::now();
            self.set_known(unavailable(&reason));
            *link = Link::Down(Down {
                reason: reason.clone(),
                failures: 0,
                retry_at: now,
                socket: socket_id(&self.cfg.socket),
            });
        }
        Some(reason)
    }
}

#[async_trait::async_trait]
impl Backend for Reconnecting {
    fn kind(&self) -> BackendKind {
        BackendKind::Docker
    }

    fn strength(&self) -> Strength {
        self.known.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    async fn create(&self, spec: &SandboxSpec) -> Result<Arc<dyn Sandbox>, SandboxError> {
        let b = self.up(false).await?;
        match b.create(spec).await {
            Err(SandboxError::Unavailable(r)) => {
                // The engine may have gone: find out now, so the next call
                // reconnects instead of failing the same way.
                let _ = self.check(&b).await;
                Err(SandboxError::Unavailable(r))
            }
            Ok(sb) => {
                *self.shell.lock().unwrap_or_else(|e| e.into_inner()) = Some(sb.shell());
                Ok(sb)
            }
            other => other,
        }
    }

    fn shell(&self) -> Option<crate::Shell> {
        *self.shell.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn reap_orphans(&self) -> Result<Vec<Reaped>, SandboxError> {
        let link = self.link.lock().await;
        match &*link {
            Link::Up(b) if !self.reaped.load(Ordering::SeqCst) => {
                let r = b.reap_orphans().await?;
                self.reaped.store(true, Ordering::SeqCst);
                Ok(r)
            }
            // Down: the first connection reaps (and reports through on_reaped).
            Link::Up(_) | Link::Down(_) => Ok(Vec::new()),
        }
    }

    async fn refresh(&self) -> Strength {
        let current = match &*self.link.lock().await {
            Link::Up(b) => Some(Arc::clone(b)),
            Link::Down(_) => None,
        };
        match current {
            Some(b) => match self.check(&b).await {
                None => b.strength(),
                Some(reason) => unavailable(&reason),
            },
            None => match self.up(true).await {
                Ok(b) => b.strength(),
                Err(e) => unavailable(&e.detail()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_and_is_bounded() {
        assert_eq!(backoff(1), RETRY_MIN);
        assert_eq!(backoff(2), RETRY_MIN * 2);
        assert_eq!(backoff(3), RETRY_MIN * 4);
        assert_eq!(backoff(4), RETRY_MAX);
        assert_eq!(backoff(u32::MAX), RETRY_MAX);
    }
}
