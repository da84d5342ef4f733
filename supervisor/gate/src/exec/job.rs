//! Background jobs (docs/INTERFACES.md, "Background jobs"): run_bash with
//! `background: true` starts one ([`start`]); `job_output` reads what it
//! printed since the last read ([`output`]); `kill_job` ends it
//! ([`kill`]). A job is the same shell run as every command
//! (`shell::run`), in the session's sandbox and so under its pids and
//! memory limits, without a timeout; its output is redacted as it comes
//! by the routed shell's line redactor and kept in the session's table
//! (`crate::jobs`). Its start and its end are recorded (`job_started`,
//! `job_ended`); the end of its session ends it at once (the sandbox is
//! destroyed, and its kill token is a child of the session's).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tollgate_audit::event::{self as audit, JobEnd};
use tollgate_audit::{Durable, Event, Priority};
use tollgate_sandbox::{ExecOutcome, Output, Sandbox, SandboxError};
use tollgate_tools::ToolOutput;

use super::shell::{self, Command};
use super::{Done, ExecError};
use crate::denial::revoked;
use crate::host::Ctx;
use crate::jobs::{Ended, Job, NewJob};
use crate::records::{AUDIT_EXCERPT, record};
use crate::routed::LineRedactor;

/// A job's timeout: none that matters (a year); it ends when it exits, is
/// killed, or its session ends.
pub(crate) const LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);

/// run_bash `background`: the sandbox, the job in the session's table, its
/// `job_started` record, then the job running on its own task. Returns at
/// once with the job's id.
pub(super) async fn start(cx: &Ctx, call_id: &str, command: &str) -> Result<Done, ExecError> {
    let sb = shell::prepare(cx).await?;
    let new = new_job(cx, command, call_id, false);
    let job = cx.session.jobs.add(new, &cx.session.cancel);
    if let Err(e) = record(cx, started_record(&job)) {
        job.finish(failed(format!("its start could not be recorded ({e})")));
        return Err(ExecError::Tool(format!(
            "the job's start could not be recorded in the audit log ({e}); nothing ran."
        )));
    }
    tokio::spawn(run(cx.clone(), sb, Arc::clone(&job)));
    let id = &job.id;
    Ok(ToolOutput {
        text: format!(
            "Started background job {id}. It runs until it exits, kill_job ends it, or the \
             session ends. Read its output with job_output {{\"job_id\": \"{id}\"}}."
        ),
        truncated: false,
    }
    .into())
}

/// The job's own task: the command until it ends, its output into the
/// table, then its end recorded and set.
async fn run(cx: Ctx, sb: Arc<dyn Sandbox>, job: Arc<Job>) {
    // Its last record comes before the session's own end records.
    let Some(_work) = cx.session.begin() else {
        let end = ended_with_session(&cx);
        record_ended(&cx, &job, &end, Duration::ZERO);
        return job.finish(end);
    };
    let started = Instant::now();
    let keep = cx.host.config().session.output_cap_bytes;
    let (tx, rx) = mpsc::channel::<Output>(64);
    let redactor = LineRedactor::new(&Arc::new(cx.host.redactor().clone()));
    let collector = tokio::spawn(collect(rx, Arc::clone(&job), redactor, keep));
    let cmd = Command {
        call_id: &job.call_id,
        text: &job.command,
        timeout_s: None,
        merge_stderr: true,
        background: true,
    };
    let ran = shell::run(&cx, sb.as_ref(), cmd, tx, &job.kill).await;
    let _ = collector.await;
    let end = end_of(&cx, &job, &ran.outcome);
    record_ended(&cx, &job, &end, started.elapsed());
    job.finish(end);
}

/// A job's merged output, redacted line by line, into the table.
async fn collect(
    mut rx: mpsc::Receiver<Output>,
    job: Arc<Job>,
    mut redactor: LineRedactor,
    keep: usize,
) {
    while let Some(chunk) = rx.recv().await {
        let (Output::Stdout(b) | Output::Stderr(b)) = &chunk;
        job.count(b.len());
        job.push(&redactor.take(b), keep);
    }
    job.push(&redactor.end(), keep);
}

/// `job_output`: what the job printed since the last read, and its state.
pub(super) fn output(cx: &Ctx, id: &str) -> Result<Done, ExecError> {
    let job = find(cx, id)?;
    let r = job.read();
    let mut text = String::new();
    if r.dropped > 0 {
        text.push_str(&format!(
            "[{} earlier bytes of {id} were not read in time and are gone]\n",
            r.dropped
        ));
    }
    if job.routed {
        text.push_str(&format!(
            "[{id} is a client's routed command: its output goes to the client]\n"
        ));
    }
    text.push_str(&r.text);
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&state_line(&job, r.end.as_ref()));
    let exit_code = r.end.as_ref().and_then(|e| e.exit_code);
    Ok(Done {
        output: ToolOutput {
            text,
            truncated: r.dropped > 0,
        },
        exit_code,
        redacted: true,
        timed_out: None,
    })
}

/// `kill_job`: ends the job (its whole process group) and waits until it
/// is gone; then what it printed since the last read.
pub(super) async fn kill(
    cx: &Ctx,
    id: &str,
    cancel: &CancellationToken,
) -> Result<Done, ExecError> {
    let job = find(cx, id)?;
    if job.end().is_none() {
        job.killed_by_tool
            .store(true, std::sync::atomic::Ordering::SeqCst);
        job.kill.cancel();
        tokio::select! {
            () = job.wait() => {}
            () = cancel.cancelled() => return Err(ExecError::Cancelled),
        }
    }
    output(cx, id)
}

/// The job of this id in the session, or a sentence naming the ones it has.
fn find(cx: &Ctx, id: &str) -> Result<Arc<Job>, ExecError> {
    cx.session.jobs.get(id).ok_or_else(|| {
        let ids = cx.session.jobs.ids();
        ExecError::Tool(if ids.is_empty() {
            format!(
                "this session has no background job `{id}` (it has none; run_bash with background: true starts one)"
            )
        } else {
            format!(
                "this session has no background job `{id}`; its jobs are {}",
                ids.join(", ")
            )
        })
    })
}

/// The last line of a read: running, or how it ended.
fn state_line(job: &Job, end: Option<&Ended>) -> String {
    match end {
        None => format!(
            "[{} is running; {} bytes printed so far. Call job_output again for more, kill_job to end it.]",
            job.id,
            job.bytes()
        ),
        Some(e) => format!("[{} {}]", job.id, e.reason),
    }
}

/// How a job's run ended, in the record's terms.
pub(crate) fn end_of(cx: &Ctx, job: &Job, outcome: &Result<ExecOutcome, SandboxError>) -> Ended {
    let by_tool = job.killed_by_tool.load(std::sync::atomic::Ordering::SeqCst);
    match outcome {
        _ if !cx.session.is_active() => ended_with_session(cx),
        _ if by_tool => Ended {
            how: JobEnd::Killed,
            exit_code: None,
            signal: Some(9),
            reason: "was killed by kill_job".to_string(),
        },
        Ok(o) if o.cancelled => Ended {
            how: JobEnd::Killed,
            exit_code: None,
            signal: Some(9),
            reason: "was killed: its client stopped it".to_string(),
        },
        Ok(o) => exited(o),
        Err(SandboxError::Gone(why)) => Ended {
            how: JobEnd::SessionEnded,
            exit_code: None,
            signal: None,
            reason: format!("ended with the session's sandbox ({why})"),
        },
        Err(e) => failed(e.to_string()),
    }
}

fn exited(o: &ExecOutcome) -> Ended {
    let reason = match (o.exit_code, o.signal) {
        (_, Some(sig)) => format!("was killed by signal {sig}"),
        (Some(code), None) => format!("exited with code {code}"),
        (None, None) => "ended".to_string(),
    };
    Ended {
        how: JobEnd::Exited,
        exit_code: o.exit_code,
        signal: o.signal,
        reason,
    }
}

pub(crate) fn failed(why: String) -> Ended {
    Ended {
        how: JobEnd::Failed,
        exit_code: None,
        signal: None,
        reason: format!("failed: {why}"),
    }
}

fn ended_with_session(cx: &Ctx) -> Ended {
    Ended {
        how: JobEnd::SessionEnded,
        exit_code: None,
        signal: Some(9),
        reason: format!(
            "was killed with its session: {}",
            revoked(&cx.session).reason
        ),
    }
}

/// A new job of `command`, shown redacted and cut.
pub(crate) fn new_job<'a>(
    cx: &Ctx,
    command: &'a str,
    call_id: &'a str,
    routed: bool,
) -> NewJob<'a> {
    let shown = cx.host.redactor().redact(command);
    NewJob {
        command,
        shown: tollgate_policy::cut_for_display(&shown, AUDIT_EXCERPT),
        call_id,
        routed,
    }
}

/// The `job_started` record.
pub(crate) fn started_record(job: &Job) -> Event {
    Event::JobStarted(audit::JobStarted {
        job_id: job.id.clone(),
        call_id: job.call_id.clone(),
        command: job.shown.clone(),
        routed: job.routed,
    })
}

/// The `job_ended` record: the job has already ended, so it rides on the
/// next fsync; essential, as a session's end is.
pub(crate) fn record_ended(cx: &Ctx, job: &Job, end: &Ended, ran: Duration) {
    let _ = cx.write(
        Event::JobEnded(audit::JobEnded {
            job_id: job.id.clone(),
            call_id: job.call_id.clone(),
            how: end.how,
            exit_code: end.exit_code.map(i64::from),
            signal: end.signal.map(i64::from),
            bytes: job.bytes(),
            duration_ms: ran.as_millis() as u64,
            reason: end.reason.clone(),
        }),
        Durable::Later,
        Priority::Essential,
    );
}
