//! `agent mcp-gateway --name NAME [--allow-net HOST…] -- COMMAND ARGS…`
//! (docs/MCP.md): a third-party stdio MCP server, run by the supervisor in this
//! session's sandbox, with every message between it and the MCP client
//! passing through the supervisor, which decides each `tools/call` by
//! `mcp(NAME.TOOL)` rules, removes denied tools from `tools/list`, caps and
//! redacts results and records every call.
//!
//! This process only relays: each line on stdin goes to the supervisor's
//! `McpGateway` stream as one message, each message back is one line on
//! stdout, notes go to stderr. It never talks to the server itself, so a
//! compromised agent can do no more than the client could. When the client
//! closes stdin (or a signal comes), the stream ends: the supervisor kills
//! the server's process group and the session is closed.

mod elicit;
mod lines;
mod settings;

pub use settings::{McpGatewayArgs, McpGatewaySettings, validate};

use std::sync::Arc;

use elicit::Elicit;
use lines::{CappedLines, Line};

use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tollgate_proto::{
    DenialCode, McpGatewayClientMsg, McpGatewayStart, OpenSessionRequest, mcp_gateway_client_msg,
    mcp_gateway_server_msg,
};

use crate::client::rpc_error;
use crate::error::AgentError;
use crate::session;
use crate::term;
use crate::text::escape_display;

/// A client line longer than this is refused here (the supervisor takes
/// messages up to 4 MiB).
pub const MAX_CLIENT_LINE: usize = 4 * 1024 * 1024 - 4096;

/// Runs `agent mcp-gateway`. Returns the exit code: 0 when the client closed
/// the connection, 3 when the session was revoked or refused, 1 when the
/// server ended on its own or something failed.
pub async fn run(s: McpGatewaySettings) -> i32 {
    match run_inner(s).await {
        Ok(code) => code,
        Err(e) => {
            term::error(&e);
            e.exit_code()
        }
    }
}

async fn run_inner(s: McpGatewaySettings) -> Result<i32, AgentError> {
    let workspace = match &s.workspace {
        Some(w) => session::canonical_dir(w)?,
        None => session::current_workspace()?,
    };
    let req = OpenSessionRequest {
        workspace: workspace.to_string_lossy().into_owned(),
        mode: s.mode.clone().unwrap_or_default(),
        permission_mode: crate::client::permission_mode(s.mode.as_deref().unwrap_or_default()),
        tools: Vec::new(),
        caps: None,
        system_prompt: String::new(),
        model: String::new(),
        client: format!("agent mcp-gateway {}", s.name),
    };
    let (mut session, control, _tools) = session::open(&s.socket, req).await?;
    term::diag(&format!(
        "agent mcp-gateway: {}: session {} in '{}' mode (workspace {}); the server runs in the supervisor's {} sandbox",
        s.name,
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
        escape_display(&session.sandbox, false),
    ));
    let (up, up_rx) = mpsc::channel::<McpGatewayClientMsg>(64);
    let start = McpGatewayClientMsg {
        msg: Some(mcp_gateway_client_msg::Msg::Start(McpGatewayStart {
            name: s.name.clone(),
            argv: s.command.clone(),
            allow_net: s.allow_net.clone(),
        })),
    };
    let _ = up.send(start).await;
    let mut client = session.client.clone();
    let down = match client.mcp_gateway(ReceiverStream::new(up_rx)).await {
        Ok(r) => r.into_inner(),
        Err(st) => {
            session.close().await;
            return Err(rpc_error("start the MCP gateway", &st));
        }
    };
    let (out, out_rx) = mpsc::channel::<Vec<u8>>(256);
    let writer = tokio::spawn(write_stdout(out_rx));
    let shared = Arc::new(Elicit::default());
    // Without session approvals the stream is only held open (the
    // supervisor sends it nothing to answer).
    let (pump, _held) = if session.can_approve {
        let p = tokio::spawn(elicit::pump(control, Arc::clone(&shared), out.clone()));
        (Some(p), None)
    } else {
        (None, Some(control))
    };
    let code = relay(&s.name, up, down, shared, out).await;
    if let Some(p) = pump {
        p.abort();
    }
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), writer).await;
    if code == 3 {
        session.abandon();
    } else {
        session.close().await;
    }
    Ok(code)
}

/// Moves lines both ways until the stream ends; returns the exit code.
async fn relay(
    name: &str,
    up: mpsc::Sender<McpGatewayClientMsg>,
    mut down: tonic::Streaming<tollgate_proto::McpGatewayServerMsg>,
    shared: Arc<Elicit>,
    out: mpsc::Sender<Vec<u8>>,
) -> i32 {
    let reader = tokio::spawn(read_stdin(up, shared, out.clone()));
    let (mut term_sig, mut int_sig, mut hup_sig) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) {
        (Ok(a), Ok(b), Ok(c)) => (a, b, c),
        _ => {
            term::error(&"agent mcp-gateway: cannot watch for signals");
            return 1;
        }
    };
    let mut stopping = false;
    let code = loop {
        let msg = tokio::select! {
            m = down.message() => m,
            _ = term_sig.recv(), if !stopping => { stopping = true; reader.abort(); continue; }
            _ = int_sig.recv(), if !stopping => { stopping = true; reader.abort(); continue; }
            _ = hup_sig.recv(), if !stopping => { stopping = true; reader.abort(); continue; }
        };
        match msg {
            Ok(Some(m)) => match m.msg {
                Some(mcp_gateway_server_msg::Msg::Message(line)) => {
                    let mut b = line.into_bytes();
                    b.push(b'\n');
                    if out.send(b).await.is_err() {
                        reader.abort();
                    }
                }
                Some(mcp_gateway_server_msg::Msg::Note(n)) => {
                    term::diag(&format!(
                        "agent mcp-gateway: {name}: {}",
                        escape_display(&n, false)
                    ));
                }
                Some(mcp_gateway_server_msg::Msg::Ended(e)) => {
                    term::diag(&format!(
                        "agent mcp-gateway: {name}: {}",
                        escape_display(&e.reason, false)
                    ));
                    break exit_code_of(e.code, stopping || reader.is_finished());
                }
                None => {}
            },
            Ok(None) => {
                term::error(&format!(
                    "agent mcp-gateway: {name}: the supervisor ended the stream without a reason"
                ));
                break 1;
            }
            Err(st) => {
                term::error(&format!(
                    "agent mcp-gateway: {name}: {}",
                    crate::client::status_text(&st)
                ));
                break if st.code() == tonic::Code::Unauthenticated {
                    3
                } else {
                    1
                };
            }
        }
    };
    reader.abort();
    code
}

fn exit_code_of(code: i32, client_done: bool) -> i32 {
    match DenialCode::try_from(code) {
        Ok(DenialCode::SessionRevoked) => 3,
        Ok(DenialCode::Unspecified) if client_done => 0,
        _ => 1,
    }
}

/// Writes stdout, one whole line at a time, from every source.
async fn write_stdout(mut rx: mpsc::Receiver<Vec<u8>>) {
    let mut stdout = tokio::io::stdout();
    while let Some(b) = rx.recv().await {
        if stdout.write_all(&b).await.is_err() || stdout.flush().await.is_err() {
            return;
        }
    }
}

/// Sends each stdin line up, except the client's answers to this process's
/// own elicitations; refuses lines the supervisor could not take (the
/// client gets the error from here, since the supervisor never sees them).
async fn read_stdin(
    up: mpsc::Sender<McpGatewayClientMsg>,
    shared: Arc<Elicit>,
    out: mpsc::Sender<Vec<u8>>,
) {
    let mut stdin = tokio_util::codec::FramedRead::with_capacity(
        tokio::io::stdin(),
        CappedLines::new(MAX_CLIENT_LINE),
        64 * 1024,
    );
    while let Some(line) = stdin.next().await {
        let Ok(line) = line else { break };
        match line {
            Line::TooLong(len) => {
                term::diag(&format!(
                    "agent mcp-gateway: dropped a client message of {len} bytes (the limit is {MAX_CLIENT_LINE})"
                ));
                let err = serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {
                    "code": -32600, "message": format!("request too large: {len} bytes (the limit is {MAX_CLIENT_LINE})")}});
                let _ = out.send(elicit::line(&err)).await;
            }
            Line::Text(buf) => {
                let text = String::from_utf8_lossy(&buf);
                let text = text.trim_end_matches(['\n', '\r']);
                if text.trim().is_empty() {
                    continue;
                }
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(text) {
                    shared.saw_client_message(&v);
                    if shared.take_answer(&v) {
                        continue;
                    }
                }
                let msg = McpGatewayClientMsg {
                    msg: Some(mcp_gateway_client_msg::Msg::Message(text.to_string())),
                };
                if up.send(msg).await.is_err() {
                    break;
                }
            }
        }
    }
}
