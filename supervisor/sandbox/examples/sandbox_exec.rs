//! Runs one command in a fresh native sandbox, the way a session's sandbox is
//! built, and exits with its exit code (128+N when signal N ended it, 125 when
//! the sandbox itself failed or was refused). Its own binary is the helper.
//!
//! ```text
//! sandbox_exec [--workspace DIR] [--user UID] [--group GID]
//!              [--as-uid UID [--as-gid GID]]   drop to this uid first (rootless test)
//!              [--memory-mb N] [--pids N] [--fsize-mb N] [--tmp-mb N] [--nofile N]
//!              [--cpu-s N] [--timeout SECS] [--state-dir DIR] [--env K=V]...
//!              [--stdin] [--posture] [--print-seccomp] -- CMD [ARGS...]
//! ```
//! `--stdin` passes this process's stdin (a pty, say) to the command instead
//! of /dev/null.

use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tollgate_sandbox::native::{NativeBackend, NativeConfig, NativeOptions};
use tollgate_sandbox::{ExecRequest, Limits, Output, Sandbox, SandboxSpec};

#[derive(Debug, Default)]
struct Args {
    workspace: Option<PathBuf>,
    user: Option<u32>,
    group: Option<u32>,
    as_uid: Option<u32>,
    as_gid: Option<u32>,
    limits: Limits,
    cpu_s: Option<u64>,
    timeout: Option<u64>,
    state_dir: Option<PathBuf>,
    env: Vec<(String, String)>,
    stdin: bool,
    posture: bool,
    print_seccomp: bool,
    argv: Vec<String>,
}

fn parse() -> Result<Args, String> {
    let mut a = Args::default();
    let mut it = std::env::args().skip(1);
    fn num<T: std::str::FromStr>(flag: &str, v: Option<String>) -> Result<T, String> {
        let v = v.ok_or_else(|| format!("{flag} needs a value"))?;
        v.parse().map_err(|_| format!("{flag}: bad number {v:?}"))
    }
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--workspace" => a.workspace = it.next().map(PathBuf::from),
            "--user" => a.user = Some(num("--user", it.next())?),
            "--group" => a.group = Some(num("--group", it.next())?),
            "--as-uid" => a.as_uid = Some(num("--as-uid", it.next())?),
            "--as-gid" => a.as_gid = Some(num("--as-gid", it.next())?),
            "--memory-mb" => a.limits.memory_mb = num("--memory-mb", it.next())?,
            "--pids" => a.limits.pids = num("--pids", it.next())?,
            "--fsize-mb" => a.limits.fsize_mb = num("--fsize-mb", it.next())?,
            "--tmp-mb" => a.limits.tmp_mb = num("--tmp-mb", it.next())?,
            "--nofile" => a.limits.nofile = num("--nofile", it.next())?,
            "--cpu-s" => a.cpu_s = Some(num("--cpu-s", it.next())?),
            "--timeout" => a.timeout = Some(num("--timeout", it.next())?),
            "--state-dir" => a.state_dir = it.next().map(PathBuf::from),
            "--env" => {
                let kv = it.next().ok_or("--env needs K=V")?;
                let (k, v) = kv.split_once('=').ok_or("--env needs K=V")?;
                a.env.push((k.to_string(), v.to_string()));
            }
            "--stdin" => a.stdin = true,
            "--posture" => a.posture = true,
            "--print-seccomp" => a.print_seccomp = true,
            "--" => {
                a.argv = it.collect();
                break;
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if a.argv.is_empty() && !a.print_seccomp {
        return Err("missing -- CMD [ARGS...]".to_string());
    }
    Ok(a)
}

fn drop_privileges(uid: u32, gid: u32) -> Result<(), String> {
    nix::unistd::setgroups(&[]).map_err(|e| format!("setgroups: {e}"))?;
    let g = nix::unistd::Gid::from_raw(gid);
    nix::unistd::setresgid(g, g, g).map_err(|e| format!("setresgid({gid}): {e}"))?;
    let u = nix::unistd::Uid::from_raw(uid);
    nix::unistd::setresuid(u, u, u).map_err(|e| format!("setresuid({uid}): {e}"))?;
    Ok(())
}

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some(tollgate_sandbox::native::INIT_ARG) {
        return tollgate_sandbox::native::init_main();
    }
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("sandbox_exec: {e}");
            return ExitCode::from(2);
        }
    };
    if args.print_seccomp {
        print!("{}", tollgate_sandbox::native::seccomp_policy_markdown());
        return ExitCode::SUCCESS;
    }
    if let Some(uid) = args.as_uid {
        // Still single-threaded: no runtime yet.
        if let Err(e) = drop_privileges(uid, args.as_gid.unwrap_or(uid)) {
            eprintln!("sandbox_exec: {e}");
            return ExitCode::from(125);
        }
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sandbox_exec: tokio: {e}");
            return ExitCode::from(125);
        }
    };
    match rt.block_on(run(args)) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("sandbox_exec: {e}");
            ExitCode::from(125)
        }
    }
}

async fn run(args: Args) -> Result<u8, String> {
    let workspace = match &args.workspace {
        Some(w) => w.clone(),
        None => std::env::current_dir().map_err(|e| format!("current dir: {e}"))?,
    };
    let workspace = std::fs::canonicalize(&workspace)
        .map_err(|e| format!("workspace {}: {e}", workspace.display()))?;
    let meta = std::fs::metadata(&workspace).map_err(|e| format!("workspace: {e}"))?;
    let uid = args.user.unwrap_or(meta.uid());
    let gid = args
        .group
        .unwrap_or(if uid == meta.uid() { meta.gid() } else { uid });
    let (state_dir, temp_state) = match &args.state_dir {
        Some(d) => (d.clone(), false),
        None => {
            let d =
                std::env::temp_dir().join(format!("tollgate-sandbox-exec-{}", std::process::id()));
            std::fs::create_dir_all(&d).map_err(|e| format!("state dir {}: {e}", d.display()))?;
            (d, true)
        }
    };
    let helper_exe = std::env::current_exe().map_err(|e| format!("current exe: {e}"))?;
    let mut opts = NativeOptions::default();
    if let Some(c) = args.cpu_s {
        opts.rlimit_cpu_s = c;
    }
    let backend = NativeBackend::with_options(
        NativeConfig {
            helper_exe,
            state_dir: state_dir.clone(),
        },
        opts,
    )
    .map_err(|e| e.to_string())?;
    let mut env = vec![
        (
            "PATH".to_string(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
        ),
        ("HOME".to_string(), workspace.display().to_string()),
        ("LANG".to_string(), "C.UTF-8".to_string()),
    ];
    if let Ok(term) = std::env::var("TERM") {
        env.push(("TERM".to_string(), term));
    }
    env.extend(args.env.iter().cloned());
    let spec = SandboxSpec {
        session_id: format!("exec-{}", std::process::id()),
        workspace: workspace.clone(),
        workspace_id: std::fs::metadata(&workspace)
            .ok()
            .map(|m| tollgate_sandbox::WorkspaceId::of(&m)),
        uid,
        gid,
        env,
        limits: args.limits.clone(),
        hidden: vec![state_dir.clone()],
        host_exec: tollgate_policy::host_exec::names(),
        git_dir: tollgate_policy::host_exec::GitDirMode::ReadOnly,
        home: None,
        egress: None,
        private_home: None,
        lease: Default::default(),
        wall: false,
        image: None,
        extra_ca: None,
    };
    let result = async {
        let sandbox = backend
            .create_native(&spec)
            .await
            .map_err(|e| e.to_string())?;
        if args.posture {
            eprintln!("sandbox_exec: posture: {}", sandbox.posture());
        }
        let stdin = if args.stdin {
            Some(
                std::io::stdin()
                    .as_fd()
                    .try_clone_to_owned()
                    .map_err(|e| format!("stdin: {e}"))?,
            )
        } else {
            None
        };
        let (tx, mut rx) = mpsc::channel::<Output>(64);
        let printer = tokio::spawn(async move {
            let mut so = std::io::stdout();
            let mut se = std::io::stderr();
            while let Some(o) = rx.recv().await {
                let _ = match o {
                    Output::Stdout(b) => so.write_all(&b).and_then(|_| so.flush()),
                    Output::Stderr(b) => se.write_all(&b).and_then(|_| se.flush()),
                };
            }
        });
        let req = ExecRequest {
            argv: args.argv.clone(),
            cwd: None,
            timeout: Duration::from_secs(args.timeout.unwrap_or(3600)),
            merge_stderr: false,
        };
        let outcome = sandbox
            .exec_with_stdin(req, stdin, tx, CancellationToken::new())
            .await;
        let _ = printer.await;
        let destroyed = Arc::clone(&sandbox).destroy().await;
        let outcome = outcome.map_err(|e| e.to_string())?;
        destroyed.map_err(|e| e.to_string())?;
        if outcome.timed_out {
            eprintln!("sandbox_exec: timed out after {:?}", outcome.duration);
        }
        Ok::<u8, String>(match (outcome.exit_code, outcome.signal) {
            (Some(c), _) => c.clamp(0, 255) as u8,
            (None, Some(s)) => {
                eprintln!("sandbox_exec: killed by signal {s}");
                (128 + s).clamp(0, 255) as u8
            }
            (None, None) => 125,
        })
    }
    .await;
    if temp_state {
        let _ = std::fs::remove_dir_all(&state_dir);
    }
    result
}
