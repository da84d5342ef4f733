//! Running one command in a native sandbox (supervisor side).
//!
//! The supervisor makes the pipes, passes their write ends (and stdin) to
//! pid 1 with the request, and reads the output itself. Output chunks go to
//! `out` in the order read; while the command runs, a slow consumer slows it
//! down (the pipe fills), but never past the timeout. Once the command has
//! exited or been killed, what is left is drained without waiting: chunks
//! that do not fit in `out` are dropped, and a process that left the group
//! yet kept the pipe open is given `drain_grace` before it is ignored.
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
        if !self.shared.alive.load(Ordering::SeqCst) {
            return Err(SandboxError::Gone(format!(
                "sandbox of session {} is not running",
                self.session_id
            )));
        }
        if req.argv.is_empty() {
            return Err(SandboxError::Refused("empty argv".to_string()));
        }
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
        let (out_r, out_w) = pipe_pair()?;
        let (err_r, err_w) = if req.merge_stderr {
            (None, None)
        } else {
            let (r, w) = pipe_pair()?;
            (Some(r), Some(w))
        };
        let oom_before = self.oom_kills();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, mut rx) = oneshot::channel::<Exit>();
        if let Ok(mut p) = self.shared.pending.lock() {
            p.insert(id, tx);
        }
        let msg = ToInit::Exec {
            id,
            argv: req.argv.clone(),
            cwd,
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

        let mut stdout = Some(pipe::Receiver::from_owned_fd(out_r).map_err(io("stdout pipe"))?);
        let mut stderr = match err_r {
            Some(r) => Some(pipe::Receiver::from_owned_fd(r).map_err(io("stderr pipe"))?),
            None => None,
        };
        let mut buf_o = vec![0u8; CHUNK];
        let mut buf_e = vec![0u8; CHUNK];
        let deadline = tokio::time::Instant::now() + req.timeout;
        let mut drain_until: Option<tokio::time::Instant> = None;
        let mut exit: Option<Exit> = None;
        let mut held: Option<Output> = None;
        let (mut kill_sent, mut timed_out, mut cancelled, mut out_closed) =
            (false, false, false, false);

        loop {
            let settled = exit.is_some() || kill_sent;
            if let Some(chunk) = held.take_if(|_| settled || out_closed)
                && !out_closed
            {
                let _ = out.try_send(chunk);
            }
            if exit.is_some() && stdout.is_none() && stderr.is_none() {
                break;
            }
            tokio::select! {
                biased;
                _ = cancel.cancelled(), if !kill_sent && exit.is_none() => {
                    cancelled = true;
                    kill_sent = true;
                    let _ = self.ctrl.send(&ToInit::Kill { id }, &[]).await;
                }
                _ = tokio::time::sleep_until(deadline), if !kill_sent && exit.is_none() => {
                    timed_out = true;
                    kill_sent = true;
                    let _ = self.ctrl.send(&ToInit::Kill { id }, &[]).await;
                }
                r = &mut rx, if exit.is_none() => {
                    match r {
                        Ok(e) => exit = Some(e),
                        Err(_) => {
                            return Err(SandboxError::Gone(format!(
                                "sandbox of session {} died while running {:?}",
                                self.session_id, req.argv.first()
                            )));
                        }
                    }
                    drain_until = Some(tokio::time::Instant::now() + self.drain_grace);
                }
                _ = sleep_opt(drain_until) => break,
                permit = out.reserve(), if held.is_some() && !out_closed && !settled => {
                    match permit {
                        Ok(p) => {
                            if let Some(chunk) = held.take() {
                                p.send(chunk);
                            }
                        }
                        Err(_) => {
                            out_closed = true;
                            held = None;
                        }
                    }
                }
                n = read_opt(&mut stdout, &mut buf_o), if held.is_none() => {
                    match n {
                        Ok(0) | Err(_) => stdout = None,
                        Ok(n) => held = Some(Output::Stdout(Bytes::copy_from_slice(&buf_o[..n]))),
                    }
                }
                n = read_opt(&mut stderr, &mut buf_e), if held.is_none() => {
                    match n {
                        Ok(0) | Err(_) => stderr = None,
                        Ok(n) => held = Some(Output::Stderr(Bytes::copy_from_slice(&buf_e[..n]))),
                    }
                }
            }
        }
        if let Some(chunk) = held.take()
            && !out_closed
        {
            let _ = out.try_send(chunk);
        }
        let (exit_code, signal) = match exit {
            Some(Exit::Exited { code, signal }) => (code, signal),
            Some(Exit::SpawnFailed(e)) => {
                return Err(SandboxError::Other(format!(
                    "could not start {:?} in the sandbox of session {}: {e}",
                    req.argv.first(),
                    self.session_id
                )));
            }
            None => (None, None),
        };
        if signal == Some(libc::SIGKILL)
            && !timed_out
            && !cancelled
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
            timed_out,
            cancelled,
            duration: start.elapsed(),
        })
    }
}
