//! `agent mcp-gateway` on the supervisor's side (docs/MCP.md): a third-party
//! MCP server runs in the session's sandbox, and every message between it
//! and the MCP client passes through here.
//!
//! The agent relays the client's stdio over the `McpGateway` stream and
//! decides nothing. Here:
//! - the server is started in the session's sandbox (workspace writable,
//!   the backend's read-only root, no network but the hosts `--allow-net`
//!   names, forwarded by [`egress`]) with its stdin and stdout connected
//!   ([`tollgate_sandbox::Sandbox::exec_interactive`]);
//! - each `tools/call` goes through [`pep::mcp_tool_call`]: the
//!   `mcp(NAME.TOOL)` decision and its record before anything is forwarded,
//!   an approval when asked, the answer capped and redacted, the outcome
//!   recorded; a call that is not forwarded is answered here with a result
//!   whose `isError` is true and tollgate's sentence;
//! - `tools/list` answers lose the tools the policy denies;
//! - answers to requests the client never sent, lines that are not JSON and
//!   lines over [`lines::MAX_SERVER_LINE`] are dropped with a note;
//! - when the client goes away, the session is revoked or killed, or the
//!   server exits, the server's whole process group is killed (revoke and
//!   kill destroy the sandbox), calls in flight are answered, and the
//!   stream ends with the reason.

mod egress;
mod lines;
mod requests;
mod result;
mod route;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tollgate_audit::event::{self, Event};
use tollgate_audit::{Durable, Priority};
use tollgate_proto::v1 as pb;
use tollgate_sandbox::{ExecOutcome, ExecRequest, Output, SandboxError};
use tonic::{Status, Streaming};

use crate::events::Log;
use crate::sessions::Session;
use crate::supervisor::Supervisor;
use route::Router;

/// The stream to the agent.
pub type Downstream = mpsc::Sender<Result<pb::McpGatewayServerMsg, Status>>;

/// How long a wrapped server may run: as long as its session (sessions end
/// well before this; the limit only bounds the exec's own timer).
const SERVER_LIFETIME: Duration = Duration::from_secs(30 * 24 * 3600);

/// After the server was told to stop, how long it gets to be gone.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Serves one `McpGateway` stream to its end.
pub async fn serve(
    sup: Arc<Supervisor>,
    session: Arc<Session>,
    mut inbound: Streaming<pb::McpGatewayClientMsg>,
    down: Downstream,
) {
    let (start, egress) = match vetted_start(&sup, &mut inbound).await {
        Ok(s) => s,
        Err(why) => return end(&down, pb::DenialCode::InvalidArgs, &why).await,
    };
    let Some(_work) = session.begin() else {
        let d = crate::pep::revoked(&session);
        return end(&down, pb::DenialCode::SessionRevoked, &d.reason).await;
    };
    let (sandbox, forwards) = match started(&sup, &session, &start, egress.as_ref()).await {
        Ok(s) => s,
        Err((code, why)) => return end(&down, code, &why).await,
    };
    let why = run_server(&sup, &session, &start, sandbox, &mut inbound, &down).await;
    if let Some(f) = forwards {
        f.finish().await;
    }
    let _ = sup.recorder.write(
        Log::Session(&session.audit, &session.id),
        Event::McpServerExited(event::McpServerExited {
            server: start.name.clone(),
            reason: why.reason.clone(),
            exit_code: why.exit_code.map(i64::from),
            signal: why.signal.map(i64::from),
        }),
        Durable::AsConfigured,
        Priority::Ordinary,
    );
    end(&down, why.code, &why.reason).await;
}

/// The stream's first message, which must start the server, checked; and
/// the `--allow-net` hosts, vetted.
async fn vetted_start(
    sup: &Arc<Supervisor>,
    inbound: &mut Streaming<pb::McpGatewayClientMsg>,
) -> Result<(pb::McpGatewayStart, Option<egress::Plan>), String> {
    let start = match inbound.message().await {
        Ok(Some(pb::McpGatewayClientMsg {
            msg: Some(pb::mcp_gateway_client_msg::Msg::Start(s)),
        })) => s,
        Ok(_) | Err(_) => {
            return Err("the first message of an MCP gateway stream must start the server (McpGatewayStart)".to_string());
        }
    };
    if let Some(why) = refusal(&start) {
        return Err(why);
    }
    let egress = egress::plan(sup, &start.allow_net).await?;
    Ok((start, egress))
}

/// The server's sandbox (given its egress first, if any), the start
/// recorded, and the forwards to the allowed hosts listening.
async fn started(
    sup: &Arc<Supervisor>,
    session: &Arc<Session>,
    start: &pb::McpGatewayStart,
    egress: Option<&egress::Plan>,
) -> Result<(Arc<dyn tollgate_sandbox::Sandbox>, Option<egress::Running>), (pb::DenialCode, String)>
{
    if let Some(plan) = egress {
        give_egress(session, plan)
            .await
            .map_err(|why| (pb::DenialCode::InvalidArgs, why))?;
    }
    let sandbox = crate::pep::session_sandbox(sup, session)
        .await
        .map_err(|why| {
            let why = format!("the MCP server `{}` cannot start: {why}", start.name);
            (pb::DenialCode::SandboxUnavailable, why)
        })?;
    let argv_shown = sup.redactor.redact(&start.argv.join(" "));
    sup.recorder
        .write(
            Log::Session(&session.audit, &session.id),
            Event::McpServerStarted(event::McpServerStarted {
                server: start.name.clone(),
                argv: argv_shown,
                backend: sandbox_kind(session).to_string(),
                allow_net: Some(start.allow_net.clone()),
            }),
            Durable::AsConfigured,
            Priority::Ordinary,
        )
        .map_err(|e| {
            let why = format!(
                "the audit log cannot be written ({e}), so the MCP server `{}` does not start",
                start.name
            );
            (pb::DenialCode::AuditUnavailable, why)
        })?;
    let forwards = match egress {
        Some(plan) => Some(
            egress::start(sup, session, sandbox.as_ref(), &start.name, plan)
                .map_err(|why| (pb::DenialCode::SandboxUnavailable, why))?,
        ),
        None => None,
    };
    Ok((sandbox, forwards))
}

/// Runs the server in its sandbox and moves messages until one side ends.
async fn run_server(
    sup: &Arc<Supervisor>,
    session: &Arc<Session>,
    start: &pb::McpGatewayStart,
    sandbox: Arc<dyn tollgate_sandbox::Sandbox>,
    inbound: &mut Streaming<pb::McpGatewayClientMsg>,
    down: &Downstream,
) -> Ending {
    let (stdin_tx, stdin_rx) = mpsc::channel::<bytes::Bytes>(64);
    let (out_tx, out_rx) = mpsc::channel::<Output>(64);
    let stop = session.cancel.child_token();
    let req = ExecRequest {
        argv: start.argv.clone(),
        cwd: Some(session.workspace.clone()),
        timeout: SERVER_LIFETIME,
        merge_stderr: false,
    };
    let exec = {
        let stop = stop.clone();
        tokio::spawn(async move { sandbox.exec_interactive(req, stdin_rx, out_tx, stop).await })
    };
    let router = Router::new(
        Arc::clone(sup),
        Arc::clone(session),
        start.name.clone(),
        stdin_tx,
        down.clone(),
    );
    let why = pump(&router, inbound, out_rx, session, exec, &stop).await;
    router.finish().await;
    why
}

/// Why a start is refused, if it is.
fn refusal(start: &pb::McpGatewayStart) -> Option<String> {
    if let Some(why) = tollgate_policy::check_server_name(&start.name) {
        return Some(format!("--name: {why}"));
    }
    if start.argv.is_empty() || start.argv[0].is_empty() {
        return Some("no command to run: give the MCP server's command after `--`".to_string());
    }
    None
}

/// Gives the session's sandbox the forwarded egress, before it is built:
/// a sandbox built already (without it) is never widened.
async fn give_egress(session: &Session, plan: &egress::Plan) -> Result<(), String> {
    let _no_build = session.sandbox.hold().await;
    let refused = || {
        format!(
            "--allow-net is refused: session {} has a sandbox already, built without network; start `agent mcp-gateway` in a session of its own",
            session.id
        )
    };
    if session.sandbox.get().is_some() {
        return Err(refused());
    }
    match session.egress.get() {
        Some(e) if *e == plan.sandbox => Ok(()),
        Some(_) => Err(refused()),
        None => session
            .egress
            .set(plan.sandbox.clone())
            .map_err(|_| refused()),
    }
}

fn sandbox_kind(session: &Session) -> &'static str {
    session.backend.kind().as_str()
}

/// How the gateway ended.
struct Ending {
    code: pb::DenialCode,
    reason: String,
    exit_code: Option<i32>,
    signal: Option<i32>,
}

impl Ending {
    fn new(code: pb::DenialCode, reason: String) -> Ending {
        Ending {
            code,
            reason,
            exit_code: None,
            signal: None,
        }
    }
}

/// Moves messages until one side ends; then stops the server.
async fn pump(
    router: &Router,
    inbound: &mut Streaming<pb::McpGatewayClientMsg>,
    mut out_rx: mpsc::Receiver<Output>,
    session: &Session,
    mut exec: tokio::task::JoinHandle<Result<ExecOutcome, SandboxError>>,
    stop: &CancellationToken,
) -> Ending {
    let mut stdout = lines::Lines::default();
    let mut stderr = lines::Lines::default();
    let mut exited: Option<Result<ExecOutcome, SandboxError>> = None;
    let ending = loop {
        tokio::select! {
            msg = inbound.message() => match msg {
                Ok(Some(pb::McpGatewayClientMsg { msg: Some(pb::mcp_gateway_client_msg::Msg::Message(line)) })) => {
                    router.on_client_message(&line).await;
                }
                Ok(Some(_)) => router.note("ignored a second start message from the agent").await,
                Ok(None) | Err(_) => break Ending::new(
                    pb::DenialCode::Unspecified,
                    "the MCP client closed the connection".to_string(),
                ),
            },
            chunk = out_rx.recv() => match chunk {
                Some(Output::Stdout(b)) => {
                    for piece in stdout.feed(&b) {
                        router.on_server_line(piece).await;
                    }
                }
                Some(Output::Stderr(b)) => {
                    for piece in stderr.feed(&b) {
                        if let lines::Piece::Line(l) = piece {
                            router.note(&format!("server stderr: {l}")).await;
                        }
                    }
                }
                None => {
                    // The exec returned (its output sender is dropped then):
                    // every line it read has been handled.
                    exited = Some((&mut exec).await.unwrap_or_else(|e| Err(SandboxError::Task {
                        what: "the MCP server's exec".to_string(),
                        error: e.to_string(),
                    })));
                    break server_ended(exited.as_ref(), session);
                }
            },
            _ = session.cancel.cancelled() => {
                let d = crate::pep::revoked(session);
                break Ending::new(pb::DenialCode::SessionRevoked, d.reason);
            }
        }
    };
    if exited.is_none() {
        stop.cancel();
        let _ = tokio::time::timeout(STOP_GRACE, &mut exec).await;
        exec.abort();
    }
    ending
}

/// The ending when the server's exec returned.
fn server_ended(r: Option<&Result<ExecOutcome, SandboxError>>, session: &Session) -> Ending {
    if !session.is_active() {
        let d = crate::pep::revoked(session);
        return Ending::new(pb::DenialCode::SessionRevoked, d.reason);
    }
    match r {
        Some(Ok(o)) => {
            let how = match (o.exit_code, o.signal) {
                (_, Some(sig)) => format!("was killed by signal {sig}"),
                (Some(c), None) => format!("exited with status {c}"),
                (None, None) => "ended".to_string(),
            };
            Ending {
                code: pb::DenialCode::Unspecified,
                reason: format!("the MCP server {how}"),
                exit_code: o.exit_code,
                signal: o.signal,
            }
        }
        Some(Err(e)) => Ending::new(
            pb::DenialCode::SandboxUnavailable,
            format!("the MCP server could not run: {e}"),
        ),
        None => Ending::new(
            pb::DenialCode::Unspecified,
            "the MCP server ended".to_string(),
        ),
    }
}

async fn end(down: &Downstream, code: pb::DenialCode, reason: &str) {
    let msg = pb::McpGatewayServerMsg {
        msg: Some(pb::mcp_gateway_server_msg::Msg::Ended(
            pb::McpGatewayEnded {
                reason: reason.to_string(),
                code: code as i32,
            },
        )),
    };
    let _ = down.send(Ok(msg)).await;
}
