//! A long-lived command with its stdin connected, in a session container
//! ([`crate::Sandbox::exec_interactive`]): the MCP server `agent
//! mcp-gateway` wraps.
//!
//! The exec's stdin is the command's stdin, so the wrapper of `exec.rs`
//! (which keeps stdin as its kill channel) cannot be used, and an exec cannot
//! be signalled through the engine. So the command runs under the
//! container's `timeout -s KILL` (a limit that holds without the
//! supervisor), and `cancel` destroys the whole container: the only way to
//! be sure its whole process tree is gone. The gateway's session ends with
//! its server anyway (client gone, revoke, kill).

use std::time::{Duration, Instant};

use bollard::container::LogOutput;
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::errors::is_engine_gone;
use super::exec::{DockerSandbox, split_status, start_exec, timeout_secs};
use crate::{ExecOutcome, ExecRequest, Output, Sandbox, SandboxError};

impl DockerSandbox {
    pub(super) async fn exec_fed(
        &self,
        req: ExecRequest,
        mut stdin: mpsc::Receiver<Bytes>,
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
        let cwd = req.cwd.clone().unwrap_or_else(|| self.workspace.clone());
        let cwd = cwd
            .to_str()
            .ok_or_else(|| SandboxError::Other(format!("cwd {} is not UTF-8", cwd.display())))?
            .to_string();
        if req.argv.is_empty() || req.argv.iter().any(|a| a.contains('\0')) || cwd.contains('\0') {
            return Err(SandboxError::Other(
                "an interactive exec needs a command, and no NUL bytes in argv or cwd".to_string(),
            ));
        }
        let mut cmd: Vec<String> = vec![
            "/usr/bin/timeout".into(),
            "-s".into(),
            "KILL".into(),
            timeout_secs(req.timeout).to_string(),
        ];
        cmd.extend(req.argv.iter().cloned());
        let (exec_id, mut output, mut input) = start_exec(&self.docker, &self.id, cmd, cwd)
            .await
            .map_err(|(during, e)| self.exec_error(during, e))?;
        let feeder = tokio::spawn(async move {
            while let Some(chunk) = stdin.recv().await {
                if input.write_all(&chunk).await.is_err() || input.flush().await.is_err() {
                    return;
                }
            }
            // The sender is gone: half-close, so the command reads EOF.
            let _ = input.shutdown().await;
        });
        let mut cancelled = false;
        let mut stream_error = None;
        loop {
            let piece = tokio::select! {
                biased;
                _ = cancel.cancelled() => {
                    cancelled = true;
                    break;
                }
                item = output.next() => item,
            };
            let o = match piece {
                Some(Ok(LogOutput::StdOut { message }))
                | Some(Ok(LogOutput::Console { message })) => Output::Stdout(message),
                Some(Ok(LogOutput::StdErr { message })) => Output::Stderr(message),
                Some(Ok(LogOutput::StdIn { .. })) => continue,
                Some(Err(e)) => {
                    stream_error = Some(e.to_string());
                    break;
                }
                None => break,
            };
            // A slow reader slows the command down, but never past a cancel.
            tokio::select! {
                biased;
                _ = cancel.cancelled() => {
                    cancelled = true;
                    break;
                }
                _ = out.send(o) => {}
            }
        }
        feeder.abort();
        drop(output);
        if cancelled {
            self.destroy().await?;
            return Ok(ExecOutcome {
                exit_code: None,
                signal: Some(libc::SIGKILL),
                timed_out: false,
                cancelled: true,
                duration: start.elapsed(),
            });
        }
        let mut exit = None;
        for _ in 0..50 {
            match self.docker.inspect_exec(&exec_id).await {
                Ok(info) if info.running == Some(true) => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Ok(info) => {
                    exit = info.exit_code;
                    break;
                }
                Err(e) if is_engine_gone(&e) => return Err(self.engine_gone("exec", &e)),
                Err(e) => {
                    return Err(SandboxError::Other(format!(
                        "docker exec inspect in {}: {e}",
                        self.name
                    )));
                }
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
        let (exit_code, signal) = match exit {
            Some(c) => split_status(c),
            None => (None, None),
        };
        Ok(ExecOutcome {
            exit_code,
            signal,
            timed_out: exit == Some(137) && start.elapsed() >= req.timeout,
            cancelled: false,
            duration: start.elapsed(),
        })
    }
}
