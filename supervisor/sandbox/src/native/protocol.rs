//! The control channel between the supervisor, the helper and the sandbox's
//! pid 1: one `SOCK_SEQPACKET` socketpair per sandbox, one JSON message per
//! packet, file descriptors riding along as `SCM_RIGHTS`.
//!
//! Direction supervisor -> sandbox: the [`InitConfig`] once, then [`ToInit`]
//! requests. Direction sandbox -> supervisor: [`FromInit`]. The supervisor
//! treats everything it receives as untrusted input (bounded size, parsed
//! strictly): pid 1 runs inside the sandbox.

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

use nix::sys::socket::{self, ControlMessage, ControlMessageOwned, MsgFlags};
use serde::{Deserialize, Serialize};

/// Largest packet either side sends: what a unix socket with the default
/// send buffer (about 208 KiB) accepts in one datagram. A single argv string
/// is capped by the kernel at 128 KiB (MAX_ARG_STRLEN) anyway.
pub(crate) const MAX_PACKET: usize = 200 * 1024;
/// Most fds one packet carries (stdin, stdout, stderr).
pub(crate) const MAX_FDS: usize = 3;

/// Everything the helper needs, sent as the first packet (never in argv,
/// which other host users can read in /proc).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct InitConfig {
    pub session_id: String,
    pub workspace: PathBuf,
    pub workspace_id: Option<crate::WorkspaceId>,
    pub uid: u32,
    pub gid: u32,
    pub env: Vec<(String, String)>,
    pub hidden: Vec<PathBuf>,
    /// Not root: add a user namespace mapping only our own uid/gid.
    pub rootless: bool,
    pub tmp_mb: u64,
    pub nofile: u64,
    pub fsize_mb: u64,
    pub memory_mb: u64,
    pub pids: u64,
    pub rlimit_cpu_s: u64,
    pub rlimit_nproc: u64,
    /// Paths of the workspace to attach read-only or pin, parents first
    /// (decided on the host by [`crate::host_exec::plan`]).
    pub binds: Vec<crate::host_exec::Bind>,
    /// Split git directories (absolute): each command starts under
    /// a `tollgate_exec_agent::links::Guard` of these.
    #[serde(default)]
    pub no_links_beneath: Vec<PathBuf>,
    /// Forwarded egress: Landlock lets TCP connect to these ports only, and
    /// `/etc/hosts` maps the names. `None`: every TCP connect is denied.
    #[serde(default)]
    pub egress: Option<crate::Egress>,
    /// The private home HOME names ([`crate::PrivateHome`]); `None`: /tmp.
    #[serde(default)]
    pub private_home: Option<crate::PrivateHome>,
    /// Give each command a Landlock domain of its own, logged, so the
    /// supervisor can attribute its refusals (native/audit).
    #[serde(default)]
    pub attribute: bool,
    /// The network wall is served in the sandbox's namespace: its own
    /// `/etc/resolv.conf` names the DNS stub.
    #[serde(default)]
    pub wall: bool,
    /// The CA bundle standing in for the root's (`[[secrets]]`).
    #[serde(default)]
    pub extra_ca: Option<String>,
}

/// Requests from the supervisor to the sandbox's pid 1.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum ToInit {
    /// Fork, `setsid`, run `argv` in `cwd`. Carries 3 fds: stdin, stdout, stderr.
    Exec {
        id: u64,
        argv: Vec<String>,
        cwd: PathBuf,
        /// The command's tag (15 bytes at most): its name while it takes
        /// its own Landlock domain, which the kernel's audit records of
        /// that domain then carry (`comm=`). `None`: no domain of its own.
        #[serde(default)]
        tag: Option<String>,
    },
    /// SIGKILL the process group of command `id`.
    Kill { id: u64 },
}

/// Reports from the helper and from pid 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum FromInit {
    /// From the helper: pid 1's pid in the supervisor's pid namespace.
    /// Carries one fd: a pidfd for it.
    Helper { init_pid: i32 },
    /// From pid 1: fully restricted, waiting for requests. `timings`: each
    /// setup step's end, in µs since the helper started.
    Ready {
        posture: String,
        timings: Vec<(String, u64)>,
    },
    /// From the helper or pid 1: a setup step failed; the sandbox is gone.
    SetupFailed { step: String, error: String },
    /// Command `id` ended.
    Exited {
        id: u64,
        code: Option<i32>,
        signal: Option<i32>,
    },
    /// Command `id` never started (fork failed: pids limit?).
    SpawnFailed { id: u64, error: String },
}

/// Sends one message with `fds` attached. Never raises SIGPIPE.
pub(crate) fn send<T: Serialize>(
    sock: RawFd,
    msg: &T,
    fds: &[RawFd],
    nonblocking: bool,
) -> io::Result<()> {
    let body = serde_json::to_vec(msg).map_err(io::Error::other)?;
    if body.len() > MAX_PACKET {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "control message of {} bytes exceeds {MAX_PACKET}",
                body.len()
            ),
        ));
    }
    let iov = [IoSlice::new(&body)];
    let rights = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage<'_>] = if fds.is_empty() { &[] } else { &rights };
    let mut flags = MsgFlags::MSG_NOSIGNAL;
    if nonblocking {
        flags |= MsgFlags::MSG_DONTWAIT;
    }
    loop {
        match socket::sendmsg::<()>(sock, &iov, cmsgs, flags, None) {
            Ok(_) => return Ok(()),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(io::Error::from(e)),
        }
    }
}

/// One received packet: its body and the fds that came with it.
pub(crate) struct Packet {
    pub body: Vec<u8>,
    pub fds: Vec<OwnedFd>,
}

/// Receives one packet into `buf`. `Ok(None)` on end of stream (the peer
/// closed its end).
pub(crate) fn recv(sock: RawFd, buf: &mut [u8], nonblocking: bool) -> io::Result<Option<Packet>> {
    let mut cmsg = nix::cmsg_space!([RawFd; MAX_FDS]);
    let mut flags = MsgFlags::MSG_CMSG_CLOEXEC;
    if nonblocking {
        flags |= MsgFlags::MSG_DONTWAIT;
    }
    let (len, mut fds, truncated) = loop {
        let mut iov = [IoSliceMut::new(buf)];
        match socket::recvmsg::<()>(sock, &mut iov, Some(&mut cmsg), flags) {
            Ok(msg) => {
                let mut fds = Vec::new();
                if let Ok(cmsgs) = msg.cmsgs() {
                    for c in cmsgs {
                        if let ControlMessageOwned::ScmRights(raw) = c {
                            for fd in raw {
                                // SAFETY: SCM_RIGHTS just installed these fds in
                                // our table; nothing else owns them.
                                fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
                            }
                        }
                    }
                }
                let truncated = msg
                    .flags
                    .intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC);
                break (msg.bytes, fds, truncated);
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(io::Error::from(e)),
        }
    };
    if truncated {
        fds.clear();
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "control message truncated (too large or too many fds)",
        ));
    }
    if len == 0 && fds.is_empty() {
        return Ok(None);
    }
    Ok(Some(Packet {
        body: buf[..len].to_vec(),
        fds,
    }))
}

/// Parses a packet body.
pub(crate) fn parse<T: for<'de> Deserialize<'de>>(body: &[u8]) -> io::Result<T> {
    serde_json::from_slice(body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// The supervisor's async end of a control socket.
pub(crate) struct AsyncControl {
    fd: tokio::io::unix::AsyncFd<OwnedFd>,
}

impl AsyncControl {
    pub(crate) fn new(fd: OwnedFd) -> io::Result<AsyncControl> {
        let flags = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_GETFL)?;
        let flags = nix::fcntl::OFlag::from_bits_retain(flags) | nix::fcntl::OFlag::O_NONBLOCK;
        nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_SETFL(flags))?;
        Ok(AsyncControl {
            fd: super::sys::async_fd(
                fd,
                tokio::io::Interest::READABLE | tokio::io::Interest::WRITABLE,
            )?,
        })
    }

    pub(crate) async fn send<T: Serialize>(
        &self,
        msg: &T,
        fds: &[BorrowedFd<'_>],
    ) -> io::Result<()> {
        let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
        loop {
            let mut guard = self.fd.writable().await?;
            match guard.try_io(|inner| send(inner.as_raw_fd(), msg, &raw, true)) {
                Ok(res) => return res,
                Err(_would_block) => continue,
            }
        }
    }

    pub(crate) async fn recv(&self, buf: &mut [u8]) -> io::Result<Option<Packet>> {
        loop {
            let mut guard = self.fd.readable().await?;
            match guard.try_io(|inner| recv(inner.as_raw_fd(), buf, true)) {
                Ok(res) => return res,
                Err(_would_block) => continue,
            }
        }
    }
}
