//! One session container as a [`Sandbox`]: exec with streamed output, timeouts
//! enforced inside the container, cancellation, and the kill switch.
//!
//! An exec'd process cannot be killed through the Docker API, so every command
//! runs under [`WRAPPER`], a few lines of POSIX sh (busybox ash and dash both
//! run it) that:
//! - starts the command in a new session and process group (`setsid`), with
//!   stdin from /dev/null and no controlling terminal;
//! - bounds it with `timeout -s KILL` *inside* the container, so a timeout holds
//!   even when the supervisor is gone;
//! - keeps the exec's stdin as a control channel: a line from the supervisor,
//!   or EOF because the supervisor went away, kills the command's process group
//!   (that is how `cancel` works);
//! - after the command ends, kills what is left of its process group (background
//!   children), so an exec never leaves stragglers, and exits with its status.
//!
//! Starting an exec costs the engine tens of milliseconds (runc joins the
//! namespaces and compiles the seccomp profile each time), so each sandbox
//! keeps one *warm* exec: the wrapper started ahead of time with `-` as its
//! first argument, waiting for its command as one line on stdin (fields
//! single-quoted for `eval "set -- …"`, newlines spelled `"$NL"`). `exec`
//! takes it when it is there and healthy, writes the line, and starts the
//! next one in the background; otherwise it starts a cold exec with the
//! command in argv. Both then behave the same.
//!
//! A process that leaves the group with its own `setsid` survives that last
//! step; Docker still ends the exec 2 s after the wrapper exits, and the
//! process dies with the container. If a command outlives its kill for
//! [`KILL_GRACE`] (it stopped the wrapper), the container is destroyed.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bollard::query_parameters::{RemoveContainerOptionsBuilder, WaitContainerOptionsBuilder};
use futures_util::{FutureExt, StreamExt};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::errors::{is_engine_gone, status_code};
use crate::{ExecOutcome, ExecRequest, Output, Sandbox, SandboxError};

/// Runs `"$@"` (after the timeout in seconds and the merge flag) as described
/// in the module docs. Fixed absolute paths: busybox and Debian both have
/// /usr/bin/setsid and /usr/bin/timeout, and `$PATH` is the session's.
pub const WRAPPER: &str = r#"if [ "$1" = - ]; then
NL='
'
IFS= read -r l || exit 0
eval "set -- $l" || exit 126
cd -- "$1" || exit 126
shift
fi
unset PWD OLDPWD SHLVL
t=$1 m=$2
shift 2
exec 3<&0 4>&2 2>/dev/null
[ "$m" = 1 ] && exec 4>&1
/usr/bin/setsid /usr/bin/timeout -s KILL "$t" "$@" </dev/null 2>&4 3<&- 4>&- &
c=$!
{ read -r _; kill -s KILL -- -"$c"; } <&3 4>&- &
r=$!
exec 3<&- 4>&-
wait "$c"
s=$?
kill -s KILL -- -"$c" "$r"
exit "$s""#;

/// After the in-container timeout should have fired, how long the supervisor
/// waits before it sends the kill itself.
pub const BACKSTOP_GRACE: Duration = Duration::from_secs(2);
/// After a kill was sent, how long the exec may take to end before the whole
/// container is destroyed.
pub const KILL_GRACE: Duration = Duration::from_secs(5);
/// After an exec died by SIGKILL, how long (tries × step) the engine gets to
/// report that the whole container was killed.
const SETTLE_TRIES: u32 = 15;
const SETTLE_STEP: Duration = Duration::from_millis(20);
/// How long an exec waits for a warm exec that is being started.
const WARM_WAIT: Duration = Duration::from_secs(2);
/// Output buffered for a slow reader of `out`; beyond it the stream waits.
const MAX_BUFFERED: usize = 8 * 1024 * 1024;
/// A reader of `out` that takes nothing for this long no longer holds the
/// command up: its output is dropped instead.
const READER_STALL: Duration = Duration::from_secs(5);
/// How long the final flush waits for a reader to take the next piece.
const FLUSH_WAIT: Duration = Duration::from_secs(5);

/// The seconds given to the in-container `timeout`: whole seconds (busybox's
/// `timeout` counts in seconds), rounded up, at least 1.
pub fn timeout_secs(d: Duration) -> u64 {
    let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    s.max(1)
}

/// A shell's status: 128+N means signal N (as `$?` reports it).
pub fn split_status(code: i64) -> (Option<i32>, Option<i32>) {
    if (129..=128 + 64).contains(&code) {
        (None, i32::try_from(code - 128).ok())
    } else {
        (i32::try_from(code).ok(), None)
    }
}

pub(super) type OutputStream = std::pin::Pin<
    Box<dyn futures_util::Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>,
>;
pub(super) type InputSink = std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>;

/// An exec started ahead of time, its wrapper waiting for a command line.
pub(super) struct Warm {
    exec_id: String,
    output: OutputStream,
    input: InputSink,
}

/// The slot holding a sandbox's warm exec, and whether one is being started.
#[derive(Default)]
pub(super) struct WarmState {
    ready: tokio::sync::Mutex<Option<Warm>>,
    filling: AtomicBool,
    filled: tokio::sync::Notify,
}

pub(super) type WarmSlot = Arc<WarmState>;

impl WarmState {
    /// The warm exec: the one waiting, or the one being started (waited for
    /// up to `wait`: it is further along than a cold start would be).
    async fn take(&self, wait: Duration) -> Option<Warm> {
        let notified = self.filled.notified();
        if let Some(w) = self.ready.lock().await.take() {
            return Some(w);
        }
        if !self.filling.load(Ordering::SeqCst) {
            return None;
        }
        let _ = tokio::time::timeout(wait, notified).await;
        self.ready.lock().await.take()
    }

    pub(super) async fn clear(&self) {
        self.ready.lock().await.take();
    }
}

/// Single-quotes a word for the wrapper's `eval "set -- …"`, keeping the line
/// one line: a newline becomes `'"$NL"'`.
pub fn quote_word(w: &str) -> String {
    let mut q = String::with_capacity(w.len() + 2);
    q.push('\'');
    for c in w.chars() {
        match c {
            '\'' => q.push_str("'\\''"),
            '\n' => q.push_str("'\"$NL\"'"),
            c => q.push(c),
        }
    }
    q.push('\'');
    q
}

/// The line a warm wrapper reads: cwd, timeout, merge flag, argv.
pub fn command_line(cwd: &str, secs: &str, merge: &str, argv: &[String]) -> String {
    let mut l = String::new();
    for w in [cwd, secs, merge]
        .into_iter()
        .chain(argv.iter().map(String::as_str))
    {
        if !l.is_empty() {
            l.push(' ');
        }
        l.push_str(&quote_word(w));
    }
    l.push('\n');
    l
}

pub(super) async fn start_exec(
    docker: &Docker,
    container: &str,
    cmd: Vec<String>,
    cwd: String,
) -> Result<(String, OutputStream, InputSink), (&'static str, bollard::errors::Error)> {
    let created = docker
        .create_exec(
            container,
            CreateExecOptions::<String> {
                attach_stdin: Some(true),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                tty: Some(false),
                cmd: Some(cmd),
                working_dir: Some(cwd),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| ("exec create", e))?;
    let started = docker
        .start_exec(
            &created.id,
            Some(StartExecOptions {
                detach: false,
                tty: false,
                output_capacity: Some(64 * 1024),
            }),
        )
        .await
        .map_err(|e| ("exec start", e))?;
    match started {
        StartExecResults::Attached { output, input } => Ok((created.id, output, input)),
        StartExecResults::Detached => Err((
            "exec start",
            bollard::errors::Error::DockerStreamError {
                error: "docker started the exec detached".to_string(),
            },
        )),
    }
}

/// Starts a warm exec and puts it in the slot (unless one is there or being
/// started).
pub(super) async fn refill(docker: Docker, container: String, workspace: String, slot: WarmSlot) {
    if slot.ready.lock().await.is_some() || slot.filling.swap(true, Ordering::SeqCst) {
        return;
    }
    let cmd = vec![
        "/bin/sh".to_string(),
        "-c".to_string(),
        WRAPPER.to_string(),
        "tollgate-exec".to_string(),
        "-".to_string(),
    ];
    if let Ok((exec_id, output, input)) = start_exec(&docker, &container, cmd, workspace).await {
        let mut s = slot.ready.lock().await;
        if s.is_none() {
            *s = Some(Warm {
                exec_id,
                output,
                input,
            });
        }
    }
    slot.filling.store(false, Ordering::SeqCst);
    slot.filled.notify_waiters();
}

/// One session's container.
pub struct DockerSandbox {
    pub(super) docker: Docker,
    pub(super) id: String,
    pub(super) name: String,
    pub(super) session_id: String,
    pub(super) workspace: PathBuf,
    pub(super) socket: PathBuf,
    pub(super) alive: Arc<AtomicBool>,
    pub(super) destroyed: AtomicBool,
    pub(super) watcher: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    pub(super) backstop_grace: Duration,
    pub(super) kill_grace: Duration,
    /// The warm exec, when enabled.
    pub(super) warm: Option<WarmSlot>,
    /// A pidfd on the container's init, when the engine is on this host.
    pub(super) init: Option<std::os::fd::OwnedFd>,
}

impl std::fmt::Debug for DockerSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerSandbox")
            .field("container", &self.name)
            .field("id", &short(&self.id))
            .field("session", &self.session_id)
            .field("alive", &self.is_alive())
            .finish()
    }
}

pub(super) fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

impl DockerSandbox {
    /// The container's id.
    pub fn container_id(&self) -> &str {
        &self.id
    }

    /// The container's name (`tollgate-<session>`).
    pub fn container_name(&self) -> &str {
        &self.name
    }

    /// True when the kill switch can kill the container's init directly
    /// (engine on this host), not only through the engine.
    pub fn has_fast_kill(&self) -> bool {
        self.init.is_some()
    }

    /// Waits (up to `timeout`) until a warm exec is ready, starting one if
    /// none is; true when one is. For callers that know a command is coming
    /// (and benchmarks that must not measure against background work).
    pub async fn prepare(&self, timeout: Duration) -> bool {
        let Some(slot) = &self.warm else {
            return false;
        };
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if slot.ready.lock().await.is_some() {
                return true;
            }
            if !self.is_alive() || tokio::time::Instant::now() >= deadline {
                return false;
            }
            if !slot.filling.load(Ordering::SeqCst) {
                refill(
                    self.docker.clone(),
                    self.id.clone(),
                    self.workspace.to_string_lossy().into_owned(),
                    Arc::clone(slot),
                )
                .await;
                if slot.ready.lock().await.is_none() {
                    // The engine refused: do not hammer it.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            } else {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }

    /// Starts the next warm exec in the background (after a command, so that it
    /// never competes with one for the engine).
    pub(super) fn start_refill(&self) {
        if let Some(slot) = &self.warm
            && self.is_alive()
        {
            tokio::spawn(refill(
                self.docker.clone(),
                self.id.clone(),
                self.workspace.to_string_lossy().into_owned(),
                Arc::clone(slot),
            ));
        }
    }

    /// Marks the sandbox dead when the container stops, whoever stopped it.
    pub(super) fn watch(&self) {
        let docker = self.docker.clone();
        let id = self.id.clone();
        let alive = Arc::clone(&self.alive);
        let handle = tokio::spawn(async move {
            let opts = WaitContainerOptionsBuilder::new()
                .condition("not-running")
                .build();
            let mut s = docker.wait_container(&id, Some(opts));
            // Any answer (exit, error, engine gone) means the container is not
            // running any more.
            let _ = s.next().await;
            alive.store(false, Ordering::SeqCst);
        });
        if let Ok(mut w) = self.watcher.lock() {
            *w = Some(handle);
        }
    }

    fn stop_watching(&self) {
        if let Ok(mut w) = self.watcher.lock()
            && let Some(h) = w.take()
        {
            h.abort();
        }
    }

    pub(super) fn engine_gone(&self, during: &str, e: &bollard::errors::Error) -> SandboxError {
        self.alive.store(false, Ordering::SeqCst);
        SandboxError::Gone(format!(
            "docker engine at {} went away during {during} in container {}: {e}; \
             its leftovers are reaped at the next supervisor start",
            self.socket.display(),
            self.name
        ))
    }

    /// Why an exec could not be created or started.
    pub(super) fn exec_error(&self, during: &str, e: bollard::errors::Error) -> SandboxError {
        if is_engine_gone(&e) {
            return self.engine_gone(during, &e);
        }
        match status_code(&e) {
            Some(404) | Some(409) => {
                self.alive.store(false, Ordering::SeqCst);
                SandboxError::Gone(format!(
                    "container {} is not running (stopped or removed from outside): {e}",
                    self.name
                ))
            }
            _ => SandboxError::Other(format!("docker exec {during} in {}: {e}", self.name)),
        }
    }

    /// After an exec ended oddly: is the container still there and running?
    /// `Err(Gone)` when it is not.
    async fn check_container(&self, what: &str) -> Result<(), SandboxError> {
        match self.docker.inspect_container(&self.id, None).await {
            Ok(info) => {
                let state = info.state.unwrap_or_default();
                if state.running == Some(true) {
                    Ok(())
                } else {
                    self.alive.store(false, Ordering::SeqCst);
                    Err(SandboxError::Gone(format!(
                        "container {} was stopped from outside during {what} (status {}, exit code {})",
                        self.name,
                        state.status.map(|s| s.to_string()).unwrap_or_default(),
                        state.exit_code.unwrap_or(-1)
                    )))
                }
            }
            Err(e) if status_code(&e) == Some(404) => {
                self.alive.store(false, Ordering::SeqCst);
                Err(SandboxError::Gone(format!(
                    "container {} was removed from outside during {what}",
                    self.name
                )))
            }
            Err(e) if is_engine_gone(&e) => Err(self.engine_gone(what, &e)),
            Err(e) => Err(SandboxError::Other(format!(
                "inspecting container {}: {e}",
                self.name
            ))),
        }
    }

    /// Kills and removes the container: the kill switch.
    async fn remove(&self) -> Result<(), SandboxError> {
        let opts = RemoveContainerOptionsBuilder::new()
            .force(true)
            .v(true)
            .build();
        match self.docker.remove_container(&self.id, Some(opts)).await {
            Ok(()) => Ok(()),
            Err(e) if status_code(&e) == Some(404) => Ok(()),
            // "removal already in progress": someone else (a concurrent
            // destroy, the engine) is removing it; wait until it is gone.
            Err(e) if status_code(&e) == Some(409) => {
                for _ in 0..100 {
                    match self.docker.inspect_container(&self.id, None).await {
                        Err(e) if status_code(&e) == Some(404) => return Ok(()),
                        _ => tokio::time::sleep(Duration::from_millis(20)).await,
                    }
                }
                Err(SandboxError::Other(format!(
                    "container {} is still being removed after 2 s",
                    self.name
                )))
            }
            Err(e) if is_engine_gone(&e) => Err(SandboxError::Unavailable(format!(
                "cannot remove container {}: docker engine at {} is not reachable: {e}; \
                 start the engine (dockerd): leftovers are reaped at the next supervisor start",
                self.name,
                self.socket.display()
            ))),
            Err(e) => Err(SandboxError::Other(format!(
                "removing container {}: {e}",
                self.name
            ))),
        }
    }
}

/// Output waiting for a slow reader, bounded.
struct Pending {
    queue: VecDeque<Output>,
    bytes: usize,
    dropped: usize,
    closed: bool,
}

impl Pending {
    /// Queues a piece. The stream is not read while the queue holds
    /// [`MAX_BUFFERED`] or more, so it goes over by one piece at most; only
    /// for a stalled reader (`dropping`) is what does not fit dropped.
    fn push(&mut self, o: Output, dropping: bool) {
        let n = match &o {
            Output::Stdout(b) | Output::Stderr(b) => b.len(),
        };
        if self.closed {
            return;
        }
        if dropping && self.bytes + n > MAX_BUFFERED {
            self.dropped += n;
            return;
        }
        self.bytes += n;
        self.queue.push_back(o);
    }

    fn pop(&mut self) -> Option<Output> {
        let o = self.queue.pop_front()?;
        let n = match &o {
            Output::Stdout(b) | Output::Stderr(b) => b.len(),
        };
        self.bytes -= n;
        Some(o)
    }
}

async fn send_kill(input: &mut std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>) {
    // The wrapper's reader kills the command's process group on this line (or
    // on EOF). A failed write means the exec connection is gone already.
    let _ = input.write_all(b"kill\n").await;
    let _ = input.flush().await;
}

#[async_trait::async_trait]
impl Sandbox for DockerSandbox {
    async fn exec_interactive(
        &self,
        req: ExecRequest,
        stdin: mpsc::Receiver<bytes::Bytes>,
        out: mpsc::Sender<Output>,
        cancel: CancellationToken,
    ) -> Result<ExecOutcome, SandboxError> {
        self.exec_fed(req, stdin, out, cancel).await
    }

    async fn exec(
        &self,
        req: ExecRequest,
        out: mpsc::Sender<Output>,
        cancel: CancellationToken,
    ) -> Result<ExecOutcome, SandboxError> {
        let start = Instant::now();
        if !self.is_alive() {
            return Err(SandboxError::Gone(format!(
                "container {} is not running (destroyed, or stopped from outside)",
                self.name
            )));
        }
        if req.argv.is_empty() {
            return Err(SandboxError::Other(
                "exec needs a command (argv is empty)".to_string(),
            ));
        }
        if cancel.is_cancelled() {
            return Ok(ExecOutcome {
                exit_code: None,
                signal: None,
                timed_out: false,
                cancelled: true,
                duration: start.elapsed(),
            });
        }
        let cwd = req.cwd.clone().unwrap_or_else(|| self.workspace.clone());
        let cwd = cwd
            .to_str()
            .ok_or_else(|| SandboxError::Other(format!("cwd {} is not UTF-8", cwd.display())))?
            .to_string();
        let secs = timeout_secs(req.timeout).to_string();
        let merge = if req.merge_stderr { "1" } else { "0" };
        if req.argv.iter().any(|a| a.contains('\0')) || cwd.contains('\0') {
            return Err(SandboxError::Other(
                "exec argv and cwd cannot contain NUL bytes".to_string(),
            ));
        }

        // The warm exec, when one is waiting and still healthy.
        let mut started = None;
        if let Some(slot) = &self.warm {
            let taken = slot.take(WARM_WAIT).await;
            if let Some(mut w) = taken
                && w.output.next().now_or_never().is_none()
            {
                let line = command_line(&cwd, &secs, merge, &req.argv);
                if w.input.write_all(line.as_bytes()).await.is_ok() && w.input.flush().await.is_ok()
                {
                    started = Some((w.exec_id, w.output, w.input));
                }
            }
        }
        let (exec_id, mut output, mut input) = match started {
            Some(s) => s,
            None => {
                let mut cmd: Vec<String> = vec![
                    "/bin/sh".into(),
                    "-c".into(),
                    WRAPPER.into(),
                    "tollgate-exec".into(),
                    secs,
                    merge.into(),
                ];
                cmd.extend(req.argv.iter().cloned());
                start_exec(&self.docker, &self.id, cmd, cwd)
                    .await
                    .map_err(|(during, e)| self.exec_error(during, e))?
            }
        };

        let mut pending = Pending {
            queue: VecDeque::new(),
            bytes: 0,
            dropped: 0,
            closed: false,
        };
        let mut cancelled = false;
        let mut backstop = false;
        let mut escalated = false;
        let mut stream_error: Option<String> = None;
        let mut kill_sent: Option<tokio::time::Instant> = None;
        let host_deadline = tokio::time::Instant::from_std(start)
            + Duration::from_secs(timeout_secs(req.timeout))
            + self.backstop_grace;
        let far = tokio::time::Instant::now() + Duration::from_secs(86400 * 365);
        // A reader of `out` that falls behind slows the command down (the
        // stream is not read while the buffer is full); one that takes
        // nothing for READER_STALL stops holding it up: from then on what
        // does not fit is dropped.
        let mut last_progress = tokio::time::Instant::now();
        let mut dropping = false;

        loop {
            let kill_deadline = kill_sent.map(|t| t + self.kill_grace).unwrap_or(far);
            let full = pending.bytes >= MAX_BUFFERED && !pending.closed;
            tokio::select! {
                biased;
                _ = cancel.cancelled(), if !cancelled && kill_sent.is_none() => {
                    cancelled = true;
                    send_kill(&mut input).await;
                    kill_sent = Some(tokio::time::Instant::now());
                }
                _ = tokio::time::sleep_until(host_deadline), if kill_sent.is_none() => {
                    backstop = true;
                    send_kill(&mut input).await;
                    kill_sent = Some(tokio::time::Instant::now());
                }
                _ = tokio::time::sleep_until(kill_deadline), if kill_sent.is_some() => {
                    escalated = true;
                    break;
                }
                permit = out.reserve(), if !pending.queue.is_empty() && !pending.closed => match permit {
                    Ok(p) => {
                        if let Some(o) = pending.pop() {
                            p.send(o);
                        }
                        last_progress = tokio::time::Instant::now();
                        dropping = false;
                    }
                    Err(_) => {
                        pending.closed = true;
                        pending.queue.clear();
                        pending.bytes = 0;
                    }
                },
                _ = tokio::time::sleep_until(last_progress + READER_STALL), if full && !dropping => {
                    tracing::warn!(container = %self.name, "output reader stalled for {READER_STALL:?}; dropping output");
                    dropping = true;
                }
                item = output.next(), if !full || dropping => match item {
                    Some(Ok(LogOutput::StdOut { message })) | Some(Ok(LogOutput::Console { message })) => {
                        pending.push(Output::Stdout(message), dropping);
                    }
                    Some(Ok(LogOutput::StdErr { message })) => {
                        pending.push(Output::Stderr(message), dropping);
                    }
                    Some(Ok(LogOutput::StdIn { .. })) => {}
                    Some(Err(e)) => {
                        stream_error = Some(e.to_string());
                        break;
                    }
                    None => break,
                },
            }
        }
        drop(output);
        drop(input);

        if escalated {
            tracing::warn!(
                container = %self.name,
                "a command outlived its kill by {:?}; destroying the container",
                self.kill_grace
            );
            let _ = self.destroy().await;
            flush(&out, &mut pending).await;
            return Ok(ExecOutcome {
                exit_code: None,
                signal: Some(9),
                timed_out: !cancelled,
                cancelled,
                duration: start.elapsed(),
            });
        }

        // The exit code is set once the exec's process is reaped; the stream
        // can end a moment earlier.
        let mut exit: Option<i64> = None;
        for attempt in 0..50 {
            match self.docker.inspect_exec(&exec_id).await {
                Ok(info) if info.running == Some(true) && attempt < 49 => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Ok(info) => {
                    exit = info.exit_code;
                    break;
                }
                Err(e) if is_engine_gone(&e) => {
                    flush(&out, &mut pending).await;
                    return Err(self.engine_gone("exec", &e));
                }
                Err(e) => {
                    flush(&out, &mut pending).await;
                    // A 404 here means the container (and its execs) went away.
                    if status_code(&e) == Some(404) {
                        self.check_container("exec").await?;
                    }
                    return Err(SandboxError::Other(format!(
                        "docker exec inspect in {}: {e}",
                        self.name
                    )));
                }
            }
        }
        flush(&out, &mut pending).await;
        if pending.dropped > 0 {
            tracing::warn!(container = %self.name, dropped = pending.dropped, "output reader too slow; output dropped");
        }

        let elapsed = start.elapsed();
        let killed_status = matches!(exit, Some(137) | Some(124));
        let timed_out = !cancelled && (backstop || (elapsed >= req.timeout && killed_status));
        // An exec killed by a signal, or one whose stream broke, may mean the
        // container itself was killed from outside.
        if !cancelled
            && !timed_out
            && (stream_error.is_some() || exit.is_none() || exit.is_some_and(|c| c > 128))
        {
            // A container killed from outside ends its execs with SIGKILL a
            // moment before the engine records it as stopped: give the engine
            // that moment before believing "running".
            let settle = stream_error.is_some() || exit.is_none() || exit == Some(137);
            let mut tries = if settle { SETTLE_TRIES } else { 1 };
            loop {
                self.check_container("exec").await?;
                tries -= 1;
                if tries == 0 || !self.is_alive() {
                    break;
                }
                tokio::time::sleep(SETTLE_STEP).await;
            }
            if !self.is_alive() {
                self.check_container("exec").await?;
            }
        }
        if let Some(e) = stream_error
            && exit.is_none()
        {
            return Err(SandboxError::Other(format!(
                "exec output stream from {} broke: {e}",
                self.name
            )));
        }
        let outcome = if cancelled || timed_out {
            ExecOutcome {
                exit_code: None,
                signal: Some(9),
                timed_out,
                cancelled,
                duration: elapsed,
            }
        } else {
            let (exit_code, signal) = split_status(exit.unwrap_or(-1));
            ExecOutcome {
                exit_code,
                signal,
                timed_out: false,
                cancelled: false,
                duration: elapsed,
            }
        };
        self.start_refill();
        Ok(outcome)
    }

    async fn destroy(&self) -> Result<(), SandboxError> {
        self.alive.store(false, Ordering::SeqCst);
        self.destroyed.store(true, Ordering::SeqCst);
        // Fast path: SIGKILL the init (and with it the pid namespace) now,
        // and wait until it is gone; the engine then only cleans up.
        if let Some(fd) = self.init.as_ref().and_then(|f| f.try_clone().ok())
            && super::pidfd::kill(&fd)
        {
            let _ = tokio::task::spawn_blocking(move || {
                super::pidfd::wait_exit(&fd, Duration::from_secs(2))
            })
            .await;
        }
        self.stop_watching();
        if let Some(slot) = &self.warm {
            slot.clear().await;
        }
        self.remove().await
    }

    fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }
}

/// Sends what is still buffered to a reader that keeps taking it; one that
/// takes nothing for [`FLUSH_WAIT`] gets the rest dropped.
async fn flush(out: &mpsc::Sender<Output>, pending: &mut Pending) {
    if pending.closed {
        return;
    }
    while let Some(o) = pending.pop() {
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

impl Drop for DockerSandbox {
    fn drop(&mut self) {
        self.stop_watching();
        if self.destroyed.load(Ordering::SeqCst) {
            return;
        }
        // Dropped without destroy(): remove the container anyway, on a thread
        // of its own so that neither a runtime shutting down nor a blocking
        // caller keeps it alive. The next supervisor start reaps it otherwise.
        let docker = self.docker.clone();
        let id = self.id.clone();
        let _ = std::thread::Builder::new()
            .name("tollgate-docker-drop".to_string())
            .spawn(move || {
                if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    rt.block_on(async move {
                        let opts = RemoveContainerOptionsBuilder::new()
                            .force(true)
                            .v(true)
                            .build();
                        let _ = docker.remove_container(&id, Some(opts)).await;
                    });
                }
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn command_lines_round_trip_through_a_real_sh() {
        let argv: Vec<String> = [
            "printf",
            "%s|",
            "plain",
            "two words",
            "",
            "it's",
            "'",
            "a\nb",
            "\n",
            "$HOME `id` $(id) \\ \"q\"",
            "*",
            "-",
            "--",
            "ünï",
        ]
        .iter()
        .map(|s| (*s).to_string())
        .collect();
        let line = command_line("/w d", "7", "1", &argv);
        assert_eq!(line.matches('\n').count(), 1, "{line:?}");
        let script = "NL='\n'\nIFS= read -r l\neval \"set -- $l\"\nprintf '%s|' \"$@\"";
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", script])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(line.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let mut want = String::from("/w d|7|1|");
        for a in &argv {
            want.push_str(a);
            want.push('|');
        }
        assert_eq!(String::from_utf8(out.stdout).unwrap(), want);
    }

    #[test]
    fn timeout_rounds_up_to_whole_seconds() {
        assert_eq!(timeout_secs(Duration::from_millis(1)), 1);
        assert_eq!(timeout_secs(Duration::ZERO), 1);
        assert_eq!(timeout_secs(Duration::from_secs(2)), 2);
        assert_eq!(timeout_secs(Duration::from_millis(2001)), 3);
        assert_eq!(timeout_secs(Duration::from_secs(120)), 120);
    }

    #[test]
    fn shell_statuses_above_128_are_signals() {
        assert_eq!(split_status(0), (Some(0), None));
        assert_eq!(split_status(3), (Some(3), None));
        assert_eq!(split_status(127), (Some(127), None));
        assert_eq!(split_status(128), (Some(128), None));
        assert_eq!(split_status(137), (None, Some(9)));
        assert_eq!(split_status(139), (None, Some(11)));
        assert_eq!(split_status(153), (None, Some(25)));
        assert_eq!(split_status(255), (Some(255), None));
        assert_eq!(split_status(-1), (Some(-1), None));
    }

    #[test]
    fn pending_output_is_bounded() {
        let mut p = Pending {
            queue: VecDeque::new(),
            bytes: 0,
            dropped: 0,
            closed: false,
        };
        let chunk = Bytes::from(vec![b'x'; 1024 * 1024]);
        // A live reader: nothing is dropped (the caller stops reading instead).
        for _ in 0..9 {
            p.push(Output::Stdout(chunk.clone()), false);
        }
        assert_eq!((p.queue.len(), p.dropped), (9, 0));
        // A stalled one: what does not fit is dropped.
        p.push(Output::Stdout(chunk.clone()), true);
        assert_eq!(p.queue.len(), 9);
        assert_eq!(p.bytes, 9 * 1024 * 1024);
        assert_eq!(p.dropped, 1024 * 1024);
        assert!(p.pop().is_some());
        assert!(p.pop().is_some());
        p.push(Output::Stdout(chunk.clone()), true);
        assert_eq!((p.queue.len(), p.bytes), (8, 8 * 1024 * 1024));
    }
}
