//! Thin wrappers over the Linux calls std does not offer. Every `unsafe` of
//! the agent lives here or in [`crate::spawn`] (fork and exec).

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// How a process ended, from `waitpid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    Exited(i32),
    Signaled(i32),
}

fn decode(st: libc::c_int) -> Option<Wait> {
    if libc::WIFEXITED(st) {
        Some(Wait::Exited(libc::WEXITSTATUS(st)))
    } else if libc::WIFSIGNALED(st) {
        Some(Wait::Signaled(libc::WTERMSIG(st)))
    } else {
        None
    }
}

/// Reaps one child. `Ok(None)`: with `block` false, none has ended yet.
/// `Err` with `ECHILD`: no children at all.
pub fn wait_any(block: bool) -> io::Result<Option<(i32, Wait)>> {
    loop {
        let mut st: libc::c_int = 0;
        let flags = if block { 0 } else { libc::WNOHANG };
        // SAFETY: waitpid writes the status into a valid, owned c_int.
        let pid = unsafe { libc::waitpid(-1, &mut st, flags) };
        if pid < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if pid == 0 {
            return Ok(None);
        }
        match decode(st) {
            Some(w) => return Ok(Some((pid, w))),
            // A stop or continue report (not asked for): keep waiting.
            None => continue,
        }
    }
}

/// Sends `sig` to `pid`; false when it could not be sent.
pub fn kill(pid: i32, sig: libc::c_int) -> bool {
    // SAFETY: kill takes two integers and touches no memory of ours.
    unsafe { libc::kill(pid, sig) == 0 }
}

pub fn getpid() -> i32 {
    // SAFETY: getpid cannot fail and touches no memory.
    unsafe { libc::getpid() }
}

/// A pipe, both ends close-on-exec.
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two fds into the array we own.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: the kernel just gave us these two fds; nothing else owns them.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Asks for a pipe buffer of `bytes` (best effort: an unprivileged user over
/// the host's per-user pipe allowance keeps the default).
pub fn set_pipe_size(fd: BorrowedFd<'_>, bytes: usize) {
    let n = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: fcntl on a borrowed, open fd with an integer argument.
    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETPIPE_SZ, n) };
}

/// Asks for a socket send buffer of `bytes` (best effort: the kernel caps it
/// at `net.core.wmem_max`, then doubles it), so fewer writes wait for the
/// supervisor to read.
pub fn set_send_buffer(fd: BorrowedFd<'_>, bytes: usize) {
    let n = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: setsockopt reads one c_int from a valid pointer of the given size.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&n as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

pub fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: fcntl on a borrowed, open fd with integer arguments.
    let flags = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    // SAFETY: as above.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) })?;
    Ok(())
}

/// `poll`; `Ok(0)` on timeout or EINTR.
pub fn poll(fds: &mut [libc::pollfd], timeout_ms: libc::c_int) -> io::Result<usize> {
    let n = libc::nfds_t::try_from(fds.len()).unwrap_or(libc::nfds_t::MAX);
    // SAFETY: `fds` is a valid, exclusively borrowed slice of pollfd of length n.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), n, timeout_ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(0);
        }
        return Err(e);
    }
    Ok(usize::try_from(r).unwrap_or(0))
}

/// Blocks SIGCHLD and returns a non-blocking signalfd that reads it.
pub fn sigchld_fd() -> io::Result<OwnedFd> {
    // SAFETY: sigset_t is plain data; sigemptyset/sigaddset initialise it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to our sigset.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
    }
    // SAFETY: valid sigset pointer, null old-set pointer.
    cvt(unsafe { libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) })?;
    // SAFETY: -1 asks for a new fd; the set pointer is valid.
    let fd = cvt(unsafe { libc::signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC) })?;
    // SAFETY: a fresh fd from signalfd, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Reads and discards every pending signal on a signalfd.
pub fn drain_signalfd(fd: BorrowedFd<'_>) {
    let mut buf = [0u8; 128 * 8];
    loop {
        // SAFETY: reads into our own buffer of the given length.
        let r = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if r <= 0 {
            return;
        }
    }
}

/// Other processes of the same uid may not read our memory or fds
/// (/proc/<pid>/fd, /proc/<pid>/mem need ptrace access, which this denies).
pub fn set_not_dumpable() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    cvt(unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) }).map(|_| ())
}

/// Orphaned descendants are reparented to this process (not beyond it).
pub fn set_child_subreaper() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    cvt(unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) }).map(|_| ())
}

/// Dies by SIGKILL when the parent does.
pub fn set_parent_death_kill() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    cvt(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) }).map(|_| ())
}

/// `_exit`: no destructors, no atexit handlers, no flushing.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and is always safe to call.
    unsafe { libc::_exit(code) }
}

/// Writes all of `buf` to a raw fd, ignoring errors (for last words after fork).
pub fn write_all_raw(fd: RawFd, mut buf: &[u8]) {
    while !buf.is_empty() {
        // SAFETY: writes from our own buffer of the given length.
        let r = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
        if r <= 0 {
            return;
        }
        buf = &buf[usize::try_from(r).unwrap_or(buf.len()).min(buf.len())..];
    }
}

/// `dup2`; the new fd is not close-on-exec.
pub fn dup2(from: RawFd, to: RawFd) -> io::Result<()> {
    // SAFETY: dup2 on integer fds; a bad fd is reported as an error.
    cvt(unsafe { libc::dup2(from, to) }).map(|_| ())
}

/// Closes every fd from `first` up.
pub fn close_from(first: RawFd) {
    let first = libc::c_uint::try_from(first).unwrap_or(3);
    // SAFETY: close_range takes integers; it only closes fds of this process.
    let r = unsafe { libc::syscall(libc::SYS_close_range, first, libc::c_uint::MAX, 0u32) };
    if r != 0 {
        // Old kernels: close one by one up to the limit.
        // SAFETY: sysconf takes an integer.
        let max = unsafe { libc::sysconf(libc::_SC_OPEN_MAX) }.clamp(256, 1 << 20);
        for fd in first as libc::c_long..max {
            // SAFETY: closing an fd number; EBADF is ignored.
            unsafe { libc::close(fd as libc::c_int) };
        }
    }
}

/// Opens /dev/null read-write, close-on-exec.
pub fn open_dev_null() -> io::Result<OwnedFd> {
    let path: &CStr = c"/dev/null";
    // SAFETY: a valid NUL-terminated path and integer flags.
    let fd = cvt(unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) })?;
    // SAFETY: a fresh fd from open, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Empties the signal mask and puts every signal back to its default action
/// (an ignored SIGPIPE would otherwise survive exec).
pub fn reset_signals() {
    // SAFETY: sigset_t is plain data, initialised by sigemptyset.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to our own sigset; the old set is not wanted.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    }
    for sig in 1..=libc::SIGRTMAX() {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: SIG_DFL is a valid disposition; invalid numbers fail harmlessly.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }
}

/// Ends this process by `sig` (its default action), as a child that died
/// by it would have; `_exit(128 + sig)` if the signal does not end it.
pub fn die_by(sig: libc::c_int) -> ! {
    // SAFETY: integer arguments; the sigset is ours and initialised.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::kill(libc::getpid(), sig);
    }
    exit_now(128 + sig)
}

/// The calling thread's errno.
pub fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// An errno as words, without std's " (os error N)".
pub fn errno_text(e: i32) -> String {
    let s = io::Error::from_raw_os_error(e).to_string();
    match s.rfind(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}
