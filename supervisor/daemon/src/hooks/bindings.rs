//! One tollgate session per client session: the table that binds a client's
//! session id (per client) to the uid that opened it and to its tollgate
//! session.
//!
//! The first event of a client session opens the tollgate session; events
//! that arrive together (clients run matching hooks in parallel) wait for
//! that one opening. An event from another uid for a bound id is refused,
//! also after a restart: the first uid of every id is kept on disk
//! ([`Claims`]).
//! A session the client ended (or that sat idle) is opened afresh by its
//! next event (a resumed conversation); one an operator revoked or killed
//! stays ended, so every later event is told to stop.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::OnceCell;
use tollgate_policy::clients::Client;
use tonic::Status;

use super::claims::Claims;
use crate::sessions::{Session, State};

/// A tool call the hook decided, until the client reports its outcome.
#[derive(Debug, Clone)]
pub struct CallNote {
    /// What the audit log names it (run_bash, apply_patch, a client tool).
    pub tool: String,
    pub decided_at: Instant,
    /// The call touches a workspace secret file: its output is not logged.
    pub secret: bool,
    /// An ask handed to the client's own prompt: its approval id.
    pub delegated: Option<String>,
    /// Run through the supervisor's sandbox (its outcome is recorded there).
    pub routed: bool,
}

/// Calls remembered per session; the oldest go first past this.
const NOTES_KEPT: usize = 1024;

/// A bound client session.
pub struct Binding {
    pub client: Client,
    pub uid: u32,
    pub session: Arc<Session>,
    last_event: Mutex<Instant>,
    notes: Mutex<(
        HashMap<String, CallNote>,
        std::collections::VecDeque<String>,
    )>,
}

impl Binding {
    pub fn new(client: Client, uid: u32, session: Arc<Session>) -> Binding {
        Binding {
            client,
            uid,
            session,
            last_event: Mutex::new(Instant::now()),
            notes: Mutex::new((HashMap::new(), std::collections::VecDeque::new())),
        }
    }

    pub fn touch(&self) {
        *self.last_event.lock() = Instant::now();
    }

    pub fn idle_for(&self) -> Duration {
        self.last_event.lock().elapsed()
    }

    pub fn note(&self, use_id: &str, note: CallNote) {
        let mut n = self.notes.lock();
        if n.0.insert(use_id.to_string(), note).is_none() {
            n.1.push_back(use_id.to_string());
        }
        while n.1.len() > NOTES_KEPT {
            if let Some(old) = n.1.pop_front() {
                n.0.remove(&old);
            }
        }
    }

    pub fn take_note(&self, use_id: &str) -> Option<CallNote> {
        let mut n = self.notes.lock();
        let note = n.0.remove(use_id);
        if note.is_some() {
            n.1.retain(|k| k != use_id);
        }
        note
    }
}

type Key = (Client, String);

/// One client session id's place in the table: the uid that claimed it and
/// the binding, once opened.
struct Slot {
    uid: u32,
    cell: OnceCell<Arc<Binding>>,
}

/// Past this many slots, ended ones idle for a while are dropped.
const SLOTS_KEPT: usize = 4096;
const ENDED_KEPT_FOR: Duration = Duration::from_secs(3600);

pub struct Bindings {
    slots: Mutex<HashMap<Key, Arc<Slot>>>,
    /// The same uid binding, on disk: it outlives a restart.
    claims: Claims,
}

impl Bindings {
    pub fn new(claims: Claims) -> Bindings {
        Bindings {
            slots: Mutex::default(),
            claims,
        }
    }

    /// The binding for a client session, opening it with `open` when the
    /// session is new (or was ended by the client or by idling). Concurrent
    /// callers for one session wait for a single opening.
    pub async fn find_or_open<F, Fut>(
        &self,
        client: Client,
        session_id: &str,
        uid: u32,
        open: F,
    ) -> Result<Arc<Binding>, Status>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<Arc<Binding>, Status>>,
    {
        let key: Key = (client, session_id.to_string());
        loop {
            if !self.slots.lock().contains_key(&key) {
                // First seen since the start: the uid on disk decides.
                self.claims.claim(client, session_id, uid)?;
            }
            let slot = self.slot(&key, uid);
            if slot.uid != uid {
                return Err(Status::permission_denied(format!(
                    "{client} session {session_id} belongs to uid {}; the caller is uid {uid}. Each user's client runs its own sessions",
                    slot.uid
                )));
            }
            match slot.cell.get_or_try_init(&open).await {
                Ok(b) => {
                    match b.session.state() {
                        State::Closed | State::Expired => {
                            // Ended by the client or by idling: a resumed
                            // conversation gets a fresh session.
                            self.remove_if_same(&key, &slot);
                            continue;
                        }
                        State::Active | State::Revoked | State::Killed => return Ok(Arc::clone(b)),
                    }
                }
                Err(e) => {
                    // A failed open claims nothing: the id stays free.
                    if slot.cell.get().is_none() {
                        self.remove_if_same(&key, &slot);
                    }
                    return Err(e);
                }
            }
        }
    }

    /// The binding of a client session, if one is open; never opens one.
    pub fn find(
        &self,
        client: Client,
        session_id: &str,
        uid: u32,
    ) -> Result<Option<Arc<Binding>>, Status> {
        let key: Key = (client, session_id.to_string());
        let Some(slot) = self.slots.lock().get(&key).cloned() else {
            return Ok(None);
        };
        if slot.uid != uid {
            return Err(Status::permission_denied(format!(
                "{client} session {session_id} belongs to uid {}; the caller is uid {uid}",
                slot.uid
            )));
        }
        Ok(slot.cell.get().cloned())
    }

    fn slot(&self, key: &Key, uid: u32) -> Arc<Slot> {
        let mut slots = self.slots.lock();
        if slots.len() > SLOTS_KEPT {
            slots.retain(|_, s| match s.cell.get() {
                Some(b) => b.session.is_active() || b.idle_for() < ENDED_KEPT_FOR,
                None => true,
            });
        }
        Arc::clone(slots.entry(key.clone()).or_insert_with(|| {
            Arc::new(Slot {
                uid,
                cell: OnceCell::new(),
            })
        }))
    }

    fn remove_if_same(&self, key: &Key, slot: &Arc<Slot>) {
        let mut slots = self.slots.lock();
        if slots.get(key).is_some_and(|s| Arc::ptr_eq(s, slot)) {
            slots.remove(key);
        }
    }

    /// Active sessions with no event for `limit` and nothing running.
    pub fn idle(&self, limit: Duration) -> Vec<Arc<Session>> {
        self.slots
            .lock()
            .values()
            .filter_map(|s| s.cell.get())
            .filter(|b| b.session.is_active() && !b.session.is_busy() && b.idle_for() >= limit)
            .map(|b| Arc::clone(&b.session))
            .collect()
    }
}
