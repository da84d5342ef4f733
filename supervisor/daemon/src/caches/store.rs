//! The package caches on disk (docs/OPERATIONS.md "Package caches"):
//! `<root>/<uid>/owner` (`[sandbox] cache = "owner"`) or
//! `<root>/<uid>/ws-<hash>` with `ws-<hash>.path` beside it naming the
//! workspace (`cache = "workspace"`). The root (0711) and each `<uid>`
//! (0700) are the supervisor's; only the leaf is the owner's (0700), and
//! only the leaf is ever mounted into a sandbox, so no sandbox can swap a
//! directory on the way to it. What lies in a leaf was written by
//! sandboxes: it is walked by descriptor, never following a symlink.

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use sha2::{Digest as _, Sha256};
use tollgate_config::CacheMode;

/// The leaf an owner's cache is kept in for one session, `None` when
/// caches are off.
pub fn leaf(root: &Path, mode: CacheMode, uid: u32, workspace: &Path) -> Option<PathBuf> {
    let owner = root.join(uid.to_string());
    match mode {
        CacheMode::Owner => Some(owner.join("owner")),
        CacheMode::Workspace => Some(owner.join(workspace_leaf(workspace))),
        CacheMode::Off => None,
    }
}

/// `ws-` and the first 16 hex digits of the workspace path's SHA-256.
fn workspace_leaf(workspace: &Path) -> String {
    let d = Sha256::digest(workspace.as_os_str().as_bytes());
    let hex: String = d.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("ws-{hex}")
}

/// Makes `leaf` (beneath `root`, for `owner` = (uid, gid)) and the
/// directories above it, each checked to be a directory, not a symlink,
/// with the owner and mode it must have. `workspace`: the path written
/// beside a per-workspace leaf.
pub fn prepare(
    root: &Path,
    leaf: &Path,
    owner: (u32, u32),
    workspace: Option<&Path>,
) -> io::Result<()> {
    let me = nix::unistd::geteuid().as_raw();
    let uid_dir = leaf
        .parent()
        .ok_or_else(|| io::Error::other("a cache leaf without a parent"))?;
    ensure_dir(root, 0o711, None)?;
    ensure_dir(uid_dir, 0o700, None)?;
    // Root gives the leaf to its owner; a supervisor that is not root
    // serves only its own uid.
    let give = (me == 0).then_some(owner);
    ensure_dir(leaf, 0o700, give)?;
    if let Some(ws) = workspace {
        let mut name = leaf.as_os_str().to_owned();
        name.push(".path");
        std::fs::write(PathBuf::from(name), ws.as_os_str().as_bytes())?;
    }
    Ok(())
}

/// `dir` exists as a directory (lstat) of mode `mode`, owned by `owner`
/// when given (else left as made).
fn ensure_dir(dir: &Path, mode: u32, owner: Option<(u32, u32)>) -> io::Result<()> {
    match std::fs::DirBuilder::new().mode(mode).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", dir.display()))),
    }
    let m = std::fs::symlink_metadata(dir)?;
    if !m.is_dir() {
        return Err(io::Error::other(format!(
            "{} is not a directory (a symlink?); refusing to keep caches there",
            dir.display()
        )));
    }
    if let Some((uid, gid)) = owner
        && (m.uid(), m.gid()) != (uid, gid)
    {
        std::os::unix::fs::lchown(dir, Some(uid), Some(gid))?;
    }
    if m.mode() & 0o7777 != mode {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

/// One file in a cache, found by [`walk`].
#[derive(Debug, Clone)]
struct Found {
    /// Relative to the leaf.
    rel: PathBuf,
    bytes: u64,
    modified: SystemTime,
}

/// What a leaf holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub bytes: u64,
    pub files: u64,
    /// The newest file's modification time (seconds since the epoch).
    pub newest_unix: u64,
}

fn open_beneath(at: &OwnedFd, rel: &Path) -> io::Result<OwnedFd> {
    let rel: &OsStr = if rel.as_os_str().is_empty() {
        OsStr::new(".")
    } else {
        rel.as_os_str()
    };
    Ok(rustix::fs::openat2(
        at,
        rel,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS,
    )?)
}

fn open_leaf(leaf: &Path) -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(
        leaf,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Every file beneath the leaf (symlinks counted as files, never
/// followed), depth-first, one descriptor per level.
fn walk(leaf_fd: &OwnedFd) -> io::Result<Vec<Found>> {
    let mut out = Vec::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        let Ok(fd) = open_beneath(leaf_fd, &rel) else {
            continue;
        };
        let mut dir = rustix::fs::Dir::read_from(&fd)?;
        while let Some(entry) = dir.read() {
            let entry = entry?;
            let name = entry.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            let child = rel.join(OsStr::from_bytes(name.to_bytes()));
            if entry.file_type() == FileType::Directory {
                todo.push(child);
                continue;
            }
            let Ok(st) = rustix::fs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                todo.push(child);
                continue;
            }
            let secs = u64::try_from(st.st_mtime).unwrap_or(0);
            out.push(Found {
                rel: child,
                bytes: u64::try_from(st.st_blocks).unwrap_or(0) * 512,
                modified: SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs),
            });
        }
    }
    Ok(out)
}

fn usage_of(found: &[Found]) -> Usage {
    Usage {
        bytes: found.iter().map(|f| f.bytes).sum(),
        files: found.len() as u64,
        newest_unix: found
            .iter()
            .filter_map(|f| f.modified.duration_since(SystemTime::UNIX_EPOCH).ok())
            .map(|d| d.as_secs())
            .max()
            .unwrap_or(0),
    }
}

/// What a leaf holds (on-disk size, in 512-byte blocks as `du` counts).
pub fn usage(leaf: &Path) -> io::Result<Usage> {
    Ok(usage_of(&walk(&open_leaf(leaf)?)?))
}

/// What [`trim`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Trimmed {
    pub removed_files: u64,
    pub removed_bytes: u64,
    /// What the leaf holds afterwards.
    pub left: Usage,
}

/// Removes the leaf's oldest files (by modification time) until it holds
/// at most `cap_bytes`; nothing when it already does.
pub fn trim(leaf: &Path, cap_bytes: u64) -> io::Result<Trimmed> {
    let leaf_fd = open_leaf(leaf)?;
    let mut found = walk(&leaf_fd)?;
    let mut total: u64 = found.iter().map(|f| f.bytes).sum();
    let mut done = Trimmed::default();
    if total > cap_bytes {
        found.sort_by_key(|f| f.modified);
        let mut kept = Vec::with_capacity(found.len());
        for f in found {
            if total <= cap_bytes {
                kept.push(f);
                continue;
            }
            if remove_beneath(&leaf_fd, &f.rel).is_ok() {
                total = total.saturating_sub(f.bytes);
                done.removed_files += 1;
                done.removed_bytes += f.bytes;
            } else {
                kept.push(f);
            }
        }
        found = kept;
    }
    done.left = usage_of(&found);
    Ok(done)
}

/// Unlinks `rel` beneath the leaf, its parent opened without following a
/// symlink (a sandbox may have swapped one in since the walk).
fn remove_beneath(leaf_fd: &OwnedFd, rel: &Path) -> io::Result<()> {
    let parent = rel.parent().unwrap_or(Path::new(""));
    let name = rel
        .file_name()
        .ok_or_else(|| io::Error::other("a cache file without a name"))?;
    let dir = open_beneath(leaf_fd, parent)?;
    let c: CString = CString::new(name.as_bytes())?;
    let c: &CStr = &c;
    Ok(rustix::fs::unlinkat(&dir, c, AtFlags::empty())?)
}

/// One leaf as [`list`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub uid: u32,
    /// `owner`, or `ws-<hash>`.
    pub name: String,
    /// The workspace of a per-workspace leaf (its `.path` file).
    pub workspace: Option<String>,
    pub path: PathBuf,
    pub usage: Usage,
}

/// Every leaf beneath `root`, by uid then name.
pub fn list(root: &Path) -> io::Result<Vec<Listed>> {
    let mut v = Vec::new();
    let rd = match std::fs::read_dir(root) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(v),
        Err(e) => return Err(e),
    };
    for owner in rd.flatten() {
        let Some(uid) = owner
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        v.extend(leaves_of(&owner.path(), uid)?);
    }
    v.sort_by(|a, b| (a.uid, &a.name).cmp(&(b.uid, &b.name)));
    Ok(v)
}

fn leaves_of(uid_dir: &Path, uid: u32) -> io::Result<Vec<Listed>> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(uid_dir)?.flatten() {
        let Ok(name) = e.file_name().into_string() else {
            continue;
        };
        let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
        if !is_dir || !(name == "owner" || name.starts_with("ws-")) {
            continue;
        }
        let path = e.path();
        let workspace = std::fs::read_to_string(uid_dir.join(format!("{name}.path"))).ok();
        v.push(Listed {
            uid,
            usage: usage(&path).unwrap_or_default(),
            name,
            workspace,
            path,
        });
    }
    Ok(v)
}

/// Removes a leaf and everything in it (std's removal opens each
/// directory without following symlinks), and its `.path` file.
pub fn clear(leaf: &Listed) -> io::Result<()> {
    match std::fs::remove_dir_all(&leaf.path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut p = leaf.path.as_os_str().to_owned();
    p.push(".path");
    let _ = std::fs::remove_file(PathBuf::from(p));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(p: &Path, bytes: usize, age_s: u64) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, vec![7u8; bytes]).unwrap();
        let t = SystemTime::now() - std::time::Duration::from_secs(age_s);
        std::fs::File::options()
            .write(true)
            .open(p)
            .unwrap()
            .set_modified(t)
            .unwrap();
    }

    #[test]
    fn leaves_are_per_owner_or_per_workspace() {
        let r = Path::new("/st/caches");
        let ws = Path::new("/srv/w");
        assert_eq!(
            leaf(r, CacheMode::Owner, 1000, ws),
            Some(PathBuf::from("/st/caches/1000/owner"))
        );
        let a = leaf(r, CacheMode::Workspace, 1000, ws).unwrap();
        let b = leaf(r, CacheMode::Workspace, 1000, Path::new("/srv/x")).unwrap();
        assert!(a.starts_with("/st/caches/1000") && a != b, "{a:?} {b:?}");
        assert_eq!(a.file_name().unwrap().len(), "ws-".len() + 16);
        assert_eq!(leaf(r, CacheMode::Off, 1000, ws), None);
    }

    #[test]
    fn trimming_removes_the_oldest_files_first_and_never_follows_a_symlink() {
        let d = tempfile::tempdir().unwrap();
        let outside = d.path().join("outside");
        write(&outside, 8192, 1000);
        let l = d.path().join("1000/owner");
        let me = (
            nix::unistd::getuid().as_raw(),
            nix::unistd::getgid().as_raw(),
        );
        prepare(d.path(), &l, me, None).unwrap();
        write(&l.join("npm/old"), 64 << 10, 300);
        write(&l.join("pip/mid"), 64 << 10, 200);
        write(&l.join("npm/new"), 64 << 10, 100);
        std::os::unix::fs::symlink(&outside, l.join("npm/link")).unwrap();
        std::os::unix::fs::symlink(d.path(), l.join("dirlink")).unwrap();
        let before = usage(&l).unwrap();
        assert_eq!(before.files, 5);
        let t = trim(&l, 150 << 10).unwrap();
        assert!(!l.join("npm/old").exists());
        assert!(l.join("pip/mid").exists() && l.join("npm/new").exists());
        assert_eq!(t.removed_files, 1, "{t:?}");
        assert!(outside.exists(), "a symlink's target is never touched");
        // To nothing: the two files go; the links (no blocks) may stay,
        // their targets untouched.
        let t = trim(&l, 0).unwrap();
        assert_eq!((t.removed_files, t.left.bytes), (2, 0), "{t:?}");
        assert!(outside.exists());
        assert_eq!(usage(&l).unwrap().bytes, 0);
    }

    #[test]
    fn list_and_clear_see_every_leaf() {
        let d = tempfile::tempdir().unwrap();
        let me = (
            nix::unistd::getuid().as_raw(),
            nix::unistd::getgid().as_raw(),
        );
        let a = leaf(d.path(), CacheMode::Owner, 5, Path::new("/w")).unwrap();
        let b = leaf(d.path(), CacheMode::Workspace, 5, Path::new("/w")).unwrap();
        prepare(d.path(), &a, me, None).unwrap();
        prepare(d.path(), &b, me, Some(Path::new("/w"))).unwrap();
        write(&a.join("x"), 4096, 1);
        let got = list(d.path()).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].uid, got[0].name.as_str()), (5, "owner"));
        assert_eq!(got[0].usage.files, 1);
        assert_eq!(got[1].workspace.as_deref(), Some("/w"));
        for l in &got {
            clear(l).unwrap();
        }
        assert!(list(d.path()).unwrap().is_empty());
    }
}
