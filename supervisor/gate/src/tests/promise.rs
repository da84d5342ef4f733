//! The exact records of a call, for every channel and every way it can go.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tollgate_policy::{Code, ToolCall};
use tollgate_sandbox::recording::{Answer, Recorded};

use super::fixture::Fixture;
use crate::approvals::Scope;
use crate::session::State;
use crate::{
    CallTool, Cleared, Denial, Gate, McpAnswer, McpCall, Proposed, RoutedCommand, ShellOut,
    ToolAnswer,
};

const ALLOW: [&str; 3] = ["permission_check allow", "tool_started", "tool_result ok"];
const ASKED: [&str; 2] = ["permission_check ask", "approval_requested"];

fn lines(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn asked_then(rest: &[&str]) -> Vec<String> {
    let mut v = lines(&ASKED);
    v.extend(lines(rest));
    v
}

/// The command as the sandbox's shell runs it (bash where the host has it).
fn sh(command: &str) -> Recorded {
    Recorded::Exec {
        argv: tollgate_sandbox::Shell::of_host().argv(command),
        merge_stderr: true,
    }
}

fn code(a: &ToolAnswer) -> Option<Code> {
    a.denied.as_ref().map(|d| d.code)
}

// --- CallTool -------------------------------------------------------------

async fn call(fx: &Fixture, tool: &str, args: Value, cancel: CancellationToken) -> ToolAnswer {
    let req = CallTool {
        call_id: "c1".to_string(),
        tool: tool.to_string(),
        arguments_json: args.to_string(),
    };
    crate::call_tool(&fx.cx(), req, cancel).await
}

async fn bash(fx: &Fixture, command: &str) -> ToolAnswer {
    let cancel = fx.session.cancel.child_token();
    call(fx, "run_bash", json!({ "command": command }), cancel).await
}

#[tokio::test]
async fn call_tool_allowed_runs_between_its_records() {
    let fx = Fixture::new();
    fx.backend.answer(Answer::Exit {
        stdout: b"hi hunter2-secret\n".to_vec(),
        code: 0,
    });
    let a = bash(&fx, "echo hi").await;
    assert!(a.ok, "{a:?}");
    assert_eq!(a.output, "hi [REDACTED:secret-env]\n");
    assert_eq!(fx.written(), lines(&ALLOW));
    assert_eq!(
        fx.backend.log(),
        [Recorded::Created(fx.session.id.clone()), sh("echo hi")]
    );
}

#[tokio::test]
async fn call_tool_read_is_allowed_and_recorded() {
    let fx = Fixture::new();
    let cancel = CancellationToken::new();
    let a = call(&fx, "read_file", json!({"path": "notes.txt"}), cancel).await;
    assert!(a.ok && a.output.contains("inside the workspace"), "{a:?}");
    assert_eq!(fx.written(), lines(&ALLOW));
    assert_eq!(fx.backend.log(), []);
}

#[tokio::test]
async fn call_tool_ask_approved_runs_after_the_approval() {
    let fx = Fixture::new();
    let (a, ()) = tokio::join!(bash(&fx, "touch made"), fx.answer(true, Scope::Once));
    assert!(a.ok, "{a:?}");
    assert_eq!(a.allowed_by, "approved");
    let want = asked_then(&[
        "approval_decided approved",
        "tool_started",
        "tool_result ok",
    ]);
    assert_eq!(fx.written(), want);
    assert_eq!(fx.backend.log()[1], sh("touch made"));
}

#[tokio::test]
async fn call_tool_ask_denied_runs_nothing() {
    let fx = Fixture::new();
    let (a, ()) = tokio::join!(bash(&fx, "touch made"), fx.answer(false, Scope::Once));
    assert_eq!(code(&a), Some(Code::UserDenied), "{a:?}");
    assert!(a.denied.unwrap().reason.contains("not now"));
    assert_eq!(fx.written(), asked_then(&["approval_decided denied"]));
    assert_eq!(fx.backend.log(), []);
}

#[tokio::test]
async fn call_tool_ask_timeout_runs_nothing() {
    let fx = Fixture::new();
    let a = bash(&fx, "touch made").await;
    assert_eq!(code(&a), Some(Code::ApprovalTimeout), "{a:?}");
    assert_eq!(fx.written(), asked_then(&["approval_decided timeout"]));
    assert_eq!(fx.backend.log(), []);
}

#[tokio::test]
async fn call_tool_denied_by_the_floor_runs_nothing() {
    let fx = Fixture::new();
    let cancel = CancellationToken::new();
    let a = call(&fx, "read_file", json!({"path": "/etc/shadow"}), cancel).await;
    let d = a.denied.expect("denied");
    assert!(d.rule.starts_with("floor:"), "{d:?}");
    assert_eq!(fx.written(), ["permission_check deny"]);
}

#[tokio::test]
async fn call_tool_denied_by_a_rule_runs_nothing() {
    let fx = Fixture::new();
    let a = bash(&fx, "ls -la").await;
    let d = a.denied.expect("denied");
    assert_eq!(d.code, Code::PolicyDenied);
    assert!(d.rule.contains("run_bash(ls *)"), "{d:?}");
    assert_eq!(fx.written(), ["permission_check deny"]);
    assert_eq!(fx.backend.log(), []);
}

#[tokio::test]
async fn call_tool_cancelled_mid_run_is_stopped_and_recorded() {
    let fx = Fixture::new();
    fx.backend.answer(Answer::Hang);
    let cancel = fx.session.cancel.child_token();
    let run = call(
        &fx,
        "run_bash",
        json!({"command": "echo long"}),
        cancel.clone(),
    );
    let stop = async {
        fx.backend.started().await;
        cancel.cancel();
    };
    let (a, ()) = tokio::join!(run, stop);
    let d = a.denied.expect("stopped");
    assert_eq!((d.code, d.rule.as_str()), (Code::UserDenied, "cancel"));
    let want = [
        "permission_check allow",
        "tool_started",
        "tool_result stopped",
    ];
    assert_eq!(fx.written(), want);
    assert_eq!(fx.backend.log().last(), Some(&Recorded::Cancelled));
}

#[tokio::test]
async fn call_tool_revoked_mid_run_is_stopped_and_recorded() {
    let fx = Fixture::new();
    fx.backend.answer(Answer::Hang);
    let run = bash(&fx, "echo long");
    let stop = async {
        fx.backend.started().await;
        fx.session.end(State::Revoked, "by the test");
    };
    let (a, ()) = tokio::join!(run, stop);
    assert_eq!(code(&a), Some(Code::SessionRevoked), "{a:?}");
    let want = [
        "permission_check allow",
        "tool_started",
        "tool_result stopped",
    ];
    assert_eq!(fx.written(), want);
}

#[tokio::test]
async fn call_tool_without_its_decision_record_runs_nothing() {
    let fx = Fixture::new();
    fx.fail("permission_check");
    let a = bash(&fx, "echo hi").await;
    assert_eq!(code(&a), Some(Code::AuditUnavailable), "{a:?}");
    assert_eq!(fx.written(), Vec::<String>::new());
    assert_eq!(fx.backend.log(), []);
}

#[tokio::test]
async fn call_tool_without_its_started_record_runs_nothing() {
    let fx = Fixture::new();
    fx.fail("tool_started");
    let a = bash(&fx, "echo hi").await;
    assert_eq!(code(&a), Some(Code::AuditUnavailable), "{a:?}");
    assert_eq!(fx.written(), ["permission_check allow"]);
    assert_eq!(fx.backend.log(), []);
}

// --- A client's hook --------------------------------------------------------

fn hook_gate() -> Gate {
    Gate {
        durable_now: true,
        approval_wait: Duration::from_secs(1),
        delegate_ask: false,
        client_tool: Some("Bash".to_string()),
    }
}

async fn hook_with(
    fx: &Fixture,
    tool: &str,
    args: Value,
    cancel: &CancellationToken,
) -> Result<Cleared, Denial> {
    let raw = args.to_string();
    let p = Proposed {
        call_id: "h1",
        tool,
        raw_args: &raw,
        mcp: None,
    };
    let calls = Ok(vec![ToolCall {
        tool: tool.to_string(),
        args,
    }]);
    crate::authorize(&fx.cx(), p, calls, &hook_gate(), cancel).await
}

async fn hook(fx: &Fixture, command: &str) -> Result<Cleared, Denial> {
    let cancel = fx.session.cancel.child_token();
    hook_with(fx, "run_bash", json!({ "command": command }), &cancel).await
}

#[tokio::test]
async fn hook_allowed_is_recorded_once_and_runs_nothing_here() {
    let fx = Fixture::new();
    let c = hook(&fx, "echo hi").await.expect("cleared");
    assert_eq!(c.allowed_by, "allowed");
    assert_eq!(fx.written(), ["permission_check allow"]);
    assert_eq!(fx.backend.log(), []);
}

#[tokio::test]
async fn hook_ask_approved_denied_and_timed_out() {
    let fx = Fixture::new();
    let (c, ()) = tokio::join!(hook(&fx, "touch a"), fx.answer(true, Scope::Once));
    assert_eq!(c.expect("approved").allowed_by, "approved");
    assert_eq!(fx.written(), asked_then(&["approval_decided approved"]));

    let fx = Fixture::new();
    let (c, ()) = tokio::join!(hook(&fx, "touch a"), fx.answer(false, Scope::Once));
    assert_eq!(c.expect_err("denied").code, Code::UserDenied);
    assert_eq!(fx.written(), asked_then(&["approval_decided denied"]));

    let fx = Fixture::new();
    let c = hook(&fx, "touch a").await;
    assert_eq!(c.expect_err("timed out").code, Code::ApprovalTimeout);
    assert_eq!(fx.written(), asked_then(&["approval_decided timeout"]));
}

#[tokio::test]
async fn hook_denied_by_the_floor_and_by_a_rule() {
    let fx = Fixture::new();
    let cancel = CancellationToken::new();
    let d = hook_with(&fx, "read_file", json!({"path": "/etc/shadow"}), &cancel).await;
    assert!(d.expect_err("floor").rule.starts_with("floor:"));
    assert_eq!(fx.written(), ["permission_check deny"]);

    let fx = Fixture::new();
    let d = hook(&fx, "ls /").await.expect_err("rule");
    assert!(d.rule.contains("run_bash(ls *)"), "{d:?}");
    assert_eq!(fx.written(), ["permission_check deny"]);
}

#[tokio::test]
async fn hook_cancelled_or_revoked_while_asking_is_withdrawn() {
    let fx = Fixture::new();
    let cancel = fx.session.cancel.child_token();
    let ask = hook_with(&fx, "run_bash", json!({"command": "touch a"}), &cancel);
    let stop = async {
        fx.pending().await;
        cancel.cancel();
    };
    let (c, ()) = tokio::join!(ask, stop);
    assert_eq!(c.expect_err("withdrawn").code, Code::UserDenied);
    assert_eq!(fx.written(), asked_then(&["approval_decided withdrawn"]));

    let fx = Fixture::new();
    let stop = async {
        fx.pending().await;
        fx.session.end(State::Revoked, "by the test");
    };
    let (c, ()) = tokio::join!(hook(&fx, "touch a"), stop);
    assert_eq!(c.expect_err("revoked").code, Code::SessionRevoked);
    assert_eq!(fx.written(), asked_then(&["approval_decided withdrawn"]));
}

#[tokio::test]
async fn hook_without_its_records_is_refused() {
    let fx = Fixture::new();
    fx.fail("permission_check");
    let d = hook(&fx, "echo hi").await.expect_err("refused");
    assert_eq!(d.code, Code::AuditUnavailable);
    assert_eq!(fx.written(), Vec::<String>::new());

    let fx = Fixture::new();
    fx.fail("approval_requested");
    let d = hook(&fx, "touch a").await.expect_err("refused");
    assert_eq!(d.code, Code::AuditUnavailable);
    assert_eq!(fx.written(), ["permission_check ask"]);
    assert!(fx.host.approvals.list(false).is_empty());
}

// --- The MCP gateway --------------------------------------------------------

fn answer() -> McpAnswer {
    McpAnswer {
        response: json!({"result": {}}),
        bytes: 2,
        truncated: false,
        is_error: false,
    }
}

/// A `tools/call` of server `srv`; `hang`: the server never answers.
async fn mcp(
    fx: &Fixture,
    tool: &str,
    hang: bool,
    cancel: &CancellationToken,
) -> (Result<McpAnswer, Denial>, bool) {
    let sent = Arc::new(AtomicBool::new(false));
    let args = json!({"path": "x"});
    let c = McpCall {
        server: "srv",
        tool,
        call_id: "m1",
        args: &args,
    };
    let s = Arc::clone(&sent);
    let forward = || async move {
        s.store(true, Ordering::SeqCst);
        if hang {
            std::future::pending::<()>().await;
        }
        Ok(answer())
    };
    let r = crate::mcp_tool_call(&fx.cx(), c, cancel, forward).await;
    (r, sent.load(Ordering::SeqCst))
}

#[tokio::test]
async fn mcp_allowed_is_forwarded_between_its_records() {
    let fx = Fixture::new();
    let (r, sent) = mcp(&fx, "read", false, &CancellationToken::new()).await;
    assert!(r.is_ok() && sent);
    assert_eq!(fx.written(), lines(&ALLOW));
}

#[tokio::test]
async fn mcp_ask_approved_denied_and_timed_out() {
    let fx = Fixture::new();
    let cancel = CancellationToken::new();
    let (r, ()) = tokio::join!(
        mcp(&fx, "write", false, &cancel),
        fx.answer(true, Scope::Once)
    );
    assert!(r.0.is_ok() && r.1);
    let want = asked_then(&[
        "approval_decided approved",
        "tool_started",
        "tool_result ok",
    ]);
    assert_eq!(fx.written(), want);

    let fx = Fixture::new();
    let (r, ()) = tokio::join!(
        mcp(&fx, "write", false, &cancel),
        fx.answer(false, Scope::Once)
    );
    assert_eq!(
        (r.0.err().map(|d| d.code), r.1),
        (Some(Code::UserDenied), false)
    );
    assert_eq!(fx.written(), asked_then(&["approval_decided denied"]));

    let fx = Fixture::new();
    let (r, sent) = mcp(&fx, "write", false, &cancel).await;
    assert_eq!(
        (r.err().map(|d| d.code), sent),
        (Some(Code::ApprovalTimeout), false)
    );
    assert_eq!(fx.written(), asked_then(&["approval_decided timeout"]));
}

#[tokio::test]
async fn mcp_denied_by_a_rule_and_by_the_cap() {
    let fx = Fixture::new();
    let (r, sent) = mcp(&fx, "drop", false, &CancellationToken::new()).await;
    let d = r.err().expect("denied");
    assert_eq!((d.code, sent), (Code::PolicyDenied, false));
    assert_eq!(fx.written(), ["permission_check deny"]);

    // The tool-call cap, a floor no rule lifts.
    let fx = Fixture::new();
    while fx.session.take_tool_call() {}
    let (r, sent) = mcp(&fx, "read", false, &CancellationToken::new()).await;
    let d = r.err().expect("denied");
    assert_eq!(
        (d.code, d.rule.as_str(), sent),
        (Code::CapReached, "cap:max_tool_calls", false)
    );
    assert_eq!(fx.written(), ["permission_check deny"]);
}

#[tokio::test]
async fn mcp_cancelled_or_revoked_before_the_answer_is_stopped() {
    let fx = Fixture::new();
    let cancel = CancellationToken::new();
    let stop = async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        cancel.cancel();
    };
    let (r, ()) = tokio::join!(mcp(&fx, "read", true, &cancel), stop);
    assert_eq!(r.0.err().map(|d| d.code), Some(Code::SandboxUnavailable));
    let want = [
        "permission_check allow",
        "tool_started",
        "tool_result stopped",
    ];
    assert_eq!(fx.written(), want);

    let fx = Fixture::new();
    let cancel = fx.session.cancel.child_token();
    let stop = async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        fx.session.end(State::Revoked, "by the test");
    };
    let (r, ()) = tokio::join!(mcp(&fx, "read", true, &cancel), stop);
    assert_eq!(r.0.err().map(|d| d.code), Some(Code::SessionRevoked));
    assert_eq!(fx.written(), want);
}

#[tokio::test]
async fn mcp_without_its_records_is_not_forwarded() {
    let fx = Fixture::new();
    fx.fail("permission_check");
    let (r, sent) = mcp(&fx, "read", false, &CancellationToken::new()).await;
    assert_eq!(
        (r.err().map(|d| d.code), sent),
        (Some(Code::AuditUnavailable), false)
    );
    assert_eq!(fx.written(), Vec::<String>::new());

    let fx = Fixture::new();
    fx.fail("tool_started");
    let (r, sent) = mcp(&fx, "read", false, &CancellationToken::new()).await;
    assert_eq!(
        (r.err().map(|d| d.code), sent),
        (Some(Code::AuditUnavailable), false)
    );
    assert_eq!(fx.written(), ["permission_check allow"]);
}

// --- A routed shell command ---------------------------------------------------

async fn routed(fx: &Fixture, cancel: CancellationToken) -> Vec<ShellOut> {
    let (tx, mut rx) = mpsc::channel::<ShellOut>(64);
    let cmd = RoutedCommand {
        call_id: "r1",
        command: "echo routed",
        target: "echo routed",
        timeout_s: None,
        background: false,
    };
    crate::run_routed(&fx.cx(), &cmd, &tx, cancel).await;
    drop(tx);
    let mut got = Vec::new();
    while let Some(m) = rx.recv().await {
        got.push(m);
    }
    got
}

fn exit_of(out: &[ShellOut]) -> Option<crate::ExitStatus> {
    match out.last() {
        Some(ShellOut::Exit(e)) => Some(*e),
        _ => None,
    }
}

#[tokio::test]
async fn routed_runs_between_its_records_and_is_redacted() {
    let fx = Fixture::new();
    fx.backend.answer(Answer::Exit {
        stdout: b"routed hunter2-secret\n".to_vec(),
        code: 3,
    });
    let out = routed(&fx, CancellationToken::new()).await;
    assert_eq!(
        out[0],
        ShellOut::Stdout(b"routed [REDACTED:secret-env]\n".to_vec())
    );
    assert_eq!(exit_of(&out).map(|e| e.code), Some(3));
    assert_eq!(fx.written(), ["tool_started", "tool_result ok"]);
    let Recorded::Exec { merge_stderr, .. } = &fx.backend.log()[1] else {
        panic!("no command ran");
    };
    assert!(!merge_stderr);
}

#[tokio::test]
async fn routed_read_only_root_refusal_is_a_line_and_a_record() {
    let fx = Fixture::new();
    fx.backend.answer(Answer::Exit {
        stdout: b"touch: cannot touch '/usr/tg-r': Read-only file system\n".to_vec(),
        code: 1,
    });
    let out = routed(&fx, CancellationToken::new()).await;
    let stderr: String = out
        .iter()
        .filter_map(|m| match m {
            ShellOut::Stderr(b) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        })
        .collect();
    assert_eq!(
        stderr,
        "sandbox: denied write /usr/tg-r (the sandbox root is read-only; write inside the workspace; from the command's error message)\n"
    );
    assert_eq!(
        fx.written(),
        ["tool_started", "sandbox_denial", "tool_result ok"]
    );
}

#[tokio::test]
async fn routed_cancelled_or_revoked_mid_run_is_stopped() {
    for revoke in [false, true] {
        let fx = Fixture::new();
        fx.backend.answer(Answer::Hang);
        let cancel = fx.session.cancel.child_token();
        let stop = async {
            fx.backend.started().await;
            if revoke {
                fx.session.end(State::Revoked, "by the test");
            } else {
                cancel.cancel();
            }
        };
        let (out, ()) = tokio::join!(routed(&fx, cancel.clone()), stop);
        assert_eq!(exit_of(&out).map(|e| e.signal), Some(9), "{out:?}");
        assert_eq!(fx.written(), ["tool_started", "tool_result stopped"]);
    }
}

#[tokio::test]
async fn routed_without_its_started_record_runs_nothing() {
    let fx = Fixture::new();
    fx.fail("tool_started");
    let out = routed(&fx, CancellationToken::new()).await;
    assert_eq!(exit_of(&out).map(|e| e.code), Some(crate::ROUTED_NOT_RUN));
    assert_eq!(fx.written(), Vec::<String>::new());
    assert_eq!(fx.backend.log(), []);
}
