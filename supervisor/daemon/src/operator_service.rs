//! OperatorService on operator.sock: list, inspect, approve, deny, revoke,
//! kill, watch, and probe the sandbox directly.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tollgate_audit::StreamRedactor;
use tollgate_audit::event::{self, Event};
use tollgate_audit::{Durable, Priority};
use tollgate_gate::ReadOnlyRoot;
use tollgate_proto::v1 as pb;
use tollgate_proto::v1::operator_service_server::OperatorService;
use tollgate_sandbox::{ExecRequest, Output, SandboxError};
use tonic::{Request, Response, Status};

use crate::approvals::DecideError;
use crate::backends::{SandboxOwner, SpecFor, sandbox_spec};
use crate::events::Log;
use crate::sessions::State;
use crate::supervisor::{Peer, Supervisor};
use crate::workspace::{self, WorkspaceRules};

pub struct OperatorSvc {
    pub sup: Arc<Supervisor>,
}

fn peer<T>(req: &Request<T>) -> Result<Peer, Status> {
    req.extensions()
        .get::<Peer>()
        .copied()
        .ok_or_else(|| Status::permission_denied("cannot identify the caller"))
}

/// What `status` answers, with the sandbox's strength as `strength` says
/// (the status RPC checks it again first; the metrics export does not).
pub(crate) fn status_of(
    sup: &Supervisor,
    strength: &tollgate_sandbox::Strength,
) -> pb::StatusResponse {
    let primary = sup.backends.primary();
    let reserve = sup.audit.reserve_status();
    let mut line = strength.summary.clone();
    if !strength.missing.is_empty() {
        line.push_str(&format!(
            " — MISSING: {} ({})",
            strength.missing.join(", "),
            crate::backends::refused_while_missing(sup.backends.primary_choice())
        ));
    }
    pb::StatusResponse {
        version: env!("CARGO_PKG_VERSION").to_string(),
        pid: std::process::id(),
        uptime_s: sup.started.elapsed().as_secs(),
        sandbox: primary.kind().as_str().to_string(),
        sandbox_backend: crate::wire::sandbox_backend(primary.kind()) as i32,
        sandbox_strength: line,
        sessions_active: sup.sessions.len() as u32,
        approvals_pending: sup.approvals.pending_count() as u32,
        audit_dir: sup.audit.dir().display().to_string(),
        agent_socket: sup.paths.agent_socket.display().to_string(),
        operator_socket: sup.paths.operator_socket.display().to_string(),
        state_dir: sup.paths.state_dir.display().to_string(),
        audit_sync: sup.audit.sync_mode().as_str().to_string(),
        fds: Some(fd_status(sup)),
        connections: Some(connection_status(sup)),
        docker_socket: sup.config.sandbox.docker_socket.display().to_string(),
        config_file: sup
            .paths
            .config_file
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        audit_refusals: sup.refusals.total(),
        audit_unanchored: sup
            .audit
            .unanchored()
            .iter()
            .map(|p| p.display().to_string())
            .collect(),
        audit_reserve_bytes: reserve.held,
        audit_reserve_target_bytes: reserve.target,
        audit_reserve_drawing: reserve.drawing,
        disk_min_free_mb: sup.disk.floor_mb(),
        telemetry: sup.recorder.telemetry().map(|t| t.status()),
        policy_digest: sup.engine.digest(),
        last_reload: sup.reloads.last(),
        records: Some(sup.recorder.counters().status()),
    }
}

fn by(peer: Peer) -> String {
    format!("uid {} via operator", peer.uid)
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::Event, Status>> + Send>>;
type ExecStream = Pin<Box<dyn Stream<Item = Result<pb::SandboxExecOutput, Status>> + Send>>;

#[tonic::async_trait]
impl OperatorService for OperatorSvc {
    async fn status(
        &self,
        _req: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        let sup = &self.sup;
        // As it is now: a Docker engine is checked again.
        let strength = sup.backends.primary().refresh().await;
        Ok(Response::new(status_of(sup, &strength)))
    }

    async fn list_sessions(
        &self,
        req: Request<pb::ListSessionsRequest>,
    ) -> Result<Response<pb::ListSessionsResponse>, Status> {
        let include_ended = req.into_inner().include_ended;
        let mut sessions: Vec<pb::SessionInfo> = Vec::new();
        if include_ended {
            sessions.extend(self.sup.sessions.ended());
        }
        sessions.extend(
            self.sup
                .sessions
                .all()
                .iter()
                .map(|s| self.sup.session_info(s)),
        );
        Ok(Response::new(pb::ListSessionsResponse { sessions }))
    }

    async fn get_session(
        &self,
        req: Request<pb::GetSessionRequest>,
    ) -> Result<Response<pb::SessionInfo>, Status> {
        let id = req.into_inner().session_id;
        if let Some(s) = self.sup.sessions.get(&id) {
            return Ok(Response::new(self.sup.session_info(&s)));
        }
        self.sup
            .sessions
            .find_ended(&id)
            .map(Response::new)
            .ok_or_else(|| Status::not_found(format!("session {id} is unknown")))
    }

    async fn revoke_session(
        &self,
        req: Request<pb::RevokeSessionRequest>,
    ) -> Result<Response<pb::SessionInfo>, Status> {
        let peer = peer(&req)?;
        let r = req.into_inner();
        let reason = if r.reason.is_empty() {
            format!("revoked by {}", by(peer))
        } else {
            r.reason.clone()
        };
        let session = self.active(&r.session_id)?;
        self.sup
            .end_session(&session, State::Revoked, &reason, &by(peer))
            .await;
        Ok(Response::new(self.sup.session_info(&session)))
    }

    async fn kill_session(
        &self,
        req: Request<pb::KillSessionRequest>,
    ) -> Result<Response<pb::KillSessionResponse>, Status> {
        let peer = peer(&req)?;
        let r = req.into_inner();
        let reason = if r.reason.is_empty() {
            format!("killed by {}", by(peer))
        } else {
            r.reason.clone()
        };
        if r.all {
            let killed = self.sup.end_all(State::Killed, &reason, &by(peer)).await;
            return Ok(Response::new(pb::KillSessionResponse { killed }));
        }
        let session = self.active(&r.session_id)?;
        let mut killed = Vec::new();
        if self
            .sup
            .end_session(&session, State::Killed, &reason, &by(peer))
            .await
        {
            killed.push(session.id.clone());
        }
        Ok(Response::new(pb::KillSessionResponse { killed }))
    }

    async fn net_change(
        &self,
        req: Request<pb::NetChangeRequest>,
    ) -> Result<Response<pb::NetListResponse>, Status> {
        self.net_change_rpc(req).await
    }

    async fn net_list(
        &self,
        req: Request<pb::NetListRequest>,
    ) -> Result<Response<pb::NetListResponse>, Status> {
        let id = req.into_inner().session_id;
        match self.net_target(&id)? {
            NetTarget::Session(s) => crate::network::operator::list(&self.sup, &s),
            NetTarget::Exec => crate::network::operator::exec_list(&self.sup, &id),
        }
        .map(Response::new)
    }

    async fn list_caches(
        &self,
        _req: Request<pb::ListCachesRequest>,
    ) -> Result<Response<pb::ListCachesResponse>, Status> {
        let sup = Arc::clone(&self.sup);
        tokio::task::spawn_blocking(move || crate::caches::operator::list(&sup))
            .await
            .map_err(|e| Status::internal(format!("listing the caches: {e}")))?
            .map(Response::new)
    }

    async fn clear_cache(
        &self,
        req: Request<pb::ClearCacheRequest>,
    ) -> Result<Response<pb::ClearCacheResponse>, Status> {
        let who = by(peer(&req)?);
        let user = req.into_inner().user;
        let sup = Arc::clone(&self.sup);
        tokio::task::spawn_blocking(move || crate::caches::operator::clear(&sup, &user, &who))
            .await
            .map_err(|e| Status::internal(format!("clearing the caches: {e}")))?
            .map(Response::new)
    }

    async fn list_secrets(
        &self,
        _req: Request<pb::ListSecretsRequest>,
    ) -> Result<Response<pb::ListSecretsResponse>, Status> {
        let secrets = self
            .sup
            .secret_store
            .list()
            .into_iter()
            .map(|s| pb::SecretInfo {
                name: s.name,
                hosts: s.hosts,
                env: s.env,
                header: s.header,
                owners: s.owners,
                uses: s.uses,
                stripped: s.stripped,
            })
            .collect();
        Ok(Response::new(pb::ListSecretsResponse { secrets }))
    }

    async fn doctor(
        &self,
        _req: Request<pb::DoctorRequest>,
    ) -> Result<Response<pb::DoctorResponse>, Status> {
        let backends = &self.sup.backends;
        let checks =
            crate::doctor::sandbox_checks(backends.settings(), backends.primary_choice()).await;
        Ok(Response::new(pb::DoctorResponse {
            checks: checks.into_iter().map(crate::wire::doctor_check).collect(),
        }))
    }

    async fn list_approvals(
        &self,
        req: Request<pb::ListApprovalsRequest>,
    ) -> Result<Response<pb::ListApprovalsResponse>, Status> {
        let include = req.into_inner().include_decided;
        Ok(Response::new(pb::ListApprovalsResponse {
            approvals: self
                .sup
                .approvals
                .list(include)
                .into_iter()
                .map(crate::wire::approval)
                .collect(),
        }))
    }

    async fn decide_approval(
        &self,
        req: Request<pb::DecideApprovalRequest>,
    ) -> Result<Response<pb::DecideApprovalResponse>, Status> {
        let peer = peer(&req)?;
        let r = req.into_inner();
        let d = pb::ApprovalDecision {
            approval_id: r.approval_id,
            approve: r.approve,
            scope: r.scope,
            approval_scope: r.approval_scope,
            confirm: r.confirm,
            reason: r.reason,
        };
        let who = by(peer);
        match crate::wire::answer(d).and_then(|d| self.sup.approvals.decide(&d, &who, None)) {
            Ok(a) => Ok(Response::new(pb::DecideApprovalResponse {
                outcome: a.status.as_str().to_string(),
                approval_outcome: crate::wire::approval_status(a.status) as i32,
                decided_by: who,
            })),
            Err(e) => Err(match &e {
                DecideError::Unknown(_) => Status::not_found(e.to_string()),
                DecideError::AlreadyDecided { .. } => Status::failed_precondition(e.to_string()),
                DecideError::NeedsConfirm { .. }
                | DecideError::ConfirmMismatch { .. }
                | DecideError::OtherSession(_)
                | DecideError::BadScope(_) => Status::invalid_argument(e.to_string()),
            }),
        }
    }

    type WatchEventsStream = EventStream;

    async fn watch_events(
        &self,
        req: Request<pb::WatchEventsRequest>,
    ) -> Result<Response<Self::WatchEventsStream>, Status> {
        let filter = req.into_inner().session_id;
        let mut rx = self.sup.recorder.subscribe();
        let shutdown = self.sup.shutdown.clone();
        let (tx, out) = mpsc::channel(256);
        tokio::spawn(async move {
            loop {
                let next = tokio::select! {
                    ev = rx.recv() => ev,
                    _ = shutdown.cancelled() => break,
                };
                let ev = match next {
                    Ok(ev) => ev,
                    Err(broadcast::error::RecvError::Lagged(n)) => pb::Event {
                        event: "watch_lagged".to_string(),
                        summary: format!("{n} events were dropped (watcher too slow)"),
                        ..Default::default()
                    },
                    Err(broadcast::error::RecvError::Closed) => break,
                };
                if !filter.is_empty() && ev.session_id != filter && ev.event != "watch_lagged" {
                    continue;
                }
                if tx.send(Ok(ev)).await.is_err() {
                    break;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(out))))
    }

    async fn reload(
        &self,
        req: Request<pb::ReloadRequest>,
    ) -> Result<Response<pb::ReloadResult>, Status> {
        let peer = peer(&req)?;
        let by = crate::reload::Trigger::Operator(peer.uid);
        Ok(Response::new(
            crate::reload::reload_off_runtime(&self.sup, by).await,
        ))
    }

    type SandboxExecStream = ExecStream;

    async fn sandbox_exec(
        &self,
        req: Request<pb::SandboxExecRequest>,
    ) -> Result<Response<Self::SandboxExecStream>, Status> {
        let peer = peer(&req)?;
        let r = req.into_inner();
        let sup = Arc::clone(&self.sup);
        if r.argv.is_empty() {
            return Err(Status::invalid_argument("sandbox exec needs a command"));
        }
        let choice = crate::wire::asked_backend(&r)
            .map_err(Status::invalid_argument)?
            .unwrap_or_else(|| sup.backends.primary_choice());
        let target = exec_target(&sup, &r)?;
        let id = format!(
            "x{}",
            &crate::credentials::new_session_id().map_err(|e| Status::internal(e.to_string()))?
                [..11]
        );
        let (backend, reaped) = sup
            .backends
            .get(choice)
            .await
            .map_err(|e| sandbox_status(&e))?;
        for r in reaped {
            let _ = sup.recorder.write(
                Log::Supervisor(&r.session_id),
                Event::Recovered(event::Recovered { detail: r.detail }),
                Durable::AsConfigured,
                Priority::Ordinary,
            );
        }
        let spec = sandbox_spec(
            &sup,
            SpecFor {
                session_id: &id,
                workspace: &target.ws.path,
                workspace_id: target.ws.id,
                owner: &target.owner,
                credentials: &target.credentials,
                sandbox_token: None,
                egress: None,
                login_path: None,
            },
        );
        let timeout_s = if r.timeout_s == 0 {
            sup.config.sandbox.run_timeout_s
        } else {
            u64::from(r.timeout_s).min(sup.config.sandbox.max_run_timeout_s)
        };
        // Known before its record names it: `net list ID` of an id read
        // there finds it running (docs/INTERFACES.md "[network]").
        let running = sup.execs.begin(&id);
        let record = event::SandboxExec {
            by: by(peer),
            backend: choice.as_str().to_string(),
            workspace: target.ws.path.display().to_string(),
            uid: u64::from(target.uid),
            argv: r.argv.clone(),
            timeout_s,
        };
        record_exec(&sup, &id, record)?;
        let sandbox = backend
            .create(&spec)
            .await
            .map_err(|e| sandbox_status(&e))?;
        // The network wall, as in a session's sandbox (docs/INTERFACES.md
        // "[network]"): served before the command runs, or it does not run.
        let exec = crate::network::ExecSink::new(Arc::clone(&sup), &id, &r.argv);
        if let Err(e) = sup.walls.start_exec(&sup, exec, sandbox.as_ref()) {
            let _ = sandbox.destroy().await;
            return Err(Status::unavailable(format!(
                "SANDBOX_UNAVAILABLE: the command was not run: {e}"
            )));
        }
        let (tx, out) = mpsc::channel::<Result<pb::SandboxExecOutput, Status>>(64);
        let req = ExecRequest {
            argv: r.argv.clone(),
            cwd: Some(target.ws.path),
            timeout: Duration::from_secs(timeout_s),
            merge_stderr: false,
        };
        let ran = Ran {
            sup,
            id,
            _running: running,
        };
        tokio::spawn(exec_streamed(ran, sandbox, req, tx));
        Ok(Response::new(Box::pin(ReceiverStream::new(out))))
    }
}

/// Writes the exec's `sandbox_exec` record: a refusal to record is a
/// refusal to run (docs/THREAT_MODEL.md).
fn record_exec(sup: &Supervisor, id: &str, record: event::SandboxExec) -> Result<(), Status> {
    sup.recorder
        .write(
            Log::Supervisor(id),
            Event::SandboxExec(record),
            Durable::AsConfigured,
            Priority::Ordinary,
        )
        .map(|_| ())
        .map_err(|e| {
            sup.audit_refused(id, "an operator's sandbox exec", &e);
            Status::unavailable(format!(
                "AUDIT_UNAVAILABLE: the command was not run: its record cannot be written: {e}"
            ))
        })
}

/// Where and as whom `sandbox exec` runs: the workspace checked as at
/// OpenSession (for its owner), the uid asked for (its owner by default).
struct ExecTarget {
    ws: workspace::Checked,
    uid: u32,
    owner: SandboxOwner,
    credentials: Vec<std::path::PathBuf>,
}

fn exec_target(sup: &Supervisor, r: &pb::SandboxExecRequest) -> Result<ExecTarget, Status> {
    let canonical = std::fs::canonicalize(&r.workspace)
        .map_err(|e| Status::invalid_argument(format!("workspace {:?}: {e}", r.workspace)))?;
    let owner =
        std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&canonical).map_err(|e| {
            Status::invalid_argument(format!("workspace {}: {e}", canonical.display()))
        })?);
    let uid = r.uid.unwrap_or(owner);
    if sup.rootless() && uid != sup.own_uid {
        return Err(Status::permission_denied(format!(
            "this supervisor runs rootless as uid {}; it can only sandbox that uid",
            sup.own_uid
        )));
    }
    // Read once, as at OpenSession.
    let users = crate::identity::users_with(uid);
    let credentials = tollgate_policy::host::credential_paths(&users);
    let protected = sup.protected_paths();
    let ws = workspace::check(
        &canonical.display().to_string(),
        &WorkspaceRules {
            peer_uid: owner,
            users: &users,
            credentials: &credentials,
            protected: &protected,
        },
    )
    .map_err(Status::invalid_argument)?;
    let sandbox_owner = SandboxOwner::of(&users, uid, uid);
    Ok(ExecTarget {
        ws,
        uid,
        owner: sandbox_owner,
        credentials,
    })
}

/// Whose `sandbox exec` runs: the supervisor and the exec's id (its wall's),
/// known as running until this ends.
struct Ran {
    sup: Arc<Supervisor>,
    id: String,
    _running: crate::execs::ExecGuard,
}

/// Runs `req` in `sandbox`, streams its output to `tx` redacted as it
/// comes (one [`StreamRedactor`] per stream; docs/THREAT_MODEL.md,
/// "Redaction"; an operator that went away stops the command), destroys
/// the sandbox and its wall, ends stderr with the `sandbox: ` block and the
/// `network: refused` lines, and sends how the command ended.
async fn exec_streamed(
    ran: Ran,
    sandbox: Arc<dyn tollgate_sandbox::Sandbox>,
    req: ExecRequest,
    tx: mpsc::Sender<Result<pb::SandboxExecOutput, Status>>,
) {
    let redactor = Arc::new(ran.sup.redactor.clone());
    let (otx, orx) = mpsc::channel::<Output>(64);
    let cancel = CancellationToken::new();
    let forward_tx = tx.clone();
    let forward_cancel = cancel.clone();
    let forward = tokio::spawn(forward_exec(orx, redactor, forward_tx, forward_cancel));
    let result = sandbox.exec(req, otx, cancel).await;
    let inferred = forward.await.unwrap_or_default();
    let _ = sandbox.destroy().await;
    let refused = ran.sup.walls.refused_since(&ran.id, 0);
    ran.sup.walls.stop(&ran.id).await;
    if let Ok(o) = &result {
        let mut notes = tollgate_gate::WallNotes::from_refusals(&o.refusals);
        inferred.lines(&mut notes);
        let mut block = notes.render();
        for line in refused {
            block.push_str(&line);
            block.push('\n');
        }
        send_output(&tx, 1, block.into_bytes()).await;
    }
    let msg = match result {
        Ok(o) => Ok(pb::SandboxExecOutput {
            out: Some(pb::sandbox_exec_output::Out::Exit(pb::ExitStatus {
                code: o.exit_code.unwrap_or(-1),
                signal: o.signal.unwrap_or(0),
                timed_out: o.timed_out,
            })),
        }),
        Err(e) => Err(sandbox_status(&e)),
    };
    let _ = tx.send(msg).await;
}

/// Forwards `sandbox exec`'s output to the operator redacted as it comes;
/// returns the read-only root's refusals read from it (docs/THREAT_MODEL.md,
/// "Refusals, attributed"). An operator that went away cancels `cancel`.
async fn forward_exec(
    mut orx: mpsc::Receiver<Output>,
    redactor: Arc<tollgate_audit::Redactor>,
    forward_tx: mpsc::Sender<Result<pb::SandboxExecOutput, Status>>,
    forward_cancel: CancellationToken,
) -> ReadOnlyRoot {
    let mut streams = [
        StreamRedactor::new(Arc::clone(&redactor)),
        StreamRedactor::new(redactor),
    ];
    let mut erofs: [ReadOnlyRoot; 2] = Default::default();
    while let Some(o) = orx.recv().await {
        let (which, bytes) = match &o {
            Output::Stdout(b) => (0, b),
            Output::Stderr(b) => (1, b),
        };
        let out = streams[which].push(bytes);
        erofs[which].feed(&out);
        if !send_output(&forward_tx, which, out).await {
            // The operator went away: stop the command.
            forward_cancel.cancel();
        }
    }
    for (which, s) in streams.iter_mut().enumerate() {
        let out = s.finish();
        erofs[which].feed(&out);
        send_output(&forward_tx, which, out).await;
    }
    let [mut all, mut err] = erofs;
    all.finish();
    err.finish();
    all.merge(&err);
    all
}

/// Sends redacted output of stream `which` (0 stdout, 1 stderr); false
/// when the operator went away.
async fn send_output(
    tx: &mpsc::Sender<Result<pb::SandboxExecOutput, Status>>,
    which: usize,
    bytes: Vec<u8>,
) -> bool {
    if bytes.is_empty() {
        return true;
    }
    let msg = if which == 0 {
        pb::sandbox_exec_output::Out::Stdout(bytes)
    } else {
        pb::sandbox_exec_output::Out::Stderr(bytes)
    };
    tx.send(Ok(pb::SandboxExecOutput { out: Some(msg) }))
        .await
        .is_ok()
}

fn fd_status(sup: &Supervisor) -> pb::FdStatus {
    let b = &sup.conns.bounds;
    pb::FdStatus {
        in_use: crate::conn::fds::in_use().unwrap_or(0),
        limit: b.fds.soft,
        reserve: b.fd_reserve,
        limit_at_start: b.fds.was,
    }
}

fn connection_status(sup: &Supervisor) -> pb::ConnectionStatus {
    let b = &sup.conns.bounds;
    let s = sup.conns.stats.snapshot();
    let small = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
    pb::ConnectionStatus {
        agent_open: small(s.agent_open),
        operator_open: small(s.operator_open),
        max_per_uid: b.max_per_uid,
        idle_timeout_s: b.idle.as_secs(),
        refused_over_uid_cap: s.refused_uid_cap,
        refused_over_fd_reserve: s.refused_fd_reserve,
        refused_unidentified: s.refused_unidentified,
        closed_idle: s.closed_idle,
        top_uids: s
            .top_uids
            .iter()
            .map(|&(uid, open)| pb::UidConnections { uid, open })
            .collect(),
    }
}

/// Whose network lists `net list|allow|deny` names.
enum NetTarget {
    Session(Arc<crate::sessions::Session>),
    /// A running `sandbox exec` (the id is the request's).
    Exec,
}

/// `net list|allow|deny` of an id that names no session (live or ended)
/// and no `sandbox exec` (running or among the last that ended).
fn neither_session_nor_exec(id: &str) -> Status {
    Status::not_found(format!(
        "{id} is unknown: no session has that id (running or ended), nor does any sandbox exec (running, or one of the last {} that ended)",
        crate::execs::ENDED_KEPT
    ))
}

/// A sandbox that could not be had, as a status that says so once.
fn sandbox_status(e: &SandboxError) -> Status {
    let detail = e.beside_unavailable();
    Status::unavailable(format!("SANDBOX_UNAVAILABLE: {detail}"))
}

impl OperatorSvc {
    async fn net_change_rpc(
        &self,
        req: Request<pb::NetChangeRequest>,
    ) -> Result<Response<pb::NetListResponse>, Status> {
        let peer = peer(&req)?;
        let r = req.into_inner();
        match self.net_target(&r.session_id)? {
            NetTarget::Session(s) => crate::network::operator::change(&self.sup, &s, &r, &by(peer)),
            NetTarget::Exec => Err(crate::network::operator::exec_change(&self.sup, &r)),
        }
        .map(Response::new)
    }

    /// Whose lists `net` names: a live session's, else a running `sandbox
    /// exec`'s (an ended one says so); an id that is neither says it was
    /// looked for as both.
    fn net_target(&self, id: &str) -> Result<NetTarget, Status> {
        if self.sup.sessions.get(id).is_none() {
            match self.sup.execs.state(id) {
                Some(crate::execs::ExecState::Running) => return Ok(NetTarget::Exec),
                Some(crate::execs::ExecState::Ended) => {
                    return Err(Status::failed_precondition(format!(
                        "sandbox exec {id} already ended; its connections are in the supervisor's log (session {id})"
                    )));
                }
                None if self.sup.sessions.find_ended(id).is_none() => {
                    return Err(neither_session_nor_exec(id));
                }
                None => {}
            }
        }
        self.active(id).map(NetTarget::Session)
    }

    fn active(&self, id: &str) -> Result<Arc<crate::sessions::Session>, Status> {
        match self.sup.sessions.get(id) {
            Some(s) => Ok(s),
            None => Err(match self.sup.sessions.find_ended(id) {
                Some(info) => Status::failed_precondition(format!(
                    "session {id} already ended ({}: {})",
                    info.state, info.end_reason
                )),
                None => Status::not_found(format!("session {id} is unknown")),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_net_id_was_looked_for_as_a_session_and_as_an_exec() {
        let s = neither_session_nor_exec("nosuch");
        assert_eq!(s.code(), tonic::Code::NotFound);
        assert_eq!(
            s.message(),
            "nosuch is unknown: no session has that id (running or ended), nor does any sandbox exec (running, or one of the last 256 that ended)"
        );
    }

    /// Regression: "SANDBOX_UNAVAILABLE: sandbox unavailable: …".
    #[test]
    fn a_sandbox_status_says_each_thing_once() {
        let s = sandbox_status(&SandboxError::Unavailable(
            "docker engine not reachable at unix:///x.sock: no socket there".to_string(),
        ));
        assert_eq!(s.code(), tonic::Code::Unavailable);
        assert_eq!(
            s.message(),
            "SANDBOX_UNAVAILABLE: docker engine not reachable at unix:///x.sock: no socket there"
        );
        let s = sandbox_status(&SandboxError::Refused("workspace /w is gone".to_string()));
        assert_eq!(
            s.message(),
            "SANDBOX_UNAVAILABLE: sandbox refused: workspace /w is gone"
        );
    }
}
