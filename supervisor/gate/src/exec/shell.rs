//! The one shell run: a command in the session's sandbox, for run_bash
//! (output collected and capped for the model) and for a client's routed
//! command (output streamed, `crate::routed`). Both go through [`prepare`]
//! (the disk floor, the sandbox) and [`run`] (the timeout clamped to the
//! configuration, the exec request, the disk watcher looking often).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tollgate_audit::{Redactor, StreamRedactor};
use tollgate_sandbox::{ExecOutcome, ExecRequest, Output, Sandbox, SandboxError};
use tollgate_tools::ToolOutput;

use super::sandbox::sandbox_of;
use super::{Done, ExecError, disk_floor};
use crate::host::Ctx;
use crate::records::DenialSource;

/// A shell command to run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Command<'a> {
    /// The tool call it runs for (its `sandbox_denial` records name it).
    pub(crate) call_id: &'a str,
    pub(crate) text: &'a str,
    /// As asked; clamped to `[sandbox] max_run_timeout_s` (run_bash refuses
    /// one above it first, [`over_cap`]; a routed command is told, [`Ran`]).
    pub(crate) timeout_s: Option<u64>,
    /// stderr into stdout (run_bash), or kept apart (a routed command).
    pub(crate) merge_stderr: bool,
    /// A background job: no timeout ([`super::job::LIFETIME`]); it ends
    /// when it exits, is killed, or its session ends.
    pub(crate) background: bool,
}

/// How a run ended, and the timeout it had.
pub(crate) struct Ran {
    pub(crate) outcome: Result<ExecOutcome, SandboxError>,
    pub(crate) timeout: Duration,
}

/// What a routed command's caller is told when the timeout it asked is
/// above the cap: it runs with the cap. `None` within it.
pub(crate) fn clamp_notice(cx: &Ctx, asked: Option<u64>) -> Option<String> {
    let cap = cx.host.config().sandbox.max_run_timeout_s;
    asked.filter(|t| *t > cap).map(|t| {
        format!(
            "the timeout asked ({t}s) is above this host's cap of {cap}s ([sandbox] max_run_timeout_s); the command runs with {cap}s"
        )
    })
}

/// The refusal of a timeout above `[sandbox] max_run_timeout_s`, naming
/// the cap; `None` when `asked` is within it.
pub(crate) fn over_cap(cx: &Ctx, asked: Option<u64>) -> Option<String> {
    let cap = cx.host.config().sandbox.max_run_timeout_s;
    asked.filter(|t| *t > cap).map(|t| {
        format!(
            "timeout_s {t} is above this host's cap of {cap}s ([sandbox] max_run_timeout_s); the command did not run. Call again with timeout_s at most {cap}, or split the work into shorter commands."
        )
    })
}

/// Before a command: the disk floor, then the session's sandbox (built on
/// first use). A stop the disk watcher left for an earlier command is
/// cleared: it is not this one's.
pub(crate) async fn prepare(cx: &Ctx) -> Result<Arc<dyn Sandbox>, ExecError> {
    disk_floor(cx)?;
    let sb = sandbox_of(cx).await?;
    if !cx.session.is_active() {
        return Err(ExecError::Cancelled);
    }
    cx.session.disk_stop.lock().take();
    Ok(sb)
}

/// Runs `cmd` in `sb` with the workspace as working directory; its output
/// goes to `tx` as it comes. Cancelling `cancel` kills it.
pub(crate) async fn run(
    cx: &Ctx,
    sb: &dyn Sandbox,
    cmd: Command<'_>,
    tx: mpsc::Sender<Output>,
    cancel: &CancellationToken,
) -> Ran {
    let cfg = &cx.host.config().sandbox;
    let timeout = if cmd.background {
        super::job::LIFETIME
    } else {
        let asked = cmd.timeout_s.unwrap_or(cfg.run_timeout_s);
        Duration::from_secs(asked.clamp(1, cfg.max_run_timeout_s))
    };
    let req = ExecRequest {
        // bash when the sandbox has it: the shell policy parsed it as bash.
        argv: sb.shell().argv(cmd.text),
        cwd: Some(cx.session.workspace.clone()),
        timeout,
        merge_stderr: cmd.merge_stderr,
    };
    // The disk watcher looks often while this runs (see disk.rs).
    let _running = cx.host.disk().command();
    let outcome = sb.exec(req, tx, cancel.child_token()).await;
    if let Ok(o) = &outcome {
        crate::records::record_denials(cx, cmd.call_id, &o.refusals, DenialSource::Kernel);
    }
    Ran { outcome, timeout }
}

/// run_bash: the command's merged output, capped, with its exit status.
pub(super) async fn run_bash(
    cx: &Ctx,
    cmd: Command<'_>,
    cancel: &CancellationToken,
) -> Result<Done, ExecError> {
    if let Some(reason) = over_cap(cx, cmd.timeout_s) {
        return Err(ExecError::Tool(reason));
    }
    let sb = prepare(cx).await?;
    let cap = cx.host.config().session.output_cap_bytes;
    let (tx, rx) = mpsc::channel::<Output>(64);
    let redactor = cx.host.redactor().clone();
    let collector = tokio::spawn(collect_output(rx, cap, redactor));
    let net = super::net_lines::mark(cx);
    let ran = run(cx, sb.as_ref(), cmd, tx, cancel).await;
    let (kept, more) = collector.await.unwrap_or_default();
    if let Some(reason) = cx.session.disk_stop.lock().take() {
        return Err(ExecError::DiskFloor(reason));
    }
    let outcome = ran.outcome.map_err(|e| match e {
        SandboxError::Gone(_) if !cx.session.is_active() => ExecError::Cancelled,
        other => ExecError::Sandbox(format!("{other}. The command may not have completed.")),
    })?;
    if outcome.cancelled {
        return Err(ExecError::Cancelled);
    }
    let mut done = command_output(&kept, more, cap, &outcome, ran.timeout);
    let inferred = super::inferred::ReadOnlyRoot::of(&kept);
    crate::records::record_denials(
        cx,
        cmd.call_id,
        inferred.refusals(),
        DenialSource::CommandOutput,
    );
    let mut notes = super::notes::WallNotes::from_refusals(&outcome.refusals);
    inferred.lines(&mut notes);
    notes.append_to(&mut done.output.text);
    done.output
        .text
        .push_str(&super::net_lines::refused_since(cx, net));
    Ok(done)
}

/// A command's merged output, redacted on bytes as it comes (a secret split
/// across chunks is still seen whole): at most a little over the cap is
/// kept, the rest counted. Returns what was kept and how many bytes were
/// not.
async fn collect_output(
    mut rx: mpsc::Receiver<Output>,
    cap: usize,
    redactor: Redactor,
) -> (Vec<u8>, u64) {
    let mut stream = StreamRedactor::from(redactor);
    let mut kept = Kept {
        bytes: Vec::new(),
        room: cap + 4,
        more: 0,
    };
    while let Some(chunk) = rx.recv().await {
        let bytes = match &chunk {
            Output::Stdout(b) | Output::Stderr(b) => b,
        };
        if kept.is_full() {
            kept.more += bytes.len() as u64;
        } else {
            kept.add(&stream.push(bytes));
        }
    }
    kept.add(&stream.finish());
    (kept.bytes, kept.more)
}

/// What [`collect_output`] keeps.
struct Kept {
    bytes: Vec<u8>,
    room: usize,
    /// Bytes not kept.
    more: u64,
}

impl Kept {
    fn is_full(&self) -> bool {
        self.bytes.len() >= self.room
    }

    fn add(&mut self, redacted: &[u8]) {
        let n = redacted
            .len()
            .min(self.room.saturating_sub(self.bytes.len()));
        self.bytes.extend_from_slice(&redacted[..n]);
        self.more += (redacted.len() - n) as u64;
    }
}

/// What the model sees of a finished command: its output capped (with how
/// much was cut), then whether it timed out or was killed, and its exit code
/// (the `sandbox: ` block is appended by [`run_bash`]).
fn command_output(
    kept: &[u8],
    more: u64,
    cap: usize,
    outcome: &ExecOutcome,
    timeout: Duration,
) -> Done {
    let text = String::from_utf8_lossy(kept).into_owned();
    let mut capped = tollgate_tools::cap_text(
        &text,
        cap,
        "redirect output to a file and read it with read_file offset/limit",
    );
    if more > 0 && !capped.truncated {
        capped.truncated = true;
        capped.text.push_str(&format!(
            "\n[output truncated: {more} more bytes not shown; redirect output to a file and read it with read_file offset/limit]"
        ));
    }
    let mut text = capped.text;
    if outcome.timed_out {
        text.push_str(&format!(
            "\n[command timed out after {}s and was killed]",
            timeout.as_secs()
        ));
    } else if let Some(sig) = outcome.signal {
        text.push_str(&format!("\n[command killed by signal {sig}]"));
    }
    Done {
        output: ToolOutput {
            text,
            truncated: capped.truncated,
        },
        redacted: true,
        exit_code: Some(outcome.exit_code.unwrap_or(-1)),
        timed_out: outcome.timed_out.then_some(timeout),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn run_bash_output_is_redacted_across_chunks_and_capped() {
        let (tx, rx) = mpsc::channel(8);
        let redactor = Redactor::new(vec!["hunter2-secret".to_string()]);
        let collector = tokio::spawn(collect_output(rx, 64, redactor));
        for chunk in [&b"\xffpw=hunt"[..], b"er2-secret\n", &[b'x'; 100]] {
            tx.send(Output::Stdout(chunk.to_vec().into()))
                .await
                .unwrap();
        }
        drop(tx);
        let (kept, more) = collector.await.unwrap();
        let text = String::from_utf8_lossy(&kept);
        assert!(
            !text.contains("hunter2") && text.contains("[REDACTED"),
            "{text}"
        );
        assert_eq!(kept.len(), 68);
        assert!(more > 0);
    }
}
