//! `agent call TOOL 'JSON'`: one tool call in a fresh session, then close it, and
//! print one JSON object (docs/INTERFACES.md). An `ask` with no terminal is left to the
//! operators until its deadline: nothing here denies it early.

use serde::Serialize;
use serde_json::json;
use tollgate_proto::OpenSessionRequest;

use crate::cli::CallSettings;
use crate::error::AgentError;
use crate::model_text;
use crate::runner::{Agent, Approver, CallOnce, Interrupt, Options};
use crate::session;
use crate::term::{self, CtrlC, Sink, Stdin};

/// `{"ok":true,"output":"…","exit_code":0,"truncated":false}`, fields in the
/// contract's order.
#[derive(Serialize)]
struct OkJson<'a> {
    ok: bool,
    output: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    exit_code: Option<i32>,
    truncated: bool,
}

/// A tool that ran and did not succeed, with its code and what it printed:
/// `{"ok":false,"code":"TIMEOUT","error":"…","output":"…","exit_code":-1,"truncated":false}`.
#[derive(Serialize)]
struct FailedJson<'a> {
    ok: bool,
    code: &'a str,
    error: &'a str,
    output: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    exit_code: Option<i32>,
    truncated: bool,
}

#[derive(Serialize)]
struct DeniedInner<'a> {
    code: &'a str,
    reason: &'a str,
    rule: &'a str,
}

#[derive(Serialize)]
struct DeniedOut<'a> {
    ok: bool,
    denied: DeniedInner<'a>,
}

#[derive(Serialize)]
struct ErrorOut<'a> {
    ok: bool,
    error: &'a str,
}

fn to_line<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v)
        .unwrap_or_else(|_| r#"{"ok":false,"error":"cannot encode the result"}"#.into())
}

fn print(line: &str) {
    term::line(Sink::Stdout, line);
}

fn error_json(msg: &str) -> String {
    to_line(&ErrorOut {
        ok: false,
        error: msg,
    })
}

fn denied_json(code: &str, reason: &str, rule: &str) -> String {
    to_line(&DeniedOut {
        ok: false,
        denied: DeniedInner { code, reason, rule },
    })
}

fn ok_json(output: &str, exit_code: Option<i32>, truncated: bool) -> String {
    to_line(&OkJson {
        ok: true,
        output,
        exit_code,
        truncated,
    })
}

/// The JSON line and exit code for a CallTool response.
pub fn response_json(resp: &tollgate_proto::CallToolResponse) -> (String, i32) {
    if let Some(d) = &resp.denied {
        return (denied_json(model_text::code_name(d), &d.reason, &d.rule), 3);
    }
    if !resp.code.is_empty() {
        let failed = FailedJson {
            ok: false,
            code: &resp.code,
            error: &resp.error,
            output: &resp.output,
            exit_code: resp.exit_code,
            truncated: resp.truncated,
        };
        return (to_line(&failed), 1);
    }
    if !resp.error.is_empty() {
        return (error_json(&resp.error), 1);
    }
    if !resp.ok {
        return (error_json("the tool failed and gave no reason"), 1);
    }
    (ok_json(&resp.output, resp.exit_code, resp.truncated), 0)
}

/// Runs `agent call`. Returns the exit code.
pub async fn run(c: CallSettings) -> i32 {
    let ctrlc = CtrlC::install();
    let workspace = match &c.workspace {
        Some(w) => session::canonical_dir(w),
        None => session::current_workspace(),
    };
    let workspace = match workspace {
        Ok(w) => w,
        Err(e) => {
            print(&error_json(&e.to_string()));
            term::error(&e);
            return e.exit_code();
        }
    };
    let req = OpenSessionRequest {
        workspace: workspace.to_string_lossy().into_owned(),
        mode: c.mode.clone().unwrap_or_default(),
        permission_mode: crate::client::permission_mode(c.mode.as_deref().unwrap_or_default()),
        tools: Vec::new(),
        caps: None,
        system_prompt: String::new(),
        model: String::new(),
        client: "agent call".to_string(),
    };
    let (session, control, tools) = match session::open(&c.socket, req).await {
        Ok(x) => x,
        Err(e) => {
            match &e {
                AgentError::Refused(msg) => print(&denied_json("POLICY_DENIED", msg, "")),
                _ => print(&error_json(&e.to_string())),
            }
            term::error(&e);
            return e.exit_code();
        }
    };
    let stdin = Stdin::spawn();
    let approver = if stdin.is_tty && session.can_approve {
        Approver::Prompt
    } else {
        Approver::Operators
    };
    let stdin = if stdin.is_tty { stdin } else { Stdin::closed() };
    let opts = Options {
        max_turns: 1,
        max_context_tokens: 24_000,
        approver,
        transcript: Sink::Stderr,
        print_final: false,
        full_results: false,
    };
    let mut agent = Agent::new(session, tools, stdin, ctrlc, control, opts);
    let result = agent.call_once(&c.tool, &c.args_text).await;
    let (value, code) = match result {
        Ok(CallOnce::Remote(resp)) => response_json(&resp),
        Ok(CallOnce::Local(Ok(output))) => (ok_json(&output, None, false), 0),
        Ok(CallOnce::Local(Err(text))) => (error_json(&text), 1),
        Err(Interrupt::CtrlC) => {
            agent
                .session
                .report("abort", json!({ "reason": "ctrl-c" }))
                .await;
            (error_json("aborted (ctrl-c)"), 1)
        }
        Err(Interrupt::Fatal(AgentError::Revoked(reason))) => {
            agent.session.abandon();
            term::error(&format!("session revoked: {reason}"));
            (denied_json("SESSION_REVOKED", &reason, ""), 3)
        }
        Err(Interrupt::Fatal(e)) => {
            term::error(&e);
            (error_json(&e.to_string()), e.exit_code())
        }
    };
    print(&value);
    agent.session.close().await;
    code
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_proto::{CallToolResponse, Denial, DenialCode};

    #[test]
    fn ok_output_has_exit_code_only_when_present() {
        let r = CallToolResponse {
            ok: true,
            output: "hi\n".into(),
            exit_code: Some(0),
            ..Default::default()
        };
        assert_eq!(
            response_json(&r),
            (
                r#"{"ok":true,"output":"hi\n","exit_code":0,"truncated":false}"#.to_string(),
                0
            )
        );
        let r = CallToolResponse {
            ok: true,
            output: "x".into(),
            truncated: true,
            ..Default::default()
        };
        assert_eq!(
            response_json(&r).0,
            r#"{"ok":true,"output":"x","truncated":true}"#
        );
    }

    #[test]
    fn denials_exit_3_errors_exit_1() {
        let r = CallToolResponse {
            denied: Some(Denial {
                code: DenialCode::PolicyDenied as i32,
                reason: "curl is denied".into(),
                rule: "floor:shell-denylist".into(),
                consequence: String::new(),
                destructive: false,
            }),
            ..Default::default()
        };
        assert_eq!(
            response_json(&r),
            (
                r#"{"ok":false,"denied":{"code":"POLICY_DENIED","reason":"curl is denied","rule":"floor:shell-denylist"}}"#.to_string(),
                3
            )
        );
        let r = CallToolResponse {
            error: "file not found: x".into(),
            ..Default::default()
        };
        assert_eq!(
            response_json(&r),
            (r#"{"ok":false,"error":"file not found: x"}"#.to_string(), 1)
        );
    }

    #[test]
    fn a_timeout_is_not_ok_and_keeps_its_output() {
        let r = CallToolResponse {
            ok: false,
            output: "started\n".into(),
            exit_code: Some(-1),
            code: "TIMEOUT".into(),
            error: "the command timed out after 2s and was killed".into(),
            ..Default::default()
        };
        assert_eq!(
            response_json(&r),
            (
                r#"{"ok":false,"code":"TIMEOUT","error":"the command timed out after 2s and was killed","output":"started\n","exit_code":-1,"truncated":false}"#.to_string(),
                1
            )
        );
    }
}
