//! Step 8: Landlock, with `HardRequirement`, checked `FullyEnforced`.
//!
//! Handled (so denied unless a rule below grants it): every filesystem right
//! of ABI 6, abstract unix sockets and signals outside the sandbox (scopes).
//! Granted:
//!
//! | where | rights |
//! |---|---|
//! | /usr, /bin, /sbin, /lib*, /opt | read, list, execute |
//! | /etc: the sandbox's domain (pid 1) as a whole; each command's own domain entry by entry as /etc is when it starts, without secrets (`etc_scan.rs`: `ETC_DENIED`, `*shadow*`, `*sudoers*`, `*secret*`, `*.key`, host keys, ssl/private, ...) | read (+ list for dirs) |
//! | /proc (the sandbox's own), /sys/devices/system/cpu | read, list (pid 1's own domain: + write, for a command's child to set its loginuid before it takes its own domain; init.rs) |
//! | /dev | list |
//! | /dev/{null,zero,full,random,urandom,tty} | read, write, ioctl (null, zero and full have none, random's that change the pool need CAP_SYS_ADMIN: `isatty()` on /dev/null is no refusal to report) |
//! | /dev/pts | read, write, list, ioctl |
//! | the workspace, /tmp, /dev/shm, the private home (its toolchains read-only mounts) | everything except making char/block devices |
//! //!
//! TCP bind and connect are not handled: the sandbox's own network
//! namespace is the wall (docs/THREAT_MODEL.md "Network"). Its only device
//! is `lo`, on which the session's own servers and the supervisor's
//! listeners (forwarded egress, the network wall's proxies) are all there
//! is; the host's loopback and other sessions' are in other namespaces, out
//! of reach. With `[network]`, every connect to another address is captured
//! by the rules the supervisor loaded there (`crate::wall`).
//!
//! Landlock does not cover chmod/chown/utime/setxattr, UDP, or connect() to
//! pathname sockets below ABI 9; the mount namespace (what is not mounted is
//! not there, what is mounted is read-only) and the network namespace do.
//!
//! A root-owned session runs as uid 0 without capabilities: file permissions
//! do not stop it reading /etc/shadow (root owns it); only a command's own
//! domain does (`per_call.rs`). Every command takes one (init.rs), and a
//! Landlock domain only ever narrows what its process and children may do,
//! so what the sandbox's domain grants beyond it, /etc as a whole and
//! writing beneath /proc, serves pid 1 and each command's child before it
//! execs, never the command.

use std::fs;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use landlock::{
    ABI, Access, AccessFs, BitFlags, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope,
};

use super::SetupError;

/// The Landlock ABI whose features we use (scopes need 6). The kernel may be newer.
pub(crate) const TARGET_ABI: ABI = ABI::V6;
pub(crate) const MIN_ABI: i64 = 6;

fn ro_exec() -> BitFlags<AccessFs> {
    AccessFs::ReadFile | AccessFs::ReadDir | AccessFs::Execute
}
fn ro_dir() -> BitFlags<AccessFs> {
    AccessFs::ReadFile | AccessFs::ReadDir
}
fn ro_file() -> BitFlags<AccessFs> {
    AccessFs::ReadFile.into()
}
fn dev_rw() -> BitFlags<AccessFs> {
    AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate
}
fn rw_all() -> BitFlags<AccessFs> {
    AccessFs::from_all(TARGET_ABI) & !(AccessFs::MakeChar | AccessFs::MakeBlock)
}

fn err(what: impl std::fmt::Display, e: impl std::fmt::Display) -> SetupError {
    SetupError {
        step: "landlock",
        detail: format!("{what}: {e}"),
    }
}

/// Rules being added to one ruleset.
pub(crate) struct Builder {
    ruleset: Option<RulesetCreated>,
}

impl Builder {
    /// A ruleset handling every right of [`TARGET_ABI`]; `scoped`: and its
    /// scopes (the sandbox's domain; a command's own has none, so commands
    /// may signal and connect to each other as before).
    pub(crate) fn new(scoped: bool) -> Result<Builder, SetupError> {
        Ok(Builder {
            ruleset: Some(new_ruleset(scoped)?),
        })
    }

    /// The ruleset, every rule added.
    pub(crate) fn finish(mut self) -> Result<RulesetCreated, SetupError> {
        self.ruleset
            .take()
            .ok_or_else(|| err("ruleset", "lost after an earlier error"))
    }

    /// An /etc entry as readdir saw it: a plain file or directory is opened
    /// as is (O_NOFOLLOW, no lookup beyond /etc). A symlink gets no rule:
    /// Landlock checks the file it resolves to, and that is an /etc entry
    /// with a rule of its own or withheld, or lies in a directory these
    /// rules grant anyway, or is not in the sandbox. Following it would
    /// also race: the rules are built again while commands run
    /// (`per_call.rs`), and one could swap what a link leads through.
    pub(crate) fn grant_entry(
        &mut self,
        path: &Path,
        ft: Option<fs::FileType>,
        dir_access: BitFlags<AccessFs>,
        file_access: BitFlags<AccessFs>,
    ) -> Result<bool, SetupError> {
        if ft.is_none_or(|t| t.is_symlink()) {
            return Ok(false);
        }
        use nix::fcntl::OFlag;
        // open (openat), not openat2: pid 1's own seccomp filter answers
        // that ENOSYS, and it builds these rules again for every command
        // that starts after /etc changed.
        let Ok(fd) = nix::fcntl::open(
            path,
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        ) else {
            return Ok(false);
        };
        let st = nix::sys::stat::fstat(fd.as_fd()).map_err(|e| err(path.display(), e))?;
        let access = match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => dir_access,
            // Swapped for a symlink since readdir: no rule, as above.
            libc::S_IFLNK => return Ok(false),
            _ => file_access,
        };
        self.add(path, fd.as_fd(), access)?;
        Ok(true)
    }

    fn add(
        &mut self,
        path: &Path,
        fd: BorrowedFd<'_>,
        access: BitFlags<AccessFs>,
    ) -> Result<(), SetupError> {
        let ruleset = self
            .ruleset
            .take()
            .ok_or_else(|| err("ruleset", "lost after an earlier error"))?;
        self.ruleset = Some(
            ruleset
                .add_rule(PathBeneath::new(fd, access))
                .map_err(|e| err(format!("rule for {}", path.display()), e))?,
        );
        Ok(())
    }

    /// Adds a rule for `path` (following symlinks). Missing paths are skipped.
    pub(crate) fn grant(
        &mut self,
        path: &Path,
        dir_access: BitFlags<AccessFs>,
        file_access: BitFlags<AccessFs>,
    ) -> Result<bool, SetupError> {
        let fd = match PathFd::new(path) {
            Ok(fd) => fd,
            Err(_) => return Ok(false),
        };
        let st = nix::sys::stat::fstat(fd.as_fd()).map_err(|e| err(path.display(), e))?;
        let access = if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            dir_access
        } else {
            file_access
        };
        self.add(path, fd.as_fd(), access)?;
        Ok(true)
    }
}

/// The sandbox's own domain, pid 1's (call after pivot_root): /etc as a
/// whole, so pid 1 may list it again for a command's own rules
/// (`per_call.rs`), which narrow it entry by entry; the system
/// directories, /proc and /dev ([`grant_system`]); the writable places
/// ([`grant_writable`]). `attribute`: writing beneath /proc too, for a
/// command's child to set its loginuid before it takes its own domain
/// (init.rs); the command and everything it starts may not.
pub(crate) fn sandbox_ruleset(
    workspace: &Path,
    home: Option<&Path>,
    attribute: bool,
) -> Result<RulesetCreated, SetupError> {
    let mut b = Builder::new(true)?;
    if !b.grant(Path::new("/etc"), ro_dir(), ro_file())? {
        return Err(err("/etc", "missing in the sandbox view"));
    }
    grant_system(&mut b)?;
    if attribute {
        b.grant(
            Path::new("/proc"),
            AccessFs::WriteFile.into(),
            BitFlags::EMPTY,
        )?;
    }
    grant_writable(&mut b, workspace, home)?;
    b.finish()
}

/// The workspace, /tmp, /dev/shm and the private home: everything but
/// making devices. The home's toolchains are read-only mounts, its masked
/// credential paths mode-000 files no rule reaches.
pub(crate) fn grant_writable(
    b: &mut Builder,
    workspace: &Path,
    home: Option<&Path>,
) -> Result<(), SetupError> {
    let writable = [Path::new("/tmp"), Path::new("/dev/shm"), workspace];
    for p in writable.into_iter().chain(home) {
        if !b.grant(p, rw_all(), rw_all() & AccessFs::from_file(TARGET_ABI))? {
            return Err(err(p.display(), "missing in the sandbox view"));
        }
    }
    Ok(())
}

/// The file rights of an /etc entry in a command's own domain.
pub(crate) fn etc_rights() -> (BitFlags<AccessFs>, BitFlags<AccessFs>) {
    (ro_dir(), ro_file())
}

/// A ruleset handling every right of [`TARGET_ABI`]; `scoped`: and its scopes.
fn new_ruleset(scoped: bool) -> Result<RulesetCreated, SetupError> {
    let r = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(TARGET_ABI));
    let r = if scoped {
        r.and_then(|r| r.scope(Scope::from_all(TARGET_ABI)))
    } else {
        r
    };
    r.and_then(|r| r.create())
        .map_err(|e| err("create ruleset", e))
}

/// The restrict_self flags of a command's own domain: its denials are
/// logged after it execs (and before, as by default); needs ABI 7.
pub(crate) const PER_CALL_LOG_FLAGS: u32 = 1 << 1; // LANDLOCK_RESTRICT_SELF_LOG_NEW_EXEC_ON

/// Gives the calling process a domain of its own from `ruleset` (a
/// command's rules), with `flags` ([`PER_CALL_LOG_FLAGS`] to log, or 0).
/// Call after fork, before exec; no_new_privs is already set.
pub(crate) fn restrict_per_call(ruleset: BorrowedFd<'_>, flags: u32) -> Result<(), std::io::Error> {
    use std::os::fd::AsRawFd;
    // SAFETY: landlock_restrict_self takes an fd and flags; no memory.
    let rc = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), flags) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The system directories (read and execute), /proc and the CPU counts
/// (read), and /dev: its listing, the device nodes and a private devpts.
pub(crate) fn grant_system(b: &mut Builder) -> Result<(), SetupError> {
    for name in super::mounts::SYSTEM_DIRS {
        if *name != "etc" {
            b.grant(
                &Path::new("/").join(name),
                ro_exec(),
                ro_exec() & !AccessFs::ReadDir,
            )?;
        }
    }
    b.grant(Path::new("/proc"), ro_dir(), ro_file())?;
    b.grant(Path::new("/sys/devices/system/cpu"), ro_dir(), ro_file())?;
    b.grant(Path::new("/dev"), AccessFs::ReadDir.into(), BitFlags::EMPTY)?;
    for node in super::mounts::DEV_NODES {
        let file = dev_rw() | AccessFs::IoctlDev;
        b.grant(&Path::new("/dev").join(node), file, file)?;
    }
    b.grant(
        Path::new("/dev/pts"),
        dev_rw() | AccessFs::ReadDir | AccessFs::IoctlDev,
        dev_rw() | AccessFs::IoctlDev,
    )?;
    Ok(())
}

/// Restricts the calling thread (and every later child) for good.
pub(crate) fn enforce(ruleset: RulesetCreated) -> Result<(), SetupError> {
    let status = ruleset
        .restrict_self()
        .map_err(|e| err("restrict_self", e))?;
    if status.ruleset != RulesetStatus::FullyEnforced {
        return Err(err(
            "ruleset",
            format!(
                "not fully enforced ({:?}); refusing to run a weaker sandbox",
                status.ruleset
            ),
        ));
    }
    if !status.no_new_privs {
        return Err(err("no_new_privs", "not set"));
    }
    Ok(())
}
