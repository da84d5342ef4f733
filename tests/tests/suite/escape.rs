//! The escape corpus (`tests/corpus/escape.jsonl`) against the real
//! sandboxes: every case that escapes without a sandbox (live) must be
//! BLOCKED inside, and nothing may escape at all. Parametrised over the
//! runner: `examples/sandbox_exec` (the native backend, no daemon), and
//! `supervisorctl sandbox exec` against a real supervisor with
//! `--backend native` and `--backend docker`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

use tollgate_e2e::escape::{self, Fixture, Limits, Runner, SandboxExecRunner, SupervisorctlRunner};
use tollgate_e2e::harness::{self, Supervisor};

/// Corpus runs are heavy (CPU burners, disk fills): one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const UID: u32 = 65534;

/// examples/sandbox_exec of tollgate-sandbox: $TOLLGATE_SANDBOX_EXEC, else
/// next to the other binaries, built on demand.
fn sandbox_exec() -> PathBuf {
    if let Some(p) = std::env::var_os("TOLLGATE_SANDBOX_EXEC") {
        return PathBuf::from(p);
    }
    let p = harness::bin_dir().join("examples/sandbox_exec");
    if !p.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let st = Command::new(cargo)
            .args([
                "build",
                "-p",
                "tollgate-sandbox",
                "--example",
                "sandbox_exec",
            ])
            .status()
            .expect("run cargo to build examples/sandbox_exec");
        assert!(st.success(), "building examples/sandbox_exec failed");
    }
    assert!(
        p.exists(),
        "{} missing; set TOLLGATE_SANDBOX_EXEC",
        p.display()
    );
    p
}

fn cases() -> Vec<escape::Case> {
    escape::load_cases(&escape::corpus_path())
}

/// Runs the corpus, prints the report, fails on any escape or on a live
/// case not shown blocked. Returns the rows for further checks.
fn check(
    runner: &dyn Runner,
    fx: &mut Fixture,
    cases: &[escape::Case],
    min_live: usize,
) -> Vec<escape::Row> {
    let rows = escape::run_corpus(cases, fx, runner);
    let report = escape::report(&runner.name(), &rows);
    println!("{report}");
    let failed: Vec<&escape::Row> = rows.iter().filter(|r| r.failed()).collect();
    assert!(
        failed.is_empty(),
        "{} case(s) failed:\n{report}",
        failed.len()
    );
    let live = rows.iter().filter(|r| r.live()).count();
    assert!(
        live >= min_live,
        "only {live} live cases (expected at least {min_live}): the control is not escaping, so the test proves little\n{report}"
    );
    rows
}

fn native_limits() -> Limits {
    Limits {
        pids: 128,
        memory_mb: 512,
        disk_mb: 64,
        tmp_mb: 64,
        nofile: 256,
        cpu_s: 3,
        timeout_s: 20,
    }
}

#[test]
fn escape_corpus_native_via_sandbox_exec() {
    if !harness::root_or_skip("escape_corpus_native_via_sandbox_exec") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let runner = SandboxExecRunner {
        exe: sandbox_exec(),
    };
    let mut fx = Fixture::new(UID, native_limits());
    let rows = check(&runner, &mut fx, &cases(), 30);
    host_exec_cases_live(&rows);
    // The pty cases are testable with this runner: TIOCSTI must be live.
    let tiocsti = rows
        .iter()
        .find(|r| r.id == "sys-tiocsti")
        .expect("sys-tiocsti in the corpus");
    assert!(tiocsti.live(), "TIOCSTI not live under a pty: {tiocsti:?}");
}

/// The host-executed cases (nothing written inside runs later on the host;
/// docs/THREAT_MODEL.md, "What the host runs by itself"):
/// `fs-git-*` and `fs-host-exec-*`.
fn host_exec_case(c: &escape::Case) -> bool {
    c.id.starts_with("fs-git-") || c.id.starts_with("fs-host-exec-")
}

/// A root-owned session: uid 0 without capabilities. /etc/shadow is root's,
/// so only the sandbox (Landlock) can refuse it; and file permissions stop
/// none of the host-executed writes, so only the read-only mounts can.
#[test]
fn uid0_session_cannot_read_etc_shadow() {
    if !harness::root_or_skip("uid0_session_cannot_read_etc_shadow") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cases: Vec<escape::Case> = cases()
        .into_iter()
        .filter(|c| c.id == "fs-etc-shadow" || host_exec_case(c))
        .collect();
    let n = cases.len();
    assert!(n >= 11, "{n} cases");
    let mut fx = Fixture::new(0, native_limits());
    let runner = SandboxExecRunner {
        exe: sandbox_exec(),
    };
    // Every one of them is live for root (the control escapes).
    check(&runner, &mut fx, &cases, n);
    let sup = supervisor(&native_limits());
    let runner = SupervisorctlRunner {
        supervisorctl: harness::bin("supervisorctl"),
        operator_socket: sup.operator_socket.clone(),
        backend: "native".into(),
    };
    check(&runner, &mut fx, &cases, n);
    // Docker: the host-executed cases (a container's /etc/shadow is its image's,
    // not the host's: fs-etc-shadow says nothing about the host there).
    let runner = SupervisorctlRunner {
        backend: "docker".into(),
        ..runner
    };
    if docker_usable(&runner, &fx) {
        let ours: Vec<escape::Case> = cases.into_iter().filter(host_exec_case).collect();
        fx.restore();
        check(&runner, &mut fx, &ours, ours.len());
    }
}

/// The host-executed cases all escape without a sandbox (so each proves something)
/// and were held: `check` already failed on any that was not.
fn host_exec_cases_live(rows: &[escape::Row]) {
    let ours: Vec<&escape::Row> = rows
        .iter()
        .filter(|r| r.id.starts_with("fs-git-") || r.id.starts_with("fs-host-exec-"))
        .collect();
    assert!(ours.len() >= 11, "{} host-executed-name cases", ours.len());
    for r in ours {
        assert!(r.live(), "{} is not live here: {:?}", r.id, r.control);
    }
}

/// Whether the docker backend (with python3 in its image) runs here; with
/// TOLLGATE_REQUIRE_DOCKER=1 it must.
fn docker_usable(runner: &SupervisorctlRunner, fx: &Fixture) -> bool {
    let probe = runner.run(fx, "python3 -c 'print(1)'", None);
    if probe.code == Some(0) {
        return true;
    }
    let why = format!(
        "docker backend or an image with python3 unavailable: {}",
        probe.stderr.trim()
    );
    if std::env::var("TOLLGATE_REQUIRE_DOCKER").as_deref() == Ok("1") {
        panic!("{why}");
    }
    eprintln!("skipped: needs docker: {why}");
    false
}

/// A root-owned session writes the workspace as uid 0 on the host: a setuid
/// file left there would be a setuid-root binary for any local user. Every
/// set-id case of the corpus, as uid 0, through the native backend (alone
/// and through a supervisor) and the Docker backend; the harness's host-side
/// walk of W after each run finds no set-id bit and no file capability.
#[test]
fn uid0_session_leaves_no_setid_file_on_either_backend() {
    if !harness::root_or_skip("uid0_session_leaves_no_setid_file_on_either_backend") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let cases: Vec<escape::Case> = cases()
        .into_iter()
        .filter(|c| c.id.starts_with("fs-setid") || c.id.starts_with("fs-setgid"))
        .collect();
    assert_eq!(cases.len(), 8, "the corpus's set-id cases");
    let mut fx = Fixture::new(0, native_limits());
    let runner = SandboxExecRunner {
        exe: sandbox_exec(),
    };
    check(&runner, &mut fx, &cases, 7);
    let l = supervisor_limits();
    let mut fx = Fixture::new(0, l.clone());
    let sup = supervisor(&l);
    for backend in ["native", "docker"] {
        let runner = SupervisorctlRunner {
            supervisorctl: harness::bin("supervisorctl"),
            operator_socket: sup.operator_socket.clone(),
            backend: backend.into(),
        };
        if backend == "docker" && !docker_with_python3(&runner, &mut fx) {
            return;
        }
        check(&runner, &mut fx, &cases, 7);
    }
}

/// Whether the Docker backend runs python3 here (the corpus needs the full
/// image); says why and returns false (or fails, with
/// TOLLGATE_REQUIRE_DOCKER=1) when it does not.
fn docker_with_python3(runner: &SupervisorctlRunner, fx: &mut Fixture) -> bool {
    let probe = runner.run(fx, "python3 -c 'print(1)'", None);
    fx.restore();
    if probe.code == Some(0) {
        return true;
    }
    let why = format!(
        "docker backend or an image with python3 unavailable: {}",
        probe.stderr.trim()
    );
    if std::env::var("TOLLGATE_REQUIRE_DOCKER").as_deref() == Ok("1") {
        panic!("{why}");
    }
    eprintln!("skipped: needs docker: {why}");
    false
}

fn supervisor(l: &Limits) -> Supervisor {
    let config = format!(
        "[sandbox]\nmemory_mb = {}\npids = {}\ntmp_mb = {}\nfsize_mb = {}\nrun_timeout_s = {}\nmax_run_timeout_s = {}\n\n[llm]\nprovider = \"script\"\n",
        l.memory_mb, l.pids, l.tmp_mb, l.disk_mb, l.timeout_s, l.timeout_s
    );
    let mut b = Supervisor::builder().config(&config).sandbox("native");
    // The supervisor holds the secrets; the sandbox must not.
    for (k, v) in escape::secret_env(
        "supervisor-env-canary",
        std::path::Path::new("/nonexistent"),
    ) {
        b = b.env(&k, &v);
    }
    b.start()
}

/// The supervisor's limits: file size set by `[sandbox] fsize_mb` (64 MiB,
/// so a fill case writes at most 320 MiB), a smaller /tmp (so filling it
/// meets the tmpfs's size, not the file size), CPU time bounded by the
/// wall-clock timeout.
fn supervisor_limits() -> Limits {
    Limits {
        pids: 128,
        memory_mb: 512,
        disk_mb: 64,
        tmp_mb: 32,
        nofile: 1024,
        cpu_s: 20,
        timeout_s: 20,
    }
}

#[test]
fn escape_corpus_native_via_supervisorctl() {
    if !harness::root_or_skip("escape_corpus_native_via_supervisorctl") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let l = supervisor_limits();
    let sup = supervisor(&l);
    let runner = SupervisorctlRunner {
        supervisorctl: harness::bin("supervisorctl"),
        operator_socket: sup.operator_socket.clone(),
        backend: "native".into(),
    };
    let mut fx = Fixture::new(UID, l);
    host_exec_cases_live(&check(&runner, &mut fx, &cases(), 30));
}

#[test]
fn escape_corpus_docker_via_supervisorctl() {
    if !harness::root_or_skip("escape_corpus_docker_via_supervisorctl") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let l = supervisor_limits();
    let sup = supervisor(&l);
    let runner = SupervisorctlRunner {
        supervisorctl: harness::bin("supervisorctl"),
        operator_socket: sup.operator_socket.clone(),
        backend: "docker".into(),
    };
    let mut fx = Fixture::new(UID, l);
    // Is the docker backend usable here at all?
    if !docker_with_python3(&runner, &mut fx) {
        return;
    }
    fx.restore();
    host_exec_cases_live(&check(&runner, &mut fx, &cases(), 30));
}
