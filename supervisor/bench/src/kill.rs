//! The kill switch (docs/PERFORMANCE.md, the revoke row): how long from an operator's RevokeSession until
//! a session's in-flight `sleep` and its background child are gone from the
//! host and the agent's call has returned.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use tollgate_proto::v1 as pb;

use super::harness::{AgentSession, SupervisorProc, authed, warmup_for};
use super::stats::{Row, Target};

pub const ID: &str = "native.revoke_stops_all";
pub const NAME: &str = "revoke → sleep and its background child gone, call returned";

/// Each sample opens a session, starts `sleep N & sleep N` in its sandbox,
/// waits until both run, then revokes it.
pub async fn revoke(sup: &SupervisorProc, ws: &Path, n: usize) -> anyhow::Result<Row> {
    let ch = sup.agent_channel().await?;
    let mut op = sup.operator().await?;
    let warmup = warmup_for(n);
    let mut samples = Vec::with_capacity(n);
    for i in 0..warmup + n {
        let s = AgentSession::open(ch.clone(), ws, "dangerouslySkipPermissions").await?;
        // A duration no other process on the host uses.
        let arg = format!("1000.{}{i:04}", std::process::id());
        let command = format!("sleep {arg} & sleep {arg}");
        let args = serde_json::json!({ "command": command }).to_string();
        let mut client = s.client.clone();
        let req = authed(
            pb::CallToolRequest {
                call_id: format!("kill{i}"),
                tool: "run_bash".to_string(),
                arguments_json: args,
            },
            &s.token,
        )?;
        let call = tokio::spawn(async move { client.call_tool(req).await });
        wait_until(Duration::from_secs(10), || sleeps(&arg).len() == 2)
            .await
            .map_err(|_| anyhow!("`{command}` did not start two sleeps within 10 s"))?;
        let t = Instant::now();
        op.revoke_session(pb::RevokeSessionRequest {
            session_id: s.id.clone(),
            reason: "bench".to_string(),
        })
        .await
        .map_err(|e| anyhow!("RevokeSession: {}", e.message()))?;
        let returned = tokio::time::timeout(Duration::from_secs(10), call)
            .await
            .map_err(|_| anyhow!("the revoked call did not return within 10 s"))?
            .map_err(|e| anyhow!("the CallTool task failed: {e}"))?;
        let resp = returned
            .map_err(|e| anyhow!("the revoked call failed: {}", e.message()))?
            .into_inner();
        let code = resp.denied.map(|d| d.code).unwrap_or_default();
        if code != pb::DenialCode::SessionRevoked as i32 {
            bail!("the revoked call ended without SESSION_REVOKED (code {code})");
        }
        wait_until(Duration::from_secs(10), || sleeps(&arg).is_empty())
            .await
            .map_err(|_| anyhow!("`sleep {arg}` still runs 10 s after the revoke"))?;
        if i >= warmup {
            samples.push(t.elapsed());
        }
    }
    Ok(Row::latency(ID, NAME, &samples)
        .with_target(Target::P99AtMostNanos {
            value: 100_000_000.0,
            issue: 7,
        })
        .with_note("RevokeSession sent → SESSION_REVOKED returned to the agent and no `sleep` left on the host (polled every 0.2 ms); each sample a fresh session and sandbox"))
}

async fn wait_until(timeout: Duration, mut done: impl FnMut() -> bool) -> Result<(), ()> {
    let deadline = Instant::now() + timeout;
    while !done() {
        if Instant::now() >= deadline {
            return Err(());
        }
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    Ok(())
}

/// Host pids whose command line is exactly `sleep <arg>`.
fn sleeps(arg: &str) -> Vec<i32> {
    let want = format!("sleep\0{arg}\0");
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                c.ends_with(want.as_bytes())
                    && (c.len() == want.len() || c[..c.len() - want.len()].ends_with(b"/"))
            })
        })
        .collect()
}
