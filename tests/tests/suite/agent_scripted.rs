//! End to end: the real `agent` against the real supervisor with the script
//! provider. A session that reads, asks to write (denied on EOF), runs a command
//! in the sandbox and hits the turn cap; `agent call`; and `agent demo`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::process::Stdio;
use std::time::Duration;

use agent_support::*;
use serde_json::{Value, json};
use tollgate_e2e::harness::{Dirs, Supervisor, bin};

const README: &str = "# project\n\nThe original readme.\n";

fn start(dirs: Dirs, script: &std::path::Path, extra: &str) -> Supervisor {
    let config = format!(
        "[session]\napproval_timeout_s = 30\n\n[llm]\nprovider = \"script\"\nscript = {}\n\n[policy]\nallow = [\"run_bash(echo *)\", \"run_bash(sleep *)\"]\n{extra}",
        toml_str(&script.to_string_lossy())
    );
    Supervisor::builder()
        .config(&config)
        .sandbox("native")
        .dirs(dirs)
        .start()
}

#[test]
fn scripted_session_reads_is_denied_on_eof_runs_a_command_and_hits_the_turn_cap() {
    if !ready("scripted_session") {
        return;
    }
    let dirs = Dirs::new();
    let ws = dirs.workspace("ws", nix::unistd::getuid().as_raw());
    std::fs::write(ws.join("README.md"), README).unwrap();
    let script = write_script(
        &dirs,
        "turns.json",
        &json!([
            {"content": "reading", "tool_calls": [{"name": "read_file", "arguments": {"path": "README.md"}}]},
            {"content": "rewriting", "tool_calls": [{"name": "write_file", "arguments": {"path": "README.md", "content": "# rewritten\n"}}]},
            {"content": "running", "tool_calls": [{"name": "run_bash", "arguments": {"command": "echo hello from the sandbox"}}]},
            {"tool_calls": [{"name": "todo_list", "arguments": {}}]},
            // The fifth Chat is the summary request after the cap of 4 turns.
            {"content": "Summary: read the readme, was refused the rewrite, ran echo."}
        ]),
    );
    let sup = start(dirs, &script, "");
    let run = run_agent(
        &sup,
        &ws,
        &[
            "-p",
            "tidy the readme",
            "--max-turns",
            "4",
            "--output",
            "json",
        ],
        "",
    );
    // The turn cap ends a -p run with exit 1 after the summary.
    assert_eq!(
        run.code, 1,
        "stdout:\n{}\nstderr:\n{}",
        run.stdout, run.stderr
    );
    let v = run.json();
    assert_eq!(v["stop_reason"], "turn_cap");
    assert_eq!(
        v["final_text"],
        "Summary: read the readme, was refused the rewrite, ran echo."
    );
    let calls = v["tool_calls"].as_array().unwrap();
    let summary: Vec<(&str, &str)> = calls
        .iter()
        .map(|c| (c["tool"].as_str().unwrap(), c["outcome"].as_str().unwrap()))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("read_file", "ok"),
            ("write_file", "denied"),
            ("run_bash", "ok"),
            ("todo_list", "ok"),
        ]
    );
    assert_eq!(calls[1]["denied"]["code"], "USER_DENIED");
    assert!(
        calls[1]["denied"]["reason"]
            .as_str()
            .unwrap()
            .starts_with("user denied: "),
        "{}",
        calls[1]
    );
    assert_eq!(calls[2]["exit_code"], 0);
    // The prompt was shown on stderr, consequence first, and EOF denied it.
    assert!(run.stderr.contains("⚠ About to "), "{}", run.stderr);
    assert!(run.stderr.contains("(no input: denied)"));
    assert!(run.stderr.contains("turn limit reached (4 turns)"));
    // The workspace is untouched.
    assert_eq!(
        std::fs::read_to_string(ws.join("README.md")).unwrap(),
        README
    );

    let session = v["session"].as_str().unwrap().to_string();
    let records = sup.session_records(&session);
    let ev = events(&records);
    for needed in [
        "session_opened",
        "permission_check",
        "approval_requested",
        "approval_decided",
        "tool_result",
        "llm_request",
        "llm_response",
        "iteration_cap_hit",
        "session_closed",
    ] {
        assert!(ev.iter().any(|e| e == needed), "no {needed} in {ev:?}");
    }
    let cap = records
        .iter()
        .find(|r| r["event"] == "iteration_cap_hit")
        .unwrap();
    assert_eq!(cap["turns"], 4);
    let run_result = records
        .iter()
        .find(|r| r["event"] == "tool_result" && r.to_string().contains("run_bash"));
    assert!(
        run_result.is_some(),
        "no run_bash tool_result in {records:?}"
    );
    drop(sup);
}

#[test]
fn interactive_session_prints_the_start_line_and_a_summary() {
    if !ready("interactive_session") {
        return;
    }
    let dirs = Dirs::new();
    let ws = dirs.workspace("ws", nix::unistd::getuid().as_raw());
    std::fs::write(ws.join("README.md"), README).unwrap();
    let script = write_script(
        &dirs,
        "turns.json",
        &json!([
            {"content": "reading", "tool_calls": [{"name": "read_file", "arguments": {"path": "README.md"}}]},
            {"content": "The readme says: the original readme."}
        ]),
    );
    let sup = start(dirs, &script, "");
    let run = run_agent(&sup, &ws, &[], "what does the readme say?\n");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let first = run.stdout.lines().next().unwrap();
    let id = session_id(&run);
    assert_eq!(
        first,
        format!(
            "Agent started in 'default' mode (working dir: {}, session {id})",
            ws.display()
        )
    );
    assert!(run.stdout.contains("▸ read_file {\"path\":\"README.md\"}"));
    assert!(run.stdout.contains("The readme says: the original readme."));
    assert!(
        run.stderr.contains(&format!(
            "agent: session {id} closed: 1 tool call (0 denied, 0 failed), 2 model calls"
        )),
        "{}",
        run.stderr
    );
    let records = sup.session_records(&id);
    assert_eq!(
        events(&records).last().map(String::as_str),
        Some("session_closed")
    );
}

#[test]
fn agent_call_prints_one_json_object() {
    if !ready("agent_call") {
        return;
    }
    let dirs = Dirs::new();
    let ws = dirs.workspace("ws", nix::unistd::getuid().as_raw());
    std::fs::write(ws.join("README.md"), README).unwrap();
    let script = write_script(&dirs, "turns.json", &json!([]));
    let sup = start(dirs, &script, "");
    let wsl = ws.to_str().unwrap();

    let run = run_agent(
        &sup,
        &ws,
        &[
            "call",
            "read_file",
            r#"{"path":"README.md"}"#,
            "--workspace",
            wsl,
        ],
        "",
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let v = run.json();
    assert_eq!(v["ok"], true);
    assert!(
        v["output"]
            .as_str()
            .unwrap()
            .contains("The original readme.")
    );
    assert_eq!(v["truncated"], false);
    assert!(v.get("exit_code").is_none());

    let run = run_agent(
        &sup,
        &ws,
        &["call", "run_bash", r#"{"command":"echo hi"}"#],
        "",
    );
    assert_eq!(run.code, 0, "{}", run.stderr);
    let v = run.json();
    assert_eq!(v["ok"], true);
    assert_eq!(v["exit_code"], 0);
    assert!(v["output"].as_str().unwrap().contains("hi"));

    // Denied by the floor: a path outside the workspace.
    let run = run_agent(
        &sup,
        &ws,
        &["call", "read_file", r#"{"path":"../../../etc/shadow"}"#],
        "",
    );
    assert_eq!(run.code, 3, "{}", run.stderr);
    let v = run.json();
    assert_eq!(v["ok"], false);
    assert_eq!(v["denied"]["code"], "POLICY_DENIED");
    assert!(!v["denied"]["reason"].as_str().unwrap().is_empty());

    // A write in plan mode is denied by the mode.
    let run = run_agent(
        &sup,
        &ws,
        &[
            "call",
            "write_file",
            r#"{"path":"x.txt","content":"x"}"#,
            "--mode",
            "plan",
        ],
        "",
    );
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert_eq!(run.json()["ok"], false);
    assert!(!ws.join("x.txt").exists());

    // The tool ran but failed.
    let run = run_agent(
        &sup,
        &ws,
        &["call", "read_file", r#"{"path":"missing.txt"}"#],
        "",
    );
    assert_eq!(run.code, 1, "{}", run.stderr);
    let v = run.json();
    assert_eq!(v["ok"], false);
    assert!(v["error"].as_str().is_some());

    // An unknown tool is a denial.
    let run = run_agent(&sup, &ws, &["call", "format_disk", "{}"], "");
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert_eq!(run.json()["denied"]["code"], "UNKNOWN_TOOL");
}

#[test]
fn agent_call_waits_for_an_operator_when_there_is_no_terminal() {
    if !ready("agent_call_operator") {
        return;
    }
    let dirs = Dirs::new();
    let ws = dirs.workspace("ws", nix::unistd::getuid().as_raw());
    let script = write_script(&dirs, "turns.json", &json!([]));
    let sup = start(dirs, &script, "");
    let child = spawn_agent(
        &sup,
        &ws,
        &[
            "call",
            "write_file",
            r#"{"path":"notes.md","content":"hello\n"}"#,
        ],
    );
    // Wait for the approval to be pending, then approve it as the operator.
    let mut id = String::new();
    for _ in 0..500 {
        let (code, out, _) = ctl(&sup, &["approvals", "--json"]);
        if code == 0 {
            let v: Value = serde_json::from_str(out.trim()).unwrap_or(Value::Null);
            let list = v
                .as_array()
                .cloned()
                .or_else(|| v.get("approvals").and_then(Value::as_array).cloned())
                .unwrap_or_default();
            if let Some(a) = list.first() {
                id = a["id"].as_str().unwrap().to_string();
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!id.is_empty(), "no pending approval appeared");
    let (code, out, err) = ctl(&sup, &["approve", &id]);
    assert_eq!(code, 0, "{out}{err}");
    let run = wait_output(child, Duration::from_secs(60));
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.json()["ok"], true);
    assert!(
        run.stderr
            .contains(&format!("approval {id} is waiting for an operator"))
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("notes.md")).unwrap(),
        "hello\n"
    );
}

#[test]
fn demo_runs_shows_everything_and_leaves_nothing_behind() {
    if !ready("agent_demo") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(bin("agent"))
        .arg("demo")
        .env("TMPDIR", tmp.path())
        .env_remove("TOLLGATE_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let run = wait_output(out, Duration::from_secs(120));
    let all = format!("{}\n{}", run.stdout, run.stderr);
    assert_eq!(run.code, 0, "{all}");
    for needed in [
        "Agent started in 'default' mode",
        "▸ read_file",
        "demo: approving write_file",
        "demo: approving run_bash: run `sh probe.sh`",
        "│ == cat /etc/shadow",
        "demo: denying write_file",
        "the model is told: user denied: ",
        "▸ run_bash {\"command\":\"curl",
        "169.254.169.254",
        "== audit report",
        "== audit chain",
        "demo: done in",
    ] {
        assert!(all.contains(needed), "missing {needed:?} in:\n{all}");
    }
    // The blocked curl and the blocked metadata fetch reached the model as denials.
    let denials = all
        .matches("denied; the model is told: Permission denied:")
        .count();
    assert!(denials >= 2, "{all}");
    // Inside the sandbox the probe could not read /etc/shadow (no "root:" line).
    assert!(
        !all.lines()
            .any(|l| l.trim_start_matches(['│', ' ']).starts_with("root:")),
        "{all}"
    );
    // The audit chain verified.
    assert!(all.contains(" records"), "{all}");
    // Nothing is left: the temp dir is empty and the supervisor is gone.
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    let pid: u32 = run
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("demo: started the supervisor (pid "))
        .and_then(|r| r.strip_suffix(')'))
        .and_then(|p| p.parse().ok())
        .expect("supervisor pid line");
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the demo's supervisor (pid {pid}) is still running"
    );
}

/// Processes whose command line is exactly `argv`.
fn pids_running(argv: &[&str]) -> Vec<u32> {
    let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0u8])).collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want))
        .collect()
}

#[test]
fn ctrl_c_aborts_the_turn_and_the_supervisor_kills_the_tool() {
    if !ready("ctrl_c_kills_tool") {
        return;
    }
    let dirs = Dirs::new();
    let ws = dirs.workspace("ws", nix::unistd::getuid().as_raw());
    // A duration no other process on the machine will be sleeping for.
    let secs = format!("{}", 7_000 + std::process::id() % 1_000);
    let script = write_script(
        &dirs,
        "turns.json",
        &json!([
            {"tool_calls": [{"name": "run_bash", "arguments": {"command": format!("sleep {secs}")}}]},
            {"content": "never reached"}
        ]),
    );
    let sup = start(dirs, &script, "");
    let mut child = spawn_agent(&sup, &ws, &["-p", "sleep a long time"]);
    let watch = StderrWatch::new(&mut child);
    let stdin = child.stdin.take().unwrap();
    let mut sleeping = Vec::new();
    for _ in 0..1500 {
        sleeping = pids_running(&["sleep", &secs]);
        if !sleeping.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !sleeping.is_empty(),
        "the sandboxed sleep never started:\n{}",
        watch.text()
    );
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let run = wait_watched(child, &watch);
    drop(stdin);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("aborted (Ctrl-C): the turn was stopped"),
        "{}",
        run.stderr
    );
    // The supervisor killed the tool.
    let mut gone = false;
    for _ in 0..1500 {
        if sleeping
            .iter()
            .all(|p| !std::path::Path::new(&format!("/proc/{p}")).exists())
        {
            gone = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(gone, "the sandboxed sleep survived the Ctrl-C");
    let id = session_id(&run);
    let records = sup.session_records(&id);
    let ev = events(&records);
    let abort = records
        .iter()
        .find(|r| r["event"] == "abort")
        .expect("abort reported");
    assert_eq!(abort["reason"], "ctrl-c");
    assert!(ev.iter().any(|e| e == "session_closed"), "{ev:?}");
}
