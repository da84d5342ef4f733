//! One copy of the credential paths for every session that resolves the
//! same ones: each session holds them for its whole life, and on one host
//! they rarely differ (docs/PERFORMANCE.md "supervisor RSS"). A session
//! whose list differs gets its own copy, which then becomes the shared one.

use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;

/// The list the last session resolved.
#[derive(Debug, Default)]
pub struct SharedPaths(Mutex<Option<Arc<[PathBuf]>>>);

impl SharedPaths {
    /// `fresh`, as the shared copy when it is the same list.
    pub fn share(&self, fresh: Vec<PathBuf>) -> Arc<[PathBuf]> {
        let mut last = self.0.lock();
        if let Some(shared) = last.as_ref().filter(|s| ***s == *fresh) {
            return Arc::clone(shared);
        }
        let new: Arc<[PathBuf]> = fresh.into();
        *last = Some(Arc::clone(&new));
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_list_is_one_copy_and_a_different_one_its_own() {
        let shared = SharedPaths::default();
        let list = |p: &str| vec![PathBuf::from(p), PathBuf::from("/etc/shadow")];
        let a = shared.share(list("/home/a/.ssh"));
        let b = shared.share(list("/home/a/.ssh"));
        assert!(Arc::ptr_eq(&a, &b));
        let c = shared.share(list("/home/c/.ssh"));
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(&*c, &list("/home/c/.ssh")[..]);
        assert_eq!(&*a, &list("/home/a/.ssh")[..]);
    }
}
