//! The `supervisor` binary's command line: usage errors exit 2, bad configs
//! and unusable directories exit 1 naming the object, the sandbox helper
//! entry refuses to run by hand. (Running supervisors are tested end to end
//! in tests/.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

fn supervisor() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_supervisor"));
    c.env_remove("TOLLGATE_CONFIG");
    c
}

#[test]
fn help_names_the_flags() {
    let out = supervisor().arg("--help").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for flag in ["--config", "--state-dir", "--audit-dir", "--sandbox"] {
        assert!(text.contains(flag), "{flag} missing from --help:\n{text}");
    }
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(
        supervisor().arg("--bogus").output().unwrap().status.code(),
        Some(2)
    );
    assert_eq!(
        supervisor()
            .args(["--sandbox", "vm"])
            .output()
            .unwrap()
            .status
            .code(),
        Some(2)
    );
}

/// `--sandbox` is parsed by clap: the error names the choices.
#[test]
fn an_unknown_sandbox_names_the_choices() {
    let out = supervisor().args(["--sandbox", "vm"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("[possible values: native, docker]"), "{err}");
}

#[test]
fn a_missing_config_file_is_named() {
    let out = supervisor()
        .args(["--config", "/nonexistent/tollgate.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("supervisor: cannot read config /nonexistent/tollgate.toml"),
        "{err}"
    );
}

#[test]
fn a_bad_rule_example_refuses_the_config() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.toml");
    std::fs::write(
        &config,
        "[policy]\nallow = [{ rule = \"run_bash(git status*)\", match = [\"git push\"] }]\n",
    )
    .unwrap();
    let out = supervisor()
        .arg("--config")
        .arg(&config)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .arg("--audit-dir")
        .arg(dir.path().join("audit"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("git status*") && err.contains("git push"),
        "{err}"
    );
}

#[test]
fn the_sandbox_helper_refuses_to_run_by_hand() {
    let out = supervisor().arg("__sandbox-init").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("started by the supervisor"));
}
