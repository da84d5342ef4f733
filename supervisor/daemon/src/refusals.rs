//! Refusals because the audit log cannot be written (`AUDIT_UNAVAILABLE`):
//! counted for `supervisorctl status`, and logged to the supervisor's own log
//! (stderr, through tracing), rate-limited so a full disk under load cannot
//! flood it: the first few of each interval one line each, then one summary
//! line for the rest of the interval. The same few, and the summary, are
//! also what [`crate::supervisor::Supervisor::audit_refused`] records in the
//! audit log (drawing on its reserve), so the reserve cannot be drained by
//! refusals either.

use std::fmt::Display;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// How often a summary of the refusals not logged one by one is written.
pub const INTERVAL: Duration = Duration::from_secs(10);
/// Refusals logged one by one per interval.
const FIRST: u32 = 5;

struct Window {
    started: Instant,
    logged: u32,
    suppressed: u64,
}

/// What [`Refusals::note`] did with one refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Noted {
    /// Logged on its own line (one of the first few of its interval).
    pub one_by_one: bool,
    /// An interval ended before this one: this many were not logged one by
    /// one in it (their summary was just logged).
    pub summary: Option<u64>,
}

/// The count and the rate-limited log of audit refusals.
pub struct Refusals {
    total: AtomicU64,
    window: Mutex<Window>,
}

impl Default for Refusals {
    fn default() -> Refusals {
        Refusals {
            total: AtomicU64::new(0),
            window: Mutex::new(Window {
                started: Instant::now(),
                logged: 0,
                suppressed: 0,
            }),
        }
    }
}

impl Refusals {
    /// One refusal: `what` was refused (a session for a uid, a tool call of
    /// a session) because `error` kept the audit record from being written.
    pub fn note(&self, what: &str, error: &dyn Display) -> Noted {
        let total = self.total.fetch_add(1, Ordering::SeqCst) + 1;
        let mut w = self.window.lock();
        let summary = self.roll(&mut w);
        let one_by_one = w.logged < FIRST;
        if one_by_one {
            w.logged += 1;
            tracing::error!(refused = %crate::events::escape_control(what), error = %error, total,
                "refused: the audit log cannot be written (AUDIT_UNAVAILABLE)");
        } else {
            w.suppressed += 1;
        }
        Noted {
            one_by_one,
            summary,
        }
    }

    /// Writes the summary of an interval that is over (call periodically, so
    /// the last burst is reported even when no refusal follows it). Returns
    /// how many it summed up, if any.
    pub fn tick(&self) -> Option<u64> {
        let mut w = self.window.lock();
        self.roll(&mut w)
    }

    /// Refusals since the supervisor started.
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::SeqCst)
    }

    fn roll(&self, w: &mut Window) -> Option<u64> {
        if w.started.elapsed() < INTERVAL {
            return None;
        }
        let suppressed = (w.suppressed > 0).then_some(w.suppressed);
        if w.suppressed > 0 {
            tracing::error!(
                more = w.suppressed,
                total = self.total(),
                "refused: {} more calls in the last {}s because the audit log cannot be written (AUDIT_UNAVAILABLE); not logged one by one",
                w.suppressed,
                INTERVAL.as_secs()
            );
        }
        *w = Window {
            started: Instant::now(),
            logged: 0,
            suppressed: 0,
        };
        suppressed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refusal_is_counted_and_only_the_first_few_are_logged_one_by_one() {
        let r = Refusals::default();
        let noted: Vec<Noted> = (0..50)
            .map(|i| r.note(&format!("tool call {i}"), &"disk full"))
            .collect();
        assert_eq!(
            noted.iter().filter(|n| n.one_by_one).count(),
            FIRST as usize
        );
        assert!(noted.iter().all(|n| n.summary.is_none()));
        assert_eq!(r.total(), 50);
        let w = r.window.lock();
        assert_eq!((w.logged, w.suppressed), (FIRST, 50 - u64::from(FIRST)));
    }

    #[test]
    fn a_new_interval_starts_over() {
        let r = Refusals::default();
        for _ in 0..10 {
            r.note("x", &"disk full");
        }
        r.window.lock().started = Instant::now() - INTERVAL;
        assert_eq!(r.tick(), Some(10 - u64::from(FIRST)));
        assert_eq!(r.tick(), None);
        let w = r.window.lock();
        assert_eq!((w.logged, w.suppressed), (0, 0));
        assert_eq!(r.total(), 10);
    }
}
