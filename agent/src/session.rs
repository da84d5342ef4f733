//! `agent` and `agent -p`: open a session in the current directory, then run the
//! REPL or one task, then close the session and print the summary.

use std::path::{Path, PathBuf};

use serde_json::json;
use tollgate_proto::{OpenSessionRequest, SessionCaps};

use crate::cli::{OutputFormat, SessionSettings};
use crate::client::{self, ControlStream, Session};
use crate::error::AgentError;
use crate::prompt::SYSTEM_PROMPT;
use crate::runner::{Agent, Approver, Interrupt, LineEvent, Options, StopReason, summary_line};
use crate::term::{self, CtrlC, Sink, Stdin};
use crate::text::escape_display;

/// The canonical current directory: the session's workspace.
pub fn current_workspace() -> Result<PathBuf, AgentError> {
    let cwd = std::env::current_dir().map_err(|source| AgentError::Io {
        what: "cannot read the current directory",
        path: PathBuf::from("."),
        source,
    })?;
    canonical_dir(&cwd)
}

/// A workspace path, canonical (symlinks resolved), checked to be a directory.
pub fn canonical_dir(path: &Path) -> Result<PathBuf, AgentError> {
    let canon = path.canonicalize().map_err(|source| AgentError::Io {
        what: "cannot use the workspace",
        path: path.to_path_buf(),
        source,
    })?;
    if !canon.is_dir() {
        return Err(AgentError::Io {
            what: "the workspace is not a directory:",
            path: canon,
            source: std::io::Error::from(std::io::ErrorKind::NotADirectory),
        });
    }
    Ok(canon)
}

/// Opens a session, its control stream and tool list, ready for an [`Agent`].
pub async fn open(
    socket: &Path,
    req: OpenSessionRequest,
) -> Result<(Session, ControlStream, Vec<tollgate_proto::ToolSpec>), AgentError> {
    let channel = client::connect(socket).await?;
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
    Ok((session, control, tools))
}

/// Runs `agent` / `agent -p`. Returns the exit code.
pub async fn run(s: SessionSettings) -> i32 {
    match run_inner(s).await {
        Ok(code) => code,
        Err(e) => {
            term::error(&e);
            e.exit_code()
        }
    }
}

async fn run_inner(s: SessionSettings) -> Result<i32, AgentError> {
    let ctrlc = CtrlC::install();
    let workspace = current_workspace()?;
    let interactive = s.prompt.is_none();
    let req = open_request(&s, &workspace, interactive);
    let (session, control, tools) = open(&s.socket, req).await?;
    let sink = if interactive {
        Sink::Stdout
    } else {
        Sink::Stderr
    };
    announce(sink, &session, &workspace, tools.len(), interactive);
    let stdin = Stdin::spawn();
    let opts = Options {
        max_turns: s.max_turns,
        max_context_tokens: s.max_context_tokens,
        approver: Approver::Prompt,
        transcript: sink,
        print_final: interactive,
        full_results: false,
    };
    let mut agent = Agent::new(session, tools, stdin, ctrlc, control, opts);
    let result = match &s.prompt {
        Some(p) => one_shot(&mut agent, p, s.output).await,
        None => repl(&mut agent).await,
    };
    let code = match result {
        Ok(code) => code,
        Err(e) => return Ok(failed(&mut agent, e, s.output)),
    };
    let info = agent.session.close().await;
    term::diag(&summary_line(
        &agent.session.id,
        &agent.stats,
        info.as_ref(),
    ));
    Ok(code)
}

/// The session asked for: the workspace, mode, tools and caps of the flags.
fn open_request(s: &SessionSettings, workspace: &Path, interactive: bool) -> OpenSessionRequest {
    OpenSessionRequest {
        workspace: workspace.to_string_lossy().into_owned(),
        mode: s.mode.clone().unwrap_or_default(),
        permission_mode: crate::client::permission_mode(s.mode.as_deref().unwrap_or_default()),
        tools: s.tools.clone(),
        caps: Some(SessionCaps {
            max_tool_calls: s.max_tool_calls,
            max_cost_usd: s.max_cost_usd,
            llm_timeout_s: s.llm_timeout_s,
        }),
        system_prompt: SYSTEM_PROMPT.to_string(),
        model: s.model.clone().unwrap_or_default(),
        client: if interactive { "agent" } else { "agent -p" }.to_string(),
    }
}

/// The session's first lines: its mode, workspace and id, then its sandbox,
/// tools and who approves.
fn announce(sink: Sink, session: &Session, workspace: &Path, tools: usize, interactive: bool) {
    let mode = if session.mode.is_empty() {
        "default".to_string()
    } else {
        session.mode.clone()
    };
    term::line(
        sink,
        &format!(
            "Agent started in '{}' mode (working dir: {}, session {})",
            escape_display(&mode, false),
            escape_display(&workspace.to_string_lossy(), false),
            session.id
        ),
    );
    let approvals = if session.can_approve {
        "asked here"
    } else {
        "decided by operators (supervisorctl approvals)"
    };
    term::diag(&format!(
        "sandbox {}, {tools} tools, approvals {approvals}; Ctrl-C aborts a turn{}",
        if session.sandbox.is_empty() {
            "?"
        } else {
            &session.sandbox
        },
        if interactive {
            ", /exit or Ctrl-D quits"
        } else {
            ""
        }
    ));
}

/// A session that ended in an error: said (as JSON too with --output json),
/// with the summary; returns the exit code.
fn failed(agent: &mut Agent, e: AgentError, output: OutputFormat) -> i32 {
    if matches!(e, AgentError::Revoked(_)) {
        agent.session.abandon();
    }
    if output == OutputFormat::Json {
        let out = json!({
            "session": agent.session.id,
            "ok": false,
            "error": e.to_string(),
            "stop_reason": if e.exit_code() == 3 { "revoked" } else { "error" },
            "final_text": "",
            "tool_calls": agent.stats.records,
            "usage": usage_json(agent),
        });
        term::line(Sink::Stdout, &out.to_string());
    }
    term::error(&e);
    term::diag(&summary_line(&agent.session.id, &agent.stats, None));
    e.exit_code()
}

fn usage_json(agent: &Agent) -> serde_json::Value {
    json!({
        "llm_calls": agent.stats.llm_calls,
        "prompt_tokens": agent.stats.prompt_tokens,
        "completion_tokens": agent.stats.completion_tokens,
        "reported": agent.stats.usage_reported,
        "cost_usd": agent.stats.cost_usd,
    })
}

/// Exit code of a `-p` run: 0 when the model finished, 3 when a cap of the
/// supervisor stopped it, 1 otherwise.
pub fn one_shot_exit_code(stop: StopReason) -> i32 {
    match stop {
        StopReason::Done => 0,
        StopReason::CostCap | StopReason::ToolCap => 3,
        StopReason::TurnCap | StopReason::LlmError | StopReason::Aborted => 1,
    }
}

async fn one_shot(
    agent: &mut Agent,
    prompt: &str,
    output: OutputFormat,
) -> Result<i32, AgentError> {
    let outcome = agent.run_message(prompt).await?;
    match output {
        OutputFormat::Text => {
            if !outcome.final_text.is_empty() {
                term::line(Sink::Stdout, &escape_display(&outcome.final_text, true));
            }
        }
        OutputFormat::Json => {
            let out = json!({
                "session": agent.session.id,
                "mode": agent.session.mode,
                "ok": outcome.stop == StopReason::Done,
                "stop_reason": outcome.stop,
                "final_text": outcome.final_text,
                "turns": outcome.turns,
                "tool_calls": agent.stats.records,
                "usage": usage_json(agent),
            });
            term::line(Sink::Stdout, &out.to_string());
        }
    }
    Ok(one_shot_exit_code(outcome.stop))
}

async fn repl(agent: &mut Agent) -> Result<i32, AgentError> {
    let mut armed = false;
    loop {
        if agent.stdin_is_tty() {
            term::prompt("> ");
        }
        let line = match agent.read_line(None).await {
            Ok(LineEvent::Line(l)) => l,
            Ok(LineEvent::Eof | LineEvent::Resolved(_)) => {
                if agent.stdin_is_tty() {
                    term::diag("");
                }
                return Ok(0);
            }
            Err(Interrupt::CtrlC) => {
                if armed {
                    term::diag("");
                    return Ok(0);
                }
                armed = true;
                term::diag("\n(press Ctrl-C again, or Ctrl-D, to exit)");
                continue;
            }
            Err(Interrupt::Fatal(e)) => return Err(e),
        };
        armed = false;
        let text = line.trim();
        match text {
            "" => continue,
            "/exit" | "/quit" => return Ok(0),
            "/help" => {
                term::diag(
                    "type a task for the agent; /todos shows the todo list; /exit quits; Ctrl-C aborts a running turn",
                );
                continue;
            }
            "/todos" => {
                term::line(
                    Sink::Stdout,
                    &escape_display(&agent.planning().render_todos(), true),
                );
                continue;
            }
            _ => {}
        }
        agent.run_message(text).await?;
    }
}
