//! Step 3: the sandbox's filesystem, built from nothing.
//!
//! Not "all of / read-only": the root is a fresh tmpfs holding only
//!
//! - the system directories programs need ([`SYSTEM_DIRS`], including the
//!   whole of /etc), bound read-only, nosuid, nodev. Landlock then narrows
//!   /etc entry by entry (no shadow, sudoers, host keys, ...);
//! - a fresh /proc of the sandbox's pid namespace, with /proc/sys,
//!   /proc/sysrq-trigger & co read-only and kcore, keys, kallsyms & co masked;
//! - a minimal /dev (null, zero, full, random, urandom, tty, a private devpts
//!   and /dev/shm), /sys/devices/system/cpu read-only (CPU counts);
//! - a private, size-limited /tmp (and /var/tmp -> /tmp), an empty /run;
//!   when the workspace lives beneath /var/tmp or /var/run, that one is a
//!   real directory instead of the symlink, so the workspace attaches at
//!   its own path;
//! - the workspace, read-write at its own path; what the host runs by
//!   itself in it (`.git`, `.envrc`, `.vscode`, ..., decided on the host by
//!   [`crate::host_exec::plan`]) read-only, and the directories above such
//!   a path below the top pinned (attached onto themselves, so that they
//!   cannot be renamed away).
//!
//! Home directories, /root, the host's /proc, /run (docker.sock, D-Bus,
//! ssh-agent, the supervisor's sockets), /var and everything else are not
//! there at all. That matters because Landlock (ABI < 9) does not see
//! `connect()` to a pathname socket and never covers chmod/chown/utime:
//! what is not mounted cannot be reached, and what is mounted is read-only
//! except the workspace and the private tmpfs.
//!
//! The workspace and the protected paths are taken by file descriptor with
//! `RESOLVE_NO_SYMLINKS` and attached with `move_mount`, so a symlink swapped
//! into the user's tree cannot redirect a bind.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Component, Path, PathBuf};

use nix::mount::{MntFlags, MsFlags, mount, umount2};

use super::SetupError;
use super::sys;
use crate::host_exec::{Bind, BindHow};

/// Top-level host directories bound read-only (symlinks are copied as
/// symlinks, missing ones skipped).
pub(crate) const SYSTEM_DIRS: &[&str] = &[
    "usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "opt", "etc",
];
/// Device nodes bound from the host's /dev.
pub(crate) const DEV_NODES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];
/// /proc entries made read-only.
const PROC_READONLY: &[&str] = &["sys", "sysrq-trigger", "irq", "bus", "fs"];
/// /proc entries masked with /dev/null.
const PROC_MASKED: &[&str] = &[
    "kcore",
    "kmsg",
    "kallsyms",
    "keys",
    "key-users",
    "timer_list",
    "sched_debug",
    "latency_stats",
    "kpagecount",
    "kpageflags",
    "kpagecgroup",
];
/// Where the new root is assembled (a tmpfs over the host's /tmp, in our
/// private mount namespace only).
const NEW_ROOT: &str = "/tmp";

pub(super) const RESOLVE_NO_SYMLINKS: u64 = 0x04;
pub(super) const RESOLVE_BENEATH: u64 = 0x08;
const RESOLVE_IN_ROOT: u64 = 0x10;

pub(crate) struct MountPlan<'a> {
    pub workspace: &'a Path,
    /// When given, the directory opened at `workspace` must be this one.
    pub workspace_id: Option<crate::WorkspaceId>,
    pub hidden: &'a [PathBuf],
    pub tmp_mb: u64,
    /// Workspace paths to attach read-only or pin, parents first.
    pub binds: &'a [Bind],
    pub rootless: bool,
    /// The whole `/etc/hosts` the sandbox sees, when it has forwarded
    /// egress (names → the listeners' addresses); the host's otherwise.
    pub hosts: Option<String>,
    /// The private home ([`super::home`]) and its owner (uid, gid).
    pub home: Option<(&'a crate::PrivateHome, (u32, u32))>,
    /// The whole `/etc/resolv.conf`, when the network wall serves its DNS
    /// stub in the sandbox (`crate::wall`); the host's otherwise.
    pub resolv: Option<String>,
    /// A CA added to `/etc/ssl/certs/ca-certificates.crt` (the session's,
    /// when it has secrets): the host's bundle and it stand in for it.
    pub extra_ca: Option<String>,
}

pub(super) fn err(
    step: &'static str,
    what: impl std::fmt::Display,
    e: impl std::fmt::Display,
) -> SetupError {
    SetupError {
        step,
        detail: format!("{what}: {e}"),
    }
}

pub(super) fn cpath(p: &Path) -> Result<CString, SetupError> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| err("mounts", p.display(), "path contains a NUL byte"))
}

pub(super) fn tmpfs(target: &Path, flags: MsFlags, data: &str) -> Result<(), SetupError> {
    mount(Some("tmpfs"), target, Some("tmpfs"), flags, Some(data))
        .map_err(|e| err("mounts", format!("mount tmpfs on {}", target.display()), e))
}

/// Bind `src` on `dst` (recursively) and make it read-only, nosuid, nodev.
fn bind_ro(src: &Path, dst: &Path) -> Result<(), SetupError> {
    mount(
        Some(src),
        dst,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|e| {
        err(
            "mounts",
            format!("bind {} on {}", src.display(), dst.display()),
            e,
        )
    })?;
    sys::mount_setattr_path(
        &cpath(dst)?,
        sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV,
        0,
        true,
    )
    .map_err(|e| err("mounts", format!("make {} read-only", dst.display()), e))
}

/// Binds a file holding `text` read-only over the new root's `etc_name`
/// (`hosts`: the egress names; `resolv.conf`: the wall's DNS stub), then
/// removes the file from the root (the mount keeps it).
fn stand_in(new: &Path, etc_name: &str, text: &str) -> Result<(), SetupError> {
    let dst = new.join("etc").join(etc_name);
    // A symlink would be followed in the host's view: not stood in for.
    if !fs::symlink_metadata(&dst).is_ok_and(|m| m.file_type().is_file()) {
        return Err(err(
            "mounts",
            format!("/etc/{etc_name}"),
            "the host has no plain file there for the sandbox's own to stand in for",
        ));
    }
    let src = new.join(format!(".tollgate-{}", etc_name.replace('/', "-")));
    fs::write(&src, text).map_err(|e| err("mounts", format!("write {}", src.display()), e))?;
    bind_ro(&src, &dst)?;
    fs::remove_file(&src).map_err(|e| err("mounts", format!("remove {}", src.display()), e))
}

fn mkdir(p: &Path, mode: u32) -> Result<(), SetupError> {
    match fs::DirBuilder::new().mode(mode).create(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(err("mounts", format!("mkdir {}", p.display()), e)),
    }
}

fn symlink(target: &str, link: &Path) -> Result<(), SetupError> {
    std::os::unix::fs::symlink(target, link).map_err(|e| {
        err(
            "mounts",
            format!("symlink {} -> {target}", link.display()),
            e,
        )
    })
}

fn open_dir_nofollow(dirfd: i32, rel: &Path, resolve: u64) -> io::Result<OwnedFd> {
    let c = CString::new(rel.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))?;
    sys::openat2_path(dirfd, &c, libc::O_NOFOLLOW, resolve)
}

/// Walks `rel` beneath `root`, creating missing directories (mode 0755), and
/// returns an `O_PATH` fd of the last one. Refuses symlinks on the way.
pub(super) fn ensure_dirs(root: &OwnedFd, rel: &Path) -> Result<OwnedFd, SetupError> {
    let mut cur = root
        .try_clone()
        .map_err(|e| err("mounts", "dup root fd", e))?;
    let mut at = PathBuf::from("/");
    for comp in rel.components() {
        let name = match comp {
            Component::Normal(n) => n,
            Component::RootDir | Component::CurDir => continue,
            Component::ParentDir | Component::Prefix(_) => {
                return Err(err("mounts", rel.display(), "path is not normalised"));
            }
        };
        let name_path = Path::new(name);
        at.push(name);
        let next = match open_dir_nofollow(
            cur.as_raw_fd(),
            name_path,
            RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS,
        ) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                nix::sys::stat::mkdirat(
                    cur.as_fd(),
                    name_path,
                    nix::sys::stat::Mode::from_bits_truncate(0o755),
                )
                .map_err(|e| {
                    err(
                        "mounts",
                        format!("mkdir {} in the sandbox", at.display()),
                        e,
                    )
                })?;
                open_dir_nofollow(
                    cur.as_raw_fd(),
                    name_path,
                    RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS,
                )
                .map_err(|e| err("mounts", format!("open {} in the sandbox", at.display()), e))?
            }
            Err(e) => {
                return Err(err(
                    "mounts",
                    format!(
                        "mount point /{} in the sandbox, at {}",
                        rel.display(),
                        at.display()
                    ),
                    e,
                ));
            }
        };
        cur = next;
    }
    Ok(cur)
}

pub(super) fn rel_of(p: &Path) -> &Path {
    p.strip_prefix("/").unwrap_or(p)
}

/// Builds the new root and pivots into it. Runs as (namespace) root in the
/// new mount namespace, before any privilege is dropped. The steps run in
/// this order, and the order matters: the workspace is taken by fd before
/// /tmp is covered, everything is mounted beneath the new root before the
/// hidden paths are masked, and / and /dev turn read-only only after the
/// pivot.
pub(crate) fn build_root(plan: &MountPlan<'_>) -> Result<(), SetupError> {
    make_mounts_private()?;
    let taken = take_workspace(plan)?;
    // The package cache, from the host before /tmp is covered (the state
    // directory may live there).
    let cache = match plan.home {
        Some((h, (uid, _))) => match h.cache.as_deref() {
            Some(dir) => Some(super::home::take_cache(dir, uid)?),
            None => None,
        },
        None => None,
    };
    let new = Path::new(NEW_ROOT);
    tmpfs(
        new,
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        "mode=0755,size=1m",
    )?;
    bind_system_dirs(new)?;
    if let Some(text) = &plan.hosts {
        // --allow-net: the forwarded names, over the host's /etc/hosts.
        stand_in(new, "hosts", text)?;
    }
    if let Some(text) = &plan.resolv {
        // The network wall: the DNS stub, over the host's resolv.conf.
        stand_in(new, "resolv.conf", text)?;
    }
    if let Some(pem) = &plan.extra_ca {
        // [[secrets]]: the session's CA beside the host's.
        let name = "ssl/certs/ca-certificates.crt";
        let host = new.join("etc").join(name);
        let mut text = fs::read_to_string(&host)
            .map_err(|e| err("mounts", format!("read {}", host.display()), e))?;
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(pem);
        stand_in(new, name, &text)?;
    }
    build_dev(new, plan)?;
    mount_proc(new)?;
    make_tmp_and_run(new, plan)?;
    if let Some((home, owner)) = plan.home {
        // Before the workspace, which may lie in it.
        super::home::build(new, home, owner, plan.tmp_mb, cache)?;
    }
    let new_root_fd = attach_workspace(new, plan, taken.tree, taken.binds)?;
    mask_hidden_paths(new, &new_root_fd, plan)?;
    pivot_into(new)?;
    // The host fds stay open until the pivot is done, as they always did.
    drop(taken.held);
    Ok(())
}

/// Nothing we do may propagate back to the host.
fn make_mounts_private() -> Result<(), SetupError> {
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| err("mounts", "make / private", e))
}

/// What [`take_workspace`] took from the host, before anything covered it.
struct TakenWorkspace {
    /// The host's / and the workspace, by fd (held until the pivot).
    held: [OwnedFd; 2],
    /// The workspace's detached mount tree, nosuid and nodev.
    tree: OwnedFd,
    /// The protected paths' detached trees, in the order of `plan.binds`.
    binds: Vec<OwnedFd>,
}

/// Takes the workspace by fd before /tmp is covered (it may live there),
/// checks it is the directory the session was opened on, and clones it and
/// the paths to protect in it as detached mount trees.
fn take_workspace(plan: &MountPlan<'_>) -> Result<TakenWorkspace, SetupError> {
    let host_root = sys::openat2_path(libc::AT_FDCWD, c"/", libc::O_DIRECTORY, 0)
        .map_err(|e| err("mounts", "open /", e))?;
    let ws_src = open_dir_nofollow(
        host_root.as_raw_fd(),
        rel_of(plan.workspace),
        RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS,
    )
    .map_err(|e| {
        err(
            "mounts",
            format!("workspace {}", plan.workspace.display()),
            format!("{e} (it must be a directory reached without symlinks)"),
        )
    })?;
    check_workspace_fd(&ws_src, plan)?;
    let ws_tree = sys::open_tree_clone(ws_src.as_fd(), true)
        .map_err(|e| err("mounts", "clone workspace", e))?;
    sys::mount_setattr_fd(
        ws_tree.as_fd(),
        sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV,
        0,
        true,
    )
    .map_err(|e| err("mounts", "workspace nosuid,nodev", e))?;
    let binds = clone_binds(&ws_src, plan)?;
    Ok(TakenWorkspace {
        held: [host_root, ws_src],
        tree: ws_tree,
        binds,
    })
}

/// O_PATH|O_NOFOLLOW hands back a trailing symlink itself: refuse it; and
/// when the session pinned the workspace's identity, refuse a replaced one.
fn check_workspace_fd(ws_src: &OwnedFd, plan: &MountPlan<'_>) -> Result<(), SetupError> {
    let st = nix::sys::stat::fstat(ws_src).map_err(|e| {
        err(
            "mounts",
            format!("workspace {}", plan.workspace.display()),
            e,
        )
    })?;
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return Err(err(
            "mounts",
            format!("workspace {}", plan.workspace.display()),
            "not a directory reached without symlinks (it is a symlink or a file)",
        ));
    }
    if let Some(want) = plan.workspace_id {
        let st = nix::sys::stat::fstat(ws_src).map_err(|e| {
            err(
                "mounts",
                format!("workspace {}", plan.workspace.display()),
                e,
            )
        })?;
        if crate::WorkspaceId::from_pair((st.st_dev, st.st_ino)) != want {
            return Err(SetupError {
                step: "mounts",
                detail: crate::replaced(plan.workspace),
            });
        }
    }
    Ok(())
}

/// System directories, read-only (symlinks copied as symlinks, missing ones
/// skipped), and /sys/devices/system/cpu read-only (CPU counts).
fn bind_system_dirs(new: &Path) -> Result<(), SetupError> {
    for name in SYSTEM_DIRS {
        let host = Path::new("/").join(name);
        let dst = new.join(name);
        let meta = match fs::symlink_metadata(&host) {
            Ok(m) => m,
            Err(_) => continue,
        };
        if meta.file_type().is_symlink() {
            let target = fs::read_link(&host)
                .map_err(|e| err("mounts", format!("readlink {}", host.display()), e))?;
            let target = target
                .to_str()
                .ok_or_else(|| err("mounts", host.display(), "symlink target is not UTF-8"))?
                .to_string();
            symlink(&target, &dst)?;
        } else if meta.is_dir() {
            mkdir(&dst, 0o755)?;
            bind_ro(&host, &dst)?;
        }
    }
    let cpu = Path::new("/sys/devices/system/cpu");
    if cpu.is_dir() {
        let dst = new.join("sys/devices/system/cpu");
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&dst)
            .map_err(|e| err("mounts", format!("mkdir {}", dst.display()), e))?;
        bind_ro(cpu, &dst)?;
    }
    Ok(())
}

/// A minimal /dev: a small tmpfs, the device nodes, the usual links, a
/// private devpts and /dev/shm.
fn build_dev(new: &Path, plan: &MountPlan<'_>) -> Result<(), SetupError> {
    let dev = new.join("dev");
    mkdir(&dev, 0o755)?;
    tmpfs(
        &dev,
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        "mode=0755,size=64k",
    )?;
    bind_dev_nodes(&dev)?;
    for (name, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("ptmx", "pts/ptmx"),
    ] {
        symlink(target, &dev.join(name))?;
    }
    mount_devpts(&dev, plan.rootless)?;
    let shm = dev.join("shm");
    mkdir(&shm, 0o755)?;
    tmpfs(
        &shm,
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        &format!("mode=1777,size={}m", plan.tmp_mb.max(1)),
    )
}

/// [`DEV_NODES`] bound from the host's /dev.
fn bind_dev_nodes(dev: &Path) -> Result<(), SetupError> {
    for node in DEV_NODES {
        let host = Path::new("/dev").join(node);
        if !host.exists() {
            continue;
        }
        let dst = dev.join(node);
        fs::File::create(&dst)
            .map_err(|e| err("mounts", format!("create {}", dst.display()), e))?;
        mount(
            Some(&host),
            &dst,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(|e| err("mounts", format!("bind {}", host.display()), e))?;
        // Read-only: writes to a device still work, but a uid-0 sandbox
        // cannot chmod or touch the host's device inode.
        sys::mount_setattr_path(
            &cpath(&dst)?,
            sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NOEXEC,
            sys::MOUNT_ATTR_NODEV,
            false,
        )
        .map_err(|e| err("mounts", format!("flags of {}", dst.display()), e))?;
    }
    Ok(())
}

/// A private devpts instance (owned by gid 5, tty, unless rootless).
fn mount_devpts(dev: &Path, rootless: bool) -> Result<(), SetupError> {
    let pts = dev.join("pts");
    mkdir(&pts, 0o755)?;
    let pts_opts = if rootless {
        "newinstance,ptmxmode=0666,mode=0620"
    } else {
        "newinstance,ptmxmode=0666,mode=0620,gid=5"
    };
    mount(
        Some("devpts"),
        &pts,
        Some("devpts"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some(pts_opts),
    )
    .map_err(|e| err("mounts", "mount devpts", e))
}

/// /proc of the new pid namespace, [`PROC_READONLY`] read-only and
/// [`PROC_MASKED`] covered with /dev/null.
fn mount_proc(new: &Path) -> Result<(), SetupError> {
    let proc_dir = new.join("proc");
    mkdir(&proc_dir, 0o555)?;
    mount(
        Some("proc"),
        &proc_dir,
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(|e| err("mounts", "mount proc", e))?;
    for name in PROC_READONLY {
        let p = proc_dir.join(name);
        if p.exists() {
            bind_ro(&p, &p)?;
        }
    }
    let null = new.join("dev").join("null");
    for name in PROC_MASKED {
        let p = proc_dir.join(name);
        if p.exists() {
            bind_ro(&null, &p)?;
        }
    }
    Ok(())
}

/// Private /tmp, /var/tmp, empty /run.
fn make_tmp_and_run(new: &Path, plan: &MountPlan<'_>) -> Result<(), SetupError> {
    let tmp = new.join("tmp");
    mkdir(&tmp, 0o1777)?;
    tmpfs(
        &tmp,
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        &format!("mode=1777,size={}m", plan.tmp_mb.max(1)),
    )?;
    mkdir(&new.join("var"), 0o755)?;
    mkdir(&new.join("run"), 0o755)?;
    // /var/tmp and /var/run are symlinks to /tmp and /run, unless the
    // workspace lives beneath one of them: then a real directory (/var/tmp
    // a private tmpfs of its own), so the workspace attaches at its own path.
    if plan.workspace.starts_with("/var/tmp") {
        let vt = new.join("var/tmp");
        mkdir(&vt, 0o1777)?;
        tmpfs(
            &vt,
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            &format!("mode=1777,size={}m", plan.tmp_mb.max(1)),
        )?;
    } else {
        symlink("/tmp", &new.join("var/tmp"))?;
    }
    if plan.workspace.starts_with("/var/run") {
        mkdir(&new.join("var/run"), 0o755)?;
    } else {
        symlink("/run", &new.join("var/run"))?;
    }
    Ok(())
}

/// The workspace, at its own path, then the protected paths in it. Returns
/// the new root's fd, through which the hidden paths are looked up.
fn attach_workspace(
    new: &Path,
    plan: &MountPlan<'_>,
    ws_tree: OwnedFd,
    bind_trees: Vec<OwnedFd>,
) -> Result<OwnedFd, SetupError> {
    let new_root_fd = sys::openat2_path(libc::AT_FDCWD, &cpath(new)?, libc::O_DIRECTORY, 0)
        .map_err(|e| err("mounts", "open new root", e))?;
    let ws_target = ensure_dirs(&new_root_fd, rel_of(plan.workspace))?;
    sys::move_mount_fd(ws_tree.as_fd(), ws_target.as_fd()).map_err(|e| {
        err(
            "mounts",
            format!("attach workspace {}", plan.workspace.display()),
            e,
        )
    })?;
    drop(ws_target);
    attach_binds(&new_root_fd, plan, bind_trees)?;
    Ok(new_root_fd)
}

/// Mask hidden paths that would otherwise be visible (say, a config file
/// under /etc, a credential file in a home beneath /opt). Looked up as
/// the sandbox will see them.
fn mask_hidden_paths(
    new: &Path,
    new_root_fd: &OwnedFd,
    plan: &MountPlan<'_>,
) -> Result<(), SetupError> {
    let mask = MaskFile::create(new)?;
    for h in plan.hidden {
        mask_hidden(new_root_fd, h, &mask)?;
    }
    mask.remove()
}

/// Pivot: the old root is stacked on top of the new one, then detached;
/// then / and /dev become read-only.
fn pivot_into(new: &Path) -> Result<(), SetupError> {
    nix::unistd::chdir(new).map_err(|e| err("pivot_root", "chdir new root", e))?;
    nix::unistd::pivot_root(".", ".").map_err(|e| err("pivot_root", "pivot_root(., .)", e))?;
    umount2(".", MntFlags::MNT_DETACH).map_err(|e| err("pivot_root", "detach old root", e))?;
    nix::unistd::chdir("/").map_err(|e| err("pivot_root", "chdir /", e))?;
    for p in [c"/dev", c"/"] {
        sys::mount_setattr_path(p, sys::MOUNT_ATTR_RDONLY, 0, false).map_err(|e| {
            err(
                "pivot_root",
                format!("{} read-only", p.to_string_lossy()),
                e,
            )
        })?;
    }
    Ok(())
}

/// Takes every path to protect from the host's workspace, before anything
/// covers it: by fd, beneath the workspace, refusing symlinks (the planned
/// path was checked on the host, but the workspace is hostile and may have
/// changed since). Read-only ones are made read-only now.
fn clone_binds(ws_src: &OwnedFd, plan: &MountPlan<'_>) -> Result<Vec<OwnedFd>, SetupError> {
    let mut trees = Vec::with_capacity(plan.binds.len());
    for b in plan.binds {
        let shown = plan.workspace.join(&b.rel);
        let fd = sys::openat2_path(
            ws_src.as_raw_fd(),
            &cpath(&b.rel)?,
            libc::O_NOFOLLOW,
            RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS,
        )
        .map_err(|e| {
            err(
                "mounts",
                format!("open {}", shown.display()),
                format!("{e} (it must exist and be reached without symlinks)"),
            )
        })?;
        let st = nix::sys::stat::fstat(fd.as_fd())
            .map_err(|e| err("mounts", format!("stat {}", shown.display()), e))?;
        let kind = st.st_mode & libc::S_IFMT;
        if kind != libc::S_IFDIR && kind != libc::S_IFREG {
            let what = if kind == libc::S_IFLNK {
                "a symlink (it changed since it was checked); refusing to start"
            } else {
                "not a regular file or directory; refusing to start"
            };
            return Err(err("mounts", shown.display(), what));
        }
        let tree = sys::open_tree_clone(fd.as_fd(), true)
            .map_err(|e| err("mounts", format!("clone {}", shown.display()), e))?;
        let attrs = match b.how {
            BindHow::ReadOnly => {
                sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV
            }
            BindHow::Pin => sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV,
        };
        sys::mount_setattr_fd(tree.as_fd(), attrs, 0, true)
            .map_err(|e| err("mounts", format!("flags of {}", shown.display()), e))?;
        trees.push(tree);
    }
    Ok(trees)
}

/// Attaches what [`clone_binds`] took onto the same paths of the attached
/// workspace, parents first (a child is looked up through its parent's new
/// mount). Each becomes a mount point: not renamable, removable or
/// replaceable from inside.
fn attach_binds(
    new_root: &OwnedFd,
    plan: &MountPlan<'_>,
    trees: Vec<OwnedFd>,
) -> Result<(), SetupError> {
    if trees.is_empty() {
        return Ok(());
    }
    let ws_root = open_dir_nofollow(
        new_root.as_raw_fd(),
        rel_of(plan.workspace),
        RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS,
    )
    .map_err(|e| {
        err(
            "mounts",
            format!("open attached workspace {}", plan.workspace.display()),
            e,
        )
    })?;
    for (b, tree) in plan.binds.iter().zip(trees) {
        let shown = plan.workspace.join(&b.rel);
        let target = sys::openat2_path(
            ws_root.as_raw_fd(),
            &cpath(&b.rel)?,
            libc::O_NOFOLLOW,
            RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS,
        )
        .map_err(|e| err("mounts", format!("mount point {}", shown.display()), e))?;
        sys::move_mount_fd(tree.as_fd(), target.as_fd())
            .map_err(|e| err("mounts", format!("attach {}", shown.display()), e))?;
    }
    Ok(())
}

/// What a hidden file is replaced with: an empty file of mode 000 on a
/// tmpfs of its own, which no Landlock rule grants, so opening it fails
/// (EACCES) as opening the hidden file should; attached read-only, so it
/// cannot be chmodded or written either. Lives beneath the new root only
/// while the masks are made.
struct MaskFile {
    dir: PathBuf,
    file: PathBuf,
}

impl MaskFile {
    fn create(new_root: &Path) -> Result<MaskFile, SetupError> {
        let dir = new_root.join(".tollgate-mask");
        mkdir(&dir, 0o700)?;
        tmpfs(
            &dir,
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            "mode=0700,size=4k",
        )?;
        let file = dir.join("hidden");
        fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&file)
            .map_err(|e| err("mounts", format!("create {}", file.display()), e))?;
        fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o000))
            .map_err(|e| err("mounts", format!("chmod {}", file.display()), e))?;
        Ok(MaskFile { dir, file })
    }

    /// Detaches its tmpfs (the masks made from it stay) and removes the
    /// directory, so nothing of it is left in the sandbox's root.
    fn remove(self) -> Result<(), SetupError> {
        umount2(&self.dir, MntFlags::MNT_DETACH)
            .map_err(|e| err("mounts", format!("detach {}", self.dir.display()), e))?;
        fs::remove_dir(&self.dir)
            .map_err(|e| err("mounts", format!("remove {}", self.dir.display()), e))
    }
}

fn mask_hidden(root: &OwnedFd, h: &Path, mask: &MaskFile) -> Result<(), SetupError> {
    let rel = rel_of(h);
    if rel.as_os_str().is_empty() {
        return Ok(());
    }
    let c = cpath(rel)?;
    let fd = match sys::openat2_path(root.as_raw_fd(), &c, libc::O_NOFOLLOW, RESOLVE_IN_ROOT) {
        Ok(fd) => fd,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ENOTDIR)) => {
            return Ok(());
        }
        Err(e) => return Err(err("mounts", format!("hidden path {}", h.display()), e)),
    };
    let st = nix::sys::stat::fstat(fd.as_fd())
        .map_err(|e| err("mounts", format!("stat hidden path {}", h.display()), e))?;
    if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
        let target = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
        tmpfs(
            &target,
            MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            "mode=000,size=4k",
        )
    } else if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
        // A symlink itself cannot be a mount point; what it points to is
        // either masked on its own or not visible.
        Ok(())
    } else {
        // A read-only clone of the mask file, attached by fd on the exact
        // object (a file, a socket, a device node).
        let src = sys::openat2_path(libc::AT_FDCWD, &cpath(&mask.file)?, libc::O_NOFOLLOW, 0)
            .map_err(|e| err("mounts", format!("open {}", mask.file.display()), e))?;
        let tree = sys::open_tree_clone(src.as_fd(), false)
            .map_err(|e| err("mounts", "clone the mask file", e))?;
        sys::mount_setattr_fd(
            tree.as_fd(),
            sys::MOUNT_ATTR_RDONLY
                | sys::MOUNT_ATTR_NOSUID
                | sys::MOUNT_ATTR_NODEV
                | sys::MOUNT_ATTR_NOEXEC,
            0,
            false,
        )
        .map_err(|e| err("mounts", "mask file clone read-only", e))?;
        sys::move_mount_fd(tree.as_fd(), fd.as_fd())
            .map_err(|e| err("mounts", format!("mask hidden path {}", h.display()), e))
    }
}

/// Whether a path lies inside the sandbox's writable or system view (used by
/// the supervisor to refuse hidden paths inside the workspace).
pub(crate) fn is_within(child: &Path, parent: &Path) -> bool {
    child.starts_with(parent)
}

/// True for names that are only `/`-separated normal components.
pub(crate) fn is_normal_absolute(p: &Path) -> bool {
    p.is_absolute()
        && p.components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
}
