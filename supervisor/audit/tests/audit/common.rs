//! Helpers shared by the integration tests.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// A fresh temporary directory (on the same disk as /tmp).
pub fn tmp() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("tollgate-audit-test-")
        .tempdir()
        .unwrap()
}

/// COMMON.md rule 6: tests that need root skip (printing why) unless
/// TOLLGATE_REQUIRE_ROOT=1, where they fail instead.
pub fn have_root() -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    if std::env::var("TOLLGATE_REQUIRE_ROOT").as_deref() == Ok("1") {
        panic!("this test needs root and TOLLGATE_REQUIRE_ROOT=1");
    }
    eprintln!("skipped: needs root");
    false
}

/// The file's lines, without their newlines.
pub fn read_lines(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "file does not end in a newline"
    );
    text.lines().map(str::to_string).collect()
}

pub fn write_lines(path: &Path, lines: &[String]) {
    let mut text = lines.join("\n");
    if !lines.is_empty() {
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
}

pub fn parse(line: &str) -> serde_json::Map<String, Value> {
    serde_json::from_str(line).unwrap()
}

pub fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}
