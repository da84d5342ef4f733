//! A container that could not be removed when its sandbox ended
//! (docs/OPERATIONS.md "Package caches"): its removal is tried again, with
//! growing pauses, until the engine confirms it gone (then its
//! placeholders and its lease are released) or the tries run out (then
//! the lease is released, saying so, and the placeholders wait for the next
//! start's reaper). The lease follows the sandbox's real end, not the
//! supervisor's.

use std::future::Future;
use std::time::Duration;

use bollard::Docker;
use bollard::query_parameters::RemoveContainerOptionsBuilder;

use super::errors::status_code;
use crate::LeaseEnd;
use crate::host_exec::reserve::Reservation;

/// One removal's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Probe {
    /// The engine says the container is gone (removed now, or not there).
    Gone,
    /// Still there, or the engine cannot say: the error.
    Remains(String),
}

/// When to try again: `first` after the failure, doubling up to
/// `longest`, `retries` more removals at most.
#[derive(Debug, Clone, Copy)]
pub(super) struct Schedule {
    pub first: Duration,
    pub longest: Duration,
    pub retries: u32,
}

/// About five minutes: 1 s, 2 s, … 32 s, then every 60 s.
pub(super) const SCHEDULE: Schedule = Schedule {
    first: Duration::from_secs(1),
    longest: Duration::from_secs(60),
    retries: 10,
};

/// One forced removal of `id`.
pub(super) async fn remove_once(docker: &Docker, id: &str) -> Probe {
    let opts = RemoveContainerOptionsBuilder::new()
        .force(true)
        .v(true)
        .build();
    match docker.remove_container(id, Some(opts)).await {
        Ok(()) => Probe::Gone,
        Err(e) if status_code(&e) == Some(404) => Probe::Gone,
        Err(e) => Probe::Remains(e.to_string()),
    }
}

/// The reservation of a container not yet confirmed gone. Dropped before
/// the follow-up ends (the runtime stopping): the lease goes, saying the
/// supervisor gave up; the placeholders stay for the reaper.
pub(super) struct Leftover {
    what: String,
    reservation: Option<Reservation>,
    tries: u32,
    error: String,
}

impl Leftover {
    /// `reservation` of container `name`, whose removal failed `tries`
    /// times so far, last with `error`.
    pub(super) fn new(name: &str, reservation: Reservation, tries: u32, error: String) -> Self {
        Leftover {
            what: format!("container {name}"),
            reservation: Some(reservation),
            tries,
            error,
        }
    }

    fn gone(mut self) {
        if let Some(mut r) = self.reservation.take() {
            r.take_lease().end_as(LeaseEnd::GoneAfterRetries {
                what: self.what.clone(),
                tries: self.tries,
            });
            drop(r);
        }
    }

    fn give_up(&mut self) {
        if let Some(mut r) = self.reservation.take() {
            let lease = r.take_lease();
            // The container may still have its mounts on the placeholders.
            std::mem::forget(r);
            lease.end_as(LeaseEnd::GaveUp {
                what: self.what.clone(),
                tries: self.tries,
                error: self.error.clone(),
            });
            tracing::warn!(what = %self.what, tries = self.tries, error = %self.error, "gave up removing it; its lease is released, its leftovers wait for the next start's reaper");
        }
    }
}

impl Drop for Leftover {
    fn drop(&mut self) {
        self.give_up();
    }
}

/// Tries `remove` on `schedule` until it reports the container gone or the
/// tries run out; releases `left`'s lease either way, saying which.
pub(super) async fn follow<F, Fut>(mut left: Leftover, schedule: Schedule, mut remove: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Probe>,
{
    let mut pause = schedule.first;
    for _ in 0..schedule.retries {
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(schedule.longest);
        left.tries += 1;
        match remove().await {
            Probe::Gone => return left.gone(),
            Probe::Remains(e) => left.error = e,
        }
    }
    left.give_up();
}

/// [`follow`] for container `id` (`name`), on a thread of its own with a
/// runtime of its own: neither a runtime shutting down nor a caller keeps
/// it from running.
pub(super) fn follow_on_thread(docker: Docker, id: String, left: Leftover) {
    let spawned = std::thread::Builder::new()
        .name("tollgate-docker-leftover".to_string())
        .spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return drop(left);
            };
            rt.block_on(follow(left, SCHEDULE, || remove_once(&docker, &id)));
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "no thread to retry a container's removal");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    struct Told(mpsc::Sender<LeaseEnd>);

    impl crate::Leased for Told {
        fn ended(&self, how: &LeaseEnd) {
            let _ = self.0.send(how.clone());
        }
    }

    fn leftover() -> (Leftover, mpsc::Receiver<LeaseEnd>) {
        let (tx, rx) = mpsc::channel();
        let mut r = Reservation::empty_for_tests();
        r.hold(crate::Lease::reporting(Told(tx)));
        (Leftover::new("c1", r, 1, "409".into()), rx)
    }

    const FAST: Schedule = Schedule {
        first: Duration::from_millis(1),
        longest: Duration::from_millis(4),
        retries: 3,
    };

    /// `outcomes`, one per removal tried, then `Remains` for ever.
    fn engine(outcomes: Vec<Probe>) -> impl FnMut() -> std::future::Ready<Probe> {
        let mut it = outcomes.into_iter();
        move || std::future::ready(it.next().unwrap_or(Probe::Remains("still".into())))
    }

    #[tokio::test]
    async fn the_lease_goes_once_the_container_is_confirmed_gone() {
        let (left, rx) = leftover();
        let outcomes = vec![Probe::Remains("busy".into()), Probe::Gone];
        follow(left, FAST, engine(outcomes)).await;
        let how = rx.try_recv().unwrap();
        let want = LeaseEnd::GoneAfterRetries {
            what: "container c1".into(),
            tries: 3,
        };
        assert_eq!(how, want);
    }

    #[tokio::test]
    async fn the_lease_goes_at_the_latest_when_the_tries_run_out() {
        let (left, rx) = leftover();
        let mut tried = 0;
        let remove = || {
            tried += 1;
            std::future::ready(Probe::Remains(format!("refused {tried}")))
        };
        follow(left, FAST, remove).await;
        assert_eq!(tried, 3, "the failed first try counts");
        let how = rx.try_recv().unwrap();
        let want = LeaseEnd::GaveUp {
            what: "container c1".into(),
            tries: 4,
            error: "refused 3".into(),
        };
        assert_eq!(how, want);
    }

    #[tokio::test]
    async fn a_follow_up_cut_short_still_releases_the_lease() {
        let (left, rx) = leftover();
        let slow = Schedule {
            first: Duration::from_secs(3600),
            ..FAST
        };
        let cut = tokio::time::timeout(
            Duration::from_millis(20),
            follow(left, slow, engine(Vec::new())),
        )
        .await;
        assert!(cut.is_err());
        assert!(matches!(
            rx.try_recv().unwrap(),
            LeaseEnd::GaveUp { tries: 1, .. }
        ));
    }
}
