//! A directory a privileged process makes in a world-writable place (`/tmp`,
//! `$TMPDIR`): made by `mkdtemp` (a fresh random name, never a name someone
//! else could have planted), held by a descriptor opened with `O_NOFOLLOW`,
//! and changed only through descriptors (`mkdirat`, `fchmod`, `fchown`), so
//! a symlink or a directory a local user swaps in is never followed. Every
//! failed step, removal included, is an error. docs/THREAT_MODEL.md, "Names
//! in world-writable directories", lists the sites that use it.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

use crate::SandboxError;

/// A fresh private directory, removed by [`PrivateDir::close`] (or, best
/// effort, on drop).
pub struct PrivateDir {
    dir: tempfile::TempDir,
    fd: OwnedFd,
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> SandboxError {
    move |source| SandboxError::Io {
        context: what,
        source,
    }
}

/// Opens `name` under `dir` as a directory, refusing a symlink.
fn open_dir_at(dir: &OwnedFd, name: &str, shown: &Path) -> Result<OwnedFd, SandboxError> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io(format!("open {} (no symlinks followed)", shown.display()))(e.into()))
}

impl PrivateDir {
    /// `<parent>/<prefix>XXXXXX` by `mkdtemp` (mode 0700, owned by this
    /// process), then set to `mode` through its descriptor.
    pub fn new(parent: &Path, prefix: &str, mode: u32) -> Result<PrivateDir, SandboxError> {
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in(parent)
            .map_err(io(format!(
                "create a private directory in {}",
                parent.display()
            )))?;
        let fd = rustix::fs::open(
            dir.path(),
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io(format!("open {}", dir.path().display()))(e.into()))?;
        let st = rustix::fs::fstat(&fd)
            .map_err(|e| io(format!("stat {}", dir.path().display()))(e.into()))?;
        if st.st_uid != nix::unistd::geteuid().as_raw() {
            return Err(SandboxError::Refused(format!(
                "{} is owned by uid {}, not by this process: refusing to use it",
                dir.path().display(),
                st.st_uid
            )));
        }
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))
            .map_err(|e| io(format!("chmod {:o} {}", mode, dir.path().display()))(e.into()))?;
        Ok(PrivateDir { dir, fd })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Makes `name` (one component) inside, failing if it exists, and
    /// returns its path.
    pub fn mkdir(&self, name: &str, mode: u32) -> Result<PathBuf, SandboxError> {
        let path = self.path().join(name);
        if name.contains('/') || name == ".." || name == "." {
            return Err(SandboxError::Refused(format!(
                "{name:?} is not one path component"
            )));
        }
        rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(mode))
            .map_err(|e| io(format!("create {}", path.display()))(e.into()))?;
        let sub = open_dir_at(&self.fd, name, &path)?;
        // mkdirat's mode is masked by the umask: set it exactly.
        rustix::fs::fchmod(&sub, Mode::from_raw_mode(mode))
            .map_err(|e| io(format!("chmod {:o} {}", mode, path.display()))(e.into()))?;
        Ok(path)
    }

    /// Makes `outer/inner` (each one component), as [`PrivateDir::mkdir`].
    pub fn mkdir2(&self, outer: &str, inner: &str, mode: u32) -> Result<PathBuf, SandboxError> {
        let outer_path = self.path().join(outer);
        let ofd = open_dir_at(&self.fd, outer, &outer_path)?;
        let path = outer_path.join(inner);
        rustix::fs::mkdirat(&ofd, inner, Mode::from_raw_mode(mode))
            .map_err(|e| io(format!("create {}", path.display()))(e.into()))?;
        Ok(path)
    }

    /// Gives the directory `name` inside to `uid:gid`, through a descriptor
    /// opened with `O_NOFOLLOW`: a symlink planted there is refused.
    pub fn chown(&self, name: &str, uid: u32, gid: u32) -> Result<(), SandboxError> {
        let path = self.path().join(name);
        let fd = open_dir_at(&self.fd, name, &path)?;
        rustix::fs::fchown(
            &fd,
            Some(rustix::fs::Uid::from_raw(uid)),
            Some(rustix::fs::Gid::from_raw(gid)),
        )
        .map_err(|e| io(format!("chown {uid}:{gid} {}", path.display()))(e.into()))
    }

    /// Removes the directory and everything in it; a failure is an error.
    pub fn close(self) -> Result<(), SandboxError> {
        let shown = self.path().display().to_string();
        drop(self.fd);
        self.dir.close().map_err(io(format!("remove {shown}")))
    }

    /// Leaves the directory in place (for inspection) and returns its path.
    pub fn keep(self) -> PathBuf {
        self.dir.keep()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt as _;

    fn root() -> bool {
        nix::unistd::geteuid().is_root()
    }

    #[test]
    fn private_dir_is_fresh_and_mode_set_through_its_descriptor() {
        let parent = tempfile::tempdir().unwrap();
        let d = PrivateDir::new(parent.path(), "tollgate-t-", 0o711).unwrap();
        let m = std::fs::symlink_metadata(d.path()).unwrap();
        assert!(m.is_dir());
        assert_eq!(m.mode() & 0o7777, 0o711);
        let sub = d.mkdir("ws", 0o755).unwrap();
        assert_eq!(std::fs::metadata(&sub).unwrap().mode() & 0o7777, 0o755);
        // mkdir of an existing name fails: O_EXCL semantics.
        assert!(d.mkdir("ws", 0o755).is_err());
        let path = d.path().to_path_buf();
        d.close().unwrap();
        assert!(!path.exists());
    }

    /// A planted symlink where the chown lands is refused, and its target
    /// keeps its owner (docs/THREAT_MODEL.md, "Names in world-writable
    /// directories").
    #[test]
    fn doctor_probe_chown_does_not_follow_a_planted_symlink() {
        let parent = tempfile::tempdir().unwrap();
        let victim = parent.path().join("victim");
        std::fs::create_dir(&victim).unwrap();
        let before = std::fs::metadata(&victim).unwrap();
        let d = PrivateDir::new(parent.path(), "tollgate-t-", 0o700).unwrap();
        std::os::unix::fs::symlink(&victim, d.path().join("workspace")).unwrap();
        let (uid, gid) = if root() {
            (65534, 65534)
        } else {
            (before.uid(), before.gid())
        };
        let err = d.chown("workspace", uid, gid).unwrap_err();
        assert!(err.to_string().contains("no symlinks followed"), "{err}");
        let after = std::fs::metadata(&victim).unwrap();
        assert_eq!((after.uid(), after.gid()), (before.uid(), before.gid()));
        d.close().unwrap();
    }
}
