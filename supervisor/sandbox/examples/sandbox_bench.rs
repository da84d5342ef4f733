//! Timings of the native backend, with the bwrap baseline from the same run.
//!
//! ```text
//! cargo run --release -p tollgate-sandbox --example sandbox_bench [-- ROUNDS]
//! ```
//! Needs root (cgroups, a non-root sandbox uid). Prints medians and p90 of:
//! sandbox creation (until pid 1 reports ready), destroy, `true` and
//! `sh -c true` exec'd in an existing sandbox (backend call, no gRPC), and
//! `bwrap --unshare-all --die-with-parent --ro-bind / / --dev /dev --proc /proc true`.
//! Its own binary is the helper, as the supervisor's is.

use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tollgate_sandbox::native::{NativeBackend, NativeConfig};
use tollgate_sandbox::{ExecRequest, Limits, Sandbox, SandboxSpec};

fn stats(name: &str, mut v: Vec<Duration>) -> Duration {
    v.sort();
    let med = v[v.len() / 2];
    let p90 = v[(v.len() * 9 / 10).min(v.len() - 1)];
    println!(
        "{name:<44} median {:>9.3} ms   p90 {:>9.3} ms   (n={})",
        med.as_secs_f64() * 1e3,
        p90.as_secs_f64() * 1e3,
        v.len()
    );
    med
}

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some(tollgate_sandbox::native::INIT_ARG) {
        return tollgate_sandbox::native::init_main();
    }
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(50);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sandbox_bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(rounds)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sandbox_bench: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn exec_true(sb: &dyn Sandbox, argv: &[&str]) -> Result<Duration, String> {
    let (tx, mut rx) = mpsc::channel(8);
    let drain = tokio::spawn(async move { while rx.recv().await.is_some() {} });
    let t = Instant::now();
    let o = sb
        .exec(
            ExecRequest {
                argv: argv.iter().map(|s| s.to_string()).collect(),
                cwd: None,
                timeout: Duration::from_secs(30),
                merge_stderr: true,
            },
            tx,
            CancellationToken::new(),
        )
        .await
        .map_err(|e| e.to_string())?;
    let d = t.elapsed();
    let _ = drain.await;
    if o.exit_code != Some(0) {
        return Err(format!("{argv:?} failed: {o:?}"));
    }
    Ok(d)
}

async fn run(rounds: usize) -> Result<(), String> {
    let state = std::env::temp_dir().join(format!("tollgate-bench-{}", std::process::id()));
    let ws = std::env::temp_dir().join(format!("tollgate-bench-ws-{}", std::process::id()));
    std::fs::create_dir_all(&ws).map_err(|e| e.to_string())?;
    std::os::unix::fs::chown(&ws, Some(65534), Some(65534)).map_err(|e| e.to_string())?;
    let backend = NativeBackend::new(NativeConfig {
        helper_exe: std::env::current_exe().map_err(|e| e.to_string())?,
        state_dir: state.clone(),
    })
    .map_err(|e| e.to_string())?;
    let spec_with = |i: usize, host_exec: Vec<String>| SandboxSpec {
        session_id: format!("bench-{i}"),
        workspace: ws.clone(),
        workspace_id: std::fs::metadata(&ws)
            .ok()
            .map(|m| tollgate_sandbox::WorkspaceId::of(&m)),
        uid: 65534,
        gid: 65534,
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        limits: Limits::default(),
        hidden: vec![state.clone()],
        host_exec,
        git_dir: tollgate_policy::host_exec::GitDirMode::ReadOnly,
        home: None,
        egress: None,
        private_home: None,
        lease: Default::default(),
        wall: false,
        image: None,
        extra_ca: None,
    };
    let spec = |i: usize| spec_with(i, tollgate_policy::host_exec::names());
    println!(
        "native sandbox timings ({} build, {rounds} rounds)",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );

    let (mut create, mut destroy) = (Vec::new(), Vec::new());
    let (mut create_bare, mut destroy_bare) = (Vec::new(), Vec::new());
    let mut steps: Vec<Vec<(String, u64)>> = Vec::new();
    for i in 0..rounds {
        let t = Instant::now();
        let sb = backend
            .create_native(&spec(i))
            .await
            .map_err(|e| e.to_string())?;
        create.push(t.elapsed());
        steps.push(sb.setup_timings().to_vec());
        let t = Instant::now();
        sb.destroy().await.map_err(|e| e.to_string())?;
        destroy.push(t.elapsed());
        // Interleaved, for the cost of the host-executed names
        // (docs/THREAT_MODEL.md "What the host runs by itself"): the same
        // sandbox without them.
        let t = Instant::now();
        let sb = backend
            .create_native(&spec_with(rounds + 1 + i, Vec::new()))
            .await
            .map_err(|e| e.to_string())?;
        create_bare.push(t.elapsed());
        let t = Instant::now();
        sb.destroy().await.map_err(|e| e.to_string())?;
        destroy_bare.push(t.elapsed());
    }
    let create_med = stats("create sandbox (until ready)", create);
    stats("  the same without host-executed names", create_bare);
    if let Some(first) = steps.first() {
        println!("  setup steps (median of each step's end, µs since the helper started):");
        for (k, (name, _)) in first.iter().enumerate() {
            let mut v: Vec<u64> = steps.iter().filter_map(|s| s.get(k).map(|x| x.1)).collect();
            v.sort_unstable();
            println!("    {name:<28} {:>8}", v[v.len() / 2]);
        }
    }
    stats("destroy sandbox (all processes gone)", destroy);
    stats("  the same without host-executed names", destroy_bare);

    let sb: Arc<dyn Sandbox> = backend
        .create_native(&spec(2 * rounds + 1))
        .await
        .map_err(|e| e.to_string())?;
    for _ in 0..5 {
        exec_true(sb.as_ref(), &["true"]).await?;
    }
    let mut t1 = Vec::new();
    let mut t2 = Vec::new();
    for _ in 0..rounds * 4 {
        t1.push(exec_true(sb.as_ref(), &["true"]).await?);
        t2.push(exec_true(sb.as_ref(), &["sh", "-c", "true"]).await?);
    }
    let true_med = stats("exec `true` in a live sandbox", t1);
    let sh_med = stats("exec `sh -c true` in a live sandbox", t2);
    sb.destroy().await.map_err(|e| e.to_string())?;

    let mut bw = Vec::new();
    let bwrap: PathBuf = "bwrap".into();
    for _ in 0..rounds {
        let t = Instant::now();
        let st = Command::new(&bwrap)
            .args([
                "--unshare-all",
                "--die-with-parent",
                "--ro-bind",
                "/",
                "/",
                "--dev",
                "/dev",
                "--proc",
                "/proc",
                "true",
            ])
            .stdin(Stdio::null())
            .status()
            .map_err(|e| format!("bwrap: {e}"))?;
        bw.push(t.elapsed());
        if !st.success() {
            return Err(format!("bwrap failed: {st}"));
        }
    }
    let bw_med = stats("bwrap --unshare-all ... true (baseline)", bw);
    println!(
        "ratios: sh -c true / bwrap = {:.2}, true / bwrap = {:.2}; create = {:.1} ms",
        sh_med.as_secs_f64() / bw_med.as_secs_f64(),
        true_med.as_secs_f64() / bw_med.as_secs_f64(),
        create_med.as_secs_f64() * 1e3
    );
    let _ = std::fs::remove_dir_all(&state);
    let _ = std::fs::remove_dir_all(&ws);
    Ok(())
}
