//! The `supervisorctl sandbox exec` commands running now, and the last ones
//! that ended, by id (`x…`): what `net list` and `net allow|deny` tell
//! apart from a session's id (docs/INTERFACES.md "[network]").

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};

/// Ended execs remembered, so an id of one reads "already ended".
pub(crate) const ENDED_KEPT: usize = 256;

/// What an id names among the execs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExecState {
    Running,
    Ended,
}

#[derive(Default)]
pub(crate) struct Execs {
    inner: Arc<Mutex<Known>>,
}

#[derive(Default)]
struct Known {
    running: HashSet<String>,
    ended: VecDeque<String>,
}

/// One running exec; dropping it ends it.
pub(crate) struct ExecGuard {
    inner: Arc<Mutex<Known>>,
    id: String,
}

impl Execs {
    /// `id` runs until the guard is dropped.
    pub(crate) fn begin(&self, id: &str) -> ExecGuard {
        lock(&self.inner).running.insert(id.to_string());
        ExecGuard {
            inner: Arc::clone(&self.inner),
            id: id.to_string(),
        }
    }

    /// Whether `id` is an exec running now or one of the last that ended.
    pub(crate) fn state(&self, id: &str) -> Option<ExecState> {
        let k = lock(&self.inner);
        if k.running.contains(id) {
            Some(ExecState::Running)
        } else if k.ended.iter().any(|e| e == id) {
            Some(ExecState::Ended)
        } else {
            None
        }
    }
}

impl Drop for ExecGuard {
    fn drop(&mut self) {
        let mut k = lock(&self.inner);
        k.running.remove(&self.id);
        if k.ended.len() == ENDED_KEPT {
            k.ended.pop_front();
        }
        k.ended.push_back(std::mem::take(&mut self.id));
    }
}

fn lock(m: &Mutex<Known>) -> std::sync::MutexGuard<'_, Known> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exec_runs_until_its_guard_drops_then_reads_ended() {
        let e = Execs::default();
        assert_eq!(e.state("xA"), None);
        let g = e.begin("xA");
        assert_eq!(e.state("xA"), Some(ExecState::Running));
        drop(g);
        assert_eq!(e.state("xA"), Some(ExecState::Ended));
        for i in 0..ENDED_KEPT {
            drop(e.begin(&format!("y{i}")));
        }
        assert_eq!(e.state("xA"), None, "the oldest ended falls off");
        assert_eq!(e.state("y1"), Some(ExecState::Ended));
    }
}
