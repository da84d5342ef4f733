//! The Landlock layer every command of a sandbox with a split git directory
//! starts under: nothing it runs can make a symlink, FIFO, socket or device
//! beneath a git directory (docs/THREAT_MODEL.md, "links and special files").
//!
//! Landlock only adds rights, from a directory down; it cannot withhold one
//! beneath a directory it granted it on. So this layer handles only
//! `make_sym`, `make_fifo`, `make_sock`, `make_char`, `make_block` (and
//! `refer`, which every layer handles) and grants them entry by entry: on
//! every directory beside the path from `/` to each git directory, never on
//! that path itself. `refer` is granted on `/`, so renames and links across
//! directories stay as the sandbox's own ruleset allows them. What it costs:
//! none of those five can be made directly in a directory on that path (the
//! workspace's top, for one), nor beneath a directory made there after the
//! command started (the layer is computed again for the next command).
//!
//! Both backends use this one function: the native sandbox's pid 1 in each
//! command it forks, the Docker exec agent in each command it starts. It is
//! libc only (the agent is built statically and stays small).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

const MAKE_CHAR: u64 = 1 << 6;
const MAKE_SOCK: u64 = 1 << 9;
const MAKE_FIFO: u64 = 1 << 10;
const MAKE_BLOCK: u64 = 1 << 11;
const MAKE_SYM: u64 = 1 << 12;
const REFER: u64 = 1 << 13;
/// What the layer withholds beneath a git directory.
const SPECIAL: u64 = MAKE_CHAR | MAKE_SOCK | MAKE_FIFO | MAKE_BLOCK | MAKE_SYM;
const HANDLED: u64 = SPECIAL | REFER;
const RULE_PATH_BENEATH: libc::c_int = 1;

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

fn cpath(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL byte in a path"))
}

/// An `O_PATH` descriptor of a directory, not following a final symlink.
fn open_dir(p: &Path) -> io::Result<OwnedFd> {
    let c = cpath(p)?;
    // SAFETY: a valid NUL-terminated path; the result is checked.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor just opened, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn add_rule(ruleset: &OwnedFd, dir: &OwnedFd, access: u64) -> io::Result<()> {
    let attr = PathBeneathAttr {
        allowed_access: access,
        parent_fd: dir.as_raw_fd(),
    };
    // SAFETY: the attribute is a valid, live struct of the kernel's layout.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            RULE_PATH_BENEATH,
            &attr as *const PathBeneathAttr,
            0,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The directories on the paths from `/` to each of `dirs`, the git
/// directories themselves included (absolute, no `.` or `..`).
fn on_path(dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = dirs
        .iter()
        .flat_map(|d| d.ancestors().map(Path::to_path_buf))
        .collect();
    v.sort();
    v.dedup();
    v
}

/// The directories directly in `dir` that are on no path to a git
/// directory: each gets the five rights. A symlink is not one (what it
/// points to is granted where it lies, or not at all).
fn beside(dir: &Path, path: &[PathBuf]) -> io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let p = dir.join(e.file_name());
        if e.file_type()?.is_dir() && path.binary_search(&p).is_err() {
            out.push(p);
        }
    }
    Ok(out)
}

/// What one sandbox guards: its split git directories, and the directories
/// beside the path to them above `top` (listed once, when the guard is made:
/// a command may not be able to list `/`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Guard {
    dirs: Vec<PathBuf>,
    top: PathBuf,
    above: Vec<PathBuf>,
}

impl Guard {
    /// A guard of `dirs` (absolute paths in the sandbox's view, each at or
    /// below `top`). Lists the directories on the way to `top` now; call it
    /// where they can be listed. `Err`: why, in words.
    pub fn new(top: &Path, dirs: Vec<PathBuf>) -> Result<Guard, String> {
        if let Some(d) = dirs
            .iter()
            .find(|d| !d.is_absolute() || !d.starts_with(top))
        {
            return Err(format!(
                "{} is not an absolute path at or below {}",
                d.display(),
                top.display()
            ));
        }
        let path = on_path(&dirs);
        let mut above = Vec::new();
        for a in path.iter().filter(|a| top.starts_with(a) && *a != top) {
            above.extend(beside(a, &path).map_err(|e| format!("{}: {e}", a.display()))?);
        }
        Ok(Guard {
            dirs,
            top: top.to_path_buf(),
            above,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.dirs.is_empty()
    }

    /// Restricts the calling process (and everything it starts) so that no
    /// symlink, FIFO, socket or device can be made beneath any guarded
    /// directory; the directories beside the path from `top` down are
    /// listed now. Nothing to do for none. Call in the command's own
    /// process, just before exec. `Err`: why, in words; the caller must not
    /// run the command then.
    pub fn apply(&self) -> Result<(), String> {
        if self.dirs.is_empty() {
            return Ok(());
        }
        let path = on_path(&self.dirs);
        let mut grant = self.above.clone();
        for a in path
            .iter()
            .filter(|a| a.starts_with(&self.top) && !self.dirs.contains(a))
        {
            grant.extend(beside(a, &path).map_err(|e| format!("{}: {e}", a.display()))?);
        }
        let ruleset = create_ruleset()?;
        let root = open_dir(Path::new("/")).map_err(|e| format!("/: {e}"))?;
        add_rule(&ruleset, &root, REFER).map_err(|e| format!("landlock rule for /: {e}"))?;
        for d in grant {
            // Gone or replaced meanwhile: nothing to grant there.
            let Ok(fd) = open_dir(&d) else { continue };
            add_rule(&ruleset, &fd, HANDLED)
                .map_err(|e| format!("landlock rule for {}: {e}", d.display()))?;
        }
        restrict(&ruleset)
    }
}

fn create_ruleset() -> Result<OwnedFd, String> {
    let attr = RulesetAttr {
        handled_access_fs: HANDLED,
    };
    // SAFETY: a valid attribute struct and its size; the result is checked.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            std::mem::size_of::<RulesetAttr>(),
            0,
        )
    };
    if fd < 0 {
        return Err(format!("landlock: {}", io::Error::last_os_error()));
    }
    // SAFETY: a descriptor just made, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn restrict(ruleset: &OwnedFd) -> Result<(), String> {
    // SAFETY: prctl with integer arguments only.
    let nnp = unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) };
    // SAFETY: as above.
    if nnp != 1 && unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(format!("no_new_privs: {}", io::Error::last_os_error()));
    }
    // SAFETY: a ruleset descriptor and no flags.
    let r = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0) };
    if r < 0 {
        return Err(format!("landlock: {}", io::Error::last_os_error()));
    }
    Ok(())
}

/// The guarded directories as the agent's command line carries them
/// (`--no-links-beneath DIR`, repeated).
pub const ARG: &str = "--no-links-beneath";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_holds_every_ancestor_and_the_directory() {
        let p = on_path(&[PathBuf::from("/w/a/.git"), PathBuf::from("/w/b/sub/.git")]);
        let want: Vec<PathBuf> = [
            "/",
            "/w",
            "/w/a",
            "/w/a/.git",
            "/w/b",
            "/w/b/sub",
            "/w/b/sub/.git",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(p, want);
    }

    #[test]
    fn directories_outside_the_top_are_refused() {
        for bad in ["w/.git", "/elsewhere/.git"] {
            let e = Guard::new(Path::new("/w"), vec![PathBuf::from(bad)]).unwrap_err();
            assert!(e.contains("not an absolute path at or below /w"), "{e}");
        }
        assert_eq!(Guard::default().apply(), Ok(()));
    }

    #[test]
    fn what_lies_above_the_top_is_listed_once() {
        let d = tempfile_dir();
        let top = d.join("ws");
        std::fs::create_dir_all(top.join(".git")).unwrap();
        std::fs::create_dir_all(d.join("beside")).unwrap();
        let g = Guard::new(&top, vec![top.join(".git")]).unwrap();
        assert!(g.above.contains(&d.join("beside")), "{g:?}");
        assert!(!g.above.contains(&top), "{g:?}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    fn tempfile_dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("links-test-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d.canonicalize().unwrap()
    }
}
