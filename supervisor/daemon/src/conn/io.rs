//! One accepted connection: the socket, its place in the counts, and the
//! idle timer.
//!
//! The idle check lives in `poll_read`, which the HTTP/2 server polls for as
//! long as the connection lives. When nothing is in flight and the
//! connection has been quiet for the timeout, the read reports end of
//! stream: the server drops the connection and its descriptor is free.
//! Nothing is cut off, since nothing is in flight; a client that comes
//! back later reconnects (tonic's channels do so by themselves).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;
use tokio::time::Sleep;
use tonic::transport::server::{Connected, UdsConnectInfo};

use super::activity::Activity;
use super::refuse::{ANSWER_FOR, Refusal};
use super::{Slot, Stats};

/// What a request learns about its connection (in its extensions).
#[derive(Debug, Clone)]
pub struct ConnInfo {
    /// Peer address and SO_PEERCRED, as tonic gives them for a Unix socket.
    pub uds: UdsConnectInfo,
    pub activity: Arc<Activity>,
    /// Set on a connection kept only to say why it was refused: every call
    /// gets this answer and reaches no service.
    pub refused: Option<Arc<Refusal>>,
}

/// The idle timer of one connection.
struct Idle {
    timeout: Duration,
    sleep: Pin<Box<Sleep>>,
    stats: Arc<Stats>,
}

impl Idle {
    /// True once the connection has been quiet for the timeout; otherwise
    /// arms the timer for the moment it would be.
    fn expired(&mut self, activity: &Activity, cx: &mut Context<'_>) -> bool {
        // Registered first, so the end of a request in between still wakes us.
        activity.reader.register(cx.waker());
        if activity.in_flight() > 0 {
            return false;
        }
        let deadline = activity.idle_since() + self.timeout;
        if std::time::Instant::now() >= deadline {
            return true;
        }
        self.sleep
            .as_mut()
            .reset(tokio::time::Instant::from_std(deadline));
        // Pending registers the timer's wake-up; ready means the deadline
        // passed between the two reads of the clock.
        self.sleep.as_mut().poll(cx).is_ready()
    }
}

/// An accepted connection.
pub struct Conn {
    stream: UnixStream,
    info: ConnInfo,
    idle: Option<Idle>,
    closed_idle: bool,
    _slot: Slot,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn")
            .field("peer", &self.info.uds.peer_cred)
            .field("closed_idle", &self.closed_idle)
            .finish_non_exhaustive()
    }
}

impl Conn {
    /// `idle`: close when quiet this long (agent.sock); None never closes.
    pub(super) fn new(
        stream: UnixStream,
        slot: Slot,
        idle: Option<Duration>,
        stats: &Arc<Stats>,
    ) -> Conn {
        let uds = UdsConnectInfo {
            peer_addr: stream.peer_addr().ok().map(Arc::new),
            peer_cred: stream.peer_cred().ok(),
        };
        let idle = idle.map(|timeout| Idle {
            timeout,
            sleep: Box::pin(tokio::time::sleep(timeout)),
            stats: Arc::clone(stats),
        });
        Conn {
            stream,
            info: ConnInfo {
                uds,
                activity: Arc::new(Activity::default()),
                refused: None,
            },
            idle,
            closed_idle: false,
            _slot: slot,
        }
    }
}

impl Conn {
    /// A refused connection, kept to answer its calls with the refusal
    /// until it has been quiet for [`ANSWER_FOR`].
    pub(super) fn refusing(
        stream: UnixStream,
        slot: Slot,
        why: Refusal,
        stats: &Arc<Stats>,
    ) -> Conn {
        let mut c = Conn::new(stream, slot, Some(ANSWER_FOR), stats);
        c.info.refused = Some(Arc::new(why));
        c
    }
}

impl Connected for Conn {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        self.info.clone()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.closed_idle {
            return Poll::Ready(Ok(()));
        }
        if let Poll::Ready(r) = Pin::new(&mut this.stream).poll_read(cx, buf) {
            return Poll::Ready(r);
        }
        if let Some(idle) = &mut this.idle
            && idle.expired(&this.info.activity, cx)
        {
            this.closed_idle = true;
            idle.stats.count_idle_close();
            tracing::debug!(peer = ?this.info.uds.peer_cred, "closing an idle connection");
            // End of stream: the server lets the connection go.
            return Poll::Ready(Ok(()));
        }
        Poll::Pending
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}
