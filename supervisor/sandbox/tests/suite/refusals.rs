//! Refusals attributed (docs/THREAT_MODEL.md, "Refusals, attributed"): the
//! native sandbox's Landlock refusals, read from the kernel's audit
//! records, tied to the command that caused them, and the seccomp filter's
//! refusals, named from its table and tied to the command by its audit
//! session. Real Landlock, real seccomp, real audit netlink socket; needs
//! root (and turns the kernel's audit on).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;

use common::{NOBODY, sh, spec, workspace};
use tollgate_sandbox::Backend;
use tollgate_sandbox::native::{AttributionMode, attribution_status, set_attribution};
use tollgate_sandbox::refusal::{Access, Rule};

fn attributing() -> Arc<dyn Backend> {
    set_attribution(AttributionMode::On);
    attribution_status().expect("refusal attribution on this host");
    common::native()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_read_is_attributed_with_its_process_for_root_and_non_root() {
    if !common::require_root() {
        return;
    }
    let b = attributing();
    for uid in [0, NOBODY] {
        let ws = workspace(uid, uid);
        let sb = b
            .create(&spec("refuse", ws.path(), uid, uid))
            .await
            .unwrap();
        // A non-root uid is refused /etc/shadow by its file mode first (no
        // wall of ours: nothing to attribute); its own /proc/<pid>/comm
        // its mode would let it write, Landlock does not.
        let (cmd, access, rule, program): (_, _, _, &[u8]) = if uid == 0 {
            (
                "cat /etc/shadow; true",
                Access::Read,
                Rule::Credential,
                b"cat",
            )
        } else {
            (
                "exec sh -c 'echo x 1<>/proc/self/comm' 2>/dev/null; true",
                Access::Write,
                Rule::OutsideWorkspace,
                b"sh",
            )
        };
        let r = sh(sb.as_ref(), cmd).await;
        let rs = &r.outcome.refusals;
        assert!(rs.attributed, "uid {uid}: {r:?}");
        assert_eq!(rs.total, 1, "uid {uid}: {r:?}");
        let (one, n) = &rs.distinct[0];
        assert_eq!(*n, 1);
        assert_eq!(one.access, access, "{rs:?}");
        let path = String::from_utf8_lossy(&one.path);
        if uid == 0 {
            assert_eq!(path, "/etc/shadow");
        } else {
            assert!(
                path.starts_with("/proc/") && path.ends_with("/comm"),
                "{path}"
            );
        }
        assert_eq!(one.rule, rule);
        assert_eq!(one.program.as_deref(), Some(program), "uid {uid}: {one:?}");
        assert!(one.pid.is_some_and(|p| p > 1), "{one:?}");
        // The next command starts clean: nothing of the last one is its.
        let r = sh(sb.as_ref(), "cat /etc/hostname >/dev/null").await;
        assert_eq!(r.outcome.refusals.total, 0, "{:?}", r.outcome.refusals);
        assert!(r.outcome.refusals.attributed);
        sb.destroy().await.unwrap();
    }
}

/// A refused system call is named, from the one seccomp table, and tied to
/// its command and process; a background process started by a command
/// that has ended is still its command's (its audit session), never the
/// next command's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_system_call_is_named_and_attributed_for_root_and_non_root() {
    if !common::require_root() {
        return;
    }
    let b = attributing();
    for uid in [0, NOBODY] {
        let ws = workspace(uid, uid);
        let sb = b.create(&spec("sysc", ws.path(), uid, uid)).await.unwrap();
        let r = sh(sb.as_ref(), "unshare -U true 2>/dev/null; true").await;
        let rs = &r.outcome.refusals;
        assert!(rs.attributed, "uid {uid}: {r:?}");
        assert_eq!(rs.total, 1, "uid {uid}: {rs:?}");
        let (one, n) = &rs.distinct[0];
        assert_eq!(*n, 1);
        assert_eq!(one.access, Access::Syscall);
        assert_eq!(one.path, b"unshare");
        assert_eq!(one.rule, Rule::Syscall(272));
        assert!(
            one.rule.words().contains("new namespaces"),
            "{}",
            one.rule.words()
        );
        assert_eq!(one.program.as_deref(), Some(&b"unshare"[..]), "{one:?}");
        assert!(one.pid.is_some_and(|p| p > 1), "{one:?}");
        // An argument-checked call: the words say what its arguments must be.
        let r = sh(sb.as_ref(), "perl -e 'socket(my $s, 17, 3, 0)'; true").await;
        let rs = &r.outcome.refusals;
        assert_eq!(rs.total, 1, "uid {uid}: {rs:?}");
        assert_eq!(rs.distinct[0].0.rule, Rule::Syscall(41));
        assert!(rs.distinct[0].0.rule.words().contains("AF_UNIX"));
        // clone3's ENOSYS (libc meets it on every spawn) is not a refusal.
        let r = sh(
            sb.as_ref(),
            "python3 -c 'import subprocess; subprocess.run([\"true\"])' 2>/dev/null; true",
        )
        .await;
        assert_eq!(r.outcome.refusals.total, 0, "{:?}", r.outcome.refusals);
        sb.destroy().await.unwrap();
    }
}

/// Command i of sandbox s is refused exactly (s * 10 + i) times; every
/// command, run concurrently with the others, gets exactly its own count.
/// Even sandboxes are root sessions, odd ones not.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn attribution_is_exact_under_concurrent_commands_across_sandboxes_then_bounded_under_a_flood()
 {
    if !common::require_root() {
        return;
    }
    let b = attributing();
    let mut sandboxes = Vec::new();
    for s in 0..10 {
        let uid = if s % 2 == 0 { 0 } else { NOBODY };
        let ws = workspace(uid, uid);
        let sb = b.create(&spec("conc", ws.path(), uid, uid)).await.unwrap();
        sandboxes.push((ws, sb));
    }
    let mut runs = Vec::new();
    for (s, (_, sb)) in sandboxes.iter().enumerate() {
        for i in 0..10 {
            let sb = Arc::clone(sb);
            let want = (s * 10 + i) as u64;
            runs.push(tokio::spawn(async move {
                let landlock = if s % 2 == 0 {
                    format!("for n in $(seq {want}); do cat /etc/shadow; done 2>/dev/null")
                } else {
                    format!(
                        "for n in $(seq {want}); do echo x 1<>/proc/self/comm; done 2>/dev/null"
                    )
                };
                // As many ptrace calls, refused by seccomp, from one process.
                let cmd =
                    format!("{landlock}; perl -e 'syscall(101, 0, 0, 0, 0) for 1..{want}'; true");
                let r = sh(sb.as_ref(), &cmd).await;
                (want, r.outcome.refusals)
            }));
        }
    }
    let mut got = Vec::new();
    for run in runs {
        got.push(run.await.unwrap());
    }
    for (want, rs) in got {
        assert_eq!(rs.total, 2 * want, "{rs:?}");
        assert_eq!(rs.lost, 0, "{rs:?}");
        if want > 0 {
            assert_eq!(rs.distinct.len(), 2, "{rs:?}");
            assert_eq!(rs.distinct[0].1, want);
            let (ptrace, n) = &rs.distinct[1];
            assert_eq!(
                (ptrace.access, ptrace.rule, *n),
                (Access::Syscall, Rule::Syscall(101), want)
            );
        }
    }
    for (_, sb) in sandboxes {
        sb.destroy().await.unwrap();
    }
    many_refusals_stay_bounded_and_losses_are_counted(&b).await;
}

/// Hundreds of thousands of refusals: the command ends, the count is
/// bounded in memory (one distinct refusal kept), and what the kernel
/// dropped is counted. (Run after the exact test: a flood in another
/// session makes the kernel drop records of everyone's, and says so.)
async fn many_refusals_stay_bounded_and_losses_are_counted(b: &Arc<dyn Backend>) {
    let ws = workspace(NOBODY, NOBODY);
    let sb = b
        .create(&spec("many", ws.path(), NOBODY, NOBODY))
        .await
        .unwrap();
    let r = sh(
        sb.as_ref(),
        "i=0; while [ $i -lt 200000 ]; do echo x 2>/dev/null 1<>/proc/self/comm; i=$((i+1)); done; true",
    )
    .await;
    let rs = &r.outcome.refusals;
    assert!(rs.total > 0, "{rs:?}");
    assert!(rs.total + rs.lost > 0 && rs.total <= 200_000, "{rs:?}");
    assert_eq!(rs.distinct.len(), 1, "{rs:?}");
    assert_eq!(rs.distinct[0].1, rs.total);
    sb.destroy().await.unwrap();
}
