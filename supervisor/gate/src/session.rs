//! Sessions: who opened them, their credentials, caps, counters and state.
//!
//! The table is the single source of truth for whether a token is good. The
//! kill switch works by flipping a session's state and cancelling its
//! [`CancellationToken`]: every in-flight call, approval wait and stream of
//! the session watches that token.

use std::collections::{BTreeSet, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tollgate_audit::AuditFile;
use tollgate_policy::Mode;
use tollgate_sandbox::{Backend, Sandbox};

use crate::approvals::Notice;
use crate::credentials::{self, Presented, Token, TokenHash};

/// Milliseconds since the epoch.
pub fn unix_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Active,
    Revoked,
    Killed,
    Closed,
    Expired,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Active => "active",
            State::Revoked => "revoked",
            State::Killed => "killed",
            State::Closed => "closed",
            State::Expired => "expired",
        }
    }
}

/// Caps fixed at OpenSession (request clamped to config).
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    pub max_tool_calls: u32,
    pub max_cost_usd: f64,
    pub llm_timeout: Duration,
}

/// LLM usage so far.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub cost_usd: f64,
    pub calls: u64,
}

struct Credentials {
    token: TokenHash,
    expires: SystemTime,
    sandbox_token: TokenHash,
}

struct Status {
    state: State,
    end_reason: String,
}

/// One session.
pub struct Session {
    pub id: String,
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
    pub workspace: PathBuf,
    pub home: Option<PathBuf>,
    /// The owner's user name (USER in the sandbox), read at OpenSession.
    pub user: String,
    /// Every credential path on the host (tollgate-policy's table resolved
    /// against /etc/passwd at OpenSession): hidden from the sandbox.
    pub credentials: Arc<[PathBuf]>,
    /// What the workspace's git configuration makes host-executed (read at
    /// OpenSession), for the policy's write checks.
    pub repo: Vec<tollgate_policy::host_exec::RepoPath>,
    pub mode: Mode,
    /// The session's own allowlist (`--tools`); `None` = all.
    pub tools: Option<BTreeSet<String>>,
    pub caps: Caps,
    pub model: String,
    pub client: String,
    /// The client's own session id when `agent hook` opened this session
    /// (Claude Code's or Codex's); empty otherwise.
    pub client_session_id: String,
    pub created: SystemTime,
    pub audit: Arc<AuditFile>,
    /// Cancelled when the session ends for any reason.
    pub cancel: CancellationToken,
    pub backend: Arc<dyn Backend>,
    /// Created lazily on the first run_bash (again after the disk floor
    /// stopped it).
    pub sandbox: SandboxSlot,
    /// `agent mcp-gateway --allow-net`'s forwarding, set once before the
    /// session's sandbox is built (mcp_gateway::egress); empty for every
    /// other session.
    pub egress: std::sync::OnceLock<tollgate_sandbox::Egress>,
    /// The image its workspace named when it opened, set once at
    /// OpenSession (`[sandbox] image = "devcontainer"` only).
    pub devcontainer: std::sync::OnceLock<Devcontainer>,
    /// Why the disk floor stopped the session's sandbox, for the command
    /// that was running (taken by it).
    pub disk_stop: Mutex<Option<String>>,
    pub files: tollgate_tools::Workspace,
    pub tool_calls: AtomicU32,
    /// Server-to-agent control messages (approvals, session end).
    pub control: broadcast::Sender<Notice>,
    /// The sandbox-scoped token, handed to the sandbox environment only.
    pub sandbox_token_text: Mutex<Option<String>>,
    creds: Mutex<Credentials>,
    status: Mutex<Status>,
    usage: Mutex<Usage>,
    /// Its background jobs (run_bash `background`, a client's routed
    /// command run in the background).
    pub jobs: crate::jobs::Jobs,
    /// Files (absolute) the session has read or written.
    read_files: Mutex<BTreeSet<PathBuf>>,
    /// (tool, normalised target) approved with scope "session".
    grants: Mutex<HashSet<(String, String)>>,
    /// Index of the next script-provider turn.
    pub script_turn: AtomicU32,
    /// The operator's network entries and the commands running now
    /// (docs/ARCHITECTURE.md "Network").
    pub net: crate::network::NetState,
    /// Calls in progress that may still write to the session's audit file.
    inflight: AtomicU32,
    idle: tokio::sync::Notify,
}

/// The workspace's `.devcontainer/devcontainer.json` as the session opened
/// on it, and the image it names (`[sandbox] image = "devcontainer"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Devcontainer {
    pub image: String,
    pub bytes: Vec<u8>,
}

/// A session's sandbox: none until the first run_bash, and none again once
/// it is taken away (the session ended, or the disk floor stopped it).
#[derive(Default)]
pub struct SandboxSlot {
    current: Mutex<Option<Arc<dyn Sandbox>>>,
    /// One creation at a time.
    creating: tokio::sync::Mutex<()>,
}

impl SandboxSlot {
    /// The sandbox, if one is there.
    pub fn get(&self) -> Option<Arc<dyn Sandbox>> {
        self.current.lock().clone()
    }

    /// Takes the sandbox out (the caller destroys it); a later run_bash
    /// builds a new one.
    pub fn take(&self) -> Option<Arc<dyn Sandbox>> {
        self.current.lock().take()
    }

    /// Keeps a new sandbox from being built while the guard lives: for
    /// destroying one that a new one could collide with (a container name).
    pub async fn hold(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.creating.lock().await
    }

    /// The sandbox, built by `create` when there is none.
    pub async fn get_or_create<E, F, Fut>(&self, create: F) -> Result<Arc<dyn Sandbox>, E>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<Arc<dyn Sandbox>, E>>,
    {
        let _one = self.creating.lock().await;
        if let Some(sb) = self.get() {
            return Ok(sb);
        }
        let sb = create().await?;
        *self.current.lock() = Some(Arc::clone(&sb));
        Ok(sb)
    }
}

/// Marks one call in progress on a session; see [`Session::begin`].
pub struct Work<'a> {
    session: &'a Session,
}

impl Drop for Work<'_> {
    fn drop(&mut self) {
        if self.session.inflight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.session.idle.notify_waiters();
        }
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("uid", &self.uid)
            .field("workspace", &self.workspace)
            .field("mode", &self.mode)
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

/// Everything needed to create a session, minus credentials.
pub struct NewSession {
    pub id: String,
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
    pub workspace: PathBuf,
    pub home: Option<PathBuf>,
    pub user: String,
    pub credentials: Arc<[PathBuf]>,
    pub repo: Vec<tollgate_policy::host_exec::RepoPath>,
    pub mode: Mode,
    pub tools: Option<BTreeSet<String>>,
    pub caps: Caps,
    pub model: String,
    pub client: String,
    pub client_session_id: String,
    pub audit: Arc<AuditFile>,
    pub backend: Arc<dyn Backend>,
    pub files: tollgate_tools::Workspace,
    pub token_ttl: Duration,
}

impl Session {
    /// Builds a session and mints its two tokens.
    pub fn create(n: NewSession) -> Result<(Arc<Session>, Token), credentials::CredentialError> {
        let token = credentials::mint(&n.id, false)?;
        let sandbox_token = credentials::mint(&n.id, true)?;
        let (control, _) = broadcast::channel(64);
        let session = Arc::new(Session {
            creds: Mutex::new(Credentials {
                token: token.hash(),
                expires: SystemTime::now() + n.token_ttl,
                sandbox_token: sandbox_token.hash(),
            }),
            sandbox_token_text: Mutex::new(Some(sandbox_token.reveal().to_string())),
            id: n.id,
            uid: n.uid,
            gid: n.gid,
            pid: n.pid,
            workspace: n.workspace,
            home: n.home,
            user: n.user,
            credentials: n.credentials,
            repo: n.repo,
            mode: n.mode,
            tools: n.tools,
            caps: n.caps,
            model: n.model,
            client: n.client,
            client_session_id: n.client_session_id,
            created: SystemTime::now(),
            audit: n.audit,
            cancel: CancellationToken::new(),
            backend: n.backend,
            sandbox: SandboxSlot::default(),
            egress: std::sync::OnceLock::new(),
            devcontainer: std::sync::OnceLock::new(),
            disk_stop: Mutex::new(None),
            files: n.files,
            tool_calls: AtomicU32::new(0),
            control,
            status: Mutex::new(Status {
                state: State::Active,
                end_reason: String::new(),
            }),
            usage: Mutex::new(Usage::default()),
            jobs: crate::jobs::Jobs::default(),
            read_files: Mutex::new(BTreeSet::new()),
            grants: Mutex::new(HashSet::new()),
            script_turn: AtomicU32::new(0),
            net: crate::network::NetState::default(),
            inflight: AtomicU32::new(0),
            idle: tokio::sync::Notify::new(),
        });
        Ok((session, token))
    }

    /// Starts a call that writes to the audit file. `None` once the session
    /// has ended: nothing new starts on an ended session.
    pub fn begin(&self) -> Option<Work<'_>> {
        self.inflight.fetch_add(1, Ordering::SeqCst);
        let work = Work { session: self };
        self.is_active().then_some(work)
    }

    /// Waits (up to `limit`) until no call is in progress, so the session's
    /// last audit records, and the head anchored outside the file, come after
    /// every call's own records.
    pub async fn wait_idle(&self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let notified = self.idle.notified();
            if self.inflight.load(Ordering::SeqCst) == 0 {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                tracing::warn!(session = %self.id, "calls still running after the session ended");
                return;
            }
        }
    }

    /// Whether a call is in progress (a routed command still running).
    pub fn is_busy(&self) -> bool {
        self.inflight.load(Ordering::SeqCst) > 0
    }

    pub fn state(&self) -> State {
        self.status.lock().state
    }

    pub fn end_reason(&self) -> String {
        self.status.lock().end_reason.clone()
    }

    pub fn is_active(&self) -> bool {
        self.state() == State::Active
    }

    /// Moves an active session to `state`. Returns false when it had already
    /// ended (the first ending wins).
    pub fn end(&self, state: State, reason: &str) -> bool {
        let mut s = self.status.lock();
        if s.state != State::Active {
            return false;
        }
        s.state = state;
        s.end_reason = reason.to_string();
        drop(s);
        self.cancel.cancel();
        true
    }

    pub fn token_expires(&self) -> SystemTime {
        self.creds.lock().expires
    }

    /// Replaces the control token; the old one stops working at once.
    pub fn rotate(&self, ttl: Duration) -> Result<Token, credentials::CredentialError> {
        let token = credentials::mint(&self.id, false)?;
        let mut c = self.creds.lock();
        c.token = token.hash();
        c.expires = SystemTime::now() + ttl;
        Ok(token)
    }

    /// Checks a presented token against this session. Constant time in the
    /// secret.
    pub fn check_token(&self, presented: &Presented<'_>) -> TokenCheck {
        let c = self.creds.lock();
        match presented {
            Presented::Sandbox { secret, .. } => {
                if c.sandbox_token.matches(secret) {
                    TokenCheck::SandboxScoped
                } else {
                    TokenCheck::Wrong
                }
            }
            Presented::Control { secret, .. } => {
                if !c.token.matches(secret) {
                    TokenCheck::Wrong
                } else if SystemTime::now() >= c.expires {
                    TokenCheck::Expired
                } else {
                    TokenCheck::Good
                }
            }
        }
    }

    pub fn usage(&self) -> Usage {
        *self.usage.lock()
    }

    pub fn add_usage(&self, tokens_in: u64, tokens_out: u64, cost: f64) -> Usage {
        let mut u = self.usage.lock();
        u.tokens_in += tokens_in;
        u.tokens_out += tokens_out;
        u.cost_usd += cost;
        u.calls += 1;
        *u
    }

    pub fn read_files(&self) -> BTreeSet<PathBuf> {
        self.read_files.lock().clone()
    }

    pub fn mark_read(&self, path: PathBuf) {
        self.read_files.lock().insert(path);
    }

    pub fn grant(&self, tool: &str, target: &str) {
        self.grants
            .lock()
            .insert((tool.to_string(), target.to_string()));
    }

    /// The targets of `tool` approved for the session, sorted.
    pub fn grants_of(&self, tool: &str) -> Vec<String> {
        let mut v: Vec<String> = self
            .grants
            .lock()
            .iter()
            .filter(|(t, _)| t == tool)
            .map(|(_, target)| target.clone())
            .collect();
        v.sort();
        v
    }

    pub fn has_grant(&self, tool: &str, target: &str) -> bool {
        self.grants
            .lock()
            .contains(&(tool.to_string(), target.to_string()))
    }

    /// Counts one tool call against the cap; `false` when the cap is reached.
    pub fn take_tool_call(&self) -> bool {
        self.tool_calls
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < self.caps.max_tool_calls).then_some(n + 1)
            })
            .is_ok()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenCheck {
    Good,
    Wrong,
    Expired,
    SandboxScoped,
}
