//! What OpenTelemetry export costs a tool call (docs/INTERFACES.md, config
//! `[telemetry]`), in its worst case: read_file 4 KiB through a supervisor
//! whose `[telemetry]` collector accepts connections and never answers, so
//! every export hangs until its
//! timeout, the queue fills and events are dropped (and counted). The
//! baseline is the same call with telemetry off (`native.read_file_4k`).

use std::path::Path;

use super::harness::{AgentSession, SupervisorProc, TempRoot, blocking, time_async, warmup_for};
use super::stats::{Row, Unit};

pub const ID: &str = "telemetry.read_file_4k_hung_collector";
const NAME: &str = "read_file 4 KiB via gRPC, telemetry to a collector that never answers";
const READ_ARGS: &str = r#"{"path":"data4k.txt"}"#;

/// Measures [`ID`]; a failure is a FAILED row.
pub async fn run(root: &TempRoot, exe: &Path, base_config: &str, n: usize) -> Row {
    measure(root, exe, base_config, n)
        .await
        .unwrap_or_else(|e| Row::failed(ID, NAME, Unit::Nanos, format!("{e:#}")))
}

async fn measure(root: &TempRoot, exe: &Path, base_config: &str, n: usize) -> anyhow::Result<Row> {
    // The kernel completes connections into the backlog; nobody reads.
    let silent = std::net::TcpListener::bind("127.0.0.1:0")?;
    let config = format!(
        "{base_config}\n[telemetry]\nendpoint = \"http://{}\"\nqueue_size = 64\nbatch_size = 16\nexport_timeout_ms = 60000\n",
        silent.local_addr()?
    );
    let dir = root.subdir("sup-telemetry")?;
    let ws = root.subdir("ws-telemetry")?;
    std::fs::write(ws.join("data4k.txt"), "0123456789abcdef".repeat(256))?;
    let exe = exe.to_path_buf();
    let sup = blocking(move || SupervisorProc::start(&exe, &dir, &config, "native")).await?;
    let result = async {
        let s = AgentSession::open(sup.agent_channel().await?, &ws, "acceptEdits").await?;
        let read = time_async(warmup_for(n), n, |_| {
            let mut s = s.clone();
            async move { s.call("read_file", READ_ARGS).await }
        })
        .await?;
        s.close().await?;
        anyhow::Ok(read)
    }
    .await;
    blocking(move || {
        let mut sup = sup;
        sup.stop();
        drop(silent);
        Ok(())
    })
    .await?;
    Ok(Row::latency(ID, NAME, &result?)
        .with_baseline("native.read_file_4k")
        .with_note("queue 64, export timeout 60 s: the worker hangs on its first export, the queue fills, the rest is dropped and counted; a tool call only pays a try_send"))
}
