//! `supervisor __sandbox-init --control-fd N`: the single-threaded helper.
//!
//! The supervisor re-executes its own binary for every sandbox; this runs
//! before any thread exists. In order (docs/OPERATIONS.md repeats it):
//!
//! 1. close every inherited fd but the control socket; `setsid`; read the
//!    [`InitConfig`] from the socket (never from argv or a file);
//! 2. build the seccomp filters (allocation happens before any fork);
//! 3. `unshare` new mount, pid, network, ipc, uts and cgroup namespaces
//!    (plus a user namespace mapping only our own uid/gid when not root);
//!    `lo` brought up in the new network namespace (its only device: the
//!    sandbox's own loopback); `/` made private in the new mount namespace;
//! 4. fork pid 1 of the new pid namespace; the helper reports pid 1's pid and
//!    a pidfd for it to the supervisor (which moves pid 1 into the session's
//!    cgroups meanwhile), then only waits for it, and then detaches the
//!    workspace's mounts in one go;
//! 5. pid 1: hostname, the new root ([`super::mounts`]), rlimits
//!    ([`super::rlimits`]), the Landlock ruleset is prepared, credentials
//!    dropped to the session owner with no capabilities anywhere
//!    ([`super::credentials`]), PDEATHSIG, not dumpable, no_new_privs,
//!    Landlock enforced (checked `FullyEnforced`), seccomp last;
//! 6. pid 1 checks its own posture in /proc/self/status (NoNewPrivs 1,
//!    Seccomp 2, every capability set 0), reports `Ready`, and becomes the
//!    init loop ([`super::init`]).
//!
//! Any failure is reported as `SetupFailed { step, error }` and the sandbox
//! dies; the supervisor refuses the session with that message.

use std::convert::Infallible;
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::process::ExitCode;
use std::time::Instant;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sched::CloneFlags;
use nix::unistd::ForkResult;

use tollgate_exec_agent::links::Guard;

use super::protocol::{self, FromInit, InitConfig, MAX_PACKET};
use super::{SetupError, credentials, init, landlock, mounts, per_call, rlimits, seccomp, sys};

/// The argv[1] that selects this entry point.
pub const INIT_ARG: &str = "__sandbox-init";

fn parse_args() -> Result<RawFd, String> {
    let args: Vec<String> = std::env::args().collect();
    match args.as_slice() {
        [_, cmd, flag, fd] if cmd == INIT_ARG && flag == "--control-fd" => fd
            .parse::<RawFd>()
            .ok()
            .filter(|fd| *fd >= 3)
            .ok_or_else(|| format!("bad --control-fd value {fd:?}")),
        _ => Err(format!(
            "usage: {INIT_ARG} --control-fd N (started by the supervisor, not by hand)"
        )),
    }
}

/// The entry point of `supervisor __sandbox-init`. Must run before any other
/// thread exists (the daemon calls it as the first statement of `main`).
pub fn init_main() -> ExitCode {
    let mut clock = Clock::new();
    let fd = match parse_args() {
        Ok(fd) => fd,
        Err(e) => {
            eprintln!("sandbox-init: {e}");
            return ExitCode::from(2);
        }
    };
    if !sys::fd_is_open(fd) {
        eprintln!("sandbox-init: control fd {fd} is not open");
        return ExitCode::from(2);
    }
    // SAFETY: the supervisor passed this fd to us for exactly this purpose;
    // it was checked open above and nothing else in this process owns it.
    let ctrl = unsafe { OwnedFd::from_raw_fd(fd) };
    if let Err(e) = sys::close_fds_except(fd) {
        eprintln!("sandbox-init: close inherited fds: {e}");
        return ExitCode::from(1);
    }
    // Commands must never inherit the control socket across execve.
    let _ = sys::set_cloexec(fd);
    // Out of the supervisor's session: its terminal's signals are not ours.
    let _ = nix::unistd::setsid();

    let mut buf = vec![0u8; MAX_PACKET];
    let cfg: InitConfig = match protocol::recv(fd, &mut buf, false) {
        Ok(Some(pkt)) => match protocol::parse(&pkt.body) {
            Ok(c) => c,
            Err(e) => return fail(&ctrl, "config", &e.to_string()),
        },
        Ok(None) => return ExitCode::from(1),
        Err(e) => return fail(&ctrl, "config", &e.to_string()),
    };
    drop(buf);
    clock.mark("config");
    run_helper(ctrl, &cfg, clock)
}

/// Setup step timings, reported with `Ready` (for logs and benchmarks).
struct Clock {
    start: Instant,
    marks: Vec<(String, u64)>,
}

impl Clock {
    fn new() -> Clock {
        Clock {
            start: Instant::now(),
            marks: Vec::with_capacity(16),
        }
    }
    fn mark(&mut self, step: &str) {
        let us = u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.marks.push((step.to_string(), us));
    }
}

/// Best effort: the supervisor may already be gone.
fn report_failure(ctrl: RawFd, step: &str, error: &str) {
    let _ = protocol::send(
        ctrl,
        &FromInit::SetupFailed {
            step: step.to_string(),
            error: error.to_string(),
        },
        &[],
        false,
    );
}

fn fail(ctrl: &OwnedFd, step: &str, error: &str) -> ExitCode {
    report_failure(ctrl.as_raw_fd(), step, error);
    ExitCode::from(1)
}

fn write_file(path: &str, data: &str) -> Result<(), SetupError> {
    std::fs::write(path, data).map_err(|e| SetupError {
        step: "namespaces",
        detail: format!("write {data:?} to {path}: {e}"),
    })
}

/// Steps 2-4. Reports its own failures on the control socket while it still
/// owns it.
fn run_helper(ctrl_fd: OwnedFd, cfg: &InitConfig, mut clock: Clock) -> ExitCode {
    let ctrl = ctrl_fd.as_raw_fd();
    let fail = |e: SetupError| {
        report_failure(ctrl, e.step, &e.detail);
        ExitCode::from(1)
    };
    let filters = match seccomp::build() {
        Ok(f) => f,
        Err(e) => {
            return fail(SetupError {
                step: "seccomp",
                detail: e.to_string(),
            });
        }
    };
    clock.mark("seccomp-build");
    if let Err(e) = enter_namespaces(cfg) {
        return fail(e);
    }
    clock.mark("unshare");
    // Pid 1 watches this to notice the helper dying before PDEATHSIG is armed.
    let me = match sys::pidfd_open(nix::unistd::getpid().as_raw()) {
        Ok(fd) => fd,
        Err(e) => {
            return fail(SetupError {
                step: "namespaces",
                detail: format!("pidfd_open(self): {e}"),
            });
        }
    };
    // SAFETY: the helper is single-threaded (init_main runs before any thread).
    match unsafe { nix::unistd::fork() } {
        Ok(ForkResult::Child) => {
            clock.mark("fork");
            // sandbox_init owns the control socket (it becomes the init
            // loop's); on failure it hands it back, still open, so the
            // report reaches the supervisor.
            let (err, ctrl_fd) = match sandbox_init(ctrl_fd, cfg, &filters, me, clock) {
                Ok(never) => match never {},
                Err(failed) => failed,
            };
            report_failure(ctrl_fd.as_raw_fd(), err.step, &err.detail);
            // SAFETY: _exit is always safe.
            unsafe { libc::_exit(1) }
        }
        Ok(ForkResult::Parent { child }) => {
            drop(me);
            wait_for_pid1(ctrl_fd, child, cfg)
        }
        Err(e) => fail(SetupError {
            step: "namespaces",
            detail: format!("fork pid 1: {e}"),
        }),
    }
}

/// Unshares the new namespaces (a user namespace too when rootless, mapping
/// only our own uid and gid), then makes every mount private.
fn enter_namespaces(cfg: &InitConfig) -> Result<(), SetupError> {
    let mut flags = CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWNET
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS
        | CloneFlags::CLONE_NEWCGROUP;
    let (outer_uid, outer_gid) = (nix::unistd::geteuid(), nix::unistd::getegid());
    if cfg.rootless {
        flags |= CloneFlags::CLONE_NEWUSER;
    }
    nix::sched::unshare(flags).map_err(|e| SetupError {
        step: "namespaces",
        detail: format!("unshare({flags:?}): {e}"),
    })?;
    if cfg.rootless {
        for (path, data) in [
            ("/proc/self/setgroups", "deny".to_string()),
            ("/proc/self/uid_map", format!("{outer_uid} {outer_uid} 1\n")),
            ("/proc/self/gid_map", format!("{outer_gid} {outer_gid} 1\n")),
        ] {
            write_file(path, &data)?;
        }
    }
    // Loopback inside the sandbox: its own, with nothing else on it.
    crate::egress::loopback_up().map_err(|e| SetupError {
        step: "namespaces",
        detail: format!("bring lo up in the sandbox's network namespace: {e}"),
    })?;
    // Nothing mounted or unmounted in this namespace may propagate to the
    // host's, from here on (pid 1 repeats it; the helper's own unmount at
    // the end relies on it).
    nix::mount::mount(
        None::<&str>,
        "/",
        None::<&str>,
        nix::mount::MsFlags::MS_REC | nix::mount::MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| SetupError {
        step: "namespaces",
        detail: format!("make / private in the new mount namespace: {e}"),
    })
}

/// The helper after the fork: reports pid 1 (with its pidfd) to the
/// supervisor, gives the control socket up, and waits for pid 1 to end.
fn wait_for_pid1(ctrl_fd: OwnedFd, child: nix::unistd::Pid, cfg: &InitConfig) -> ExitCode {
    let reported = sys::pidfd_open(child.as_raw())
        .map_err(|e| format!("pidfd_open({child}): {e}"))
        .and_then(|pidfd| {
            protocol::send(
                ctrl_fd.as_raw_fd(),
                &FromInit::Helper {
                    init_pid: child.as_raw(),
                },
                &[pidfd.as_raw_fd()],
                false,
            )
            .map_err(|e| e.to_string())
        });
    if let Err(e) = reported {
        // Without its pidfd the supervisor cannot manage pid 1: end it.
        let _ = nix::sys::signal::kill(child, nix::sys::signal::Signal::SIGKILL);
        let _ = nix::sys::wait::waitpid(child, None);
        report_failure(ctrl_fd.as_raw_fd(), "report", &e);
        return ExitCode::from(1);
    }
    drop(ctrl_fd);
    while let Err(nix::errno::Errno::EINTR) = nix::sys::wait::waitpid(child, None) {}
    // Every process of the sandbox is gone. Detach the workspace and
    // everything mounted on it in one go: the supervisor then removes
    // the placeholders beneath it without the kernel detaching each
    // one's mount from this namespace first (a grace period apiece).
    // Pid 1's pivot_root made its new root ours too; if it died
    // before that, the path names no mount of ours and this fails.
    let _ = nix::mount::umount2(cfg.workspace.as_path(), nix::mount::MntFlags::MNT_DETACH);
    ExitCode::SUCCESS
}

/// Pid 1: every restriction, in order, then the init loop. On failure, the
/// error and the control socket (still open, for the report).
fn sandbox_init(
    ctrl_fd: OwnedFd,
    cfg: &InitConfig,
    filters: &seccomp::Filters,
    helper: OwnedFd,
    clock: Clock,
) -> Result<Infallible, (SetupError, OwnedFd)> {
    match restrict(&ctrl_fd, cfg, filters, helper, clock) {
        Ok((envp, path, links, per_call)) => init::run(init::Init {
            ctrl: ctrl_fd,
            envp,
            path,
            rlimit_cpu_s: cfg.rlimit_cpu_s,
            links,
            per_call,
        }),
        Err(e) => Err((e, ctrl_fd)),
    }
}

/// The environment and PATH entries commands run with, the link guard,
/// and the rules of each command's own Landlock domain.
type Commands = (Vec<CString>, Vec<Vec<u8>>, Guard, per_call::PerCall);

/// Every restriction of pid 1, in order, ending with the `Ready` report.
/// Returns what commands run with (see [`Commands`]).
fn restrict(
    ctrl_fd: &OwnedFd,
    cfg: &InitConfig,
    filters: &seccomp::Filters,
    helper: OwnedFd,
    mut clock: Clock,
) -> Result<Commands, SetupError> {
    let ctrl = ctrl_fd.as_raw_fd();
    let step = |step: &'static str| {
        move |e: nix::Error| SetupError {
            step,
            detail: e.to_string(),
        }
    };
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL).map_err(step("pdeathsig"))?;
    nix::unistd::sethostname("tollgate-sandbox").map_err(step("hostname"))?;
    mounts::build_root(&mounts::MountPlan {
        workspace: &cfg.workspace,
        workspace_id: cfg.workspace_id,
        hidden: &cfg.hidden,
        tmp_mb: cfg.tmp_mb,
        binds: &cfg.binds,
        rootless: cfg.rootless,
        hosts: cfg.egress.as_ref().map(crate::Egress::hosts_file),
        home: cfg.private_home.as_ref().map(|h| (h, (cfg.uid, cfg.gid))),
        resolv: cfg.wall.then(crate::wall::resolv_conf),
        extra_ca: cfg.extra_ca.clone(),
    })?;
    clock.mark("mounts");
    rlimits::apply(cfg)?;
    let home = cfg.private_home.as_ref().map(|h| h.path.clone());
    let sandbox_rules = landlock::sandbox_ruleset(&cfg.workspace, home.as_deref(), cfg.attribute)?;
    let inputs = per_call::Inputs {
        workspace: cfg.workspace.clone(),
        home,
        hidden: cfg.hidden.clone(),
    };
    let (per_call, etc) = per_call::PerCall::build(inputs, cfg.attribute)?;
    // Above the workspace, listed now: a command's Landlock lets it list
    // only what it may read.
    let links =
        Guard::new(&cfg.workspace, cfg.no_links_beneath.clone()).map_err(|detail| SetupError {
            step: "landlock-links",
            detail,
        })?;
    clock.mark("landlock-prepare");
    let envp: Vec<CString> = cfg
        .env
        .iter()
        .filter_map(|(k, v)| CString::new(format!("{k}={v}")).ok())
        .collect();
    let path: Vec<Vec<u8>> = cfg
        .env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.as_str())
        .unwrap_or("/usr/local/bin:/usr/bin:/bin")
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| d.as_bytes().to_vec())
        .collect();
    nix::unistd::chdir(cfg.workspace.as_os_str()).map_err(step("chdir workspace"))?;
    credentials::drop_to(cfg.uid, cfg.gid, cfg.rootless)?;
    credentials::lock_init()?;
    clock.mark("credentials");
    // The helper may have died before PDEATHSIG was armed: then stop here.
    let mut pfd = [PollFd::new(helper.as_fd(), PollFlags::POLLIN)];
    if poll(&mut pfd, PollTimeout::ZERO).map_err(step("pdeathsig"))? > 0 {
        return Err(SetupError {
            step: "pdeathsig",
            detail: "the helper died during setup".to_string(),
        });
    }
    drop(helper);
    init::block_sigchld().map_err(step("signals"))?;
    landlock::enforce(sandbox_rules)?;
    clock.mark("landlock");
    // Refusals attributed: the filter's refusals are audit records too.
    seccomp::apply(filters, cfg.attribute).map_err(|e| SetupError {
        step: "seccomp",
        detail: e.to_string(),
    })?;
    clock.mark("seccomp");
    let posture = check_posture(cfg, etc.granted, etc.withheld.len())?;
    clock.mark("posture");
    let ready = FromInit::Ready {
        posture,
        timings: clock.marks,
    };
    protocol::send(ctrl, &ready, &[], false).map_err(|e| SetupError {
        step: "report",
        detail: e.to_string(),
    })?;
    Ok((envp, path, links, per_call))
}

/// Reads our own /proc/self/status and insists on the posture every command
/// inherits: no_new_privs, seccomp filter mode, no capabilities at all.
fn check_posture(
    cfg: &InitConfig,
    etc_granted: usize,
    etc_withheld: usize,
) -> Result<String, SetupError> {
    let status = std::fs::read_to_string("/proc/self/status").map_err(|e| SetupError {
        step: "posture",
        detail: format!("read /proc/self/status: {e}"),
    })?;
    let field = |name: &str| -> String {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(':')))
            .map(|v| v.trim().to_string())
            .unwrap_or_default()
    };
    let mut bad = Vec::new();
    if field("NoNewPrivs") != "1" {
        bad.push(format!("NoNewPrivs={}", field("NoNewPrivs")));
    }
    if field("Seccomp") != "2" {
        bad.push(format!("Seccomp={}", field("Seccomp")));
    }
    for cap in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        let v = field(cap);
        if u64::from_str_radix(&v, 16) != Ok(0) {
            bad.push(format!("{cap}={v}"));
        }
    }
    if !bad.is_empty() {
        return Err(SetupError {
            step: "posture",
            detail: format!("weak posture: {}", bad.join(" ")),
        });
    }
    Ok(format!(
        "uid={} gid={} NoNewPrivs=1 Seccomp=2 Seccomp_filters={} caps=0 landlock=fully-enforced(abi>={}) etc_entries={} etc_withheld={} workspace={}",
        cfg.uid,
        cfg.gid,
        field("Seccomp_filters"),
        landlock::MIN_ABI,
        etc_granted,
        etc_withheld,
        String::from_utf8_lossy(cfg.workspace.as_os_str().as_bytes()),
    ))
}
