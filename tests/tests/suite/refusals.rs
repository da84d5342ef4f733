//! Refusals by the walls, attributed (docs/THREAT_MODEL.md, "Refusals,
//! attributed"; docs/INTERFACES.md, "Additions: refusals by the walls,
//! attributed"): a run_bash result ends with its own `sandbox: ` lines,
//! one per wall that stopped it (Landlock, the seccomp filter, the
//! read-only root), and each is a `sandbox_denial` record of its call,
//! exactly, under many concurrent calls across sessions, and for a
//! background job. Native backend, real kernel audit (turned on).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use tollgate_e2e::harness::{Supervisor, TEST_CONFIG, authed, root_or_skip};
use tollgate_proto::v1 as pb;
use tollgate_proto::v1::agent_service_client::AgentServiceClient;
use tonic::transport::Channel;

fn supervisor(test: &str) -> Option<Supervisor> {
    if !root_or_skip(test) {
        return None;
    }
    let config = format!("{TEST_CONFIG}\n[sandbox]\nattribute_refusals = \"on\"\n");
    Some(Supervisor::builder().config(&config).start())
}

/// Writes `script` into the session `name`'s workspace as `file`: the
/// commands below do on purpose what the shell policy refuses to run when
/// it can see it (a credential path, a write outside the workspace), so
/// the walls, not the policy, are what stops them.
fn script(sup: &Supervisor, name: &str, file: &str, script: &str) {
    std::fs::write(sup.dirs.workspace(name, 0).join(file), script).unwrap();
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

/// run_bash with a call id of the test's own (the records name it).
async fn run_bash(
    sup: &Supervisor,
    token: &str,
    call_id: &str,
    args: Value,
) -> pb::CallToolResponse {
    run_bash_on(sup.agent_client().await, token, call_id, args).await
}

/// [`run_bash`] on a connection of the caller's (concurrent calls share
/// one: a uid holds a bounded number).
async fn run_bash_on(
    mut c: AgentServiceClient<Channel>,
    token: &str,
    call_id: &str,
    args: Value,
) -> pb::CallToolResponse {
    let r = c
        .call_tool(authed(
            pb::CallToolRequest {
                call_id: call_id.to_string(),
                tool: "run_bash".to_string(),
                arguments_json: args.to_string(),
            },
            token,
        ))
        .await
        .expect("CallTool")
        .into_inner();
    assert!(r.ok && r.denied.is_none(), "{r:?}");
    r
}

fn sandbox_lines(output: &str) -> Vec<&str> {
    output
        .lines()
        .filter(|l| l.starts_with("sandbox: "))
        .collect()
}

fn denials(sup: &Supervisor, session: &str, call_id: &str) -> Vec<Value> {
    sup.session_records(session)
        .into_iter()
        .filter(|r| r["event"] == "sandbox_denial" && r["call_id"] == call_id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_wall_says_what_it_refused_in_the_result_and_the_audit_log() {
    let Some(sup) = supervisor("each_wall_says_what_it_refused_in_the_result_and_the_audit_log")
    else {
        return;
    };
    let s = open(&sup, "walls").await;
    script(
        &sup,
        "walls",
        "walls.sh",
        "cat /etc/shadow; unshare -U true; : > /usr/tg-walls; \
         : > \"/usr/$(printf 'a\\033[31m\\377')\"; true\n",
    );
    let r = run_bash(
        &sup,
        &s.token,
        "walls-1",
        json!({"command": "bash ./walls.sh"}),
    )
    .await;
    let lines = sandbox_lines(&r.output);
    let has = |want: &str| lines.iter().any(|l| l.starts_with(want));
    assert!(
        has("sandbox: denied system call unshare to unshare (new namespaces"),
        "{}",
        r.output
    );
    assert!(
        has(
            "sandbox: denied write /usr/tg-walls (the sandbox root is read-only; write inside the workspace"
        ),
        "{}",
        r.output
    );
    // The program's own message is raw; the sandbox's line is escaped.
    assert!(lines.iter().all(|l| !l.contains('\u{1b}')), "{lines:?}");
    assert!(has("sandbox: denied write /usr/a\\u{1b}[31m"), "{lines:?}");
    let recs = denials(&sup, &s.session_id, "walls-1");
    let rec = |access: &str, path: &str| {
        recs.iter()
            .any(|d| d["access"] == access && d["path"] == path && d["count"] == 1)
    };
    assert!(rec("system call", "unshare"), "{recs:?}");
    assert!(
        recs.iter()
            .any(|d| d["rule"] == "syscall" && d["program"] == "unshare")
    );
    // A clean command gets no block.
    let r = run_bash(
        &sup,
        &s.token,
        "walls-2",
        json!({"command": "ls >/dev/null"}),
    )
    .await;
    assert!(sandbox_lines(&r.output).is_empty(), "{}", r.output);
}

/// 10 sessions x 10 concurrent calls; call n (1..=100) makes n refused
/// ptrace calls and writes /usr/tg-n: each result names exactly its own
/// count and path, and nothing of any other call.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_refusal_is_its_own_calls_under_a_hundred_concurrent_calls_in_ten_sessions() {
    let Some(sup) = supervisor(
        "every_refusal_is_its_own_calls_under_a_hundred_concurrent_calls_in_ten_sessions",
    ) else {
        return;
    };
    let mut sessions = Vec::new();
    for s in 0..10 {
        let client = sup.agent_client().await;
        sessions.push((open(&sup, &format!("conc{s}")).await, client));
        for i in 0..10 {
            let n = s * 10 + i + 1;
            script(
                &sup,
                &format!("conc{s}"),
                &format!("c{n}.sh"),
                &format!("perl -e 'syscall(101, 0, 0, 0, 0) for 1..{n}'; : > /usr/tg-{n}; true\n"),
            );
        }
    }
    let mut runs = Vec::new();
    for (s, (sess, client)) in sessions.iter().enumerate() {
        for i in 0..10 {
            let n = s * 10 + i + 1;
            let (client, token) = (client.clone(), sess.token.clone());
            runs.push(tokio::spawn(async move {
                let cmd = format!("bash ./c{n}.sh");
                let r =
                    run_bash_on(client, &token, &format!("c{n}"), json!({ "command": cmd })).await;
                (n, r.output)
            }));
        }
    }
    for run in runs {
        let (n, output) = run.await.unwrap();
        let lines = sandbox_lines(&output);
        let ptrace = if n == 1 {
            "sandbox: denied system call ptrace to perl (".to_string()
        } else {
            format!("sandbox: denied system call ptrace to perl, {n} times (")
        };
        assert!(lines[0].starts_with(&ptrace), "call {n}: {output}");
        // The read-only root's line, read from the command's own message,
        // is its own path when the message is there.
        let erofs = format!("sandbox: denied write /usr/tg-{n} (");
        assert!(
            lines[1..].iter().all(|l| l.starts_with(&erofs)),
            "call {n}: {output}"
        );
        assert!(lines.len() <= 2, "call {n}: {output}");
    }
    for (s, (sess, _)) in sessions.iter().enumerate() {
        for i in 0..10 {
            let n = s * 10 + i + 1;
            let recs = denials(&sup, &sess.session_id, &format!("c{n}"));
            assert!(
                recs.iter()
                    .any(|d| d["path"] == "ptrace" && d["count"] == n),
                "call {n}: {recs:?}"
            );
        }
    }
}

/// A background job's refusals are the call's that started it: recorded
/// under its call id, never in a later call's result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_jobs_refusals_are_the_call_that_started_it() {
    let Some(sup) = supervisor("a_background_jobs_refusals_are_the_call_that_started_it") else {
        return;
    };
    let s = open(&sup, "bg").await;
    script(
        &sup,
        "bg",
        "bg.sh",
        "sleep 1; perl -e 'syscall(101, 0, 0, 0, 0) for 1..7'\n",
    );
    let start = json!({"command": "bash ./bg.sh", "background": true});
    run_bash(&sup, &s.token, "bg-start", start).await;
    // While the job refuses, other calls run: none gets its refusals.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut k = 0;
    while denials(&sup, &s.session_id, "bg-start").is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "no record of the job's refusals"
        );
        k += 1;
        let r = run_bash(
            &sup,
            &s.token,
            &format!("bg-other-{k}"),
            json!({"command": "sleep 0.2"}),
        )
        .await;
        assert!(sandbox_lines(&r.output).is_empty(), "{}", r.output);
    }
    let recs = denials(&sup, &s.session_id, "bg-start");
    assert!(
        recs.iter()
            .any(|d| d["path"] == "ptrace" && d["count"] == 7),
        "{recs:?}"
    );
    for j in 1..=k {
        assert!(denials(&sup, &s.session_id, &format!("bg-other-{j}")).is_empty());
    }
}
