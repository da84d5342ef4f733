//! Background jobs (docs/INTERFACES.md, "Background jobs"), on both
//! backends: run_bash with `background: true` starts a job that survives
//! later calls and dies at once when the session is revoked (recorded);
//! `job_output` reads its output since the last read, redacted; `kill_job`
//! ends it; its processes live in the session's cgroup, under the
//! session's pids and memory limits; `supervisorctl sessions` shows it.
//!
//! Each test's sleeps carry a unique duration so parallel tests never see
//! each other's processes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tollgate_e2e::harness::{Supervisor, docker_config, docker_or_skip, root_or_skip};
use tollgate_proto::v1 as pb;

/// Host pids whose command line is exactly `sleep <arg>`.
fn sleeps(arg: &str) -> Vec<i32> {
    let want = format!("sleep\0{arg}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| {
                    c.ends_with(want.as_bytes())
                        && (c.len() == want.len() || c[..c.len() - want.len()].ends_with(b"/"))
                })
                .unwrap_or(false)
        })
        .collect()
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A supervisor on `backend` ("native" or "docker"), or None when the
/// test must skip (not root, no engine).
fn supervisor(test: &str, backend: &str, extra: &str) -> Option<Supervisor> {
    if !root_or_skip(test) {
        return None;
    }
    let b = Supervisor::builder();
    Some(match backend {
        "docker" if !docker_or_skip(test) => return None,
        "docker" => b.config(&docker_config(extra)).sandbox("docker").start(),
        _ => {
            let config = format!(
                "{}\n[sandbox]\n{extra}\n",
                tollgate_e2e::harness::TEST_CONFIG
            );
            b.config(&config).start()
        }
    })
}

async fn open(sup: &Supervisor, name: &str) -> pb::OpenSessionResponse {
    let ws = sup.dirs.workspace(name, 0);
    let mut c = sup.agent_client().await;
    c.open_session(pb::OpenSessionRequest {
        workspace: ws.display().to_string(),
        mode: "dangerouslySkipPermissions".to_string(),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
}

/// Starts `command` as a background job; returns its id.
async fn start_job(sup: &Supervisor, token: &str, command: &str) -> String {
    let r = sup
        .call_tool(
            token,
            "run_bash",
            json!({"command": command, "background": true}),
        )
        .await;
    assert!(r.ok && r.denied.is_none(), "{r:?}");
    let id = r
        .output
        .split_whitespace()
        .find_map(|w| w.strip_prefix("job-"))
        .map(|n| format!("job-{}", n.trim_end_matches(['.', ','])))
        .unwrap_or_else(|| panic!("no job id in {:?}", r.output));
    assert!(r.output.contains("job_output"), "{}", r.output);
    id
}

async fn job_output(sup: &Supervisor, token: &str, id: &str) -> pb::CallToolResponse {
    let r = sup
        .call_tool(token, "job_output", json!({"job_id": id}))
        .await;
    assert!(r.ok && r.denied.is_none(), "{r:?}");
    r
}

/// Reads the job's output until `want` appears; returns everything read.
async fn read_until(sup: &Supervisor, token: &str, id: &str, want: &str) -> String {
    let mut all = String::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !all.contains(want) {
        assert!(Instant::now() < deadline, "no {want:?} in {all:?}");
        all.push_str(&job_output(sup, token, id).await.output);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    all
}

fn sessions_json(sup: &Supervisor) -> Vec<Value> {
    let out = sup.ctl(&["sessions", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

fn job_records(sup: &Supervisor, session: &str, event: &str) -> Vec<Value> {
    sup.session_records(session)
        .into_iter()
        .filter(|e| e["event"] == event)
        .collect()
}

async fn survives_three_calls_and_dies_on_revoke(backend: &str, arg: &str) {
    let test = format!("a_background_job_survives_three_calls_and_dies_on_revoke_{backend}");
    let Some(sup) = supervisor(&test, backend, "") else {
        return;
    };
    let s = open(&sup, "ws").await;
    let id = start_job(&sup, &s.token, &format!("echo started; sleep {arg}")).await;
    wait_for("the job's sleep", || sleeps(arg).len() == 1);
    for n in 0..3 {
        let r = sup
            .call_tool(
                &s.token,
                "run_bash",
                json!({"command": format!("echo call{n}")}),
            )
            .await;
        assert!(r.ok && r.output.contains(&format!("call{n}")), "{r:?}");
        assert_eq!(sleeps(arg).len(), 1, "the job died after call {n}");
    }
    let listed = sessions_json(&sup);
    let jobs = &listed[0]["jobs"];
    assert_eq!(jobs[0]["id"], id.as_str(), "{listed:?}");
    assert_eq!(jobs[0]["state"], "running", "{listed:?}");
    let table = String::from_utf8_lossy(&sup.ctl(&["sessions"]).stdout).into_owned();
    assert!(
        table.contains("JOBS") && table.contains("1 running"),
        "{table}"
    );
    let out = sup.ctl(&["revoke", &s.session_id, "--reason", "end of test"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for("the job's sleep to die", || sleeps(arg).is_empty());
    wait_for("the job's end record", || {
        !job_records(&sup, &s.session_id, "job_ended").is_empty()
    });
    let started = job_records(&sup, &s.session_id, "job_started");
    assert_eq!(started[0]["job_id"], id.as_str(), "{started:?}");
    let ended = job_records(&sup, &s.session_id, "job_ended");
    assert_eq!(ended[0]["how"], "session_ended", "{ended:?}");
    assert!(
        ended[0]["reason"].as_str().unwrap().contains("end of test"),
        "{ended:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_job_survives_three_calls_and_dies_on_revoke_native() {
    survives_three_calls_and_dies_on_revoke("native", "1000611").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_job_survives_three_calls_and_dies_on_revoke_docker() {
    survives_three_calls_and_dies_on_revoke("docker", "1000612").await;
}

async fn output_is_incremental_and_kill_job_ends_it(backend: &str, arg: &str) {
    let test = format!("job_output_is_incremental_redacted_and_kill_job_ends_it_{backend}");
    let Some(sup) = supervisor(&test, backend, "") else {
        return;
    };
    let s = open(&sup, "ws").await;
    // A GitHub-token-shaped secret, built so the command itself does not
    // hold it whole.
    let command = format!(
        "echo first; echo tok=ghp_\"$(printf 'a%.0s' $(seq 36))\"; \
         while [ ! -e go ]; do sleep 0.05; done; echo second; sleep {arg}"
    );
    let id = start_job(&sup, &s.token, &command).await;
    let first = read_until(&sup, &s.token, &id, "first").await;
    let first = if first.contains("tok=") {
        first
    } else {
        first + &read_until(&sup, &s.token, &id, "tok=").await
    };
    assert!(first.contains(&format!("{id} is running")), "{first}");
    assert!(
        first.contains("[REDACTED") && !first.contains("ghp_aaaa"),
        "the secret was not redacted: {first}"
    );
    let r = sup
        .call_tool(&s.token, "run_bash", json!({"command": "touch go"}))
        .await;
    assert!(r.ok, "{r:?}");
    let second = read_until(&sup, &s.token, &id, "second").await;
    assert!(
        !second.contains("first"),
        "job_output repeated what was read: {second}"
    );
    wait_for("the job's sleep", || sleeps(arg).len() == 1);
    let killed = sup
        .call_tool(&s.token, "kill_job", json!({"job_id": id}))
        .await;
    assert!(killed.ok, "{killed:?}");
    assert!(
        killed.output.contains("killed by kill_job"),
        "{}",
        killed.output
    );
    assert!(
        sleeps(arg).is_empty(),
        "kill_job returned before the job was gone"
    );
    let after = job_output(&sup, &s.token, &id).await;
    assert!(
        after.output.contains("killed by kill_job"),
        "{}",
        after.output
    );
    let none = sup
        .call_tool(&s.token, "job_output", json!({"job_id": "job-99"}))
        .await;
    assert!(!none.ok && none.error.contains(&id), "{none:?}");
    let listed = sessions_json(&sup);
    assert_eq!(listed[0]["jobs"][0]["state"], "killed", "{listed:?}");
    wait_for("the job's end record", || {
        !job_records(&sup, &s.session_id, "job_ended").is_empty()
    });
    let ended = job_records(&sup, &s.session_id, "job_ended");
    assert_eq!(ended[0]["how"], "killed", "{ended:?}");
    let checks: Vec<Value> = job_records(&sup, &s.session_id, "permission_check");
    for tool in ["job_output", "kill_job"] {
        assert!(
            checks.iter().any(|c| c["tool"] == tool),
            "no decision recorded for {tool}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_output_is_incremental_redacted_and_kill_job_ends_it_native() {
    output_is_incremental_and_kill_job_ends_it("native", "1000621").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_output_is_incremental_redacted_and_kill_job_ends_it_docker() {
    output_is_incremental_and_kill_job_ends_it("docker", "1000622").await;
}

/// The cgroup directory of `controller` a host process is in, and the
/// name of the controller's limit file there: cgroup v1 (each controller
/// its own hierarchy) or v2.
fn cgroup_of(pid: i32, controller: &str) -> (std::path::PathBuf, &'static str) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let v1 = text.lines().find_map(|l| {
        let (_, rest) = l.split_once(':')?;
        let (ctrls, path) = rest.split_once(':')?;
        ctrls.split(',').any(|c| c == controller).then_some(path)
    });
    let root = std::path::Path::new("/sys/fs/cgroup");
    match v1 {
        Some(rel) => (
            root.join(controller).join(rel.trim_start_matches('/')),
            if controller == "memory" {
                "memory.limit_in_bytes"
            } else {
                "pids.max"
            },
        ),
        None => {
            let rel = text
                .lines()
                .find_map(|l| l.strip_prefix("0::"))
                .unwrap_or_else(|| panic!("no {controller} cgroup in {text}"));
            let max = if controller == "memory" {
                "memory.max"
            } else {
                "pids.max"
            };
            (root.join(rel.trim_start_matches('/')), max)
        }
    }
}

fn read_trim(p: &std::path::Path) -> String {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .trim()
        .to_string()
}

/// The nearest limit of `controller` above a host process: the directory
/// and the limit (a leaf made for one command sits under the session's).
fn limit_above(pid: i32, controller: &str) -> (std::path::PathBuf, String) {
    let (mut dir, file) = cgroup_of(pid, controller);
    loop {
        let limit = std::fs::read_to_string(dir.join(file)).map(|t| t.trim().to_string());
        match limit {
            Ok(l) if l != "max" && l != "9223372036854771712" => return (dir, l),
            _ => assert!(
                dir.pop() && dir.starts_with("/sys/fs/cgroup/"),
                "no {controller} limit above {pid}"
            ),
        }
    }
}

async fn limits_apply(backend: &str, arg: &str) {
    let test = format!("a_background_job_counts_against_the_session_limits_{backend}");
    let Some(sup) = supervisor(&test, backend, "pids = 48\nmemory_mb = 192") else {
        return;
    };
    let s = open(&sup, "ws").await;
    let id = start_job(
        &sup,
        &s.token,
        &format!("for i in 1 2 3 4 5 6 7 8 9 10; do sleep {arg} & done; wait"),
    )
    .await;
    wait_for("the job's ten sleeps", || sleeps(arg).len() == 10);
    // Every one of them is in a cgroup whose limits are the session's
    // (natively the session's own cgroup, on Docker the container's), and
    // counted there.
    for pid in sleeps(arg) {
        let (dir, pids) = limit_above(pid, "pids");
        assert_eq!(pids, "48", "{}", dir.display());
        let current: u64 = read_trim(&dir.join("pids.current")).parse().unwrap();
        assert!(current >= 10, "{}: {current} pids counted", dir.display());
        let (dir, mem) = limit_above(pid, "memory");
        assert_eq!(mem, (192u64 << 20).to_string(), "{}", dir.display());
    }
    let killed = sup
        .call_tool(&s.token, "kill_job", json!({"job_id": id}))
        .await;
    assert!(killed.ok, "{killed:?}");
    assert!(sleeps(arg).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_job_counts_against_the_session_limits_native() {
    limits_apply("native", "1000631").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_job_counts_against_the_session_limits_docker() {
    limits_apply("docker", "1000632").await;
}
