//! Step 4 of the pipeline: an approval. It is opened in the table with its
//! consequence, diff preview and deadline, recorded (`approval_requested`),
//! offered to operators and (when allowed) the session itself, and waits
//! for the first decision, the deadline, or the call's cancellation; how it
//! ended is recorded (`approval_decided`) before the call goes on.

use std::time::{Duration, SystemTime};

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tollgate_audit::Event;
use tollgate_audit::event as audit;
use tollgate_policy::{Code, Decision, Tool};

use crate::approvals::{Approval, Notice, Outcome, Resolved, Scope, Status};
use crate::denial::{Denial, audit_unavailable, audit_unavailable_msg, denial, revoked};
use crate::host::Ctx;
use crate::records::{approval_id, decided, excerpt, excerpt_of, record};
use crate::session::{Session, unix_ms};

/// An approval to ask for: the call, its decision, how long to wait.
pub(crate) struct Ask<'a> {
    pub(crate) call_id: &'a str,
    /// The tool the records name (the channel's).
    pub(crate) tool: &'a str,
    /// The arguments as the approval shows them.
    pub(crate) args: &'a Value,
    /// The checked call, when it is the channel's own (for the diff
    /// preview of a write or an edit).
    pub(crate) call: Option<&'a Tool>,
    pub(crate) d: &'a Decision,
    pub(crate) timeout: Duration,
    /// The channel the records name when it is not a tool call's own
    /// (`network`).
    pub(crate) channel: Option<&'a str>,
}

/// How an approval ended.
enum Resolution {
    /// Someone decided (or the decision came in the instant of the deadline).
    Decided(crate::approvals::Resolution),
    /// The deadline passed.
    TimedOut,
    /// The call was cancelled first (the agent went away, the session
    /// ended): the denial to send.
    Withdrawn(Denial),
}

/// An approval: offered to operators and (when allowed) the session itself;
/// waits for the first decision, the deadline, or cancellation.
pub(crate) async fn ask(
    cx: &Ctx,
    a: &Ask<'_>,
    cancel: &CancellationToken,
) -> Result<&'static str, Denial> {
    let (id, rx) = open_approval(cx, a).await?;
    match await_resolution(cx, a, &id, rx, cancel).await {
        Resolution::Decided(r) => match r.outcome {
            Outcome::Approved { scope } => Ok(approved(cx, a, &id, scope, &r.decided_by)),
            Outcome::Denied { reason } => Err(user_denied(cx, a, &id, &r.decided_by, &reason)),
        },
        Resolution::TimedOut => Err(timed_out(cx, a, &id)),
        Resolution::Withdrawn(d) => Err(d),
    }
}

/// The approval with its consequence, diff preview and deadline, opened in
/// the table, recorded (`approval_requested`) and shown to the session when
/// it may approve. Returns its id and where its decision arrives.
async fn open_approval(
    cx: &Ctx,
    a: &Ask<'_>,
) -> Result<
    (
        String,
        tokio::sync::oneshot::Receiver<crate::approvals::Resolution>,
    ),
    Denial,
> {
    let (call_id, tool, d) = (a.call_id, a.tool, a.d);
    let id = approval_id().map_err(|e| audit_unavailable_msg(&e))?;
    let now = SystemTime::now();
    let diff = match a.call {
        Some(call) => preview(cx, call, d).await,
        None => String::new(),
    };
    let approval = Approval {
        id: id.clone(),
        session_id: cx.session.id.clone(),
        tool: tool.to_string(),
        consequence: d.consequence.clone(),
        diff,
        destructive: d.destructive,
        target: d.target.clone(),
        created_unix_ms: unix_ms(now),
        deadline_unix_ms: unix_ms(now + a.timeout),
        rule: d.rule.clone().unwrap_or_default(),
        reason: d.reason.clone(),
        arguments_json: if d.secret {
            excerpt(true, "")
        } else {
            excerpt_of(&cx.host.redactor().redact(&a.args.to_string()))
        },
        status: Status::Pending,
        uid: cx.session.uid,
    };
    let rx = cx.host.approvals().open(approval.clone());
    if let Err(e) = record(
        cx,
        Event::ApprovalRequested(audit::ApprovalRequested {
            approval_id: id.clone(),
            call_id: call_id.to_string(),
            tool: tool.to_string(),
            consequence: d.consequence.clone(),
            destructive: d.destructive,
            target: d.target.clone(),
            deadline_unix_ms: Some(approval.deadline_unix_ms),
            rule: d.rule.clone(),
            rule_file: d.rule_file.clone(),
            channel: a.channel.map(str::to_string),
        }),
    ) {
        cx.host
            .approvals()
            .close(&id, Status::Withdrawn, "supervisor");
        return Err(audit_unavailable(cx, tool, &e));
    }
    if cx.host.config().session.session_can_approve {
        let _ = cx
            .session
            .control
            .send(Notice::Requested(Box::new(approval.clone())));
    }
    Ok((id, rx))
}

/// The first of: a decision, the deadline, the call's cancellation.
async fn await_resolution(
    cx: &Ctx,
    a: &Ask<'_>,
    id: &str,
    mut rx: tokio::sync::oneshot::Receiver<crate::approvals::Resolution>,
    cancel: &CancellationToken,
) -> Resolution {
    let resolution = tokio::select! {
        r = &mut rx => r.ok(),
        _ = tokio::time::sleep(a.timeout) => {
            match cx.host.approvals().close(id, Status::Timeout, "deadline") {
                Some(_) => None,
                // Decided in the same instant: that decision stands.
                None => rx.await.ok(),
            }
        }
        _ = cancel.cancelled() => return Resolution::Withdrawn(withdrawn(cx, a, id)),
    };
    match resolution {
        Some(r) => Resolution::Decided(r),
        None => Resolution::TimedOut,
    }
}

/// The call was cancelled while its approval waited: the approval is
/// withdrawn (recorded when it was still open).
fn withdrawn(cx: &Ctx, a: &Ask<'_>, id: &str) -> Denial {
    let (tool, d) = (a.tool, a.d);
    let who = if cx.session.is_active() {
        "agent disconnected"
    } else {
        "session ended"
    };
    if cx
        .host
        .approvals()
        .close(id, Status::Withdrawn, who)
        .is_some()
    {
        let _ = record(
            cx,
            Event::ApprovalDecided(decided(
                id,
                tool,
                audit::ApprovalOutcome::Withdrawn,
                who,
                None,
            )),
        );
        notify_resolved(&cx.session, Resolved::new(id, Status::Withdrawn, who));
    }
    if cx.session.is_active() {
        denial(
            Code::UserDenied,
            format!(
                "user denied: {}. The call was withdrawn before anyone decided.",
                d.consequence
            ),
            "approval",
            Some(d),
        )
    } else {
        revoked(&cx.session)
    }
}

/// Approved, once or for the session (then the grant is kept): recorded;
/// returns what allowed the call.
fn approved(cx: &Ctx, a: &Ask<'_>, id: &str, scope: Scope, decided_by: &str) -> &'static str {
    let (tool, d) = (a.tool, a.d);
    let by = match scope {
        Scope::Session => {
            cx.session.grant(tool, &d.target);
            "approved(session-scope)"
        }
        Scope::Once => "approved",
    };
    let _ = record(
        cx,
        Event::ApprovalDecided(audit::ApprovalDecided {
            scope: Some(scope.as_str().to_string()),
            ..decided(
                id,
                tool,
                audit::ApprovalOutcome::Approved,
                decided_by,
                Some(d),
            )
        }),
    );
    let r = Resolved {
        scope: Some(scope),
        ..Resolved::new(id, Status::Approved, decided_by)
    };
    notify_resolved(&cx.session, r);
    by
}

/// Denied by a person: recorded; the denial says not to retry, with the
/// person's reason.
fn user_denied(cx: &Ctx, a: &Ask<'_>, id: &str, decided_by: &str, reason: &str) -> Denial {
    let (tool, d) = (a.tool, a.d);
    let _ = record(
        cx,
        Event::ApprovalDecided(audit::ApprovalDecided {
            reason: Some(reason.to_string()),
            ..decided(
                id,
                tool,
                audit::ApprovalOutcome::Denied,
                decided_by,
                Some(d),
            )
        }),
    );
    let r = Resolved {
        reason: reason.to_string(),
        ..Resolved::new(id, Status::Denied, decided_by)
    };
    notify_resolved(&cx.session, r);
    let mut text = format!(
        "user denied: {}. Do not retry this call; ask the user or change approach.",
        d.consequence
    );
    if !reason.is_empty() {
        text.push_str(&format!(" The user said: {}", reason.replace('\n', " ")));
    }
    let rule = d.rule.clone().unwrap_or_default();
    denial(Code::UserDenied, text, &rule, Some(d))
}

/// Nobody decided before the deadline: recorded; refused.
fn timed_out(cx: &Ctx, a: &Ask<'_>, id: &str) -> Denial {
    let (tool, d) = (a.tool, a.d);
    let secs = a.timeout.as_secs();
    let _ = record(
        cx,
        Event::ApprovalDecided(decided(
            id,
            tool,
            audit::ApprovalOutcome::Timeout,
            "deadline",
            Some(d),
        )),
    );
    notify_resolved(&cx.session, Resolved::new(id, Status::Timeout, "deadline"));
    let rule = d.rule.clone().unwrap_or_default();
    denial(
        Code::ApprovalTimeout,
        format!(
            "no one approved in time: {} (waited {secs}s). Do not retry this call; ask the user or change approach.",
            d.consequence
        ),
        &rule,
        Some(d),
    )
}

/// Tells the session's control stream how an approval ended.
fn notify_resolved(session: &Session, r: Resolved) {
    let _ = session.control.send(Notice::Resolved(Box::new(r)));
}

/// The diff preview for writes and edits.
async fn preview(cx: &Ctx, call: &Tool, d: &Decision) -> String {
    const CAP: usize = 16 * 1024;
    let Some(path) = d.path.as_deref() else {
        return String::new();
    };
    let r = match call {
        Tool::WriteFile(a) => cx.session.files.preview_write(path, &a.content, CAP).await,
        Tool::EditFile(a) => {
            let all = a.replace_all.unwrap_or(false);
            cx.session
                .files
                .preview_edit(path, &a.old_string, &a.new_string, all, CAP)
                .await
        }
        Tool::ReadFile(_)
        | Tool::GlobFiles(_)
        | Tool::Grep(_)
        | Tool::RunBash(_)
        | Tool::JobOutput(_)
        | Tool::KillJob(_)
        | Tool::Webfetch(_)
        | Tool::Mcp(_)
        | Tool::TodoAppend(_)
        | Tool::TodoList(_)
        | Tool::TodoUpdate(_)
        | Tool::ReadScratchpad(_)
        | Tool::WriteScratchpad(_)
        | Tool::AskQuestion(_) => return String::new(),
    };
    match r {
        Ok(diff) if d.secret => format!("(diff of a secret file withheld; {} bytes)", diff.len()),
        Ok(diff) => tollgate_policy::escape_preview(&cx.host.redactor().redact(&diff)),
        Err(e) => format!("(no preview: {e})"),
    }
}
