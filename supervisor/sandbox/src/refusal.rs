//! What a wall of the sandbox refused a command: the access, the path as
//! the sandbox sees it, the process, and tollgate's rule that made it
//! (docs/THREAT_MODEL.md, "Refusals, attributed"). A backend that can
//! attribute refusals fills [`Refusals`] in a command's
//! [`crate::ExecOutcome`]; the gate turns them into the `sandbox: ` lines
//! of the tool result and into `sandbox_denial` audit records.
//!
//! Bounded whatever the count: at most [`MAX_DISTINCT`] distinct refusals
//! are kept per command, each with its count; the rest are only counted.

use std::path::Path;

/// Distinct (access, path, rule) refusals kept per command.
pub const MAX_DISTINCT: usize = 64;
/// Longest path kept, in bytes (a longer one is cut, and says so).
pub const MAX_PATH: usize = 4096;

/// What was asked of the file system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Access {
    Read,
    Write,
    Create,
    Remove,
    Rename,
    Exec,
    Link,
    Truncate,
    Ioctl,
    /// Making a device node (char or block).
    Device,
    /// A system call the seccomp filter refuses; the refusal's `path` is
    /// the call's name (seccomp_table.rs).
    Syscall,
}

impl Access {
    pub fn as_str(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
            Access::Create => "create",
            Access::Remove => "remove",
            Access::Rename => "rename",
            Access::Exec => "exec",
            Access::Link => "link",
            Access::Truncate => "truncate",
            Access::Ioctl => "ioctl",
            Access::Device => "create device",
            Access::Syscall => "system call",
        }
    }

    /// One Landlock blocker (`fs.write_file`, ...), as the kernel's audit
    /// record names it (docs.kernel.org, admin-guide/LSM/landlock). `None`
    /// for what is not a file-system right (net.*, scope.*).
    pub fn from_landlock(blocker: &str) -> Option<Access> {
        Some(match blocker.strip_prefix("fs.")? {
            "execute" => Access::Exec,
            "write_file" => Access::Write,
            "read_file" | "read_dir" => Access::Read,
            "remove_dir" | "remove_file" => Access::Remove,
            "make_char" | "make_block" => Access::Device,
            "make_dir" | "make_reg" | "make_sock" | "make_fifo" | "make_sym" => Access::Create,
            "refer" => Access::Rename,
            "truncate" => Access::Truncate,
            "ioctl_dev" => Access::Ioctl,
            _ => return None,
        })
    }
}

/// tollgate's rule that refused it, in words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    /// A credential or secret the sandbox withholds (/etc/shadow, host keys, ...).
    Credential,
    /// Outside every directory the sandbox grants this access to.
    OutsideWorkspace,
    /// The system directories are read-only (and execute only where granted).
    ReadOnlyRoot,
    /// Device nodes: only the few the sandbox lists, no new ones, no ioctl.
    Devices,
    /// Moving or linking a file across directories Landlock keeps apart.
    Reparent,
    /// The seccomp filter refuses this system call (its x86_64 number), or
    /// these arguments of it (seccomp_table.rs, native/seccomp.rs).
    Syscall(u32),
    /// A system call of another architecture (i386 `int 0x80`, x32): the
    /// filter kills the process.
    ForeignArch,
}

impl Rule {
    /// Why, then what would allow it (`; ...`), for the `sandbox: ` line.
    pub fn words(self) -> std::borrow::Cow<'static, str> {
        let fixed = match self {
            Rule::Credential => "a credential path (withheld from the sandbox)",
            Rule::OutsideWorkspace => "outside the workspace; work inside the workspace or /tmp",
            Rule::ReadOnlyRoot => "the sandbox root is read-only; write inside the workspace",
            Rule::Devices => "device nodes are fixed in the sandbox",
            Rule::Reparent => {
                "moving files between these directories is not allowed; copy the file instead"
            }
            Rule::Syscall(nr) => return crate::native::syscall_refused(nr).1.into(),
            Rule::ForeignArch => {
                "only x86_64 system calls run in the sandbox; the process was killed"
            }
        };
        fixed.into()
    }

    /// The argument of a system call that decided its refusal (`flags`,
    /// `mode`, ...), when one did (`sandbox_denial.argument`).
    pub fn argument(self) -> Option<&'static str> {
        match self {
            Rule::Syscall(nr) => crate::native::syscall_argument(nr),
            _ => None,
        }
    }

    /// A short stable name for audit records (`sandbox_denial.rule`).
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::Credential => "credential",
            Rule::OutsideWorkspace => "outside_workspace",
            Rule::ReadOnlyRoot => "read_only_root",
            Rule::Devices => "devices",
            Rule::Reparent => "reparent",
            Rule::Syscall(_) => "syscall",
            Rule::ForeignArch => "foreign_arch",
        }
    }
}

/// One refusal, as read from the kernel.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Refusal {
    pub access: Access,
    /// Raw bytes as the kernel logged them (may be any bytes: escape them
    /// before showing them).
    pub path: Vec<u8>,
    pub rule: Rule,
    /// Host pid of the refused process, when the kernel said it.
    pub pid: Option<u32>,
    /// Its argv[0] (or comm), raw bytes.
    pub program: Option<Vec<u8>>,
}

/// A command's refusals: distinct ones with their counts (bounded), and
/// the totals.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Refusals {
    /// In the order first seen, each with how many times it happened.
    pub distinct: Vec<(Refusal, u64)>,
    /// Every refusal attributed to the command, kept or not.
    pub total: u64,
    /// Refusal records the kernel dropped while the command ran (its audit
    /// backlog overflowed, or the supervisor's socket did): the counts may
    /// be low.
    pub lost: u64,
    /// False when the backend cannot attribute refusals at all (then an
    /// empty list says nothing).
    pub attributed: bool,
}

impl Refusals {
    /// Adds one; a refusal equal to a kept one (ignoring pid and program)
    /// only counts.
    pub fn add(&mut self, r: Refusal) {
        self.add_times(r, 1);
    }

    /// Adds one that happened `times` times.
    pub fn add_times(&mut self, r: Refusal, times: u64) {
        self.total += times;
        if let Some((_, n)) = self
            .distinct
            .iter_mut()
            .find(|(k, _)| k.access == r.access && k.path == r.path && k.rule == r.rule)
        {
            *n += times;
        } else if self.distinct.len() < MAX_DISTINCT {
            let mut r = r;
            r.path.truncate(MAX_PATH);
            self.distinct.push((r, times));
        }
    }

    /// Adds all of `other`'s (another stream's of the same command).
    pub fn merge(&mut self, other: &Refusals) {
        for (r, n) in &other.distinct {
            self.add_times(r.clone(), *n);
        }
        self.total += other.not_kept();
        self.lost += other.lost;
        self.attributed |= other.attributed;
    }

    /// Refusals counted but not kept one by one.
    pub fn not_kept(&self) -> u64 {
        self.total - self.distinct.iter().map(|(_, n)| n).sum::<u64>()
    }
}

/// The rule behind a Landlock refusal of `access` on `path` (the sandbox's
/// view), given what the sandbox grants (native/landlock.rs): the system
/// directories read and execute, /etc entry by entry without secrets,
/// /dev's listed nodes, everything in the workspace, /tmp and /dev/shm.
pub fn landlock_rule(access: Access, path: &[u8], workspace: &Path) -> Rule {
    use std::os::unix::ffi::OsStrExt;
    let p = Path::new(std::ffi::OsStr::from_bytes(path));
    let under = |d: &str| p.starts_with(d);
    match access {
        Access::Device | Access::Ioctl => Rule::Devices,
        Access::Rename | Access::Link => Rule::Reparent,
        Access::Read if under("/etc") || under("/root") || under("/home") => Rule::Credential,
        _ if under("/dev") => Rule::Devices,
        Access::Read | Access::Exec => Rule::OutsideWorkspace,
        _ if p.starts_with(workspace) || under("/tmp") => Rule::OutsideWorkspace,
        _ if crate::native::SYSTEM_DIRS
            .iter()
            .any(|d| p.starts_with(Path::new("/").join(d))) =>
        {
            Rule::ReadOnlyRoot
        }
        _ => Rule::OutsideWorkspace,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(access: Access, path: &str) -> Refusal {
        Refusal {
            access,
            path: path.as_bytes().to_vec(),
            rule: Rule::OutsideWorkspace,
            pid: None,
            program: None,
        }
    }

    #[test]
    fn equal_refusals_count_and_the_kept_list_is_bounded() {
        let mut rs = Refusals::default();
        for _ in 0..3 {
            rs.add(r(Access::Read, "/etc/shadow"));
        }
        for i in 0..1000 {
            rs.add(r(Access::Write, &format!("/x{i}")));
        }
        assert_eq!(rs.total, 1003);
        assert_eq!(rs.distinct.len(), MAX_DISTINCT);
        assert_eq!(rs.distinct[0].1, 3);
        assert_eq!(rs.not_kept(), 1003 - 3 - (MAX_DISTINCT as u64 - 1));
    }

    #[test]
    fn merged_lists_keep_their_counts() {
        let mut a = Refusals::default();
        a.add(r(Access::Write, "/usr/a"));
        let mut b = Refusals::default();
        for i in 0..100 {
            b.add(r(
                Access::Write,
                &format!("/usr/{}", if i < 3 { "a" } else { "b" }),
            ));
        }
        for i in 0..MAX_DISTINCT + 5 {
            b.add(r(Access::Read, &format!("/r{i}")));
        }
        a.merge(&b);
        assert_eq!(a.total, 1 + 100 + MAX_DISTINCT as u64 + 5);
        assert_eq!(a.distinct[0].1, 4);
        assert_eq!(a.distinct[1].1, 97);
        assert_eq!(a.distinct.len(), MAX_DISTINCT);
        assert_eq!(
            a.not_kept(),
            a.total - a.distinct.iter().map(|(_, n)| n).sum::<u64>()
        );
    }

    #[test]
    fn long_paths_are_cut() {
        let mut rs = Refusals::default();
        rs.add(r(Access::Read, &"a".repeat(10_000)));
        assert_eq!(rs.distinct[0].0.path.len(), MAX_PATH);
    }

    #[test]
    fn blockers_map_to_accesses() {
        assert_eq!(Access::from_landlock("fs.read_file"), Some(Access::Read));
        assert_eq!(Access::from_landlock("fs.make_reg"), Some(Access::Create));
        assert_eq!(Access::from_landlock("fs.refer"), Some(Access::Rename));
        assert_eq!(Access::from_landlock("fs.ioctl_dev"), Some(Access::Ioctl));
        assert_eq!(Access::from_landlock("net.connect_tcp"), None);
        assert_eq!(Access::from_landlock("fs.unknown"), None);
    }

    #[test]
    fn rules_in_words() {
        let ws = Path::new("/work/ws");
        let rule = |a, p: &str| landlock_rule(a, p.as_bytes(), ws);
        assert_eq!(rule(Access::Read, "/etc/shadow"), Rule::Credential);
        assert_eq!(rule(Access::Read, "/etc/ssl/private/k"), Rule::Credential);
        assert_eq!(rule(Access::Write, "/usr/bin/ls"), Rule::ReadOnlyRoot);
        assert_eq!(rule(Access::Ioctl, "/dev/sda"), Rule::Devices);
        assert_eq!(rule(Access::Device, "/work/ws/x"), Rule::Devices);
        assert_eq!(rule(Access::Read, "/sys/kernel/x"), Rule::OutsideWorkspace);
    }
}
