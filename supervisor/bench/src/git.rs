//! git inside the native sandbox beside the same commands on the host, in
//! the same run (docs/PERFORMANCE.md): a commit of a 1,000-file change and
//! `git status` in a 10,000-file repository. Inside, each command goes
//! through run_bash on a warm sandbox (policy decision, audit records,
//! exec); on the host, `sh -c` started by the bench. Sampled in rounds,
//! one host sample then one inside, on the same repository.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::harness::{AgentSession, SupervisorProc, TempRoot, blocking, run_checked};
use super::stats::{Row, Target, Unit};

pub const COMMIT: &str = "native.git_commit_1000";
pub const COMMIT_HOST: &str = "base.git_commit_1000_host";
pub const STATUS: &str = "native.git_status_10000";
pub const STATUS_HOST: &str = "base.git_status_10000_host";

const GIT: &str = "git -c user.name=bench -c user.email=bench@bench.invalid";

/// The four rows; a failure becomes FAILED rows with the reason.
pub async fn run(sup: &SupervisorProc, root: &TempRoot, n: usize) -> Vec<Row> {
    let n = n.clamp(5, 30);
    let mut rows = match commit(sup, root, n).await {
        Ok(r) => r,
        Err(e) => failed(COMMIT, COMMIT_HOST, "git commit of a 1,000-file change", e),
    };
    rows.extend(match status(sup, root, n).await {
        Ok(r) => r,
        Err(e) => failed(STATUS, STATUS_HOST, "git status, 10,000-file repository", e),
    });
    rows
}

fn failed(id: &str, host: &str, what: &str, e: anyhow::Error) -> Vec<Row> {
    vec![
        Row::failed(
            host,
            &format!("{what}: git's own time on the host"),
            Unit::Nanos,
            format!("{e:#}"),
        ),
        Row::failed(
            id,
            &format!("{what}: git's own time in the native sandbox"),
            Unit::Nanos,
            format!("{e:#}"),
        ),
    ]
}

/// A repository of `files` committed files in a new directory of `root`.
async fn repo(root: &TempRoot, name: &str, files: usize) -> anyhow::Result<std::path::PathBuf> {
    let ws = root.subdir(name)?;
    let dir = ws.clone();
    blocking(move || {
        for i in 0..files {
            let sub = dir.join(format!("d{:03}", i / 100));
            std::fs::create_dir_all(&sub)?;
            std::fs::write(sub.join(format!("f{i:05}.txt")), format!("file {i}\n"))?;
        }
        host(
            &dir,
            &format!("git init -q && {GIT} add -A && {GIT} commit -qm base"),
        )?;
        Ok(())
    })
    .await?;
    Ok(ws)
}

fn host(dir: &Path, script: &str) -> anyhow::Result<String> {
    run_checked(Command::new("sh").args(["-c", script]).current_dir(dir))
}

fn args(script: &str) -> String {
    serde_json::json!({ "command": script }).to_string()
}

/// The samples of one pair: wall time end to end, and git's own time as
/// the shell around it measured it (on the host and inside alike).
#[derive(Default)]
struct Samples {
    host_wall: Vec<Duration>,
    inside_wall: Vec<Duration>,
    host_own: Vec<Duration>,
    inside_own: Vec<Duration>,
}

/// `script`, timed by the shell that runs it: prints `ns=<nanoseconds>`.
pub fn self_timed(script: &str) -> String {
    format!("s=$(date +%s%N); {script}; e=$(date +%s%N); echo ns=$((e - s))")
}

pub fn own_time(output: &str) -> anyhow::Result<Duration> {
    let ns = output
        .lines()
        .find_map(|l| l.trim().strip_prefix("ns="))
        .ok_or_else(|| anyhow::anyhow!("no timing in the output: {output:?}"))?;
    Ok(Duration::from_nanos(ns.parse()?))
}

/// Times `script` on the host and inside, in rounds, with `prepare(i)`
/// (untimed, on the host) before each sample; the first three rounds warm
/// both up.
async fn rounds(
    s: &mut AgentSession,
    ws: &Path,
    n: usize,
    prepare: impl Fn(usize) -> String,
    script: &str,
) -> anyhow::Result<Samples> {
    let mut out = Samples::default();
    let timed = self_timed(script);
    for i in 0..(n + 3) * 2 {
        let prep = prepare(i);
        if !prep.is_empty() {
            let (dir, prep) = (ws.to_path_buf(), prep.clone());
            blocking(move || host(&dir, &prep).map(drop)).await?;
        }
        let t = Instant::now();
        let output = if i % 2 == 0 {
            let (dir, timed) = (ws.to_path_buf(), timed.clone());
            blocking(move || host(&dir, &timed)).await?
        } else {
            s.call("run_bash", &args(&timed)).await?.output
        };
        let wall = t.elapsed();
        let own = own_time(&output)?;
        if i < 6 {
            continue;
        }
        if i % 2 == 0 {
            out.host_wall.push(wall);
            out.host_own.push(own);
        } else {
            out.inside_wall.push(wall);
            out.inside_own.push(own);
        }
    }
    Ok(out)
}

/// The four rows of one command: git's own time on the host and inside
/// (the sandbox's cost on git itself: the target), and end to end, where
/// inside adds run_bash's fixed cost (`native.run_bash_true`).
fn pair(ids: (&str, &str), what: &str, s: Samples, note: &str) -> Vec<Row> {
    let (id, host) = ids;
    let (wall_id, wall_host) = (format!("{id}_run_bash"), format!("{host}_wall"));
    vec![
        Row::latency(host, &format!("{what}: git's own time on the host"), &s.host_own),
        Row::latency(id, &format!("{what}: git's own time in the native sandbox"), &s.inside_own)
            .with_baseline(host)
            .with_target(Target::RatioAtMost { factor: 1.3, issue: 33 })
            .with_note(format!("{note}; timed by the shell around git, the same on both sides")),
        Row::latency(&wall_host, &format!("{what}: `sh -c` on the host, start to exit"), &s.host_wall),
        Row::latency(&wall_id, &format!("{what}: run_bash in the native sandbox, call to reply"), &s.inside_wall)
            .with_baseline(&wall_host)
            .with_note("adds run_bash's fixed cost (policy decision, audit records, exec): see native.run_bash_true"),
    ]
}

async fn commit(sup: &SupervisorProc, root: &TempRoot, n: usize) -> anyhow::Result<Vec<Row>> {
    let ws = repo(root, "ws-git-commit", 1000).await?;
    let mut s = AgentSession::open(
        sup.agent_channel().await?,
        &ws,
        "dangerouslySkipPermissions",
    )
    .await?;
    s.call("run_bash", &args("git status -s")).await?;
    let samples = rounds(
        &mut s,
        &ws,
        n,
        |i| format!("for f in d*/f*.txt; do echo {i} >> \"$f\"; done && {GIT} add -A"),
        &format!("{GIT} commit -qm change"),
    )
    .await?;
    s.close().await?;
    Ok(pair(
        (COMMIT, COMMIT_HOST),
        "git commit of a 1,000-file change",
        samples,
        "every file changed and staged before each sample (untimed); the git directory split (objects, refs, index writable)",
    ))
}

async fn status(sup: &SupervisorProc, root: &TempRoot, n: usize) -> anyhow::Result<Vec<Row>> {
    let ws = repo(root, "ws-git-status", 10_000).await?;
    let mut s = AgentSession::open(
        sup.agent_channel().await?,
        &ws,
        "dangerouslySkipPermissions",
    )
    .await?;
    s.call("run_bash", &args("git status -s")).await?;
    let samples = rounds(&mut s, &ws, n, |_| String::new(), "git status >/dev/null").await?;
    s.close().await?;
    Ok(pair(
        (STATUS, STATUS_HOST),
        "git status, 10,000-file repository",
        samples,
        "clean tree, index warm",
    ))
}
