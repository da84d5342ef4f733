//! Refusing a connection at once, saying why, and logging it without
//! letting a flood flood the log.
//!
//! Two ways, both immediate. A connection over the per-uid cap is served a
//! moment by [`super::activity`], which answers each of its calls with the
//! refusal as a gRPC status (RESOURCE_EXHAUSTED naming the cap) and no
//! service behind it; it is closed once answered, or after [`ANSWER_FOR`].
//! At most [`MAX_ANSWERING`] are kept at once, each on a descriptor below
//! the reserve. Past that, and for want of descriptors, the refusal is
//! written as raw HTTP/2 frames (the server's empty SETTINGS, then a GOAWAY
//! with ENHANCE_YOUR_CALM and the reason as debug data) and the socket is
//! closed at once.

use std::time::{Duration, Instant};

use tokio::net::UnixStream;

use super::{Socket, Stats};

/// How long a refused connection is kept to answer its calls.
pub const ANSWER_FOR: Duration = Duration::from_secs(1);
/// Refused connections kept to answer at once, at most.
pub const MAX_ANSWERING: u64 = 32;

/// At most one warning per this interval; the rest are counted in it.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// HTTP/2 error code ENHANCE_YOUR_CALM (RFC 9113 section 7).
const ENHANCE_YOUR_CALM: u32 = 0xb;

/// Why a connection was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The uid already holds its cap of connections.
    PerUid { uid: u32, max: u32 },
    /// The connection's descriptor would eat into the reserve.
    FdReserve { limit: u64, reserve: u64 },
    /// No SO_PEERCRED: the uid cannot be counted.
    Unidentified,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::PerUid { uid, max } => write!(
                f,
                "uid {uid} already holds {max} connections to agent.sock \
                 ([supervisor] max_connections_per_uid); close one or reuse a connection"
            ),
            Refusal::FdReserve { limit, reserve } => write!(
                f,
                "agent.sock has no file descriptors left (the last {reserve} of the supervisor's \
                 {limit} are kept for operators, the audit log and sandboxes); try again shortly"
            ),
            Refusal::Unidentified => {
                write!(
                    f,
                    "cannot identify the caller of agent.sock (no SO_PEERCRED)"
                )
            }
        }
    }
}

/// The HTTP/2 frames that say no: SETTINGS (empty), then GOAWAY.
pub fn goaway_frames(reason: &str) -> Vec<u8> {
    // Keep the frame small enough for any peer's default max frame size.
    let debug = &reason.as_bytes()[..reason.len().min(1024)];
    let mut out = Vec::with_capacity(9 + 9 + 8 + debug.len());
    // SETTINGS: length 0, type 0x4, flags 0, stream 0.
    out.extend_from_slice(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]);
    let len = (8 + debug.len()) as u32;
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    // GOAWAY: type 0x7, flags 0, stream 0.
    out.extend_from_slice(&[0x7, 0, 0, 0, 0, 0]);
    // Last stream id 0: no request was processed.
    out.extend_from_slice(&0u32.to_be_bytes());
    out.extend_from_slice(&ENHANCE_YOUR_CALM.to_be_bytes());
    out.extend_from_slice(debug);
    out
}

impl Refusal {
    /// The answer a gRPC client gets to each call on a refused connection.
    pub fn status(&self) -> tonic::Status {
        match self {
            Refusal::PerUid { .. } | Refusal::FdReserve { .. } => {
                tonic::Status::resource_exhausted(self.to_string())
            }
            Refusal::Unidentified => tonic::Status::permission_denied(self.to_string()),
        }
    }

    /// Whether the refusal may be said over HTTP/2 (the connection is kept
    /// a moment, on a descriptor below the reserve), or only written and
    /// closed at once (want of descriptors).
    pub fn may_answer(&self) -> bool {
        match self {
            Refusal::PerUid { .. } | Refusal::Unidentified => true,
            Refusal::FdReserve { .. } => false,
        }
    }
}

/// Counts the refusal and logs it, at most once per [`LOG_EVERY`].
pub fn note(why: &Refusal, socket: Socket, stats: &Stats) {
    stats.count_refusal(why);
    if let Some(more) = stats.refusal_log.lock().may_log() {
        let name = socket.name();
        if more > 0 {
            tracing::warn!(
                "{name}: refused a connection: {why} ({more} more refused in the last {}s; \
                 `supervisorctl status` counts them)",
                LOG_EVERY.as_secs()
            );
        } else {
            tracing::warn!("{name}: refused a connection: {why}");
        }
    }
}

/// Writes the GOAWAY and closes the connection at once.
pub fn close_now(stream: UnixStream, why: &Refusal) {
    // A fresh socket's send buffer is empty: this never blocks, and a peer
    // that does not read loses nothing but the explanation.
    let _ = stream.try_write(&goaway_frames(&why.to_string()));
    drop(stream);
}

/// Rate-limits a warning that a flood could repeat.
#[derive(Debug, Default)]
pub struct Log {
    last: Option<Instant>,
    suppressed: u64,
}

impl Log {
    /// `Some(n)` when a line may be written now, `n` the lines held back
    /// since the last one; `None` (and counted) otherwise.
    pub fn may_log(&mut self) -> Option<u64> {
        let now = Instant::now();
        if self.last.is_some_and(|t| now.duration_since(t) < LOG_EVERY) {
            self.suppressed += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.suppressed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_goaway_frame_is_well_formed() {
        let f = goaway_frames("no");
        assert_eq!(&f[..9], &[0, 0, 0, 4, 0, 0, 0, 0, 0]);
        assert_eq!(&f[9..18], &[0, 0, 10, 7, 0, 0, 0, 0, 0]);
        assert_eq!(&f[18..22], &[0, 0, 0, 0]);
        assert_eq!(&f[22..26], &[0, 0, 0, 0xb]);
        assert_eq!(&f[26..], b"no");
    }

    #[test]
    fn the_log_says_once_per_interval_and_counts_the_rest() {
        let mut log = Log::default();
        assert_eq!(log.may_log(), Some(0));
        for _ in 0..100 {
            assert_eq!(log.may_log(), None);
        }
        assert_eq!(log.suppressed, 100);
        log.last = Some(Instant::now() - LOG_EVERY);
        assert_eq!(log.may_log(), Some(100));
    }
}
