//! tollgate-sandbox: where untrusted commands run.
//!
//! It owns the [`Backend`] trait and its implementations: `native` (a
//! re-executed single-threaded helper that becomes pid 1 of fresh namespaces,
//! restricted by Landlock and seccomp), `docker` (one hardened container per
//! session, through bollard).
//!
//! It must never weaken a sandbox silently: when the host cannot give full
//! strength, creating a sandbox fails and names what is missing. It makes no
//! policy decisions: the gate (`tollgate-gate`) decides, then calls a backend.

pub mod docker;
pub mod egress;
mod home_dirs;
pub mod host_exec;
mod lease;
pub mod native;
pub mod private_dir;
#[cfg(feature = "test-util")]
pub mod recording;
pub mod refusal;
pub(crate) mod seccomp_table;
mod setid;
pub mod shell;
pub mod wall;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
pub use lease::{Lease, LeaseEnd, Leased};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use egress::Egress;
pub use shell::Shell;
pub use wall::WallSockets;

/// Which backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    Native,
    Docker,
}

impl BackendKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Native => "native",
            BackendKind::Docker => "docker",
        }
    }
}

/// Resource limits for one sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    pub memory_mb: u64,
    pub pids: u64,
    /// CPU share, in cores (may be fractional in docker; native uses cfs quota).
    pub cpus_millis: u64,
    pub nofile: u64,
    /// Largest file a command may write.
    pub fsize_mb: u64,
    /// Size of the private /tmp.
    pub tmp_mb: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_mb: 2048,
            pids: 256,
            cpus_millis: 1000,
            nofile: 1024,
            fsize_mb: 1024,
            tmp_mb: 256,
        }
    }
}

/// Everything a backend needs to build one session's sandbox.
#[derive(Debug, Clone)]
pub struct SandboxSpec {
    /// Session id (12 url-safe chars); names containers, cgroups, records.
    pub session_id: String,
    /// Canonical absolute workspace path; bound read-write at the same path.
    pub workspace: PathBuf,
    /// The directory the session was opened on. When given, a backend
    /// refuses to build the sandbox if `workspace` now names another
    /// directory (renamed away and replaced since the session's checks).
    pub workspace_id: Option<WorkspaceId>,
    /// The session owner. Commands run as this uid/gid with no capabilities.
    pub uid: u32,
    pub gid: u32,
    /// The complete environment, already reduced to the allowlist
    /// (PATH, HOME, USER, LANG, LC_ALL, TERM, AGENT_SESSION_ID, AGENT_SESSION_TOKEN).
    pub env: Vec<(String, String)>,
    pub limits: Limits,
    /// Host paths that must never be visible inside (state dir, audit dir,
    /// sockets, and every credential path of the host: the daemon resolves
    /// tollgate-policy's one table against /etc/passwd and passes them here;
    /// this crate keeps no list and reads no /etc/passwd). Backends refuse to
    /// create a sandbox that would expose them; the native one masks those
    /// its read-only system view would show.
    pub hidden: Vec<PathBuf>,
    /// Names the host runs by itself (`.git`, `.envrc`, `.vscode`, ...):
    /// single file names, from tollgate-policy's table, which the daemon
    /// passes in (this crate keeps no list of its own). Each is read-only in
    /// the sandbox at the top of the workspace, reserved when missing; with
    /// the repository's own paths besides ([`host_exec::plan`]). Empty: none.
    pub host_exec: Vec<String>,
    /// How git directories among those paths are attached: all read-only
    /// (the default) or split (`[sandbox] git_dir`, docs/THREAT_MODEL.md).
    pub git_dir: tollgate_policy::host_exec::GitDirMode,
    /// The session owner's home directory: their global git config (it may
    /// set `core.hooksPath` or include files in the workspace) and `~`.
    pub home: Option<PathBuf>,
    /// Egress by forwarding (`agent mcp-gateway --allow-net`): the ports the
    /// sandbox may connect to and its `/etc/hosts` names. `None`: no network
    /// at all (every run_bash session, and a gateway without --allow-net).
    pub egress: Option<Egress>,
    /// The network wall is served in this sandbox's namespace (`[network]`
    /// configured, [`wall`]): `/etc/resolv.conf` names its DNS stub. The
    /// proxy variables come in `env`; the supervisor opens the listeners
    /// and loads the rules once the sandbox exists ([`Sandbox::network_wall`]).
    pub wall: bool,
    /// The image this session's workspace names (`[sandbox] image =
    /// "devcontainer"`, docs/OPERATIONS.md "The Docker sandbox"): the Docker
    /// backend uses it instead of its own only when the engine already has
    /// it (it never pulls); `None` (always, natively): the backend's image.
    pub image: Option<String>,
    /// A CA the sandbox trusts beside the host's, PEM (the session's CA,
    /// when a `[[secrets]]` entry is bound for it: docs/THREAT_MODEL.md
    /// "Secrets"): the root's `/etc/ssl/certs/ca-certificates.crt` is stood
    /// in for by the host's bundle plus it (native backend; the Docker one
    /// binds that over the image's, docker/ca.rs).
    pub extra_ca: Option<String>,
    /// The private home HOME names inside (docs/THREAT_MODEL.md, "The
    /// sandbox's environment"); `None`: HOME is /tmp.
    pub private_home: Option<PrivateHome>,
    /// What the daemon holds for as long as this sandbox exists (the
    /// package cache's lease, docs/OPERATIONS.md "Package caches").
    pub lease: Lease,
}

/// The sandbox's private home: an empty tmpfs at the owner's home path
/// (sized like /tmp), owned by the session's uid, holding the owner's
/// toolchain directories read-only at their own paths (every credential
/// path in them still masked), `.gitconfig` with the git identity, and the
/// owner's package cache writable at [`CACHE_AT`] when one is kept.
/// Decided by the daemon from tollgate-policy's `sandbox_env`.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct PrivateHome {
    /// The owner's home path: HOME inside.
    pub path: PathBuf,
    /// Directories beneath `path` shown read-only (they exist on the host
    /// as directories; each is taken without following a symlink).
    pub toolchains: Vec<PathBuf>,
    /// What `~/.gitconfig` holds inside (the git identity); empty: no file.
    pub gitconfig: String,
    /// The host directory holding the package caches of this owner (or of
    /// this owner and workspace), kept between sessions outside every
    /// workspace (docs/THREAT_MODEL.md "Package caches"): attached
    /// writable, nosuid, nodev at [`PrivateHome::cache_path`]. It must be
    /// the owner's own directory (the daemon makes it, mode 0700); `None`:
    /// the caches live in the private home and end with the sandbox.
    #[serde(default)]
    pub cache: Option<PathBuf>,
}

/// Where the package cache is attached, relative to the private home: a
/// directory of its own, so nothing else of the home persists.
pub const CACHE_AT: &str = ".tollgate-cache";

impl PrivateHome {
    /// The package cache's path inside the sandbox.
    pub fn cache_path(&self) -> PathBuf {
        self.path.join(CACHE_AT)
    }
}

/// A directory's identity: device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WorkspaceId {
    pub dev: u64,
    pub ino: u64,
}

impl WorkspaceId {
    pub fn of(meta: &std::fs::Metadata) -> WorkspaceId {
        use std::os::unix::fs::MetadataExt;
        WorkspaceId {
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }

    /// From `(dev, ino)`, as `tollgate_tools::Workspace::id` gives them.
    pub fn from_pair((dev, ino): (u64, u64)) -> WorkspaceId {
        WorkspaceId { dev, ino }
    }

    /// `Err` with the reason when `path` no longer names this directory.
    pub fn check(&self, path: &Path) -> Result<(), SandboxError> {
        let now = std::fs::metadata(path)
            .map_err(|e| SandboxError::Refused(format!("workspace {}: {e}", path.display())))?;
        if WorkspaceId::of(&now) == *self {
            Ok(())
        } else {
            Err(SandboxError::Refused(replaced(path)))
        }
    }
}

/// The refusal when a workspace path names another directory than the one
/// the session was opened on.
pub(crate) fn replaced(path: &Path) -> String {
    format!(
        "workspace {} is no longer the directory this session was opened on (it was moved or replaced since); open a new session",
        path.display()
    )
}

/// One command to run inside a sandbox.
#[derive(Debug, Clone)]
pub struct ExecRequest {
    /// argv; run_bash uses [`Sandbox::shell`]'s [`Shell::argv`].
    pub argv: Vec<String>,
    /// Working directory inside the sandbox (the workspace by default).
    pub cwd: Option<PathBuf>,
    /// Killed (whole process group) when this passes.
    pub timeout: Duration,
    /// Send stderr down the stdout stream so the order is exact (run_bash).
    pub merge_stderr: bool,
}

/// A piece of output, in the order it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    Stdout(Bytes),
    Stderr(Bytes),
}

/// How a command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutcome {
    /// Exit code when it exited normally.
    pub exit_code: Option<i32>,
    /// Signal number when a signal ended it.
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub cancelled: bool,
    pub duration: Duration,
    /// What the sandbox's walls refused it, when the backend can say
    /// ([`refusal`]; docs/THREAT_MODEL.md, "Refusals, attributed").
    pub refusals: refusal::Refusals,
}

/// What a backend can enforce on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Strength {
    pub backend: BackendKind,
    /// One line for `status` and the ready line's neighbours.
    pub summary: String,
    /// What the host lacks for full strength. Non-empty means sandboxes are
    /// refused, never run weaker.
    pub missing: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The backend cannot run sandboxes here (engine down, kernel lacks a
    /// feature). The message names what and carries a hint.
    #[error("sandbox unavailable: {0}")]
    Unavailable(String),
    /// The spec itself is refused (a forbidden mount, a bad workspace).
    #[error("sandbox refused: {0}")]
    Refused(String),
    /// The sandbox existed but is gone (killed from outside, engine died).
    #[error("sandbox is gone: {0}")]
    Gone(String),
    #[error("sandbox i/o: {context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// The Docker engine answered a request with an error: `doing` says
    /// which request ("starting container tg-…").
    #[error("sandbox: {doing}: {error}")]
    Engine { doing: String, error: String },
    /// A container of the session's name already exists (a session id was
    /// reused, or an earlier supervisor left it).
    #[error(
        "sandbox: a container named {name} already exists: {error}; a session id was reused, \
         or an earlier supervisor left it (restart the supervisor to reap it)"
    )]
    ContainerExists { name: String, error: String },
    /// A container did not go away within the wait for its removal.
    #[error("sandbox: container {name} is still being removed after {secs} s")]
    StillRemoving { name: String, secs: u64 },
    /// The mounts a container was given could not be checked against its
    /// spec (the check itself failed; a mismatch is [`SandboxError::Refused`]).
    #[error("sandbox: verifying the container's mounts: {0}")]
    MountCheck(String),
    /// An exec request the backend cannot carry out as asked (no command,
    /// NUL bytes, a cwd that is not UTF-8).
    #[error("sandbox: {0}")]
    BadRequest(String),
    /// The command could not be started inside the sandbox (not found, not
    /// executable); `place` names the sandbox.
    #[error("sandbox: could not start {argv0:?} in {place}: {error}")]
    Spawn {
        argv0: Option<String>,
        place: String,
        error: String,
    },
    /// The native sandbox's helper broke its setup protocol (a message out
    /// of order, a descriptor missing).
    #[error("sandbox: {0}")]
    Setup(String),
    /// A task or thread doing the backend's work died (panicked or was
    /// cancelled) before it answered; `what` names it.
    #[error("sandbox: {what} failed: {error}")]
    Task { what: String, error: String },
    /// A record the backend keeps in its state directory could not be
    /// encoded (`what` names it).
    #[error("sandbox: {what}: {error}")]
    Encode { what: String, error: String },
}

impl SandboxError {
    /// The message for a caller whose own words already say "unavailable"
    /// (a status code, a backend marked unavailable): the detail of
    /// `Unavailable`, every other kind's full message.
    pub fn beside_unavailable(&self) -> String {
        match self {
            SandboxError::Unavailable(_) => self.detail(),
            _ => self.to_string(),
        }
    }

    /// The message without the kind's own prefix ("sandbox unavailable: "
    /// and the like), for a caller that says the kind itself: wrapping the
    /// full message would say it twice.
    pub fn detail(&self) -> String {
        match self {
            SandboxError::Unavailable(d) | SandboxError::Refused(d) | SandboxError::Gone(d) => {
                d.clone()
            }
            SandboxError::Io { .. } => self.to_string(),
            SandboxError::Engine { .. }
            | SandboxError::ContainerExists { .. }
            | SandboxError::StillRemoving { .. }
            | SandboxError::MountCheck(_)
            | SandboxError::BadRequest(_)
            | SandboxError::Spawn { .. }
            | SandboxError::Setup(_)
            | SandboxError::Task { .. }
            | SandboxError::Encode { .. } => {
                let full = self.to_string();
                match full.strip_prefix("sandbox: ") {
                    Some(d) => d.to_string(),
                    None => full,
                }
            }
        }
    }
}

/// A sandbox backend.
#[async_trait::async_trait]
pub trait Backend: Send + Sync + 'static {
    fn kind(&self) -> BackendKind;

    /// What this backend can enforce on this host, probed once.
    fn strength(&self) -> Strength;

    /// Builds one session's sandbox. Fails rather than build a weaker one.
    async fn create(&self, spec: &SandboxSpec) -> Result<Arc<dyn Sandbox>, SandboxError>;

    /// At supervisor start: find sandboxes a previous (crashed) supervisor left
    /// behind, kill them, and return one line per sandbox reaped.
    async fn reap_orphans(&self) -> Result<Vec<Reaped>, SandboxError>;

    /// What this backend can enforce now: re-checks what can change while
    /// the supervisor runs (a Docker engine that went away or came back).
    async fn refresh(&self) -> Strength {
        self.strength()
    }

    /// At a clean exit, once every sandbox is destroyed: removes what the
    /// backend set up for all of its sandboxes (the native backend's
    /// per-supervisor cgroup directories).
    async fn shutdown(&self) {}

    /// The shell its sandboxes run command lines in, when known before one
    /// is built (native: the host's; Docker: the image's, learned from the
    /// first sandbox); `None` when not known yet.
    fn shell(&self) -> Option<Shell> {
        None
    }
}

/// A sandbox left behind by an earlier supervisor and reaped now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reaped {
    pub session_id: String,
    /// What was found and done, e.g. "killed pid 4242" / "removed container ab12".
    pub detail: String,
}

/// One live sandbox.
#[async_trait::async_trait]
pub trait Sandbox: Send + Sync {
    /// Runs one command. Output is sent on `out` as it arrives (in order);
    /// the call returns when the command and its process group are gone.
    /// `cancel` kills it at once. A full or closed `out` never blocks the
    /// command forever: the backend keeps draining and drops what it cannot send.
    async fn exec(
        &self,
        req: ExecRequest,
        out: mpsc::Sender<Output>,
        cancel: CancellationToken,
    ) -> Result<ExecOutcome, SandboxError>;

    /// Runs one long-lived command with its stdin fed from `stdin` (closed
    /// when the sender is dropped) and its stdout and stderr sent on `out`
    /// as they arrive, under the sandbox's limits, like [`Sandbox::exec`]:
    /// an MCP server that `agent mcp-gateway` wraps. A slow reader of `out`
    /// slows the command down (its pipe fills). `cancel` or `req.timeout`
    /// kills its whole process group; the call returns when it is gone.
    /// A backend that cannot connect a stdin refuses, naming itself.
    async fn exec_interactive(
        &self,
        req: ExecRequest,
        stdin: mpsc::Receiver<Bytes>,
        out: mpsc::Sender<Output>,
        cancel: CancellationToken,
    ) -> Result<ExecOutcome, SandboxError> {
        let _ = (req, stdin, out, cancel);
        Err(SandboxError::Refused(
            "this sandbox backend cannot run a long-lived process with its stdin connected"
                .to_string(),
        ))
    }

    /// A pidfd of a process in the sandbox's network namespace (its init),
    /// for the supervisor to enter it ([`egress`]). A backend that cannot
    /// reach into its sandbox's namespace refuses, naming why.
    fn netns_pidfd(&self) -> Result<std::os::fd::OwnedFd, SandboxError> {
        Err(SandboxError::Refused(
            "this sandbox backend cannot forward connections into its sandbox".to_string(),
        ))
    }

    /// Opens a TCP listener on `addr` inside the sandbox's network namespace
    /// ([`egress`]): the supervisor's end of one forwarded host and port.
    fn egress_listener(
        &self,
        addr: std::net::SocketAddr,
    ) -> Result<std::net::TcpListener, SandboxError> {
        egress::listen_in(self.netns_pidfd()?, addr)
    }

    /// Serves the network wall in the sandbox's namespace ([`wall`]): the
    /// route, the rules and the listeners, whose sockets the supervisor
    /// then serves. Called once, before the sandbox's first command.
    fn network_wall(&self) -> Result<WallSockets, SandboxError> {
        egress::wall_in(self.netns_pidfd()?)
    }

    /// Kills everything in the sandbox now (the kill switch). Idempotent and
    /// synchronous in effect: when it returns, no process of the sandbox runs.
    async fn destroy(&self) -> Result<(), SandboxError>;

    /// False once the sandbox is gone (destroyed, or killed from outside).
    fn is_alive(&self) -> bool;

    /// The shell command lines run in: bash when this sandbox has it.
    fn shell(&self) -> Shell;
}

/// One line of `supervisorctl doctor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoctorCheck {
    pub name: String,
    pub status: CheckStatus,
    pub detail: String,
    pub hint: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckStatus {
    Ok,
    Warn,
    Fail,
}

impl CheckStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckStatus::Ok => "ok",
            CheckStatus::Warn => "warn",
            CheckStatus::Fail => "fail",
        }
    }
}
