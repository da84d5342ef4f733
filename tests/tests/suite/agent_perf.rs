//! A measurement, not a test (ignored by default; nothing timed is asserted):
//! the overhead the agent and the supervisor add per model turn, excluding the
//! model, and the agent's peak RSS, against the mock OpenAI server.
//!
//! Per turn: the mock answers at once with one planning-tool call; the time from
//! the mock finishing reply k to it having read request k+1 is everything the
//! supervisor's proxy and the agent's loop (parse, run the tool, trim check, encode,
//! two gRPC hops, the audit records) add to a turn.
//!
//! Run: `cargo test -p tollgate-e2e --release --test all -- agent_perf --ignored --nocapture`
//! (with the binaries built in the same profile).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::io::Write;
use std::time::Duration;

use agent_support::*;
use tollgate_e2e::harness::{Dirs, Supervisor};
use tollgate_e2e::mock_openai::{MockOpenAi, MockReply};

const TURNS: usize = 300;

fn peak_rss_kib(pid: u32) -> Option<u64> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// utime + stime of a process, in clock ticks (100 per second here).
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; run with --ignored --nocapture"]
async fn turn_overhead_and_agent_rss() {
    if !ready("agent_perf") {
        return;
    }
    let mock = MockOpenAi::start().await.unwrap();
    for i in 0..TURNS {
        let id = format!("c{i}");
        mock.push(
            MockReply::tool_calls(None, &[(id.as_str(), "todo_list", "{}")]).with_usage(100, 5),
        );
    }
    mock.push(MockReply::text("done"));
    let dirs = Dirs::new();
    let ws = dirs.workspace("ws", nix::unistd::getuid().as_raw());
    let sync = std::env::var("TOLLGATE_PERF_AUDIT_SYNC").unwrap_or_else(|_| "always".into());
    let config = format!(
        "[audit]\nsync = \"{sync}\"\n\n[llm]\nprovider = \"openai\"\nbase_url = {}\nmodel = \"m\"\n",
        toml_str(&mock.base_url())
    );
    let sup = Supervisor::builder().config(&config).dirs(dirs).start();
    let mut child = spawn_agent(
        &sup,
        &ws,
        &[
            "--max-turns",
            &(TURNS + 10).to_string(),
            "--tools",
            "todo_list",
            "-p",
            "loop",
            "--output",
            "json",
        ],
    );
    drop(child.stdin.take());
    let pid = child.id();
    let sup_pid = sup.pid();
    let sup_cpu_before = cpu_ticks(sup_pid).unwrap_or(0);
    let sampler = std::thread::spawn(move || {
        let (mut peak, mut cpu) = (0, 0);
        while let Some(kib) = peak_rss_kib(pid) {
            peak = peak.max(kib);
            cpu = cpu_ticks(pid).unwrap_or(cpu);
            std::thread::sleep(Duration::from_millis(5));
        }
        (peak, cpu)
    });
    let run = tokio::task::spawn_blocking(move || wait_output(child, Duration::from_secs(600)))
        .await
        .unwrap();
    let (peak_kib, agent_ticks) = sampler.join().unwrap();
    let sup_ticks = cpu_ticks(sup_pid)
        .unwrap_or(0)
        .saturating_sub(sup_cpu_before);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let reqs = mock.chat_requests();
    assert_eq!(reqs.len(), TURNS + 1);
    let mut gaps: Vec<Duration> = reqs
        .windows(2)
        .map(|w| w[1].received_at - w[0].replied_at.unwrap())
        .collect();
    if std::env::var("TOLLGATE_PERF_TRACE").is_ok() {
        for (i, g) in gaps.iter().enumerate().step_by(25) {
            println!("agent_perf: turn {i}: {g:?}");
        }
    }
    gaps.sort();
    let pct = |p: f64| gaps[((gaps.len() as f64 - 1.0) * p) as usize];
    let _ = std::io::stdout().flush();
    println!(
        "agent_perf: {TURNS} turns, audit sync {sync}: per-turn overhead (agent + supervisor, model excluded) median {:?}, p90 {:?}, p99 {:?}, max {:?}; agent peak RSS {:.1} MiB",
        pct(0.5),
        pct(0.9),
        pct(0.99),
        gaps.last().unwrap(),
        peak_kib as f64 / 1024.0
    );
    // CPU time does not count waiting for a busy machine's cores.
    println!(
        "agent_perf: CPU per turn: agent {:.2} ms (whole run incl. start-up), supervisor {:.2} ms",
        agent_ticks as f64 * 10.0 / TURNS as f64,
        sup_ticks as f64 * 10.0 / TURNS as f64
    );
}
