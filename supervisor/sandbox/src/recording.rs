//! A recording backend for tests of the code that drives a sandbox (the
//! gate's pipeline): it runs nothing, records every request in order, and
//! answers each command as its script says. Built only with the
//! `test-util` feature; no product binary enables it.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use crate::{
    Backend, BackendKind, ExecOutcome, ExecRequest, Output, Reaped, Sandbox, SandboxError,
    SandboxSpec, Strength,
};

/// What the backend was asked to do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// A sandbox for this session id.
    Created(String),
    /// A command: its argv, and whether stderr was merged.
    Exec {
        argv: Vec<String>,
        merge_stderr: bool,
    },
    /// A command that ended by cancellation.
    Cancelled,
    Destroyed,
}

/// How the next command answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Prints `stdout` and exits with `code`.
    Exit { stdout: Vec<u8>, code: i32 },
    /// Runs until cancelled (a command that is still running when the
    /// call is cancelled or the session revoked).
    Hang,
}

#[derive(Default)]
struct Script {
    log: Mutex<Vec<Recorded>>,
    answers: Mutex<VecDeque<Answer>>,
    /// Told when a command starts.
    started: Notify,
}

/// The backend; clones share the log and the script.
#[derive(Clone, Default)]
pub struct RecordingBackend {
    script: Arc<Script>,
}

impl RecordingBackend {
    pub fn new() -> RecordingBackend {
        RecordingBackend::default()
    }

    /// The next command answers `a` (commands without an answer exit 0
    /// with no output).
    pub fn answer(&self, a: Answer) {
        if let Ok(mut q) = self.script.answers.lock() {
            q.push_back(a);
        }
    }

    /// Everything asked so far.
    pub fn log(&self) -> Vec<Recorded> {
        self.script
            .log
            .lock()
            .map(|l| l.clone())
            .unwrap_or_default()
    }

    /// Waits until a command has started.
    pub async fn started(&self) {
        self.script.started.notified().await
    }

    fn note(&self, r: Recorded) {
        if let Ok(mut l) = self.script.log.lock() {
            l.push(r);
        }
    }
}

#[async_trait::async_trait]
impl Backend for RecordingBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Native
    }

    fn strength(&self) -> Strength {
        Strength {
            backend: BackendKind::Native,
            summary: "recording (tests only)".to_string(),
            missing: Vec::new(),
        }
    }

    async fn create(&self, spec: &SandboxSpec) -> Result<Arc<dyn Sandbox>, SandboxError> {
        self.note(Recorded::Created(spec.session_id.clone()));
        Ok(Arc::new(RecordingSandbox {
            backend: self.clone(),
        }))
    }

    async fn reap_orphans(&self) -> Result<Vec<Reaped>, SandboxError> {
        Ok(Vec::new())
    }
}

struct RecordingSandbox {
    backend: RecordingBackend,
}

#[async_trait::async_trait]
impl Sandbox for RecordingSandbox {
    async fn exec(
        &self,
        req: ExecRequest,
        out: mpsc::Sender<Output>,
        cancel: CancellationToken,
    ) -> Result<ExecOutcome, SandboxError> {
        let b = &self.backend;
        b.note(Recorded::Exec {
            argv: req.argv.clone(),
            merge_stderr: req.merge_stderr,
        });
        let answer = b.script.answers.lock().ok().and_then(|mut q| q.pop_front());
        b.script.started.notify_one();
        let ended = |code, cancelled| ExecOutcome {
            exit_code: code,
            signal: None,
            timed_out: false,
            cancelled,
            duration: Duration::ZERO,
            refusals: Default::default(),
        };
        match answer.unwrap_or(Answer::Exit {
            stdout: Vec::new(),
            code: 0,
        }) {
            Answer::Exit { stdout, code } => {
                if !stdout.is_empty() {
                    let _ = out.send(Output::Stdout(Bytes::from(stdout))).await;
                }
                Ok(ended(Some(code), false))
            }
            Answer::Hang => {
                cancel.cancelled().await;
                b.note(Recorded::Cancelled);
                Ok(ended(None, true))
            }
        }
    }

    async fn destroy(&self) -> Result<(), SandboxError> {
        self.backend.note(Recorded::Destroyed);
        Ok(())
    }

    fn is_alive(&self) -> bool {
        true
    }

    fn shell(&self) -> crate::Shell {
        crate::Shell::of_host()
    }
}
