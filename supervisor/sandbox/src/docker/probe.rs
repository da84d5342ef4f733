//! `doctor`'s resident exec agent lines: whether its file passes the checks,
//! and whether it really runs: a throwaway sandbox, built exactly as a
//! session's, in a temporary state dir and workspace, runs `true`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::agent::AgentBinary;
use super::{DockerBackend, DockerConfig};
use crate::private_dir::PrivateDir;
use crate::{CheckStatus, DoctorCheck, ExecRequest, Limits, Sandbox, SandboxError, SandboxSpec};

/// The file check and (with `live`: the engine and the image are there) the
/// live probe, `bad` being the status of a problem.
pub(super) async fn agent_checks(
    cfg: &DockerConfig,
    bad: CheckStatus,
    live: bool,
) -> Vec<DoctorCheck> {
    let mut checks = Vec::new();
    match AgentBinary::check(&cfg.exec_agent) {
        Ok(a) => checks.push(DoctorCheck {
            name: "docker exec agent".to_string(),
            status: CheckStatus::Ok,
            detail: format!(
                "{} (static, {} KiB, bind-mounted read-only as every container's pid 1)",
                a.path.display(),
                a.size / 1024
            ),
            hint: None,
        }),
        Err(e) => {
            // The message names the file, what is wrong and how to fix it.
            let detail = match e {
                SandboxError::Unavailable(m) => m,
                other => other.to_string(),
            };
            checks.push(DoctorCheck {
                name: "docker exec agent".to_string(),
                status: bad,
                detail,
                hint: None,
            });
            return checks;
        }
    }
    if !live {
        return checks;
    }
    checks.push(match run_probe(cfg).await {
        Ok(detail) => DoctorCheck {
            name: "docker resident agent".to_string(),
            status: CheckStatus::Ok,
            detail,
            hint: None,
        },
        Err(e) => DoctorCheck {
            name: "docker resident agent".to_string(),
            status: bad,
            detail: format!("a probe container's agent did not run `true`: {e}"),
            hint: Some(
                "run the supervisor with RUST_LOG=debug and --sandbox docker to see more"
                    .to_string(),
            ),
        },
    });
    checks
}

/// The probe's directories: a fresh `mkdtemp` directory in `$TMPDIR`
/// (0711: the engine reaches the workspace, no other user lists or writes
/// it), `state/audit` and a `workspace` given to the probe's user through an
/// `O_NOFOLLOW` descriptor (docs/THREAT_MODEL.md, "Names in world-writable
/// directories").
fn probe_dirs(uid: u32, gid: u32) -> Result<(PrivateDir, PathBuf, PathBuf), String> {
    let root = PrivateDir::new(&std::env::temp_dir(), "tollgate-doctor-", 0o711)
        .map_err(|e| e.to_string())?;
    let state = root.mkdir("state", 0o700).map_err(|e| e.to_string())?;
    root.mkdir2("state", "audit", 0o700)
        .map_err(|e| e.to_string())?;
    let ws = root.mkdir("workspace", 0o755).map_err(|e| e.to_string())?;
    root.chown("workspace", uid, gid)
        .map_err(|e| e.to_string())?;
    Ok((root, state, ws))
}

/// The probe's user: as root, nobody (as a session of another user would).
fn probe_user() -> (u32, u32) {
    if nix::unistd::geteuid().is_root() {
        (65534, 65534)
    } else {
        (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        )
    }
}

/// Starts a sandbox in a temporary directory, runs `true`, destroys it; a
/// directory it cannot remove is an error.
async fn run_probe(cfg: &DockerConfig) -> Result<String, String> {
    let (uid, gid) = probe_user();
    let (root, state, ws) = probe_dirs(uid, gid)?;
    let result = probe_in(cfg, &state, &ws, (uid, gid)).await;
    let removed = root.close().map_err(|e| e.to_string());
    let detail = result?;
    removed?;
    Ok(detail)
}

async fn probe_in(
    cfg: &DockerConfig,
    state: &Path,
    ws: &Path,
    (uid, gid): (u32, u32),
) -> Result<String, String> {
    let ws = std::fs::canonicalize(ws).map_err(|e| e.to_string())?;
    let mut pcfg = cfg.clone();
    pcfg.state_dir = state.to_path_buf();
    pcfg.audit_dir = state.join("audit");
    let backend = DockerBackend::connect(pcfg)
        .await
        .map_err(|e| e.to_string())?;
    let spec = SandboxSpec {
        session_id: format!("doctor-{}", std::process::id()),
        workspace: ws.clone(),
        workspace_id: None,
        uid,
        gid,
        env: vec![("PATH".to_string(), "/usr/bin:/bin".to_string())],
        limits: Limits {
            memory_mb: 64,
            pids: 16,
            cpus_millis: 500,
            nofile: 64,
            fsize_mb: 1,
            tmp_mb: 1,
        },
        hidden: Vec::new(),
        // A throwaway workspace: nothing in it is run by the host.
        host_exec: Vec::new(),
        git_dir: tollgate_policy::host_exec::GitDirMode::ReadOnly,
        home: None,
        egress: None,
        private_home: None,
        lease: Default::default(),
        wall: false,
        image: None,
        extra_ca: None,
    };
    let t0 = Instant::now();
    let sb = backend
        .create_sandbox(&spec)
        .await
        .map_err(|e| e.to_string())?;
    let created = t0.elapsed();
    let (tx, _rx) = mpsc::channel(4);
    let t1 = Instant::now();
    let res = sb
        .exec(
            ExecRequest {
                argv: vec!["true".to_string()],
                cwd: None,
                timeout: Duration::from_secs(10),
                merge_stderr: true,
            },
            tx,
            CancellationToken::new(),
        )
        .await;
    let ran = t1.elapsed();
    let posture = sb.agent_posture().to_string();
    let _ = sb.destroy().await;
    match res {
        Ok(o) if o.exit_code == Some(0) => Ok(format!(
            "runs: {posture}; container up in {} ms, `true` in {:.1} ms",
            created.as_millis(),
            ran.as_secs_f64() * 1000.0
        )),
        Ok(o) => Err(format!("`true` ended with {o:?}")),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt as _;

    /// As root: a local user plants the old predictable name
    /// `/tmp/tollgate-doctor-<pid>` as a symlink to a directory of theirs;
    /// the probe neither uses the name nor chowns through it.
    #[test]
    fn doctor_probe_ignores_a_planted_predictable_name() {
        if !nix::unistd::geteuid().is_root() {
            assert!(
                std::env::var_os("TOLLGATE_REQUIRE_ROOT").is_none(),
                "TOLLGATE_REQUIRE_ROOT is set but this test is not running as root"
            );
            eprintln!("skipped: needs root to plant a name as another uid");
            return;
        }
        let tmp = std::env::temp_dir();
        let victim = tempfile::Builder::new()
            .prefix("victim-")
            .tempdir_in(&tmp)
            .unwrap();
        std::os::unix::fs::chown(victim.path(), Some(65533), Some(65533)).unwrap();
        let planted = tmp.join(format!("tollgate-doctor-{}", std::process::id()));
        let _ = std::fs::remove_file(&planted);
        std::os::unix::fs::symlink(victim.path(), &planted).unwrap();
        std::os::unix::fs::lchown(&planted, Some(65533), Some(65533)).unwrap();
        let (root, state, ws) = probe_dirs(65534, 65534).unwrap();
        assert!(!root.path().starts_with(&planted) && root.path() != planted);
        assert!(state.join("audit").is_dir());
        let m = std::fs::symlink_metadata(&ws).unwrap();
        assert!(m.is_dir() && m.uid() == 65534);
        let rm = std::fs::symlink_metadata(root.path()).unwrap();
        assert_eq!((rm.uid(), rm.mode() & 0o7777), (0, 0o711));
        let v = std::fs::metadata(victim.path()).unwrap();
        assert_eq!(v.uid(), 65533, "the planted symlink's target was chowned");
        assert_eq!(std::fs::read_dir(victim.path()).unwrap().count(), 0);
        assert!(
            std::fs::symlink_metadata(&planted)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        root.close().unwrap();
        std::fs::remove_file(&planted).unwrap();
    }
}
