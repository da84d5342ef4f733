//! The audit directory's reserve: disk space held back in a preallocated file
//! (`.tollgate-reserve`), so that when the disk fills the supervisor can still
//! record what matters most: refusals, revocations, the anchors of closed
//! sessions and its own shutdown.
//!
//! A record is *ordinary* or *essential* ([`Priority`]). When an essential
//! record meets a full disk, the reserve gives back one chunk (it is cut
//! shorter) and the write is tried again, until the reserve is empty. From
//! the first chunk given back until the reserve is whole again, ordinary
//! records are refused (`AuditError::ReserveOnly`): what is left is kept for
//! the essential ones, and a tool call that cannot be recorded does not run.
//! The reserve grows back ([`Reserve::replenish`]) once the filesystem has the
//! missing bytes free and as much again to spare, so restoring it never takes
//! the last of the space a user just freed.
//!
//! The reserve is a hidden file, so no audit file name can match it and a
//! shell glob (`audit/*`) leaves it out.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::lock;

/// The reserve's file name in the audit directory.
pub const RESERVE_FILE: &str = ".tollgate-reserve";

/// How much the reserve gives back per essential record that finds the disk
/// full, and how it grows: one chunk at a time, so a partial reserve is kept
/// when the disk cannot hold all of it.
const CHUNK: u64 = 1 << 20;

/// Whether a record may draw on the reserve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    /// Refused while the reserve is being drawn on.
    Ordinary,
    /// Refusals, revocations, anchors, shutdown: may draw on the reserve.
    Essential,
}

/// The reserve's state, for `supervisorctl status` and `doctor`.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
pub struct ReserveStatus {
    /// Bytes the reserve should hold (0: none configured).
    pub target: u64,
    /// Bytes it holds now.
    pub held: u64,
    /// Essential records have drawn on it and it is not whole again:
    /// ordinary records are refused.
    pub drawing: bool,
}

struct Held {
    file: Option<File>,
    held: u64,
}

/// The preallocated reserve of one audit directory.
pub struct Reserve {
    dir: PathBuf,
    target: AtomicU64,
    state: Mutex<Held>,
    drawing: AtomicBool,
}

impl std::fmt::Debug for Reserve {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reserve")
            .field("dir", &self.dir)
            .field("status", &self.status())
            .finish()
    }
}

impl Reserve {
    /// No reserve yet (target 0): essential records behave like ordinary ones.
    pub(crate) fn none(dir: &Path) -> Reserve {
        Reserve {
            dir: dir.to_path_buf(),
            target: AtomicU64::new(0),
            state: Mutex::new(Held {
                file: None,
                held: 0,
            }),
            drawing: AtomicBool::new(false),
        }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.join(RESERVE_FILE)
    }

    pub fn status(&self) -> ReserveStatus {
        let held = lock(&self.state).held;
        ReserveStatus {
            target: self.target.load(Ordering::SeqCst),
            held,
            drawing: self.drawing.load(Ordering::SeqCst),
        }
    }

    /// Sets the size to hold (rounded up to whole chunks) and allocates as
    /// much of it as the disk has room for now; the rest is added by
    /// [`Reserve::replenish`]. 0 removes the reserve. A file left by an
    /// earlier run is taken over at its size.
    pub(crate) fn configure(&self, bytes: u64) -> Result<ReserveStatus, io::Error> {
        let target = bytes.div_ceil(CHUNK) * CHUNK;
        self.target.store(target, Ordering::SeqCst);
        let mut st = lock(&self.state);
        if target == 0 {
            st.file = None;
            st.held = 0;
            self.drawing.store(false, Ordering::SeqCst);
            return match std::fs::remove_file(self.path()) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
                _ => Ok(self.status_locked(&st)),
            };
        }
        if st.file.is_none() {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
                .open(self.path())?;
            st.held = file.metadata()?.len();
            st.file = Some(file);
        }
        if st.held > target {
            cut(&mut st, target)?;
        }
        grow(&mut st, target)?;
        Ok(self.status_locked(&st))
    }

    fn status_locked(&self, st: &Held) -> ReserveStatus {
        ReserveStatus {
            target: self.target.load(Ordering::SeqCst),
            held: st.held,
            drawing: self.drawing.load(Ordering::SeqCst),
        }
    }

    /// Whether an ordinary record must be refused now: the reserve has been
    /// drawn on and could not be restored yet (tried first).
    pub(crate) fn refuses_ordinary(&self) -> bool {
        if !self.drawing.load(Ordering::SeqCst) {
            return false;
        }
        self.replenish();
        self.drawing.load(Ordering::SeqCst)
    }

    /// Gives back one chunk for an essential record that found the disk
    /// full. False when there is nothing left to give.
    pub(crate) fn draw(&self) -> bool {
        let mut st = lock(&self.state);
        if st.held == 0 {
            return false;
        }
        let to = st.held.saturating_sub(CHUNK);
        if let Err(e) = cut(&mut st, to) {
            tracing::error!(path = %self.path().display(), error = %e, "cannot release the audit reserve");
            return false;
        }
        if !self.drawing.swap(true, Ordering::SeqCst) {
            tracing::warn!(
                dir = %self.dir.display(),
                "the audit disk is full: drawing on the reserve; only refusals, revocations, anchors and shutdown are recorded until it is restored"
            );
        }
        true
    }

    /// Grows the reserve back towards its size when the filesystem has the
    /// missing bytes free and as much again to spare; ends the drawing state
    /// once it is whole. Cheap when there is nothing to do.
    pub fn replenish(&self) {
        let target = self.target.load(Ordering::SeqCst);
        let mut st = lock(&self.state);
        if st.held >= target {
            self.end_drawing(&st, target);
            return;
        }
        let missing = target - st.held;
        let free = match free_bytes(&self.dir) {
            Ok(f) => f,
            Err(e) => {
                tracing::debug!(dir = %self.dir.display(), error = %e, "statvfs of the audit dir failed");
                return;
            }
        };
        if free < missing.saturating_add(target) {
            return;
        }
        if let Err(e) = grow(&mut st, target) {
            tracing::warn!(path = %self.path().display(), error = %e, "cannot restore the audit reserve");
        }
        self.end_drawing(&st, target);
    }

    fn end_drawing(&self, st: &Held, target: u64) {
        if st.held >= target && self.drawing.swap(false, Ordering::SeqCst) {
            tracing::info!(dir = %self.dir.display(), bytes = target, "the audit reserve is restored; ordinary records resume");
        }
    }
}

/// Cuts the reserve file to `to` bytes (their blocks go back to the disk).
fn cut(st: &mut Held, to: u64) -> io::Result<()> {
    if let Some(f) = &st.file {
        f.set_len(to)?;
    }
    st.held = to;
    Ok(())
}

/// Allocates chunks up to `target`; stops quietly when the disk is full.
fn grow(st: &mut Held, target: u64) -> io::Result<()> {
    let Some(file) = &st.file else {
        return Ok(());
    };
    while st.held < target {
        let len = CHUNK.min(target - st.held);
        match nix::fcntl::fallocate(
            file,
            nix::fcntl::FallocateFlags::empty(),
            st.held as i64,
            len as i64,
        ) {
            Ok(()) => st.held += len,
            Err(nix::errno::Errno::ENOSPC) | Err(nix::errno::Errno::EDQUOT) => {
                // A partly allocated chunk stays beyond the size we count:
                // cut it off so the disk gets it back.
                file.set_len(st.held)?;
                return Ok(());
            }
            Err(e) => return Err(io::Error::from(e)),
        }
    }
    Ok(())
}

/// Bytes an unprivileged writer may still allocate on the filesystem of `path`.
pub fn free_bytes(path: &Path) -> io::Result<u64> {
    let s = nix::sys::statvfs::statvfs(path).map_err(io::Error::from)?;
    Ok((s.blocks_available() as u64).saturating_mul(s.fragment_size() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reserve_is_allocated_cut_by_chunks_and_restored() {
        let t = tempfile::tempdir().unwrap();
        let r = Reserve::none(t.path());
        assert!(!r.refuses_ordinary());
        assert!(!r.draw(), "nothing to give without a reserve");
        let s = r.configure(3 * CHUNK - 5).unwrap();
        assert_eq!((s.target, s.held, s.drawing), (3 * CHUNK, 3 * CHUNK, false));
        let meta = std::fs::metadata(r.path()).unwrap();
        assert_eq!(meta.len(), 3 * CHUNK);
        use std::os::unix::fs::MetadataExt;
        assert!(meta.blocks() * 512 >= 3 * CHUNK, "the blocks are allocated");
        assert!(r.draw());
        assert_eq!(r.status().held, 2 * CHUNK);
        assert!(r.status().drawing);
        // This disk has room: an ordinary record restores it first.
        assert!(!r.refuses_ordinary());
        assert_eq!(
            r.status(),
            ReserveStatus {
                target: 3 * CHUNK,
                held: 3 * CHUNK,
                drawing: false
            }
        );
        // Configured to nothing: the file goes.
        r.configure(0).unwrap();
        assert!(!r.path().exists());
    }
}
