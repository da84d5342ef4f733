//! AgentService on agent.sock. The auth layer has already checked the token
//! and the peer uid; handlers find the session in the request extensions.

use std::pin::Pin;
use std::sync::Arc;

use futures_util::{Stream, StreamExt as _};
use serde_json::{Map, Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tollgate_audit::Event;
use tollgate_audit::event::AGENT_REPORTABLE;
use tollgate_audit::{Durable, Priority};
use tollgate_proto::v1 as pb;
use tollgate_proto::v1::agent_service_server::AgentService;
use tonic::{Request, Response, Status, Streaming};

use crate::auth::Authed;
use crate::events::Log;
use crate::sessions::{Session, State, unix_ms};
use crate::supervisor::{Peer, Supervisor};
use crate::{chat, pep};
use tollgate_gate::approvals::Notice;

pub struct AgentSvc {
    pub sup: Arc<Supervisor>,
}

fn authed<T>(req: &Request<T>) -> Result<Arc<Session>, Status> {
    req.extensions()
        .get::<Authed>()
        .map(|a| Arc::clone(&a.0))
        .ok_or_else(|| Status::unauthenticated("missing bearer token"))
}

fn peer<T>(req: &Request<T>) -> Result<Peer, Status> {
    req.extensions()
        .get::<Peer>()
        .copied()
        .ok_or_else(|| Status::permission_denied("cannot identify the caller"))
}

/// The tools a session may call, as the model sees them; run_bash's
/// description says the shell its commands run in (`shell`, the session
/// backend's; `None` when not known yet).
pub fn tool_specs(
    tools: Option<&std::collections::BTreeSet<String>>,
    shell: Option<tollgate_sandbox::Shell>,
) -> Vec<pb::ToolSpec> {
    // The registry is fixed for the process: render its schemas once.
    static ALL: std::sync::OnceLock<Vec<pb::ToolSpec>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| {
        tollgate_policy::registry()
            .iter()
            .map(crate::wire::tool_spec)
            .collect()
    })
    .iter()
    .filter(|t| tools.is_none_or(|allowed| allowed.contains(&t.name)))
    .map(|t| {
        let mut t = t.clone();
        if t.name == tollgate_policy::ToolName::RunBash.as_str() {
            t.description = match shell {
                Some(tollgate_sandbox::Shell::Bash(_)) => tollgate_policy::RUN_BASH_DESCRIPTION,
                Some(tollgate_sandbox::Shell::Sh) => tollgate_policy::RUN_BASH_SH_DESCRIPTION,
                None => tollgate_policy::RUN_BASH_SHELL_UNKNOWN_DESCRIPTION,
            }
            .to_string();
        }
        t
    })
    .collect()
}

/// Events the agent may report for the audit log.
type McpGatewayStream = Pin<Box<dyn Stream<Item = Result<pb::McpGatewayServerMsg, Status>> + Send>>;
type ApprovalStream = Pin<Box<dyn Stream<Item = Result<pb::ApprovalServerMsg, Status>> + Send>>;

#[tonic::async_trait]
impl AgentService for AgentSvc {
    async fn open_session(
        &self,
        req: Request<pb::OpenSessionRequest>,
    ) -> Result<Response<pb::OpenSessionResponse>, Status> {
        let peer = peer(&req)?;
        let (session, token) = self.sup.open_session(peer, req.into_inner()).await?;
        Ok(Response::new(pb::OpenSessionResponse {
            session_id: session.id.clone(),
            token: token.reveal().to_string(),
            token_expires_unix_ms: unix_ms(session.token_expires()),
            mode: session.mode.as_str().to_string(),
            permission_mode: crate::wire::permission_mode(session.mode) as i32,
            tools: tool_specs(session.tools.as_ref(), None)
                .into_iter()
                .map(|t| t.name)
                .collect(),
            session_can_approve: self.sup.config.session.session_can_approve,
            sandbox: session.backend.kind().as_str().to_string(),
            sandbox_backend: crate::wire::sandbox_backend(session.backend.kind()) as i32,
            max_tool_calls: session.caps.max_tool_calls,
            max_cost_usd: session.caps.max_cost_usd,
        }))
    }

    async fn refresh_token(
        &self,
        req: Request<pb::RefreshTokenRequest>,
    ) -> Result<Response<pb::RefreshTokenResponse>, Status> {
        let session = authed(&req)?;
        let token = self.sup.refresh(&session)?;
        Ok(Response::new(pb::RefreshTokenResponse {
            token: token.reveal().to_string(),
            token_expires_unix_ms: unix_ms(session.token_expires()),
        }))
    }

    async fn list_tools(
        &self,
        req: Request<pb::ListToolsRequest>,
    ) -> Result<Response<pb::ListToolsResponse>, Status> {
        let session = authed(&req)?;
        Ok(Response::new(pb::ListToolsResponse {
            tools: tool_specs(session.tools.as_ref(), session.backend.shell()),
        }))
    }

    async fn call_tool(
        &self,
        req: Request<pb::CallToolRequest>,
    ) -> Result<Response<pb::CallToolResponse>, Status> {
        let session = authed(&req)?;
        let call = req.into_inner();
        if !session.is_active() {
            return Ok(Response::new(pb::CallToolResponse {
                denied: Some(pep::revoked(&session)),
                ..Default::default()
            }));
        }
        let cancel = session.cancel.child_token();
        // If the client goes away (Ctrl-C, crash), this future is dropped and
        // the guard cancels the call: the tool is killed, approvals withdrawn.
        let guard = cancel.clone().drop_guard();
        let sup = Arc::clone(&self.sup);
        let task = tokio::spawn(async move {
            let Some(_work) = session.begin() else {
                return pb::CallToolResponse {
                    denied: Some(pep::revoked(&session)),
                    ..Default::default()
                };
            };
            pep::call_tool(&sup, &session, call, cancel).await
        });
        let resp = task
            .await
            .map_err(|e| Status::internal(format!("the call failed inside the supervisor: {e}")))?;
        guard.disarm();
        Ok(Response::new(resp))
    }

    async fn chat(
        &self,
        req: Request<pb::ChatRequest>,
    ) -> Result<Response<pb::ChatResponse>, Status> {
        let session = authed(&req)?;
        let _work = session
            .begin()
            .ok_or_else(|| Status::unauthenticated(format!("session {} has ended", session.id)))?;
        let req = crate::wire::chat::chat_request(req.into_inner());
        let resp = chat::chat(&self.sup, &session, req).await?;
        Ok(Response::new(crate::wire::chat::chat_response(resp)))
    }

    type ApprovalsStream = ApprovalStream;

    async fn approvals(
        &self,
        req: Request<Streaming<pb::ApprovalClientMsg>>,
    ) -> Result<Response<Self::ApprovalsStream>, Status> {
        let session = authed(&req)?;
        let mut inbound = req.into_inner();
        let mut control = session.control.subscribe();
        // Boxed: the channel's first block (32 slots) is allocated when it is
        // made, for every idle session (docs/PERFORMANCE.md "supervisor RSS").
        let (tx, rx) = mpsc::channel::<Box<pb::ApprovalServerMsg>>(64);
        let sup = Arc::clone(&self.sup);
        let can_approve = sup.config.session.session_can_approve;
        // Approvals raised before the stream opened.
        if can_approve {
            for a in sup.approvals.pending_for(&session.id) {
                let _ = tx
                    .send(Box::new(pb::ApprovalServerMsg {
                        msg: Some(pb::approval_server_msg::Msg::Requested(
                            crate::wire::approval(a),
                        )),
                    }))
                    .await;
            }
        }
        tokio::spawn(async move {
            if !session.is_active() {
                let _ = tx.send(Box::new(ended(&session))).await;
                return;
            }
            loop {
                tokio::select! {
                    msg = control.recv() => match msg {
                        Ok(m) => {
                            let is_end = matches!(m, Notice::Ended { .. });
                            let is_request = matches!(m, Notice::Requested(_));
                            if is_request && !can_approve {
                                continue;
                            }
                            if tx.send(Box::new(crate::wire::notice(m))).await.is_err() || is_end {
                                break;
                            }
                        }
                        Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(broadcast::error::RecvError::Closed) => break,
                    },
                    incoming = inbound.message() => match incoming {
                        Ok(Some(pb::ApprovalClientMsg { msg: Some(pb::approval_client_msg::Msg::Decide(d)) })) => {
                            let answer = if !can_approve {
                                Some("this session may not decide approvals (session_can_approve = false); an operator must".to_string())
                            } else {
                                let by = format!("uid {} via session", session.uid);
                                crate::wire::answer(d).and_then(|d| sup.approvals.decide(&d, &by, Some(&session.id))).err().map(|e| e.to_string())
                            };
                            if let Some(err) = answer {
                                let msg = pb::ApprovalServerMsg { msg: Some(pb::approval_server_msg::Msg::Error(err)) };
                                if tx.send(Box::new(msg)).await.is_err() {
                                    break;
                                }
                            }
                        }
                        Ok(Some(_)) => {
                            let msg = pb::ApprovalServerMsg {
                                msg: Some(pb::approval_server_msg::Msg::Error("empty message".to_string())),
                            };
                            if tx.send(Box::new(msg)).await.is_err() {
                                break;
                            }
                        }
                        // The agent closed its side or went away: keep
                        // delivering until the session ends or the receiver drops.
                        Ok(None) | Err(_) => {
                            loop {
                                match control.recv().await {
                                    Ok(m) => {
                                        let is_end = matches!(m, Notice::Ended { .. });
                                        if tx.send(Box::new(crate::wire::notice(m))).await.is_err() || is_end {
                                            return;
                                        }
                                    }
                                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                                    Err(broadcast::error::RecvError::Closed) => return,
                                }
                            }
                        }
                    },
                    _ = session.cancel.cancelled() => {
                        let _ = tx.send(Box::new(ended(&session))).await;
                        break;
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(
            ReceiverStream::new(rx).map(|m| Ok(*m)),
        )))
    }

    type McpGatewayStream = McpGatewayStream;

    async fn mcp_gateway(
        &self,
        req: Request<Streaming<pb::McpGatewayClientMsg>>,
    ) -> Result<Response<Self::McpGatewayStream>, Status> {
        let session = authed(&req)?;
        let inbound = req.into_inner();
        let (tx, rx) = mpsc::channel(64);
        tokio::spawn(crate::mcp_gateway::serve(
            Arc::clone(&self.sup),
            session,
            inbound,
            tx,
        ));
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn report_event(
        &self,
        req: Request<pb::ReportEventRequest>,
    ) -> Result<Response<pb::ReportEventResponse>, Status> {
        let session = authed(&req)?;
        let _work = session
            .begin()
            .ok_or_else(|| Status::unauthenticated(format!("session {} has ended", session.id)))?;
        let r = req.into_inner();
        if r.fields_json.len() > 16 * 1024 {
            return Err(Status::invalid_argument("event fields exceed 16 KiB"));
        }
        let mut fields: Map<String, Value> = if r.fields_json.trim().is_empty() {
            Map::new()
        } else {
            match serde_json::from_str::<Value>(&r.fields_json) {
                Ok(Value::Object(m)) => m,
                Ok(_) => {
                    return Err(Status::invalid_argument(
                        "event fields must be a JSON object",
                    ));
                }
                Err(e) => {
                    return Err(Status::invalid_argument(format!(
                        "event fields are not JSON: {e}"
                    )));
                }
            }
        };
        fields.insert("reported_by".to_string(), json!("agent"));
        let Some(event) = Event::agent_report(&r.event, fields) else {
            return Err(Status::invalid_argument(format!(
                "event {:?} cannot be reported by an agent (allowed: {})",
                r.event,
                AGENT_REPORTABLE.join(", ")
            )));
        };
        self.sup
            .recorder
            .write(
                Log::Session(&session.audit, &session.id),
                event,
                Durable::AsConfigured,
                Priority::Ordinary,
            )
            .map_err(|e| {
                self.sup.audit_refused(
                    &session.id,
                    &format!("an event report of session {}", session.id),
                    &e,
                );
                Status::unavailable(format!("AUDIT_UNAVAILABLE: {e}"))
            })?;
        Ok(Response::new(pb::ReportEventResponse {}))
    }

    async fn close_session(
        &self,
        req: Request<pb::CloseSessionRequest>,
    ) -> Result<Response<pb::CloseSessionResponse>, Status> {
        let session = authed(&req)?;
        self.sup
            .end_session(&session, State::Closed, "closed by the agent", "agent")
            .await;
        let info = self.sup.session_info(&session);
        Ok(Response::new(pb::CloseSessionResponse {
            session: Some(info),
        }))
    }
}

fn ended(session: &Session) -> pb::ApprovalServerMsg {
    let code = match session.state() {
        State::Closed => pb::DenialCode::Unspecified,
        State::Active | State::Revoked | State::Killed | State::Expired => {
            pb::DenialCode::SessionRevoked
        }
    };
    pb::ApprovalServerMsg {
        msg: Some(pb::approval_server_msg::Msg::Ended(pb::SessionEnded {
            code: code as i32,
            reason: session.end_reason(),
        })),
    }
}
