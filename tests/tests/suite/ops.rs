//! Operating the supervisor like the daemons operators already trust
//! (docs/OPERATIONS.md "Logs", "Checking a config", "Exit codes"): the real
//! `supervisor` binary, its stderr as a pipe, its exit codes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use tollgate_e2e::harness::{Dirs, Supervisor, TEST_CONFIG, authed, bin};
use tollgate_proto::v1 as pb;

/// sysexits.h EX_CONFIG.
const EX_CONFIG: i32 = 78;

/// Everything a stopped supervisor printed (its reader thread may still be
/// taking the last lines off the pipe).
fn stderr_after_stop(mut sup: Supervisor) -> String {
    let status = sup.stop().expect("supervisor was running");
    assert!(status.success(), "supervisor exited {status}");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let log = sup.stderr();
        if log.contains("shutting down") || std::time::Instant::now() > deadline {
            return log;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// No RUST_LOG and no `[log] level`: lifecycle events at info, as plain
/// text without a single ANSI escape (stderr is a pipe, not a terminal),
/// even with a terminal-ish TERM and a JOURNAL_STREAM that names some
/// other file.
#[tokio::test]
async fn logs_on_a_pipe_are_plain_text_with_lifecycle_at_info() {
    let sup = Supervisor::builder()
        .env("RUST_LOG", "")
        .env("TERM", "xterm-256color")
        .env("CLICOLOR_FORCE", "1")
        .env("JOURNAL_STREAM", "1:1")
        .start();
    let ws = sup.dirs.workspace("ws", 0);
    let mut c = sup.agent_client().await;
    let s = c
        .open_session(pb::OpenSessionRequest {
            workspace: ws.display().to_string(),
            client: "e2e".to_string(),
            ..Default::default()
        })
        .await
        .expect("open session")
        .into_inner();
    c.close_session(authed(pb::CloseSessionRequest {}, &s.token))
        .await
        .expect("close session");
    let log = stderr_after_stop(sup);
    assert!(!log.contains('\u{1b}'), "ANSI escape on a pipe:\n{log:?}");
    for event in ["ready", "session opened", "session ended", "shutting down"] {
        assert!(
            log.lines().any(|l| l.contains(" INFO ")
                && l.contains("tollgate::lifecycle")
                && l.contains(event)),
            "no info line for {event:?}:\n{log}"
        );
    }
    // The rest stays at warn: nothing else at info or below.
    let others: Vec<&str> = log
        .lines()
        .filter(|l| {
            (l.contains(" INFO ") || l.contains(" DEBUG ")) && !l.contains("tollgate::lifecycle")
        })
        .collect();
    assert!(others.is_empty(), "{others:#?}");
}

/// `[log] level = "info"` turns everything up to info (the host-address
/// reading at start is an info line outside the lifecycle target);
/// NO_COLOR keeps it plain.
#[test]
fn the_log_level_comes_from_the_config() {
    let sup = Supervisor::builder()
        .config(&format!("{TEST_CONFIG}\n[log]\nlevel = \"info\"\n"))
        .env("RUST_LOG", "")
        .env("NO_COLOR", "1")
        .start();
    let log = stderr_after_stop(sup);
    assert!(
        log.lines()
            .any(|l| l.contains(" INFO ") && l.contains("tollgate_supervisor::")),
        "no info line outside the lifecycle:\n{log}"
    );
    assert!(!log.contains('\u{1b}'), "{log:?}");
}

fn check_config(dirs: &Dirs, toml: &str) -> Output {
    let path = dirs.root.path().join("check.toml");
    std::fs::write(&path, toml).unwrap();
    Command::new(bin("supervisor"))
        .arg("--check-config")
        .arg("--config")
        .arg(&path)
        .arg("--state-dir")
        .arg(&dirs.state)
        .arg("--audit-dir")
        .arg(&dirs.audit)
        .env_remove("TOLLGATE_CONFIG")
        .output()
        .expect("run supervisor --check-config")
}

/// `--check-config`: 0 for a config a start accepts, 78 with the file and
/// line for a typo, 78 naming the rule for a rule that fails its own
/// example, the missing operator group, a missing LLM script; and it starts
/// nothing (no socket appears).
#[test]
fn check_config_exits_0_or_78_with_each_reason() {
    let dirs = Dirs::new();
    let ok = check_config(&dirs, TEST_CONFIG);
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(String::from_utf8_lossy(&ok.stdout).contains("config OK"));
    assert!(!dirs.state.join("agent.sock").exists());

    let typo = check_config(
        &dirs,
        "[session]\napproval_timeout_s = 30\nauto_aprove = true\n",
    );
    let err = String::from_utf8_lossy(&typo.stderr);
    assert_eq!(typo.status.code(), Some(EX_CONFIG), "{err}");
    assert!(
        err.contains("check.toml") && err.contains("line 3") && err.contains("auto_aprove"),
        "{err}"
    );

    let example = check_config(
        &dirs,
        "[policy]\nallow = [{ rule = \"run_bash(git status*)\", match = [\"git push\"] }]\n",
    );
    let err = String::from_utf8_lossy(&example.stderr);
    assert_eq!(example.status.code(), Some(EX_CONFIG), "{err}");
    assert!(err.contains("policy") && err.contains("git push"), "{err}");

    let several = check_config(
        &dirs,
        "[supervisor]\noperator_group = \"tollgate-no-such-group\"\n[llm]\nprovider = \"script\"\nscript = \"/nonexistent/script.json\"\n",
    );
    let err = String::from_utf8_lossy(&several.stderr);
    assert_eq!(several.status.code(), Some(EX_CONFIG), "{err}");
    assert!(err.contains("tollgate-no-such-group"), "{err}");
    assert!(err.contains("/nonexistent/script.json"), "{err}");
}

/// A config error stops a real start with 78 (so the unit's
/// RestartPreventExitStatus=78 applies), before any socket is bound.
#[test]
fn a_config_error_at_start_exits_78() {
    let dirs = Dirs::new();
    for toml in [
        "[sesion]\n",
        "[policy]\nallow = [{ rule = \"run_bash(git status*)\", match = [\"git push\"] }]\n",
        "[supervisor]\noperator_group = \"tollgate-no-such-group\"\n",
    ] {
        let path = dirs.root.path().join("bad.toml");
        std::fs::write(&path, toml).unwrap();
        let mut cmd = Command::new(bin("supervisor"));
        tollgate_launch::configure(&mut cmd, &path, &dirs.state, &dirs.audit);
        let out = cmd.stderr(Stdio::piped()).output().expect("run supervisor");
        assert_eq!(
            out.status.code(),
            Some(EX_CONFIG),
            "{toml}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!dirs.state.join("agent.sock").exists(), "{toml}");
    }
}
