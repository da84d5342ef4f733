//! tollgate-audit: the tamper-evident audit log.
//!
//! It owns writing, verifying, reporting on and following the audit log, and
//! redacting secret-looking values. It must never drop a record silently: a
//! record that cannot be written is an error the caller must act on (the
//! daemon refuses the tool call with `AUDIT_UNAVAILABLE` and keeps running).
//! It never interprets policy and never runs anything.
//!
//! # Files
//!
//! One JSONL file per session, `audit-<session>-<UTC>.jsonl`, and one per
//! supervisor run, `supervisor-<UTC>.jsonl`, where `<UTC>` is
//! `YYYYMMDDTHHMMSS.ffffffZ` (a `-N` suffix is added in the rare case of a
//! name collision). Files are created `O_EXCL|O_NOFOLLOW`, mode 0600 (0640
//! and chowned to the operator group when one is configured), in a directory
//! of mode 0700 (0750 with the group). [`Audit::open`] refuses a directory
//! that is a symlink, not owned by the supervisor's uid, writable by group or
//! others, or readable/searchable by others, and says how to fix it. A file is
//! never reopened for appending: every run and every session starts a new one,
//! so a broken chain is never extended.
//!
//! # Record format (version 1)
//!
//! Each record is one line, UTF-8 JSON, ending in `\n`:
//!
//! ```text
//! {"v":1,"seq":N,"ts":"2026-11-29T21:47:37.123456Z","session":"…","event":"…",<fields>,"prev":"<64 hex>","hash":"<64 hex>"}
//! ```
//!
//! - `seq` starts at 1 in every file and increases by one per record.
//! - `ts` is UTC, RFC 3339, microseconds.
//! - `<fields>` are the caller's members (never one of the seven names above),
//!   in the order serde_json's map yields them.
//! - `prev` is the `hash` of the previous record in the same file; for the
//!   first record it is 64 ASCII zeros.
//! - `hash` is lowercase hex of
//!   `SHA-256( prev ‖ B )`, where `prev` is the 64 ASCII hex characters of the
//!   `prev` member and `B` is the exact bytes of the line from its opening `{`
//!   up to (not including) the 75 bytes `,"hash":"<64 hex>"}`, followed by the
//!   single byte `}`. In other words: the line with its hash member removed.
//!
//! An outside tool checks a line like this (Python):
//!
//! ```text
//! body = line[:-75] + b"}"            # line without its trailing \n
//! assert line[-75:-66] == b',"hash":"'
//! assert sha256(prev + body).hexdigest() == line[-66:-2].decode()
//! ```
//!
//! Strings are JSON-escaped by serde_json, and additionally DEL, the C1
//! controls and the invisible/bidirectional formatting characters (U+200B–F,
//! U+2028–E, U+2060–9, U+FEFF, …) are written as `\uXXXX`, so no log line can
//! move the cursor, recolour a terminal or read differently from what it
//! holds (log injection). String values (and object keys) in the caller's
//! fields go through the file's [`Redactor`] first.
//!
//! A hash chain finds an edited, deleted, inserted or reordered line, but not
//! records cut from the end. Anchor the head: [`Audit::anchor`] writes a
//! file's final `seq`/`hash` into the supervisor log (event
//! `audit_file_closed`), each supervisor log's first record (event
//! `audit_opened`) records the previous supervisor log's head, and
//! [`verify_file`] takes the expected head ([`verify::verify_dir`] finds the
//! anchors itself). Nor does a chain notice a whole file deleted: the
//! supervisor log names every session file and the log before it, and
//! [`missing::check`] reports a named file that is gone.
//!
//! # Durability
//!
//! Every record goes out as a single `write(2)` to a file opened `O_APPEND`,
//! under a per-file mutex, so records from many threads never interleave.
//! On a failed or short write the file is truncated back to the end of the
//! last good record (so no torn line is left for the next record to chain
//! onto); if even that fails, the file is marked broken and every later append
//! to it fails.
//!
//! - `sync = "always"` (default): the record is on disk (`fdatasync`) before
//!   `append` returns. Concurrent appenders to one file share an fsync (group
//!   commit): one `fdatasync` covers every record written before it started.
//! - `sync = "batch"`: `append` returns once the record is in the kernel (it
//!   survives a crash of the supervisor, and readers see it), and a background
//!   flusher `fdatasync`s the file 20 ms after its first unsynced record.
//!   **A power loss or kernel crash can lose up to 50 ms of records** (20 ms
//!   of delay plus the time for the fsync itself under load). Use
//!   [`AuditFile::sync`] to make one decision durable before acting on it.
//!
//! Creating a file flushes nothing. Every fsync of an audit file first
//! fsyncs the directory when files were created in it since the last time,
//! so a record naming a file (the supervisor log's `session_opened`) never
//! reaches the disk before that file's name does.
//!
//! An fsync failure marks the file broken (after a failed fsync the kernel
//! may have dropped the dirty pages, so nothing later in the file could be
//! trusted); the supervisor opens a new file.

#![forbid(unsafe_code)]

#[doc(hidden)]
pub mod archive;
pub mod bench_input;
mod chain;
mod dir;
mod entries;
pub mod event;
mod file;
mod flusher;
pub mod missing;
mod names;
pub mod record;
pub mod redact;
pub mod redact_rules;
pub mod redact_stream;
pub mod report;
pub mod reserve;
pub mod schema;
pub mod secrets;
pub mod tail;
pub mod verify;

use std::path::PathBuf;

pub use dir::Audit;
pub use event::Event;
pub use file::{AuditFile, Durable};
pub use names::{FileKind, LogName, list_logs, parse_file_name};
pub use record::GENESIS;
pub use redact::Redactor;
pub use redact_stream::StreamRedactor;
pub use reserve::{Priority, RESERVE_FILE, ReserveStatus};
pub use secrets::{
    EnvScan, PromptError, audit_system_prompt, is_secret_env_name, scan_env, scan_vars,
    secret_env_names,
};
pub use verify::{Problem, VerifyError, VerifyOk, verify_file};

/// Durability of appends.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum SyncMode {
    /// fsync after every record.
    Always,
    /// Group commit: at most 50 ms of records at risk.
    Batch,
}

impl SyncMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SyncMode::Always => "always",
            SyncMode::Batch => "batch",
        }
    }
}

impl std::fmt::Display for SyncMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for SyncMode {
    type Err = AuditError;
    fn from_str(s: &str) -> Result<SyncMode, AuditError> {
        match s {
            "always" => Ok(SyncMode::Always),
            "batch" => Ok(SyncMode::Batch),
            other => Err(AuditError::InvalidSyncMode {
                value: other.to_string(),
            }),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("audit directory {path}: {reason}")]
    BadDirectory { path: PathBuf, reason: String },
    #[error("audit file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("audit record fields must be a JSON object")]
    NotAnObject,
    #[error(
        "audit record field {field:?} is reserved for the writer (v, seq, ts, session, event, prev, hash); rename it"
    )]
    ReservedField { field: String },
    #[error(
        "session id {session:?} cannot name an audit file: use 1 to 64 characters of A-Z a-z 0-9 _ -"
    )]
    InvalidSession { session: String },
    #[error("audit event name {event:?} is invalid: use 1 to 64 characters of a-z 0-9 _ . -")]
    InvalidEvent { event: String },
    #[error("audit file {path} is unusable after an earlier failure ({reason}); open a new file")]
    Broken { path: PathBuf, reason: String },
    #[error("audit record could not be encoded: {0}")]
    Encode(String),
    #[error("audit sync mode {value:?} is invalid: use \"always\" or \"batch\"")]
    InvalidSyncMode { value: String },
    #[error("no audit file for session {session} in {dir}")]
    NoSessionFile { dir: PathBuf, session: String },
    #[error(
        "audit file {path}: the audit disk is full and what is left of its reserve is kept for refusals, revocations and shutdown; free space on the audit filesystem"
    )]
    ReserveOnly { path: PathBuf },
}

impl AuditError {
    /// The underlying OS error code, if any.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            AuditError::Io { source, .. } => source.raw_os_error(),
            AuditError::BadDirectory { .. }
            | AuditError::NotAnObject
            | AuditError::ReservedField { .. }
            | AuditError::InvalidSession { .. }
            | AuditError::InvalidEvent { .. }
            | AuditError::Broken { .. }
            | AuditError::Encode(_)
            | AuditError::InvalidSyncMode { .. }
            | AuditError::NoSessionFile { .. }
            | AuditError::ReserveOnly { .. } => None,
        }
    }

    /// The write failed because the disk (or quota) is full, or only the
    /// reserve is left and the record was not essential.
    pub fn is_disk_full(&self) -> bool {
        matches!(self, AuditError::ReserveOnly { .. })
            || matches!(
                self.raw_os_error(),
                Some(nix::libc::ENOSPC) | Some(nix::libc::EDQUOT)
            )
    }

    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> AuditError {
        AuditError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Where a record landed in its chain.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Appended {
    pub seq: u64,
    pub hash: String,
}

/// Locks a mutex, recovering the data if another thread panicked holding it
/// (the protected state is updated only after each I/O step succeeds).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
