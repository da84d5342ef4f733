//! `agent hook exec ID`: the rewritten Bash command of a routed call. It
//! claims the command the supervisor decided (single use, this uid only),
//! which runs in the session's sandbox; this process only passes its stdout
//! and stderr through as they come and exits with its status.
//!
//! Exit status: the command's own; 128 + N when a signal N ended it (a kill
//! or revoke ends it with SIGKILL: 137); 124 when it timed out; 126 when
//! tollgate could not run it at all (the message on stderr says why).

use std::io::Write;
use std::path::Path;

use tokio_stream::StreamExt as _;
use tollgate_proto::client_hooks_client::ClientHooksClient;
use tollgate_proto::{HookExecRequest, sandbox_exec_output};

/// Exit code when the command could not be run.
pub const NOT_RUN: i32 = 126;
/// Exit code when the command timed out (as `timeout(1)`).
pub const TIMED_OUT: i32 = 124;

/// Runs a routed command; returns the exit code.
pub async fn run(socket: &Path, id: &str) -> i32 {
    let fail = |msg: String| {
        eprintln!("agent hook exec: {msg}");
        NOT_RUN
    };
    let channel = match crate::client::connect(socket).await {
        Ok(c) => c,
        Err(e) => {
            return fail(format!(
                "cannot reach the supervisor ({e}); the command did not run. If the client runs this command in its own sandbox (Codex's workspace-write), let it reach tollgate's socket: [sandbox_workspace_write] network_access = true"
            ));
        }
    };
    let mut c = ClientHooksClient::new(channel);
    let mut stream = match c.exec(HookExecRequest { id: id.to_string() }).await {
        Ok(r) => r.into_inner(),
        Err(s) => return fail(format!("{}; the command did not run", s.message())),
    };
    let mut stdout = std::io::stdout().lock();
    while let Some(item) = stream.next().await {
        let out = match item {
            Ok(o) => o.out,
            Err(s) => {
                let _ = stdout.flush();
                return fail(format!(
                    "lost the supervisor ({}); the command was stopped",
                    s.message()
                ));
            }
        };
        match out {
            Some(sandbox_exec_output::Out::Stdout(b)) => {
                let written = stdout.write_all(&b).and_then(|_| stdout.flush());
                if written.is_err() {
                    // The reader went away: stop (dropping the stream kills
                    // the command).
                    return NOT_RUN;
                }
            }
            Some(sandbox_exec_output::Out::Stderr(b)) => {
                let mut e = std::io::stderr().lock();
                let _ = e.write_all(&b).and_then(|_| e.flush());
            }
            Some(sandbox_exec_output::Out::Exit(x)) => {
                let _ = stdout.flush();
                return if x.timed_out {
                    TIMED_OUT
                } else if x.signal > 0 {
                    128 + x.signal
                } else if (0..=255).contains(&x.code) {
                    x.code
                } else {
                    NOT_RUN
                };
            }
            None => {}
        }
    }
    let _ = stdout.flush();
    fail("the supervisor ended the command's stream without its exit status".to_string())
}
