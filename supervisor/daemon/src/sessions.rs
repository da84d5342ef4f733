//! The table of sessions: the active ones, and a bounded memory of ended
//! ones. A session itself is the gate's (`tollgate_gate::session`).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;
use tollgate_proto::v1 as pb;

pub use tollgate_gate::session::{Caps, NewSession, Session, State, TokenCheck, unix_ms};

/// All sessions: active ones, and a bounded memory of ended ones for
/// `supervisorctl sessions` and `show`.
#[derive(Default)]
pub struct Sessions {
    active: Mutex<HashMap<String, Arc<Session>>>,
    ended: Mutex<VecDeque<pb::SessionInfo>>,
    /// The credential paths the sessions hold, one copy while they agree.
    pub credential_paths: crate::shared_paths::SharedPaths,
}

const ENDED_KEPT: usize = 256;

impl Sessions {
    pub fn insert(&self, s: Arc<Session>) {
        self.active.lock().insert(s.id.clone(), s);
    }

    pub fn get(&self, id: &str) -> Option<Arc<Session>> {
        self.active.lock().get(id).cloned()
    }

    pub fn all(&self) -> Vec<Arc<Session>> {
        let mut v: Vec<_> = self.active.lock().values().cloned().collect();
        v.sort_by_key(|s| s.created);
        v
    }

    pub fn count_for_uid(&self, uid: u32) -> usize {
        self.active.lock().values().filter(|s| s.uid == uid).count()
    }

    pub fn len(&self) -> usize {
        self.active.lock().len()
    }

    /// Removes an ended session from the active table, remembering its info.
    pub fn retire(&self, id: &str, info: pb::SessionInfo) {
        self.active.lock().remove(id);
        let mut ended = self.ended.lock();
        ended.push_back(info);
        while ended.len() > ENDED_KEPT {
            ended.pop_front();
        }
    }

    pub fn ended(&self) -> Vec<pb::SessionInfo> {
        self.ended.lock().iter().cloned().collect()
    }

    pub fn find_ended(&self, id: &str) -> Option<pb::SessionInfo> {
        self.ended.lock().iter().rev().find(|i| i.id == id).cloned()
    }
}
