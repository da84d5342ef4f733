//! Batch mode's background flusher: fsyncs each dirty file [`FLUSH_DELAY`]
//! after its first unsynced record, so at most 50 ms of records are at risk.

use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::file::AuditFile;
use crate::lock;

/// How long the flusher lets records gather before one fsync covers them.
/// With fsync at ~0.1 ms this keeps the bound of 50 ms with a wide margin.
pub const FLUSH_DELAY: Duration = Duration::from_millis(20);

#[derive(Default)]
struct FlushState {
    pending: Vec<Weak<AuditFile>>,
    first: Option<Instant>,
    shutdown: bool,
}

#[derive(Default)]
pub(crate) struct FlushShared {
    state: Mutex<FlushState>,
    cv: Condvar,
}

impl std::fmt::Debug for FlushShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FlushShared")
    }
}

impl FlushShared {
    /// Queues a file for the next group fsync. False once shut down (the
    /// caller then syncs itself).
    pub(crate) fn register(&self, file: Weak<AuditFile>) -> bool {
        let mut st = lock(&self.state);
        if st.shutdown {
            return false;
        }
        st.pending.push(file);
        if st.first.is_none() {
            st.first = Some(Instant::now());
            self.cv.notify_one();
        }
        true
    }
}

/// Owns the flusher thread; dropping it syncs what is queued and joins.
#[derive(Debug)]
pub(crate) struct Flusher {
    shared: Arc<FlushShared>,
    thread: Option<JoinHandle<()>>,
}

impl Flusher {
    pub(crate) fn start() -> std::io::Result<Flusher> {
        let shared = Arc::new(FlushShared::default());
        let s2 = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("audit-flusher".to_string())
            .spawn(move || run(&s2))?;
        Ok(Flusher {
            shared,
            thread: Some(thread),
        })
    }

    pub(crate) fn shared(&self) -> Arc<FlushShared> {
        Arc::clone(&self.shared)
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        {
            let mut st = lock(&self.shared.state);
            st.shutdown = true;
            self.shared.cv.notify_all();
        }
        if let Some(t) = self.thread.take()
            && t.join().is_err()
        {
            tracing::error!("audit flusher thread panicked");
        }
    }
}

fn run(shared: &FlushShared) {
    let mut st = lock(&shared.state);
    loop {
        match st.first {
            Some(first) => {
                let deadline = first + FLUSH_DELAY;
                let now = Instant::now();
                if now < deadline && !st.shutdown {
                    st = shared
                        .cv
                        .wait_timeout(st, deadline - now)
                        .map(|(g, _)| g)
                        .unwrap_or_else(|p| p.into_inner().0);
                    continue;
                }
                let files = std::mem::take(&mut st.pending);
                st.first = None;
                drop(st);
                for f in files.iter().filter_map(Weak::upgrade) {
                    if let Err(e) = f.flush_queued() {
                        tracing::error!(error = %e, "audit batch fsync failed");
                    }
                }
                st = lock(&shared.state);
            }
            None if st.shutdown => break,
            None => {
                st = shared
                    .cv
                    .wait(st)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
        }
    }
}
