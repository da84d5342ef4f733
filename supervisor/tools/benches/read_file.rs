//! read_file of a 4 KiB text file, end to end through this crate: path
//! mapping, a fresh thread switched to the session owner (when root), the
//! openat2-beneath open, the read and the `cat -n` formatting.
//!
//! `cargo bench -p tollgate-tools --bench read_file`; criterion prints the
//! median ("time: [low median high]"). Run as root it measures the
//! credential switch to uid 65534 too (the production path).

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

/// The floor of the design, for comparison: a fresh std::thread per
/// operation answering over a tokio oneshot, doing nothing else.
fn bench_thread_handoff(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    c.bench_function("fresh_thread_oneshot_handoff", |b| {
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
