//! Benchmark of the Docker backend against its docker-CLI baselines, measured
//! in the same run and interleaved (docs/PERFORMANCE.md, the Docker
//! backend's targets):
//!
//! - run_bash `true` end to end (`exec(["sh","-c","true"])`) through the
//!   container's resident exec agent, median, against `docker exec <ctr> true`
//!   through the CLI: target <= 0.1x (docs/PERFORMANCE.md, "The Docker
//!   backend's resident exec agent");
//! - 1 MiB of output through the agent, against the same through the CLI;
//! - creating and starting a session's container, against
//!   `docker run --rm --network none IMAGE true`: target <= 1.2x;
//! - and, for the record, `destroy()` (the kill switch: kill + remove).
//!
//! It prints numbers and asserts none (no timed assertions in tests):
//! `cargo test -p tollgate-sandbox --release --test all -- docker_bench --ignored --nocapture`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::docker as docker_common;

use std::time::{Duration, Instant};

use docker_common::{Workspace, docker_backend_in, spec, state_dir};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tollgate_sandbox::{ExecRequest, Sandbox};

fn stats(name: &str, v: &mut [Duration]) -> Duration {
    v.sort();
    let med = v[v.len() / 2];
    let p10 = v[v.len() / 10];
    let p90 = v[(v.len() * 9) / 10];
    println!(
        "{name:<48} n={:<3} median {:>7.1} ms  p10 {:>7.1} ms  p90 {:>7.1} ms",
        v.len(),
        med.as_secs_f64() * 1e3,
        p10.as_secs_f64() * 1e3,
        p90.as_secs_f64() * 1e3
    );
    med
}

fn cli(args: &[&str]) -> Duration {
    let t = Instant::now();
    let st = std::process::Command::new("docker")
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    let d = t.elapsed();
    assert!(st.success(), "docker {args:?}: {st}");
    d
}

async fn exec_once(sb: &dyn Sandbox, r: &ExecRequest) -> Duration {
    let (tx, mut rx) = mpsc::channel(8);
    let drain = tokio::spawn(async move { while rx.recv().await.is_some() {} });
    let t = Instant::now();
    let o = sb
        .exec(r.clone(), tx, CancellationToken::new())
        .await
        .unwrap();
    let d = t.elapsed();
    drain.await.unwrap();
    assert_eq!(o.exit_code, Some(0));
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run with --ignored --nocapture"]
async fn docker_backend_against_the_cli() {
    let state = state_dir("bench");
    let Some(backend) = docker_backend_in(&state).await else {
        return;
    };
    let ws = Workspace::new("bench");
    let image = backend.config().image.clone();
    let n_exec: usize = std::env::var("BENCH_EXECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let n_create: usize = std::env::var("BENCH_CREATES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);

    // Exec: one session container; the CLI execs into the same container.
    let sb = backend.create_sandbox(&spec(&ws.path)).await.unwrap();
    let name = sb.container_name().to_string();
    let run_bash_true = ExecRequest {
        argv: vec!["sh".into(), "-c".into(), "true".into()],
        cwd: None,
        timeout: Duration::from_secs(120),
        merge_stderr: true,
    };
    let mib_out = ExecRequest {
        argv: vec![
            "head".into(),
            "-c".into(),
            "1048576".into(),
            "/dev/zero".into(),
        ],
        cwd: None,
        timeout: Duration::from_secs(120),
        merge_stderr: false,
    };
    // Warm up both paths.
    for _ in 0..3 {
        exec_once(&sb, &run_bash_true).await;
        cli(&["exec", &name, "true"]);
    }
    // Interleaved, so both see the same engine and the same machine.
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let (mut ours_mib, mut theirs_mib) = (Vec::new(), Vec::new());
    for _ in 0..n_exec {
        ours.push(exec_once(&sb, &run_bash_true).await);
        let n = name.clone();
        theirs.push(
            tokio::task::spawn_blocking(move || cli(&["exec", &n, "true"]))
                .await
                .unwrap(),
        );
        ours_mib.push(exec_once(&sb, &mib_out).await);
        let n = name.clone();
        theirs_mib.push(
            tokio::task::spawn_blocking(move || {
                cli(&["exec", &n, "head", "-c", "1048576", "/dev/zero"])
            })
            .await
            .unwrap(),
        );
    }
    // Back to back, no pause.
    let mut b2b = Vec::new();
    for _ in 0..n_exec {
        b2b.push(exec_once(&sb, &run_bash_true).await);
    }
    println!();
    let a = stats("exec: backend run_bash `true` (resident agent)", &mut ours);
    let b = stats("exec: `docker exec <ctr> true` (CLI)", &mut theirs);
    println!(
        "exec ratio backend/CLI = {:.3} (target <= 0.10)",
        a.as_secs_f64() / b.as_secs_f64()
    );
    stats("exec: backend, back to back", &mut b2b);
    let c = stats("exec: backend, 1 MiB of output", &mut ours_mib);
    let d = stats("exec: CLI, 1 MiB of output", &mut theirs_mib);
    println!(
        "1 MiB ratio backend/CLI = {:.3}",
        c.as_secs_f64() / d.as_secs_f64()
    );
    sb.destroy().await.unwrap();

    // Create + start, and destroy.
    let (mut create, mut run, mut destroy, mut dead) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    {
        let image = image.clone();
        tokio::task::spawn_blocking(move || {
            cli(&["run", "--rm", "--network", "none", &image, "true"])
        })
        .await
        .unwrap();
    }
    for _ in 0..n_create {
        let t = Instant::now();
        let sb = backend.create_sandbox(&spec(&ws.path)).await.unwrap();
        create.push(t.elapsed());
        // When is the container's init (and with it every process) gone?
        let init = backend
            .client()
            .inspect_container(sb.container_id(), None)
            .await
            .unwrap()
            .state
            .unwrap()
            .pid
            .unwrap();
        let t = Instant::now();
        let watcher = std::thread::spawn(move || {
            let p = format!("/proc/{init}");
            while std::path::Path::new(&p).exists() {
                std::thread::sleep(Duration::from_micros(200));
            }
            t.elapsed()
        });
        sb.destroy().await.unwrap();
        destroy.push(t.elapsed());
        dead.push(watcher.join().unwrap());
        let image = image.clone();
        run.push(
            tokio::task::spawn_blocking(move || {
                cli(&["run", "--rm", "--network", "none", &image, "true"])
            })
            .await
            .unwrap(),
        );
    }
    println!();
    let c = stats("create+start: backend create()", &mut create);
    let d = stats("`docker run --rm --network none IMAGE true`", &mut run);
    println!(
        "create ratio backend/CLI = {:.2} (target <= 1.20)",
        c.as_secs_f64() / d.as_secs_f64()
    );
    stats("destroy(): processes gone (kill switch)", &mut dead);
    stats("destroy(): returned (kill + remove)", &mut destroy);
    println!("image {image}");
    assert!(docker_common::containers_of(&state).await.is_empty());
}
