//! tollgate-toolcall: the tools tollgate knows, as types.
//!
//! [`ToolName`] is every tool's name; [`Tool`] is a call with its arguments
//! typed, built once from the JSON at validation (the policy engine's
//! `Engine::check`) and matched on everywhere after: the engine's analysis,
//! the PEP's execution, preview and read-only set, the agent's runner and the
//! client adapters. Adding a variant breaks the build at every `match` that
//! must handle it (see docs/ARCHITECTURE.md, "Adding a tool").
//!
//! This crate holds types and the one serde boundary only: no policy, no
//! I/O. The JSON schemas the model sees stay data in the policy crate's
//! registry; the argument structs here mirror them field for field.

#![forbid(unsafe_code)]

pub mod shell;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The name of every tool tollgate knows: the registry's (offered to the
/// model), and `mcp`, which the engine decides but never offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolName {
    ReadFile,
    GlobFiles,
    Grep,
    WriteFile,
    EditFile,
    RunBash,
    JobOutput,
    KillJob,
    Webfetch,
    Mcp,
    TodoAppend,
    TodoList,
    TodoUpdate,
    ReadScratchpad,
    WriteScratchpad,
    AskQuestion,
}

impl ToolName {
    /// Every tool, in the registry's order (`mcp` after the supervisor's own).
    pub const ALL: [ToolName; 16] = [
        ToolName::ReadFile,
        ToolName::GlobFiles,
        ToolName::Grep,
        ToolName::WriteFile,
        ToolName::EditFile,
        ToolName::RunBash,
        ToolName::JobOutput,
        ToolName::KillJob,
        ToolName::Webfetch,
        ToolName::Mcp,
        ToolName::TodoAppend,
        ToolName::TodoList,
        ToolName::TodoUpdate,
        ToolName::ReadScratchpad,
        ToolName::WriteScratchpad,
        ToolName::AskQuestion,
    ];

    /// The name on the wire, in rules, schemas and the audit log.
    pub const fn as_str(self) -> &'static str {
        match self {
            ToolName::ReadFile => "read_file",
            ToolName::GlobFiles => "glob_files",
            ToolName::Grep => "grep",
            ToolName::WriteFile => "write_file",
            ToolName::EditFile => "edit_file",
            ToolName::RunBash => "run_bash",
            ToolName::JobOutput => "job_output",
            ToolName::KillJob => "kill_job",
            ToolName::Webfetch => "webfetch",
            ToolName::Mcp => "mcp",
            ToolName::TodoAppend => "todo_append",
            ToolName::TodoList => "todo_list",
            ToolName::TodoUpdate => "todo_update",
            ToolName::ReadScratchpad => "read_scratchpad",
            ToolName::WriteScratchpad => "write_scratchpad",
            ToolName::AskQuestion => "ask_question",
        }
    }

    /// The tool of this exact name, if there is one (no case folding, no
    /// trimming).
    pub fn parse(name: &str) -> Option<ToolName> {
        ToolName::ALL.into_iter().find(|t| t.as_str() == name)
    }

    /// What the tool reads, writes and reaches: the one table of these
    /// facts (the registry's spec holds it, the gate acts on it).
    pub fn facts(self) -> Facts {
        let fact = |runs, writes_workspace, decides_with_dns| Facts {
            runs,
            writes_workspace,
            decides_with_dns,
        };
        match self {
            ToolName::ReadFile | ToolName::GlobFiles | ToolName::Grep => {
                fact(Runs::Supervisor, false, false)
            }
            ToolName::WriteFile | ToolName::EditFile => fact(Runs::Supervisor, true, false),
            // What a command runs may write anything.
            ToolName::RunBash => fact(Runs::Sandbox, true, false),
            // A background job's output and its end act on the session's
            // own processes in its sandbox: neither starts before its
            // decision is durable (a read takes the output away).
            ToolName::JobOutput | ToolName::KillJob => fact(Runs::Sandbox, false, false),
            // The SSRF guard resolves the host before deciding.
            ToolName::Webfetch => fact(Runs::Supervisor, false, true),
            // An MCP server runs in the sandbox; the gateway forwards its
            // calls, the gate's executors never write for it.
            ToolName::Mcp => fact(Runs::Sandbox, false, false),
            ToolName::TodoAppend
            | ToolName::TodoList
            | ToolName::TodoUpdate
            | ToolName::ReadScratchpad
            | ToolName::WriteScratchpad
            | ToolName::AskQuestion => fact(Runs::Agent, false, false),
        }
    }
}

/// Allow, ask or deny. Ordered so the strictest wins: `Allow < Ask < Deny`.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Allow,
    Ask,
    Deny,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Ask => "ask",
            Verdict::Deny => "deny",
        }
    }
}

/// Where a tool runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Runs {
    /// In the agent's own loop (planning, `ask_question`): the supervisor
    /// never executes it.
    Agent,
    /// In the supervisor, as the workspace's owner (the file tools,
    /// webfetch).
    Supervisor,
    /// In the session's sandbox (run_bash, an MCP server).
    Sandbox,
}

/// What a tool reads, writes and reaches (see [`ToolName::facts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Facts {
    pub runs: Runs,
    /// It may write to the workspace's filesystem (refused under the disk
    /// floor).
    pub writes_workspace: bool,
    /// Deciding it may ask DNS (decided off the async threads).
    pub decides_with_dns: bool,
}

impl Facts {
    /// The planning tools and `ask_question` run in the agent.
    pub fn runs_in_agent(self) -> bool {
        self.runs == Runs::Agent
    }

    /// Its only effect is the output it returns (no write, no process, no
    /// network): it may start reading before its decision is durable.
    pub fn only_reads(self) -> bool {
        self.runs == Runs::Supervisor && !self.writes_workspace && !self.decides_with_dns
    }
}

impl std::fmt::Display for ToolName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `read_file`: a text file beneath the workspace, in lines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadFile {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
}

/// `glob_files`: paths matching a glob, beneath `path` (the workspace when
/// absent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GlobFiles {
    pub pattern: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// `grep`: lines matching a regular expression.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grep {
    pub pattern: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub glob: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_case: Option<bool>,
}

/// `write_file`: a file's whole new content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteFile {
    pub path: String,
    pub content: String,
}

/// `edit_file`: one (or every) occurrence of a text replaced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EditFile {
    pub path: String,
    pub old_string: String,
    pub new_string: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_all: Option<bool>,
}

/// `run_bash`: a command line for the session's sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunBash {
    pub command: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<u64>,
    /// Start it as a background job of the session (docs/INTERFACES.md,
    /// "Background jobs"): the call returns the job's id at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub background: Option<bool>,
}

impl RunBash {
    /// Whether the call starts a background job.
    pub fn is_background(&self) -> bool {
        self.background.unwrap_or(false)
    }
}

/// `job_output`: what a background job printed since the last read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobOutput {
    pub job_id: String,
}

/// `kill_job`: a background job ended now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KillJob {
    pub job_id: String,
}

/// `webfetch`: an http(s) URL.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Webfetch {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
}

/// One call of an MCP server's tool (`mcp(SERVER.TOOL)` rules): from a
/// client's `mcp__SERVER__TOOL`, or a `tools/call` through `agent
/// mcp-gateway` (then `server` is the gateway's `--name`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpToolCall {
    /// The MCP server's name, as the client knows it.
    pub server: String,
    /// The tool's name on that server.
    pub tool: String,
}

impl McpToolCall {
    /// `SERVER.TOOL`: what rules match and approvals show.
    pub fn target(&self) -> String {
        format!("{}.{}", self.server, self.tool)
    }
}

/// `todo_append`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TodoAppend {
    pub text: String,
}

/// A todo item's status, as `todo_update` takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    Pending,
    InProgress,
    Done,
}

/// `todo_update`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TodoUpdate {
    pub id: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<TodoStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// `write_scratchpad`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteScratchpad {
    pub content: String,
}

/// `ask_question`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AskQuestion {
    pub question: String,
}

/// A tool without arguments (`{}`, or `null`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

/// One tool call, its arguments typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tool {
    ReadFile(ReadFile),
    GlobFiles(GlobFiles),
    Grep(Grep),
    WriteFile(WriteFile),
    EditFile(EditFile),
    RunBash(RunBash),
    JobOutput(JobOutput),
    KillJob(KillJob),
    Webfetch(Webfetch),
    Mcp(McpToolCall),
    TodoAppend(TodoAppend),
    TodoList(NoArgs),
    TodoUpdate(TodoUpdate),
    ReadScratchpad(NoArgs),
    WriteScratchpad(WriteScratchpad),
    AskQuestion(AskQuestion),
}

/// A tool call as proposed (by the model, a client adapter, a test): a name
/// and JSON arguments, not yet checked. [`Tool`] is what checking makes of
/// it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub tool: String,
    pub args: Value,
}

impl Tool {
    /// The one serde boundary: `args` as the arguments of `name`. `null`
    /// stands for no arguments. The error is serde's, naming the field; the
    /// policy engine checks the schema first, so that its sentences are the
    /// ones the model sees.
    pub fn from_json(name: ToolName, args: Value) -> Result<Tool, serde_json::Error> {
        use serde_json::from_value as v;
        let args = match args {
            Value::Null => Value::Object(serde_json::Map::new()),
            other => other,
        };
        Ok(match name {
            ToolName::ReadFile => Tool::ReadFile(v(args)?),
            ToolName::GlobFiles => Tool::GlobFiles(v(args)?),
            ToolName::Grep => Tool::Grep(v(args)?),
            ToolName::WriteFile => Tool::WriteFile(v(args)?),
            ToolName::EditFile => Tool::EditFile(v(args)?),
            ToolName::RunBash => Tool::RunBash(v(args)?),
            ToolName::JobOutput => Tool::JobOutput(v(args)?),
            ToolName::KillJob => Tool::KillJob(v(args)?),
            ToolName::Webfetch => Tool::Webfetch(v(args)?),
            ToolName::Mcp => Tool::Mcp(v(args)?),
            ToolName::TodoAppend => Tool::TodoAppend(v(args)?),
            ToolName::TodoList => Tool::TodoList(v(args)?),
            ToolName::TodoUpdate => Tool::TodoUpdate(v(args)?),
            ToolName::ReadScratchpad => Tool::ReadScratchpad(v(args)?),
            ToolName::WriteScratchpad => Tool::WriteScratchpad(v(args)?),
            ToolName::AskQuestion => Tool::AskQuestion(v(args)?),
        })
    }

    pub fn name(&self) -> ToolName {
        match self {
            Tool::ReadFile(_) => ToolName::ReadFile,
            Tool::GlobFiles(_) => ToolName::GlobFiles,
            Tool::Grep(_) => ToolName::Grep,
            Tool::WriteFile(_) => ToolName::WriteFile,
            Tool::EditFile(_) => ToolName::EditFile,
            Tool::RunBash(_) => ToolName::RunBash,
            Tool::JobOutput(_) => ToolName::JobOutput,
            Tool::KillJob(_) => ToolName::KillJob,
            Tool::Webfetch(_) => ToolName::Webfetch,
            Tool::Mcp(_) => ToolName::Mcp,
            Tool::TodoAppend(_) => ToolName::TodoAppend,
            Tool::TodoList(_) => ToolName::TodoList,
            Tool::TodoUpdate(_) => ToolName::TodoUpdate,
            Tool::ReadScratchpad(_) => ToolName::ReadScratchpad,
            Tool::WriteScratchpad(_) => ToolName::WriteScratchpad,
            Tool::AskQuestion(_) => ToolName::AskQuestion,
        }
    }

    /// The arguments as JSON (absent optional fields left out).
    pub fn args_json(&self) -> Value {
        fn j<T: Serialize>(t: &T) -> Value {
            // Plain structs of strings, integers and booleans: serializing
            // them cannot fail.
            serde_json::to_value(t).unwrap_or(Value::Null)
        }
        match self {
            Tool::ReadFile(a) => j(a),
            Tool::GlobFiles(a) => j(a),
            Tool::Grep(a) => j(a),
            Tool::WriteFile(a) => j(a),
            Tool::EditFile(a) => j(a),
            Tool::RunBash(a) => j(a),
            Tool::JobOutput(a) => j(a),
            Tool::KillJob(a) => j(a),
            Tool::Webfetch(a) => j(a),
            Tool::Mcp(a) => j(a),
            Tool::TodoAppend(a) => j(a),
            Tool::TodoList(a) | Tool::ReadScratchpad(a) => j(a),
            Tool::TodoUpdate(a) => j(a),
            Tool::WriteScratchpad(a) => j(a),
            Tool::AskQuestion(a) => j(a),
        }
    }
}

impl From<Tool> for ToolCall {
    fn from(t: Tool) -> ToolCall {
        ToolCall {
            tool: t.name().as_str().to_string(),
            args: t.args_json(),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn names_round_trip_exactly() {
        for t in ToolName::ALL {
            assert_eq!(ToolName::parse(t.as_str()), Some(t));
            assert_eq!(serde_json::to_value(t).unwrap(), json!(t.as_str()));
        }
        assert_eq!(ToolName::parse("Read_File"), None);
        assert_eq!(ToolName::parse("read_file "), None);
        assert_eq!(ToolName::parse("bash"), None);
    }

    #[test]
    fn arguments_round_trip_through_json() {
        let cases = [
            (
                ToolName::ReadFile,
                json!({"path": "a", "offset": 2, "limit": 5}),
            ),
            (ToolName::Grep, json!({"pattern": "x", "ignore_case": true})),
            (
                ToolName::EditFile,
                json!({"path": "a", "old_string": "o", "new_string": "n"}),
            ),
            (ToolName::RunBash, json!({"command": "ls", "timeout_s": 3})),
            (
                ToolName::RunBash,
                json!({"command": "make serve", "background": true}),
            ),
            (ToolName::JobOutput, json!({"job_id": "job-1"})),
            (ToolName::KillJob, json!({"job_id": "job-1"})),
            (ToolName::Mcp, json!({"server": "fs", "tool": "read"})),
            (
                ToolName::TodoUpdate,
                json!({"id": 1, "status": "in_progress"}),
            ),
            (ToolName::TodoList, json!({})),
        ];
        for (name, args) in cases {
            let t = Tool::from_json(name, args.clone()).unwrap();
            assert_eq!(t.name(), name);
            assert_eq!(t.args_json(), args, "{name}");
        }
        assert_eq!(
            Tool::from_json(ToolName::ReadScratchpad, Value::Null).unwrap(),
            Tool::ReadScratchpad(NoArgs {})
        );
    }

    #[test]
    fn serde_names_the_field_it_refuses() {
        let e = Tool::from_json(ToolName::ReadFile, json!({})).unwrap_err();
        assert!(e.to_string().contains("missing field `path`"), "{e}");
        let e = Tool::from_json(ToolName::RunBash, json!({"command": "ls", "x": 1})).unwrap_err();
        assert!(e.to_string().contains("unknown field `x`"), "{e}");
    }

    #[test]
    fn where_each_tool_runs() {
        let here: Vec<&str> = ToolName::ALL
            .into_iter()
            .filter(|t| t.facts().runs_in_agent())
            .map(ToolName::as_str)
            .collect();
        assert_eq!(
            here,
            [
                "todo_append",
                "todo_list",
                "todo_update",
                "read_scratchpad",
                "write_scratchpad",
                "ask_question"
            ]
        );
    }
}
