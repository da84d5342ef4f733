//! The one error type of this crate. Its `Display` is a sentence for the model
//! (lowercase, naming the path or URL, with a hint where one helps); paths in
//! it are workspace-relative and escaped (see [`crate::display_path`]).

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// NUL byte, too long, empty, not absolute, or `..` inside.
    #[error("invalid path {path}: {reason}")]
    InvalidPath { path: String, reason: String },

    #[error("{path} is outside the workspace {root}; file tools only work beneath it")]
    OutsideWorkspace { path: String, root: String },

    /// The kernel refused to resolve the path beneath the workspace.
    #[error(
        "{path} resolves outside the workspace (a symlink or '..' leads out, or the target is an absolute symlink); refused"
    )]
    Escape { path: String },

    #[error("{path} does not exist")]
    NotFound { path: String },

    #[error("permission denied: the session owner may not {action} {path}")]
    PermissionDenied { path: String, action: &'static str },

    #[error("{path} is a directory, not a file; use glob_files to list it")]
    IsDirectory { path: String },

    #[error("{path} is not a directory")]
    NotADirectory { path: String },

    /// FIFO, socket, device: never read or written (a FIFO would hang).
    #[error("{path} is a {kind}, not a regular file; refused")]
    NotRegularFile { path: String, kind: &'static str },

    #[error("{path} is a symbolic link; write to the file it points to instead")]
    Symlink { path: String },

    #[error("too many levels of symbolic links resolving {path}")]
    SymlinkLoop { path: String },

    #[error(
        "{path} has {nlink} hard links; refusing to write through a hard-linked file (it may alias a file outside the workspace)"
    )]
    HardLinked { path: String, nlink: u64 },

    #[error("old_string not found in {path} (0 matches)")]
    NoMatch { path: String },

    #[error(
        "old_string matches {count} times in {path}; pass more context to make it unique or set replace_all"
    )]
    AmbiguousMatch { path: String, count: usize },

    #[error("old_string and new_string are the same; nothing would change in {path}")]
    NoChange { path: String },

    #[error("{path} is not UTF-8 text ({reason}); edit_file only edits text files")]
    NotText { path: String, reason: String },

    #[error("{path} is too large ({size} bytes; the limit is {limit} bytes)")]
    TooLarge { path: String, size: u64, limit: u64 },

    #[error("invalid {what} {pattern:?}: {reason}")]
    InvalidPattern {
        what: &'static str,
        pattern: String,
        reason: String,
    },

    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    #[error("cannot open workspace {path}: {reason}")]
    Workspace { path: String, reason: String },

    #[error("cannot act as the session owner (uid {uid}, gid {gid}): {reason}")]
    Credentials { uid: u32, gid: u32, reason: String },

    #[error("{op} {path} failed: {source}")]
    Io {
        op: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },

    #[error("internal error: {0}")]
    Internal(String),

    #[error("invalid URL {url}: {reason}")]
    InvalidUrl { url: String, reason: String },

    #[error("redirect to {url} refused: {reason}")]
    RedirectRefused { url: String, reason: String },

    #[error("too many redirects: more than {max} starting at {url}")]
    TooManyRedirects { url: String, max: u8 },

    #[error("fetching {url} timed out after {}", fmt_duration(*.timeout))]
    FetchTimeout { url: String, timeout: Duration },

    /// The connection went to an address the policy did not vet: fail closed.
    #[error(
        "connected to {got} for {url}, which is not an address the policy vetted ({vetted}); refused"
    )]
    AddressMismatch {
        url: String,
        got: String,
        vetted: String,
    },

    /// The connector check refused an address the fetch was about to use.
    #[error("not connecting to {addr} for {url}: {reason}")]
    PeerRefused {
        url: String,
        addr: String,
        reason: String,
    },

    #[error("fetching {url} failed: {reason}")]
    Fetch { url: String, reason: String },
}

impl ToolError {
    /// A stable machine-readable name for the audit log and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            ToolError::InvalidPath { .. } => "invalid_path",
            ToolError::OutsideWorkspace { .. } => "outside_workspace",
            ToolError::Escape { .. } => "escape",
            ToolError::NotFound { .. } => "not_found",
            ToolError::PermissionDenied { .. } => "permission_denied",
            ToolError::IsDirectory { .. } => "is_directory",
            ToolError::NotADirectory { .. } => "not_a_directory",
            ToolError::NotRegularFile { .. } => "not_regular_file",
            ToolError::Symlink { .. } => "symlink",
            ToolError::SymlinkLoop { .. } => "symlink_loop",
            ToolError::HardLinked { .. } => "hard_linked",
            ToolError::NoMatch { .. } => "no_match",
            ToolError::AmbiguousMatch { .. } => "ambiguous_match",
            ToolError::NoChange { .. } => "no_change",
            ToolError::NotText { .. } => "not_text",
            ToolError::TooLarge { .. } => "too_large",
            ToolError::InvalidPattern { .. } => "invalid_pattern",
            ToolError::InvalidArgument(_) => "invalid_argument",
            ToolError::Workspace { .. } => "workspace",
            ToolError::Credentials { .. } => "credentials",
            ToolError::Io { .. } => "io",
            ToolError::Internal(_) => "internal",
            ToolError::InvalidUrl { .. } => "invalid_url",
            ToolError::RedirectRefused { .. } => "redirect_refused",
            ToolError::TooManyRedirects { .. } => "too_many_redirects",
            ToolError::FetchTimeout { .. } => "fetch_timeout",
            ToolError::AddressMismatch { .. } => "address_mismatch",
            ToolError::PeerRefused { .. } => "peer_refused",
            ToolError::Fetch { .. } => "fetch",
        }
    }

    /// Maps an I/O error from an operation on `path` (already displayable).
    /// cap-std reports a path that leads outside as `PermissionDenied` without
    /// an OS error; openat2 itself says EXDEV.
    pub(crate) fn from_io(op: &'static str, path: &str, e: std::io::Error) -> ToolError {
        use std::io::ErrorKind;
        let path = path.to_string();
        if let Some(code) = e.raw_os_error() {
            match nix::errno::Errno::from_raw(code) {
                nix::errno::Errno::EXDEV => return ToolError::Escape { path },
                nix::errno::Errno::ELOOP => return ToolError::SymlinkLoop { path },
                nix::errno::Errno::ENOTDIR => return ToolError::NotADirectory { path },
                nix::errno::Errno::EISDIR => return ToolError::IsDirectory { path },
                nix::errno::Errno::ENAMETOOLONG => {
                    return ToolError::InvalidPath {
                        path,
                        reason: "a name in it is too long".into(),
                    };
                }
                // A socket opened like a file.
                nix::errno::Errno::ENXIO => {
                    return ToolError::NotRegularFile {
                        path,
                        kind: "socket or device",
                    };
                }
                _ => {}
            }
        }
        match e.kind() {
            ErrorKind::NotFound => ToolError::NotFound { path },
            ErrorKind::PermissionDenied if e.raw_os_error().is_none() => ToolError::Escape { path },
            ErrorKind::PermissionDenied => ToolError::PermissionDenied {
                path,
                action: op_action(op),
            },
            _ => ToolError::Io {
                op,
                path,
                source: e,
            },
        }
    }
}

fn op_action(op: &'static str) -> &'static str {
    match op {
        "write" | "create" | "rename" | "create directory" => "write",
        "list" => "list",
        _ => "read",
    }
}

pub(crate) fn fmt_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}
