//! tollgate-config: the supervisor's TOML config (docs/INTERFACES.md
//! "Supervisor config"), read by the supervisor and by `supervisorctl`
//! (`policy test`, `doctor`, `bench`) without linking the daemon.
//!
//! Every section uses `deny_unknown_fields`, so a typo is an error that names
//! the line, never a silently ignored setting. Defaults apply where the file
//! (or a key) is absent. It reads the file it is given and the `policy.d/`
//! drop-ins beside it ([`dropins`]), nothing else: it must never start, bind
//! or probe anything (that is the daemon's job),
//! so supervisorctl can load the same config without side effects.

#![forbid(unsafe_code)]

pub mod dropins;
pub mod reference;
pub mod secrets;
mod telemetry;

use std::path::{Path, PathBuf};

use serde::Deserialize;
use tollgate_audit::SyncMode;
use tollgate_policy::host_exec::GitDirMode;
use tollgate_policy::network::{NetworkConfig, NetworkPolicy};
use tollgate_policy::{Mode, ModeCap, PolicyConfig};

pub use secrets::{SecretConfig, SecretSource};
pub use telemetry::TelemetrySection;

/// Default config path (docs/INTERFACES.md).
pub const DEFAULT_CONFIG: &str = "/etc/tollgate/supervisor.toml";
pub const DEFAULT_STATE_DIR: &str = "/run/tollgate";
pub const DEFAULT_AUDIT_DIR: &str = "/var/log/tollgate";
/// The largest `[audit] reserve_mb` accepted (a typo of a few zeros would
/// otherwise take a disk's worth of space).
const MAX_RESERVE_MB: u64 = 4096;

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub supervisor: SupervisorSection,
    #[serde(default)]
    pub sandbox: SandboxSection,
    #[serde(default)]
    pub audit: AuditSection,
    #[serde(default)]
    pub session: SessionSection,
    #[serde(default)]
    pub llm: LlmSection,
    #[serde(default)]
    pub policy: PolicyConfig,
    #[serde(default)]
    pub clients: ClientsSection,
    /// OpenTelemetry export, off unless an endpoint is set.
    #[serde(default)]
    pub telemetry: TelemetrySection,
    /// Which hosts sandboxed commands may reach through the supervisor
    /// (docs/INTERFACES.md "[network]"); absent: no network at all.
    #[serde(default)]
    pub network: Option<NetworkConfig>,
    /// The supervisor's own diagnostics on stderr or the journal.
    #[serde(default)]
    pub log: LogSection,
    /// Secrets sandboxes can use but never read (docs/INTERFACES.md
    /// "[[secrets]]").
    #[serde(default)]
    pub secrets: Vec<SecretConfig>,
    /// The `policy.d/` drop-ins merged into `policy`, in the order merged.
    #[serde(skip)]
    pub policy_sources: Vec<dropins::PolicySource>,
    /// The config file's own `[policy]`, before the drop-ins were merged.
    #[serde(skip)]
    pub policy_own: PolicyConfig,
}

/// `[log]`: how much the supervisor says on stderr (or the journal).
/// `level` absent: lifecycle events (start, ready, reload, session
/// open/close, revoke) at info, everything else at warn
/// (docs/OPERATIONS.md "Logs"). `RUST_LOG`, when set, wins.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LogSection {
    pub level: Option<LogLevel>,
}

/// A `[log] level`.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    Error,
    Warn,
    Info,
    Debug,
    Trace,
}

impl LogLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        }
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SupervisorSection {
    pub state_dir: PathBuf,
    /// Group whose members may use operator.sock (mode 0660 then).
    pub operator_group: Option<String>,
    pub max_sessions_per_uid: u32,
    /// Connections one uid may hold open on agent.sock at once; more are
    /// refused at once.
    pub max_connections_per_uid: u32,
    /// An agent.sock connection with no request in flight for this long is
    /// closed (a long streaming call, an approval wait or a long run_bash,
    /// is in flight, not idle).
    pub idle_connection_timeout_s: u64,
    /// File descriptors agent.sock can never take: operator.sock, the audit
    /// log, sandboxes and LLM calls keep them.
    pub fd_reserve: u64,
}

impl Default for SupervisorSection {
    fn default() -> Self {
        SupervisorSection {
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
            operator_group: None,
            max_sessions_per_uid: 16,
            max_connections_per_uid: 64,
            idle_connection_timeout_s: 5,
            fd_reserve: 256,
        }
    }
}

/// `[sandbox] backend`, and `supervisor --sandbox` / `supervisorctl sandbox
/// exec --backend` (parsed by clap: a bad value is an error naming the
/// choices, never a silent default).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum BackendChoice {
    Native,
    Docker,
}

impl BackendChoice {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendChoice::Native => "native",
            BackendChoice::Docker => "docker",
        }
    }

    /// The backend that is not this one.
    pub fn other(self) -> BackendChoice {
        match self {
            BackendChoice::Native => BackendChoice::Docker,
            BackendChoice::Docker => BackendChoice::Native,
        }
    }

    pub fn parse(s: &str) -> Result<BackendChoice, String> {
        match s {
            "native" => Ok(BackendChoice::Native),
            "docker" => Ok(BackendChoice::Docker),
            other => Err(format!(
                "unknown sandbox backend {other:?} (expected native or docker)"
            )),
        }
    }
}

/// `[sandbox] image = "devcontainer"`.
pub const DEVCONTAINER_IMAGE: &str = "devcontainer";

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxSection {
    pub backend: BackendChoice,
    /// Docker image; empty means the backend's default tag;
    /// [`DEVCONTAINER_IMAGE`]: the one the workspace's
    /// `.devcontainer/devcontainer.json` names, when usable, else the
    /// default tag.
    pub image: String,
    pub memory_mb: u64,
    pub pids: u64,
    pub cpus: f64,
    pub run_timeout_s: u64,
    pub max_run_timeout_s: u64,
    /// Size of each sandbox's private /tmp.
    pub tmp_mb: u64,
    /// Largest file a sandboxed command may write (RLIMIT_FSIZE).
    pub fsize_mb: u64,
    /// Docker engine socket; empty (the default): found as the docker CLI
    /// finds it (`DOCKER_HOST`, the Docker context, /var/run/docker.sock).
    pub docker_socket: PathBuf,
    /// Free space (MiB) a workspace's filesystem must keep: below it the
    /// session's running commands are stopped and new commands and file
    /// writes refused. 0 turns the floor off.
    pub min_free_mb: u64,
    /// The Docker backend's resident exec agent (a static
    /// `tollgate-exec-agent`); empty means the one next to the supervisor's
    /// own executable.
    pub docker_exec_agent: PathBuf,
    /// How the workspace's git directories are attached: `"read-only"`
    /// (all of it) or `"split"` (what the host's git obeys read-only, the
    /// rest writable; docs/THREAT_MODEL.md).
    #[serde(deserialize_with = "git_dir_mode")]
    pub git_dir: GitDirMode,
    /// The owner's toolchain directories shown read-only in the sandbox,
    /// relative to the owner's home (docs/INTERFACES.md); an entry that
    /// names a credential path or a path the host runs by itself is an
    /// error. Empty: none.
    pub toolchain_dirs: Vec<String>,
    /// Whether the native sandbox's refusals are attributed from the
    /// kernel's audit records (docs/THREAT_MODEL.md, "Refusals,
    /// attributed"): `"auto"` (when the kernel's audit is on; never
    /// changes it), `"on"` (also turn it on, and raise its backlog limit),
    /// `"off"`.
    pub attribute_refusals: AttributeRefusals,
    /// Where the package caches live (docs/OPERATIONS.md "Package caches"):
    /// `"owner"` (one per owner, shared by their sessions in every
    /// workspace), `"workspace"` (one per owner and workspace), `"off"`
    /// (the session's private home, emptied when it ends).
    pub cache: CacheMode,
    /// The most one cache may hold (MiB); over it, the oldest files are
    /// removed when a session's sandbox is built. 0: no cap.
    pub cache_max_mb: u64,
    /// The directory the caches are kept in; empty: `caches` beneath the
    /// state directory.
    pub cache_dir: PathBuf,
}

/// `[sandbox] cache`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum CacheMode {
    #[default]
    Owner,
    Workspace,
    Off,
}

impl CacheMode {
    pub fn as_str(self) -> &'static str {
        match self {
            CacheMode::Owner => "owner",
            CacheMode::Workspace => "workspace",
            CacheMode::Off => "off",
        }
    }
}

/// `[sandbox] attribute_refusals`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum AttributeRefusals {
    #[default]
    Auto,
    On,
    Off,
}

/// `[sandbox] git_dir`: a bad value is an error naming the key.
fn git_dir_mode<'de, D: serde::Deserializer<'de>>(d: D) -> Result<GitDirMode, D::Error> {
    let s = String::deserialize(d)?;
    GitDirMode::parse(&s).map_err(serde::de::Error::custom)
}

impl SandboxSection {
    /// Whether the workspace's devcontainer.json may name the image.
    pub fn image_from_devcontainer(&self) -> bool {
        self.image == DEVCONTAINER_IMAGE
    }

    /// The image every sandbox uses when none is named per session: empty
    /// for the backend's default tag.
    pub fn fixed_image(&self) -> &str {
        if self.image_from_devcontainer() {
            ""
        } else {
            &self.image
        }
    }
}

impl Default for SandboxSection {
    fn default() -> Self {
        SandboxSection {
            backend: BackendChoice::Native,
            image: String::new(),
            memory_mb: 2048,
            pids: 256,
            cpus: 1.0,
            run_timeout_s: 120,
            max_run_timeout_s: 600,
            tmp_mb: 256,
            fsize_mb: 1024,
            docker_socket: PathBuf::new(),
            min_free_mb: 256,
            docker_exec_agent: PathBuf::new(),
            git_dir: GitDirMode::ReadOnly,
            toolchain_dirs: tollgate_policy::sandbox_env::DEFAULT_TOOLCHAIN_DIRS
                .iter()
                .map(|s| s.to_string())
                .collect(),
            attribute_refusals: AttributeRefusals::Auto,
            cache: CacheMode::Owner,
            cache_max_mb: 2048,
            cache_dir: PathBuf::new(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AuditSection {
    pub dir: PathBuf,
    pub sync: SyncMode,
    /// Space (MiB) held back in the audit directory for refusals,
    /// revocations, anchors and shutdown when the disk fills. 0: none.
    pub reserve_mb: u64,
}

impl Default for AuditSection {
    fn default() -> Self {
        AuditSection {
            dir: PathBuf::from(DEFAULT_AUDIT_DIR),
            sync: SyncMode::Always,
            reserve_mb: 16,
        }
    }
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SessionSection {
    pub default_mode: Mode,
    /// The most permissive mode a session may ask for.
    pub max_mode: Mode,
    pub allow_dangerously_skip: bool,
    /// Whether the agent's own terminal may decide its session's approvals.
    pub session_can_approve: bool,
    pub approval_timeout_s: u64,
    /// Approve the non-destructive ask tier automatically (unattended runs).
    pub auto_approve: bool,
    pub max_tool_calls: u32,
    pub token_ttl_s: u64,
    pub output_cap_bytes: usize,
    /// webfetch: largest body read, and the per-fetch timeout.
    pub fetch_max_bytes: usize,
    pub fetch_timeout_s: u64,
}

impl Default for SessionSection {
    fn default() -> Self {
        SessionSection {
            default_mode: Mode::Default,
            max_mode: Mode::DangerouslySkipPermissions,
            allow_dangerously_skip: true,
            session_can_approve: true,
            approval_timeout_s: 300,
            auto_approve: false,
            max_tool_calls: 200,
            token_ttl_s: 900,
            output_cap_bytes: 32 * 1024,
            fetch_max_bytes: 1024 * 1024,
            fetch_timeout_s: 30,
        }
    }
}

/// `[clients]`: Claude Code and Codex behind `agent hook`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ClientsSection {
    /// Run the clients' shell tool (Bash) through run_bash in the session's
    /// sandbox. Off: decisions only, and an allowed command runs in the
    /// client's own process as the user.
    pub route_shell: bool,
    /// The mode of a client's session; absent: `[session] default_mode`.
    pub mode: Option<Mode>,
    /// Close a client's session after this long without an event.
    pub idle_timeout_s: u64,
}

impl Default for ClientsSection {
    fn default() -> Self {
        ClientsSection {
            route_shell: true,
            mode: None,
            idle_timeout_s: 3600,
        }
    }
}

impl ClientsSection {
    /// The mode a client's session runs in.
    pub fn mode(&self, session: &SessionSection) -> Mode {
        self.mode.unwrap_or(session.default_mode)
    }
}

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ProviderChoice {
    Openai,
    Script,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LlmSection {
    pub provider: ProviderChoice,
    /// OpenAI-compatible base URL, e.g. `http://127.0.0.1:11434/v1`.
    pub base_url: String,
    /// Name of the environment variable holding the API key. The key stays in
    /// the supervisor; it never reaches the agent.
    pub api_key_env: String,
    /// A file holding the API key: owned by the supervisor's uid, a regular
    /// file no one else may read (checked at start).
    pub api_key_file: Option<PathBuf>,
    /// The name of a systemd credential (`LoadCredential=NAME:…`) holding
    /// the key, read from `$CREDENTIALS_DIRECTORY/NAME`.
    pub api_key_credential: String,
    pub model: String,
    pub timeout_s: u64,
    pub max_cost_usd: f64,
    pub price_in_per_1k: f64,
    pub price_out_per_1k: f64,
    /// For provider "script": a JSON array of assistant turns.
    pub script: Option<PathBuf>,
    /// Largest provider response body accepted.
    pub max_response_bytes: usize,
    /// The HTTP(S) proxy the provider is reached through
    /// (`http://proxy.internal:3128`); absent: none. The environment's
    /// `HTTP_PROXY`/`HTTPS_PROXY` are never used (docs/OPERATIONS.md "The
    /// LLM key and its network").
    pub proxy: Option<String>,
    /// Times a call answered 429 or 5xx is tried again (0: never).
    pub retries: u32,
    /// The longest wait before a retry: a `Retry-After` asking for longer
    /// ends the call instead.
    pub max_retry_wait_s: u64,
}

impl LlmSection {
    /// The section's own checks at load.
    fn check(&self) -> Result<(), String> {
        let l = self;
        let negative_or_nan = |x: f64| x.is_nan() || x < 0.0;
        if negative_or_nan(l.max_cost_usd)
            || negative_or_nan(l.price_in_per_1k)
            || negative_or_nan(l.price_out_per_1k)
        {
            return Err("[llm] max_cost_usd and prices must be >= 0".to_string());
        }
        let sources = [
            !l.api_key_env.is_empty(),
            l.api_key_file.is_some(),
            !l.api_key_credential.is_empty(),
        ];
        if sources.iter().filter(|x| **x).count() > 1 {
            return Err(
                "[llm] set at most one of api_key_env, api_key_file and api_key_credential"
                    .to_string(),
            );
        }
        if l.api_key_file.as_deref().is_some_and(|p| !p.is_absolute())
            || l.api_key_credential.contains('/')
        {
            return Err(
                "[llm] api_key_file must be an absolute path and api_key_credential a bare name"
                    .to_string(),
            );
        }
        if let Some(p) = &l.proxy {
            check_proxy(p)?;
        }
        if l.retries > 10 || l.max_retry_wait_s > 600 {
            return Err(
                "[llm] retries must be at most 10 and max_retry_wait_s at most 600".to_string(),
            );
        }
        if l.provider == ProviderChoice::Openai && l.base_url.is_empty() {
            return Err("[llm] provider \"openai\" needs base_url".to_string());
        }
        Ok(())
    }
}

impl Default for LlmSection {
    fn default() -> Self {
        LlmSection {
            provider: ProviderChoice::Script,
            base_url: String::new(),
            api_key_env: String::new(),
            api_key_file: None,
            api_key_credential: String::new(),
            model: String::new(),
            timeout_s: 120,
            max_cost_usd: 5.0,
            price_in_per_1k: 0.0,
            price_out_per_1k: 0.0,
            script: None,
            max_response_bytes: 8 * 1024 * 1024,
            proxy: None,
            retries: 2,
            max_retry_wait_s: 30,
        }
    }
}

/// `[llm] proxy`: an `http://` or `https://` URL naming a host.
fn check_proxy(p: &str) -> Result<(), String> {
    let u = url::Url::parse(p).map_err(|e| format!("[llm] proxy {p:?}: {e}"))?;
    if !matches!(u.scheme(), "http" | "https") || u.host_str().is_none() {
        return Err(format!(
            "[llm] proxy {p:?} must be http://HOST[:PORT] or https://HOST[:PORT]"
        ));
    }
    Ok(())
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// toml's message already names the line and column and quotes it.
    #[error("config {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("config {path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

impl Config {
    /// Parses config text. `path` is only used in messages.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })?;
        config.validate(path)?;
        Ok(config)
    }

    /// Loads `path`. When `path` is the default location and absent, the
    /// built-in defaults apply; an explicitly named file must exist.
    /// Then merges `policy.d/*.toml` beside it ([`dropins`]).
    pub fn load(path: &Path, explicit: bool) -> Result<Config, ConfigError> {
        let mut config = match std::fs::read_to_string(path) {
            Ok(text) => Config::parse(&text, path)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => Config::default(),
            Err(source) => {
                return Err(ConfigError::Read {
                    path: path.to_path_buf(),
                    source,
                });
            }
        };
        config.policy_sources = dropins::read(&dropins::dir_for(path))?;
        config.policy_own = config.policy.clone();
        for s in &config.policy_sources {
            dropins::merge(&mut config.policy, &s.policy);
        }
        Ok(config)
    }

    fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            path: path.to_path_buf(),
            message,
        };
        let sv = &self.supervisor;
        if sv.max_connections_per_uid == 0 || sv.idle_connection_timeout_s == 0 {
            return Err(invalid(
                "[supervisor] max_connections_per_uid and idle_connection_timeout_s must be > 0"
                    .to_string(),
            ));
        }
        let s = &self.session;
        if s.default_mode > s.max_mode {
            return Err(invalid(format!(
                "[session] default_mode {} is more permissive than max_mode {}",
                s.default_mode, s.max_mode
            )));
        }
        if s.default_mode == Mode::DangerouslySkipPermissions && !s.allow_dangerously_skip {
            return Err(invalid(
                "[session] default_mode dangerouslySkipPermissions while allow_dangerously_skip = false"
                    .to_string(),
            ));
        }
        if s.token_ttl_s == 0 || s.approval_timeout_s == 0 || s.output_cap_bytes == 0 {
            return Err(invalid(
                "[session] token_ttl_s, approval_timeout_s and output_cap_bytes must be > 0"
                    .to_string(),
            ));
        }
        let sb = &self.sandbox;
        if sb.run_timeout_s == 0 || sb.run_timeout_s > sb.max_run_timeout_s {
            return Err(invalid(format!(
                "[sandbox] run_timeout_s ({}) must be > 0 and <= max_run_timeout_s ({})",
                sb.run_timeout_s, sb.max_run_timeout_s
            )));
        }
        if let Some(why) = sb
            .toolchain_dirs
            .iter()
            .find_map(|d| tollgate_policy::sandbox_env::toolchain_refusal(d))
        {
            return Err(invalid(format!(
                "[sandbox] toolchain_dirs: {why}; list only the toolchains' own directories"
            )));
        }
        if !sb.cache_dir.as_os_str().is_empty() && !sb.cache_dir.is_absolute() {
            return Err(invalid(format!(
                "[sandbox] cache_dir {} must be an absolute path",
                sb.cache_dir.display()
            )));
        }
        if sb.cpus.is_nan()
            || sb.cpus <= 0.0
            || sb.memory_mb == 0
            || sb.pids == 0
            || sb.tmp_mb == 0
            || sb.fsize_mb == 0
        {
            return Err(invalid(
                "[sandbox] cpus, memory_mb, pids, tmp_mb and fsize_mb must be > 0".to_string(),
            ));
        }
        if self.audit.reserve_mb > MAX_RESERVE_MB {
            return Err(invalid(format!(
                "[audit] reserve_mb ({}) is more than {MAX_RESERVE_MB}; 8 to 64 is plenty",
                self.audit.reserve_mb
            )));
        }
        let c = &self.clients;
        if c.idle_timeout_s == 0 {
            return Err(invalid("[clients] idle_timeout_s must be > 0".to_string()));
        }
        if let Err(e) = self.mode_permitted(c.mode(s)) {
            return Err(invalid(format!("[clients] mode: {e}")));
        }
        self.llm.check().map_err(invalid)?;
        self.telemetry.check().map_err(invalid)?;
        self.network_policy().map_err(invalid)?;
        secrets::check(&self.secrets).map_err(invalid)?;
        Ok(())
    }

    /// `[network]`, parsed; `None` when the section is absent (sandboxes
    /// then have no network at all).
    pub fn network_policy(&self) -> Result<Option<NetworkPolicy>, String> {
        self.network
            .as_ref()
            .map(NetworkPolicy::from_config)
            .transpose()
    }

    /// The config's cap on the modes a session may ask for.
    pub fn mode_cap(&self) -> ModeCap {
        ModeCap {
            max: self.session.max_mode,
            allow_dangerously_skip: self.session.allow_dangerously_skip,
        }
    }

    /// Whether a session may use `mode` under this config.
    pub fn mode_permitted(&self, mode: Mode) -> Result<(), String> {
        self.mode_cap()
            .check(mode)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_config_is_the_defaults() {
        let c = Config::parse("", Path::new("x.toml")).unwrap();
        assert_eq!(c, Config::default());
    }

    #[test]
    fn a_typo_names_the_line() {
        let text = "[session]\ndefault_mode = \"default\"\nauto_aprove = true\n";
        let err = Config::parse(text, Path::new("x.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 3"), "{err}");
        assert!(err.contains("auto_aprove"), "{err}");
    }

    #[test]
    fn unknown_section_is_refused() {
        let err = Config::parse("[sesion]\n", Path::new("x.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 1"), "{err}");
    }

    #[test]
    fn max_mode_caps_modes() {
        let c = Config::parse(
            "[session]\nmax_mode = \"acceptEdits\"\n",
            Path::new("x.toml"),
        )
        .unwrap();
        assert!(c.mode_permitted(Mode::AcceptEdits).is_ok());
        assert!(c.mode_permitted(Mode::DangerouslySkipPermissions).is_err());
    }

    #[test]
    fn skip_can_be_forbidden() {
        let c = Config::parse(
            "[session]\nallow_dangerously_skip = false\n",
            Path::new("x.toml"),
        )
        .unwrap();
        let err = c
            .mode_permitted(Mode::DangerouslySkipPermissions)
            .unwrap_err();
        assert!(err.contains("forbids"), "{err}");
    }

    /// `[sandbox] cache`: per owner by default, with a cap; "workspace" and
    /// "off" on request; any other value refused naming the key.
    #[test]
    fn caches_are_per_owner_unless_asked_otherwise() {
        let p = Path::new("x.toml");
        let c = Config::parse("", p).unwrap();
        assert_eq!(
            (c.sandbox.cache, c.sandbox.cache_max_mb, c.sandbox.cache_dir),
            (CacheMode::Owner, 2048, PathBuf::new())
        );
        for (text, want) in [
            ("owner", CacheMode::Owner),
            ("workspace", CacheMode::Workspace),
            ("off", CacheMode::Off),
        ] {
            let c = Config::parse(
                &format!("[sandbox]\ncache = \"{text}\"\ncache_max_mb = 7\ncache_dir = \"/c\"\n"),
                p,
            )
            .unwrap();
            assert_eq!(
                (c.sandbox.cache, c.sandbox.cache_max_mb, c.sandbox.cache_dir),
                (want, 7, PathBuf::from("/c")),
                "{text}"
            );
            assert_eq!(want.as_str(), text);
        }
        for bad in ["\"shared\"", "\"Owner\"", "true"] {
            let err = Config::parse(&format!("[sandbox]\ncache = {bad}\n"), p).unwrap_err();
            assert!(err.to_string().contains("cache"), "{bad}: {err}");
        }
        let err = Config::parse("[sandbox]\ncache_dir = \"rel\"\n", p).unwrap_err();
        assert!(
            err.to_string()
                .contains("cache_dir rel must be an absolute path"),
            "{err}"
        );
    }

    /// `[sandbox] git_dir`: read-only by default, "split" on request, and
    /// any other value refused naming the key. (That "split" reaches the
    /// sandbox through the daemon is the e2e `suite::git_routed`, whose
    /// commit fails under the default.)
    #[test]
    fn git_dir_is_read_only_unless_split_is_asked_for() {
        let p = Path::new("x.toml");
        assert_eq!(
            Config::parse("", p).unwrap().sandbox.git_dir,
            GitDirMode::ReadOnly
        );
        for (text, want) in [
            ("read-only", GitDirMode::ReadOnly),
            ("split", GitDirMode::Split),
        ] {
            let c = Config::parse(&format!("[sandbox]\ngit_dir = \"{text}\"\n"), p).unwrap();
            assert_eq!(c.sandbox.git_dir, want, "{text}");
            assert_eq!(want.as_str(), text);
        }
        for bad in ["\"writable\"", "\"Split\"", "true"] {
            let err = Config::parse(&format!("[sandbox]\ngit_dir = {bad}\n"), p)
                .unwrap_err()
                .to_string();
            assert!(err.contains("git_dir"), "{bad}: {err}");
        }
    }

    /// (That the sizes reach the sandbox's limits is the daemon's
    /// `backends::tests::sandbox_sizes_reach_the_limits`.)
    #[test]
    fn sandbox_sizes_of_zero_are_refused() {
        let c = Config::parse(
            "[sandbox]\ntmp_mb = 32\nfsize_mb = 64\n",
            Path::new("x.toml"),
        )
        .unwrap();
        assert_eq!((c.sandbox.tmp_mb, c.sandbox.fsize_mb), (32, 64));
        for key in ["tmp_mb", "fsize_mb", "memory_mb", "pids"] {
            let err = Config::parse(&format!("[sandbox]\n{key} = 0\n"), Path::new("x.toml"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(key), "{key}: {err}");
        }
    }

    #[test]
    fn connection_bounds_have_defaults_and_zero_is_refused() {
        let c = Config::parse(
            "[supervisor]\nmax_connections_per_uid = 8\nidle_connection_timeout_s = 2\nfd_reserve = 64\n",
            Path::new("x.toml"),
        )
        .unwrap();
        assert_eq!(
            (
                c.supervisor.max_connections_per_uid,
                c.supervisor.idle_connection_timeout_s,
                c.supervisor.fd_reserve
            ),
            (8, 2, 64)
        );
        let d = Config::default().supervisor;
        assert_eq!(
            (
                d.max_connections_per_uid,
                d.idle_connection_timeout_s,
                d.fd_reserve
            ),
            (64, 5, 256)
        );
        for key in ["max_connections_per_uid", "idle_connection_timeout_s"] {
            let err = Config::parse(&format!("[supervisor]\n{key} = 0\n"), Path::new("x.toml"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(key), "{key}: {err}");
        }
    }

    #[test]
    fn the_disk_floor_and_the_audit_reserve_are_configurable() {
        let d = Config::default();
        assert_eq!((d.sandbox.min_free_mb, d.audit.reserve_mb), (256, 16));
        let c = Config::parse(
            "[sandbox]\nmin_free_mb = 0\n[audit]\nreserve_mb = 0\n",
            Path::new("x.toml"),
        )
        .unwrap();
        assert_eq!((c.sandbox.min_free_mb, c.audit.reserve_mb), (0, 0));
        let err = Config::parse("[audit]\nreserve_mb = 100000\n", Path::new("x.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("reserve_mb"), "{err}");
    }

    #[test]
    fn clients_route_the_shell_by_default_and_their_mode_is_capped() {
        let c = Config::parse("", Path::new("x.toml")).unwrap();
        assert!(c.clients.route_shell);
        assert_eq!(c.clients.mode(&c.session), Mode::Default);
        let c = Config::parse(
            "[clients]\nroute_shell = false\nmode = \"acceptEdits\"\nidle_timeout_s = 60\n",
            Path::new("x.toml"),
        )
        .unwrap();
        assert!(!c.clients.route_shell);
        assert_eq!(c.clients.mode(&c.session), Mode::AcceptEdits);
        let err = Config::parse(
            "[session]\nallow_dangerously_skip = false\n[clients]\nmode = \"dangerouslySkipPermissions\"\n",
            Path::new("x.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("[clients] mode"), "{err}");
        let err = Config::parse("[clients]\nroute_shel = true\n", Path::new("x.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("route_shel"), "{err}");
    }

    #[test]
    fn the_network_section_is_parsed_and_its_errors_name_the_key() {
        assert_eq!(Config::default().network_policy(), Ok(None));
        let c = Config::parse(
            "[network]\nallow = [\"example.org\", \"*.example.org\", \"git.example.net:22\"]\ndeny = [\"upload.example.org\"]\nunlisted = \"ask\"\nallow_private = [\"10.20.0.0/16\"]\n",
            Path::new("x.toml"),
        )
        .unwrap();
        let p = c.network_policy().unwrap().unwrap();
        assert_eq!(p.unlisted(), tollgate_policy::network::Unlisted::Ask);
        for (text, key) in [
            ("[network]\nallow = [\"*.com\"]\n", "[network] allow[0]"),
            ("[network]\ndeny = [\"a\", \"b:0\"]\n", "[network] deny[1]"),
            (
                "[network]\nallow_private = [\"127.0.0.0/8\"]\n",
                "[network] allow_private[0]",
            ),
            ("[network]\nunlisted = \"allow\"\n", "unlisted"),
            ("[network]\nalow = []\n", "alow"),
        ] {
            let err = Config::parse(text, Path::new("x.toml"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(key), "{text}: {err}");
        }
    }

    #[test]
    fn the_log_level_is_optional_and_checked() {
        assert_eq!(Config::default().log.level, None);
        let c = Config::parse("[log]\nlevel = \"debug\"\n", Path::new("x.toml")).unwrap();
        assert_eq!(c.log.level, Some(LogLevel::Debug));
        let err = Config::parse("[log]\nlevel = \"loud\"\n", Path::new("x.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 2"), "{err}");
    }

    #[test]
    fn policy_drop_ins_merge_in_name_order_as_unions() {
        let t = tempfile::tempdir().unwrap();
        let main = t.path().join("supervisor.toml");
        std::fs::write(&main, "[policy]\ndeny = [\"run_bash(rm *)\"]\n").unwrap();
        let d = t.path().join("policy.d");
        std::fs::create_dir(&d).unwrap();
        std::fs::write(
            d.join("20-team.toml"),
            "[policy]\ndeny = [\"run_bash(rm *)\", \"run_bash(curl *)\"]\nallow = [\"run_bash(make*)\"]\n",
        )
        .unwrap();
        std::fs::write(
            d.join("10-site.toml"),
            "[policy]\nask = [\"run_bash(git push*)\"]\nallow = [\"run_bash(cargo*)\"]\n",
        )
        .unwrap();
        std::fs::write(d.join("README"), "not a drop-in").unwrap();
        let c = Config::load(&main, true).unwrap();
        let rules = |l: &[tollgate_policy::RuleSpec]| {
            l.iter().map(|r| r.rule().to_string()).collect::<Vec<_>>()
        };
        assert_eq!(
            rules(&c.policy.deny),
            ["run_bash(rm *)", "run_bash(curl *)"]
        );
        assert_eq!(
            rules(&c.policy.allow),
            ["run_bash(cargo*)", "run_bash(make*)"]
        );
        assert_eq!(rules(&c.policy.ask), ["run_bash(git push*)"]);
        let curl = &c.policy.deny[1];
        assert_eq!(
            dropins::rule_file(&c.policy_own, &c.policy_sources, curl),
            Some(d.join("20-team.toml").as_path())
        );
        // A rule the config file has is the config file's (None), though a
        // drop-in repeats it.
        assert_eq!(
            dropins::rule_file(&c.policy_own, &c.policy_sources, &c.policy.deny[0]),
            None
        );
        let labels: Vec<(String, String)> =
            dropins::rule_files(&c.policy_own, &c.policy_sources, &c.policy)
                .into_iter()
                .map(|(l, p)| (l, p.file_name().unwrap().to_string_lossy().into_owned()))
                .collect();
        let pair = |l: &str, f: &str| (l.to_string(), f.to_string());
        assert_eq!(
            labels,
            [
                pair("allow: run_bash(cargo*)", "10-site.toml"),
                pair("allow: run_bash(make*)", "20-team.toml"),
                pair("ask: run_bash(git push*)", "10-site.toml"),
                pair("deny: run_bash(curl *)", "20-team.toml"),
            ]
        );
        let names: Vec<_> = c
            .policy_sources
            .iter()
            .map(|s| s.path.file_name().unwrap().to_owned())
            .collect();
        assert_eq!(names, ["10-site.toml", "20-team.toml"]);
        // A typo in a drop-in names that file and its line; other sections are refused.
        std::fs::write(d.join("30-bad.toml"), "[policy]\nallow = []\ndenny = []\n").unwrap();
        let err = Config::load(&main, true).unwrap_err().to_string();
        assert!(
            err.contains("30-bad.toml") && err.contains("line 3"),
            "{err}"
        );
        std::fs::write(d.join("30-bad.toml"), "[session]\nauto_approve = true\n").unwrap();
        let err = Config::load(&main, true).unwrap_err().to_string();
        assert!(err.contains("30-bad.toml"), "{err}");
    }

    #[test]
    fn shipped_examples_load() {
        for name in ["workstation.toml", "build-host.toml"] {
            let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../examples")
                .join(name);
            let text = std::fs::read_to_string(&path).unwrap();
            Config::parse(&text, &path).unwrap();
        }
    }
}
