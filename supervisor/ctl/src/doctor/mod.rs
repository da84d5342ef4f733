//! `doctor`: one line per check, `ok` / `warn` / `fail`, with a hint. The
//! sandbox's probes are the supervisor's ([`probes`]); the rest (the config,
//! the kernel's link protections, credential paths, the sockets, the audit
//! disk) are read here.

mod check;
mod probes;

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tollgate_config::{BackendChoice, Config, DEFAULT_CONFIG};
use tollgate_proto::v1 as pb;

use check::check;
pub use check::{Check, Status};

/// Returns the exit code: 1 when any check fails.
pub async fn run(operator_socket: &Path, json_out: bool) -> anyhow::Result<u8> {
    let mut checks: Vec<Check> = Vec::new();
    let running = ask_running(operator_socket, &mut checks).await;
    let status = running.as_ref().and_then(|r| r.as_ref().ok());
    let config = config_check(status, &mut checks);
    checks.extend(probes::checks(operator_socket, status.is_some()).await);
    kernel_link_checks(&mut checks);
    checks.push(credential_paths_check());
    socket_checks(operator_socket, &mut checks);
    if let Some(c) = supervisor_check(running.as_ref()) {
        checks.push(c);
    }
    disk_checks(operator_socket, status, &config, &mut checks).await;
    if json_out {
        return Ok(print_json(&checks));
    }
    Ok(print_checks(&checks))
}

/// `doctor --json`: `{"ok": bool, "checks": [{"name", "status": "ok" |
/// "warn" | "fail", "detail", "hint"}]}`; the exit code as the table's.
fn print_json(checks: &[Check]) -> u8 {
    let failed = checks.iter().any(|c| c.status == Status::Fail);
    let list: Vec<serde_json::Value> = checks
        .iter()
        .map(|c| {
            serde_json::json!({
                "name": c.name, "status": c.status.as_str(), "detail": c.detail, "hint": c.hint,
            })
        })
        .collect();
    outln!("{}", serde_json::json!({"ok": !failed, "checks": list}));
    u8::from(failed)
}

/// The running supervisor, if one answers: its config file and engine
/// socket are the ones to check, and its sandbox line is as of now.
async fn ask_running(
    operator_socket: &Path,
    checks: &mut Vec<Check>,
) -> Option<Result<pb::StatusResponse, tonic::Status>> {
    match crate::client::connect(operator_socket).await {
        Ok(mut c) => Some(
            c.status(pb::StatusRequest {})
                .await
                .map(tonic::Response::into_inner),
        ),
        Err(e) => {
            checks.push(check(
                "supervisor",
                Status::Warn,
                // The message already carries its hint.
                format!("{e:#}"),
                None,
            ));
            None
        }
    }
}

/// The config this host would use: the running supervisor's, else
/// $TOLLGATE_CONFIG, else the default path; the defaults when it does not
/// parse.
fn config_check(status: Option<&pb::StatusResponse>, checks: &mut Vec<Check>) -> Config {
    let (config_path, explicit) = match status.filter(|s| !s.config_file.is_empty()) {
        Some(s) => (PathBuf::from(&s.config_file), true),
        None => (
            std::env::var_os("TOLLGATE_CONFIG")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG)),
            false,
        ),
    };
    match Config::load(&config_path, explicit) {
        Ok(c) => {
            let detail = if config_path.exists() {
                format!("{} parses", config_path.display())
            } else {
                format!("{} absent: built-in defaults", config_path.display())
            };
            checks.push(check("config", Status::Ok, detail, None));
            c
        }
        Err(e) => {
            checks.push(check(
                "config",
                Status::Fail,
                e.to_string(),
                Some("fix the named line"),
            ));
            Config::default()
        }
    }
}

/// Hard links to files outside a workspace are invisible to path checks;
/// the kernel's protections keep a sandbox from making them.
fn kernel_link_checks(checks: &mut Vec<Check>) {
    for knob in ["protected_hardlinks", "protected_symlinks"] {
        let path = format!("/proc/sys/fs/{knob}");
        let value = std::fs::read_to_string(&path).unwrap_or_default();
        checks.push(if value.trim() == "1" {
            check(knob, Status::Ok, format!("fs.{knob} = 1"), None)
        } else {
            check(
                knob,
                Status::Warn,
                format!("fs.{knob} = {:?}", value.trim()),
                Some("sysctl -w fs.protected_hardlinks=1 fs.protected_symlinks=1"),
            )
        });
    }
}

/// Credential paths present on this host: never mounted, never a workspace.
fn credential_paths_check() -> Check {
    let users = tollgate_policy::host::passwd();
    let present: Vec<String> = tollgate_policy::host::credential_paths(&users)
        .into_iter()
        .filter(|p| std::fs::symlink_metadata(p).is_ok())
        .map(|p| p.display().to_string())
        .collect();
    check(
        "credential paths",
        Status::Ok,
        if present.is_empty() {
            "none present on this host".to_string()
        } else {
            format!(
                "present (kept out of sandboxes and workspaces): {}",
                present.join(", ")
            )
        },
        None,
    )
}

/// The operator socket, and the agent socket beside it.
fn socket_checks(operator_socket: &Path, checks: &mut Vec<Check>) {
    let agent_socket = operator_socket
        .parent()
        .map(|d| d.join("agent.sock"))
        .unwrap_or_else(|| PathBuf::from("/run/tollgate/agent.sock"));
    checks.push(socket_check(
        "operator socket",
        operator_socket,
        &[0o600, 0o660],
    ));
    checks.push(socket_check("agent socket", &agent_socket, &[0o666, 0o660]));
}

/// The running supervisor and how strong its sandbox is (`None` when none
/// answers: [`ask_running`] said so).
fn supervisor_check(running: Option<&Result<pb::StatusResponse, tonic::Status>>) -> Option<Check> {
    match running {
        Some(Ok(s)) => {
            let bad = s.sandbox_strength.contains("MISSING");
            // The supervisor names its backend; one this supervisorctl does
            // not know is said as such, never taken for native.
            let hint = match crate::wire::status_backend(s) {
                Some(BackendChoice::Native) => "the native checks above say what this host lacks",
                Some(BackendChoice::Docker) => {
                    "start the docker engine (or build the image); the supervisor tries again on demand, no restart needed"
                }
                None => {
                    "this supervisorctl does not know that backend: use the supervisorctl of the same release"
                }
            };
            Some(check(
                "supervisor",
                if bad { Status::Fail } else { Status::Ok },
                format!(
                    "running (pid {}), sandbox {}: {}",
                    s.pid, s.sandbox, s.sandbox_strength
                ),
                bad.then_some(hint),
            ))
        }
        Some(Err(e)) => Some(check(
            "supervisor",
            Status::Fail,
            e.message().to_string(),
            None,
        )),
        // Said above.
        None => None,
    }
}

/// The audit disk: the running supervisor's audit dir, floor, reserve
/// and workspaces when it answers, else this host's config.
async fn disk_checks(
    operator_socket: &Path,
    status: Option<&pb::StatusResponse>,
    config: &Config,
    checks: &mut Vec<Check>,
) {
    let mut audit_dir = config.audit.dir.clone();
    let mut floor_mb = config.sandbox.min_free_mb;
    let mut reserve_mb = config.audit.reserve_mb;
    let mut workspaces: Vec<PathBuf> = Vec::new();
    if let Some(s) = status {
        audit_dir = PathBuf::from(&s.audit_dir);
        floor_mb = s.disk_min_free_mb;
        reserve_mb = s.audit_reserve_target_bytes >> 20;
        workspaces = running_workspaces(operator_socket).await;
        checks.push(crate::shared_disk::reserve_check(s));
    }
    checks.push(crate::shared_disk::check(
        &audit_dir,
        &workspaces,
        floor_mb,
        reserve_mb,
    ));
}

/// Prints one line per check; returns the exit code, 1 when any failed.
fn print_checks(checks: &[Check]) -> u8 {
    let mut failed = false;
    for c in checks {
        failed |= c.status == Status::Fail;
        let mut line = format!(
            "{:<4} {}: {}",
            c.status.as_str(),
            c.name,
            crate::table::escape(&c.detail)
        );
        if let Some(h) = &c.hint
            && c.status != Status::Ok
        {
            line.push_str(&format!(" (hint: {h})"));
        }
        outln!("{line}");
    }
    if failed { 1 } else { 0 }
}

/// The workspaces of the running supervisor's active sessions (none when
/// it does not answer).
async fn running_workspaces(operator_socket: &Path) -> Vec<PathBuf> {
    let Ok(mut c) = crate::client::connect(operator_socket).await else {
        return Vec::new();
    };
    match c
        .list_sessions(tollgate_proto::v1::ListSessionsRequest {
            include_ended: false,
        })
        .await
    {
        Ok(list) => list
            .into_inner()
            .sessions
            .into_iter()
            .map(|s| PathBuf::from(s.workspace))
            .collect(),
        Err(_) => Vec::new(),
    }
}

fn socket_check(name: &str, path: &Path, modes: &[u32]) -> Check {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            let mode = m.permissions().mode() & 0o777;
            if modes.contains(&mode) {
                check(
                    name,
                    Status::Ok,
                    format!("{} mode {mode:o} owner {}", path.display(), m.uid()),
                    None,
                )
            } else {
                check(
                    name,
                    Status::Fail,
                    format!("{} has mode {mode:o}", path.display()),
                    Some("restart the supervisor; it sets the modes itself"),
                )
            }
        }
        Ok(_) => check(
            name,
            Status::Fail,
            format!("{} is not a socket", path.display()),
            Some("remove it"),
        ),
        Err(_) => check(
            name,
            Status::Warn,
            format!("{} absent", path.display()),
            Some("is the supervisor running? (--socket PATH for another state dir)"),
        ),
    }
}
