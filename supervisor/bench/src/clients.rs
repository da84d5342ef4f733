//! Claude Code and Codex behind the gate (docs/PERFORMANCE.md, its section
//! of that name): what `agent hook` adds to a client's tool call.
//!
//! - `clients.hook_read`: `agent hook` deciding an allowed Read, from process
//!   start to exit (the decision durable before it answers), beside a
//!   fork/exec of `true` sampled in rounds with it (`clients.fork_exec_true`):
//!   ≤ 4×.
//! - `clients.routed_true`: a routed Bash `true`, the rewritten command
//!   (`agent hook exec ID`) from its start to its exit, beside
//!   `clients.routed_baseline`: in the same rounds, a `run_bash true` over
//!   gRPC plus a fork/exec of `true` (one process start), each round's two
//!   added: ≤ 1.5×.
//!
//! Sampling in rounds (one of each, in turn) keeps both sides of a ratio in
//! the same phase of this VM's drifting speed.
//! - `clients.claude_scenario`: where Claude Code is installed, one real
//!   scenario (two model turns, one Bash call, against a mock Messages
//!   server on loopback with its non-essential traffic off) with tollgate's
//!   hook, beside the same scenario with no hook: ≤ 1.2×. Otherwise MISSING,
//!   with why.

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use serde_json::{Value, json};
use tollgate_proto::v1 as pb;
use tollgate_proto::v1::client_hooks_client::ClientHooksClient;

use super::harness::{AgentSession, SupervisorProc, TRUE_ARGS, TempRoot, blocking, warmup_for};
use super::stats::{Row, Target, Unit};

const HOOK_READ: &str = "clients.hook_read";
const ROUTED: &str = "clients.routed_true";
const ROUTED_BASE: &str = "clients.routed_baseline";
const FORK_ROUNDS: &str = "clients.fork_exec_true";
const SCENARIO: &str = "clients.claude_scenario";
const SCENARIO_BASE: &str = "clients.claude_scenario_nohook";
/// The Claude Code version the tests pin.
const CLAUDE_VERSION: &str = "2.1.328";

/// Every row this group makes, for a run whose supervisor did not start.
pub fn failed(why: &str) -> Vec<Row> {
    vec![
        Row::failed(HOOK_READ, "agent hook: an allowed Read", Unit::Nanos, why),
        Row::failed(ROUTED, "routed Bash `true`", Unit::Nanos, why),
        Row::failed(
            SCENARIO,
            "Claude Code scenario with the hook",
            Unit::Nanos,
            why,
        ),
    ]
}

pub async fn run(
    agent: Option<PathBuf>,
    sup: &SupervisorProc,
    root: &TempRoot,
    n: usize,
    scenarios: usize,
) -> Vec<Row> {
    let Some(agent) = agent.filter(|p| p.is_file()) else {
        let why = "no `agent` binary next to supervisorctl; build it (cargo build --release -p tollgate-agent)";
        return vec![
            Row::missing(HOOK_READ, "agent hook: an allowed Read", Unit::Nanos, why),
            Row::missing(ROUTED, "routed Bash `true`", Unit::Nanos, why),
            Row::missing(
                SCENARIO,
                "Claude Code scenario with the hook",
                Unit::Nanos,
                why,
            ),
        ];
    };
    let mut rows = Vec::new();
    let ws = match root.subdir("ws-clients") {
        Ok(ws) => ws,
        Err(e) => return failed(&format!("{e:#}")),
    };
    let why = |e: anyhow::Error| format!("{e:#}");
    match hook_read(&agent, sup, &ws, n).await {
        Ok(mut r) => rows.append(&mut r),
        Err(e) => rows.push(Row::failed(
            HOOK_READ,
            "agent hook: an allowed Read",
            Unit::Nanos,
            why(e),
        )),
    }
    match routed(&agent, sup, &ws, n).await {
        Ok(mut r) => rows.append(&mut r),
        Err(e) => rows.push(Row::failed(
            ROUTED,
            "routed Bash `true`",
            Unit::Nanos,
            why(e),
        )),
    }
    rows.extend(scenario(&agent, sup, root, scenarios).await);
    rows
}

fn event(session: &str, ws: &Path, tool: &str, input: Value, id: &str) -> String {
    json!({
        "session_id": session, "transcript_path": "/nonexistent", "cwd": ws,
        "hook_event_name": "PreToolUse", "tool_name": tool, "tool_input": input,
        "tool_use_id": id,
    })
    .to_string()
}

/// Runs `agent hook` once with `event` on stdin; fails unless it allowed.
fn hook_once(agent: &Path, socket: &Path, event: &str) -> anyhow::Result<()> {
    let mut child = Command::new(agent)
        .args(["hook", "--client", "claude-code", "--socket"])
        .arg(socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {}", agent.display()))?;
    child
        .stdin
        .take()
        .ok_or_else(|| anyhow!("no stdin"))?
        .write_all(event.as_bytes())?;
    let out = child.wait_with_output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || !stdout.contains("\"permissionDecision\":\"allow\"") {
        bail!(
            "agent hook did not allow ({}): {stdout} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim_end()
        );
    }
    Ok(())
}

/// One fork/exec of `true`.
fn fork_exec_true() -> anyhow::Result<Duration> {
    let t = Instant::now();
    let status = Command::new("true")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    let took = t.elapsed();
    if !status.success() {
        bail!("`true` exited {status}");
    }
    Ok(took)
}

async fn hook_read(
    agent: &Path,
    sup: &SupervisorProc,
    ws: &Path,
    n: usize,
) -> anyhow::Result<Vec<Row>> {
    let file = ws.join("a.txt");
    std::fs::write(&file, "four kilobytes would do; a line is enough\n")?;
    let (agent, socket, ws) = (
        agent.to_path_buf(),
        sup.agent_socket.clone(),
        ws.to_path_buf(),
    );
    let session = format!("bench-read-{}", std::process::id());
    let (hooks, trues) = blocking(move || {
        // Opens the session: not part of a decision's cost.
        hook_once(
            &agent,
            &socket,
            &event(&session, &ws, "Read", json!({"file_path": file}), "open"),
        )?;
        let (mut hooks, mut trues) = (Vec::new(), Vec::new());
        for i in 0..warmup_for(n) + n {
            let truth = fork_exec_true()?;
            let ev = event(
                &session,
                &ws,
                "Read",
                json!({"file_path": file}),
                &format!("r{i}"),
            );
            let t = Instant::now();
            hook_once(&agent, &socket, &ev)?;
            if i >= warmup_for(n) {
                hooks.push(t.elapsed());
                trues.push(truth);
            }
        }
        Ok((hooks, trues))
    })
    .await?;
    Ok(vec![
        Row::latency(FORK_ROUNDS, "fork/exec `true`, in rounds with the hook (baseline)", &trues)
            .with_note("/usr/bin/true, one before each hook sample"),
        Row::latency(HOOK_READ, "agent hook: an allowed Read, process start to exit", &hooks)
            .with_baseline(FORK_ROUNDS)
            .with_target(Target::RatioAtMost {
                factor: 4.0,
                issue: 22,
            })
            .with_note("spawn, the event on stdin, connect, decide (the permission_check fsync'd), answer, exit"),
    ])
}

async fn routed(
    agent: &Path,
    sup: &SupervisorProc,
    ws: &Path,
    n: usize,
) -> anyhow::Result<Vec<Row>> {
    let channel = super::harness::channel(&sup.agent_socket).await?;
    let mut hooks = ClientHooksClient::new(channel.clone());
    // The baseline's run_bash: a session of tollgate's own agent.
    let mut own = AgentSession::open(channel, ws, "dangerouslySkipPermissions").await?;
    own.call("run_bash", TRUE_ARGS).await?;
    let session = format!("bench-route-{}", std::process::id());
    let (mut routed, mut base) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let warm = warmup_for(n);
    for i in 0..warm + n {
        let run_bash = own.timed_call("run_bash", TRUE_ARGS).await?;
        let truth = blocking(fork_exec_true).await?;
        // The decision (not timed): what the hook's PreToolUse does.
        let answer = hooks
            .event(pb::HookEventRequest {
                client: "claude-code".to_string(),
                client_kind: pb::ClientKind::ClaudeCode as i32,
                event_json: event(
                    &session,
                    ws,
                    "Bash",
                    json!({"command": "true"}),
                    &format!("b{i}"),
                ),
                wait_ms: 10_000,
            })
            .await
            .map_err(|s| anyhow!("PreToolUse: {}", s.message()))?
            .into_inner();
        if answer.route_id.is_empty() {
            bail!(
                "Bash `true` was not routed: {} {}",
                answer.decision,
                answer.reason
            );
        }
        let (agent, socket) = (agent.to_path_buf(), sup.agent_socket.clone());
        let took = blocking(move || {
            let t = Instant::now();
            let status = Command::new(&agent)
                .args(["hook", "exec", &answer.route_id, "--socket"])
                .arg(&socket)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()?;
            let took = t.elapsed();
            if !status.success() {
                bail!("agent hook exec exited {status}");
            }
            Ok(took)
        })
        .await?;
        if i >= warm {
            routed.push(took);
            base.push(run_bash + truth);
        }
    }
    own.close().await?;
    Ok(vec![
        Row::latency(ROUTED_BASE, "run_bash `true` via gRPC + fork/exec `true` (baseline)", &base)
            .with_note("per round: one run_bash `true` of tollgate's own agent on the same supervisor (warm sandbox) plus one fork/exec of `true`, added"),
        Row::latency(ROUTED, "routed Bash `true`: the rewritten command's start to exit", &routed)
            .with_baseline(ROUTED_BASE)
            .with_target(Target::RatioAtMost {
                factor: 1.5,
                issue: 22,
            })
            .with_note("agent hook exec: connect, claim the decided command, tool_started fsync'd, exec in the warm native sandbox, stream, exit; sampled in rounds with its baseline"),
    ])
}

/// Where the tests find the clients.
fn claude_binary() -> PathBuf {
    std::env::var_os("TOLLGATE_CLIENTS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/tollgate-clients"))
        .join("node_modules/.bin/claude")
}

async fn scenario(agent: &Path, sup: &SupervisorProc, root: &TempRoot, samples: usize) -> Vec<Row> {
    let claude = claude_binary();
    let target = Target::RatioAtMost {
        factor: 1.2,
        issue: 22,
    };
    let name = "Claude Code scenario (2 model turns, 1 Bash) with tollgate's hook";
    let base_name = "the same scenario, no hook (baseline)";
    if !claude.exists() {
        let why = format!(
            "Claude Code is not installed at {} (npm install --prefix {} @anthropic-ai/claude-code@{CLAUDE_VERSION})",
            claude.display(),
            claude
                .parent()
                .and_then(Path::parent)
                .and_then(Path::parent)
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        );
        return vec![
            Row::missing(SCENARIO, name, Unit::Nanos, why.clone()).with_target(target),
            Row::missing(SCENARIO_BASE, base_name, Unit::Nanos, why),
        ];
    }
    let (agent, socket, dir) = (
        agent.to_path_buf(),
        sup.agent_socket.clone(),
        root.path().to_path_buf(),
    );
    let measured =
        blocking(move || scenario_samples(&claude, &agent, &socket, &dir, samples)).await;
    match measured {
        Ok((with, without)) => vec![
            Row::latency(SCENARIO, name, &with)
                .with_baseline(SCENARIO_BASE)
                .with_target(target)
                .with_note("claude -p against a mock Messages server on loopback (non-essential traffic off); the Bash call routed into the native sandbox; runs alternate with the baseline's"),
            Row::latency(SCENARIO_BASE, base_name, &without),
        ],
        Err(e) => {
            let why = format!("{e:#}");
            vec![
                Row::failed(SCENARIO, name, Unit::Nanos, why.clone()).with_target(target),
                Row::failed(SCENARIO_BASE, base_name, Unit::Nanos, why),
            ]
        }
    }
}

/// Alternating runs with and without the hook.
fn scenario_samples(
    claude: &Path,
    agent: &Path,
    socket: &Path,
    dir: &Path,
    samples: usize,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let ws = dir.join("ws-claude");
    let home = dir.join("home-claude");
    std::fs::create_dir_all(&ws)?;
    std::fs::create_dir_all(&home)?;
    let out = Command::new(agent)
        .args(["hook", "print-config", "claude", "--socket"])
        .arg(socket)
        .output()?;
    if !out.status.success() {
        bail!(
            "agent hook print-config failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let with = dir.join("hooks.json");
    let without = dir.join("nohooks.json");
    std::fs::write(&with, &out.stdout)?;
    std::fs::write(&without, "{}\n")?;
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let base = format!("http://{}", listener.local_addr()?);
    std::thread::spawn(move || mock_messages(listener));
    let run = |settings: &Path| -> anyhow::Result<Duration> {
        let t = Instant::now();
        let out = Command::new(claude)
            .args([
                "-p",
                "run true once",
                "--output-format",
                "json",
                "--settings",
            ])
            .arg(settings)
            .current_dir(&ws)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", &home)
            .env("ANTHROPIC_BASE_URL", &base)
            .env("ANTHROPIC_API_KEY", "bench")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("DISABLE_AUTOUPDATER", "1")
            .stdin(Stdio::null())
            .output()?;
        let took = t.elapsed();
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() || !text.contains("\"num_turns\":2") {
            bail!(
                "claude failed ({}): {} {}",
                out.status,
                text.trim_end(),
                String::from_utf8_lossy(&out.stderr).trim_end()
            );
        }
        Ok(took)
    };
    // One of each first, to warm the caches.
    run(&without)?;
    run(&with)?;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..samples {
        a.push(run(&with)?);
        b.push(run(&without)?);
    }
    Ok((a, b))
}

/// A two-step Messages mock: a Bash `true` call, then a final answer (the
/// step is the number of tool_result blocks in the request).
fn mock_messages(listener: TcpListener) {
    for conn in listener.incoming() {
        let Ok(mut conn) = conn else { return };
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 65536];
            loop {
                let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                    match conn.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(k) => buf.extend_from_slice(&chunk[..k]),
                    }
                    continue;
                };
                let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                while buf.len() < end + 4 + len {
                    match conn.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(k) => buf.extend_from_slice(&chunk[..k]),
                    }
                }
                let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).into_owned();
                buf.drain(..end + 4 + len);
                let step = body.matches("\"tool_result\"").count();
                let sse = messages_sse(step);
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: {}\r\n\r\n{sse}",
                    sse.len()
                );
                if conn.write_all(reply.as_bytes()).is_err() {
                    return;
                }
            }
        });
    }
}

fn messages_sse(step: usize) -> String {
    let (block, delta, stop) = if step == 0 {
        (
            json!({"type": "tool_use", "id": "toolu_bench", "name": "Bash", "input": {}}),
            json!({"type": "input_json_delta", "partial_json": "{\"command\":\"true\"}"}),
            "tool_use",
        )
    } else {
        (
            json!({"type": "text", "text": ""}),
            json!({"type": "text_delta", "text": "done"}),
            "end_turn",
        )
    };
    let events = [
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "model": "bench", "content": [], "stop_reason": null, "usage": {"input_tokens": 1, "output_tokens": 1}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": block}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": delta}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 1}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ];
    events
        .iter()
        .map(|(e, d)| format!("event: {e}\ndata: {d}\n\n"))
        .collect()
}
