//! Bounds on the connections of the two sockets, so that no local user can
//! lock everyone else out of the supervisor.
//!
//! agent.sock is mode 0666 on purpose: any local user may connect. Four
//! bounds keep that from costing anyone else (operators above all) the
//! supervisor:
//! - **per uid**: one uid holds at most `[supervisor] max_connections_per_uid`
//!   connections; one more is refused at once, every call on it answered
//!   RESOURCE_EXHAUSTED naming the cap ([`accept`], [`refuse`]);
//! - **idle**: a connection with no request in flight for
//!   `idle_connection_timeout_s` is closed ([`io`]); a streaming call that is
//!   still open (an approval wait, a long run_bash, the agent's control
//!   stream) is in flight, not idle ([`activity`]);
//! - **fd reserve**: an agent connection may only use a descriptor numbered
//!   below `RLIMIT_NOFILE - fd_reserve` ([`fds`]). The kernel always hands
//!   out the lowest free number, so the top `fd_reserve` descriptors stay
//!   free for operator.sock, the audit log, sandboxes and LLM calls however
//!   many agent connections are open: the kill switch always answers;
//! - **out of descriptors anyway** (EMFILE): accepting pauses for a moment
//!   instead of spinning, and resumes by itself.
//!
//! operator.sock is counted, never capped: operators are trusted.

pub mod accept;
pub mod activity;
pub mod fds;
pub mod io;
pub mod refuse;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

pub use accept::Incoming;
pub use activity::ActivityLayer;
pub use fds::FdLimit;
pub use io::{Conn, ConnInfo};
pub use refuse::Refusal;

/// Which socket a connection came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Socket {
    Agent,
    Operator,
}

impl Socket {
    pub fn name(self) -> &'static str {
        match self {
            Socket::Agent => "agent.sock",
            Socket::Operator => "operator.sock",
        }
    }
}

/// The bounds in force (from the config and the fd limit found at start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub max_per_uid: u32,
    pub idle: Duration,
    pub fds: FdLimit,
    pub fd_reserve: u64,
}

impl Bounds {
    /// Agent connections may only use descriptors numbered below this.
    pub fn fd_ceiling(&self) -> u64 {
        self.fds.soft.saturating_sub(self.fd_reserve)
    }
}

/// The bounds and the counts, as the supervisor holds them.
#[derive(Debug)]
pub struct Connections {
    pub bounds: Bounds,
    pub stats: Arc<Stats>,
}

impl Connections {
    pub fn new(bounds: Bounds) -> Connections {
        Connections {
            bounds,
            stats: Arc::new(Stats::default()),
        }
    }

    /// The accept stream of one socket.
    pub fn incoming(&self, listener: tokio::net::UnixListener, socket: Socket) -> Incoming {
        Incoming::new(listener, socket, self.bounds, Arc::clone(&self.stats))
    }
}

/// Live counts and what was refused, shared by both sockets and `status`.
#[derive(Debug, Default)]
pub struct Stats {
    agent_open: AtomicU64,
    operator_open: AtomicU64,
    refused_uid_cap: AtomicU64,
    refused_fd_reserve: AtomicU64,
    refused_unidentified: AtomicU64,
    closed_idle: AtomicU64,
    per_uid: Mutex<HashMap<u32, u32>>,
    /// Refused connections kept a moment to answer (see [`refuse`]).
    answering: AtomicU64,
    refusal_log: Mutex<refuse::Log>,
    out_of_fds_log: Mutex<refuse::Log>,
}

/// A copy of [`Stats`] for `status`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Snapshot {
    pub agent_open: u64,
    pub operator_open: u64,
    pub refused_uid_cap: u64,
    pub refused_fd_reserve: u64,
    pub refused_unidentified: u64,
    pub closed_idle: u64,
    /// The uids holding the most agent connections, most first (at most 5).
    pub top_uids: Vec<(u32, u32)>,
}

impl Stats {
    /// Counts an operator connection (never refused).
    fn open_operator(self: &Arc<Self>) -> Slot {
        self.operator_open.fetch_add(1, Ordering::Relaxed);
        Slot {
            stats: Arc::clone(self),
            held: Held::Operator,
        }
    }

    /// A place for a refused connection kept to answer, if one is free.
    fn try_answer(self: &Arc<Self>) -> Option<Slot> {
        if self.answering.fetch_add(1, Ordering::SeqCst) >= refuse::MAX_ANSWERING {
            self.answering.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(Slot {
            stats: Arc::clone(self),
            held: Held::Answering,
        })
    }

    /// Counts an agent connection for `uid`, or None when the uid is at its cap.
    fn try_open_agent(self: &Arc<Self>, uid: u32, max_per_uid: u32) -> Option<Slot> {
        let mut per_uid = self.per_uid.lock();
        let n = per_uid.entry(uid).or_insert(0);
        if *n >= max_per_uid {
            return None;
        }
        *n += 1;
        self.agent_open.fetch_add(1, Ordering::Relaxed);
        Some(Slot {
            stats: Arc::clone(self),
            held: Held::Agent(uid),
        })
    }

    fn count_refusal(&self, why: &Refusal) {
        let counter = match why {
            Refusal::PerUid { .. } => &self.refused_uid_cap,
            Refusal::FdReserve { .. } => &self.refused_fd_reserve,
            Refusal::Unidentified => &self.refused_unidentified,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn count_idle_close(&self) {
        self.closed_idle.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> Snapshot {
        let mut top: Vec<(u32, u32)> = self
            .per_uid
            .lock()
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(u, n)| (*u, *n))
            .collect();
        top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        top.truncate(5);
        Snapshot {
            agent_open: self.agent_open.load(Ordering::Relaxed),
            operator_open: self.operator_open.load(Ordering::Relaxed),
            refused_uid_cap: self.refused_uid_cap.load(Ordering::Relaxed),
            refused_fd_reserve: self.refused_fd_reserve.load(Ordering::Relaxed),
            refused_unidentified: self.refused_unidentified.load(Ordering::Relaxed),
            closed_idle: self.closed_idle.load(Ordering::Relaxed),
            top_uids: top,
        }
    }
}

/// One open connection's place in [`Stats`]; given back on drop.
#[derive(Debug)]
pub struct Slot {
    stats: Arc<Stats>,
    held: Held,
}

#[derive(Debug, Clone, Copy)]
enum Held {
    Operator,
    /// An admitted agent.sock connection of this uid.
    Agent(u32),
    /// A refused agent.sock connection kept to answer.
    Answering,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let stats = &self.stats;
        match self.held {
            Held::Operator => {
                stats.operator_open.fetch_sub(1, Ordering::Relaxed);
            }
            Held::Agent(uid) => {
                stats.agent_open.fetch_sub(1, Ordering::Relaxed);
                let mut per_uid = stats.per_uid.lock();
                if let Some(n) = per_uid.get_mut(&uid) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        per_uid.remove(&uid);
                    }
                }
            }
            Held::Answering => {
                stats.answering.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_per_uid_cap_counts_and_gives_back() {
        let stats = Arc::new(Stats::default());
        let a: Vec<Slot> = (0..3)
            .map(|_| stats.try_open_agent(1000, 3).unwrap())
            .collect();
        assert!(stats.try_open_agent(1000, 3).is_none());
        // Another uid is not affected.
        let b = stats.try_open_agent(1001, 3).unwrap();
        let snap = stats.snapshot();
        assert_eq!(snap.agent_open, 4);
        assert_eq!(snap.top_uids, vec![(1000, 3), (1001, 1)]);
        drop(a);
        drop(b);
        let snap = stats.snapshot();
        assert_eq!(snap.agent_open, 0);
        assert!(snap.top_uids.is_empty());
        assert!(stats.try_open_agent(1000, 3).is_some());
    }

    #[test]
    fn answering_refusals_are_bounded() {
        let stats = Arc::new(Stats::default());
        let held: Vec<Slot> = (0..refuse::MAX_ANSWERING)
            .map(|_| stats.try_answer().unwrap())
            .collect();
        assert!(stats.try_answer().is_none());
        drop(held);
        assert!(stats.try_answer().is_some());
    }

    #[test]
    fn the_ceiling_leaves_the_reserve() {
        let b = Bounds {
            max_per_uid: 64,
            idle: Duration::from_secs(5),
            fds: FdLimit {
                soft: 1024,
                hard: 1024,
                was: 1024,
            },
            fd_reserve: 256,
        };
        assert_eq!(b.fd_ceiling(), 768);
    }
}
