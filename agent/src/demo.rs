//! `agent demo`: a guided, self-contained run. It copies an embedded sample project
//! into a temporary directory, starts the `supervisor` found next to this executable
//! (native sandbox, the scripted model, approvals at this session), runs the tour,
//! then shows the audit summary and verifies the audit chain. Whatever happens,
//! including an error or Ctrl-C, it stops the supervisor (SIGTERM, then wait) and
//! removes the temporary directory, sockets included.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::sync::mpsc;
use tollgate_proto::{OpenSessionRequest, SessionCaps};

use crate::client::{self, ControlStream, Session};
use crate::error::AgentError;
use crate::prompt::SYSTEM_PROMPT;
use crate::runner::{Agent, Approver, Options, StopReason, summary_line};
use crate::term::{self, CtrlC, Sink, Stdin};

/// The sample project, embedded so the demo needs nothing but the binaries.
pub const PROJECT: &[(&str, &str)] = &[
    (
        "README.md",
        include_str!("../../examples/demo/project/README.md"),
    ),
    (
        "wordfreq.py",
        include_str!("../../examples/demo/project/wordfreq.py"),
    ),
    (
        "test_wordfreq.py",
        include_str!("../../examples/demo/project/test_wordfreq.py"),
    ),
    (
        "probe.sh",
        include_str!("../../examples/demo/project/probe.sh"),
    ),
];

/// The scripted model's turns (script-provider format).
pub const TOUR: &str = include_str!("../../examples/demo/tour.json");

/// The task given to the scripted model.
pub const TASK: &str =
    "Give me a tour of this project and show what tollgate allows, asks about and refuses.";

/// How long the supervisor may take to say it is ready.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long it may take to exit after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

fn say(text: &str) {
    term::line(Sink::Stdout, text);
}

/// A TOML basic string.
fn toml_str(s: &str) -> String {
    // JSON string escapes are valid TOML basic-string escapes.
    serde_json::Value::String(s.to_string()).to_string()
}

/// The supervisor config the demo writes.
pub fn config_text(tour: &Path) -> String {
    format!(
        "# written by `agent demo`; removed with its temporary directory\n\
         [sandbox]\n\
         backend = \"native\"\n\
         \n\
         [audit]\n\
         sync = \"always\"\n\
         \n\
         [session]\n\
         default_mode = \"default\"\n\
         session_can_approve = true\n\
         approval_timeout_s = 60\n\
         \n\
         [llm]\n\
         provider = \"script\"\n\
         script = {}\n",
        toml_str(&tour.to_string_lossy())
    )
}

/// The temporary directory and the supervisor child; both go away on drop.
struct DemoEnv {
    root: PathBuf,
    child: Option<Child>,
    log: Arc<Mutex<Vec<String>>>,
}

impl DemoEnv {
    fn create() -> Result<DemoEnv, AgentError> {
        let template = std::env::temp_dir().join("tollgate-demo-XXXXXX");
        let root = nix::unistd::mkdtemp(&template).map_err(|e| AgentError::Io {
            what: "cannot create a temporary directory from",
            path: template.clone(),
            source: std::io::Error::from(e),
        })?;
        Ok(DemoEnv {
            root,
            child: None,
            log: Arc::new(Mutex::new(Vec::new())),
        })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    fn write(&self, rel: &str, content: &str) -> Result<PathBuf, AgentError> {
        let p = self.root.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(|source| AgentError::Io {
                what: "cannot create",
                path: parent.to_path_buf(),
                source,
            })?;
        }
        std::fs::write(&p, content).map_err(|source| AgentError::Io {
            what: "cannot write",
            path: p.clone(),
            source,
        })?;
        Ok(p)
    }

    fn log_tail(&self) -> Vec<String> {
        let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        log.iter().rev().take(20).rev().cloned().collect()
    }

    /// SIGTERM, wait, SIGKILL as a last resort. Returns whether it exited by itself.
    fn stop_supervisor(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return true;
        };
        if let Ok(Some(_)) = child.try_wait() {
            return true;
        }
        let pid = Pid::from_raw(child.id() as i32);
        let _ = kill(pid, Signal::SIGTERM);
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            match child.try_wait() {
                Ok(Some(_)) => return true,
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(_) => break,
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }

    fn cleanup(&mut self) {
        self.stop_supervisor();
        if self.root.exists() {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

impl Drop for DemoEnv {
    fn drop(&mut self) {
        self.cleanup();
    }
}

/// A binary next to this executable.
fn sibling(name: &str) -> Result<PathBuf, AgentError> {
    let exe = std::env::current_exe().map_err(|source| AgentError::Io {
        what: "cannot find this executable",
        path: PathBuf::from("/proc/self/exe"),
        source,
    })?;
    let dir = exe.parent().unwrap_or(Path::new("/"));
    let p = dir.join(name);
    if p.is_file() {
        Ok(p)
    } else {
        Err(AgentError::Demo(format!(
            "cannot find the {name} binary at {}, hint: build all three binaries (cargo build --release) so they sit side by side",
            p.display()
        )))
    }
}

/// Runs the demo. Returns the exit code.
pub async fn run() -> i32 {
    let started = Instant::now();
    let mut ctrlc = CtrlC::install();
    let mut env = match DemoEnv::create() {
        Ok(e) => e,
        Err(e) => {
            term::error(&e);
            return 1;
        }
    };
    let result = tour(&mut env, &mut ctrlc).await;
    // Stop the supervisor before reading the audit log, so its shutdown records
    // are part of what is verified.
    let stopped = env.stop_supervisor();
    let code = match result {
        Ok(ran_to_end) => {
            let audit_ok = audit_summary(&env);
            if !stopped {
                term::diag("agent: the supervisor did not stop on SIGTERM and was killed");
            }
            if ran_to_end && audit_ok && stopped {
                0
            } else {
                1
            }
        }
        Err(e) => {
            term::error(&format!("demo failed: {e}"));
            for l in env.log_tail() {
                term::diag(&format!("  supervisor: {l}"));
            }
            e.exit_code().max(1)
        }
    };
    env.cleanup();
    say(&format!(
        "demo: done in {:.1} s; the temporary directory and the supervisor are gone",
        started.elapsed().as_secs_f64()
    ));
    code
}

/// Starts the supervisor and waits for its ready line. Returns the agent socket.
async fn start_supervisor(env: &mut DemoEnv, ctrlc: &mut CtrlC) -> Result<PathBuf, AgentError> {
    let supervisor = sibling("supervisor")?;
    let state = env.path("state");
    let audit = env.path("audit");
    let config = env.path("supervisor.toml");
    let mut child = Command::new(&supervisor)
        .arg("--config")
        .arg(&config)
        .arg("--state-dir")
        .arg(&state)
        .arg("--audit-dir")
        .arg(&audit)
        .arg("--sandbox")
        .arg("native")
        .env_remove("TOLLGATE_SOCKET")
        .env_remove("TOLLGATE_OPERATOR_SOCKET")
        .env_remove("TOLLGATE_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| AgentError::Io {
            what: "cannot start",
            path: supervisor.clone(),
            source,
        })?;
    let stderr = child.stderr.take();
    say(&format!(
        "demo: started the supervisor (pid {})",
        child.id()
    ));
    env.child = Some(child);
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    if let Some(stderr) = stderr {
        let log = env.log.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            let reader = std::io::BufReader::new(stderr);
            for line in reader.lines() {
                let Ok(line) = line else { return };
                let _ = tx.send(line.clone());
                let mut l = log.lock().unwrap_or_else(|e| e.into_inner());
                if l.len() > 200 {
                    l.remove(0);
                }
                l.push(line);
            }
        });
    }
    let deadline = tokio::time::sleep(READY_TIMEOUT);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            line = rx.recv() => match line {
                Some(l) => {
                    if let Some(ready) = tollgate_proto::ready::ReadyLine::parse(&l) {
                        say(&format!("demo: supervisor ready (sandbox {})", ready.sandbox));
                        return Ok(ready.agent);
                    }
                }
                None => {
                    return Err(AgentError::Demo(
                        "the supervisor exited before it was ready".into(),
                    ));
                }
            },
            _ = &mut deadline => {
                return Err(AgentError::Demo(format!(
                    "the supervisor was not ready after {} s",
                    READY_TIMEOUT.as_secs()
                )));
            }
            _ = ctrlc.recv() => return Err(AgentError::Interrupted),
        }
    }
}

/// Sets everything up and runs the scripted session. `Ok(true)` when the tour ran
/// to its end.
async fn tour(env: &mut DemoEnv, ctrlc: &mut CtrlC) -> Result<bool, AgentError> {
    say("tollgate demo: a scripted model works on a throwaway copy of a sample project.");
    say("No network and no API key are used; everything is removed at the end.");
    say("");
    for (rel, content) in PROJECT {
        env.write(&format!("project/{rel}"), content)?;
    }
    let tour_path = env.write("tour.json", TOUR)?;
    env.write("supervisor.toml", &config_text(&tour_path))?;
    let socket = start_supervisor(env, ctrlc).await?;
    let workspace = env.path("project");
    let req = OpenSessionRequest {
        workspace: workspace.to_string_lossy().into_owned(),
        mode: "default".into(),
        permission_mode: tollgate_proto::PermissionMode::Default as i32,
        tools: Vec::new(),
        caps: Some(SessionCaps {
            max_tool_calls: Some(50),
            max_cost_usd: None,
            llm_timeout_s: Some(30),
        }),
        system_prompt: SYSTEM_PROMPT.to_string(),
        model: String::new(),
        client: "agent demo".into(),
    };
    let channel = client::connect(&socket).await?;
    let mut session = Session::open(channel, req).await?;
    let control = match ControlStream::open(&session.client).await {
        Ok(c) => c,
        Err(e) => {
            session.close().await;
            return Err(e);
        }
    };
    let tools = match session.list_tools().await {
        Ok(t) => t,
        Err(e) => {
            session.close().await;
            return Err(e);
        }
    };
    say(&format!(
        "Agent started in '{}' mode (working dir: {}, session {})",
        session.mode,
        workspace.display(),
        session.id
    ));
    say(&format!("user: {TASK}"));
    say("");
    let opts = Options {
        max_turns: 40,
        max_context_tokens: 24_000,
        approver: Approver::Demo,
        transcript: Sink::Stdout,
        print_final: true,
        full_results: true,
    };
    // The tour owns Ctrl-C from here; a fresh handle keeps the caller's usable.
    let mut agent = Agent::new(
        session,
        tools,
        Stdin::closed(),
        CtrlC::install(),
        control,
        opts,
    );
    let outcome = agent.run_message(TASK).await;
    let ran_to_end = match outcome {
        Ok(o) => {
            let info = agent.session.close().await;
            say("");
            say(&summary_line(
                &agent.session.id,
                &agent.stats,
                info.as_ref(),
            ));
            o.stop == StopReason::Done
        }
        Err(e) => {
            if !matches!(e, AgentError::Revoked(_)) {
                agent.session.close().await;
            }
            return Err(e);
        }
    };
    Ok(ran_to_end)
}

/// `supervisorctl audit report` and `audit verify` on the demo's audit directory.
/// Returns whether the chain verified.
fn audit_summary(env: &DemoEnv) -> bool {
    let ctl = match sibling("supervisorctl") {
        Ok(p) => p,
        Err(e) => {
            term::error(&e);
            return false;
        }
    };
    let audit = env.path("audit");
    say("");
    say("== audit report (supervisorctl audit report) ==");
    match Command::new(&ctl)
        .arg("audit")
        .arg("report")
        .arg(&audit)
        .output()
    {
        Ok(out) => {
            print_output(&out.stdout);
            print_output(&out.stderr);
        }
        Err(e) => term::diag(&format!("agent: cannot run {}: {e}", ctl.display())),
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(&audit)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    say("");
    say("== audit chain (supervisorctl audit verify) ==");
    if files.is_empty() {
        term::diag(&format!("agent: no audit files in {}", audit.display()));
        return false;
    }
    match Command::new(&ctl)
        .arg("audit")
        .arg("verify")
        .args(&files)
        .output()
    {
        Ok(out) => {
            print_output(&out.stdout);
            print_output(&out.stderr);
            out.status.success()
        }
        Err(e) => {
            term::diag(&format!("agent: cannot run {}: {e}", ctl.display()));
            false
        }
    }
}

fn print_output(bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    for l in text.lines() {
        say(&crate::text::escape_display(l, false));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tour_is_a_script_of_assistant_turns() {
        let v: serde_json::Value = serde_json::from_str(TOUR).unwrap();
        let turns = v.as_array().unwrap();
        assert!(turns.len() >= 7);
        let names: Vec<String> = turns
            .iter()
            .flat_map(|t| {
                t.get("tool_calls")
                    .and_then(|c| c.as_array())
                    .cloned()
                    .unwrap_or_default()
            })
            .filter_map(|c| c.get("name").and_then(|n| n.as_str()).map(str::to_string))
            .collect();
        for needed in ["read_file", "write_file", "run_bash", "webfetch"] {
            assert!(names.iter().any(|n| n == needed), "tour lacks {needed}");
        }
        let last = turns.last().unwrap();
        assert!(last.get("tool_calls").is_none());
        let text = TOUR;
        assert!(text.contains("169.254.169.254"));
        assert!(text.contains("curl"));
        assert!(text.contains("probe.sh"));
        assert!(
            PROJECT
                .iter()
                .any(|(p, c)| *p == "probe.sh" && c.contains("/etc/shadow"))
        );
    }

    #[test]
    fn config_uses_the_script_provider_and_native_sandbox() {
        let c = config_text(Path::new("/tmp/x \"y\"/tour.json"));
        assert!(c.contains("provider = \"script\""));
        assert!(c.contains("script = \"/tmp/x \\\"y\\\"/tour.json\""));
        assert!(c.contains("backend = \"native\""));
        assert!(c.contains("session_can_approve = true"));
        assert!(c.contains("sync = \"always\""));
    }

    #[test]
    fn project_is_embedded() {
        assert!(
            PROJECT
                .iter()
                .any(|(p, c)| *p == "README.md" && !c.is_empty())
        );
    }
}
