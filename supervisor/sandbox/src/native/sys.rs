//! Thin wrappers over the Linux calls that std and nix do not cover: the new
//! mount API, pidfds, capset, close_range and a few prctls. Every `unsafe`
//! block in the native backend that is not a `fork` lives here.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

pub(crate) const MOUNT_ATTR_RDONLY: u64 = 0x0000_0001;
pub(crate) const MOUNT_ATTR_NOSUID: u64 = 0x0000_0002;
pub(crate) const MOUNT_ATTR_NODEV: u64 = 0x0000_0004;
pub(crate) const MOUNT_ATTR_NOEXEC: u64 = 0x0000_0008;

const AT_EMPTY_PATH: libc::c_uint = 0x1000;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const AT_SYMLINK_NOFOLLOW: libc::c_uint = 0x100;
const OPEN_TREE_CLONE: libc::c_uint = 1;
const OPEN_TREE_CLOEXEC: libc::c_uint = libc::O_CLOEXEC as libc::c_uint;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x0000_0004;
const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x0000_0040;

/// `struct mount_attr` from linux/mount.h.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

fn check(rc: libc::c_long) -> io::Result<libc::c_long> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Sets and clears mount attributes on the mount at `fd` (an `O_PATH` fd or a
/// detached tree), optionally on every mount beneath it too.
pub(crate) fn mount_setattr_fd(
    fd: BorrowedFd<'_>,
    set: u64,
    clear: u64,
    recursive: bool,
) -> io::Result<()> {
    let attr = MountAttr {
        attr_set: set,
        attr_clr: clear,
        propagation: 0,
        userns_fd: 0,
    };
    let mut flags = AT_EMPTY_PATH;
    if recursive {
        flags |= AT_RECURSIVE;
    }
    // SAFETY: the path is a valid NUL-terminated empty string, `attr` is a
    // live, correctly laid out `struct mount_attr` and its size is passed; the
    // kernel only reads it.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd.as_raw_fd(),
            c"".as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    check(rc).map(|_| ())
}

/// Same as [`mount_setattr_fd`] on a path (relative to the cwd, not followed
/// if it is a symlink).
pub(crate) fn mount_setattr_path(
    path: &CStr,
    set: u64,
    clear: u64,
    recursive: bool,
) -> io::Result<()> {
    let attr = MountAttr {
        attr_set: set,
        attr_clr: clear,
        propagation: 0,
        userns_fd: 0,
    };
    let mut flags = AT_SYMLINK_NOFOLLOW;
    if recursive {
        flags |= AT_RECURSIVE;
    }
    // SAFETY: `path` is NUL-terminated, `attr` is a live `struct mount_attr`
    // whose size is passed; the kernel only reads both.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    check(rc).map(|_| ())
}

/// `open_tree(fd, "", OPEN_TREE_CLONE | AT_EMPTY_PATH [| AT_RECURSIVE])`: a
/// detached copy of the mount tree at `fd`, attached nowhere yet.
pub(crate) fn open_tree_clone(fd: BorrowedFd<'_>, recursive: bool) -> io::Result<OwnedFd> {
    let mut flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH;
    if recursive {
        flags |= AT_RECURSIVE;
    }
    // SAFETY: the path is a valid empty C string; the call returns a new fd
    // or -1 and touches no memory of ours.
    let rc = unsafe { libc::syscall(libc::SYS_open_tree, fd.as_raw_fd(), c"".as_ptr(), flags) };
    let fd = check(rc)? as RawFd;
    // SAFETY: the kernel just returned this fd to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `move_mount(from, "", to, "", F_EMPTY_PATH | T_EMPTY_PATH)`: attaches the
/// detached tree `from` on top of the object `to` refers to (no path lookup,
/// so nothing can be swapped in between).
pub(crate) fn move_mount_fd(from: BorrowedFd<'_>, to: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: both paths are valid empty C strings; the fds are borrowed and
    // stay open for the duration of the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            from.as_raw_fd(),
            c"".as_ptr(),
            to.as_raw_fd(),
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    check(rc).map(|_| ())
}

/// `openat2(dirfd, path, O_PATH|O_CLOEXEC|extra, resolve)`.
pub(crate) fn openat2_path(
    dirfd: RawFd,
    path: &CStr,
    extra_flags: libc::c_int,
    resolve: u64,
) -> io::Result<OwnedFd> {
    // SAFETY: `open_how` is a plain-old-data struct; all-zero is valid.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_PATH | libc::O_CLOEXEC | extra_flags) as u64;
    how.resolve = resolve;
    // SAFETY: `path` is NUL-terminated, `how` is a live `struct open_how`
    // whose size is passed; the kernel only reads both.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dirfd,
            path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    let fd = check(rc)? as RawFd;
    // SAFETY: a fresh fd returned by the kernel, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A pidfd for `pid`. Race-free only while `pid` cannot be reaped by anyone
/// else (it is our child, or its parent is waiting on our word).
pub(crate) fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with integer arguments.
    let rc = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let fd = check(rc)? as RawFd;
    // SAFETY: a fresh fd returned by the kernel, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sends `sig` to the process behind `pidfd` (no pid reuse race).
pub(crate) fn pidfd_send_signal(pidfd: BorrowedFd<'_>, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: plain syscall; a null siginfo is allowed and means "as kill()".
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    check(rc).map(|_| ())
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Clears the effective, permitted and inheritable capability sets.
pub(crate) fn capset_clear_all() -> io::Result<()> {
    let mut hdr = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData::default(); 2];
    // SAFETY: version 3 takes a header and an array of two data structs, both
    // live and correctly laid out for the duration of the call.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &mut hdr as *mut CapHeader, data.as_ptr()) };
    check(rc).map(|_| ())
}

/// Drops `cap` from the bounding set. `Ok(false)` once `cap` is past the
/// last capability this kernel knows.
pub(crate) fn capbset_drop(cap: libc::c_int) -> io::Result<bool> {
    // SAFETY: prctl with integer arguments only.
    let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
    if rc == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EINVAL) {
        Ok(false)
    } else {
        Err(err)
    }
}

/// Clears the ambient capability set.
pub(crate) fn ambient_clear_all() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    let rc = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sets the securebits.
pub(crate) fn set_securebits(bits: libc::c_int) -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    let rc = unsafe { libc::prctl(libc::PR_SET_SECUREBITS, bits as libc::c_ulong, 0, 0, 0) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Closes every fd from `first` up (used in a freshly forked child).
pub(crate) fn close_fds_from(first: libc::c_uint) -> io::Result<()> {
    // SAFETY: close_range only closes descriptors; the caller owns the whole
    // fd table of this freshly forked, single-threaded process.
    let rc = unsafe { libc::syscall(libc::SYS_close_range, first, libc::c_uint::MAX, 0) };
    check(rc).map(|_| ())
}

/// Closes every fd >= 3 except `keep`.
pub(crate) fn close_fds_except(keep: RawFd) -> io::Result<()> {
    let keep = keep as libc::c_uint;
    if keep > 3 {
        // SAFETY: as above; the helper is single-threaded and owns its fd table.
        let rc = unsafe { libc::syscall(libc::SYS_close_range, 3u32, keep - 1, 0) };
        check(rc)?;
    }
    // SAFETY: as above.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            keep.saturating_add(1).max(3),
            libc::c_uint::MAX,
            0,
        )
    };
    check(rc).map(|_| ())
}

/// The Landlock ABI version the kernel speaks (0 when Landlock is off).
pub(crate) fn landlock_abi() -> i64 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attr, size 0 and the VERSION flag the call only
    // returns an integer.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    rc.max(0)
}

/// Whether the kernel can install seccomp filters that kill the process.
pub(crate) fn seccomp_kill_process_available() -> bool {
    const SECCOMP_GET_ACTION_AVAIL: libc::c_uint = 2;
    let action: u32 = libc::SECCOMP_RET_KILL_PROCESS;
    // SAFETY: the kernel reads one u32 from the pointer, which is live.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_GET_ACTION_AVAIL,
            0,
            &action as *const u32,
        )
    };
    rc == 0
}

/// `setrlimit(resource, soft = hard = value)`.
pub(crate) fn set_rlimit(resource: libc::__rlimit_resource_t, value: u64) -> io::Result<()> {
    let lim = libc::rlimit {
        rlim_cur: value,
        rlim_max: value,
    };
    // SAFETY: the kernel reads the live `rlimit` struct.
    let rc = unsafe { libc::setrlimit(resource, &lim) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Wraps an owned fd for the tokio reactor.
pub(crate) fn async_fd(
    fd: OwnedFd,
    interest: tokio::io::Interest,
) -> io::Result<tokio::io::unix::AsyncFd<OwnedFd>> {
    // SAFETY: an OwnedFd stays open, and its as_raw_fd() returns the same
    // descriptor, for as long as the AsyncFd owns it.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, interest) }
        .map_err(|e| e.into_parts().1)
}

/// Whether `fd` is an open descriptor.
pub(crate) fn fd_is_open(fd: RawFd) -> bool {
    // SAFETY: F_GETFD only reads the descriptor flags; any integer is fine.
    unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
}

/// Sets FD_CLOEXEC on `fd`.
pub(crate) fn set_cloexec(fd: RawFd) -> io::Result<()> {
    // SAFETY: F_SETFD only changes this descriptor's flags.
    let rc = unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `dup2(old, new)` without taking ownership of either (a forked child
/// arranging its stdio).
pub(crate) fn dup2_raw(old: RawFd, new: RawFd) -> io::Result<()> {
    // SAFETY: dup2 only manipulates this process's fd table; the caller is a
    // freshly forked child that owns it entirely.
    let rc = unsafe { libc::dup2(old, new) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The birth time of `name` in `dir` (not following a final symlink), when
/// the filesystem records one: with the device and inode, it tells a
/// directory we made from another made since at a reused inode number.
pub(crate) fn birth_time_at(dir: BorrowedFd<'_>, name: &CStr) -> Option<(i64, u32)> {
    // SAFETY: `statx` is plain-old-data; all-zero is valid.
    let mut buf: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `name` is NUL-terminated, `buf` is a live `struct statx` the
    // kernel writes into; the fd is borrowed for the call.
    let rc = unsafe {
        libc::statx(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
            libc::STATX_BTIME,
            &mut buf,
        )
    };
    if rc != 0 || buf.stx_mask & libc::STATX_BTIME == 0 {
        return None;
    }
    Some((buf.stx_btime.tv_sec, buf.stx_btime.tv_nsec))
}
