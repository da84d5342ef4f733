//! Recording events: every audit record goes through here, so what operators
//! watch (`supervisorctl watch`) is exactly what the audit log holds.

use std::sync::Arc;
use std::time::SystemTime;

use serde_json::Value;
use tokio::sync::broadcast;
use tollgate_audit::event::PermissionCheck;
use tollgate_audit::{Appended, Audit, AuditError, AuditFile, Durable, Event, Priority};
use tollgate_proto::v1 as pb;

use crate::sessions::unix_ms;

/// Where a record goes.
#[derive(Debug, Clone, Copy)]
pub enum Log<'a> {
    /// A session's own file, and the session's id.
    Session(&'a AuditFile, &'a str),
    /// The supervisor's own log, naming the session (`""` for none).
    Supervisor(&'a str),
}

/// Writes audit records and publishes them to watchers. A clone writes to
/// the same log and the same watchers.
#[derive(Clone)]
pub struct Recorder {
    audit: Arc<Audit>,
    watchers: broadcast::Sender<pb::Event>,
    /// OpenTelemetry export, when configured: one more reader of what the
    /// log holds, behind a bounded queue that never blocks a write.
    telemetry: Option<crate::telemetry::Sink>,
    /// What was recorded, counted by kind.
    counters: Arc<crate::counters::Counters>,
}

impl Recorder {
    pub fn new(audit: Arc<Audit>) -> Recorder {
        let (watchers, _) = broadcast::channel(1024);
        Recorder {
            audit,
            watchers,
            telemetry: None,
            counters: Arc::default(),
        }
    }

    /// Offers every event written from now on to `sink` as well.
    pub fn with_telemetry(mut self, sink: Option<crate::telemetry::Sink>) -> Recorder {
        self.telemetry = sink;
        self
    }

    /// What was recorded since start, by kind.
    pub fn counters(&self) -> &crate::counters::Counters {
        &self.counters
    }

    /// The telemetry queue, when export is on.
    pub fn telemetry(&self) -> Option<&crate::telemetry::Sink> {
        self.telemetry.as_ref()
    }

    pub fn subscribe(&self) -> broadcast::Receiver<pb::Event> {
        self.watchers.subscribe()
    }

    /// Appends `event` to `log` and publishes it: the one writer of the
    /// supervisor's records. `durable` says when it must be on disk,
    /// `priority` whether it may draw on the audit directory's reserve (an
    /// essential record: a refusal, a revocation, a stop). The caller decides
    /// what a failure means (for a decision record: refuse the call).
    pub fn write(
        &self,
        log: Log<'_>,
        event: Event,
        durable: Durable,
        priority: Priority,
    ) -> Result<Appended, AuditError> {
        match log {
            Log::Session(file, session) => self.append(file, session, event, (durable, priority)),
            Log::Supervisor(session) => {
                // A fresh one if it broke.
                let file = self.audit.supervisor_log()?;
                self.append(&file, session, event, (durable, priority))
            }
        }
    }

    fn append(
        &self,
        file: &AuditFile,
        session: &str,
        event: Event,
        (durable, priority): (Durable, Priority),
    ) -> Result<Appended, AuditError> {
        // Watchers see what the log holds; with none, skip the copy.
        let published = (self.watchers.receiver_count() > 0).then(|| summarise(&event));
        let waits = match durable {
            Durable::Later => false,
            Durable::Now => true,
            Durable::AsConfigured => file.append_waits(),
        };
        let appended = if waits {
            waiting_for_disk(|| file.append_event(session, &event, durable, priority))?
        } else {
            // (A write alone does not block long enough to pay for the
            // hand-off.)
            file.append_event(session, &event, durable, priority)?
        };
        self.counters.count(&event);
        if let Some(summary) = published {
            self.publish(session, &event, summary);
        }
        if let Some(sink) = self.telemetry.as_ref().filter(|t| t.wants(&event)) {
            sink.offer(session, event);
        }
        Ok(appended)
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

    /// Tells watchers about a record just written.
    fn publish(&self, session: &str, event: &Event, summary: String) {
        let json = event
            .fields()
            .map(|f| Value::Object(f).to_string())
            .unwrap_or_default();
        // No watchers is fine.
        let _ = self.watchers.send(pb::Event {
            ts_unix_ms: unix_ms(SystemTime::now()),
            session_id: session.to_string(),
            event: event.name().to_string(),
            summary,
            json,
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

/// A connection's line: where it went, what decided it, what it carried.
fn net_line(c: &tollgate_audit::event::NetConnection) -> String {
    let target = if c.host.is_empty() {
        String::new()
    } else {
        format!("{}:{} ", c.host, c.port)
    };
    let by = c
        .command
        .as_deref()
        .map(|cmd| format!(" from `{}`", cmd.replace('\n', "` | `")))
        .unwrap_or_default();
    let reason = c.reason.as_deref().unwrap_or("");
    match c.phase.as_str() {
        "open" => format!(
            "connection {} open {target}-> {} ({}){by}",
            c.conn,
            c.address.as_deref().unwrap_or("?"),
            c.rule
        ),
        "close" => format!(
            "connection {} closed {target}{} B up, {} B down, {} ms{}",
            c.conn,
            c.bytes_up,
            c.bytes_down,
            c.duration_ms,
            if reason.is_empty() {
                String::new()
            } else {
                format!(" ({reason})")
            }
        ),
        "refused" => format!("connection refused {target}({}): {reason}{by}", c.rule),
        _ => format!("connections {}: {reason}", c.phase.replace('_', " ")),
    }
}

/// One human line per event, for `supervisorctl watch`.
pub fn summarise(event: &Event) -> String {
    let line = match event {
        Event::PermissionCheck(c) => check_line(c),
        Event::ApprovalRequested(r) => format!(
            "approval {} requested: {}{}",
            r.approval_id,
            r.consequence,
            if r.destructive { " [destructive]" } else { "" }
        ),
        Event::ApprovalDecided(d) => format!(
            "approval {} {} by {}",
            d.approval_id,
            d.outcome.as_str(),
            d.by
        ),
        Event::ToolStarted(s) => format!("{} started", s.tool),
        Event::ToolResult(r) => format!(
            "{} finished: {} ({} bytes, {} ms)",
            r.tool,
            r.exit()
                .map(|c| format!("exit {c}"))
                .unwrap_or_else(|| r.status.as_str().to_string()),
            r.bytes,
            r.duration_ms
        ),
        Event::JobStarted(j) => format!("{} started: {}", j.job_id, j.command),
        Event::JobEnded(j) => format!(
            "{} {} ({} bytes, {} ms)",
            j.job_id, j.reason, j.bytes, j.duration_ms
        ),
        Event::SessionOpened(o) => format!(
            "session opened by uid {} in {} ({})",
            o.uid, o.workspace, o.mode
        ),
        Event::SessionRevoked(e) | Event::SessionClosed(e) => {
            format!("{}: {}", event.name().replace('_', " "), e.reason)
        }
        Event::NetConnection(c) => net_line(c),
        Event::NetworkRule(r) => format!("net {} {} by {}", r.verb, r.entry, r.by),
        Event::CacheCleared(r) => format!(
            "cache cleared {} ({} files, {} bytes) by {}",
            if r.user.is_empty() {
                "for every owner"
            } else {
                &r.user
            },
            r.files,
            r.bytes,
            r.by
        ),
        Event::SandboxDenial(d) => denial_line(d),
        Event::AuditOpened(_)
        | Event::AuditFileClosed(_)
        | Event::Config(_)
        | Event::HostAddresses(_)
        | Event::Recovered(_)
        | Event::Shutdown(_)
        | Event::AuditRefused(_)
        | Event::SandboxExec(_)
        | Event::SandboxError(_)
        | Event::TokenRotated(_)
        | Event::DiskFloorStop(_)
        | Event::LlmRequest(_)
        | Event::LlmResponse(_)
        | Event::LlmCallError(_)
        | Event::LlmRetry(_)
        | Event::CostLimitHit(_)
        | Event::ClientTurnEnd(_)
        | Event::ClientToolResult(_)
        | Event::McpServerStarted(_)
        | Event::McpServerExited(_)
        | Event::McpEgress(_)
        | Event::NetSecret(_)
        | Event::QuestionAsked(_)
        | Event::ContextTrim(_)
        | Event::IterationCapHit(_)
        | Event::Abort(_)
        | Event::TurnSummary(_) => {
            let mut line = event.name().replace('_', " ");
            if let Some(reason) = event.reason().filter(|r| !r.is_empty()) {
                line.push_str(&format!(": {reason}"));
            }
            line
        }
    };
    escape_control(&line)
}

/// `sandbox denied ACCESS PATH to PROGRAM xN (rule)`, or the summary.
fn denial_line(d: &tollgate_audit::event::SandboxDenial) -> String {
    if d.phase == "summary" {
        return format!(
            "sandbox denials: {} more not recorded one by one, {} lost",
            d.suppressed, d.lost
        );
    }
    let program = d
        .program
        .as_deref()
        .map(|p| format!(" to {p}"))
        .unwrap_or_default();
    // Read from the command's own error message, not a kernel record.
    let inferred = if d.inferred.is_some() {
        "; from the command's error message"
    } else {
        ""
    };
    format!(
        "sandbox denied {} {}{program} x{} ({}{inferred})",
        d.access, d.path, d.count, d.reason
    )
}

/// `TOOL VERDICT [allowed_by] (rule): consequence`.
fn check_line(c: &PermissionCheck) -> String {
    let mut line = format!("{} {}", c.tool, c.decision.as_str());
    if let Some(by) = c
        .allowed_by
        .as_deref()
        .filter(|b| !b.is_empty() && *b != "allowed")
    {
        line.push_str(&format!(" [{by}]"));
    }
    if let Some(rule) = c.rule.as_deref().filter(|r| !r.is_empty()) {
        line.push_str(&format!(" ({rule})"));
    }
    if let Some(what) = c.consequence.as_deref().filter(|w| !w.is_empty()) {
        line.push_str(&format!(": {what}"));
    }
    line
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
        let f = json!({"call_id":"c","tool":"read_file","decision":"allow","code":"OK","rule":null,
                       "reason":"","consequence":"read a\nb\u{1b}[2J"});
        let event = Event::read("permission_check", f.as_object().unwrap())
            .known()
            .cloned()
            .unwrap();
        let line = summarise(&event);
        assert!(!line.contains('\n') && !line.contains('\u{1b}'), "{line}");
        assert!(line.contains("\\n"), "{line}");
    }

    #[test]
    fn watch_shows_each_connection_with_its_host_rule_and_command() {
        let read = |f: serde_json::Value| {
            let e = Event::read("net_connection", f.as_object().unwrap())
                .known()
                .cloned()
                .unwrap();
            summarise(&e)
        };
        assert_eq!(
            read(
                json!({"phase":"open","conn":3,"via":"http-connect","host":"ok.example","port":443,
                "address":"93.184.216.34:443","decision":"allow","rule":"ok.example",
                "call_id":"c1","command":"npm install"})
            ),
            "connection 3 open ok.example:443 -> 93.184.216.34:443 (ok.example) from `npm install`"
        );
        assert_eq!(
            read(
                json!({"phase":"close","conn":3,"host":"ok.example","port":443,"bytes_up":10,
                "bytes_down":2048,"duration_ms":15,"decision":"allow","rule":"ok.example"})
            ),
            "connection 3 closed ok.example:443 10 B up, 2048 B down, 15 ms"
        );
        assert_eq!(
            read(
                json!({"phase":"refused","host":"evil.example","port":443,"decision":"deny",
                "rule":"network:unlisted","reason":"evil.example:443 is not in [network] allow"})
            ),
            "connection refused evil.example:443 (network:unlisted): evil.example:443 is not in [network] allow"
        );
        let e = Event::read(
            "network_rule",
            json!({"verb":"allow","entry":"new.example","by":"uid 0 via operator"})
                .as_object()
                .unwrap(),
        )
        .known()
        .cloned()
        .unwrap();
        assert_eq!(summarise(&e), "net allow new.example by uid 0 via operator");
    }
}
