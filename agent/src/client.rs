//! The agent's side of the gRPC contract: a channel over the supervisor's Unix
//! socket, the bearer token attached to every call (and rotated before it expires),
//! and the session's control stream (approvals, resolutions, revocation).

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hyper_util::rt::TokioIo;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tollgate_proto::agent_service_client::AgentServiceClient;
use tollgate_proto::{
    Approval, ApprovalClientMsg, ApprovalDecision, ApprovalResolved, CloseSessionRequest,
    DenialCode, ListToolsRequest, OpenSessionRequest, RefreshTokenRequest, ReportEventRequest,
    SessionInfo, ToolSpec, approval_client_msg, approval_server_msg,
};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::{Code, Status};

use crate::error::AgentError;

/// Largest message the agent accepts from the supervisor.
const MAX_DECODE_BYTES: usize = 32 * 1024 * 1024;

/// The session token, shared by every clone of the client and swapped in place
/// when it is rotated.
#[derive(Clone, Default)]
pub struct Auth {
    header: Arc<RwLock<Option<MetadataValue<Ascii>>>>,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the token.
        f.write_str("Auth(<redacted>)")
    }
}

impl Auth {
    fn set(&self, token: &str) -> Result<(), AgentError> {
        let value: MetadataValue<Ascii> = format!("Bearer {token}").parse().map_err(|_| {
            AgentError::Protocol("the supervisor sent a token that is not ASCII".into())
        })?;
        let mut guard = self.header.write().unwrap_or_else(|e| e.into_inner());
        *guard = Some(value);
        Ok(())
    }
}

impl Interceptor for Auth {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        let guard = self.header.read().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = guard.as_ref() {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

pub type Client = AgentServiceClient<InterceptedService<Channel, Auth>>;

fn io_cause(err: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return Some(io.to_string());
        }
        cur = e.source();
    }
    None
}

/// Connects to the supervisor's agent socket.
pub async fn connect(socket: &Path) -> Result<Channel, AgentError> {
    let path: PathBuf = socket.to_path_buf();
    let endpoint = Endpoint::from_static("http://agent.sock");
    let connector_path = path.clone();
    endpoint
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let p = connector_path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(p).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
        .map_err(|e| AgentError::Connect {
            path,
            cause: io_cause(&e).unwrap_or_else(|| e.to_string()),
        })
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// An open session.
pub struct Session {
    pub client: Client,
    pub id: String,
    pub mode: String,
    pub tools: Vec<String>,
    pub can_approve: bool,
    pub sandbox: String,
    pub max_tool_calls: u32,
    pub max_cost_usd: f64,
    auth: Auth,
    refresher: Option<JoinHandle<()>>,
    closed: bool,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("mode", &self.mode)
            .field("auth", &self.auth)
            .finish_non_exhaustive()
    }
}

/// Maps a status from OpenSession to the error the user sees.
/// The wire enum for a mode word the flags accepted (the request carries
/// both it and the word, docs/INTERFACES.md "Additions: wire enums");
/// unspecified for none.
pub fn permission_mode(word: &str) -> i32 {
    tollgate_proto::PermissionMode::from_text(word)
        .unwrap_or(tollgate_proto::PermissionMode::Unspecified) as i32
}

pub fn open_error(status: &Status) -> AgentError {
    match status.code() {
        Code::PermissionDenied => AgentError::Refused(status.message().to_string()),
        _ => AgentError::Rpc {
            what: "open a session",
            message: match tollgate_proto::refusal::of(status) {
                // A typed refusal (the audit log cannot be written): its code
                // and reason, as the supervisor gave them.
                Some(d) => format!("{}: {}", d.code().as_str_name(), d.reason),
                None => status_text(status),
            },
        },
    }
}

/// A status's message; for a connection the supervisor refused (an HTTP/2
/// GOAWAY, e.g. over `max_connections_per_uid`), the reason it sent, which
/// tonic keeps only in the error's source chain.
pub fn status_text(status: &Status) -> String {
    let mut deepest: Option<String> = None;
    let mut cur = std::error::Error::source(status);
    while let Some(e) = cur {
        deepest = Some(e.to_string());
        cur = e.source();
    }
    match deepest.as_deref().and_then(goaway_reason) {
        Some(reason) => format!("the supervisor refused the connection: {reason}"),
        None => status.message().to_string(),
    }
}

/// The debug text of a GOAWAY as h2 displays it:
/// `connection error received: <code> (b"<text>")`.
fn goaway_reason(text: &str) -> Option<String> {
    let rest = text.split_once("connection error received: ")?.1;
    let start = rest.find("(b\"")? + 3;
    let end = rest.rfind("\")")?;
    (end > start).then(|| rest[start..end].replace("\\\"", "\""))
}

impl Session {
    /// Opens a session and starts rotating its token before it expires.
    pub async fn open(channel: Channel, req: OpenSessionRequest) -> Result<Session, AgentError> {
        let auth = Auth::default();
        let mut client = AgentServiceClient::with_interceptor(channel, auth.clone())
            .max_decoding_message_size(MAX_DECODE_BYTES);
        let resp = client
            .open_session(req.clone())
            .await
            .map_err(|s| open_error(&s))?
            .into_inner();
        auth.set(&resp.token)?;
        let mode = match resp.permission_mode() {
            tollgate_proto::PermissionMode::Unspecified => req.mode,
            m => m.text().to_string(),
        };
        let sandbox = crate::wire::sandbox_of(&resp);
        let mut session = Session {
            client,
            id: resp.session_id,
            mode,
            tools: resp.tools,
            can_approve: resp.session_can_approve,
            sandbox,
            max_tool_calls: resp.max_tool_calls,
            max_cost_usd: resp.max_cost_usd,
            auth,
            refresher: None,
            closed: false,
        };
        session.refresher = Some(spawn_refresher(
            session.client.clone(),
            session.auth.clone(),
            resp.token_expires_unix_ms,
        ));
        Ok(session)
    }

    /// The tools the model may use, already filtered by `--tools`.
    pub async fn list_tools(&mut self) -> Result<Vec<ToolSpec>, AgentError> {
        Ok(self
            .client
            .list_tools(ListToolsRequest {})
            .await
            .map_err(|s| rpc_error("list the session's tools", &s))?
            .into_inner()
            .tools)
    }

    /// Reports an agent-side event to the audit log. Best effort: a failure is
    /// printed, never fatal (the supervisor audits what it sees itself).
    pub async fn report(&self, event: &str, fields: serde_json::Value) {
        let mut c = self.client.clone();
        let req = ReportEventRequest {
            event: event.to_string(),
            fields_json: fields.to_string(),
        };
        if let Err(s) = c.report_event(req).await
            && s.code() != Code::Unimplemented
        {
            eprintln!(
                "agent: could not report {event} to the supervisor: {}",
                s.message()
            );
        }
    }

    /// Closes the session (once); returns the supervisor's final counters.
    pub async fn close(&mut self) -> Option<SessionInfo> {
        if self.closed {
            return None;
        }
        self.closed = true;
        if let Some(h) = self.refresher.take() {
            h.abort();
        }
        let mut c = self.client.clone();
        match tokio::time::timeout(
            Duration::from_secs(5),
            c.close_session(CloseSessionRequest {}),
        )
        .await
        {
            Ok(Ok(resp)) => resp.into_inner().session,
            _ => None,
        }
    }

    /// Marks the session as gone without calling the supervisor (it was revoked).
    pub fn abandon(&mut self) {
        self.closed = true;
        if let Some(h) = self.refresher.take() {
            h.abort();
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(h) = self.refresher.take() {
            h.abort();
        }
    }
}

/// Rotates the token at 2/3 of its remaining lifetime, swapping it atomically.
fn spawn_refresher(mut client: Client, auth: Auth, mut expires_ms: i64) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            if expires_ms <= 0 {
                return;
            }
            let remaining = (expires_ms - now_ms()).max(0) as u64;
            let wait = Duration::from_millis((remaining * 2 / 3).max(500));
            tokio::time::sleep(wait).await;
            match client.refresh_token(RefreshTokenRequest {}).await {
                Ok(resp) => {
                    let resp = resp.into_inner();
                    if auth.set(&resp.token).is_err() {
                        return;
                    }
                    expires_ms = resp.token_expires_unix_ms;
                }
                Err(s) => {
                    if s.code() != Code::Unimplemented {
                        eprintln!(
                            "agent: could not refresh the session token: {}",
                            s.message()
                        );
                    }
                    return;
                }
            }
        }
    })
}

/// A failed RPC, named.
pub fn rpc_error(what: &'static str, status: &Status) -> AgentError {
    match status.code() {
        Code::Unauthenticated => AgentError::Revoked(format!(
            "the supervisor rejected the session token: {}",
            status.message()
        )),
        _ => AgentError::Rpc {
            what,
            message: status_text(status),
        },
    }
}

/// What the session's control stream delivers.
#[derive(Debug, Clone)]
pub enum ServerEvent {
    Requested(Approval),
    Resolved(ApprovalResolved),
    Ended {
        code: DenialCode,
        reason: String,
    },
    Error(String),
    /// The stream ended without a SessionEnded (the supervisor went away).
    Closed(String),
}

/// The open control stream.
pub struct ControlStream {
    pub rx: mpsc::Receiver<ServerEvent>,
    tx: mpsc::Sender<ApprovalClientMsg>,
    /// False when the supervisor does not offer the stream at all.
    pub available: bool,
    reader: Option<JoinHandle<()>>,
}

impl Drop for ControlStream {
    fn drop(&mut self) {
        if let Some(h) = self.reader.take() {
            h.abort();
        }
    }
}

impl ControlStream {
    /// Opens the Approvals stream right after OpenSession.
    pub async fn open(client: &Client) -> Result<ControlStream, AgentError> {
        let (tx, out_rx) = mpsc::channel::<ApprovalClientMsg>(16);
        let (ev_tx, rx) = mpsc::channel::<ServerEvent>(64);
        let mut c = client.clone();
        let resp = match c.approvals(ReceiverStream::new(out_rx)).await {
            Ok(r) => r,
            Err(s) if s.code() == Code::Unimplemented => {
                return Ok(ControlStream {
                    rx,
                    tx,
                    available: false,
                    reader: None,
                });
            }
            Err(s) => return Err(rpc_error("open the approvals stream", &s)),
        };
        let mut stream = resp.into_inner();
        let reader = tokio::spawn(async move {
            loop {
                let ev = match stream.message().await {
                    Ok(Some(msg)) => match msg.msg {
                        Some(approval_server_msg::Msg::Requested(a)) => ServerEvent::Requested(a),
                        Some(approval_server_msg::Msg::Resolved(r)) => ServerEvent::Resolved(r),
                        Some(approval_server_msg::Msg::Ended(e)) => ServerEvent::Ended {
                            code: DenialCode::try_from(e.code)
                                .unwrap_or(DenialCode::SessionRevoked),
                            reason: e.reason,
                        },
                        Some(approval_server_msg::Msg::Error(e)) => ServerEvent::Error(e),
                        None => continue,
                    },
                    Ok(None) => {
                        ServerEvent::Closed("the supervisor closed the session's stream".into())
                    }
                    Err(s) => match s.code() {
                        Code::Unauthenticated | Code::PermissionDenied | Code::NotFound => {
                            ServerEvent::Ended {
                                code: DenialCode::SessionRevoked,
                                reason: s.message().to_string(),
                            }
                        }
                        _ => ServerEvent::Closed(format!(
                            "lost the connection to the supervisor: {}",
                            s.message()
                        )),
                    },
                };
                let last = matches!(ev, ServerEvent::Ended { .. } | ServerEvent::Closed(_));
                if ev_tx.send(ev).await.is_err() || last {
                    return;
                }
            }
        });
        Ok(ControlStream {
            rx,
            tx,
            available: true,
            reader: Some(reader),
        })
    }

    /// Sends a decision on an approval offered to this session.
    pub async fn decide(&self, decision: ApprovalDecision) {
        let msg = ApprovalClientMsg {
            msg: Some(approval_client_msg::Msg::Decide(decision)),
        };
        // A closed stream surfaces as a Closed event on the reader side.
        let _ = self.tx.send(msg).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_goaway_reason_is_found_in_h2s_words() {
        let h2 = r#"connection error received: detected excessive load generating behavior (b"uid 7 already holds 64 connections")"#;
        assert_eq!(
            goaway_reason(h2).as_deref(),
            Some("uid 7 already holds 64 connections")
        );
        assert_eq!(goaway_reason("connection reset by peer"), None);
        assert_eq!(
            goaway_reason("connection error received: no debug data"),
            None
        );
    }
}
