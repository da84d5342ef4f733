//! What a command exposes to the host's git under `[sandbox] git_dir =
//! "split"` (docs/THREAT_MODEL.md, "Open hole"): a repository made inside
//! and added to the top repository's index as a submodule is told in the
//! command's `sandbox: ` block and recorded as `git_exposed`, once per
//! session; a command that exposes nothing is told nothing. Native
//! backend, as root.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

use serde_json::json;
use tollgate_e2e::harness::{Supervisor, TEST_CONFIG, authed, root_or_skip};
use tollgate_proto::v1 as pb;

/// Makes a repository inside, whose config runs a program on the host's
/// next `git status` (core.fsmonitor), and adds it to the top's index as a
/// submodule. A script, so the shell policy does not refuse the config
/// write before the sandbox is reached.
const PLANT: &str = r#"set -e
mkdir n && cd n && git init -q
echo x > x && git add x && git -c user.name=a -c user.email=a@t.invalid commit -qm n
git config core.fsmonitor 'touch ../PWNED; false'
cd .. && git add n 2>/dev/null
echo planted
"#;

fn host_git(ws: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(["-c", "user.name=owner", "-c", "user.email=owner@t.invalid"])
        .args(args)
        .current_dir(ws)
        .env("HOME", ws)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

async fn run_bash(sup: &Supervisor, token: &str, call_id: &str, command: &str) -> String {
    let r = sup
        .agent_client()
        .await
        .call_tool(authed(
            pb::CallToolRequest {
                call_id: call_id.to_string(),
                tool: "run_bash".to_string(),
                arguments_json: json!({ "command": command }).to_string(),
            },
            token,
        ))
        .await
        .expect("CallTool")
        .into_inner();
    assert!(r.ok && r.denied.is_none(), "{r:?}");
    r.output
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submodule_made_inside_is_told_and_recorded_once() {
    if !root_or_skip("a_submodule_made_inside_is_told_and_recorded_once") {
        return;
    }
    let config = format!("{TEST_CONFIG}\n[sandbox]\ngit_dir = \"split\"\n");
    let sup = Supervisor::builder().config(&config).start();
    let ws = sup.dirs.workspace("gitexp", 0);
    host_git(&ws, &["init", "-q", "-b", "main"]);
    std::fs::write(ws.join("a"), "a\n").unwrap();
    host_git(&ws, &["add", "a"]);
    host_git(&ws, &["commit", "-qm", "a"]);
    std::fs::write(ws.join("plant.sh"), PLANT).unwrap();
    let s = sup.open_skip_session(&ws).await;

    let quiet = run_bash(&sup, &s.token, "quiet", "git status --short").await;
    assert!(!quiet.contains("sandbox: "), "{quiet}");

    let out = run_bash(&sup, &s.token, "plant", "bash ./plant.sh").await;
    assert!(out.contains("planted"), "{out}");
    let line = out
        .lines()
        .find(|l| l.starts_with("sandbox: n is now a submodule"))
        .unwrap_or_else(|| panic!("no line for n: {out}"));
    assert!(line.contains("n/.git/config"), "{line}");

    // Not `git status`: inside, that would run n's fsmonitor (in the
    // sandbox, harmlessly) and make the check below prove nothing.
    let again = run_bash(&sup, &s.token, "again", "ls n").await;
    assert!(!again.contains("sandbox: "), "told twice: {again}");

    let records: Vec<_> = sup
        .session_records(&s.session_id)
        .into_iter()
        .filter(|r| r["event"] == "git_exposed")
        .collect();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["call_id"], "plant");
    assert_eq!(records[0]["path"], "n");
    assert!(!ws.join("PWNED").exists(), "nothing ran n's git yet");
}
