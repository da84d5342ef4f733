//! Starting a real `supervisor` on a temporary state dir, and driving it with
//! the real `supervisorctl` and `agent` binaries or a tonic client.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tollgate_proto::v1::agent_service_client::AgentServiceClient;
use tollgate_proto::v1::operator_service_client::OperatorServiceClient;
use tonic::transport::{Channel, Endpoint};

/// Where the workspace's binaries are: $TOLLGATE_BIN_DIR, else the directory
/// above the test executable (target/<profile>/deps/.. = target/<profile>).
pub fn bin_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("TOLLGATE_BIN_DIR") {
        return PathBuf::from(d);
    }
    let exe = std::env::current_exe().unwrap_or_default();
    let deps = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if deps.file_name().is_some_and(|n| n == "deps") {
        deps.parent().map(Path::to_path_buf).unwrap_or(deps)
    } else {
        deps
    }
}

/// The path of one of our binaries; panics with a hint when it was not built.
pub fn bin(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    assert!(
        p.exists(),
        "{} not found; build the workspace first (cargo build --workspace) or set TOLLGATE_BIN_DIR",
        p.display()
    );
    p
}

/// True when running as root. When not, returns false after printing a skip
/// note, unless TOLLGATE_REQUIRE_ROOT=1 (CI), where it panics instead.
pub fn root_or_skip(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    if std::env::var("TOLLGATE_REQUIRE_ROOT").as_deref() == Ok("1") {
        panic!("{test}: needs root and TOLLGATE_REQUIRE_ROOT=1");
    }
    eprintln!("{test}: skipped: needs root");
    false
}

/// A uid with no passwd entry and no files, for "another user" tests.
pub const OTHER_UID: u32 = 64123;

/// A directory tree for one supervisor: state, audit, workspaces.
pub struct Dirs {
    pub root: tempfile::TempDir,
    pub state: PathBuf,
    pub audit: PathBuf,
}

impl Dirs {
    pub fn new() -> Dirs {
        let root = tempfile::Builder::new()
            .prefix("tollgate-e2e-")
            .tempdir()
            .expect("temp dir");
        // Other uids must be able to reach agent.sock.
        std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let state = root.path().join("state");
        std::fs::create_dir(&state).expect("state dir");
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let audit = root.path().join("audit");
        Dirs { root, state, audit }
    }

    /// A fresh workspace directory owned by `uid`.
    pub fn workspace(&self, name: &str, uid: u32) -> PathBuf {
        let ws = self.root.path().join(name);
        std::fs::create_dir_all(&ws).expect("workspace");
        std::fs::set_permissions(&ws, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        if uid != nix::unistd::getuid().as_raw() {
            nix::unistd::chown(
                &ws,
                Some(nix::unistd::Uid::from_raw(uid)),
                Some(nix::unistd::Gid::from_raw(uid)),
            )
            .expect("chown workspace");
        }
        std::fs::canonicalize(&ws).expect("canonical")
    }
}

impl Dirs {
    /// One of our binaries, copied into this tree where every uid can reach
    /// it. A test that runs a binary as another uid must use this: the build
    /// directory may sit under a directory only root can enter (a clone in
    /// /root, or under `mktemp -d`), where that uid's exec fails with EACCES.
    /// The copy goes with the tree.
    pub fn staged_bin(&self, name: &str) -> PathBuf {
        let dir = self.root.path().join("bin");
        let staged = dir.join(name);
        if !staged.exists() {
            std::fs::create_dir_all(&dir).expect("bin dir");
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
                .expect("chmod bin dir");
            stage(&bin(name), &staged);
        }
        staged
    }
}

/// Puts `src` at `dst`: a hard link where both are on one filesystem (no
/// file is ever open for writing, so another test thread's fork cannot make
/// the exec fail with ETXTBSY), else a copy.
fn stage(src: &Path, dst: &Path) {
    if std::fs::hard_link(src, dst).is_err() {
        std::fs::copy(src, dst).expect("stage binary");
    }
    std::fs::set_permissions(dst, std::fs::Permissions::from_mode(0o755))
        .expect("chmod staged binary");
}

impl Default for Dirs {
    fn default() -> Self {
        Dirs::new()
    }
}

/// How to start a supervisor.
pub struct Builder {
    config: String,
    sandbox: Option<String>,
    env: Vec<(String, String)>,
    dirs: Option<Dirs>,
    wrapper: Vec<String>,
}

impl Builder {
    /// Runs the supervisor through a command that execs it, keeping the pid:
    /// `["prlimit", "--nofile=256:256", "--"]`, or `["ip", "netns", "exec", NS]`
    /// so it lives in another network namespace.
    pub fn wrapper(mut self, argv: &[&str]) -> Builder {
        self.wrapper = argv.iter().map(|s| s.to_string()).collect();
        self
    }

    pub fn config(mut self, toml: &str) -> Builder {
        self.config = toml.to_string();
        self
    }

    pub fn sandbox(mut self, backend: &str) -> Builder {
        self.sandbox = Some(backend.to_string());
        self
    }

    pub fn env(mut self, k: &str, v: &str) -> Builder {
        self.env.push((k.to_string(), v.to_string()));
        self
    }

    pub fn dirs(mut self, dirs: Dirs) -> Builder {
        self.dirs = Some(dirs);
        self
    }

    pub fn start(self) -> Supervisor {
        let dirs = self.dirs.unwrap_or_default();
        let config_path = dirs.root.path().join("supervisor.toml");
        std::fs::write(&config_path, &self.config).expect("write config");
        let mut cmd = match self.wrapper.split_first() {
            Some((prog, args)) => {
                let mut c = Command::new(prog);
                c.args(args).arg(bin("supervisor"));
                c
            }
            None => Command::new(bin("supervisor")),
        };
        tollgate_launch::configure(&mut cmd, &config_path, &dirs.state, &dirs.audit);
        cmd.env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".to_string()),
        );
        if let Some(b) = &self.sandbox {
            cmd.arg("--sandbox").arg(b);
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        // Its own process group, so a test's Ctrl-C does not hit it twice.
        cmd.process_group(0);
        let mut child = cmd.spawn().expect("spawn supervisor");
        let (log, ready) = tollgate_launch::wait_ready(&mut child, Duration::from_secs(30));
        let Some(ready) = ready else {
            let _ = child.kill();
            let status = child.wait();
            std::thread::sleep(Duration::from_millis(100));
            panic!(
                "supervisor did not print its ready line ({status:?}); stderr:\n{}",
                tollgate_launch::text(&log)
            );
        };
        Supervisor {
            agent_socket: dirs.state.join("agent.sock"),
            operator_socket: dirs.state.join("operator.sock"),
            config_path,
            dirs,
            child: Some(child),
            log,
            ready,
        }
    }
}

/// A running supervisor. Dropping it sends SIGTERM and waits.
pub struct Supervisor {
    pub dirs: Dirs,
    pub agent_socket: PathBuf,
    pub operator_socket: PathBuf,
    pub config_path: PathBuf,
    pub ready: String,
    child: Option<Child>,
    log: Arc<Mutex<String>>,
}

/// A config for tests: the script provider, quick approvals.
pub const TEST_CONFIG: &str = r#"
[session]
approval_timeout_s = 30

[llm]
provider = "script"
"#;

impl Supervisor {
    pub fn builder() -> Builder {
        Builder {
            config: TEST_CONFIG.to_string(),
            sandbox: None,
            env: Vec::new(),
            dirs: None,
            wrapper: Vec::new(),
        }
    }

    /// A supervisor with the test config.
    pub fn start() -> Supervisor {
        Supervisor::builder().start()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// Everything the supervisor printed on stderr so far.
    pub fn stderr(&self) -> String {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// `supervisorctl --socket <operator.sock> ARGS…`.
    pub fn ctl_cmd(&self) -> Command {
        let mut c = Command::new(bin("supervisorctl"));
        c.arg("--socket").arg(&self.operator_socket);
        c.env_remove("TOLLGATE_OPERATOR_SOCKET");
        c
    }

    /// `supervisorctl` run as `uid` (and gid `uid`), from a staged copy.
    pub fn ctl_cmd_as(&self, uid: u32) -> Command {
        let mut c = Command::new(self.dirs.staged_bin("supervisorctl"));
        c.arg("--socket").arg(&self.operator_socket);
        c.env_remove("TOLLGATE_OPERATOR_SOCKET");
        c.uid(uid).gid(uid);
        c
    }

    pub fn ctl(&self, args: &[&str]) -> Output {
        self.ctl_cmd()
            .args(args)
            .output()
            .expect("run supervisorctl")
    }

    /// `agent` with TOLLGATE_SOCKET pointing at this supervisor.
    pub fn agent_cmd(&self) -> Command {
        let mut c = Command::new(bin("agent"));
        c.env("TOLLGATE_SOCKET", &self.agent_socket);
        c
    }

    pub async fn agent_client(&self) -> AgentServiceClient<Channel> {
        agent_client(&self.agent_socket).await
    }

    /// One CallTool on a fresh agent connection (the transport must work;
    /// the response, denial or not, is the caller's to check).
    pub async fn call_tool(
        &self,
        token: &str,
        tool: &str,
        args: serde_json::Value,
    ) -> tollgate_proto::v1::CallToolResponse {
        let mut c = self.agent_client().await;
        c.call_tool(authed(
            tollgate_proto::v1::CallToolRequest {
                call_id: tool.to_string(),
                tool: tool.to_string(),
                arguments_json: args.to_string(),
            },
            token,
        ))
        .await
        .expect("CallTool")
        .into_inner()
    }

    /// A session of the test's own uid on `workspace`, in
    /// `dangerouslySkipPermissions` (nothing asks): the preamble of most
    /// run_bash tests.
    pub async fn open_skip_session(
        &self,
        workspace: &Path,
    ) -> tollgate_proto::v1::OpenSessionResponse {
        self.agent_client()
            .await
            .open_session(tollgate_proto::v1::OpenSessionRequest {
                workspace: workspace.display().to_string(),
                mode: "dangerouslySkipPermissions".to_string(),
                ..Default::default()
            })
            .await
            .expect("OpenSession")
            .into_inner()
    }

    pub async fn operator_client(&self) -> OperatorServiceClient<Channel> {
        let ch = channel(&self.operator_socket).await;
        OperatorServiceClient::new(ch)
    }

    /// Sends `sig` to the supervisor.
    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.pid() as i32);
        let _ = nix::sys::signal::kill(pid, sig);
    }

    /// SIGTERM, then wait (up to 15 s, then SIGKILL). Returns the exit status.
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return Some(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    let _ = child.kill();
                    return child.wait().ok();
                }
            }
        }
    }

    /// SIGKILL, no cleanup (crash tests).
    pub fn crash(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Audit files in the audit dir whose name starts with `prefix` (not the
    /// hidden reserve file, `.tollgate-reserve`).
    pub fn audit_files(&self, prefix: &str) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(&self.dirs.audit)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.path())
                    .filter(|p| {
                        p.file_name()
                            .and_then(|n| n.to_str())
                            .is_some_and(|n| n.starts_with(prefix) && !n.starts_with('.'))
                    })
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    /// All records of a session's audit file(s), parsed.
    pub fn session_records(&self, session: &str) -> Vec<serde_json::Value> {
        self.audit_files(&format!("audit-{session}-"))
            .iter()
            .flat_map(|p| read_records(p))
            .collect()
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        // A failing test shows what the supervisor said (and whether it was
        // still running).
        if std::thread::panicking() {
            let running = match self.child.as_mut().map(|c| c.try_wait()) {
                Some(Ok(None)) => "running".to_string(),
                Some(Ok(Some(status))) => format!("exited: {status}"),
                Some(Err(e)) => format!("unknown: {e}"),
                None => "stopped by the test".to_string(),
            };
            eprintln!(
                "--- supervisor ({running}); its stderr:\n{}--- end of supervisor stderr",
                self.stderr()
            );
        }
        self.stop();
    }
}

/// Parses a JSONL file.
pub fn read_records(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

pub async fn channel(socket: &Path) -> Channel {
    Endpoint::from_shared(format!("unix://{}", socket.display()))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect")
}

pub async fn agent_client(socket: &Path) -> AgentServiceClient<Channel> {
    AgentServiceClient::new(channel(socket).await)
}

/// A request carrying `authorization: Bearer <token>`.
pub fn authed<T>(msg: T, token: &str) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    req.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("header value"),
    );
    req
}

/// Number of open fds of a process.
pub fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|rd| rd.count())
        .unwrap_or(0)
}

/// VmRSS of a process in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The minimal sandbox image (`sandbox-image/build.sh --minimal`) of this
/// version.
pub fn minimal_image() -> String {
    format!("tollgate-sandbox:{}-minimal", env!("CARGO_PKG_VERSION"))
}

/// `docker` CLI output, or None when it failed.
pub fn docker(args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("docker")
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// True when the engine and the minimal image are there; otherwise a skip
/// note, or a panic with TOLLGATE_REQUIRE_DOCKER=1.
pub fn docker_or_skip(test: &str) -> bool {
    let why = if docker(&["info", "--format", "{{.ServerVersion}}"]).is_none() {
        "the docker engine is not reachable".to_string()
    } else if docker(&["image", "inspect", "--format", "{{.Id}}", &minimal_image()]).is_none() {
        format!(
            "{} is missing (sandbox-image/build.sh --minimal)",
            minimal_image()
        )
    } else {
        return true;
    };
    if std::env::var("TOLLGATE_REQUIRE_DOCKER").as_deref() == Ok("1") {
        panic!("{test}: {why} and TOLLGATE_REQUIRE_DOCKER=1");
    }
    eprintln!("{test}: skipped: needs docker: {why}");
    false
}

/// A test config for the Docker backend on the minimal image.
pub fn docker_config(extra: &str) -> String {
    format!(
        "{TEST_CONFIG}\n[sandbox]\nimage = \"{}\"\n{extra}\n",
        minimal_image()
    )
}

/// Held by a test for as long as a local user it made exists (or while it
/// replaces /etc/passwd itself): `useradd` and `userdel` replace
/// /etc/passwd, which a process of a native sandbox started before then
/// cannot read (docs/THREAT_MODEL.md, "`/etc` narrowed entry by entry"),
/// so no such test changes it under another one's running processes.
pub fn passwd_writer() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}
