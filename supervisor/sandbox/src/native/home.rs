//! Step 3b: the private home (docs/THREAT_MODEL.md, "The sandbox's
//! environment"). HOME inside is the owner's home path, but nothing of the
//! host's home is there: a fresh tmpfs (sized like /tmp, mode 0700, owned
//! by the session's uid) holding `.gitconfig` with the owner's git identity
//! and the owner's toolchain directories, each taken from the host by file
//! descriptor without following a symlink anywhere on its path, and
//! attached read-only, nosuid, nodev at its own path. The credential paths
//! in them are masked afterwards with every other hidden path (mounts.rs).
//! The owner's package cache, when one is kept, is attached writable,
//! nosuid, nodev at `~/.tollgate-cache` (docs/THREAT_MODEL.md "Package
//! caches").

use std::fs;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use nix::mount::MsFlags;

use super::SetupError;
use super::mounts::{RESOLVE_BENEATH, RESOLVE_NO_SYMLINKS, cpath, ensure_dirs, err, rel_of, tmpfs};
use super::sys;
use crate::PrivateHome;

/// Builds the private home beneath the new root `new`, for `owner`
/// (uid, gid), `size_mb` large, with the package cache `cache` taken by
/// [`take_cache`].
pub(super) fn build(
    new: &Path,
    home: &PrivateHome,
    owner: (u32, u32),
    size_mb: u64,
    cache: Option<OwnedFd>,
) -> Result<(), SetupError> {
    // From the host first, before anything covers the home's path.
    let trees = take_toolchains(home)?;
    let new_root = sys::openat2_path(libc::AT_FDCWD, &cpath(new)?, libc::O_DIRECTORY, 0)
        .map_err(|e| err("home", "open new root", e))?;
    let at = ensure_dirs(&new_root, rel_of(&home.path))?;
    tmpfs(
        &PathBuf::from(format!("/proc/self/fd/{}", at.as_raw_fd())),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        &format!("mode=0700,size={}m", size_mb.max(1)),
    )?;
    drop(at);
    let dir = new.join(rel_of(&home.path));
    chown(&dir, owner)?;
    if !home.gitconfig.is_empty() {
        let f = dir.join(".gitconfig");
        fs::write(&f, &home.gitconfig).map_err(|e| err("home", f.display(), e))?;
        chown(&f, owner)?;
    }
    for (t, tree) in home.toolchains.iter().zip(trees) {
        let Some(tree) = tree else { continue };
        let rel = t.strip_prefix(&home.path).map_err(|_| {
            err(
                "home",
                t.display(),
                "a toolchain directory outside the home",
            )
        })?;
        let target = owned_dirs(&dir, rel, owner)?;
        sys::move_mount_fd(tree.as_fd(), target.as_fd())
            .map_err(|e| err("home", format!("attach {}", t.display()), e))?;
    }
    if let Some(tree) = cache {
        let target = owned_dirs(&dir, Path::new(crate::CACHE_AT), owner)?;
        sys::move_mount_fd(tree.as_fd(), target.as_fd())
            .map_err(|e| err("home", "attach the package cache", e))?;
    }
    Ok(())
}

/// The package cache directory `dir` as a detached writable tree (nosuid,
/// nodev), taken without following a symlink anywhere on its path; it must
/// exist (the daemon made it) and belong to the session's `uid`, mode 0700.
pub(super) fn take_cache(dir: &Path, uid: u32) -> Result<OwnedFd, SetupError> {
    let host_root = sys::openat2_path(libc::AT_FDCWD, c"/", libc::O_DIRECTORY, 0)
        .map_err(|e| err("home", "open /", e))?;
    let fd = sys::openat2_path(
        host_root.as_raw_fd(),
        &cpath(rel_of(dir))?,
        libc::O_NOFOLLOW | libc::O_DIRECTORY,
        RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS,
    )
    .map_err(|e| err("home", format!("package cache {}", dir.display()), e))?;
    let meta = fs::File::from(fd.try_clone().map_err(|e| err("home", dir.display(), e))?)
        .metadata()
        .map_err(|e| err("home", format!("stat {}", dir.display()), e))?;
    if meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return Err(err(
            "home",
            dir.display(),
            format!(
                "the package cache must be the session owner's (uid {uid}, mode 0700); it is uid {} mode {:o}",
                meta.uid(),
                meta.mode() & 0o7777
            ),
        ));
    }
    let tree = sys::open_tree_clone(fd.as_fd(), false)
        .map_err(|e| err("home", format!("clone {}", dir.display()), e))?;
    sys::mount_setattr_fd(
        tree.as_fd(),
        sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV,
        0,
        false,
    )
    .map_err(|e| err("home", format!("{} nosuid", dir.display()), e))?;
    Ok(tree)
}

/// Each toolchain directory as a detached read-only tree; `None` for one
/// that is gone or no longer a plain directory (a symlink swapped in since
/// the daemon looked is refused here, never followed).
fn take_toolchains(home: &PrivateHome) -> Result<Vec<Option<OwnedFd>>, SetupError> {
    let host_root = sys::openat2_path(libc::AT_FDCWD, c"/", libc::O_DIRECTORY, 0)
        .map_err(|e| err("home", "open /", e))?;
    let mut v = Vec::with_capacity(home.toolchains.len());
    for t in &home.toolchains {
        let fd = match sys::openat2_path(
            host_root.as_raw_fd(),
            &cpath(rel_of(t))?,
            libc::O_NOFOLLOW | libc::O_DIRECTORY,
            RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS,
        ) {
            Ok(fd) => fd,
            Err(_) => {
                v.push(None);
                continue;
            }
        };
        let tree = sys::open_tree_clone(fd.as_fd(), true)
            .map_err(|e| err("home", format!("clone {}", t.display()), e))?;
        sys::mount_setattr_fd(
            tree.as_fd(),
            sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV,
            0,
            true,
        )
        .map_err(|e| err("home", format!("{} read-only", t.display()), e))?;
        v.push(Some(tree));
    }
    Ok(v)
}

/// `rel` beneath the private home `dir` and the home's directories above
/// it ([`crate::home_dirs`]), each made and given to the owner. Returns an
/// `O_PATH` fd of `rel`, the mount point.
fn owned_dirs(dir: &Path, rel: &Path, owner: (u32, u32)) -> Result<OwnedFd, SetupError> {
    let target = dir.join(rel);
    let above = crate::home_dirs::above(dir, [target.as_path()]);
    for at in above.iter().chain([&target]) {
        match fs::DirBuilder::new()
            .mode(crate::home_dirs::MODE)
            .create(at)
        {
            Ok(()) => chown(at, owner)?,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(err("home", format!("mkdir {}", at.display()), e)),
        }
    }
    let home_fd = sys::openat2_path(libc::AT_FDCWD, &cpath(dir)?, libc::O_DIRECTORY, 0)
        .map_err(|e| err("home", dir.display(), e))?;
    sys::openat2_path(
        home_fd.as_raw_fd(),
        &cpath(rel)?,
        libc::O_NOFOLLOW | libc::O_DIRECTORY,
        RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS,
    )
    .map_err(|e| err("home", format!("mount point {}", target.display()), e))
}

fn chown(p: &Path, (uid, gid): (u32, u32)) -> Result<(), SetupError> {
    std::os::unix::fs::lchown(p, Some(uid), Some(gid))
        .map_err(|e| err("home", format!("chown {}", p.display()), e))
}
