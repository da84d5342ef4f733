//! The kernel's audit netlink socket (netlink(7), `NETLINK_AUDIT`): the
//! status request (`AUDIT_GET`: enabled, backlog, lost), turning audit on
//! (`AUDIT_SET`), and the read-only multicast group every record is copied
//! to (`AUDIT_NLGRP_READLOG`, needs `CAP_AUDIT_READ`), which coexists with
//! auditd: joining it takes nothing from auditd, and auditd's presence
//! takes nothing from it.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

const NETLINK_AUDIT: i32 = 9;
const AUDIT_GET: u16 = 1000;
const AUDIT_SET: u16 = 1001;
const AUDIT_STATUS_ENABLED: u32 = 1;
const AUDIT_STATUS_BACKLOG_LIMIT: u32 = 0x10;
const AUDIT_NLGRP_READLOG: u32 = 1;
const NLMSG_ERROR: u16 = 2;
const HDR: usize = 16;
/// The multicast socket's receive buffer: room for a burst of records
/// while the reader catches up (the kernel's backlog limit drops first).
const RCVBUF: i32 = 8 << 20;

/// What `AUDIT_GET` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Status {
    pub enabled: u32,
    /// auditd's pid, 0 when none is registered.
    pub pid: u32,
    /// Records the kernel queues before it drops.
    pub backlog_limit: u32,
    /// Records the kernel dropped since boot.
    pub lost: u32,
    /// Records queued and not yet sent.
    pub backlog: u32,
}

fn socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2); the fd is owned at once.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            NETLINK_AUDIT,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn bind(fd: RawFd, groups: u32) -> io::Result<()> {
    // SAFETY: sockaddr_nl is plain data; zeroed is a valid value.
    let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    sa.nl_family = libc::AF_NETLINK as u16;
    sa.nl_groups = groups;
    // SAFETY: sa is a valid sockaddr_nl of the size given.
    let rc = unsafe {
        libc::bind(
            fd,
            (&sa as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as u32,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn set_int(fd: RawFd, opt: i32, v: i32) -> io::Result<()> {
    // SAFETY: setsockopt with an int option value.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            (&v as *const i32).cast(),
            std::mem::size_of::<i32>() as u32,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A socket for requests (status, set), answers bounded by `timeout`.
pub(crate) fn control(timeout: Duration) -> io::Result<OwnedFd> {
    let fd = socket()?;
    bind(fd.as_raw_fd(), 0)?;
    let tv = libc::timeval {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_usec: timeout.subsec_micros() as libc::suseconds_t,
    };
    // SAFETY: setsockopt with a timeval.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as u32,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// The multicast reader: non-blocking, with a large receive buffer.
pub(crate) fn multicast() -> io::Result<OwnedFd> {
    let fd = socket()?;
    let raw = fd.as_raw_fd();
    if set_int(raw, libc::SO_RCVBUFFORCE, RCVBUF).is_err() {
        set_int(raw, libc::SO_RCVBUF, RCVBUF)?;
    }
    bind(raw, AUDIT_NLGRP_READLOG)?;
    // SAFETY: fcntl on our own fd.
    let fl = unsafe { libc::fcntl(raw, libc::F_GETFL) };
    // SAFETY: as above.
    if fl < 0 || unsafe { libc::fcntl(raw, libc::F_SETFL, fl | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

fn request(fd: RawFd, kind: u16, flags: u16, payload: &[u8]) -> io::Result<()> {
    let mut msg = Vec::with_capacity(HDR + payload.len());
    msg.extend_from_slice(&((HDR + payload.len()) as u32).to_ne_bytes());
    msg.extend_from_slice(&kind.to_ne_bytes());
    msg.extend_from_slice(&flags.to_ne_bytes());
    msg.extend_from_slice(&1u32.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes());
    msg.extend_from_slice(payload);
    // SAFETY: send from a live buffer of the given length.
    let n = unsafe { libc::send(fd, msg.as_ptr().cast(), msg.len(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Reads answers until one of type `want` (or an error, or an ack when
/// `want` is `NLMSG_ERROR`); returns its payload.
fn answer(fd: RawFd, want: u16) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; 8192];
    for _ in 0..16 {
        // SAFETY: recv into a live buffer of its length.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let msg = &buf[..n as usize];
        if msg.len() < HDR {
            continue;
        }
        let kind = u16::from_ne_bytes([msg[4], msg[5]]);
        let body = &msg[HDR..];
        if kind == NLMSG_ERROR && body.len() >= 4 {
            let errno = i32::from_ne_bytes([body[0], body[1], body[2], body[3]]);
            if errno != 0 {
                return Err(io::Error::from_raw_os_error(-errno));
            }
            if want == NLMSG_ERROR {
                return Ok(Vec::new());
            }
        } else if kind == want {
            return Ok(body.to_vec());
        }
    }
    Err(io::Error::other("no answer from the kernel's audit socket"))
}

/// `AUDIT_GET` (needs `CAP_AUDIT_CONTROL`).
pub(crate) fn status(fd: &OwnedFd) -> io::Result<Status> {
    request(fd.as_raw_fd(), AUDIT_GET, libc::NLM_F_REQUEST as u16, &[])?;
    let b = answer(fd.as_raw_fd(), AUDIT_GET)?;
    let word = |i: usize| -> u32 {
        b.get(i * 4..i * 4 + 4)
            .map(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]))
            .unwrap_or(0)
    };
    if b.len() < 32 {
        return Err(io::Error::other("short audit status"));
    }
    Ok(Status {
        enabled: word(1),
        pid: word(3),
        backlog_limit: word(5),
        lost: word(6),
        backlog: word(7),
    })
}

/// Turns kernel audit on (`AUDIT_SET enabled=1`, needs `CAP_AUDIT_CONTROL`).
pub(crate) fn enable(fd: &OwnedFd) -> io::Result<()> {
    set(fd, AUDIT_STATUS_ENABLED, 1, 1)
}

/// Raises the kernel's backlog limit (`AUDIT_SET backlog_limit`).
pub(crate) fn set_backlog_limit(fd: &OwnedFd, limit: u32) -> io::Result<()> {
    set(fd, AUDIT_STATUS_BACKLOG_LIMIT, 5, limit)
}

/// `AUDIT_SET` of the one status field `mask` names (word `index`).
fn set(fd: &OwnedFd, mask: u32, index: usize, value: u32) -> io::Result<()> {
    let mut s = [0u8; 32];
    s[0..4].copy_from_slice(&mask.to_ne_bytes());
    s[index * 4..index * 4 + 4].copy_from_slice(&value.to_ne_bytes());
    let flags = (libc::NLM_F_REQUEST | libc::NLM_F_ACK) as u16;
    request(fd.as_raw_fd(), AUDIT_SET, flags, &s)?;
    answer(fd.as_raw_fd(), NLMSG_ERROR).map(|_| ())
}

/// One message read from the multicast socket.
pub(crate) enum Read {
    Message(u16, usize),
    /// Nothing more queued now.
    Empty,
    /// The socket's buffer overflowed: records were dropped.
    Overrun,
}

/// Reads one message into `buf` without waiting.
pub(crate) fn read(fd: RawFd, buf: &mut [u8]) -> io::Result<Read> {
    // SAFETY: recv into a live buffer of its length.
    let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN) => Ok(Read::Empty),
            Some(libc::ENOBUFS) => Ok(Read::Overrun),
            Some(libc::EINTR) => read(fd, buf),
            _ => Err(e),
        };
    }
    let n = n as usize;
    if n < HDR {
        return read(fd, buf);
    }
    let len = (u32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize).clamp(HDR, n);
    let kind = u16::from_ne_bytes([buf[4], buf[5]]);
    buf.copy_within(HDR..len, 0);
    Ok(Read::Message(kind, len - HDR))
}
