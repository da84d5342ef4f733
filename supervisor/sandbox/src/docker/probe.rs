//! `doctor`'s resident exec agent lines: whether its file passes the checks,
//! and whether it really runs: a throwaway sandbox, built exactly as a
//! session's, in a temporary state dir and workspace, runs `true`.

use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::agent::AgentBinary;
use super::{DockerBackend, DockerConfig};
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

/// Starts a sandbox in a temporary directory, runs `true`, destroys it.
async fn run_probe(cfg: &DockerConfig) -> Result<String, String> {
    let root = std::env::temp_dir().join(format!("tollgate-doctor-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let (state, ws) = (root.join("state"), root.join("workspace"));
    std::fs::create_dir_all(state.join("audit")).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(&ws).map_err(|e| e.to_string())?;
    let result = probe_in(cfg, &state, &ws).await;
    let _ = std::fs::remove_dir_all(&root);
    result
}

async fn probe_in(
    cfg: &DockerConfig,
    state: &std::path::Path,
    ws: &std::path::Path,
) -> Result<String, String> {
    // As root, the probe runs as nobody (as a session of another user would).
    let (uid, gid) = if nix::unistd::geteuid().is_root() {
        (65534, 65534)
    } else {
        (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        )
    };
    std::os::unix::fs::chown(ws, Some(uid), Some(gid)).map_err(|e| e.to_string())?;
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
