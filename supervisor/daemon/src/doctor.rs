//! The sandbox's probes behind `supervisorctl doctor` (docs/INTERFACES.md
//! "doctor", docs/OPERATIONS.md "Deploying"): the native sandbox's kernel
//! features, and the Docker engine, image and exec agent (a throwaway
//! container, built as a session's, runs `true`). The supervisor runs them
//! with the config it serves: over operator.sock (`Doctor`) when it runs,
//! and as `supervisor --doctor` when it does not (supervisorctl doctor
//! starts that itself). supervisorctl links no sandbox code.

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::Arc;

use tollgate_config::BackendChoice;
use tollgate_sandbox::{CheckStatus, DoctorCheck};

use crate::backends::BackendSettings;
use crate::check::EX_CONFIG;
use crate::server::Options;

/// The probes for these settings. Docker problems fail only when docker is
/// `backend`; otherwise they warn.
pub async fn sandbox_checks(
    settings: &BackendSettings,
    backend: BackendChoice,
) -> Vec<DoctorCheck> {
    let mut checks = tollgate_sandbox::native::doctor_checks();
    let docker_needed = backend == BackendChoice::Docker;
    checks.extend(
        tollgate_sandbox::docker::doctor_checks_for(&settings.docker_config(), docker_needed).await,
    );
    checks
}

/// `supervisor --doctor`: the probes for the config as a start reads it
/// (`--config`, `--sandbox` and the rest apply), printed as one JSON
/// document, `supervisorctl doctor --json`'s shape: `{"ok": bool, "checks":
/// [{"name", "status": "ok"|"warn"|"fail", "detail", "hint"}]}`. Exit 0, 1
/// when a check fails, 78 (EX_CONFIG, the error on stderr) when the config
/// does not load. Starts, binds and writes nothing.
pub fn main(opts: &Options) -> ExitCode {
    let config = match crate::check::load_config(opts) {
        Ok(c) => c,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "supervisor: {e:#}");
            return ExitCode::from(EX_CONFIG);
        }
    };
    let checks = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(anyhow::Error::from)
        .and_then(|rt| {
            let settings = BackendSettings::of(
                &config,
                &config.supervisor.state_dir,
                &config.audit.dir,
                // Nothing is reaped: the probe's container removes itself.
                Arc::new(|_| {}),
            )?;
            Ok(rt.block_on(sandbox_checks(&settings, config.sandbox.backend)))
        });
    let checks = match checks {
        Ok(c) => c,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "supervisor: {e:#}");
            return ExitCode::from(1);
        }
    };
    let failed = checks.iter().any(|c| c.status == CheckStatus::Fail);
    let _ = writeln!(std::io::stdout(), "{}", json(&checks));
    ExitCode::from(u8::from(failed))
}

/// The document `supervisor --doctor` prints.
fn json(checks: &[DoctorCheck]) -> serde_json::Value {
    let list: Vec<serde_json::Value> = checks
        .iter()
        .map(|c| {
            serde_json::json!({
                "name": c.name, "status": c.status.as_str(), "detail": c.detail, "hint": c.hint,
            })
        })
        .collect();
    let failed = checks.iter().any(|c| c.status == CheckStatus::Fail);
    serde_json::json!({"ok": !failed, "checks": list})
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The document is `doctor --json`'s shape; a missing hint is null.
    #[test]
    fn the_document_has_doctor_jsons_shape() {
        let checks = vec![
            DoctorCheck {
                name: "seccomp".to_string(),
                status: CheckStatus::Ok,
                detail: "filter mode".to_string(),
                hint: None,
            },
            DoctorCheck {
                name: "docker engine".to_string(),
                status: CheckStatus::Fail,
                detail: "not reachable".to_string(),
                hint: Some("start dockerd".to_string()),
            },
        ];
        assert_eq!(
            json(&checks),
            serde_json::json!({"ok": false, "checks": [
                {"name": "seccomp", "status": "ok", "detail": "filter mode", "hint": null},
                {"name": "docker engine", "status": "fail", "detail": "not reachable", "hint": "start dockerd"},
            ]})
        );
        assert_eq!(json(&checks[..1])["ok"], true);
    }
}
