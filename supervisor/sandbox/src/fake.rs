//! A fake backend for the daemon's unit tests: it runs nothing.
//!
//! `echo ARGS` prints its arguments; `sleep N` waits (and honours timeout and
//! cancel); `exit N` exits with N; anything else prints `fake: CMD` and exits 0.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::{
    Backend, BackendKind, ExecOutcome, ExecRequest, Output, Reaped, Sandbox, SandboxError,
    SandboxSpec, Strength,
};

#[derive(Debug, Default)]
pub struct FakeBackend;

#[async_trait::async_trait]
impl Backend for FakeBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Fake
    }

    fn strength(&self) -> Strength {
        Strength {
            backend: BackendKind::Fake,
            summary: "fake backend: runs nothing".to_string(),
            missing: Vec::new(),
        }
    }

    async fn create(&self, _spec: &SandboxSpec) -> Result<Arc<dyn Sandbox>, SandboxError> {
        Ok(Arc::new(FakeSandbox {
            alive: AtomicBool::new(true),
        }))
    }

    async fn reap_orphans(&self) -> Result<Vec<Reaped>, SandboxError> {
        Ok(Vec::new())
    }
}

#[derive(Debug)]
pub struct FakeSandbox {
    alive: AtomicBool,
}

#[async_trait::async_trait]
impl Sandbox for FakeSandbox {
    async fn exec(
        &self,
        req: ExecRequest,
        out: mpsc::Sender<Output>,
        cancel: CancellationToken,
    ) -> Result<ExecOutcome, SandboxError> {
        if !self.is_alive() {
            return Err(SandboxError::Gone("fake sandbox destroyed".to_string()));
        }
        let start = Instant::now();
        let command = match req.argv.as_slice() {
            [sh, flag, cmd] if sh == "sh" && flag == "-c" => cmd.clone(),
            argv => argv.join(" "),
        };
        let mut words = command.split_whitespace();
        let head = words.next().unwrap_or_default();
        let rest: Vec<&str> = words.collect();
        let mut outcome = ExecOutcome {
            exit_code: Some(0),
            signal: None,
            timed_out: false,
            cancelled: false,
            duration: Duration::ZERO,
        };
        match head {
            "echo" => {
                let _ = out
                    .send(Output::Stdout(Bytes::from(format!("{}\n", rest.join(" ")))))
                    .await;
            }
            "sleep" => {
                let secs: f64 = rest.first().and_then(|s| s.parse().ok()).unwrap_or(0.0);
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs_f64(secs)) => {}
                    _ = tokio::time::sleep(req.timeout) => {
                        outcome.timed_out = true;
                        outcome.exit_code = None;
                        outcome.signal = Some(9);
                    }
                    _ = cancel.cancelled() => {
                        outcome.cancelled = true;
                        outcome.exit_code = None;
                        outcome.signal = Some(9);
                    }
                }
            }
            "exit" => {
                outcome.exit_code = Some(rest.first().and_then(|s| s.parse().ok()).unwrap_or(0));
            }
            _ => {
                let _ = out
                    .send(Output::Stdout(Bytes::from(format!("fake: {command}\n"))))
                    .await;
            }
        }
        outcome.duration = start.elapsed();
        Ok(outcome)
    }

    async fn destroy(&self) -> Result<(), SandboxError> {
        self.alive.store(false, Ordering::SeqCst);
        Ok(())
    }

    fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }
}
