//! The `supervisorctl` binary itself: usage errors, and the adversarial
//! corpus through `supervisorctl policy test` (offline, JSON Lines in and out).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

fn ctl() -> Command {
    Command::new(env!("CARGO_BIN_EXE_supervisorctl"))
}

fn corpus(name: &str) -> Vec<Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/corpus/");
    let text = std::fs::read_to_string(format!("{path}{name}"))
        .unwrap_or_else(|e| panic!("the corpus {path}{name} is needed for this test: {e}"));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Runs `policy test` on input lines; returns one output object per line.
fn policy_test(args: &[&str], lines: &[Value]) -> Vec<Value> {
    let ws = tempfile::tempdir().unwrap();
    let mut child = ctl()
        .args(["policy", "test", "--workspace"])
        .arg(ws.path())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("TOLLGATE_CONFIG")
        .spawn()
        .unwrap();
    let mut input = String::new();
    for l in lines {
        input.push_str(&l.to_string());
        input.push('\n');
    }
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("each output line is JSON"))
        .collect();
    assert_eq!(got.len(), lines.len(), "one output line per input line");
    got
}

#[test]
fn usage_errors_exit_2() {
    let out = ctl().arg("frobnicate").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = ctl().args(["kill"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "kill needs a session or --all");
}

/// `sandbox exec --backend` is parsed by clap: a value it does not know is a
/// usage error naming the choices, never a silent default (docs/INTERFACES.md,
/// `supervisorctl sandbox exec`).
#[test]
fn an_unknown_backend_is_a_usage_error_naming_the_choices() {
    let out = ctl()
        .args(["sandbox", "exec", "--backend", "vm", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("'vm'"), "{err}");
    assert!(err.contains("[possible values: native, docker]"), "{err}");
}

#[test]
fn an_unreachable_supervisor_is_named_with_a_hint() {
    let out = ctl()
        .args(["--socket", "/nonexistent/operator.sock", "status"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("supervisorctl: cannot connect to /nonexistent/operator.sock"),
        "{err}"
    );
    assert!(err.contains("hint"), "{err}");
}

#[test]
fn policy_test_keeps_going_after_bad_lines() {
    let ws = tempfile::tempdir().unwrap();
    let mut child = ctl()
        .args(["policy", "test", "--workspace"])
        .arg(ws.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"not json\n{\"tool\":\"read_file\",\"args\":{\"path\":\"a\"}}\n{\"tool\":\"nope\",\"args\":{}}\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let lines: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines[0]["error"].is_string(), "{}", lines[0]);
    assert_eq!(lines[1]["decision"], "allow");
    assert_eq!(lines[1]["code"], "OK");
    assert_eq!(lines[2]["decision"], "deny");
    assert_eq!(lines[2]["code"], "UNKNOWN_TOOL");
    for key in [
        "decision",
        "code",
        "reason",
        "rule",
        "destructive",
        "consequence",
    ] {
        assert!(
            lines[1].get(key).is_some(),
            "output has {key}: {}",
            lines[1]
        );
    }
}

/// Tallies results per category and fails with the list of misses.
struct Tally(BTreeMap<String, (usize, usize)>, Vec<String>);

impl Tally {
    fn new() -> Tally {
        Tally(BTreeMap::new(), Vec::new())
    }
    fn add(&mut self, category: &str, ok: bool, what: String) {
        let e = self.0.entry(category.to_string()).or_default();
        e.0 += 1;
        if ok {
            e.1 += 1;
        } else {
            self.1.push(what);
        }
    }
    fn finish(self, name: &str) {
        eprintln!("{name} through supervisorctl policy test, per category (passed/total):");
        for (c, (total, ok)) in &self.0 {
            eprintln!("  {c:<22} {ok}/{total}");
        }
        assert!(
            self.1.is_empty(),
            "{} misses:\n{}",
            self.1.len(),
            self.1.join("\n")
        );
    }
}

#[test]
fn the_shell_corpus_gives_the_expected_decisions() {
    let cases = corpus("shell.jsonl");
    let calls = |mode: &str| -> Vec<Value> {
        cases
            .iter()
            .map(|c| json!({"tool": "run_bash", "args": {"command": c["cmd"]}, "mode": mode}))
            .collect()
    };
    let skip = policy_test(&[], &calls("dangerouslySkipPermissions"));
    let default = policy_test(&[], &calls("default"));
    let mut t = Tally::new();
    for ((c, s), d) in cases.iter().zip(&skip).zip(&default) {
        let expect = c["expect"].as_str().unwrap();
        let alt_ok = c["alt_ok"].as_str();
        let sandbox_only = c["sandbox_only"].as_bool().unwrap_or(false);
        let ok = match expect {
            "allow" => s["decision"] == "allow" || alt_ok == Some(s["decision"].as_str().unwrap()),
            // Reading a secret asks as a secret read, not a destructive call.
            "confirm" => {
                sandbox_only
                    || (s["decision"] == "deny"
                        && d["decision"] == "ask"
                        && (d["destructive"] == true || c["category"] == "secret-read"))
            }
            // The gate may let sandbox-only shapes through; the sandbox stops them.
            "block" => s["decision"] == "deny" || sandbox_only,
            other => panic!("unknown expect {other}"),
        };
        t.add(
            c["category"].as_str().unwrap(),
            ok,
            format!(
                "{} ({expect}): skip={} default={} :: {}",
                c["id"], s["decision"], d["decision"], c["cmd"]
            ),
        );
    }
    t.finish("shell.jsonl");
}

#[test]
fn the_ssrf_corpus_gives_the_expected_decisions_offline() {
    let cases = corpus("ssrf.jsonl");
    let calls: Vec<Value> = cases
        .iter()
        .map(|c| json!({"tool": "webfetch", "args": {"url": c["url"]}, "mode": "dangerouslySkipPermissions"}))
        .collect();
    // Offline: names are not resolved (pinned to nothing), so every name is
    // denied, never allowed.
    let got = policy_test(&["--resolve", "pinned.invalid=203.0.113.1"], &calls);
    let mut t = Tally::new();
    for (c, g) in cases.iter().zip(&got) {
        let expect = c["expect"].as_str().unwrap();
        let needs_dns = c["needs_dns"].as_bool().unwrap_or(false);
        let want_allow = expect == "allow" && !needs_dns;
        let ok = if want_allow {
            g["decision"] == "allow"
        } else {
            g["decision"] == "deny"
        };
        t.add(
            c["category"].as_str().unwrap(),
            ok,
            format!(
                "{} ({expect}, needs_dns {needs_dns}): {} :: {}",
                c["id"], g["decision"], c["url"]
            ),
        );
    }
    t.finish("ssrf.jsonl");
}

/// `audit verify` and `audit report` on the log release 0.1.0 wrote
/// (supervisor/audit/tests/fixtures/release-0.1.0) print exactly what that
/// release printed: the typed audit schema reads old logs unchanged.
#[test]
fn audit_commands_print_what_release_0_1_0_printed_for_its_own_log() {
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../audit/tests/fixtures/release-0.1.0");
    let saved = |name: &str| std::fs::read_to_string(fixture.join(name)).unwrap();
    let run = |args: &[&str]| {
        let o = ctl()
            .current_dir(&fixture)
            .env_remove("TOLLGATE_OPERATOR_SOCKET")
            .args(args)
            .output()
            .unwrap();
        let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
        (o.status.code(), text(o.stdout), text(o.stderr))
    };
    let (code, out, err) = run(&["audit", "verify", "audit"]);
    assert_eq!(code, Some(0), "{out}{err}");
    // verify.txt holds stdout, then the note on stderr.
    assert_eq!(format!("{out}{err}"), saved("verify.txt"));
    let (code, out, err) = run(&["audit", "report", "audit"]);
    assert_eq!((code, err.as_str()), (Some(0), ""));
    assert_eq!(out, saved("report.txt"));
    let (code, out, _) = run(&["audit", "report", "--json", "audit"]);
    assert_eq!(code, Some(0));
    assert_eq!(out, saved("report.json"));
}
