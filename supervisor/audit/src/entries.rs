//! Which new files' entries in the audit directory are on disk.
//!
//! A file's name reaches the disk with an fsync of its directory, not of the
//! file. Creating a file costs no flush here (opening a session stays cheap);
//! instead, every fsync of an audit file first makes durable the directory
//! entries of all files created before it. Because a record naming a file (the
//! supervisor log's `session_opened`) is always written after that file was
//! created, it can never reach the disk ahead of the file's name: after a
//! power loss, `audit verify` does not report a file as missing that was only
//! waiting for its directory's fsync. The directory is fsynced once for any
//! number of files created since the last time.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::lock;

#[derive(Debug)]
pub(crate) struct DirEntries {
    path: PathBuf,
    /// Files created in the directory so far.
    created: AtomicU64,
    /// Of those, how many have their entry on disk.
    durable: AtomicU64,
    /// Held while the directory is fsynced: one at a time, and a caller
    /// waiting for it then finds its files covered.
    syncing: Mutex<()>,
}

impl DirEntries {
    pub(crate) fn new(path: &Path) -> DirEntries {
        DirEntries {
            path: path.to_path_buf(),
            created: AtomicU64::new(0),
            durable: AtomicU64::new(0),
            syncing: Mutex::new(()),
        }
    }

    /// A file was just created in the directory.
    pub(crate) fn created(&self) {
        self.created.fetch_add(1, Ordering::SeqCst);
    }

    /// Whether every entry created so far is on disk.
    #[cfg(test)]
    pub(crate) fn all_durable(&self) -> bool {
        self.durable.load(Ordering::SeqCst) >= self.created.load(Ordering::SeqCst)
    }

    /// Makes every entry created before this call durable: one fsync of the
    /// directory, unless another caller's already covered them.
    pub(crate) fn sync(&self) -> io::Result<()> {
        let target = self.created.load(Ordering::SeqCst);
        if self.durable.load(Ordering::SeqCst) >= target {
            return Ok(());
        }
        let _one = lock(&self.syncing);
        if self.durable.load(Ordering::SeqCst) >= target {
            return Ok(());
        }
        File::open(&self.path)?.sync_all()?;
        self.durable.fetch_max(target, Ordering::SeqCst);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_fsync_covers_every_file_created_before_it() {
        let t = tempfile::tempdir().unwrap();
        let d = DirEntries::new(t.path());
        assert!(d.all_durable());
        d.created();
        d.created();
        assert!(!d.all_durable());
        d.sync().unwrap();
        assert!(d.all_durable());
        d.created();
        assert!(!d.all_durable());
    }

    #[test]
    fn a_directory_that_is_gone_is_an_error_and_stays_pending() {
        let t = tempfile::tempdir().unwrap();
        let d = DirEntries::new(&t.path().join("gone"));
        d.created();
        assert!(d.sync().is_err());
        assert!(!d.all_durable());
    }
}
