//! The supervisor's own host addresses (docs/THREAT_MODEL.md, "The walls, by
//! layer"), kept fresh.
//!
//! [`read_host_addrs`] (tollgate-policy's `host` feature) lists every
//! address of every interface of the supervisor's network namespace.
//!
//! [`HostAddrWatch`] reads them at start, then re-reads them:
//! - whenever the kernel announces an address change: a NETLINK_ROUTE
//!   socket subscribed to RTMGRP_IPV4_IFADDR and RTMGRP_IPV6_IFADDR wakes a
//!   thread, which drains the queued notifications and reads the whole set
//!   again (a notification is only a trigger; the set is always re-read
//!   whole, so an overrun socket (ENOBUFS) loses nothing);
//! - every 30 s as a backstop, should a notification ever be missed;
//! - every second instead, if the netlink socket cannot be opened (then
//!   the supervisor's log says so);
//! - and right before every webfetch connection (the connector check, see
//!   `pep.rs`), so an address added between the decision and the connect is
//!   caught too.
//!
//! A read that fails replaces the set with the error: every fetch is then
//! refused until a read succeeds (fail closed). Each change is published on
//! a watch channel; the server records it (`host_addresses` in the
//! supervisor's audit log).

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Weak};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::socket::{
    AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, bind, recv, setsockopt,
    socket, sockopt,
};
use nix::sys::time::{TimeVal, TimeValLike};
use tokio::sync::watch;
use tollgate_audit::Event;
use tollgate_audit::event::HostAddresses;
use tollgate_policy::host::{Snapshot, read_host_addrs};
use tollgate_policy::{HostAddrs, HostAddrsError};

/// The backstop: a full re-read at least this often.
pub const BACKSTOP: Duration = Duration::from_secs(30);
/// The re-read period when netlink notifications are unavailable.
pub const POLL: Duration = Duration::from_secs(1);

/// What made the supervisor read its addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// The read at start.
    Start,
    /// An address notification from the kernel.
    Netlink,
    /// The backstop (or, without netlink, the poll).
    Periodic,
    /// The live read right before a webfetch connects.
    Connector,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Start => "start",
            Trigger::Netlink => "netlink",
            Trigger::Periodic => "periodic",
            Trigger::Connector => "connector",
        }
    }
}

/// One published state: the set and what made it be read.
#[derive(Debug, Clone)]
pub struct Published {
    pub snapshot: Snapshot,
    pub trigger: Trigger,
}

/// The host's addresses, kept fresh by a thread of its own.
#[derive(Debug)]
pub struct HostAddrWatch {
    tx: watch::Sender<Published>,
}

impl HostAddrWatch {
    /// Reads the addresses now and starts the thread that keeps them fresh.
    /// The thread ends (within [`BACKSTOP`]) once the watch is dropped.
    pub fn start() -> Arc<HostAddrWatch> {
        let w = Arc::new(HostAddrWatch::with(read_host_addrs()));
        let weak = Arc::downgrade(&w);
        let spawned = std::thread::Builder::new()
            .name("host-addrs".to_string())
            .spawn(move || keep_fresh(&weak));
        if let Err(e) = spawned {
            // No thread, no refresh: refuse every fetch rather than judge
            // against a set that will go stale.
            w.publish(
                Err(HostAddrsError(format!(
                    "cannot start the thread that keeps them fresh: {e}"
                ))),
                Trigger::Start,
            );
        }
        w
    }

    /// A watch holding `first` and no thread (tests, `policy test`).
    pub fn with(first: Result<HostAddrs, HostAddrsError>) -> HostAddrWatch {
        let (tx, _) = watch::channel(Published {
            snapshot: Arc::new(first),
            trigger: Trigger::Start,
        });
        HostAddrWatch { tx }
    }

    /// The set as last read.
    pub fn snapshot(&self) -> Snapshot {
        Arc::clone(&self.tx.borrow().snapshot)
    }

    /// Changes, starting with the current state.
    pub fn subscribe(&self) -> watch::Receiver<Published> {
        self.tx.subscribe()
    }

    /// Reads the set now (publishing it if it changed) and returns it.
    pub fn read_now(&self, trigger: Trigger) -> Snapshot {
        self.publish(read_host_addrs(), trigger)
    }

    /// Replaces the set when `new` differs from it; returns the current one.
    fn publish(&self, new: Result<HostAddrs, HostAddrsError>, trigger: Trigger) -> Snapshot {
        let mut current = None;
        self.tx.send_if_modified(|p| {
            if *p.snapshot == new {
                current = Some(Arc::clone(&p.snapshot));
                return false;
            }
            let snapshot = Arc::new(new.clone());
            current = Some(Arc::clone(&snapshot));
            *p = Published { snapshot, trigger };
            true
        });
        current.unwrap_or_else(|| Arc::new(new))
    }
}

/// The `host_addresses` audit record of a published state.
pub fn record(p: &Published) -> Event {
    let trigger = p.trigger.as_str().to_string();
    Event::HostAddresses(match p.snapshot.as_ref() {
        Ok(set) => HostAddresses {
            trigger,
            count: Some(set.len() as u64),
            addresses: Some(
                set.iter()
                    .map(|(ip, interface)| format!("{ip} {interface}"))
                    .collect(),
            ),
            error: None,
            effect: None,
        },
        Err(e) => HostAddresses {
            trigger,
            count: None,
            addresses: None,
            error: Some(e.to_string()),
            effect: Some("every webfetch is refused until the addresses can be read".to_string()),
        },
    })
}

/// The thread: netlink notifications and the backstop, or polling.
fn keep_fresh(watch: &Weak<HostAddrWatch>) {
    let socket = match address_notifications() {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "no netlink address notifications; re-reading the host's addresses every second instead");
            return poll(watch);
        }
    };
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let trigger = match recv(socket.as_raw_fd(), &mut buf, MsgFlags::empty()) {
            Ok(_) | Err(Errno::ENOBUFS) => Trigger::Netlink,
            Err(Errno::EAGAIN) => Trigger::Periodic,
            Err(Errno::EINTR) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "reading netlink address notifications failed; re-reading the host's addresses");
                std::thread::sleep(POLL);
                Trigger::Periodic
            }
        };
        drain(&socket, &mut buf);
        let Some(w) = watch.upgrade() else { return };
        w.read_now(trigger);
    }
}

fn poll(watch: &Weak<HostAddrWatch>) {
    loop {
        std::thread::sleep(POLL);
        let Some(w) = watch.upgrade() else { return };
        w.read_now(Trigger::Periodic);
    }
}

/// A NETLINK_ROUTE socket that receives every IPv4 and IPv6 address change,
/// with [`BACKSTOP`] as its receive timeout.
fn address_notifications() -> Result<OwnedFd, String> {
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkRoute,
    )
    .map_err(|e| format!("netlink socket: {e}"))?;
    let groups = (libc::RTMGRP_IPV4_IFADDR | libc::RTMGRP_IPV6_IFADDR) as u32;
    bind(fd.as_raw_fd(), &NetlinkAddr::new(0, groups))
        .map_err(|e| format!("binding the netlink socket to the address groups: {e}"))?;
    let backstop = TimeVal::seconds(BACKSTOP.as_secs() as i64);
    setsockopt(&fd, sockopt::ReceiveTimeout, &backstop)
        .map_err(|e| format!("netlink socket timeout: {e}"))?;
    Ok(fd)
}

/// Reads whatever else is queued (at most 1024 messages), so one burst of
/// changes costs one re-read.
fn drain(socket: &OwnedFd, buf: &mut [u8]) {
    for _ in 0..1024 {
        match recv(socket.as_raw_fd(), buf, MsgFlags::MSG_DONTWAIT) {
            Ok(_) | Err(Errno::ENOBUFS) | Err(Errno::EINTR) => {}
            // EAGAIN: nothing more is queued.
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publishing_the_same_set_changes_nothing() {
        let w = HostAddrWatch::with(Ok(HostAddrs::new([(
            "8.8.8.8".parse().unwrap(),
            "dummy0".to_string(),
        )])));
        let mut rx = w.subscribe();
        rx.borrow_and_update();
        let same = w.publish(
            Ok(HostAddrs::new([(
                "8.8.8.8".parse().unwrap(),
                "dummy0".to_string(),
            )])),
            Trigger::Periodic,
        );
        assert!(!rx.has_changed().unwrap());
        assert!(same.as_ref().as_ref().unwrap().len() == 1);
        w.publish(
            Err(HostAddrsError("getifaddrs: EMFILE".to_string())),
            Trigger::Netlink,
        );
        assert!(rx.has_changed().unwrap());
        let p = rx.borrow_and_update().clone();
        assert_eq!(p.trigger, Trigger::Netlink);
        let Event::HostAddresses(rec) = record(&p) else {
            panic!("not a host_addresses record")
        };
        assert_eq!(
            rec.error.as_deref(),
            Some("the supervisor's own host addresses could not be read (getifaddrs: EMFILE)")
        );
        assert!(w.snapshot().is_err());
    }
}
