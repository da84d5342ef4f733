//! git through the routed client shell (docs/THREAT_MODEL.md, "A git
//! directory is read-only by default; split on request", here `git_dir =
//! "split"`): the real Claude Code, its Bash routed into tollgate's
//! native sandbox, commits in a repository the session's owner made, where
//! under the read-only default every commit fails on `.git/index.lock`;
//! and what the host's git obeys stays as it was.
//!
//! Without the clients (or root) the test says `skipped: …`, except under
//! TOLLGATE_REQUIRE_CLIENTS=1 (CI), where it fails.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use tollgate_e2e::clients::{NetNs, Run, Which, clients_or_skip, var_tmp_dir};
use tollgate_e2e::harness::Supervisor;
use tollgate_e2e::model_mock::{ModelMock, Turn};

/// An unprivileged uid for the session.
const USER: u32 = 64124;

/// The git directory split is opt-in (`[sandbox] git_dir`): under the
/// default every commit inside fails on `.git/index.lock`.
const SKIP_MODE: &str = "[session]\napproval_timeout_s = 30\n[clients]\nmode = \"dangerouslySkipPermissions\"\n[llm]\nprovider = \"script\"\n[sandbox]\ngit_dir = \"split\"\n";

fn host_git(ws: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=owner", "-c", "user.email=owner@t.invalid"])
        .args(args)
        .current_dir(ws)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", ws)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .uid(USER)
        .gid(USER)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_commits_through_the_routed_shell() {
    let Some(clients) = clients_or_skip("claude_commits_through_the_routed_shell") else {
        return;
    };
    let sup = Supervisor::builder()
        .config(SKIP_MODE)
        .sandbox("native")
        .start();
    let ws = sup.dirs.workspace("ws", USER);
    host_git(&ws, &["init", "-q", "-b", "main"]);
    std::fs::write(ws.join("a.txt"), "one\n").unwrap();
    std::os::unix::fs::chown(ws.join("a.txt"), Some(USER), Some(USER)).unwrap();
    host_git(&ws, &["add", "a.txt"]);
    host_git(&ws, &["commit", "-qm", "first"]);
    let config = std::fs::read(ws.join(".git/config")).unwrap();

    let ns = NetNs::new();
    let turns = vec![
        Turn::Shell(
            "echo two >> a.txt && git add a.txt && git -c user.name=agent -c user.email=agent@t.invalid commit -qm 'from the agent' && echo COMMITTED && git rev-list --count HEAD 2>&1".into(),
        ),
        Turn::Shell("cp /bin/true hook && mv hook .git/hooks/pre-commit || echo HOOK-REFUSED".into()),
    ];
    let m = ModelMock::serve(Which::Claude, ns.listen(), &turns);
    let scratch = var_tmp_dir("tollgate-e2e-git-");
    let run = Run {
        prompt: "commit the change".to_string(),
        ..Run::claude_routed(&sup, &clients, (USER, &ws), scratch.path(), m.base_url())
    };
    let mut cmd = run.command(&ns);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let told = m.told(0);
    assert!(
        told.contains("COMMITTED"),
        "what the model saw: {told}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Refused by the policy's shell floor or, past it, by the sandbox.
    let told = m.told(1);
    assert!(
        told.contains("HOOK-REFUSED") || told.contains("tollgate:"),
        "what the model saw: {told}"
    );
    assert!(!ws.join(".git/hooks/pre-commit").exists(), "{told}");
    assert_eq!(
        host_git(&ws, &["log", "-1", "--format=%s"]),
        "from the agent\n"
    );
    assert_eq!(std::fs::read(ws.join(".git/config")).unwrap(), config);
    host_git(&ws, &["status"]);
    assert!(
        !ws.join("PWNED").exists(),
        "the host's git ran a planted fsmonitor"
    );
}
