//! `agent mcp-gateway` (docs/PERFORMANCE.md "MCP"): what the gateway adds to one
//! `tools/call` of a trivial tool, against the same server reached
//! directly on pipes, in the same run.
//!
//! The server is a few lines of Python (an `echo` tool). Directly, it runs
//! on the host with this process on its stdio. Through the gateway, the real
//! `agent mcp-gateway` relays the call to the supervisor, which decides it
//! (`mcp(bench.echo)`, by the mode), records it, forwards it to the same
//! server running in the session's native sandbox, records the answer and
//! sends it back. Samples are interleaved, one each in turn.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde_json::json;
use tokio::process::Command;

use super::harness::{SupervisorProc, TempRoot, warmup_for};
use super::mcp::McpProc;
use super::stats::{Row, Target, Unit};

const GATEWAY: &str = "mcp.gateway_call";
const GATEWAY_NAME: &str = "agent mcp-gateway tools/call of a trivial tool, added latency";
const DIRECT: &str = "mcp.direct_call";
const DIRECT_NAME: &str = "the same tools/call on the server's own stdio (baseline)";

/// A trivial MCP server: initialize, tools/list, one `echo` tool.
const ECHO_SERVER: &str = r#"import json, sys
for line in sys.stdin:
    m = json.loads(line)
    i, method = m.get("id"), m.get("method")
    if i is None:
        continue
    if method == "initialize":
        r = {"protocolVersion": m["params"]["protocolVersion"], "capabilities": {"tools": {}}, "serverInfo": {"name": "echo", "version": "0"}}
    elif method == "tools/list":
        r = {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}
    elif method == "tools/call":
        r = {"content": [{"type": "text", "text": m["params"]["arguments"].get("text", "")}], "isError": False}
    else:
        r = {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": i, "result": r}) + "\n")
    sys.stdout.flush()
"#;

fn target() -> Target {
    Target::AddedAtMostNanos {
        value: 1e6,
        issue: 23,
    }
}

/// The rows, measured; a failure or a missing piece becomes a row that says
/// why.
pub async fn run(agent_exe: &Path, sup: &SupervisorProc, root: &TempRoot, n: usize) -> Vec<Row> {
    let python = Path::new("/usr/bin/python3");
    if !agent_exe.is_file() || !python.is_file() {
        let why = "needs the `agent` binary next to supervisorctl and /usr/bin/python3 (the trivial server)";
        return vec![
            Row::missing(DIRECT, DIRECT_NAME, Unit::Nanos, why),
            Row::missing(GATEWAY, GATEWAY_NAME, Unit::Nanos, why).with_target(target()),
        ];
    }
    match measure(agent_exe, sup, root, n).await {
        Ok((direct, gw)) => vec![
            Row::latency(DIRECT, DIRECT_NAME, &direct)
                .with_note("python3 echo server on this process's pipes, no sandbox"),
            Row::latency(GATEWAY, GATEWAY_NAME, &gw)
                .with_baseline(DIRECT)
                .with_target(target())
                .with_note("through agent mcp-gateway, the supervisor (decision, 3 audit records) and the native sandbox's pipes to the same server; interleaved with the baseline"),
        ],
        Err(e) => failed(&format!("{e:#}")),
    }
}

/// Both rows as FAILED, e.g. when the supervisor did not start.
pub fn failed(why: &str) -> Vec<Row> {
    vec![
        Row::failed(DIRECT, DIRECT_NAME, Unit::Nanos, why.to_string()),
        Row::failed(GATEWAY, GATEWAY_NAME, Unit::Nanos, why.to_string()).with_target(target()),
    ]
}

async fn measure(
    exe: &Path,
    sup: &SupervisorProc,
    root: &TempRoot,
    n: usize,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let ws = root.subdir("ws-mcp-gateway")?;
    std::fs::write(ws.join("echo_server.py"), ECHO_SERVER).context("writing the echo server")?;
    let mut direct = Command::new("/usr/bin/python3");
    direct.arg("echo_server.py").current_dir(&ws);
    let mut direct = McpProc::spawn(direct).await?;
    let mut gw = Command::new(exe);
    gw.args([
        "mcp-gateway",
        "--name",
        "bench",
        "--mode",
        "dangerouslySkipPermissions",
    ])
    .arg("--socket")
    .arg(&sup.agent_socket)
    .arg("--workspace")
    .arg(&ws)
    .args(["--", "python3", "echo_server.py"])
    .current_dir(&ws);
    let mut gw = McpProc::spawn(gw).await?;
    let args = json!({"text": "ping"});
    if gw.call("echo", args.clone()).await? != "ping" {
        bail!("the gateway's echo did not answer ping");
    }
    let mut d = Vec::with_capacity(n);
    let mut g = Vec::with_capacity(n);
    for i in 0..warmup_for(n) + n {
        let t = Instant::now();
        direct.call("echo", args.clone()).await?;
        let dd = t.elapsed();
        let t = Instant::now();
        gw.call("echo", args.clone()).await?;
        let dg = t.elapsed();
        if i >= warmup_for(n) {
            d.push(dd);
            g.push(dg);
        }
    }
    gw.stop().await?;
    direct.stop().await?;
    Ok((d, g))
}
