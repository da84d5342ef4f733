//! The records the gate writes to a session's audit log: the excerpt rule
//! (a secret file's content never goes in; the rest is cut at
//! [`AUDIT_EXCERPT`]) written once, and the helpers every record of a call
//! goes through ([`Ctx::write`] is the one writer).

use tollgate_audit::event as audit;
use tollgate_audit::{AuditError, Durable, Event, Priority};
use tollgate_policy::Decision;

use crate::host::Ctx;

/// How much of a tool's arguments and output goes into the audit record.
pub const AUDIT_EXCERPT: usize = 2048;

/// What stands in a record for the arguments or output of a secret file.
const SECRET: &str = "[REDACTED:secret-file]";

/// An ordinary record, durable as the log is configured.
pub(crate) fn record(cx: &Ctx, event: Event) -> Result<(), AuditError> {
    cx.write(event, Durable::AsConfigured, Priority::Ordinary)
}

/// [`record`], or with `deferred` riding on the file's next fsync (a durable
/// step follows before anything acts on it).
pub(crate) fn record_as(cx: &Ctx, event: Event, deferred: bool) -> Result<(), AuditError> {
    let durable = if deferred {
        Durable::Later
    } else {
        Durable::AsConfigured
    };
    cx.write(event, durable, Priority::Ordinary)
}

/// An outcome: the action has already run, so it rides on the next fsync.
pub(crate) fn record_outcome(cx: &Ctx, result: audit::ToolResult) {
    let _ = cx.write(
        Event::ToolResult(result),
        Durable::Later,
        Priority::Ordinary,
    );
}

/// An `approval_decided` record; with the decision `d` it names its rule
/// and target (a withdrawal names neither).
pub(crate) fn decided(
    id: &str,
    tool: &str,
    outcome: audit::ApprovalOutcome,
    by: &str,
    d: Option<&Decision>,
) -> audit::ApprovalDecided {
    audit::ApprovalDecided {
        approval_id: id.to_string(),
        tool: tool.to_string(),
        outcome,
        by: by.to_string(),
        scope: None,
        reason: None,
        rule: d.map(|d| d.rule.clone()),
        target: d.map(|d| d.target.clone()),
        call_id: None,
    }
}

/// The one excerpt rule: nothing of a secret file, the rest cut at
/// [`AUDIT_EXCERPT`].
pub fn excerpt(secret: bool, text: &str) -> String {
    if secret {
        SECRET.to_string()
    } else {
        excerpt_of(text)
    }
}

/// `text` cut at [`AUDIT_EXCERPT`] bytes (on a character boundary), with its
/// length when cut.
pub fn excerpt_of(text: &str) -> String {
    if text.len() <= AUDIT_EXCERPT {
        return text.to_string();
    }
    let mut end = AUDIT_EXCERPT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &text[..end], text.len())
}

/// A fresh approval id.
pub(crate) fn approval_id() -> Result<String, crate::credentials::CredentialError> {
    Ok(format!(
        "ap_{}",
        &crate::credentials::new_session_id()?[..10]
    ))
}

/// `sandbox_denial` records recorded one by one per command, at most; the
/// rest in one summary record.
const DENIALS_ONE_BY_ONE: usize = 16;

/// Where a command's refusals were read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DenialSource {
    /// The kernel's audit records (Landlock, seccomp).
    Kernel,
    /// The command's own error messages (`exec/inferred.rs`).
    CommandOutput,
}

impl DenialSource {
    /// `sandbox_denial.inferred`.
    fn inferred(self) -> Option<String> {
        match self {
            DenialSource::Kernel => None,
            DenialSource::CommandOutput => Some("command_output".to_string()),
        }
    }
}

/// A command's refusals by the sandbox's walls: one `sandbox_denial` per
/// distinct refusal (with its count, at most [`DENIALS_ONE_BY_ONE`]), then
/// one `summary` for the rest and for what the kernel dropped. They ride
/// on the next fsync (the command has already run).
pub(crate) fn record_denials(
    cx: &Ctx,
    call_id: &str,
    r: &tollgate_sandbox::refusal::Refusals,
    source: DenialSource,
) {
    let write = |d: audit::SandboxDenial| {
        let _ = cx.write(Event::SandboxDenial(d), Durable::Later, Priority::Ordinary);
    };
    let mut suppressed = r.not_kept();
    for (i, (refusal, n)) in r.distinct.iter().enumerate() {
        if i >= DENIALS_ONE_BY_ONE {
            suppressed += n;
            continue;
        }
        write(audit::SandboxDenial {
            call_id: call_id.to_string(),
            phase: "refused".to_string(),
            access: refusal.access.as_str().to_string(),
            path: crate::exec::notes::shown_bytes(&refusal.path),
            rule: refusal.rule.as_str().to_string(),
            reason: refusal.rule.words().to_string(),
            program: refusal
                .program
                .as_deref()
                .map(crate::exec::notes::shown_bytes),
            pid: refusal.pid,
            count: *n,
            inferred: source.inferred(),
            argument: refusal.rule.argument().map(str::to_string),
            ..Default::default()
        });
    }
    if suppressed > 0 || r.lost > 0 {
        write(audit::SandboxDenial {
            call_id: call_id.to_string(),
            phase: "summary".to_string(),
            suppressed,
            lost: r.lost,
            inferred: source.inferred(),
            ..Default::default()
        });
    }
}
