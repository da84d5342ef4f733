//! Pid 1 of the sandbox, after every restriction is in place: a tiny init.
//!
//! It reaps every process of the namespace, and for each [`ToInit::Exec`]
//! forks a child that starts a new session (no controlling terminal, its own
//! process group), takes the stdio fds the supervisor passed (so output never
//! flows through pid 1), closes everything else, chdirs and execs. When a
//! command's leader exits, its whole process group is killed before the
//! leader is reaped (so its pgid cannot be reused meanwhile), then the exit
//! status is reported. [`ToInit::Kill`] kills a command's group at once.
//! When the supervisor's end of the control socket closes, pid 1 exits, and
//! the kernel kills everything left in the namespace.
//!
//! Pid 1 is single-threaded, so its children may allocate before exec.

use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, SigmaskHow, Signal, kill, sigprocmask};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid, waitpid};
use nix::unistd::{ForkResult, Pid};

use super::protocol::{self, FromInit, MAX_PACKET, ToInit};
use super::sys;

pub(crate) struct Init {
    pub ctrl: OwnedFd,
    pub envp: Vec<CString>,
    /// PATH entries for resolving argv[0] without a slash.
    pub path: Vec<Vec<u8>>,
    pub rlimit_cpu_s: u64,
    /// The rules of each command's own Landlock domain (per_call.rs), kept
    /// up to date with /etc before each fork.
    pub per_call: super::per_call::PerCall,
    /// Split git directories: no command makes a link or special file
    /// beneath them (`tollgate_exec_agent::links`).
    pub links: tollgate_exec_agent::links::Guard,
}

/// Blocks SIGCHLD so it can be read from a signalfd. Call before the first fork.
pub(crate) fn block_sigchld() -> nix::Result<()> {
    let mut set = SigSet::empty();
    set.add(Signal::SIGCHLD);
    sigprocmask(SigmaskHow::SIG_BLOCK, Some(&set), None)
}

fn report(ctrl: RawFd, msg: &FromInit) {
    // A failed report means the supervisor is gone; the next poll sees it.
    let _ = protocol::send(ctrl, msg, &[], false);
}

/// Runs forever; exits the process (and so the namespace) when the
/// supervisor goes away.
pub(crate) fn run(mut init: Init) -> ! {
    let mut set = SigSet::empty();
    set.add(Signal::SIGCHLD);
    let sfd = match SignalFd::with_flags(&set, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC) {
        Ok(s) => s,
        Err(_) => std::process::exit(70),
    };
    let ctrl = init.ctrl.as_raw_fd();
    let mut running: HashMap<i32, u64> = HashMap::new();
    let mut buf = vec![0u8; MAX_PACKET];
    loop {
        let (ctrl_ev, sig_ev) = {
            let mut fds = [
                PollFd::new(init.ctrl.as_fd(), PollFlags::POLLIN),
                PollFd::new(sfd.as_fd(), PollFlags::POLLIN),
            ];
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(Errno::EINTR) => continue,
                Err(_) => std::process::exit(71),
            }
            (
                fds[0].revents().unwrap_or(PollFlags::empty()),
                fds[1].revents().unwrap_or(PollFlags::empty()),
            )
        };
        if sig_ev.contains(PollFlags::POLLIN) {
            while let Ok(Some(_)) = sfd.read_signal() {}
            reap(ctrl, &mut running);
        }
        if ctrl_ev.contains(PollFlags::POLLIN) {
            match protocol::recv(ctrl, &mut buf, true) {
                Ok(Some(pkt)) => handle(&mut init, &mut running, pkt),
                Ok(None) => std::process::exit(0),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {}
                Err(_) => std::process::exit(0),
            }
        } else if ctrl_ev.intersects(PollFlags::POLLHUP | PollFlags::POLLERR | PollFlags::POLLNVAL)
        {
            std::process::exit(0);
        }
    }
}

fn reap(ctrl: RawFd, running: &mut HashMap<i32, u64>) {
    loop {
        // Peek first: the leader stays a zombie (its pid, and so its pgid,
        // reserved) until its group has been killed.
        let status = match waitid(
            Id::All,
            WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT,
        ) {
            Ok(WaitStatus::StillAlive) | Err(_) => return,
            Ok(s) => s,
        };
        let Some(pid) = status.pid() else { return };
        if let Some(id) = running.remove(&pid.as_raw()) {
            let _ = kill(Pid::from_raw(-pid.as_raw()), Signal::SIGKILL);
            let (code, signal) = match status {
                WaitStatus::Exited(_, c) => (Some(c), None),
                WaitStatus::Signaled(_, s, _) => (None, Some(s as i32)),
                _ => (None, None),
            };
            report(ctrl, &FromInit::Exited { id, code, signal });
        }
        let _ = waitpid(pid, Some(WaitPidFlag::WNOHANG));
    }
}

fn handle(init: &mut Init, running: &mut HashMap<i32, u64>, pkt: protocol::Packet) {
    let ctrl = init.ctrl.as_raw_fd();
    let req: ToInit = match protocol::parse(&pkt.body) {
        Ok(r) => r,
        Err(_) => return,
    };
    match req {
        ToInit::Kill { id } => {
            if let Some((pid, _)) = running.iter().find(|(_, v)| **v == id) {
                let _ = kill(Pid::from_raw(-*pid), Signal::SIGKILL);
            }
        }
        ToInit::Exec { id, argv, cwd, tag } => {
            let fail = |error: String| report(ctrl, &FromInit::SpawnFailed { id, error });
            if pkt.fds.len() != 3 {
                return fail(format!("expected 3 stdio fds, got {}", pkt.fds.len()));
            }
            let Ok(args) = argv
                .iter()
                .map(|a| CString::new(a.as_bytes()))
                .collect::<Result<Vec<_>, _>>()
            else {
                return fail("argv contains a NUL byte".to_string());
            };
            let Some(first) = argv.first() else {
                return fail("empty argv".to_string());
            };
            let Ok(cwd_c) = CString::new(cwd.as_os_str().as_bytes()) else {
                return fail("cwd contains a NUL byte".to_string());
            };
            let candidates: Vec<CString> = if first.contains('/') {
                args.first().cloned().into_iter().collect()
            } else {
                init.path
                    .iter()
                    .filter_map(|dir| {
                        let mut p = dir.clone();
                        if !p.ends_with(b"/") {
                            p.push(b'/');
                        }
                        p.extend_from_slice(first.as_bytes());
                        CString::new(p).ok()
                    })
                    .collect()
            };
            // /etc as it is now, for this command's own domain.
            init.per_call.refresh();
            // SAFETY: pid 1 is single-threaded, so the child may do anything
            // the parent could; it only execs or exits.
            match unsafe { nix::unistd::fork() } {
                Ok(ForkResult::Child) => child(
                    init,
                    &pkt.fds,
                    &Launch {
                        argv: &args,
                        cwd: &cwd_c,
                        candidates: &candidates,
                        name: first,
                        tag: tag.as_deref(),
                    },
                ),
                Ok(ForkResult::Parent { child }) => {
                    drop(pkt.fds);
                    running.insert(child.as_raw(), id);
                }
                Err(e) => fail(format!("fork: {e} (pids limit reached?)")),
            }
        }
    }
}

/// In the child, once its stdio is the command's: named `tag`, it takes a Landlock
/// domain of its own (logged when attributed), which every process it
/// starts inherits; then its name is the program's again at exec. Every
/// command takes it, tagged or not: pid 1's own domain reads all of /etc
/// and (attributed) writes beneath /proc (landlock.rs). A failure ends
/// the child before it execs anything.
fn own_domain(init: &Init, tag: Option<&str>) {
    let named = match tag {
        Some(tag) => CString::new(tag)
            .map_err(|_| Errno::EINVAL)
            .and_then(|c| nix::sys::prctl::set_name(&c))
            .map(|()| own_audit_session()),
        None => Ok(()),
    };
    let restricted = named
        .map_err(std::io::Error::from)
        .and_then(|()| init.per_call.restrict());
    if let Err(e) = restricted {
        let msg = format!("sandbox: cannot give the command its own Landlock domain: {e}\n");
        let _ = nix::unistd::write(std::io::stderr(), msg.as_bytes());
        // SAFETY: _exit is always safe in this child.
        unsafe { libc::_exit(126) }
    }
}

/// Gives the command an audit session of its own, inherited by everything
/// it starts and fixed for them (setting a loginuid needs no privilege only
/// while it is unset): the kernel's seccomp records name only `pid` and
/// `ses`, so the session, which the supervisor learns from this write's
/// `LOGIN` record (its event names the tag), ties them to the command
/// (docs/THREAT_MODEL.md, "Refusals, attributed"). A failure (the
/// supervisor's own loginuid is set: it runs in a login session) leaves
/// seccomp refusals unattributed; `supervisorctl doctor` says so.
fn own_audit_session() {
    let uid = nix::unistd::getuid().as_raw().to_string();
    let path = c"/proc/self/loginuid";
    // Pid 1 dropped its credentials, which made it (and so this child) not
    // dumpable: its /proc files are root's, closed to a non-root uid. For
    // this write only; exec decides again for the program.
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) };
    // SAFETY: open of a constant path; the fd is closed below.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd >= 0 {
        // SAFETY: a write from a live buffer of its length, then close of our fd.
        unsafe {
            let _ = libc::write(fd, uid.as_ptr().cast(), uid.len());
            libc::close(fd);
        }
    }
    // SAFETY: as above.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
}

/// What a child execs.
struct Launch<'a> {
    argv: &'a [CString],
    cwd: &'a CString,
    candidates: &'a [CString],
    name: &'a str,
    tag: Option<&'a str>,
}

fn child(init: &Init, fds: &[OwnedFd], l: &Launch<'_>) -> ! {
    let Launch {
        argv,
        cwd,
        candidates,
        name,
        tag,
    } = *l;
    let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);
    let _ = nix::unistd::setsid();
    for (target, fd) in fds.iter().enumerate() {
        if sys::dup2_raw(fd.as_raw_fd(), target as RawFd).is_err() {
            // SAFETY: _exit is always safe; nothing to clean up in this child.
            unsafe { libc::_exit(126) }
        }
    }
    own_domain(init, tag);
    let _ = sys::close_fds_from(3);
    let _ = sys::set_rlimit(libc::RLIMIT_CPU, init.rlimit_cpu_s);
    if let Err(e) = nix::unistd::chdir(cwd.as_c_str()) {
        let msg = format!("sandbox: cannot enter {}: {e}\n", cwd.to_string_lossy());
        let _ = nix::unistd::write(std::io::stderr(), msg.as_bytes());
        // SAFETY: as above.
        unsafe { libc::_exit(126) }
    }
    if let Err(e) = init.links.apply() {
        let msg = format!(
            "sandbox: cannot start {name}: the layer that keeps links and special files out of the git directory failed: {e}\n"
        );
        let _ = nix::unistd::write(std::io::stderr(), msg.as_bytes());
        // SAFETY: as above.
        unsafe { libc::_exit(126) }
    }
    let mut last = Errno::ENOENT;
    let mut saw_eacces = false;
    for c in candidates {
        let e = nix::unistd::execve(c, argv, &init.envp)
            .err()
            .unwrap_or(Errno::ENOENT);
        match e {
            Errno::ENOENT | Errno::ENOTDIR => {}
            Errno::EACCES => saw_eacces = true,
            other => {
                last = other;
                break;
            }
        }
        last = e;
    }
    if saw_eacces && last != Errno::ENOEXEC {
        last = Errno::EACCES;
    }
    let msg = format!("sandbox: {name}: {}\n", last.desc());
    let _ = nix::unistd::write(std::io::stderr(), msg.as_bytes());
    let code = if last == Errno::ENOENT { 127 } else { 126 };
    // SAFETY: _exit is always safe.
    unsafe { libc::_exit(code) }
}
