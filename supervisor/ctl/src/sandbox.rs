//! `sandbox exec`: run a command in a fresh sandbox built exactly as a
//! session's, with no shell policy in front. For operators, tests and
//! outside checks of the wall itself.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context as _;
use futures_util::StreamExt;
use tollgate_proto::v1 as pb;

use crate::client::{Client, status_error};

pub struct ExecArgs {
    pub workspace: Option<PathBuf>,
    pub user: Option<u32>,
    pub backend: Option<tollgate_config::BackendChoice>,
    pub timeout: Option<u32>,
    pub argv: Vec<String>,
    /// JSON Lines instead of the command's own bytes.
    pub json: bool,
}

/// Returns the command's exit code (128 + signal when killed by one).
pub async fn exec(mut c: Client, a: ExecArgs) -> anyhow::Result<u8> {
    let workspace = match a.workspace {
        Some(w) => w,
        None => std::env::current_dir().context("no current directory; pass --workspace")?,
    };
    let workspace = std::fs::canonicalize(&workspace)
        .with_context(|| format!("workspace {}", workspace.display()))?;
    // Unspecified and empty: the supervisor's own backend.
    let (sandbox_backend, backend) = crate::wire::exec_backend(a.backend);
    let mut stream = c
        .sandbox_exec(pb::SandboxExecRequest {
            workspace: workspace.display().to_string(),
            uid: a.user,
            backend,
            sandbox_backend: sandbox_backend as i32,
            timeout_s: a.timeout.unwrap_or(0),
            argv: a.argv,
        })
        .await
        .map_err(status_error)?
        .into_inner();
    let mut shown = Shown {
        json: a.json,
        stdout: crate::out::Stdout,
        stderr: std::io::stderr(),
    };
    while let Some(msg) = stream.next().await {
        match msg.map_err(status_error)?.out {
            Some(pb::sandbox_exec_output::Out::Stdout(b)) => shown.output("stdout", &b)?,
            Some(pb::sandbox_exec_output::Out::Stderr(b)) => shown.output("stderr", &b)?,
            Some(pb::sandbox_exec_output::Out::Exit(e)) => return Ok(shown.exit(&e)),
            None => {}
        }
    }
    anyhow::bail!("the supervisor ended the stream without an exit status")
}

/// Where a sandboxed command's output goes: its own bytes to stdout and
/// stderr, or JSON Lines on stdout (`{"stdout": TEXT}`, `{"stderr": TEXT}`,
/// invalid UTF-8 replaced, then `{"exit": {...}}`).
struct Shown {
    json: bool,
    stdout: crate::out::Stdout,
    stderr: std::io::Stderr,
}

impl Shown {
    fn output(&mut self, stream: &str, b: &[u8]) -> std::io::Result<()> {
        if self.json {
            let v = serde_json::json!({ stream: String::from_utf8_lossy(b) });
            return writeln!(self.stdout, "{v}");
        }
        let w: &mut dyn Write = if stream == "stdout" {
            &mut self.stdout
        } else {
            &mut self.stderr
        };
        w.write_all(b)?;
        w.flush()
    }

    /// Prints how the command ended; returns supervisorctl's exit code.
    fn exit(&mut self, e: &pb::ExitStatus) -> u8 {
        let code = if e.signal > 0 {
            (128 + e.signal).clamp(1, 255) as u8
        } else if e.code < 0 {
            1
        } else {
            e.code.min(255) as u8
        };
        if self.json {
            let v = serde_json::json!({"exit": {
                "code": e.code, "signal": e.signal, "timed_out": e.timed_out,
            }});
            let _ = writeln!(self.stdout, "{v}");
        } else if e.timed_out {
            eprintln!("supervisorctl: the command timed out and was killed");
        }
        code
    }
}
