//! Who has a cache leaf attached (docs/OPERATIONS.md "Package caches"):
//! `<leaf>.lease` beside the leaf, in the supervisor's own `<uid>`
//! directory that no sandbox sees. Each sandbox with the leaf attached
//! holds a shared `flock` on an open of its own, from before the sandbox
//! is built until every process of it is gone ([`tollgate_sandbox::Lease`]).
//! Trimming takes the lock exclusively without waiting, so it happens only
//! while no sandbox has the leaf: when a sandbox is built and no other
//! holds it, and else when the last holder ends. A trim never waits for a
//! sandbox; a sandbox waits for a trim in progress to finish.

use std::fs::File;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rustix::fs::FlockOperation;

/// The leaf's size cap: trimmed to `cap_bytes` when no sandbox has it;
/// `None`: never trimmed.
pub type Cap = Option<u64>;

/// One sandbox's hold on a leaf. Dropped by the last clone of the
/// sandbox's [`tollgate_sandbox::Lease`]: the hold ends, and the leaf is
/// trimmed on a thread of its own if no other sandbox holds it.
#[derive(Debug)]
pub struct Hold {
    file: Option<File>,
    leaf: PathBuf,
    cap: Cap,
}

/// The lock file of `leaf`: its name with `.lease` added.
pub fn file_of(leaf: &Path) -> PathBuf {
    let mut name = leaf.as_os_str().to_owned();
    name.push(".lease");
    PathBuf::from(name)
}

fn open(leaf: &Path) -> io::Result<File> {
    let path = file_of(leaf);
    std::fs::File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

/// The exclusive lock, when no one holds the file: `Ok(false)` when
/// someone does.
fn try_exclusive(f: &File) -> io::Result<bool> {
    match rustix::fs::flock(f, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Holds `leaf` for one sandbox: trims it first (`trim`) when no other
/// sandbox holds it, then takes the shared lock (waiting only for a trim
/// in progress elsewhere).
pub fn hold(leaf: &Path, cap: Cap, trim: impl FnOnce(&Path, u64)) -> io::Result<Hold> {
    let file = open(leaf)?;
    if let Some(cap_bytes) = cap
        && try_exclusive(&file)?
    {
        trim(leaf, cap_bytes);
    }
    // From exclusive (or nothing) to shared: not atomic, and need not be:
    // this sandbox does not exist yet, so whoever gets in between may trim.
    rustix::fs::flock(&file, FlockOperation::LockShared)?;
    Ok(Hold {
        file: Some(file),
        leaf: leaf.to_path_buf(),
        cap,
    })
}

impl Drop for Hold {
    fn drop(&mut self) {
        let Some(file) = self.file.take() else {
            return;
        };
        let Some(cap_bytes) = self.cap else {
            return;
        };
        // The shared lock turns exclusive only when no other sandbox holds
        // the leaf; otherwise it is dropped and the last holder trims.
        if !try_exclusive(&file).unwrap_or(false) {
            return;
        }
        let leaf = std::mem::take(&mut self.leaf);
        let spawned = std::thread::Builder::new()
            .name("tollgate-cache-trim".to_string())
            .spawn(move || {
                super::trim_logged(&leaf, cap_bytes);
                drop(file);
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "package cache not trimmed: no thread for it");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn leaf() -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let l = d.path().join("owner");
        std::fs::create_dir(&l).unwrap();
        (d, l)
    }

    fn fill(l: &Path, name: &str) {
        std::fs::write(l.join(name), vec![1u8; 64 << 10]).unwrap();
    }

    fn wait_gone(p: &Path) -> bool {
        for _ in 0..200 {
            if !p.exists() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        false
    }

    #[test]
    fn a_held_leaf_is_trimmed_only_once_its_last_holder_ends() {
        let (_d, l) = leaf();
        let trims = AtomicU32::new(0);
        let real = |leaf: &Path, cap: u64| {
            trims.fetch_add(1, Ordering::SeqCst);
            super::super::store::trim(leaf, cap).unwrap();
        };
        fill(&l, "a");
        // No one holds it: the first sandbox's start trims.
        let first = hold(&l, Some(0), real).unwrap();
        assert!(!l.join("a").exists());
        assert_eq!(trims.load(Ordering::SeqCst), 1);
        // The first sandbox writes; a second starts: no trim under it.
        fill(&l, "b");
        let second = hold(&l, Some(0), real).unwrap();
        assert_eq!(trims.load(Ordering::SeqCst), 1);
        assert!(l.join("b").exists());
        drop(first);
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(
            l.join("b").exists(),
            "trimmed while the second still holds it"
        );
        // The last holder ends: the trim happens then.
        drop(second);
        assert!(
            wait_gone(&l.join("b")),
            "not trimmed after the last holder ended"
        );
    }

    #[test]
    fn without_a_cap_nothing_is_trimmed() {
        let (_d, l) = leaf();
        fill(&l, "a");
        let h = hold(&l, None, |_, _| panic!("trimmed without a cap")).unwrap();
        drop(h);
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(l.join("a").exists());
        assert!(file_of(&l).exists());
    }

    #[test]
    fn the_lease_file_is_never_a_symlink_followed() {
        let (d, l) = leaf();
        let target = d.path().join("elsewhere");
        std::fs::write(&target, b"x").unwrap();
        std::os::unix::fs::symlink(&target, file_of(&l)).unwrap();
        assert!(hold(&l, Some(0), |_, _| {}).is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"x");
    }
}
