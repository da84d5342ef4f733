//! The kill switch's fast path: a pidfd on the container's init.
//!
//! Killing through the engine takes it a few hundred milliseconds on a busy
//! host. When the engine runs on this host and the supervisor may signal the
//! container's init (root, or the same user as a rootless engine), the backend
//! holds a pidfd for that init, taken right after start and checked to belong
//! to the container (its cgroup names the container id, read *after* the pidfd
//! pinned the process, so a recycled pid cannot be mistaken for it). SIGKILL
//! to a pid namespace's init kills every process in it; the pidfd turns
//! readable once the init is gone. Removal still goes through the engine.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// Opens a pidfd for `pid` and checks it is `container`'s process.
pub fn open_for_container(pid: i64, container: &str) -> Option<OwnedFd> {
    let pid = libc::pid_t::try_from(pid).ok().filter(|p| *p > 0)?;
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1; no
    // memory is passed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return None;
    }
    let raw = i32::try_from(fd).ok()?;
    // SAFETY: `raw` is a fresh descriptor returned by pidfd_open, owned by
    // nobody else; OwnedFd closes it exactly once.
    let owned = unsafe { OwnedFd::from_raw_fd(raw) };
    // The pidfd now pins whatever process has `pid`; make sure it is ours.
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    if !cgroup.contains(container) {
        return None;
    }
    Some(owned)
}

/// SIGKILL through the pidfd. False when it could not be sent (the process is
/// gone already, or no permission).
pub fn kill(fd: &OwnedFd) -> bool {
    // SAFETY: pidfd_send_signal with a valid pidfd, a signal number, a null
    // siginfo pointer (allowed: the kernel fills it in) and no flags.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            libc::SIGKILL,
            std::ptr::null::<libc::siginfo_t>(),
            0u32,
        )
    };
    r == 0
}

/// Waits until the process behind the pidfd has exited (the pidfd polls
/// readable), up to `timeout`. True when it has.
pub fn wait_exit(fd: &OwnedFd, timeout: Duration) -> bool {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: one valid pollfd, count 1, a finite timeout.
    let r = unsafe { libc::poll(&mut p, 1, ms) };
    r > 0 && (p.revents & libc::POLLIN) != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_outside_the_container_is_refused() {
        // This test process is in no container's cgroup.
        let me = i64::from(std::process::id());
        assert!(open_for_container(me, "0123456789abcdef0123456789abcdef").is_none());
        assert!(open_for_container(0, "x").is_none());
        assert!(open_for_container(-1, "x").is_none());
    }

    #[test]
    fn kill_and_wait_on_a_child() {
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let pid = libc::pid_t::try_from(child.id()).unwrap();
        // SAFETY: as in open_for_container.
        let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        assert!(raw >= 0);
        // SAFETY: fresh descriptor from pidfd_open.
        let fd = unsafe { OwnedFd::from_raw_fd(i32::try_from(raw).unwrap()) };
        assert!(!wait_exit(&fd, Duration::from_millis(10)));
        assert!(kill(&fd));
        assert!(wait_exit(&fd, Duration::from_secs(5)));
        let st = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(st.signal(), Some(libc::SIGKILL));
    }
}
