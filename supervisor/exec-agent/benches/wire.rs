//! The exec agent's wire protocol, both ends' hot paths:
//!
//! - `wire/start_roundtrip`: encode a run_bash-sized `Start` frame (argv
//!   `sh -c <80-byte command>`, 8 environment entries) and parse it back, as
//!   the supervisor and the agent do once per command;
//! - `wire/output_1MiB`: 1 MiB of output in frames of `MAX_CHUNK` (256 KiB),
//!   encoded (the agent), split and parsed (the supervisor); throughput in
//!   bytes.
//!
//! `cargo bench -p tollgate-exec-agent --bench wire`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tollgate_exec_agent::wire::{self, FrameReader, FromAgent, MAX_CHUNK, Start, ToAgent};

fn start() -> ToAgent {
    let env = [
        ("PATH", "/usr/local/bin:/usr/bin:/bin"),
        ("HOME", "/home/dev/project"),
        ("USER", "dev"),
        ("LANG", "C.UTF-8"),
        ("LC_ALL", "C.UTF-8"),
        ("TERM", "dumb"),
        ("AGENT_SESSION_ID", "AbCdEfGhIjKl"),
        (
            "AGENT_SESSION_TOKEN",
            "AbCdEfGhIjKl.sandbox.0123456789abcdefghijklmnopqrstuvwxyzABCDEFG",
        ),
    ];
    ToAgent::Start(Start {
        id: 42,
        deadline_ms: 120_000,
        merge_stderr: true,
        stdin_pipe: false,
        cwd: b"/home/dev/project".to_vec(),
        argv: vec![
            b"sh".to_vec(),
            b"-c".to_vec(),
            b"cargo test --workspace --no-fail-fast 2>&1 | tail -n 40; echo exit=$?".to_vec(),
        ],
        env: env
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect(),
    })
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("wire");
    let msg = start();
    g.bench_function("start_roundtrip", |b| {
        let mut buf = Vec::with_capacity(1024);
        b.iter(|| {
            buf.clear();
            black_box(&msg).encode(&mut buf);
            let mut r = FrameReader::new();
            r.push(&buf);
            let (t, body) = r.next_frame().unwrap().unwrap();
            black_box(ToAgent::parse(t, &body).unwrap())
        })
    });
    let chunk = vec![b'x'; MAX_CHUNK];
    let frames = (1024 * 1024) / MAX_CHUNK;
    g.throughput(Throughput::Bytes((frames * MAX_CHUNK) as u64));
    g.bench_function("output_1MiB", |b| {
        let mut buf = Vec::with_capacity((frames + 1) * MAX_CHUNK);
        b.iter(|| {
            buf.clear();
            for _ in 0..frames {
                wire::encode_output(&mut buf, false, 7, black_box(&chunk));
            }
            let mut r = FrameReader::new();
            r.push(&buf);
            let mut n = 0;
            while let Some((t, body)) = r.next_frame().unwrap() {
                if let FromAgent::Stdout { data, .. } = FromAgent::parse(t, &body).unwrap() {
                    n += data.len();
                }
            }
            black_box(n)
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
