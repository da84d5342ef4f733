//! One direction of a relayed connection moved by splice(2) through a
//! pipe, so its bytes never enter the supervisor's memory
//! (docs/PERFORMANCE.md, "The network rows"). Only where nothing reads the
//! bytes once the connection is decided and its opening recorded: the
//! server's side of every connection, and the client's side of a tunnel
//! that is not plain HTTP (plain HTTP is checked request by request,
//! `crate::plain`, and keeps the buffered copy). The byte counts of the
//! close record are what each splice moved to the other side.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};

use nix::fcntl::{FcntlArg, OFlag, SpliceFFlags, fcntl, splice};
use tokio::io::Interest;
use tokio::net::TcpStream;

use crate::connect::Shared;

/// What one pipe holds (asked for; the kernel may give less, splice works
/// with any size).
const PIPE_BYTES: usize = 256 * 1024;

/// A pipe between the two sockets of one direction; it is empty whenever
/// the next read starts, so a splice into it never waits on the pipe.
pub(crate) struct Pipe {
    r: OwnedFd,
    w: OwnedFd,
}

impl Pipe {
    /// `None` when no pipe can be made (out of descriptors, say): the
    /// direction is then copied through a buffer instead.
    pub(crate) fn new() -> Option<Pipe> {
        let (r, w) = nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC).ok()?;
        let _ = fcntl(&w, FcntlArg::F_SETPIPE_SZ(PIPE_BYTES as i32));
        Some(Pipe { r, w })
    }
}

fn flags() -> SpliceFFlags {
    SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK
}

/// Moves `from`'s bytes to `to` until EOF, an error on either side, or
/// both directions idle for the bound; returns whether idleness ended it.
pub(crate) async fn pump(
    from: &TcpStream,
    to: &TcpStream,
    pipe: Pipe,
    count: &AtomicU64,
    shared: &Shared,
) -> bool {
    loop {
        let n = match tokio::time::timeout(shared.idle, fill(from, &pipe)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return false,
            Ok(Ok(n)) => n,
            Err(_) if shared.last.idle_for() >= shared.idle => return true,
            Err(_) => continue,
        };
        if drain(&pipe, to, n, count).await.is_err() {
            return false;
        }
        shared.last.touch();
    }
}

/// What `from` has, up to the pipe's size, into the (empty) pipe.
async fn fill(from: &TcpStream, pipe: &Pipe) -> io::Result<usize> {
    loop {
        from.readable().await?;
        let r = from.try_io(Interest::READABLE, || {
            splice(from, None, &pipe.w, None, PIPE_BYTES, flags()).map_err(io::Error::from)
        });
        match r {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            r => return r,
        }
    }
}

/// The pipe's `n` bytes out to `to`, counted as they go.
async fn drain(pipe: &Pipe, to: &TcpStream, mut n: usize, count: &AtomicU64) -> io::Result<()> {
    while n > 0 {
        to.writable().await?;
        let r = to.try_io(Interest::WRITABLE, || {
            splice(&pipe.r, None, to, None, n, flags()).map_err(io::Error::from)
        });
        match r {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(k) => {
                n -= k;
                count.fetch_add(k as u64, Ordering::Relaxed);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
