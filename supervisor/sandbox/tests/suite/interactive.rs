//! `Sandbox::exec_interactive` (the MCP servers `agent mcp-gateway` wraps,
//! docs/INTERFACES.md "`agent mcp-gateway`") on every backend
//! `common::backends()` gives: what is fed on stdin reaches the command and its
//! answers come back as they are written (a round trip per line, the command
//! still running), closing stdin ends it, and cancelling kills it and
//! everything it started. Needs root.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use bytes::Bytes;
use common::{NOBODY, spec, workspace};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tollgate_sandbox::{ExecRequest, Output};

fn req(argv: &[&str]) -> ExecRequest {
    ExecRequest {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        cwd: None,
        timeout: Duration::from_secs(120),
        merge_stderr: false,
    }
}

/// The next stdout text (waits up to 30 s).
async fn next_stdout(rx: &mut mpsc::Receiver<Output>, name: &str) -> String {
    loop {
        match tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .unwrap_or_else(|_| panic!("{name}: no output"))
        {
            Some(Output::Stdout(b)) => return String::from_utf8_lossy(&b).into_owned(),
            Some(Output::Stderr(_)) => continue,
            None => panic!("the output ended"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_reaches_a_long_lived_command_and_cancel_kills_its_tree() {
    if !common::require_root() {
        return;
    }
    for (name, b) in common::backends().await {
        let ws = workspace(NOBODY, NOBODY);
        let sb = b
            .create(&spec("interactive", ws.path(), NOBODY, NOBODY))
            .await
            .unwrap();

        // A line-by-line echo: each answer arrives while the command runs.
        let (tx, stdin) = mpsc::channel::<Bytes>(8);
        let (out, mut rx) = mpsc::channel::<Output>(8);
        let cancel = CancellationToken::new();
        let script = "while IFS= read -r l; do echo \"got:$l\"; done; echo bye";
        let sb2 = sb.clone();
        let c2 = cancel.clone();
        let run = tokio::spawn(async move {
            sb2.exec_interactive(req(&["sh", "-c", script]), stdin, out, c2)
                .await
        });
        for word in ["one", "two"] {
            tx.send(Bytes::from(format!("{word}\n"))).await.unwrap();
            assert_eq!(
                next_stdout(&mut rx, name).await,
                format!("got:{word}\n"),
                "{name}"
            );
        }
        // Closing stdin ends it normally.
        drop(tx);
        assert_eq!(next_stdout(&mut rx, name).await, "bye\n", "{name}");
        let outcome = run.await.unwrap().unwrap();
        assert_eq!(outcome.exit_code, Some(0), "{name}: {outcome:?}");
        assert!(!outcome.cancelled, "{name}");

        // Cancel: the command and a background child of its own are killed.
        let (tx, stdin) = mpsc::channel::<Bytes>(8);
        let (out, mut rx) = mpsc::channel::<Output>(64);
        let marker = format!("77.{}", std::process::id());
        let script = format!("sleep {marker} & echo started; cat");
        let sb2 = sb.clone();
        let c2 = cancel.clone();
        let run = tokio::spawn(async move {
            sb2.exec_interactive(req(&["sh", "-c", &script]), stdin, out, c2)
                .await
        });
        assert_eq!(next_stdout(&mut rx, name).await, "started\n", "{name}");
        cancel.cancel();
        let outcome = tokio::time::timeout(Duration::from_secs(30), run)
            .await
            .expect("cancel did not end the command")
            .unwrap()
            .unwrap();
        assert!(outcome.cancelled, "{name}: {outcome:?}");
        drop(tx);
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let left = std::fs::read_dir("/proc")
                .unwrap()
                .filter_map(|e| e.ok())
                .filter(|e| {
                    std::fs::read(e.path().join("cmdline"))
                        .map(|c| String::from_utf8_lossy(&c).contains(&marker))
                        .unwrap_or(false)
                })
                .count();
            if left == 0 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{name}: the background child survived the cancel"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = sb.destroy().await;
    }
}
