//! How supervisorctl reports a failure: `supervisorctl: MESSAGE` on stderr,
//! or, under `--json`, one JSON object on stderr (docs/INTERFACES.md
//! "supervisorctl --json"):
//! `{"error": {"kind": KIND, "message": MESSAGE, "exit_code": N}}`.
//! stdout stays empty, so a consumer reading it never takes an error for a
//! result.

use serde_json::json;

/// What kind of failure: the gRPC status of the supervisor's answer, or
/// what went wrong before one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// operator.sock could not be reached.
    Connect,
    /// The command line was wrong (exit 2).
    Usage,
    PermissionDenied,
    Unauthenticated,
    NotFound,
    InvalidArgument,
    FailedPrecondition,
    /// The supervisor could not do it now (AUDIT_UNAVAILABLE, a sandbox
    /// down, …).
    Unavailable,
    /// Anything else.
    Failed,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Connect => "connect",
            Kind::Usage => "usage",
            Kind::PermissionDenied => "permission_denied",
            Kind::Unauthenticated => "unauthenticated",
            Kind::NotFound => "not_found",
            Kind::InvalidArgument => "invalid_argument",
            Kind::FailedPrecondition => "failed_precondition",
            Kind::Unavailable => "unavailable",
            Kind::Failed => "failed",
        }
    }

    /// The kind of a gRPC status code.
    pub fn of_code(code: tonic::Code) -> Kind {
        match code {
            tonic::Code::PermissionDenied => Kind::PermissionDenied,
            tonic::Code::Unauthenticated => Kind::Unauthenticated,
            tonic::Code::NotFound => Kind::NotFound,
            tonic::Code::InvalidArgument => Kind::InvalidArgument,
            tonic::Code::FailedPrecondition => Kind::FailedPrecondition,
            tonic::Code::Unavailable => Kind::Unavailable,
            _ => Kind::Failed,
        }
    }
}

/// An error that knows its kind (carried through `anyhow`).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct CtlError {
    pub kind: Kind,
    pub message: String,
}

impl CtlError {
    pub fn wrap(kind: Kind, message: impl Into<String>) -> anyhow::Error {
        anyhow::Error::new(CtlError {
            kind,
            message: message.into(),
        })
    }
}

/// Whether the command line asks for JSON: a `--json` before any `--`
/// (what follows `--` is a sandboxed command's own arguments).
pub fn json_requested(args: &[std::ffi::OsString]) -> bool {
    args.iter()
        .skip(1)
        .take_while(|a| *a != "--")
        .any(|a| a == "--json")
}

/// Prints `e` as text or JSON; returns the exit code (1).
pub fn report(e: &anyhow::Error, json_out: bool) -> u8 {
    let kind = e
        .downcast_ref::<CtlError>()
        .map(|c| c.kind)
        .unwrap_or(Kind::Failed);
    print(kind, &format!("{e:#}"), 1, json_out)
}

/// A usage error from clap: its own text, or JSON under `--json`; help and
/// version requests print as clap prints them. Returns the exit code.
pub fn usage(e: clap::Error, json_out: bool) -> u8 {
    use clap::error::ErrorKind;
    let code = u8::try_from(e.exit_code()).unwrap_or(2);
    let informational = matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    );
    if !json_out || informational {
        let _ = e.print();
        return code;
    }
    let text = e.render().to_string();
    let message = text
        .lines()
        .next()
        .unwrap_or("")
        .trim_start_matches("error: ");
    print(Kind::Usage, message, code, true)
}

fn print(kind: Kind, message: &str, exit_code: u8, json_out: bool) -> u8 {
    if json_out {
        let v = json!({"error": {
            "kind": kind.as_str(), "message": message, "exit_code": exit_code,
        }});
        eprintln!("{v}");
    } else {
        eprintln!("supervisorctl: {}", crate::table::escape(message));
    }
    exit_code
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_asked_for_before_a_double_dash_only() {
        let args = |v: &[&str]| v.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        assert!(json_requested(&args(&[
            "supervisorctl",
            "kill",
            "--all",
            "--json"
        ])));
        assert!(!json_requested(&args(&[
            "supervisorctl",
            "sandbox",
            "exec",
            "--",
            "tool",
            "--json"
        ])));
        assert!(!json_requested(&args(&["supervisorctl", "status"])));
    }

    #[test]
    fn a_status_keeps_its_kind() {
        let e = crate::client::status_error(tonic::Status::not_found("no session s1"));
        let c = e.downcast_ref::<CtlError>().unwrap();
        assert_eq!(c.kind, Kind::NotFound);
        assert_eq!(c.kind.as_str(), "not_found");
        assert_eq!(format!("{e:#}"), "no session s1");
    }
}
