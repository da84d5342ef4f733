//! A command refused 10,000 times, with refusal attribution on and off
//! (docs/PERFORMANCE.md, "Refusals"): two supervisors alike but for
//! `[sandbox] attribute_refusals`, the same command on each in alternating
//! rounds, run_bash `true` the same way, and the attributing supervisor's
//! memory after each round (bounded whatever the count).

use super::harness::{AgentSession, SupervisorProc, TRUE_ARGS, warmup_for};
use super::stats::{Row, Target, Unit};
use super::variants::{Ctx, alternate};

/// The issue's command line, `for i in $(seq 10000); do : > /etc/x$i;
/// done 2>/dev/null`, never runs: the shell floor refuses its redirect to
/// a path outside the workspace before anything starts (a policy decision,
/// no kernel refusal). The same 10,000 refused writes are made by a
/// program the floor does not read into: Python writing to `/etc/x$i`
/// (`EROFS`, the read-only root, which Landlock is never asked about:
/// docs/THREAT_MODEL.md, "Refusals, attributed", what it cannot see) and to
/// `/proc/self/comm` (Landlock's refusal, attributed).
const REFUSE_PY: &str = r#"
import sys
for i in range(10000):
    try:
        open("/etc/x%d" % i if sys.argv[1] == "erofs" else "/proc/self/comm", "w").write("x")
    except OSError:
        pass
"#;
const EROFS_LOOP: &str = "/usr/bin/python3 refuse.py erofs";
const LANDLOCK_LOOP: &str = "/usr/bin/python3 refuse.py landlock";
const ISSUE_LOOP: &str = "for i in $(seq 10000); do : > /etc/x$i; done 2>/dev/null";

pub async fn run(ctx: &Ctx<'_>) -> Vec<Row> {
    match measure(ctx).await {
        Ok(rows) => rows,
        Err(e) => vec![Row::failed(
            "refusals.landlock_10000_on",
            "a command refused 10,000 times by Landlock, attribution on",
            Unit::Nanos,
            format!("{e:#}"),
        )],
    }
}

struct Pair {
    on: SupervisorProc,
    s_on: AgentSession,
    s_off: AgentSession,
    _off: SupervisorProc,
}

async fn measure(ctx: &Ctx<'_>) -> anyhow::Result<Vec<Row>> {
    let on = ctx
        .start("attr-on", "attribute_refusals = \"on\"\n", "")
        .await?;
    let off = ctx
        .start("attr-off", "attribute_refusals = \"off\"\n", "")
        .await?;
    let ws = ctx.workspace("ws-refusals")?;
    std::fs::write(ws.join("refuse.py"), REFUSE_PY)?;
    let mode = "dangerouslySkipPermissions";
    let mut p = Pair {
        s_on: AgentSession::open(on.agent_channel().await?, &ws, mode).await?,
        s_off: AgentSession::open(off.agent_channel().await?, &ws, mode).await?,
        on,
        _off: off,
    };
    p.s_on.call("run_bash", TRUE_ARGS).await?;
    p.s_off.call("run_bash", TRUE_ARGS).await?;
    let n = ctx.samples;
    let (t_on, t_off) = alternate(
        (&mut p.s_on, &mut p.s_off),
        "run_bash",
        TRUE_ARGS,
        warmup_for(n),
        n,
    )
    .await?;
    let mut rows = vec![
        Row::latency(
            "refusals.run_bash_true_off",
            "run_bash `true`, attribute_refusals = off (baseline)",
            &t_off,
        ),
        Row::latency(
            "refusals.run_bash_true_on",
            "run_bash `true`, attribute_refusals = on",
            &t_on,
        )
        .with_baseline("refusals.run_bash_true_off")
        .with_target(Target::RatioAtMost { factor: 1.05, issue: 35 })
        .with_note("two supervisors alike but for attribute_refusals, calls alternating; both: a Landlock domain of its own per command (its /etc rules built again only when /etc changed: one stat per directory they were read from); on: logging on, the kernel's audit records read"),
    ];
    let refused_by_policy = match p
        .s_off
        .call(
            "run_bash",
            &serde_json::json!({ "command": ISSUE_LOOP }).to_string(),
        )
        .await
    {
        Ok(_) => "it ran".to_string(),
        Err(e) => format!("{e:#}"),
    };
    rows[1] = rows[1].clone().with_note(format!(
        "{}; the issue's line `{ISSUE_LOOP}` itself: {}",
        rows[1].note, refused_by_policy
    ));
    let loops = if ctx.quick { 2 } else { 5 };
    rows.extend(refused(&mut p, "erofs", EROFS_LOOP, loops).await?);
    rows.extend(refused(&mut p, "landlock", LANDLOCK_LOOP, loops).await?);
    Ok(rows)
}

/// `loops` rounds of `command` on both, the attributing supervisor's RSS
/// after the first round and after the last.
async fn refused(p: &mut Pair, tag: &str, command: &str, loops: usize) -> anyhow::Result<Vec<Row>> {
    let args = serde_json::json!({ "command": command }).to_string();
    let mut rss_first = None;
    let (mut t_on, mut t_off) = (Vec::new(), Vec::new());
    let mut block = String::new();
    for i in 0..loops + 1 {
        let (a, b) = alternate((&mut p.s_on, &mut p.s_off), "run_bash", &args, 0, 1).await?;
        if i == 0 {
            // warm-up; its output shows what attribution said
            block = p.s_on.call("run_bash", &args).await?.output;
            rss_first = p.on.rss_mib();
            continue;
        }
        t_on.extend(a);
        t_off.extend(b);
    }
    let rss_last = p.on.rss_mib();
    let lines: Vec<&str> = block
        .lines()
        .filter(|l| l.starts_with("sandbox: "))
        .collect();
    let said = if lines.is_empty() {
        "attribution said nothing (no `sandbox: ` line in the result)".to_string()
    } else {
        format!("the result's block: {}", lines.join(" / "))
    };
    let what = if tag == "erofs" {
        "Python writing /etc/x$i, 10,000 times (EROFS: not Landlock's)"
    } else {
        "Python writing /proc/self/comm, 10,000 times (Landlock's)"
    };
    let (off_id, on_id) = (
        format!("refusals.{tag}_10000_off"),
        format!("refusals.{tag}_10000_on"),
    );
    let (before_id, after_id) = (
        format!("refusals.{tag}_rss_first"),
        format!("refusals.{tag}_rss_last"),
    );
    let refusals = (loops + 2) * 10_000;
    Ok(vec![
        Row::latency(&off_id, &format!("run_bash {what}, attribution off (baseline)"), &t_off),
        Row::latency(&on_id, &format!("run_bash {what}, attribution on"), &t_on)
            .with_baseline(&off_id)
            .with_target(Target::RatioAtMost { factor: 2.0, issue: 35 })
            .with_note(format!("call to reply, rounds alternating; {said}")),
        Row::value(&before_id, &format!("supervisor RSS after the first {what} (baseline)"), Unit::Mib, rss_first.unwrap_or(0.0), 1),
        Row::value(&after_id, &format!("supervisor RSS after {} rounds of {what}", loops + 2), Unit::Mib, rss_last.unwrap_or(0.0), loops)
            .with_baseline(&before_id)
            .with_target(Target::RatioAtMost { factor: 1.1, issue: 35 })
            .with_note(format!("the attributing supervisor's VmRSS after {refusals} refusals in all; bounded: within 10% of the first round's (the bench's reading of `bounded whatever the count`)")),
    ])
}
