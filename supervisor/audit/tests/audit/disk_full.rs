//! A full disk: a real, small tmpfs. Appends fail with ENOSPC, nothing is
//! torn, and the file verifies up to the last successful record.

use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use serde_json::json;
use tollgate_audit::{Audit, AuditError, SyncMode, verify_file};

use crate::common::{have_root, tmp};

/// A tmpfs mounted for the test's lifetime.
struct Tmpfs {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmpfs {
    fn new(size: &str) -> Tmpfs {
        let dir = tmp();
        let path = dir.path().join("mnt");
        std::fs::create_dir(&path).unwrap();
        mount(
            Some("tmpfs"),
            &path,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some(format!("size={size},mode=0700").as_str()),
        )
        .unwrap();
        Tmpfs { path, _dir: dir }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        if let Err(e) = umount2(&self.path, MntFlags::MNT_DETACH) {
            eprintln!("umount {}: {e}", self.path.display());
        }
    }
}

fn fill_until_full(mnt: &Path, sync: SyncMode) {
    // Leave a filler file we can delete later to make room again.
    std::fs::write(mnt.join("filler"), vec![0u8; 64 * 1024]).unwrap();
    let audit = Audit::open(&mnt.join("audit"), sync, None).unwrap();
    let f = audit.open_session("full1").unwrap();
    let payload = "p".repeat(1500); // records straddle page boundaries
    let mut last = None;
    let mut ok = 0u64;
    let err = loop {
        match f.append("full1", "tool_result", json!({"n": ok, "out": payload})) {
            Ok(a) => {
                ok += 1;
                last = Some(a);
            }
            Err(e) => break e,
        }
        assert!(ok < 100_000, "the tmpfs never filled up");
    };
    assert!(err.is_disk_full(), "{err}");
    assert!(matches!(err, AuditError::Io { .. }), "{err:?}");
    assert!(
        !f.is_broken(),
        "a cleanly cut-back write must not break the file"
    );
    let last = last.expect("at least one record fitted");
    assert_eq!(last.seq, ok);
    assert_eq!(f.head(), last);

    // Nothing torn: the file ends with a newline and verifies to the last
    // successful record.
    let data = std::fs::read(f.path()).unwrap();
    assert_eq!(data.last(), Some(&b'\n'));
    let v = verify_file(f.path(), Some(&last.hash)).unwrap();
    assert_eq!(v.records, ok);

    // Still full: still refused, still intact.
    assert!(
        f.append("full1", "tool_result", json!({"out": payload}))
            .unwrap_err()
            .is_disk_full()
    );
    assert_eq!(verify_file(f.path(), Some(&last.hash)).unwrap().records, ok);

    // Room again: the chain continues where it left off.
    std::fs::remove_file(mnt.join("filler")).unwrap();
    let next = f
        .append("full1", "tool_result", json!({"after": "space freed"}))
        .unwrap();
    assert_eq!(next.seq, ok + 1);
    audit.flush().unwrap();
    assert_eq!(
        verify_file(f.path(), Some(&next.hash)).unwrap().records,
        ok + 1
    );
}

#[test]
fn full_disk_always_mode() {
    if !have_root() {
        return;
    }
    let fs = Tmpfs::new("256k");
    fill_until_full(&fs.path, SyncMode::Always);
}

#[test]
fn full_disk_batch_mode() {
    if !have_root() {
        return;
    }
    let fs = Tmpfs::new("256k");
    fill_until_full(&fs.path, SyncMode::Batch);
}

#[test]
fn full_disk_refuses_a_new_file_cleanly() {
    if !have_root() {
        return;
    }
    let fs = Tmpfs::new("64k");
    let audit = Audit::open(&fs.path.join("audit"), SyncMode::Always, None).unwrap();
    // Fill the disk completely.
    let _ = std::fs::write(fs.path.join("filler"), vec![0u8; 128 * 1024]);
    match audit.supervisor_log() {
        Err(e) => assert!(e.is_disk_full(), "{e}"),
        // The empty file fit but its first record cannot have.
        Ok(f) => panic!(
            "supervisor log written on a full disk: {}",
            f.path().display()
        ),
    }
}
