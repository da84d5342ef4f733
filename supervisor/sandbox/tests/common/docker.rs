//! The Docker backend for integration tests (owned by the Docker backend).
//!
//! `backend()` gives the Docker backend with the minimal image
//! (`tollgate-sandbox:<version>-minimal`), building the image first when it is
//! missing (`sandbox-image/build.sh --minimal`, seconds). When the engine or
//! the image cannot be had it returns `None` after printing
//! `skipped: needs docker: <why>`, unless `TOLLGATE_REQUIRE_DOCKER=1`, in which
//! case it panics with the reason.
//!
//! Containers are labelled with a state dir unique to the caller
//! (`/tmp/tollgate-docker-tests/<tag>-<pid>-<n>`); the first call removes
//! containers left by test processes that no longer exist, so an aborted run
//! never leaves containers behind for long.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tollgate_sandbox::docker::{DockerBackend, DockerConfig, LABEL_MANAGED, LABEL_OWNER};
use tollgate_sandbox::{Backend, Limits, SandboxSpec};

/// Root of every test state dir.
pub const TEST_ROOT: &str = "/tmp/tollgate-docker-tests";
/// The uid:gid test sandboxes run as (not root, and no user of this host).
pub const TEST_UID: u32 = 64123;
pub const TEST_GID: u32 = 64123;

static COUNTER: AtomicU64 = AtomicU64::new(0);
static PREPARED: tokio::sync::OnceCell<Result<(), String>> = tokio::sync::OnceCell::const_new();

/// True when Docker tests must not skip (CI).
pub fn require_docker() -> bool {
    std::env::var("TOLLGATE_REQUIRE_DOCKER").as_deref() == Ok("1")
}

/// Skips (prints why, returns None) or, with TOLLGATE_REQUIRE_DOCKER=1, fails.
pub fn skip<T>(why: &str) -> Option<T> {
    if require_docker() {
        panic!("docker test cannot run and TOLLGATE_REQUIRE_DOCKER=1: {why}");
    }
    eprintln!("skipped: needs docker: {why}");
    None
}

/// A fresh name unique in this process: `<tag>-<pid>-<n>`.
pub fn unique(tag: &str) -> String {
    format!(
        "{tag}-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    )
}

/// A fresh session id: 12 url-safe chars.
pub fn session_id() -> String {
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let mut v = (u64::from(std::process::id()) << 40) ^ (n << 32) ^ u64::from(nanos);
    const ABC: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_";
    let mut s = String::with_capacity(12);
    for _ in 0..12 {
        s.push(ABC[(v & 63) as usize] as char);
        v = v.rotate_right(6) ^ 0x9e37_79b9_7f4a_7c15u64.wrapping_mul(n + 1);
    }
    s
}

/// A state dir of its own (so reaping and checks see only this caller's
/// containers), with an audit dir inside.
pub fn state_dir(tag: &str) -> PathBuf {
    let d = Path::new(TEST_ROOT).join(unique(tag));
    std::fs::create_dir_all(d.join("audit")).unwrap();
    d
}

/// The test configuration: minimal image, the given state dir.
pub fn config(state: &Path) -> DockerConfig {
    let mut cfg = DockerConfig::new(state.to_path_buf(), state.join("audit"));
    cfg.image = tollgate_sandbox::docker::minimal_image();
    cfg
}

/// A workspace directory owned by the test uid, removed on drop.
pub struct Workspace {
    pub path: PathBuf,
}

impl Workspace {
    pub fn new(tag: &str) -> Workspace {
        let path = std::env::temp_dir().join(format!("tollgate-dws-{}", unique(tag)));
        std::fs::create_dir_all(&path).unwrap();
        let path = std::fs::canonicalize(&path).unwrap();
        std::os::unix::fs::chown(&path, Some(TEST_UID), Some(TEST_GID)).unwrap();
        Workspace { path }
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A spec for `workspace` with small limits and the allowlisted environment.
pub fn spec(workspace: &Path) -> SandboxSpec {
    let id = session_id();
    SandboxSpec {
        session_id: id.clone(),
        workspace: workspace.to_path_buf(),
        workspace_id: std::fs::metadata(workspace)
            .ok()
            .map(|m| tollgate_sandbox::WorkspaceId::of(&m)),
        uid: TEST_UID,
        gid: TEST_GID,
        env: vec![
            (
                "PATH".to_string(),
                "/usr/local/bin:/usr/bin:/bin".to_string(),
            ),
            ("HOME".to_string(), workspace.to_string_lossy().into_owned()),
            ("LANG".to_string(), "C.UTF-8".to_string()),
            ("AGENT_SESSION_ID".to_string(), id),
        ],
        limits: Limits {
            memory_mb: 256,
            pids: 64,
            cpus_millis: 1000,
            nofile: 256,
            fsize_mb: 64,
            tmp_mb: 32,
        },
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

/// The engine is reachable, the minimal image exists (built if it did not),
/// leftovers of dead test processes are gone. Once per process.
async fn prepare() -> Result<(), String> {
    PREPARED
        .get_or_init(|| async {
            let docker = bollard::Docker::connect_with_local_defaults()
                .map_err(|e| format!("docker engine: {e}"))?;
            docker
                .ping()
                .await
                .map_err(|e| format!("docker engine not reachable: {e}"))?;
            reap_dead_test_processes(&docker).await;
            let image = tollgate_sandbox::docker::minimal_image();
            if docker.inspect_image(&image).await.is_err() {
                let script =
                    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sandbox-image/build.sh");
                let out = std::process::Command::new(&script)
                    .arg("--minimal")
                    .output()
                    .map_err(|e| format!("running {}: {e}", script.display()))?;
                if !out.status.success() {
                    return Err(format!(
                        "{} --minimal failed: {}",
                        script.display(),
                        String::from_utf8_lossy(&out.stderr)
                    ));
                }
            }
            Ok(())
        })
        .await
        .clone()
}

/// The pid in a test state dir's name (`<tag>-<pid>-<n>`).
fn owner_pid(name: &str) -> Option<u32> {
    name.rsplit('-').nth(1).and_then(|p| p.parse::<u32>().ok())
}

/// Removes containers whose state-dir label names a test process that has
/// exited, then those processes' state dirs.
async fn reap_dead_test_processes(docker: &bollard::Docker) {
    use bollard::query_parameters::{ListContainersOptionsBuilder, RemoveContainerOptionsBuilder};
    let filters = std::collections::HashMap::from([("label", vec![format!("{LABEL_MANAGED}=1")])]);
    let opts = ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&filters)
        .build();
    let Ok(list) = docker.list_containers(Some(opts)).await else {
        return;
    };
    for c in list {
        let labels = c.labels.unwrap_or_default();
        let Some(owner) = labels.get(LABEL_OWNER) else {
            continue;
        };
        let Some(rest) = owner.strip_prefix(&format!("{TEST_ROOT}/")) else {
            continue;
        };
        let Some(pid) = owner_pid(rest) else { continue };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        if let Some(id) = c.id {
            let _ = docker
                .remove_container(
                    &id,
                    Some(RemoveContainerOptionsBuilder::new().force(true).build()),
                )
                .await;
        }
    }
    if let Ok(rd) = std::fs::read_dir(TEST_ROOT) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(pid) = owner_pid(&name)
                && !Path::new(&format!("/proc/{pid}")).exists()
            {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
}

/// The Docker backend over the given state dir, or None (skip) / panic (CI).
pub async fn docker_backend_in(state: &Path) -> Option<DockerBackend> {
    if let Err(why) = prepare().await {
        return skip(&why);
    }
    match DockerBackend::connect(config(state)).await {
        Ok(b) => Some(b),
        Err(e) => skip(&e.to_string()),
    }
}

/// The Docker backend with a fresh state dir of its own.
pub async fn docker_backend() -> Option<DockerBackend> {
    docker_backend_in(&state_dir("backend")).await
}

/// What the parametrised suites call: the Docker backend with the minimal
/// image, or None when Docker is not available (and not required).
pub async fn backend() -> Option<Arc<dyn Backend>> {
    let b = docker_backend().await?;
    Some(Arc::new(b))
}

/// The Docker backend with the full image (`tollgate-sandbox:<version>`, from
/// `sandbox-image/build.sh`), which has python3 for the escape corpus; None
/// (after saying why) when that image is not built. Not governed by
/// TOLLGATE_REQUIRE_DOCKER (CI builds only the minimal image); callers that
/// need it set their own requirement.
pub async fn backend_full() -> Option<Arc<dyn Backend>> {
    let state = state_dir("full");
    if let Err(why) = prepare().await {
        return skip(&why);
    }
    let mut cfg = config(&state);
    cfg.image = tollgate_sandbox::docker::default_image();
    match DockerBackend::connect(cfg).await {
        Ok(b) => Some(Arc::new(b)),
        Err(e) => {
            eprintln!("inconclusive: the full docker image is not available: {e}");
            None
        }
    }
}

/// Containers (any state) labelled with `state`'s dir: what a test leaves behind.
pub async fn containers_of(state: &Path) -> Vec<String> {
    use bollard::query_parameters::ListContainersOptionsBuilder;
    let docker = bollard::Docker::connect_with_local_defaults().unwrap();
    let filters = std::collections::HashMap::from([(
        "label",
        vec![format!("{LABEL_OWNER}={}", state.to_string_lossy())],
    )]);
    let opts = ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&filters)
        .build();
    docker
        .list_containers(Some(opts))
        .await
        .unwrap()
        .into_iter()
        .filter_map(|c| c.names.and_then(|n| n.into_iter().next()))
        .collect()
}
