//! The Docker side: `docker exec` and `docker run --rm` through the CLI (what
//! people use without us) against our docker backend's run_bash and session
//! container, on the same image.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::anyhow;

use super::harness::{
    AgentSession, MIB_ARGS, SupervisorProc, TRUE_ARGS, TempRoot, blocking, first_and_second_call,
    run_checked, run_quiet, time_blocking, warmup_for, which,
};
use super::stats::{Row, Target, Unit, fmt_nanos};

pub const DOCKER_RUN: &str = "base.docker_run_rm";
pub const DOCKER_EXEC: &str = "base.docker_cli_exec";
/// run_bash printing 1 MiB in a native sandbox, sampled in rounds with the
/// docker one (the two drift together on this machine).
pub const NATIVE_MIB: &str = "base.native_run_bash_1mib";
const RUN_BASH: &str = "docker.run_bash_true";
const RUN_BASH_MIB: &str = "docker.run_bash_1mib";
const CREATE: &str = "docker.container_create";

const RUN_NAME: &str = "docker run --rm --network none IMAGE true (baseline)";
const EXEC_NAME: &str = "docker exec CTR true via the CLI (baseline)";
const RUN_BASH_NAME: &str = "run_bash `true`, docker sandbox, via gRPC";
const RUN_BASH_MIB_NAME: &str = "run_bash printing 1 MiB, docker sandbox, via gRPC";
const NATIVE_MIB_NAME: &str = "run_bash printing 1 MiB, native sandbox, via gRPC (baseline)";
const CREATE_NAME: &str = "create + start a session container";

pub struct Plan<'a> {
    pub samples: usize,
    /// Samples for the container creations (each takes most of a second).
    pub container_samples: usize,
    pub image: &'a str,
    pub supervisor_exe: &'a Path,
    /// The config for the docker supervisor (the bench writes it).
    pub config: String,
}

/// Is there an engine and the image? `Err` is the reason to print as MISSING.
fn check_engine(image: &str) -> Result<PathBuf, String> {
    let docker =
        which("docker").ok_or("the docker CLI is not installed (apt-get install docker.io)")?;
    run_checked(Command::new(&docker).args(["version", "--format", "{{.Server.Version}}"]))
        .map_err(|e| format!("the docker engine is not reachable: {e:#}"))?;
    run_checked(Command::new(&docker).args(["image", "inspect", "--format", "{{.Id}}", image]))
        .map_err(|_| {
            format!("docker image {image} is missing; build it: sandbox-image/build.sh --minimal")
        })?;
    Ok(docker)
}

fn all_missing(reason: &str) -> Vec<Row> {
    vec![
        Row::missing(DOCKER_RUN, RUN_NAME, Unit::Nanos, reason),
        Row::missing(DOCKER_EXEC, EXEC_NAME, Unit::Nanos, reason),
        Row::missing(RUN_BASH, RUN_BASH_NAME, Unit::Nanos, reason)
            .with_baseline(DOCKER_EXEC)
            .with_target(run_bash_target()),
        Row::missing(NATIVE_MIB, NATIVE_MIB_NAME, Unit::Nanos, reason),
        Row::missing(RUN_BASH_MIB, RUN_BASH_MIB_NAME, Unit::Nanos, reason)
            .with_baseline(NATIVE_MIB)
            .with_target(mib_target()),
        Row::missing(CREATE, CREATE_NAME, Unit::Nanos, reason)
            .with_baseline(DOCKER_RUN)
            .with_target(create_target()),
    ]
}

fn run_bash_target() -> Target {
    Target::RatioAtMost {
        factor: 0.1,
        issue: 24,
    }
}

fn mib_target() -> Target {
    Target::RatioAtMost {
        factor: 1.5,
        issue: 24,
    }
}

fn create_target() -> Target {
    Target::RatioAtMost {
        factor: 1.2,
        issue: 8,
    }
}

/// Removes a container by name when dropped.
struct Container {
    docker: PathBuf,
    name: String,
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = run_quiet(Command::new(&self.docker).args(["rm", "-f", self.name.as_str()]));
    }
}

pub async fn run(root: &TempRoot, plan: &Plan<'_>) -> Vec<Row> {
    let image = plan.image.to_string();
    let docker = match blocking(move || Ok(check_engine(&image))).await {
        Ok(Ok(d)) => d,
        Ok(Err(reason)) => return all_missing(&reason),
        Err(e) => return all_missing(&format!("{e:#}")),
    };
    let mut rows = Vec::new();

    // Baseline 2 and ours, interleaved: one `docker exec` through the CLI,
    // then one run_bash through the supervisor, and again, so both see the
    // same engine and the same machine (the engine's exec latency drifts by
    // tens of percent between minutes).
    let container = start_container(&docker, plan).await;
    let sup = start_supervisor(root, plan).await;
    let native = start_native(root, plan).await;
    let mut sessions = Vec::new();
    let (exec_row, ours_row, native_mib_row, mib_row) =
        exec_rows(&container, &sup, &native, plan, &mut sessions).await;
    drop(container);
    rows.push(exec_row);
    rows.push(
        ours_row
            .with_baseline(DOCKER_EXEC)
            .with_target(run_bash_target()),
    );
    rows.push(native_mib_row);
    rows.push(mib_row.with_baseline(NATIVE_MIB).with_target(mib_target()));
    if let Ok((native, _)) = native {
        let _ = blocking(move || {
            let mut native = native;
            native.stop();
            Ok(())
        })
        .await;
    }
    // Baseline 1 and ours, in rounds too: `docker run --rm … true` (create,
    // start, run, wait, remove), then one session container.
    let (sup, ws) = match sup {
        Ok(pair) => pair,
        Err(e) => {
            rows.push(docker_run_alone(&docker, plan).await);
            rows.push(
                Row::failed(CREATE, CREATE_NAME, Unit::Nanos, format!("{e:#}"))
                    .with_baseline(DOCKER_RUN)
                    .with_target(create_target()),
            );
            return rows;
        }
    };
    let (run_row, create_row) = create_rows(&docker, plan, &sup, &ws, &mut sessions).await;
    rows.push(run_row);
    rows.push(
        create_row
            .with_baseline(DOCKER_RUN)
            .with_target(create_target()),
    );
    let log = sup.stderr();
    stop_and_sweep(sup, docker, sessions).await;
    if rows
        .iter()
        .any(|r| matches!(r.status, super::stats::Status::Failed(_)))
        && !log.trim().is_empty()
    {
        eprintln!(
            "supervisorctl: bench: the docker supervisor's stderr:\n{}",
            log.trim_end()
        );
    }
    rows
}

/// The CLI baseline's container: `docker run -d --rm --network none`.
async fn start_container(docker: &Path, plan: &Plan<'_>) -> anyhow::Result<Container> {
    let name = format!("tollgate-bench-{}", std::process::id());
    let (d, image, nm) = (docker.to_path_buf(), plan.image.to_string(), name);
    blocking(move || {
        run_checked(Command::new(&d).args([
            "run",
            "-d",
            "--rm",
            "--network",
            "none",
            "--name",
            nm.as_str(),
            image.as_str(),
        ]))?;
        Ok(Container {
            docker: d,
            name: nm,
        })
    })
    .await
}

/// A supervisor and its workspace, as started.
type Started = anyhow::Result<(SupervisorProc, PathBuf)>;

/// The four exec rows: `docker exec`, run_bash, and 1 MiB through each
/// backend; what cannot be measured is said in its row.
async fn exec_rows(
    container: &anyhow::Result<Container>,
    sup: &Started,
    native: &Started,
    plan: &Plan<'_>,
    sessions: &mut Vec<String>,
) -> (Row, Row, Row, Row) {
    let (Ok(ctr), Ok((sup, ws))) = (container, sup) else {
        return exec_rows_without(container, sup, native, plan).await;
    };
    // Without a native supervisor the docker rows are still measured.
    let nat = native.as_ref().ok().map(|(p, w)| (p, w.as_path()));
    match exec_rounds(ctr, sup, ws, nat, plan.samples, sessions).await {
        Ok(r) => {
            let mut paused = r
                .after_pause
                .iter()
                .map(|d| d.as_nanos() as f64)
                .collect::<Vec<_>>();
            paused.sort_by(f64::total_cmp);
            let paused = super::stats::percentile(&paused, 0.5).unwrap_or(f64::NAN);
            (
                Row::latency(DOCKER_EXEC, EXEC_NAME, &r.cli).with_note(INTERLEAVED),
                Row::latency(RUN_BASH, RUN_BASH_NAME, &r.back_to_back).with_note(format!(
                    "warm container; policy decision, 3 audit records, the command through the container's resident exec agent (no engine call); {INTERLEAVED}; the call right after another (the figure); a call after the CLI's exec took {} (median)",
                    fmt_nanos(paused)
                )),
                match native {
                    Ok(_) => Row::latency(NATIVE_MIB, NATIVE_MIB_NAME, &r.native_mib).with_note(
                        format!("warm native sandbox; all 1 MiB crosses the sandbox's wall, the output cap keeps 32 KiB for the model; {MIB_ROUNDS}"),
                    ),
                    Err(e) => Row::failed(NATIVE_MIB, NATIVE_MIB_NAME, Unit::Nanos, format!("{e:#}")),
                },
                Row::latency(RUN_BASH_MIB, RUN_BASH_MIB_NAME, &r.mib).with_note(
                    format!("warm container; all 1 MiB crosses the agent's connection, the output cap keeps 32 KiB for the model; {MIB_ROUNDS}"),
                ),
            )
        }
        Err(e) => (
            Row::failed(DOCKER_EXEC, EXEC_NAME, Unit::Nanos, format!("{e:#}")),
            Row::failed(RUN_BASH, RUN_BASH_NAME, Unit::Nanos, format!("{e:#}")),
            Row::failed(NATIVE_MIB, NATIVE_MIB_NAME, Unit::Nanos, format!("{e:#}")),
            Row::failed(
                RUN_BASH_MIB,
                RUN_BASH_MIB_NAME,
                Unit::Nanos,
                format!("{e:#}"),
            ),
        ),
    }
}

/// The exec rows when the container or the supervisor did not start:
/// whatever failed, the baseline that can still run is measured.
async fn exec_rows_without(
    container: &anyhow::Result<Container>,
    sup: &Started,
    native: &Started,
    plan: &Plan<'_>,
) -> (Row, Row, Row, Row) {
    let exec_row = match container {
        Ok(ctr) => {
            let (d, nm, n) = (ctr.docker.clone(), ctr.name.clone(), plan.samples);
            match blocking(move || {
                time_blocking(warmup_for(n), n, |_| {
                    run_quiet(Command::new(&d).args(["exec", nm.as_str(), "true"]))
                })
            })
            .await
            {
                Ok(s) => Row::latency(DOCKER_EXEC, EXEC_NAME, &s),
                Err(e) => Row::failed(DOCKER_EXEC, EXEC_NAME, Unit::Nanos, format!("{e:#}")),
            }
        }
        Err(e) => Row::failed(DOCKER_EXEC, EXEC_NAME, Unit::Nanos, format!("{e:#}")),
    };
    let why = match sup {
        Err(e) => format!("{e:#}"),
        Ok(_) => "the CLI baseline's container did not start".to_string(),
    };
    let native_why = match native {
        Err(e) => format!("{e:#}"),
        Ok(_) => why.clone(),
    };
    (
        exec_row,
        Row::failed(RUN_BASH, RUN_BASH_NAME, Unit::Nanos, why.clone()),
        Row::failed(NATIVE_MIB, NATIVE_MIB_NAME, Unit::Nanos, native_why),
        Row::failed(RUN_BASH_MIB, RUN_BASH_MIB_NAME, Unit::Nanos, why),
    )
}

/// `docker run --rm … true` and a fresh session's container, in rounds.
async fn create_rows(
    docker: &Path,
    plan: &Plan<'_>,
    sup: &SupervisorProc,
    ws: &Path,
    sessions: &mut Vec<String>,
) -> (Row, Row) {
    let n = plan.container_samples;
    match create_rounds(docker, plan.image, sup, ws, n, sessions).await {
        Ok(r) => (
            Row::latency(DOCKER_RUN, RUN_NAME, &r.docker_run).with_note(format!(
                "{} samples, each most of a second; {ROUNDS}",
                r.docker_run.len()
            )),
            Row::latency_ns(CREATE, CREATE_NAME, &r.diffs).with_note(format!(
                "{} samples; first run_bash `true` of a fresh session minus its second (the first's median alone: {}); removal happens at close, outside the figure; {ROUNDS}",
                r.diffs.len(),
                fmt_nanos(r.cold)
            )),
        ),
        Err(e) => (
            docker_run_alone(docker, plan).await,
            Row::failed(CREATE, CREATE_NAME, Unit::Nanos, format!("{e:#}")),
        ),
    }
}

/// Stops the docker supervisor; it removes its containers on SIGTERM, and
/// any it left are swept.
async fn stop_and_sweep(sup: SupervisorProc, docker: PathBuf, sessions: Vec<String>) {
    let _ = blocking(move || {
        let mut sup = sup;
        sup.stop();
        for id in sessions {
            let filter = format!("label=tollgate.session={id}");
            if let Ok(out) = run_checked(Command::new(&docker).args(["ps", "-aq", "--filter", filter.as_str()])) {
                for c in out.split_whitespace() {
                    eprintln!("supervisorctl: bench: removing container {c} the docker supervisor left (session {id})");
                    let _ = run_quiet(Command::new(&docker).args(["rm", "-f", c]));
                }
            }
        }
        Ok(())
    })
    .await;
}

const INTERLEAVED: &str = "sampled in rounds with the other (a CLI exec, then two run_bash calls), so both see the same engine";
const MIB_ROUNDS: &str = "sampled in rounds with the other (one native call, one docker call per round), so both see the same machine";

/// A supervisor on the docker backend, and its workspace.
async fn start_supervisor(
    root: &TempRoot,
    plan: &Plan<'_>,
) -> anyhow::Result<(SupervisorProc, PathBuf)> {
    let dir = root.subdir("sup-docker")?;
    let ws = root.subdir("ws-docker")?;
    let (exe, cfg) = (plan.supervisor_exe.to_path_buf(), plan.config.clone());
    let sup = blocking(move || SupervisorProc::start(&exe, &dir, &cfg, "docker")).await?;
    Ok((sup, ws))
}

/// A supervisor on the native backend, for the 1 MiB baseline, and its
/// workspace.
async fn start_native(
    root: &TempRoot,
    plan: &Plan<'_>,
) -> anyhow::Result<(SupervisorProc, PathBuf)> {
    let dir = root.subdir("sup-native-mib")?;
    let ws = root.subdir("ws-native-mib")?;
    let (exe, cfg) = (plan.supervisor_exe.to_path_buf(), plan.config.clone());
    let sup = blocking(move || SupervisorProc::start(&exe, &dir, &cfg, "native")).await?;
    Ok((sup, ws))
}

/// Per round: `docker exec CTR true` through the CLI, then two run_bash
/// `true` through the supervisor (the second, right after the first as in a
/// script of calls, is the figure), then run_bash printing 1 MiB on the
/// native supervisor and on the docker one.
async fn exec_rounds(
    ctr: &Container,
    sup: &SupervisorProc,
    ws: &Path,
    native: Option<(&SupervisorProc, &Path)>,
    n: usize,
    sessions: &mut Vec<String>,
) -> anyhow::Result<ExecRounds> {
    let mut s =
        AgentSession::open(sup.agent_channel().await?, ws, "dangerouslySkipPermissions").await?;
    sessions.push(s.id.clone());
    let mut ns = match native {
        Some((native, nws)) => Some(
            AgentSession::open(
                native.agent_channel().await?,
                nws,
                "dangerouslySkipPermissions",
            )
            .await?,
        ),
        None => None,
    };
    let warmup = warmup_for(n);
    let mut r = ExecRounds {
        cli: Vec::with_capacity(n),
        back_to_back: Vec::with_capacity(n),
        after_pause: Vec::with_capacity(n),
        mib: Vec::with_capacity(n),
        native_mib: Vec::with_capacity(n),
    };
    for i in 0..warmup + n {
        // Run in place: this thread has nothing else to do meanwhile.
        let t = Instant::now();
        run_quiet(Command::new(&ctr.docker).args(["exec", ctr.name.as_str(), "true"]))?;
        let c = t.elapsed();
        let first = s.timed_call("run_bash", TRUE_ARGS).await?;
        let second = s.timed_call("run_bash", TRUE_ARGS).await?;
        let native_mib = match ns.as_mut() {
            Some(ns) => Some(ns.timed_call("run_bash", MIB_ARGS).await?),
            None => None,
        };
        let mib = s.timed_call("run_bash", MIB_ARGS).await?;
        if i >= warmup {
            r.cli.push(c);
            r.after_pause.push(first);
            r.back_to_back.push(second);
            r.native_mib.extend(native_mib);
            r.mib.push(mib);
        }
    }
    s.close().await?;
    if let Some(ns) = ns {
        ns.close().await?;
    }
    Ok(r)
}

struct ExecRounds {
    cli: Vec<Duration>,
    back_to_back: Vec<Duration>,
    after_pause: Vec<Duration>,
    mib: Vec<Duration>,
    native_mib: Vec<Duration>,
}

const ROUNDS: &str = "sampled in rounds with the other (a `docker run --rm`, then a session container), so both see the same engine";

/// The `docker run --rm` baseline by itself (when our side cannot run).
async fn docker_run_alone(docker: &Path, plan: &Plan<'_>) -> Row {
    let (d, image, c) = (
        docker.to_path_buf(),
        plan.image.to_string(),
        plan.container_samples,
    );
    match blocking(move || {
        time_blocking(2, c, |_| {
            run_quiet(Command::new(&d).args(docker_run_args(&image)))
        })
    })
    .await
    {
        Ok(s) => Row::latency(DOCKER_RUN, RUN_NAME, &s)
            .with_note(format!("{} samples, each most of a second", s.len())),
        Err(e) => Row::failed(DOCKER_RUN, RUN_NAME, Unit::Nanos, format!("{e:#}")),
    }
}

fn docker_run_args(image: &str) -> [&str; 6] {
    ["run", "--rm", "--network", "none", image, "true"]
}

struct CreateRounds {
    docker_run: Vec<Duration>,
    /// First run_bash of a fresh session minus its second, in nanoseconds.
    diffs: Vec<f64>,
    /// The median first call.
    cold: f64,
}

/// Per round: `docker run --rm IMAGE true` through the CLI, then a fresh
/// session whose first run_bash creates its container (timed as that call
/// minus the session's second). The first round warms the engine's caches.
async fn create_rounds(
    docker: &Path,
    image: &str,
    sup: &SupervisorProc,
    ws: &Path,
    n: usize,
    sessions: &mut Vec<String>,
) -> anyhow::Result<CreateRounds> {
    let ch = sup.agent_channel().await?;
    let mut r = CreateRounds {
        docker_run: Vec::with_capacity(n),
        diffs: Vec::with_capacity(n),
        cold: 0.0,
    };
    let mut colds = Vec::with_capacity(n);
    for i in 0..n + 1 {
        // Run in place: this thread has nothing else to do meanwhile.
        let t = Instant::now();
        run_quiet(Command::new(docker).args(docker_run_args(image)))?;
        let run = t.elapsed();
        let (id, cold, warm) = first_and_second_call(&ch, ws).await?;
        sessions.push(id);
        if i > 0 {
            r.docker_run.push(run);
            r.diffs
                .push(cold.as_nanos() as f64 - warm.as_nanos() as f64);
            colds.push(cold.as_nanos() as f64);
        }
    }
    colds.sort_by(f64::total_cmp);
    r.cold = super::stats::percentile(&colds, 0.5).ok_or_else(|| anyhow!("no samples"))?;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_engine_keeps_every_docker_row() {
        let rows = all_missing("the docker engine is not reachable");
        let ids: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                DOCKER_RUN,
                DOCKER_EXEC,
                RUN_BASH,
                NATIVE_MIB,
                RUN_BASH_MIB,
                CREATE
            ]
        );
        assert!(rows.iter().all(|r| matches!(&r.status, super::super::stats::Status::Missing(w) if w.contains("not reachable"))));
        // Their targets stay visible, unjudged.
        assert!(rows[2].target.is_some() && rows[4].target.is_some() && rows[5].target.is_some());
    }
}
