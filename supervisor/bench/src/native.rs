//! End to end through gRPC on the native supervisor: sessions, ListTools,
//! run_bash, file tools, sandbox creation, approvals, concurrency and the
//! supervisor's memory.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use serde_json::json;
use tollgate_proto::v1 as pb;
use tollgate_proto::v1::agent_service_client::AgentServiceClient;
use tonic::transport::Channel;

use super::baselines::BWRAP;
use super::floor::FloorProc;
use super::harness::{
    AgentSession, Sched, SupervisorProc, TRUE_ARGS, TempRoot, authed, blocking, channel, check_ok,
    first_and_second_call, time_async, time_blocking, warmup_for,
};
use super::stats::{Row, Target, Unit, fmt_nanos};

const READ_ARGS: &str = r#"{"path":"data4k.txt"}"#;
pub(crate) const HEALTH: &str = "base.grpc_health";
const SOCKET_ECHO: &str = "base.unix_socket_echo";
const GRPC_FLOOR: &str = "base.grpc_floor_list_tools";

/// Settings for this group.
pub struct Plan {
    pub samples: usize,
    /// How long each throughput phase runs.
    pub throughput_for: Duration,
    /// Revocations to time (each creates a session and its sandbox).
    pub kill_samples: usize,
}

/// Runs the group; a measurement that fails becomes a FAILED row with the
/// reason, and the others still run.
pub async fn run(sup: &SupervisorProc, root: &TempRoot, plan: &Plan) -> Vec<Row> {
    let mut rows = Vec::new();
    let ws = match prepare_workspace(root) {
        Ok(ws) => ws,
        Err(e) => {
            rows.push(Row::failed(
                "native.setup",
                "native workspace",
                Unit::Nanos,
                format!("{e:#}"),
            ));
            return rows;
        }
    };
    let n = plan.samples;

    // Memory first, before the other measurements grow the heap.
    rows.extend(super::memory::run(sup, root, &ws).await);
    rows.push(or_failed(
        "native.session_open_close",
        "OpenSession + CloseSession (no sandbox)",
        Unit::Nanos,
        open_close(sup, &ws, n).await,
    ));
    match list_tools(sup, root, &ws, n).await {
        Ok(mut r) => rows.append(&mut r),
        Err(e) => rows.push(Row::failed(
            "native.list_tools",
            "ListTools, authenticated",
            Unit::Nanos,
            format!("{e:#}"),
        )),
    }
    rows.push(or_failed(
        "native.run_bash_true",
        "run_bash `true`, native sandbox, via gRPC",
        Unit::Nanos,
        run_bash_true(sup, &ws, n).await,
    ));
    rows.push(or_failed(
        "native.sandbox_create",
        "create a session's native sandbox",
        Unit::Nanos,
        sandbox_create(sup, &ws, n).await,
    ));
    match files(sup, &ws, n).await {
        Ok(mut r) => rows.append(&mut r),
        Err(e) => rows.push(Row::failed(
            "native.read_file_4k",
            "read_file 4 KiB via gRPC",
            Unit::Nanos,
            format!("{e:#}"),
        )),
    }
    rows.push(or_failed(
        "native.approve_to_start",
        "approve → tool started (operator approval)",
        Unit::Nanos,
        approval(sup, &ws, n).await,
    ));
    rows.push(or_failed(
        super::kill::ID,
        super::kill::NAME,
        Unit::Nanos,
        super::kill::revoke(sup, &ws, plan.kill_samples).await,
    ));
    match throughput(sup, &ws, n, plan.throughput_for).await {
        Ok(mut r) => rows.append(&mut r),
        Err(e) => rows.push(Row::failed(
            "native.read_file_32_sessions",
            "read_file calls/s across 32 sessions",
            Unit::PerSecond,
            format!("{e:#}"),
        )),
    }
    rows
}

fn or_failed(id: &str, name: &str, unit: Unit, r: anyhow::Result<Row>) -> Row {
    r.unwrap_or_else(|e| Row::failed(id, name, unit, format!("{e:#}")))
}

pub(crate) fn prepare_workspace(root: &TempRoot) -> anyhow::Result<PathBuf> {
    let ws = root.subdir("ws-native")?;
    let mut data = String::with_capacity(4096);
    let mut i = 0;
    while data.len() < 4096 {
        data.push_str(&format!("line {i:05}: the quick brown fox jumps over it\n"));
        i += 1;
    }
    data.truncate(4096);
    std::fs::write(ws.join("data4k.txt"), &data).context("writing data4k.txt")?;
    std::fs::write(ws.join("out4k.txt"), &data).context("writing out4k.txt")?;
    Ok(ws)
}

fn content_4k() -> String {
    "0123456789abcdef".repeat(256)
}

pub(crate) async fn open_close(sup: &SupervisorProc, ws: &Path, n: usize) -> anyhow::Result<Row> {
    let ch = sup.agent_channel().await?;
    let before = sup.sched();
    let s = time_async(warmup_for(n), n, |_| {
        let ch = ch.clone();
        async move {
            let s = AgentSession::open(ch, ws, "default").await?;
            s.close().await
        }
    })
    .await?;
    let cpu = Sched::per_call(before, sup.sched(), warmup_for(n) + n);
    Ok(Row::latency(
        "native.session_open_close",
        "OpenSession + CloseSession (no sandbox)",
        &s,
    )
    .with_target(Target::MedianAtMostNanos {
        value: 2_000_000.0,
        issue: 2,
    })
    .with_note(format!(
        "includes the session's audit file, its records and the head anchored in the supervisor log; {cpu}"
    )))
}

/// ListTools, beside the cheapest call the same socket serves (the standard
/// gRPC health Check: no token, no handler work) and the same reply from a
/// bare tonic server in another process (`floor`): the transport's floors.
async fn list_tools(
    sup: &SupervisorProc,
    root: &TempRoot,
    ws: &Path,
    n: usize,
) -> anyhow::Result<Vec<Row>> {
    let floor_reply;
    let bare = {
        let server = blocking({
            let dir = root.path().to_path_buf();
            move || FloorProc::start(&dir)
        })
        .await?;
        let client = AgentServiceClient::new(channel(&server.socket).await?);
        floor_reply = client
            .clone()
            .list_tools(pb::ListToolsRequest {})
            .await
            .map_err(|s| anyhow!("ListTools on the floor server: {}", s.message()))?
            .into_inner()
            .tools;
        time_async(warmup_for(n), n, |_| {
            let mut c = client.clone();
            async move {
                let tools = c
                    .list_tools(pb::ListToolsRequest {})
                    .await
                    .map_err(|s| anyhow!("ListTools on the floor server: {}", s.message()))?;
                Ok(tools.into_inner().tools.len())
            }
        })
        .await?
    };
    let ch = sup.agent_channel().await?;
    let floor = health_check(&ch, n).await?;
    let echo = blocking(move || socket_echo(n)).await?;
    let mut s = AgentSession::open(ch, ws, "default").await?;
    // The floor renders the registry itself (the bench does not link the
    // daemon): its reply must be the supervisor's, or the baseline is not one.
    if s.list_tools_reply().await? != floor_reply {
        bail!(
            "the floor server's ListTools reply differs from the supervisor's (tollgate-bench's floor.rs renders the registry as the daemon's agent_service::tool_specs does; make them agree)"
        );
    }
    let before = sup.sched();
    let samples = time_async(warmup_for(n), n, |_| {
        let mut s = s.clone();
        async move { s.list_tools().await }
    })
    .await?;
    let cpu = Sched::per_call(before, sup.sched(), warmup_for(n) + n);
    s.close().await?;
    Ok(vec![
        Row::latency(
            SOCKET_ECHO,
            "Unix socket round trip to another process (baseline)",
            &echo,
        )
        .with_note(
            "64 bytes to `cat` over a socketpair and back: the two wake-ups any request over agent.sock costs, with no gRPC",
        ),
        health_row(&floor).with_baseline(SOCKET_ECHO),
        Row::latency(
            GRPC_FLOOR,
            "the same ListTools reply from a bare tonic server (baseline)",
            &bare,
        )
        .with_baseline(HEALTH)
        .with_note(
            "another process serving AgentService with tonic's defaults: no token, no session, no layers; the reply is the supervisor's, byte for byte",
        ),
        Row::latency("native.list_tools", "ListTools, authenticated", &samples)
            .with_baseline(GRPC_FLOOR)
            .with_target(Target::MedianAtMostNanos {
                value: 150_000.0,
                issue: 2,
            })
            .with_note(cpu),
    ])
}

/// The cheapest call agent.sock serves, the standard gRPC health Check (no
/// token, no handler work), `n` times on `ch`.
pub(crate) async fn health_check(ch: &Channel, n: usize) -> anyhow::Result<Vec<Duration>> {
    let health = tonic_health::pb::health_client::HealthClient::new(ch.clone());
    time_async(warmup_for(n), n, |_| {
        let mut h = health.clone();
        async move {
            h.check(tonic_health::pb::HealthCheckRequest {
                service: String::new(),
            })
            .await
            .map_err(|e| anyhow!("health Check: {}", e.message()))
        }
    })
    .await
}

/// The health Check's row.
pub(crate) fn health_row(samples: &[Duration]) -> Row {
    Row::latency(
        HEALTH,
        "gRPC health Check on agent.sock (baseline)",
        samples,
    )
    .with_note("grpc.health.v1.Health/Check on the same connection: no token, no handler work")
}

/// The floor under any request on agent.sock: a message to another process
/// over a Unix socket and its reply. `cat` reads from and writes to its end of
/// a socketpair, so each round trip wakes it and then us.
fn socket_echo(n: usize) -> anyhow::Result<Vec<Duration>> {
    use std::io::Read as _;
    use std::os::fd::OwnedFd;
    use std::os::unix::net::UnixStream;
    use std::process::{Command, Stdio};

    let cat = super::harness::which("cat").ok_or_else(|| anyhow!("no `cat` on PATH"))?;
    let (mut ours, theirs) = UnixStream::pair().context("socketpair")?;
    let theirs_out = theirs.try_clone().context("socketpair")?;
    let mut child = Command::new(cat)
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(Stdio::from(OwnedFd::from(theirs_out)))
        .stderr(Stdio::null())
        .spawn()
        .context("starting cat")?;
    let mut buf = [b'x'; 64];
    let timed = time_blocking(warmup_for(n), n, |_| {
        ours.write_all(&buf)?;
        ours.read_exact(&mut buf)?;
        Ok(())
    });
    drop(ours); // cat sees EOF and exits
    let _ = child.wait();
    timed
}

async fn run_bash_true(sup: &SupervisorProc, ws: &Path, n: usize) -> anyhow::Result<Row> {
    let s =
        AgentSession::open(sup.agent_channel().await?, ws, "dangerouslySkipPermissions").await?;
    // The first call creates the sandbox; keep it out of the CPU figure.
    let mut first = s.clone();
    first.call("run_bash", TRUE_ARGS).await?;
    let before = sup.sched();
    let samples = time_async(warmup_for(n), n, |_| {
        let mut s = s.clone();
        async move { s.call("run_bash", TRUE_ARGS).await }
    })
    .await?;
    let cpu = Sched::per_call(before, sup.sched(), warmup_for(n) + n);
    s.close().await?;
    Ok(Row::latency(
        "native.run_bash_true",
        "run_bash `true`, native sandbox, via gRPC",
        &samples,
    )
    .with_baseline(BWRAP)
    .with_target(Target::RatioAtMost {
        factor: 0.6,
        issue: 4,
    })
    .with_note(format!(
        "warm sandbox; policy decision, 3 audit records, exec in the session's sandbox (pid 1 stats /etc's directories to keep the command's /etc rules current); {cpu} (the sandbox's own processes not counted)"
    )))
}

/// Open a session, time its first run_bash `true` (which creates the
/// sandbox) and its second (warm); the sample is first − second.
async fn sandbox_create(sup: &SupervisorProc, ws: &Path, n: usize) -> anyhow::Result<Row> {
    let ch = sup.agent_channel().await?;
    let mut diffs = Vec::with_capacity(n);
    let mut cold_all = Vec::with_capacity(n);
    let warmup = warmup_for(n).min(5);
    for i in 0..warmup + n {
        let (_, cold, warm) = first_and_second_call(&ch, ws).await?;
        if i >= warmup {
            diffs.push(cold.as_nanos() as f64 - warm.as_nanos() as f64);
            cold_all.push(cold.as_nanos() as f64);
        }
    }
    cold_all.sort_by(f64::total_cmp);
    let cold_median = super::stats::percentile(&cold_all, 0.5).unwrap_or(0.0);
    Ok(Row::latency_ns(
        "native.sandbox_create",
        "create a session's native sandbox",
        &diffs,
    )
    .with_target(Target::MedianAtMostNanos {
        value: 15_000_000.0,
        issue: 4,
    })
    .with_note(format!(
        "first run_bash `true` of a fresh session minus its second (the first's median alone: {})",
        fmt_nanos(cold_median)
    )))
}

pub(crate) async fn files(sup: &SupervisorProc, ws: &Path, n: usize) -> anyhow::Result<Vec<Row>> {
    let data = ws.join("data4k.txt");
    let host_read = blocking(move || {
        time_blocking(warmup_for(n), n, |_| {
            let bytes = std::fs::read(&data)?;
            std::hint::black_box(bytes);
            Ok(())
        })
    })
    .await?;
    let s = AgentSession::open(sup.agent_channel().await?, ws, "acceptEdits").await?;
    let before = sup.sched();
    let read = time_async(warmup_for(n), n, |_| {
        let mut s = s.clone();
        async move { s.call("read_file", READ_ARGS).await }
    })
    .await?;
    let read_cpu = Sched::per_call(before, sup.sched(), warmup_for(n) + n);

    let dir = ws.to_path_buf();
    let content = content_4k();
    let c2 = content.clone();
    let host_write = blocking(move || {
        time_blocking(warmup_for(n), n, |_| {
            atomic_write(&dir, "host4k.txt", c2.as_bytes())
        })
    })
    .await?;
    // Overwriting a file the session has not read asks; read it once.
    let mut s2 = s.clone();
    s2.call("read_file", r#"{"path":"out4k.txt"}"#).await?;
    let args = json!({"path": "out4k.txt", "content": content}).to_string();
    let write = time_async(warmup_for(n), n, |_| {
        let mut s = s.clone();
        let args = args.clone();
        async move { s.call("write_file", &args).await }
    })
    .await?;
    s.close().await?;
    Ok(vec![
        Row::latency(
            "host.read_4k",
            "read 4 KiB in-process, std::fs::read (baseline)",
            &host_read,
        ),
        Row::latency("native.read_file_4k", "read_file 4 KiB via gRPC", &read)
            .with_baseline("host.read_4k")
            .with_target(Target::MedianAtMostNanos {
                value: 300_000.0,
                issue: 4,
            })
            .with_note(format!("policy decision, 3 audit records, openat2 beneath the workspace on the session owner's worker thread; {read_cpu}")),
        Row::latency(
            "host.write_4k",
            "atomic write 4 KiB in-process: tmp + fsync + rename + dir fsync (baseline)",
            &host_write,
        ),
        Row::latency("native.write_file_4k", "write_file 4 KiB via gRPC", &write)
            .with_baseline("host.write_4k")
            .with_note("overwrite of a file the session read; acceptEdits; the same atomic, durable write"),
    ])
}

/// What write_file does on the host, done directly.
fn atomic_write(dir: &Path, name: &str, content: &[u8]) -> anyhow::Result<()> {
    let tmp = dir.join(format!(".{name}.tmp"));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(&tmp)?;
    f.write_all(content)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, dir.join(name))?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

/// A run_bash `true` in default mode asks; an operator approves it. The
/// sample runs from sending DecideApproval to receiving the session's
/// `tool_started` event on WatchEvents (so it includes that record's fsync
/// and the event's delivery: an upper bound).
async fn approval(sup: &SupervisorProc, ws: &Path, n: usize) -> anyhow::Result<Row> {
    let s = AgentSession::open(sup.agent_channel().await?, ws, "default").await?;
    let mut op = sup.operator().await?;
    let mut watch = op
        .watch_events(pb::WatchEventsRequest {
            session_id: s.id.clone(),
        })
        .await
        .map_err(|e| anyhow!("WatchEvents: {}", e.message()))?
        .into_inner();
    let warmup = warmup_for(n);
    let mut samples = Vec::with_capacity(n);
    for i in 0..warmup + n {
        let mut c = s.clone();
        let call = tokio::spawn(async move {
            let req = authed(
                pb::CallToolRequest {
                    call_id: format!("ap{i}"),
                    tool: "run_bash".to_string(),
                    arguments_json: TRUE_ARGS.to_string(),
                },
                &c.token,
            )?;
            c.client
                .call_tool(req)
                .await
                .map(tonic::Response::into_inner)
                .map_err(|e| anyhow!("CallTool: {}", e.message()))
        });
        let requested = tokio::time::timeout(
            Duration::from_secs(10),
            next_event(&mut watch, "approval_requested"),
        )
        .await
        .map_err(|_| {
            anyhow!(
                "run_bash `true` in default mode did not ask within 10 s (is it allowed by a rule?)"
            )
        })??;
        let v: serde_json::Value = serde_json::from_str(&requested.json)?;
        let approval_id = v
            .get("approval_id")
            .and_then(|a| a.as_str())
            .map(str::to_string)
            .ok_or_else(|| anyhow!("approval_requested without approval_id"))?;
        let elapsed = approve_and_wait(&mut op, &mut watch, &approval_id).await?;
        let resp = call
            .await
            .map_err(|e| anyhow!("the CallTool task failed: {e}"))??;
        check_ok("run_bash", &resp)?;
        if i >= warmup {
            samples.push(elapsed);
        }
    }
    drop(watch);
    s.close().await?;
    Ok(Row::latency(
        "native.approve_to_start",
        "approve → tool started (operator approval)",
        &samples,
    )
    .with_target(Target::MedianAtMostNanos {
        value: 5_000_000.0,
        issue: 6,
    })
    .with_note("DecideApproval sent → the session's tool_started event received on WatchEvents (upper bound: includes that record's fsync)"))
}

/// The next event named `name` on `watch` (others are skipped).
async fn next_event(
    watch: &mut tonic::Streaming<pb::Event>,
    name: &str,
) -> anyhow::Result<pb::Event> {
    loop {
        let ev = watch
            .message()
            .await
            .map_err(|e| anyhow!("WatchEvents: {}", e.message()))?
            .ok_or_else(|| anyhow!("WatchEvents ended"))?;
        if ev.event == name {
            return Ok(ev);
        }
    }
}

/// Approves `approval_id` as an operator; returns the time until the
/// session's `tool_started` arrives.
async fn approve_and_wait(
    op: &mut pb::operator_service_client::OperatorServiceClient<tonic::transport::Channel>,
    watch: &mut tonic::Streaming<pb::Event>,
    approval_id: &str,
) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let decided = op
        .decide_approval(pb::DecideApprovalRequest {
            approval_id: approval_id.to_string(),
            approve: true,
            scope: "once".to_string(),
            ..Default::default()
        })
        .await
        .map_err(|e| anyhow!("DecideApproval {approval_id}: {}", e.message()))?
        .into_inner();
    if decided.outcome != "approved" {
        bail!("approval {approval_id} ended {}", decided.outcome);
    }
    tokio::time::timeout(Duration::from_secs(10), next_event(watch, "tool_started"))
        .await
        .map_err(|_| anyhow!("no tool_started within 10 s of approval {approval_id}"))??;
    Ok(t.elapsed())
}

/// read_file calls per second: one session alone (the baseline), then 32
/// sessions at once, each on its own connection.
async fn throughput(
    sup: &SupervisorProc,
    ws: &Path,
    n: usize,
    phase: Duration,
) -> anyhow::Result<Vec<Row>> {
    let (one_rate, one_lat) = load(sup, ws, 1, n, phase).await?;
    let (many_rate, many_lat) = load(sup, ws, 32, n, phase).await?;
    let lat = |l: &[f64]| {
        format!(
            "per call median {}, p99 {}",
            fmt_nanos(super::stats::percentile(l, 0.5).unwrap_or(0.0)),
            fmt_nanos(super::stats::percentile(l, 0.99).unwrap_or(0.0))
        )
    };
    Ok(vec![
        Row::value(
            "native.read_file_1_session",
            "read_file calls/s, 1 session (baseline)",
            Unit::PerSecond,
            one_rate,
            one_lat.len(),
        )
        .with_note(lat(&one_lat)),
        Row::value(
            "native.read_file_32_sessions",
            "read_file calls/s across 32 sessions",
            Unit::PerSecond,
            many_rate,
            many_lat.len(),
        )
        .with_baseline("native.read_file_1_session")
        .with_note(lat(&many_lat)),
    ])
}

/// `sessions` clients calling read_file back to back for `phase` (and at
/// least `min_calls` calls in all). Returns calls/s and sorted latencies (ns).
async fn load(
    sup: &SupervisorProc,
    ws: &Path,
    sessions: usize,
    min_calls: usize,
    phase: Duration,
) -> anyhow::Result<(f64, Vec<f64>)> {
    let mut opened = Vec::with_capacity(sessions);
    for _ in 0..sessions {
        let s = AgentSession::open(sup.agent_channel().await?, ws, "default").await?;
        let mut w = s.clone();
        for _ in 0..3 {
            w.call("read_file", READ_ARGS).await?;
        }
        opened.push(s);
    }
    let per_session = min_calls.div_ceil(sessions);
    let start = Arc::new(tokio::sync::Barrier::new(sessions + 1));
    let mut tasks = Vec::with_capacity(sessions);
    for s in &opened {
        let mut s = s.clone();
        let start = Arc::clone(&start);
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let t0 = Instant::now();
            let mut lat = Vec::new();
            while t0.elapsed() < phase || lat.len() < per_session {
                let took = s.timed_call("read_file", READ_ARGS).await?;
                lat.push(took.as_nanos() as f64);
            }
            Ok::<Vec<f64>, anyhow::Error>(lat)
        }));
    }
    start.wait().await;
    let t0 = Instant::now();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.map_err(|e| anyhow!("a load task failed: {e}"))??);
    }
    let elapsed = t0.elapsed().as_secs_f64();
    for s in opened {
        s.close().await?;
    }
    all.sort_by(f64::total_cmp);
    Ok((all.len() as f64 / elapsed, all))
}
