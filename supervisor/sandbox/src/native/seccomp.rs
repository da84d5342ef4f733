//! Step 9 (last): the seccomp filter.
//!
//! One BPF program, generated here (not by seccompiler, whose linear layout
//! makes a syscall late in the table, `openat` for one, walk a few hundred
//! comparisons on every call), built before the fork and installed by pid 1
//! as its very last restriction, inherited by every command:
//!
//! 1. the architecture first: anything but x86_64 (an i386 `int 0x80`,
//!    which works from a 64-bit process on this kernel) kills the process,
//!    and so does the x32 bit;
//! 2. `clone3` and `openat2` return `ENOSYS`: their flags and mode sit behind
//!    pointers seccomp cannot read; libc then falls back to `clone` and
//!    `openat`, which are inspected;
//! 3. a binary search over the allowlist: every syscall in [`ALLOWED`]
//!    passes, those in [`CONDITIONAL`] and the mode-carrying calls of
//!    [`crate::setid`] only with vetted arguments ([`conditional_rules`]); everything else, including any syscall a
//!    future kernel adds, fails with `EPERM`. [`DENIED`] documents what is
//!    left out on purpose and why.
//!
//! Among the argument checks: no namespace flags for `clone`, only
//! AF_UNIX/AF_INET/AF_INET6 (and NETLINK_ROUTE) sockets, no TIOCSTI-class
//! ioctls (low 32 bits compared, as the kernel reads them), no device nodes,
//! and no set-user-ID or set-group-ID bit on any file the sandbox creates or
//! chmods (every call of [`crate::setid::MODE_SYSCALLS`]): a uid-0 session
//! could otherwise leave a setuid-root binary in the workspace. Every argument comparison is on the low 32 bits, which is all
//! the kernel reads for these arguments.
//!
//! Only x86_64 is supported; elsewhere the probe reports seccomp as missing
//! and sandboxes are refused.

use seccompiler::{BpfProgram, sock_filter};

use crate::setid::{
    MKNOD_TYPES, MODE_SYSCALLS, ModeSyscall, ModeUse, O_CREAT, O_TMPFILE_BIT, S_IFMT, S_ISUID_ISGID,
};

pub(crate) use crate::seccomp_table::{ALLOWED, CONDITIONAL, DENIED};

/// Every argument-checked syscall: [`CONDITIONAL`] and [`MODE_SYSCALLS`].
pub(crate) fn conditional_syscalls() -> Vec<(&'static str, i64)> {
    let mut v: Vec<(&'static str, i64)> = CONDITIONAL.to_vec();
    v.extend(MODE_SYSCALLS.iter().map(|c| (c.name, i64::from(c.nr))));
    v.sort_by_key(|(_, nr)| *nr);
    v
}

const AF_UNIX: u64 = 1;
const AF_INET: u64 = 2;
const AF_INET6: u64 = 10;
const AF_NETLINK: u64 = 16;
/// The only netlink protocol allowed, by both backends (docs/THREAT_MODEL.md,
/// run_bash; `sandbox-image/gen-seccomp.py` writes the same rule): NETLINK_ROUTE (0). In the sandbox's
/// own network namespace it lists `lo` and, without CAP_NET_ADMIN, changes
/// nothing; glibc needs it (getaddrinfo's AI_ADDRCONFIG, if_nameindex).
const NETLINK_ROUTE: u64 = 0;
/// Namespace flags in clone(2)'s flags (the low 32 bits are what the kernel reads).
pub(crate) const CLONE_NS_FLAGS: u64 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET) as u64;
/// ioctl requests refused; compared on the low 32 bits only, as the kernel
/// does (`TIOCSTI | 1 << 32` got past filters that compared 64 bits).
pub(crate) const DENIED_IOCTLS: &[(&str, u64)] = &[
    ("TIOCSTI", 0x5412),
    ("TIOCLINUX", 0x541C),
    ("TIOCCONS", 0x541D),
    ("TIOCSETD", 0x5423),
];
/// personality(2) values allowed (Docker's set): PER_LINUX, UNAME26 and the query.
const PERSONALITIES: &[u64] = &[0x0, 0x8, 0x20000, 0x20008, 0xffff_ffff];
/// One comparison on the low 32 bits of a syscall argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cmp {
    /// `arg == value`
    Eq(u32),
    /// `arg != value`
    Ne(u32),
    /// `arg & mask == value`
    Masked { mask: u32, value: u32 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cond {
    pub arg: u8,
    pub cmp: Cmp,
}

/// Passes when every condition holds.
pub(crate) type Rule = Vec<Cond>;

fn lo(v: u64) -> u32 {
    (v & 0xffff_ffff) as u32
}

fn any_of(arg: u8, values: &[u64], mask: Option<u64>) -> Vec<Rule> {
    values
        .iter()
        .map(|v| {
            let cmp = match mask {
                Some(m) => Cmp::Masked {
                    mask: lo(m),
                    value: lo(*v),
                },
                None => Cmp::Eq(lo(*v)),
            };
            vec![Cond { arg, cmp }]
        })
        .collect()
}

fn no_setid(mode_arg: u8) -> Rule {
    vec![Cond {
        arg: mode_arg,
        cmp: Cmp::Masked {
            mask: lo(S_ISUID_ISGID),
            value: 0,
        },
    }]
}

/// Allowed when not creating, or creating without set-id bits.
fn creating_without_setid(flags_arg: u8, mode_arg: u8) -> Vec<Rule> {
    vec![
        vec![Cond {
            arg: flags_arg,
            cmp: Cmp::Masked {
                mask: lo(O_CREAT | O_TMPFILE_BIT),
                value: 0,
            },
        }],
        no_setid(mode_arg),
    ]
}

/// The argument-checked syscalls: allowed when any rule passes.
pub(crate) fn conditional_rules() -> Vec<(u32, Vec<Rule>)> {
    let ioctl: Rule = DENIED_IOCTLS
        .iter()
        .map(|(_, req)| Cond {
            arg: 1,
            cmp: Cmp::Ne(lo(*req)),
        })
        .collect();
    let mut socket = any_of(0, &[AF_UNIX, AF_INET, AF_INET6], None);
    socket.push(vec![
        Cond {
            arg: 0,
            cmp: Cmp::Eq(lo(AF_NETLINK)),
        },
        Cond {
            arg: 2,
            cmp: Cmp::Eq(lo(NETLINK_ROUTE)),
        },
    ]);
    let mut rules = vec![
        (16, vec![ioctl]),
        (41, socket),
        (53, any_of(0, &[AF_UNIX], None)),
        (
            56,
            vec![vec![Cond {
                arg: 0,
                cmp: Cmp::Masked {
                    mask: lo(CLONE_NS_FLAGS),
                    value: 0,
                },
            }]],
        ),
        (135, any_of(0, PERSONALITIES, None)),
    ];
    rules.extend(MODE_SYSCALLS.iter().map(|c| (c.nr, mode_rules(c))));
    rules
}

/// No set-user/group-ID bit in the mode: for a mknod, also a regular file,
/// FIFO or socket (never a device); for an open, only when it creates.
fn mode_rules(c: &ModeSyscall) -> Vec<Rule> {
    match c.used {
        ModeUse::Always => vec![no_setid(c.mode_arg)],
        ModeUse::WhenCreating { flags_arg } => creating_without_setid(flags_arg, c.mode_arg),
        ModeUse::Node => any_of(c.mode_arg, MKNOD_TYPES, Some(S_IFMT | S_ISUID_ISGID)),
    }
}

/// The compiled filter, whole ([`Filters::program`]), and split in two
/// for logging ([`Filters::logged`]): with `SECCOMP_FILTER_FLAG_LOG` every
/// `EPERM` of the filter is an audit record (docs/THREAT_MODEL.md,
/// "Refusals, attributed"), and the `ENOSYS` of `clone3`/`openat2`, which
/// libc meets on every spawn, must not be: a first, unlogged filter answers
/// those, the logged one allows them (the kernel takes the most severe
/// answer of all filters, and logs only the filter that gave it).
pub(crate) struct Filters {
    pub program: BpfProgram,
    pub logged: (BpfProgram, BpfProgram),
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum SeccompError {
    #[error("seccomp filters are only built for x86_64, not {0}")]
    UnsupportedArch(&'static str),
    #[error("building the seccomp filter: {0}")]
    Build(String),
    #[error("installing the seccomp filter: {0}")]
    Apply(#[from] seccompiler::Error),
}

const BPF_LD_W_ABS: u16 = 0x20;
const BPF_ALU_AND_K: u16 = 0x54;
const BPF_JMP_JA: u16 = 0x05;
const BPF_JMP_JEQ_K: u16 = 0x15;
const BPF_JMP_JGE_K: u16 = 0x35;
const BPF_RET_K: u16 = 0x06;
const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;
const SECCOMP_DATA_NR: u32 = 0;
const SECCOMP_DATA_ARCH: u32 = 4;
const SYS_CLONE3: u32 = 435;
const SYS_OPENAT2: u32 = 437;
const BPF_MAX_LEN: usize = 4096;
const RET_ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
const RET_EPERM: u32 = libc::SECCOMP_RET_ERRNO | (libc::EPERM as u32 & libc::SECCOMP_RET_DATA);
const RET_ENOSYS: u32 = libc::SECCOMP_RET_ERRNO | (libc::ENOSYS as u32 & libc::SECCOMP_RET_DATA);
const RET_KILL: u32 = libc::SECCOMP_RET_KILL_PROCESS;

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

fn off(n: usize) -> Result<u8, SeccompError> {
    u8::try_from(n).map_err(|_| SeccompError::Build(format!("jump of {n} does not fit")))
}

/// `offsetof(struct seccomp_data, args[arg])`, low half (little-endian).
fn arg_offset(arg: u8) -> u32 {
    16 + 8 * u32::from(arg)
}

/// One syscall's code once its number matched: allow, or try each rule and
/// allow on the first that passes, else EPERM. Always ends in a return.
fn leaf(rules: Option<&[Rule]>) -> Result<Vec<sock_filter>, SeccompError> {
    let Some(rules) = rules else {
        return Ok(vec![stmt(BPF_RET_K, RET_ALLOW)]);
    };
    let mut out = Vec::new();
    for rule in rules {
        // Each condition: load, maybe mask, compare (3 instructions at most).
        let mut block: Vec<(sock_filter, Option<bool>)> = Vec::new();
        for c in rule {
            block.push((stmt(BPF_LD_W_ABS, arg_offset(c.arg)), None));
            let (k, pass_on_eq) = match c.cmp {
                Cmp::Eq(v) => (v, true),
                Cmp::Ne(v) => (v, false),
                Cmp::Masked { mask, value } => {
                    block.push((stmt(BPF_ALU_AND_K, mask), None));
                    (value, true)
                }
            };
            block.push((jump(BPF_JMP_JEQ_K, k, 0, 0), Some(pass_on_eq)));
        }
        let len = block.len();
        for (i, (mut insn, cmp)) in block.into_iter().enumerate() {
            if let Some(pass_on_eq) = cmp {
                // Failing jumps past this rule's final RET ALLOW.
                let fail = off(len - i)?;
                if pass_on_eq {
                    insn.jf = fail;
                } else {
                    insn.jt = fail;
                }
            }
            out.push(insn);
        }
        out.push(stmt(BPF_RET_K, RET_ALLOW));
    }
    out.push(stmt(BPF_RET_K, RET_EPERM));
    Ok(out)
}

/// Binary search over `entries` (sorted by number; the accumulator holds
/// the syscall number). Every path ends in a return.
fn tree(entries: &[(u32, Option<&[Rule]>)]) -> Result<Vec<sock_filter>, SeccompError> {
    if entries.len() <= 3 {
        let mut out = Vec::new();
        for (nr, rules) in entries {
            let body = leaf(*rules)?;
            out.push(jump(BPF_JMP_JEQ_K, *nr, 0, off(body.len())?));
            out.extend(body);
        }
        out.push(stmt(BPF_RET_K, RET_EPERM));
        return Ok(out);
    }
    let mid = entries.len() / 2;
    let left = tree(&entries[..mid])?;
    let right = tree(&entries[mid..])?;
    let skip_left = u32::try_from(left.len()).map_err(|e| SeccompError::Build(e.to_string()))?;
    // nr >= pivot: fall to the JA, which jumps over the left half.
    let mut out = vec![
        jump(BPF_JMP_JGE_K, entries[mid].0, 0, 1),
        stmt(BPF_JMP_JA, skip_left),
    ];
    out.extend(left);
    out.extend(right);
    Ok(out)
}

/// The whole program for `allowed` (any arguments) and `conditional`.
pub(crate) fn compile(
    allowed: &[u32],
    conditional: &[(u32, Vec<Rule>)],
) -> Result<BpfProgram, SeccompError> {
    compile_answering(allowed, conditional, RET_ENOSYS)
}

/// The unlogged first filter of [`Filters::logged`]: `clone3` and
/// `openat2` answer `ENOSYS`, everything else is the other filter's.
fn enosys_only() -> BpfProgram {
    vec![
        stmt(BPF_LD_W_ABS, SECCOMP_DATA_NR),
        jump(BPF_JMP_JEQ_K, SYS_CLONE3, 1, 0),
        jump(BPF_JMP_JEQ_K, SYS_OPENAT2, 0, 1),
        stmt(BPF_RET_K, RET_ENOSYS),
        stmt(BPF_RET_K, RET_ALLOW),
    ]
}

/// [`compile`], with `clone3` and `openat2` answered `nosys` (`ENOSYS`, or
/// allowed when another filter answers them).
fn compile_answering(
    allowed: &[u32],
    conditional: &[(u32, Vec<Rule>)],
    nosys: u32,
) -> Result<BpfProgram, SeccompError> {
    let mut entries: Vec<(u32, Option<&[Rule]>)> = allowed.iter().map(|nr| (*nr, None)).collect();
    entries.extend(conditional.iter().map(|(nr, r)| (*nr, Some(r.as_slice()))));
    entries.sort_by_key(|e| e.0);
    if entries.windows(2).any(|w| w[0].0 == w[1].0) {
        return Err(SeccompError::Build("a syscall is listed twice".to_string()));
    }
    if entries
        .iter()
        .any(|e| e.0 == SYS_CLONE3 || e.0 == SYS_OPENAT2)
    {
        return Err(SeccompError::Build(
            "clone3/openat2 must stay ENOSYS".to_string(),
        ));
    }
    let mut prog = vec![
        stmt(BPF_LD_W_ABS, SECCOMP_DATA_ARCH),
        jump(BPF_JMP_JEQ_K, AUDIT_ARCH_X86_64, 1, 0),
        stmt(BPF_RET_K, RET_KILL),
        stmt(BPF_LD_W_ABS, SECCOMP_DATA_NR),
        jump(BPF_JMP_JGE_K, X32_SYSCALL_BIT, 0, 1),
        stmt(BPF_RET_K, RET_KILL),
        jump(BPF_JMP_JEQ_K, SYS_CLONE3, 1, 0),
        jump(BPF_JMP_JEQ_K, SYS_OPENAT2, 0, 1),
        stmt(BPF_RET_K, nosys),
    ];
    prog.extend(tree(&entries)?);
    if prog.len() > BPF_MAX_LEN {
        return Err(SeccompError::Build(format!(
            "{} instructions exceed the kernel's {BPF_MAX_LEN}",
            prog.len()
        )));
    }
    Ok(prog)
}

/// Builds the filter (allocates: call before forking).
pub(crate) fn build() -> Result<Filters, SeccompError> {
    if std::env::consts::ARCH != "x86_64" {
        return Err(SeccompError::UnsupportedArch(std::env::consts::ARCH));
    }
    let allowed: Vec<u32> = ALLOWED.iter().map(|(_, nr)| *nr as u32).collect();
    let rules = conditional_rules();
    Ok(Filters {
        program: compile(&allowed, &rules)?,
        logged: (
            enosys_only(),
            compile_answering(&allowed, &rules, RET_ALLOW)?,
        ),
    })
}

/// Installs the filter on the calling thread (sets no_new_privs first);
/// `log`: the split pair, its refusals logged ([`Filters::logged`]).
pub(crate) fn apply(filters: &Filters, log: bool) -> Result<(), SeccompError> {
    if !log {
        seccompiler::apply_filter(&filters.program)?;
        return Ok(());
    }
    seccompiler::apply_filter(&filters.logged.0)?;
    install_logged(&filters.logged.1)
}

/// `seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_LOG, prog)`
/// (seccompiler has no flag for it); no_new_privs is set already.
fn install_logged(prog: &BpfProgram) -> Result<(), SeccompError> {
    let len = u16::try_from(prog.len())
        .map_err(|_| SeccompError::Build("filter too long".to_string()))?;
    let fprog = libc::sock_fprog {
        len,
        filter: prog.as_ptr().cast_mut().cast(),
    };
    // SAFETY: fprog points at `prog`, alive for the call; the kernel copies it.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_LOG,
            &fprog as *const libc::sock_fprog,
        )
    };
    if rc != 0 {
        return Err(SeccompError::Build(format!(
            "install the logged filter: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

/// What the filter answers an x86_64 call with: `Ok` when it runs,
/// `Err(errno)` when refused (tests compare the backends with it).
#[cfg(test)]
pub(crate) fn verdict(nr: u32, args: [u64; 6]) -> Result<(), i32> {
    let f = build().expect("the native filter builds");
    let ret = tests::run(&f.program, AUDIT_ARCH_X86_64, nr, args).0;
    match ret & libc::SECCOMP_RET_ACTION_FULL {
        libc::SECCOMP_RET_ALLOW => Ok(()),
        libc::SECCOMP_RET_ERRNO => Err((ret & libc::SECCOMP_RET_DATA) as i32),
        other => panic!("syscall {nr}: unexpected action {other:#x}"),
    }
}

/// When an argument-checked call is allowed, in words (empty for a call
/// that is not one): the one statement of each condition, for the policy
/// text and for a refusal's `sandbox: ` line.
fn condition(name: &str) -> String {
    match name {
        "ioctl" => format!(
            "request (low 32 bits) is not {}",
            DENIED_IOCTLS
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        "socket" => "family is AF_UNIX, AF_INET or AF_INET6, or AF_NETLINK with protocol NETLINK_ROUTE only (no other netlink protocol, no AF_PACKET, AF_VSOCK, ...)".to_string(),
        "socketpair" => "family is AF_UNIX".to_string(),
        "clone" => "no CLONE_NEW* namespace flag".to_string(),
        "personality" => "PER_LINUX, UNAME26 or the query (no ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC)".to_string(),
        _ => match MODE_SYSCALLS.iter().find(|c| c.name == name).map(|c| c.used) {
            Some(ModeUse::Node) => "regular file, FIFO or socket, without set-user/group-ID; never a device".to_string(),
            Some(ModeUse::WhenCreating { .. }) => "not creating (no O_CREAT/O_TMPFILE), or creating without S_ISUID/S_ISGID in the mode".to_string(),
            Some(ModeUse::Always) => "mode without S_ISUID/S_ISGID".to_string(),
            None => String::new(),
        },
    }
}

/// The argument that decided an argument-checked call's refusal, and
/// what it must then have been, in words: the filter refuses such a call
/// only when that argument fails its condition, so the refusal says what
/// the argument was (its value is not in the kernel's record:
/// docs/THREAT_MODEL.md, "Refusals, attributed"). `None` for a call that
/// is not argument-checked.
pub(crate) fn deciding_argument(name: &str) -> Option<(&'static str, String)> {
    let ioctls = DENIED_IOCTLS
        .iter()
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(", ");
    Some(match name {
        "ioctl" => (
            "request",
            format!("its request was one of {ioctls} (typing into or taking over a terminal)"),
        ),
        "socket" => (
            "family",
            "its family was not AF_UNIX, AF_INET or AF_INET6, nor AF_NETLINK with NETLINK_ROUTE (AF_PACKET, AF_VSOCK, another netlink protocol, ...)".to_string(),
        ),
        "socketpair" => ("family", "its family was not AF_UNIX".to_string()),
        "clone" => (
            "flags",
            "its flags asked for a new namespace (a CLONE_NEW* flag: CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWNET, ...)".to_string(),
        ),
        "personality" => (
            "persona",
            "its persona was not PER_LINUX, UNAME26 or the query (ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, ...)".to_string(),
        ),
        _ => match MODE_SYSCALLS.iter().find(|c| c.name == name)?.used {
            ModeUse::Node => (
                "mode",
                "its mode asked for a device node or a set-user/group-ID bit (S_ISUID/S_ISGID)".to_string(),
            ),
            ModeUse::WhenCreating { .. } => (
                "mode",
                "it created a file with a set-user/group-ID bit (S_ISUID/S_ISGID) in its mode".to_string(),
            ),
            ModeUse::Always => (
                "mode",
                "its mode had a set-user/group-ID bit (S_ISUID/S_ISGID)".to_string(),
            ),
        },
    })
}

/// A refused x86_64 call's name and why, in words, from the one table
/// (seccomp_table.rs): a call left out on purpose gives its reason, an
/// argument-checked one what its arguments must be (the audit record
/// names the call, not its arguments: docs/THREAT_MODEL.md, "Refusals,
/// attributed"), any other number is one this table does not know.
pub(crate) fn why_refused(nr: u32) -> (String, String) {
    const FILTER: &str = "the sandbox's system-call filter refuses it";
    let nr64 = i64::from(nr);
    if let Some((name, _, why)) = DENIED.iter().find(|(_, n, _)| *n == nr64) {
        return (name.to_string(), format!("{why}; {FILTER}"));
    }
    if let Some((name, _)) = conditional_syscalls().into_iter().find(|(_, n)| *n == nr64) {
        let (_, refused_when) = deciding_argument(name).unwrap_or(("arguments", String::new()));
        return (
            name.to_string(),
            format!(
                "{refused_when}; allowed only when {}; {FILTER}",
                condition(name)
            ),
        );
    }
    if let Some((name, _)) = ALLOWED.iter().find(|(_, n)| *n == nr64) {
        // Allowed with any arguments: only a kill (a foreign architecture)
        // names one of these.
        return (name.to_string(), FILTER.to_string());
    }
    (
        format!("syscall {nr}"),
        format!("a call this sandbox does not know (newer than its table); {FILTER}"),
    )
}

/// The whole policy as Markdown (for docs/THREAT_MODEL.md and `doctor -v`).
pub(crate) fn policy_markdown() -> String {
    let mut s = String::new();
    s.push_str("Default for anything not listed: EPERM. Foreign architectures (i386 `int 0x80`) and the x32 bit: the process is killed. `clone3` and `openat2`: ENOSYS.\n\n");
    s.push_str("Allowed with conditions:\n\n");
    for (name, nr) in conditional_syscalls() {
        let why = condition(name);
        s.push_str(&format!("- `{name}` ({nr}): {why}\n"));
    }
    s.push_str("\nDenied (EPERM):\n\n");
    for (name, nr, why) in DENIED {
        s.push_str(&format!("- `{name}` ({nr}): {why}\n"));
    }
    s.push_str("\nAllowed:\n\n");
    let names: Vec<&str> = ALLOWED.iter().map(|(n, _)| *n).collect();
    s.push_str(&names.join(", "));
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::setid::MODE_BEHIND_POINTER;
    use std::collections::BTreeSet;

    #[test]
    fn lists_are_disjoint_and_cover_every_known_syscall() {
        let mut seen = BTreeSet::new();
        let all = ALLOWED
            .iter()
            .copied()
            .chain(conditional_syscalls())
            .chain(DENIED.iter().map(|(n, nr, _)| (*n, *nr)));
        for (name, nr) in all {
            assert!(seen.insert(nr), "syscall {name} ({nr}) listed twice");
        }
        // 0..=334 and 424..=469 minus the few numbers x86_64 never assigned
        // (335/336 are uretprobe/uprobe, called only by kernel trampolines).
        let expected: BTreeSet<i64> = (0..=334).chain(424..=469).collect();
        let missing: Vec<i64> = expected.difference(&seen).copied().collect();
        assert_eq!(missing, Vec::<i64>::new(), "unclassified syscall numbers");
    }

    #[test]
    fn the_danger_list_is_denied() {
        let allowed: BTreeSet<&str> = ALLOWED.iter().map(|(n, _)| *n).collect();
        for name in [
            "ptrace",
            "mount",
            "umount2",
            "unshare",
            "setns",
            "bpf",
            "keyctl",
            "add_key",
            "request_key",
            "io_uring_setup",
            "io_uring_enter",
            "io_uring_register",
            "perf_event_open",
            "kexec_load",
            "kexec_file_load",
            "init_module",
            "finit_module",
            "delete_module",
            "userfaultfd",
            "chroot",
            "pivot_root",
            "acct",
            "swapon",
            "reboot",
            "name_to_handle_at",
            "open_by_handle_at",
            "clone3",
            "process_vm_writev",
        ] {
            assert!(!allowed.contains(name), "{name} must not be allowed");
            assert!(
                DENIED.iter().any(|(n, _, _)| *n == name),
                "{name} must be documented in DENIED"
            );
        }
    }

    /// A classic-BPF interpreter for the instructions the compiler emits,
    /// with the kernel's rules (forward jumps only, must end in a return).
    /// Returns the action and how many instructions ran.
    pub(super) fn run(prog: &[sock_filter], arch: u32, nr: u32, args: [u64; 6]) -> (u32, usize) {
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&nr.to_le_bytes());
        data[4..8].copy_from_slice(&arch.to_le_bytes());
        for (i, a) in args.iter().enumerate() {
            data[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_le_bytes());
        }
        let (mut pc, mut acc, mut steps) = (0usize, 0u32, 0usize);
        loop {
            let i = &prog[pc];
            pc += 1;
            steps += 1;
            match i.code {
                BPF_LD_W_ABS => {
                    let k = i.k as usize;
                    acc = u32::from_le_bytes(data[k..k + 4].try_into().unwrap());
                }
                BPF_ALU_AND_K => acc &= i.k,
                BPF_JMP_JA => pc += i.k as usize,
                BPF_JMP_JEQ_K => pc += usize::from(if acc == i.k { i.jt } else { i.jf }),
                BPF_JMP_JGE_K => pc += usize::from(if acc >= i.k { i.jt } else { i.jf }),
                BPF_RET_K => return (i.k, steps),
                other => panic!("unexpected opcode {other:#x}"),
            }
        }
    }

    /// The policy, stated again in plain Rust, independent of the compiler.
    fn expected(arch: u32, nr: u32, args: [u64; 6]) -> u32 {
        let a = |i: usize| (args[i] & 0xffff_ffff) as u32;
        if arch != AUDIT_ARCH_X86_64 || nr >= X32_SYSCALL_BIT {
            return RET_KILL;
        }
        if nr == 435 || nr == 437 {
            return RET_ENOSYS;
        }
        if ALLOWED.iter().any(|(_, n)| *n as u32 == nr) {
            return RET_ALLOW;
        }
        let creating = |flags: u32| flags & (0o100 | 0o20000000) != 0;
        let setid = |mode: u32| mode & 0o6000 != 0;
        let dev_or_setid = |mode: u32| {
            !matches!(mode & 0o170000, 0 | 0o100000 | 0o010000 | 0o140000) || setid(mode)
        };
        let ok = match nr {
            2 => !(creating(a(1)) && setid(a(2))),
            257 => !(creating(a(2)) && setid(a(3))),
            83 | 85 | 90 | 91 => !setid(a(1)),
            258 | 268 | 452 => !setid(a(2)),
            16 => ![0x5412, 0x541C, 0x541D, 0x5423].contains(&a(1)),
            41 => matches!(a(0), 1 | 2 | 10) || (a(0) == 16 && a(2) == 0),
            53 => a(0) == 1,
            56 => a(0) & 0x7E02_0000 == 0,
            133 => !dev_or_setid(a(1)),
            259 => !dev_or_setid(a(2)),
            135 => [0, 8, 0x20000, 0x20008, 0xffff_ffff].contains(&a(0)),
            _ => false,
        };
        if ok { RET_ALLOW } else { RET_EPERM }
    }

    #[test]
    fn the_compiled_filter_matches_the_policy_for_every_syscall() {
        let f = build().unwrap();
        assert!(
            f.program.len() <= BPF_MAX_LEN,
            "{} instructions",
            f.program.len()
        );
        // Pseudo-random arguments (a fixed LCG), plus the values that matter.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            seed
        };
        let interesting: [u64; 16] = [
            0,
            1,
            2,
            10,
            16,
            0o100,
            0o4755,
            0o2755,
            0o755,
            0o20000000,
            0x5412,
            0x5412 | (1 << 32),
            0x10000000,
            0o020000 | 0o644,
            0x40000,
            0xffff_ffff,
        ];
        for nr in 0..520u32 {
            for round in 0..64 {
                let mut args = [0u64; 6];
                for a in args.iter_mut() {
                    *a = if round % 2 == 0 {
                        interesting[(next() % 16) as usize]
                    } else {
                        next()
                    };
                }
                assert_eq!(
                    run(&f.program, AUDIT_ARCH_X86_64, nr, args).0,
                    expected(AUDIT_ARCH_X86_64, nr, args),
                    "syscall {nr} args {args:x?}"
                );
            }
        }
        for nr in [0u32, 41, 59, 102, 359] {
            // i386 (int 0x80) and the x32 ABI.
            assert_eq!(run(&f.program, 0x4000_0003, nr, [0; 6]).0, RET_KILL);
            assert_eq!(
                run(&f.program, AUDIT_ARCH_X86_64, nr | X32_SYSCALL_BIT, [0; 6]).0,
                RET_KILL
            );
        }
    }

    /// The kernel's choice among stacked filters: the most severe answer.
    fn stacked(f: &Filters, nr: u32, args: [u64; 6]) -> u32 {
        let a = run(&f.logged.0, AUDIT_ARCH_X86_64, nr, args).0;
        let b = run(&f.logged.1, AUDIT_ARCH_X86_64, nr, args).0;
        if (a as i32) < (b as i32) { a } else { b }
    }

    #[test]
    fn the_logged_pair_answers_as_the_whole_filter_and_logs_no_enosys() {
        let f = build().unwrap();
        for nr in 0..520u32 {
            for args in [
                [0u64; 6],
                [0o100, 0o4755, 0o4755, 0o4755, 0, 0],
                [16, 3, 1, 0, 0, 0],
            ] {
                assert_eq!(
                    stacked(&f, nr, args),
                    run(&f.program, AUDIT_ARCH_X86_64, nr, args).0,
                    "syscall {nr}"
                );
            }
        }
        // ENOSYS comes from the unlogged filter only.
        for nr in [SYS_CLONE3, SYS_OPENAT2] {
            assert_eq!(run(&f.logged.1, AUDIT_ARCH_X86_64, nr, [0; 6]).0, RET_ALLOW);
        }
    }

    #[test]
    fn refusals_are_named_from_the_one_table() {
        let (name, why) = why_refused(101);
        assert_eq!(name, "ptrace");
        assert!(why.starts_with("debugging other processes; "), "{why}");
        let (name, why) = why_refused(41);
        assert_eq!(name, "socket");
        assert!(why.contains("AF_UNIX"), "{why}");
        let (name, why) = why_refused(90);
        assert_eq!(name, "chmod");
        assert!(why.contains("S_ISUID"), "{why}");
        assert_eq!(why_refused(999).0, "syscall 999");
    }

    #[test]
    fn an_argument_checked_refusal_says_which_argument_and_what_it_was() {
        for (nr, name, argument, said) in [
            (
                56,
                "clone",
                "flags",
                "its flags asked for a new namespace (a CLONE_NEW* flag: CLONE_NEWUSER",
            ),
            (
                90,
                "chmod",
                "mode",
                "its mode had a set-user/group-ID bit (S_ISUID/S_ISGID)",
            ),
            (
                268,
                "fchmodat",
                "mode",
                "its mode had a set-user/group-ID bit",
            ),
            (
                16,
                "ioctl",
                "request",
                "its request was one of TIOCSTI, TIOCLINUX, TIOCCONS, TIOCSETD",
            ),
            (
                41,
                "socket",
                "family",
                "its family was not AF_UNIX, AF_INET or AF_INET6",
            ),
            (
                135,
                "personality",
                "persona",
                "its persona was not PER_LINUX",
            ),
            (133, "mknod", "mode", "its mode asked for a device node"),
            (
                257,
                "openat",
                "mode",
                "it created a file with a set-user/group-ID bit",
            ),
        ] {
            let (got, why) = why_refused(nr);
            assert_eq!(got, name);
            assert_eq!(
                deciding_argument(name).map(|(a, _)| a),
                Some(argument),
                "{name}"
            );
            assert!(why.starts_with(said), "{name}: {why}");
            assert!(why.contains("; allowed only when "), "{name}: {why}");
            assert!(
                why.ends_with("; the sandbox's system-call filter refuses it"),
                "{name}: {why}"
            );
        }
        // A call refused whatever its arguments has no deciding argument.
        assert_eq!(deciding_argument("ptrace"), None);
        assert_eq!(deciding_argument("unshare"), None);
        assert_eq!(why_refused(999).0, "syscall 999");
    }

    #[test]
    fn a_typical_syscall_runs_few_instructions() {
        let f = build().unwrap();
        // openat walked about a thousand comparisons in a linear table.
        for nr in [0u32, 1, 3, 257, 262, 16, 56, 231, 446] {
            let (_, n) = run(&f.program, AUDIT_ARCH_X86_64, nr, [0; 6]);
            assert!(n <= 40, "syscall {nr}: {n} instructions");
        }
    }

    #[test]
    fn calls_with_a_mode_behind_a_pointer_answer_enosys() {
        assert_eq!(MODE_BEHIND_POINTER, &[("openat2", SYS_OPENAT2)]);
        let f = build().unwrap();
        let args = [0, 0, 0o4755, 0, 0, 0];
        assert_eq!(
            run(&f.program, AUDIT_ARCH_X86_64, SYS_OPENAT2, args).0,
            RET_ENOSYS
        );
    }

    #[test]
    fn every_mode_syscall_refuses_set_id_bits_and_allows_the_rest() {
        let f = build().unwrap();
        for c in MODE_SYSCALLS {
            let mut args = [0u64; 6];
            if let ModeUse::WhenCreating { flags_arg } = c.used {
                args[usize::from(flags_arg)] = O_CREAT;
            }
            for (mode, want) in [
                (0o755, RET_ALLOW),
                (0o4755, RET_EPERM),
                (0o2755, RET_EPERM),
                (0o6000, RET_EPERM),
                (0o4000 | (1 << 32), RET_EPERM),
            ] {
                let mut a = args;
                a[usize::from(c.mode_arg)] = mode;
                assert_eq!(
                    run(&f.program, AUDIT_ARCH_X86_64, c.nr, a).0,
                    want,
                    "{} mode {mode:o}",
                    c.name
                );
            }
        }
    }

    #[test]
    fn conditional_table_and_rules_agree() {
        let mut a: Vec<u32> = conditional_syscalls()
            .iter()
            .map(|(_, nr)| *nr as u32)
            .collect();
        let mut b: Vec<u32> = conditional_rules().iter().map(|(nr, _)| *nr).collect();
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b);
    }
}
