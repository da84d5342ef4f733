//! The sandbox backends this supervisor can use: the configured one, plus the
//! other one built on demand for `supervisorctl sandbox exec --backend`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::OnceCell;
use tollgate_sandbox::{Backend, Limits, Reaped, SandboxError};

use crate::config::{BackendChoice, Config};

/// How to build each backend.
#[derive(Debug, Clone)]
pub struct BackendSettings {
    pub helper_exe: PathBuf,
    pub state_dir: PathBuf,
    pub audit_dir: PathBuf,
    pub docker_socket: PathBuf,
    pub image: String,
    /// The Docker backend's exec agent; empty: next to the supervisor.
    pub docker_exec_agent: PathBuf,
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
    /// sandbox it is asked for is then refused with the reason.
    pub async fn new(choice: BackendChoice, settings: BackendSettings) -> Backends {
        let primary = match build(choice, &settings).await {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(backend = choice.as_str(), error = %e, "sandbox backend unavailable; sessions will be refused");
                Arc::new(Unavailable::new(choice, e.to_string()))
            }
        };
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

    /// A set with one given backend (tests).
    pub fn with(primary: Arc<dyn Backend>, settings: BackendSettings) -> Backends {
        Backends {
            primary,
            primary_choice: BackendChoice::Native,
            native: OnceCell::new(),
            docker: OnceCell::new(),
            settings,
        }
    }

    pub fn primary(&self) -> Arc<dyn Backend> {
        Arc::clone(&self.primary)
    }

    pub fn primary_choice(&self) -> BackendChoice {
        self.primary_choice
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
            let mut cfg = tollgate_sandbox::docker::DockerConfig::new(
                s.state_dir.clone(),
                s.audit_dir.clone(),
            );
            cfg.socket = s.docker_socket.clone();
            if !s.image.is_empty() {
                cfg.image = s.image.clone();
            }
            if !s.docker_exec_agent.as_os_str().is_empty() {
                cfg.exec_agent = s.docker_exec_agent.clone();
            }
            let b = tollgate_sandbox::docker::DockerBackend::connect(cfg).await?;
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
    pub fn new(choice: BackendChoice, reason: String) -> Unavailable {
        let kind = match choice {
            BackendChoice::Native => tollgate_sandbox::BackendKind::Native,
            BackendChoice::Docker => tollgate_sandbox::BackendKind::Docker,
        };
        Unavailable { kind, reason }
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

/// Paths a sandbox must never see.
pub fn hidden_paths(
    state_dir: &Path,
    audit_dir: &Path,
    config_file: Option<&Path>,
) -> Vec<PathBuf> {
    let mut v = vec![state_dir.to_path_buf(), audit_dir.to_path_buf()];
    if let Some(c) = config_file {
        v.push(c.to_path_buf());
    }
    v
}
