//! The accept loop of one socket: admits a connection, or refuses it at
//! once and says why; never spins when the process is out of descriptors.

use std::future::Future;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::Stream;
use tokio::net::{UnixListener, UnixStream};
use tokio::time::Sleep;

use super::refuse::{self, Refusal};
use super::{Bounds, Conn, Socket, Stats};

/// How long accepting pauses when the process is out of descriptors (the
/// pending connection waits in the listen queue meanwhile).
const OUT_OF_FDS_PAUSE: Duration = Duration::from_millis(20);

/// Connections handled in one poll before yielding to other tasks (a flood
/// of refusals must not starve the runtime's thread).
const BUDGET: usize = 64;

/// The stream of admitted connections of one socket, for tonic's
/// `serve_with_incoming_shutdown`. It never yields an error: failures are
/// handled here.
pub struct Incoming {
    listener: UnixListener,
    socket: Socket,
    bounds: Bounds,
    stats: Arc<Stats>,
    pause: Option<Pin<Box<Sleep>>>,
}

impl std::fmt::Debug for Incoming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Incoming")
            .field("socket", &self.socket)
            .field("bounds", &self.bounds)
            .finish_non_exhaustive()
    }
}

impl Incoming {
    pub fn new(
        listener: UnixListener,
        socket: Socket,
        bounds: Bounds,
        stats: Arc<Stats>,
    ) -> Incoming {
        Incoming {
            listener,
            socket,
            bounds,
            stats,
            pause: None,
        }
    }

    /// The connection, counted; or None when it was refused and closed.
    fn admit(&self, stream: UnixStream) -> Option<Conn> {
        match self.socket {
            Socket::Operator => Some(Conn::new(
                stream,
                self.stats.open_operator(),
                None,
                &self.stats,
            )),
            Socket::Agent => match self.agent_slot(&stream) {
                Ok(slot) => Some(Conn::new(stream, slot, Some(self.bounds.idle), &self.stats)),
                Err(why) => {
                    refuse::note(&why, self.socket, &self.stats);
                    match why.may_answer().then(|| self.stats.try_answer()).flatten() {
                        Some(slot) => Some(Conn::refusing(stream, slot, why, &self.stats)),
                        None => {
                            refuse::close_now(stream, &why);
                            None
                        }
                    }
                }
            },
        }
    }

    fn agent_slot(&self, stream: &UnixStream) -> Result<super::Slot, Refusal> {
        // The kernel gave this connection the lowest free number: at or
        // above the ceiling means every number below it is taken.
        let fd = u64::try_from(stream.as_raw_fd()).unwrap_or(u64::MAX);
        if fd >= self.bounds.fd_ceiling() {
            return Err(Refusal::FdReserve {
                limit: self.bounds.fds.soft,
                reserve: self.bounds.fd_reserve,
            });
        }
        let uid = stream
            .peer_cred()
            .map(|c| c.uid())
            .map_err(|_| Refusal::Unidentified)?;
        self.stats
            .try_open_agent(uid, self.bounds.max_per_uid)
            .ok_or(Refusal::PerUid {
                uid,
                max: self.bounds.max_per_uid,
            })
    }
}

/// Errors that mean "no descriptor or memory for one more connection now".
fn out_of_resources(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

impl Stream for Incoming {
    type Item = Result<Conn, std::io::Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let Some(p) = &mut this.pause {
            if p.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            this.pause = None;
        }
        for _ in 0..BUDGET {
            match this.listener.poll_accept(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok((stream, _))) => {
                    if let Some(conn) = this.admit(stream) {
                        return Poll::Ready(Some(Ok(conn)));
                    }
                }
                Poll::Ready(Err(e)) if out_of_resources(&e) => {
                    if let Some(more) = this.stats.out_of_fds_log.lock().may_log() {
                        tracing::warn!(
                            "{}: cannot accept a connection now: {e}; accepting pauses {}ms \
                             at a time until descriptors are free ({more} more pauses since \
                             the last message)",
                            this.socket.name(),
                            OUT_OF_FDS_PAUSE.as_millis()
                        );
                    }
                    let mut p = Box::pin(tokio::time::sleep(OUT_OF_FDS_PAUSE));
                    // Registers the wake-up (a fresh sleep is never ready).
                    let _ = p.as_mut().poll(cx);
                    this.pause = Some(p);
                    return Poll::Pending;
                }
                // The peer gave up before we accepted (ECONNABORTED) and the like.
                Poll::Ready(Err(e)) => {
                    tracing::debug!("{}: accept failed: {e}", this.socket.name());
                }
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}
