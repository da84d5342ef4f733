//! End to end, the agent's side of approvals: answering at the
//! agent's terminal, the typed second confirmation of a destructive call, and an
//! operator deciding while the agent's prompt is open.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::agent_support;

use std::io::Write;
use std::path::Path;

use agent_support::*;
use serde_json::json;
use tollgate_e2e::harness::{Dirs, Supervisor};

fn start(dirs: Dirs, script: &Path) -> Supervisor {
    let config = format!(
        "[session]\napproval_timeout_s = 60\nsession_can_approve = true\n\n[llm]\nprovider = \"script\"\nscript = {}\n",
        toml_str(&script.to_string_lossy())
    );
    Supervisor::builder()
        .config(&config)
        .sandbox("native")
        .dirs(dirs)
        .start()
}

fn setup(turns: serde_json::Value) -> (Supervisor, std::path::PathBuf) {
    let dirs = Dirs::new();
    let ws = dirs.workspace("ws", nix::unistd::getuid().as_raw());
    std::fs::write(ws.join("README.md"), "# original\n").unwrap();
    let script = write_script(&dirs, "turns.json", &turns);
    (start(dirs, &script), ws)
}

#[test]
fn yes_at_the_prompt_approves_the_write() {
    if !ready("approve_at_prompt") {
        return;
    }
    let (sup, ws) = setup(json!([
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "notes.md", "content": "hello\n"}}]},
        {"content": "wrote notes.md"}
    ]));
    let run = run_agent(&sup, &ws, &["-p", "write notes", "--output", "json"], "y\n");
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("⚠ About to create notes.md"),
        "{}",
        run.stderr
    );
    assert_eq!(run.json()["tool_calls"][0]["outcome"], "ok");
    assert_eq!(
        std::fs::read_to_string(ws.join("notes.md")).unwrap(),
        "hello\n"
    );
    let id = run.json()["session"].as_str().unwrap().to_string();
    let decided = sup
        .session_records(&id)
        .into_iter()
        .find(|r| r["event"] == "approval_decided")
        .expect("approval_decided audited");
    assert!(
        decided.to_string().contains("via session"),
        "decided by the session: {decided}"
    );
}

/// Overwriting a file the session has not read is destructive: `y` alone is
/// not enough, the target has to be typed too.
#[test]
fn a_destructive_call_needs_the_typed_target() {
    if !ready("destructive_prompt") {
        return;
    }
    for type_target in [false, true] {
        let (sup, ws) = setup(json!([
            {"tool_calls": [{"name": "write_file", "arguments": {"path": "README.md", "content": "# replaced\n"}}]},
            {"content": "done"}
        ]));
        let mut child = spawn_agent(&sup, &ws, &["-p", "replace the readme", "--output", "json"]);
        let watch = StderrWatch::new(&mut child);
        let mut stdin = child.stdin.take().unwrap();
        let shown = watch.wait_for("[y]es / [n]o / [s]ession: ");
        assert!(shown.contains("DESTRUCTIVE"), "{shown}");
        stdin.write_all(b"y\n").unwrap();
        let shown = watch.wait_for("type the target to confirm (");
        let target = shown
            .rsplit("type the target to confirm (")
            .next()
            .and_then(|r| r.split("): ").next())
            .unwrap()
            .to_string();
        if type_target {
            stdin.write_all(format!("{target}\n").as_bytes()).unwrap();
        }
        drop(stdin);
        let run = wait_watched(child, &watch);
        assert_eq!(run.code, 0, "{}", run.stderr);
        let v = run.json();
        let readme = std::fs::read_to_string(ws.join("README.md")).unwrap();
        if type_target {
            assert_eq!(v["tool_calls"][0]["outcome"], "ok", "{v}");
            assert_eq!(readme, "# replaced\n");
        } else {
            assert_eq!(v["tool_calls"][0]["outcome"], "denied", "{v}");
            assert_eq!(v["tool_calls"][0]["denied"]["code"], "USER_DENIED");
            assert_eq!(readme, "# original\n");
        }
    }
}

#[test]
fn an_operator_decision_closes_the_agents_prompt() {
    if !ready("operator_closes_prompt") {
        return;
    }
    let (sup, ws) = setup(json!([
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "notes.md", "content": "from the agent\n"}}]},
        {"content": "done"}
    ]));
    let mut child = spawn_agent(&sup, &ws, &[]);
    let watch = StderrWatch::new(&mut child);
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"write the notes\n").unwrap();
    watch.wait_for("[y]es / [n]o / [s]ession: ");
    let approval = wait_for_approval(&sup);
    let id = approval["id"].as_str().unwrap().to_string();
    let (code, out, err) = ctl(&sup, &["approve", &id]);
    assert_eq!(code, 0, "{out}{err}");
    let shown = watch.wait_for(&format!("approval {id} approved by "));
    assert!(shown.contains("operator"), "{shown}");
    drop(stdin);
    let run = wait_watched(child, &watch);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(
        std::fs::read_to_string(ws.join("notes.md")).unwrap(),
        "from the agent\n"
    );
    // A second decision on the same approval is refused.
    let (code, _, err) = ctl(&sup, &["deny", &id]);
    assert_ne!(code, 0, "deciding twice must fail: {err}");
}

#[test]
fn revoking_the_session_ends_the_agent_with_exit_3() {
    if !ready("revoke_agent") {
        return;
    }
    let (sup, ws) = setup(json!([
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "notes.md", "content": "x"}}]},
        {"content": "done"}
    ]));
    let mut child = spawn_agent(&sup, &ws, &[]);
    let watch = StderrWatch::new(&mut child);
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"go\n").unwrap();
    watch.wait_for("[y]es / [n]o / [s]ession: ");
    let approval = wait_for_approval(&sup);
    let session = approval["session"].as_str().unwrap().to_string();
    let (code, out, err) = ctl(&sup, &["revoke", &session, "--reason", "runaway"]);
    assert_eq!(code, 0, "{out}{err}");
    let run = wait_watched(child, &watch);
    drop(stdin);
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(
        run.stderr.contains("agent: session revoked: "),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("runaway"), "{}", run.stderr);
    assert!(!ws.join("notes.md").exists());
}
