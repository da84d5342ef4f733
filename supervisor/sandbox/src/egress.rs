//! Egress by forwarding, never by routing (`agent mcp-gateway --allow-net`,
//! docs/THREAT_MODEL.md "MCP gateway egress").
//!
//! A sandbox keeps its own network namespace with no route out. For each
//! allowed host and port the supervisor opens a TCP listener *inside* that
//! namespace ([`listen_in`]): a dedicated thread enters the namespace
//! (`setns` through a pidfd of the sandbox's init, so a recycled pid cannot
//! be mistaken for it), brings `lo` up, adds the listener's address to `lo`
//! (a public IP literal the server connects to, as /32 or /128; a
//! `127.0.0.N` for a name needs none), binds, listens, and exits: `setns`
//! moved only that thread. The supervisor accepts on the listener, vets and
//! connects on its own side; nothing in the sandbox ever gets a route.
//!
//! What the sandbox itself is told ([`Egress`]): the ports it may connect
//! to (Landlock, native) and the names its `/etc/hosts` maps to the
//! listeners' addresses.

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, OwnedFd};

use nix::sched::CloneFlags;
use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, recv, sendto, socket,
};

use crate::SandboxError;

/// What a sandbox with egress is told; `None` in a spec: no egress at all.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Egress {
    /// TCP ports a sandboxed process may connect to (the native backend's
    /// Landlock rules; there is nothing to connect to but the listeners).
    pub ports: Vec<u16>,
    /// `(name, address)` lines of the sandbox's `/etc/hosts`: each allowed
    /// name points at its listener's address inside the sandbox.
    pub hosts: Vec<(String, IpAddr)>,
}

impl Egress {
    /// The sandbox's whole `/etc/hosts`: localhost, then one line per name.
    pub fn hosts_file(&self) -> String {
        let mut s =
            String::from("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n");
        for (name, ip) in &self.hosts {
            s.push_str(&format!("{ip}\t{name}\n"));
        }
        s
    }
}

/// Opens a listening TCP socket on `addr` in the network namespace of the
/// process behind `pidfd` (non-blocking, ready for tokio).
pub(crate) fn listen_in(pidfd: OwnedFd, addr: SocketAddr) -> Result<TcpListener, SandboxError> {
    on_netns_thread(move || enter_and_listen(&pidfd, addr))
}

/// `ip link set lo up` in the calling thread's network namespace: the
/// native helper's, right after it unshared a new one, so that loopback
/// works inside every sandbox (docs/THREAT_MODEL.md "Network").
pub(crate) fn loopback_up() -> std::io::Result<()> {
    Netlink::open()?.loopback_up()
}

/// Opens the network wall's sockets in the namespace of the process behind
/// `pidfd` and loads its rules there ([`crate::wall`]): a default route
/// through `lo`, the proxies' and the DNS stub's listeners on loopback, the
/// capture rules. All or nothing: an error leaves no listener open.
pub(crate) fn wall_in(pidfd: OwnedFd) -> Result<crate::wall::WallSockets, SandboxError> {
    on_netns_thread(move || {
        enter(&pidfd)?;
        build_wall()
    })
}

/// Runs `f` on a thread of its own, which then exits: `setns` moves only it.
fn on_netns_thread<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, SandboxError> + Send + 'static,
) -> Result<T, SandboxError> {
    let joined = std::thread::Builder::new()
        .name("tollgate-egress-netns".to_string())
        .spawn(f)
        .map_err(|e| SandboxError::Io {
            context: "start the thread that enters the sandbox's network namespace".to_string(),
            source: e,
        })?
        .join();
    match joined {
        Ok(r) => r,
        Err(_) => Err(SandboxError::Task {
            what: "the thread that enters the sandbox's network namespace".to_string(),
            error: "it panicked".to_string(),
        }),
    }
}

fn io(what: &str) -> impl FnOnce(std::io::Error) -> SandboxError {
    let context = format!("{what} in the sandbox's network namespace");
    move |e: std::io::Error| SandboxError::Io { context, source: e }
}

/// Moves the calling thread into the namespace of the process behind `pidfd`.
fn enter(pidfd: &OwnedFd) -> Result<(), SandboxError> {
    nix::sched::setns(pidfd, CloneFlags::CLONE_NEWNET).map_err(|e| {
        let hint = if e == nix::errno::Errno::EPERM {
            " (forwarding into a sandbox needs a supervisor running as root)"
        } else {
            ""
        };
        SandboxError::Refused(format!(
            "cannot enter the sandbox's network namespace: {e}{hint}"
        ))
    })
}

/// Runs on a thread already in the sandbox's namespace.
fn enter_and_listen(pidfd: &OwnedFd, addr: SocketAddr) -> Result<TcpListener, SandboxError> {
    enter(pidfd)?;
    let nl = Netlink::open().map_err(io("open a netlink socket"))?;
    nl.loopback_up().map_err(io("bring lo up"))?;
    if !addr.ip().is_loopback() {
        nl.add_loopback_address(addr.ip())
            .map_err(io(&format!("add {} to lo", addr.ip())))?;
    }
    tcp_listen(addr)
}

fn tcp_listen(addr: SocketAddr) -> Result<TcpListener, SandboxError> {
    let l = TcpListener::bind(addr).map_err(io(&format!("listen on {addr}")))?;
    l.set_nonblocking(true)
        .map_err(io(&format!("make the listener on {addr} non-blocking")))?;
    Ok(l)
}

/// The wall's steps, in order: lo up, the routes, the listeners (before
/// any rule sends a connection to them), the rules.
fn build_wall() -> Result<crate::wall::WallSockets, SandboxError> {
    use crate::wall;
    let nl = Netlink::open().map_err(io("open a netlink socket"))?;
    nl.loopback_up().map_err(io("bring lo up"))?;
    nl.default_route(IpAddr::from(std::net::Ipv4Addr::LOCALHOST))
        .map_err(io("add the default route through lo"))?;
    let [t4, t6] = wall::transparent_addrs();
    let mut transparent = vec![tcp_listen(t4)?];
    // IPv6: when the namespace has it (::1 on lo). Without it an IPv6
    // connect has no route at all, which is no weaker.
    if let Ok(l) = TcpListener::bind(t6) {
        l.set_nonblocking(true)
            .map_err(io(&format!("make the listener on {t6} non-blocking")))?;
        nl.default_route(t6.ip())
            .map_err(io("add the IPv6 default route through lo"))?;
        transparent.push(l);
    }
    let dns = std::net::UdpSocket::bind(wall::DNS_STUB)
        .map_err(io(&format!("open the DNS stub on {}", wall::DNS_STUB)))?;
    dns.set_nonblocking(true)
        .map_err(io("make the DNS stub non-blocking"))?;
    let sockets = wall::WallSockets {
        http: tcp_listen(wall::HTTP_PROXY)?,
        socks: tcp_listen(wall::SOCKS_PROXY)?,
        transparent,
        dns,
    };
    wall::load_rules().map_err(|e| {
        SandboxError::Unavailable(format!(
            "the network wall's rules cannot be loaded in the sandbox's namespace: {e}"
        ))
    })?;
    Ok(sockets)
}

/// The loopback device's index: 1 in every network namespace.
const LOOPBACK_INDEX: u32 = 1;
const RTM_NEWLINK: u16 = 16;
const RTM_NEWADDR: u16 = 20;
const RTM_NEWROUTE: u16 = 24;
const RTA_OIF: u16 = 4;
const RTA_PREFSRC: u16 = 7;
const RT_TABLE_MAIN: u8 = 254;
const RTPROT_BOOT: u8 = 3;
const RT_SCOPE_LINK: u8 = 253;
const RTN_UNICAST: u8 = 1;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_REPLACE: u16 = 0x100;
const NLM_F_CREATE: u16 = 0x400;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IFA_F_NODAD: u8 = 0x02;
const IFF_UP: u32 = 0x1;

/// A NETLINK_ROUTE socket: two requests, each answered by an ack.
struct Netlink {
    fd: OwnedFd,
}

impl Netlink {
    fn open() -> std::io::Result<Netlink> {
        let fd = socket(
            AddressFamily::Netlink,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            SockProtocol::NetlinkRoute,
        )?;
        Ok(Netlink { fd })
    }

    /// `ip link set lo up`.
    fn loopback_up(&self) -> std::io::Result<()> {
        let mut body = Vec::with_capacity(16);
        body.push(libc::AF_UNSPEC as u8);
        body.push(0);
        body.extend_from_slice(&0u16.to_ne_bytes()); // type
        body.extend_from_slice(&LOOPBACK_INDEX.to_ne_bytes());
        body.extend_from_slice(&IFF_UP.to_ne_bytes()); // flags
        body.extend_from_slice(&IFF_UP.to_ne_bytes()); // change
        self.request(RTM_NEWLINK, 0, &body)
    }

    /// `ip addr replace IP/32 dev lo` (/128 for IPv6).
    fn add_loopback_address(&self, ip: IpAddr) -> std::io::Result<()> {
        let (family, prefix, bytes): (u8, u8, Vec<u8>) = match ip {
            IpAddr::V4(v4) => (libc::AF_INET as u8, 32, v4.octets().to_vec()),
            IpAddr::V6(v6) => (libc::AF_INET6 as u8, 128, v6.octets().to_vec()),
        };
        let mut body = vec![family, prefix, IFA_F_NODAD, 0];
        body.extend_from_slice(&LOOPBACK_INDEX.to_ne_bytes());
        for kind in [IFA_LOCAL, IFA_ADDRESS] {
            attr(&mut body, kind, &bytes);
        }
        self.request(RTM_NEWADDR, NLM_F_CREATE | NLM_F_REPLACE, &body)
    }

    /// `ip route replace default dev lo src SRC` (`ip -6` for an IPv6 SRC).
    fn default_route(&self, src: IpAddr) -> std::io::Result<()> {
        let (family, bytes): (u8, Vec<u8>) = match src {
            IpAddr::V4(v4) => (libc::AF_INET as u8, v4.octets().to_vec()),
            IpAddr::V6(v6) => (libc::AF_INET6 as u8, v6.octets().to_vec()),
        };
        // struct rtmsg: family, dst_len 0 (default), src_len, tos, table,
        // protocol, scope, type, flags.
        let mut body = vec![
            family,
            0,
            0,
            0,
            RT_TABLE_MAIN,
            RTPROT_BOOT,
            RT_SCOPE_LINK,
            RTN_UNICAST,
        ];
        body.extend_from_slice(&0u32.to_ne_bytes());
        attr(&mut body, RTA_OIF, &LOOPBACK_INDEX.to_ne_bytes());
        attr(&mut body, RTA_PREFSRC, &bytes);
        self.request(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE, &body)
    }

    fn request(&self, kind: u16, flags: u16, body: &[u8]) -> std::io::Result<()> {
        let len = u32::try_from(16 + body.len())
            .map_err(|_| std::io::Error::other("netlink request too long"))?;
        let mut msg = Vec::with_capacity(16 + body.len());
        msg.extend_from_slice(&len.to_ne_bytes());
        msg.extend_from_slice(&kind.to_ne_bytes());
        msg.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK | flags).to_ne_bytes());
        msg.extend_from_slice(&1u32.to_ne_bytes()); // seq
        msg.extend_from_slice(&0u32.to_ne_bytes()); // pid: the kernel's
        msg.extend_from_slice(body);
        sendto(
            self.fd.as_raw_fd(),
            &msg,
            &NetlinkAddr::new(0, 0),
            MsgFlags::empty(),
        )?;
        let mut buf = [0u8; 4096];
        let n = recv(self.fd.as_raw_fd(), &mut buf, MsgFlags::empty())?;
        ack_status(&buf[..n])
    }
}

/// Appends one rtattr (4-byte aligned).
fn attr(body: &mut Vec<u8>, kind: u16, data: &[u8]) {
    let len = 4 + data.len();
    body.extend_from_slice(&(len as u16).to_ne_bytes());
    body.extend_from_slice(&kind.to_ne_bytes());
    body.extend_from_slice(data);
    while !body.len().is_multiple_of(4) {
        body.push(0);
    }
}

/// The error an NLMSG_ERROR ack carries (0: success).
fn ack_status(reply: &[u8]) -> std::io::Result<()> {
    let field = |at: usize, n: usize| reply.get(at..at + n);
    let kind = field(4, 2)
        .and_then(|b| b.try_into().ok())
        .map(u16::from_ne_bytes);
    let code = field(16, 4)
        .and_then(|b| b.try_into().ok())
        .map(i32::from_ne_bytes);
    match (kind, code) {
        (Some(NLMSG_ERROR), Some(0)) => Ok(()),
        (Some(NLMSG_ERROR), Some(c)) => Err(std::io::Error::from_raw_os_error(-c)),
        _ => Err(std::io::Error::other("unexpected netlink reply")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_file_maps_each_name() {
        let e = Egress {
            ports: vec![443],
            hosts: vec![("api.example".to_string(), "127.0.0.2".parse().unwrap())],
        };
        let f = e.hosts_file();
        assert!(f.starts_with("127.0.0.1\tlocalhost\n"), "{f}");
        assert!(f.ends_with("127.0.0.2\tapi.example\n"), "{f}");
    }

    #[test]
    fn acks_are_read() {
        let mut ok = vec![0u8; 36];
        ok[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        assert!(ack_status(&ok).is_ok());
        ok[16..20].copy_from_slice(&(-libc::EPERM).to_ne_bytes());
        assert_eq!(
            ack_status(&ok).unwrap_err().raw_os_error(),
            Some(libc::EPERM)
        );
        assert!(ack_status(&[0u8; 3]).is_err());
    }
}
