//! The policy enforcement point: the one place that calls the policy engine,
//! then the audit log, then the tool executors and sandbox backends.
//!
//! Order for every CallTool (BRIEF section 4):
//! 1. session check (done by the auth layer) and the tool-call cap;
//! 2. the policy engine: allowlist, validation, hard floor, rules,
//!    always-confirm, mode (BRIEF steps 2–7); then session-scope grants and
//!    `auto_approve` for the non-destructive ask tier;
//! 3. the decision record, durable before anything runs (no record, no run:
//!    AUDIT_UNAVAILABLE);
//! 4. an approval when the verdict is ask;
//! 5. execution, with `tool_started` before and `tool_result` after (a
//!    read-only tool reads while that record's fsync runs, and its output is
//!    released only after it).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tollgate_policy::{Code, Context, Decision, ToolCall, Verdict};
use tollgate_proto::v1 as pb;
use tollgate_sandbox::{ExecRequest, Output, Sandbox, SandboxSpec};
use tollgate_tools::{FetchLimits, HopVetter, ToolOutput};

use crate::approvals::{Outcome, Scope};
use crate::facts::{RealFs, SystemResolver};
use crate::sessions::{Session, unix_ms};
use crate::supervisor::Supervisor;

/// How much of a tool's arguments and output goes into the audit record.
const AUDIT_EXCERPT: usize = 2048;

/// How long a cancelled call's executor may take to stop what it started
/// (kill the command's process group and reap it) before it is dropped.
const CANCEL_GRACE: Duration = Duration::from_secs(2);

/// Runs one tool call through the whole pipeline. Cancelling `cancel` (the
/// client went away, the session was revoked) stops it at whatever stage it
/// is in; the records say so.
pub async fn call_tool(
    sup: &Arc<Supervisor>,
    session: &Arc<Session>,
    req: pb::CallToolRequest,
    cancel: CancellationToken,
) -> pb::CallToolResponse {
    let started = Instant::now();
    let call_id = req.call_id.chars().take(128).collect::<String>();
    let tool = req.tool.clone();

    if !session.is_active() {
        return denied(revoked(session));
    }
    if !session.take_tool_call() {
        let reason = format!(
            "the session's tool-call cap ({}) is reached. Stop calling tools and summarise what you did and what remains.",
            session.caps.max_tool_calls
        );
        let _ = record(
            sup,
            session,
            "permission_check",
            json!({
                "call_id": call_id, "tool": tool, "decision": "deny", "code": "CAP_REACHED",
                "rule": "cap:max_tool_calls", "reason": reason,
            }),
        );
        return denied(pb::Denial {
            code: pb::DenialCode::CapReached as i32,
            reason,
            rule: "cap:max_tool_calls".to_string(),
            ..Default::default()
        });
    }

    // Step 2: the engine. Arguments that are not JSON never reach it.
    let decision = match serde_json::from_str::<Value>(&req.arguments_json) {
        Ok(args) => Ok((
            decide(sup, session, &tool, req.arguments_json.len(), args.clone()).await,
            args,
        )),
        Err(e) => Err(Decision::deny(
            Code::InvalidArgs,
            format!("the arguments for {tool} are not valid JSON ({e}); send a JSON object"),
            Some("schema"),
        )),
    };
    let (mut decision, args) = match decision {
        Ok(pair) => pair,
        Err(d) => {
            let _ = audit_decision(
                sup,
                session,
                &call_id,
                &tool,
                &req.arguments_json,
                &d,
                "",
                false,
            );
            return denied(denial_of(&d));
        }
    };

    // Grants and auto-approve apply only to the non-destructive ask tier.
    let mut allowed_by = "allowed";
    if decision.verdict == Verdict::Ask && !decision.destructive {
        if session.has_grant(&tool, &decision.target) {
            decision.verdict = Verdict::Allow;
            allowed_by = "allowed(session-scope)";
        } else if sup.config.session.auto_approve {
            decision.verdict = Verdict::Allow;
            allowed_by = "auto-allow(config)";
        }
    }

    // Step 3: the decision record, durable before the action. An allowed
    // call's record is made durable by the fsync of its `tool_started`
    // record, written next: one fsync for both, before the tool runs.
    if let Err(e) = audit_decision(
        sup,
        session,
        &call_id,
        &tool,
        &req.arguments_json,
        &decision,
        allowed_by,
        decision.verdict == Verdict::Allow,
    ) {
        return denied(audit_unavailable(&e));
    }

    match decision.verdict {
        Verdict::Deny => return denied(denial_of(&decision)),
        Verdict::Ask => match ask(sup, session, &call_id, &tool, &args, &decision, &cancel).await {
            Ok(by) => allowed_by = by,
            Err(d) => return denied(d),
        },
        Verdict::Allow => {}
    }

    // Step 5: execute. A read-only tool in `always` mode reads while the
    // fsync runs, and its output is released only once the decision is
    // durable (see `read_while_durable`); every other tool waits for the
    // fsync before it starts.
    let overlap = READ_ONLY_TOOLS.contains(&tool.as_str()) && session.audit.append_waits();
    let started_record = json!({
        "call_id": call_id, "tool": tool, "allowed_by": allowed_by, "target": decision.target,
    });
    if let Err(e) = record_as(sup, session, "tool_started", started_record, overlap) {
        return denied(audit_unavailable(&e));
    }
    let run = async {
        let run = execute(sup, session, &tool, &args, &decision, &cancel);
        if overlap {
            read_while_durable(run, || sup.recorder.sync(&session.audit)).await
        } else {
            Ok(run.await)
        }
    };
    // On cancellation the executor still gets a moment: a sandboxed command
    // is killed by the backend's exec loop, which acts on `cancel` only while
    // it is polled. Dropping it at once left the command running.
    tokio::pin!(run);
    let ran = tokio::select! {
        r = &mut run => Some(r),
        _ = cancel.cancelled() => tokio::time::timeout(CANCEL_GRACE, &mut run).await.ok(),
    };
    let result = match ran {
        Some(Ok(r)) => r,
        Some(Err(e)) => return denied(audit_unavailable(&e)),
        None => Err(ExecError::Cancelled),
    };
    let duration_ms = started.elapsed().as_millis() as u64;
    let mut response = match result {
        Ok(done) => {
            let text = sup.redactor.redact(&done.output.text);
            pb::CallToolResponse {
                ok: true,
                output: text,
                exit_code: done.exit_code,
                truncated: done.output.truncated,
                duration_ms,
                allowed_by: allowed_by.to_string(),
                ..Default::default()
            }
        }
        Err(ExecError::Tool(msg)) => pb::CallToolResponse {
            ok: false,
            error: sup.redactor.redact(&msg),
            duration_ms,
            allowed_by: allowed_by.to_string(),
            ..Default::default()
        },
        Err(ExecError::Sandbox(reason)) => pb::CallToolResponse {
            denied: Some(pb::Denial {
                code: pb::DenialCode::SandboxUnavailable as i32,
                reason,
                rule: "sandbox".to_string(),
                consequence: decision.consequence.clone(),
                destructive: decision.destructive,
            }),
            duration_ms,
            ..Default::default()
        },
        Err(ExecError::Cancelled) => {
            let d = if session.is_active() {
                pb::Denial {
                    code: pb::DenialCode::UserDenied as i32,
                    reason: "the call was cancelled by the user before it finished.".to_string(),
                    rule: "cancel".to_string(),
                    consequence: decision.consequence.clone(),
                    destructive: decision.destructive,
                }
            } else {
                revoked(session)
            };
            pb::CallToolResponse {
                denied: Some(d),
                duration_ms,
                ..Default::default()
            }
        }
    };
    let status = if response.ok {
        "ok"
    } else if response.denied.is_some() {
        "stopped"
    } else {
        "error"
    };
    let excerpt = if decision.secret {
        "[REDACTED:secret-file]".to_string()
    } else {
        excerpt_of(if response.ok {
            &response.output
        } else {
            &response.error
        })
    };
    // The outcome rides on the next fsync (the action has already run).
    let _ = sup.recorder.to_file_deferred(
        &session.audit,
        &session.id,
        "tool_result",
        json!({
            "call_id": call_id, "tool": tool, "status": status, "exit_code": response.exit_code,
            "bytes": response.output.len(), "truncated": response.truncated,
            "duration_ms": duration_ms, "output": excerpt,
        }),
    );
    if !response.ok && response.denied.is_none() && response.error.is_empty() {
        response.error = "the tool failed without a message".to_string();
    }
    response
}

/// Tools whose only effect is the output they return (no write, no process,
/// no network): they may start reading before their decision is durable.
const READ_ONLY_TOOLS: [&str; 3] = ["read_file", "glob_files", "grep"];

/// Starts `work` (polls it once: a file tool hands its job to the owner's
/// thread), then runs `sync` (the fsync that makes the decision and
/// `tool_started` records durable), then finishes `work`. The fsync and the
/// read overlap, but nothing of the output leaves before the records are on
/// disk: if `sync` fails, the output is dropped and the call refused.
async fn read_while_durable<T>(
    work: impl std::future::Future<Output = T>,
    sync: impl FnOnce() -> Result<(), tollgate_audit::AuditError>,
) -> Result<T, tollgate_audit::AuditError> {
    let mut work = std::pin::pin!(work);
    let mut early = None;
    std::future::poll_fn(|cx| {
        if let std::task::Poll::Ready(v) = work.as_mut().poll(cx) {
            early = Some(v);
        }
        std::task::Poll::Ready(())
    })
    .await;
    sync()?;
    match early {
        Some(v) => Ok(v),
        None => Ok(work.await),
    }
}

/// Arguments up to this size are decided on the async thread that received
/// them (a typical command takes microseconds); longer ones on the blocking
/// pool.
const INLINE_DECISION_BYTES: usize = 8 << 10;

/// Runs the engine for a call.
async fn decide(
    sup: &Arc<Supervisor>,
    session: &Arc<Session>,
    tool: &str,
    arguments_len: usize,
    args: Value,
) -> Decision {
    let ctx = Context {
        workspace: session.workspace.clone(),
        mode: session.mode,
        tools: session.tools.clone(),
        home: session.home.clone(),
        protected: sup.protected_paths(),
        read_files: session.read_files(),
    };
    let call = ToolCall {
        tool: tool.to_string(),
        args,
    };
    if tool != "webfetch" && arguments_len <= INLINE_DECISION_BYTES {
        // Pure and microseconds: decide right here.
        return sup
            .engine
            .decide(&call, &ctx, &RealFs, &SystemResolver::default());
    }
    // DNS may block, and a long script may take milliseconds to parse:
    // decide off the async threads, which serve every session.
    let sup2 = Arc::clone(sup);
    tokio::task::spawn_blocking(move || {
        sup2.engine
            .decide(&call, &ctx, &RealFs, &SystemResolver::default())
    })
    .await
    .unwrap_or_else(|e| {
        Decision::deny(
            Code::PolicyDenied,
            format!("the policy engine failed on this call ({e}); the call is refused"),
            Some("floor:engine-failure"),
        )
    })
}

/// The `permission_check` record. `durable_next`: a durable record follows
/// before anything acts on this decision, so this one need not wait for its
/// own fsync.
#[allow(clippy::too_many_arguments)]
fn audit_decision(
    sup: &Supervisor,
    session: &Session,
    call_id: &str,
    tool: &str,
    raw_args: &str,
    d: &Decision,
    allowed_by: &str,
    durable_next: bool,
) -> Result<(), tollgate_audit::AuditError> {
    let verdict = d.verdict.as_str();
    let mut f = json!({
        "call_id": call_id,
        "tool": tool,
        "decision": verdict,
        "code": d.code.as_str(),
        "rule": d.rule,
        "reason": d.reason,
        "consequence": d.consequence,
        "destructive": d.destructive,
        "target": d.target,
        "args": if d.secret { "[REDACTED:secret-file]".to_string() } else { excerpt_of(raw_args) },
    });
    if d.verdict == Verdict::Allow && !allowed_by.is_empty() {
        f["allowed_by"] = json!(allowed_by);
    }
    record_as(sup, session, "permission_check", f, durable_next)
}

/// An approval: offered to operators and (when allowed) the session itself;
/// waits for the first decision, the deadline, or cancellation.
async fn ask(
    sup: &Arc<Supervisor>,
    session: &Arc<Session>,
    call_id: &str,
    tool: &str,
    args: &Value,
    d: &Decision,
    cancel: &CancellationToken,
) -> Result<&'static str, pb::Denial> {
    let id = approval_id().map_err(|e| audit_unavailable_msg(&e))?;
    let timeout = Duration::from_secs(sup.config.session.approval_timeout_s);
    let now = SystemTime::now();
    let diff = preview(sup, session, tool, args, d).await;
    let approval = pb::Approval {
        id: id.clone(),
        session_id: session.id.clone(),
        tool: tool.to_string(),
        consequence: d.consequence.clone(),
        diff,
        destructive: d.destructive,
        target: d.target.clone(),
        created_unix_ms: unix_ms(now),
        deadline_unix_ms: unix_ms(now + timeout),
        rule: d.rule.clone().unwrap_or_default(),
        reason: d.reason.clone(),
        arguments_json: if d.secret {
            "[REDACTED:secret-file]".to_string()
        } else {
            excerpt_of(&sup.redactor.redact(&args.to_string()))
        },
        status: "pending".to_string(),
        uid: session.uid,
    };
    let mut rx = sup.approvals.open(approval.clone());
    if let Err(e) = record(
        sup,
        session,
        "approval_requested",
        json!({
            "approval_id": id, "call_id": call_id, "tool": tool, "consequence": d.consequence,
            "destructive": d.destructive, "target": d.target, "deadline_unix_ms": approval.deadline_unix_ms,
            "rule": d.rule,
        }),
    ) {
        sup.approvals.close(&id, "withdrawn", "supervisor");
        return Err(audit_unavailable(&e));
    }
    if sup.config.session.session_can_approve {
        let _ = session.control.send(pb::ApprovalServerMsg {
            msg: Some(pb::approval_server_msg::Msg::Requested(approval.clone())),
        });
    }
    let resolution = tokio::select! {
        r = &mut rx => r.ok(),
        _ = tokio::time::sleep(timeout) => {
            match sup.approvals.close(&id, "timeout", "deadline") {
                Some(_) => None,
                // Decided in the same instant: that decision stands.
                None => rx.await.ok(),
            }
        }
        _ = cancel.cancelled() => {
            let who = if session.is_active() { "agent disconnected" } else { "session ended" };
            if sup.approvals.close(&id, "withdrawn", who).is_some() {
                let _ = record(sup, session, "approval_decided", json!({
                    "approval_id": id, "tool": tool, "outcome": "withdrawn", "by": who,
                }));
                notify_resolved(session, &id, "withdrawn", who, "", "");
            }
            return Err(if session.is_active() {
                pb::Denial {
                    code: pb::DenialCode::UserDenied as i32,
                    reason: format!("user denied: {}. The call was withdrawn before anyone decided.", d.consequence),
                    rule: "approval".to_string(),
                    consequence: d.consequence.clone(),
                    destructive: d.destructive,
                }
            } else {
                revoked(session)
            });
        }
    };
    match resolution {
        Some(r) => match r.outcome {
            Outcome::Approved { scope } => {
                let by = match scope {
                    Scope::Session => {
                        session.grant(tool, &d.target);
                        "approved(session-scope)"
                    }
                    Scope::Once => "approved",
                };
                let _ = record(
                    sup,
                    session,
                    "approval_decided",
                    json!({
                        "approval_id": id, "tool": tool, "outcome": "approved", "scope": scope.as_str(),
                        "by": r.decided_by, "rule": d.rule, "target": d.target,
                    }),
                );
                notify_resolved(session, &id, "approved", &r.decided_by, scope.as_str(), "");
                Ok(by)
            }
            Outcome::Denied { reason } => {
                let _ = record(
                    sup,
                    session,
                    "approval_decided",
                    json!({
                        "approval_id": id, "tool": tool, "outcome": "denied", "by": r.decided_by,
                        "reason": reason, "rule": d.rule, "target": d.target,
                    }),
                );
                notify_resolved(session, &id, "denied", &r.decided_by, "", &reason);
                let mut text = format!(
                    "user denied: {}. Do not retry this call; ask the user or change approach.",
                    d.consequence
                );
                if !reason.is_empty() {
                    text.push_str(&format!(" The user said: {}", reason.replace('\n', " ")));
                }
                Err(pb::Denial {
                    code: pb::DenialCode::UserDenied as i32,
                    reason: text,
                    rule: d.rule.clone().unwrap_or_default(),
                    consequence: d.consequence.clone(),
                    destructive: d.destructive,
                })
            }
        },
        None => {
            let secs = timeout.as_secs();
            let _ = record(
                sup,
                session,
                "approval_decided",
                json!({
                    "approval_id": id, "tool": tool, "outcome": "timeout", "by": "deadline",
                    "rule": d.rule, "target": d.target,
                }),
            );
            notify_resolved(session, &id, "timeout", "deadline", "", "");
            Err(pb::Denial {
                code: pb::DenialCode::ApprovalTimeout as i32,
                reason: format!(
                    "no one approved in time: {} (waited {secs}s). Do not retry this call; ask the user or change approach.",
                    d.consequence
                ),
                rule: d.rule.clone().unwrap_or_default(),
                consequence: d.consequence.clone(),
                destructive: d.destructive,
            })
        }
    }
}

fn notify_resolved(
    session: &Session,
    id: &str,
    outcome: &str,
    by: &str,
    scope: &str,
    reason: &str,
) {
    let _ = session.control.send(pb::ApprovalServerMsg {
        msg: Some(pb::approval_server_msg::Msg::Resolved(
            pb::ApprovalResolved {
                approval_id: id.to_string(),
                outcome: outcome.to_string(),
                decided_by: by.to_string(),
                scope: scope.to_string(),
                reason: reason.to_string(),
            },
        )),
    });
}

/// The diff preview for writes and edits.
async fn preview(
    sup: &Supervisor,
    session: &Session,
    tool: &str,
    args: &Value,
    d: &Decision,
) -> String {
    const CAP: usize = 16 * 1024;
    let Some(path) = d.path.as_deref() else {
        return String::new();
    };
    let s = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or("");
    let r = match tool {
        "write_file" => session.files.preview_write(path, s("content"), CAP).await,
        "edit_file" => {
            let all = args
                .get("replace_all")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            session
                .files
                .preview_edit(path, s("old_string"), s("new_string"), all, CAP)
                .await
        }
        _ => return String::new(),
    };
    match r {
        Ok(diff) if d.secret => format!("(diff of a secret file withheld; {} bytes)", diff.len()),
        Ok(diff) => sup.redactor.redact(&diff),
        Err(e) => format!("(no preview: {e})"),
    }
}

/// What a tool produced.
struct Done {
    output: ToolOutput,
    exit_code: Option<i32>,
}

enum ExecError {
    /// The tool ran (or tried to) and failed: a message for the model.
    Tool(String),
    /// No sandbox could be had.
    Sandbox(String),
    Cancelled,
}

async fn execute(
    sup: &Arc<Supervisor>,
    session: &Arc<Session>,
    tool: &str,
    args: &Value,
    d: &Decision,
    cancel: &CancellationToken,
) -> Result<Done, ExecError> {
    let cap = sup.config.session.output_cap_bytes;
    let s = |k: &str| args.get(k).and_then(Value::as_str);
    let n = |k: &str| args.get(k).and_then(Value::as_u64);
    let path = || {
        d.path
            .clone()
            .ok_or_else(|| ExecError::Tool(format!("{tool}: the policy resolved no path")))
    };
    let files = &session.files;
    let out = match tool {
        "read_file" => {
            let p = path()?;
            let o = files
                .read_file(&p, n("offset"), n("limit"), cap)
                .await
                .map_err(tool_err)?;
            session.mark_read(p);
            o
        }
        "write_file" => {
            let p = path()?;
            let o = files
                .write_file(&p, s("content").unwrap_or(""))
                .await
                .map_err(tool_err)?;
            session.mark_read(p);
            o
        }
        "edit_file" => {
            let p = path()?;
            let o = files
                .edit_file(
                    &p,
                    s("old_string").unwrap_or(""),
                    s("new_string").unwrap_or(""),
                    args.get("replace_all")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                )
                .await
                .map_err(tool_err)?;
            session.mark_read(p);
            o
        }
        "glob_files" => files
            .glob_files(s("pattern").unwrap_or(""), d.path.as_deref(), cap)
            .await
            .map_err(tool_err)?,
        "grep" => files
            .grep(
                s("pattern").unwrap_or(""),
                d.path.as_deref(),
                s("glob"),
                args.get("ignore_case")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
                cap,
            )
            .await
            .map_err(tool_err)?,
        "run_bash" => {
            return run_bash(
                sup,
                session,
                s("command").unwrap_or(""),
                n("timeout_s"),
                cancel,
            )
            .await;
        }
        "webfetch" => {
            let Some(first) = &d.fetch else {
                return Err(ExecError::Tool(
                    "webfetch: the policy vetted no address".to_string(),
                ));
            };
            let max = n("max_bytes")
                .map(|m| (m as usize).min(sup.config.session.fetch_max_bytes))
                .unwrap_or(sup.config.session.fetch_max_bytes);
            let limits = FetchLimits {
                max_bytes: max,
                timeout: Duration::from_secs(sup.config.session.fetch_timeout_s),
                max_redirects: 5,
            };
            let vetter = Vetter {
                sup: Arc::clone(sup),
            };
            let o = tollgate_tools::webfetch(first, &limits, &vetter)
                .await
                .map_err(tool_err)?;
            tollgate_tools::cap_text(&o.text, cap, "pass a smaller max_bytes")
        }
        other => {
            return Err(ExecError::Tool(format!(
                "{other} runs in the agent, not in the supervisor"
            )));
        }
    };
    Ok(Done {
        output: out,
        exit_code: None,
    })
}

fn tool_err(e: tollgate_tools::ToolError) -> ExecError {
    ExecError::Tool(e.to_string())
}

/// Re-vets each webfetch redirect hop with the same SSRF guard.
struct Vetter {
    sup: Arc<Supervisor>,
}

impl HopVetter for Vetter {
    fn vet(&self, url: &str) -> Result<tollgate_policy::VettedFetch, String> {
        self.sup
            .engine
            .vet_url(url, &SystemResolver::default())
            .map_err(|d| d.reason)
    }
}

/// The session's sandbox, created on first use, or why there is none (for
/// `agent mcp-gateway`, which runs its server in it).
pub(crate) async fn session_sandbox(
    sup: &Supervisor,
    session: &Session,
) -> Result<Arc<dyn Sandbox>, String> {
    sandbox_of(sup, session).await.map_err(|e| match e {
        ExecError::Tool(m) | ExecError::Sandbox(m) => m,
        ExecError::Cancelled => "the session ended".to_string(),
    })
}

/// The session's sandbox, created on first use.
async fn sandbox_of(sup: &Supervisor, session: &Session) -> Result<Arc<dyn Sandbox>, ExecError> {
    session
        .sandbox
        .get_or_try_init(|| async {
            let token = session.sandbox_token_text.lock().clone();
            let user = crate::workspace::passwd()
                .into_iter()
                .find(|u| u.uid == session.uid)
                .map(|u| u.name)
                .unwrap_or_else(|| session.uid.to_string());
            let spec = SandboxSpec {
                session_id: session.id.clone(),
                workspace: session.workspace.clone(),
                workspace_id: Some(tollgate_sandbox::WorkspaceId::from_pair(session.files.id())),
                uid: session.uid,
                gid: session.gid,
                env: crate::secrets::sandbox_env(
                    &session.id,
                    token.as_deref(),
                    &user,
                    std::env::var("LANG").ok().as_deref(),
                    std::env::var("LC_ALL").ok().as_deref(),
                ),
                limits: crate::backends::limits(&sup.config),
                hidden: crate::backends::hidden_paths(
                    &sup.paths.state_dir,
                    sup.audit.dir(),
                    sup.paths.config_file.as_deref(),
                ),
            };
            session.backend.create(&spec).await
        })
        .await
        .cloned()
        .map_err(|e| ExecError::Sandbox(format!("{e}. The command did not run.")))
}

async fn run_bash(
    sup: &Supervisor,
    session: &Session,
    command: &str,
    timeout_s: Option<u64>,
    cancel: &CancellationToken,
) -> Result<Done, ExecError> {
    let sb = sandbox_of(sup, session).await?;
    if !session.is_active() {
        return Err(ExecError::Cancelled);
    }
    let cfg = &sup.config.sandbox;
    let timeout = Duration::from_secs(
        timeout_s
            .unwrap_or(cfg.run_timeout_s)
            .clamp(1, cfg.max_run_timeout_s),
    );
    let cap = sup.config.session.output_cap_bytes;
    let (tx, mut rx) = mpsc::channel::<Output>(64);
    let req = ExecRequest {
        argv: vec!["sh".to_string(), "-c".to_string(), command.to_string()],
        cwd: Some(session.workspace.clone()),
        timeout,
        merge_stderr: true,
    };
    let collector = tokio::spawn(async move {
        // Keep at most a little over the cap; count the rest.
        let mut kept: Vec<u8> = Vec::new();
        let mut total: u64 = 0;
        while let Some(chunk) = rx.recv().await {
            let bytes = match &chunk {
                Output::Stdout(b) | Output::Stderr(b) => b,
            };
            total += bytes.len() as u64;
            let room = (cap + 4).saturating_sub(kept.len());
            kept.extend_from_slice(&bytes[..bytes.len().min(room)]);
        }
        (kept, total)
    });
    let outcome = sb.exec(req, tx, cancel.child_token()).await;
    let (kept, total) = collector.await.unwrap_or_default();
    let outcome = outcome.map_err(|e| match e {
        tollgate_sandbox::SandboxError::Gone(_) if !session.is_active() => ExecError::Cancelled,
        other => ExecError::Sandbox(format!("{other}. The command may not have completed.")),
    })?;
    if outcome.cancelled {
        return Err(ExecError::Cancelled);
    }
    let mut text = String::from_utf8_lossy(&kept).into_owned();
    let mut capped = tollgate_tools::cap_text(
        &text,
        cap,
        "redirect output to a file and read it with read_file offset/limit",
    );
    if (total as usize) > kept.len() && !capped.truncated {
        capped.truncated = true;
        capped.text.push_str(&format!(
            "\n[output truncated: {} more bytes not shown; redirect output to a file and read it with read_file offset/limit]",
            total as usize - kept.len()
        ));
    }
    text = capped.text;
    if outcome.timed_out {
        text.push_str(&format!(
            "\n[command timed out after {}s and was killed]",
            timeout.as_secs()
        ));
    } else if let Some(sig) = outcome.signal {
        text.push_str(&format!("\n[command killed by signal {sig}]"));
    }
    Ok(Done {
        output: ToolOutput {
            text,
            truncated: capped.truncated,
        },
        exit_code: Some(outcome.exit_code.unwrap_or(-1)),
    })
}

/// A wrapped MCP server's answer to a forwarded `tools/call`, already capped
/// and redacted by the gateway: what goes back to the client, and what the
/// audit records of it.
pub struct McpAnswer {
    /// The JSON-RPC response for the client.
    pub response: Value,
    pub bytes: usize,
    pub truncated: bool,
    /// The server said the call failed (`isError`, or a JSON-RPC error).
    pub is_error: bool,
}

/// One `tools/call` of a wrapped MCP server (`agent mcp-gateway`), through
/// the same steps as [`call_tool`]: the tool-call cap, the engine's
/// `mcp(NAME.TOOL)` decision, its record (durable before anything is
/// forwarded), an approval when the verdict is ask, then `forward` (which
/// sends the request to the server in the session's sandbox and waits for
/// its answer), bounded by the sandbox's longest run timeout, and its
/// outcome record. `Err` is the sentence for the model when the call was
/// not forwarded or got no answer.
#[allow(clippy::too_many_arguments)]
pub async fn mcp_tool_call<F, Fut>(
    sup: &Arc<Supervisor>,
    session: &Arc<Session>,
    server: &str,
    tool: &str,
    call_id: &str,
    args: &Value,
    cancel: &CancellationToken,
    forward: F,
) -> Result<McpAnswer, pb::Denial>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<McpAnswer, String>>,
{
    use tollgate_policy::{MCP_RULE_TOOL, McpToolCall};
    let started = Instant::now();
    if !session.is_active() {
        return Err(revoked(session));
    }
    let call = McpToolCall {
        server: server.to_string(),
        tool: tool.to_string(),
    };
    let raw_args = sup.redactor.redact(&args.to_string());
    let mut decision = if session.take_tool_call() {
        sup.engine.decide_mcp(&call, session.mode)
    } else {
        Decision::deny(
            Code::CapReached,
            format!(
                "the session's tool-call cap ({}) is reached. Stop calling tools and summarise what you did and what remains.",
                session.caps.max_tool_calls
            ),
            Some("cap:max_tool_calls"),
        )
    };
    let mut allowed_by = "allowed";
    if decision.verdict == Verdict::Ask {
        if session.has_grant(MCP_RULE_TOOL, &decision.target) {
            decision.verdict = Verdict::Allow;
            allowed_by = "allowed(session-scope)";
        } else if sup.config.session.auto_approve {
            decision.verdict = Verdict::Allow;
            allowed_by = "auto-allow(config)";
        }
    }
    let mut check = json!({
        "call_id": call_id, "tool": MCP_RULE_TOOL, "server": server, "mcp_tool": tool,
        "decision": decision.verdict.as_str(), "code": decision.code.as_str(),
        "rule": decision.rule, "reason": decision.reason, "consequence": decision.consequence,
        "destructive": decision.destructive, "target": decision.target,
        "args": excerpt_of(&raw_args),
    });
    if decision.verdict == Verdict::Allow {
        check["allowed_by"] = json!(allowed_by);
    }
    let durable_next = decision.verdict == Verdict::Allow;
    record_as(sup, session, "permission_check", check, durable_next)
        .map_err(|e| audit_unavailable(&e))?;
    match decision.verdict {
        Verdict::Deny => return Err(denial_of(&decision)),
        Verdict::Ask => {
            allowed_by = ask(
                sup,
                session,
                call_id,
                MCP_RULE_TOOL,
                args,
                &decision,
                cancel,
            )
            .await?;
        }
        Verdict::Allow => {}
    }
    record(
        sup,
        session,
        "tool_started",
        json!({
            "call_id": call_id, "tool": MCP_RULE_TOOL, "server": server, "mcp_tool": tool,
            "allowed_by": allowed_by, "target": decision.target,
        }),
    )
    .map_err(|e| audit_unavailable(&e))?;
    let limit = Duration::from_secs(sup.config.sandbox.max_run_timeout_s);
    // Biased: an answer (or the server's end) already there is reported as
    // such, even when the call is being cancelled at the same moment.
    let outcome = tokio::select! {
        biased;
        r = tokio::time::timeout(limit, forward()) => match r {
            Ok(r) => r,
            Err(_) => Err(format!(
                "the MCP server `{server}` did not answer within {}s; the call was abandoned.",
                limit.as_secs()
            )),
        },
        _ = cancel.cancelled() => Err(if session.is_active() {
            "the call was cancelled before the MCP server answered.".to_string()
        } else {
            revoked(session).reason
        }),
    };
    let duration_ms = started.elapsed().as_millis() as u64;
    let fields = match &outcome {
        Ok(a) => json!({
            "call_id": call_id, "tool": MCP_RULE_TOOL, "server": server, "mcp_tool": tool,
            "status": if a.is_error { "error" } else { "ok" }, "bytes": a.bytes,
            "truncated": a.truncated, "duration_ms": duration_ms,
        }),
        Err(why) => json!({
            "call_id": call_id, "tool": MCP_RULE_TOOL, "server": server, "mcp_tool": tool,
            "status": "stopped", "bytes": 0, "truncated": false, "duration_ms": duration_ms,
            "error": why,
        }),
    };
    let _ = sup
        .recorder
        .to_file_deferred(&session.audit, &session.id, "tool_result", fields);
    outcome.map_err(|reason| {
        if session.is_active() {
            pb::Denial {
                code: pb::DenialCode::SandboxUnavailable as i32,
                reason,
                rule: "mcp-gateway".to_string(),
                consequence: decision.consequence.clone(),
                destructive: false,
            }
        } else {
            revoked(session)
        }
    })
}

fn record(
    sup: &Supervisor,
    session: &Session,
    event: &str,
    fields: Value,
) -> Result<(), tollgate_audit::AuditError> {
    record_as(sup, session, event, fields, false)
}

/// [`record`], or with `deferred` riding on the file's next fsync (a durable
/// step follows before anything acts on it).
fn record_as(
    sup: &Supervisor,
    session: &Session,
    event: &str,
    fields: Value,
    deferred: bool,
) -> Result<(), tollgate_audit::AuditError> {
    let (file, id) = (&session.audit, &session.id);
    let written = if deferred {
        sup.recorder.to_file_deferred(file, id, event, fields)
    } else {
        sup.recorder.to_file(file, id, event, fields)
    };
    written.map(|_| ())
}

fn excerpt_of(text: &str) -> String {
    if text.len() <= AUDIT_EXCERPT {
        return text.to_string();
    }
    let mut end = AUDIT_EXCERPT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &text[..end], text.len())
}

fn approval_id() -> Result<String, crate::credentials::CredentialError> {
    Ok(format!(
        "ap_{}",
        &crate::credentials::new_session_id()?[..10]
    ))
}

pub fn denial_of(d: &Decision) -> pb::Denial {
    pb::Denial {
        code: code_of(d.code) as i32,
        reason: d.reason.clone(),
        rule: d.rule.clone().unwrap_or_default(),
        consequence: d.consequence.clone(),
        destructive: d.destructive,
    }
}

/// The proto code for an engine code.
pub fn code_of(c: Code) -> pb::DenialCode {
    match c {
        Code::Ok | Code::ApprovalRequired => pb::DenialCode::Unspecified,
        Code::UnknownTool => pb::DenialCode::UnknownTool,
        Code::NotInAllowlist => pb::DenialCode::NotInAllowlist,
        Code::InvalidArgs => pb::DenialCode::InvalidArgs,
        Code::PolicyDenied => pb::DenialCode::PolicyDenied,
        Code::UserDenied => pb::DenialCode::UserDenied,
        Code::ApprovalTimeout => pb::DenialCode::ApprovalTimeout,
        Code::CapReached => pb::DenialCode::CapReached,
        Code::SessionRevoked => pb::DenialCode::SessionRevoked,
        Code::SandboxUnavailable => pb::DenialCode::SandboxUnavailable,
        Code::AuditUnavailable => pb::DenialCode::AuditUnavailable,
    }
}

fn denied(d: pb::Denial) -> pb::CallToolResponse {
    pb::CallToolResponse {
        ok: false,
        denied: Some(d),
        ..Default::default()
    }
}

pub fn revoked(session: &Session) -> pb::Denial {
    let why = session.end_reason();
    pb::Denial {
        code: pb::DenialCode::SessionRevoked as i32,
        reason: format!(
            "the session was {} ({}). Stop.",
            session.state().as_str(),
            if why.is_empty() {
                "no reason given"
            } else {
                &why
            }
        ),
        rule: "session".to_string(),
        ..Default::default()
    }
}

fn audit_unavailable(e: &tollgate_audit::AuditError) -> pb::Denial {
    audit_unavailable_msg(e)
}

fn audit_unavailable_msg(e: &dyn std::fmt::Display) -> pb::Denial {
    tracing::error!(error = %e, "audit record failed; refusing the call");
    pb::Denial {
        code: pb::DenialCode::AuditUnavailable as i32,
        reason: format!(
            "the audit log cannot be written ({e}), so nothing may run. Tell the user; do not retry until it is fixed."
        ),
        rule: "floor:audit".to_string(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    #[tokio::test]
    async fn a_read_starts_before_the_fsync_and_is_released_after_it() {
        let started = AtomicBool::new(false);
        let synced = AtomicBool::new(false);
        let work = async {
            started.store(true, Ordering::SeqCst);
            // Not done on the first poll, like a job on the owner's thread.
            tokio::task::yield_now().await;
            assert!(synced.load(Ordering::SeqCst), "finished before the fsync");
            "content"
        };
        let out = read_while_durable(work, || {
            assert!(started.load(Ordering::SeqCst), "the read had not started");
            synced.store(true, Ordering::SeqCst);
            Ok(())
        })
        .await;
        assert_eq!(out.ok(), Some("content"));
    }

    #[tokio::test]
    async fn a_failed_fsync_drops_the_output() {
        let work = async { "secret content" };
        let out = read_while_durable(work, || {
            Err(tollgate_audit::AuditError::Broken {
                path: "/audit/x.jsonl".into(),
                reason: "fdatasync failed: EIO".into(),
            })
        })
        .await;
        let err = out.expect_err("the output must not be released");
        assert!(err.to_string().contains("fdatasync failed"), "{err}");
    }
}
