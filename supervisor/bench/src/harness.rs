//! What every measurement group needs: a temporary directory that goes away,
//! a real `supervisor` process on it, authenticated clients, and sample loops
//! with a warm-up.

use std::future::Future;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use tollgate_proto::v1 as pb;
use tollgate_proto::v1::agent_service_client::AgentServiceClient;
use tollgate_proto::v1::operator_service_client::OperatorServiceClient;
use tollgate_sandbox::private_dir::PrivateDir;
use tonic::transport::{Channel, Endpoint};

/// A directory removed (with everything in it) when dropped; made by
/// `mkdtemp` and changed only through descriptors, as the bench may run as
/// root in a world-writable `$TMPDIR` (docs/THREAT_MODEL.md, "Names in
/// world-writable directories").
pub struct TempRoot {
    dir: Option<PrivateDir>,
    path: PathBuf,
    keep: bool,
}

impl TempRoot {
    /// `<parent>/tollgate-bench-XXXXXX`, mode 0755 (sandboxes traverse it
    /// to reach their workspace).
    pub fn new(parent: &Path) -> anyhow::Result<TempRoot> {
        let dir = PrivateDir::new(parent, "tollgate-bench-", 0o755).map_err(|e| {
            anyhow!(
                "cannot create a temporary directory in {}: {e}, hint: pass --dir DIR",
                parent.display()
            )
        })?;
        let path = std::fs::canonicalize(dir.path())
            .with_context(|| format!("cannot resolve {}", dir.path().display()))?;
        Ok(TempRoot {
            dir: Some(dir),
            path,
            keep: false,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Leave the directory (audit logs, configs) for inspection.
    pub fn keep(&mut self) {
        self.keep = true;
    }

    /// A fresh subdirectory (0755); a name that exists is an error.
    pub fn subdir(&self, name: &str) -> anyhow::Result<PathBuf> {
        let dir = self.dir.as_ref().context("the bench directory is gone")?;
        dir.mkdir(name, 0o755)
            .map_err(|e| anyhow!("cannot create {name} in {}: {e}", self.path.display()))?;
        Ok(self.path.join(name))
    }
}

impl Drop for TempRoot {
    fn drop(&mut self) {
        let Some(dir) = self.dir.take() else { return };
        if self.keep {
            eprintln!("supervisorctl: bench: kept {}", dir.keep().display());
            return;
        }
        if let Err(e) = dir.close() {
            eprintln!("supervisorctl: bench: {e}");
        }
    }
}

/// A `supervisor` started by the bench. SIGTERM and a wait when dropped.
pub struct SupervisorProc {
    child: Option<Child>,
    pub agent_socket: PathBuf,
    pub operator_socket: PathBuf,
    pub audit_dir: PathBuf,
    log: Arc<Mutex<String>>,
}

impl SupervisorProc {
    /// Writes `config` to `<dir>/supervisor.toml` and starts `exe` with state
    /// and audit dirs under `dir`; returns once it printed its ready line.
    pub fn start(
        exe: &Path,
        dir: &Path,
        config: &str,
        backend: &str,
    ) -> anyhow::Result<SupervisorProc> {
        let config_path = dir.join("supervisor.toml");
        std::fs::write(&config_path, config)
            .with_context(|| format!("cannot write {}", config_path.display()))?;
        let state_dir = dir.join("state");
        let audit_dir = dir.join("audit");
        let mut cmd = Command::new(exe);
        tollgate_launch::configure(&mut cmd, &config_path, &state_dir, &audit_dir);
        let mut child = cmd
            .arg("--sandbox")
            .arg(backend)
            .env("RUST_LOG", "warn")
            .spawn()
            .with_context(|| format!("cannot start {}", exe.display()))?;
        let (log, ready) = tollgate_launch::wait_ready(&mut child, Duration::from_secs(30));
        let mut sup = SupervisorProc {
            child: Some(child),
            agent_socket: state_dir.join("agent.sock"),
            operator_socket: state_dir.join("operator.sock"),
            audit_dir,
            log,
        };
        if ready.is_none() {
            let status = sup.stop();
            std::thread::sleep(Duration::from_millis(50));
            bail!(
                "the {backend} supervisor did not get ready (exit {status:?}); its stderr:\n{}",
                sup.stderr().trim_end()
            );
        }
        Ok(sup)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Everything it printed on stderr so far.
    pub fn stderr(&self) -> String {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// VmRSS in MiB.
    pub fn rss_mib(&self) -> Option<f64> {
        proc_status_kib(self.pid()?, "VmRSS:").map(|k| k as f64 / 1024.0)
    }

    /// CPU time and run-queue wait of all its threads so far.
    pub fn sched(&self) -> Option<Sched> {
        Sched::of(self.pid()?)
    }

    /// SIGTERM, then up to 15 s for a clean shutdown, then SIGKILL.
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).ok()?);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return Some(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                _ => {
                    eprintln!(
                        "supervisorctl: bench: supervisor ignored SIGTERM for 15 s; killing it"
                    );
                    let _ = child.kill();
                    return child.wait().ok();
                }
            }
        }
    }

    pub async fn agent_channel(&self) -> anyhow::Result<Channel> {
        channel(&self.agent_socket).await
    }

    pub async fn operator(&self) -> anyhow::Result<OperatorServiceClient<Channel>> {
        Ok(OperatorServiceClient::new(
            channel(&self.operator_socket).await?,
        ))
    }
}

impl Drop for SupervisorProc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Time a process's threads spent on a CPU and waiting for one, summed over
/// /proc/<pid>/task/*/schedstat (nanoseconds; threads that already ended
/// are not counted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sched {
    pub cpu_ns: u64,
    pub wait_ns: u64,
}

impl Sched {
    pub fn of(pid: u32) -> Option<Sched> {
        let mut total = Sched::default();
        for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
            let Ok(task) = task else { continue };
            let Ok(text) = std::fs::read_to_string(task.path().join("schedstat")) else {
                continue;
            };
            let mut f = text
                .split_whitespace()
                .map(|v| v.parse::<u64>().unwrap_or(0));
            total.cpu_ns += f.next().unwrap_or(0);
            total.wait_ns += f.next().unwrap_or(0);
        }
        Some(total)
    }

    /// "supervisor CPU 85.2 µs/call, run-queue wait 40.1 µs/call".
    pub fn per_call(before: Option<Sched>, after: Option<Sched>, calls: usize) -> String {
        match (before, after) {
            (Some(b), Some(a)) if calls > 0 => {
                let per = |x: u64, y: u64| x.saturating_sub(y) as f64 / calls as f64;
                format!(
                    "supervisor CPU {}/call, its threads' run-queue wait {}/call",
                    super::stats::fmt_nanos(per(a.cpu_ns, b.cpu_ns)),
                    super::stats::fmt_nanos(per(a.wait_ns, b.wait_ns))
                )
            }
            _ => "supervisor CPU not available".to_string(),
        }
    }
}

/// A field of /proc/<pid>/status in KiB (`VmRSS:`, `VmHWM:`).
pub fn proc_status_kib(pid: u32, field: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// A channel over a unix socket.
pub async fn channel(socket: &Path) -> anyhow::Result<Channel> {
    Endpoint::from_shared(format!("unix://{}", socket.display()))
        .context("bad socket path")?
        .connect()
        .await
        .with_context(|| format!("cannot connect to {}", socket.display()))
}

/// A request carrying `authorization: Bearer <token>`.
pub fn authed<T>(msg: T, token: &str) -> anyhow::Result<tonic::Request<T>> {
    let mut req = tonic::Request::new(msg);
    req.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}")
            .parse()
            .map_err(|_| anyhow!("the session token is not a valid header value"))?,
    );
    Ok(req)
}

/// run_bash `true`.
pub const TRUE_ARGS: &str = r#"{"command":"true"}"#;
/// run_bash printing 1 MiB (the output cap keeps 32 KiB of it; all of it
/// crosses the sandbox's wall).
pub const MIB_ARGS: &str = r#"{"command":"head -c 1048576 /dev/zero"}"#;

/// A fresh session's first run_bash `true` (which creates its sandbox) and
/// its second (warm). Returns (session id, first, second); the session is
/// closed.
pub async fn first_and_second_call(
    ch: &Channel,
    ws: &Path,
) -> anyhow::Result<(String, Duration, Duration)> {
    let mut s = AgentSession::open(ch.clone(), ws, "dangerouslySkipPermissions").await?;
    let first = s.timed_call("run_bash", TRUE_ARGS).await?;
    let second = s.timed_call("run_bash", TRUE_ARGS).await?;
    let id = s.id.clone();
    s.close().await?;
    Ok((id, first, second))
}

/// An open session, as an agent holds it.
#[derive(Clone)]
pub struct AgentSession {
    pub client: AgentServiceClient<Channel>,
    pub id: String,
    pub token: String,
}

impl AgentSession {
    pub async fn open(ch: Channel, workspace: &Path, mode: &str) -> anyhow::Result<AgentSession> {
        let mut client = AgentServiceClient::new(ch);
        let resp = client
            .open_session(pb::OpenSessionRequest {
                workspace: workspace.display().to_string(),
                mode: mode.to_string(),
                permission_mode: pb::PermissionMode::from_text(mode)
                    .unwrap_or(pb::PermissionMode::Unspecified)
                    as i32,
                client: "supervisorctl bench".to_string(),
                ..Default::default()
            })
            .await
            .map_err(|s| anyhow!("OpenSession failed: {}", s.message()))?
            .into_inner();
        Ok(AgentSession {
            client,
            id: resp.session_id,
            token: resp.token,
        })
    }

    /// One CallTool; any outcome but a successful run is an error naming why.
    pub async fn call(&mut self, tool: &str, args: &str) -> anyhow::Result<pb::CallToolResponse> {
        let req = authed(
            pb::CallToolRequest {
                call_id: "bench".to_string(),
                tool: tool.to_string(),
                arguments_json: args.to_string(),
            },
            &self.token,
        )?;
        let resp = self
            .client
            .call_tool(req)
            .await
            .map_err(|s| anyhow!("CallTool {tool} failed: {}", s.message()))?
            .into_inner();
        check_ok(tool, &resp)?;
        Ok(resp)
    }

    /// [`AgentSession::call`], timed.
    pub async fn timed_call(&mut self, tool: &str, args: &str) -> anyhow::Result<Duration> {
        let t = Instant::now();
        self.call(tool, args).await?;
        Ok(t.elapsed())
    }

    pub async fn list_tools(&mut self) -> anyhow::Result<usize> {
        Ok(self.list_tools_reply().await?.len())
    }

    /// The tools ListTools answers with, whole.
    pub async fn list_tools_reply(&mut self) -> anyhow::Result<Vec<pb::ToolSpec>> {
        let req = authed(pb::ListToolsRequest {}, &self.token)?;
        let resp = self
            .client
            .list_tools(req)
            .await
            .map_err(|s| anyhow!("ListTools failed: {}", s.message()))?;
        Ok(resp.into_inner().tools)
    }

    pub async fn close(mut self) -> anyhow::Result<()> {
        let req = authed(pb::CloseSessionRequest {}, &self.token)?;
        self.client
            .close_session(req)
            .await
            .map_err(|s| anyhow!("CloseSession failed: {}", s.message()))?;
        Ok(())
    }
}

/// A CallTool response that did not run the tool, as an error.
pub fn check_ok(tool: &str, resp: &pb::CallToolResponse) -> anyhow::Result<()> {
    if let Some(d) = &resp.denied {
        bail!(
            "{tool} was refused ({}: {}){}",
            pb::DenialCode::try_from(d.code)
                .map(|c| c.as_str_name().to_string())
                .unwrap_or_else(|_| d.code.to_string()),
            d.reason,
            if d.rule.is_empty() {
                String::new()
            } else {
                format!(" [rule {}]", d.rule)
            }
        );
    }
    if !resp.ok {
        bail!("{tool} failed: {}", resp.error);
    }
    if let Some(code) = resp.exit_code
        && code != 0
    {
        bail!("{tool} exited {code}: {}", resp.output.trim_end());
    }
    Ok(())
}

/// Warm-up iterations before `n` timed ones.
pub fn warmup_for(n: usize) -> usize {
    (n / 10).clamp(3, 30)
}

/// Runs `f` `warmup` times untimed, then `n` times timed. `f` gets the
/// iteration number (warm-up included), so each call can use fresh names.
pub async fn time_async<F, Fut, T>(
    warmup: usize,
    n: usize,
    mut f: F,
) -> anyhow::Result<Vec<Duration>>
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = anyhow::Result<T>>,
{
    for i in 0..warmup {
        f(i).await?;
    }
    let mut out = Vec::with_capacity(n);
    for i in warmup..warmup + n {
        let t = Instant::now();
        f(i).await?;
        out.push(t.elapsed());
    }
    Ok(out)
}

/// The same for blocking work (call it inside `spawn_blocking`).
pub fn time_blocking<F>(warmup: usize, n: usize, mut f: F) -> anyhow::Result<Vec<Duration>>
where
    F: FnMut(usize) -> anyhow::Result<()>,
{
    for i in 0..warmup {
        f(i)?;
    }
    let mut out = Vec::with_capacity(n);
    for i in warmup..warmup + n {
        let t = Instant::now();
        f(i)?;
        out.push(t.elapsed());
    }
    Ok(out)
}

/// Runs blocking work off the async threads.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| anyhow!("a measurement thread failed: {e}"))?
}

/// Finds a program on PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| {
            std::fs::metadata(p)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

/// Runs a command once with output captured; an error carries its stderr.
pub fn run_checked(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{:?} failed ({}): {}",
            cmd.get_program(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim_end()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs a command with no output captured; only its exit status counts.
pub fn run_quiet(cmd: &mut Command) -> anyhow::Result<()> {
    let status = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .with_context(|| format!("cannot run {cmd:?}"))?;
    if !status.success() {
        bail!("{:?} failed ({status})", cmd.get_program());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt as _;

    /// As root the bench makes its root in a world-writable `$TMPDIR`: a
    /// fresh mkdtemp name, mode set through its descriptor, subdirectories
    /// never reused, everything removed (docs/THREAT_MODEL.md, "Names in
    /// world-writable directories").
    #[test]
    fn bench_temp_root_is_fresh_and_never_reuses_a_name() {
        let parent = std::env::temp_dir();
        let planted = parent.join(format!("tollgate-bench-{}-0", std::process::id()));
        std::fs::create_dir(&planted).unwrap();
        let root = TempRoot::new(&parent).unwrap();
        assert_ne!(root.path(), std::fs::canonicalize(&planted).unwrap());
        let m = std::fs::symlink_metadata(root.path()).unwrap();
        assert!(m.is_dir());
        assert_eq!(m.mode() & 0o7777, 0o755);
        assert_eq!(m.uid(), nix::unistd::geteuid().as_raw());
        let ws = root.subdir("ws").unwrap();
        assert!(ws.is_dir());
        assert!(root.subdir("ws").is_err(), "an existing name was reused");
        let path = root.path().to_path_buf();
        drop(root);
        assert!(!path.exists());
        std::fs::remove_dir(&planted).unwrap();
    }
}
