//! The audit directory: its permissions, file naming and creation, the
//! supervisor's own log, and flushing on shutdown.

use std::fmt;
use std::fs::{self, DirBuilder, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use crate::entries::DirEntries;
use crate::event::{AuditFileClosed, AuditOpened, Event, PreviousLog};
use crate::file::{AuditFile, Durable, RedactorSlot};
use crate::flusher::Flusher;
use crate::names::{FileKind, list_logs, valid_session};
use crate::record::Timestamp;
use crate::reserve::{Priority, Reserve, ReserveStatus};
use crate::verify::{VerifyError, verify_bytes};
use crate::{Appended, AuditError, Redactor, SyncMode, lock};

/// The names of the files `log` (its bytes, `data`) names that are not
/// beside it (see [`crate::missing`]); a previous log retired with all before
/// it is not counted. An unlistable directory: nothing.
fn missing_beside(log: &Path, data: &[u8]) -> Vec<String> {
    let dir = log.parent().unwrap_or(Path::new("."));
    let Ok(present) = crate::missing::names_in(dir) else {
        return Vec::new();
    };
    let mut report = crate::missing::Report::default();
    let named = crate::missing::named_by(data);
    crate::missing::check_log(log, named, &present.collect(), &mut report);
    report.missing.into_iter().map(|m| m.named.file).collect()
}

/// Links `audit_opened` to the previous supervisor log `prev`: its head
/// when it verifies (and the files it names that are gone), else why not.
fn link_previous(opened: &mut AuditOpened, prev: &Path) {
    let name = prev
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // Read once: verified, then searched for the files it names.
    let data = fs::read(prev).map_err(|e| VerifyError::Io {
        path: prev.to_path_buf(),
        source: e,
    });
    match data.and_then(|data| verify_bytes(&data, None).map(|ok| (ok, data))) {
        Ok((ok, data)) => {
            opened.previous = Some(PreviousLog {
                file: name,
                records: ok.records,
                head: ok.head,
            });
            // Files the previous run named that are gone now: the
            // evidence goes into this log's chain at once.
            let gone = missing_beside(prev, &data);
            if !gone.is_empty() {
                tracing::warn!(
                    file = %prev.display(),
                    missing = ?gone,
                    "files named by the previous supervisor log are missing"
                );
                opened.previous_missing = Some(gone);
            }
        }
        Err(e) => {
            let why = match &e {
                VerifyError::Broken { .. } => format!("previous supervisor log broken at {e}"),
                VerifyError::Io { .. } => format!("previous supervisor log unreadable: {e}"),
            };
            tracing::warn!(file = %prev.display(), "{why}");
            opened.previous_file = Some(name);
            opened.previous_error = Some(why);
        }
    }
}

/// The audit directory and the files written in it.
pub struct Audit {
    dir: PathBuf,
    sync: SyncMode,
    group: Option<u32>,
    redactor: Arc<RedactorSlot>,
    files: Mutex<Vec<Weak<AuditFile>>>,
    /// The new files' entries in `dir`, made durable before any fsync.
    entries: Arc<DirEntries>,
    supervisor: Mutex<Option<Arc<AuditFile>>>,
    /// Space held back for essential records.
    reserve: Arc<Reserve>,
    /// Closed session files whose anchor could not be written yet.
    pending_anchors: Mutex<Vec<PendingAnchor>>,
    // Last field: dropped after `Drop::drop` has flushed the files.
    flusher: Option<Flusher>,
}

/// A session file closed while its anchor could not be written.
#[derive(Clone)]
struct PendingAnchor {
    file: Arc<AuditFile>,
    session: String,
    /// When the session closed (the anchor, written later, says so).
    closed: String,
}

impl fmt::Debug for Audit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Audit")
            .field("dir", &self.dir)
            .field("sync", &self.sync)
            .field("group", &self.group)
            .finish_non_exhaustive()
    }
}

impl Audit {
    /// Creates (0700, or 0750 and chowned to `group` when given) or opens the
    /// audit directory. Refuses (`AuditError::BadDirectory`, with the reason
    /// and a fix) a directory that is a symlink or not a directory, is owned
    /// by another uid, is writable by group or others, or is readable or
    /// searchable by others.
    pub fn open(dir: &Path, sync: SyncMode, group: Option<u32>) -> Result<Audit, AuditError> {
        let bad = |reason: String| AuditError::BadDirectory {
            path: dir.to_path_buf(),
            reason,
        };
        let meta = match fs::symlink_metadata(dir) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                create_dir(dir, group)?;
                fs::symlink_metadata(dir).map_err(|e| bad(format!("cannot stat it: {e}")))?
            }
            Err(e) => return Err(bad(format!("cannot stat it: {e}"))),
        };
        check_dir(dir, &meta, group)?;
        // Both modes: batch mode's records and `always` mode's deferred
        // outcome records are synced by it.
        let flusher = Some(
            Flusher::start()
                .map_err(|e| bad(format!("cannot start the audit flusher thread: {e}")))?,
        );
        Ok(Audit {
            dir: dir.to_path_buf(),
            sync,
            group,
            redactor: Arc::new(RedactorSlot::new(Redactor::default())),
            files: Mutex::new(Vec::new()),
            entries: Arc::new(DirEntries::new(dir)),
            supervisor: Mutex::new(None),
            reserve: Arc::new(Reserve::none(dir)),
            pending_anchors: Mutex::new(Vec::new()),
            flusher,
        })
    }

    /// Holds back `bytes` of the audit filesystem in a preallocated file
    /// (see [`crate::reserve`]); 0 removes it. What the disk cannot hold now
    /// is added later by [`Audit::replenish_reserve`].
    pub fn set_reserve(&self, bytes: u64) -> Result<ReserveStatus, AuditError> {
        self.reserve
            .configure(bytes)
            .map_err(|e| AuditError::io(&self.reserve.path(), e))
    }

    pub fn reserve_status(&self) -> ReserveStatus {
        self.reserve.status()
    }

    /// Grows the reserve back when the disk has room (call periodically).
    pub fn replenish_reserve(&self) {
        self.reserve.replenish();
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn sync_mode(&self) -> SyncMode {
        self.sync
    }

    /// Replaces the redactor used by every file of this directory, open ones
    /// included (e.g. with the host secrets from [`crate::scan_env`]). The
    /// default redacts the built-in secret shapes only.
    pub fn set_redactor(&self, redactor: Redactor) {
        self.redactor.set(redactor);
    }

    /// The redactor in use.
    pub fn redactor(&self) -> Arc<Redactor> {
        self.redactor.get()
    }

    /// The supervisor's own log for this run: `supervisor-<UTC>.jsonl`,
    /// created on the first call and returned again by later calls (a new one
    /// replaces it if it broke). Its first record, event `audit_opened`, has
    /// `previous` = `{file, records, head}` of the previous supervisor log when
    /// that verified, else `previous: null` and, when there was one,
    /// `previous_file` and `previous_error` ("previous supervisor log broken
    /// at line N: …"). When files the previous log names are gone (a session
    /// file deleted between runs), `previous_missing` lists their names.
    pub fn supervisor_log(&self) -> Result<Arc<AuditFile>, AuditError> {
        let mut slot = lock(&self.supervisor);
        if let Some(f) = slot.as_ref()
            && !f.is_broken()
        {
            return Ok(Arc::clone(f));
        }
        let previous = match slot.as_ref() {
            Some(f) => Some(f.path().to_path_buf()),
            None => list_logs(&self.dir)?
                .into_iter()
                .rev()
                .find(|(n, _)| n.kind == FileKind::Supervisor)
                .map(|(_, p)| p),
        };
        // Essential: refusals, revocations and anchors are written here.
        let file = self.create("supervisor-", Priority::Essential)?;
        let mut opened = AuditOpened {
            file: file.file_name(),
            pid: u64::from(std::process::id()),
            sync: self.sync,
            previous: None,
            previous_file: None,
            previous_error: None,
            previous_missing: None,
        };
        if let Some(prev) = previous {
            link_previous(&mut opened, &prev);
        }
        file.append_event(
            "",
            &Event::AuditOpened(opened),
            Durable::AsConfigured,
            Priority::Essential,
        )?;
        *slot = Some(Arc::clone(&file));
        Ok(file)
    }

    /// A new file `audit-<session>-<UTC>.jsonl` (0600, or 0640 with the group).
    pub fn open_session(&self, session_id: &str) -> Result<Arc<AuditFile>, AuditError> {
        if !valid_session(session_id) {
            return Err(AuditError::InvalidSession {
                session: session_id.chars().take(80).collect(),
            });
        }
        self.create(&format!("audit-{session_id}-"), Priority::Ordinary)
    }

    /// Removes a session file that nothing names yet (its session was
    /// refused before the supervisor log recorded it), so a refused session
    /// leaves no file behind. The file refuses every later append.
    pub fn discard(&self, file: &AuditFile) -> Result<(), AuditError> {
        file.mark_broken("discarded: its session was refused".to_string());
        match fs::remove_file(file.path()) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(AuditError::io(file.path(), e)),
            _ => Ok(()),
        }
    }

    /// Anchors a file's head outside it: makes `file` durable, then writes
    /// `audit_file_closed {file, session, records, head}` to the supervisor
    /// log, where [`crate::verify::verify_dir`] finds it to catch records
    /// cut from the end. Call when a session ends. The anchor record itself
    /// rides on the supervisor log's next fsync (the flusher's, at the
    /// latest): it is only ever written after the file it anchors is on disk,
    /// so a power loss can lose an anchor but never leave one ahead of its
    /// file. An anchor is essential (it may draw on the reserve); one that
    /// still cannot be written is kept and written by
    /// [`Audit::retry_anchors`] once there is room, marked `late` with the
    /// time the session closed.
    pub fn anchor(&self, file: &Arc<AuditFile>, session: &str) -> Result<Appended, AuditError> {
        let closed = Timestamp::now().rfc3339();
        self.write_anchor(file, session, None).inspect_err(|e| {
            if file.is_broken() {
                tracing::error!(file = %file.path().display(), error = %e, "cannot anchor a broken audit file");
                return;
            }
            tracing::warn!(file = %file.path().display(), error = %e, "audit anchor deferred until the disk has room");
            lock(&self.pending_anchors).push(PendingAnchor {
                file: Arc::clone(file),
                session: session.to_string(),
                closed,
            });
        })
    }

    fn write_anchor(
        &self,
        file: &AuditFile,
        session: &str,
        late: Option<&str>,
    ) -> Result<Appended, AuditError> {
        file.sync()?;
        let head = file.head();
        let sup = self.supervisor_log()?;
        let closed = AuditFileClosed {
            file: file.file_name(),
            records: head.seq,
            head: head.hash,
            late: late.is_some(),
            closed: late.map(str::to_string),
        };
        sup.append_event(
            session,
            &Event::AuditFileClosed(closed),
            Durable::Later,
            Priority::Essential,
        )
    }

    /// Writes the anchors that could not be written when their sessions
    /// closed (the disk was full). Returns how many were written now.
    pub fn retry_anchors(&self) -> usize {
        // Each anchor stays listed (`unanchored`) until it is written: an
        // observer never sees an empty list while anchors are in flight.
        let pending: Vec<PendingAnchor> = lock(&self.pending_anchors).clone();
        let mut written = 0;
        for p in pending {
            let done = match self.write_anchor(&p.file, &p.session, Some(&p.closed)) {
                Ok(_) => {
                    written += 1;
                    tracing::info!(file = %p.file.path().display(), closed = %p.closed, "late audit anchor written");
                    true
                }
                Err(_) => p.file.is_broken(),
            };
            if done {
                lock(&self.pending_anchors).retain(|q| !Arc::ptr_eq(&q.file, &p.file));
            }
        }
        written
    }

    /// Closed session files whose anchor is not written yet.
    pub fn unanchored(&self) -> Vec<PathBuf> {
        lock(&self.pending_anchors)
            .iter()
            .map(|p| p.file.path().to_path_buf())
            .collect()
    }

    /// fsyncs everything pending (shutdown: batch mode, deferred records).
    /// Returns the first error after trying every file.
    pub fn flush(&self) -> Result<(), AuditError> {
        let live: Vec<Arc<AuditFile>> = {
            let mut files = lock(&self.files);
            files.retain(|w| w.strong_count() > 0);
            files.iter().filter_map(Weak::upgrade).collect()
        };
        let mut first = None;
        for f in live {
            if f.is_broken() {
                continue;
            }
            if let Err(e) = f.sync() {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    fn create(&self, prefix: &str, priority: Priority) -> Result<Arc<AuditFile>, AuditError> {
        let ts = Timestamp::now().compact();
        let mode = if self.group.is_some() { 0o640 } else { 0o600 };
        if priority == Priority::Ordinary && self.reserve.refuses_ordinary() {
            // Refused before anything is created: no empty file is left.
            return Err(AuditError::ReserveOnly {
                path: self.dir.join(format!("{prefix}{ts}.jsonl")),
            });
        }
        let mut attempt = 0u32;
        let (file, path) = loop {
            let name = if attempt == 0 {
                format!("{prefix}{ts}.jsonl")
            } else {
                format!("{prefix}{ts}-{attempt}.jsonl")
            };
            let path = self.dir.join(&name);
            let opened = OpenOptions::new()
                .append(true)
                .create_new(true)
                .mode(mode)
                .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
                .open(&path);
            match opened {
                Ok(f) => break (f, path),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 1000 => {
                    attempt += 1;
                }
                Err(e)
                    if priority == Priority::Essential
                        && matches!(
                            e.raw_os_error(),
                            Some(nix::libc::ENOSPC) | Some(nix::libc::EDQUOT)
                        )
                        && self.reserve.draw() => {}
                Err(e) => return Err(AuditError::io(&path, e)),
            }
        };
        if let Some(gid) = self.group {
            std::os::unix::fs::fchown(&file, None, Some(gid))
                .map_err(|e| AuditError::io(&path, e))?;
        }
        // Explicit: the umask may have taken bits off the creation mode.
        file.set_permissions(Permissions::from_mode(mode))
            .map_err(|e| AuditError::io(&path, e))?;
        // The new directory entry is made durable by the next fsync of any
        // audit file (this one's first, or the log's that names it).
        self.entries.created();
        let flusher = self.flusher.as_ref().map(Flusher::shared);
        let f = AuditFile::new(
            path,
            Arc::clone(&self.entries),
            file,
            self.sync,
            Arc::clone(&self.redactor),
            flusher,
            Arc::clone(&self.reserve),
        )?;
        let mut files = lock(&self.files);
        files.retain(|w| w.strong_count() > 0);
        files.push(Arc::downgrade(&f));
        Ok(f)
    }
}

impl Drop for Audit {
    fn drop(&mut self) {
        if let Err(e) = self.flush() {
            tracing::error!(error = %e, "audit flush at shutdown failed");
        }
        // `flusher` drops after this: it syncs anything queued meanwhile.
    }
}

fn create_dir(dir: &Path, group: Option<u32>) -> Result<(), AuditError> {
    let bad = |reason: String| AuditError::BadDirectory {
        path: dir.to_path_buf(),
        reason,
    };
    if let Some(parent) = dir.parent()
        && !parent.as_os_str().is_empty()
    {
        fs::create_dir_all(parent)
            .map_err(|e| bad(format!("cannot create its parent directory: {e}")))?;
    }
    let mode = if group.is_some() { 0o750 } else { 0o700 };
    match DirBuilder::new().mode(mode).create(dir) {
        Ok(()) => {}
        // Lost a race with another creator: check what is there instead.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(bad(format!("cannot create it: {e}"))),
    }
    if let Some(gid) = group {
        std::os::unix::fs::chown(dir, None, Some(gid))
            .map_err(|e| bad(format!("cannot give it to group {gid}: {e}")))?;
    }
    fs::set_permissions(dir, Permissions::from_mode(mode))
        .map_err(|e| bad(format!("cannot set its mode to {mode:04o}: {e}")))?;
    Ok(())
}

fn check_dir(dir: &Path, meta: &fs::Metadata, group: Option<u32>) -> Result<(), AuditError> {
    let shown = dir.display();
    let bad = |reason: String| AuditError::BadDirectory {
        path: dir.to_path_buf(),
        reason,
    };
    let want = if group.is_some() { "0750" } else { "0700" };
    if meta.file_type().is_symlink() {
        return Err(bad(
            "is a symlink; point the audit dir at the real directory".to_string(),
        ));
    }
    if !meta.is_dir() {
        return Err(bad("is not a directory".to_string()));
    }
    let euid = nix::unistd::geteuid().as_raw();
    if meta.uid() != euid {
        return Err(bad(format!(
            "is owned by uid {} but the supervisor runs as uid {euid}; chown {euid} {shown}",
            meta.uid()
        )));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(bad(format!(
            "mode {mode:04o} lets group or others write to it; chmod {want} {shown}"
        )));
    }
    if mode & 0o007 != 0 {
        return Err(bad(format!(
            "mode {mode:04o} lets others read or enter it; chmod {want} {shown}"
        )));
    }
    if let Some(gid) = group
        && mode & 0o070 != 0
        && meta.gid() != gid
    {
        return Err(bad(format!(
            "group {} may read it but the operator group is {gid}; chgrp {gid} {shown}",
            meta.gid()
        )));
    }
    Ok(())
}
