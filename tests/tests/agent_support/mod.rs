//! Shared by the agent end-to-end tests: running the real `agent` binary against
//! a real supervisor with a timeout, and building configs and scripts.

#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tollgate_e2e::harness::{Dirs, Supervisor, bin, root_or_skip};

/// What the agent did.
#[derive(Debug)]
pub struct AgentRun {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl AgentRun {
    /// stdout parsed as the one JSON object of `--output json`.
    pub fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim()).unwrap_or_else(|e| {
            panic!(
                "stdout is not one JSON object ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }
}

/// Waits for a child, killing it (and failing) if it hangs. A guard against a
/// stuck test, not a timing assertion.
pub fn wait_output(mut child: Child, limit: Duration) -> AgentRun {
    let start = Instant::now();
    loop {
        match child.try_wait().expect("wait") {
            Some(_) => break,
            None if start.elapsed() > limit => {
                let _ = child.kill();
                let out = child.wait_with_output().expect("output");
                panic!(
                    "the agent hung for {limit:?}; stdout:\n{}\nstderr:\n{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    let out = child.wait_with_output().expect("output");
    AgentRun {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Starts `agent ARGS` in `cwd` against `sup`, with stdin, stdout and stderr piped.
pub fn spawn_agent(sup: &Supervisor, cwd: &Path, args: &[&str]) -> Child {
    sup.agent_cmd()
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn agent")
}

/// Runs `agent ARGS` in `cwd` with `stdin` then EOF.
pub fn run_agent(sup: &Supervisor, cwd: &Path, args: &[&str], stdin: &str) -> AgentRun {
    let mut child = spawn_agent(sup, cwd, args);
    {
        let mut input = child.stdin.take().expect("stdin");
        input.write_all(stdin.as_bytes()).expect("write stdin");
    }
    wait_output(child, Duration::from_secs(120))
}

/// Writes a script-provider file into the dirs' root and returns its path.
pub fn write_script(dirs: &Dirs, name: &str, turns: &Value) -> PathBuf {
    let p = dirs.root.path().join(name);
    std::fs::write(&p, serde_json::to_vec_pretty(turns).expect("json")).expect("write script");
    p
}

/// A TOML basic string.
pub fn toml_str(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

/// Runs `supervisorctl ARGS` against `sup`; returns (exit code, stdout, stderr).
pub fn ctl(sup: &Supervisor, args: &[&str]) -> (i32, String, String) {
    let out = sup.ctl(args);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `supervisorctl audit verify` on every audit file of `sup`.
pub fn verify_audit(sup: &Supervisor) {
    let files = sup.audit_files("");
    assert!(!files.is_empty(), "no audit files");
    let out = Command::new(bin("supervisorctl"))
        .arg("audit")
        .arg("verify")
        .args(&files)
        .output()
        .expect("run supervisorctl");
    assert!(
        out.status.success(),
        "audit verify failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The session id from the agent's first line (`… session <id>)`).
pub fn session_id(run: &AgentRun) -> String {
    let text = format!("{}\n{}", run.stdout, run.stderr);
    let line = text
        .lines()
        .find(|l| l.starts_with("Agent started in "))
        .unwrap_or_else(|| panic!("no start line in:\n{text}"));
    line.rsplit("session ")
        .next()
        .and_then(|s| s.strip_suffix(')'))
        .expect("session id")
        .to_string()
}

/// Events of a session's audit records, in order.
pub fn events(records: &[Value]) -> Vec<String> {
    records
        .iter()
        .filter_map(|r| r.get("event").and_then(Value::as_str).map(str::to_string))
        .collect()
}

/// True when the test should run (root here; see harness::root_or_skip).
pub fn ready(test: &str) -> bool {
    root_or_skip(test)
}

/// Waits for the first pending approval (via `supervisorctl approvals --json`)
/// and returns it.
pub fn wait_for_approval(sup: &Supervisor) -> Value {
    for _ in 0..1500 {
        let (code, out, _) = ctl(sup, &["approvals", "--json"]);
        if code == 0 {
            let v: Value = serde_json::from_str(out.trim()).unwrap_or(Value::Null);
            let list = v
                .as_array()
                .cloned()
                .or_else(|| v.get("approvals").and_then(Value::as_array).cloned())
                .unwrap_or_default();
            if let Some(a) = list.into_iter().next() {
                return a;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("no pending approval appeared");
}

/// Collects a child's stderr on a thread, so a test can wait for a prompt.
pub struct StderrWatch {
    buf: std::sync::Arc<std::sync::Mutex<String>>,
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl StderrWatch {
    pub fn new(child: &mut Child) -> StderrWatch {
        use std::io::Read;
        let mut err = child.stderr.take().expect("stderr piped");
        let buf = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (b, d) = (buf.clone(), done.clone());
        std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            loop {
                match err.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => b
                        .lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&chunk[..n])),
                }
            }
            d.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        StderrWatch { buf, done }
    }

    pub fn text(&self) -> String {
        self.buf.lock().unwrap().clone()
    }

    /// Waits until stderr contains `needle`; returns everything so far.
    pub fn wait_for(&self, needle: &str) -> String {
        for _ in 0..3000 {
            let t = self.text();
            if t.contains(needle) {
                return t;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("stderr never showed {needle:?}:\n{}", self.text());
    }
}

/// Waits for a child whose stderr is taken by a [`StderrWatch`].
pub fn wait_watched(child: Child, watch: &StderrWatch) -> AgentRun {
    let mut run = wait_output(child, Duration::from_secs(120));
    for _ in 0..500 {
        if watch.done.load(std::sync::atomic::Ordering::SeqCst) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    run.stderr = watch.text();
    run
}
