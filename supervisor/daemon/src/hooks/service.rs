//! ClientHooks on agent.sock: one hook event in, one answer out; and the
//! routed commands' Exec stream.

use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;
use tollgate_audit::event as audit;
use tollgate_audit::{Durable, Priority};
use tollgate_policy::Decision;
use tollgate_policy::clients::{self, Client, MapCtx};
use tollgate_proto::v1 as pb;
use tollgate_proto::v1::client_hooks_server::ClientHooks;
use tonic::{Request, Response, Status};

use super::bindings::{Binding, CallNote};
use super::event::{self, Event, EventName, ToolEvent};
use super::propose::{Proposed, propose};
use super::routes::Route;
use crate::events::Log;
use crate::pep::{self, Gate};
use crate::sessions::{Session, State};
use crate::supervisor::{Peer, Supervisor};
use crate::wire;

/// How much of a routed command its rewritten command shows after `#`
/// (the rest is marked as cut).
const ROUTE_COMMENT_CHARS: usize = 500;

pub struct HookSvc {
    pub sup: Arc<Supervisor>,
}

fn peer<T>(req: &Request<T>) -> Result<Peer, Status> {
    req.extensions()
        .get::<Peer>()
        .copied()
        .ok_or_else(|| Status::permission_denied("cannot identify the caller (no SO_PEERCRED)"))
}

type ExecStream = Pin<Box<dyn Stream<Item = Result<pb::SandboxExecOutput, Status>> + Send>>;

#[tonic::async_trait]
impl ClientHooks for HookSvc {
    async fn event(
        &self,
        req: Request<pb::HookEventRequest>,
    ) -> Result<Response<pb::HookEventResponse>, Status> {
        let peer = peer(&req)?;
        let r = req.into_inner();
        let client = crate::wire::hook_client(&r).ok_or_else(|| {
            Status::invalid_argument(format!(
                "unknown client {:?} (expected claude-code or codex)",
                r.client.chars().take(32).collect::<String>()
            ))
        })?;
        let ev = event::parse(&r.event_json).map_err(Status::invalid_argument)?;
        let wait = Duration::from_millis(r.wait_ms.into());
        let sup = Arc::clone(&self.sup);
        // If the hook goes away (the client's own timeout killed it), this
        // future is dropped and the guard cancels the call: an approval it
        // waits on is withdrawn.
        let cancel = tokio_util::sync::CancellationToken::new();
        let guard = cancel.clone().drop_guard();
        let task = tokio::spawn(async move { handle(&sup, peer, client, ev, wait, cancel).await });
        let answer = task.await.map_err(|e| {
            Status::internal(format!("the hook event failed inside the supervisor: {e}"))
        })?;
        guard.disarm();
        answer.map(Response::new)
    }

    type ExecStream = ExecStream;

    async fn exec(
        &self,
        req: Request<pb::HookExecRequest>,
    ) -> Result<Response<Self::ExecStream>, Status> {
        let peer = peer(&req)?;
        let id = req.into_inner().id;
        let route = self.sup.hooks.routes.take(&id, peer.uid)?;
        let session = Arc::clone(&route.session);
        if !session.is_active() {
            return Err(Status::failed_precondition(pep::revoked(&session).reason));
        }
        let (tx, rx) = mpsc::channel::<crate::wire::Routed>(64);
        let sup = Arc::clone(&self.sup);
        let cancel = session.cancel.child_token();
        tokio::spawn(async move {
            let Some(_work) = session.begin() else {
                let _ = tx
                    .send(crate::wire::Routed(pb::SandboxExecOutput {
                        out: Some(pb::sandbox_exec_output::Out::Stderr(
                            format!("tollgate: {}\n", pep::revoked(&session).reason).into_bytes(),
                        )),
                    }))
                    .await;
                return;
            };
            // The rewritten command went away (the client killed it): the
            // sandboxed command dies with it.
            let watcher = {
                let (tx, cancel) = (tx.clone(), cancel.clone());
                tokio::spawn(async move {
                    tx.closed().await;
                    cancel.cancel();
                })
            };
            pep::run_routed(&sup, &route, &tx, cancel).await;
            watcher.abort();
        });
        Ok(Response::new(Box::pin(
            ReceiverStream::new(rx).map(|r| Ok(r.0)),
        )))
    }
}

/// One event, after it was read.
async fn handle(
    sup: &Arc<Supervisor>,
    peer: Peer,
    client: Client,
    ev: Event,
    wait: Duration,
    cancel: tokio_util::sync::CancellationToken,
) -> Result<pb::HookEventResponse, Status> {
    let hooks = &sup.hooks;
    if ev.name == EventName::SessionEnd {
        // Ending a session never opens one.
        if let Some(b) = hooks.bindings.find(client, &ev.session_id, peer.uid)? {
            b.touch();
            let why = format!(
                "the client ended its session ({})",
                ev.detail.as_deref().unwrap_or("no reason given")
            );
            sup.end_session(&b.session, State::Closed, &why, client.as_str())
                .await;
        }
        return Ok(pb::HookEventResponse::default());
    }
    let binding = hooks
        .bindings
        .find_or_open(client, &ev.session_id, peer.uid, || {
            open(sup, peer, client, &ev)
        })
        .await?;
    binding.touch();
    let session = &binding.session;
    let pre = ev.name == EventName::PreToolUse;
    if !session.is_active() {
        return Ok(stop(session, pre));
    }
    within_workspace(&ev.cwd, session)?;
    let Some(_work) = session.begin() else {
        return Ok(stop(session, pre));
    };
    let mut answer = match (ev.name, &ev.tool) {
        (EventName::PreToolUse, Some(tool)) => {
            // Cancelled when the session ends, and when the hook goes away.
            let call = session.cancel.child_token();
            let link = {
                let (outer, call) = (cancel.clone(), call.clone());
                tokio::spawn(async move {
                    outer.cancelled().await;
                    call.cancel();
                })
            };
            let a = pre_tool_use(sup, &binding, &ev, tool, wait, &call).await;
            link.abort();
            a
        }
        (EventName::PostToolUse | EventName::PostToolUseFailure, Some(tool)) => {
            post_tool_use(
                sup,
                &binding,
                tool,
                ev.name == EventName::PostToolUseFailure,
            );
            pb::HookEventResponse::default()
        }
        (EventName::Stop, _) => {
            let _ = sup.recorder.write(
                Log::Session(&session.audit, &session.id),
                audit::Event::ClientTurnEnd(audit::ClientTurnEnd {
                    client: client.as_str().to_string(),
                }),
                Durable::Later,
                Priority::Ordinary,
            );
            pb::HookEventResponse::default()
        }
        (EventName::SessionStart, _) => pb::HookEventResponse::default(),
        (EventName::PreToolUse | EventName::PostToolUse | EventName::PostToolUseFailure, None)
        | (EventName::SessionEnd, _) => {
            return Err(Status::invalid_argument(format!(
                "the {} event carries no tool call",
                ev.name.as_str()
            )));
        }
    };
    answer.session_id = session.id.clone();
    Ok(answer)
}

/// Opens the tollgate session for a client session: the event's `cwd` is
/// the workspace, judged exactly as OpenSession judges one, and it must be a
/// real directory (not a symlink to one).
async fn open(
    sup: &Arc<Supervisor>,
    peer: Peer,
    client: Client,
    ev: &Event,
) -> Result<Arc<Binding>, Status> {
    let shown = tollgate_policy::escape_for_display(&ev.cwd.to_string_lossy());
    match std::fs::symlink_metadata(&ev.cwd) {
        Err(e) => {
            return Err(Status::invalid_argument(format!(
                "the client's cwd {shown} cannot be a workspace: {e}"
            )));
        }
        Ok(m) if m.file_type().is_symlink() => {
            return Err(Status::invalid_argument(format!(
                "the client's cwd {shown} is a symlink; tollgate opens a session only in a real directory, hint: start the client in the directory the link points to"
            )));
        }
        Ok(m) if !m.is_dir() => {
            return Err(Status::invalid_argument(format!(
                "the client's cwd {shown} is not a directory"
            )));
        }
        Ok(_) => {}
    }
    let mode = sup.config.clients.mode(&sup.config.session);
    let req = pb::OpenSessionRequest {
        workspace: ev.cwd.to_string_lossy().into_owned(),
        mode: mode.as_str().to_string(),
        permission_mode: crate::wire::permission_mode(mode) as i32,
        tools: Vec::new(),
        caps: None,
        system_prompt: String::new(),
        model: ev.model.clone().unwrap_or_default(),
        client: client.as_str().to_string(),
    };
    let (session, _token) = sup.open_session_for(peer, req, &ev.session_id).await?;
    if sup.config.clients.route_shell {
        pep::warm_sandbox(sup, &session);
    }
    Ok(Arc::new(Binding::new(client, peer.uid, session)))
}

/// Every event of a session comes from inside its workspace.
fn within_workspace(cwd: &Path, session: &Session) -> Result<(), Status> {
    if cwd == session.workspace {
        return Ok(());
    }
    let real = std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf());
    if crate::workspace::is_within(&real, &session.workspace) {
        return Ok(());
    }
    Err(Status::failed_precondition(format!(
        "the client's cwd {} is outside its session's workspace {}; start a new client session there",
        tollgate_policy::escape_for_display(&cwd.to_string_lossy()),
        session.workspace.display()
    )))
}

fn deny(reason: String) -> pb::HookEventResponse {
    pb::HookEventResponse {
        reason,
        ..wire::hook_decided(pb::HookDecision::Deny)
    }
}

/// The session has ended (revoked, killed): deny the call and tell the
/// client to stop, with the operator's reason.
fn stop(session: &Session, pre_tool_use: bool) -> pb::HookEventResponse {
    let why = session.end_reason();
    pb::HookEventResponse {
        reason: pep::revoked(session).reason,
        stop: true,
        stop_reason: if why.is_empty() {
            format!(
                "tollgate session {} was {}",
                session.id,
                session.state().as_str()
            )
        } else {
            why
        },
        session_id: session.id.clone(),
        ..wire::hook_decided(if pre_tool_use {
            pb::HookDecision::Deny
        } else {
            pb::HookDecision::Unspecified
        })
    }
}

async fn pre_tool_use(
    sup: &Arc<Supervisor>,
    binding: &Binding,
    ev: &Event,
    tool: &ToolEvent,
    wait: Duration,
    cancel: &tokio_util::sync::CancellationToken,
) -> pb::HookEventResponse {
    let session = &binding.session;
    let gate = hook_gate(sup, binding, tool, wait);
    let ctx = MapCtx {
        cwd: &ev.cwd,
        mcp_server: tool.mcp_server.as_deref(),
    };
    let mapped = clients::map(&tool.name, &tool.input, &ctx);
    let p = match propose(sup, session, tool, mapped).await {
        Proposed::Harmless => return harmless(sup, binding, tool),
        Proposed::Call(p) => p,
    };
    let proposed = tollgate_gate::Proposed {
        call_id: &tool.use_id,
        tool: &p.tool,
        raw_args: &p.raw,
        mcp: None,
    };
    let cx = pep::ctx(sup, session);
    let cleared = match tollgate_gate::authorize(&cx, proposed, p.calls, &gate, cancel).await {
        Ok(c) => c,
        Err(d) if d.code == tollgate_policy::Code::SessionRevoked => return stop(session, true),
        Err(d) => return deny(d.reason),
    };
    let d = &cleared.decision;
    let routed = match p.shell.filter(|_| sup.config.clients.route_shell) {
        None => None,
        Some(sh) => {
            let shown = tollgate_policy::cut_for_display(&sh.command, ROUTE_COMMENT_CHARS);
            match keep_route(sup, binding, tool, sh, d) {
                Ok(id) => Some((id, shown)),
                Err(reason) => return deny(reason),
            }
        }
    };
    let decision = if cleared.delegated.is_some() {
        pb::HookDecision::Ask
    } else {
        pb::HookDecision::Allow
    };
    let mut reason = match (&cleared.delegated, &routed) {
        (Some(_), _) => format!("tollgate asks: {}", d.consequence),
        (None, Some(_)) => format!(
            "{} It runs in tollgate's sandbox (workspace as working directory, no network).",
            d.reason
        ),
        (None, None) => d.reason.clone(),
    };
    let (updated_input_json, context) = match &p.narrowed {
        Some((input, note)) => {
            reason = format!("{reason} {note}");
            (input.to_string(), note.clone())
        }
        None => (String::new(), String::new()),
    };
    note_call(
        binding,
        tool,
        &p.tool,
        Some(d),
        cleared.delegated.clone(),
        routed.is_some(),
    );
    let (route_id, route_comment) = routed.unwrap_or_default();
    pb::HookEventResponse {
        reason,
        route_id,
        updated_input_json,
        context,
        route_comment,
        ..wire::hook_decided(decision)
    }
}

/// Remembers how a call was decided, for its PostToolUse.
fn note_call(
    binding: &Binding,
    tool: &ToolEvent,
    tool_name: &str,
    d: Option<&Decision>,
    delegated: Option<String>,
    routed: bool,
) {
    binding.note(
        &tool.use_id,
        CallNote {
            tool: tool_name.to_string(),
            decided_at: std::time::Instant::now(),
            secret: d.is_some_and(|d| d.secret),
            delegated,
            routed,
        },
    );
}

/// How a client's call is gated: durable at once, the approval wait capped
/// by the config, asks handed back to Claude Code's own prompt when allowed.
fn hook_gate(sup: &Supervisor, binding: &Binding, tool: &ToolEvent, wait: Duration) -> Gate {
    Gate {
        durable_now: true,
        approval_wait: wait.min(Duration::from_secs(sup.config.session.approval_timeout_s)),
        // Codex has no answer that asks its user (it fails open on `ask`):
        // its asks go to operators.
        delegate_ask: sup.config.session.session_can_approve
            && binding.client == Client::ClaudeCode,
        client_tool: Some(tool.name.clone()),
    }
}

/// The client's own bookkeeping: recorded, then allowed.
fn harmless(sup: &Arc<Supervisor>, binding: &Binding, tool: &ToolEvent) -> pb::HookEventResponse {
    let cx = pep::ctx(sup, &binding.session);
    match tollgate_gate::record_harmless(&cx, &tool.use_id, &tool.name) {
        Ok(reason) => {
            note_call(binding, tool, &tool.name, None, None, false);
            pb::HookEventResponse {
                reason,
                ..wire::hook_decided(pb::HookDecision::Allow)
            }
        }
        Err(d) => deny(d.reason),
    }
}

/// Keeps an allowed shell command for `agent hook` to run in the sandbox;
/// returns its route id, or why it cannot be kept.
fn keep_route(
    sup: &Supervisor,
    binding: &Binding,
    tool: &ToolEvent,
    sh: clients::ShellCall,
    d: &Decision,
) -> Result<String, String> {
    let route = Route::new(
        Arc::clone(&binding.session),
        binding.uid,
        (sh.command, sh.timeout_s, sh.background),
        tool.use_id.clone(),
        d.target.clone(),
    );
    sup.hooks
        .routes
        .insert(route)
        .map_err(|e| format!("tollgate could not keep the command to run it ({e}); nothing ran."))
}

/// PostToolUse (and PostToolUseFailure): what the client says the call did,
/// recorded beside the decision. A call tollgate never allowed is flagged.
fn post_tool_use(sup: &Supervisor, binding: &Binding, tool: &ToolEvent, failed: bool) {
    let session = &binding.session;
    let note = binding.take_note(&tool.use_id);
    let output = match &tool.response {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    };
    let secret = note.as_ref().is_some_and(|n| n.secret);
    let excerpt = tollgate_gate::excerpt(secret, &sup.redactor.redact(&output));
    let duration_ms = tool.duration_ms.or_else(|| {
        note.as_ref()
            .map(|n| n.decided_at.elapsed().as_millis() as u64)
    });
    let mut result = audit::ClientToolResult {
        call_id: tool.use_id.clone(),
        client_tool: tool.name.clone(),
        tool: note
            .as_ref()
            .map(|n| n.tool.clone())
            .unwrap_or_else(|| tool.name.clone()),
        status: if failed {
            audit::ToolStatus::Error
        } else {
            audit::ToolStatus::Ok
        },
        duration_ms,
        bytes: output.len() as u64,
        output: excerpt,
        unexpected: None,
        reason: None,
        routed: None,
    };
    match &note {
        None => {
            result.unexpected = Some(true);
            result.reason = Some(
                "the client reports a call tollgate has no decision for (it did not allow it here)"
                    .to_string(),
            );
            tracing::warn!(session = %session.id, call = %tool.use_id, "a client ran a call tollgate never allowed");
        }
        Some(n) => {
            if n.routed {
                result.routed = Some(true);
            }
            if let Some(id) = &n.delegated {
                let by = format!("uid {} via client prompt", binding.uid);
                let _ = sup.recorder.write(
                    Log::Session(&session.audit, &session.id),
                    audit::Event::ApprovalDecided(audit::ApprovalDecided {
                        approval_id: id.clone(),
                        tool: n.tool.clone(),
                        outcome: audit::ApprovalOutcome::Approved,
                        by,
                        scope: Some("once".to_string()),
                        reason: None,
                        rule: None,
                        target: None,
                        call_id: Some(tool.use_id.clone()),
                    }),
                    Durable::Later,
                    Priority::Ordinary,
                );
            }
        }
    }
    let _ = sup.recorder.write(
        Log::Session(&session.audit, &session.id),
        audit::Event::ClientToolResult(result),
        Durable::Later,
        Priority::Ordinary,
    );
}
