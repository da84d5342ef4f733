//! The sandbox backends this supervisor can use: the configured one, plus the
//! other one built on demand for `supervisorctl sandbox exec --backend`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::OnceCell;
use tollgate_sandbox::docker::{OnReaped, Reconnecting};
use tollgate_sandbox::{Backend, Limits, Reaped, SandboxError, SandboxSpec, WorkspaceId};

use crate::supervisor::Supervisor;
use tollgate_config::{BackendChoice, Config};
use tollgate_policy::host::PasswdEntry;

/// How to build each backend.
#[derive(Clone)]
pub struct BackendSettings {
    pub helper_exe: PathBuf,
    pub state_dir: PathBuf,
    pub audit_dir: PathBuf,
    pub docker_socket: PathBuf,
    pub image: String,
    /// The Docker backend's exec agent; empty: next to the supervisor.
    pub docker_exec_agent: PathBuf,
    /// Records containers a crashed predecessor left, when the Docker
    /// engine is first reached after start.
    pub on_reaped: OnReaped,
}

impl BackendSettings {
    /// What `config` says (the supervisor's own executable is the native
    /// sandbox's helper).
    pub fn of(
        config: &Config,
        state_dir: &Path,
        audit_dir: &Path,
        on_reaped: OnReaped,
    ) -> anyhow::Result<BackendSettings> {
        use anyhow::Context as _;
        Ok(BackendSettings {
            helper_exe: std::env::current_exe()
                .context("cannot find the supervisor's own executable")?,
            state_dir: state_dir.to_path_buf(),
            audit_dir: audit_dir.to_path_buf(),
            docker_socket: config.sandbox.docker_socket.clone(),
            image: config.sandbox.fixed_image().to_string(),
            on_reaped,
            docker_exec_agent: config.sandbox.docker_exec_agent.clone(),
        })
    }

    /// The Docker backend's config: the engine socket, the image and the
    /// exec agent these settings name, the defaults for the rest.
    pub fn docker_config(&self) -> tollgate_sandbox::docker::DockerConfig {
        let mut cfg = tollgate_sandbox::docker::DockerConfig::new(
            self.state_dir.clone(),
            self.audit_dir.clone(),
        );
        cfg.socket = self.docker_socket.clone();
        if !self.image.is_empty() {
            cfg.image = self.image.clone();
        }
        if !self.docker_exec_agent.as_os_str().is_empty() {
            cfg.exec_agent = self.docker_exec_agent.clone();
        }
        cfg
    }
}

impl std::fmt::Debug for BackendSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackendSettings")
            .field("helper_exe", &self.helper_exe)
            .field("state_dir", &self.state_dir)
            .field("audit_dir", &self.audit_dir)
            .field("docker_socket", &self.docker_socket)
            .field("image", &self.image)
            .finish_non_exhaustive()
    }
}

pub struct Backends {
    primary: Arc<dyn Backend>,
    primary_choice: BackendChoice,
    native: OnceCell<Arc<dyn Backend>>,
    docker: OnceCell<Arc<dyn Backend>>,
    settings: BackendSettings,
}

impl Backends {
    /// Builds the configured backend. A backend that cannot reach full
    /// strength still starts (so `status` and `doctor` can say why); every
    /// sandbox it is asked for is then refused with the reason. A Docker
    /// engine that is down is tried again when a sandbox is needed.
    pub async fn new(choice: BackendChoice, settings: BackendSettings) -> Backends {
        let primary = match build(choice, &settings).await {
            Ok(b) => b,
            Err(e) => Arc::new(Unavailable::new(choice, &e)),
        };
        let strength = primary.strength();
        if !strength.missing.is_empty() {
            tracing::warn!(
                backend = choice.as_str(),
                missing = %strength.missing.join("; "),
                "{}",
                refused_while_missing(choice)
            );
        }
        let b = Backends {
            primary: Arc::clone(&primary),
            primary_choice: choice,
            native: OnceCell::new(),
            docker: OnceCell::new(),
            settings,
        };
        match choice {
            BackendChoice::Native => {
                let _ = b.native.set(primary);
            }
            BackendChoice::Docker => {
                let _ = b.docker.set(primary);
            }
        }
        b
    }

    pub fn primary(&self) -> Arc<dyn Backend> {
        Arc::clone(&self.primary)
    }

    pub fn primary_choice(&self) -> BackendChoice {
        self.primary_choice
    }

    pub fn settings(&self) -> &BackendSettings {
        &self.settings
    }

    /// At a clean exit, after every session ended: each backend built so
    /// far removes what it set up for all its sandboxes.
    pub async fn shutdown(&self) {
        for cell in [&self.native, &self.docker] {
            if let Some(b) = cell.get() {
                b.shutdown().await;
            }
        }
        if self.native.get().is_none() && self.docker.get().is_none() {
            self.primary.shutdown().await;
        }
    }

    /// The backend for `choice`, built on first use. A backend built here
    /// (not the primary, which the start-up reaps) reaps what a crashed
    /// predecessor left with it; those are returned for the caller to record.
    pub async fn get(
        &self,
        choice: BackendChoice,
    ) -> Result<(Arc<dyn Backend>, Vec<Reaped>), SandboxError> {
        let cell = match choice {
            BackendChoice::Native => &self.native,
            BackendChoice::Docker => &self.docker,
        };
        let mut reaped = Vec::new();
        let backend = cell
            .get_or_try_init(|| async {
                let b = build(choice, &self.settings).await?;
                match b.reap_orphans().await {
                    Ok(r) => reaped = r,
                    Err(e) => tracing::warn!(backend = choice.as_str(), error = %e, "reaping orphaned sandboxes failed"),
                }
                Ok::<_, SandboxError>(b)
            })
            .await?;
        Ok((Arc::clone(backend), reaped))
    }
}

async fn build(
    choice: BackendChoice,
    s: &BackendSettings,
) -> Result<Arc<dyn Backend>, SandboxError> {
    match choice {
        BackendChoice::Native => {
            let b = tollgate_sandbox::native::NativeBackend::new(
                tollgate_sandbox::native::NativeConfig {
                    helper_exe: s.helper_exe.clone(),
                    state_dir: s.state_dir.clone(),
                },
            )?;
            Ok(Arc::new(b))
        }
        BackendChoice::Docker => {
            // Never fails: an engine that is down is tried again on demand.
            let b = Reconnecting::connect(s.docker_config(), Arc::clone(&s.on_reaped)).await;
            Ok(Arc::new(b))
        }
    }
}

/// A backend that could not be built (engine down, kernel too old): the
/// supervisor still runs, and every sandbox is refused with the reason.
pub struct Unavailable {
    kind: tollgate_sandbox::BackendKind,
    reason: String,
}

impl Unavailable {
    /// `why`'s own words become the reason: refusals say "sandbox
    /// unavailable" once, not once per layer.
    pub fn new(choice: BackendChoice, why: &SandboxError) -> Unavailable {
        let kind = match choice {
            BackendChoice::Native => tollgate_sandbox::BackendKind::Native,
            BackendChoice::Docker => tollgate_sandbox::BackendKind::Docker,
        };
        let reason = why.beside_unavailable();
        Unavailable { kind, reason }
    }
}

/// What a backend that lacks something refuses, in one sentence: only
/// what needs a sandbox (sessions open, and the file tools and webfetch work).
pub fn refused_while_missing(choice: BackendChoice) -> &'static str {
    match choice {
        BackendChoice::Native => {
            "run_bash and sandbox exec are refused until the native sandbox can run at full strength"
        }
        BackendChoice::Docker => {
            "run_bash and sandbox exec are refused until the docker engine can run the sandbox at full strength; each of them tries the engine again"
        }
    }
}

#[async_trait::async_trait]
impl Backend for Unavailable {
    fn kind(&self) -> tollgate_sandbox::BackendKind {
        self.kind
    }

    fn strength(&self) -> tollgate_sandbox::Strength {
        tollgate_sandbox::Strength {
            backend: self.kind,
            summary: format!("{} backend unavailable", self.kind.as_str()),
            missing: vec![self.reason.clone()],
        }
    }

    async fn create(
        &self,
        _spec: &tollgate_sandbox::SandboxSpec,
    ) -> Result<Arc<dyn tollgate_sandbox::Sandbox>, SandboxError> {
        Err(SandboxError::Unavailable(self.reason.clone()))
    }

    async fn reap_orphans(&self) -> Result<Vec<tollgate_sandbox::Reaped>, SandboxError> {
        Ok(Vec::new())
    }
}

/// Sandbox limits from the config.
pub fn limits(config: &Config) -> Limits {
    let s = &config.sandbox;
    Limits {
        memory_mb: s.memory_mb,
        pids: s.pids,
        cpus_millis: (s.cpus * 1000.0).round() as u64,
        tmp_mb: s.tmp_mb,
        fsize_mb: s.fsize_mb,
        ..Limits::default()
    }
}

/// Paths a sandbox must never see: the supervisor's own (state, audit,
/// config file), then every credential path on the host.
pub fn hidden_paths(
    state_dir: &Path,
    audit_dir: &Path,
    config_file: Option<&Path>,
    credentials: &[PathBuf],
) -> Vec<PathBuf> {
    let mut v = vec![state_dir.to_path_buf(), audit_dir.to_path_buf()];
    if let Some(c) = config_file {
        v.push(c.to_path_buf());
    }
    v.extend(credentials.iter().cloned());
    v
}

/// Whom a sandbox runs as, from /etc/passwd as the caller read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxOwner {
    pub uid: u32,
    /// The user's group; `gid` when /etc/passwd does not know the uid.
    pub gid: u32,
    /// The user's name (USER in the sandbox); the uid when unknown.
    pub name: String,
    pub home: Option<PathBuf>,
}

impl SandboxOwner {
    pub fn of(users: &[PasswdEntry], uid: u32, gid: u32) -> SandboxOwner {
        match users.iter().find(|u| u.uid == uid) {
            Some(u) => SandboxOwner {
                uid,
                gid: u.gid,
                name: u.name.clone(),
                home: Some(u.home.clone()),
            },
            None => SandboxOwner {
                uid,
                gid,
                name: uid.to_string(),
                home: None,
            },
        }
    }
}

/// One sandbox to build: for a session's run_bash or for `supervisorctl
/// sandbox exec`.
pub struct SpecFor<'a> {
    pub session_id: &'a str,
    pub workspace: &'a Path,
    pub workspace_id: WorkspaceId,
    pub owner: &'a SandboxOwner,
    /// [`tollgate_policy::host::credential_paths`], as read for this sandbox.
    pub credentials: &'a [PathBuf],
    /// The sandbox-scoped token (a session's; `sandbox exec` has none).
    pub sandbox_token: Option<&'a str>,
    /// `agent mcp-gateway --allow-net`'s forwarding (the gateway's session
    /// only); `None` everywhere else.
    pub egress: Option<tollgate_sandbox::Egress>,
    /// PATH of the owner's login environment (the process that opened the
    /// session), reduced inside to what the sandbox shows; `None`: the
    /// system PATH and the shown toolchains' program directories.
    pub login_path: Option<String>,
}

/// The one place a [`SandboxSpec`] is built. The policy's tables go in as
/// they are (what the host runs by itself; the credential paths resolved
/// against /etc/passwd by the caller): the sandbox crate keeps no list of
/// its own and reads no /etc/passwd.
pub fn sandbox_spec(sup: &Supervisor, s: SpecFor<'_>) -> SandboxSpec {
    // `[network]`: the wall's proxies are announced (wall/mod.rs).
    let wall = sup.config.network.is_some();
    let mut env = crate::secrets::sandbox_env(
        s.session_id,
        s.sandbox_token,
        &s.owner.name,
        std::env::var("LANG").ok().as_deref(),
        std::env::var("LC_ALL").ok().as_deref(),
    );
    let (private_home, lease) = match private_home(sup, &s) {
        Some((h, lease)) => (Some(h), lease),
        None => (None, tollgate_sandbox::Lease::default()),
    };
    crate::sandbox_env::set_env(&mut env, private_home.as_ref(), s.login_path.as_deref());
    if let Some(h) = private_home.as_ref().filter(|h| h.cache.is_some()) {
        // The package caches' variables (docs/OPERATIONS.md "Package caches").
        env.extend(crate::caches::env(&h.cache_path()));
    }
    if wall {
        env.extend(tollgate_sandbox::wall::proxy_env());
    }
    let extra_ca = if wall && s.sandbox_token.is_some() {
        crate::secret_env::session_secrets(sup, s.session_id, &s.owner.name, &mut env)
    } else {
        None
    };
    SandboxSpec {
        session_id: s.session_id.to_string(),
        workspace: s.workspace.to_path_buf(),
        workspace_id: Some(s.workspace_id),
        uid: s.owner.uid,
        gid: s.owner.gid,
        env,
        limits: limits(&sup.config),
        hidden: {
            let mut h = hidden_paths(
                &sup.paths.state_dir,
                sup.audit.dir(),
                sup.paths.config_file.as_deref(),
                s.credentials,
            );
            // The caches' directory, where it is configured apart (each
            // sandbox gets only its own leaf, at its own place).
            let caches = crate::caches::root(sup);
            if !caches.starts_with(&sup.paths.state_dir) {
                h.push(caches);
            }
            h
        },
        host_exec: tollgate_policy::host_exec::names(),
        git_dir: sup.config.sandbox.git_dir,
        home: s.owner.home.clone(),
        egress: s.egress,
        private_home,
        wall,
        image: None,
        extra_ca,
        lease,
    }
}

/// The session owner's private home in the sandbox: at their home's path
/// when it is a directory here, with the configured toolchains that exist
/// and their git identity (docs/THREAT_MODEL.md, "The sandbox's
/// environment"); with the lease on its package cache, when one is kept.
fn private_home(
    sup: &Supervisor,
    s: &SpecFor<'_>,
) -> Option<(tollgate_sandbox::PrivateHome, tollgate_sandbox::Lease)> {
    let home = crate::sandbox_env::owner_home(s.owner.home.as_deref())?;
    let path = tollgate_policy::sandbox_env::home(Some(home));
    if path != home {
        return None;
    }
    let identity = crate::sandbox_env::git_identity(home, s.owner.uid);
    let cache =
        crate::caches::for_sandbox(sup, s.session_id, (s.owner.uid, s.owner.gid), s.workspace);
    let (cache, lease) = match cache {
        Some((leaf, lease)) => (Some(leaf), lease),
        None => (None, tollgate_sandbox::Lease::default()),
    };
    let h = tollgate_sandbox::PrivateHome {
        toolchains: crate::sandbox_env::shown_toolchains(
            &sup.config.sandbox.toolchain_dirs,
            Some(home),
        ),
        gitconfig: crate::sandbox_env::gitconfig(identity.as_ref()),
        cache,
        path,
    };
    Some((h, lease))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_sizes_reach_the_limits() {
        let c = Config::parse(
            "[sandbox]\ntmp_mb = 32\nfsize_mb = 64\n",
            Path::new("x.toml"),
        )
        .unwrap();
        let l = limits(&c);
        assert_eq!((l.tmp_mb, l.fsize_mb), (32, 64));
        assert_eq!(
            limits(&Config::default()).fsize_mb,
            tollgate_sandbox::Limits::default().fsize_mb
        );
    }

    fn spec() -> tollgate_sandbox::SandboxSpec {
        tollgate_sandbox::SandboxSpec {
            session_id: "AAAAAAAAAAAA".to_string(),
            workspace: PathBuf::from("/nonexistent"),
            workspace_id: None,
            uid: 1000,
            gid: 1000,
            env: Vec::new(),
            limits: Limits::default(),
            hidden: Vec::new(),
            host_exec: tollgate_policy::host_exec::names(),
            git_dir: tollgate_policy::host_exec::GitDirMode::ReadOnly,
            home: None,
            egress: None,
            private_home: None,
            lease: Default::default(),
            wall: false,
            image: None,
            extra_ca: None,
        }
    }

    /// Regression: "sandbox unavailable: sandbox unavailable: docker engine …".
    #[tokio::test]
    async fn an_unavailable_backend_says_unavailable_once() {
        let why = SandboxError::Unavailable(
            "docker engine not reachable at unix:///x.sock: no socket there; start the engine"
                .to_string(),
        );
        let b = Unavailable::new(BackendChoice::Docker, &why);
        let Err(e) = b.create(&spec()).await else {
            panic!("an unavailable backend built a sandbox");
        };
        assert_eq!(
            e.to_string(),
            "sandbox unavailable: docker engine not reachable at unix:///x.sock: no socket there; start the engine"
        );
        assert_eq!(
            b.strength().missing,
            vec![
                "docker engine not reachable at unix:///x.sock: no socket there; start the engine"
                    .to_string()
            ]
        );
        // Another kind keeps its own word, said once.
        let why = SandboxError::Setup("probe failed".to_string());
        let Err(e) = Unavailable::new(BackendChoice::Native, &why)
            .create(&spec())
            .await
        else {
            panic!("an unavailable backend built a sandbox");
        };
        assert_eq!(e.to_string(), "sandbox unavailable: sandbox: probe failed");
    }

    #[test]
    fn what_is_refused_names_only_sandboxed_commands() {
        for choice in [BackendChoice::Native, BackendChoice::Docker] {
            let s = refused_while_missing(choice);
            assert!(
                s.starts_with("run_bash and sandbox exec are refused"),
                "{s}"
            );
            assert!(!s.contains("session"), "{s}");
        }
    }
}
