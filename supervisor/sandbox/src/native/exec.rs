//! Running one command in a native sandbox (supervisor side).
//!
//! The supervisor makes the pipes, passes their write ends (and stdin) to
//! pid 1 with the request, and reads the output itself. Output chunks go to
//! `out` in the order read; while the command runs, a slow consumer slows it
//! down (the pipe fills), but never past the timeout. Once the command has
//! exited or been killed, what is left is drained without waiting: chunks
//! that do not fit in `out` are dropped, and a process that left the group
//! yet kept the pipe open is given `drain_grace` before it is ignored; then
//! what the pipes hold is read at once ([`drain_now`]), whether or not the
//! reactor has seen it yet.
//!
//! Timeout and cancel ask pid 1 to SIGKILL the command's process group.

use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::protocol::ToInit;
use super::{Exit, NativeSandbox};
use crate::{ExecOutcome, ExecRequest, Output, SandboxError};

const CHUNK: usize = 64 * 1024;

fn io(context: &str) -> impl FnOnce(std::io::Error) -> SandboxError + '_ {
    move |source| SandboxError::Io {
        context: context.to_string(),
        source,
    }
}

async fn read_opt(r: &mut Option<pipe::Receiver>, buf: &mut [u8]) -> std::io::Result<usize> {
    match r {
        Some(r) => r.read(buf).await,
        None => std::future::pending().await,
    }
}

async fn sleep_opt(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

fn pipe_pair() -> Result<(OwnedFd, OwnedFd), SandboxError> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| io("pipe")(e.into()))
}

impl NativeSandbox {
    /// [`crate::Sandbox::exec_interactive`]: a pipe for stdin, fed from
    /// `stdin` by a task that ends with the command (or when the sender is
    /// dropped, which closes the command's stdin).
    pub(super) async fn exec_fed(
        &self,
        req: ExecRequest,
        mut stdin: mpsc::Receiver<Bytes>,
        out: mpsc::Sender<Output>,
        cancel: CancellationToken,
    ) -> Result<ExecOutcome, SandboxError> {
        let (read, write) = pipe_pair()?;
        let mut sender = pipe::Sender::from_owned_fd(write).map_err(io("stdin pipe"))?;
        let feeder = tokio::spawn(async move {
            while let Some(chunk) = stdin.recv().await {
                if sender.write_all(&chunk).await.is_err() {
                    break;
                }
            }
        });
        let r = self.exec_with_stdin(req, Some(read), out, cancel).await;
        feeder.abort();
        r
    }

    /// [`crate::Sandbox::exec`] with an explicit stdin (a pty, for example);
    /// `None` means /dev/null.
    pub async fn exec_with_stdin(
        &self,
        req: ExecRequest,
        stdin: Option<OwnedFd>,
        out: mpsc::Sender<Output>,
        cancel: CancellationToken,
    ) -> Result<ExecOutcome, SandboxError> {
        self.check_runnable(&req)?;
        let cwd: PathBuf = match &req.cwd {
            Some(c) if c.is_absolute() => c.clone(),
            Some(c) => self.workspace.join(c),
            None => self.workspace.clone(),
        };
        let start = Instant::now();
        let stdin = match stdin {
            Some(fd) => fd,
            None => std::fs::File::open("/dev/null")
                .map(OwnedFd::from)
                .map_err(io("open /dev/null"))?,
        };
        let sent = self.send_command(&req, cwd, stdin).await?;
        let stdout = Some(pipe::Receiver::from_owned_fd(sent.out_r).map_err(io("stdout pipe"))?);
        let stderr = match sent.err_r {
            Some(r) => Some(pipe::Receiver::from_owned_fd(r).map_err(io("stderr pipe"))?),
            None => None,
        };
        let streams = Streams {
            id: sent.id,
            exit: sent.exit,
            stdout,
            stderr,
        };
        let mut run = CommandRun::default();
        let pumped = self.pump(&mut run, &req, streams, &out, &cancel).await;
        let refusals = match (self.attribution, sent.call) {
            (Some(l), Some(call)) => l.finish(call).await,
            _ => Default::default(),
        };
        pumped?;
        if let Some(chunk) = run.held.take()
            && !run.out_closed
        {
            let _ = out.try_send(chunk);
        }
        let mut outcome = self.outcome(run, &req, sent.oom_before, &out, start)?;
        outcome.refusals = refusals;
        Ok(outcome)
    }

    /// The sandbox must be running and the command must have an argv.
    fn check_runnable(&self, req: &ExecRequest) -> Result<(), SandboxError> {
        if !self.shared.alive.load(Ordering::SeqCst) {
            return Err(SandboxError::Gone(format!(
                "sandbox of session {} is not running",
                self.session_id
            )));
        }
        if req.argv.is_empty() {
            return Err(SandboxError::Refused("empty argv".to_string()));
        }
        Ok(())
    }

    /// Makes the output pipes and sends pid 1 the command with its stdin
    /// and the pipes' write ends.
    async fn send_command(
        &self,
        req: &ExecRequest,
        cwd: PathBuf,
        stdin: OwnedFd,
    ) -> Result<SentCommand, SandboxError> {
        let (out_r, out_w) = pipe_pair()?;
        let (err_r, err_w) = if req.merge_stderr {
            (None, None)
        } else {
            let (r, w) = pipe_pair()?;
            (Some(r), Some(w))
        };
        let oom_before = self.oom_kills();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel::<Exit>();
        if let Ok(mut p) = self.shared.pending.lock() {
            p.insert(id, tx);
        }
        let call = self.attribution.map(|l| l.register(&self.workspace));
        let msg = ToInit::Exec {
            id,
            argv: req.argv.clone(),
            cwd,
            tag: call.as_ref().map(|c| c.tag.clone()),
        };
        let err_fd = err_w.as_ref().unwrap_or(&out_w);
        let sent = self
            .ctrl
            .send(&msg, &[stdin.as_fd(), out_w.as_fd(), err_fd.as_fd()])
            .await;
        drop((stdin, out_w, err_w));
        if let Err(e) = sent {
            self.shared.take(id);
            return Err(SandboxError::Io {
                context: format!("send command to the sandbox of session {}", self.session_id),
                source: e,
            });
        }
        Ok(SentCommand {
            id,
            exit: rx,
            out_r,
            err_r,
            oom_before,
            call,
        })
    }

    /// Reads the command's output into `out` until it exited and its pipes
    /// are drained (or `drain_grace` after it exited); timeout and cancel
    /// ask pid 1 to kill it.
    async fn pump(
        &self,
        run: &mut CommandRun,
        req: &ExecRequest,
        streams: Streams,
        out: &mpsc::Sender<Output>,
        cancel: &CancellationToken,
    ) -> Result<(), SandboxError> {
        let Streams {
            id,
            exit: mut rx,
            mut stdout,
            mut stderr,
        } = streams;
        let mut buf_o = vec![0u8; CHUNK];
        let mut buf_e = vec![0u8; CHUNK];
        let deadline = tokio::time::Instant::now() + req.timeout;
        let mut drain_until: Option<tokio::time::Instant> = None;
        loop {
            let settled = run.exit.is_some() || run.kill_sent;
            if let Some(chunk) = run.held.take_if(|_| settled || run.out_closed)
                && !run.out_closed
            {
                let _ = out.try_send(chunk);
            }
            if run.exit.is_some() && stdout.is_none() && stderr.is_none() {
                return Ok(());
            }
            tokio::select! {
                biased;
                _ = cancel.cancelled(), if !run.kill_sent && run.exit.is_none() => {
                    run.cancelled = true;
                    run.kill_sent = true;
                    let _ = self.ctrl.send(&ToInit::Kill { id }, &[]).await;
                }
                _ = tokio::time::sleep_until(deadline), if !run.kill_sent && run.exit.is_none() => {
                    run.timed_out = true;
                    run.kill_sent = true;
                    let _ = self.ctrl.send(&ToInit::Kill { id }, &[]).await;
                }
                r = &mut rx, if run.exit.is_none() => {
                    match r {
                        Ok(e) => run.exit = Some(e),
                        Err(_) => {
                            return Err(SandboxError::Gone(format!(
                                "sandbox of session {} died while running {:?}",
                                self.session_id, req.argv.first()
                            )));
                        }
                    }
                    drain_until = Some(tokio::time::Instant::now() + self.drain_grace);
                }
                _ = sleep_opt(drain_until) => {
                    drain_now(run, [&mut stdout, &mut stderr], out);
                    return Ok(());
                }
                permit = out.reserve(), if run.held.is_some() && !run.out_closed && !settled => {
                    match permit {
                        Ok(p) => {
                            if let Some(chunk) = run.held.take() {
                                p.send(chunk);
                            }
                        }
                        Err(_) => {
                            run.out_closed = true;
                            run.held = None;
                        }
                    }
                }
                n = read_opt(&mut stdout, &mut buf_o), if run.held.is_none() => {
                    match n {
                        Ok(0) | Err(_) => stdout = None,
                        Ok(n) => run.held = Some(Output::Stdout(Bytes::copy_from_slice(&buf_o[..n]))),
                    }
                }
                n = read_opt(&mut stderr, &mut buf_e), if run.held.is_none() => {
                    match n {
                        Ok(0) | Err(_) => stderr = None,
                        Ok(n) => run.held = Some(Output::Stderr(Bytes::copy_from_slice(&buf_e[..n]))),
                    }
                }
            }
        }
    }

    /// How the command ended; a SIGKILL the OOM killer dealt (its count went
    /// up) is said on the command's stderr.
    fn outcome(
        &self,
        run: CommandRun,
        req: &ExecRequest,
        oom_before: Option<u64>,
        out: &mpsc::Sender<Output>,
        start: Instant,
    ) -> Result<ExecOutcome, SandboxError> {
        let (exit_code, signal) = match run.exit {
            Some(Exit::Exited { code, signal }) => (code, signal),
            Some(Exit::SpawnFailed(e)) => {
                return Err(SandboxError::Spawn {
                    argv0: req.argv.first().cloned(),
                    place: format!("the sandbox of session {}", self.session_id),
                    error: e.to_string(),
                });
            }
            None => (None, None),
        };
        if signal == Some(libc::SIGKILL)
            && !run.timed_out
            && !run.cancelled
            && let (Some(before), Some(after)) = (oom_before, self.oom_kills())
            && after > before
        {
            let note = "sandbox: killed by the out-of-memory killer (the sandbox's memory limit was reached)\n";
            let chunk = if req.merge_stderr {
                Output::Stdout(Bytes::from_static(note.as_bytes()))
            } else {
                Output::Stderr(Bytes::from_static(note.as_bytes()))
            };
            let _ = out.try_send(chunk);
        }
        Ok(ExecOutcome {
            exit_code,
            signal,
            timed_out: run.timed_out,
            cancelled: run.cancelled,
            duration: start.elapsed(),
            refusals: Default::default(),
        })
    }
}

/// Most bytes [`drain_now`] reads from one pipe (a process that left the
/// group may keep writing).
const DRAIN_MAX: usize = 1 << 20;

/// At the end of `drain_grace`: what is in the pipes now, read without
/// waiting for the reactor. pid 1's exit report can be read before the
/// reactor has seen the pipe become readable (the control socket is read
/// packet after packet), and under load its next turn may come with the
/// grace's end: the command's last write before it exited was then lost.
/// A raw non-blocking read sees what the kernel holds.
fn drain_now(
    run: &mut CommandRun,
    pipes: [&mut Option<pipe::Receiver>; 2],
    out: &mpsc::Sender<Output>,
) {
    use std::os::fd::AsRawFd;
    if let Some(chunk) = run.held.take()
        && !run.out_closed
    {
        let _ = out.try_send(chunk);
    }
    let mut buf = vec![0u8; CHUNK];
    for (which, pipe) in pipes.into_iter().enumerate() {
        let Some(p) = pipe.take() else { continue };
        let mut read = 0;
        while read < DRAIN_MAX {
            // SAFETY: a read into a live buffer of its length, from an fd
            // `p` owns and keeps open for the call.
            let n = unsafe { libc::read(p.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            let Ok(n @ 1..) = usize::try_from(n) else {
                break;
            };
            read += n;
            let bytes = Bytes::copy_from_slice(&buf[..n]);
            let chunk = if which == 0 {
                Output::Stdout(bytes)
            } else {
                Output::Stderr(bytes)
            };
            if !run.out_closed {
                let _ = out.try_send(chunk);
            }
        }
    }
}

/// A command pid 1 was sent.
struct SentCommand {
    id: u64,
    /// How it ended, from pid 1.
    exit: oneshot::Receiver<Exit>,
    out_r: OwnedFd,
    err_r: Option<OwnedFd>,
    /// The sandbox's OOM kill count before it started.
    oom_before: Option<u64>,
    /// Its share of the refusal reader, when refusals are attributed.
    call: Option<super::audit::CallHandle>,
}

/// What the output loop of command `id` reads: how it ended, and its pipes.
struct Streams {
    id: u64,
    exit: oneshot::Receiver<Exit>,
    stdout: Option<pipe::Receiver>,
    stderr: Option<pipe::Receiver>,
}

/// The state of one command's output loop.
#[derive(Default)]
struct CommandRun {
    exit: Option<Exit>,
    /// A chunk read and not yet taken by `out`.
    held: Option<Output>,
    kill_sent: bool,
    timed_out: bool,
    cancelled: bool,
    out_closed: bool,
}
