//! The native backend: namespaces + a curated read-only root + Landlock +
//! seccomp, no daemon needed.
//!
//! One sandbox per session. The supervisor re-executes itself as a
//! single-threaded helper (`supervisor __sandbox-init`, [`init_main`]); the
//! helper unshares, forks pid 1 of the new pid namespace, which restricts
//! itself completely and stays for the whole session as a tiny init. Each
//! command is forked inside it (own session and process group, stdio passed
//! by fd so output never flows through pid 1). Killing pid 1 tears down the
//! whole tree. The privileged steps, in order, are in [`helper`]; one module
//! per step: [`mounts`], [`rlimits`], [`credentials`], [`landlock`] (and
//! each command's own domain, [`per_call`], from /etc as [`etc_scan`]
//! reads it), [`seccomp`], then [`init`]. The supervisor side is this file, [`exec`],
//! [`cgroup`] and [`record`].
//!
//! Strength is probed once ([`probe`]); when the host lacks any piece,
//! [`NativeBackend::create`] refuses with `SandboxError::Unavailable` naming
//! it. As root, sandboxes run as the session owner with every capability
//! dropped (bounding set too) and pids/memory/cpu cgroups; as an ordinary
//! user, rootless: a user namespace mapping only the supervisor's own uid,
//! and sessions only for that uid.

mod audit;
mod cgroup;
mod credentials;
mod exec;
mod helper;
mod home;
mod init;
pub use audit::{AttributionMode, attribution_status, set_attribution};
mod etc_scan;
mod landlock;
mod mounts;
mod per_call;
pub(crate) use mounts::SYSTEM_DIRS;
mod probe;
mod protocol;
mod record;
mod rlimits;
pub(crate) mod seccomp;
#[cfg(all(test, target_arch = "x86_64"))]
mod seccomp_numbers;
pub(crate) mod sys;

use std::collections::HashMap;

use bytes::Bytes;
use std::hash::{Hash, Hasher};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::{
    Backend, BackendKind, DoctorCheck, ExecOutcome, ExecRequest, Output, Reaped, Sandbox,
    SandboxError, SandboxSpec, Strength,
};
use protocol::{AsyncControl, FromInit, InitConfig};

pub use helper::{INIT_ARG, init_main};

/// `supervisorctl doctor`'s native checks: Landlock ABI, seccomp,
/// namespaces, the mount API, user namespaces, cgroups.
pub fn doctor_checks() -> Vec<DoctorCheck> {
    probe::doctor_checks()
}

/// The seccomp policy (allowed, conditional, denied syscalls) as Markdown.
pub fn seccomp_policy_markdown() -> String {
    seccomp::policy_markdown()
}

/// A refused x86_64 call's name and why, in words (seccomp.rs, from the
/// one table both backends are built from).
pub fn syscall_refused(nr: u32) -> (String, String) {
    seccomp::why_refused(nr)
}

/// The argument that decided the refusal of x86_64 call `nr` (`flags`,
/// `mode`, `request`, `family`, `persona`), for an argument-checked call.
pub fn syscall_argument(nr: u32) -> Option<&'static str> {
    seccomp::deciding_argument(&seccomp::why_refused(nr).0).map(|(a, _)| a)
}

/// What the daemon configures.
#[derive(Debug, Clone)]
pub struct NativeConfig {
    /// The binary re-executed as `<helper_exe> __sandbox-init` (the
    /// supervisor itself, or an example binary in tests).
    pub helper_exe: PathBuf,
    /// Where `sandboxes/<session>.json` records live (for orphan reaping).
    pub state_dir: PathBuf,
}

/// Tunables with safe defaults ([`NativeBackend::with_options`]).
#[derive(Debug, Clone)]
pub struct NativeOptions {
    /// Per-command CPU-time limit in seconds (SIGXCPU, then SIGKILL).
    pub rlimit_cpu_s: u64,
    /// RLIMIT_NPROC backstop for non-root session uids when running as root
    /// (the pids cgroup is the real cap). Its hard limit cannot be raised.
    pub rlimit_nproc: u64,
    /// Name of the cgroup directory under each hierarchy.
    pub cgroup_parent: String,
    /// Longest wait for a new sandbox to report ready.
    pub setup_timeout: Duration,
    /// How long to keep reading output after a command's group was killed
    /// (a process that left the group may still hold the pipe).
    pub drain_grace: Duration,
    /// The Landlock ABI to insist on; values below the 6 the rules need are
    /// raised to 6 (a lower setting never weakens the sandbox).
    pub min_landlock_abi: i64,
}

impl Default for NativeOptions {
    fn default() -> Self {
        NativeOptions {
            rlimit_cpu_s: 3600,
            rlimit_nproc: 16384,
            cgroup_parent: "tollgate".to_string(),
            setup_timeout: Duration::from_secs(10),
            drain_grace: Duration::from_millis(250),
            min_landlock_abi: 6,
        }
    }
}

/// A failed privileged step inside the helper or pid 1.
#[derive(Debug, thiserror::Error)]
#[error("{step}: {detail}")]
pub(crate) struct SetupError {
    pub step: &'static str,
    pub detail: String,
}

pub struct NativeBackend {
    cfg: NativeConfig,
    opts: NativeOptions,
    probe: probe::Probe,
    /// Distinguishes this supervisor's cgroups from other supervisors'.
    instance: String,
}

impl std::fmt::Debug for NativeBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeBackend")
            .field("helper_exe", &self.cfg.helper_exe)
            .field("state_dir", &self.cfg.state_dir)
            .field("rootless", &self.probe.rootless)
            .finish()
    }
}

fn instance_name(state_dir: &Path) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    state_dir.hash(&mut h);
    format!("{:016x}", h.finish())
}

impl NativeBackend {
    /// Probes the host once. Succeeds even when the host is too weak; then
    /// `strength().missing` says why and every `create` is refused.
    pub fn new(cfg: NativeConfig) -> Result<NativeBackend, SandboxError> {
        NativeBackend::with_options(cfg, NativeOptions::default())
    }

    pub fn with_options(
        cfg: NativeConfig,
        opts: NativeOptions,
    ) -> Result<NativeBackend, SandboxError> {
        if !cfg.helper_exe.is_absolute() {
            return Err(SandboxError::Refused(format!(
                "helper executable {} must be an absolute path",
                cfg.helper_exe.display()
            )));
        }
        let state_dir = std::path::absolute(&cfg.state_dir).map_err(|e| SandboxError::Io {
            context: format!("state dir {}", cfg.state_dir.display()),
            source: e,
        })?;
        let instance = instance_name(&state_dir);
        let mut probe = probe::probe();
        probe.need_abi = opts.min_landlock_abi;
        Ok(NativeBackend {
            cfg: NativeConfig {
                helper_exe: cfg.helper_exe,
                state_dir,
            },
            opts,
            probe,
            instance,
        })
    }

    /// True when running without root (user namespace mode).
    pub fn is_rootless(&self) -> bool {
        self.probe.rootless
    }

    /// [`Backend::create`] with the concrete type (tests and tools that need
    /// [`NativeSandbox::exec_with_stdin`] or [`NativeSandbox::init_pid`]).
    pub async fn create_native(
        &self,
        spec: &SandboxSpec,
    ) -> Result<Arc<NativeSandbox>, SandboxError> {
        let missing = self.probe.missing();
        if !missing.is_empty() {
            return Err(SandboxError::Unavailable(format!(
                "the native sandbox cannot be fully enforced on this host; missing: {}",
                missing.join("; ")
            )));
        }
        self.validate(spec)?;
        // What the host runs by itself: decided and reserved here, on the
        // host; attached inside by pid 1 (mounts.rs).
        let plan = crate::host_exec::plan(
            &spec.workspace,
            &spec.host_exec,
            spec.home.as_deref(),
            spec.git_dir,
        )?;
        let mut reservation = crate::host_exec::reserve::acquire(
            &spec.workspace,
            spec.workspace_id,
            &plan.reserve,
            (spec.uid, spec.gid),
            crate::host_exec::reserve::Holder {
                state_dir: &self.cfg.state_dir,
                session: &spec.session_id,
                backend: crate::BackendKind::Native,
            },
        )?;
        reservation.hold(spec.lease.clone());
        let init_cfg = InitConfig {
            session_id: spec.session_id.clone(),
            workspace: spec.workspace.clone(),
            workspace_id: spec.workspace_id,
            uid: spec.uid,
            gid: spec.gid,
            env: spec.env.clone(),
            hidden: spec.hidden.clone(),
            rootless: self.probe.rootless,
            tmp_mb: spec.limits.tmp_mb,
            nofile: spec.limits.nofile,
            fsize_mb: spec.limits.fsize_mb,
            memory_mb: spec.limits.memory_mb,
            pids: spec.limits.pids,
            rlimit_cpu_s: self.opts.rlimit_cpu_s,
            rlimit_nproc: self.opts.rlimit_nproc,
            no_links_beneath: plan
                .no_links_beneath
                .iter()
                .map(|g| spec.workspace.join(g))
                .collect(),
            binds: plan.binds,
            egress: spec.egress.clone(),
            private_home: spec.private_home.clone(),
            attribute: audit::listener().is_ok(),
            wall: spec.wall,
            extra_ca: spec.extra_ca.clone(),
        };
        let cgroups = match &self.probe.cgroups {
            Some(layout) => Some(
                cgroup::CgroupSet::create(
                    layout,
                    &self.opts.cgroup_parent,
                    &self.instance,
                    &spec.session_id,
                    &spec.limits,
                )
                .map_err(|e| SandboxError::Io {
                    context: format!("cgroups of session {}", spec.session_id),
                    source: e,
                })?,
            ),
            None => None,
        };
        self.launch(&init_cfg, cgroups, reservation).await
    }

    fn validate(&self, spec: &SandboxSpec) -> Result<(), SandboxError> {
        let id = &spec.session_id;
        if id.is_empty()
            || id.len() > 64
            || !id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(SandboxError::Refused(format!(
                "session id {id:?} must be 1-64 characters of [A-Za-z0-9_-]"
            )));
        }
        let ws = &spec.workspace;
        if !mounts::is_normal_absolute(ws) {
            return Err(SandboxError::Refused(format!(
                "workspace {} must be an absolute path without . or ..",
                ws.display()
            )));
        }
        // Beneath /dev only /dev/shm/<dir> (a tmpfs of the sandbox's own,
        // where the workspace attaches at its path).
        let in_dev_shm = ws.starts_with("/dev/shm") && ws != Path::new("/dev/shm");
        if ws == Path::new("/")
            || mounts::SYSTEM_DIRS
                .iter()
                .any(|d| ws == &Path::new("/").join(d))
            || ["/proc", "/sys"].iter().any(|p| ws.starts_with(p))
            || (ws.starts_with("/dev") && !in_dev_shm)
        {
            return Err(SandboxError::Refused(format!(
                "workspace {} is a system directory",
                ws.display()
            )));
        }
        match std::fs::metadata(ws) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(SandboxError::Refused(format!(
                    "workspace {} is not a directory",
                    ws.display()
                )));
            }
            Err(e) => {
                return Err(SandboxError::Refused(format!(
                    "workspace {}: {e}",
                    ws.display()
                )));
            }
        }
        // The same check as docker's; the helper repeats it on the directory
        // it actually opens.
        if let Some(id) = spec.workspace_id {
            id.check(ws)?;
        }
        for h in &spec.hidden {
            if mounts::is_within(ws, h) || mounts::is_within(h, ws) {
                return Err(SandboxError::Refused(format!(
                    "workspace {} overlaps the hidden path {}",
                    ws.display(),
                    h.display()
                )));
            }
        }
        for (k, v) in &spec.env {
            if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
                return Err(SandboxError::Refused(format!(
                    "environment variable {k:?} is malformed"
                )));
            }
        }
        if self.probe.rootless {
            let (uid, gid) = (
                nix::unistd::geteuid().as_raw(),
                nix::unistd::getegid().as_raw(),
            );
            if spec.uid != uid || spec.gid != gid {
                return Err(SandboxError::Refused(format!(
                    "a rootless supervisor (uid {uid}, gid {gid}) runs sandboxes only for itself, not for uid {} gid {}; run the supervisor as root for other users",
                    spec.uid, spec.gid
                )));
            }
        }
        Ok(())
    }

    async fn launch(
        &self,
        init_cfg: &InitConfig,
        cgroups: Option<cgroup::CgroupSet>,
        reservation: crate::host_exec::reserve::Reservation,
    ) -> Result<Arc<NativeSandbox>, SandboxError> {
        let (ours, mut child, launched) = self.spawn_helper()?;
        let helper_pid = child.id();
        let helper_pidfd = match sys::pidfd_open(helper_pid as i32) {
            Ok(fd) => fd,
            Err(e) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io_error("pidfd of the sandbox helper")(e));
            }
        };
        let mut teardown = Teardown {
            init: None,
            helper: Some((child, helper_pidfd)),
            cgroups,
            record: None,
            reservation: Some(reservation),
        };
        match self.handshake(ours, init_cfg, &mut teardown).await {
            Ok((ctrl, init_pid, posture, mut timings)) => {
                timings.push((
                    "ready (supervisor side)".to_string(),
                    u64::try_from(launched.elapsed().as_micros()).unwrap_or(u64::MAX),
                ));
                tracing::debug!(session = %init_cfg.session_id, ?timings, "native sandbox ready");
                match self.write_record(init_cfg, init_pid, helper_pid, &teardown) {
                    Ok(path) => teardown.record = Some(path),
                    Err(e) => {
                        teardown.run().await;
                        return Err(e);
                    }
                }
                let ready = Ready {
                    ctrl,
                    init_pid,
                    posture,
                    timings,
                };
                Ok(self.sandbox(init_cfg, ready, teardown))
            }
            Err(e) => {
                teardown.run().await;
                Err(e)
            }
        }
    }

    /// Starts the helper (`__sandbox-init`) with an empty environment and
    /// the child end of a control socketpair as fd 3. Returns our end, the
    /// helper and when it was started.
    fn spawn_helper(&self) -> Result<(OwnedFd, Child, std::time::Instant), SandboxError> {
        let (ours, theirs) = nix::sys::socket::socketpair(
            nix::sys::socket::AddressFamily::Unix,
            nix::sys::socket::SockType::SeqPacket,
            None,
            nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        )
        .map_err(|e| io_error("control socketpair")(e.into()))?;
        let theirs_raw = theirs.as_raw_fd();
        let mut cmd = Command::new(&self.cfg.helper_exe);
        cmd.arg(INIT_ARG)
            .arg("--control-fd")
            .arg("3")
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: the closure runs in the forked child before exec and only
        // calls dup2 and fcntl, both async-signal-safe; it allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                if theirs_raw == 3 {
                    let flags = libc::fcntl(3, libc::F_GETFD);
                    if flags < 0 || libc::fcntl(3, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                } else if libc::dup2(theirs_raw, 3) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let launched = std::time::Instant::now();
        let child = cmd.spawn().map_err(|e| SandboxError::Io {
            context: format!("start sandbox helper {}", self.cfg.helper_exe.display()),
            source: e,
        })?;
        drop(theirs);
        Ok((ours, child, launched))
    }

    /// Writes the sandbox's record to the state dir (what a successor reaps
    /// should the supervisor crash); returns its path.
    fn write_record(
        &self,
        init_cfg: &InitConfig,
        init_pid: i32,
        helper_pid: u32,
        teardown: &Teardown,
    ) -> Result<PathBuf, SandboxError> {
        let init_start = record::start_time(init_pid).unwrap_or(0);
        let helper_start = record::start_time(helper_pid as i32).unwrap_or(0);
        let rec = record::Record {
            session: init_cfg.session_id.clone(),
            init_pid,
            init_start,
            helper_pid: helper_pid as i32,
            helper_start,
            cgroups: teardown
                .cgroups
                .as_ref()
                .map(|c| c.dirs.clone())
                .unwrap_or_default(),
        };
        record::write(&self.cfg.state_dir, &rec).map_err(io_error("write sandbox record"))
    }

    /// The ready sandbox, with the task that reads pid 1's reports.
    fn sandbox(
        &self,
        init_cfg: &InitConfig,
        ready: Ready,
        teardown: Teardown,
    ) -> Arc<NativeSandbox> {
        let ctrl = Arc::new(ready.ctrl);
        let shared = Arc::new(Shared {
            alive: AtomicBool::new(true),
            pending: Mutex::new(HashMap::new()),
        });
        tokio::spawn(reader(Arc::clone(&ctrl), Arc::clone(&shared)));
        Arc::new(NativeSandbox {
            session_id: init_cfg.session_id.clone(),
            workspace: init_cfg.workspace.clone(),
            init_pid: ready.init_pid,
            posture: ready.posture,
            timings: ready.timings,
            ctrl,
            shared,
            next_id: AtomicU64::new(1),
            attribution: if init_cfg.attribute {
                audit::listener().ok()
            } else {
                None
            },
            teardown: Mutex::new(Some(teardown)),
            destroy_lock: tokio::sync::Mutex::new(()),
            drain_grace: self.opts.drain_grace,
        })
    }

    /// Sends the config and waits for pid 1's `Ready`.
    async fn handshake(
        &self,
        ours: OwnedFd,
        init_cfg: &InitConfig,
        teardown: &mut Teardown,
    ) -> Result<(AsyncControl, i32, String, Vec<(String, u64)>), SandboxError> {
        let ctrl = AsyncControl::new(ours).map_err(|e| SandboxError::Io {
            context: "control socket".to_string(),
            source: e,
        })?;
        ctrl.send(init_cfg, &[])
            .await
            .map_err(|e| SandboxError::Io {
                context: "send sandbox config".to_string(),
                source: e,
            })?;
        let session = &init_cfg.session_id;
        let wait = wait_ready(&ctrl, session, teardown);
        let (pid, posture, timings) = tokio::time::timeout(self.opts.setup_timeout, wait)
            .await
            .map_err(|_| {
            SandboxError::Unavailable(format!(
                "sandbox for session {session} not ready within {:?}",
                self.opts.setup_timeout
            ))
        })??;
        Ok((ctrl, pid, posture, timings))
    }

    fn instance_dirs(&self) -> Vec<PathBuf> {
        self.probe
            .cgroups
            .as_ref()
            .map(|l| l.instance_dirs(&self.opts.cgroup_parent, &self.instance))
            .unwrap_or_default()
    }
}

#[async_trait::async_trait]
impl Backend for NativeBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Native
    }

    fn strength(&self) -> Strength {
        Strength {
            backend: BackendKind::Native,
            summary: self.probe.summary(),
            missing: self.probe.missing(),
        }
    }

    async fn create(&self, spec: &SandboxSpec) -> Result<Arc<dyn Sandbox>, SandboxError> {
        let sb: Arc<dyn Sandbox> = self.create_native(spec).await?;
        Ok(sb)
    }

    fn shell(&self) -> Option<crate::Shell> {
        Some(crate::Shell::of_host())
    }

    async fn reap_orphans(&self) -> Result<Vec<Reaped>, SandboxError> {
        let mut rows = record::reap(&self.cfg.state_dir, &self.instance_dirs()).await;
        // Placeholders only once their sandboxes are dead.
        crate::host_exec::reserve::merge(
            &mut rows,
            crate::host_exec::reserve::reap(&self.cfg.state_dir, crate::BackendKind::Native),
        );
        Ok(rows)
    }

    async fn shutdown(&self) {
        for problem in cgroup::remove_instance(&self.instance_dirs()).await {
            tracing::warn!("native sandbox: cgroup left behind at exit: {problem}");
        }
        // The records' directory, once every record is gone.
        let _ = std::fs::remove_dir(record::dir(&self.cfg.state_dir));
    }
}

/// How a command ended, as pid 1 reported it.
#[derive(Debug)]
pub(crate) enum Exit {
    Exited {
        code: Option<i32>,
        signal: Option<i32>,
    },
    SpawnFailed(String),
}

pub(crate) struct Shared {
    pub alive: AtomicBool,
    pub pending: Mutex<HashMap<u64, oneshot::Sender<Exit>>>,
}

impl Shared {
    fn take(&self, id: u64) -> Option<oneshot::Sender<Exit>> {
        self.pending.lock().ok().and_then(|mut p| p.remove(&id))
    }
}

/// Routes pid 1's reports to the waiting `exec` calls; marks the sandbox dead
/// when the control socket closes (pid 1 is gone).
async fn reader(ctrl: Arc<AsyncControl>, shared: Arc<Shared>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match ctrl.recv(&mut buf).await {
            Ok(Some(pkt)) => {
                let Ok(msg) = protocol::parse::<FromInit>(&pkt.body) else {
                    continue;
                };
                match msg {
                    FromInit::Exited { id, code, signal } => {
                        if let Some(tx) = shared.take(id) {
                            let _ = tx.send(Exit::Exited { code, signal });
                        }
                    }
                    FromInit::SpawnFailed { id, error } => {
                        if let Some(tx) = shared.take(id) {
                            let _ = tx.send(Exit::SpawnFailed(error));
                        }
                    }
                    FromInit::Helper { .. }
                    | FromInit::Ready { .. }
                    | FromInit::SetupFailed { .. } => {}
                }
            }
            Ok(None) => break,
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => continue,
            Err(_) => break,
        }
    }
    shared.alive.store(false, Ordering::SeqCst);
    if let Ok(mut p) = shared.pending.lock() {
        p.clear();
    }
}

fn io_error(context: &str) -> impl FnOnce(std::io::Error) -> SandboxError {
    let context = context.to_string();
    move |source: std::io::Error| SandboxError::Io { context, source }
}

/// What pid 1's `Ready` (with the helper's report of its pid) brings.
struct Ready {
    ctrl: AsyncControl,
    init_pid: i32,
    posture: String,
    timings: Vec<(String, u64)>,
}

/// What the setup reports said so far: pid 1 and its helper write to the
/// socket from two processes, so `Ready` may come before the helper's
/// report of the pid. Kept until both are in.
#[derive(Default)]
struct SetupReports {
    init_pid: Option<i32>,
    /// Pid 1 is moved into the session's cgroups while it sets itself up (a
    /// cgroup v1 migration waits for RCU grace periods: ms). It forks no
    /// command before `Ready` has been answered, so every command starts
    /// inside them.
    joining: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    /// Pid 1 already gone when its pid arrived: its failure report, sent
    /// before it exited, is the next packet.
    init_died: Option<std::io::Error>,
    ready: Option<(String, Vec<(String, u64)>)>,
}

/// Reads setup reports until pid 1 is ready and in its cgroups.
async fn wait_ready(
    ctrl: &AsyncControl,
    session: &str,
    teardown: &mut Teardown,
) -> Result<(i32, String, Vec<(String, u64)>), SandboxError> {
    let mut buf = vec![0u8; protocol::MAX_PACKET];
    let mut reports = SetupReports::default();
    loop {
        let pkt = match ctrl.recv(&mut buf).await {
            Ok(Some(p)) => p,
            Ok(None) => {
                return Err(SandboxError::Unavailable(match reports.init_died.take() {
                    Some(e) => format!(
                        "sandbox pid 1 of session {session} died during setup without a report: {e}"
                    ),
                    None => format!(
                        "sandbox helper for session {session} exited during setup without a report"
                    ),
                }));
            }
            Err(e) => {
                return Err(SandboxError::Io {
                    context: "sandbox setup report".to_string(),
                    source: e,
                });
            }
        };
        let msg: FromInit = protocol::parse(&pkt.body).map_err(|e| SandboxError::Io {
            context: "sandbox setup report".to_string(),
            source: e,
        })?;
        match msg {
            FromInit::Helper { init_pid: pid } => {
                reports.helper_reported(pid, pkt.fds, teardown)?;
            }
            FromInit::Ready { posture, timings } => reports.ready = Some((posture, timings)),
            FromInit::SetupFailed { step, error } => {
                return Err(SandboxError::Unavailable(format!(
                    "native sandbox setup failed at {step}: {error}"
                )));
            }
            FromInit::Exited { .. } | FromInit::SpawnFailed { .. } => {
                return Err(SandboxError::Setup(
                    "unexpected message from the sandbox during setup".to_string(),
                ));
            }
        }
        // Both are needed; until then, read on.
        let Some(pid) = reports.init_pid else {
            continue;
        };
        let Some((posture, timings)) = reports.ready.take() else {
            continue;
        };
        reports.joined(session, teardown).await?;
        return Ok((pid, posture, timings));
    }
}

impl SetupReports {
    /// The helper's report of pid 1: its pidfd goes to the teardown, and pid
    /// 1 starts joining the session's cgroups.
    fn helper_reported(
        &mut self,
        pid: i32,
        fds: Vec<OwnedFd>,
        teardown: &mut Teardown,
    ) -> Result<(), SandboxError> {
        let fd = fds
            .into_iter()
            .next()
            .ok_or_else(|| SandboxError::Setup("sandbox helper sent no pidfd".to_string()))?;
        teardown.init = Some((
            pid,
            sys::async_fd(fd, tokio::io::Interest::READABLE).map_err(|e| SandboxError::Io {
                context: "pidfd of sandbox pid 1".to_string(),
                source: e,
            })?,
        ));
        self.init_pid = Some(pid);
        if let (Some(cg), Some((_, pidfd))) = (&teardown.cgroups, &teardown.init) {
            // Still pid 1 (its helper has not reaped it), so
            // the number names the right process.
            match sys::pidfd_send_signal(pidfd.get_ref().as_fd(), 0) {
                Ok(()) => {
                    let dirs = cg.dirs.clone();
                    self.joining = Some(tokio::task::spawn_blocking(move || {
                        cgroup::join_dirs(&dirs, pid)
                    }));
                }
                Err(e) => self.init_died = Some(e),
            }
        }
        Ok(())
    }

    /// Pid 1 is alive and in its cgroups (when there are cgroups).
    async fn joined(&mut self, session: &str, teardown: &Teardown) -> Result<(), SandboxError> {
        if let Some(e) = self.init_died.take() {
            return Err(SandboxError::Unavailable(format!(
                "sandbox pid 1 of session {session} died during setup: {e}"
            )));
        }
        if let Some(j) = self.joining.take() {
            j.await
                .map_err(|e| SandboxError::Task {
                    what: "the cgroup join task".to_string(),
                    error: e.to_string(),
                })?
                .map_err(|e| SandboxError::Io {
                    context: "move the sandbox into its cgroups".to_string(),
                    source: e,
                })?;
        } else if teardown.cgroups.is_some() {
            return Err(SandboxError::Setup(
                "sandbox ready before it could join its cgroups".to_string(),
            ));
        }
        Ok(())
    }
}

/// Everything destroy() releases, in order.
struct Teardown {
    init: Option<(i32, AsyncFd<OwnedFd>)>,
    helper: Option<(Child, OwnedFd)>,
    cgroups: Option<cgroup::CgroupSet>,
    record: Option<PathBuf>,
    /// Released (placeholders removed) only once every process is gone.
    reservation: Option<crate::host_exec::reserve::Reservation>,
}

impl Teardown {
    /// SIGKILL to pid 1 (the kernel then kills the whole namespace), or to
    /// the helper when pid 1 is not known yet (pid 1 dies by PDEATHSIG).
    fn kill(&self) {
        match &self.init {
            Some((_, fd)) => {
                let _ = sys::pidfd_send_signal(fd.get_ref().as_fd(), libc::SIGKILL);
            }
            None => self.kill_helper(),
        }
    }

    fn kill_helper(&self) {
        if let Some((_, fd)) = &self.helper {
            let _ = sys::pidfd_send_signal(fd.as_fd(), libc::SIGKILL);
        }
    }

    async fn run(mut self) {
        self.kill();
        // Pid 1's pidfd turns readable only after zap_pid_ns_processes has
        // reaped every other process of the namespace.
        if let Some((_, fd)) = &self.init {
            let _ = fd.readable().await;
        }
        // The helper reaps pid 1 and exits on its own; it is only killed if
        // it does not (then pid 1's zombie goes to the host's init).
        if let Some((mut child, pidfd)) = self.helper.take() {
            if let Ok(afd) = sys::async_fd(pidfd, tokio::io::Interest::READABLE) {
                if tokio::time::timeout(Duration::from_secs(2), afd.readable())
                    .await
                    .is_err()
                {
                    let _ = sys::pidfd_send_signal(afd.get_ref().as_fd(), libc::SIGKILL);
                    let _ = afd.readable().await;
                }
            } else {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
        if let Some(cg) = &self.cgroups {
            let _ = cg.remove().await;
        }
        if let Some(r) = &self.record {
            let _ = std::fs::remove_file(r);
        }
        drop(self.reservation.take());
    }

    /// [`Teardown::run`] without a runtime (a sandbox dropped outside one):
    /// kill, wait (bounded) for pid 1's namespace to be gone, then release
    /// the placeholders; or keep them for the next start's reaper.
    fn run_blocking(mut self) {
        self.kill();
        let gone = match &self.init {
            Some((_, fd)) => {
                let mut pfd = [nix::poll::PollFd::new(
                    fd.get_ref().as_fd(),
                    nix::poll::PollFlags::POLLIN,
                )];
                matches!(nix::poll::poll(&mut pfd, 2000u16), Ok(n) if n > 0)
            }
            None => false,
        };
        if !gone && let Some(r) = self.reservation.take() {
            std::mem::forget(r);
        }
    }
}

/// One live native sandbox.
pub struct NativeSandbox {
    session_id: String,
    workspace: PathBuf,
    init_pid: i32,
    posture: String,
    timings: Vec<(String, u64)>,
    ctrl: Arc<AsyncControl>,
    shared: Arc<Shared>,
    next_id: AtomicU64,
    /// Attributes each command's refusals (audit/); `None`: not here.
    attribution: Option<&'static audit::Listener>,
    teardown: Mutex<Option<Teardown>>,
    destroy_lock: tokio::sync::Mutex<()>,
    drain_grace: Duration,
}

impl std::fmt::Debug for NativeSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeSandbox")
            .field("session_id", &self.session_id)
            .field("init_pid", &self.init_pid)
            .field("alive", &self.is_alive())
            .finish()
    }
}

impl NativeSandbox {
    /// Host pid of the sandbox's pid 1.
    pub fn init_pid(&self) -> i32 {
        self.init_pid
    }

    /// What pid 1 verified about itself before reporting ready.
    pub fn posture(&self) -> &str {
        &self.posture
    }

    /// When each setup step ended, in µs since the helper started (the
    /// helper's own clock; the last entry is the supervisor's, from spawn).
    pub fn setup_timings(&self) -> &[(String, u64)] {
        &self.timings
    }

    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    fn take_teardown(&self) -> Option<Teardown> {
        self.teardown.lock().ok().and_then(|mut t| t.take())
    }

    fn oom_kills(&self) -> Option<u64> {
        self.teardown.lock().ok().and_then(|t| {
            t.as_ref()
                .and_then(|t| t.cgroups.as_ref().map(|c| c.oom_kills()))
        })
    }
}

impl Drop for NativeSandbox {
    fn drop(&mut self) {
        if let Some(t) = self.take_teardown() {
            t.kill();
            match tokio::runtime::Handle::try_current() {
                Ok(h) => {
                    h.spawn(t.run());
                }
                Err(_) => t.run_blocking(),
            }
        }
    }
}

#[async_trait::async_trait]
impl Sandbox for NativeSandbox {
    async fn exec(
        &self,
        req: ExecRequest,
        out: mpsc::Sender<Output>,
        cancel: CancellationToken,
    ) -> Result<ExecOutcome, SandboxError> {
        self.exec_with_stdin(req, None, out, cancel).await
    }

    async fn exec_interactive(
        &self,
        req: ExecRequest,
        stdin: mpsc::Receiver<Bytes>,
        out: mpsc::Sender<Output>,
        cancel: CancellationToken,
    ) -> Result<ExecOutcome, SandboxError> {
        self.exec_fed(req, stdin, out, cancel).await
    }

    fn netns_pidfd(&self) -> Result<OwnedFd, SandboxError> {
        self.teardown
            .lock()
            .ok()
            .and_then(|t| {
                t.as_ref()
                    .and_then(|t| t.init.as_ref().map(|(_, fd)| fd.get_ref().try_clone()))
            })
            .ok_or_else(|| {
                SandboxError::Gone(format!("sandbox of session {} is gone", self.session_id))
            })?
            .map_err(|e| SandboxError::Io {
                context: "pidfd of sandbox pid 1".to_string(),
                source: e,
            })
    }

    async fn destroy(&self) -> Result<(), SandboxError> {
        let _guard = self.destroy_lock.lock().await;
        self.shared.alive.store(false, Ordering::SeqCst);
        if let Some(t) = self.take_teardown() {
            t.run().await;
        }
        Ok(())
    }

    fn is_alive(&self) -> bool {
        self.shared.alive.load(Ordering::SeqCst)
    }

    fn shell(&self) -> crate::Shell {
        // The sandbox's /bin and /usr are the host's, read-only.
        crate::Shell::of_host()
    }
}
