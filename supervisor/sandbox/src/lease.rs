//! What the daemon keeps held exactly as long as one sandbox exists (the
//! package cache's lease, docs/OPERATIONS.md "Package caches"), and how
//! the backend says the sandbox ended when it releases it.

use std::sync::{Arc, Mutex};

/// How a sandbox ended, as its backend saw it when it released the lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseEnd {
    /// Every process of the sandbox is gone (the container removed), at
    /// the first try.
    Gone,
    /// Gone, but confirmed only after `tries` removals of `what` (a
    /// container) were tried.
    GoneAfterRetries { what: String, tries: u32 },
    /// The backend gave up confirming the end of `what` after `tries`
    /// removals (`error`: the last failure): it may still exist, and
    /// what is left of it waits for the next start's reaper.
    GaveUp {
        what: String,
        tries: u32,
        error: String,
    },
}

/// Something held for a sandbox that wants to know how the sandbox ended.
pub trait Leased: Send + Sync + 'static {
    /// Called once, when the last clone of the lease is dropped, before
    /// `self` is.
    fn ended(&self, how: &LeaseEnd);
}

/// A value held without caring how the sandbox ended.
struct Quiet<T>(#[allow(dead_code)] T);

impl<T: Send + Sync + 'static> Leased for Quiet<T> {
    fn ended(&self, _: &LeaseEnd) {}
}

struct Inner {
    held: Box<dyn Leased>,
    end: Mutex<Option<LeaseEnd>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let how = self
            .end
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .unwrap_or(LeaseEnd::Gone);
        self.held.ended(&how);
    }
}

/// Something the daemon keeps held exactly as long as one sandbox exists:
/// the backend keeps a clone with the sandbox's placeholders and releases
/// it once every process of the sandbox is gone (or when it could not be
/// built), or at the latest when it gives up confirming that, saying so
/// ([`Lease::end_as`]). Opaque to this crate; the default holds nothing.
#[derive(Clone, Default)]
pub struct Lease(Option<Arc<Inner>>);

impl Lease {
    /// Holds `held` until the last clone of this lease is dropped.
    pub fn new<T: Send + Sync + 'static>(held: T) -> Lease {
        Lease::reporting(Quiet(held))
    }

    /// Holds `held` until the last clone is dropped, then tells it how
    /// the sandbox ended ([`Leased::ended`]).
    pub fn reporting<T: Leased>(held: T) -> Lease {
        Lease(Some(Arc::new(Inner {
            held: Box::new(held),
            end: Mutex::new(None),
        })))
    }

    /// Whether it holds anything.
    pub fn is_held(&self) -> bool {
        self.0.is_some()
    }

    /// Says how the sandbox ended, for when the lease is released
    /// ([`LeaseEnd::Gone`] unless said otherwise; the last word counts).
    pub fn end_as(&self, how: LeaseEnd) {
        if let Some(inner) = &self.0 {
            *inner.end.lock().unwrap_or_else(|e| e.into_inner()) = Some(how);
        }
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.is_held() {
            "Lease(held)"
        } else {
            "Lease(none)"
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Told(std::sync::mpsc::Sender<LeaseEnd>);

    impl Leased for Told {
        fn ended(&self, how: &LeaseEnd) {
            let _ = self.0.send(how.clone());
        }
    }

    #[test]
    fn the_last_clone_tells_how_the_sandbox_ended() {
        let (tx, rx) = std::sync::mpsc::channel();
        let a = Lease::reporting(Told(tx));
        let b = a.clone();
        drop(a);
        assert!(rx.try_recv().is_err(), "told while a clone still holds it");
        let gave_up = LeaseEnd::GaveUp {
            what: "container c".into(),
            tries: 3,
            error: "e".into(),
        };
        b.end_as(gave_up.clone());
        drop(b);
        assert_eq!(rx.try_recv().unwrap(), gave_up);
        let (tx, rx) = std::sync::mpsc::channel();
        drop(Lease::reporting(Told(tx)));
        assert_eq!(rx.try_recv().unwrap(), LeaseEnd::Gone);
    }
}
