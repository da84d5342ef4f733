//! Shared setup for the sandbox suite: the backends under test, workspaces,
//! specs and a one-call `run` helper.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod docker;
pub mod escape_cases;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tollgate_sandbox::native::{NativeBackend, NativeConfig, NativeOptions};
use tollgate_sandbox::{Backend, ExecOutcome, ExecRequest, Limits, Output, Sandbox, SandboxSpec};

/// The unprivileged uid sandboxes run as in these tests (nobody).
pub const NOBODY: u32 = 65534;

/// True when the test may run. Not root: prints `skipped: needs root` and
/// returns false, unless TOLLGATE_REQUIRE_ROOT=1, where it fails instead.
pub fn require_root() -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    if std::env::var("TOLLGATE_REQUIRE_ROOT").as_deref() == Ok("1") {
        panic!("this test needs root and TOLLGATE_REQUIRE_ROOT=1");
    }
    eprintln!("skipped: needs root");
    false
}

/// target/<profile>/examples, next to this test binary's deps/ directory.
pub fn examples_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().join("examples")
}

pub fn helper_exe() -> PathBuf {
    let p = examples_dir().join("sandbox_init");
    assert!(
        p.exists(),
        "{} missing: `cargo test -p tollgate-sandbox` builds examples",
        p.display()
    );
    p
}

pub fn sandbox_exec_exe() -> PathBuf {
    let p = examples_dir().join("sandbox_exec");
    assert!(
        p.exists(),
        "{} missing: cargo test builds examples",
        p.display()
    );
    p
}

/// A copy of `exe` in a fresh directory every uid can reach, for a test
/// that runs it as another uid: the build directory may sit under one only
/// root can enter (a clone in /root, or under `mktemp -d`), where that
/// uid's exec fails with EACCES. The copy goes with the returned directory.
pub fn staged_for_other_uids(exe: &Path) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("tollgate-bin-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let staged = dir.path().join(exe.file_name().unwrap());
    // A hard link where it can be: no file open for writing, so another
    // test thread's fork cannot make the exec fail with ETXTBSY.
    if std::fs::hard_link(exe, &staged).is_err() {
        std::fs::copy(exe, &staged).unwrap();
    }
    std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o755)).unwrap();
    (dir, staged)
}

/// A state dir for this test binary, kept for its whole run.
pub fn state_dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        tempfile::Builder::new()
            .prefix("tollgate-state-")
            .tempdir()
            .unwrap()
    })
    .path()
}

pub fn native_options() -> NativeOptions {
    NativeOptions {
        rlimit_cpu_s: 30,
        ..NativeOptions::default()
    }
}

pub fn native() -> Arc<NativeBackend> {
    native_in(state_dir())
}

pub fn native_in(state: &Path) -> Arc<NativeBackend> {
    Arc::new(
        NativeBackend::with_options(
            NativeConfig {
                helper_exe: helper_exe(),
                state_dir: state.to_path_buf(),
            },
            native_options(),
        )
        .unwrap(),
    )
}

/// Every backend this host can run: native, and docker when its helper
/// provides one.
pub async fn backends() -> Vec<(&'static str, Arc<dyn Backend>)> {
    let mut v: Vec<(&'static str, Arc<dyn Backend>)> =
        vec![("native", native() as Arc<dyn Backend>)];
    if let Some(d) = docker::backend().await {
        v.push(("docker", d));
    }
    v
}

/// A unique session id.
pub fn session(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A fresh workspace owned by `uid:gid`.
pub fn workspace(uid: u32, gid: u32) -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix("tollgate-ws-")
        .tempdir()
        .unwrap();
    std::os::unix::fs::chown(d.path(), Some(uid), Some(gid)).unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

pub fn env_for(ws: &Path) -> Vec<(String, String)> {
    vec![
        (
            "PATH".to_string(),
            "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin".to_string(),
        ),
        ("HOME".to_string(), ws.display().to_string()),
        ("LANG".to_string(), "C.UTF-8".to_string()),
        ("AGENT_SESSION_ID".to_string(), "test".to_string()),
    ]
}

pub fn spec(prefix: &str, ws: &Path, uid: u32, gid: u32) -> SandboxSpec {
    SandboxSpec {
        session_id: session(prefix),
        workspace: ws.to_path_buf(),
        workspace_id: std::fs::metadata(ws)
            .ok()
            .map(|m| tollgate_sandbox::WorkspaceId::of(&m)),
        uid,
        gid,
        env: env_for(ws),
        limits: Limits {
            memory_mb: 256,
            pids: 64,
            cpus_millis: 1000,
            nofile: 256,
            fsize_mb: 64,
            tmp_mb: 32,
        },
        hidden: vec![state_dir().to_path_buf()],
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

#[derive(Debug)]
pub struct Run {
    pub stdout: String,
    pub stderr: String,
    pub outcome: ExecOutcome,
}

impl Run {
    pub fn code(&self) -> Option<i32> {
        self.outcome.exit_code
    }
}

pub fn req(argv: &[&str], timeout: Duration) -> ExecRequest {
    ExecRequest {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        cwd: None,
        timeout,
        merge_stderr: false,
    }
}

/// Runs argv and collects everything.
pub async fn run_argv(sb: &dyn Sandbox, argv: &[&str], timeout: Duration) -> Run {
    let (tx, mut rx) = mpsc::channel(64);
    let collect = tokio::spawn(async move {
        let (mut o, mut e) = (Vec::new(), Vec::new());
        while let Some(c) = rx.recv().await {
            match c {
                Output::Stdout(b) => o.extend_from_slice(&b),
                Output::Stderr(b) => e.extend_from_slice(&b),
            }
        }
        (o, e)
    });
    let outcome = sb
        .exec(req(argv, timeout), tx, CancellationToken::new())
        .await
        .unwrap();
    let (o, e) = collect.await.unwrap();
    Run {
        stdout: String::from_utf8_lossy(&o).into_owned(),
        stderr: String::from_utf8_lossy(&e).into_owned(),
        outcome,
    }
}

/// `sh -c CMD` with a 60 s timeout.
pub async fn sh(sb: &dyn Sandbox, cmd: &str) -> Run {
    run_argv(sb, &["sh", "-c", cmd], Duration::from_secs(60)).await
}

/// Runs a Python program (stdin-free) in the sandbox.
pub async fn py(sb: &dyn Sandbox, code: &str) -> Run {
    run_argv(sb, &["python3", "-c", code], Duration::from_secs(60)).await
}

/// Host pids whose pid namespace is `ns` (the inode from /proc/<pid>/ns/pid).
pub fn pids_in_ns(ns: &str) -> Vec<i32> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(l) = std::fs::read_link(format!("/proc/{pid}/ns/pid"))
            && l.to_string_lossy() == ns
        {
            v.push(pid);
        }
    }
    v
}

pub fn pidns_of(pid: i32) -> String {
    std::fs::read_link(format!("/proc/{pid}/ns/pid"))
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// A random-enough nonce for canaries.
pub fn nonce() -> String {
    let mut b = [0u8; 8];
    use std::io::Read;
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut b)
        .unwrap();
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The static C probe (tests/probe/probe.c), compiled once per test binary
/// with the host's C compiler: it runs in any image, with no interpreter.
pub fn probe_exe() -> &'static Path {
    static PROBE: OnceLock<PathBuf> = OnceLock::new();
    PROBE.get_or_init(|| {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/probe/probe.c");
        let out = state_dir().join("probe");
        let st = std::process::Command::new("cc")
            .args(["-static", "-O2", "-o"])
            .arg(&out)
            .arg(&src)
            .status()
            .expect("a C compiler (cc) is needed to build the sandbox probe");
        assert!(st.success(), "cc -static {} failed", src.display());
        out
    })
}

/// Copies the probe into the workspace (owned by `uid`) and returns its path.
pub fn install_probe(ws: &Path, uid: u32) -> String {
    let dst = ws.join("probe");
    std::fs::copy(probe_exe(), &dst).unwrap();
    std::os::unix::fs::chown(&dst, Some(uid), Some(uid)).unwrap();
    std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o755)).unwrap();
    dst.display().to_string()
}

/// Runs the probe on the host (the control: what happens without a sandbox).
pub fn host_probe(args: &[&str]) -> String {
    let out = std::process::Command::new(probe_exe())
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs the probe in the sandbox.
pub async fn probe(sb: &dyn Sandbox, probe: &str, args: &[&str]) -> Run {
    let mut argv = vec![probe];
    argv.extend_from_slice(args);
    run_argv(sb, &argv, Duration::from_secs(60)).await
}
