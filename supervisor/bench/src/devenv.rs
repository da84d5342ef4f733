//! The development environment's rows (docs/PERFORMANCE.md, "The
//! development environment"): a session's sandbox created with the owner's
//! toolchain directories shown (the default `toolchain_dirs`) beside one
//! made with `toolchain_dirs = []`, alternating; run_bash `true`
//! through bash beside through sh; and `npm ci` from a warm cache inside
//! beside on the host (npm.rs).

use std::path::Path;
use std::time::Duration;

use super::harness::{
    AgentSession, SupervisorProc, TRUE_ARGS, first_and_second_call, time_async, warmup_for,
};
use super::stats::{Row, Target, Unit, percentile};
use super::variants::Ctx;

pub const CREATE: &str = "devenv.sandbox_create_toolchains";
pub const CREATE_NONE: &str = "devenv.sandbox_create_no_toolchains";

pub async fn run(ctx: &Ctx<'_>, main: &SupervisorProc) -> Vec<Row> {
    let mut rows = match create(ctx, main).await {
        Ok(r) => r,
        Err(e) => vec![Row::failed(
            CREATE,
            "create a session's native sandbox, toolchain directories shown",
            Unit::Nanos,
            format!("{e:#}"),
        )],
    };
    rows.extend(match shells(ctx, main).await {
        Ok(r) => r,
        Err(e) => vec![Row::failed(
            "devenv.run_bash_true_bash",
            "run_bash `true` through bash",
            Unit::Nanos,
            format!("{e:#}"),
        )],
    });
    rows.extend(super::npm::run(ctx, main).await);
    rows
}

/// The toolchain directories of the default list present in root's home.
fn shown_dirs() -> String {
    let home = Path::new("/root");
    let present: Vec<&str> = [
        ".cargo/bin",
        ".rustup",
        ".local/bin",
        ".local/lib",
        ".pyenv",
        ".nvm",
        ".volta",
        ".bun",
        "go/bin",
        ".deno",
        ".sdkman",
    ]
    .into_iter()
    .filter(|d| home.join(d).is_dir())
    .collect();
    if present.is_empty() {
        "none of the default list exists in /root: both sides mount nothing".to_string()
    } else {
        format!("shown from /root: {}", present.join(", "))
    }
}

async fn create(ctx: &Ctx<'_>, main: &SupervisorProc) -> anyhow::Result<Vec<Row>> {
    let none = ctx
        .start("no-toolchains", "toolchain_dirs = []\n", "")
        .await?;
    let ws = ctx.workspace("ws-devenv")?;
    let (ch_with, ch_none) = (main.agent_channel().await?, none.agent_channel().await?);
    let n = ctx.samples.clamp(5, 40);
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for i in 0..n + 3 {
        let order = if i % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for w in order {
            let ch = if w { &ch_with } else { &ch_none };
            let (_, cold, warm) = first_and_second_call(ch, &ws).await?;
            let d = cold.as_nanos() as f64 - warm.as_nanos() as f64;
            if i >= 3 {
                if w { with.push(d) } else { without.push(d) }
            }
        }
    }
    Ok(vec![
        Row::latency_ns(CREATE_NONE, "create a session's native sandbox, toolchain_dirs = [] (baseline)", &without),
        Row::latency_ns(CREATE, "create a session's native sandbox, toolchain directories shown", &with)
            .with_baseline(CREATE_NONE)
            .with_target(Target::RatioAtMost { factor: 1.2, issue: 34 })
            .with_note(format!("first run_bash `true` of a fresh session minus its second, on two supervisors alike but for toolchain_dirs, alternating; {}", shown_dirs())),
    ])
}

/// `bash -c true` and `sh -c true` started in turn by one bash loop inside
/// the sandbox, each timed with $EPOCHREALTIME (no fork to read a clock).
fn spawn_loop(n: usize) -> String {
    format!(
        "for ((i=0;i<{n};i++)); do a=$EPOCHREALTIME; /bin/bash -c true; b=$EPOCHREALTIME; /bin/sh -c true; c=$EPOCHREALTIME; echo \"$a $b $c\"; done"
    )
}

fn parse_spawns(out: &str) -> (Vec<Duration>, Vec<Duration>) {
    let (mut bash, mut sh) = (Vec::new(), Vec::new());
    for l in out.lines() {
        let v: Vec<f64> = l
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if let [a, b, c] = v[..] {
            bash.push(Duration::from_secs_f64((b - a).max(0.0)));
            sh.push(Duration::from_secs_f64((c - b).max(0.0)));
        }
    }
    (bash, sh)
}

async fn shells(ctx: &Ctx<'_>, main: &SupervisorProc) -> anyhow::Result<Vec<Row>> {
    let ws = ctx.workspace("ws-shells")?;
    let mut s = AgentSession::open(
        main.agent_channel().await?,
        &ws,
        "dangerouslySkipPermissions",
    )
    .await?;
    s.call("run_bash", TRUE_ARGS).await?;
    let n = ctx.samples.min(300);
    let out = s
        .call(
            "run_bash",
            &serde_json::json!({ "command": spawn_loop(n) }).to_string(),
        )
        .await?
        .output;
    let (bash, sh) = parse_spawns(&out);
    if bash.len() < n / 2 {
        anyhow::bail!(
            "the spawn loop printed {} of {n} lines: {}",
            bash.len(),
            out.trim_end()
        );
    }
    let rb = time_async(warmup_for(n), n, |_| {
        let mut s = s.clone();
        async move { s.call("run_bash", TRUE_ARGS).await }
    })
    .await?;
    s.close().await?;
    let med = |d: &[Duration]| {
        let mut v: Vec<f64> = d.iter().map(|x| x.as_nanos() as f64).collect();
        v.sort_by(f64::total_cmp);
        percentile(&v, 0.5).unwrap_or(0.0)
    };
    let est = med(&rb) - med(&bash) + med(&sh);
    Ok(vec![
        Row::latency("devenv.sh_c_true", "`/bin/sh -c true` inside the native sandbox (baseline)", &sh)
            .with_note("dash here; started by a bash loop inside, alternating with bash"),
        Row::latency("devenv.bash_c_true", "`/bin/bash -c true` inside the native sandbox", &bash)
            .with_baseline("devenv.sh_c_true"),
        Row::value("devenv.run_bash_true_sh", "run_bash `true` through sh (derived: through bash − bash's start + sh's start)", Unit::Nanos, est, rb.len())
            .with_note("derived, not run: the native backend runs bash wherever the host has it and has no switch to sh; the Docker minimal image is the sh path"),
        Row::latency("devenv.run_bash_true_bash", "run_bash `true` through bash", &rb)
            .with_baseline("devenv.run_bash_true_sh")
            .with_target(Target::RatioAtMost { factor: 1.1, issue: 34 }),
    ])
}
