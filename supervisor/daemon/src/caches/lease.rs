//! Who has a cache leaf attached (docs/OPERATIONS.md "Package caches"):
//! `<leaf>.lease` beside the leaf, in the supervisor's own `<uid>`
//! directory that no sandbox sees. Each sandbox with the leaf attached
//! holds a shared `flock` on an open of its own, from before the sandbox
//! is built until every process of it is gone ([`tollgate_sandbox::Lease`]).
//! Trimming takes the lock exclusively without waiting, so it happens only
//! while no sandbox has the leaf: when a sandbox is built and no other
//! holds it, and else when the last holder ends. A trim never waits for a
//! sandbox; a sandbox waits for a trim in progress to finish. A clear
//! (`supervisorctl cache clear`) takes it exclusively the same way and
//! keeps it while it removes the leaf ([`for_clear`]); who holds a leaf is
//! named from [`Holders`], the supervisor's table of its own holds.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

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
    holder: Holder,
}

/// The sandbox that holds a leaf: its session's id (a session's, or an
/// operator's `sandbox exec`, `x…`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct HolderId(pub String);

impl std::fmt::Display for HolderId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Which sandboxes of this supervisor hold each leaf: the names a refused
/// clear gives. The lock itself is the truth; this only names its holders.
#[derive(Debug, Clone, Default)]
pub struct Holders(Arc<Mutex<BTreeMap<PathBuf, Vec<HolderId>>>>);

impl Holders {
    fn table(&self) -> MutexGuard<'_, BTreeMap<PathBuf, Vec<HolderId>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn add(&self, leaf: &Path, id: &HolderId) {
        self.table()
            .entry(leaf.to_path_buf())
            .or_default()
            .push(id.clone());
    }

    fn remove(&self, leaf: &Path, id: &HolderId) {
        let mut t = self.table();
        if let Some(v) = t.get_mut(leaf) {
            if let Some(i) = v.iter().position(|h| h == id) {
                v.remove(i);
            }
            if v.is_empty() {
                t.remove(leaf);
            }
        }
    }

    /// The sandboxes holding `leaf` now, each once, in order.
    pub fn of(&self, leaf: &Path) -> Vec<HolderId> {
        let mut v = self.table().get(leaf).cloned().unwrap_or_default();
        v.sort();
        v.dedup();
        v
    }
}

/// One sandbox, in the table it is named in.
#[derive(Debug, Clone)]
pub struct Holder {
    pub holders: Holders,
    pub id: HolderId,
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

/// Holds `leaf` for one sandbox (`holder`): trims it first (`trim`) when
/// no other sandbox holds it, then takes the shared lock (waiting only for
/// a trim or a clear in progress elsewhere).
pub fn hold(
    leaf: &Path,
    cap: Cap,
    holder: Holder,
    trim: impl FnOnce(&Path, u64),
) -> io::Result<Hold> {
    let file = open(leaf)?;
    if let Some(cap_bytes) = cap
        && try_exclusive(&file)?
    {
        trim(leaf, cap_bytes);
    }
    // From exclusive (or nothing) to shared: not atomic, and need not be:
    // this sandbox does not exist yet, so whoever gets in between may trim.
    rustix::fs::flock(&file, FlockOperation::LockShared)?;
    holder.holders.add(leaf, &holder.id);
    Ok(Hold {
        file: Some(file),
        leaf: leaf.to_path_buf(),
        cap,
        holder,
    })
}

impl Hold {
    /// The leaf held.
    pub fn leaf(&self) -> &Path {
        &self.leaf
    }
}

/// A clear's exclusive hold on a leaf: no sandbox holds it while this
/// lives, and one being built waits until it is dropped.
#[derive(Debug)]
pub struct ClearLock {
    _file: File,
}

/// The leaf, exclusively, for a clear: `Err(holders)` (the names this
/// supervisor knows, maybe none) when some sandbox holds it. Never waits.
pub fn for_clear(leaf: &Path, holders: &Holders) -> io::Result<Result<ClearLock, Vec<HolderId>>> {
    let file = open(leaf)?;
    if try_exclusive(&file)? {
        Ok(Ok(ClearLock { _file: file }))
    } else {
        Ok(Err(holders.of(leaf)))
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.holder.holders.remove(&self.leaf, &self.holder.id);
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

    fn holder(holders: &Holders, id: &str) -> Holder {
        Holder {
            holders: holders.clone(),
            id: HolderId(id.to_string()),
        }
    }

    fn nobody() -> Holder {
        holder(&Holders::default(), "S")
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
        let first = hold(&l, Some(0), nobody(), real).unwrap();
        assert!(!l.join("a").exists());
        assert_eq!(trims.load(Ordering::SeqCst), 1);
        // The first sandbox writes; a second starts: no trim under it.
        fill(&l, "b");
        let second = hold(&l, Some(0), nobody(), real).unwrap();
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
        let h = hold(&l, None, nobody(), |_, _| panic!("trimmed without a cap")).unwrap();
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
        assert!(hold(&l, Some(0), nobody(), |_, _| {}).is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"x");
    }

    #[test]
    fn a_clear_is_refused_while_a_sandbox_holds_the_leaf_and_names_it() {
        let (_d, l) = leaf();
        let holders = Holders::default();
        let a = hold(&l, None, holder(&holders, "AAAA"), |_, _| {}).unwrap();
        let b = hold(&l, None, holder(&holders, "xBBB"), |_, _| {}).unwrap();
        let named = for_clear(&l, &holders).unwrap().unwrap_err();
        assert_eq!(
            named,
            vec![HolderId("AAAA".into()), HolderId("xBBB".into())]
        );
        drop(a);
        let named = for_clear(&l, &holders).unwrap().unwrap_err();
        assert_eq!(named, vec![HolderId("xBBB".into())]);
        drop(b);
        assert!(holders.of(&l).is_empty());
        let lock = for_clear(&l, &holders)
            .unwrap()
            .expect("no one holds it now");
        drop(lock);
    }

    #[test]
    fn a_sandbox_being_built_waits_for_a_clear_in_progress() {
        let (_d, l) = leaf();
        let holders = Holders::default();
        let lock = for_clear(&l, &holders).unwrap().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let (l2, h2) = (l.clone(), holders.clone());
        let t = std::thread::spawn(move || {
            let h = hold(&l2, None, holder(&h2, "S"), |_, _| {}).unwrap();
            tx.send(()).unwrap();
            h
        });
        let waited = rx.recv_timeout(std::time::Duration::from_millis(200));
        assert!(waited.is_err(), "held the leaf during a clear");
        drop(lock);
        rx.recv_timeout(std::time::Duration::from_secs(5))
            .expect("still waiting after the clear ended");
        let h = t.join().unwrap();
        assert_eq!(holders.of(&l), vec![HolderId("S".into())]);
        drop(h);
    }
}
