//! Start-up, the two sockets, and shutdown.
//!
//! Privileged steps in order (docs/OPERATIONS.md lists the same):
//! 1. load the config (a typo stops the start, naming the line); raise the
//!    soft RLIMIT_NOFILE to the hard limit and check `fd_reserve` fits in it;
//! 2. prepare the state dir; open the audit dir (wrong permissions stop the
//!    start) and the supervisor's log;
//! 3. scan the environment for secrets (the count goes in the `config` event);
//! 4. build the policy engine (a bad rule stops the start);
//! 5. build the sandbox backend and reap sandboxes a crashed predecessor left;
//! 6. bind agent.sock (0666) and operator.sock (0600, or 0660 + group),
//!    replacing stale socket files but never a live supervisor's; or take
//!    both from the service manager (`activation.rs`, checked before step 1's
//!    effects); agent.sock accepts within the connection bounds of
//!    [`crate::conn`];
//! 7. print the ready line, serve, and on SIGTERM/SIGINT revoke every session,
//!    kill sandboxes, flush the audit log and remove the sockets.

use std::io::Write as _;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use tokio::net::UnixListener;
use tokio_util::sync::CancellationToken;
use tollgate_audit::event::{self, Event};
use tollgate_audit::{Audit, Redactor};
use tollgate_audit::{Durable, Priority};
use tollgate_proto::v1 as pb;
use tonic::transport::Server;

use crate::activation;
use crate::agent_service::AgentSvc;
use crate::approvals::Approvals;
use crate::auth::{self, Guard};
use crate::backends::{BackendSettings, Backends};
use crate::check::ConfigFault;
use crate::conn;
use crate::events::Log;
use crate::events::Recorder;
use crate::host_addrs::{self, HostAddrWatch};
use crate::llm::{OpenAi, Provider, Script};
use crate::logging::LIFECYCLE;
use crate::operator_service::OperatorSvc;
use crate::sessions::{Sessions, State};
use crate::supervisor::{Paths, Supervisor};
use tollgate_config::{BackendChoice, Config, ProviderChoice};

/// Command-line choices that override the config.
#[derive(Debug)]
pub struct Options {
    pub config: PathBuf,
    pub config_explicit: bool,
    pub state_dir: Option<PathBuf>,
    pub audit_dir: Option<PathBuf>,
    pub sandbox: Option<BackendChoice>,
    /// agent.sock and operator.sock passed by the service manager, taken
    /// (`activation::take_passed`) before the runtime opened any fd of its own.
    pub passed: Option<activation::Passed>,
}

/// Runs the supervisor until a signal: the privileged steps of the module
/// documentation, in their order.
pub async fn run(opts: Options, config: Config) -> anyhow::Result<()> {
    // 1. The config (loaded by `crate::check::load_config`), and the file
    // descriptor budget.
    let conns = connection_bounds(&config)?;
    let reload_from = crate::reload::Source::of(&opts);
    let passed = opts.passed;
    let own_uid = nix::unistd::getuid().as_raw();
    let operator_gid = operator_gid(&config)?;
    // 2. The state dir, the audit dir and the supervisor's log.
    let state_dir = prepare_state_dir(&config.supervisor.state_dir, own_uid)?;
    let audit = open_audit(&config, operator_gid)?;
    let audit_dir = audit.dir().to_path_buf();
    let recorder = Recorder::new(Arc::clone(&audit));
    // 3. The secrets in the environment, redacted everywhere from now on.
    let api_key = crate::llm_key::read(&config.llm, own_uid)
        .map_err(|e| ConfigFault::wrap(anyhow::anyhow!(e)))?;
    let secret_store = crate::secret_store::SecretStore::load(&config.secrets, own_uid)
        .map_err(|e| ConfigFault::wrap(anyhow::anyhow!(e)))?;
    let secrets = scan_secrets(api_key, &secret_store, &audit);
    let (telemetry_sink, telemetry_worker) = start_telemetry(&config, &secrets.redactor)?;
    let recorder = recorder.with_telemetry(telemetry_sink);
    // 4. The policy engine.
    let engine = crate::policy_handle::PolicyHandle::new(crate::check::in_force(&config)?);
    // 5. The sandbox backend (orphans are reaped below, once recorded).
    let backends = build_backends(&config, &state_dir, &audit_dir, &recorder).await?;
    let llm = build_llm(&config, secrets.api_key).map_err(ConfigFault::wrap)?;
    let (agent_socket, operator_socket) = socket_paths(passed.as_ref(), &state_dir);
    let config_file = opts
        .config
        .exists()
        .then(|| std::fs::canonicalize(&opts.config).unwrap_or_else(|_| opts.config.clone()));
    // The host's own addresses (docs/OPERATIONS.md "The supervisor's
    // privileged steps, in order"): read now, then kept fresh by
    // netlink notifications (with a periodic backstop).
    let host_addrs = HostAddrWatch::start();
    let hooks = crate::hooks::Hooks::open(&state_dir)
        .map_err(|e| anyhow::anyhow!("client sessions in {}: {e}", state_dir.display()))?;

    let sup = Arc::new(Supervisor {
        paths: Paths {
            state_dir: state_dir.clone(),
            agent_socket: agent_socket.clone(),
            operator_socket: operator_socket.clone(),
            config_file,
        },
        engine,
        audit,
        recorder,
        redactor: secrets.redactor,
        secrets: secrets.host,
        sessions: Sessions::default(),
        approvals: Approvals::default(),
        backends,
        llm,
        started: Instant::now(),
        own_uid,
        operator_gid,
        conns,
        shutdown: CancellationToken::new(),
        disk: crate::disk::DiskGuard::new(config.sandbox.min_free_mb),
        refusals: crate::refusals::Refusals::default(),
        host_addrs,
        hooks,
        secret_store: Arc::new(secret_store),
        reloads: crate::reload::Reloads::new(reload_from),
        walls: crate::wall::Walls::default(),
        execs: crate::execs::Execs::default(),
        leases: Default::default(),
        config,
    });

    record_config(&sup)?;
    record_host_addresses(&sup);
    reap_orphans(&sup).await;

    // 6. The two sockets.
    let owns_sockets = passed.is_none();
    let (agent_listener, operator_listener) =
        listeners(passed, &agent_socket, &operator_socket, operator_gid)?;
    let stop_serving = CancellationToken::new();
    let servers = serve(&sup, agent_listener, operator_listener, &stop_serving).await?;
    spawn_maintenance(&sup);
    crate::telemetry::metrics::spawn(&sup);

    // 7. The ready line, then serve until a signal.
    // Caught from before the ready line on: a service manager (or a test)
    // may stop us the moment we say we are ready.
    let mut signals = Signals::install()?;
    announce_ready(&sup, &agent_socket, &operator_socket);
    activation::spawn_watchdog(&sup.shutdown);
    let signal = crate::reload::until_stopped(&sup, &mut signals).await;
    shut_down(&sup, signal, stop_serving, servers, telemetry_worker).await?;
    // Passed sockets belong to the service manager, which keeps listening
    // on them to start us again.
    if owns_sockets {
        let _ = [&agent_socket, &operator_socket].map(std::fs::remove_file);
    }
    Ok(())
}

/// Raises the soft RLIMIT_NOFILE to the hard limit, checks `fd_reserve` fits
/// in it, and sets the connection bounds.
fn connection_bounds(config: &Config) -> anyhow::Result<conn::Connections> {
    let fds = conn::fds::raise().context("cannot raise the file descriptor limit")?;
    conn::fds::check_reserve(fds, config.supervisor.fd_reserve).map_err(anyhow::Error::msg)?;
    Ok(conn::Connections::new(conn::Bounds {
        max_per_uid: config.supervisor.max_connections_per_uid,
        idle: Duration::from_secs(config.supervisor.idle_connection_timeout_s),
        fds,
        fd_reserve: config.supervisor.fd_reserve,
    }))
}

/// The gid of `[supervisor] operator_group`, when one is set.
fn operator_gid(config: &Config) -> anyhow::Result<Option<u32>> {
    match &config.supervisor.operator_group {
        Some(name) => Ok(Some(auth::group_gid(name).ok_or_else(|| {
            ConfigFault::wrap(anyhow::anyhow!("operator group {name:?} does not exist; create it (groupadd {name}) or remove operator_group"))
        })?)),
        None => Ok(None),
    }
}

/// Opens the audit dir (wrong permissions stop the start), holds back its
/// reserve and opens the supervisor's log.
fn open_audit(config: &Config, operator_gid: Option<u32>) -> anyhow::Result<Arc<Audit>> {
    let audit = Arc::new(Audit::open(
        &config.audit.dir,
        config.audit.sync,
        operator_gid,
    )?);
    // The reserve first, so even this run's first records can draw on it.
    reserve_audit_space(&audit, config.audit.reserve_mb);
    // Opens (or rotates to) this run's supervisor log now, so a broken one
    // is found at start.
    audit.supervisor_log()?;
    Ok(audit)
}

/// What [`scan_secrets`] found.
struct Secrets {
    host: tollgate_audit::EnvScan,
    api_key: Option<String>,
    redactor: Redactor,
}

/// Scans the environment for secrets, reads the LLM's API key, and gives the
/// audit log the redactor of them all.
fn scan_secrets(
    api_key: Option<String>,
    store: &crate::secret_store::SecretStore,
    audit: &Audit,
) -> Secrets {
    let host_secrets = tollgate_audit::scan_env();
    let mut secret_values = host_secrets.values().to_vec();
    if let Some(k) = &api_key {
        secret_values.push(k.clone());
    }
    // Every [[secrets]] value too (docs/THREAT_MODEL.md "Secrets").
    secret_values.extend(store.values());
    let redactor = Redactor::new(secret_values);
    // The audit log redacts the same values in every record it writes.
    audit.set_redactor(redactor.clone());
    Secrets {
        host: host_secrets,
        api_key,
        redactor,
    }
}

/// OpenTelemetry (off unless [telemetry] endpoint is set): a bounded queue
/// the recorder offers events to, and a worker that exports them.
fn start_telemetry(
    config: &Config,
    redactor: &Redactor,
) -> anyhow::Result<(
    Option<crate::telemetry::Sink>,
    Option<crate::telemetry::Worker>,
)> {
    Ok(
        match crate::telemetry::start(&config.telemetry, redactor.clone())? {
            Some((sink, worker)) => (Some(sink), Some(worker)),
            None => (None, None),
        },
    )
}

/// The sandbox backend the config chose (an unavailable one is recorded as
/// such, see [`Backends::new`]).
async fn build_backends(
    config: &Config,
    state_dir: &Path,
    audit_dir: &Path,
    recorder: &Recorder,
) -> anyhow::Result<Backends> {
    use tollgate_config::AttributeRefusals as A;
    use tollgate_sandbox::native::AttributionMode as M;
    tollgate_sandbox::native::set_attribution(match config.sandbox.attribute_refusals {
        A::Auto => M::Auto,
        A::On => M::On,
        A::Off => M::Off,
    });
    Ok(Backends::new(
        config.sandbox.backend,
        BackendSettings::of(
            config,
            state_dir,
            audit_dir,
            record_reaped(recorder.clone()),
        )?,
    )
    .await)
}

/// The LLM provider of `[llm]`.
fn build_llm(config: &Config, api_key: Option<String>) -> anyhow::Result<Arc<dyn Provider>> {
    Ok(match config.llm.provider {
        ProviderChoice::Script => Arc::new(match &config.llm.script {
            Some(p) => Script::load(p).map_err(|e| anyhow::anyhow!("[llm] {e}"))?,
            None => Script::empty(),
        }),
        ProviderChoice::Openai => Arc::new(
            OpenAi::new(
                &config.llm.base_url,
                api_key,
                config.llm.max_response_bytes,
                config.llm.proxy.as_deref(),
            )
            .map_err(|e| anyhow::anyhow!("[llm] {e}"))?,
        ),
    })
}

/// Where agent.sock and operator.sock are: the passed sockets' paths, or in
/// the state dir.
fn socket_paths(passed: Option<&activation::Passed>, state_dir: &Path) -> (PathBuf, PathBuf) {
    match passed {
        Some(p) => (p.agent.path.clone(), p.operator.path.clone()),
        None => (
            state_dir.join("agent.sock"),
            state_dir.join("operator.sock"),
        ),
    }
}

/// The `config` event: what this run is, as configured.
fn record_config(sup: &Supervisor) -> anyhow::Result<()> {
    sup.recorder.write(
        Log::Supervisor(""),
        Event::Config(config_record(sup)),
        Durable::AsConfigured,
        Priority::Ordinary,
    )?;
    Ok(())
}

/// Reaps the sandboxes a crashed predecessor left with either backend
/// (docs/OPERATIONS.md, "After a crash"), and records them: the configured
/// backend's now, the other's in the background, so an engine that is down
/// or slow never delays the start. A sandbox asked of the other backend
/// meanwhile waits for its reaping (it is part of building it).
async fn reap_orphans(sup: &Arc<Supervisor>) {
    match sup.backends.primary().reap_orphans().await {
        Ok(reaped) => (record_reaped(sup.recorder.clone()))(reaped),
        Err(e) => tracing::warn!(error = %e, "reaping orphaned sandboxes failed"),
    }
    let other = sup.backends.primary_choice().other();
    let sup = Arc::clone(sup);
    tokio::spawn(async move {
        match sup.backends.get(other).await {
            Ok((_, reaped)) => (record_reaped(sup.recorder.clone()))(reaped),
            Err(e) => tracing::info!(
                backend = other.as_str(),
                error = %e,
                "the other sandbox backend cannot be built, so nothing it left is reaped now"
            ),
        }
    });
}

/// The two gRPC servers (each with health and reflection) on their
/// listeners, until `stop_serving`.
async fn serve(
    sup: &Arc<Supervisor>,
    agent_listener: UnixListener,
    operator_listener: UnixListener,
    stop_serving: &CancellationToken,
) -> anyhow::Result<tokio::task::JoinHandle<(ServeResult, ServeResult)>> {
    let (health_a, health_svc_a) = tonic_health::server::health_reporter();
    health_a
        .set_serving::<pb::agent_service_server::AgentServiceServer<AgentSvc>>()
        .await;
    let (health_o, health_svc_o) = tonic_health::server::health_reporter();
    health_o
        .set_serving::<pb::operator_service_server::OperatorServiceServer<OperatorSvc>>()
        .await;
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
            .build_v1()
    };
    let reflection_a = reflection().context("building the reflection service")?;
    let reflection_o = reflection().context("building the reflection service")?;

    let agent_incoming = sup.conns.incoming(agent_listener, conn::Socket::Agent);
    let operator_incoming = sup
        .conns
        .incoming(operator_listener, conn::Socket::Operator);
    let agent_server = Server::builder()
        .layer(conn::ActivityLayer)
        .add_service(Guard::agent(
            pb::agent_service_server::AgentServiceServer::new(AgentSvc {
                sup: Arc::clone(sup),
            }),
            Arc::clone(sup),
        ))
        .add_service(Guard::agent(
            pb::client_hooks_server::ClientHooksServer::new(crate::hooks::HookSvc {
                sup: Arc::clone(sup),
            })
            .max_decoding_message_size(crate::hooks::MAX_EVENT_BYTES + 64 * 1024),
            Arc::clone(sup),
        ))
        .add_service(health_svc_a)
        .add_service(reflection_a)
        .serve_with_incoming_shutdown(agent_incoming, stop_serving.clone().cancelled_owned());
    let operator_server = Server::builder()
        .layer(conn::ActivityLayer)
        .add_service(Guard::operator(
            pb::operator_service_server::OperatorServiceServer::new(OperatorSvc {
                sup: Arc::clone(sup),
            }),
            Arc::clone(sup),
        ))
        .add_service(health_svc_o)
        .add_service(reflection_o)
        .serve_with_incoming_shutdown(operator_incoming, stop_serving.clone().cancelled_owned());
    Ok(tokio::spawn(async move {
        tokio::join!(agent_server, operator_server)
    }))
}

/// What one gRPC server ends with.
type ServeResult = Result<(), tonic::transport::Error>;

/// The background work until shutdown: expired sessions reaped every five
/// seconds, the disk watched, the audit dir looked after.
fn spawn_maintenance(sup: &Arc<Supervisor>) {
    let reaper_sup = Arc::clone(sup);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(5)) => reaper_sup.reap_expired().await,
                _ = reaper_sup.shutdown.cancelled() => break,
            }
        }
    });
    tokio::spawn(crate::disk::watch(Arc::clone(sup)));
    let audit_sup = Arc::clone(sup);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(AUDIT_MAINTENANCE) => audit_maintenance(&audit_sup).await,
                _ = audit_sup.shutdown.cancelled() => break,
            }
        }
    });
}

/// Tells the service manager, and prints the ready line on stderr.
fn announce_ready(sup: &Supervisor, agent_socket: &Path, operator_socket: &Path) {
    activation::notify_ready(agent_socket, operator_socket);
    // A reader of stderr that went away must not stop the supervisor.
    let line = tollgate_proto::ready::ReadyLine {
        agent: agent_socket.to_path_buf(),
        operator: operator_socket.to_path_buf(),
        sandbox: sup.backends.primary().kind().as_str().to_string(),
    };
    let _ = writeln!(std::io::stderr(), "{line}");
    tracing::info!(target: LIFECYCLE, agent = %agent_socket.display(), operator = %operator_socket.display(), "ready");
}

/// On SIGTERM/SIGINT: revoke every session, kill sandboxes, record the
/// shutdown, stop serving and flush the audit log and the telemetry.
async fn shut_down(
    sup: &Supervisor,
    signal: &'static str,
    stop_serving: CancellationToken,
    servers: tokio::task::JoinHandle<(ServeResult, ServeResult)>,
    telemetry_worker: Option<crate::telemetry::Worker>,
) -> anyhow::Result<()> {
    tracing::info!(target: LIFECYCLE, signal, "shutting down");
    activation::notify_stopping();
    let ended = sup
        .end_all(
            State::Revoked,
            &format!("supervisor shutting down ({signal})"),
            "supervisor",
        )
        .await;
    sup.shutdown.cancel();
    sup.backends.shutdown().await;
    // Anchors still owed (the disk was full when their sessions closed):
    // their last chance in this run.
    audit_maintenance(sup).await;
    let unanchored = sup.audit.unanchored();
    let _ = sup.recorder.write(
        Log::Supervisor(""),
        Event::Shutdown(event::Shutdown {
            signal: signal.to_string(),
            sessions_revoked: ended.len() as u64,
            audit_refusals: sup.refusals.total(),
            unanchored: unanchored.iter().map(|p| p.display().to_string()).collect(),
        }),
        Durable::AsConfigured,
        Priority::Essential,
    );
    stop_serving.cancel();
    // Streams have been ended above; give in-flight unary calls a moment.
    let _ = tokio::time::timeout(Duration::from_secs(3), servers).await;
    sup.audit.flush()?;
    if let Some(worker) = telemetry_worker {
        worker.finish(Duration::from_secs(2)).await;
    }
    Ok(())
}

/// The `config` record: what this supervisor runs with.
pub(crate) fn config_record(sup: &Supervisor) -> event::ConfigRecord {
    let strength = sup.backends.primary().strength();
    let policy = sup.engine.load();
    let [allow, ask, deny] = policy.rule_counts().map(|n| n as u64);
    event::ConfigRecord {
        version: env!("CARGO_PKG_VERSION").to_string(),
        pid: u64::from(std::process::id()),
        uid: u64::from(sup.own_uid),
        config_file: sup
            .paths
            .config_file
            .as_ref()
            .map(|p| p.display().to_string()),
        state_dir: sup.paths.state_dir.display().to_string(),
        audit_dir: sup.audit.dir().display().to_string(),
        audit_sync: sup.audit.sync_mode(),
        sandbox: strength.backend.as_str().to_string(),
        sandbox_strength: strength.summary,
        sandbox_missing: strength.missing,
        llm_provider: sup.llm.name().to_string(),
        host_secret_env_count: sup.secrets.count() as u64,
        rules: event::RuleCounts { allow, ask, deny },
        policy_digest: Some(policy.digest().to_string()),
        reload: None,
        default_mode: sup.config.session.default_mode.as_str().to_string(),
        max_mode: sup.config.session.max_mode.as_str().to_string(),
        auto_approve: sup.config.session.auto_approve,
        audit_reserve: sup.audit.reserve_status(),
        disk_min_free_mb: sup.disk.floor_mb(),
    }
}

/// Records each sandbox a crashed predecessor left and that was reaped.
fn record_reaped(recorder: Recorder) -> tollgate_sandbox::docker::OnReaped {
    Arc::new(move |reaped: Vec<tollgate_sandbox::Reaped>| {
        for r in reaped {
            let _ = recorder.write(
                Log::Supervisor(&r.session_id),
                Event::Recovered(event::Recovered { detail: r.detail }),
                Durable::AsConfigured,
                Priority::Ordinary,
            );
        }
    })
}

/// How often the audit directory is looked after (see [`audit_maintenance`]).
const AUDIT_MAINTENANCE: Duration = Duration::from_secs(1);

/// Holds back `[audit] reserve_mb` in the audit directory. A disk with no
/// room for all of it now still lets the supervisor start (it is grown back
/// later); the shortfall is said.
fn reserve_audit_space(audit: &Audit, reserve_mb: u64) {
    match audit.set_reserve(reserve_mb << 20) {
        Ok(r) if r.held < r.target => tracing::warn!(
            held_mb = r.held >> 20,
            target_mb = r.target >> 20,
            "the audit disk has no room for all of [audit] reserve_mb; the rest is added when it has"
        ),
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(error = %e, "cannot hold back the audit reserve; a full disk will refuse revocations and anchors too")
        }
    }
}

/// Once a second: grows the audit reserve back when the disk has room,
/// writes the anchors owed by sessions that closed while it was full, and
/// logs the summary of rate-limited refusals.
async fn audit_maintenance(sup: &Supervisor) {
    let audit = Arc::clone(&sup.audit);
    let work = move || {
        audit.replenish_reserve();
        if !audit.unanchored().is_empty() {
            audit.retry_anchors();
        }
    };
    // statvfs, fallocate and fsync block: off the async threads.
    if let Err(e) = tokio::task::spawn_blocking(work).await {
        tracing::error!(error = %e, "audit maintenance failed");
    }
    if let Some(more) = sup.refusals.tick() {
        sup.record_refusal_summary(more);
    }
}

/// The signals that stop the supervisor.
pub(crate) struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> anyhow::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            term: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
            int: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
            hup: signal(SignalKind::hangup()).context("installing the SIGHUP handler")?,
        })
    }

    pub(crate) async fn wait(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
            _ = self.hup.recv() => "SIGHUP",
        }
    }
}

/// Creates the state dir (0755) or checks an existing one: owned by us and
/// not writable by others.
fn prepare_state_dir(dir: &Path, own_uid: u32) -> anyhow::Result<PathBuf> {
    match std::fs::symlink_metadata(dir) {
        Ok(m) => {
            if !m.is_dir() {
                bail!("state dir {} is not a directory", dir.display());
            }
            if m.uid() != own_uid {
                bail!(
                    "state dir {} is owned by uid {}, not by the supervisor (uid {own_uid})",
                    dir.display(),
                    m.uid()
                );
            }
            if m.mode() & 0o022 != 0 {
                bail!(
                    "state dir {} is writable by group or others (mode {:o}); chmod 755 it",
                    dir.display(),
                    m.mode() & 0o7777
                );
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).with_context(|| {
                format!(
                    "cannot create state dir {}; pass --state-dir DIR",
                    dir.display()
                )
            })?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
                .with_context(|| format!("cannot set the mode of state dir {}", dir.display()))?;
        }
        Err(e) => bail!("state dir {}: {e}", dir.display()),
    }
    std::fs::canonicalize(dir).with_context(|| format!("state dir {}", dir.display()))
}

/// The two listeners: the ones the service manager passed, or our own.
fn listeners(
    passed: Option<activation::Passed>,
    agent_socket: &Path,
    operator_socket: &Path,
    operator_gid: Option<u32>,
) -> anyhow::Result<(UnixListener, UnixListener)> {
    if let Some(p) = passed {
        let adopt = |s: activation::PassedSocket| {
            UnixListener::from_std(s.listener)
                .with_context(|| format!("cannot serve on passed socket {}", s.path.display()))
        };
        return Ok((adopt(p.agent)?, adopt(p.operator)?));
    }
    let agent = bind(agent_socket, 0o666, None)?;
    let operator = bind(
        operator_socket,
        if operator_gid.is_some() { 0o660 } else { 0o600 },
        operator_gid,
    )?;
    Ok((agent, operator))
}

/// Binds a socket, replacing a stale socket file (never a live one, and
/// never a file that is not a socket), then sets its mode and group.
fn bind(path: &Path, mode: u32, group: Option<u32>) -> anyhow::Result<UnixListener> {
    use std::os::unix::fs::FileTypeExt;
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if !m.file_type().is_socket() {
            bail!("{} exists and is not a socket; remove it", path.display());
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            bail!(
                "another supervisor is listening on {}; stop it first",
                path.display()
            );
        }
        std::fs::remove_file(path)
            .with_context(|| format!("removing the stale socket {}", path.display()))?;
    }
    let listener =
        UnixListener::bind(path).with_context(|| format!("cannot bind {}", path.display()))?;
    if let Some(gid) = group {
        nix::unistd::chown(path, None, Some(nix::unistd::Gid::from_raw(gid)))
            .with_context(|| format!("cannot set the group of {}", path.display()))?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("cannot set the mode of {}", path.display()))?;
    Ok(listener)
}

/// Records the host's addresses in the supervisor's log (`host_addresses`):
/// the set read at start, then every change, until shutdown.
fn record_host_addresses(sup: &Arc<Supervisor>) {
    let mut changes = sup.host_addrs.subscribe();
    let sup = Arc::clone(sup);
    tokio::spawn(async move {
        loop {
            let published = changes.borrow_and_update().clone();
            let record = host_addrs::record(&published);
            match published.snapshot.as_ref() {
                Ok(set) => tracing::info!(
                    count = set.len(),
                    trigger = published.trigger.as_str(),
                    "the host's own addresses (refused to webfetch)"
                ),
                Err(e) => tracing::error!(error = %e, "every webfetch is refused"),
            }
            if let Err(e) = sup.recorder.write(
                Log::Supervisor(""),
                record,
                Durable::AsConfigured,
                Priority::Ordinary,
            ) {
                tracing::warn!(error = %e, "cannot record the host's addresses");
            }
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { return },
                _ = sup.shutdown.cancelled() => return,
            }
        }
    });
}
