//! The Docker backend: one hardened container per session, through bollard.
//!
//! Each session gets a long-lived container (`tollgate-<session>`) from the
//! image `sandbox-image/build.sh` makes, with every setting of docs/OPERATIONS.md "The Docker sandbox":
//! no network, read-only rootfs, a private sized /tmp, `cap_drop ALL`,
//! `no-new-privileges`, tollgate's seccomp allowlist, pids/memory/CPU limits,
//! nofile/fsize/core rlimits, the session owner's uid:gid, docker's init as pid
//! 1, the workspace bind-mounted read-write at the same path (and nothing else),
//! the session environment, and labels `tollgate.session=<id>`,
//! `tollgate.managed=1`, `tollgate.state-dir=<state dir>`. Its pid 1 is the
//! resident exec agent (`tollgate-exec-agent`, bind-mounted read-only from the
//! host, see [`agent`]), which runs every command for the supervisor over one
//! connection (see [`exec`]): a command costs no Docker API call, and the
//! container dies with that connection, so it cannot outlive its supervisor.
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

mod agent;
mod ca;
mod container;
pub mod discover;
mod errors;
mod exec;
mod git_identity;
mod leftover;
mod mounts;
mod pidfd;
mod probe;
mod reconnect;
mod sandbox;
mod seccomp;
mod verify;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, ListContainersOptionsBuilder, RemoveContainerOptionsBuilder,
    WaitContainerOptionsBuilder,
};
use futures_util::StreamExt;

pub use agent::{
    AgentBinary, BINARY_NAME as EXEC_AGENT_NAME, BUILT_AGENT, CONTAINER_BINARY, CONTAINER_SOCKET,
    check_elf, default_agent_path,
};
pub use container::{
    AgentFiles, LABEL_MANAGED, LABEL_OWNER, LABEL_SESSION, container_name, create_body,
};
pub use errors::{is_engine_gone, status_code};
pub use exec::{MAX_STDIN, deadline_ms};
pub use mounts::{Forbidden, check_workspace, forbidden_paths};
pub use reconnect::{OnReaped, RETRY_MAX, RETRY_MIN, Reconnecting};
pub use sandbox::DockerSandbox;
pub use seccomp::DEFAULT_PROFILE as DEFAULT_SECCOMP_PROFILE;
pub use verify::{PlannedMount, plan as plan_mounts, verify as verify_mounts};

use crate::{
    Backend, BackendKind, CheckStatus, DoctorCheck, Reaped, Sandbox, SandboxError, SandboxSpec,
    Strength,
};

/// The engine socket when neither the config, `DOCKER_HOST` nor a Docker
/// context names one.
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
    /// More host paths never to mount (sockets elsewhere, the config file),
    /// besides each spec's `hidden` (where the daemon puts every credential
    /// path).
    pub hidden: Vec<PathBuf>,
    /// The resident exec agent's executable on the host (see [`agent`]):
    /// checked at connect, bind-mounted read-only as every container's pid 1.
    pub exec_agent: PathBuf,
    /// How long a new container's agent has to connect and say hello.
    pub agent_timeout: Duration,
    /// The seccomp profile (JSON). Must be an allowlist.
    pub seccomp_profile: String,
    /// Timeout of each API request until its answer starts.
    pub api_timeout: Duration,
    /// After a command's timeout, how long the agent's own deadline has
    /// before the supervisor sends the kill itself.
    pub backstop_grace: Duration,
    /// After a kill was sent, how long a command may take to end before the
    /// whole container is destroyed.
    pub kill_grace: Duration,
}

impl DockerConfig {
    /// The defaults: the socket found as the docker CLI finds it
    /// ([`discover::engine_socket`]; [`DEFAULT_SOCKET`] when that fails, with
    /// a warning), the default image, the shipped seccomp profile, the
    /// exec agent next to this executable ([`default_agent_path`]).
    pub fn new(state_dir: PathBuf, audit_dir: PathBuf) -> DockerConfig {
        let socket =
            discover::engine_socket(&discover::DockerEnv::from_process()).unwrap_or_else(|e| {
                tracing::warn!("{e}; trying {DEFAULT_SOCKET}");
                PathBuf::from(DEFAULT_SOCKET)
            });
        DockerConfig {
            socket,
            image: default_image(),
            state_dir,
            audit_dir,
            hidden: Vec::new(),
            exec_agent: default_agent_path(),
            agent_timeout: Duration::from_secs(10),
            seccomp_profile: seccomp::DEFAULT_PROFILE.to_string(),
            api_timeout: Duration::from_secs(60),
            backstop_grace: exec::BACKSTOP_GRACE,
            kill_grace: exec::KILL_GRACE,
        }
    }

    fn forbidden(&self, extra: &[PathBuf]) -> Vec<Forbidden> {
        let mut hidden = self.hidden.clone();
        hidden.extend(extra.iter().cloned());
        forbidden_paths(&self.socket, &self.state_dir, &self.audit_dir, &hidden)
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
    /// The checked exec agent (`None`: refused, the reason is in `strength`).
    agent: Option<AgentBinary>,
    /// The image's shell, learned from the last sandbox built.
    shell: std::sync::Mutex<Option<crate::Shell>>,
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
        let agent = match AgentBinary::check(&cfg.exec_agent) {
            Ok(a) => Some(a),
            Err(e) => {
                missing.push(e.to_string());
                None
            }
        };
        let strength = Strength {
            backend: BackendKind::Docker,
            summary: format!(
                "docker {server_version} (API {api}) at {}, image {}: network none, read-only rootfs, \
                 cap_drop ALL, no-new-privileges, seccomp allowlist, pids/memory/cpu limits, \
                 resident exec agent {}",
                cfg.socket.display(),
                cfg.image,
                cfg.exec_agent.display()
            ),
            missing,
        };
        Ok(DockerBackend {
            docker,
            cfg,
            seccomp,
            strength,
            agent,
            shell: std::sync::Mutex::new(None),
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

    /// The image of `spec`'s sandbox: the one its workspace names when the
    /// engine has it (never pulled), else the configured one.
    async fn image_for(&self, spec: &SandboxSpec) -> String {
        let Some(named) = spec.image.as_deref() else {
            return self.cfg.image.clone();
        };
        match self.docker.inspect_image(named).await {
            Ok(_) => named.to_string(),
            Err(e) => {
                tracing::warn!(session = %spec.session_id, image = named, error = %e,
                    "the workspace's devcontainer image is not in the engine; using the configured image");
                self.cfg.image.clone()
            }
        }
    }

    /// Creates and starts the container and waits for its exec agent; the
    /// typed form of [`Backend::create`].
    pub async fn create_sandbox(&self, spec: &SandboxSpec) -> Result<DockerSandbox, SandboxError> {
        let plan = self.plan_sandbox(spec)?;
        let mut socket =
            agent::AgentSocket::bind(&self.cfg.state_dir, &spec.session_id, spec.uid, spec.gid)?;
        let identity = git_identity::GitIdentityFile::write(
            &self.cfg.state_dir,
            &spec.session_id,
            spec.private_home
                .as_ref()
                .map(|h| h.gitconfig.as_str())
                .unwrap_or_default(),
        )?;
        let files = AgentFiles {
            binary: plan.agent.path.clone(),
            socket: socket.path().to_path_buf(),
            no_links_beneath: plan.no_links_beneath.clone(),
            gitconfig: identity.as_ref().map(|f| f.path().to_path_buf()),
        };
        let image = self.image_for(spec).await;
        let mut body = create_body(
            spec,
            &plan.mounts,
            &files,
            &image,
            &self.cfg.state_dir,
            &self.seccomp,
        )?;
        // [[secrets]]: the session's CA beside the host's (docker/ca.rs);
        // the file goes once the container has it mounted.
        let bundle = match &spec.extra_ca {
            Some(pem) => {
                let b = ca::SessionBundle::write(
                    &self.cfg.state_dir,
                    &spec.session_id,
                    Path::new(ca::BUNDLE),
                    pem,
                )?;
                b.attach(&mut body)?;
                Some(b)
            }
            None => None,
        };
        let name = container_name(&spec.session_id);
        let (id, link, posture) = self.start_container(&name, body, &mut socket, spec).await?;
        drop(socket);
        drop(bundle);
        // Its mount keeps the identity file now.
        drop(identity);
        let mut sandbox = DockerSandbox {
            docker: self.docker.clone(),
            id: id.clone(),
            name,
            session_id: spec.session_id.clone(),
            workspace: plan.workspace,
            env: spec.env.clone(),
            socket: self.cfg.socket.clone(),
            alive: Arc::new(AtomicBool::new(true)),
            engine_gone: Arc::new(AtomicBool::new(false)),
            destroyed: AtomicBool::new(false),
            watcher: std::sync::Mutex::new(None),
            backstop_grace: self.cfg.backstop_grace,
            kill_grace: self.cfg.kill_grace,
            link: Arc::new(link),
            posture,
            init: None,
            reservation: std::sync::Mutex::new(Some(plan.reservation)),
            shell: crate::Shell::Sh,
        };
        // Docker resolved the sources itself: make sure it mounted what was
        // checked, and that pid 1 runs the agent binary that was checked.
        let init_pid = match verify::verify(&self.docker, &id, &plan.mounts).await {
            Ok(pid) => pid,
            Err(e) => {
                let _ = sandbox.destroy_now().await;
                return Err(e);
            }
        };
        if let Some(pid) = init_pid
            && let Err(e) = verify::verify_init_exe(pid, &plan.agent, sandbox.container_name())
        {
            let _ = sandbox.destroy_now().await;
            return Err(e);
        }
        sandbox.init = init_pid.and_then(|pid| pidfd::open_for_container(pid, &id));
        sandbox.shell = match init_pid.map(crate::shell::of_container_root) {
            Some(Ok(shell)) => shell,
            _ => sandbox.probe_shell().await,
        };
        if let Ok(mut learned) = self.shell.lock() {
            *learned = Some(sandbox.shell);
        }
        sandbox.watch();
        Ok(sandbox)
    }

    /// The refusals made before anything exists on the engine, then the
    /// workspace's protected paths reserved on the host and the mounts
    /// planned.
    fn plan_sandbox(&self, spec: &SandboxSpec) -> Result<SandboxPlan, SandboxError> {
        if !self.strength.missing.is_empty() {
            return Err(SandboxError::Unavailable(self.strength.missing.join("; ")));
        }
        let agent = self.agent.clone().ok_or_else(|| {
            SandboxError::Unavailable("docker exec agent was not checked".to_string())
        })?;
        container::check_session_id(&spec.session_id)?;
        // Refused before anything exists on the engine.
        let workspace = check_workspace(&spec.workspace, &self.cfg.forbidden(&spec.hidden))?;
        // The engine binds by path, so this is as close as it gets: the path
        // still names the session's directory just before the container is made.
        if let Some(id) = spec.workspace_id {
            id.check(&workspace)?;
        }
        // What the host runs by itself: reserved on the host now, mounted
        // read-only (parents pinned) with the workspace.
        let protect = crate::host_exec::plan(
            &workspace,
            &spec.host_exec,
            spec.home.as_deref(),
            spec.git_dir,
        )?;
        let mut reservation = crate::host_exec::reserve::acquire(
            &workspace,
            spec.workspace_id,
            &protect.reserve,
            (spec.uid, spec.gid),
            crate::host_exec::reserve::Holder {
                state_dir: &self.cfg.state_dir,
                session: &spec.session_id,
                backend: crate::BackendKind::Docker,
            },
        )?;
        reservation.hold(spec.lease.clone());
        let mut mounts = verify::plan(&workspace, &protect.binds)?;
        mounts.extend(toolchain_mounts(spec)?);
        let no_links_beneath = protect
            .no_links_beneath
            .iter()
            .map(|g| workspace.join(g))
            .collect();
        Ok(SandboxPlan {
            agent,
            workspace,
            reservation,
            mounts,
            no_links_beneath,
        })
    }

    /// Creates the container (refused when the engine would weaken it),
    /// starts it and meets its agent; a failure after the create removes
    /// the container. Returns its id, the agent link and its posture.
    async fn start_container(
        &self,
        name: &str,
        body: bollard::models::ContainerCreateBody,
        socket: &mut agent::AgentSocket,
        spec: &SandboxSpec,
    ) -> Result<(String, agent::AgentLink, String), SandboxError> {
        let opts = CreateContainerOptionsBuilder::new().name(name).build();
        let created = match self.docker.create_container(Some(opts), body).await {
            Ok(c) => c,
            Err(e) => return Err(self.create_error(name, e)),
        };
        // From here on, a failure removes the container.
        let fail = |e: SandboxError| async {
            let _ = self.remove_by_id(&created.id).await;
            e
        };
        if !created.warnings.is_empty() {
            return Err(fail(SandboxError::Unavailable(format!(
                "docker engine would weaken the sandbox: {}",
                created.warnings.join("; ")
            )))
            .await);
        }
        if let Err(e) = self.docker.start_container(&created.id, None).await {
            let err = if is_engine_gone(&e) {
                unreachable(&self.cfg.socket, &e)
            } else {
                SandboxError::Engine {
                    doing: format!("starting container {name}"),
                    error: e.to_string(),
                }
            };
            return Err(fail(err).await);
        }
        let (link, posture) = match self.meet_agent(socket, &created.id, name, spec).await {
            Ok(v) => v,
            Err(e) => return Err(fail(e).await),
        };
        Ok((created.id, link, posture))
    }

    /// Waits for the container's agent to connect (or the container to stop),
    /// checks who connected, and checks the posture the agent reports.
    async fn meet_agent(
        &self,
        socket: &mut agent::AgentSocket,
        id: &str,
        name: &str,
        spec: &SandboxSpec,
    ) -> Result<(agent::AgentLink, String), SandboxError> {
        let started = Instant::now();
        let timeout = self.cfg.agent_timeout;
        let opts = WaitContainerOptionsBuilder::new()
            .condition("not-running")
            .build();
        let mut stopped = self.docker.wait_container(id, Some(opts));
        let stream = tokio::select! {
            r = socket.accept_once() => r.map_err(|e| SandboxError::Io {
                context: format!("accepting the exec agent of container {name}"),
                source: e,
            })?,
            _ = stopped.next() => {
                let detail = match self.docker.inspect_container(id, None).await {
                    Ok(info) => {
                        let st = info.state.unwrap_or_default();
                        format!("exit code {}{}", st.exit_code.unwrap_or(-1),
                            st.error.filter(|e| !e.is_empty()).map(|e| format!(", {e}")).unwrap_or_default())
                    }
                    Err(e) => e.to_string(),
                };
                return Err(SandboxError::Unavailable(format!(
                    "the exec agent of container {name} exited before it connected ({detail}); \
                     is {} a static build of tollgate-exec-agent for this machine?",
                    self.cfg.exec_agent.display()
                )));
            }
            _ = tokio::time::sleep(timeout) => {
                return Err(SandboxError::Unavailable(format!(
                    "the exec agent of container {name} did not connect within {timeout:?}"
                )));
            }
        };
        agent::check_peer(&stream, id, spec.uid).map_err(|why| {
            SandboxError::Refused(format!(
                "the connection on the exec agent socket of container {name} is not its agent: {why}"
            ))
        })?;
        let left = timeout.saturating_sub(started.elapsed());
        let (link, hello) = agent::AgentLink::handshake(stream, left)
            .await
            .map_err(|why| {
                SandboxError::Unavailable(format!(
                    "the exec agent of container {name} did not start properly: {why}"
                ))
            })?;
        let posture = agent::check_hello(&hello, spec.uid, spec.gid).map_err(|why| {
            SandboxError::Unavailable(format!(
                "the exec agent of container {name} runs with a weak posture: {why}; \
                 every command would inherit it"
            ))
        })?;
        Ok((link, posture))
    }

    async fn remove_by_id(&self, id: &str) -> Result<(), bollard::errors::Error> {
        let opts = RemoveContainerOptionsBuilder::new()
            .force(true)
            .v(true)
            .build();
        match self.docker.remove_container(id, Some(opts)).await {
            Err(e) if status_code(&e) == Some(404) => Ok(()),
            other => other,
        }
    }

    fn create_error(&self, name: &str, e: bollard::errors::Error) -> SandboxError {
        if is_engine_gone(&e) {
            return unreachable(&self.cfg.socket, &e);
        }
        match status_code(&e) {
            Some(404) => image_missing(&self.cfg.image),
            Some(409) => SandboxError::ContainerExists {
                name: name.to_string(),
                error: e.to_string(),
            },
            _ => SandboxError::Engine {
                doing: format!("creating container {name}"),
                error: e.to_string(),
            },
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

    fn shell(&self) -> Option<crate::Shell> {
        self.shell.lock().ok().and_then(|s| *s)
    }

    /// Kills and removes every container this supervisor's state dir left
    /// behind (labels `tollgate.managed=1`, `tollgate.state-dir=<ours>`).
    async fn reap_orphans(&self) -> Result<Vec<Reaped>, SandboxError> {
        let mut reaped = self.reap_containers().await?;
        // Placeholders only once their containers are gone.
        crate::host_exec::reserve::merge(
            &mut reaped,
            crate::host_exec::reserve::reap(&self.cfg.state_dir, crate::BackendKind::Docker),
        );
        Ok(reaped)
    }
}

impl DockerBackend {
    /// Kills and removes this state dir's leftover containers.
    async fn reap_containers(&self) -> Result<Vec<Reaped>, SandboxError> {
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
                    return Err(SandboxError::Engine {
                        doing: format!("removing leftover container {}", sandbox::short(&id)),
                        error: e.to_string(),
                    });
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
                    sandbox::short(&id),
                    name.trim_start_matches('/')
                ),
            });
        }
        agent::remove_stale_sockets(&self.cfg.state_dir, self.cfg.agent_timeout * 2);
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
    let image_ok = match docker.inspect_image(&cfg.image).await {
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
            true
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
            false
        }
    };
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
    checks.extend(probe::agent_checks(cfg, bad, image_ok).await);
    checks
}

/// What [`DockerBackend::create_sandbox`] checked and reserved before the
/// engine is asked for anything.
struct SandboxPlan {
    agent: AgentBinary,
    workspace: PathBuf,
    reservation: crate::host_exec::reserve::Reservation,
    mounts: Vec<verify::PlannedMount>,
    /// The split git directories (absolute), for the agent's command line.
    no_links_beneath: Vec<PathBuf>,
}

/// The private home's package cache, then its toolchains, read-only at
/// their own paths. The engine
/// follows symlinks in a bind's source itself, so one with a symlink on its
/// path is left out, as is one holding a hidden path (Docker cannot mask
/// inside a bind as the native sandbox does): the sandbox never shows a
/// credential path. Each is checked again once mounted ([`verify`]).
fn toolchain_mounts(spec: &SandboxSpec) -> Result<Vec<PlannedMount>, SandboxError> {
    let Some(home) = &spec.private_home else {
        return Ok(Vec::new());
    };
    let mut v = Vec::new();
    // The package cache: the owner's own directory outside every
    // workspace, writable (docs/THREAT_MODEL.md "Package caches").
    if let Some(cache) = &home.cache {
        v.push(PlannedMount::identify_at(cache, &home.cache_path(), false)?);
    }
    for t in &home.toolchains {
        let no_links = t
            .ancestors()
            .all(|a| std::fs::symlink_metadata(a).is_ok_and(|m| !m.file_type().is_symlink()));
        let holds_hidden = spec.hidden.iter().any(|h| {
            (h.starts_with(t) || t.starts_with(h)) && std::fs::symlink_metadata(h).is_ok()
        });
        if no_links && !holds_hidden {
            v.push(PlannedMount::identify(t, true)?);
        }
    }
    Ok(v)
}
