//! The floor under the proxied download (docs/PERFORMANCE.md, "The
//! network rows"): a bare TCP relay on the host's loopback to the test
//! host, nothing decided, nothing recorded, one thread per direction. Curl
//! on the host through it shows what one relay hop costs on this machine,
//! beside the download direct and through the sandbox's proxy.

use std::io::{Read as _, Write as _};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::thread;

use anyhow::Context as _;
use nix::fcntl::{FcntlArg, OFlag, SpliceFFlags, fcntl, splice};

/// How a relay moves the bytes.
#[derive(Debug, Clone, Copy)]
pub enum How {
    /// read(2) into a 64 KiB buffer, write(2) it out.
    Buffer,
    /// splice(2) through a pipe: the bytes never enter user space.
    Splice,
}

/// A relay listening on 127.0.0.1; it lives as long as the bench.
pub struct Relay {
    pub addr: SocketAddr,
}

impl Relay {
    /// Relays each connection to `to` until the process ends.
    pub fn start(to: SocketAddr, how: How) -> anyhow::Result<Relay> {
        let l = TcpListener::bind("127.0.0.1:0").context("binding the floor relay")?;
        let addr = l.local_addr()?;
        thread::spawn(move || {
            for c in l.incoming().flatten() {
                let Ok(u) = TcpStream::connect(to) else {
                    continue;
                };
                let (c2, u2) = match (c.try_clone(), u.try_clone()) {
                    (Ok(a), Ok(b)) => (a, b),
                    _ => continue,
                };
                thread::spawn(move || one_way(c, u, how));
                thread::spawn(move || one_way(u2, c2, how));
            }
        });
        Ok(Relay { addr })
    }
}

fn one_way(from: TcpStream, to: TcpStream, how: How) {
    let _ = match how {
        How::Buffer => by_buffer(&from, &to),
        How::Splice => by_splice(&from, &to),
    };
    let _ = to.shutdown(Shutdown::Write);
}

fn by_buffer(mut from: &TcpStream, mut to: &TcpStream) -> std::io::Result<()> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = from.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        to.write_all(&buf[..n])?;
    }
}

fn by_splice(from: &TcpStream, to: &TcpStream) -> std::io::Result<()> {
    let (r, w): (OwnedFd, OwnedFd) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    let _ = fcntl(&w, FcntlArg::F_SETPIPE_SZ(1 << 20));
    let flags = SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_MORE;
    loop {
        let mut n = splice(from, None, &w, None, 1 << 20, flags)?;
        if n == 0 {
            return Ok(());
        }
        while n > 0 {
            n -= splice(&r, None, to, None, n, flags)?;
        }
    }
}
