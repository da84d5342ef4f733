//! The session's cgroups (supervisor side, root only): pids, memory and cpu.
//!
//! cgroup v1 (this host) puts each controller in its own hierarchy; v2 has
//! one. Either way the layout is `<hierarchy>/<parent>/<instance>/<session>`,
//! where `instance` is derived from the supervisor's state dir, so two
//! supervisors (or two test runs) never reap each other's cgroups.
//!
//! The supervisor creates the directories and writes the limits, then moves
//! the sandbox's pid 1 in while it sets itself up, and answers `Ready` only
//! once that is done: every command is forked inside. (Pid 1's cgroup
//! namespace is rooted at the supervisor's cgroup, so inside
//! /proc/self/cgroup shows `/<parent>/<instance>/<session>`.) A rootless supervisor cannot create
//! cgroups on this host; it relies on RLIMIT_NPROC (which then counts only
//! the sandbox's user namespace) and RLIMIT_DATA instead.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::Limits;

/// Where the controllers we use are mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Layout {
    V1 {
        pids: PathBuf,
        memory: PathBuf,
        cpu: Option<PathBuf>,
    },
    V2 {
        root: PathBuf,
        cpu: bool,
    },
}

impl Layout {
    pub(crate) fn describe(&self) -> String {
        match self {
            Layout::V1 { cpu, .. } => format!(
                "cgroup v1 pids+memory{}",
                if cpu.is_some() { "+cpu" } else { "" }
            ),
            Layout::V2 { cpu, .. } => {
                format!("cgroup v2 pids+memory{}", if *cpu { "+cpu" } else { "" })
            }
        }
    }

    /// The per-supervisor parent directories, one per hierarchy.
    pub(crate) fn instance_dirs(&self, parent: &str, instance: &str) -> Vec<PathBuf> {
        match self {
            Layout::V1 { pids, memory, cpu } => {
                let mut v = vec![
                    pids.join(parent).join(instance),
                    memory.join(parent).join(instance),
                ];
                if let Some(c) = cpu {
                    v.push(c.join(parent).join(instance));
                }
                v
            }
            Layout::V2 { root, .. } => vec![root.join(parent).join(instance)],
        }
    }
}

/// Finds the pids and memory controllers (and cpu, optional) in
/// /proc/self/mountinfo. None when either required one is missing.
pub(crate) fn detect() -> Option<Layout> {
    let info = fs::read_to_string("/proc/self/mountinfo").ok()?;
    let mut pids = None;
    let mut memory = None;
    let mut cpu = None;
    let mut v2 = None;
    for line in info.lines() {
        // ... mountpoint options - fstype source superoptions
        let (left, right) = line.split_once(" - ")?;
        let mountpoint = left.split(' ').nth(4)?;
        let mut r = right.split(' ');
        let fstype = r.next()?;
        let _source = r.next();
        let superopts = r.next().unwrap_or("");
        match fstype {
            "cgroup" => {
                let opts: Vec<&str> = superopts.split(',').collect();
                if opts.contains(&"pids") {
                    pids.get_or_insert_with(|| PathBuf::from(mountpoint));
                }
                if opts.contains(&"memory") {
                    memory.get_or_insert_with(|| PathBuf::from(mountpoint));
                }
                if opts.contains(&"cpu") {
                    cpu.get_or_insert_with(|| PathBuf::from(mountpoint));
                }
            }
            "cgroup2" => {
                v2.get_or_insert_with(|| PathBuf::from(mountpoint));
            }
            _ => {}
        }
    }
    if let (Some(pids), Some(memory)) = (pids, memory) {
        return Some(Layout::V1 { pids, memory, cpu });
    }
    let root = v2?;
    let controllers = fs::read_to_string(root.join("cgroup.controllers")).ok()?;
    let have: Vec<&str> = controllers.split_whitespace().collect();
    if have.contains(&"pids") && have.contains(&"memory") {
        let cpu = have.contains(&"cpu");
        let root = delegated_root(&root).unwrap_or(root);
        Some(Layout::V2 { root, cpu })
    } else {
        None
    }
}

/// The leaf a delegated supervisor moves itself into: cgroup v2 lets only
/// leaves hold processes once a cgroup enables controllers for its children.
const SELF_LEAF: &str = "supervisor";

/// cgroup v2 under systemd's `Delegate=yes` (docs/OPERATIONS.md, "The
/// unit"): the unit's own cgroup is the supervisor's to manage, and systemd
/// marks it with the `trusted.delegate` (a user manager: `user.delegate`)
/// extended attribute. Then sandboxes go beneath it, after the supervisor has
/// moved itself into its leaf. Without the mark (no systemd, no
/// `Delegate=yes`, cgroup v1) they go under the hierarchy's root as before.
fn delegated_root(v2_root: &Path) -> Option<PathBuf> {
    let own = fs::read_to_string("/proc/self/cgroup").ok()?;
    let unit = delegated_dir(v2_root, own_v2_path(&own)?, is_delegated)?;
    let leaf = unit.join(SELF_LEAF);
    mkdirs(&leaf).ok()?;
    write(&leaf.join("cgroup.procs"), &std::process::id().to_string()).ok()?;
    Some(unit)
}

/// The v2 line of /proc/self/cgroup (`0::/system.slice/tollgate.service`).
fn own_v2_path(proc_self_cgroup: &str) -> Option<&str> {
    proc_self_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|p| p.trim_start_matches('/'))
        .filter(|p| !p.is_empty())
}

/// The delegated cgroup this process runs in: its own, or the parent of its
/// own when it already moved itself into [`SELF_LEAF`] (a second detection).
fn delegated_dir(v2_root: &Path, own: &str, marked: impl Fn(&Path) -> bool) -> Option<PathBuf> {
    let dir = v2_root.join(own);
    if marked(&dir) {
        return Some(dir);
    }
    let parent = dir.parent()?;
    (dir.file_name()? == SELF_LEAF && marked(parent)).then(|| parent.to_path_buf())
}

/// systemd's delegation mark on a cgroup directory.
fn is_delegated(dir: &Path) -> bool {
    ["trusted.delegate", "user.delegate"].iter().any(|name| {
        let mut buf = [0u8; 8];
        matches!(rustix::fs::getxattr(dir, *name, &mut buf), Ok(n) if &buf[..n] == b"1")
    })
}

/// One sandbox's cgroup directories.
#[derive(Debug)]
pub(crate) struct CgroupSet {
    pub dirs: Vec<PathBuf>,
    /// Where the OOM-kill counter lives (v1 memory.oom_control, v2 memory.events).
    oom_file: PathBuf,
}

fn write(path: &Path, value: &str) -> io::Result<()> {
    fs::write(path, value).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("write {value:?} to {}: {e}", path.display()),
        )
    })
}

fn mkdirs(p: &Path) -> io::Result<()> {
    fs::create_dir_all(p)
        .map_err(|e| io::Error::new(e.kind(), format!("mkdir {}: {e}", p.display())))
}

impl CgroupSet {
    /// Creates the session's directories and writes its limits. Another
    /// supervisor that exits meanwhile may remove the shared parent between
    /// two of the steps: a step that finds its parent gone starts again.
    pub(crate) fn create(
        layout: &Layout,
        parent: &str,
        instance: &str,
        session: &str,
        limits: &Limits,
    ) -> io::Result<CgroupSet> {
        let mut tries = 0;
        loop {
            match CgroupSet::create_once(layout, parent, instance, session, limits) {
                Err(e) if e.kind() == io::ErrorKind::NotFound && tries < 3 => tries += 1,
                other => return other,
            }
        }
    }

    fn create_once(
        layout: &Layout,
        parent: &str,
        instance: &str,
        session: &str,
        limits: &Limits,
    ) -> io::Result<CgroupSet> {
        let mib = 1024 * 1024;
        let mem = limits.memory_mb.saturating_mul(mib);
        let mut made: Vec<PathBuf> = Vec::new();
        let result = (|| -> io::Result<CgroupSet> {
            match layout {
                Layout::V1 { pids, memory, cpu } => {
                    let p = pids.join(parent).join(instance).join(session);
                    mkdirs(&p)?;
                    made.push(p.clone());
                    write(&p.join("pids.max"), &limits.pids.to_string())?;
                    let m = memory.join(parent).join(instance).join(session);
                    mkdirs(&m)?;
                    made.push(m.clone());
                    write(&m.join("memory.limit_in_bytes"), &mem.to_string())?;
                    let memsw = m.join("memory.memsw.limit_in_bytes");
                    if memsw.exists() {
                        write(&memsw, &mem.to_string())?;
                    }
                    let swappiness = m.join("memory.swappiness");
                    if swappiness.exists() {
                        let _ = write(&swappiness, "0");
                    }
                    if let Some(c) = cpu {
                        let c = c.join(parent).join(instance).join(session);
                        mkdirs(&c)?;
                        made.push(c.clone());
                        if limits.cpus_millis > 0 {
                            write(&c.join("cpu.cfs_period_us"), "100000")?;
                            write(
                                &c.join("cpu.cfs_quota_us"),
                                &(limits.cpus_millis * 100).to_string(),
                            )?;
                        }
                    }
                    Ok(CgroupSet {
                        oom_file: m.join("memory.oom_control"),
                        dirs: made.clone(),
                    })
                }
                Layout::V2 { root, cpu } => {
                    let ctrls = if *cpu {
                        "+pids +memory +cpu"
                    } else {
                        "+pids +memory"
                    };
                    let top = root.join(parent);
                    mkdirs(&top)?;
                    let _ = write(&root.join("cgroup.subtree_control"), ctrls);
                    write(&top.join("cgroup.subtree_control"), ctrls)?;
                    let inst = top.join(instance);
                    mkdirs(&inst)?;
                    write(&inst.join("cgroup.subtree_control"), ctrls)?;
                    let d = inst.join(session);
                    mkdirs(&d)?;
                    made.push(d.clone());
                    write(&d.join("pids.max"), &limits.pids.to_string())?;
                    write(&d.join("memory.max"), &mem.to_string())?;
                    let _ = write(&d.join("memory.swap.max"), "0");
                    if *cpu && limits.cpus_millis > 0 {
                        write(
                            &d.join("cpu.max"),
                            &format!("{} 100000", limits.cpus_millis * 100),
                        )?;
                    }
                    Ok(CgroupSet {
                        oom_file: d.join("memory.events"),
                        dirs: made.clone(),
                    })
                }
            }
        })();
        if result.is_err() {
            for d in made.iter().rev() {
                let _ = fs::remove_dir(d);
            }
        }
        result
    }

    /// How many processes the memory controller has OOM-killed so far.
    pub(crate) fn oom_kills(&self) -> u64 {
        fs::read_to_string(&self.oom_file)
            .ok()
            .and_then(|s| {
                s.lines().find_map(|l| {
                    l.strip_prefix("oom_kill ")
                        .and_then(|v| v.trim().parse().ok())
                })
            })
            .unwrap_or(0)
    }

    /// Removes the directories once every process in them is gone.
    pub(crate) async fn remove(&self) -> io::Result<()> {
        remove_dirs(&self.dirs).await
    }
}

/// Moves `pid` (the sandbox's pid 1, before it forks any command) into
/// every directory: one thread per hierarchy, so their RCU grace periods
/// overlap instead of adding up.
pub(crate) fn join_dirs(dirs: &[PathBuf], pid: i32) -> io::Result<()> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = dirs
            .iter()
            .map(|d| scope.spawn(move || write(&d.join("cgroup.procs"), &pid.to_string())))
            .collect();
        for h in handles {
            h.join()
                .map_err(|_| io::Error::other("cgroup join thread panicked"))??;
        }
        Ok(())
    })
}

/// rmdir each directory, retrying briefly while the kernel finishes
/// releasing the last tasks.
pub(crate) async fn remove_dirs(dirs: &[PathBuf]) -> io::Result<()> {
    for d in dirs {
        let mut tries = 0;
        loop {
            match fs::remove_dir(d) {
                Ok(()) => break,
                Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) && tries < 200 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("rmdir {}: {e}", d.display()),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// At a clean exit: removes this supervisor's instance directories (empty
/// once every sandbox was destroyed), then the shared parent if no other
/// supervisor uses it. Returns what could not be removed.
pub(crate) async fn remove_instance(instance_dirs: &[PathBuf]) -> Vec<String> {
    let mut left = Vec::new();
    for d in instance_dirs {
        if let Err(e) = remove_dirs(std::slice::from_ref(d)).await {
            left.push(e.to_string());
            continue;
        }
        // Not empty (another supervisor's instance is in it) is expected.
        if let Some(parent) = d.parent() {
            let _ = fs::remove_dir(parent);
        }
    }
    left
}

/// The pids listed in a cgroup directory.
pub(crate) fn procs(dir: &Path) -> Vec<i32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_own_v2_path_is_read_from_the_unified_line() {
        let hybrid = "12:pids:/system.slice/x.service\n0::/system.slice/tollgate.service\n";
        assert_eq!(own_v2_path(hybrid), Some("system.slice/tollgate.service"));
        assert_eq!(own_v2_path("0::/\n"), None);
        assert_eq!(own_v2_path("4:memory:/x\n"), None);
    }

    #[test]
    fn a_delegated_unit_is_the_root_before_and_after_the_move_into_the_leaf() {
        let root = Path::new("/sys/fs/cgroup");
        let unit = root.join("system.slice/tollgate.service");
        let marked = |d: &Path| d == unit;
        let own = "system.slice/tollgate.service";
        assert_eq!(delegated_dir(root, own, marked), Some(unit.clone()));
        let moved = "system.slice/tollgate.service/supervisor";
        assert_eq!(delegated_dir(root, moved, marked), Some(unit.clone()));
        // Another leaf name under the unit, or an unmarked cgroup, is not ours.
        assert_eq!(
            delegated_dir(root, "system.slice/tollgate.service/other", marked),
            None
        );
        assert_eq!(
            delegated_dir(root, "user.slice/session-1.scope", marked),
            None
        );
    }

    #[test]
    fn an_unmarked_directory_is_not_delegated() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!is_delegated(dir.path()));
    }
}
