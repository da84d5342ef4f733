//! The programs supervisorctl hands work to (`tollgate-bench` for `bench`,
//! `supervisor --doctor` for `doctor` when no supervisor answers): found
//! beside supervisorctl's own executable, else on PATH, so that an install
//! (the .deb puts all of them in /usr/bin) finds its own release first.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// Where `name` was looked for when it was not found, for the message.
pub struct NotFound {
    pub own_dir: Option<PathBuf>,
}

impl NotFound {
    /// ` (in DIR)`, the directory beside supervisorctl, when known.
    pub fn beside(&self) -> String {
        self.own_dir
            .as_ref()
            .map(|d| format!(" (in {})", d.display()))
            .unwrap_or_default()
    }
}

/// `name` beside supervisorctl, else the first on PATH.
pub fn find(name: &str) -> Result<PathBuf, NotFound> {
    let own_dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf));
    let path = std::env::var_os("PATH").unwrap_or_default();
    find_in(name, own_dir.as_deref(), &path).ok_or(NotFound { own_dir })
}

fn find_in(name: &str, own_dir: Option<&Path>, path: &OsStr) -> Option<PathBuf> {
    own_dir
        .into_iter()
        .map(Path::to_path_buf)
        .chain(std::env::split_paths(path))
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAME: &str = "tollgate-bench";

    fn touch(dir: &Path, mode: u32) -> PathBuf {
        use std::os::unix::fs::PermissionsExt as _;
        let p = dir.join(NAME);
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    /// The one beside supervisorctl wins over PATH; PATH is searched in order.
    #[test]
    fn finds_the_program_beside_supervisorctl_before_path() {
        let own = tempfile::tempdir().unwrap();
        let on_path = tempfile::tempdir().unwrap();
        let later = tempfile::tempdir().unwrap();
        let in_path = touch(on_path.path(), 0o755);
        touch(later.path(), 0o755);
        let path = std::env::join_paths([on_path.path(), later.path()]).unwrap();
        assert_eq!(find_in(NAME, Some(own.path()), &path), Some(in_path));
        let beside = touch(own.path(), 0o755);
        assert_eq!(find_in(NAME, Some(own.path()), &path), Some(beside));
    }

    /// A file without an execute bit is not the program.
    #[test]
    fn skips_a_file_that_cannot_run() {
        let own = tempfile::tempdir().unwrap();
        touch(own.path(), 0o644);
        assert_eq!(find_in(NAME, Some(own.path()), OsStr::new("")), None);
    }
}
