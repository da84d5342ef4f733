//! The one list of escape cases run against every backend, as a non-root
//! and as a root session (`sandbox.rs`,
//! `every_escape_case_holds_on_every_backend_for_root_and_non_root`).
//!
//! Adding a case adds it to both backends. Each case says what each backend
//! must answer; where a case cannot apply to a backend, the table says why
//! ([`Expect::NotApplicable`]): data, never a silent skip. After each
//! sandbox ends, the host checks its workspace: no file or directory there
//! may carry a set-user-ID or set-group-ID bit or a file capability, whatever
//! the cases printed. Controls ([`Control`]) run the same thing on the host
//! without a sandbox, so a pass cannot come from a kernel or a tool that
//! could not have done it in the first place.
//!
//! Cases run the static probe (`tests/probe/probe.c`, so they run in any
//! image) or `sh -c` with tools busybox and the host both have; the python3
//! and GNU-only shapes are in the escape corpus (`tests/corpus/escape.jsonl`),
//! which runs against both backends with the full image.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use tollgate_sandbox::{Backend, BackendKind};

/// What a case runs, with the workspace as its working directory. `{ws}`
/// in an argument is the workspace's path.
#[derive(Debug, Clone, Copy)]
pub enum Run {
    /// The static probe with these arguments.
    Probe(&'static [&'static str]),
    /// `sh -c` this.
    Sh(&'static str),
}

/// What a backend must answer.
#[derive(Debug, Clone, Copy)]
pub enum Expect {
    /// Exactly this on stdout.
    Prints(&'static str),
    /// Stdout starts with this (the rest varies, e.g. a byte count).
    PrintsPrefix(&'static str),
    /// Killed by this signal before printing anything.
    Killed(i32),
    /// The case does not apply to this backend, and why.
    NotApplicable(&'static str),
}

/// The case without a sandbox, on the host.
#[derive(Debug, Clone, Copy)]
pub enum Control {
    /// Run as root (this test process) in a scratch directory: prints this.
    Prints(&'static str),
    /// The same, but only the start of the output is fixed.
    PrintsPrefix(&'static str),
    /// Run as the session's uid in a scratch copy of the workspace's
    /// fixtures: leaves a set-user/group-ID file there.
    LeavesSetid,
    /// No control, and why.
    None(&'static str),
}

#[derive(Debug, Clone, Copy)]
pub struct Case {
    pub id: &'static str,
    /// What it tries.
    pub what: &'static str,
    pub run: Run,
    pub control: Control,
    pub native: Expect,
    pub docker: Expect,
    /// Why the backends' answers differ, when they do.
    pub note: &'static str,
}

impl Case {
    pub fn expect(&self, kind: BackendKind) -> Expect {
        match kind {
            BackendKind::Native => self.native,
            BackendKind::Docker => self.docker,
        }
    }
}

/// What every set-id door answers in a sandbox (`probe setid-doors`): the
/// same on both backends, as a root or non-root session, for S_ISUID and
/// S_ISGID alike. `openat2` keeps its mode behind a pointer: ENOSYS, so
/// callers fall back to `openat`. The same doors without the bits work.
pub const DOORS_REFUSED: &str = "open EPERM\nopen-raw EPERM\nopenat EPERM\nopen-tmpfile EPERM\n\
creat EPERM\nmknod EPERM\nmknodat EPERM\nmknod-fifo EPERM\nmkdir EPERM\nmkdirat EPERM\n\
chmod EPERM\nchmod-hibits EPERM\nfchmod EPERM\nfchmodat EPERM\nfchmodat2 EPERM\n\
fchmodat2-nofollow EPERM\nchmod-dir EPERM\nopenat2 ENOSYS\n\
plain-open ok\nplain-chmod ok\nplain-fchmodat2 ok\nplain-fchmod ok\nplain-mkdir ok\nplain-mode 700\n";

/// The control: on the host every door works (and leaves set-id files).
pub const DOORS_ON_THE_HOST: &str = "open ok\nopen-raw ok\nopenat ok\nopen-tmpfile ok\n\
creat ok\nmknod ok\nmknodat ok\nmknod-fifo ok\nmkdir ok\nmkdirat ok\n\
chmod ok\nchmod-hibits ok\nfchmod ok\nfchmodat ok\nfchmodat2 ok\n\
fchmodat2-nofollow ok\nchmod-dir ok\nopenat2 ok\n\
plain-open ok\nplain-chmod ok\nplain-fchmodat2 ok\nplain-fchmod ok\nplain-mkdir ok\nplain-mode 700\n";

const NETLINK_NOTE: &str = "both backends allow NETLINK_ROUTE sockets, and no other netlink \
    protocol (glibc's getifaddrs and if_nameindex use them; in the sandbox's own network namespace \
    they see only lo and, without CAP_NET_ADMIN, change nothing)";
const HOST_ETC: &str = "the container's /etc is the image's, not the host's: there is no host \
    /etc/shadow to refuse (etc_shadow_is_unreadable_even_for_a_uid0_session checks its content \
    never shows)";

/// Every case, run against every backend.
pub const CASES: &[Case] = &[
    Case {
        id: "int80",
        what: "an i386 syscall (getpid) through int 0x80 from a 64-bit process",
        run: Run::Probe(&["int80"]),
        control: Control::Prints("int80 ok\n"),
        native: Expect::Killed(libc::SIGSYS),
        docker: Expect::Killed(libc::SIGSYS),
        note: "",
    },
    Case {
        id: "ia32-socket",
        what: "an i386 socket() through int 0x80 (its number is another call's on x86_64)",
        run: Run::Probe(&["ia32-socket"]),
        control: Control::Prints("ok\n"),
        native: Expect::Prints("SIGSYS\n"),
        docker: Expect::Prints("SIGSYS\n"),
        note: "",
    },
    Case {
        id: "clone3",
        what: "clone3 with CLONE_NEWUSER (its flags are behind a pointer)",
        run: Run::Probe(&["clone3"]),
        control: Control::Prints("CLONED\n"),
        native: Expect::Prints("ENOSYS\n"),
        docker: Expect::Prints("ENOSYS\n"),
        note: "",
    },
    Case {
        id: "clone-ns",
        what: "clone(2) with CLONE_NEWUSER",
        run: Run::Probe(&["clone-ns"]),
        control: Control::None("as root on the host it would make a namespace: nothing to show"),
        native: Expect::Prints("EPERM\n"),
        docker: Expect::Prints("EPERM\n"),
        note: "",
    },
    Case {
        id: "unshare",
        what: "unshare of a user, mount, network and pid namespace",
        run: Run::Probe(&["unshare"]),
        control: Control::None("unsharing the test process itself would change the host test"),
        native: Expect::Prints("EPERM EPERM EPERM EPERM\n"),
        docker: Expect::Prints("EPERM EPERM EPERM EPERM\n"),
        note: "",
    },
    Case {
        id: "mount",
        what: "mount a tmpfs over the workspace",
        run: Run::Probe(&["mount", "{ws}"]),
        control: Control::None("mounting on the host would change it"),
        native: Expect::Prints("EPERM\n"),
        docker: Expect::Prints("EPERM\n"),
        note: "",
    },
    Case {
        id: "ptrace",
        what: "PTRACE_TRACEME, then PTRACE_ATTACH to a child",
        run: Run::Probe(&["ptrace"]),
        control: Control::None("root on the host may trace anything"),
        native: Expect::Prints("EPERM EPERM\n"),
        docker: Expect::Prints("EPERM EPERM\n"),
        note: "",
    },
    Case {
        id: "ptrace-init",
        what: "PTRACE_ATTACH to the sandbox's pid 1",
        run: Run::Probe(&["ptrace-init"]),
        control: Control::None("attaching to the host's own pid 1 is no control anyone should run"),
        native: Expect::Prints("EPERM\n"),
        docker: Expect::Prints("EPERM\n"),
        note: "",
    },
    Case {
        id: "tiocsti",
        what: "TIOCSTI into its own terminal, also with bit 32 set in the request",
        run: Run::Probe(&["tiocsti"]),
        control: Control::Prints("ok ok\n"),
        native: Expect::Prints("EPERM EPERM\n"),
        docker: Expect::Prints("EPERM EPERM\n"),
        note: "",
    },
    Case {
        id: "ioctl-notty",
        what: "TIOCSTI, TIOCSTI | 1<<32 and TIOCLINUX on stdin: seccomp answers before the tty layer",
        run: Run::Probe(&["ioctl-notty"]),
        control: Control::Prints("ENOTTY ENOTTY ENOTTY\n"),
        native: Expect::Prints("EPERM EPERM EPERM\n"),
        docker: Expect::Prints("EPERM EPERM EPERM\n"),
        note: "",
    },
    Case {
        id: "io_uring",
        what: "io_uring_setup (ring operations bypass seccomp)",
        run: Run::Probe(&["io_uring"]),
        control: Control::Prints("RING\n"),
        native: Expect::Prints("EPERM\n"),
        docker: Expect::Prints("EPERM\n"),
        note: "",
    },
    Case {
        id: "misc",
        what: "bpf, perf_event_open, userfaultfd, keyctl, personality(ADDR_NO_RANDOMIZE), name_to_handle_at",
        run: Run::Probe(&["misc"]),
        control: Control::None("as root on the host several of these work; nothing to show"),
        native: Expect::Prints("EPERM EPERM EPERM EPERM EPERM EPERM\n"),
        docker: Expect::Prints("EPERM EPERM EPERM EPERM EPERM EPERM\n"),
        note: "",
    },
    Case {
        id: "sockets",
        what: "AF_NETLINK/NETLINK_AUDIT, AF_PACKET (refused); AF_UNIX, AF_INET (allowed)",
        run: Run::Probe(&["sockets"]),
        control: Control::None("root on the host may open all four"),
        native: Expect::Prints("EPERM EPERM ok ok\n"),
        docker: Expect::Prints("EPERM EPERM ok ok\n"),
        note: "",
    },
    Case {
        id: "netlink-route",
        what: "an AF_NETLINK/NETLINK_ROUTE socket",
        run: Run::Probe(&["netlink-route"]),
        control: Control::Prints("ok\n"),
        native: Expect::Prints("ok\n"),
        docker: Expect::Prints("ok\n"),
        note: NETLINK_NOTE,
    },
    Case {
        id: "ifaces",
        what: "the network interfaces it can see (if_nameindex, over NETLINK_ROUTE)",
        run: Run::Probe(&["ifaces"]),
        control: Control::None("the host's interfaces vary"),
        native: Expect::Prints("lo\n"),
        docker: Expect::Prints("lo\n"),
        note: NETLINK_NOTE,
    },
    Case {
        id: "mempolicy",
        what: "set_mempolicy and mbind (NUMA placement, CAP_SYS_NICE class in Docker's own profile)",
        run: Run::Probe(&["mempolicy"]),
        control: Control::Prints("ok ok\n"),
        native: Expect::Prints("EPERM EPERM\n"),
        docker: Expect::Prints("EPERM EPERM\n"),
        note: "",
    },
    Case {
        id: "memfd-secret",
        what: "memfd_secret (memory hidden from the kernel's direct map)",
        run: Run::Probe(&["memfd-secret"]),
        control: Control::None("secretmem is off by default on many kernels"),
        native: Expect::Prints("EPERM\n"),
        docker: Expect::Prints("EPERM\n"),
        note: "",
    },
    Case {
        id: "etc-shadow-visible",
        what: "the host's /etc/shadow is there, so only the sandbox's own rules refuse it",
        run: Run::Sh("test -e /etc/shadow && echo visible"),
        control: Control::Prints("visible\n"),
        native: Expect::Prints("visible\n"),
        docker: Expect::NotApplicable(HOST_ETC),
        note: "",
    },
    Case {
        id: "read-etc-shadow",
        what: "read the host's /etc/shadow (root's 0640 file: for a uid-0 session only Landlock refuses it)",
        run: Run::Probe(&["read", "/etc/shadow"]),
        control: Control::PrintsPrefix("read "),
        native: Expect::Prints("EACCES\n"),
        docker: Expect::NotApplicable(HOST_ETC),
        note: "",
    },
    Case {
        id: "read-etc-gshadow",
        what: "read the host's /etc/gshadow",
        run: Run::Probe(&["read", "/etc/gshadow"]),
        control: Control::PrintsPrefix("read "),
        native: Expect::Prints("EACCES\n"),
        docker: Expect::NotApplicable(HOST_ETC),
        note: "",
    },
    Case {
        id: "read-etc-passwd",
        what: "read /etc/passwd (allowed: the refusals above are not a blanket one)",
        run: Run::Probe(&["read", "/etc/passwd"]),
        control: Control::PrintsPrefix("read "),
        native: Expect::PrintsPrefix("read "),
        docker: Expect::PrintsPrefix("read "),
        note: "",
    },
    Case {
        id: "proc-1-environ",
        what: "read the environment of the sandbox's pid 1",
        run: Run::Probe(&["read", "/proc/1/environ"]),
        control: Control::None(
            "whether the host's own pid 1 is readable says nothing about the sandbox's (on this \
             host it is not, even for root)",
        ),
        native: Expect::Prints("EACCES\n"),
        docker: Expect::NotApplicable(
            "pid 1 is docker-init, started by the engine as the session's uid with the session's \
             own environment (no host secret in it); host_proc_and_secret_env_are_out_of_reach \
             checks that no host canary is visible",
        ),
        note: "",
    },
    Case {
        id: "setuid-doors",
        what: "S_ISUID through every call that creates a file or sets its mode",
        run: Run::Probe(&["setid-doors", "4000"]),
        control: Control::Prints(DOORS_ON_THE_HOST),
        native: Expect::Prints(DOORS_REFUSED),
        docker: Expect::Prints(DOORS_REFUSED),
        note: "",
    },
    Case {
        id: "setgid-doors",
        what: "S_ISGID through every call that creates a file or sets its mode",
        run: Run::Probe(&["setid-doors", "2000"]),
        control: Control::Prints(DOORS_ON_THE_HOST),
        native: Expect::Prints(DOORS_REFUSED),
        docker: Expect::Prints(DOORS_REFUSED),
        note: "",
    },
    Case {
        id: "setuid-ia32",
        what: "chmod 4755 through the i386 ABI (int 0x80)",
        run: Run::Probe(&["foreign-chmod", "ia32", "4000"]),
        control: Control::Prints("ok\n"),
        native: Expect::Prints("SIGSYS\n"),
        docker: Expect::Prints("SIGSYS\n"),
        note: "",
    },
    Case {
        id: "setgid-ia32",
        what: "chmod 2755 through the i386 ABI (int 0x80)",
        run: Run::Probe(&["foreign-chmod", "ia32", "2000"]),
        control: Control::Prints("ok\n"),
        native: Expect::Prints("SIGSYS\n"),
        docker: Expect::Prints("SIGSYS\n"),
        note: "",
    },
    Case {
        id: "setuid-x32",
        what: "chmod 4755 through the x32 ABI",
        run: Run::Probe(&["foreign-chmod", "x32", "4000"]),
        control: Control::None(
            "kernels built without CONFIG_X86_X32_ABI answer ENOSYS themselves; in a sandbox \
             the arch check kills the call before the kernel looks",
        ),
        native: Expect::Prints("SIGSYS\n"),
        docker: Expect::Prints("SIGSYS\n"),
        note: "",
    },
    Case {
        id: "setfcap",
        what: "a file capability (security.capability with CAP_SETUID), a setuid bit by another name",
        run: Run::Probe(&["setfcap"]),
        control: Control::Prints("ok\n"),
        native: Expect::Prints("EPERM\n"),
        docker: Expect::Prints("EPERM\n"),
        note: "",
    },
    Case {
        id: "sh-chmod",
        what: "chmod u+s, g+s and 6755 on a file it made",
        run: Run::Sh(
            ": > sh-chmod; chmod u+s sh-chmod; chmod g+s sh-chmod; chmod 6755 sh-chmod; \
             echo done",
        ),
        control: Control::LeavesSetid,
        native: Expect::Prints("done\n"),
        docker: Expect::Prints("done\n"),
        note: "",
    },
    Case {
        id: "sh-setgid-dir",
        what: "a set-group-ID directory: chmod g+s, mkdir -m 2775",
        run: Run::Sh("mkdir sh-dir; chmod g+s sh-dir; mkdir -m 2775 sh-mkdir-m; echo done"),
        control: Control::LeavesSetid,
        native: Expect::Prints("done\n"),
        docker: Expect::Prints("done\n"),
        note: "",
    },
    Case {
        id: "sh-cp-preserve",
        what: "cp -p and cp -a of a setuid file (one the host planted)",
        run: Run::Sh(
            "cp -p planted/setid-source sh-cp-p; cp -a planted/setid-source sh-cp-a; echo done",
        ),
        control: Control::LeavesSetid,
        native: Expect::Prints("done\n"),
        docker: Expect::Prints("done\n"),
        note: "",
    },
    Case {
        id: "sh-tar-xp",
        what: "tar -xp of an archive whose members are setuid, setgid and a setgid directory",
        run: Run::Sh("mkdir sh-tar && cd sh-tar && tar -xpf ../planted/setid.tar; echo done"),
        control: Control::LeavesSetid,
        native: Expect::Prints("done\n"),
        docker: Expect::Prints("done\n"),
        note: "",
    },
    Case {
        id: "sh-write-clears-setid",
        what: "a write to, or a chown of, a setuid file already in the workspace (the host planted \
               it) clears the bit: the kernel does that for a caller without CAP_FSETID",
        run: Run::Sh(
            "echo x >> planted/setid-victim-write; chown \"$(id -u)\" planted/setid-victim-chown; \
             ls -l planted/setid-victim-write planted/setid-victim-chown | cut -c1-10",
        ),
        control: Control::None(
            "root on the host has CAP_FSETID and keeps the bits; the point is that a sandboxed \
             process has no such capability",
        ),
        native: Expect::Prints("-rwxr-xr-x\n-rwxr-xr-x\n"),
        docker: Expect::Prints("-rwxr-xr-x\n-rwxr-xr-x\n"),
        note: "",
    },
    Case {
        id: "sh-cp-true-setuid",
        what: "a copy of /bin/true made setuid (for a uid-0 session: a setuid-root binary)",
        run: Run::Sh("cp /bin/true sh-true && chmod u+s sh-true; ls -l sh-true | cut -c1-10"),
        control: Control::LeavesSetid,
        native: Expect::Prints("-rwxr-xr-x\n"),
        docker: Expect::Prints("-rwxr-xr-x\n"),
        note: "",
    },
];

/// The workspace path the host planted a setuid file at (`cp -p` needs
/// one): the only set-id file the host check accepts, mode unchanged.
pub const PLANTED_SOURCE: &str = "planted/setid-source";
const PLANTED_SOURCE_MODE: u32 = 0o4755;
/// Setuid files the host plants for `sh-write-clears-setid` to write to and
/// chown: the host check finds them if they keep the bit.
const PLANTED_VICTIMS: &[&str] = &["planted/setid-victim-write", "planted/setid-victim-chown"];

fn chown(p: &Path, uid: u32) {
    std::os::unix::fs::chown(p, Some(uid), Some(uid)).unwrap();
}

/// The fixtures Sh cases use, owned by `uid`: setuid files (a source to
/// copy, victims to write to), and a tar archive (itself a plain file) with
/// a setuid, a setgid and a setgid directory member.
pub fn plant(dir: &Path, uid: u32) {
    let planted = dir.join("planted");
    std::fs::create_dir(&planted).unwrap();
    chown(&planted, uid);
    for rel in std::iter::once(PLANTED_SOURCE).chain(PLANTED_VICTIMS.iter().copied()) {
        let p = dir.join(rel);
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        chown(&p, uid);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(PLANTED_SOURCE_MODE)).unwrap();
    }
    let stage = tempfile::tempdir().unwrap();
    for (name, mode) in [("tar-setuid", 0o4755), ("tar-setgid", 0o2755)] {
        let p = stage.path().join(name);
        std::fs::write(&p, "").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let d = stage.path().join("tar-setgid-dir");
    std::fs::create_dir(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o2755)).unwrap();
    let tar = planted.join("setid.tar");
    let st = std::process::Command::new("tar")
        .arg("-cf")
        .arg(&tar)
        .arg(format!("--owner={uid}"))
        .arg(format!("--group={uid}"))
        .arg("-C")
        .arg(stage.path())
        .args(["tar-setuid", "tar-setgid", "tar-setgid-dir"])
        .status()
        .unwrap();
    assert!(st.success(), "tar -cf {}", tar.display());
    chown(&tar, uid);
}

/// Every entry under `dir` (not following symlinks) that carries S_ISUID
/// or S_ISGID or a file capability, but the planted source at its mode.
pub fn set_id_entries(dir: &Path) -> Vec<String> {
    let mut bad = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.file_type().is_symlink() {
                continue;
            }
            if m.is_dir() {
                stack.push(p.clone());
            }
            let mode = m.mode() & 0o7777;
            let planted = p == dir.join(PLANTED_SOURCE);
            if planted && mode != PLANTED_SOURCE_MODE {
                bad.push(format!(
                    "{}: the planted file's mode is now {mode:o}",
                    p.display()
                ));
            } else if !planted && mode & 0o6000 != 0 {
                bad.push(format!("{} has mode {mode:o} on the host", p.display()));
            }
            if has_file_capability(&p) {
                bad.push(format!("{} has a security.capability xattr", p.display()));
            }
        }
    }
    bad.sort();
    bad
}

fn has_file_capability(p: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    let mut buf = [0u8; 64];
    // SAFETY: both strings are NUL-terminated; buf is writable for its length.
    let n = unsafe {
        libc::lgetxattr(
            path.as_ptr(),
            c"security.capability".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    n >= 0
}

/// The case's argv, `probe` standing for the static probe.
fn argv(case: &Case, probe: &str, ws: &Path) -> Vec<String> {
    match case.run {
        Run::Probe(args) => std::iter::once(probe.to_string())
            .chain(
                args.iter()
                    .map(|a| a.replace("{ws}", &ws.display().to_string())),
            )
            .collect(),
        Run::Sh(cmd) => vec!["sh".into(), "-c".into(), cmd.into()],
    }
}

/// The case as a host command (no sandbox) in `dir`.
fn host_command(case: &Case, dir: &Path) -> Command {
    let probe = super::probe_exe().display().to_string();
    let argv = argv(case, &probe, dir);
    let mut c = Command::new(&argv[0]);
    c.args(&argv[1..])
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
        .stdin(Stdio::null());
    c
}

/// Runs every case's control on the host; returns what did not hold.
pub fn check_controls(uids: &[u32]) -> Vec<String> {
    let mut failed = Vec::new();
    for case in CASES {
        match case.control {
            Control::Prints(want) | Control::PrintsPrefix(want) => {
                let scratch = tempfile::tempdir().unwrap();
                let out = host_command(case, scratch.path()).output().unwrap();
                let got = String::from_utf8_lossy(&out.stdout);
                let ok = match case.control {
                    Control::Prints(_) => got == want,
                    _ => got.starts_with(want),
                };
                if !ok {
                    failed.push(format!(
                        "control {}: the host printed {got:?}, expected {want:?}",
                        case.id
                    ));
                }
            }
            Control::LeavesSetid => {
                for &uid in uids {
                    if let Some(why) = control_leaves_setid(case, uid) {
                        failed.push(format!("control {} as uid {uid}: {why}", case.id));
                    }
                }
            }
            Control::None(_) => {}
        }
    }
    failed
}

/// `sh -c` the case on the host as `uid` in a scratch workspace with the
/// fixtures: `None` when it left a new set-id file, else what happened.
fn control_leaves_setid(case: &Case, uid: u32) -> Option<String> {
    use std::os::unix::process::CommandExt;
    let scratch = tempfile::tempdir().unwrap();
    std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = scratch.path().join("w");
    std::fs::create_dir(&dir).unwrap();
    chown(&dir, uid);
    plant(&dir, uid);
    let before = set_id_entries(&dir);
    let out = host_command(case, &dir).uid(uid).gid(uid).output().unwrap();
    if set_id_entries(&dir).iter().all(|e| before.contains(e)) {
        Some(format!(
            "left no set-id file (stdout {:?}, stderr {:?})",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    } else {
        None
    }
}

/// Runs every case in one sandbox of `backend` for a session of `uid`,
/// then checks the workspace from the host. Returns a report line per case
/// and what failed.
pub async fn run_all(
    name: &str,
    backend: &Arc<dyn Backend>,
    uid: u32,
) -> (Vec<String>, Vec<String>) {
    let kind = backend.kind();
    let ws = super::workspace(uid, uid);
    let probe = super::install_probe(ws.path(), uid);
    plant(ws.path(), uid);
    let sb = backend
        .create(&super::spec("escape-table", ws.path(), uid, uid))
        .await
        .unwrap();
    let (mut report, mut failed) = (Vec::new(), Vec::new());
    for case in CASES {
        let expect = case.expect(kind);
        if let Expect::NotApplicable(why) = expect {
            report.push(format!(
                "{name} uid {uid} {}: not applicable: {why}",
                case.id
            ));
            continue;
        }
        let argv = argv(case, &probe, ws.path());
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let r = super::run_argv(sb.as_ref(), &argv, Duration::from_secs(60)).await;
        let ok = match expect {
            Expect::Prints(want) => r.stdout == want,
            Expect::PrintsPrefix(want) => r.stdout.starts_with(want),
            Expect::Killed(sig) => r.stdout.is_empty() && r.outcome.signal == Some(sig),
            Expect::NotApplicable(_) => true,
        };
        report.push(format!(
            "{name} uid {uid} {}: {}",
            case.id,
            if ok { "held" } else { "FAILED" }
        ));
        if !ok {
            failed.push(format!(
                "{name} uid {uid} {} ({}): expected {expect:?}, got stdout {:?} stderr {:?} {:?}",
                case.id, case.what, r.stdout, r.stderr, r.outcome
            ));
        }
    }
    sb.destroy().await.unwrap();
    for bad in set_id_entries(ws.path()) {
        failed.push(format!("{name} uid {uid}: after the sandbox ended, {bad}"));
    }
    (report, failed)
}
