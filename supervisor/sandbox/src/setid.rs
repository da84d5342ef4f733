//! The one list of system calls that can put a set-user-ID or set-group-ID
//! bit on a file, and where each one keeps the mode.
//!
//! A session's files land in the workspace on the host. A uid-0 session's
//! commands write as uid 0, so a setuid-root binary left there gives root to
//! any local user who runs it; any other session's setuid binary runs as that
//! owner for whoever runs it. Both backends therefore refuse, with `EPERM`,
//! every call below whose mode holds `S_ISUID` or `S_ISGID`:
//!
//! - the native filter builds its argument checks from [`MODE_SYSCALLS`]
//!   (`native::seccomp::conditional_rules`);
//! - the Docker backend refuses a seccomp profile that lets any of them set
//!   those bits (`docker::seccomp::validate`), and a unit test holds the
//!   shipped profile (written by `sandbox-image/gen-seccomp.py`) to exactly
//!   the rules this list implies.
//!
//! Calls whose mode sits behind a pointer seccomp cannot read
//! ([`MODE_BEHIND_POINTER`]: `openat2`) answer `ENOSYS` in both, so libc
//! falls back to `openat`, which is checked. `io_uring` (whose `OPENAT`
//! operation carries a mode) is refused whole by both.
//!
//! Outside seccomp's reach, and left to the kernel: `chown` of a file clears
//! its set-id bits, a write by a process without `CAP_FSETID` clears them,
//! and file capabilities (`security.capability`) need `CAP_SETFCAP`, which
//! no sandboxed process has.

/// Set-user-ID and set-group-ID.
pub(crate) const S_ISUID_ISGID: u64 = 0o6000;
/// `O_CREAT`: open(2)'s mode matters only with it, or with `O_TMPFILE`.
pub(crate) const O_CREAT: u64 = 0o100;
/// The `__O_TMPFILE` bit (`O_TMPFILE` is it plus `O_DIRECTORY`).
pub(crate) const O_TMPFILE_BIT: u64 = 0o20000000;
/// The file type bits of a mknod(2) mode.
pub(crate) const S_IFMT: u64 = 0o170000;
/// mknod(2) types allowed: regular files (also spelled 0), FIFOs, sockets.
/// Never a device node.
pub(crate) const MKNOD_TYPES: &[u64] = &[0, 0o100000, 0o010000, 0o140000];

/// How a call uses its mode argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ModeUse {
    /// Always applied: the chmod family, `creat`, and `mkdir`, whose set-id
    /// bits today's kernels drop (refused anyway, so no filesystem or later
    /// kernel can honour them).
    Always,
    /// Applied only when the flags argument creates (`O_CREAT`, `O_TMPFILE`).
    WhenCreating { flags_arg: u8 },
    /// A node's type and mode: also never a device.
    Node,
}

/// One call that carries a file mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ModeSyscall {
    pub name: &'static str,
    /// The x86_64 number (the native filter matches numbers; Docker names).
    pub nr: u32,
    /// Which argument (0-based) is the mode.
    pub mode_arg: u8,
    pub used: ModeUse,
}

const fn call(name: &'static str, nr: u32, mode_arg: u8, used: ModeUse) -> ModeSyscall {
    ModeSyscall {
        name,
        nr,
        mode_arg,
        used,
    }
}

/// Every system call that can create a file or change its mode with a mode
/// argument seccomp can read.
pub(crate) const MODE_SYSCALLS: &[ModeSyscall] = &[
    call("open", 2, 2, ModeUse::WhenCreating { flags_arg: 1 }),
    call("mkdir", 83, 1, ModeUse::Always),
    call("creat", 85, 1, ModeUse::Always),
    call("chmod", 90, 1, ModeUse::Always),
    call("fchmod", 91, 1, ModeUse::Always),
    call("mknod", 133, 1, ModeUse::Node),
    call("openat", 257, 3, ModeUse::WhenCreating { flags_arg: 2 }),
    call("mkdirat", 258, 2, ModeUse::Always),
    call("mknodat", 259, 2, ModeUse::Node),
    call("fchmodat", 268, 2, ModeUse::Always),
    call("fchmodat2", 452, 2, ModeUse::Always),
];

/// Calls that take a mode behind a pointer: `ENOSYS` in both backends.
pub(crate) const MODE_BEHIND_POINTER: &[(&str, u32)] = &[("openat2", 437)];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mode_argument_exists_and_names_are_unique() {
        let mut names: Vec<&str> = MODE_SYSCALLS.iter().map(|c| c.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), MODE_SYSCALLS.len());
        for c in MODE_SYSCALLS {
            assert!(c.mode_arg < 6, "{}", c.name);
            if let ModeUse::WhenCreating { flags_arg } = c.used {
                assert!(flags_arg < c.mode_arg, "{}", c.name);
            }
        }
    }
}
