//! The sandbox suite, run against every backend `common::backends()` gives
//! (native always; docker when available). Real kernels, real processes:
//! these need root (see `common::require_root`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::net::{TcpListener, UdpSocket};
use std::os::unix::fs::MetadataExt;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::{NOBODY, probe, run_argv, sh, spec, workspace};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tollgate_sandbox::{Backend, Output, Sandbox, SandboxError};

async fn create(
    b: &Arc<dyn Backend>,
    prefix: &str,
    ws: &std::path::Path,
    uid: u32,
) -> Arc<dyn Sandbox> {
    b.create(&spec(prefix, ws, uid, uid)).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_commands_with_exit_codes_and_ordered_output() {
    if !common::require_root() {
        return;
    }
    for (name, b) in common::backends().await {
        let ws = workspace(NOBODY, NOBODY);
        let sb = create(&b, "basic", ws.path(), NOBODY).await;
        let r = sh(sb.as_ref(), "echo hi; echo err >&2; exit 3").await;
        assert_eq!(
            (r.stdout.as_str(), r.stderr.as_str(), r.code()),
            ("hi\n", "err\n", Some(3)),
            "{name}"
        );
        let r = sh(sb.as_ref(), "id -u; pwd").await;
        assert_eq!(
            r.stdout,
            format!("{NOBODY}\n{}\n", ws.path().display()),
            "{name}"
        );

        // merge_stderr keeps the exact interleaving.
        let (tx, mut rx) = mpsc::channel(64);
        let mut req = common::req(
            &["sh", "-c", "echo a; echo b >&2; echo c; echo d >&2"],
            Duration::from_secs(30),
        );
        req.merge_stderr = true;
        let outcome = sb.exec(req, tx, CancellationToken::new()).await.unwrap();
        let mut all = Vec::new();
        while let Some(o) = rx.recv().await {
            match o {
                Output::Stdout(b) => all.extend_from_slice(&b),
                Output::Stderr(_) => panic!("{name}: stderr chunk despite merge_stderr"),
            }
        }
        assert_eq!(
            (String::from_utf8(all).unwrap(), outcome.exit_code),
            ("a\nb\nc\nd\n".to_string(), Some(0)),
            "{name}"
        );

        // A missing program is reported, not mistaken for success.
        let r = run_argv(
            sb.as_ref(),
            &["no-such-program-xyz"],
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(r.code(), Some(127), "{name}: {r:?}");

        // Commands run concurrently in one sandbox.
        let mut tasks = Vec::new();
        for i in 0..4 {
            let sb = Arc::clone(&sb);
            tasks.push(tokio::spawn(async move {
                sh(sb.as_ref(), &format!("sleep 0.2; echo {i}")).await
            }));
        }
        for (i, t) in tasks.into_iter().enumerate() {
            assert_eq!(t.await.unwrap().stdout, format!("{i}\n"), "{name}");
        }
        sb.destroy().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_outside_the_workspace_are_denied_inside_allowed() {
    if !common::require_root() {
        return;
    }
    for (name, b) in common::backends().await {
        let ws = workspace(NOBODY, NOBODY);
        let sb = create(&b, "fs", ws.path(), NOBODY).await;
        let marker = common::nonce();
        let r = sh(
            sb.as_ref(),
            &format!("echo inside > {}/in-{marker}", ws.path().display()),
        )
        .await;
        assert_eq!(r.code(), Some(0), "{name}: {r:?}");
        let created = ws.path().join(format!("in-{marker}"));
        assert_eq!(
            std::fs::read_to_string(&created).unwrap(),
            "inside\n",
            "{name}"
        );
        assert_eq!(
            std::fs::metadata(&created).unwrap().uid(),
            NOBODY,
            "{name}: owner on the host"
        );

        let parent = ws.path().parent().unwrap().display().to_string();
        for target in [
            format!("/etc/out-{marker}"),
            format!("/usr/out-{marker}"),
            format!("/var/out-{marker}"),
            format!("/root/out-{marker}"),
            format!("/home/out-{marker}"),
        ] {
            let r = sh(sb.as_ref(), &format!("echo x > {target}")).await;
            assert_ne!(r.code(), Some(0), "{name}: write to {target} succeeded");
        }
        // /tmp is private (and so is the workspace's parent, here under
        // /tmp): writes may work inside, but nothing reaches the host.
        let r = sh(
            sb.as_ref(),
            &format!("echo x > /tmp/tmp-{marker} && cat /tmp/tmp-{marker}"),
        )
        .await;
        assert_eq!(r.stdout, "x\n", "{name}");
        let _ = sh(
            sb.as_ref(),
            &format!(
                "echo x > {parent}/out-{marker}; echo x > {}/../out2-{marker}",
                ws.path().display()
            ),
        )
        .await;
        for leaked in [
            format!("/tmp/tmp-{marker}"),
            format!("{parent}/out-{marker}"),
            format!("{parent}/out2-{marker}"),
        ] {
            assert!(
                !std::path::Path::new(&leaked).exists(),
                "{name}: {leaked} exists on the host"
            );
        }
        // A symlink planted in the workspace does not lead out.
        let r = sh(
            sb.as_ref(),
            &format!("ln -s /etc/shadow {0}/s && cat {0}/s", ws.path().display()),
        )
        .await;
        assert_ne!(r.code(), Some(0), "{name}");
        sb.destroy().await.unwrap();
    }
}

/// A root-owned session is uid 0 without capabilities. /etc/shadow is
/// root's file (0640), so its owner bits would allow the read: only Landlock
/// stops it. That the file is visible in the native sandbox (not masked by a
/// mount) and refused is in the escape table (`read-etc-shadow`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etc_shadow_is_unreadable_even_for_a_uid0_session() {
    if !common::require_root() {
        return;
    }
    assert_eq!(std::fs::metadata("/etc/shadow").unwrap().uid(), 0);
    let host_shadow = std::fs::read_to_string("/etc/shadow").unwrap();
    for (name, b) in common::backends().await {
        let ws = workspace(0, 0);
        let sb = create(&b, "shadow", ws.path(), 0).await;
        let r = sh(sb.as_ref(), "id -u; grep CapEff /proc/self/status").await;
        assert_eq!(r.stdout, "0\nCapEff:\t0000000000000000\n", "{name}: {r:?}");
        let r = sh(sb.as_ref(), "cat /etc/shadow").await;
        assert!(
            !r.stdout.contains(host_shadow.trim()),
            "{name}: read the host's /etc/shadow"
        );
        sb.destroy().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_proc_and_secret_env_are_out_of_reach() {
    use std::os::unix::process::CommandExt as _;
    if !common::require_root() {
        return;
    }
    let canary = common::nonce();
    // A host process of the sandbox uid with a secret in its environment.
    let mut host = Command::new("sleep")
        .arg("60")
        .env("HOST_SECRET_CANARY", &canary)
        .uid(NOBODY)
        .gid(NOBODY)
        .spawn()
        .unwrap();
    assert_eq!(
        common::host_probe(&["environ", &canary]),
        format!("FOUND in /proc/{}/environ\n", host.id()),
        "control"
    );
    let host_ns = common::pidns_of(std::process::id() as i32);
    for (name, b) in common::backends().await {
        let ws = workspace(NOBODY, NOBODY);
        let p = common::install_probe(ws.path(), NOBODY);
        let sb = create(&b, "proc", ws.path(), NOBODY).await;
        let r = probe(sb.as_ref(), &p, &["environ", &canary]).await;
        assert_eq!(r.stdout, "none\n", "{name}: {r:?}");
        let r = sh(sb.as_ref(), "readlink /proc/self/ns/pid").await;
        assert_ne!(r.stdout.trim(), host_ns, "{name}: the host's pid namespace");
        // That the native sandbox's pid 1 is not dumpable (its environ
        // refused) is in the escape table (`proc-1-environ`).

        // The environment is exactly what the spec gave: no host secrets.
        // (A container engine adds HOSTNAME; nothing else may appear.)
        let r = run_argv(sb.as_ref(), &["env"], Duration::from_secs(10)).await;
        let mut got: Vec<String> = r
            .stdout
            .lines()
            .filter(|l| name == "native" || !l.starts_with("HOSTNAME="))
            .map(str::to_string)
            .collect();
        got.sort();
        let mut want: Vec<String> = common::env_for(ws.path())
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        want.sort();
        assert_eq!(got, want, "{name}");
        sb.destroy().await.unwrap();
    }
    host.kill().unwrap();
    host.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_and_udp_fail_to_loopback_and_outside() {
    if !common::require_root() {
        return;
    }
    let tcp4 = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = tcp4.local_addr().unwrap().port().to_string();
    tcp4.set_nonblocking(true).unwrap();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let uport = udp.local_addr().unwrap().port().to_string();
    udp.set_nonblocking(true).unwrap();
    for (name, b) in common::backends().await {
        let ws = workspace(NOBODY, NOBODY);
        let p = common::install_probe(ws.path(), NOBODY);
        let sb = create(&b, "net", ws.path(), NOBODY).await;
        let r = probe(sb.as_ref(), &p, &["net", &port, &uport]).await;
        let results: Vec<&str> = r.stdout.split_whitespace().collect();
        assert_eq!(results.len(), 8, "{name}: {r:?}");
        for (what, res) in [
            "tcp 127.0.0.1",
            "tcp ::1",
            "tcp 1.1.1.1",
            "tcp6 outside",
            "udp 127.0.0.1",
            "udp 8.8.8.8",
            "udp ::1",
            "tcp listen",
        ]
        .iter()
        .zip(&results)
        {
            // Each sandbox has its own network namespace with only its own
            // loopback up (native: brought up by the helper; a container:
            // network none). A datagram to it, or a listener on it, stays
            // inside, which the host-side sockets below confirm.
            let local_ok = (what.starts_with("udp ")
                && (what.ends_with("127.0.0.1") || what.ends_with("::1")))
                || *what == "tcp listen";
            assert!(
                local_ok || !["CONNECTED", "SENT", "LISTENING"].contains(res),
                "{name}: {what} succeeded in the sandbox"
            );
        }
        // Which interfaces it sees is in the escape table (`ifaces`).
        sb.destroy().await.unwrap();
    }
    assert!(tcp4.accept().is_err(), "the host listener got a connection");
    let mut buf = [0u8; 8];
    assert!(
        udp.recv_from(&mut buf).is_err(),
        "the host UDP socket got a datagram"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_host_process_unshare_mount_and_ptrace_fail() {
    use std::os::unix::process::CommandExt as _;
    if !common::require_root() {
        return;
    }
    let mut host = Command::new("sleep")
        .arg("60")
        .uid(NOBODY)
        .gid(NOBODY)
        .spawn()
        .unwrap();
    let hp = host.id().to_string();
    for (name, b) in common::backends().await {
        let ws = workspace(NOBODY, NOBODY);
        let p = common::install_probe(ws.path(), NOBODY);
        let sb = create(&b, "proc2", ws.path(), NOBODY).await;
        // unshare, clone with namespace flags, mount and ptrace are in the
        // escape table; this one needs the host process.
        let r = probe(sb.as_ref(), &p, &["kill", hp.as_str()]).await;
        assert_eq!(r.stdout, "ESRCH\n", "{name}: {r:?}");
        let r = sh(
            sb.as_ref(),
            "unshare -Ur true 2>/dev/null && echo UNSHARED || echo failed",
        )
        .await;
        assert_eq!(r.stdout, "failed\n", "{name}");
        sb.destroy().await.unwrap();
    }
    assert_eq!(host.try_wait().unwrap(), None, "the host process died");
    host.kill().unwrap();
    host.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_process_dies_with_its_session() {
    if !common::require_root() {
        return;
    }
    // Any backend: after destroy, the sandbox is gone and refuses work.
    for (name, b) in common::backends().await {
        let ws = workspace(NOBODY, NOBODY);
        let sb = create(&b, "bg-any", ws.path(), NOBODY).await;
        let r = sh(
            sb.as_ref(),
            "setsid sleep 1000 > /dev/null 2>&1 < /dev/null & echo started",
        )
        .await;
        assert_eq!(r.stdout, "started\n", "{name}");
        sb.destroy().await.unwrap();
        assert!(!sb.is_alive(), "{name}");
        let r = sb
            .exec(
                common::req(&["true"], Duration::from_secs(5)),
                mpsc::channel(1).0,
                CancellationToken::new(),
            )
            .await;
        assert!(matches!(r, Err(SandboxError::Gone(_))), "{name}: {r:?}");
        sb.destroy().await.unwrap();
    }
    // Native, seen from the host: the sleeper outlives its command, and
    // nothing of the pid namespace outlives destroy().
    let b = common::native();
    let ws = workspace(NOBODY, NOBODY);
    let sb = b
        .create_native(&spec("bg", ws.path(), NOBODY, NOBODY))
        .await
        .unwrap();
    let ns = common::pidns_of(sb.init_pid());
    // setsid: the sleeper leaves the command's process group, so it survives
    // the command; only the end of the session takes it down. The command
    // waits until the sleeper has left its group.
    let r = sh(
        sb.as_ref(),
        "setsid sh -c 'echo $$ > bgpid; exec sleep 1000' > /dev/null 2>&1 < /dev/null & \
         while [ ! -s bgpid ]; do sleep 0.01; done; echo started",
    )
    .await;
    assert_eq!(r.stdout, "started\n");
    let mut sleepers = 0;
    for _ in 0..100 {
        sleepers = common::pids_in_ns(&ns)
            .into_iter()
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default() == "sleep\n"
            })
            .count();
        if sleepers == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        sleepers, 1,
        "the background sleep should outlive its command"
    );
    sb.destroy().await.unwrap();
    assert_eq!(
        common::pids_in_ns(&ns),
        Vec::<i32>::new(),
        "processes left in the sandbox's pid namespace"
    );
}

const POSTURE_KEYS: [&str; 7] = [
    "NoNewPrivs",
    "Seccomp",
    "CapInh",
    "CapPrm",
    "CapEff",
    "CapBnd",
    "CapAmb",
];
const POSTURE: &str = "NoNewPrivs:\t1\nSeccomp:\t2\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\n";

fn posture_of(status: &str) -> String {
    POSTURE_KEYS
        .iter()
        .map(|k| {
            status
                .lines()
                .find(|l| l.starts_with(&format!("{k}:")))
                .unwrap_or_default()
                .to_string()
                + "\n"
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_process_has_the_posture() {
    if !common::require_root() {
        return;
    }
    for (name, b) in common::backends().await {
        for uid in [NOBODY, 0] {
            let ws = workspace(uid, uid);
            let sb = create(&b, "posture", ws.path(), uid).await;
            let r = run_argv(
                sb.as_ref(),
                &["cat", "/proc/self/status"],
                Duration::from_secs(10),
            )
            .await;
            assert_eq!(posture_of(&r.stdout), POSTURE, "{name} uid {uid}");
            sb.destroy().await.unwrap();
        }
    }
    // Seen from the host, for pid 1 and a running command (native).
    let b = common::native();
    let ws = workspace(NOBODY, NOBODY);
    let sb = b
        .create_native(&spec("posture-host", ws.path(), NOBODY, NOBODY))
        .await
        .unwrap();
    let ns = common::pidns_of(sb.init_pid());
    let sb2 = Arc::clone(&sb);
    let running = tokio::spawn(async move { sh(sb2.as_ref(), "sleep 3").await });
    let mut checked = 0;
    for _ in 0..100 {
        let pids = common::pids_in_ns(&ns);
        if pids.len() >= 2 {
            for p in pids {
                let status = std::fs::read_to_string(format!("/proc/{p}/status")).unwrap();
                assert_eq!(posture_of(&status), POSTURE, "host view of pid {p}");
                assert!(
                    status.contains(&format!("Uid:\t{NOBODY}\t{NOBODY}\t{NOBODY}\t{NOBODY}")),
                    "{status}"
                );
                checked += 1;
            }
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(checked >= 2, "pid 1 and the command were not both seen");
    running.await.unwrap();
    sb.destroy().await.unwrap();
}

/// The escape table (`common/escape_cases.rs`): every case against every
/// backend, as a non-root and a root session, then the workspace checked
/// from the host for set-user/group-ID files and file capabilities. Each
/// control first runs on the host, so a pass cannot come from a kernel or
/// a tool that lacks the feature in the first place. A case that cannot
/// apply to a backend says why in the table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_escape_case_holds_on_every_backend_for_root_and_non_root() {
    if !common::require_root() {
        return;
    }
    let uids = [NOBODY, 0];
    let mut failed = common::escape_cases::check_controls(&uids);
    let mut kinds = Vec::new();
    for (name, b) in common::backends().await {
        kinds.push(b.kind());
        for uid in uids {
            let (report, f) = common::escape_cases::run_all(name, &b, uid).await;
            println!("{}", report.join("\n"));
            failed.extend(f);
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    assert!(kinds.contains(&tollgate_sandbox::BackendKind::Native));
}

async fn collect(mut rx: mpsc::Receiver<Output>) -> (Vec<u8>, Vec<u8>) {
    let (mut o, mut e) = (Vec::new(), Vec::new());
    while let Some(c) = rx.recv().await {
        match c {
            Output::Stdout(b) => o.extend_from_slice(&b),
            Output::Stderr(b) => e.extend_from_slice(&b),
        }
    }
    (o, e)
}

/// A fork bomb is held by the pids limit and ended by the timeout; the
/// sandbox survives it, and another session works meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_bomb_is_contained_and_another_session_still_works() {
    if !common::require_root() {
        return;
    }
    for (name, b) in common::backends().await {
        let ws_a = workspace(NOBODY, NOBODY);
        let ws_b = workspace(NOBODY, NOBODY);
        let a = create(&b, "bomb", ws_a.path(), NOBODY).await;
        let other = create(&b, "bystander", ws_b.path(), NOBODY).await;
        let (tx, mut rx) = mpsc::channel(64);
        let a2 = Arc::clone(&a);
        let bomb = tokio::spawn(async move {
            a2.exec(
                common::req(
                    // Every level waits for its children, so the first shell
                    // stays until the tree collapses or the timeout ends it
                    // (with `b | b &` it could return before any fork failed).
                    &["sh", "-c", "echo go; b() { b & b & wait; }; b"],
                    Duration::from_secs(5),
                ),
                tx,
                CancellationToken::new(),
            )
            .await
        });
        // Once the bomb runs, a call in a second session completes.
        let mut err = Vec::new();
        loop {
            match rx.recv().await {
                Some(Output::Stdout(s)) if s.as_ref().starts_with(b"go") => break,
                Some(Output::Stdout(s)) => panic!("{name}: unexpected stdout {s:?}"),
                Some(Output::Stderr(e)) => err.extend_from_slice(&e),
                None => panic!("{name}: the bomb ended before saying go"),
            }
        }
        let r = sh(other.as_ref(), "echo ok").await;
        assert_eq!((r.stdout.as_str(), r.code()), ("ok\n", Some(0)), "{name}");
        while let Some(o) = rx.recv().await {
            if let Output::Stderr(b) = o {
                err.extend_from_slice(&b);
            }
        }
        // Held: forks failed at the pids limit; then it collapsed or timed out.
        let outcome = bomb.await.unwrap().unwrap();
        let err = String::from_utf8_lossy(&err).to_lowercase();
        assert!(
            err.contains("fork"),
            "{name}: no fork failure seen: {outcome:?} {err}"
        );
        // The bombed sandbox itself is still usable once the group is gone.
        let r = sh(a.as_ref(), "echo alive").await;
        assert_eq!(r.stdout, "alive\n", "{name}");
        a.destroy().await.unwrap();
        other.destroy().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filling_memory_or_tmp_is_contained_and_reported() {
    if !common::require_root() {
        return;
    }
    for (name, b) in common::backends().await {
        let ws = workspace(NOBODY, NOBODY);
        let p = common::install_probe(ws.path(), NOBODY);
        let sb = create(&b, "fill", ws.path(), NOBODY).await;
        // 2 GiB against a 256 MiB limit.
        let r = probe(sb.as_ref(), &p, &["alloc", "2048"]).await;
        assert!(!r.stdout.contains("allocated"), "{name}: {r:?}");
        assert_eq!(r.outcome.signal, Some(libc::SIGKILL), "{name}: {r:?}");
        if name == "native" {
            assert!(r.stderr.contains("out-of-memory"), "{name}: {r:?}");
        }
        // /tmp is a 32 MiB tmpfs.
        let r = sh(
            sb.as_ref(),
            "dd if=/dev/zero of=/tmp/fill bs=1M count=200 2>&1; echo rc=$?",
        )
        .await;
        assert!(
            r.stdout.contains("No space left on device"),
            "{name}: {r:?}"
        );
        assert!(!r.stdout.contains("rc=0"), "{name}: {r:?}");
        // A single file in the workspace is capped at fsize (64 MiB).
        let r = sh(
            sb.as_ref(),
            "dd if=/dev/zero of=big bs=1M count=100 2>/dev/null; echo rc=$?; wc -c < big",
        )
        .await;
        assert_eq!(
            r.stdout,
            format!("rc={}\n67108864\n", 128 + libc::SIGXFSZ),
            "{name}: {r:?}"
        );
        let _ = sh(sb.as_ref(), "rm -f big").await;
        // The sandbox is fine afterwards.
        let r = sh(sb.as_ref(), "rm /tmp/fill; echo ok").await;
        assert_eq!(r.stdout, "ok\n", "{name}");
        sb.destroy().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_output_never_exiting_and_closed_stdout_are_handled() {
    if !common::require_root() {
        return;
    }
    for (name, b) in common::backends().await {
        let ws = workspace(NOBODY, NOBODY);
        let sb = create(&b, "out", ws.path(), NOBODY).await;

        // 1 GiB, all of it delivered to a consumer that keeps reading.
        let (tx, mut rx) = mpsc::channel(16);
        let counter = tokio::spawn(async move {
            let mut n = 0usize;
            while let Some(o) = rx.recv().await {
                if let Output::Stdout(b) = o {
                    n += b.len();
                }
            }
            n
        });
        let outcome = sb
            .exec(
                common::req(
                    &["head", "-c", "1073741824", "/dev/zero"],
                    Duration::from_secs(300),
                ),
                tx,
                CancellationToken::new(),
            )
            .await
            .unwrap();
        assert_eq!(
            (counter.await.unwrap(), outcome.exit_code),
            (1 << 30, Some(0)),
            "{name}"
        );

        // A consumer that goes away does not block the command.
        let (tx, rx) = mpsc::channel(1);
        drop(rx);
        let outcome = sb
            .exec(
                common::req(
                    &["head", "-c", "268435456", "/dev/zero"],
                    Duration::from_secs(300),
                ),
                tx,
                CancellationToken::new(),
            )
            .await
            .unwrap();
        assert_eq!(
            (outcome.exit_code, outcome.timed_out),
            (Some(0), false),
            "{name}"
        );

        // Never exits: the timeout kills it.
        let r = run_argv(sb.as_ref(), &["sleep", "1000"], Duration::from_secs(1)).await;
        assert!(
            r.outcome.timed_out && r.outcome.signal == Some(libc::SIGKILL),
            "{name}: {r:?}"
        );

        // Cancelled from outside.
        let cancel = CancellationToken::new();
        let (tx, rx) = mpsc::channel(16);
        let sb2 = Arc::clone(&sb);
        let c2 = cancel.clone();
        let run = tokio::spawn(async move {
            sb2.exec(
                common::req(
                    &["sh", "-c", "echo started; exec sleep 1000"],
                    Duration::from_secs(600),
                ),
                tx,
                c2,
            )
            .await
        });
        let mut rx = rx;
        assert!(matches!(rx.recv().await, Some(Output::Stdout(_))), "{name}");
        cancel.cancel();
        let outcome = run.await.unwrap().unwrap();
        assert!(
            outcome.cancelled && !outcome.timed_out && outcome.signal == Some(libc::SIGKILL),
            "{name}: {outcome:?}"
        );

        // Closes stdout early, keeps going, ends normally.
        let r = sh(
            sb.as_ref(),
            "echo before; exec >&-; sleep 0.2; echo after >&2",
        )
        .await;
        assert_eq!(
            (r.stdout.as_str(), r.stderr.as_str(), r.code()),
            ("before\n", "after\n", Some(0)),
            "{name}"
        );
        sb.destroy().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_hooks_and_config_stay_read_only() {
    if !common::require_root() {
        return;
    }
    for (name, b) in common::backends().await {
        let ws = workspace(NOBODY, NOBODY);
        for d in [".git/hooks", ".git/objects"] {
            std::fs::create_dir_all(ws.path().join(d)).unwrap();
        }
        std::fs::write(ws.path().join(".git/config"), "[core]\n").unwrap();
        Command::new("chown")
            .arg("-R")
            .arg(format!("{NOBODY}:{NOBODY}"))
            .arg(ws.path())
            .status()
            .unwrap();
        let sb = create(&b, "git", ws.path(), NOBODY).await;
        let r = sh(
            sb.as_ref(),
            "echo x > .git/hooks/pre-commit 2>/dev/null && echo HOOK || echo hook-denied; \
             echo '[core] fsmonitor = evil' >> .git/config 2>/dev/null && echo CONFIG || echo config-denied; \
             echo x > .git/objects/o 2>/dev/null && echo OBJECTS || echo objects-denied",
        )
        .await;
        // All of .git is read-only (docs/THREAT_MODEL.md "What the host runs
        // by itself"; a `commondir` written
        // beside the config redirects git as well as a config would).
        assert_eq!(
            r.stdout, "hook-denied\nconfig-denied\nobjects-denied\n",
            "{name}: {r:?}"
        );
        assert!(!ws.path().join(".git/hooks/pre-commit").exists(), "{name}");
        assert!(!ws.path().join(".git/objects/o").exists(), "{name}");
        assert_eq!(
            std::fs::read_to_string(ws.path().join(".git/config")).unwrap(),
            "[core]\n",
            "{name}"
        );
        sb.destroy().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_specs_and_requests_are_refused_with_a_reason() {
    if !common::require_root() {
        return;
    }
    for (name, b) in common::backends().await {
        let ws = workspace(NOBODY, NOBODY);
        // A hidden path inside the workspace would be exposed: refused.
        let mut s = spec("hidden-in-ws", ws.path(), NOBODY, NOBODY);
        s.hidden.push(ws.path().join("state"));
        let e = b.create(&s).await.err().unwrap();
        assert!(matches!(e, SandboxError::Refused(_)), "{name}: {e}");
        let mut s = spec("bad-ws", ws.path(), NOBODY, NOBODY);
        s.workspace = ws.path().join("missing");
        assert!(
            b.create(&s).await.is_err(),
            "{name}: missing workspace accepted"
        );
        let mut s = spec("bad-id", ws.path(), NOBODY, NOBODY);
        s.session_id = "../../etc".to_string();
        assert!(
            b.create(&s).await.is_err(),
            "{name}: bad session id accepted"
        );
    }
    // Native: a cwd with NUL or over 4096 bytes is reported, not run.
    let b = common::native();
    let ws = workspace(NOBODY, NOBODY);
    let sb = b
        .create_native(&spec("badreq", ws.path(), NOBODY, NOBODY))
        .await
        .unwrap();
    let mut req = common::req(&["true"], Duration::from_secs(5));
    req.cwd = Some(std::path::PathBuf::from("a\0b"));
    let e = sb
        .exec(req, mpsc::channel(4).0, CancellationToken::new())
        .await;
    assert!(e.is_err(), "{e:?}");
    let mut req = common::req(&["true"], Duration::from_secs(5));
    req.cwd = Some(ws.path().join("x".repeat(5000)));
    let (tx, rx) = mpsc::channel(16);
    let outcome = sb.exec(req, tx, CancellationToken::new()).await.unwrap();
    let (_, err) = collect(rx).await;
    assert_eq!(outcome.exit_code, Some(126));
    assert!(
        String::from_utf8_lossy(&err).contains("File name too long"),
        "{}",
        String::from_utf8_lossy(&err)
    );
    let r = sh(sb.as_ref(), "echo still-fine").await;
    assert_eq!(r.stdout, "still-fine\n");
    sb.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hidden_paths_are_masked() {
    if !common::require_root() {
        return;
    }
    let host = std::fs::read_to_string("/etc/hostname").unwrap();
    assert!(!host.trim().is_empty());
    let b = common::native();
    let ws = workspace(NOBODY, NOBODY);
    let mut s = spec("hidden", ws.path(), NOBODY, NOBODY);
    s.hidden.push("/etc/hostname".into());
    s.hidden.push("/etc/ssl".into());
    let sb = b.create(&s).await.unwrap();
    let r = sh(
        sb.as_ref(),
        "cat /etc/hostname; ls /etc/ssl/certs 2>&1 | head -1",
    )
    .await;
    assert!(!r.stdout.contains(host.trim()), "{r:?}");
    assert!(!r.stdout.contains(".pem"), "{r:?}");
    // A hidden file cannot be opened at all (not an empty /dev/null that
    // reads as success), nor written.
    let r = sh(
        sb.as_ref(),
        "cat /etc/hostname >/dev/null 2>&1 && echo read-ok || echo read-denied; (echo x >> /etc/hostname) 2>/dev/null && echo write-ok || echo write-denied; ls -A / | grep -c tollgate-mask",
    )
    .await;
    assert_eq!(r.stdout, "read-denied\nwrite-denied\n0\n", "{r:?}");
    sb.destroy().await.unwrap();
}

/// Rootless mode: the backend run by an unprivileged uid (sandbox_exec
/// drops to it before anything else) works for that uid and refuses others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rootless_sessions_work_for_the_own_uid_only() {
    if !common::require_root() {
        return;
    }
    // It runs as the uid itself, and re-executes itself as the helper.
    let (_staged, exe) = common::staged_for_other_uids(&common::sandbox_exec_exe());
    // nobody, and a uid with no passwd entry at all.
    for uid in [NOBODY, 64999] {
        let ws = workspace(uid, uid);
        let out = Command::new(&exe)
            .args(["--as-uid", &uid.to_string(), "--workspace"])
            .arg(ws.path())
            .args([
                "--",
                "sh",
                "-c",
                "id -u; cat /proc/self/uid_map | tr -s ' '; grep -E '^(NoNewPrivs|Seccomp|CapEff|CapBnd):' /proc/self/status; \
                 echo x > f; touch /etc/x 2>/dev/null || echo etc-denied; cat /etc/shadow 2>/dev/null || echo shadow-denied; \
                 unshare -Ur true 2>/dev/null || echo unshare-denied",
            ])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            stdout,
            format!(
                "{uid}\n {uid} {uid} 1\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\netc-denied\nshadow-denied\nunshare-denied\n"
            ),
            "uid {uid}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(std::fs::metadata(ws.path().join("f")).unwrap().uid(), uid);

        // Another uid: refused, with the reason.
        let out = Command::new(&exe)
            .args([
                "--as-uid",
                &uid.to_string(),
                "--user",
                "1000",
                "--workspace",
            ])
            .arg(ws.path())
            .args(["--", "true"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{stderr}");
        assert!(
            stderr.contains("refused") && stderr.contains("only for itself"),
            "{stderr}"
        );
    }
}

/// After a supervisor crash: a sandbox left running is killed, a dead one's
/// record and cgroups are cleaned, and each is reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphans_of_a_crashed_supervisor_are_reaped() {
    if !common::require_root() {
        return;
    }
    let state = tempfile::Builder::new()
        .prefix("tollgate-reap-")
        .tempdir()
        .unwrap();

    // 1. A live orphan: a sandbox whose owner forgot it (its pid 1 still runs).
    let first = common::native_in(state.path());
    let ws = workspace(NOBODY, NOBODY);
    let live = first
        .create_native(&spec("live-orphan", ws.path(), NOBODY, NOBODY))
        .await
        .unwrap();
    let live_id = live.session_id().to_string();
    let live_ns = common::pidns_of(live.init_pid());
    std::mem::forget(live);

    // 2. A dead one: sandbox_exec killed with SIGKILL mid-command.
    let ws2 = workspace(NOBODY, NOBODY);
    let mut child = Command::new(common::sandbox_exec_exe())
        .arg("--state-dir")
        .arg(state.path())
        .arg("--workspace")
        .arg(ws2.path())
        .args(["--", "sleep", "1000"])
        .spawn()
        .unwrap();
    let dead_id = format!("exec-{}", child.id());
    let record = state.path().join(format!("sandboxes/{dead_id}.json"));
    for _ in 0..500 {
        if record.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(record.exists(), "sandbox_exec never came up");
    let rec: serde_json::Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    let cgroups: Vec<String> = rec["cgroups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert!(!cgroups.is_empty());
    let dead_ns = common::pidns_of(rec["init_pid"].as_i64().unwrap() as i32);
    child.kill().unwrap();
    child.wait().unwrap();
    // Its pid 1 saw the control socket close and took the namespace down.
    for _ in 0..500 {
        if common::pids_in_ns(&dead_ns).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(common::pids_in_ns(&dead_ns), Vec::<i32>::new());

    let second = common::native_in(state.path());
    let mut reaped = second.reap_orphans().await.unwrap();
    reaped.sort_by(|a, b| a.session_id.cmp(&b.session_id));
    let mut want = vec![dead_id.clone(), live_id.clone()];
    want.sort();
    assert_eq!(
        reaped
            .iter()
            .map(|r| r.session_id.clone())
            .collect::<Vec<_>>(),
        want,
        "{reaped:?}"
    );
    for r in &reaped {
        assert!(r.detail.contains("removed its cgroups"), "{r:?}");
        if r.session_id == live_id {
            assert!(
                r.detail.contains("killed pid") && r.detail.contains("sandbox pid 1"),
                "{r:?}"
            );
        } else {
            // Its pid 1 was already gone (its helper may still have been
            // on its way out).
            assert!(!r.detail.contains("sandbox pid 1"), "{r:?}");
        }
    }
    assert_eq!(
        common::pids_in_ns(&live_ns),
        Vec::<i32>::new(),
        "the live orphan survived"
    );
    for c in cgroups {
        assert!(!std::path::Path::new(&c).exists(), "{c} left behind");
    }
    assert!(
        std::fs::read_dir(state.path().join("sandboxes"))
            .unwrap()
            .next()
            .is_none()
    );
    assert_eq!(second.reap_orphans().await.unwrap(), vec![]);
}

/// This host (root, Landlock 7, cgroup v1) gives full strength: nothing is
/// missing, and doctor says so line by line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_strength_here_and_doctor_agrees() {
    if !common::require_root() {
        return;
    }
    let b = common::native();
    let s = b.strength();
    assert_eq!(s.missing, Vec::<String>::new(), "{s:?}");
    assert!(
        s.summary.contains("Landlock ABI") && s.summary.contains("root (cgroup"),
        "{s:?}"
    );
    let checks = tollgate_sandbox::native::doctor_checks();
    let names: Vec<&str> = checks.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "landlock",
            "seccomp",
            "namespaces",
            "mount api",
            "user namespaces",
            "cgroups",
            "refusal attribution"
        ]
    );
    for c in &checks {
        assert_eq!(c.status, tollgate_sandbox::CheckStatus::Ok, "{c:?}");
    }
    let policy = tollgate_sandbox::native::seccomp_policy_markdown();
    for must in [
        "`ptrace`",
        "`io_uring_setup`",
        "`unshare`",
        "`mount`",
        "`bpf`",
        "`keyctl`",
        "TIOCSTI",
    ] {
        assert!(policy.contains(must), "{must} missing from the policy text");
    }
}

/// When the host cannot give what is required, sessions are refused with
/// the missing piece named; nothing weaker runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_too_weak_is_refused_with_the_reason() {
    if !common::require_root() {
        return;
    }
    let opts = tollgate_sandbox::native::NativeOptions {
        min_landlock_abi: 99,
        ..common::native_options()
    };
    let b = tollgate_sandbox::native::NativeBackend::with_options(
        tollgate_sandbox::native::NativeConfig {
            helper_exe: common::helper_exe(),
            state_dir: common::state_dir().to_path_buf(),
        },
        opts,
    )
    .unwrap();
    let s = b.strength();
    assert_eq!(s.missing.len(), 1, "{s:?}");
    assert!(
        s.missing[0].starts_with("Landlock ABI 7 (need >= 99"),
        "{s:?}"
    );
    let ws = workspace(NOBODY, NOBODY);
    match b.create(&spec("weak", ws.path(), NOBODY, NOBODY)).await {
        Err(SandboxError::Unavailable(m)) => {
            assert!(m.contains("Landlock ABI 7 (need >= 99"), "{m}")
        }
        other => panic!("expected Unavailable, got {:?}", other.map(|_| "a sandbox")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_replaced_after_the_session_checked_it_is_refused() {
    if !common::require_root() {
        return;
    }
    for (name, b) in common::backends().await {
        let ws = workspace(NOBODY, NOBODY);
        // The spec carries the identity of the directory as checked...
        let checked = spec("moved", ws.path(), NOBODY, NOBODY);
        // ...which is then renamed away, and another put at its path.
        let moved = ws.path().with_extension("moved");
        std::fs::rename(ws.path(), &moved).unwrap();
        std::fs::create_dir(ws.path()).unwrap();
        std::os::unix::fs::chown(ws.path(), Some(NOBODY), Some(NOBODY)).unwrap();
        let refused = b.create(&checked).await;
        std::fs::remove_dir(ws.path()).unwrap();
        std::fs::rename(&moved, ws.path()).unwrap();
        let err = refused.err().expect("a replaced workspace must be refused");
        assert!(
            err.to_string()
                .contains("no longer the directory this session was opened on"),
            "{name}: {err}"
        );
        // The same directory, back at its path, is accepted.
        let sb = b.create(&checked).await.unwrap();
        assert_eq!(sh(sb.as_ref(), "true").await.code(), Some(0), "{name}");
        sb.destroy().await.unwrap();
    }
}

/// docs/OPERATIONS.md "The native sandbox's steps, in order": a workspace lives
/// wherever its user keeps it, beneath a directory the native root replaces
/// with its own (/var/tmp is a symlink to /tmp there, /tmp, /run and /dev/shm
/// are its own tmpfs or directory) included. It is attached at its real path on
/// both backends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workspaces_beneath_replaced_directories_attach_at_their_path() {
    if !common::require_root() {
        return;
    }
    for (name, b) in common::backends().await {
        for base in ["/var/tmp", "/tmp", "/run", "/dev/shm"] {
            let dir = tempfile::Builder::new()
                .prefix("tollgate-ws-where-")
                .tempdir_in(base)
                .unwrap();
            let ws = dir.path().canonicalize().unwrap();
            std::os::unix::fs::chown(&ws, Some(NOBODY), Some(NOBODY)).unwrap();
            let sb = b
                .create(&spec("where", &ws, NOBODY, NOBODY))
                .await
                .unwrap_or_else(|e| panic!("{name}: workspace {}: {e}", ws.display()));
            let r = sh(sb.as_ref(), "pwd; echo made-inside > f; cat f").await;
            sb.destroy().await.unwrap();
            assert_eq!(
                (r.stdout.as_str(), r.code()),
                (format!("{}\nmade-inside\n", ws.display()).as_str(), Some(0)),
                "{name}: {r:?}"
            );
            assert_eq!(
                std::fs::read_to_string(ws.join("f")).unwrap(),
                "made-inside\n",
                "{name}: {}",
                ws.display()
            );
        }
    }
}

/// A sandbox that fails during setup says at which step and on which path;
/// never "exited during setup without a report" (pid 1's failures were
/// lost with its control socket).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setup_failure_names_the_step_and_the_path() {
    if !common::require_root() {
        return;
    }
    let real = workspace(NOBODY, NOBODY);
    let inner = real.path().join("ws");
    std::fs::create_dir(&inner).unwrap();
    std::os::unix::fs::chown(&inner, Some(NOBODY), Some(NOBODY)).unwrap();
    let links = tempfile::tempdir().unwrap();
    let links = links.path().canonicalize().unwrap();
    std::os::unix::fs::symlink(real.path(), links.join("via")).unwrap();
    std::os::unix::fs::symlink(&inner, links.join("last")).unwrap();
    // The daemon always passes a canonical path; the backend itself must
    // refuse one with a symlink in it (pid 1 opens it with symlinks refused),
    // in the middle or at the end.
    for ws in [links.join("via/ws"), links.join("last")] {
        let mut s = spec("setupfail", &ws, NOBODY, NOBODY);
        s.host_exec.clear();
        let e = match common::native().create(&s).await {
            Ok(_) => panic!(
                "{}: a workspace reached through a symlink was attached",
                ws.display()
            ),
            Err(e) => e.to_string(),
        };
        assert!(
            e.contains("native sandbox setup failed at mounts: workspace ")
                && e.contains(&ws.display().to_string())
                && e.contains("without symlinks"),
            "{e}"
        );
        assert!(!e.contains("without a report"), "{e}");
    }
}
