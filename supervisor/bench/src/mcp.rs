//! `agent mcp` (docs/PERFORMANCE.md "MCP"): read_file 4 KiB over MCP, request to response on
//! an open stdio connection, beside the same read via gRPC in the same run.
//!
//! The real `agent` binary serves MCP on pipes (as MCP clients start it);
//! this side writes one `tools/call` line and reads the answer line, so the
//! figure is everything `agent mcp` adds (two pipe hops, rmcp's parsing and
//! encoding, the gRPC call it makes) and no client library's cost. The gRPC
//! baseline is taken interleaved with it, one sample each in turn, on the
//! same supervisor, workspace and file, so that load on this noisy machine
//! hits both alike.

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use super::harness::{AgentSession, SupervisorProc, TempRoot, warmup_for};
use super::stats::{Row, Target, Unit};

const MCP: &str = "mcp.read_file_4k";
const MCP_NAME: &str = "agent mcp read_file 4 KiB, stdio request to response";
const GRPC: &str = "mcp.grpc_read_file_4k";
const GRPC_NAME: &str = "read_file 4 KiB via gRPC, interleaved with the MCP row (baseline)";
const FILE: &str = "data4k.txt";

fn target() -> Target {
    Target::RatioAtMost {
        factor: 1.3,
        issue: 23,
    }
}

/// The rows, measured; a failure or a missing binary becomes a row that
/// says why.
pub async fn run(agent_exe: &Path, sup: &SupervisorProc, root: &TempRoot, n: usize) -> Vec<Row> {
    if !agent_exe.is_file() {
        return missing(
            "no `agent` binary next to supervisorctl; build it (cargo build --release -p tollgate-agent)",
        );
    }
    match measure(agent_exe, sup, root, n).await {
        Ok((grpc, mcp)) => vec![
            Row::latency(GRPC, GRPC_NAME, &grpc)
                .with_note("the same file, workspace and supervisor; one gRPC sample, then one MCP sample, in turn"),
            Row::latency(MCP, MCP_NAME, &mcp)
                .with_baseline(GRPC)
                .with_target(target())
                .with_note("a JSON-RPC line to `agent mcp` over a pipe and its answer line back; agent mcp makes the gRPC call"),
        ],
        Err(e) => failed(&format!("{e:#}")),
    }
}

fn missing(why: &str) -> Vec<Row> {
    vec![
        Row::missing(GRPC, GRPC_NAME, Unit::Nanos, why),
        Row::missing(MCP, MCP_NAME, Unit::Nanos, why).with_target(target()),
    ]
}

/// Both rows as FAILED, e.g. when the supervisor did not start.
pub fn failed(why: &str) -> Vec<Row> {
    vec![
        Row::failed(GRPC, GRPC_NAME, Unit::Nanos, why.to_string()),
        Row::failed(MCP, MCP_NAME, Unit::Nanos, why.to_string()).with_target(target()),
    ]
}

async fn measure(
    exe: &Path,
    sup: &SupervisorProc,
    root: &TempRoot,
    n: usize,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let ws = root.subdir("ws-mcp")?;
    std::fs::write(ws.join(FILE), data_4k()).with_context(|| format!("writing {FILE}"))?;
    let mut grpc = AgentSession::open(sup.agent_channel().await?, &ws, "default").await?;
    let args = json!({ "path": FILE }).to_string();
    let expected = grpc.call("read_file", &args).await?.output;
    let mut mcp = McpProc::start(exe, &sup.agent_socket, &ws).await?;
    let first = mcp.read_file().await?;
    if first != expected {
        bail!("agent mcp answered read_file with other text than gRPC did: {first:?}");
    }
    let mut g = Vec::with_capacity(n);
    let mut m = Vec::with_capacity(n);
    for i in 0..warmup_for(n) + n {
        let t = Instant::now();
        grpc.call("read_file", &args).await?;
        let dg = t.elapsed();
        let t = Instant::now();
        mcp.read_file().await?;
        let dm = t.elapsed();
        if i >= warmup_for(n) {
            g.push(dg);
            m.push(dm);
        }
    }
    mcp.stop().await?;
    grpc.close().await?;
    Ok((g, m))
}

fn data_4k() -> String {
    let mut data = String::with_capacity(4096);
    let mut i = 0;
    while data.len() < 4096 {
        data.push_str(&format!("line {i:05}: the quick brown fox jumps over it\n"));
        i += 1;
    }
    data.truncate(4096);
    data
}

/// An MCP server on pipes (`agent mcp`, or another), initialized.
pub(super) struct McpProc {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
    stderr: Arc<Mutex<String>>,
    next_id: u64,
}

impl McpProc {
    async fn start(exe: &Path, socket: &Path, ws: &Path) -> anyhow::Result<McpProc> {
        let mut cmd = Command::new(exe);
        cmd.arg("mcp")
            .arg("--socket")
            .arg(socket)
            .arg("--workspace")
            .arg(ws)
            .current_dir(ws);
        McpProc::spawn(cmd).await
    }

    /// Starts `cmd` with its stdio piped and initializes it.
    pub(super) async fn spawn(mut cmd: Command) -> anyhow::Result<McpProc> {
        let what = format!("{:?}", cmd.as_std().get_program());
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {what}"))?;
        let stderr = Arc::new(Mutex::new(String::new()));
        if let Some(mut err) = child.stderr.take() {
            let log = Arc::clone(&stderr);
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while let Ok(k) = err.read(&mut buf).await {
                    if k == 0 {
                        break;
                    }
                    if let Ok(mut l) = log.lock() {
                        l.push_str(&String::from_utf8_lossy(&buf[..k]));
                    }
                }
            });
        }
        let stdin = child.stdin.take();
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow!("agent mcp has no stdout pipe"))?;
        let mut p = McpProc {
            child,
            stdin,
            stdout: BufReader::new(stdout).lines(),
            stderr,
            next_id: 0,
        };
        p.send(
            &json!({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "supervisorctl bench", "version": env!("CARGO_PKG_VERSION")}}}),
        )
        .await?;
        let init = p.recv().await?;
        if init.get("result").is_none() {
            bail!("agent mcp refused initialize: {init}");
        }
        p.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await?;
        Ok(p)
    }

    fn why(&self) -> String {
        self.stderr
            .lock()
            .map(|l| l.trim_end().to_string())
            .unwrap_or_default()
    }

    async fn send(&mut self, msg: &Value) -> anyhow::Result<()> {
        let mut line = msg.to_string().into_bytes();
        line.push(b'\n');
        let w = self
            .stdin
            .as_mut()
            .ok_or_else(|| anyhow!("agent mcp's stdin is closed"))?;
        w.write_all(&line).await?;
        w.flush().await?;
        Ok(())
    }

    async fn recv(&mut self) -> anyhow::Result<Value> {
        let line = tokio::time::timeout(Duration::from_secs(30), self.stdout.next_line())
            .await
            .map_err(|_| {
                anyhow!(
                    "agent mcp did not answer in 30 s; its stderr: {}",
                    self.why()
                )
            })??
            .ok_or_else(|| anyhow!("agent mcp closed its stdout; its stderr: {}", self.why()))?;
        serde_json::from_str(&line)
            .with_context(|| format!("agent mcp wrote a line that is not JSON: {line}"))
    }

    /// One `tools/call read_file`; its text, or why it failed.
    async fn read_file(&mut self) -> anyhow::Result<String> {
        self.call("read_file", json!({ "path": FILE })).await
    }

    /// One `tools/call`; its text, or why it failed.
    pub(super) async fn call(&mut self, tool: &str, arguments: Value) -> anyhow::Result<String> {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}}))
            .await?;
        let r = self.recv().await?;
        if r["id"] != json!(id) || r["result"]["isError"] != json!(false) {
            bail!("the MCP server answered {tool} with {r}");
        }
        r["result"]["content"][0]["text"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| anyhow!("the {tool} result has no text: {r}"))
    }

    /// Closes stdin (MCP's shutdown on stdio) and waits for the exit.
    pub(super) async fn stop(mut self) -> anyhow::Result<()> {
        drop(self.stdin.take());
        let status = tokio::time::timeout(Duration::from_secs(15), self.child.wait())
            .await
            .map_err(|_| anyhow!("the MCP server did not exit after its stdin closed"))??;
        if !status.success() {
            bail!("the MCP server exited {status}: {}", self.why());
        }
        Ok(())
    }
}
