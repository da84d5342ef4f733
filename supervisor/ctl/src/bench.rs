//! `supervisorctl bench` runs `tollgate-bench` (built from supervisor/bench),
//! found beside this executable or on PATH, with the arguments as given:
//! supervisorctl links no bench code, and the .deb ships no bench
//! (docs/INTERFACES.md, docs/PERFORMANCE.md).

use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};

use anyhow::anyhow;

/// The bench binary's name.
pub const BINARY: &str = "tollgate-bench";

/// The hidden subcommand of the bench's bare gRPC server, which the bench
/// starts from its own executable; supervisorctl hands it on.
pub const FLOOR_SUBCOMMAND: &str = "__grpc-floor";

/// Replaces this process with `tollgate-bench ARGS…` (its output and exit
/// code are the command's); returns only when it cannot be started.
pub fn exec(args: &[OsString]) -> anyhow::Error {
    let own_dir = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf));
    let path = std::env::var_os("PATH").unwrap_or_default();
    let Some(exe) = find(own_dir.as_deref(), &path) else {
        return anyhow!(
            "bench needs {BINARY}, which is neither beside supervisorctl{} nor on PATH, hint: cargo build --release -p tollgate-bench (the .deb does not ship it)",
            own_dir
                .map(|d| format!(" (in {})", d.display()))
                .unwrap_or_default()
        );
    };
    let err = std::process::Command::new(&exe).args(args).exec();
    anyhow!("cannot run {}: {err}", exe.display())
}

/// `tollgate-bench` beside supervisorctl, else the first on PATH.
fn find(own_dir: Option<&Path>, path: &std::ffi::OsStr) -> Option<PathBuf> {
    own_dir
        .into_iter()
        .map(Path::to_path_buf)
        .chain(std::env::split_paths(path))
        .map(|d| d.join(BINARY))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(dir: &Path, mode: u32) -> PathBuf {
        use std::os::unix::fs::PermissionsExt as _;
        let p = dir.join(BINARY);
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    /// The one beside supervisorctl wins over PATH; PATH is searched in order.
    #[test]
    fn finds_the_bench_beside_supervisorctl_before_path() {
        let own = tempfile::tempdir().unwrap();
        let on_path = tempfile::tempdir().unwrap();
        let later = tempfile::tempdir().unwrap();
        let in_path = touch(on_path.path(), 0o755);
        touch(later.path(), 0o755);
        let path = std::env::join_paths([on_path.path(), later.path()]).unwrap();
        assert_eq!(find(Some(own.path()), &path), Some(in_path));
        let beside = touch(own.path(), 0o755);
        assert_eq!(find(Some(own.path()), &path), Some(beside));
    }

    /// A file without an execute bit is not the bench.
    #[test]
    fn skips_a_file_that_cannot_run() {
        let own = tempfile::tempdir().unwrap();
        touch(own.path(), 0o644);
        assert_eq!(find(Some(own.path()), std::ffi::OsStr::new("")), None);
    }
}
