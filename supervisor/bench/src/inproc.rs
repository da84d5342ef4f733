//! In-process measurements: the policy decision alone (the same engine,
//! filesystem facts and resolver the daemon uses), an audit append (the
//! same writer, on the same filesystem as the bench supervisor's audit dir),
//! and the redactor per MiB of tool output.

use std::collections::BTreeSet;
use std::hint::black_box;
use std::io::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow};
use serde_json::json;
use tollgate_audit::{Audit, Redactor, SyncMode, bench_input};
use tollgate_policy::bench_input::{REPRESENTATIVE_POLICY, script_4k_substitutions};
use tollgate_policy::host::{RealFs, SystemResolver, read_host_addrs};
use tollgate_policy::{
    Context, Engine, FileFacts, FileKind, FsFacts, Mode, PolicyConfig, ToolCall,
};

use super::harness::{time_blocking, warmup_for};
use super::stats::{Row, Target, Unit, fmt_nanos};

/// The policy engine's four criterion cases (docs/PERFORMANCE.md
/// "criterion"), timed one call at a time. Decisions are
/// cheap, so each gets ten times the sample count.
pub fn policy(dir: &Path, n: usize) -> Vec<Row> {
    match policy_inner(dir, n) {
        Ok(rows) => rows,
        Err(e) => vec![Row::failed(
            "policy.decide_run_bash",
            "policy decision: run_bash typical",
            Unit::Nanos,
            format!("{e:#}"),
        )],
    }
}

fn policy_inner(dir: &Path, n: usize) -> anyhow::Result<Vec<Row>> {
    let ws = dir.join("policy-ws");
    std::fs::create_dir_all(ws.join("src")).context("creating the policy workspace")?;
    std::fs::write(ws.join("src/main.rs"), "fn main() {}\n").context("writing src/main.rs")?;
    let ws = std::fs::canonicalize(&ws).context("resolving the policy workspace")?;
    // The first load in this process builds the lazily initialised tables
    // (the tool registry and its schemas); later loads reuse them.
    let t = Instant::now();
    let engine = Engine::new(&PolicyConfig::default()).map_err(|e| anyhow!("policy: {e}"))?;
    let first_load = t.elapsed();
    let samples = policy_samples(dir, &ws, &engine, n)?;
    Ok(policy_rows(&samples, first_load))
}

/// The samples of each policy row.
struct PolicySamples {
    typical: Vec<Duration>,
    read: Vec<Duration>,
    read_mem: Vec<Duration>,
    lstats: Vec<Duration>,
    fetch: Vec<Duration>,
    script: Vec<Duration>,
    parse_only: Vec<Duration>,
    load: Vec<Duration>,
    load_repr: Vec<Duration>,
}

/// Times each decision (and its baselines) `n` times, or ten times that
/// for the fast ones.
fn policy_samples(
    dir: &Path,
    ws: &Path,
    engine: &Engine,
    n: usize,
) -> anyhow::Result<PolicySamples> {
    let cx = Context {
        workspace: ws.to_path_buf(),
        mode: Mode::Default,
        tools: None,
        home: std::env::var_os("HOME").map(PathBuf::from),
        protected: vec![dir.join("state"), dir.join("audit")],
        read_files: BTreeSet::new(),
        repo: Vec::new(),
        sandbox: None,
    };
    // The host's own addresses, read as the supervisor reads them.
    let dns = SystemResolver::default().with_host(Arc::new(read_host_addrs()));
    let many = n * 10;
    let decide = |call: ToolCall| -> anyhow::Result<Vec<Duration>> {
        time_blocking(warmup_for(many), many, |_| {
            black_box(engine.decide(black_box(&call), &cx, &RealFs, &dns));
            Ok(())
        })
    };
    let typical = decide(ToolCall {
        tool: "run_bash".into(),
        args: json!({ "command": "cargo test -p tollgate-policy 2>&1 | tail -n 20" }),
    })?;
    let read_call = ToolCall {
        tool: "read_file".into(),
        args: json!({ "path": "src/main.rs" }),
    };
    let read = decide(read_call.clone())?;
    // The engine alone: the same call with the two facts it asks for
    // answered from memory (the criterion bench's setting).
    let mem = MemFs::for_read(ws);
    let read_mem = time_blocking(warmup_for(many), many, |_| {
        black_box(engine.decide(black_box(&read_call), &cx, &mem, &dns));
        Ok(())
    })?;
    let lstats = time_blocking(warmup_for(many), many, |_| {
        black_box(std::fs::symlink_metadata(black_box(ws.join("src")))?);
        black_box(std::fs::symlink_metadata(black_box(
            ws.join("src/main.rs"),
        ))?);
        Ok(())
    })?;
    // webfetch: the SSRF guard on a literal public address (no DNS, so the
    // row is the engine's cost, not the resolver's).
    let fetch = decide(ToolCall {
        tool: "webfetch".into(),
        args: json!({ "url": "http://93.184.216.34/index.html" }),
    })?;
    let script_text = script_4k_substitutions();
    let script = decide(ToolCall {
        tool: "run_bash".into(),
        args: json!({ "command": script_text }),
    })?;
    let parse_only = time_blocking(warmup_for(many), many, |_| {
        // As the engine parses: extglob off.
        let opts = brush_parser::ParserOptions {
            enable_extended_globbing: false,
            ..brush_parser::ParserOptions::default()
        };
        let parsed = brush_parser::Parser::new(black_box(script_text.as_bytes()), &opts)
            .parse_program()
            .map_err(|e| anyhow!("brush-parser: {e}"))?;
        black_box(parsed);
        Ok(())
    })?;
    let load = time_blocking(warmup_for(n), n, |_| {
        black_box(Engine::new(black_box(&PolicyConfig::default())).map_err(|e| anyhow!("{e}"))?);
        Ok(())
    })?;
    let load_repr = time_blocking(warmup_for(n), n, |_| {
        let cfg: PolicyConfig = toml::from_str(black_box(REPRESENTATIVE_POLICY))?;
        black_box(Engine::new(&cfg).map_err(|e| anyhow!("{e}"))?);
        Ok(())
    })?;
    Ok(PolicySamples {
        typical,
        read,
        read_mem,
        lstats,
        fetch,
        script,
        parse_only,
        load,
        load_repr,
    })
}

/// The policy rows, with their targets and notes.
fn policy_rows(s: &PolicySamples, first_load: Duration) -> Vec<Row> {
    let real = "real fs (lstat per path component), default policy, default mode";
    vec![
        Row::latency(
            "policy.decide_run_bash",
            "policy decision: run_bash `cargo test … | tail`",
            &s.typical,
        )
        .with_target(Target::MedianAtMostNanos {
            value: 20_000.0,
            issue: 3,
        })
        .with_note(real),
        Row::latency(
            "policy.decide_read_file_mem",
            "policy decision: read_file src/main.rs, facts from memory",
            &s.read_mem,
        )
        .with_target(Target::MedianAtMostNanos {
            value: 3_000.0,
            issue: 3,
        })
        .with_note("the engine alone: the two lstat answers it asks for come from memory (as in the criterion bench)"),
        Row::latency(
            LSTATS,
            "lstat src + lstat src/main.rs (baseline)",
            &s.lstats,
        )
        .with_note("the two syscalls the real-fs decision makes"),
        Row::latency(
            "policy.decide_read_file",
            "policy decision: read_file src/main.rs, real fs",
            &s.read,
        )
        .with_baseline(LSTATS)
        .with_note(real),
        Row::latency(
            "policy.decide_webfetch",
            "policy decision: webfetch http://93.184.216.34/",
            &s.fetch,
        )
        .with_note("a literal public address: scheme, host, address classes, the host's own addresses (no DNS)"),
        Row::latency(
            BRUSH,
            "brush-parser alone, the 4 KiB script (baseline)",
            &s.parse_only,
        )
        .with_note("Parser::parse_program only: the floor of any decision that parses the script"),
        Row::latency(
            "policy.decide_script_4k",
            "policy decision: 4 KiB pipeline script",
            &s.script,
        )
        .with_baseline(BRUSH)
        .with_target(Target::MedianAtMostNanos {
            value: 500_000.0,
            issue: 3,
        })
        .with_note(real),
        Row::latency("policy.load_default", "load the default policy", &s.load)
            .with_target(Target::MedianAtMostNanos {
                value: 5_000_000.0,
                issue: 3,
            })
            .with_note(format!(
                "the first load in a process (which builds the tool registry) took {}",
                fmt_nanos(first_load.as_nanos() as f64)
            )),
        Row::latency(
            "policy.load_representative",
            "load a representative policy (TOML, rules, examples)",
            &s.load_repr,
        )
        .with_note("the workstation example's shape: 7 allow, 2 ask, 2 deny rules with match/not_match examples; no target of its own (the default policy's row has it)"),
    ]
}

const LSTATS: &str = "host.lstat_2";
const BRUSH: &str = "policy.brush_parse_4k";

/// Filesystem facts from memory: the workspace's directories and
/// `src/main.rs`, nothing else.
struct MemFs(std::collections::HashMap<PathBuf, FileFacts>);

impl MemFs {
    fn for_read(ws: &Path) -> MemFs {
        let dir = FileFacts {
            kind: FileKind::Dir,
            size: 0,
            nlink: 1,
        };
        let mut m: std::collections::HashMap<PathBuf, FileFacts> = ws
            .ancestors()
            .chain([ws.join("src").as_path()])
            .map(|p| (p.to_path_buf(), dir))
            .collect();
        m.insert(
            ws.join("src/main.rs"),
            FileFacts {
                kind: FileKind::File,
                size: 13,
                nlink: 1,
            },
        );
        MemFs(m)
    }
}

impl FsFacts for MemFs {
    fn symlink_metadata(&self, path: &Path) -> Option<FileFacts> {
        self.0.get(path).copied()
    }
    fn read_link(&self, _: &Path) -> Option<PathBuf> {
        None
    }
}

/// The host-address set (docs/THREAT_MODEL.md, the SSRF guard): a lookup, as the SSRF guard makes one
/// per vetted address, and a whole read, as the connector check makes one
/// per connection and the refresh one per change.
pub fn host_addresses(n: usize) -> Vec<Row> {
    const LOOKUPS: usize = 1000;
    let set = match read_host_addrs() {
        Ok(set) => set,
        Err(e) => {
            return vec![Row::failed(
                "policy.host_addr_lookup",
                "host-address set: one lookup",
                Unit::Nanos,
                e.to_string(),
            )];
        }
    };
    let public: IpAddr = IpAddr::from([93, 184, 216, 34]);
    let lookups = time_blocking(warmup_for(n * 10), n * 10, |_| {
        for _ in 0..LOOKUPS {
            black_box(set.interface_of(black_box(public)));
        }
        Ok(())
    });
    let reads = time_blocking(warmup_for(n), n, |_| {
        black_box(read_host_addrs()?);
        Ok(())
    });
    let mut rows = Vec::new();
    rows.push(match lookups {
        Ok(s) => {
            let per: Vec<f64> = s
                .iter()
                .map(|d| d.as_nanos() as f64 / LOOKUPS as f64)
                .collect();
            Row::latency_ns(
                "policy.host_addr_lookup",
                "host-address set: one lookup",
                &per,
            )
            .with_note(format!(
                "a public address that is not the host's, in this host's set of {} addresses; each sample times {LOOKUPS} lookups",
                set.len()
            ))
        }
        Err(e) => Row::failed(
            "policy.host_addr_lookup",
            "host-address set: one lookup",
            Unit::Nanos,
            format!("{e:#}"),
        ),
    });
    rows.push(match reads {
        Ok(s) => Row::latency(
            "host.read_addrs",
            "host-address set: read every interface (getifaddrs)",
            &s,
        )
        .with_note("what the connector check costs each webfetch connection, and a refresh each netlink notification"),
        Err(e) => Row::failed(
            "host.read_addrs",
            "host-address set: read every interface (getifaddrs)",
            Unit::Nanos,
            format!("{e:#}"),
        ),
    });
    rows
}

/// The redactor over 1 MiB of typical tool output, and over the same with a
/// secret about every 512 bytes: the cost per MiB of what reaches the model
/// and the audit log.
pub fn redaction(n: usize) -> Vec<Row> {
    let r = Redactor::new(bench_input::host_secrets());
    let mut rows = Vec::new();
    for (id, name, text, note) in [
        (
            "audit.redact_typical_mib",
            "redact 1 MiB of typical tool output",
            bench_input::typical_output(1 << 20),
            "cargo log, Rust and Python source, JSON, prose, git log; no secrets; 20 host secret values",
        ),
        (
            "audit.redact_dense_mib",
            "redact 1 MiB with a secret every ~512 B",
            bench_input::dense_output(1 << 20),
            "the same text with a secret of one of 16 shapes about every 512 bytes",
        ),
    ] {
        let samples = time_blocking(warmup_for(n), n, |_| {
            black_box(r.redact_cow(black_box(&text)).len());
            Ok(())
        });
        rows.push(match samples {
            Ok(s) => Row::latency(id, name, &s).with_note(note),
            Err(e) => Row::failed(id, name, Unit::Nanos, format!("{e:#}")),
        });
    }
    rows
}

fn fields(i: usize) -> serde_json::Value {
    json!({
        "call_id": format!("call_{i}"),
        "tool": "run_bash",
        "decision": "ask",
        "code": "APPROVAL_REQUIRED",
        "rule": "ask: run_bash(cargo *)",
        "reason": "run_bash needs approval in default mode",
        "consequence": "run `cargo test --workspace` in the sandbox (no network)",
    })
}

/// The floor under every durable audit record: one 400-byte `write(2)`
/// and `fdatasync` on the same filesystem.
pub fn write_fdatasync(dir: &Path, n: usize) -> Row {
    let raw_line = [b'x'; 400];
    let raw = (|| -> anyhow::Result<Vec<Duration>> {
        let path = dir.join("raw-fdatasync");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        time_blocking(warmup_for(n), n, |_| {
            f.write_all(&raw_line)?;
            f.sync_data()?;
            Ok(())
        })
    })();
    match raw {
        Ok(s) => Row::latency(
            "base.write_fdatasync",
            "write(2) + fdatasync, 400 B (baseline)",
            &s,
        ),
        Err(e) => Row::failed(
            "base.write_fdatasync",
            "write(2) + fdatasync, 400 B (baseline)",
            Unit::Nanos,
            format!("{e:#}"),
        ),
    }
}

/// One append with fsync (`sync = "always"`) against a raw write+fdatasync,
/// and the batch mode's rate.
pub fn audit(dir: &Path, n: usize) -> Vec<Row> {
    let mut rows = vec![write_fdatasync(dir, n)];

    let always = (|| -> anyhow::Result<Vec<Duration>> {
        let audit = Audit::open(&dir.join("audit-always"), SyncMode::Always, None)?;
        let file = audit.open_session("benchAppend1")?;
        time_blocking(warmup_for(n), n, |i| {
            file.append("benchAppend1", "permission_check", fields(i))?;
            Ok(())
        })
    })();
    rows.push(match always {
        Ok(s) => Row::latency(
            "audit.append_always",
            "audit append, sync = always (fdatasync)",
            &s,
        )
        .with_baseline("base.write_fdatasync")
        .with_target(Target::MedianAtMostNanos {
            value: 1_000_000.0,
            issue: 7,
        })
        .with_note(
            "a ~330-byte permission_check record: encode, redact, chain hash, one write, fdatasync",
        ),
        Err(e) => Row::failed(
            "audit.append_always",
            "audit append, sync = always (fdatasync)",
            Unit::Nanos,
            format!("{e:#}"),
        ),
    });

    let records = (n * 250).max(50_000);
    let batch = (|| -> anyhow::Result<f64> {
        let audit = Audit::open(&dir.join("audit-batch"), SyncMode::Batch, None)?;
        let file = audit.open_session("benchBatch01")?;
        for i in 0..1000 {
            file.append("benchBatch01", "permission_check", fields(i))?;
        }
        audit.flush()?;
        let t = Instant::now();
        for i in 0..records {
            file.append("benchBatch01", "permission_check", fields(i))?;
        }
        audit.flush()?;
        Ok(records as f64 / t.elapsed().as_secs_f64())
    })();
    rows.push(match batch {
        Ok(rate) => Row::value(
            "audit.batch_rate",
            "audit append rate, sync = batch (1 thread)",
            Unit::PerSecond,
            rate,
            records,
        )
        .with_target(Target::AtLeastPerSecond {
            value: 20_000.0,
            issue: 7,
        })
        .with_note(
            "records appended back to back, then a final flush; the rate includes the flush",
        ),
        Err(e) => Row::failed(
            "audit.batch_rate",
            "audit append rate, sync = batch (1 thread)",
            Unit::PerSecond,
            format!("{e:#}"),
        ),
    });
    rows
}
