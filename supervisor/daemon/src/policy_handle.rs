//! The policy new decisions use, swappable by a reload (docs/OPERATIONS.md
//! "Reloading"). [`PolicyHandle::load`] hands out the policy in force at
//! that moment as an `Arc`: a decision keeps the one it started with to its
//! record, and a session keeps running across a swap. The policy a swap
//! replaces is freed when the last decision holding it ends.

use std::sync::Arc;

use parking_lot::RwLock;
use tollgate_gate::InForce;

pub use tollgate_gate::in_force::digest;

/// The policy in force.
pub struct PolicyHandle {
    current: RwLock<Arc<InForce>>,
}

impl PolicyHandle {
    pub fn new(policy: InForce) -> PolicyHandle {
        PolicyHandle {
            current: RwLock::new(Arc::new(policy)),
        }
    }

    /// The policy in force now (a read lock held for one `Arc` clone).
    pub fn load(&self) -> Arc<InForce> {
        Arc::clone(&self.current.read())
    }

    /// Puts `policy` in force for every decision from now on; returns the
    /// one it replaces (freed once its last holder lets go).
    pub fn swap(&self, policy: InForce) -> Arc<InForce> {
        std::mem::replace(&mut *self.current.write(), Arc::new(policy))
    }

    /// The digest of the policy in force.
    pub fn digest(&self) -> String {
        self.load().digest().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_policy::{Engine, PolicyConfig};

    fn policy(toml_text: &str) -> PolicyConfig {
        let text = format!("[policy]\n{toml_text}");
        tollgate_config::Config::parse(&text, std::path::Path::new("x.toml"))
            .unwrap()
            .policy
    }

    fn in_force(p: &PolicyConfig) -> InForce {
        InForce::new(Engine::new(p).unwrap(), p, Vec::new())
    }

    #[test]
    fn a_swap_changes_what_later_loads_see_and_frees_the_old_once_unheld() {
        let a = policy("deny = [\"run_bash(rm *)\"]\n");
        let b = policy("deny = [\"run_bash(curl *)\"]\n");
        let h = PolicyHandle::new(in_force(&a));
        let held = h.load();
        let old = h.swap(in_force(&b));
        assert_eq!(old.digest(), digest(&a));
        assert_eq!(h.digest(), digest(&b));
        assert_ne!(digest(&a), digest(&b));
        // The decision that began under the old policy still holds it…
        assert!(Arc::ptr_eq(&held, &old));
        let watch = Arc::downgrade(&old);
        drop(old);
        assert!(watch.upgrade().is_some());
        // …and once it ends, nothing keeps the old policy alive.
        drop(held);
        assert!(watch.upgrade().is_none());
    }

    #[test]
    fn a_hundred_reloads_keep_one_policy_alive() {
        let a = policy("deny = [\"run_bash(rm *)\"]\n");
        let h = PolicyHandle::new(in_force(&a));
        let first = Arc::downgrade(&h.load());
        let mut replaced = Vec::new();
        for _ in 0..100 {
            replaced.push(Arc::downgrade(&h.swap(in_force(&a))));
        }
        assert!(first.upgrade().is_none());
        assert!(replaced.iter().all(|w| w.upgrade().is_none()));
        assert_eq!(Arc::strong_count(&h.load()), 2);
    }
}
