//! The supervisor's memory with 100 idle sessions, beside the transport's
//! floor: a bare tonic server in another process (`floor`) holding 100
//! idle connections, each with a stream open, as the sessions hold theirs
//! (docs/PERFORMANCE.md "supervisor RSS").

use std::path::Path;
use std::time::Duration;

use anyhow::anyhow;
use tollgate_proto::v1 as pb;
use tollgate_proto::v1::agent_service_client::AgentServiceClient;

use super::floor::FloorProc;
use super::harness::{AgentSession, SupervisorProc, TempRoot, authed, blocking, channel};
use super::stats::{Row, Target, Unit};

/// Idle sessions (and floor connections) held at once.
const SESSIONS: usize = 100;

/// The supervisor's rows, then the floor's; a measurement that fails
/// becomes a FAILED row with the reason.
pub async fn run(sup: &SupervisorProc, root: &TempRoot, ws: &Path) -> Vec<Row> {
    let mut rows = match supervisor(sup, ws).await {
        Ok(r) => r,
        Err(e) => vec![Row::failed(
            "native.rss_100_sessions",
            "supervisor RSS, 100 idle sessions",
            Unit::Mib,
            format!("{e:#}"),
        )],
    };
    rows.extend(floor(root).await.unwrap_or_else(|e| {
        vec![Row::failed(
            "base.grpc_floor_rss_100",
            "bare tonic server RSS, 100 idle connections (floor)",
            Unit::Mib,
            format!("{e:#}"),
        )]
    }));
    rows
}

/// `--only memory`: these rows alone, on a workspace of their own.
pub async fn only(sup: &SupervisorProc, root: &TempRoot) -> Vec<Row> {
    match super::native::prepare_workspace(root) {
        Ok(ws) => run(sup, root, &ws).await,
        Err(e) => vec![Row::failed(
            "native.rss_100_sessions",
            "supervisor RSS, 100 idle sessions",
            Unit::Mib,
            format!("{e:#}"),
        )],
    }
}

fn rss(pid: Option<u32>) -> anyhow::Result<f64> {
    pid.and_then(|p| super::harness::proc_status_kib(p, "VmRSS:"))
        .map(|k| k as f64 / 1024.0)
        .ok_or_else(|| anyhow!("cannot read the process's /proc/<pid>/status"))
}

async fn supervisor(sup: &SupervisorProc, ws: &Path) -> anyhow::Result<Vec<Row>> {
    let idle = rss(sup.pid())?;
    let mut held = Vec::new();
    for _ in 0..SESSIONS {
        let ch = sup.agent_channel().await?;
        let s = AgentSession::open(ch, ws, "default").await?;
        // An idle agent keeps its control stream open.
        let stream = approvals(s.client.clone(), &s.token).await?;
        held.push((s, stream));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let with = rss(sup.pid())?;
    for (s, stream) in held {
        drop(stream);
        s.close().await?;
    }
    Ok(vec![
        Row::value(
            "native.rss_idle",
            "supervisor RSS, no session (baseline)",
            Unit::Mib,
            idle,
            1,
        ),
        Row::value(
            "native.rss_100_sessions",
            "supervisor RSS, 100 idle sessions",
            Unit::Mib,
            with,
            1,
        )
        .with_baseline("native.rss_idle")
        .with_target(Target::AtMostMib {
            value: 25.0,
            issue: 31,
        })
        .with_note("VmRSS; each session on its own connection with its Approvals stream open, no sandbox yet"),
    ])
}

/// An Approvals stream, held open by a client that sends nothing.
async fn approvals(
    mut c: AgentServiceClient<tonic::transport::Channel>,
    token: &str,
) -> anyhow::Result<tonic::Streaming<pb::ApprovalServerMsg>> {
    Ok(c.approvals(authed(
        futures_util::stream::pending::<pb::ApprovalClientMsg>(),
        token,
    )?)
    .await
    .map_err(|e| anyhow!("Approvals stream: {}", e.message()))?
    .into_inner())
}

/// The same 100 connections and streams on the bare tonic server.
async fn floor(root: &TempRoot) -> anyhow::Result<Vec<Row>> {
    let server = blocking({
        let dir = root.subdir("floor-memory")?;
        move || FloorProc::start(&dir)
    })
    .await?;
    let idle = rss(Some(server.pid()))?;
    let mut held = Vec::new();
    for _ in 0..SESSIONS {
        let c = AgentServiceClient::new(channel(&server.socket).await?);
        held.push(approvals(c, "").await?);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let with = rss(Some(server.pid()))?;
    drop(held);
    Ok(vec![
        Row::value(
            "base.grpc_floor_rss_idle",
            "bare tonic server RSS, no connection (baseline)",
            Unit::Mib,
            idle,
            1,
        ),
        Row::value(
            "base.grpc_floor_rss_100",
            "bare tonic server RSS, 100 idle connections (floor)",
            Unit::Mib,
            with,
            1,
        )
        .with_baseline("base.grpc_floor_rss_idle")
        .with_note("the bench's __grpc-floor server: tonic's defaults, a worker per core, each connection with an Approvals stream open and read"),
    ])
}
