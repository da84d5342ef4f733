//! The disk floor (`[sandbox] min_free_mb`): a workspace's filesystem must
//! keep that much free. The filesystem is often shared (with other users'
//! workspaces, with the audit directory), and `fsize_mb` bounds one file, not
//! how many a command writes: a loop of `fallocate` fills gigabytes in
//! milliseconds.
//!
//! - Before a command or a file write: refused while the workspace's
//!   filesystem is under the floor (the gate's executors, rule `floor:disk`).
//! - While a session's sandbox lives: the supervisor's watcher looks at the free space of
//!   each workspace's filesystem every [`FAST`] while a command runs (every
//!   [`SLOW`] otherwise, for processes a command left behind), and when it
//!   falls under the floor, stops the session's sandbox: every process in it
//!   is killed, the running command answers with the reason, and the stop
//!   is recorded (the daemon's `disk.rs`).
//!
//! Polling cannot stop a writer before it crosses the floor, only soon
//! after; the audit directory's reserve (`[audit] reserve_mb`) covers the
//! overshoot for the records that matter. Filesystems with project quotas
//! would bound each session up front; this host's do not (see
//! docs/THREAT_MODEL.md).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

/// How often the free space is looked at while a command runs.
pub const FAST: Duration = Duration::from_millis(20);
/// How often otherwise, while a session's sandbox lives.
pub const SLOW: Duration = Duration::from_millis(500);

const MIB: u64 = 1 << 20;

/// A workspace's filesystem under the floor (or unreadable: refused too).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Low {
    pub workspace: PathBuf,
    pub floor: u64,
    /// Free bytes, or why they could not be read.
    pub free: Result<u64, String>,
}

impl Low {
    fn state(&self) -> String {
        match &self.free {
            Ok(free) => format!(
                "the filesystem of workspace {} has {} MiB free, under the floor of {} MiB ([sandbox] min_free_mb)",
                self.workspace.display(),
                free / MIB,
                self.floor / MIB
            ),
            Err(e) => format!(
                "the free space of workspace {}'s filesystem cannot be read ({e})",
                self.workspace.display()
            ),
        }
    }

    /// Why a command or a file write is refused.
    pub fn refused(&self) -> String {
        format!(
            "{}, so commands and file writes are refused. Tell the user to free space on it (files this session wrote may be the cause); do not retry until then.",
            self.state()
        )
    }

    /// Why a running command was stopped.
    pub fn stopped(&self) -> String {
        format!(
            "the command was stopped: {}, and every process of the session's sandbox was killed. What it wrote stays. Tell the user to free space on it; commands are refused until then.",
            self.state()
        )
    }

    /// Free MiB, for records (None when unreadable).
    pub fn free_mb(&self) -> Option<u64> {
        self.free.as_ref().ok().map(|f| f / MIB)
    }
}

/// The floor and the commands in flight.
pub struct DiskGuard {
    /// Bytes; 0 turns the floor off.
    floor: u64,
    running: AtomicU32,
    wake: Notify,
}

impl DiskGuard {
    pub fn new(min_free_mb: u64) -> DiskGuard {
        DiskGuard {
            floor: min_free_mb.saturating_mul(MIB),
            running: AtomicU32::new(0),
            wake: Notify::new(),
        }
    }

    /// Waits until a command starts (the watcher then looks often).
    pub async fn woken(&self) {
        self.wake.notified().await
    }

    pub fn floor_mb(&self) -> u64 {
        self.floor / MIB
    }

    /// `Err` when the filesystem holding `workspace` is under the floor.
    pub fn check(&self, workspace: &Path) -> Result<(), Low> {
        if self.floor == 0 {
            return Ok(());
        }
        match tollgate_audit::reserve::free_bytes(workspace) {
            Ok(free) if free >= self.floor => Ok(()),
            free => Err(Low {
                workspace: workspace.to_path_buf(),
                floor: self.floor,
                free: free.map_err(|e| e.to_string()),
            }),
        }
    }

    /// Marks a command running (the watcher looks every [`FAST`] meanwhile).
    pub fn command(&self) -> Running<'_> {
        self.running.fetch_add(1, Ordering::SeqCst);
        self.wake.notify_one();
        Running { guard: self }
    }

    /// How long the watcher waits before it looks again.
    pub fn interval(&self) -> Duration {
        if self.running.load(Ordering::SeqCst) > 0 {
            FAST
        } else {
            SLOW
        }
    }
}

/// A command in flight; see [`DiskGuard::command`].
pub struct Running<'a> {
    guard: &'a DiskGuard,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.guard.running.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_compares_free_space_and_can_be_off() {
        let t = tempfile::tempdir().unwrap();
        assert_eq!(DiskGuard::new(0).check(t.path()), Ok(()));
        assert_eq!(DiskGuard::new(1).check(t.path()), Ok(()));
        // More than any disk here has free.
        let low = DiskGuard::new(u64::MAX / MIB).check(t.path()).unwrap_err();
        assert!(low.free.is_ok());
        let text = low.refused();
        assert!(text.contains(&t.path().display().to_string()), "{text}");
        assert!(text.contains("[sandbox] min_free_mb"), "{text}");
        let gone = DiskGuard::new(1)
            .check(&t.path().join("missing"))
            .unwrap_err();
        assert!(
            gone.refused().contains("cannot be read"),
            "{}",
            gone.refused()
        );
    }

    #[test]
    fn a_running_command_makes_the_watcher_look_often() {
        let g = DiskGuard::new(1);
        assert_eq!(g.interval(), SLOW);
        {
            let _r = g.command();
            assert_eq!(g.interval(), FAST);
        }
        assert_eq!(g.interval(), SLOW);
    }
}
