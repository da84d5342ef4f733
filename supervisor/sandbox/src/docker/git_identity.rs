//! The git identity in a container's private home (docs/THREAT_MODEL.md,
//! "The sandbox's environment"): the engine makes the home an empty tmpfs,
//! so the `~/.gitconfig` the native sandbox writes into it (`user.name`
//! and `user.email`, nothing else of the owner's config) is written here
//! to a file of the supervisor's state directory, which no sandbox can
//! reach, and bind-mounted read-only at `~/.gitconfig`. The file is
//! removed once the container has started (its mount keeps it), or by
//! the stale-file sweep after a crash.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::SandboxError;

/// The file's name beside the session's exec agent socket.
pub(super) const SUFFIX: &str = ".gitconfig";

/// One session's identity file; removed when dropped.
pub(super) struct GitIdentityFile {
    path: PathBuf,
}

impl GitIdentityFile {
    /// Writes `text` to `<state_dir>/exec-agent/<session>.gitconfig` (the
    /// directory [`super::agent::AgentSocket::bind`] made, mode 0700),
    /// readable by the container's user (0644: nobody else can pass the
    /// directory). `None` when there is nothing to write.
    pub(super) fn write(
        state_dir: &Path,
        session_id: &str,
        text: &str,
    ) -> Result<Option<GitIdentityFile>, SandboxError> {
        if text.is_empty() {
            return Ok(None);
        }
        let path = state_dir
            .join("exec-agent")
            .join(format!("{session_id}{SUFFIX}"));
        let io = |e| SandboxError::Io {
            context: format!("write {}", path.display()),
            source: e,
        };
        let _ = std::fs::remove_file(&path);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(io)?;
        // Whatever the umask: the container's user reads it.
        f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .map_err(io)?;
        f.write_all(text.as_bytes()).map_err(io)?;
        Ok(Some(GitIdentityFile { path }))
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for GitIdentityFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_holds_the_identity_and_goes_when_dropped() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("exec-agent")).unwrap();
        assert!(
            GitIdentityFile::write(d.path(), "s1", "")
                .unwrap()
                .is_none()
        );
        let f = GitIdentityFile::write(d.path(), "s1", "[user]\n\tname = \"A\"\n")
            .unwrap()
            .unwrap();
        let p = f.path().to_path_buf();
        assert_eq!(p, d.path().join("exec-agent/s1.gitconfig"));
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "[user]\n\tname = \"A\"\n"
        );
        drop(f);
        assert!(!p.exists());
    }
}
