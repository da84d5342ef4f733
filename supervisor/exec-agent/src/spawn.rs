//! Starting one command: the agent forks a *shepherd*, which forks the
//! command itself.
//!
//! The shepherd is a child subreaper: whatever the command forks, and
//! whatever those fork after a `setsid` and a double fork, stays in the tree
//! below it. It waits for the command; when the command has ended it kills
//! what the command left behind (the whole tree below it) and reaps it, then
//! ends the way the command ended (the same exit code, or the same signal),
//! which is what the agent reports. It holds none of the agent's descriptors.
//!
//! The command: an empty signal mask and default signal actions, a new
//! session (no controlling terminal, its own process group), stdio from the
//! pipes, nothing else open, then `chdir` and `execve` with exactly the
//! environment it was given. A failure is one line on its stderr and exit 126
//! (cannot enter the directory or run the file) or 127 (not found), as a
//! shell would say it.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use crate::procs;
use crate::sys::{self, Wait};
use crate::wire::Start;

/// The agent's ends of a command that started.
pub struct Spawned {
    /// The shepherd's pid.
    pub pid: i32,
    pub stdout: File,
    pub stderr: Option<File>,
    pub stdin: Option<File>,
}

/// Everything the exec needs, made before any fork.
struct Prepared {
    argv: Vec<CString>,
    envp: Vec<CString>,
    cwd: CString,
    candidates: Vec<CString>,
    name: String,
    /// What the command starts under ([`crate::links`]).
    guard: crate::links::Guard,
}

const DEFAULT_PATH: &[u8] = b"/usr/local/bin:/usr/bin:/bin";

fn cstring(b: &[u8]) -> io::Result<CString> {
    CString::new(b).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL byte"))
}

fn prepare(s: &Start, guard: &crate::links::Guard) -> io::Result<Prepared> {
    let argv = s
        .argv
        .iter()
        .map(|a| cstring(a))
        .collect::<io::Result<Vec<_>>>()?;
    let first = s
        .argv
        .first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty argv"))?;
    let mut envp = Vec::with_capacity(s.env.len());
    for (k, v) in &s.env {
        let mut e = k.clone();
        e.push(b'=');
        e.extend_from_slice(v);
        envp.push(cstring(&e)?);
    }
    let path = s
        .env
        .iter()
        .find(|(k, _)| k == b"PATH")
        .map(|(_, v)| v.as_slice())
        .unwrap_or(DEFAULT_PATH);
    let candidates = if first.contains(&b'/') {
        vec![cstring(first)?]
    } else {
        path.split(|b| *b == b':')
            .filter(|d| !d.is_empty())
            .filter_map(|d| {
                let mut p = d.to_vec();
                if !p.ends_with(b"/") {
                    p.push(b'/');
                }
                p.extend_from_slice(first);
                CString::new(p).ok()
            })
            .collect()
    };
    Ok(Prepared {
        argv,
        envp,
        cwd: cstring(&s.cwd)?,
        candidates,
        name: String::from_utf8_lossy(first).into_owned(),
        guard: guard.clone(),
    })
}

/// Forks the shepherd for `s`. Errors name what failed (for `SpawnFailed`).
pub fn spawn(s: &Start, guard: &crate::links::Guard) -> Result<Spawned, String> {
    let prep = prepare(s, guard).map_err(|e| format!("bad command: {e}"))?;
    // Output pipes as large as a frame: fewer reads, fewer wake-ups.
    let pipe = || {
        let (r, w) = sys::pipe().map_err(|e| format!("pipe: {e}"))?;
        sys::set_pipe_size(w.as_fd(), crate::wire::MAX_CHUNK);
        Ok::<_, String>((r, w))
    };
    let (out_r, out_w) = pipe()?;
    let err = if s.merge_stderr { None } else { Some(pipe()?) };
    let (in_r, in_w) = if s.stdin_pipe {
        let (r, w) = pipe()?;
        (r, Some(w))
    } else {
        (
            sys::open_dev_null().map_err(|e| format!("open /dev/null: {e}"))?,
            None,
        )
    };
    // SAFETY: the agent is single-threaded, so the child may allocate and do
    // anything the parent could; it never returns (shepherd ends in _exit).
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!(
            "fork: {} (the container's pids limit reached?)",
            io::Error::last_os_error()
        ));
    }
    if pid == 0 {
        let err_w = err.as_ref().map(|(_, w)| w).unwrap_or(&out_w);
        shepherd(&in_r, &out_w, err_w, &prep);
    }
    drop((in_r, out_w));
    let stderr = match err {
        Some((r, w)) => {
            drop(w);
            Some(nonblocking(r)?)
        }
        None => None,
    };
    Ok(Spawned {
        pid,
        stdout: nonblocking(out_r)?,
        stderr,
        stdin: in_w.map(nonblocking).transpose()?,
    })
}

fn nonblocking(fd: OwnedFd) -> Result<File, String> {
    sys::set_nonblocking(fd.as_fd()).map_err(|e| format!("fcntl: {e}"))?;
    Ok(File::from(fd))
}

/// The shepherd (a forked child of the agent). Never returns.
fn shepherd(stdin: &OwnedFd, stdout: &OwnedFd, stderr: &OwnedFd, p: &Prepared) -> ! {
    let _ = sys::set_child_subreaper();
    // The agent is pid 1: when it dies the whole container goes; this only
    // covers an agent that is not pid 1.
    let _ = sys::set_parent_death_kill();
    for (fd, target) in [(stdin, 0), (stdout, 1), (stderr, 2)] {
        if sys::dup2(fd.as_raw_fd(), target).is_err() {
            sys::exit_now(126);
        }
    }
    // The control socket, the signalfd, other commands' pipes: none stays.
    sys::close_from(3);
    // SAFETY: the shepherd is single-threaded (a fork of the single-threaded
    // agent); the child only execs or exits.
    let cmd = unsafe { libc::fork() };
    if cmd == 0 {
        command(p);
    }
    if cmd < 0 {
        let msg = format!(
            "sandbox: cannot start {}: fork: {} (the container's pids limit reached?)\n",
            p.name,
            io::Error::last_os_error()
        );
        sys::write_all_raw(2, msg.as_bytes());
        sys::exit_now(126);
    }
    // The shepherd keeps no end of the command's pipes, so they close when
    // the command's processes are gone.
    if let Ok(null) = sys::open_dev_null() {
        for target in 0..3 {
            let _ = sys::dup2(null.as_raw_fd(), target);
        }
    }
    let status = wait_for(cmd);
    clean_up_after();
    match status {
        Wait::Exited(c) => sys::exit_now(c),
        Wait::Signaled(s) => sys::die_by(s),
    }
}

/// Waits for the command itself, reaping orphans that end meanwhile.
fn wait_for(cmd: i32) -> Wait {
    loop {
        match sys::wait_any(true) {
            Ok(Some((pid, w))) if pid == cmd => return w,
            Ok(_) => {}
            // No children at all: cannot happen while the command lives.
            Err(_) => return Wait::Signaled(libc::SIGKILL),
        }
    }
}

/// Kills and reaps everything left below the shepherd: until it has no
/// child left, kill what is below it, then reap.
fn clean_up_after() {
    let me = sys::getpid();
    loop {
        match sys::wait_any(false) {
            Ok(Some(_)) => continue,
            Err(_) => return,
            Ok(None) => {}
        }
        procs::kill_below(me);
        if sys::wait_any(true).is_err() {
            return;
        }
    }
}

/// The command (a forked child of the shepherd). Never returns.
fn command(p: &Prepared) -> ! {
    sys::reset_signals();
    // SAFETY: setsid takes no arguments; it fails only for a group leader,
    // which a fresh child never is.
    unsafe { libc::setsid() };
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::chdir(p.cwd.as_ptr()) } != 0 {
        let msg = format!(
            "sandbox: cannot enter {}: {}\n",
            p.cwd.to_string_lossy(),
            sys::errno_text(sys::errno())
        );
        sys::write_all_raw(2, msg.as_bytes());
        sys::exit_now(126);
    }
    if let Err(e) = p.guard.apply() {
        let msg = format!(
            "sandbox: cannot start {}: the layer that keeps links and special files out of the git directory failed: {e}\n",
            p.name
        );
        sys::write_all_raw(2, msg.as_bytes());
        sys::exit_now(126);
    }
    let mut argv: Vec<*const libc::c_char> = p.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut envp: Vec<*const libc::c_char> = p.envp.iter().map(|e| e.as_ptr()).collect();
    envp.push(std::ptr::null());
    let mut last = libc::ENOENT;
    let mut saw_eacces = false;
    for c in &p.candidates {
        // SAFETY: every pointer is to a live NUL-terminated string, and both
        // arrays end with a null pointer; execve only returns on failure.
        unsafe { libc::execve(c.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
        let e = io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::ENOENT);
        last = e;
        match e {
            libc::ENOENT | libc::ENOTDIR => {}
            libc::EACCES => saw_eacces = true,
            _ => break,
        }
    }
    if saw_eacces && last != libc::ENOEXEC {
        last = libc::EACCES;
    }
    let msg = format!("sandbox: {}: {}\n", p.name, sys::errno_text(last));
    sys::write_all_raw(2, msg.as_bytes());
    sys::exit_now(if last == libc::ENOENT { 127 } else { 126 })
}
