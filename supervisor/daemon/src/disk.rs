//! The disk floor's watcher: while a session's sandbox lives, it looks at
//! the free space of each workspace's filesystem every
//! [`tollgate_gate::disk::FAST`] while a command runs (every
//! [`tollgate_gate::disk::SLOW`] otherwise), and when it falls under the
//! floor, stops the session's sandbox
//! ([`crate::supervisor::Supervisor::stop_for_disk`]). The floor itself is
//! the gate's (`tollgate_gate::disk`).

use std::collections::HashMap;
use std::sync::Arc;

pub use tollgate_gate::disk::{DiskGuard, Low};

use crate::supervisor::Supervisor;

/// Watches the filesystems of the sessions that have a sandbox, until the
/// supervisor shuts down; stops a session's sandbox when its workspace's
/// filesystem falls under the floor.
pub async fn watch(sup: Arc<Supervisor>) {
    if sup.disk.floor_mb() == 0 {
        return;
    }
    loop {
        let interval = sup.disk.interval();
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = sup.disk.woken() => {}
            _ = sup.shutdown.cancelled() => return,
        }
        // One statvfs per filesystem, however many sessions share it.
        let mut by_dev: HashMap<u64, Result<(), Low>> = HashMap::new();
        for session in sup.sessions.all() {
            if session.sandbox.get().is_none() || !session.is_active() {
                continue;
            }
            let dev = session.files.id().0;
            let state = by_dev
                .entry(dev)
                .or_insert_with(|| sup.disk.check(&session.workspace));
            if let Err(low) = state {
                let low = Low {
                    workspace: session.workspace.clone(),
                    ..low.clone()
                };
                sup.stop_for_disk(&session, &low).await;
            }
        }
    }
}
