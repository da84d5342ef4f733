//! The supervisor's shared state and the session lifecycle: open, refresh,
//! close, revoke, kill, and shutdown. Tool calls go through the gate
//! (`tollgate_gate`, entered through `pep.rs`).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tollgate_audit::event::{self, Event};
use tollgate_audit::{Audit, EnvScan, Redactor};
use tollgate_audit::{Durable, Priority};
use tollgate_policy::Mode;
use tollgate_proto::v1 as pb;
use tonic::Status;

use crate::approvals::Approvals;
use crate::backends::{Backends, SandboxOwner};
use crate::credentials::{self, Token};
use crate::disk::{DiskGuard, Low};
use crate::events::Log;
use crate::events::Recorder;
use crate::host_addrs::HostAddrWatch;
use crate::llm::Provider;
use crate::refusals::Refusals;
use crate::sessions::{Caps, NewSession, Session, Sessions, State, unix_ms};
use crate::workspace::{self, WorkspaceRules};
use tollgate_config::Config;
use tollgate_policy::host::SystemResolver;

/// Where the supervisor lives on disk.
#[derive(Debug, Clone)]
pub struct Paths {
    pub state_dir: PathBuf,
    pub agent_socket: PathBuf,
    pub operator_socket: PathBuf,
    pub config_file: Option<PathBuf>,
}

/// The peer of a call, from SO_PEERCRED.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
}

pub struct Supervisor {
    pub config: Config,
    pub paths: Paths,
    /// The policy in force; a reload swaps it (policy_handle.rs, reload.rs).
    pub engine: crate::policy_handle::PolicyHandle,
    pub audit: Arc<Audit>,
    pub recorder: Recorder,
    pub redactor: Redactor,
    pub secrets: EnvScan,
    pub sessions: Sessions,
    pub approvals: Approvals,
    pub backends: Backends,
    pub llm: Arc<dyn Provider>,
    pub started: Instant,
    /// The uid the supervisor runs as (0, or the single user in rootless mode).
    pub own_uid: u32,
    pub operator_gid: Option<u32>,
    /// Connection bounds and counts of both sockets.
    pub conns: crate::conn::Connections,
    /// Cancelled when the supervisor shuts down: long-lived streams end.
    pub shutdown: tokio_util::sync::CancellationToken,
    /// The free-space floor of workspaces' filesystems.
    pub disk: DiskGuard,
    /// Calls and sessions refused because the audit log could not be written.
    pub refusals: Refusals,
    /// The host's own addresses, kept fresh (docs/THREAT_MODEL.md, "The walls,
    /// by layer"): no webfetch reaches them.
    pub host_addrs: Arc<HostAddrWatch>,
    /// Client sessions (`agent hook`) and their routed commands.
    pub hooks: crate::hooks::Hooks,
    /// `[[secrets]]`, read at start (docs/INTERFACES.md "[[secrets]]").
    pub secret_store: Arc<crate::secret_store::SecretStore>,
    /// Where a reload reads the config, and how the last one went.
    pub reloads: crate::reload::Reloads,
    /// The network wall of each session's sandbox (wall/mod.rs).
    pub walls: crate::wall::Walls,
    /// The `sandbox exec` commands running now (execs.rs).
    pub execs: crate::execs::Execs,
    /// Which sandboxes hold each package cache (caches/lease.rs).
    pub leases: crate::caches::lease::Holders,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("paths", &self.paths)
            .field("sessions", &self.sessions.len())
            .finish_non_exhaustive()
    }
}

impl Supervisor {
    /// DNS and the host's own addresses as of now, for one decision.
    pub fn resolver(&self) -> SystemResolver {
        SystemResolver::default().with_host(self.host_addrs.snapshot())
    }

    /// Paths no session may touch or use as a workspace.
    pub fn protected_paths(&self) -> Vec<PathBuf> {
        let mut v = vec![self.paths.state_dir.clone(), self.audit.dir().to_path_buf()];
        // Sockets the service manager passed may live outside the state dir.
        for socket in [&self.paths.agent_socket, &self.paths.operator_socket] {
            if let Some(dir) = socket.parent()
                && !v.iter().any(|p| dir.starts_with(p))
            {
                v.push(dir.to_path_buf());
            }
        }
        if let Some(c) = &self.paths.config_file {
            v.push(c.clone());
        }
        v.push(PathBuf::from("/etc/tollgate"));
        v
    }

    pub fn rootless(&self) -> bool {
        self.own_uid != 0
    }

    /// OpenSession: checks, then creates the session and its audit file.
    pub async fn open_session(
        self: &Arc<Self>,
        peer: Peer,
        req: pb::OpenSessionRequest,
    ) -> Result<(Arc<Session>, Token), Status> {
        self.open_session_for(peer, req, "").await
    }

    /// [`Supervisor::open_session`] for a client's session (`agent hook`):
    /// `client_session_id` is the client's own id, recorded and shown.
    pub async fn open_session_for(
        self: &Arc<Self>,
        peer: Peer,
        req: pb::OpenSessionRequest,
        client_session_id: &str,
    ) -> Result<(Arc<Session>, Token), Status> {
        self.check_caller(peer)?;
        let mode = self.requested_mode(&req)?;
        let tools = requested_tools(&req.tools)?;
        self.check_session_count(peer.uid)?;
        // Read once: the workspace check, the owner and the paths the
        // session's sandbox hides all come from this one reading.
        let users = crate::identity::users_with(peer.uid);
        let credentials = self
            .sessions
            .credential_paths
            .share(tollgate_policy::host::credential_paths(&users));
        let ws = self.check_workspace(&req.workspace, peer.uid, &users, &credentials)?;
        tollgate_audit::audit_system_prompt(&req.system_prompt, &self.secrets)
            .map_err(|e| Status::permission_denied(e.to_string()))?;
        let caps = self.clamp_caps(req.caps.as_ref());
        let owner = SandboxOwner::of(&users, peer.uid, peer.gid);
        let (gid, home) = (owner.gid, owner.home.clone());
        let files = open_checked_workspace(&ws, peer.uid, gid)?;
        let ws = ws.path;
        // What the repository's own config makes host-executed: the file
        // tools guard it like the fixed names; a layout that cannot be
        // guarded refuses the session, as the sandbox would.
        let repo = workspace::repo_paths(&ws, home.as_deref())
            .map_err(|e| Status::failed_precondition(format!("workspace {}: {e}", ws.display())))?;
        let id = credentials::new_session_id().map_err(|e| Status::internal(e.to_string()))?;
        let audit_file = self.audit.open_session(&id).map_err(|e| {
            self.audit_refused("", &format!("a session for uid {}", peer.uid), &e);
            audit_unavailable(format!("cannot open the session's audit log: {e}"))
        })?;
        // From here a refusal removes the file again: nothing names it until
        // the supervisor log's `session_opened`, the last step, is written.
        let discard = |status: Status| {
            if let Err(e) = self.audit.discard(&audit_file) {
                tracing::warn!(file = %audit_file.path().display(), error = %e, "cannot remove a refused session's audit file");
            }
            status
        };
        let model = if req.model.is_empty() {
            self.config.llm.model.clone()
        } else {
            req.model.clone()
        };
        let (session, token) = Session::create(NewSession {
            id: id.clone(),
            uid: peer.uid,
            gid,
            pid: peer.pid,
            workspace: ws,
            home,
            user: owner.name,
            credentials,
            repo,
            mode,
            tools,
            caps,
            model,
            client: req.client.chars().take(64).collect(),
            client_session_id: client_session_id.to_string(),
            audit: Arc::clone(&audit_file),
            backend: self.backends.primary(),
            files,
            token_ttl: Duration::from_secs(self.config.session.token_ttl_s),
        })
        .map_err(|e| discard(Status::internal(e.to_string())))?;
        if self.config.sandbox.image_from_devcontainer()
            && let Some(named) = crate::devcontainer::read(&session.workspace)
        {
            let _ = session.devcontainer.set(named);
        }
        self.record_opened(&session, &req, client_session_id, peer)
            .map_err(discard)?;
        self.sessions.insert(Arc::clone(&session));
        Ok((session, token))
    }

    /// A rootless supervisor serves only its own uid.
    fn check_caller(&self, peer: Peer) -> Result<(), Status> {
        if self.rootless() && peer.uid != self.own_uid {
            return Err(Status::permission_denied(format!(
                "this supervisor runs rootless as uid {}; it serves only that uid (caller is uid {})",
                self.own_uid, peer.uid
            )));
        }
        Ok(())
    }

    /// The mode asked for (the default when none), if the config permits it.
    fn requested_mode(&self, req: &pb::OpenSessionRequest) -> Result<Mode, Status> {
        let mode = crate::wire::asked_mode(req)
            .map_err(|e| Status::invalid_argument(e.to_string()))?
            .unwrap_or(self.config.session.default_mode);
        self.config
            .mode_permitted(mode)
            .map_err(Status::permission_denied)?;
        Ok(mode)
    }

    /// At most `max_sessions_per_uid` sessions per uid.
    fn check_session_count(&self, uid: u32) -> Result<(), Status> {
        let max = self.config.supervisor.max_sessions_per_uid as usize;
        if self.sessions.count_for_uid(uid) >= max {
            return Err(Status::resource_exhausted(format!(
                "uid {uid} already has {max} sessions open (max_sessions_per_uid); close one first"
            )));
        }
        Ok(())
    }

    /// The workspace asked for, checked against the caller, the users'
    /// credential paths and the supervisor's own paths.
    fn check_workspace(
        &self,
        requested: &str,
        peer_uid: u32,
        users: &[tollgate_policy::host::PasswdEntry],
        credentials: &[PathBuf],
    ) -> Result<workspace::Checked, Status> {
        let protected = self.protected_paths();
        workspace::check(
            requested,
            &WorkspaceRules {
                peer_uid,
                users,
                credentials,
                protected: &protected,
            },
        )
        .map_err(Status::invalid_argument)
    }

    /// The `session_opened` records, in the session's file and in the
    /// supervisor log. Both ride on the next fsync of their file: nothing
    /// has acted yet, and the session's first decision is made durable
    /// before its tool runs (with everything written before it).
    fn record_opened(
        &self,
        session: &Session,
        req: &pb::OpenSessionRequest,
        client_session_id: &str,
        peer: Peer,
    ) -> Result<(), Status> {
        let opened = event::SessionOpened {
            uid: u64::from(peer.uid),
            gid: u64::from(session.gid),
            pid: i64::from(peer.pid),
            workspace: session.workspace.display().to_string(),
            mode: session.mode.as_str().to_string(),
            tools: req.tools.clone(),
            max_tool_calls: u64::from(session.caps.max_tool_calls),
            max_cost_usd: session.caps.max_cost_usd,
            client: session.client.clone(),
            sandbox: self.backends.primary().kind().as_str().to_string(),
            system_prompt_chars: req.system_prompt.chars().count() as u64,
            client_session_id: (!client_session_id.is_empty())
                .then(|| client_session_id.to_string()),
            audit_file: None,
        };
        self.recorder
            .write(
                Log::Session(&session.audit, &session.id),
                Event::SessionOpened(opened.clone()),
                Durable::Later,
                Priority::Ordinary,
            )
            .and_then(|_| {
                let sup = event::SessionOpened {
                    audit_file: Some(session.audit.path().display().to_string()),
                    ..opened
                };
                self.recorder.write(
                    Log::Supervisor(&session.id),
                    Event::SessionOpened(sup),
                    Durable::Later,
                    Priority::Ordinary,
                )
            })
            .map_err(|e| {
                self.audit_refused("", &format!("a session for uid {}", peer.uid), &e);
                audit_unavailable(format!("cannot record the session: {e}"))
            })?;
        tracing::info!(target: crate::logging::LIFECYCLE, session = %session.id, uid = peer.uid, workspace = %session.workspace.display(), mode = session.mode.as_str(), "session opened");
        Ok(())
    }

    fn clamp_caps(&self, asked: Option<&pb::SessionCaps>) -> Caps {
        let s = &self.config.session;
        let l = &self.config.llm;
        let mut caps = Caps {
            max_tool_calls: s.max_tool_calls,
            max_cost_usd: l.max_cost_usd,
            llm_timeout: Duration::from_secs(l.timeout_s),
        };
        if let Some(a) = asked {
            if let Some(n) = a.max_tool_calls {
                caps.max_tool_calls = caps.max_tool_calls.min(n);
            }
            if let Some(c) = a.max_cost_usd
                && c.is_finite()
                && c >= 0.0
            {
                caps.max_cost_usd = caps.max_cost_usd.min(c);
            }
            if let Some(t) = a.llm_timeout_s
                && t > 0
            {
                caps.llm_timeout = caps.llm_timeout.min(Duration::from_secs(t.into()));
            }
        }
        caps
    }

    /// RefreshToken: a new token; the old one stops working at once.
    pub fn refresh(&self, session: &Session) -> Result<Token, Status> {
        let _work = session
            .begin()
            .ok_or_else(|| Status::unauthenticated(format!("session {} has ended", session.id)))?;
        let token = session
            .rotate(Duration::from_secs(self.config.session.token_ttl_s))
            .map_err(|e| Status::internal(e.to_string()))?;
        let _ = self.recorder.write(
            Log::Session(&session.audit, &session.id),
            Event::TokenRotated(event::TokenRotated {
                expires_unix_ms: unix_ms(session.token_expires()),
            }),
            Durable::AsConfigured,
            Priority::Ordinary,
        );
        Ok(token)
    }

    /// Ends a session: marks it, cancels everything in flight, kills its
    /// sandbox, withdraws its approvals, tells the agent, and records it.
    /// Idempotent: the first ending wins and returns true.
    pub async fn end_session(
        &self,
        session: &Arc<Session>,
        state: State,
        reason: &str,
        by: &str,
    ) -> bool {
        let started = Instant::now();
        if !session.end(state, reason) {
            return false;
        }
        // The kill switch: destroy the sandbox first, then the bookkeeping.
        let sandbox_result = match session.sandbox.take() {
            Some(sb) => sb.destroy().await.map_err(|e| e.to_string()),
            None => Ok(()),
        };
        tracing::debug!(session = %session.id, elapsed = ?started.elapsed(), "sandbox destroyed");
        // Its connections closed, each close recorded before the session's
        // last records.
        self.walls.stop(&session.id).await;
        // Its placeholders rotated and dropped: worthless from now on.
        self.secret_store.end_session(&session.id);
        self.withdraw_approvals(session, state, reason, by);
        tell_the_agent(session, state, reason);
        // Cancelled calls write their own last records; those must come
        // before the session's final ones and the anchor.
        session.wait_idle(Duration::from_secs(3)).await;
        self.record_ended(session, state, reason, by, sandbox_result.err());
        self.anchor_head(session);
        let info = crate::wire::session_info(session, 0, session.backend.kind());
        self.sessions.retire(&session.id, info);
        tracing::info!(target: crate::logging::LIFECYCLE, session = %session.id, state = state.as_str(), by, reason, "session ended");
        tracing::debug!(session = %session.id, elapsed = ?started.elapsed(), "session ended and recorded");
        true
    }

    /// Every approval still pending for the session, withdrawn and recorded.
    fn withdraw_approvals(&self, session: &Session, state: State, reason: &str, by: &str) {
        for a in self.approvals.pending_for(&session.id) {
            if let Some(a) =
                self.approvals
                    .close(&a.id, tollgate_gate::approvals::Status::Withdrawn, by)
            {
                let _ = self.recorder.write(
                    Log::Session(&session.audit, &session.id),
                    Event::ApprovalDecided(event::ApprovalDecided {
                        approval_id: a.id,
                        tool: a.tool,
                        outcome: event::ApprovalOutcome::Withdrawn,
                        by: by.to_string(),
                        scope: None,
                        reason: Some(format!("session {}: {reason}", state.as_str())),
                        rule: None,
                        target: None,
                        call_id: None,
                    }),
                    Durable::AsConfigured,
                    Priority::Essential,
                );
            }
        }
    }

    /// The session's end records: `session_closed`, or `session_revoked`
    /// followed by `session_closed` (a revoked session's own file still ends
    /// with it), and the same ending in the supervisor's log. They ride on
    /// the anchor's fsyncs that follow: one for the session file, one for
    /// the supervisor's log. Essential: on a full disk they draw on the
    /// audit reserve.
    fn record_ended(
        &self,
        session: &Session,
        state: State,
        reason: &str,
        by: &str,
        sandbox_error: Option<String>,
    ) {
        let usage = session.usage();
        let ended = event::SessionEnded {
            state: state.as_str().to_string(),
            reason: reason.to_string(),
            by: Some(by.to_string()),
            tool_calls: Some(u64::from(
                session.tool_calls.load(std::sync::atomic::Ordering::SeqCst),
            )),
            tokens_in: Some(usage.tokens_in),
            tokens_out: Some(usage.tokens_out),
            cost_usd: Some(usage.cost_usd),
            sandbox_error,
            audit_file: None,
        };
        let in_log = event::SessionEnded {
            audit_file: Some(session.audit.path().display().to_string()),
            ..ended.clone()
        };
        let (event, last, in_log) = match state {
            State::Closed => (
                Event::SessionClosed(ended),
                None,
                Event::SessionClosed(in_log),
            ),
            State::Active | State::Revoked | State::Killed | State::Expired => (
                Event::SessionRevoked(ended),
                Some(Event::SessionClosed(event::SessionEnded::short(
                    state.as_str(),
                    reason,
                ))),
                Event::SessionRevoked(in_log),
            ),
        };
        for e in std::iter::once(event).chain(last) {
            let _ = self.recorder.write(
                Log::Session(&session.audit, &session.id),
                e,
                Durable::Later,
                Priority::Essential,
            );
        }
        let _ = self.recorder.write(
            Log::Supervisor(&session.id),
            in_log,
            Durable::Later,
            Priority::Essential,
        );
    }

    /// Anchors the session file's head outside it, so a truncated tail is
    /// caught by `audit verify`. One that cannot be written now is kept and
    /// written when the disk has room (the maintenance tick).
    fn anchor_head(&self, session: &Session) {
        if let Err(e) = self.recorder.anchor(&session.audit, &session.id) {
            if session.audit.is_broken() {
                tracing::error!(session = %session.id, error = %e, "cannot anchor the session's audit head: its file is broken");
            } else {
                tracing::error!(session = %session.id, error = %e, "cannot anchor the session's audit head now; it is written when the audit disk has room");
            }
        }
    }

    /// The disk floor: the filesystem of `session`'s workspace fell under
    /// `[sandbox] min_free_mb`. Records the stop (essential: it may draw on
    /// the audit reserve), then kills every process of the session's sandbox
    /// (taken away: the next run_bash builds a new one once there is room)
    /// and leaves the reason for the command that was running. The session
    /// stays open.
    pub async fn stop_for_disk(&self, session: &Session, low: &Low) {
        // No new sandbox until this one is gone (a Docker container's name
        // is the session's).
        let _no_new = session.sandbox.hold().await;
        let Some(sandbox) = session.sandbox.take() else {
            return;
        };
        *session.disk_stop.lock() = Some(low.stopped());
        tracing::warn!(session = %session.id, workspace = %session.workspace.display(),
            free_mb = ?low.free_mb(), floor_mb = self.disk.floor_mb(),
            "disk floor reached: stopping the session's sandbox");
        let stop = Event::DiskFloorStop(event::DiskFloorStop {
            workspace: session.workspace.display().to_string(),
            free_mb: low.free_mb(),
            floor_mb: self.disk.floor_mb(),
            reason: low.stopped(),
        });
        // Recorded before the kill, like every action: the supervisor log
        // first (it names the session), then the session's own.
        let _ = self.recorder.write(
            Log::Supervisor(&session.id),
            stop.clone(),
            Durable::AsConfigured,
            Priority::Essential,
        );
        let _ = self.recorder.write(
            Log::Session(&session.audit, &session.id),
            stop,
            Durable::AsConfigured,
            Priority::Essential,
        );
        if let Err(e) = sandbox.destroy().await {
            tracing::error!(session = %session.id, error = %e, "the disk floor could not destroy the session's sandbox");
            let _ = self.recorder.write(
                Log::Supervisor(&session.id),
                Event::SandboxError(event::SandboxError {
                    during: "disk_floor_stop".to_string(),
                    error: e.to_string(),
                }),
                Durable::AsConfigured,
                Priority::Essential,
            );
        }
    }

    /// A call or a session refused because its audit record could not be
    /// written (`what`: "run_bash call of session X", "a session for uid
    /// N"): counted, logged, and recorded in the supervisor log as
    /// `audit_refused` (essential: it may draw on the reserve). Rate-limited
    /// like the log (see `refusals.rs`): the first few of each interval one
    /// by one, then one record with the count of the rest.
    pub fn audit_refused(&self, session: &str, what: &str, error: &dyn std::fmt::Display) {
        let noted = self.refusals.note(what, error);
        if let Some(more) = noted.summary {
            self.record_refusal_summary(more);
        }
        if noted.one_by_one {
            let _ = self.recorder.write(
                Log::Supervisor(session),
                Event::AuditRefused(event::AuditRefused {
                    what: Some(what.to_string()),
                    error: Some(error.to_string()),
                    more: None,
                    interval_s: None,
                    total: None,
                }),
                Durable::AsConfigured,
                Priority::Essential,
            );
        }
    }

    /// The record of the refusals of an interval not recorded one by one.
    pub fn record_refusal_summary(&self, more: u64) {
        let _ = self.recorder.write(
            Log::Supervisor(""),
            Event::AuditRefused(event::AuditRefused {
                what: None,
                error: None,
                more: Some(more),
                interval_s: Some(crate::refusals::INTERVAL.as_secs()),
                total: Some(self.refusals.total()),
            }),
            Durable::AsConfigured,
            Priority::Essential,
        );
    }

    /// Revokes (or kills) every active session: SIGTERM, `kill --all`.
    pub async fn end_all(&self, state: State, reason: &str, by: &str) -> Vec<String> {
        let sessions = self.sessions.all();
        let ends = sessions
            .iter()
            .map(|s| self.end_session(s, state, reason, by));
        let results = futures_util::future::join_all(ends).await;
        sessions
            .iter()
            .zip(results)
            .filter(|(_, ended)| *ended)
            .map(|(s, _)| s.id.clone())
            .collect()
    }

    /// Ends sessions whose token expired without a refresh, and client
    /// sessions idle past `[clients] idle_timeout_s`.
    pub async fn reap_expired(&self) {
        let now = SystemTime::now();
        for s in self.sessions.all() {
            // A client's session has no token in use: its hook names it by
            // the client's session id. It ends when the client says so, or
            // when idle (below).
            if s.client_session_id.is_empty() && s.token_expires() <= now {
                self.end_session(
                    &s,
                    State::Expired,
                    "token expired without a refresh",
                    "supervisor",
                )
                .await;
            }
        }
        let idle = Duration::from_secs(self.config.clients.idle_timeout_s);
        for s in self.hooks.idle(idle) {
            self.end_session(
                &s,
                State::Closed,
                &format!("no event from the client for {}s", idle.as_secs()),
                "supervisor",
            )
            .await;
        }
    }

    pub fn session_info(&self, s: &Session) -> pb::SessionInfo {
        let pending = self.approvals.pending_for(&s.id).len() as u32;
        crate::wire::session_info(s, pending, s.backend.kind())
    }
}

/// A session refused because its records cannot be written: `UNAVAILABLE`,
/// with the typed refusal in the status's details.
fn audit_unavailable(reason: String) -> Status {
    let denial = pb::Denial {
        code: pb::DenialCode::AuditUnavailable as i32,
        reason,
        rule: "floor:audit".to_string(),
        consequence: String::new(),
        destructive: false,
    };
    tollgate_proto::refusal::status(tonic::Code::Unavailable, &denial)
}

/// The tools asked for (`None`: all), each one the registry knows.
fn requested_tools(asked: &[String]) -> Result<Option<BTreeSet<String>>, Status> {
    if asked.is_empty() {
        return Ok(None);
    }
    let known: BTreeSet<&str> = tollgate_policy::registry().iter().map(|t| t.name).collect();
    for t in asked {
        if !known.contains(t.as_str()) {
            return Err(Status::invalid_argument(format!(
                "unknown tool {t:?} in --tools (known: {})",
                known.iter().copied().collect::<Vec<_>>().join(", ")
            )));
        }
    }
    Ok(Some(asked.iter().cloned().collect::<BTreeSet<String>>()))
}

/// Opens the checked workspace for the file tools; the directory held open
/// must be the one just checked (a rename in between would hand the session
/// another directory).
fn open_checked_workspace(
    ws: &workspace::Checked,
    uid: u32,
    gid: u32,
) -> Result<tollgate_tools::Workspace, Status> {
    let files = tollgate_tools::Workspace::open(&ws.path, uid, gid)
        .map_err(|e| Status::invalid_argument(format!("workspace {}: {e}", ws.path.display())))?;
    if tollgate_sandbox::WorkspaceId::from_pair(files.id()) != ws.id {
        return Err(Status::invalid_argument(format!(
            "workspace {} changed while the session was being opened (moved or replaced); try again",
            ws.path.display()
        )));
    }
    Ok(files)
}

/// Tells the session's agent (its approval stream) that the session ended,
/// and why.
fn tell_the_agent(session: &Session, state: State, reason: &str) {
    use tollgate_policy::Code;
    let code = match state {
        // A closed session was not refused anything: no code.
        State::Closed => Code::Ok,
        State::Active | State::Revoked | State::Killed | State::Expired => Code::SessionRevoked,
    };
    let _ = session
        .control
        .send(tollgate_gate::approvals::Notice::Ended {
            code,
            reason: reason.to_string(),
        });
}
