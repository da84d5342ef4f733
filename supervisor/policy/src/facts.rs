//! What the engine may learn about the world: through these traits only.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    /// FIFO, socket, device: never opened by a file tool.
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileFacts {
    pub kind: FileKind,
    pub size: u64,
    /// Number of hard links (a regular file with more than one may alias a
    /// file outside the workspace).
    pub nlink: u64,
}

/// Filesystem facts. The daemon implements it on the real filesystem; tests
/// use an in-memory fake.
pub trait FsFacts {
    /// `lstat`: facts about the path itself, not following a final symlink.
    /// `None` when it does not exist.
    fn symlink_metadata(&self, path: &Path) -> Option<FileFacts>;
    /// The target of a symlink, as stored.
    fn read_link(&self, path: &Path) -> Option<PathBuf>;
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("{0} does not resolve")]
    NotFound(String),
    #[error("resolving {0} failed: {1}")]
    Failed(String, String),
}

/// DNS. The daemon implements it with the system resolver (or `--resolve`
/// pins); tests use a fixed table.
pub trait Resolver {
    fn resolve(&self, host: &str) -> Result<Vec<IpAddr>, ResolveError>;
}
