//! Audit append benchmarks.
//!
//! - `append/baseline_raw_fdatasync`: a bare 400-byte `write` + `fdatasync`
//!   on the same disk, without this crate: the floor the next line sits on.
//! - `append/always_fsync`: one record, `sync = "always"` (write + fdatasync),
//!   single thread. Target: median <= 1 ms on this disk.
//! - `append/batch`: `sync = "batch"` (write; the flusher fsyncs every
//!   20 ms). Throughput in records/s. Target: >= 20,000 records/s.
//! - `append/batch_16_threads`: 16 threads, 1,000 records each, into one
//!   shared batch-mode file (records/s across threads).
//! - `append/always_16_threads`: the same with `sync = "always"` (group
//!   commit: concurrent appenders share fsyncs).
//! - `redact/32KiB_clean` and `redact/32KiB_with_secrets`: the redactor over
//!   a 32 KiB tool output.
//! - `redact/1MiB_typical` and `redact/1MiB_dense`: the redactor over 1 MiB
//!   of typical tool output, and of the same with a secret about every 512
//!   bytes (`tollgate_audit::bench_input`, as `supervisorctl bench`).
//! - `verify/10k_records`.
//! - `append/batch_with_reserve`: `append/batch` with an `[audit]
//!   reserve_mb` reserve held (the ordinary path then asks the reserve
//!   whether it is being drawn on): compare with `append/batch`.
//! - `disk/free_bytes_statvfs`: one `statvfs` of the audit disk, what the
//!   disk floor adds to each run_bash, write_file and edit_file decision.
//!
//! The audit directory is created under `$TOLLGATE_BENCH_DIR` if set, else
//! under the target directory (so it is on the same disk as the checkout,
//! not a tmpfs). Each sample's record is a typical `permission_check`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;
use tollgate_audit::{Audit, Redactor, SyncMode, bench_input, verify_file};

fn bench_root() -> PathBuf {
    let base = std::env::var_os("TOLLGATE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            // target-dir/release/deps/append-… -> target-dir/
            let exe = std::env::current_exe().unwrap();
            exe.ancestors().nth(3).unwrap().to_path_buf()
        });
    std::fs::create_dir_all(&base).unwrap();
    base
}

fn fields(i: u64) -> serde_json::Value {
    json!({
        "tool": "run_bash",
        "decision": "ask",
        "code": "APPROVAL_REQUIRED",
        "rule": "ask: run_bash(cargo *)",
        "reason": "run_bash needs approval in default mode",
        "consequence": "run `cargo test --workspace` in the sandbox (no network)",
        "call_id": format!("call_{i}"),
    })
}

fn append(c: &mut Criterion) {
    let root = tempfile::Builder::new()
        .prefix("audit-bench-")
        .tempdir_in(bench_root())
        .unwrap();
    let mut g = c.benchmark_group("append");
    g.throughput(Throughput::Elements(1));

    {
        use std::io::Write;
        let mut raw = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(root.path().join("raw"))
            .unwrap();
        let line = [b'x'; 400];
        g.bench_function("baseline_raw_fdatasync", |b| {
            b.iter(|| {
                raw.write_all(&line).unwrap();
                raw.sync_data().unwrap();
            })
        });
    }

    let audit = Audit::open(&root.path().join("always"), SyncMode::Always, None).unwrap();
    let file = audit.open_session("benchAlways1").unwrap();
    let mut i = 0u64;
    g.bench_function("always_fsync", |b| {
        b.iter(|| {
            i += 1;
            black_box(
                file.append("benchAlways1", "permission_check", fields(i))
                    .unwrap(),
            )
        })
    });

    let audit_b = Audit::open(&root.path().join("batch"), SyncMode::Batch, None).unwrap();
    let file_b = audit_b.open_session("benchBatch1").unwrap();
    let mut j = 0u64;
    g.bench_function("batch", |b| {
        b.iter(|| {
            j += 1;
            black_box(
                file_b
                    .append("benchBatch1", "permission_check", fields(j))
                    .unwrap(),
            )
        })
    });

    let audit_r = Audit::open(&root.path().join("reserve"), SyncMode::Batch, None).unwrap();
    audit_r.set_reserve(4 << 20).unwrap();
    let file_r = audit_r.open_session("benchReserve1").unwrap();
    let mut k = 0u64;
    g.bench_function("batch_with_reserve", |b| {
        b.iter(|| {
            k += 1;
            black_box(
                file_r
                    .append("benchReserve1", "permission_check", fields(k))
                    .unwrap(),
            )
        })
    });

    const THREADS: u64 = 16;
    const PER_THREAD: u64 = 1000;
    g.throughput(Throughput::Elements(THREADS * PER_THREAD));
    g.sample_size(10);
    for (name, audit) in [
        ("batch_16_threads", &audit_b),
        ("always_16_threads", &audit),
    ] {
        let shared = audit
            .open_session(&format!("shared{}", name.len()))
            .unwrap();
        g.bench_function(name, |b| {
            b.iter(|| {
                std::thread::scope(|s| {
                    for t in 0..THREADS {
                        let f = Arc::clone(&shared);
                        s.spawn(move || {
                            for k in 0..PER_THREAD {
                                f.append("shared", "permission_check", fields(t * PER_THREAD + k))
                                    .unwrap();
                            }
                        });
                    }
                });
            })
        });
    }
    g.finish();
    audit_b.flush().unwrap();
}

fn redact(c: &mut Criterion) {
    let env_secrets: Vec<String> = (0..20)
        .map(|i| format!("host-secret-value-{i:04}-xyz"))
        .collect();
    let r = Redactor::new(env_secrets);
    let line = "test result: ok. 42 passed; 0 failed; finished in 0.51s (src/lib.rs:120) héllo\n";
    let mut clean = String::new();
    while clean.len() < 32 * 1024 {
        clean.push_str(line);
    }
    let mut dirty = clean.clone();
    dirty.insert_str(1000, " AKIAIOSFODNN7EXAMPLE ");
    dirty.insert_str(9000, " Authorization: Bearer abcdefgh.ijkl ");
    dirty.insert_str(20000, " host-secret-value-0007-xyz ");
    let mut g = c.benchmark_group("redact");
    g.throughput(Throughput::Bytes(clean.len() as u64));
    g.bench_function("32KiB_clean", |b| {
        b.iter(|| black_box(r.redact_cow(&clean).len()))
    });
    g.bench_function("32KiB_with_secrets", |b| {
        b.iter(|| black_box(r.redact_cow(&dirty).len()))
    });
    let r = Redactor::new(bench_input::host_secrets());
    let typical = bench_input::typical_output(1 << 20);
    let dense = bench_input::dense_output(1 << 20);
    g.throughput(Throughput::Bytes(typical.len() as u64));
    g.sample_size(30);
    g.bench_function("1MiB_typical", |b| {
        b.iter(|| black_box(r.redact_cow(&typical).len()))
    });
    g.throughput(Throughput::Bytes(dense.len() as u64));
    g.bench_function("1MiB_dense", |b| {
        b.iter(|| black_box(r.redact_cow(&dense).len()))
    });
    g.finish();
}

fn verify(c: &mut Criterion) {
    let root = tempfile::Builder::new()
        .prefix("audit-bench-")
        .tempdir_in(bench_root())
        .unwrap();
    let audit = Audit::open(&root.path().join("v"), SyncMode::Batch, None).unwrap();
    let file = audit.open_session("benchVerify").unwrap();
    for i in 0..10_000 {
        file.append("benchVerify", "permission_check", fields(i))
            .unwrap();
    }
    audit.flush().unwrap();
    let path = file.path().to_path_buf();
    let mut g = c.benchmark_group("verify");
    g.throughput(Throughput::Elements(10_000));
    g.sample_size(10);
    g.bench_function("10k_records", |b| {
        b.iter(|| black_box(verify_file(&path, None).unwrap().records))
    });
    g.finish();
}

fn disk(c: &mut Criterion) {
    let root = tempfile::Builder::new()
        .prefix("audit-bench-")
        .tempdir_in(bench_root())
        .unwrap();
    let mut g = c.benchmark_group("disk");
    g.bench_function("free_bytes_statvfs", |b| {
        b.iter(|| black_box(tollgate_audit::reserve::free_bytes(root.path()).unwrap()))
    });
    g.finish();
}

criterion_group!(benches, append, redact, verify, disk);
criterion_main!(benches);
