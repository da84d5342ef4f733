//! The bench binary's own command line. Being an integration test, it also
//! makes `cargo test` build `tollgate-bench`, which `supervisorctl bench`
//! runs (docs/INTERFACES.md) and the end-to-end tests drive through it.

use std::process::Command;

fn bench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tollgate-bench"))
}

#[test]
fn help_names_the_documented_flags() {
    let out = bench().arg("--help").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--json",
        "--samples",
        "--quick",
        "--container-samples",
        "--dir",
        "--image",
        "--no-docker",
        "--audit-sync",
        "--keep",
    ] {
        assert!(text.contains(flag), "{flag} missing from:\n{text}");
    }
}

#[test]
fn an_unknown_flag_is_a_usage_error() {
    let out = bench().arg("--fast").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--fast"), "{err}");
}
