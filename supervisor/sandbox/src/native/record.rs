//! State records of live sandboxes, for reaping after a supervisor crash.
//!
//! `state_dir/sandboxes/<session>.json` holds the host pids of the helper and
//! of pid 1 with their start times (field 22 of /proc/<pid>/stat), and the
//! cgroup directories. It is written when a sandbox is up and removed when it
//! is destroyed. A pid is only ever killed when its start time still matches
//! (pids get reused), and then through a pidfd.

use std::fs;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::cgroup;
use super::sys;
use crate::Reaped;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Record {
    pub session: String,
    pub init_pid: i32,
    pub init_start: u64,
    pub helper_pid: i32,
    pub helper_start: u64,
    pub cgroups: Vec<PathBuf>,
}

pub(crate) fn dir(state_dir: &Path) -> PathBuf {
    state_dir.join("sandboxes")
}

/// Start time of `pid` in clock ticks since boot, if it is alive.
pub(crate) fn start_time(pid: i32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain anything: split
    // after the last ')'. Field 22 overall is field 20 after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Writes the record atomically (temp file, then rename).
pub(crate) fn write(state_dir: &Path, rec: &Record) -> io::Result<PathBuf> {
    let d = dir(state_dir);
    fs::create_dir_all(&d)?;
    let path = d.join(format!("{}.json", rec.session));
    let tmp = d.join(format!(".{}.json.tmp", rec.session));
    let body = serde_json::to_vec_pretty(rec).map_err(io::Error::other)?;
    fs::write(&tmp, body)?;
    fs::rename(&tmp, &path)?;
    Ok(path)
}

/// Kills `pid` if its start time still matches, and waits (bounded) for it.
async fn kill_if_same(pid: i32, start: u64) -> Option<String> {
    if pid <= 0 || start_time(pid) != Some(start) {
        return None;
    }
    let fd = sys::pidfd_open(pid).ok()?;
    // Re-check through the pidfd's lifetime: the pidfd now pins this process.
    if start_time(pid) != Some(start) {
        return None;
    }
    let _ = sys::pidfd_send_signal(fd.as_fd(), libc::SIGKILL);
    if let Ok(afd) = sys::async_fd(fd, tokio::io::Interest::READABLE) {
        let _ = tokio::time::timeout(Duration::from_secs(5), afd.readable()).await;
    }
    Some(format!("killed pid {pid}"))
}

async fn kill_cgroup_members(dirs: &[PathBuf]) -> usize {
    let mut n = 0;
    for d in dirs {
        for pid in cgroup::procs(d) {
            if let Some(start) = start_time(pid)
                && kill_if_same(pid, start).await.is_some()
            {
                n += 1;
            }
        }
    }
    n
}

/// Reaps every recorded sandbox, then any cgroup directory of this
/// supervisor instance with no record.
pub(crate) async fn reap(state_dir: &Path, instance_dirs: &[PathBuf]) -> Vec<Reaped> {
    let mut out = Vec::new();
    let mut recorded: Vec<PathBuf> = Vec::new();
    let d = dir(state_dir);
    let entries = match fs::read_dir(&d) {
        Ok(e) => e
            .filter_map(Result::ok)
            .map(|e| e.path())
            .collect::<Vec<_>>(),
        Err(_) => Vec::new(),
    };
    for path in entries {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name.starts_with('.') {
            let _ = fs::remove_file(&path);
            continue;
        }
        let Some(session) = name.strip_suffix(".json").map(str::to_string) else {
            continue;
        };
        let rec: Option<Record> = fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        let mut detail = Vec::new();
        match rec {
            None => detail.push("unreadable record removed".to_string()),
            Some(rec) => {
                if let Some(d) = kill_if_same(rec.init_pid, rec.init_start).await {
                    detail.push(format!("{d} (sandbox pid 1)"));
                }
                if let Some(d) = kill_if_same(rec.helper_pid, rec.helper_start).await {
                    detail.push(format!("{d} (helper)"));
                }
                let n = kill_cgroup_members(&rec.cgroups).await;
                if n > 0 {
                    detail.push(format!("killed {n} process(es) left in its cgroups"));
                }
                match cgroup::remove_dirs(&rec.cgroups).await {
                    Ok(()) if !rec.cgroups.is_empty() => {
                        detail.push("removed its cgroups".to_string())
                    }
                    Ok(()) => {}
                    Err(e) => detail.push(format!("could not remove its cgroups: {e}")),
                }
                recorded.extend(rec.cgroups);
                if detail.is_empty() {
                    detail.push("stale record (nothing left running)".to_string());
                }
            }
        }
        let _ = fs::remove_file(&path);
        out.push(Reaped {
            session_id: session,
            detail: detail.join("; "),
        });
    }
    for inst in instance_dirs {
        let Ok(entries) = fs::read_dir(inst) else {
            continue;
        };
        for e in entries.filter_map(Result::ok) {
            let p = e.path();
            if !p.is_dir() || recorded.contains(&p) {
                continue;
            }
            let session = e.file_name().to_string_lossy().into_owned();
            let n = kill_cgroup_members(std::slice::from_ref(&p)).await;
            let removed = cgroup::remove_dirs(std::slice::from_ref(&p)).await;
            let mut detail = format!("leftover cgroup {}", p.display());
            if n > 0 {
                detail.push_str(&format!(": killed {n} process(es)"));
            }
            match removed {
                Ok(()) => detail.push_str(", removed"),
                Err(e) => detail.push_str(&format!(", not removed: {e}")),
            }
            out.push(Reaped {
                session_id: session,
                detail,
            });
        }
    }
    out
}
