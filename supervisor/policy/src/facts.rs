//! What the engine may learn about the world: through these traits only.

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use crate::{HostAddrs, HostAddrsError};

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

/// The network as the supervisor sees it: DNS, and its own addresses. The
/// daemon implements it with the system resolver (or `--resolve` pins) and
/// the host-address set it keeps fresh; tests use fixed tables.
pub trait Resolver {
    fn resolve(&self, host: &str) -> Result<Vec<IpAddr>, ResolveError>;

    /// Every address of the supervisor's own host, as last read:
    /// a fetch to one of them is refused. `Err` when they could not be
    /// read: then every fetch is refused (fail closed). A resolver that
    /// models no host (a test, an offline tool told so) returns
    /// [`HostAddrs::none`]; there is no default, so none forgets.
    fn host_addrs(&self) -> Result<&HostAddrs, HostAddrsError>;
}

/// A client's own ripgrep walk, as the client runs it (docs/CLIENTS.md,
/// "What a client's own tool reaches"): from `root`, hidden files
/// included, symlinks not followed, `.ignore` and `.rgignore` files
/// respected everywhere and `.gitignore` only inside a git repository, and
/// `globs` as ripgrep's `--glob` arguments in their order (`!` excludes;
/// the last glob that matches decides; a glob that matches overrides the
/// ignore files).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchWalk {
    /// A directory, every symlink resolved.
    pub root: PathBuf,
    pub globs: Vec<String>,
    /// Entries walked before the walk gives up ([`Walked::TooMany`]).
    pub max_entries: usize,
}

/// What a [`SearchWalk`] reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Walked {
    /// The regular files it opens (absolute), in walk order.
    Files(Vec<PathBuf>),
    /// More entries than `max_entries`: what it reads is not known.
    TooMany,
    /// The walk could not be set up (a glob ripgrep would refuse too).
    Failed(String),
}

/// The files a client's own search reads. The daemon implements it with
/// ripgrep's own walker (`ignore`), configured as the client runs ripgrep
/// (but never reading the user's global git excludes, so what it reports
/// is never less than what the client reads); tests use a fixed table.
pub trait SearchFacts {
    fn search_walk(&self, walk: &SearchWalk) -> Walked;
}

/// Asks the filesystem each question once per decision. A script that
/// writes `out/a`, `out/b`, … asks about `out` once, not once per redirect.
/// The answers of one decision are a snapshot either way: a path changed
/// after the check is the sandbox's business, not the check's.
pub(crate) struct Memo<'a> {
    inner: &'a dyn FsFacts,
    lstat: RefCell<HashMap<PathBuf, Option<FileFacts>>>,
    links: RefCell<HashMap<PathBuf, Option<PathBuf>>>,
}

impl<'a> Memo<'a> {
    pub(crate) fn new(inner: &'a dyn FsFacts) -> Memo<'a> {
        Memo {
            inner,
            lstat: RefCell::default(),
            links: RefCell::default(),
        }
    }
}

impl FsFacts for Memo<'_> {
    fn symlink_metadata(&self, path: &Path) -> Option<FileFacts> {
        remembered(&self.lstat, path, || self.inner.symlink_metadata(path))
    }

    fn read_link(&self, path: &Path) -> Option<PathBuf> {
        remembered(&self.links, path, || self.inner.read_link(path))
    }
}

/// The answer for `path` from `cache`; `ask` runs only the first time.
fn remembered<T: Clone>(
    cache: &RefCell<HashMap<PathBuf, T>>,
    path: &Path,
    ask: impl FnOnce() -> T,
) -> T {
    if let Some(hit) = cache.borrow().get(path) {
        return hit.clone();
    }
    let answer = ask();
    cache
        .borrow_mut()
        .insert(path.to_path_buf(), answer.clone());
    answer
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    /// Counts the questions that reach the filesystem.
    struct Counting {
        lstats: Cell<usize>,
        links: Cell<usize>,
    }

    impl FsFacts for Counting {
        fn symlink_metadata(&self, path: &Path) -> Option<FileFacts> {
            self.lstats.set(self.lstats.get() + 1);
            (path == Path::new("/ws/link")).then_some(FileFacts {
                kind: FileKind::Symlink,
                size: 0,
                nlink: 1,
            })
        }
        fn read_link(&self, _: &Path) -> Option<PathBuf> {
            self.links.set(self.links.get() + 1);
            Some(PathBuf::from("/etc"))
        }
    }

    #[test]
    fn each_question_reaches_the_filesystem_once() {
        let fs = Counting {
            lstats: Cell::new(0),
            links: Cell::new(0),
        };
        let memo = Memo::new(&fs);
        for _ in 0..3 {
            assert_eq!(memo.symlink_metadata(Path::new("/ws/missing")), None);
            assert_eq!(
                memo.symlink_metadata(Path::new("/ws/link")).map(|f| f.kind),
                Some(FileKind::Symlink)
            );
            assert_eq!(
                memo.read_link(Path::new("/ws/link")),
                Some(PathBuf::from("/etc"))
            );
        }
        assert_eq!(fs.lstats.get(), 2, "one lstat per distinct path");
        assert_eq!(fs.links.get(), 1, "one readlink per distinct path");
    }
}
