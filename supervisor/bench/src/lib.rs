//! tollgate-bench: `supervisorctl bench`, every figure of the performance
//! page (docs/PERFORMANCE.md), beside the tools people would otherwise use,
//! in one run. The `tollgate-bench` binary (src/main.rs), which
//! `supervisorctl bench` runs, calls it (and serves the floor server's
//! `__grpc-floor`); it measures, and prints through the [`Printer`] the
//! binary hands it. It links neither the daemon nor anything the daemon
//! alone needs, and supervisorctl does not link it (docs/INTERFACES.md).
//!
//! It starts its own supervisors (the `supervisor` binary next to tollgate-bench)
//! on a temporary directory with a config it writes (script provider, native
//! sandbox, `dangerouslySkipPermissions` allowed, audit `sync = "always"`),
//! measures each group with a warm-up and `--samples` samples, prints one
//! table (or `--json`), then stops the supervisors with SIGTERM and removes
//! its directory and containers. A baseline that is not installed is a
//! MISSING row with the reason; a measurement that fails is a FAILED row with
//! the reason; neither is ever dropped.
//!
//! Groups, one file each: `inproc` (policy decision, audit append),
//! `baselines` (fork/exec, unshare, bwrap), `native` (through gRPC on the
//! native supervisor), `agent` (the real agent binary, per model turn),
//! `mcp` (`agent mcp` over stdio beside gRPC), `docker` (the CLI against
//! our docker backend); `floor` is the bare gRPC
//! server ListTools is compared with.

#![forbid(unsafe_code)]

mod agent;
mod baselines;
mod calls;
mod clients;
mod devenv;
mod docker;
mod floor;
mod git;
mod harness;
mod inproc;
mod kill;
mod mcp;
mod mcp_gateway;
mod memory;
mod native;
mod net;
mod nethost;
mod npm;
mod refusals;
mod relay;
mod stats;
mod telemetry;
mod variants;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use serde::Serialize;

use harness::{SupervisorProc, TempRoot, blocking};
use stats::{Row, Status, Unit, fmt_value};

pub use floor::{SUBCOMMAND as FLOOR_SUBCOMMAND, main as floor_main};

/// How the report is printed: its stdout (a closed pipe exits quietly) and
/// its table layout, so the report looks like every other table it prints.
#[derive(Debug, Clone, Copy)]
pub struct Printer {
    /// Writes one line on stdout.
    pub line: fn(std::fmt::Arguments<'_>),
    /// Prints aligned columns (cells escaped).
    pub table: fn(&[&str], &[Vec<String>]),
    /// Escapes control characters (terminal injection).
    pub escape: fn(&str) -> String,
}

/// `outln!(printer, ...)`: one line through the [`Printer`].
macro_rules! outln {
    ($p:expr) => {
        ($p.line)(format_args!(""))
    };
    ($p:expr, $($arg:tt)*) => {
        ($p.line)(format_args!($($arg)*))
    };
}

/// What the issue asks for at least.
pub const MIN_SAMPLES: usize = 200;

/// Options of `supervisorctl bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// Write the table as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Samples per measurement (after a warm-up).
    #[arg(long, default_value_t = MIN_SAMPLES)]
    pub samples: usize,
    /// A short smoke run: at most 30 samples (below what the page needs).
    #[arg(long)]
    pub quick: bool,
    /// Samples for container creation and `docker run --rm` (each takes
    /// most of a second).
    #[arg(long, default_value_t = 10)]
    pub container_samples: usize,
    /// Directory for the temporary files (default: $TMPDIR or /tmp).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Docker image for the docker rows (default: the minimal sandbox image).
    #[arg(long)]
    pub image: Option<String>,
    /// Leave out the docker rows.
    #[arg(long)]
    pub no_docker: bool,
    /// The bench supervisors' audit sync mode: always or batch.
    #[arg(long, default_value = "always", value_parser = parse_sync)]
    pub audit_sync: tollgate_audit::SyncMode,
    /// Keep the temporary directory (its audit logs time every record).
    #[arg(long)]
    pub keep: bool,
    /// Measure one group only (with the main supervisor it needs): a run
    /// for working on that group; the page's table is every group's.
    #[arg(long, value_enum)]
    pub only: Option<Only>,
}

/// The groups `--only` can pick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Only {
    /// The network rows (a test host behind the wall, secrets, beside direct).
    Network,
    /// The memory rows: the supervisor's RSS with no session and 100 idle
    /// ones, beside a bare tonic server's with 100 idle connections.
    Memory,
    /// The development environment's rows: toolchain mounts, bash beside
    /// sh, `npm ci` inside beside on the host.
    Devenv,
    /// The per-call rows (read_file, write_file, OpenSession +
    /// CloseSession) beside their floors of the same run: the gRPC health
    /// Check and one write + fdatasync.
    Calls,
}

fn parse_sync(s: &str) -> Result<tollgate_audit::SyncMode, String> {
    s.parse()
        .map_err(|_| format!("{s:?} is not a sync mode (always or batch)"))
}

/// The JSON document (`--json`).
#[derive(Debug, Serialize)]
struct Report {
    tool: &'static str,
    version: &'static str,
    date: String,
    host: Host,
    root: bool,
    audit_sync: &'static str,
    samples: usize,
    quick: bool,
    duration_s: f64,
    groups: Vec<Group>,
    rows: Vec<Row>,
}

#[derive(Debug, Serialize)]
struct Host {
    kernel: String,
    cpu: String,
    cores: usize,
    loadavg_start: String,
    loadavg_end: String,
}

/// Runs the benchmark; returns the exit code (0: every row measured or
/// MISSING; 1: some measurement FAILED). Missed targets do not change it:
/// the table says which and by how much.
pub async fn run(args: Args, out: Printer) -> anyhow::Result<u8> {
    let args = normalise(args);
    let started = Instant::now();
    let loadavg_start = loadavg();
    let root_user = nix::unistd::geteuid().is_root();
    if !root_user {
        eprintln!(
            "supervisorctl: bench: not running as root: the native sandbox may be refused (its rows then say why); run it with sudo for the figures of the performance page"
        );
    }
    if args.samples < MIN_SAMPLES {
        eprintln!(
            "supervisorctl: bench: {} samples per measurement (the performance page uses at least {MIN_SAMPLES})",
            args.samples
        );
    }
    let own = std::env::current_exe().context("cannot find the bench's own executable")?;
    let bin_dir = own
        .parent()
        .ok_or_else(|| anyhow!("the bench's executable has no directory"))?
        .to_path_buf();
    let supervisor_exe = bin_dir.join("supervisor");
    if !supervisor_exe.is_file() {
        bail!(
            "no supervisor binary at {}, hint: build it next to tollgate-bench (cargo build --release)",
            supervisor_exe.display()
        );
    }
    let parent = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let mut root = TempRoot::new(&parent)?;
    if args.keep {
        root.keep();
    }
    let docker_name = format!("tollgate-bench-{}", std::process::id());

    let mut progress = Progress::new();
    let measured = tokio::select! {
        r = measure(&args, &root, &supervisor_exe, &bin_dir, &mut progress) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
    };
    // A docker baseline container is removed by its guard; after an
    // interrupt its thread may not get there.
    if !args.no_docker
        && let Some(d) = harness::which("docker")
    {
        let _ = harness::run_quiet(std::process::Command::new(d).args([
            "rm",
            "-f",
            docker_name.as_str(),
        ]));
    }
    let mut rows = measured?;
    stats::judge(&mut rows);
    drop(root);

    let report = Report {
        tool: "supervisorctl bench",
        version: env!("CARGO_PKG_VERSION"),
        date: tollgate_audit::record::Timestamp::now().rfc3339(),
        host: Host {
            kernel: read_trim("/proc/sys/kernel/osrelease"),
            cpu: cpu_model(),
            cores: std::thread::available_parallelism().map_or(0, usize::from),
            loadavg_start,
            loadavg_end: loadavg(),
        },
        root: root_user,
        audit_sync: args.audit_sync.as_str(),
        samples: args.samples,
        quick: args.quick,
        duration_s: started.elapsed().as_secs_f64(),
        groups: progress.done,
        rows,
    };
    if args.json {
        outln!(
            out,
            "{}",
            serde_json::to_string_pretty(&report).context("encoding the report")?
        );
    } else {
        print_report(&report, out);
    }
    let failed = report
        .rows
        .iter()
        .any(|r| matches!(r.status, Status::Failed(_)));
    Ok(u8::from(failed))
}

fn normalise(mut a: Args) -> Args {
    if a.quick {
        a.samples = a.samples.min(30);
        a.container_samples = a.container_samples.min(3);
    }
    a.samples = a.samples.max(5);
    a.container_samples = a.container_samples.max(1);
    a
}

/// How long each group took.
#[derive(Debug, Clone, Serialize)]
struct Group {
    name: String,
    seconds: f64,
}

/// Progress lines (on stderr, so `--json > file` stays clean) and the time
/// each group took.
struct Progress {
    start: Instant,
    current: Option<(String, Instant)>,
    done: Vec<Group>,
}

impl Progress {
    fn new() -> Progress {
        Progress {
            start: Instant::now(),
            current: None,
            done: Vec::new(),
        }
    }

    fn step(&mut self, name: &str) {
        self.finish();
        eprintln!(
            "supervisorctl: bench: [{:5.1} s] {name}",
            self.start.elapsed().as_secs_f64()
        );
        self.current = Some((name.to_string(), Instant::now()));
    }

    fn finish(&mut self) {
        if let Some((name, t)) = self.current.take() {
            self.done.push(Group {
                name,
                seconds: t.elapsed().as_secs_f64(),
            });
        }
    }
}

async fn measure(
    args: &Args,
    root: &TempRoot,
    supervisor_exe: &Path,
    bin_dir: &Path,
    progress: &mut Progress,
) -> anyhow::Result<Vec<Row>> {
    let n = args.samples;
    let mut rows = Vec::new();
    let all = args.only.is_none();

    if all {
        progress.step("policy decisions and audit appends (in process)");
        let dir = root.subdir("inproc")?;
        let d2 = dir.clone();
        rows.extend(blocking(move || Ok(inproc::policy(&d2, n))).await?);
        rows.extend(blocking(move || Ok(inproc::audit(&dir, n))).await?);
        rows.extend(blocking(move || Ok(inproc::redaction(n))).await?);
        rows.extend(blocking(move || Ok(inproc::host_addresses(n))).await?);
        progress.step("process baselines: fork/exec, unshare, bwrap");
        rows.extend(blocking(move || Ok(baselines::run(n))).await?);
    }

    progress.step("native supervisor over gRPC");
    let script = root.path().join("script.json");
    std::fs::write(&script, agent::script(agent::turns_for(n)))
        .with_context(|| format!("cannot write {}", script.display()))?;
    rows.extend(measure_native(args, root, supervisor_exe, bin_dir, &script, progress).await?);
    if !all {
        progress.finish();
        return Ok(rows);
    }

    progress.step("telemetry: read_file with a collector that never answers");
    rows.push(
        telemetry::run(
            root,
            supervisor_exe,
            &config_toml(&script, None, args.audit_sync),
            n,
        )
        .await,
    );
    rows.extend(measure_docker(args, root, supervisor_exe, &script, progress).await);
    progress.finish();
    Ok(rows)
}

/// The native supervisor over gRPC, then the agent, the clients, `agent
/// mcp` and `agent mcp-gateway` against it; every row failed (saying why)
/// when it does not start.
async fn measure_native(
    args: &Args,
    root: &TempRoot,
    supervisor_exe: &Path,
    bin_dir: &Path,
    script: &Path,
    progress: &mut Progress,
) -> anyhow::Result<Vec<Row>> {
    let n = args.samples;
    let native_dir = root.subdir("sup-native")?;
    let config = config_toml(script, None, args.audit_sync);
    let exe = supervisor_exe.to_path_buf();
    let nd = native_dir.clone();
    let sup = match blocking(move || SupervisorProc::start(&exe, &nd, &config, "native")).await {
        Ok(sup) => sup,
        Err(e) => return Ok(native_failed(&format!("{e:#}"))),
    };
    let ctx = variants::Ctx {
        root,
        exe: supervisor_exe,
        script,
        sync: args.audit_sync,
        samples: n,
        quick: args.quick,
    };
    let (rows, failed) = if args.only == Some(Only::Network) {
        progress.step("network: a test host behind the wall, secrets, beside direct");
        (net::run(&ctx, &sup).await, false)
    } else if args.only == Some(Only::Devenv) {
        progress.step("development environment: toolchain mounts, bash beside sh, npm ci");
        (devenv::run(&ctx, &sup).await, false)
    } else if args.only == Some(Only::Calls) {
        progress.step("calls: read_file, write_file, open + close, beside their floors");
        (calls::run(&sup, root, n).await, false)
    } else if args.only == Some(Only::Memory) {
        progress.step("memory: 100 idle sessions, beside a bare tonic server");
        (memory::only(&sup, root).await, false)
    } else {
        measure_on_native(args, &ctx, &sup, bin_dir, progress).await?
    };
    if failed {
        eprintln!(
            "supervisorctl: bench: the native supervisor's stderr:\n{}",
            sup.stderr().trim_end()
        );
    }
    blocking(move || {
        let mut sup = sup;
        sup.stop();
        Ok(())
    })
    .await?;
    Ok(rows)
}

/// Every group on the native supervisor; returns whether its own rows
/// failed (its stderr is then shown).
async fn measure_on_native(
    args: &Args,
    ctx: &variants::Ctx<'_>,
    sup: &SupervisorProc,
    bin_dir: &Path,
    progress: &mut Progress,
) -> anyhow::Result<(Vec<Row>, bool)> {
    let (n, root) = (ctx.samples, ctx.root);
    let plan = native::Plan {
        samples: n,
        throughput_for: if args.quick {
            Duration::from_millis(500)
        } else {
            Duration::from_secs(2)
        },
        kill_samples: if args.quick { 10 } else { 30 },
    };
    let mut rows = Vec::new();
    let native_rows = native::run(sup, root, &plan).await;
    let failed = native_rows
        .iter()
        .any(|r| matches!(r.status, Status::Failed(_)));
    rows.extend(native_rows);
    progress.step("git inside the native sandbox beside the host");
    rows.extend(git::run(sup, root, n).await);
    progress.step("development environment: toolchain mounts, bash beside sh, npm ci");
    rows.extend(devenv::run(ctx, sup).await);
    progress.step("network: a test host behind the wall, secrets, beside direct");
    rows.extend(net::run(ctx, sup).await);
    progress.step("agent per-turn overhead and memory");
    let ws = root.subdir("ws-agent")?;
    rows.extend(agent::run(Some(bin_dir.join("agent")), sup, &ws, n).await);
    progress.step("clients: agent hook, the routed shell, a Claude Code scenario");
    let scenarios = if args.quick { 3 } else { 10 };
    rows.extend(clients::run(Some(bin_dir.join("agent")), sup, root, n, scenarios).await);
    progress.step("agent mcp over stdio, beside gRPC");
    rows.extend(mcp::run(&bin_dir.join("agent"), sup, root, n).await);
    progress.step("agent mcp-gateway beside the server's own stdio");
    rows.extend(mcp_gateway::run(&bin_dir.join("agent"), sup, root, n).await);
    // Last: attribute_refusals = "on" turns the kernel's audit on.
    progress.step("refusals: 10,000 refused writes, attribution on and off");
    rows.extend(refusals::run(ctx).await);
    Ok((rows, failed))
}

/// The rows the native supervisor would have given, failed for `why`.
fn native_failed(why: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    for (id, name, unit) in [
        (
            "native.session_open_close",
            "OpenSession + CloseSession",
            Unit::Nanos,
        ),
        ("native.list_tools", "ListTools, authenticated", Unit::Nanos),
        (
            "native.run_bash_true",
            "run_bash true (native)",
            Unit::Nanos,
        ),
        ("native.read_file_4k", "read_file 4 KiB", Unit::Nanos),
        ("native.write_file_4k", "write_file 4 KiB", Unit::Nanos),
        ("agent.turn_overhead", "agent turn overhead", Unit::Nanos),
    ] {
        rows.push(Row::failed(id, name, unit, why.to_string()));
    }
    rows.extend(clients::failed(why));
    rows.extend(mcp::failed(why));
    rows.extend(mcp_gateway::failed(why));
    rows
}

/// The docker CLI's baselines and the docker backend (left out with
/// `--no-docker`).
async fn measure_docker(
    args: &Args,
    root: &TempRoot,
    supervisor_exe: &Path,
    script: &Path,
    progress: &mut Progress,
) -> Vec<Row> {
    let image = args
        .image
        .clone()
        .unwrap_or_else(tollgate_sandbox::docker::minimal_image);
    if args.no_docker {
        let mut rows = Vec::new();
        for (id, name) in [
            (docker::DOCKER_RUN, "docker run --rm … true"),
            (docker::DOCKER_EXEC, "docker exec CTR true"),
            ("docker.run_bash_true", "run_bash true (docker)"),
            (
                docker::NATIVE_MIB,
                "run_bash printing 1 MiB, native (baseline)",
            ),
            ("docker.run_bash_1mib", "run_bash printing 1 MiB (docker)"),
            (
                "docker.container_create",
                "create + start a session container",
            ),
        ] {
            rows.push(Row::missing(
                id,
                name,
                Unit::Nanos,
                "left out (--no-docker)",
            ));
        }
        return rows;
    }
    progress.step(&format!(
        "docker: CLI baselines and the docker backend on {image}"
    ));
    let plan = docker::Plan {
        samples: args.samples,
        container_samples: args.container_samples,
        image: &image,
        supervisor_exe,
        config: config_toml(script, Some(&image), args.audit_sync),
    };
    docker::run(root, &plan).await
}

/// The bench supervisor's config.
fn config_toml(script: &Path, image: Option<&str>, sync: tollgate_audit::SyncMode) -> String {
    let quote = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let mut c = String::from(
        "# written by supervisorctl bench\n\
         [supervisor]\nmax_sessions_per_uid = 256\nmax_connections_per_uid = 512\n\
         idle_connection_timeout_s = 600\n\n\
         [audit]\nsync = \"{SYNC}\"\n\n\
         [session]\ndefault_mode = \"default\"\nallow_dangerously_skip = true\n\
         session_can_approve = false\napproval_timeout_s = 30\n\
         max_tool_calls = 1000000\ntoken_ttl_s = 3600\n\n\
         [clients]\nmode = \"dangerouslySkipPermissions\"\n\n",
    )
    .replace("{SYNC}", sync.as_str());
    // The git rows commit inside: the split (docs/THREAT_MODEL.md).
    c.push_str("[sandbox]\ngit_dir = \"split\"\n");
    if let Some(image) = image {
        c.push_str(&format!("image = {}\n", quote(image)));
    }
    c.push('\n');
    c.push_str(&format!(
        "[llm]\nprovider = \"script\"\nscript = {}\n",
        quote(&script.display().to_string())
    ));
    c
}

/// The main config with `sandbox_keys` added to its `[sandbox]` and
/// `sections` appended (the variants' supervisors, variants.rs).
fn variant_config(
    script: &Path,
    sync: tollgate_audit::SyncMode,
    sandbox_keys: &str,
    sections: &str,
) -> String {
    let base = config_toml(script, None, sync);
    let mut c = base.replacen(
        "git_dir = \"split\"\n",
        &format!("git_dir = \"split\"\n{sandbox_keys}"),
        1,
    );
    c.push('\n');
    c.push_str(sections);
    c
}

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn loadavg() -> String {
    read_trim("/proc/loadavg")
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_else(|| "unknown".to_string())
}

fn print_report(r: &Report, out: Printer) {
    outln!(
        out,
        "tollgate {} bench, {}: kernel {}, {} ({} cores), load {} → {}, audit sync {}{}",
        r.version,
        r.date,
        r.host.kernel,
        r.host.cpu,
        r.host.cores,
        r.host.loadavg_start,
        r.host.loadavg_end,
        r.audit_sync,
        if r.root { "" } else { ", NOT root" }
    );
    let (table, notes) = report_table(r);
    outln!(out);
    (out.table)(
        &[
            "measurement",
            "samples",
            "median",
            "p99",
            "baseline",
            "ratio",
            "target",
            "met",
        ],
        &table,
    );
    if !notes.is_empty() {
        outln!(out);
        for n in notes {
            outln!(out, "- {}", (out.escape)(&n));
        }
    }
    print_summary(r, out);
}

/// One table line per row, and the notes (missing, failed, remarks).
fn report_table(r: &Report) -> (Vec<Vec<String>>, Vec<String>) {
    let name_of = |id: &str| {
        r.rows
            .iter()
            .find(|x| x.id == id)
            .map_or_else(|| id.to_string(), |x| x.name.clone())
    };
    let mut table = Vec::new();
    let mut notes = Vec::new();
    for row in &r.rows {
        let (median, p99) = match &row.status {
            Status::Measured => (
                row.median.map_or("-".into(), |v| fmt_value(row.unit, v)),
                row.p99.map_or("-".into(), |v| fmt_value(row.unit, v)),
            ),
            Status::Missing(why) => {
                notes.push(format!("{}: MISSING: {why}", row.name));
                ("MISSING".into(), "-".into())
            }
            Status::Failed(why) => {
                notes.push(format!("{}: FAILED: {why}", row.name));
                ("FAILED".into(), "-".into())
            }
        };
        if !row.note.is_empty() && row.status == Status::Measured {
            notes.push(format!("{}: {}", row.name, row.note));
        }
        let met = match (&row.target, row.met) {
            (None, _) => "-",
            (Some(_), Some(true)) => "yes",
            (Some(_), Some(false)) => "NO",
            (Some(_), None) => "?",
        };
        table.push(vec![
            row.name.clone(),
            row.samples.to_string(),
            median,
            p99,
            row.baseline.as_deref().map_or("-".into(), name_of),
            row.ratio.map_or("-".into(), |q| format!("{q:.2}×")),
            row.target
                .as_ref()
                .map_or("-".into(), stats::Target::describe),
            met.to_string(),
        ]);
    }
    (table, notes)
}

/// The closing lines: targets met and missed, time per group.
fn print_summary(r: &Report, out: Printer) {
    let missed: Vec<&Row> = r.rows.iter().filter(|x| x.met == Some(false)).collect();
    let open: Vec<&Row> = r
        .rows
        .iter()
        .filter(|x| x.target.is_some() && x.met.is_none())
        .collect();
    outln!(out);
    outln!(
        out,
        "{} rows in {:.1} s; targets met: {}, missed: {}{}, not judged: {}{}",
        r.rows.len(),
        r.duration_s,
        r.rows.iter().filter(|x| x.met == Some(true)).count(),
        missed.len(),
        list(&missed),
        open.len(),
        list(&open),
    );
    outln!(
        out,
        "time per group: {}",
        r.groups
            .iter()
            .map(|g| format!("{} {:.1} s", g.name, g.seconds))
            .collect::<Vec<_>>()
            .join("; ")
    );
}

fn list(rows: &[&Row]) -> String {
    if rows.is_empty() {
        String::new()
    } else {
        format!(
            " ({})",
            rows.iter()
                .map(|r| r.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bench_configs_are_accepted_by_the_supervisor() {
        let script = Path::new("/tmp/script.json");
        for (image, sync) in [
            (None, tollgate_audit::SyncMode::Always),
            (
                Some("tollgate-sandbox:0.1.0-minimal"),
                tollgate_audit::SyncMode::Batch,
            ),
        ] {
            let text = config_toml(script, image, sync);
            let c = tollgate_config::Config::parse(&text, Path::new("bench.toml")).unwrap();
            assert_eq!(c.audit.sync, sync);
            assert_eq!(c.llm.script.as_deref(), Some(script));
            assert_eq!(c.sandbox.image, image.unwrap_or(""));
            assert_eq!(
                c.sandbox.git_dir,
                tollgate_policy::host_exec::GitDirMode::Split
            );
            assert!(c.session.allow_dangerously_skip);
            assert!(c.supervisor.max_sessions_per_uid >= 133);
            // 100 held connections and a load of 100 sessions, one uid;
            // setup pauses must not close connections between phases.
            assert!(c.supervisor.max_connections_per_uid >= 256);
            assert!(c.supervisor.idle_connection_timeout_s >= 300);
        }
    }

    #[test]
    fn quick_caps_the_samples() {
        let a = normalise(Args {
            json: false,
            samples: 200,
            quick: true,
            container_samples: 10,
            dir: None,
            image: None,
            no_docker: true,
            audit_sync: tollgate_audit::SyncMode::Always,
            keep: false,
            only: None,
        });
        assert_eq!((a.samples, a.container_samples), (30, 3));
    }
}
