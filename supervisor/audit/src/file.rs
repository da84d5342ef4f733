//! One audit file: the appender and its durability.

use std::fmt;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock, Weak};

use serde_json::{Map, Value};

use crate::entries::DirEntries;
use crate::event::Event;
use crate::flusher::FlushShared;
use crate::record::{GENESIS, RESERVED_KEYS, Timestamp, build_line, write_json};
use crate::reserve::{Priority, Reserve};
use crate::{Appended, AuditError, Redactor, SyncMode, lock};

/// The redactor shared by an [`crate::Audit`] and its files, replaceable at
/// run time (`Audit::set_redactor`).
#[derive(Debug)]
pub(crate) struct RedactorSlot(RwLock<Arc<Redactor>>);

impl RedactorSlot {
    pub(crate) fn new(r: Redactor) -> RedactorSlot {
        RedactorSlot(RwLock::new(Arc::new(r)))
    }

    pub(crate) fn get(&self) -> Arc<Redactor> {
        match self.0.read() {
            Ok(g) => Arc::clone(&g),
            Err(p) => Arc::clone(&p.into_inner()),
        }
    }

    pub(crate) fn set(&self, r: Redactor) {
        match self.0.write() {
            Ok(mut g) => *g = Arc::new(r),
            Err(p) => *p.into_inner() = Arc::new(r),
        }
    }
}

struct WriteState {
    file: File,
    seq: u64,
    head: String,
    /// File length after the last good record.
    len: u64,
    broken: Option<String>,
}

struct SyncState {
    /// Every byte below this offset is on disk.
    synced: u64,
    in_progress: bool,
    failed: Option<String>,
}

/// One append-only, hash-chained audit file. `Send + Sync`: share it in an
/// `Arc` and append from any number of threads.
pub struct AuditFile {
    path: PathBuf,
    sync_mode: SyncMode,
    redactor: Arc<RedactorSlot>,
    state: Mutex<WriteState>,
    /// Mirrors `WriteState::len` for the sync path (no write lock needed there).
    written: AtomicU64,
    /// A dup of the write fd, so fsync runs without the write lock.
    sync_fd: File,
    /// The entries of the directory holding the file. Each fsync of the file
    /// first makes durable the entries of every file created before it (not
    /// at creation: opening a session costs no disk flush, and nothing in the
    /// file is promised durable before then).
    dir: Arc<DirEntries>,
    durable: Mutex<SyncState>,
    durable_cv: Condvar,
    /// Registered with the flusher and not yet synced (batch mode, or a
    /// deferred record).
    dirty: AtomicBool,
    broken: AtomicBool,
    flusher: Option<Arc<FlushShared>>,
    /// The directory's reserve, drawn on by essential records.
    reserve: Arc<Reserve>,
    me: Weak<AuditFile>,
}

impl fmt::Debug for AuditFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuditFile")
            .field("path", &self.path)
            .field("sync", &self.sync_mode)
            .field("broken", &self.broken.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

impl AuditFile {
    /// Wraps a freshly created, empty file opened `O_APPEND`.
    pub(crate) fn new(
        path: PathBuf,
        dir: Arc<DirEntries>,
        file: File,
        sync_mode: SyncMode,
        redactor: Arc<RedactorSlot>,
        flusher: Option<Arc<FlushShared>>,
        reserve: Arc<Reserve>,
    ) -> Result<Arc<AuditFile>, AuditError> {
        let sync_fd = file.try_clone().map_err(|e| AuditError::io(&path, e))?;
        let len = file.metadata().map_err(|e| AuditError::io(&path, e))?.len();
        Ok(Arc::new_cyclic(|me| AuditFile {
            path,
            sync_mode,
            redactor,
            state: Mutex::new(WriteState {
                file,
                seq: 0,
                head: GENESIS.to_string(),
                len,
                broken: None,
            }),
            written: AtomicU64::new(len),
            sync_fd,
            dir,
            durable: Mutex::new(SyncState {
                synced: len,
                in_progress: false,
                failed: None,
            }),
            durable_cv: Condvar::new(),
            dirty: AtomicBool::new(false),
            broken: AtomicBool::new(false),
            flusher,
            reserve,
            me: me.clone(),
        }))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file name (no directory).
    pub fn file_name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    pub fn sync_mode(&self) -> SyncMode {
        self.sync_mode
    }

    /// seq + hash of the last record (seq 0 and [`GENESIS`] before any).
    pub fn head(&self) -> Appended {
        let st = lock(&self.state);
        Appended {
            seq: st.seq,
            hash: st.head.clone(),
        }
    }

    /// Whether an earlier failure made this file refuse every append.
    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::SeqCst)
    }

    /// Appends one record. `fields` must be a JSON object (or null for none);
    /// `v`, `seq`, `ts`, `session`, `event`, `prev`, `hash` are added by the
    /// writer (in that order, with the caller's fields between `event` and
    /// `prev`). String values and keys are redacted; control, C1 and bidi
    /// characters are escaped. One write(2) per record, `O_APPEND`.
    ///
    /// `SyncMode::Always`: the record is on disk when this returns `Ok`.
    /// `SyncMode::Batch`: it is in the kernel; the flusher syncs it within
    /// 50 ms. Any `Err` means the record is not written (or, after an fsync
    /// failure, not durable); the file then refuses later appends only if it
    /// could not be left consistent.
    pub fn append(
        &self,
        session: &str,
        event: &str,
        fields: Value,
    ) -> Result<Appended, AuditError> {
        self.append_with(
            session,
            event,
            fields,
            Durable::AsConfigured,
            Priority::Ordinary,
        )
    }

    /// Appends one record and makes it durable before returning, whatever the
    /// sync mode (for a decision that must be on disk before its action runs).
    pub fn append_durable(
        &self,
        session: &str,
        event: &str,
        fields: Value,
    ) -> Result<Appended, AuditError> {
        self.append_with(session, event, fields, Durable::Now, Priority::Ordinary)
    }

    /// Appends one record that rides on the next fsync, whatever the sync
    /// mode: the next [`AuditFile::append`] in `always` mode, or the
    /// background flusher (20 ms later, within the 50 ms bound). For a record
    /// whose action already ran (an outcome), or one that a durable append
    /// follows at once (a decision the `tool_started` record makes durable
    /// with it: one fsync for both).
    pub fn append_deferred(
        &self,
        session: &str,
        event: &str,
        fields: Value,
    ) -> Result<Appended, AuditError> {
        self.append_with(session, event, fields, Durable::Later, Priority::Ordinary)
    }

    /// Appends one record, durable as `durable` says. An
    /// [`Priority::Essential`] record (a refusal, a revocation, an anchor, the
    /// shutdown) that finds the disk full draws on the directory's reserve
    /// and is tried again; an ordinary one is refused
    /// ([`AuditError::ReserveOnly`]) while the reserve is being drawn on.
    pub fn append_with(
        &self,
        session: &str,
        event: &str,
        fields: Value,
        durable: Durable,
        priority: Priority,
    ) -> Result<Appended, AuditError> {
        let middle = self.encode_middle(session, event, fields)?;
        let (end, appended) = self.write_record(&middle, priority)?;
        match (durable, self.sync_mode) {
            (Durable::Now, _) | (Durable::AsConfigured, SyncMode::Always) => {
                self.wait_durable(end)?
            }
            (Durable::Later, _) | (Durable::AsConfigured, SyncMode::Batch) => {
                self.mark_dirty(end)?
            }
        }
        Ok(appended)
    }

    /// Appends one typed record ([`Event`]): what the supervisor writes.
    /// Its fields go out in sorted key order, as [`AuditFile::append_with`]
    /// writes any JSON object, so a record's bytes are the same as release
    /// 0.1.0 wrote for the same values. The untyped `append*` functions are
    /// the file format's own API (tests, benchmarks, outside tools).
    pub fn append_event(
        &self,
        session: &str,
        event: &Event,
        durable: Durable,
        priority: Priority,
    ) -> Result<Appended, AuditError> {
        let fields = Value::Object(event.fields()?);
        self.append_with(session, event.name(), fields, durable, priority)
    }

    /// Whether [`AuditFile::append`] waits for the disk (`always` mode).
    pub fn append_waits(&self) -> bool {
        self.sync_mode == SyncMode::Always
    }

    /// Makes every record appended so far durable (shares an in-flight fsync
    /// when one covers them).
    pub fn sync(&self) -> Result<(), AuditError> {
        self.dirty.store(false, Ordering::SeqCst);
        let end = self.written.load(Ordering::SeqCst);
        self.wait_durable(end)
    }

    fn encode_middle(
        &self,
        session: &str,
        event: &str,
        fields: Value,
    ) -> Result<Vec<u8>, AuditError> {
        validate_event(event)?;
        let mut map = match fields {
            Value::Object(m) => m,
            Value::Null => Map::new(),
            Value::Bool(_) | Value::Number(_) | Value::String(_) | Value::Array(_) => {
                return Err(AuditError::NotAnObject);
            }
        };
        if let Some(k) = map.keys().find(|k| RESERVED_KEYS.contains(&k.as_str())) {
            return Err(AuditError::ReservedField { field: k.clone() });
        }
        let redactor = self.redactor.get();
        let mut obj = Value::Object(std::mem::take(&mut map));
        redactor.redact_json(&mut obj);
        let enc = |e: serde_json::Error| AuditError::Encode(e.to_string());
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(b",\"session\":");
        write_json(&mut out, session).map_err(enc)?;
        out.extend_from_slice(b",\"event\":");
        write_json(&mut out, event).map_err(enc)?;
        if let Value::Object(m) = &obj {
            for (k, v) in m {
                out.push(b',');
                write_json(&mut out, k).map_err(enc)?;
                out.push(b':');
                write_json(&mut out, v).map_err(enc)?;
            }
        }
        Ok(out)
    }

    /// Chains, writes and accounts one record. Returns the file offset just
    /// past it.
    fn write_record(
        &self,
        middle: &[u8],
        priority: Priority,
    ) -> Result<(u64, Appended), AuditError> {
        if priority == Priority::Ordinary && self.reserve.refuses_ordinary() {
            return Err(AuditError::ReserveOnly {
                path: self.path.clone(),
            });
        }
        let mut st = lock(&self.state);
        if let Some(reason) = &st.broken {
            return Err(AuditError::Broken {
                path: self.path.clone(),
                reason: reason.clone(),
            });
        }
        let seq = st.seq + 1;
        let (line, hash) = build_line(seq, Timestamp::now(), middle, &st.head);
        // write_all issues one write(2) unless the kernel writes short (disk
        // full); then the next call returns the real error.
        while let Err(e) = (&st.file).write_all(&line) {
            let good = st.len;
            if let Err(t) = st.file.set_len(good) {
                let reason = format!(
                    "a write failed ({e}) and the partial record could not be cut off ({t})"
                );
                self.mark_broken_locked(&mut st, reason);
                return Err(AuditError::io(&self.path, e));
            }
            let full = matches!(
                e.raw_os_error(),
                Some(nix::libc::ENOSPC) | Some(nix::libc::EDQUOT)
            );
            if !(full && priority == Priority::Essential && self.reserve.draw()) {
                return Err(AuditError::io(&self.path, e));
            }
        }
        st.seq = seq;
        st.head = hash.clone();
        st.len += line.len() as u64;
        self.written.store(st.len, Ordering::SeqCst);
        Ok((st.len, Appended { seq, hash }))
    }

    fn mark_broken_locked(&self, st: &mut WriteState, reason: String) {
        tracing::error!(path = %self.path.display(), %reason, "audit file broken");
        st.broken = Some(reason);
        self.broken.store(true, Ordering::SeqCst);
    }

    pub(crate) fn mark_broken(&self, reason: String) {
        let mut st = lock(&self.state);
        if st.broken.is_none() {
            self.mark_broken_locked(&mut st, reason);
        }
    }

    /// Make sure the flusher will sync this file (batch mode, deferred records).
    fn mark_dirty(&self, end: u64) -> Result<(), AuditError> {
        if self.dirty.swap(true, Ordering::SeqCst) {
            return Ok(()); // already queued; the queued sync covers this record
        }
        let queued = match &self.flusher {
            Some(f) => f.register(self.me.clone()),
            None => false,
        };
        if !queued {
            // No flusher (the Audit is gone): sync inline rather than never.
            self.dirty.store(false, Ordering::SeqCst);
            self.wait_durable(end)?;
        }
        Ok(())
    }

    /// Called by the flusher.
    pub(crate) fn flush_queued(&self) -> Result<(), AuditError> {
        self.sync()
    }

    /// The directory's new entries (this file's among them, and those of
    /// every file its records may name), then fdatasync. The order matters:
    /// a record naming a file never reaches the disk before that file's
    /// name. On failure, says which of the two failed.
    fn sync_now(&self) -> Result<(), (&'static str, io::Error)> {
        self.dir
            .sync()
            .map_err(|e| ("fsync of the audit directory", e))?;
        self.sync_fd.sync_data().map_err(|e| ("fdatasync", e))
    }

    /// Blocks until every byte below `end` is on disk: group commit. At most
    /// one fdatasync runs per file; a caller whose record was written before
    /// a running fsync started waits for it, later ones start the next.
    fn wait_durable(&self, end: u64) -> Result<(), AuditError> {
        let mut s = lock(&self.durable);
        loop {
            if let Some(reason) = &s.failed {
                return Err(AuditError::Broken {
                    path: self.path.clone(),
                    reason: reason.clone(),
                });
            }
            if s.synced >= end {
                return Ok(());
            }
            if s.in_progress {
                s = self
                    .durable_cv
                    .wait(s)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                continue;
            }
            s.in_progress = true;
            let target = self.written.load(Ordering::SeqCst);
            drop(s);
            let result = self.sync_now();
            s = lock(&self.durable);
            s.in_progress = false;
            match result {
                Ok(()) => {
                    if target > s.synced {
                        s.synced = target;
                    }
                }
                Err((what, e)) => {
                    let reason = format!("{what} failed: {e}");
                    s.failed = Some(reason.clone());
                    drop(s);
                    self.durable_cv.notify_all();
                    self.mark_broken(reason.clone());
                    return Err(AuditError::io(&self.path, io::Error::new(e.kind(), reason)));
                }
            }
            self.durable_cv.notify_all();
        }
    }
}

impl Drop for AuditFile {
    fn drop(&mut self) {
        let written = self.written.load(Ordering::SeqCst);
        let synced = lock(&self.durable).synced;
        if written > synced
            && !self.is_broken()
            && let Err((_, e)) = self.sync_now()
        {
            tracing::error!(path = %self.path.display(), error = %e, "final audit fsync failed");
        }
    }
}

fn validate_event(event: &str) -> Result<(), AuditError> {
    let ok = !event.is_empty()
        && event.len() <= 64
        && event
            .bytes()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(AuditError::InvalidEvent {
            event: event.chars().take(80).collect(),
        })
    }
}

/// When an appended record must be on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durable {
    /// Before `append` returns in `always` mode; within 50 ms in `batch`.
    AsConfigured,
    /// Before the append returns.
    Now,
    /// With the file's next fsync.
    Later,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Audit, SyncMode};

    /// A session file in a fresh audit directory `<t>/a` (keep the `Audit`:
    /// it owns the flusher).
    fn session_file(mode: SyncMode, id: &str) -> (tempfile::TempDir, Audit, Arc<AuditFile>) {
        let t = tempfile::tempdir().unwrap();
        let audit = Audit::open(&t.path().join("a"), mode, None).unwrap();
        let f = audit.open_session(id).unwrap();
        (t, audit, f)
    }

    fn synced(f: &AuditFile) -> u64 {
        lock(&f.durable).synced
    }

    #[test]
    fn batch_flusher_syncs_without_being_asked() {
        let (_t, _audit, f) = session_file(SyncMode::Batch, "flush1");
        f.append("flush1", "e", serde_json::json!({"i": 1}))
            .unwrap();
        let written = f.written.load(Ordering::SeqCst);
        assert!(written > 0);
        // Liveness, not timing: wait (generously) for the flusher's fsync.
        let mut waited = 0;
        while synced(&f) < written {
            assert!(waited < 10_000, "the flusher never synced the file");
            std::thread::sleep(std::time::Duration::from_millis(5));
            waited += 5;
        }
        assert!(!f.dirty.load(Ordering::SeqCst));
    }

    #[test]
    fn the_directory_entry_is_synced_with_the_first_fsync_not_at_creation() {
        let (_t, _audit, f) = session_file(SyncMode::Always, "dirsync1");
        assert!(!f.dir.all_durable());
        f.append_deferred("dirsync1", "session_opened", serde_json::json!({}))
            .unwrap();
        assert!(!f.dir.all_durable(), "a deferred record must not flush");
        f.sync().unwrap();
        assert!(f.dir.all_durable());
        assert_eq!(synced(&f), f.written.load(Ordering::SeqCst));
    }

    /// The supervisor log names each session file; after a power loss that
    /// name must not be on disk while the file's own entry is not.
    #[test]
    fn a_file_named_in_a_synced_record_has_its_entry_on_disk() {
        let t = tempfile::tempdir().unwrap();
        let audit = Audit::open(&t.path().join("a"), SyncMode::Always, None).unwrap();
        let log = audit.supervisor_log().unwrap();
        log.sync().unwrap();
        assert!(log.dir.all_durable());
        let session = audit.open_session("named1").unwrap();
        assert!(!session.dir.all_durable());
        log.append_durable(
            "named1",
            "session_opened",
            serde_json::json!({"audit_file": session.file_name()}),
        )
        .unwrap();
        // The log's fsync covered the session file's entry, before the
        // session file itself was ever synced.
        assert!(session.dir.all_durable());
    }

    #[test]
    fn a_directory_that_cannot_be_synced_breaks_the_file_and_says_so() {
        let (t, _audit, f) = session_file(SyncMode::Always, "dirsync2");
        // Stand-in for a failing directory fsync: the directory is gone.
        std::fs::rename(t.path().join("a"), t.path().join("moved")).unwrap();
        let err = f
            .append("dirsync2", "e", serde_json::json!({}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("fsync of the audit directory failed"), "{err}");
        assert!(f.is_broken());
    }

    #[test]
    fn always_mode_is_durable_on_return() {
        let (_t, _audit, f) = session_file(SyncMode::Always, "always1");
        for i in 0..3 {
            f.append("always1", "e", serde_json::json!({"i": i}))
                .unwrap();
            assert_eq!(synced(&f), f.written.load(Ordering::SeqCst));
        }
    }

    #[test]
    fn always_mode_deferred_record_rides_on_the_next_fsync() {
        let (_t, _audit, f) = session_file(SyncMode::Always, "defer1");
        // A decision written deferred, then the durable record after it:
        // one fsync covers both.
        f.append_deferred("defer1", "permission_check", serde_json::json!({}))
            .unwrap();
        f.append("defer1", "tool_started", serde_json::json!({}))
            .unwrap();
        assert_eq!(synced(&f), f.written.load(Ordering::SeqCst));
        // An outcome written deferred with nothing after it: the flusher
        // syncs it (liveness, not timing).
        f.append_deferred("defer1", "tool_result", serde_json::json!({}))
            .unwrap();
        let written = f.written.load(Ordering::SeqCst);
        let mut waited = 0;
        while synced(&f) < written {
            assert!(
                waited < 10_000,
                "the flusher never synced the deferred record"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
            waited += 5;
        }
    }

    #[test]
    fn shared_types_are_send_and_sync() {
        fn is<T: Send + Sync>() {}
        is::<AuditFile>();
        is::<Audit>();
        is::<crate::Redactor>();
    }

    #[test]
    fn sync_mode_names() {
        assert_eq!(
            serde_json::to_string(&SyncMode::Batch).unwrap(),
            "\"batch\""
        );
        assert_eq!(
            serde_json::from_str::<SyncMode>("\"always\"").unwrap(),
            SyncMode::Always
        );
        assert_eq!("batch".parse::<SyncMode>().unwrap(), SyncMode::Batch);
        assert!("sometimes".parse::<SyncMode>().is_err());
    }
}
