//! The policy engine new decisions use, swappable by a reload
//! (docs/OPERATIONS.md "Reloading"). Callers keep reading `sup.engine` as an
//! `&Engine` (by `Deref`): each read takes the engine in force at that
//! moment, and a session keeps running across a swap.
//!
//! An engine, once in force, lives until the supervisor exits (leaked to
//! `'static`): a decision that began under it may still hold it. A reload
//! therefore keeps one compiled policy in memory per reload, which is small
//! next to the sessions it spares.

use std::ops::Deref;

use parking_lot::RwLock;
use sha2::{Digest as _, Sha256};
use tollgate_policy::{Engine, PolicyConfig};

/// The engine in force and the digest of the `[policy]` it was built from.
pub struct PolicyHandle {
    current: RwLock<(&'static Engine, String)>,
}

/// The SHA-256 of a parsed `[policy]` table (of its `Debug` form: lists
/// only, so the same policy always gives the same digest): what the reload
/// log names as the old and new digests.
pub fn digest(policy: &PolicyConfig) -> String {
    hex(&Sha256::digest(format!("{policy:?}").as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl PolicyHandle {
    pub fn new(engine: Engine, digest: String) -> PolicyHandle {
        PolicyHandle {
            current: RwLock::new((Box::leak(Box::new(engine)), digest)),
        }
    }

    /// Puts `engine` in force for every decision from now on; returns the
    /// digest of the one it replaces.
    pub fn swap(&self, engine: Engine, digest: String) -> String {
        let new: &'static Engine = Box::leak(Box::new(engine));
        let mut cur = self.current.write();
        let old = std::mem::replace(&mut *cur, (new, digest));
        old.1
    }

    /// The digest of the policy in force.
    pub fn digest(&self) -> String {
        self.current.read().1.clone()
    }
}

impl Deref for PolicyHandle {
    type Target = Engine;

    fn deref(&self) -> &Engine {
        self.current.read().0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(toml_text: &str) -> PolicyConfig {
        let text = format!("[policy]\n{toml_text}");
        tollgate_config::Config::parse(&text, std::path::Path::new("x.toml"))
            .unwrap()
            .policy
    }

    #[test]
    fn a_swap_changes_what_later_reads_see_and_keeps_earlier_ones_valid() {
        let a = policy("deny = [\"run_bash(rm *)\"]\n");
        let b = policy("deny = [\"run_bash(curl *)\"]\n");
        let h = PolicyHandle::new(Engine::new(&a).unwrap(), digest(&a));
        let before: &Engine = &h;
        let old = h.swap(Engine::new(&b).unwrap(), digest(&b));
        assert_eq!(old, digest(&a));
        assert_eq!(h.digest(), digest(&b));
        assert_ne!(digest(&a), digest(&b));
        let after: &Engine = &h;
        assert!(!std::ptr::eq(before, after));
    }
}
