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

/// Fills the tmpfs with a filler file until not one more byte fits (the
/// filler can be removed to make room again).
fn fill(mnt: &Path) -> PathBuf {
    use std::io::Write;
    let filler = mnt.join("filler");
    let mut f = std::fs::File::create(&filler).unwrap();
    let block = vec![0u8; 64 * 1024];
    loop {
        if f.write_all(&block).is_err() {
            break;
        }
    }
    // The last partial page too.
    while f.write_all(&[0u8; 512]).is_ok() {}
    while f.write_all(&[0u8]).is_ok() {}
    filler
}

/// The reserve (docs/OPERATIONS.md, "The audit disk and shared disks")
/// keeps room for the essential records (refusals,
/// revocations, anchors, shutdown) when the disk is full; meanwhile ordinary
/// records are refused, and both resume once the disk has room again.
#[test]
fn the_reserve_keeps_room_for_essential_records() {
    if !have_root() {
        return;
    }
    let fs = Tmpfs::new("8m");
    let audit = Audit::open(&fs.path.join("audit"), SyncMode::Always, None).unwrap();
    let status = audit.set_reserve(2 << 20).unwrap();
    assert_eq!(
        (status.target, status.held, status.drawing),
        (2 << 20, 2 << 20, false)
    );
    let reserve = fs.path.join("audit").join(tollgate_audit::RESERVE_FILE);
    assert_eq!(std::fs::metadata(&reserve).unwrap().len(), 2 << 20);
    let log = audit.supervisor_log().unwrap();
    let f = audit.open_session("res1").unwrap();
    f.append("res1", "session_opened", json!({})).unwrap();
    let filler = fill(&fs.path);

    // Ordinary: refused, the disk is full.
    let err = f
        .append("res1", "tool_started", json!({"pad": "x".repeat(8000)}))
        .unwrap_err();
    assert!(err.is_disk_full(), "{err}");
    // Essential: drawn from the reserve.
    let a = f
        .append_with(
            "res1",
            "session_revoked",
            json!({"reason": "disk full", "pad": "x".repeat(8000)}),
            tollgate_audit::Durable::AsConfigured,
            tollgate_audit::Priority::Essential,
        )
        .unwrap();
    let s = audit.reserve_status();
    assert!(s.drawing && s.held < s.target, "{s:?}");
    // The anchor is essential too.
    audit.anchor(&f, "res1").unwrap();
    assert!(audit.unanchored().is_empty());
    // While the reserve is drawn on, ordinary records are refused even
    // though the space it gave back is free, and no new session file is
    // created.
    let err = log.append("", "session_opened", json!({})).unwrap_err();
    assert!(matches!(err, AuditError::ReserveOnly { .. }), "{err:?}");
    assert!(err.is_disk_full());
    let before = std::fs::read_dir(fs.path.join("audit")).unwrap().count();
    assert!(matches!(
        audit.open_session("res2").unwrap_err(),
        AuditError::ReserveOnly { .. }
    ));
    assert_eq!(
        std::fs::read_dir(fs.path.join("audit")).unwrap().count(),
        before
    );

    // Room again: the next ordinary record restores the reserve first.
    std::fs::remove_file(&filler).unwrap();
    f.append("res1", "after", json!({})).unwrap();
    let s = audit.reserve_status();
    assert_eq!((s.held, s.drawing), (s.target, false), "{s:?}");
    audit.flush().unwrap();
    assert_eq!(verify_file(f.path(), None).unwrap().records, a.seq + 1);
}

/// Appends padding records to `f` until not even the smallest fits in what
/// is left of its last page.
fn exhaust(f: &tollgate_audit::AuditFile) {
    for pad in [4096, 1024, 256, 64, 16, 0] {
        while f.append("", "pad", json!({"pad": "p".repeat(pad)})).is_ok() {}
    }
}

/// An anchor that cannot be written when its session closes is
/// kept, written late once there is room, and until then `anchor_book` names
/// the file unanchored (its session ended).
#[test]
fn an_anchor_that_finds_the_disk_full_is_written_when_room_returns() {
    if !have_root() {
        return;
    }
    use tollgate_audit::verify::{Anchor, anchor_book};
    let fs = Tmpfs::new("1m");
    let dir = fs.path.join("audit");
    let audit = Audit::open(&dir, SyncMode::Always, None).unwrap();
    let log = audit.supervisor_log().unwrap();
    let f = audit.open_session("late1").unwrap();
    f.append("late1", "session_opened", json!({})).unwrap();
    log.append(
        "late1",
        "session_opened",
        json!({"audit_file": f.path().display().to_string()}),
    )
    .unwrap();
    log.append("late1", "session_closed", json!({"reason": "done"}))
        .unwrap();
    let filler = fill(&fs.path);
    exhaust(&log);
    // No reserve configured: the anchor cannot be written, and is kept.
    let err = audit.anchor(&f, "late1").unwrap_err();
    assert!(err.is_disk_full(), "{err}");
    assert_eq!(audit.unanchored(), vec![f.path().to_path_buf()]);
    let name = f.file_name();
    assert_eq!(
        anchor_book(&dir).unwrap().get(&name),
        Some(&Anchor::Missing {
            session: "late1".to_string(),
            ended: true
        })
    );
    assert_eq!(audit.retry_anchors(), 0, "still full");
    assert_eq!(audit.unanchored().len(), 1);

    std::fs::remove_file(&filler).unwrap();
    assert_eq!(audit.retry_anchors(), 1);
    assert!(audit.unanchored().is_empty());
    audit.flush().unwrap();
    let head = f.head().hash;
    assert_eq!(
        anchor_book(&dir).unwrap().get(&name),
        Some(&Anchor::Head(head))
    );
    let text = std::fs::read_to_string(log.path()).unwrap();
    let last = text.lines().last().unwrap();
    assert!(last.contains("\"event\":\"audit_file_closed\""), "{last}");
    assert!(last.contains("\"late\":true"), "{last}");
}

/// A session file that nothing names yet is removed when its
/// session is refused.
#[test]
fn a_discarded_session_file_is_gone_and_refuses_appends() {
    let t = tmp();
    let audit = Audit::open(&t.path().join("a"), SyncMode::Always, None).unwrap();
    let f = audit.open_session("gone1").unwrap();
    assert!(f.path().exists());
    audit.discard(&f).unwrap();
    assert!(!f.path().exists());
    assert!(f.append("gone1", "e", json!({})).is_err());
}
