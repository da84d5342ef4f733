//! The sandbox's probes (the native sandbox's kernel features, the Docker
//! engine, image and exec agent) are the supervisor's: supervisorctl links
//! no sandbox code. When a supervisor answers they are asked of it over
//! operator.sock (`Doctor`, with the config it serves); when none does,
//! `supervisor --doctor` is run (beside supervisorctl, else on PATH; with
//! this environment, so `$TOLLGATE_CONFIG` is the config both read) and its
//! JSON read (docs/INTERFACES.md "doctor", docs/OPERATIONS.md "Deploying").

use std::path::Path;

use tollgate_proto::v1 as pb;

use super::check::{Check, Status, check};

/// The supervisor's executable, and the line said when it is not found.
const SUPERVISOR: &str = "supervisor";
const NAME: &str = "sandbox probes";

/// The probes' lines: from the running supervisor (`running`: one
/// answered), else from `supervisor --doctor`.
pub async fn checks(operator_socket: &Path, running: bool) -> Vec<Check> {
    if running {
        return asked(operator_socket).await;
    }
    let exe = match crate::sibling::find(SUPERVISOR) {
        Ok(exe) => exe,
        Err(not) => {
            return vec![check(
                NAME,
                Status::Warn,
                format!(
                    "not run: no supervisor answers, and {SUPERVISOR} is neither beside supervisorctl{} nor on PATH",
                    not.beside()
                ),
                Some("run `supervisor --doctor` where the supervisor is installed, or start it"),
            )];
        }
    };
    // Blocking is fine: nothing else runs meanwhile.
    match std::process::Command::new(&exe).arg("--doctor").output() {
        Ok(out) => from_output(&exe, &out),
        Err(e) => vec![check(
            NAME,
            Status::Fail,
            format!("cannot run {} --doctor: {e}", exe.display()),
            None,
        )],
    }
}

/// Over operator.sock.
async fn asked(operator_socket: &Path) -> Vec<Check> {
    let answer = match crate::client::connect(operator_socket).await {
        Ok(mut c) => c.doctor(pb::DoctorRequest {}).await,
        Err(e) => return vec![check(NAME, Status::Fail, format!("{e:#}"), None)],
    };
    match answer {
        Ok(r) => r.into_inner().checks.into_iter().map(from_wire).collect(),
        Err(s) if s.code() == tonic::Code::Unimplemented => vec![check(
            NAME,
            Status::Warn,
            "not run: the running supervisor is of an older release, which does not run them for supervisorctl".to_string(),
            Some("use the supervisor and supervisorctl of one release"),
        )],
        Err(s) => vec![check(NAME, Status::Fail, s.message().to_string(), None)],
    }
}

/// A line as the supervisor sent it; a status this supervisorctl does not
/// know is a failure, never taken for ok.
fn from_wire(c: pb::DoctorCheck) -> Check {
    let status = match pb::CheckStatus::try_from(c.status) {
        Ok(pb::CheckStatus::Ok) => Status::Ok,
        Ok(pb::CheckStatus::Warn) => Status::Warn,
        Ok(pb::CheckStatus::Fail | pb::CheckStatus::Unspecified) | Err(_) => Status::Fail,
    };
    Check {
        name: c.name,
        status,
        detail: c.detail,
        hint: c.hint,
    }
}

/// `supervisor --doctor`'s output: its JSON document on exit 0 or 1, else
/// one failed line with what it said on stderr.
fn from_output(exe: &Path, out: &std::process::Output) -> Vec<Check> {
    let parsed = matches!(out.status.code(), Some(0 | 1))
        .then(|| serde_json::from_slice(&out.stdout).ok())
        .flatten()
        .and_then(|doc: serde_json::Value| parse(&doc));
    if let Some(checks) = parsed {
        return checks;
    }
    let said = String::from_utf8_lossy(&out.stderr);
    let said = said.trim();
    vec![check(
        NAME,
        Status::Fail,
        format!(
            "{} --doctor ({}): {}",
            exe.display(),
            out.status,
            if said.is_empty() {
                "no checks printed"
            } else {
                said
            }
        ),
        None,
    )]
}

/// `{"ok", "checks": [{"name", "status", "detail", "hint"}]}`; `None` when
/// it is not that.
fn parse(doc: &serde_json::Value) -> Option<Vec<Check>> {
    doc.get("checks")?
        .as_array()?
        .iter()
        .map(|c| {
            Some(Check {
                name: c.get("name")?.as_str()?.to_string(),
                status: Status::parse(c.get("status")?.as_str()?)?,
                detail: c.get("detail")?.as_str()?.to_string(),
                hint: c.get("hint").and_then(|h| h.as_str()).map(str::to_string),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt as _;

    fn output(code: i32, stdout: &str, stderr: &str) -> std::process::Output {
        std::process::Output {
            status: std::process::ExitStatus::from_raw(code << 8),
            stdout: stdout.as_bytes().to_vec(),
            stderr: stderr.as_bytes().to_vec(),
        }
    }

    /// `supervisor --doctor`'s document becomes the lines, in its order.
    #[test]
    fn reads_supervisor_doctors_document() {
        let doc = r#"{"ok":false,"checks":[
            {"name":"seccomp","status":"ok","detail":"filter","hint":null},
            {"name":"docker engine","status":"fail","detail":"down","hint":"start dockerd"}]}"#;
        let got = from_output(Path::new("/usr/bin/supervisor"), &output(1, doc, ""));
        assert_eq!(
            got,
            vec![
                check("seccomp", Status::Ok, "filter".to_string(), None),
                check(
                    "docker engine",
                    Status::Fail,
                    "down".to_string(),
                    Some("start dockerd")
                ),
            ]
        );
    }

    /// A config that does not load (exit 78) is one failed line saying why.
    #[test]
    fn a_supervisor_that_cannot_probe_is_one_failed_line() {
        let got = from_output(
            Path::new("/usr/bin/supervisor"),
            &output(78, "", "supervisor: /etc/x.toml: line 3: unknown field\n"),
        );
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].name.as_str(), got[0].status), (NAME, Status::Fail));
        assert!(
            got[0]
                .detail
                .ends_with("supervisor: /etc/x.toml: line 3: unknown field"),
            "{}",
            got[0].detail
        );
        // Output that is not the document is not taken for checks.
        let got = from_output(Path::new("/s"), &output(0, "{\"checks\": [1]}", ""));
        assert_eq!(got[0].status, Status::Fail);
    }

    /// An unknown status from the wire fails, never passes.
    #[test]
    fn an_unknown_wire_status_fails() {
        let c = from_wire(pb::DoctorCheck {
            name: "x".to_string(),
            status: 99,
            detail: String::new(),
            hint: None,
        });
        assert_eq!(c.status, Status::Fail);
        let c = from_wire(pb::DoctorCheck {
            name: "x".to_string(),
            status: pb::CheckStatus::Warn as i32,
            detail: String::new(),
            hint: Some("h".to_string()),
        });
        assert_eq!((c.status, c.hint.as_deref()), (Status::Warn, Some("h")));
    }
}
