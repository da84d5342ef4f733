//! The executors of a cleared call: the file tools beneath the workspace
//! as its owner, run_bash in the session's sandbox (`shell.rs`, one shell
//! run shared with a client's routed command), webfetch to the vetted
//! address (`fetch.rs`). An MCP server's tool is forwarded by the gateway
//! (`crate::mcp`); the agent-side tools run in the agent.

use tokio_util::sync::CancellationToken;
use tollgate_policy::{Decision, Tool};
use tollgate_tools::ToolOutput;

use crate::host::Ctx;

mod fetch;
pub mod inferred;
pub(crate) mod job;
pub(crate) mod net_lines;
pub mod notes;
pub mod sandbox;
pub(crate) mod shell;

/// What a tool produced.
pub(crate) struct Done {
    pub(crate) output: ToolOutput,
    pub(crate) exit_code: Option<i32>,
    /// Already redacted as it came (a command's output).
    pub(crate) redacted: bool,
    /// run_bash: the command was killed when this timeout passed.
    pub(crate) timed_out: Option<std::time::Duration>,
}

impl From<ToolOutput> for Done {
    fn from(output: ToolOutput) -> Done {
        Done {
            output,
            exit_code: None,
            redacted: false,
            timed_out: None,
        }
    }
}

/// Why a cleared call did not produce its output.
pub(crate) enum ExecError {
    /// The tool ran (or tried to) and failed: a message for the model.
    Tool(String),
    /// No sandbox could be had.
    Sandbox(String),
    /// The disk floor refused the write, or stopped the command.
    DiskFloor(String),
    Cancelled,
}

/// Runs a cleared call: the file tools beneath the workspace as its owner,
/// run_bash in the session's sandbox, webfetch to the vetted address.
pub(crate) async fn execute(
    cx: &Ctx,
    call_id: &str,
    call: &Tool,
    d: &Decision,
    cancel: &CancellationToken,
) -> Result<Done, ExecError> {
    let cap = cx.host.config().session.output_cap_bytes;
    let files = &cx.session.files;
    match call {
        Tool::ReadFile(a) => {
            let p = resolved_path(call, d)?;
            let o = files.read_file(&p, a.offset, a.limit, cap).await;
            let o = o.map_err(tool_err)?;
            cx.session.mark_read(p);
            Ok(o.into())
        }
        Tool::WriteFile(a) => {
            disk_floor(cx)?;
            let p = resolved_path(call, d)?;
            let o = files.write_file(&p, &a.content).await.map_err(tool_err)?;
            cx.session.mark_read(p);
            Ok(o.into())
        }
        Tool::EditFile(a) => {
            disk_floor(cx)?;
            let p = resolved_path(call, d)?;
            let all = a.replace_all.unwrap_or(false);
            let o = files.edit_file(&p, &a.old_string, &a.new_string, all).await;
            let o = o.map_err(tool_err)?;
            cx.session.mark_read(p);
            Ok(o.into())
        }
        Tool::GlobFiles(a) => Ok(files
            .glob_files(&a.pattern, d.path.as_deref(), cap)
            .await
            .map_err(tool_err)?
            .into()),
        Tool::Grep(a) => {
            let ignore_case = a.ignore_case.unwrap_or(false);
            let o = files.grep(
                &a.pattern,
                d.path.as_deref(),
                a.glob.as_deref(),
                ignore_case,
                cap,
            );
            Ok(o.await.map_err(tool_err)?.into())
        }
        Tool::RunBash(a) if a.is_background() => job::start(cx, call_id, &a.command).await,
        Tool::RunBash(a) => {
            let cmd = shell::Command {
                call_id,
                text: &a.command,
                timeout_s: a.timeout_s,
                merge_stderr: true,
                background: false,
            };
            shell::run_bash(cx, cmd, cancel).await
        }
        Tool::JobOutput(a) => job::output(cx, &a.job_id),
        Tool::KillJob(a) => job::kill(cx, &a.job_id, cancel).await,
        Tool::Webfetch(a) => fetch::webfetch(cx, a.max_bytes, d).await,
        Tool::Mcp(_)
        | Tool::TodoAppend(_)
        | Tool::TodoList(_)
        | Tool::TodoUpdate(_)
        | Tool::ReadScratchpad(_)
        | Tool::WriteScratchpad(_)
        | Tool::AskQuestion(_) => Err(ExecError::Tool(format!(
            "{} runs in the agent, not in the supervisor",
            call.name()
        ))),
    }
}

/// The path the policy resolved for a file tool.
fn resolved_path(call: &Tool, d: &Decision) -> Result<std::path::PathBuf, ExecError> {
    d.path
        .clone()
        .ok_or_else(|| ExecError::Tool(format!("{}: the policy resolved no path", call.name())))
}

/// The disk floor, checked again right before a write.
pub(crate) fn disk_floor(cx: &Ctx) -> Result<(), ExecError> {
    cx.host
        .disk()
        .check(&cx.session.workspace)
        .map_err(|low| ExecError::DiskFloor(low.refused()))
}

pub(crate) fn tool_err(e: tollgate_tools::ToolError) -> ExecError {
    ExecError::Tool(e.to_string())
}
