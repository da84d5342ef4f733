//! What this host can enforce, probed once; and `supervisorctl doctor`.
//!
//! Anything in `missing` makes every sandbox creation fail with a message
//! naming it: the native backend never runs a weaker sandbox.

use std::fs;
use std::path::Path;

use super::cgroup::{self, Layout};
use super::{landlock, sys};
use crate::{CheckStatus, DoctorCheck};

const NAMESPACES: &[&str] = &["mnt", "pid", "net", "ipc", "uts", "cgroup"];

#[derive(Debug, Clone)]
pub(crate) struct Probe {
    /// The Landlock ABI sandboxes require (never below [`landlock::MIN_ABI`]).
    pub need_abi: i64,
    pub rootless: bool,
    pub uid: u32,
    pub landlock_abi: i64,
    pub seccomp: bool,
    pub arch: &'static str,
    pub missing_ns: Vec<&'static str>,
    pub userns: Result<(), String>,
    pub mount_api: bool,
    pub pidfd: bool,
    pub cgroups: Option<Layout>,
}

fn read_num(path: &str) -> Option<i64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn userns_allowed() -> Result<(), String> {
    if !Path::new("/proc/self/ns/user").exists() {
        return Err("this kernel has no user namespaces".into());
    }
    if read_num("/proc/sys/user/max_user_namespaces") == Some(0) {
        return Err("user.max_user_namespaces is 0".into());
    }
    if read_num("/proc/sys/kernel/unprivileged_userns_clone") == Some(0) {
        return Err("kernel.unprivileged_userns_clone is 0".into());
    }
    if read_num("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == Some(1) {
        return Err("kernel.apparmor_restrict_unprivileged_userns is 1".into());
    }
    Ok(())
}

/// Whether a syscall exists (called with an invalid fd: EBADF, not ENOSYS).
fn syscall_exists(nr: libc::c_long) -> bool {
    // SAFETY: every argument is an integer or null; with fd -1 the kernel
    // rejects the call before touching any pointer.
    let rc = unsafe { libc::syscall(nr, -1, std::ptr::null::<u8>(), 0, 0, 0) };
    !(rc < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS))
}

pub(crate) fn probe() -> Probe {
    let uid = nix::unistd::geteuid().as_raw();
    let rootless = uid != 0;
    let missing_ns = NAMESPACES
        .iter()
        .copied()
        .filter(|ns| !Path::new("/proc/self/ns").join(ns).exists())
        .collect();
    Probe {
        need_abi: landlock::MIN_ABI,
        rootless,
        uid,
        landlock_abi: sys::landlock_abi(),
        seccomp: sys::seccomp_kill_process_available()
            && fs::read_to_string("/proc/self/status")
                .map(|s| s.contains("\nSeccomp:"))
                .unwrap_or(false),
        arch: std::env::consts::ARCH,
        missing_ns,
        userns: userns_allowed(),
        mount_api: syscall_exists(libc::SYS_open_tree)
            && syscall_exists(libc::SYS_move_mount)
            && syscall_exists(libc::SYS_mount_setattr),
        pidfd: sys::pidfd_open(nix::unistd::getpid().as_raw()).is_ok(),
        cgroups: if rootless { None } else { cgroup::detect() },
    }
}

impl Probe {
    /// What stops full strength. Empty = sandboxes can be built.
    pub(crate) fn missing(&self) -> Vec<String> {
        let mut m = Vec::new();
        let need = self.need_abi.max(landlock::MIN_ABI);
        if self.landlock_abi < need {
            m.push(format!(
                "Landlock ABI {} (need >= {need}: filesystem, TCP and scope rules; enable with lsm=landlock on a 6.7+ kernel)",
                self.landlock_abi,
            ));
        }
        if !self.seccomp {
            m.push("seccomp filters (CONFIG_SECCOMP_FILTER)".to_string());
        }
        if self.arch != "x86_64" {
            m.push(format!(
                "a seccomp allowlist for {} (only x86_64 is built)",
                self.arch
            ));
        }
        if !self.missing_ns.is_empty() {
            m.push(format!("namespaces: {}", self.missing_ns.join(", ")));
        }
        if !self.mount_api {
            m.push(
                "the new mount API (open_tree, move_mount, mount_setattr: Linux 5.12+)".to_string(),
            );
        }
        if !self.pidfd {
            m.push("pidfds (Linux 5.3+)".to_string());
        }
        if self.rootless {
            if let Err(e) = &self.userns {
                m.push(format!(
                    "unprivileged user namespaces for rootless mode ({e})"
                ));
            }
        } else if self.cgroups.is_none() {
            m.push("cgroup pids and memory controllers (none mounted)".to_string());
        }
        m
    }

    pub(crate) fn summary(&self) -> String {
        let mode = if self.rootless {
            format!(
                "rootless (user namespace; sessions only for uid {}; RLIMIT_NPROC/RLIMIT_DATA instead of cgroups)",
                self.uid
            )
        } else {
            format!(
                "root ({})",
                self.cgroups
                    .as_ref()
                    .map(Layout::describe)
                    .unwrap_or_else(|| "no cgroups".to_string())
            )
        };
        format!(
            "native: pid/net/mount/ipc/uts/cgroup namespaces, curated read-only root, Landlock ABI {} (uses {}), seccomp allowlist, no capabilities; {mode}",
            self.landlock_abi,
            landlock::MIN_ABI
        )
    }
}

fn check(name: &str, ok: bool, detail: String, hint: Option<&str>) -> DoctorCheck {
    DoctorCheck {
        name: name.to_string(),
        status: if ok {
            CheckStatus::Ok
        } else {
            CheckStatus::Fail
        },
        detail,
        hint: if ok { None } else { hint.map(str::to_string) },
    }
}

/// One line per kernel feature the native sandbox needs.
pub fn doctor_checks() -> Vec<DoctorCheck> {
    let p = probe();
    let mut v = vec![
        check(
            "landlock",
            p.landlock_abi >= landlock::MIN_ABI,
            format!("ABI {} (need >= {})", p.landlock_abi, landlock::MIN_ABI),
            Some("boot a 6.7+ kernel with landlock in the lsm= list"),
        ),
        check(
            "seccomp",
            p.seccomp && p.arch == "x86_64",
            format!(
                "filter mode {}, arch {}",
                if p.seccomp { "available" } else { "missing" },
                p.arch
            ),
            Some("needs CONFIG_SECCOMP_FILTER; the allowlist is built for x86_64 only"),
        ),
        check(
            "namespaces",
            p.missing_ns.is_empty(),
            if p.missing_ns.is_empty() {
                format!("{} available", NAMESPACES.join(", "))
            } else {
                format!("missing: {}", p.missing_ns.join(", "))
            },
            Some("enable CONFIG_*_NS in the kernel"),
        ),
        check(
            "mount api",
            p.mount_api && p.pidfd,
            format!(
                "open_tree/move_mount/mount_setattr {}, pidfd {}",
                if p.mount_api { "ok" } else { "missing" },
                if p.pidfd { "ok" } else { "missing" }
            ),
            Some("needs Linux 5.12 or newer"),
        ),
    ];
    match (&p.userns, p.rootless) {
        (Ok(()), _) => v.push(check(
            "user namespaces",
            true,
            "unprivileged user namespaces allowed (rootless mode works)".to_string(),
            None,
        )),
        (Err(e), true) => v.push(check(
            "user namespaces",
            false,
            e.clone(),
            Some("rootless mode needs unprivileged user namespaces; or run the supervisor as root"),
        )),
        (Err(e), false) => v.push(DoctorCheck {
            name: "user namespaces".to_string(),
            status: CheckStatus::Warn,
            detail: format!("{e} (only rootless mode needs them)"),
            hint: None,
        }),
    }
    if p.rootless {
        v.push(DoctorCheck {
            name: "cgroups".to_string(),
            status: CheckStatus::Warn,
            detail: "rootless: no cgroups; pids capped by RLIMIT_NPROC, memory by RLIMIT_DATA per process".to_string(),
            hint: Some("run the supervisor as root for pids/memory/cpu cgroups".to_string()),
        });
    } else {
        v.push(check(
            "cgroups",
            p.cgroups.is_some(),
            p.cgroups
                .as_ref()
                .map(Layout::describe)
                .unwrap_or_else(|| "no pids+memory controllers mounted".to_string()),
            Some("mount the pids and memory controllers (cgroup v1) or cgroup2 with them enabled"),
        ));
    }
    v.push(super::audit::doctor_check());
    v
}
