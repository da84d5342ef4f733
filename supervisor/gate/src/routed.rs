//! A client's routed shell command: what its hook decided (through
//! [`crate::authorize()`]), claimed by its rewritten command. It is the same
//! shell run as run_bash (`exec/shell.rs`), with `tool_started` (durable)
//! before and `tool_result` after, and its stdout and stderr streamed as
//! they come: redacted line by line and capped at `output_cap_bytes` (past
//! it, one notice on stderr), then its exit status.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tollgate_audit::Event;
use tollgate_audit::event as audit;
use tollgate_audit::{Redactor, StreamRedactor};
use tollgate_sandbox::{Output, SandboxError};

use crate::denial::{audit_unavailable, revoked};
use crate::exec::ExecError;
use crate::exec::inferred::ReadOnlyRoot;
use crate::exec::job;
use crate::exec::notes::WallNotes;
use crate::exec::shell::{self, Command, Ran};
use crate::host::Ctx;
use crate::jobs::Job;
use crate::records::{self, AUDIT_EXCERPT, DenialSource, excerpt_of, record};
use crate::session::Session;

/// A command a client's hook cleared, as its rewritten command claims it.
#[derive(Debug, Clone, Copy)]
pub struct RoutedCommand<'a> {
    /// The client's tool_use_id, for the records.
    pub call_id: &'a str,
    pub command: &'a str,
    pub target: &'a str,
    pub timeout_s: Option<u64>,
    /// The client runs it in the background (Claude Code's
    /// `run_in_background`): a background job of the session, without a
    /// timeout (docs/CLIENTS.md, "Background commands").
    pub background: bool,
}

/// How a command ended, as its caller sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitStatus {
    /// The exit code when the process exited; -1 when killed by a signal.
    pub code: i32,
    /// The signal number when killed by one, else 0.
    pub signal: i32,
    pub timed_out: bool,
}

/// What a routed command's caller is sent: its output, then its exit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShellOut {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    Exit(ExitStatus),
}

/// Runs a routed command and streams it to `out` (any message a
/// [`ShellOut`] becomes). Cancelling `cancel` (the client went away, the
/// session ended) kills it.
pub async fn run_routed<O>(
    cx: &Ctx,
    route: &RoutedCommand<'_>,
    out: &mpsc::Sender<O>,
    cancel: CancellationToken,
) where
    O: From<ShellOut> + Send + 'static,
{
    let started = Instant::now();
    let job = route.background.then(|| {
        cx.session.jobs.add(
            job::new_job(cx, route.command, route.call_id, true),
            &cancel,
        )
    });
    let cancel = job.as_ref().map_or(cancel, |j| j.kill.clone());
    let sb = match start_routed(cx, route, job.as_deref()).await {
        Ok(sb) => sb,
        Err(text) => {
            if let Some(job) = &job {
                job.finish(job::failed(text.clone()));
            }
            return fail_routed(out, &text).await;
        }
    };
    let (tx, rx) = mpsc::channel::<Output>(64);
    let forward = tokio::spawn(forward_routed(
        rx,
        out.clone(),
        cx.host.redactor().clone(),
        cx.host.config().session.output_cap_bytes,
    ));
    if let Some(note) = shell::clamp_notice(cx, route.timeout_s) {
        send(out, stderr_line(&format!("tollgate: {note}\n"))).await;
    }
    let cmd = Command {
        call_id: route.call_id,
        text: route.command,
        timeout_s: route.timeout_s,
        merge_stderr: false,
        background: route.background,
    };
    let running = cx.session.net.running(route.call_id, route.command);
    let net = crate::exec::net_lines::mark(cx);
    let ran = shell::run(cx, sb.as_ref(), cmd, tx, &cancel).await;
    drop(running);
    let mut streamed = forward.await.unwrap_or_default();
    let refused = crate::exec::net_lines::refused_since(cx, net);
    if !refused.is_empty() {
        send(
            out,
            stderr_line(&format!(
                "{}
",
                refused.trim_start()
            )),
        )
        .await;
    }
    let duration_ms = started.elapsed().as_millis() as u64;
    if let Some(job) = &job {
        job.count(streamed.total as usize);
        let end = job::end_of(cx, job, &ran.outcome);
        job::record_ended(cx, job, &end, started.elapsed());
        job.finish(end);
    }
    let (status, exit, note) = routed_end(&cx.session, &ran);
    if let Ok(o) = &ran.outcome {
        let inferred = streamed.read_only_root();
        records::record_denials(
            cx,
            route.call_id,
            inferred.refusals(),
            DenialSource::CommandOutput,
        );
        let mut notes = WallNotes::from_refusals(&o.refusals);
        inferred.lines(&mut notes);
        let block = notes.render();
        if !block.is_empty() {
            send(out, stderr_line(&block)).await;
        }
    }
    if let Some(note) = note {
        send(out, stderr_line(&format!("\ntollgate: {note}\n"))).await;
    }
    record_routed_outcome(cx, route, (status, &exit), &streamed, duration_ms);
    send(out, ShellOut::Exit(exit)).await;
}

/// Before a routed command runs: its `tool_started` record (durable), the
/// disk floor, the session's sandbox. `Err` is the sentence for the caller.
async fn start_routed(
    cx: &Ctx,
    route: &RoutedCommand<'_>,
    job: Option<&Job>,
) -> Result<std::sync::Arc<dyn tollgate_sandbox::Sandbox>, String> {
    let started_record = Event::ToolStarted(audit::ToolStarted {
        call_id: route.call_id.to_string(),
        tool: "run_bash".to_string(),
        allowed_by: "routed".to_string(),
        target: route.target.to_string(),
        server: None,
        mcp_tool: None,
    });
    if let Err(e) = record(cx, started_record) {
        return Err(audit_unavailable(cx, "run_bash", &e).reason);
    }
    if let Some(job) = job
        && let Err(e) = record(cx, job::started_record(job))
    {
        return Err(audit_unavailable(cx, "run_bash", &e).reason);
    }
    match shell::prepare(cx).await {
        Ok(sb) => Ok(sb),
        Err(
            ExecError::Sandbox(reason) | ExecError::Tool(reason) | ExecError::DiskFloor(reason),
        ) => Err(reason),
        Err(ExecError::Cancelled) => Err(revoked(&cx.session).reason),
    }
}

async fn send<O: From<ShellOut>>(out: &mpsc::Sender<O>, o: ShellOut) {
    let _ = out.send(O::from(o)).await;
}

fn stderr_line(text: &str) -> ShellOut {
    ShellOut::Stderr(text.as_bytes().to_vec())
}

/// A routed command tollgate could not run at all: why, on its stderr, and
/// [`ROUTED_NOT_RUN`].
async fn fail_routed<O: From<ShellOut>>(out: &mpsc::Sender<O>, text: &str) {
    send(out, stderr_line(&format!("tollgate: {text}\n"))).await;
    let exit = ExitStatus {
        code: ROUTED_NOT_RUN,
        signal: 0,
        timed_out: false,
    };
    send(out, ShellOut::Exit(exit)).await;
}

/// How a routed command ended: the status on record, the exit status its
/// caller sees, and a line for its stderr when tollgate stopped it.
fn routed_end(session: &Session, ran: &Ran) -> (audit::ToolStatus, ExitStatus, Option<String>) {
    let (outcome, timeout) = (&ran.outcome, ran.timeout);
    let exit = |code, signal, timed_out| ExitStatus {
        code,
        signal,
        timed_out,
    };
    let stopped = !session.is_active() || outcome.as_ref().is_ok_and(|o| o.cancelled);
    match outcome {
        _ if stopped => {
            let why = if session.is_active() {
                "the call was cancelled (the client went away)".to_string()
            } else {
                revoked(session).reason
            };
            (audit::ToolStatus::Stopped, exit(-1, 9, false), Some(why))
        }
        Ok(o) if o.timed_out => {
            let why = format!(
                "the command timed out after {}s and was killed",
                timeout.as_secs()
            );
            (audit::ToolStatus::Error, exit(-1, 9, true), Some(why))
        }
        Ok(o) => (
            audit::ToolStatus::Ok,
            exit(o.exit_code.unwrap_or(-1), o.signal.unwrap_or(0), false),
            None,
        ),
        Err(e) => {
            let why = match e {
                SandboxError::Gone(_) if !session.is_active() => revoked(session).reason,
                other => format!("{other}. The command may not have completed."),
            };
            (
                audit::ToolStatus::Stopped,
                exit(ROUTED_NOT_RUN, 0, false),
                Some(why),
            )
        }
    }
}

/// The routed command's `tool_result`. It rides on the next fsync (the
/// command has already run); it is in the file before the caller hears the
/// exit status.
fn record_routed_outcome(
    cx: &Ctx,
    route: &RoutedCommand<'_>,
    end: (audit::ToolStatus, &ExitStatus),
    streamed: &Streamed,
    duration_ms: u64,
) {
    let (status, exit) = end;
    records::record_outcome(
        cx,
        audit::ToolResult {
            call_id: route.call_id.to_string(),
            tool: "run_bash".to_string(),
            status,
            exit_code: Some(Some(i64::from(exit.code))),
            bytes: streamed.total,
            truncated: streamed.truncated,
            duration_ms,
            output: Some(excerpt_of(&streamed.head)),
            stopped: None,
            routed: Some(true),
            signal: Some(i64::from(exit.signal)),
            server: None,
            mcp_tool: None,
            error: exit
                .timed_out
                .then(|| crate::Failure::Timeout.as_str().to_string()),
        },
    );
}

/// The exit code a routed command's caller sees when tollgate could not run
/// it at all (the audit log, the sandbox): 126, "cannot execute".
pub const ROUTED_NOT_RUN: i32 = 126;

/// What a routed command printed, as far as the records go.
#[derive(Debug, Default)]
struct Streamed {
    total: u64,
    truncated: bool,
    /// The first bytes (redacted), for the audit excerpt.
    head: String,
    /// The read-only root's refusals read from what was sent, per stream
    /// (`exec/inferred.rs`).
    erofs: [ReadOnlyRoot; 2],
}

impl Streamed {
    /// Both streams' read-only-root refusals.
    fn read_only_root(&mut self) -> ReadOnlyRoot {
        let [mut out, mut err] = std::mem::take(&mut self.erofs);
        out.finish();
        err.finish();
        out.merge(&err);
        out
    }
}

/// Forwards a routed command's output: per stream, redacted on bytes by a
/// [`StreamRedactor`] (whatever the encoding; a secret split across
/// chunks is still seen whole), released line by line (a line is held
/// until its end, or until it reaches 8 KiB, when the redactor keeps back
/// only what a secret still growing could need), up to `cap` bytes in all,
/// then one notice on stderr; the rest is counted, not sent.
async fn forward_routed<O: From<ShellOut>>(
    mut rx: mpsc::Receiver<Output>,
    out: mpsc::Sender<O>,
    redactor: Redactor,
    cap: usize,
) -> Streamed {
    let mut fw = Forwarder {
        st: Streamed::default(),
        sent: 0,
        cap,
    };
    let redactor = Arc::new(redactor);
    let mut streams = [LineRedactor::new(&redactor), LineRedactor::new(&redactor)];
    while let Some(chunk) = rx.recv().await {
        let (which, bytes) = match &chunk {
            Output::Stdout(b) => (0, b),
            Output::Stderr(b) => (1, b),
        };
        fw.st.total += bytes.len() as u64;
        let ready = streams[which].take(bytes);
        for m in fw.emit(which, &ready) {
            if out.send(O::from(m)).await.is_err() {
                return fw.st;
            }
        }
    }
    for (which, stream) in streams.iter_mut().enumerate() {
        let rest = stream.end();
        for m in fw.emit(which, &rest) {
            let _ = out.send(O::from(m)).await;
        }
    }
    fw.st
}

/// One output stream of a routed command (or a background job's merged
/// output): the part of a line not yet ended, and its redactor.
pub(crate) struct LineRedactor {
    line: Vec<u8>,
    redactor: StreamRedactor,
}

impl LineRedactor {
    /// A line is held until its end, or until it reaches this many bytes.
    const HOLD: usize = 8 << 10;

    pub(crate) fn new(redactor: &Arc<Redactor>) -> LineRedactor {
        LineRedactor {
            line: Vec::new(),
            redactor: StreamRedactor::new(Arc::clone(redactor)),
        }
    }

    /// Takes a chunk; returns what may be sent now, redacted.
    pub(crate) fn take(&mut self, bytes: &[u8]) -> Vec<u8> {
        self.line.extend_from_slice(bytes);
        match self.line.iter().rposition(|&b| b == b'\n') {
            Some(nl) => {
                let ended: Vec<u8> = self.line.drain(..=nl).collect();
                let mut ready = self.redactor.push(&ended);
                // Whole lines: nothing of a secret can be left held.
                ready.extend(self.redactor.finish());
                ready
            }
            None if self.line.len() >= Self::HOLD => {
                let long = std::mem::take(&mut self.line);
                self.redactor.push(&long)
            }
            None => Vec::new(),
        }
    }

    /// The end of the stream: what is left, redacted.
    pub(crate) fn end(&mut self) -> Vec<u8> {
        let rest = std::mem::take(&mut self.line);
        let mut ready = self.redactor.push(&rest);
        ready.extend(self.redactor.finish());
        ready
    }
}

/// What [`forward_routed`] has sent so far, and how it caps.
struct Forwarder {
    st: Streamed,
    sent: usize,
    cap: usize,
}

impl Forwarder {
    /// The messages for redacted output of stream `which` (0 stdout, 1
    /// stderr): within the cap, and the one notice when the cap is reached.
    fn emit(&mut self, which: usize, text: &[u8]) -> Vec<ShellOut> {
        let cap = self.cap;
        if text.is_empty() {
            return Vec::new();
        }
        if self.st.head.len() < AUDIT_EXCERPT {
            self.st.head.push_str(&String::from_utf8_lossy(text));
        }
        let room = cap.saturating_sub(self.sent);
        let part = &text[..text.len().min(room)];
        self.sent += part.len();
        self.st.erofs[which].feed(part);
        let mut msgs = Vec::new();
        if !part.is_empty() {
            msgs.push(if which == 0 {
                ShellOut::Stdout(part.to_vec())
            } else {
                ShellOut::Stderr(part.to_vec())
            });
        }
        if part.len() < text.len() && !self.st.truncated {
            self.st.truncated = true;
            msgs.push(ShellOut::Stderr(
                format!(
                    "\ntollgate: output truncated at {cap} bytes; the rest was not sent (redirect it to a file and read it in parts)\n"
                )
                .into_bytes(),
            ));
        }
        msgs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn routed_output_is_redacted_capped_and_noticed_once() {
        use ShellOut as Out;
        let (tx, rx) = mpsc::channel(8);
        let (out, mut got) = mpsc::channel(16);
        let redactor = Redactor::new(vec!["hunter2-secret".to_string()]);
        let fw = tokio::spawn(forward_routed(rx, out, redactor, 20));
        tx.send(Output::Stdout(b"pw=hunter2-secret\n".to_vec().into()))
            .await
            .unwrap();
        tx.send(Output::Stderr(b"0123456789abcdef\n".to_vec().into()))
            .await
            .unwrap();
        tx.send(Output::Stdout(b"more\n".to_vec().into()))
            .await
            .unwrap();
        drop(tx);
        let st = fw.await.unwrap();
        let mut msgs = Vec::new();
        while let Ok(m) = got.try_recv() {
            msgs.push(m);
        }
        let text = |o: &Out| match o {
            Out::Stdout(b) | Out::Stderr(b) => String::from_utf8_lossy(b).into_owned(),
            Out::Exit(_) => String::new(),
        };
        let all: String = msgs.iter().map(text).collect();
        assert!(!all.contains("hunter2-secret"), "{all}");
        assert_eq!(
            all.matches("output truncated at 20 bytes").count(),
            1,
            "{all}"
        );
        assert!(!all.contains("more"), "{all}");
        assert!(st.truncated);
        assert_eq!(st.total, 18 + 17 + 5);
        assert!(!st.head.contains("hunter2-secret"));
    }

    /// A secret in output that is not UTF-8, and one split across chunks
    /// of a line longer than the hold, are masked (the routed shell once
    /// let a chunk that was not UTF-8 through unredacted).
    #[tokio::test]
    async fn routed_output_that_is_not_utf8_or_split_is_still_redacted() {
        let (tx, rx) = mpsc::channel(8);
        let (out, mut got) = mpsc::channel::<ShellOut>(64);
        let redactor = Redactor::new(vec!["hunter2-secret".to_string()]);
        let fw = tokio::spawn(forward_routed(rx, out, redactor, 1 << 20));
        tx.send(Output::Stdout(
            b"\xff\xfe pw=hunter2-secret\n".to_vec().into(),
        ))
        .await
        .unwrap();
        let mut long = vec![b'a'; LineRedactor::HOLD - 6];
        long.extend_from_slice(b" hunter2");
        tx.send(Output::Stderr(long.into())).await.unwrap();
        tx.send(Output::Stderr(b"-secret tail\n".to_vec().into()))
            .await
            .unwrap();
        drop(tx);
        let st = fw.await.unwrap();
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        while let Ok(m) = got.try_recv() {
            match m {
                ShellOut::Stdout(b) => stdout.extend(b),
                ShellOut::Stderr(b) => stderr.extend(b),
                ShellOut::Exit(_) => {}
            }
        }
        let (o, e) = (
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr),
        );
        assert!(!o.contains("hunter2") && o.contains("[REDACTED"), "{o}");
        assert!(stdout.starts_with(b"\xff\xfe pw="));
        assert!(!e.contains("hunter2") && e.ends_with(" tail\n"), "{e}");
        assert!(!st.head.contains("hunter2"));
    }
}
