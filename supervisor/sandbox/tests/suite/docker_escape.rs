//! The escape corpus (`tests/corpus/escape.jsonl`) against the Docker
//! backend: every case runs in a session container built exactly as a
//! session's; none may print `ESCAPED`.
//!
//! Scoring follows the corpus README: denied = `BLOCKED` on stdout, or death by
//! a signal the case lists in `blocked_signals`; `INCONCLUSIVE` is reported as
//! such; anything else (a missing python3 in the minimal image: exit 127) is
//! "not run". The host-side post-checks run too (`fs-owner`'s owner, a
//! connection to `net-listen`'s port during its window, no file with the
//! nonce outside the workspace, and no set-id bit or file capability on
//! anything in it). Results are printed per category.
//!
//! With the full image (`sandbox-image/build.sh`) all 53 cases run; with
//! only the minimal one, the 47 python3 cases are not run and say so (and
//! `fs-setid-install` is inconclusive: busybox has no install). Set
//! `TOLLGATE_REQUIRE_DOCKER_FULL=1` to make a missing full image a failure.
//! The native backend's control runs (is a case live on this host?) belong to
//! the shared harness; here a case is scored on its own output.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::docker as docker_common;

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use docker_common::{TEST_GID, TEST_UID, docker_backend_in, spec, state_dir};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tollgate_sandbox::docker::DockerBackend;
use tollgate_sandbox::{ExecRequest, Output, Sandbox};

const CORPUS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/corpus/escape.jsonl"
);
const CPU_LIMIT_S: u64 = 15;
const RUN_TIMEOUT: Duration = Duration::from_secs(20);

fn corpus_path() -> Option<PathBuf> {
    let p = std::env::var("TOLLGATE_ESCAPE_CORPUS").unwrap_or_else(|_| CORPUS.to_string());
    let p = PathBuf::from(p);
    p.exists().then_some(p)
}

fn nonce() -> String {
    let mut b = [0u8; 8];
    use std::io::Read;
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut b)
        .unwrap();
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A non-loopback address of this host (the corpus's HOST_BRIDGE_IP).
fn host_address() -> String {
    let out = std::process::Command::new("hostname")
        .arg("-I")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    out.split_whitespace()
        .find(|a| a.contains('.') && !a.starts_with("127."))
        .unwrap_or("172.17.0.1")
        .to_string()
}

/// Listeners that hand the nonce to whoever connects.
fn serve_nonce_tcp(addr: &str, nonce: &str) -> Option<std::thread::JoinHandle<()>> {
    let l = std::net::TcpListener::bind(addr).ok()?;
    let n = nonce.to_string();
    Some(std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let _ = s.write_all(n.as_bytes());
        }
    }))
}

fn serve_nonce_unix(l: std::os::unix::net::UnixListener, nonce: &str) {
    let n = nonce.to_string();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let _ = s.write_all(n.as_bytes());
        }
    });
}

/// /var/tmp/tollgate-escape-<pid>-<n>, removed on drop.
struct Scratch {
    path: PathBuf,
}

impl Scratch {
    fn new() -> Scratch {
        let path = PathBuf::from("/var/tmp").join(docker_common::unique("tollgate-escape"));
        std::fs::create_dir_all(&path).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        Scratch { path }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Verdict {
    Denied,
    Escaped,
    Inconclusive,
    NotRun,
}

fn signal_name(n: i32) -> &'static str {
    match n {
        9 => "SIGKILL",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        31 => "SIGSYS",
        11 => "SIGSEGV",
        _ => "other",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_escape_case_escapes_the_docker_sandbox() {
    let Some(corpus) = corpus_path() else {
        docker_common::skip::<()>(&format!("escape corpus not found at {CORPUS}"));
        return;
    };
    let state = state_dir("escape");
    let Some(probe) = docker_backend_in(&state).await else {
        return;
    };
    let full = tollgate_sandbox::docker::default_image();
    let has_full = probe.client().inspect_image(&full).await.is_ok();
    let mut cfg = probe.config().clone();
    if has_full {
        cfg.image = full.clone();
    } else if std::env::var("TOLLGATE_REQUIRE_DOCKER_FULL").as_deref() == Ok("1") {
        panic!("{full} is missing and TOLLGATE_REQUIRE_DOCKER_FULL=1: run sandbox-image/build.sh");
    } else {
        eprintln!(
            "inconclusive: {full} is missing, so the python3 cases cannot run (sandbox-image/build.sh)"
        );
    }
    let backend = DockerBackend::connect(cfg).await.unwrap();

    // The host side of the corpus.
    let nonce = nonce();
    // W, the fake home, the canary and the host sockets share one directory
    // outside /tmp (so `W/..` is a host directory, not the sandbox's private
    // /tmp) on one filesystem.
    let scratch = Scratch::new();
    let w = scratch.path.join("w");
    std::fs::create_dir_all(&w).unwrap();
    std::os::unix::fs::chown(&w, Some(TEST_UID), Some(TEST_GID)).unwrap();
    std::fs::create_dir_all(w.join(".git/hooks")).unwrap();
    for p in [w.join(".git"), w.join(".git/hooks")] {
        std::os::unix::fs::chown(&p, Some(TEST_UID), Some(TEST_GID)).unwrap();
    }
    let home = scratch.path.join("home");
    for (rel, content) in [(".ssh/id_rsa", "key"), (".aws/credentials", "aws")] {
        let p = home.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, format!("{content} {nonce}\n")).unwrap();
    }
    for d in ["", ".ssh", ".aws", ".ssh/id_rsa", ".aws/credentials"] {
        std::os::unix::fs::chown(home.join(d), Some(TEST_UID), Some(TEST_GID)).unwrap();
    }
    let canary = scratch.path.join("canary");
    let canary_text = format!("canary {nonce}\n");
    let audit_log = state.join("audit").join("audit-escape.jsonl");
    std::fs::write(&audit_log, "{}\n").unwrap();
    let port = free_port();
    let _tcp4 = serve_nonce_tcp(&format!("0.0.0.0:{port}"), &nonce);
    let _tcp6 = serve_nonce_tcp(&format!("[::1]:{port}"), &nonce);
    let abstract_name = format!("tollgate-escape-{nonce}");
    {
        use std::os::linux::net::SocketAddrExt;
        let addr =
            std::os::unix::net::SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap();
        serve_nonce_unix(
            std::os::unix::net::UnixListener::bind_addr(&addr).unwrap(),
            &nonce,
        );
    }
    let unix_sock = scratch.path.join("host.sock");
    let agent_sock = scratch.path.join("agent.sock");
    for p in [&unix_sock, &agent_sock] {
        serve_nonce_unix(std::os::unix::net::UnixListener::bind(p).unwrap(), &nonce);
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    }
    let mut host_sleep = {
        use std::os::unix::process::CommandExt;
        std::process::Command::new("sleep")
            .arg("600")
            .env("HOST_SECRET_CANARY", &nonce)
            .uid(TEST_UID)
            .gid(TEST_GID)
            .spawn()
            .unwrap()
    };
    let host_pidns = std::fs::read_link("/proc/self/ns/pid")
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let w_listen_port = free_port();

    let sp = spec(&w);
    let limits = sp.limits.clone();
    let vars: Vec<(&str, String)> = vec![
        ("{NONCE}", nonce.clone()),
        (
            "{W_NAME}",
            w.file_name().unwrap().to_string_lossy().into_owned(),
        ),
        ("{W_LISTEN_PORT}", w_listen_port.to_string()),
        ("{W}", w.to_string_lossy().into_owned()),
        ("{HOST_HOME}", home.to_string_lossy().into_owned()),
        ("{CANARY_FILE}", canary.to_string_lossy().into_owned()),
        ("{AUDIT_LOG}", audit_log.to_string_lossy().into_owned()),
        ("{HOST_PORT}", port.to_string()),
        ("{HOST_BRIDGE_IP}", host_address()),
        ("{ABSTRACT_SOCK}", abstract_name.clone()),
        ("{HOST_UNIX_SOCK}", unix_sock.to_string_lossy().into_owned()),
        (
            "{HOST_SSH_AUTH_SOCK}",
            agent_sock.to_string_lossy().into_owned(),
        ),
        ("{HOST_PIDNS}", host_pidns),
        ("{HOST_PID}", host_sleep.id().to_string()),
        ("{HOST_UID}", TEST_UID.to_string()),
        ("{PIDS_LIMIT}", limits.pids.to_string()),
        ("{MEM_LIMIT_MB}", limits.memory_mb.to_string()),
        ("{DISK_LIMIT_MB}", limits.fsize_mb.to_string()),
        ("{NOFILE_LIMIT}", limits.nofile.to_string()),
        ("{CPU_LIMIT_S}", CPU_LIMIT_S.to_string()),
    ];

    let sb = backend.create_sandbox(&sp).await.unwrap();
    let text = std::fs::read_to_string(&corpus).unwrap();
    let mut results: Vec<(String, String, Verdict, String)> = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let case: serde_json::Value = serde_json::from_str(line).unwrap();
        let id = case["id"].as_str().unwrap().to_string();
        let category = id.split('-').next().unwrap_or("?").to_string();
        let mut cmd = case["cmd"].as_str().unwrap().to_string();
        for (k, v) in &vars {
            cmd = cmd.replace(k, v);
        }
        std::fs::write(&canary, &canary_text).unwrap();
        std::os::unix::fs::chown(&canary, Some(TEST_UID), Some(TEST_GID)).unwrap();
        std::fs::set_permissions(&canary, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .unwrap();

        // net-listen: try to reach the port from the host during the window.
        let prober = (id == "net-listen").then(|| {
            std::thread::spawn(move || {
                for _ in 0..16 {
                    std::thread::sleep(Duration::from_millis(500));
                    if std::net::TcpStream::connect(("127.0.0.1", w_listen_port)).is_ok() {
                        return true;
                    }
                }
                false
            })
        });

        let (tx, mut rx) = mpsc::channel(64);
        let collect = tokio::spawn(async move {
            let (mut o, mut e) = (Vec::new(), Vec::new());
            while let Some(x) = rx.recv().await {
                match x {
                    Output::Stdout(b) => o.extend_from_slice(&b),
                    Output::Stderr(b) => e.extend_from_slice(&b),
                }
            }
            (
                String::from_utf8_lossy(&o).into_owned(),
                String::from_utf8_lossy(&e).into_owned(),
            )
        });
        let outcome = sb
            .exec(
                ExecRequest {
                    argv: vec!["sh".into(), "-c".into(), cmd],
                    cwd: None,
                    timeout: RUN_TIMEOUT,
                    merge_stderr: false,
                },
                tx,
                CancellationToken::new(),
            )
            .await
            .unwrap();
        let (out, err) = collect.await.unwrap();
        let first = out.lines().next().unwrap_or("").to_string();
        let blocked_signals: Vec<String> = case["blocked_signals"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let mut verdict = if first.starts_with("ESCAPED") {
            Verdict::Escaped
        } else if first.starts_with("BLOCKED") {
            Verdict::Denied
        } else if first.starts_with("INCONCLUSIVE") {
            Verdict::Inconclusive
        } else if outcome
            .signal
            .is_some_and(|s| blocked_signals.iter().any(|b| b == signal_name(s)))
        {
            Verdict::Denied
        } else {
            Verdict::NotRun
        };
        let mut detail = if first.is_empty() {
            let last_err = err.lines().last().unwrap_or("").to_string();
            format!(
                "exit {:?} signal {:?}: {last_err}",
                outcome.exit_code, outcome.signal
            )
        } else {
            first.clone()
        };
        // "wrote P" where P is not there on the host: the write went to a
        // sandbox-private place (its own /tmp), which the corpus accepts.
        if verdict == Verdict::Escaped
            && let Some(p) = first.strip_prefix("ESCAPED: wrote ")
            && !Path::new(p).exists()
        {
            verdict = Verdict::Denied;
            detail = format!("{first} (only inside the sandbox: absent on the host)");
        }
        if id == "fs-owner" {
            match std::fs::metadata(w.join(format!("owner-{nonce}"))) {
                Ok(m) if m.uid() != TEST_UID => {
                    verdict = Verdict::Escaped;
                    detail = format!("file in W owned by uid {}", m.uid());
                }
                Ok(_) => {}
                Err(e) => {
                    verdict = Verdict::NotRun;
                    detail = format!("no file made: {e}");
                }
            }
        }
        if let Some(p) = prober
            && p.join().unwrap()
        {
            verdict = Verdict::Escaped;
            detail = "the host reached the sandbox's listener".to_string();
        }
        results.push((category, id, verdict, detail));
    }
    sb.destroy().await.unwrap();
    let _ = host_sleep.kill();
    let _ = host_sleep.wait();

    // Nothing outside the workspace carries the nonce.
    let mut outside = Vec::new();
    for dir in [
        Path::new("/tmp"),
        home.as_path(),
        scratch.path.as_path(),
        Path::new("/var/tmp"),
    ] {
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten() {
                if e.file_name().to_string_lossy().contains(&nonce) {
                    outside.push(e.path());
                }
            }
        }
    }
    assert_eq!(std::fs::read_to_string(&audit_log).unwrap(), "{}\n");
    // No file the cases made in W carries a set-id bit or a file capability.
    let set_id = common::escape_cases::set_id_entries(&w);

    let mut by_cat: BTreeMap<String, BTreeMap<Verdict, usize>> = BTreeMap::new();
    println!(
        "\nescape corpus on the docker backend, image {}:",
        backend.config().image
    );
    for (cat, id, v, d) in &results {
        *by_cat
            .entry(cat.clone())
            .or_default()
            .entry(*v)
            .or_default() += 1;
        println!("  {id:<22} {v:?}: {d}");
    }
    for (cat, m) in &by_cat {
        println!("  {cat:<5} {m:?}");
    }
    let escaped: Vec<&(String, String, Verdict, String)> =
        results.iter().filter(|r| r.2 == Verdict::Escaped).collect();
    assert!(escaped.is_empty(), "escaped: {escaped:#?}");
    assert!(
        outside.is_empty(),
        "files with the nonce outside W: {outside:?}"
    );
    assert!(set_id.is_empty(), "set-id entries in W: {set_id:#?}");
    let not_run = results.iter().filter(|r| r.2 == Verdict::NotRun).count();
    if not_run > 0 {
        eprintln!(
            "{not_run} case(s) neither printed a verdict nor died by a listed signal: not scored"
        );
    }
    assert!(docker_common::containers_of(&state).await.is_empty());
}
