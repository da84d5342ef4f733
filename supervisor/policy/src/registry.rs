//! The tool registry: the allowlist of tools, their risk class and schema.
//!
//! A tool that is not listed here does not exist for the engine: calls to it
//! are denied with `UNKNOWN_TOOL`. The schemas are what `ListTools` shows the
//! model and what [`crate::validate`] checks arguments against, so the two can
//! never drift apart.

use std::sync::LazyLock;

use serde::Serialize;
use serde_json::{Value, json};
use tollgate_toolcall::{Facts, ToolName};

/// Risk class (docs/ARCHITECTURE.md "Reference: modes, tools, budgets").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolClass {
    Read,
    Write,
    Action,
    Planning,
    Interaction,
}

impl ToolClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ToolClass::Read => "read",
            ToolClass::Write => "write",
            ToolClass::Action => "action",
            ToolClass::Planning => "planning",
            ToolClass::Interaction => "interaction",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolSpec {
    /// The tool; `name` is its name (`ToolName::as_str`).
    #[serde(skip)]
    pub tool: ToolName,
    pub name: &'static str,
    pub class: ToolClass,
    pub description: &'static str,
    /// JSON Schema of the arguments object (`additionalProperties: false`).
    pub parameters: serde_json::Value,
    /// What the tool reads, writes and reaches: [`ToolName::facts`], the
    /// one table of them.
    pub facts: Facts,
}

/// run_bash's description where its commands run in bash (the native
/// backend on a host with bash, an image with bash).
pub const RUN_BASH_DESCRIPTION: &str = "Run a command line with bash (`bash -c`) in a sandbox \
    whose working directory is the workspace. Only the workspace, a private /tmp and a private \
    home are writable; the owner's toolchains are there read-only; git works; no network. \
    Your host secrets are not there. Some programs are refused (network clients, sudo, chmod, \
    docker, ...); use webfetch for http(s) URLs. Write commands plainly: commands hidden \
    behind variables, eval or piped into a shell are refused. When the sandbox refused something, the result ends with lines beginning `sandbox: ` \
    naming what was denied, why, and what would allow it.";

/// run_bash's description where the sandbox has no bash (an image
/// without it): commands run in `sh -c`.
pub const RUN_BASH_SH_DESCRIPTION: &str = "Run a command line with sh (`sh -c`; this sandbox has \
    no bash, so bash-only syntax such as [[ ]], arrays and <(...) fails) in a sandbox whose \
    working directory is the workspace. Only the workspace, a private /tmp and a private home \
    are writable; no network. Your host secrets are not there. Some programs are refused \
    (network clients, sudo, chmod, docker, ...); use webfetch for http(s) URLs. Write commands \
    plainly: commands hidden behind variables, eval or piped into a shell are refused.";

/// run_bash's description before the backend knows its shell (a Docker
/// image no sandbox was built from yet).
pub const RUN_BASH_SHELL_UNKNOWN_DESCRIPTION: &str = "Run a command line with bash (`bash -c`), \
    or with sh where the sandbox image has no bash, in a sandbox whose working directory is the \
    workspace. Only the workspace, a private /tmp and a private home are writable; no network. \
    Your host secrets are not there. Some programs are refused (network clients, sudo, chmod, \
    docker, ...); use webfetch for http(s) URLs. Write commands plainly: commands hidden behind \
    variables, eval or piped into a shell are refused.";

/// Longest path argument accepted (bytes). Linux's PATH_MAX is 4096 including
/// the NUL, so 4095 is the longest path the kernel could ever open.
pub const MAX_PATH_BYTES: usize = 4095;
/// Longest run_bash command accepted (bytes).
pub const MAX_COMMAND_BYTES: usize = 65_536;
/// Longest background job id accepted (bytes); the supervisor's are short
/// (`job-N`).
pub const MAX_JOB_ID_BYTES: usize = 64;
/// Longest URL accepted (bytes).
pub const MAX_URL_BYTES: usize = 8_192;
/// Longest file content accepted by write_file / edit_file (bytes).
pub const MAX_CONTENT_BYTES: usize = 16 * 1024 * 1024;

fn string(description: &str, max_len: usize) -> Value {
    json!({ "type": "string", "description": description, "maxLength": max_len })
}

fn integer(description: &str, minimum: u64) -> Value {
    json!({ "type": "integer", "description": description, "minimum": minimum })
}

fn boolean(description: &str) -> Value {
    json!({ "type": "boolean", "description": description })
}

fn object(properties: Value, required: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

static REGISTRY: LazyLock<Vec<ToolSpec>> = LazyLock::new(build);

/// Tools the engine decides but never offers to tollgate's own model: calls
/// that run somewhere else after tollgate's decision (an MCP server's tool,
/// called by Claude Code, Codex or an MCP gateway).
static GATED: LazyLock<Vec<ToolSpec>> = LazyLock::new(gated);

/// Longest MCP server or tool name accepted (bytes).
pub const MAX_MCP_NAME_BYTES: usize = 128;

fn gated() -> Vec<ToolSpec> {
    vec![ToolSpec {
        name: ToolName::Mcp.as_str(),
        tool: ToolName::Mcp,
        class: ToolClass::Action,
        description: "A tool of an MCP server, called by a client tollgate gates (Claude Code, \
            Codex, an MCP gateway). Decided by `mcp(SERVER.TOOL)` rules; without a rule, by the \
            mode's row for actions (ask in default mode).",
        parameters: object(
            json!({
                "server": string("The MCP server's name, as the client knows it.", MAX_MCP_NAME_BYTES),
                "tool": string("The tool's name on that server.", MAX_MCP_NAME_BYTES),
            }),
            &["server", "tool"],
        ),
        facts: ToolName::Mcp.facts(),
    }]
}

fn build() -> Vec<ToolSpec> {
    let path = |d: &str| string(d, MAX_PATH_BYTES);
    vec![
        ToolSpec {
            name: ToolName::ReadFile.as_str(),
            tool: ToolName::ReadFile,
            class: ToolClass::Read,
            description: "Read a text file inside the workspace. Returns numbered lines. \
                Large files are cut off with a notice: use offset (first line, 1-based) and \
                limit (number of lines) to read the rest. Paths are relative to the workspace; \
                files outside it cannot be read. Secret files such as .env need the user's approval.",
            parameters: object(
                json!({
                    "path": path("File path, relative to the workspace (for example src/main.rs)."),
                    "offset": integer("First line to return, 1-based. Default 1.", 0),
                    "limit": integer("Maximum number of lines to return.", 1),
                }),
                &["path"],
            ),
            facts: ToolName::ReadFile.facts(),
        },
        ToolSpec {
            name: ToolName::GlobFiles.as_str(),
            tool: ToolName::GlobFiles,
            class: ToolClass::Read,
            description: "List files inside the workspace whose path matches a glob pattern \
                (for example **/*.rs). Files ignored by .gitignore are skipped. Optionally \
                restrict the search to a directory.",
            parameters: object(
                json!({
                    "pattern": string("Glob pattern, for example src/**/*.rs.", 4096),
                    "path": path("Directory to search, relative to the workspace. Default: the workspace."),
                }),
                &["pattern"],
            ),
            facts: ToolName::GlobFiles.facts(),
        },
        ToolSpec {
            name: ToolName::Grep.as_str(),
            tool: ToolName::Grep,
            class: ToolClass::Read,
            description: "Search file contents inside the workspace with a regular expression. \
                Returns matching lines with file names and line numbers. Files ignored by \
                .gitignore are skipped.",
            parameters: object(
                json!({
                    "pattern": string("Regular expression to search for.", 4096),
                    "path": path("File or directory to search, relative to the workspace. Default: the workspace."),
                    "glob": string("Only search files whose path matches this glob, for example *.rs.", 4096),
                    "ignore_case": boolean("Match case-insensitively. Default false."),
                }),
                &["pattern"],
            ),
            facts: ToolName::Grep.facts(),
        },
        ToolSpec {
            name: ToolName::WriteFile.as_str(),
            tool: ToolName::WriteFile,
            class: ToolClass::Write,
            description: "Create a file inside the workspace, or replace its whole content. \
                Read a file before you overwrite it: overwriting a file you have not read, or \
                writing empty content over one, needs the user's explicit confirmation. Prefer \
                edit_file for changing part of a file.",
            parameters: object(
                json!({
                    "path": path("File path, relative to the workspace."),
                    "content": string("The complete new content of the file.", MAX_CONTENT_BYTES),
                }),
                &["path", "content"],
            ),
            facts: ToolName::WriteFile.facts(),
        },
        ToolSpec {
            name: ToolName::EditFile.as_str(),
            tool: ToolName::EditFile,
            class: ToolClass::Write,
            description: "Replace text in a file inside the workspace. old_string must match \
                exactly once unless replace_all is true; include enough surrounding lines to \
                make it unique.",
            parameters: object(
                json!({
                    "path": path("File path, relative to the workspace."),
                    "old_string": string("The exact text to replace.", MAX_CONTENT_BYTES),
                    "new_string": string("The text to put in its place.", MAX_CONTENT_BYTES),
                    "replace_all": boolean("Replace every occurrence instead of exactly one. Default false."),
                }),
                &["path", "old_string", "new_string"],
            ),
            facts: ToolName::EditFile.facts(),
        },
        ToolSpec {
            name: ToolName::RunBash.as_str(),
            tool: ToolName::RunBash,
            class: ToolClass::Action,
            description: RUN_BASH_DESCRIPTION,
            parameters: object(
                json!({
                    "command": string("The bash command line to run.", MAX_COMMAND_BYTES),
                    "timeout_s": integer("Timeout in seconds (the supervisor caps it).", 1),
                    "background": boolean("Start it as a background job (a dev server, a \
                        watcher) and return its job id at once: it runs until it exits, \
                        kill_job ends it, or the session ends. Read its output with \
                        job_output. timeout_s does not apply. Default false."),
                }),
                &["command"],
            ),
            facts: ToolName::RunBash.facts(),
        },
        ToolSpec {
            name: ToolName::JobOutput.as_str(),
            tool: ToolName::JobOutput,
            class: ToolClass::Read,
            description: "Read what a background job (run_bash with background: true) printed \
                since the last job_output of it, stdout and stderr merged, and whether it is \
                still running or how it ended.",
            parameters: object(
                json!({ "job_id": string("The job's id, as run_bash returned it.", MAX_JOB_ID_BYTES) }),
                &["job_id"],
            ),
            facts: ToolName::JobOutput.facts(),
        },
        ToolSpec {
            name: ToolName::KillJob.as_str(),
            tool: ToolName::KillJob,
            class: ToolClass::Read,
            description: "End a background job of this session now (its whole process group \
                is killed) and return what it printed since the last read.",
            parameters: object(
                json!({ "job_id": string("The job's id, as run_bash returned it.", MAX_JOB_ID_BYTES) }),
                &["job_id"],
            ),
            facts: ToolName::KillJob.facts(),
        },
        ToolSpec {
            name: ToolName::Webfetch.as_str(),
            tool: ToolName::Webfetch,
            class: ToolClass::Action,
            description: "Fetch an http or https URL and return its content as text (HTML is \
                converted). Addresses on the local machine or private networks (localhost, \
                10.x, 192.168.x, cloud metadata, ...) are refused.",
            parameters: object(
                json!({
                    "url": string("Absolute http:// or https:// URL.", MAX_URL_BYTES),
                    "max_bytes": integer("Maximum number of bytes to download.", 1),
                }),
                &["url"],
            ),
            facts: ToolName::Webfetch.facts(),
        },
        ToolSpec {
            name: ToolName::TodoAppend.as_str(),
            tool: ToolName::TodoAppend,
            class: ToolClass::Planning,
            description: "Add an item to your todo list for this task. Returns the item's id.",
            parameters: object(
                json!({ "text": string("What needs doing, in one line.", 4096) }),
                &["text"],
            ),
            facts: ToolName::TodoAppend.facts(),
        },
        ToolSpec {
            name: ToolName::TodoList.as_str(),
            tool: ToolName::TodoList,
            class: ToolClass::Planning,
            description: "Show your todo list with each item's id and status.",
            parameters: object(json!({}), &[]),
            facts: ToolName::TodoList.facts(),
        },
        ToolSpec {
            name: ToolName::TodoUpdate.as_str(),
            tool: ToolName::TodoUpdate,
            class: ToolClass::Planning,
            description: "Change the status (pending, in_progress, done) or the text of a todo item.",
            parameters: object(
                json!({
                    "id": integer("The item's id, as todo_list shows it.", 1),
                    "status": {
                        "type": "string",
                        "enum": ["pending", "in_progress", "done"],
                        "description": "New status.",
                    },
                    "text": string("New text for the item.", 4096),
                }),
                &["id"],
            ),
            facts: ToolName::TodoUpdate.facts(),
        },
        ToolSpec {
            name: ToolName::ReadScratchpad.as_str(),
            tool: ToolName::ReadScratchpad,
            class: ToolClass::Planning,
            description: "Read your scratchpad: notes you keep for yourself during this session.",
            parameters: object(json!({}), &[]),
            facts: ToolName::ReadScratchpad.facts(),
        },
        ToolSpec {
            name: ToolName::WriteScratchpad.as_str(),
            tool: ToolName::WriteScratchpad,
            class: ToolClass::Planning,
            description: "Replace the content of your scratchpad with new notes.",
            parameters: object(
                json!({ "content": string("The new scratchpad content.", 65_536) }),
                &["content"],
            ),
            facts: ToolName::WriteScratchpad.facts(),
        },
        ToolSpec {
            name: ToolName::AskQuestion.as_str(),
            tool: ToolName::AskQuestion,
            class: ToolClass::Interaction,
            description: "Ask the user a question and wait for the answer. Use it when you \
                need a decision or information only the user has.",
            parameters: object(
                json!({ "question": string("The question, in one or two sentences.", 4096) }),
                &["question"],
            ),
            facts: ToolName::AskQuestion.facts(),
        },
    ]
}

/// Every tool tollgate knows, in a stable order.
pub fn registry() -> &'static [ToolSpec] {
    &REGISTRY
}

/// The tools the engine decides but never offers to the model (`mcp`).
pub fn gated_tools() -> &'static [ToolSpec] {
    &GATED
}

/// The spec of one tool, if it exists: a tool of the registry, or a gated
/// one.
pub fn lookup(name: &str) -> Option<&'static ToolSpec> {
    registry()
        .iter()
        .chain(gated_tools())
        .find(|t| t.name == name)
}

/// The spec of a tool: every [`ToolName`] has one (a test walks them).
pub fn spec(tool: ToolName) -> Option<&'static ToolSpec> {
    registry()
        .iter()
        .chain(gated_tools())
        .find(|t| t.tool == tool)
}

/// Whether `name` is offered to tollgate's own model (ListTools, CallTool).
pub fn offered(name: &str) -> bool {
    registry().iter().any(|t| t.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_brief_tool_is_registered_with_its_class() {
        let want = [
            ("read_file", ToolClass::Read),
            ("glob_files", ToolClass::Read),
            ("grep", ToolClass::Read),
            ("write_file", ToolClass::Write),
            ("edit_file", ToolClass::Write),
            ("run_bash", ToolClass::Action),
            ("job_output", ToolClass::Read),
            ("kill_job", ToolClass::Read),
            ("webfetch", ToolClass::Action),
            ("todo_append", ToolClass::Planning),
            ("todo_list", ToolClass::Planning),
            ("todo_update", ToolClass::Planning),
            ("read_scratchpad", ToolClass::Planning),
            ("write_scratchpad", ToolClass::Planning),
            ("ask_question", ToolClass::Interaction),
        ];
        let got: Vec<(&str, ToolClass)> = registry().iter().map(|t| (t.name, t.class)).collect();
        assert_eq!(got, want.to_vec());
    }

    #[test]
    fn schemas_are_closed_objects_whose_required_fields_exist() {
        for t in registry() {
            let p = &t.parameters;
            assert_eq!(p["type"], "object", "{}", t.name);
            assert_eq!(p["additionalProperties"], false, "{}", t.name);
            let props = p["properties"].as_object().unwrap();
            for r in p["required"].as_array().unwrap() {
                assert!(props.contains_key(r.as_str().unwrap()), "{}: {r}", t.name);
            }
            assert!(!t.description.is_empty());
            let in_agent = matches!(t.class, ToolClass::Planning | ToolClass::Interaction);
            assert_eq!(t.facts.runs_in_agent(), in_agent, "{}", t.name);
            assert_eq!(t.facts, t.tool.facts(), "{}", t.name);
            assert_eq!(t.name, t.tool.as_str());
        }
    }

    #[test]
    fn mcp_is_decided_but_never_offered() {
        let mcp = lookup("mcp").unwrap();
        assert_eq!(mcp.class, ToolClass::Action);
        assert!(!offered("mcp"));
        assert!(registry().iter().all(|t| t.name != "mcp"));
        assert!(offered("read_file"));
    }

    #[test]
    fn every_tool_name_has_one_spec() {
        for t in ToolName::ALL {
            let n = registry()
                .iter()
                .chain(gated_tools())
                .filter(|s| s.tool == t)
                .count();
            assert_eq!(n, 1, "{t}");
            assert_eq!(spec(t).map(|s| s.name), Some(t.as_str()));
        }
    }

    #[test]
    fn lookup_is_exact() {
        assert!(lookup("read_file").is_some());
        assert!(lookup("Read_File").is_none());
        assert!(lookup("read_file ").is_none());
        assert!(lookup("bash").is_none());
    }
}
