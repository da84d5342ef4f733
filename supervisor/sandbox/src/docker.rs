//! The Docker backend: one hardened container per session, through bollard.
//!
//! Each session gets a long-lived container (`tollgate-<session>`) from the
//! image `sandbox-image/build.sh` makes, with every setting of BRIEF section 6:
//! no network, read-only rootfs, a private sized /tmp, `cap_drop ALL`,
//! `no-new-privileges`, tollgate's seccomp allowlist, pids/memory/CPU limits,
//! nofile/fsize/core rlimits, the session owner's uid:gid, docker's init as pid
//! 1, the workspace bind-mounted read-write at the same path (and nothing else),
//! the session environment, and labels `tollgate.session=<id>`,
//! `tollgate.managed=1`, `tollgate.state-dir=<state dir>`. Commands run with
//! `exec` under a small wrapper (see [`exec`]) that enforces the timeout inside
//! the container and lets the supervisor cancel them.
//!
//! It refuses, before anything is created, a workspace that is, contains or lies
//! inside the engine's socket, the supervisor's state/audit/socket paths, or a
//! credential path; and it never weakens a container to make it start: a
//! missing engine feature or an engine warning refuses the sandbox.
//!
//! Image tags: `tollgate-sandbox:<version>` is the full Debian image (the
//! default), `tollgate-sandbox:<version>-minimal` the busybox one the tests use;
//! `<version>` is this crate's version, which is the workspace version that
//! `build.sh` reads.

mod container;
mod errors;
mod exec;
mod interactive;
mod mounts;
mod pidfd;
mod reconnect;
mod seccomp;
mod verify;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use bollard::Docker;
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, ListContainersOptionsBuilder, RemoveContainerOptionsBuilder,
};

pub use container::{LABEL_MANAGED, LABEL_OWNER, LABEL_SESSION, container_name, create_body};
pub use errors::{is_engine_gone, status_code};
pub use exec::{DockerSandbox, WRAPPER, command_line, quote_word, split_status, timeout_secs};
pub use mounts::{CREDENTIAL_SUBPATHS, Forbidden, check_workspace, forbidden_paths, local_homes};
pub use reconnect::{OnReaped, RETRY_MAX, RETRY_MIN, Reconnecting};
pub use seccomp::DEFAULT_PROFILE as DEFAULT_SECCOMP_PROFILE;
pub use verify::{PlannedMount, plan as plan_mounts, verify as verify_mounts};

use crate::{
    Backend, BackendKind, CheckStatus, DoctorCheck, Reaped, Sandbox, SandboxError, SandboxSpec,
    Strength,
};

/// The engine socket when neither the config nor `DOCKER_HOST` names one.
pub const DEFAULT_SOCKET: &str = "/var/run/docker.sock";
/// Repository of the sandbox images.
pub const IMAGE_REPO: &str = "tollgate-sandbox";
/// The lowest engine API this backend drives (exec working dirs are 1.35).
pub const MIN_API: (usize, usize) = (1, 35);

/// The full image this version of tollgate uses by default.
pub fn default_image() -> String {
    format!("{IMAGE_REPO}:{}", env!("CARGO_PKG_VERSION"))
}

/// The busybox image (`build.sh --minimal`): what the tests use.
pub fn minimal_image() -> String {
    format!("{IMAGE_REPO}:{}-minimal", env!("CARGO_PKG_VERSION"))
}

const HINT_START: &str = "start the engine (dockerd) or use --sandbox native";

/// How to reach the engine and what to refuse.
#[derive(Debug, Clone)]
pub struct DockerConfig {
    /// The engine's unix socket.
    pub socket: PathBuf,
    /// The sandbox image (see [`default_image`], [`minimal_image`]).
    pub image: String,
    /// The supervisor's state dir: never mounted; also labels our containers.
    pub state_dir: PathBuf,
    /// The audit dir: never mounted.
    pub audit_dir: PathBuf,
    /// More host paths never to mount (sockets elsewhere, the config file).
    pub hidden: Vec<PathBuf>,
    /// Home directories whose credential paths are refused as mounts.
    pub homes: Vec<PathBuf>,
    /// Mount the workspace's `.git/hooks` and `.git/config` read-only.
    pub protect_git: bool,
    /// Keep one exec started ahead of time per sandbox (see [`exec`]): saves
    /// the engine's exec start-up on each command.
    pub warm_exec: bool,
    /// The seccomp profile (JSON). Must be an allowlist.
    pub seccomp_profile: String,
    /// Timeout of each API request until its answer starts.
    pub api_timeout: Duration,
    /// After an exec's timeout, how long the in-container `timeout` has before
    /// the supervisor sends the kill itself.
    pub backstop_grace: Duration,
    /// After a kill was sent, how long an exec may take to end before the whole
    /// container is destroyed.
    pub kill_grace: Duration,
}

impl DockerConfig {
    /// The defaults: socket from `DOCKER_HOST` when it is `unix://…` (else
    /// [`DEFAULT_SOCKET`]), the default image, the shipped seccomp profile, the
    /// homes of every local user.
    pub fn new(state_dir: PathBuf, audit_dir: PathBuf) -> DockerConfig {
        let socket = std::env::var("DOCKER_HOST")
            .ok()
            .and_then(|h| h.strip_prefix("unix://").map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET));
        DockerConfig {
            socket,
            image: default_image(),
            state_dir,
            audit_dir,
            hidden: Vec::new(),
            homes: local_homes(),
            protect_git: true,
            warm_exec: true,
            seccomp_profile: seccomp::DEFAULT_PROFILE.to_string(),
            api_timeout: Duration::from_secs(60),
            backstop_grace: exec::BACKSTOP_GRACE,
            kill_grace: exec::KILL_GRACE,
        }
    }

    fn forbidden(&self, extra: &[PathBuf]) -> Vec<Forbidden> {
        let mut hidden = self.hidden.clone();
        hidden.extend(extra.iter().cloned());
        forbidden_paths(
            &self.socket,
            &self.state_dir,
            &self.audit_dir,
            &hidden,
            &self.homes,
        )
    }
}

/// The engine did not answer `e`: the refusal names the socket and the
/// cause once.
fn unreachable(socket: &Path, e: &bollard::errors::Error) -> SandboxError {
    unreachable_because(socket, engine_cause(e))
}

/// What went wrong reaching the engine, in a few words: bollard's own
/// messages repeat the socket path ("Socket not found: <path>") or hide the
/// cause ("client error (Connect)"), whose I/O error says it.
fn engine_cause(e: &bollard::errors::Error) -> String {
    if let bollard::errors::Error::SocketNotFoundError(_) = e {
        return "no socket there".to_string();
    }
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return io.to_string();
        }
        cur = err.source();
    }
    e.to_string()
}

fn unreachable_because(socket: &Path, e: impl std::fmt::Display) -> SandboxError {
    SandboxError::Unavailable(format!(
        "docker engine not reachable at unix://{}: {e}; {HINT_START}",
        socket.display()
    ))
}

fn image_missing(image: &str) -> SandboxError {
    let hint = if image.ends_with("-minimal") {
        "sandbox-image/build.sh --minimal"
    } else {
        "sandbox-image/build.sh (or --minimal for the small test image)"
    };
    SandboxError::Unavailable(format!(
        "docker image {image} is missing; build it without a registry: {hint}"
    ))
}

/// Connects and negotiates the API version. Fails with `Unavailable` naming the
/// socket when the engine is not there.
async fn connect_engine(cfg: &DockerConfig) -> Result<(Docker, String, String), SandboxError> {
    let path = cfg
        .socket
        .to_str()
        .ok_or_else(|| unreachable_because(&cfg.socket, "socket path is not UTF-8"))?;
    let docker = Docker::connect_with_unix(
        path,
        cfg.api_timeout.as_secs().max(1),
        bollard::API_DEFAULT_VERSION,
    )
    .map_err(|e| unreachable(&cfg.socket, &e))?;
    let docker = docker
        .negotiate_version()
        .await
        .map_err(|e| unreachable(&cfg.socket, &e))?;
    let version = docker
        .version()
        .await
        .map_err(|e| unreachable(&cfg.socket, &e))?;
    let v = docker.client_version();
    if (v.major_version, v.minor_version) < MIN_API {
        return Err(SandboxError::Unavailable(format!(
            "docker engine at {} speaks API {}.{}; tollgate needs {}.{} or newer (Docker 17.12+)",
            cfg.socket.display(),
            v.major_version,
            v.minor_version,
            MIN_API.0,
            MIN_API.1
        )));
    }
    Ok((
        docker,
        version.version.unwrap_or_else(|| "?".to_string()),
        format!("{}.{}", v.major_version, v.minor_version),
    ))
}

/// The Docker backend.
pub struct DockerBackend {
    docker: Docker,
    cfg: DockerConfig,
    seccomp: String,
    strength: Strength,
}

impl std::fmt::Debug for DockerBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerBackend")
            .field("socket", &self.cfg.socket)
            .field("image", &self.cfg.image)
            .field("strength", &self.strength)
            .finish()
    }
}

impl DockerBackend {
    /// Connects, negotiates the API version, checks the engine can enforce
    /// every limit and the image exists.
    pub async fn connect(cfg: DockerConfig) -> Result<DockerBackend, SandboxError> {
        let seccomp = seccomp::validate(&cfg.seccomp_profile)?;
        let (docker, server_version, api) = connect_engine(&cfg).await?;
        let info = docker
            .info()
            .await
            .map_err(|e| unreachable(&cfg.socket, &e))?;
        let mut missing = Vec::new();
        let mut need = |ok: Option<bool>, what: &str| {
            if ok != Some(true) {
                missing.push(format!("docker engine cannot enforce {what}"));
            }
        };
        need(info.memory_limit, "memory limits");
        need(info.swap_limit, "swap limits (memory + swap)");
        need(info.pids_limit, "pids limits");
        need(info.cpu_cfs_quota, "CPU quotas");
        let seccomp_on = info
            .security_options
            .as_ref()
            .is_some_and(|o| o.iter().any(|s| s.contains("seccomp")));
        if !seccomp_on {
            missing.push("docker engine has no seccomp support".to_string());
        }
        match docker.inspect_image(&cfg.image).await {
            Ok(_) => {}
            Err(e) if status_code(&e) == Some(404) => return Err(image_missing(&cfg.image)),
            Err(e) => return Err(unreachable(&cfg.socket, &e)),
        }
        let strength = Strength {
            backend: BackendKind::Docker,
            summary: format!(
                "docker {server_version} (API {api}) at {}, image {}: network none, read-only rootfs, \
                 cap_drop ALL, no-new-privileges, seccomp allowlist, pids/memory/cpu limits",
                cfg.socket.display(),
                cfg.image
            ),
            missing,
        };
        Ok(DockerBackend {
            docker,
            cfg,
            seccomp,
            strength,
        })
    }

    /// The configuration this backend was built with.
    pub fn config(&self) -> &DockerConfig {
        &self.cfg
    }

    /// The bollard client (for tests and tools).
    pub fn client(&self) -> &Docker {
        &self.docker
    }

    /// Creates and starts the container; the typed form of [`Backend::create`].
    pub async fn create_sandbox(&self, spec: &SandboxSpec) -> Result<DockerSandbox, SandboxError> {
        if !self.strength.missing.is_empty() {
            return Err(SandboxError::Unavailable(self.strength.missing.join("; ")));
        }
        container::check_session_id(&spec.session_id)?;
        // Refused before anything exists on the engine.
        let workspace = check_workspace(&spec.workspace, &self.cfg.forbidden(&spec.hidden))?;
        // The engine binds by path, so this is as close as it gets: the path
        // still names the session's directory just before the container is made.
        if let Some(id) = spec.workspace_id {
            id.check(&workspace)?;
        }
        let mounts = verify::plan(&workspace, self.cfg.protect_git)?;
        let body = create_body(
            spec,
            &mounts,
            &self.cfg.image,
            &self.cfg.state_dir,
            &self.seccomp,
        )?;
        let name = container_name(&spec.session_id);
        let opts = CreateContainerOptionsBuilder::new().name(&name).build();
        let created = match self.docker.create_container(Some(opts), body).await {
            Ok(c) => c,
            Err(e) => return Err(self.create_error(&name, e)),
        };
        let mut sandbox = DockerSandbox {
            docker: self.docker.clone(),
            id: created.id.clone(),
            name,
            session_id: spec.session_id.clone(),
            workspace,
            socket: self.cfg.socket.clone(),
            alive: Arc::new(AtomicBool::new(true)),
            destroyed: AtomicBool::new(false),
            watcher: std::sync::Mutex::new(None),
            backstop_grace: self.cfg.backstop_grace,
            kill_grace: self.cfg.kill_grace,
            warm: self.cfg.warm_exec.then(Arc::default),
            init: None,
        };
        // From here on, a failure removes the container (the sandbox's Drop
        // would too; destroy() does it now and reports).
        if !created.warnings.is_empty() {
            let _ = sandbox.destroy().await;
            return Err(SandboxError::Unavailable(format!(
                "docker engine would weaken the sandbox: {}",
                created.warnings.join("; ")
            )));
        }
        if let Err(e) = self.docker.start_container(&created.id, None).await {
            let _ = sandbox.destroy().await;
            return Err(if is_engine_gone(&e) {
                unreachable(&self.cfg.socket, &e)
            } else {
                SandboxError::Other(format!(
                    "starting container {}: {e}",
                    sandbox.container_name()
                ))
            });
        }
        // Docker resolved the sources itself: make sure it mounted what was checked.
        let init_pid = match verify::verify(&self.docker, &created.id, &mounts).await {
            Ok(pid) => pid,
            Err(e) => {
                let _ = sandbox.destroy().await;
                return Err(e);
            }
        };
        sandbox.init = init_pid.and_then(|pid| pidfd::open_for_container(pid, &created.id));
        sandbox.watch();
        sandbox.start_refill();
        Ok(sandbox)
    }

    fn create_error(&self, name: &str, e: bollard::errors::Error) -> SandboxError {
        if is_engine_gone(&e) {
            return unreachable(&self.cfg.socket, &e);
        }
        match status_code(&e) {
            Some(404) => image_missing(&self.cfg.image),
            Some(409) => SandboxError::Other(format!(
                "a container named {name} already exists: {e}; a session id was reused, \
                 or an earlier supervisor left it (restart the supervisor to reap it)"
            )),
            _ => SandboxError::Other(format!("creating container {name}: {e}")),
        }
    }

    /// Containers carrying our labels (this state dir's), all states.
    async fn ours(&self) -> Result<Vec<bollard::models::ContainerSummary>, SandboxError> {
        let filters = HashMap::from([(
            "label",
            vec![
                format!("{LABEL_MANAGED}=1"),
                format!("{LABEL_OWNER}={}", self.cfg.state_dir.to_string_lossy()),
            ],
        )]);
        let opts = ListContainersOptionsBuilder::new()
            .all(true)
            .filters(&filters)
            .build();
        self.docker
            .list_containers(Some(opts))
            .await
            .map_err(|e| unreachable(&self.cfg.socket, &e))
    }
}

#[async_trait::async_trait]
impl Backend for DockerBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Docker
    }

    fn strength(&self) -> Strength {
        self.strength.clone()
    }

    async fn create(&self, spec: &SandboxSpec) -> Result<Arc<dyn Sandbox>, SandboxError> {
        Ok(Arc::new(self.create_sandbox(spec).await?))
    }

    /// Kills and removes every container this supervisor's state dir left
    /// behind (labels `tollgate.managed=1`, `tollgate.state-dir=<ours>`).
    async fn reap_orphans(&self) -> Result<Vec<Reaped>, SandboxError> {
        let mut reaped = Vec::new();
        for c in self.ours().await? {
            let Some(id) = c.id else { continue };
            let labels = c.labels.unwrap_or_default();
            let session = labels.get(LABEL_SESSION).cloned().unwrap_or_default();
            let state = c.state.map(|s| s.to_string()).unwrap_or_default();
            let opts = RemoveContainerOptionsBuilder::new()
                .force(true)
                .v(true)
                .build();
            match self.docker.remove_container(&id, Some(opts)).await {
                Ok(()) => {}
                Err(e) if status_code(&e) == Some(404) => continue,
                Err(e) if is_engine_gone(&e) => return Err(unreachable(&self.cfg.socket, &e)),
                Err(e) => {
                    return Err(SandboxError::Other(format!(
                        "removing leftover container {}: {e}",
                        exec::short(&id)
                    )));
                }
            }
            let name = c
                .names
                .and_then(|n| n.into_iter().next())
                .unwrap_or_default();
            reaped.push(Reaped {
                session_id: session,
                detail: format!(
                    "removed container {} {} ({state})",
                    exec::short(&id),
                    name.trim_start_matches('/')
                ),
            });
        }
        Ok(reaped)
    }
}

/// `supervisorctl doctor`'s Docker lines: engine reachable (and its version),
/// the image present. Docker is optional (native is the default), so a missing
/// engine or image is `warn`; see [`doctor_checks_for`].
pub async fn doctor_checks(cfg: &DockerConfig) -> Vec<DoctorCheck> {
    doctor_checks_for(cfg, false).await
}

/// As [`doctor_checks`]; with `required` (the configured backend is docker),
/// problems are `fail`.
pub async fn doctor_checks_for(cfg: &DockerConfig, required: bool) -> Vec<DoctorCheck> {
    let bad = if required {
        CheckStatus::Fail
    } else {
        CheckStatus::Warn
    };
    let mut checks = Vec::new();
    let (docker, version, api) = match connect_engine(cfg).await {
        Ok(v) => v,
        Err(e) => {
            // The detail already says what to do; say it once.
            checks.push(DoctorCheck {
                name: "docker engine".to_string(),
                status: bad,
                detail: e.detail(),
                hint: (!required).then(|| "needed only for --sandbox docker".to_string()),
            });
            checks.push(DoctorCheck {
                name: "docker image".to_string(),
                status: bad,
                detail: format!("{}: not checked, the engine is not reachable", cfg.image),
                hint: None,
            });
            return checks;
        }
    };
    checks.push(DoctorCheck {
        name: "docker engine".to_string(),
        status: CheckStatus::Ok,
        detail: format!("docker {version} (API {api}) at {}", cfg.socket.display()),
        hint: None,
    });
    match docker.inspect_image(&cfg.image).await {
        Ok(img) => {
            let flavor = img
                .config
                .and_then(|c| c.labels)
                .and_then(|l| l.get("tollgate.sandbox-image").cloned())
                .unwrap_or_else(|| "not built by sandbox-image/build.sh".to_string());
            let mb = img.size.unwrap_or(0) / (1024 * 1024);
            checks.push(DoctorCheck {
                name: "docker image".to_string(),
                status: CheckStatus::Ok,
                detail: format!("{} present ({flavor}, {mb} MiB)", cfg.image),
                hint: None,
            });
        }
        Err(e) => {
            let detail = if status_code(&e) == Some(404) {
                image_missing(&cfg.image).to_string()
            } else {
                format!("{}: {e}", cfg.image)
            };
            checks.push(DoctorCheck {
                name: "docker image".to_string(),
                status: bad,
                detail,
                hint: Some("sandbox-image/build.sh builds it without a registry".to_string()),
            });
        }
    }
    match seccomp::validate(&cfg.seccomp_profile) {
        Ok(_) => checks.push(DoctorCheck {
            name: "docker seccomp".to_string(),
            status: CheckStatus::Ok,
            detail: "tollgate allowlist profile (io_uring, i386/x32, namespaces, TIOCSTI refused)"
                .to_string(),
            hint: None,
        }),
        Err(e) => checks.push(DoctorCheck {
            name: "docker seccomp".to_string(),
            status: CheckStatus::Fail,
            detail: e.to_string(),
            hint: Some("use the profile in sandbox-image/seccomp.json".to_string()),
        }),
    }
    checks
}
