//! What the model is told. Every outcome of a tool call becomes the text of one
//! `tool` message; the OpenAI "tool" role has no error flag, so a denial or an
//! error has to say so plainly in the text itself.

use tollgate_proto::{CallToolResponse, Denial, DenialCode};

/// How a tool call ended, for the transcript, the `--output json` record and the
/// exit summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The tool ran (run_bash: whatever its exit code).
    Ok,
    /// The supervisor (policy, a person, a cap) refused it.
    Denied,
    /// The tool was allowed but failed, or the call itself was malformed.
    Error,
    /// The model named a tool this session does not have.
    UnknownTool,
    /// The arguments were not a JSON object.
    InvalidArgs,
    /// Ctrl-C: the call was abandoned and the supervisor cancelled it.
    Aborted,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Denied => "denied",
            Outcome::Error => "error",
            Outcome::UnknownTool => "unknown_tool",
            Outcome::InvalidArgs => "invalid_args",
            Outcome::Aborted => "aborted",
        }
    }
}

/// The tool message for a name the session's tool list does not hold.
pub fn unknown_tool(name: &str, available: &[String]) -> String {
    format!(
        "Error: unknown tool '{name}'. Available tools: {}",
        available.join(", ")
    )
}

/// The tool message for arguments that are not JSON.
pub fn invalid_json(err: &str) -> String {
    format!("Error: invalid arguments: not valid JSON: {err}")
}

/// The tool message for other argument problems found in the agent.
pub fn invalid_args(reason: &str) -> String {
    format!("Error: invalid arguments: {reason}")
}

/// What a CallTool response means for the session as a whole.
#[derive(Debug, Clone, PartialEq)]
pub enum Mapped {
    /// Text for the model.
    Text {
        text: String,
        outcome: Outcome,
        /// The tool-call cap of the session was reached: stop and summarise.
        cap_reached: bool,
    },
    /// The session was revoked: stop now.
    Revoked(String),
}

/// `Permission denied: <reason>`, without doubling a prefix the supervisor may
/// already have written.
fn permission_denied(reason: &str) -> String {
    if reason
        .get(..17)
        .is_some_and(|p| p.eq_ignore_ascii_case("permission denied"))
    {
        reason.to_string()
    } else {
        format!("Permission denied: {reason}")
    }
}

/// The denial code of a response, if the PEP refused the call.
pub fn denial_code(d: &Denial) -> DenialCode {
    DenialCode::try_from(d.code).unwrap_or(DenialCode::Unspecified)
}

/// The contract's spelling of a denial code (`POLICY_DENIED`, ...).
pub fn code_name(d: &Denial) -> &'static str {
    denial_code(d).as_str_name()
}

/// Maps a CallTool response to the tool message the model sees.
pub fn map_response(tool: &str, resp: &CallToolResponse, available: &[String]) -> Mapped {
    if let Some(d) = resp.denied.as_ref() {
        let reason = d.reason.as_str();
        let (text, cap_reached) = match denial_code(d) {
            DenialCode::PolicyDenied
            | DenialCode::NotInAllowlist
            | DenialCode::SandboxUnavailable
            | DenialCode::AuditUnavailable
            | DenialCode::Unspecified => (permission_denied(reason), false),
            DenialCode::CapReached => (permission_denied(reason), true),
            DenialCode::UserDenied | DenialCode::ApprovalTimeout => (reason.to_string(), false),
            DenialCode::InvalidArgs => (invalid_args(reason), false),
            DenialCode::UnknownTool => (unknown_tool(tool, available), false),
            DenialCode::SessionRevoked => return Mapped::Revoked(reason.to_string()),
        };
        let outcome = match denial_code(d) {
            DenialCode::InvalidArgs => Outcome::InvalidArgs,
            DenialCode::UnknownTool => Outcome::UnknownTool,
            _ => Outcome::Denied,
        };
        return Mapped::Text {
            text,
            outcome,
            cap_reached,
        };
    }
    if !resp.code.is_empty() {
        // Ran and did not succeed (TIMEOUT): what it printed, then why.
        let mut text = resp.output.clone();
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!("Error ({}): {}", resp.code, resp.error));
        return Mapped::Text {
            text,
            outcome: Outcome::Error,
            cap_reached: false,
        };
    }
    if !resp.error.is_empty() {
        return Mapped::Text {
            text: format!("Error: {}", resp.error),
            outcome: Outcome::Error,
            cap_reached: false,
        };
    }
    if !resp.ok {
        return Mapped::Text {
            text: "Error: the tool failed and gave no reason".to_string(),
            outcome: Outcome::Error,
            cap_reached: false,
        };
    }
    let mut text = resp.output.clone();
    if let Some(code) = resp.exit_code
        && code != 0
        && !text.contains("exit code")
    {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!("[exit code {code}]"));
    }
    if text.is_empty() {
        text = "(no output)".to_string();
    }
    Mapped::Text {
        text,
        outcome: Outcome::Ok,
        cap_reached: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denied(code: DenialCode, reason: &str) -> CallToolResponse {
        CallToolResponse {
            denied: Some(Denial {
                code: code as i32,
                reason: reason.into(),
                rule: "deny: run_bash(curl*)".into(),
                consequence: String::new(),
                destructive: false,
            }),
            ..Default::default()
        }
    }

    fn text(m: Mapped) -> (String, Outcome) {
        match m {
            Mapped::Text { text, outcome, .. } => (text, outcome),
            Mapped::Revoked(r) => panic!("unexpected revoke {r}"),
        }
    }

    #[test]
    fn policy_denials_say_permission_denied() {
        let tools = vec!["read_file".to_string()];
        for code in [
            DenialCode::PolicyDenied,
            DenialCode::NotInAllowlist,
            DenialCode::SandboxUnavailable,
            DenialCode::AuditUnavailable,
        ] {
            let r = denied(code, "curl is not allowed in the sandbox.");
            assert_eq!(
                text(map_response("run_bash", &r, &tools)),
                (
                    "Permission denied: curl is not allowed in the sandbox.".to_string(),
                    Outcome::Denied
                )
            );
        }
    }

    #[test]
    fn prefix_is_not_doubled() {
        let r = denied(DenialCode::PolicyDenied, "Permission denied: no.");
        assert_eq!(
            text(map_response("run_bash", &r, &[])).0,
            "Permission denied: no."
        );
    }

    #[test]
    fn user_denials_and_timeouts_pass_through() {
        let reason = "user denied: overwrite README.md (existing 214 bytes will be lost). Do not retry this call; ask the user or change approach.";
        let r = denied(DenialCode::UserDenied, reason);
        assert_eq!(text(map_response("write_file", &r, &[])).0, reason);
        let r = denied(
            DenialCode::ApprovalTimeout,
            "no one approved in time: run `ls`",
        );
        assert_eq!(
            text(map_response("run_bash", &r, &[])).0,
            "no one approved in time: run `ls`"
        );
    }

    #[test]
    fn invalid_args_unknown_tool_and_cap() {
        let tools = vec!["a".to_string(), "b".to_string()];
        let r = denied(DenialCode::InvalidArgs, "missing field `path`");
        assert_eq!(
            text(map_response("read_file", &r, &tools)),
            (
                "Error: invalid arguments: missing field `path`".to_string(),
                Outcome::InvalidArgs
            )
        );
        let r = denied(DenialCode::UnknownTool, "whatever");
        assert_eq!(
            text(map_response("x", &r, &tools)).0,
            "Error: unknown tool 'x'. Available tools: a, b"
        );
        let r = denied(
            DenialCode::CapReached,
            "the session reached 200 tool calls.",
        );
        assert_eq!(
            map_response("x", &r, &tools),
            Mapped::Text {
                text: "Permission denied: the session reached 200 tool calls.".into(),
                outcome: Outcome::Denied,
                cap_reached: true
            }
        );
    }

    #[test]
    fn revocation_stops() {
        let r = denied(DenialCode::SessionRevoked, "revoked by uid 0");
        assert_eq!(
            map_response("x", &r, &[]),
            Mapped::Revoked("revoked by uid 0".into())
        );
    }

    #[test]
    fn errors_and_output() {
        let r = CallToolResponse {
            error: "file not found: a.txt".into(),
            ..Default::default()
        };
        assert_eq!(
            text(map_response("read_file", &r, &[])),
            ("Error: file not found: a.txt".into(), Outcome::Error)
        );
        let r = CallToolResponse {
            ok: true,
            output: "boom".into(),
            exit_code: Some(2),
            ..Default::default()
        };
        assert_eq!(
            text(map_response("run_bash", &r, &[])).0,
            "boom\n[exit code 2]"
        );
        let r = CallToolResponse {
            ok: true,
            exit_code: Some(0),
            ..Default::default()
        };
        assert_eq!(text(map_response("run_bash", &r, &[])).0, "(no output)");
    }

    #[test]
    fn local_texts() {
        assert_eq!(
            unknown_tool("rm_rf", &["read_file".into(), "grep".into()]),
            "Error: unknown tool 'rm_rf'. Available tools: read_file, grep"
        );
        assert_eq!(
            invalid_json("expected value at line 1 column 1"),
            "Error: invalid arguments: not valid JSON: expected value at line 1 column 1"
        );
    }
}
