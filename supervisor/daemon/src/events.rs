//! Recording events: every audit record goes through here, so what operators
//! watch (`supervisorctl watch`) is exactly what the audit log holds.

use std::sync::Arc;
use std::time::SystemTime;

use serde_json::Value;
use tokio::sync::broadcast;
use tollgate_audit::{Appended, Audit, AuditError, AuditFile, Durable, Priority};
use tollgate_proto::v1 as pb;

use crate::sessions::unix_ms;

/// Writes audit records and publishes them to watchers. A clone writes to
/// the same log and the same watchers.
#[derive(Clone)]
pub struct Recorder {
    audit: Arc<Audit>,
    watchers: broadcast::Sender<pb::Event>,
    /// OpenTelemetry export, when configured: one more reader of what the
    /// log holds, behind a bounded queue that never blocks a write.
    telemetry: Option<crate::telemetry::Sink>,
}

impl Recorder {
    pub fn new(audit: Arc<Audit>) -> Recorder {
        let (watchers, _) = broadcast::channel(1024);
        Recorder {
            audit,
            watchers,
            telemetry: None,
        }
    }

    /// Offers every event written from now on to `sink` as well.
    pub fn with_telemetry(mut self, sink: Option<crate::telemetry::Sink>) -> Recorder {
        self.telemetry = sink;
        self
    }

    /// The telemetry queue, when export is on.
    pub fn telemetry(&self) -> Option<&crate::telemetry::Sink> {
        self.telemetry.as_ref()
    }

    pub fn subscribe(&self) -> broadcast::Receiver<pb::Event> {
        self.watchers.subscribe()
    }

    /// Appends to `file` (a session's log) and publishes. The caller decides
    /// what a failure means (for a decision record: refuse the call).
    pub fn to_file(
        &self,
        file: &AuditFile,
        session: &str,
        event: &str,
        fields: Value,
    ) -> Result<Appended, AuditError> {
        self.write(
            file,
            session,
            event,
            fields,
            Durable::AsConfigured,
            Priority::Ordinary,
        )
    }

    /// An essential record (a refusal, a revocation, a stop): when the disk is
    /// full it may draw on the audit directory's reserve.
    pub fn to_file_essential(
        &self,
        file: &AuditFile,
        session: &str,
        event: &str,
        fields: Value,
    ) -> Result<Appended, AuditError> {
        self.write(
            file,
            session,
            event,
            fields,
            Durable::AsConfigured,
            Priority::Essential,
        )
    }

    /// [`Recorder::to_file_essential`], riding on the file's next fsync.
    pub fn to_file_essential_deferred(
        &self,
        file: &AuditFile,
        session: &str,
        event: &str,
        fields: Value,
    ) -> Result<Appended, AuditError> {
        self.write(
            file,
            session,
            event,
            fields,
            Durable::Later,
            Priority::Essential,
        )
    }

    /// The same, but the record rides on the next fsync
    /// ([`AuditFile::append_deferred`]): for an outcome, or for a decision
    /// that a durable record follows at once.
    pub fn to_file_deferred(
        &self,
        file: &AuditFile,
        session: &str,
        event: &str,
        fields: Value,
    ) -> Result<Appended, AuditError> {
        self.write(
            file,
            session,
            event,
            fields,
            Durable::Later,
            Priority::Ordinary,
        )
    }

    fn write(
        &self,
        file: &AuditFile,
        session: &str,
        event: &str,
        fields: Value,
        durable: Durable,
        priority: Priority,
    ) -> Result<Appended, AuditError> {
        // Watchers see what the log holds; with none, skip the copy.
        let published = (self.watchers.receiver_count() > 0)
            .then(|| (summarise(event, &fields), fields.clone()));
        let exported = self
            .telemetry
            .as_ref()
            .filter(|t| t.wants(event))
            .map(|t| (t, fields.clone()));
        let waits = match durable {
            Durable::Later => false,
            Durable::Now => true,
            Durable::AsConfigured => file.append_waits(),
        };
        let appended = if waits {
            waiting_for_disk(|| file.append_with(session, event, fields, durable, priority))?
        } else {
            // (A write alone does not block long enough to pay for the
            // hand-off.)
            file.append_with(session, event, fields, durable, priority)?
        };
        if let Some((summary, fields)) = published {
            self.publish(session, event, summary, fields);
        }
        if let Some((sink, fields)) = exported {
            sink.offer(session, event, fields);
        }
        Ok(appended)
    }

    /// Appends to the supervisor's own log (a fresh one if it broke) and
    /// publishes.
    pub fn supervisor(
        &self,
        session: &str,
        event: &str,
        fields: Value,
    ) -> Result<Appended, AuditError> {
        let log = self.audit.supervisor_log()?;
        self.to_file(&log, session, event, fields)
    }

    /// [`Recorder::supervisor`], riding on that log's next fsync.
    pub fn supervisor_deferred(
        &self,
        session: &str,
        event: &str,
        fields: Value,
    ) -> Result<Appended, AuditError> {
        let log = self.audit.supervisor_log()?;
        self.write(
            &log,
            session,
            event,
            fields,
            Durable::Later,
            Priority::Ordinary,
        )
    }

    /// An essential record in the supervisor's log (a revocation, a stop,
    /// the shutdown): may draw on the reserve.
    pub fn supervisor_essential(
        &self,
        session: &str,
        event: &str,
        fields: Value,
        durable: Durable,
    ) -> Result<Appended, AuditError> {
        let log = self.audit.supervisor_log()?;
        self.write(&log, session, event, fields, durable, Priority::Essential)
    }

    /// Makes every record appended to `file` so far durable (one fsync, or
    /// a share of one in flight).
    pub fn sync(&self, file: &AuditFile) -> Result<(), AuditError> {
        waiting_for_disk(|| file.sync())
    }

    /// Records a session file's final head in the supervisor's log, so a
    /// truncated tail is caught by `audit verify`. Syncs both files.
    /// One that cannot be written now (a full disk) is written later
    /// ([`Audit::retry_anchors`]).
    pub fn anchor(&self, file: &Arc<AuditFile>, session: &str) -> Result<Appended, AuditError> {
        waiting_for_disk(|| self.audit.anchor(file, session))
    }

    /// Publishes without writing (for events already written elsewhere).
    fn publish(&self, session: &str, event: &str, summary: String, fields: Value) {
        // No watchers is fine.
        let _ = self.watchers.send(pb::Event {
            ts_unix_ms: unix_ms(SystemTime::now()),
            session_id: session.to_string(),
            event: event.to_string(),
            summary,
            json: fields.to_string(),
        });
    }
}

/// Runs `f`, which blocks for the disk (an fsync). On a multi-thread
/// runtime the runtime moves other tasks off this worker meanwhile.
fn waiting_for_disk<T>(f: impl FnOnce() -> T) -> T {
    if multi_thread_runtime() {
        tokio::task::block_in_place(f)
    } else {
        f()
    }
}

fn multi_thread_runtime() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
}

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// One human line per event, for `supervisorctl watch`.
pub fn summarise(event: &str, f: &Value) -> String {
    let line = match event {
        "permission_check" => {
            let mut line = format!("{} {}", s(f, "tool"), s(f, "decision"));
            let by = s(f, "allowed_by");
            if !by.is_empty() && by != "allowed" {
                line.push_str(&format!(" [{by}]"));
            }
            if !s(f, "rule").is_empty() {
                line.push_str(&format!(" ({})", s(f, "rule")));
            }
            if !s(f, "consequence").is_empty() {
                line.push_str(&format!(": {}", s(f, "consequence")));
            }
            line
        }
        "approval_requested" => format!(
            "approval {} requested: {}{}",
            s(f, "approval_id"),
            s(f, "consequence"),
            if f.get("destructive").and_then(Value::as_bool) == Some(true) {
                " [destructive]"
            } else {
                ""
            }
        ),
        "approval_decided" => format!(
            "approval {} {} by {}",
            s(f, "approval_id"),
            s(f, "outcome"),
            s(f, "by")
        ),
        "tool_started" => format!("{} started", s(f, "tool")),
        "tool_result" => format!(
            "{} finished: {} ({} bytes, {} ms)",
            s(f, "tool"),
            f.get("exit_code")
                .map(|c| format!("exit {c}"))
                .unwrap_or_else(|| s(f, "status").to_string()),
            f.get("bytes").and_then(Value::as_u64).unwrap_or(0),
            f.get("duration_ms").and_then(Value::as_u64).unwrap_or(0)
        ),
        "session_opened" => format!(
            "session opened by uid {} in {} ({})",
            f.get("uid").and_then(Value::as_u64).unwrap_or(0),
            s(f, "workspace"),
            s(f, "mode")
        ),
        "session_revoked" | "session_closed" => {
            format!("{}: {}", event.replace('_', " "), s(f, "reason"))
        }
        other => {
            let mut line = other.replace('_', " ");
            if !s(f, "reason").is_empty() {
                line.push_str(&format!(": {}", s(f, "reason")));
            }
            line
        }
    };
    escape_control(&line)
}

/// Escapes control characters so a path or command cannot forge a line on
/// an operator's terminal.
pub fn escape_control(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn summaries_escape_control_characters() {
        let f = json!({"tool":"read_file","decision":"allow","consequence":"read a\nb\u{1b}[2J"});
        let line = summarise("permission_check", &f);
        assert!(!line.contains('\n') && !line.contains('\u{1b}'), "{line}");
        assert!(line.contains("\\n"), "{line}");
    }
}
