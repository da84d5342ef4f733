//! 16 sessions write 10,000 records between them, into their own files and
//! one shared file: every file verifies and no record is torn.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::json;
use tollgate_audit::{Audit, SyncMode, verify_file};

use crate::common::{parse, read_lines, tmp};

const THREADS: usize = 16;
const TOTAL: usize = 10_000;
const PER_THREAD: usize = TOTAL / THREADS;

fn run(sync: SyncMode) {
    let t = tmp();
    let audit = Audit::open(&t.path().join("audit"), sync, None).unwrap();
    let shared = audit.open_session("shared0").unwrap();
    let big = "x".repeat(20_000); // > PIPE_BUF and > one page
    let handles: Vec<_> = (0..THREADS)
        .map(|th| {
            let own = audit.open_session(&format!("sess{th:02}")).unwrap();
            let shared = Arc::clone(&shared);
            let big = big.clone();
            std::thread::spawn(move || {
                for i in 0..PER_THREAD {
                    // Every 50th record is large, to catch interleaving.
                    let payload = if i % 50 == 0 { big.as_str() } else { "small" };
                    let fields = json!({"thread": th, "i": i, "payload": payload});
                    own.append(&format!("sess{th:02}"), "tool_result", fields.clone())
                        .unwrap();
                    shared
                        .append(&format!("sess{th:02}"), "tool_result", fields)
                        .unwrap();
                }
                own
            })
        })
        .collect();
    let owns: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    audit.flush().unwrap();

    for (th, own) in owns.iter().enumerate() {
        let ok = verify_file(own.path(), Some(&own.head().hash)).unwrap();
        assert_eq!(ok.records, PER_THREAD as u64, "thread {th}");
    }
    let ok = verify_file(shared.path(), Some(&shared.head().hash)).unwrap();
    assert_eq!(ok.records, TOTAL as u64);

    // Every record is whole and appears once, in each thread's own order.
    let mut next: HashMap<u64, u64> = HashMap::new();
    for line in read_lines(shared.path()) {
        let rec = parse(&line);
        let th = rec["thread"].as_u64().unwrap();
        let i = rec["i"].as_u64().unwrap();
        let want = next.entry(th).or_default();
        assert_eq!(i, *want, "thread {th} out of order");
        *want += 1;
        let payload = rec["payload"].as_str().unwrap();
        assert!(payload == "small" || payload.len() == 20_000);
    }
    assert_eq!(next.len(), THREADS);
    assert!(next.values().all(|&n| n == PER_THREAD as u64));
}

#[test]
fn sixteen_sessions_always_mode() {
    run(SyncMode::Always);
}

#[test]
fn sixteen_sessions_batch_mode() {
    run(SyncMode::Batch);
}
