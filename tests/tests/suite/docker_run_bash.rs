//! run_bash through the whole path on the Docker backend (docs/OPERATIONS.md,
//! "The Docker sandbox"): 50
//! concurrent calls in one session, each through the container's resident
//! exec agent, all complete with their own output; and `supervisorctl
//! doctor` shows the agent running.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use tollgate_e2e::harness::{Supervisor, docker_config, docker_or_skip, root_or_skip};
use tollgate_proto::v1 as pb;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_run_bash_calls_in_one_docker_session_keep_their_output_apart() {
    let test = "fifty_concurrent_run_bash_calls_in_one_docker_session_keep_their_output_apart";
    if !root_or_skip(test) || !docker_or_skip(test) {
        return;
    }
    let sup = Supervisor::builder()
        .config(&docker_config("pids = 512\nmemory_mb = 512"))
        .sandbox("docker")
        .start();
    let ws = sup.dirs.workspace("ws", 0);
    let s = sup.open_skip_session(&ws).await;
    // The first call makes the container.
    let r = sup
        .call_tool(&s.token, "run_bash", serde_json::json!({"command": "true"}))
        .await;
    assert!(r.ok && r.exit_code == Some(0), "{r:?}");
    let lines = 100;
    let mut calls = Vec::new();
    for n in 0..50 {
        let socket = sup.agent_socket.clone();
        let token = s.token.clone();
        calls.push(tokio::spawn(async move {
            let command = format!(
                "i=0; while [ $i -lt {lines} ]; do echo \"call{n}-$i\"; i=$((i+1)); done; \
                 echo \"call{n} stderr\" >&2; exit $(({n} % 5))"
            );
            let mut c = tollgate_e2e::harness::agent_client(&socket).await;
            let r = c
                .call_tool(tollgate_e2e::harness::authed(
                    pb::CallToolRequest {
                        call_id: format!("c{n}"),
                        tool: "run_bash".to_string(),
                        arguments_json: serde_json::json!({ "command": command }).to_string(),
                    },
                    &token,
                ))
                .await
                .unwrap()
                .into_inner();
            (n, r)
        }));
    }
    for call in calls {
        let (n, r) = call.await.unwrap();
        assert!(r.ok, "call {n}: {r:?}");
        assert_eq!(r.exit_code, Some(n % 5), "call {n}");
        let mut want: String = (0..lines).map(|i| format!("call{n}-{i}\n")).collect();
        want.push_str(&format!("call{n} stderr\n"));
        assert_eq!(r.output, want, "call {n}");
    }
}

#[test]
fn doctor_shows_the_resident_agent_running() {
    let test = "doctor_shows_the_resident_agent_running";
    if !root_or_skip(test) || !docker_or_skip(test) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("supervisor.toml");
    std::fs::write(&config, docker_config("backend = \"docker\"")).unwrap();
    let out = std::process::Command::new(tollgate_e2e::harness::bin("supervisorctl"))
        .arg("doctor")
        .arg("--socket")
        .arg(dir.path().join("operator.sock"))
        .env("TOLLGATE_CONFIG", &config)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = |name: &str| {
        text.lines()
            .find(|l| l.contains(&format!(" {name}: ")))
            .unwrap_or_else(|| panic!("no {name} line:\n{text}"))
            .to_string()
    };
    let agent = line("docker exec agent");
    assert!(
        agent.starts_with("ok ") && agent.contains("static"),
        "{agent}"
    );
    let runs = line("docker resident agent");
    assert!(
        runs.starts_with("ok ")
            && runs.contains("runs: pid 1 uid=65534 gid=65534 NoNewPrivs=1 Seccomp=2 caps=0"),
        "{runs}"
    );
}
