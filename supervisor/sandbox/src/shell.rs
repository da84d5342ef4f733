//! The shell a command line runs in: bash when the sandbox has it, `sh`
//! only where it has not (docs/INTERFACES.md, run_bash). The shell policy
//! parses every command line as bash (the vendored brush-parser), so bash
//! runs what was judged; `sh` is the fallback of an image without bash.

use std::path::Path;

/// Where bash is looked for, in this order: the sandbox's `/bin` and
/// `/usr/bin` (the host's on the native backend, the image's on Docker).
const BASH_PATHS: [&str; 2] = ["/bin/bash", "/usr/bin/bash"];

/// The shell of one sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Shell {
    /// bash, at this path inside the sandbox.
    Bash(&'static str),
    /// `/bin/sh`: the sandbox has no bash.
    Sh,
}

impl Shell {
    /// The argv that runs `command` in this shell.
    pub fn argv(self, command: &str) -> Vec<String> {
        vec![
            self.path().to_string(),
            "-c".to_string(),
            command.to_string(),
        ]
    }

    pub fn path(self) -> &'static str {
        match self {
            Shell::Bash(p) => p,
            Shell::Sh => "/bin/sh",
        }
    }

    /// `bash` or `sh`, for the tool's description and the records.
    pub fn name(self) -> &'static str {
        match self {
            Shell::Bash(_) => "bash",
            Shell::Sh => "sh",
        }
    }

    /// The shell of a sandbox whose `/` is `root` (`/` itself for the native
    /// backend, which shows the host's system directories): bash when one
    /// of [`BASH_PATHS`] is an executable file there. `exists` answers
    /// whether a path (inside the sandbox's root) is an executable file.
    pub fn find(exists: impl Fn(&str) -> bool) -> Shell {
        BASH_PATHS
            .iter()
            .find(|p| exists(p))
            .map_or(Shell::Sh, |p| Shell::Bash(p))
    }

    /// [`Shell::find`] on this host's own files.
    pub fn of_host() -> Shell {
        Shell::find(|p| is_executable_file(Path::new(p)))
    }
}

/// The shell of a container whose init is host pid `pid`: looked up in
/// its root (`/proc/PID/root`, symlinks resolved inside that root, never
/// the host's).
pub(crate) fn of_container_root(pid: i64) -> std::io::Result<Shell> {
    use std::ffi::CString;
    use std::os::fd::AsRawFd;
    const RESOLVE_IN_ROOT: u64 = 0x10;
    let root = CString::new(format!("/proc/{pid}/root")).map_err(std::io::Error::other)?;
    let root = crate::native::sys::openat2_path(libc::AT_FDCWD, &root, libc::O_DIRECTORY, 0)?;
    Ok(Shell::find(|p| {
        let Ok(rel) = CString::new(p.trim_start_matches('/')) else {
            return false;
        };
        crate::native::sys::openat2_path(root.as_raw_fd(), &rel, 0, RESOLVE_IN_ROOT)
            .and_then(|fd| nix::sys::stat::fstat(&fd).map_err(std::io::Error::from))
            .is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFREG && st.st_mode & 0o111 != 0)
    }))
}

/// A regular file (after symlinks) with an execute bit.
pub(crate) fn is_executable_file(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bash_is_preferred_and_sh_is_the_fallback() {
        assert_eq!(
            Shell::find(|p| p == "/usr/bin/bash"),
            Shell::Bash("/usr/bin/bash")
        );
        assert_eq!(Shell::find(|_| true), Shell::Bash("/bin/bash"));
        assert_eq!(Shell::find(|_| false), Shell::Sh);
        assert_eq!(
            Shell::Sh.argv("echo hi"),
            vec![
                "/bin/sh".to_string(),
                "-c".to_string(),
                "echo hi".to_string()
            ]
        );
        assert_eq!(Shell::Bash("/bin/bash").name(), "bash");
    }
}
