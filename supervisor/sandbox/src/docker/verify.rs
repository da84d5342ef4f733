//! What a container really got mounted, checked after it starts.
//!
//! Docker resolves a bind mount's source *path* itself, some time after the
//! supervisor checked it, so a process that can write an ancestor of that path
//! (another session's sandbox whose workspace contains this one, say) could
//! swap a checked directory for a symlink to `~/.ssh` in between. Each source
//! is therefore identified (device, inode) when it is checked, and the mount
//! the container got is compared with it once the container runs; a mismatch
//! destroys the container and refuses the sandbox.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecResults};
use futures_util::StreamExt;

use crate::SandboxError;

/// One bind mount: its target path inside, its host source (the same path
/// but for the package cache), and the identity the source had when it was
/// checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedMount {
    pub path: PathBuf,
    pub source: PathBuf,
    pub read_only: bool,
    pub dev: u64,
    pub ino: u64,
}

impl PlannedMount {
    /// Identifies `path` without following a final symlink (it must not be one).
    pub fn identify(path: &Path, read_only: bool) -> Result<PlannedMount, SandboxError> {
        PlannedMount::identify_at(path, path, read_only)
    }

    /// Identifies the host's `source`, to be mounted at `target` inside.
    pub fn identify_at(
        source: &Path,
        target: &Path,
        read_only: bool,
    ) -> Result<PlannedMount, SandboxError> {
        let m = std::fs::symlink_metadata(source).map_err(|e| {
            SandboxError::Refused(format!("cannot inspect {}: {e}", source.display()))
        })?;
        if m.file_type().is_symlink() {
            return Err(SandboxError::Refused(format!(
                "{} is a symlink; refusing to mount it",
                source.display()
            )));
        }
        Ok(PlannedMount {
            path: target.to_path_buf(),
            source: source.to_path_buf(),
            read_only,
            dev: m.dev(),
            ino: m.ino(),
        })
    }
}

/// The workspace, then every path [`crate::host_exec::plan`] protects or
/// pins, each mounted at its own path (read-only, or onto itself). A symlink
/// at any of them is refused: the engine would follow it.
pub fn plan(
    workspace: &Path,
    binds: &[crate::host_exec::Bind],
) -> Result<Vec<PlannedMount>, SandboxError> {
    let mut v = vec![PlannedMount::identify(workspace, false)?];
    for b in binds {
        let read_only = match b.how {
            crate::host_exec::BindHow::ReadOnly => true,
            crate::host_exec::BindHow::Pin => false,
        };
        v.push(PlannedMount::identify(&workspace.join(&b.rel), read_only)?);
    }
    Ok(v)
}

fn mismatch(m: &PlannedMount, got: (u64, u64)) -> SandboxError {
    SandboxError::Refused(format!(
        "{} changed while its container was being created (checked device {} inode {}, \
         mounted device {} inode {}); refusing the sandbox",
        m.path.display(),
        m.dev,
        m.ino,
        got.0,
        got.1
    ))
}

/// Compares what the running container has at each target with the plan.
/// Returns the container init's pid when it is visible from here (same host,
/// same pid namespace as the engine).
pub async fn verify(
    docker: &Docker,
    id: &str,
    plan: &[PlannedMount],
) -> Result<Option<i64>, SandboxError> {
    // Fast path, same host: look through the container's init at its root.
    if let Some((pid, got)) = via_proc(docker, id, plan).await {
        for (m, g) in plan.iter().zip(got) {
            if (m.dev, m.ino) != g {
                return Err(mismatch(m, g));
            }
        }
        return Ok(Some(pid));
    }
    // Otherwise ask inside the container.
    let got = via_exec(docker, id, plan).await?;
    for (m, g) in plan.iter().zip(got) {
        if (m.dev, m.ino) != g {
            return Err(mismatch(m, g));
        }
    }
    Ok(None)
}

/// The container's init (host pid `pid`) must be running the checked agent
/// binary: the image cannot have put its own file there.
pub fn verify_init_exe(
    pid: i64,
    agent: &super::agent::AgentBinary,
    container: &str,
) -> Result<(), SandboxError> {
    let m = std::fs::metadata(format!("/proc/{pid}/exe")).map_err(|e| {
        SandboxError::Refused(format!(
            "cannot inspect pid 1 of container {container} (host pid {pid}): {e}"
        ))
    })?;
    if (m.dev(), m.ino()) == (agent.dev, agent.ino) {
        Ok(())
    } else {
        Err(SandboxError::Refused(format!(
            "pid 1 of container {container} does not run {} (device {} inode {}, \
             it runs device {} inode {}); refusing the sandbox",
            agent.path.display(),
            agent.dev,
            agent.ino,
            m.dev(),
            m.ino()
        )))
    }
}

/// (dev, ino) of each target through `/proc/<init>/root`, when the init pid
/// the engine reports is visible here and really is this container's.
async fn via_proc(
    docker: &Docker,
    id: &str,
    plan: &[PlannedMount],
) -> Option<(i64, Vec<(u64, u64)>)> {
    let info = docker.inspect_container(id, None).await.ok()?;
    let pid = info.state?.pid?;
    if pid <= 0 {
        return None;
    }
    // The pid must be this container's (same pid namespace as the engine).
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    if !cgroup.contains(id) {
        return None;
    }
    let mut v = Vec::with_capacity(plan.len());
    for m in plan {
        let p = format!("/proc/{pid}/root{}", m.path.display());
        let meta = std::fs::symlink_metadata(&p).ok()?;
        v.push((meta.dev(), meta.ino()));
    }
    Some((pid, v))
}

/// (dev, ino) of each target, from `stat` inside the container.
async fn via_exec(
    docker: &Docker,
    id: &str,
    plan: &[PlannedMount],
) -> Result<Vec<(u64, u64)>, SandboxError> {
    let mut cmd = vec!["stat".to_string(), "-c".to_string(), "%d %i".to_string()];
    for m in plan {
        cmd.push(m.path.to_string_lossy().into_owned());
    }
    let fail = SandboxError::MountCheck;
    let exec = docker
        .create_exec(
            id,
            CreateExecOptions::<String> {
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                cmd: Some(cmd),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| fail(e.to_string()))?;
    let mut text = Vec::new();
    match docker
        .start_exec(&exec.id, None)
        .await
        .map_err(|e| fail(e.to_string()))?
    {
        StartExecResults::Attached { mut output, .. } => {
            while let Some(item) = output.next().await {
                match item {
                    Ok(LogOutput::StdOut { message }) => text.extend_from_slice(&message),
                    Ok(_) => {}
                    Err(e) => return Err(fail(e.to_string())),
                }
            }
        }
        StartExecResults::Detached => return Err(fail("exec detached".to_string())),
    }
    let text = String::from_utf8_lossy(&text);
    let mut v = Vec::with_capacity(plan.len());
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let dev = it.next().and_then(|s| s.parse().ok());
        let ino = it.next().and_then(|s| s.parse().ok());
        match (dev, ino) {
            (Some(d), Some(i)) => v.push((d, i)),
            _ => return Err(fail(format!("unexpected stat output {line:?}"))),
        }
    }
    if v.len() != plan.len() {
        return Err(fail(format!(
            "stat answered for {} of {} mounts",
            v.len(),
            plan.len()
        )));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_policy::host_exec::GitDirMode;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tollgate-verify-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn plan_mounts_every_protected_path_at_its_own_place() {
        let w = tmp("git");
        std::fs::create_dir_all(w.join(".git/hooks")).unwrap();
        std::fs::write(w.join(".git/config"), "[core]\n").unwrap();
        std::fs::create_dir_all(w.join("tools/hooks")).unwrap();
        let binds = crate::host_exec::plan(
            &w,
            &[".git".to_string(), ".envrc".to_string()],
            None,
            GitDirMode::ReadOnly,
        )
        .unwrap();
        assert!(binds.reserve.iter().any(|r| r.rel == Path::new(".envrc")));
        std::fs::create_dir(w.join(".envrc")).unwrap();
        let p = plan(&w, &binds.binds).unwrap();
        let got: Vec<(PathBuf, bool)> = p.iter().map(|m| (m.path.clone(), m.read_only)).collect();
        assert_eq!(
            got,
            vec![
                (w.clone(), false),
                (w.join(".envrc"), true),
                (w.join(".git"), true),
            ]
        );
        assert_eq!(plan(&w, &[]).unwrap().len(), 1);
        std::fs::remove_dir_all(&w).unwrap();
    }

    #[test]
    fn symlinked_git_parts_are_refused() {
        let w = tmp("links");
        let outside = tmp("links-outside");
        std::fs::create_dir_all(w.join(".git")).unwrap();
        std::os::unix::fs::symlink(&outside, w.join(".git/hooks")).unwrap();
        let e = crate::host_exec::plan(&w, &[".git".to_string()], None, GitDirMode::ReadOnly)
            .unwrap_err();
        assert!(e.to_string().contains("hooks is a symlink"), "{e}");
        std::fs::remove_file(w.join(".git/hooks")).unwrap();
        std::fs::remove_dir(w.join(".git")).unwrap();
        std::os::unix::fs::symlink(&outside, w.join(".git")).unwrap();
        let e = crate::host_exec::plan(&w, &[".git".to_string()], None, GitDirMode::ReadOnly)
            .unwrap_err();
        assert!(e.to_string().contains(".git is a symlink"), "{e}");
        // Swapped for a symlink after the plan: the mount plan refuses it.
        std::fs::remove_file(w.join(".git")).unwrap();
        std::fs::create_dir(w.join(".git")).unwrap();
        let binds =
            crate::host_exec::plan(&w, &[".git".to_string()], None, GitDirMode::ReadOnly).unwrap();
        std::fs::remove_dir(w.join(".git")).unwrap();
        std::os::unix::fs::symlink(&outside, w.join(".git")).unwrap();
        let e = plan(&w, &binds.binds).unwrap_err();
        assert!(e.to_string().contains(".git is a symlink"), "{e}");
        std::fs::remove_dir_all(&w).unwrap();
        std::fs::remove_dir_all(&outside).unwrap();
    }
}
