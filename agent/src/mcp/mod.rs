//! `agent mcp`: tollgate's tools as a stdio MCP server (docs/MCP.md).
//!
//! It opens one session with the supervisor (the workspace is the working
//! directory or `--workspace`; `--mode` and `--tools` as for `agent`), offers
//! the session's supervisor-side tools with the schemas of `ListTools`, and
//! sends each `tools/call` to `CallTool`: the supervisor's PEP, sandbox and
//! audit decide and run it, exactly as for the interactive agent. This module
//! decides nothing; it translates. It writes only protocol on stdout and its
//! notes on stderr.
//!
//! The session ends when the client closes the connection (stdin EOF) or the
//! process gets SIGTERM, SIGINT or SIGHUP: in-flight calls are cancelled in
//! the supervisor (their processes killed, their records written), and the
//! session is closed. When an operator revokes or kills the session, the
//! in-flight call ends with an error result naming the reason, and so does
//! every later call.

mod approvals;
mod server;
mod settings;
mod tools;
mod transport;

pub use approvals::{decision, message, schema_json};
pub use server::NEWEST_PROTOCOL;
pub use settings::{McpArgs, McpSettings, validate};
pub use tools::{Hints, hints_for, offered_tools};
pub use transport::{LineTransport, MAX_LINE_BYTES};

use std::sync::{Arc, OnceLock};

use rmcp::service::{QuitReason, ServerInitializeError, serve_server};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;
use tollgate_proto::{OpenSessionRequest, SessionCaps};

use crate::error::AgentError;
use crate::session;
use crate::term;
use crate::text::escape_display;

use approvals::PeerCell;
use server::{Server, Shared};

/// Runs `agent mcp`. Returns the exit code: 0 when the client ended the
/// connection, 3 when the session was revoked or refused, 1 on a failure.
pub async fn run(s: McpSettings) -> i32 {
    match run_inner(s).await {
        Ok(code) => code,
        Err(e) => {
            term::error(&e);
            e.exit_code()
        }
    }
}

async fn run_inner(s: McpSettings) -> Result<i32, AgentError> {
    let workspace = match &s.workspace {
        Some(w) => session::canonical_dir(w)?,
        None => session::current_workspace()?,
    };
    let req = OpenSessionRequest {
        workspace: workspace.to_string_lossy().into_owned(),
        mode: s.mode.clone().unwrap_or_default(),
        permission_mode: crate::client::permission_mode(s.mode.as_deref().unwrap_or_default()),
        tools: s.tools.clone(),
        caps: Some(SessionCaps {
            max_tool_calls: s.max_tool_calls,
            max_cost_usd: None,
            llm_timeout_s: None,
        }),
        system_prompt: String::new(),
        model: String::new(),
        client: "agent mcp".to_string(),
    };
    let (mut session, control, specs) = session::open(&s.socket, req).await?;
    let offered = tools::offered_tools(&specs);
    term::diag(&format!(
        "agent mcp: session {} in '{}' mode (workspace {}), {} tools; approvals {}; serving MCP on stdin/stdout",
        session.id,
        escape_display(
            if session.mode.is_empty() {
                "default"
            } else {
                &session.mode
            },
            false
        ),
        escape_display(&workspace.to_string_lossy(), false),
        offered.len(),
        if session.can_approve {
            "asked through the client when it can, and offered to operators"
        } else {
            "decided by operators (supervisorctl approvals)"
        },
    ));

    let (ended, _) = watch::channel::<Option<String>>(None);
    let peer: PeerCell = Arc::new(OnceLock::new());
    let pump = tokio::spawn(approvals::pump(control, ended.clone(), Arc::clone(&peer)));
    let stopping = watch::Sender::new(None);
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (read, write) = rmcp::transport::stdio_pipes();
    let transport = LineTransport::new(read, write);
    let server = Server::new(Shared {
        client: session.client.clone(),
        names: offered.iter().map(|t| t.name.to_string()).collect(),
        local: specs
            .iter()
            .filter(|t| !tools::offered(t))
            .map(|t| t.name.clone())
            .collect(),
        tools: offered,
        ended: ended.clone(),
        client_gone: transport.client_gone(),
        stopping: stopping.subscribe(),
        calls: Arc::clone(&calls),
    });
    let served = serve(server, transport, peer, &stopping, &calls).await;
    pump.abort();
    let revoked = ended.borrow().is_some();
    if revoked {
        session.abandon();
    } else {
        session.close().await;
    }
    Ok(match served {
        Served::Done if revoked => 3,
        Served::Done => 0,
        Served::Failed => 1,
    })
}

type StdioTransport = LineTransport<rmcp::transport::StdioReader, rmcp::transport::StdioWriter>;

enum Served {
    Done,
    Failed,
}

/// Serves until the client goes away or a signal asks to stop.
async fn serve(
    server: Server,
    transport: StdioTransport,
    peer: PeerCell,
    stopping: &watch::Sender<Option<&'static str>>,
    calls: &std::sync::atomic::AtomicUsize,
) -> Served {
    let mut stop = match Stop::install() {
        Ok(s) => s,
        Err(e) => {
            term::error(&format!("agent mcp: cannot watch for signals: {e}"));
            return Served::Failed;
        }
    };
    let running = tokio::select! {
        r = serve_server(server, transport) => r,
        sig = stop.recv() => {
            term::diag(&format!("agent mcp: {sig} before the client initialized; stopping"));
            return Served::Done;
        }
    };
    let running = match running {
        Ok(r) => r,
        Err(ServerInitializeError::ConnectionClosed(_)) => {
            term::diag("agent mcp: the client closed the connection before initializing");
            return Served::Done;
        }
        Err(e) => {
            term::error(&format!("agent mcp: the MCP handshake failed: {e}"));
            return Served::Failed;
        }
    };
    let _ = peer.set(running.peer().clone());
    let ct = running.cancellation_token();
    let waiting = running.waiting();
    tokio::pin!(waiting);
    let quit = tokio::select! {
        q = &mut waiting => q,
        sig = stop.recv() => {
            term::diag(&format!("agent mcp: {sig}; cancelling in-flight calls and closing the session"));
            stopping.send_replace(Some(sig));
            answer_in_flight(calls).await;
            ct.cancel();
            waiting.await
        }
    };
    match quit {
        Ok(QuitReason::Closed | QuitReason::Cancelled) => Served::Done,
        Ok(other) => {
            term::error(&format!("agent mcp: the MCP connection ended: {other:?}"));
            Served::Failed
        }
        Err(e) => {
            term::error(&format!("agent mcp: the MCP service failed: {e}"));
            Served::Failed
        }
    }
}

/// After a signal told the calls in flight to stop: waits (up to 2 s) until
/// each has answered, then a moment for the answers to be written, so that
/// stopping the service does not drop them.
async fn answer_in_flight(calls: &std::sync::atomic::AtomicUsize) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(2);
    while calls.load(std::sync::atomic::Ordering::SeqCst) > 0
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
}

/// SIGTERM, SIGINT and SIGHUP: how clients stop their MCP servers.
struct Stop {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Stop {
    fn install() -> std::io::Result<Stop> {
        Ok(Stop {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
            _ = self.hup.recv() => "SIGHUP",
        }
    }
}
