//! read_file of a 4 KiB text file, end to end through this crate: path
//! mapping, the hand-off to the session's worker thread (switched to uid
//! 65534 when run as root: the production path), the openat2-beneath open,
//! the read and the `cat -n` formatting.
//!
//! `cargo bench -p tollgate-tools --bench read_file`. criterion prints
//! `time: [low estimate high]` for the mean; the median is in
//! `$CARGO_TARGET_DIR/criterion/<bench>/new/estimates.json` ("median").

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::os::unix::fs::PermissionsExt;

use criterion::{Criterion, criterion_group, criterion_main};
use tollgate_tools::{DEFAULT_OUTPUT_CAP, Workspace};

fn bench_read_file(c: &mut Criterion) {
    let tmp = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(tmp.path()).unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut text = String::new();
    let mut n = 1;
    while text.len() < 4096 - 64 {
        text.push_str(&format!(
            "line {n:04}: the quick brown fox jumps over the dog\n"
        ));
        n += 1;
    }
    text.truncate(4096);
    let file = root.join("four_k.txt");
    std::fs::write(&file, &text).unwrap();

    let root_user = nix::unistd::geteuid().is_root();
    let (uid, gid) = if root_user {
        (65534, 65534)
    } else {
        (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        )
    };
    let ws = Workspace::open(&root, uid, gid).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // Sanity: the whole file comes back.
    let out = rt
        .block_on(ws.read_file(&file, None, None, DEFAULT_OUTPUT_CAP))
        .unwrap();
    assert!(!out.truncated && out.text.contains("line 0001"));

    let name = if root_user {
        "read_file_4k_as_uid_65534"
    } else {
        "read_file_4k_as_self"
    };
    c.bench_function(name, |b| {
        b.iter(|| {
            let out = rt
                .block_on(ws.read_file(black_box(&file), None, None, DEFAULT_OUTPUT_CAP))
                .unwrap();
            black_box(out)
        })
    });
}

/// For comparison: the cost of the design the workers replaced, a fresh
/// std::thread per operation answering over a tokio oneshot, doing nothing
/// else.
fn bench_thread_handoff(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    c.bench_function("baseline_fresh_thread_per_op", |b| {
        b.iter(|| {
            rt.block_on(async {
                let (tx, rx) = tokio::sync::oneshot::channel();
                std::thread::spawn(move || {
                    let _ = tx.send(black_box(1u8));
                });
                rx.await.unwrap()
            })
        })
    });
}

criterion_group!(benches, bench_read_file, bench_thread_handoff);
criterion_main!(benches);
