//! The agent's cost per model turn, model excluded, and its memory.
//!
//! The real `agent` binary runs a task against the bench supervisor, whose
//! `script` provider answers every Chat at once with one planning-tool call
//! (`todo_list`). The time from one turn's `llm_request` record to the next
//! one's is then everything the agent and the supervisor add to a turn: the
//! proxy, its two audit records (fsync'd), two gRPC hops, the agent's loop
//! (parse, run the tool, the context check, encode). The script's own cost is
//! a few microseconds.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};

use super::harness::{SupervisorProc, blocking, proc_status_kib, warmup_for};
use super::stats::{Row, Target, Unit};

const TURN: &str = "agent.turn_overhead";
const TURN_NAME: &str = "agent + supervisor overhead per model turn";
const RSS: &str = "agent.rss";
const RSS_NAME: &str = "agent peak RSS (VmHWM)";

/// Turns the script must hold for `n` samples.
pub fn turns_for(n: usize) -> usize {
    warmup_for(n) + n + 1
}

/// The script provider's file: `turns` turns of one `todo_list` call.
pub fn script(turns: usize) -> String {
    let turn = r#"{"content":null,"tool_calls":[{"name":"todo_list","arguments":{}}]}"#;
    format!("[{}]", vec![turn; turns].join(","))
}

pub async fn run(
    agent_exe: Option<PathBuf>,
    sup: &SupervisorProc,
    ws: &Path,
    n: usize,
) -> Vec<Row> {
    let Some(exe) = agent_exe.filter(|p| p.is_file()) else {
        let why = "no `agent` binary next to supervisorctl; build it (cargo build --release -p tollgate-agent)";
        return vec![
            Row::missing(TURN, TURN_NAME, Unit::Nanos, why).with_target(turn_target()),
            Row::missing(RSS, RSS_NAME, Unit::Mib, why).with_target(rss_target()),
        ];
    };
    let socket = sup.agent_socket.clone();
    let audit = sup.audit_dir.clone();
    let ws = ws.to_path_buf();
    match blocking(move || measure(&exe, &socket, &audit, &ws, n)).await {
        Ok((gaps, peak_mib)) => vec![
            Row::latency_ns(TURN, TURN_NAME, &gaps)
                .with_target(turn_target())
                .with_note("script provider; one llm_request record to the next, with a todo_list call in between"),
            Row::value(RSS, RSS_NAME, Unit::Mib, peak_mib, 1)
                .with_target(rss_target())
                .with_note(format!("over the {}-turn run", turns_for(n))),
        ],
        Err(e) => {
            let why = format!("{e:#}");
            vec![
                Row::failed(TURN, TURN_NAME, Unit::Nanos, why.clone()).with_target(turn_target()),
                Row::failed(RSS, RSS_NAME, Unit::Mib, why).with_target(rss_target()),
            ]
        }
    }
}

fn turn_target() -> Target {
    Target::MedianAtMostNanos {
        value: 2_000_000.0,
        issue: 5,
    }
}

fn rss_target() -> Target {
    Target::AtMostMib {
        value: 30.0,
        issue: 5,
    }
}

fn measure(
    exe: &Path,
    socket: &Path,
    audit_dir: &Path,
    ws: &Path,
    n: usize,
) -> anyhow::Result<(Vec<f64>, f64)> {
    let turns = turns_for(n);
    let child = Command::new(exe)
        .args([
            "--tools",
            "todo_list",
            "--max-turns",
            &(turns + 10).to_string(),
            "--output",
            "json",
            "-p",
            "benchmark: list the todos until told to stop",
        ])
        .arg("--socket")
        .arg(socket)
        .current_dir(ws)
        .env("TOLLGATE_SOCKET", socket)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {}", exe.display()))?;
    let pid = child.id();
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let mut peak = 0u64;
            let start = Instant::now();
            while let Some(kib) = proc_status_kib(pid, "VmHWM:") {
                peak = peak.max(kib);
                if done.load(Ordering::SeqCst) {
                    break;
                }
                // A runaway agent is killed after two minutes.
                if start.elapsed() > Duration::from_secs(120)
                    && let Ok(p) = i32::try_from(pid)
                {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(p),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            peak
        })
    };
    let out = child.wait_with_output().context("waiting for the agent")?;
    done.store(true, Ordering::SeqCst);
    let peak_kib = sampler
        .join()
        .map_err(|_| anyhow!("the RSS sampler thread panicked"))?;
    if !out.status.success() {
        bail!(
            "the agent exited {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim_end()
        );
    }
    let mut ts = llm_request_times(audit_dir)?;
    if ts.len() < turns {
        bail!(
            "the agent made {} model calls, expected {turns}; its stderr: {}",
            ts.len(),
            String::from_utf8_lossy(&out.stderr).trim_end()
        );
    }
    ts.sort_unstable();
    let gaps: Vec<f64> = ts
        .windows(2)
        .skip(warmup_for(n))
        .take(n)
        .map(|w| (w[1] - w[0]) as f64 * 1000.0)
        .collect();
    Ok((gaps, peak_kib as f64 / 1024.0))
}

/// The `ts` (µs since the epoch) of every `llm_request` record in the audit
/// dir. Only the agent's session calls Chat in a bench run.
fn llm_request_times(dir: &Path) -> anyhow::Result<Vec<i64>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let path = entry?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if !name.starts_with("audit-") || !name.ends_with(".jsonl") {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        if !text.contains("\"llm_request\"") {
            continue;
        }
        for line in text.lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            if v.get("event").and_then(|e| e.as_str()) != Some("llm_request") {
                continue;
            }
            if let Some(t) = v
                .get("ts")
                .and_then(|t| t.as_str())
                .and_then(parse_ts_micros)
            {
                out.push(t);
            }
        }
    }
    Ok(out)
}

/// `2026-11-29T21:47:37.123456Z` → µs since the epoch.
pub fn parse_ts_micros(s: &str) -> Option<i64> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.split(':').map(|p| p.parse::<i64>().ok());
    let (h, mi, sec) = (t.next()??, t.next()??, t.next()??);
    let digits = frac.len().min(6);
    let micros = frac.get(..digits)?.parse::<i64>().ok()? * 10i64.pow((6 - digits) as u32);
    let days = days_from_civil(y, m, day);
    Some(((days * 86_400 + h * 3600 + mi * 60 + sec) * 1_000_000) + micros)
}

/// Howard Hinnant's days_from_civil.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = (if y >= 0 { y } else { y - 399 }) / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_parse_to_epoch_micros() {
        assert_eq!(parse_ts_micros("1970-01-01T00:00:00.000001Z"), Some(1));
        assert_eq!(
            parse_ts_micros("2026-11-29T21:47:37.123456Z"),
            Some(1_795_988_857_123_456)
        );
        // Across midnight.
        let a = parse_ts_micros("2026-11-29T23:59:59.999999Z").unwrap();
        let b = parse_ts_micros("2026-11-30T00:00:00.000000Z").unwrap();
        assert_eq!(b - a, 1);
        assert_eq!(parse_ts_micros("not a time"), None);
    }

    #[test]
    fn script_has_the_turns() {
        let v: serde_json::Value = serde_json::from_str(&script(3)).unwrap();
        assert_eq!(v.as_array().unwrap().len(), 3);
        assert_eq!(v[0]["tool_calls"][0]["name"], "todo_list");
    }
}
