//! Running one command in a session container, through its resident exec
//! agent: no Docker API call per command.
//!
//! The supervisor sends a `Start` frame (argv, cwd, the session's
//! environment, the deadline, whether stderr is merged, whether stdin is
//! fed), and reads the command's frames: output in the order the agent read
//! it, then how it ended. The agent enforces the deadline itself (so a
//! timeout holds whatever the supervisor does); the supervisor keeps a
//! backstop a little later, and cancel sends `Kill`. Either way the agent
//! kills every process of the command, including those that left its
//! process group with `setsid` (see `tollgate-exec-agent`'s `procs`). When
//! the command's processes are gone the agent reports `Exited`; a command
//! that outlives its kill for [`KILL_GRACE`] gets the whole container
//! destroyed.
//!
//! Output is flow-controlled per command: the agent sends at most a window
//! of output ahead, and the supervisor grants more as `out` takes it. A
//! reader of `out` that falls behind slows the command down (its pipe
//! fills), however long it pauses, as on the native backend: nothing is
//! dropped while the command runs, and the command's deadline bounds the
//! wait. Only a reader that is gone (its receiver dropped) stops holding it
//! up, and once the command has ended a reader that takes nothing for
//! [`FLUSH_WAIT`] gets the rest dropped, with a warning.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tollgate_exec_agent::wire::{
    self, INITIAL_WINDOW, MAX_CHUNK, MAX_FRAME, Start, Status, ToAgent,
};

use super::agent::{AgentLink, Event};
use super::sandbox::DockerSandbox;
use crate::{ExecOutcome, ExecRequest, Output, Sandbox, SandboxError};

/// After the agent's deadline should have fired, how long the supervisor
/// waits before it sends the kill itself.
pub const BACKSTOP_GRACE: Duration = Duration::from_secs(2);
/// After a kill was sent, how long the command may take to end before the
/// whole container is destroyed.
pub const KILL_GRACE: Duration = Duration::from_secs(5);
/// Output kept once credit was returned early (the reader is gone); beyond
/// it output is dropped.
const MAX_BUFFERED: usize = 8 * 1024 * 1024;
/// How long the final flush waits for a reader to take the next piece.
const FLUSH_WAIT: Duration = Duration::from_secs(5);
/// Credit is returned to the agent in batches of at least this much.
const CREDIT_BATCH: u64 = INITIAL_WINDOW as u64 / 4;
/// Most stdin one command may be given.
pub const MAX_STDIN: usize = 16 * 1024 * 1024;

/// The agent's deadline for a timeout: whole milliseconds, at least 1.
pub fn deadline_ms(timeout: Duration) -> u64 {
    u64::try_from(timeout.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// Output waiting for a slow reader, each piece with whether its credit was
/// returned to the agent already.
struct Pending {
    queue: VecDeque<(Output, bool)>,
    bytes: usize,
    dropped: usize,
    closed: bool,
}

fn len_of(o: &Output) -> usize {
    match o {
        Output::Stdout(b) | Output::Stderr(b) => b.len(),
    }
}

impl Pending {
    fn new() -> Pending {
        Pending {
            queue: VecDeque::new(),
            bytes: 0,
            dropped: 0,
            closed: false,
        }
    }

    /// Queues a piece (`credited`: its credit was returned already). Returns
    /// false when it was dropped instead: `out` is closed, or the reader
    /// stalled (`credited`) and [`MAX_BUFFERED`] is held already.
    fn push(&mut self, o: Output, credited: bool) -> bool {
        let n = len_of(&o);
        if self.closed {
            return false;
        }
        if credited && self.bytes + n > MAX_BUFFERED {
            self.dropped += n;
            return false;
        }
        self.bytes += n;
        self.queue.push_back((o, credited));
        true
    }

    /// The next piece and the credit it still owes.
    fn pop(&mut self) -> Option<(Output, usize)> {
        let (o, credited) = self.queue.pop_front()?;
        let n = len_of(&o);
        self.bytes -= n;
        Some((o, if credited { 0 } else { n }))
    }

    /// Marks every queued piece credited; returns the credit that was owed.
    fn credit_all(&mut self) -> usize {
        let mut owed = 0;
        for (o, credited) in &mut self.queue {
            if !*credited {
                owed += len_of(o);
                *credited = true;
            }
        }
        owed
    }
}

/// Sends what is still buffered to a reader that keeps taking it; one that
/// takes nothing for [`FLUSH_WAIT`] gets the rest dropped.
async fn flush(out: &mpsc::Sender<Output>, pending: &mut Pending) {
    if pending.closed {
        return;
    }
    while let Some((o, _)) = pending.pop() {
        match tokio::time::timeout(FLUSH_WAIT, out.send(o)).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => {
                pending.closed = true;
                return;
            }
            Err(_) => {
                pending.dropped += pending.bytes;
                pending.queue.clear();
                pending.bytes = 0;
                return;
            }
        }
    }
}

/// Where a command's stdin comes from.
pub(super) enum Stdin {
    /// /dev/null.
    Null,
    /// These bytes, then end of file.
    Bytes(Bytes),
    /// What arrives, until the sender is dropped (then end of file).
    Stream(mpsc::Receiver<Bytes>),
}

/// Aborts a task when dropped.
pub(super) struct AbortOnDrop(Option<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            h.abort();
        }
    }
}

impl DockerSandbox {
    /// Sends command `id` its stdin: fixed bytes now, or a stream from a
    /// task that lives as long as the returned guard.
    async fn feed_stdin(&self, id: u64, stdin: Stdin) -> AbortOnDrop {
        match stdin {
            Stdin::Null => AbortOnDrop(None),
            Stdin::Bytes(data) => {
                for chunk in data.chunks(MAX_CHUNK) {
                    let frame = ToAgent::Stdin {
                        id,
                        data: chunk.to_vec(),
                    };
                    // A failed send means the link is gone; the event
                    // stream says so.
                    let _ = self.link.send(&frame).await;
                }
                let _ = self.link.send(&ToAgent::StdinEof { id }).await;
                AbortOnDrop(None)
            }
            Stdin::Stream(mut rx) => {
                let link = Arc::clone(&self.link);
                AbortOnDrop(Some(tokio::spawn(async move {
                    while let Some(b) = rx.recv().await {
                        for chunk in b.chunks(MAX_CHUNK) {
                            let frame = ToAgent::Stdin {
                                id,
                                data: chunk.to_vec(),
                            };
                            if link.send(&frame).await.is_err() {
                                return;
                            }
                        }
                    }
                    let _ = link.send(&ToAgent::StdinEof { id }).await;
                })))
            }
        }
    }
}

/// Returns output credit to the agent in batches.
struct Credit {
    id: u64,
    owed: u64,
    in_flight: Arc<AtomicU64>,
}

impl Credit {
    async fn give(&mut self, n: usize, link: &AgentLink, now: bool) {
        self.owed += n as u64;
        if self.owed == 0 || (!now && self.owed < CREDIT_BATCH) {
            return;
        }
        let bytes = u32::try_from(self.owed).unwrap_or(u32::MAX);
        self.in_flight.fetch_sub(u64::from(bytes), Ordering::SeqCst);
        self.owed -= u64::from(bytes);
        // A failed send means the link is gone; the event stream says so.
        let _ = link.send(&ToAgent::Credit { id: self.id, bytes }).await;
    }
}

/// Unregisters a command when its `exec` ends, and kills it when that `exec`
/// was dropped before the command ended (its caller went away).
struct RouteGuard {
    link: Arc<AgentLink>,
    id: u64,
    done: bool,
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        self.link.forget(self.id);
        if !self.done
            && let Ok(h) = tokio::runtime::Handle::try_current()
        {
            let (link, id) = (Arc::clone(&self.link), self.id);
            h.spawn(async move {
                let _ = link.send(&ToAgent::Kill { id }).await;
            });
        }
    }
}

/// How the event loop of one command ended.
enum Ended {
    Exited(wire::Exited),
    SpawnFailed(String),
    /// The connection to the agent is gone.
    Lost,
    /// The command outlived its kill.
    Escalated,
}

impl DockerSandbox {
    /// [`Sandbox::exec`] with bytes for the command's stdin (then end of
    /// file); `None` means /dev/null.
    pub async fn exec_with_stdin(
        &self,
        req: ExecRequest,
        stdin: Option<Bytes>,
        out: mpsc::Sender<Output>,
        cancel: CancellationToken,
    ) -> Result<ExecOutcome, SandboxError> {
        let stdin = match stdin {
            Some(b) => Stdin::Bytes(b),
            None => Stdin::Null,
        };
        self.exec_inner(req, stdin, out, cancel).await
    }

    /// One command through the agent, its stdin from /dev/null, fixed bytes,
    /// or a stream (a long-lived process, [`Sandbox::exec_interactive`]).
    pub(super) async fn exec_inner(
        &self,
        req: ExecRequest,
        stdin: Stdin,
        out: mpsc::Sender<Output>,
        cancel: CancellationToken,
    ) -> Result<ExecOutcome, SandboxError> {
        let start = Instant::now();
        self.check_runnable(&req)?;
        if cancel.is_cancelled() {
            return Ok(ExecOutcome {
                exit_code: None,
                signal: None,
                timed_out: false,
                cancelled: true,
                duration: start.elapsed(),
                refusals: Default::default(),
            });
        }
        let cwd = self.checked_cwd(&req, &stdin)?;
        let (id, mut events, in_flight) = self.link.open();
        let mut guard = RouteGuard {
            link: Arc::clone(&self.link),
            id,
            done: false,
        };
        let start_frame = self.start_frame(id, &req, &stdin, cwd)?;
        if self.link.send(&start_frame).await.is_err() {
            guard.done = true;
            return Err(self.gone_error("exec").await);
        }
        // Ended (aborted) with this call: a stream is fed while it runs.
        let _feeder = self.feed_stdin(id, stdin).await;

        let host_deadline =
            tokio::time::Instant::from_std(start) + req.timeout + self.backstop_grace;
        let mut run = CommandRun::new(id, in_flight);
        let ended = self
            .pump(&mut run, &mut events, &out, &cancel, host_deadline)
            .await;
        guard.done = !matches!(ended, Ended::Escalated | Ended::Lost);
        drop(guard);
        flush(&out, &mut run.pending).await;
        if run.pending.dropped > 0 {
            tracing::warn!(container = %self.name, dropped = run.pending.dropped, "output reader too slow; output dropped");
        }
        self.outcome(ended, run.cancelled, run.backstop, &req, start)
            .await
    }

    /// The container must be running and the command must have an argv.
    fn check_runnable(&self, req: &ExecRequest) -> Result<(), SandboxError> {
        if !self.is_alive() {
            return Err(SandboxError::Gone(format!(
                "container {} is not running (destroyed, or stopped from outside)",
                self.name
            )));
        }
        if req.argv.is_empty() {
            return Err(SandboxError::BadRequest(
                "exec needs a command (argv is empty)".to_string(),
            ));
        }
        Ok(())
    }

    /// The command's working directory (the workspace by default), UTF-8 and
    /// like the argv without NUL bytes; and stdin within [`MAX_STDIN`].
    fn checked_cwd(&self, req: &ExecRequest, stdin: &Stdin) -> Result<String, SandboxError> {
        let cwd = req.cwd.clone().unwrap_or_else(|| self.workspace.clone());
        let cwd = cwd
            .to_str()
            .ok_or_else(|| SandboxError::BadRequest(format!("cwd {} is not UTF-8", cwd.display())))?
            .to_string();
        if req.argv.iter().any(|a| a.contains('\0')) || cwd.contains('\0') {
            return Err(SandboxError::BadRequest(
                "exec argv and cwd cannot contain NUL bytes".to_string(),
            ));
        }
        if let Stdin::Bytes(s) = stdin
            && s.len() > MAX_STDIN
        {
            return Err(SandboxError::Refused(format!(
                "stdin of more than {MAX_STDIN} bytes cannot be given to a command"
            )));
        }
        Ok(cwd)
    }

    /// The `Start` frame of command `id`, refused when it would exceed
    /// [`MAX_FRAME`].
    fn start_frame(
        &self,
        id: u64,
        req: &ExecRequest,
        stdin: &Stdin,
        cwd: String,
    ) -> Result<ToAgent, SandboxError> {
        let start_frame = ToAgent::Start(Start {
            id,
            deadline_ms: deadline_ms(req.timeout),
            merge_stderr: req.merge_stderr,
            stdin_pipe: !matches!(stdin, Stdin::Null),
            cwd: cwd.into_bytes(),
            argv: req.argv.iter().map(|a| a.as_bytes().to_vec()).collect(),
            env: self
                .env
                .iter()
                .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
                .collect(),
        });
        if start_frame.to_bytes().len() > MAX_FRAME {
            return Err(SandboxError::Refused(format!(
                "the command and its environment take more than {MAX_FRAME} bytes"
            )));
        }
        Ok(start_frame)
    }

    /// The event loop of one command: cancel and the backstop send `Kill`, a
    /// command that outlives its kill escalates, output goes to `out` as the
    /// reader takes it (credit returned as it does), until the command ends
    /// or the link is lost.
    async fn pump(
        &self,
        run: &mut CommandRun,
        events: &mut mpsc::UnboundedReceiver<Event>,
        out: &mpsc::Sender<Output>,
        cancel: &CancellationToken,
        host_deadline: tokio::time::Instant,
    ) -> Ended {
        let far = tokio::time::Instant::now() + Duration::from_secs(86400 * 365);
        loop {
            let kill_deadline = run.kill_sent.map(|t| t + self.kill_grace).unwrap_or(far);
            let waiting = !run.pending.queue.is_empty() && !run.pending.closed;
            tokio::select! {
                biased;
                _ = cancel.cancelled(), if !run.cancelled && run.kill_sent.is_none() => {
                    run.cancelled = true;
                    self.send_kill(run).await;
                }
                _ = tokio::time::sleep_until(host_deadline), if run.kill_sent.is_none() => {
                    run.backstop = true;
                    self.send_kill(run).await;
                }
                _ = tokio::time::sleep_until(kill_deadline), if run.kill_sent.is_some() => {
                    return Ended::Escalated;
                }
                permit = out.reserve(), if waiting => match permit {
                    Ok(p) => self.reader_took(run, p).await,
                    Err(_) => self.reader_gone(run).await,
                },
                ev = events.recv() => match ev {
                    Some(Event::Output(o)) => self.output_arrived(run, o).await,
                    Some(Event::Exited(x)) => return Ended::Exited(x),
                    Some(Event::SpawnFailed(m)) => return Ended::SpawnFailed(m),
                    None => return Ended::Lost,
                },
            }
        }
    }

    /// Cancel or the backstop: the agent is told to kill the command.
    async fn send_kill(&self, run: &mut CommandRun) {
        let _ = self.link.send(&ToAgent::Kill { id: run.id }).await;
        run.kill_sent = Some(tokio::time::Instant::now());
    }

    /// The reader has room: it gets the next piece, the agent its credit.
    async fn reader_took(&self, run: &mut CommandRun, p: mpsc::Permit<'_, Output>) {
        if let Some((o, owed)) = run.pending.pop() {
            p.send(o);
            run.credit.give(owed, &self.link, false).await;
        }
    }

    /// The reader is gone: what is queued is dropped, its credit returned.
    async fn reader_gone(&self, run: &mut CommandRun) {
        run.pending.closed = true;
        let owed = run.pending.credit_all();
        run.pending.queue.clear();
        run.pending.bytes = 0;
        run.credit.give(owed, &self.link, true).await;
    }

    /// A piece of output from the agent: queued for the reader.
    async fn output_arrived(&self, run: &mut CommandRun, o: Output) {
        let n = len_of(&o);
        // A slow reader holds the command up (its credit waits); only a
        // gone one does not.
        let settle_now = run.pending.closed;
        let kept = run.pending.push(o, settle_now);
        if settle_now || !kept {
            run.credit.give(n, &self.link, false).await;
        }
    }

    /// What the caller is told about a command that ended as `ended`.
    async fn outcome(
        &self,
        ended: Ended,
        cancelled: bool,
        backstop: bool,
        req: &ExecRequest,
        start: Instant,
    ) -> Result<ExecOutcome, SandboxError> {
        let killed = |timed_out: bool| ExecOutcome {
            exit_code: None,
            signal: Some(9),
            timed_out,
            cancelled,
            duration: start.elapsed(),
            refusals: Default::default(),
        };
        match ended {
            Ended::Escalated => {
                tracing::warn!(
                    container = %self.name,
                    "a command outlived its kill by {:?}; destroying the container",
                    self.kill_grace
                );
                let _ = self.destroy_now().await;
                Ok(killed(!cancelled))
            }
            Ended::Lost => Err(self.gone_error("exec").await),
            Ended::SpawnFailed(m) => Err(SandboxError::Spawn {
                argv0: req.argv.first().cloned(),
                place: format!("container {}", self.name),
                error: m,
            }),
            Ended::Exited(x) => Ok(if cancelled {
                killed(false)
            } else if x.timed_out || backstop {
                killed(true)
            } else {
                let (exit_code, signal) = match x.status {
                    Status::Code(c) => (Some(c), None),
                    Status::Signal(s) => (None, Some(s)),
                };
                ExecOutcome {
                    exit_code,
                    signal,
                    timed_out: false,
                    cancelled: false,
                    duration: start.elapsed(),
                    refusals: Default::default(),
                }
            }),
        }
    }
}

/// The state of one command's event loop.
struct CommandRun {
    id: u64,
    pending: Pending,
    credit: Credit,
    /// Cancelled by the caller.
    cancelled: bool,
    /// Killed by the supervisor's backstop (the agent's deadline did not fire).
    backstop: bool,
    kill_sent: Option<tokio::time::Instant>,
}

impl CommandRun {
    fn new(id: u64, in_flight: Arc<AtomicU64>) -> CommandRun {
        CommandRun {
            id,
            pending: Pending::new(),
            credit: Credit {
                id,
                owed: 0,
                in_flight,
            },
            cancelled: false,
            backstop: false,
            kill_sent: None,
        }
    }
}

#[async_trait::async_trait]
impl Sandbox for DockerSandbox {
    async fn exec(
        &self,
        req: ExecRequest,
        out: mpsc::Sender<Output>,
        cancel: CancellationToken,
    ) -> Result<ExecOutcome, SandboxError> {
        self.exec_with_stdin(req, None, out, cancel).await
    }

    async fn exec_interactive(
        &self,
        req: ExecRequest,
        stdin: mpsc::Receiver<Bytes>,
        out: mpsc::Sender<Output>,
        cancel: CancellationToken,
    ) -> Result<ExecOutcome, SandboxError> {
        self.exec_inner(req, Stdin::Stream(stdin), out, cancel)
            .await
    }

    fn netns_pidfd(&self) -> Result<std::os::fd::OwnedFd, SandboxError> {
        // The pidfd taken at start, checked to be the container's init.
        let Some(init) = &self.init else {
            return Err(SandboxError::Refused(format!(
                "container {} cannot be entered for its network: the supervisor holds no pidfd of its init (the docker engine runs on another host, or the supervisor may not signal it)",
                self.name
            )));
        };
        let pidfd = init.try_clone().map_err(|e| SandboxError::Io {
            context: format!("pidfd of container {}", self.name),
            source: e,
        })?;
        Ok(pidfd)
    }

    async fn destroy(&self) -> Result<(), SandboxError> {
        self.destroy_now().await
    }

    fn is_alive(&self) -> bool {
        DockerSandbox::is_alive(self)
    }

    fn shell(&self) -> crate::Shell {
        self.shell
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_are_whole_milliseconds_at_least_one() {
        assert_eq!(deadline_ms(Duration::ZERO), 1);
        assert_eq!(deadline_ms(Duration::from_micros(1500)), 1);
        assert_eq!(deadline_ms(Duration::from_secs(120)), 120_000);
        assert_eq!(deadline_ms(Duration::MAX), u64::MAX);
    }

    #[test]
    fn pending_output_is_bounded_and_owes_credit_once() {
        let mut p = Pending::new();
        let mib = 1024 * 1024;
        let chunk = Bytes::from(vec![b'x'; mib]);
        // A live reader: everything is kept, and each piece owes its credit
        // when it is taken.
        for _ in 0..9 {
            assert!(p.push(Output::Stdout(chunk.clone()), false));
        }
        assert_eq!((p.queue.len(), p.dropped), (9, 0));
        assert_eq!(p.pop().map(|(_, owed)| owed), Some(mib));
        // The reader is gone: what is queued is credited at once, once.
        assert_eq!(p.credit_all(), 8 * mib);
        assert_eq!(p.credit_all(), 0);
        assert_eq!(p.pop().map(|(_, owed)| owed), Some(0));
        // Credited pieces beyond the bound are dropped.
        assert!(p.push(Output::Stdout(chunk.clone()), true));
        assert!(!p.push(Output::Stdout(chunk.clone()), true));
        assert_eq!((p.queue.len(), p.bytes, p.dropped), (8, 8 * mib, mib));
        // A closed one drops everything.
        p.closed = true;
        assert!(!p.push(Output::Stdout(chunk), false));
    }
}
