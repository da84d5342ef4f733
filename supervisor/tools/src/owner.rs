//! Running file operations as the session owner.
//!
//! On Linux credentials belong to a thread, not to the process, and the
//! filesystem uid/gid decide every permission check of `open`, `mkdir`,
//! `rename` and the owner of what is created. So file operations never run on
//! a tokio thread (or any thread that is shared with other work): each
//! session has its own small pool of worker threads ([`OwnerPool`]), started
//! on demand, that switch to the owner once, when they start, in this order:
//! 1. set their supplementary groups to the owner's (raw per-thread
//!    `setgroups`: glibc's `setgroups` would change every thread of the
//!    supervisor; without this the thread would keep root's groups),
//! 2. `setfsgid(gid)`,
//! 3. `setfsuid(uid)`: leaving fsuid 0 clears the thread's filesystem
//!    capabilities (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER,
//!    CAP_CHOWN, ...), so the owner's permissions are what apply,
//! 4. check that the fs ids took effect (setfsuid reports no error; a failed
//!    setgroups does), failing closed: a worker that could not switch runs
//!    nothing and ends.
//!
//! A worker never switches back and never serves another session: it only
//! ever holds this owner's credentials, and it ends when the session's
//! workspace is dropped or after [`IDLE_EXIT`] without work. Before each job
//! it checks its credentials are still the owner's (glibc broadcasts a
//! process-wide setuid/setgroups to every thread) and ends, failing the job,
//! if not. (A fresh thread
//! per operation was measured first: on this 2-core machine under load it
//! cost 120-200 µs per operation against about 8 µs for a hand-off to a
//! waiting worker, which the read_file budget cannot afford.)
//!
//! When the supervisor is not root (rootless single-user mode) it can only
//! act for its own uid, and no switch happens.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use nix::unistd::{Gid, Uid};

use crate::ToolError;

#[derive(Debug)]
pub(crate) enum Owner {
    /// The supervisor is root: switch each worker thread to these ids.
    Switch {
        uid: u32,
        gid: u32,
        groups: Vec<u32>,
    },
    /// The supervisor already runs as the owner.
    Current { uid: u32, gid: u32 },
}

impl Owner {
    pub(crate) fn for_session(uid: u32, gid: u32) -> Result<Owner, ToolError> {
        if uid == u32::MAX || gid == u32::MAX {
            return Err(ToolError::Credentials {
                uid,
                gid,
                reason: "-1 is not a valid id".into(),
            });
        }
        let euid = nix::unistd::geteuid();
        if euid.is_root() {
            Ok(Owner::Switch {
                uid,
                gid,
                groups: owner_groups(uid, gid),
            })
        } else if euid.as_raw() == uid {
            Ok(Owner::Current { uid, gid })
        } else {
            Err(ToolError::Credentials {
                uid,
                gid,
                reason: format!(
                    "the supervisor runs as uid {} without root, so it can only act for uid {}",
                    euid.as_raw(),
                    euid.as_raw()
                ),
            })
        }
    }

    pub(crate) fn uid(&self) -> u32 {
        match self {
            Owner::Switch { uid, .. } | Owner::Current { uid, .. } => *uid,
        }
    }

    pub(crate) fn gid(&self) -> u32 {
        match self {
            Owner::Switch { gid, .. } | Owner::Current { gid, .. } => *gid,
        }
    }

    /// Switches the calling thread. Only ever call it on a thread of its own
    /// that ends after the operation.
    fn apply_to_this_thread(&self) -> Result<(), ToolError> {
        let (uid, gid, groups) = match self {
            Owner::Current { .. } => return Ok(()),
            Owner::Switch { uid, gid, groups } => (*uid, *gid, groups),
        };
        let fail = |reason: String| ToolError::Credentials { uid, gid, reason };
        let gids: Vec<rustix::thread::Gid> = groups
            .iter()
            .map(|&g| rustix::thread::Gid::from_raw(g))
            .collect();
        // A raw per-thread setgroups: it reports failure, so no check after.
        rustix::thread::set_thread_groups(&gids)
            .map_err(|e| fail(format!("setgroups failed: {e}")))?;
        nix::unistd::setfsgid(Gid::from_raw(gid));
        nix::unistd::setfsuid(Uid::from_raw(uid));
        // setfsuid/setfsgid report no error: calling them again returns the
        // current value, which must now be the owner's.
        let fsgid = nix::unistd::setfsgid(Gid::from_raw(gid)).as_raw();
        let fsuid = nix::unistd::setfsuid(Uid::from_raw(uid)).as_raw();
        if fsuid != uid || fsgid != gid {
            return Err(fail(format!(
                "the thread's filesystem ids are {fsuid}:{fsgid} after the switch"
            )));
        }
        Ok(())
    }
}

impl Owner {
    /// Before each job: are the thread's credentials still the owner's?
    /// Nothing in tollgate changes them, but glibc's setuid/setgroups family
    /// called anywhere in the supervisor process would be broadcast to every
    /// thread, workers included; if that ever happens, fail closed.
    fn verify_this_thread(&self) -> Result<(), ToolError> {
        let (uid, gid, groups) = match self {
            Owner::Current { .. } => return Ok(()),
            Owner::Switch { uid, gid, groups } => (*uid, *gid, groups),
        };
        let fail = |reason: String| ToolError::Credentials { uid, gid, reason };
        // Setting the value the thread already has changes nothing and
        // returns the current one.
        let fsgid = nix::unistd::setfsgid(Gid::from_raw(gid)).as_raw();
        let fsuid = nix::unistd::setfsuid(Uid::from_raw(uid)).as_raw();
        if fsuid != uid || fsgid != gid {
            return Err(fail(format!(
                "the worker's filesystem ids changed to {fsuid}:{fsgid}"
            )));
        }
        let mut now: Vec<u32> = rustix::process::getgroups()
            .map_err(|e| fail(format!("getgroups failed: {e}")))?
            .into_iter()
            .map(|g| g.as_raw())
            .collect();
        now.sort_unstable();
        now.dedup();
        if &now != groups {
            return Err(fail(format!("the worker's groups changed to {now:?}")));
        }
        Ok(())
    }
}

/// The owner's supplementary groups from the user database (`getgrouplist`),
/// always including `gid`. A uid without a passwd entry gets just `gid`.
fn owner_groups(uid: u32, gid: u32) -> Vec<u32> {
    let mut groups = vec![gid];
    if let Ok(Some(user)) = nix::unistd::User::from_uid(Uid::from_raw(uid))
        && let Ok(name) = std::ffi::CString::new(user.name)
        && let Ok(list) = nix::unistd::getgrouplist(&name, Gid::from_raw(gid))
    {
        groups.extend(list.into_iter().map(Gid::as_raw));
    }
    groups.sort_unstable();
    groups.dedup();
    groups
}

/// Workers per session at most: more concurrent operations queue.
pub(crate) const MAX_WORKERS: usize = 4;
/// A worker with nothing to do for this long ends.
pub(crate) const IDLE_EXIT: Duration = Duration::from_secs(30);

type Job = Box<dyn FnOnce(Result<(), String>) + Send + 'static>;

/// One session's worker threads, all switched to the session owner.
pub(crate) struct OwnerPool {
    shared: Arc<Shared>,
}

struct Shared {
    owner: Owner,
    state: Mutex<State>,
    work: Condvar,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Job>,
    /// Workers alive.
    workers: usize,
    /// Workers waiting for a job.
    idle: usize,
    /// The pool's handle was dropped: workers end once the queue is empty.
    closed: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A job never runs under the lock, so a poisoned lock only means a
        // worker panicked between two bookkeeping steps: keep going.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl OwnerPool {
    pub(crate) fn new(owner: Owner) -> OwnerPool {
        OwnerPool {
            shared: Arc::new(Shared {
                owner,
                state: Mutex::new(State::default()),
                work: Condvar::new(),
            }),
        }
    }

    pub(crate) fn owner(&self) -> &Owner {
        &self.shared.owner
    }

    /// Workers alive now (for tests and diagnostics).
    #[cfg(test)]
    pub(crate) fn workers(&self) -> usize {
        self.shared.lock().workers
    }

    /// Runs `work` on one of the session's worker threads and returns its
    /// result. If the future is dropped, the worker still finishes the
    /// operation (a write completes or leaves the old file; it is never half
    /// done).
    pub(crate) async fn run<T, F>(&self, work: F) -> Result<T, ToolError>
    where
        T: Send + 'static,
        F: FnOnce() -> Result<T, ToolError> + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (uid, gid) = (self.owner().uid(), self.owner().gid());
        let job: Job = Box::new(move |switched: Result<(), String>| {
            let result = match switched {
                Ok(()) => work(),
                Err(reason) => Err(ToolError::Credentials { uid, gid, reason }),
            };
            // The receiver is gone when the caller stopped waiting.
            let _ = tx.send(result);
        });
        self.submit(job)?;
        rx.await.map_err(|_| {
            ToolError::Internal("the file-tool worker ended without an answer (it panicked)".into())
        })?
    }

    fn submit(&self, job: Job) -> Result<(), ToolError> {
        let mut state = self.shared.lock();
        state.queue.push_back(job);
        if state.idle > 0 {
            self.shared.work.notify_one();
            return Ok(());
        }
        if state.workers >= MAX_WORKERS {
            // Every worker is busy: the job waits its turn.
            return Ok(());
        }
        state.workers += 1;
        drop(state);
        let shared = Arc::clone(&self.shared);
        let spawned = std::thread::Builder::new()
            .name("tollgate-fs".into())
            .spawn(move || worker(shared));
        if let Err(e) = spawned {
            let mut state = self.shared.lock();
            state.workers -= 1;
            if state.workers == 0 {
                // Nobody will ever take the queued jobs: fail them now
                // (dropping a job drops its sender, which the caller sees).
                state.queue.clear();
            }
            return Err(ToolError::Internal(format!(
                "cannot start a file-tool worker thread: {e}"
            )));
        }
        Ok(())
    }
}

impl Drop for OwnerPool {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.work.notify_all();
    }
}

/// A worker: switch to the owner once, then run jobs until closed or idle.
fn worker(shared: Arc<Shared>) {
    let switched = shared
        .owner
        .apply_to_this_thread()
        .map_err(|e| e.to_string());
    let mut state = shared.lock();
    loop {
        if let Some(job) = state.queue.pop_front() {
            drop(state);
            let status = match &switched {
                Ok(()) => shared.owner.verify_this_thread().map_err(|e| e.to_string()),
                Err(reason) => Err(reason.clone()),
            };
            let keep = status.is_ok();
            // A panicking job must not take the worker's bookkeeping with it.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || job(status)));
            if !keep {
                // Never keep a thread whose switch failed or whose
                // credentials drifted: end, so the next job gets a fresh
                // attempt on a fresh thread.
                let mut state = shared.lock();
                state.workers -= 1;
                return;
            }
            state = shared.lock();
            continue;
        }
        if state.closed {
            state.workers -= 1;
            return;
        }
        state.idle += 1;
        let (next, timeout) = shared
            .work
            .wait_timeout(state, IDLE_EXIT)
            .unwrap_or_else(|p| p.into_inner());
        state = next;
        state.idle -= 1;
        if timeout.timed_out() && state.queue.is_empty() {
            state.workers -= 1;
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_root() -> bool {
        nix::unistd::geteuid().is_root()
    }

    #[test]
    fn invalid_ids_are_refused() {
        assert!(Owner::for_session(u32::MAX, 0).is_err());
        assert!(Owner::for_session(0, u32::MAX).is_err());
    }

    #[test]
    fn a_switched_thread_has_the_owners_fs_ids_and_groups_and_others_do_not() {
        if !is_root() {
            if std::env::var("TOLLGATE_REQUIRE_ROOT").as_deref() == Ok("1") {
                panic!("needs root");
            }
            eprintln!("skipped: needs root");
            return;
        }
        let pool = OwnerPool::new(Owner::for_session(65534, 65534).unwrap());
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let status = rt
            .block_on(pool.run(|| {
                std::fs::read_to_string("/proc/thread-self/status")
                    .map_err(|e| ToolError::Internal(e.to_string()))
            }))
            .unwrap();
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .unwrap()
                .split_whitespace()
                .skip(1)
                .collect::<Vec<_>>()
        };
        // Uid: real effective saved fs.
        assert_eq!(field("Uid:")[3], "65534");
        assert_eq!(field("Gid:")[3], "65534");
        assert_eq!(field("Groups:"), vec!["65534"]);
        // The filesystem capabilities are gone from the effective set.
        let capeff = u64::from_str_radix(field("CapEff:")[0], 16).unwrap();
        const CAP_DAC_OVERRIDE: u64 = 1 << 1;
        const CAP_DAC_READ_SEARCH: u64 = 1 << 2;
        const CAP_FOWNER: u64 = 1 << 3;
        assert_eq!(
            capeff & (CAP_DAC_OVERRIDE | CAP_DAC_READ_SEARCH | CAP_FOWNER),
            0
        );

        // The calling thread (and so the rest of the supervisor) is untouched.
        let mine = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        let fs_uid = mine
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .unwrap()
            .split_whitespace()
            .nth(4)
            .unwrap()
            .to_string();
        assert_eq!(fs_uid, "0");
    }

    #[test]
    fn a_worker_whose_credentials_drift_is_caught() {
        if !is_root() {
            if std::env::var("TOLLGATE_REQUIRE_ROOT").as_deref() == Ok("1") {
                panic!("needs root");
            }
            eprintln!("skipped: needs root");
            return;
        }
        let owner = Owner::for_session(65534, 65534).unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                owner.apply_to_this_thread().unwrap();
                owner.verify_this_thread().unwrap();
                // What a glibc setfsuid/setgroups broadcast would do.
                nix::unistd::setfsuid(Uid::from_raw(0));
                let err = owner.verify_this_thread().unwrap_err();
                assert!(
                    err.to_string()
                        .ends_with("the worker's filesystem ids changed to 0:65534"),
                    "{err}"
                );
                owner.apply_to_this_thread().unwrap();
                owner.verify_this_thread().unwrap();
                rustix::thread::set_thread_groups(&[rustix::thread::Gid::from_raw(0)]).unwrap();
                let err = owner.verify_this_thread().unwrap_err();
                assert!(err.to_string().contains("groups changed to [0]"), "{err}");
            });
        });
    }

    #[test]
    fn the_pool_grows_to_its_limit_and_ends_its_workers_when_dropped() {
        let uid = nix::unistd::geteuid().as_raw();
        let gid = nix::unistd::getegid().as_raw();
        let pool = OwnerPool::new(Owner::for_session(uid, gid).unwrap());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        // 16 jobs that all wait on one barrier-like latch: at most
        // MAX_WORKERS run at once, the others queue, and all finish.
        let started = Arc::new((Mutex::new(0usize), Condvar::new()));
        let results: Vec<usize> = rt.block_on(async {
            let mut handles = Vec::new();
            for i in 0..16 {
                let started = Arc::clone(&started);
                handles.push(pool.run(move || {
                    let (count, cv) = &*started;
                    let mut n = count.lock().unwrap();
                    *n += 1;
                    cv.notify_all();
                    Ok(i)
                }));
            }
            let mut out = Vec::new();
            for h in handles {
                out.push(h.await.unwrap());
            }
            out
        });
        assert_eq!(results, (0..16).collect::<Vec<_>>());
        assert!(pool.workers() >= 1 && pool.workers() <= MAX_WORKERS);
        // A panicking job is reported, and the pool still works after it.
        let err = rt
            .block_on(pool.run(|| -> Result<(), ToolError> { panic!("boom") }))
            .unwrap_err();
        assert!(matches!(err, ToolError::Internal(_)), "{err}");
        assert_eq!(rt.block_on(pool.run(|| Ok(7))).unwrap(), 7);

        let shared = Arc::clone(&pool.shared);
        drop(pool);
        // Dropping the pool ends every idle worker; wait for them to go.
        for _ in 0..1000 {
            if shared.lock().workers == 0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("workers still alive after the pool was dropped");
    }
}
