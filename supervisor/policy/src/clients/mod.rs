//! The coding agents tollgate gates through `agent hook` (Claude Code and
//! Codex), and the one table that says what each of their tools is in
//! tollgate's terms.
//!
//! A client tool is one of: a tollgate tool (Bash → run_bash, Read →
//! read_file, ...), decided by the engine exactly like a `CallTool`; a patch
//! (Codex's `apply_patch`), decided file by file; an MCP server's tool
//! (`mcp__SERVER__TOOL`), decided by `mcp(SERVER.TOOL)` rules; or the
//! client's own bookkeeping (planning, todos, tool search), which touches no
//! host state and is allowed. A tool that is none of these is refused: the
//! table is an allowlist, like the registry.
//!
//! Pure: the caller gives the event's `cwd`; nothing here looks at a disk.

mod patch;

use std::path::Path;

use serde_json::{Map, Value};
use tollgate_toolcall::{self as tool, Tool};

use crate::display::shorten;

pub use patch::{FileOp, PatchError, parse as parse_patch};

/// A client tollgate's hook speaks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Client {
    ClaudeCode,
    Codex,
}

impl Client {
    pub const ALL: [Client; 2] = [Client::ClaudeCode, Client::Codex];

    /// The name in configs, the audit log and `supervisorctl sessions`.
    pub fn as_str(self) -> &'static str {
        match self {
            Client::ClaudeCode => "claude-code",
            Client::Codex => "codex",
        }
    }

    pub fn parse(s: &str) -> Option<Client> {
        Client::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

impl std::fmt::Display for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a client's tool call is, for tollgate.
#[derive(Debug, Clone, PartialEq)]
pub enum Mapped {
    /// Decided by the engine as these calls (one, or one per file of a
    /// patch), checked against their schemas like every call. `tool` is
    /// what the audit log names.
    Gated {
        tool: &'static str,
        calls: Vec<Tool>,
        /// For the client's shell tool: what a routed run executes.
        shell: Option<ShellCall>,
    },
    /// The client's own bookkeeping: touches no host state; allowed.
    Harmless,
    /// Refused before the engine: the rule and a sentence for the model.
    Refused { rule: &'static str, reason: String },
}

/// A shell command the client's shell tool would run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellCall {
    pub command: String,
    pub timeout_s: Option<u64>,
}

/// What a table entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Shell,
    Read,
    Write,
    Edit,
    Glob,
    Grep,
    WebFetch,
    Patch,
    Image,
    /// Input to a process a gated command started: harmless only when it
    /// types nothing (a poll).
    Stdin,
    Harmless,
}

/// The table: every client tool tollgate knows, for both clients (their
/// names do not collide; both report their shell tool as `Bash`). Anything
/// else, except `mcp__…`, is refused.
const TABLE: &[(&str, Kind)] = &[
    ("Bash", Kind::Shell),
    ("Read", Kind::Read),
    ("Write", Kind::Write),
    ("Edit", Kind::Edit),
    ("Glob", Kind::Glob),
    ("Grep", Kind::Grep),
    ("WebFetch", Kind::WebFetch),
    ("apply_patch", Kind::Patch),
    ("view_image", Kind::Image),
    ("write_stdin", Kind::Stdin),
    // Claude Code's own bookkeeping. A subagent (Agent, Task) calls its
    // tools through this same hook.
    ("TodoWrite", Kind::Harmless),
    ("ToolSearch", Kind::Harmless),
    ("EnterPlanMode", Kind::Harmless),
    ("ExitPlanMode", Kind::Harmless),
    ("AskUserQuestion", Kind::Harmless),
    ("Agent", Kind::Harmless),
    ("Task", Kind::Harmless),
    ("ListAgents", Kind::Harmless),
    ("TaskCreate", Kind::Harmless),
    ("TaskGet", Kind::Harmless),
    ("TaskList", Kind::Harmless),
    ("TaskUpdate", Kind::Harmless),
    ("TaskOutput", Kind::Harmless),
    ("TaskStop", Kind::Harmless),
    ("BashOutput", Kind::Harmless),
    ("KillShell", Kind::Harmless),
    // Codex's.
    ("update_plan", Kind::Harmless),
    ("request_user_input", Kind::Harmless),
    ("tool_search", Kind::Harmless),
    ("get_goal", Kind::Harmless),
    ("create_goal", Kind::Harmless),
    ("update_goal", Kind::Harmless),
];

/// The client tools tollgate gates or allows, for messages and docs.
pub fn known_tools() -> impl Iterator<Item = &'static str> {
    TABLE.iter().map(|(n, _)| *n)
}

/// Whether `name` is one of the clients' own harmless tools.
pub fn is_harmless(name: &str) -> bool {
    TABLE
        .iter()
        .any(|(n, k)| *n == name && *k == Kind::Harmless)
}

const RULE_UNKNOWN: &str = "clients:unknown-tool";
const RULE_INPUT: &str = "clients:input";

/// Maps one client tool call. `cwd` is the event's working directory
/// (absolute): relative paths of a patch and a missing search path are
/// taken from it.
pub fn map(tool_name: &str, input: &Value, cwd: &Path) -> Mapped {
    if let Some(rest) = tool_name.strip_prefix("mcp__") {
        return mcp(rest, input);
    }
    let Some((_, kind)) = TABLE.iter().find(|(n, _)| *n == tool_name) else {
        return Mapped::Refused {
            rule: RULE_UNKNOWN,
            reason: format!(
                "tollgate has no rule for the tool `{}`, so it is refused. Use Bash, Read, Write, Edit, Glob, Grep or WebFetch (or apply_patch in Codex).",
                shorten(tool_name, 80)
            ),
        };
    };
    let Some(obj) = input.as_object() else {
        return input_refused(tool_name, "its tool_input is not a JSON object");
    };
    let r = match kind {
        Kind::Shell => shell(obj),
        Kind::Read => read(obj),
        Kind::Write => file_field(obj, "file_path").and_then(|p| {
            Ok(gated(Tool::WriteFile(tool::WriteFile {
                path: p.to_string(),
                content: string(obj, "content")?.to_string(),
            })))
        }),
        Kind::Edit => edit(obj),
        Kind::Glob => glob(obj, cwd),
        Kind::Grep => grep(obj, cwd),
        Kind::WebFetch => string(obj, "url").map(|u| {
            gated(Tool::Webfetch(tool::Webfetch {
                url: u.to_string(),
                max_bytes: None,
            }))
        }),
        Kind::Patch => patch(obj, cwd),
        Kind::Image => file_field(obj, "path").map(|p| {
            gated(Tool::ReadFile(tool::ReadFile {
                path: p.to_string(),
                offset: None,
                limit: None,
            }))
        }),
        Kind::Stdin => match obj.get("chars").and_then(Value::as_str) {
            None | Some("") => Ok(Mapped::Harmless),
            Some(_) => Err(
                "it types into a running process, which tollgate cannot judge; run a new command instead".to_string(),
            ),
        },
        Kind::Harmless => Ok(Mapped::Harmless),
    };
    r.unwrap_or_else(|why| input_refused(tool_name, &why))
}

fn input_refused(tool: &str, why: &str) -> Mapped {
    Mapped::Refused {
        rule: RULE_INPUT,
        reason: format!(
            "the `{}` call cannot be checked: {why}; it is refused.",
            shorten(tool, 80)
        ),
    }
}

/// One tollgate call, named in the audit log by its own name.
fn gated(call: Tool) -> Mapped {
    Mapped::Gated {
        tool: call.name().as_str(),
        calls: vec![call],
        shell: None,
    }
}

fn string<'a>(obj: &'a Map<String, Value>, key: &str) -> Result<&'a str, String> {
    match obj.get(key) {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(format!("`{key}` is not a string")),
        None => Err(format!("`{key}` is missing")),
    }
}

/// An optional string field (absent or null: `None`).
fn opt_string(obj: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => string(obj, key).map(|s| Some(s.to_string())),
    }
}

/// An optional whole number (absent or null: `None`).
fn opt_u64(obj: &Map<String, Value>, key: &str) -> Result<Option<u64>, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("`{key}` is not a whole number")),
    }
}

/// An optional boolean (absent or null: `None`).
fn opt_bool(obj: &Map<String, Value>, key: &str) -> Result<Option<bool>, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_bool()
            .map(Some)
            .ok_or_else(|| format!("`{key}` is not true or false")),
    }
}

/// A path field the client always sends absolute.
fn file_field<'a>(obj: &'a Map<String, Value>, key: &str) -> Result<&'a str, String> {
    let p = string(obj, key)?;
    if !Path::new(p).is_absolute() {
        return Err(format!(
            "`{key}` is the relative path `{}`; the client sends absolute paths",
            shorten(p, 160)
        ));
    }
    Ok(p)
}

fn shell(obj: &Map<String, Value>) -> Result<Mapped, String> {
    let command = string(obj, "command")?;
    if command.trim().is_empty() {
        return Err("`command` is empty".to_string());
    }
    // Claude Code's `timeout` is in milliseconds.
    let timeout_s = match obj.get("timeout") {
        None | Some(Value::Null) => None,
        Some(v) => {
            let ms = v
                .as_u64()
                .ok_or_else(|| "`timeout` is not a number of milliseconds".to_string())?;
            Some(ms.div_ceil(1000).max(1))
        }
    };
    let call = Tool::RunBash(tool::RunBash {
        command: command.to_string(),
        timeout_s,
    });
    Ok(Mapped::Gated {
        tool: call.name().as_str(),
        calls: vec![call],
        shell: Some(ShellCall {
            command: command.to_string(),
            timeout_s,
        }),
    })
}

fn read(obj: &Map<String, Value>) -> Result<Mapped, String> {
    Ok(gated(Tool::ReadFile(tool::ReadFile {
        path: file_field(obj, "file_path")?.to_string(),
        offset: opt_u64(obj, "offset")?,
        limit: opt_u64(obj, "limit")?,
    })))
}

fn edit(obj: &Map<String, Value>) -> Result<Mapped, String> {
    Ok(gated(Tool::EditFile(tool::EditFile {
        path: file_field(obj, "file_path")?.to_string(),
        old_string: string(obj, "old_string")?.to_string(),
        new_string: string(obj, "new_string")?.to_string(),
        replace_all: opt_bool(obj, "replace_all")?,
    })))
}

/// The search path of Glob and Grep: the event's cwd when none is given.
fn search_path(obj: &Map<String, Value>, cwd: &Path) -> Result<String, String> {
    match obj.get("path") {
        None | Some(Value::Null) => Ok(cwd.to_string_lossy().into_owned()),
        Some(_) => Ok(file_field(obj, "path")?.to_string()),
    }
}

fn glob(obj: &Map<String, Value>, cwd: &Path) -> Result<Mapped, String> {
    Ok(gated(Tool::GlobFiles(tool::GlobFiles {
        pattern: string(obj, "pattern")?.to_string(),
        path: Some(search_path(obj, cwd)?),
    })))
}

/// Grep: the pattern, an optional glob, the search path, and `-i`.
fn grep(obj: &Map<String, Value>, cwd: &Path) -> Result<Mapped, String> {
    let pattern = string(obj, "pattern")?.to_string();
    let glob = opt_string(obj, "glob")?;
    Ok(gated(Tool::Grep(tool::Grep {
        pattern,
        path: Some(search_path(obj, cwd)?),
        glob,
        ignore_case: (obj.get("-i").and_then(Value::as_bool) == Some(true)).then_some(true),
    })))
}

/// Codex's apply_patch: one engine call per file it touches.
fn patch(obj: &Map<String, Value>, cwd: &Path) -> Result<Mapped, String> {
    let text = match obj.get("command").or_else(|| obj.get("input")) {
        Some(Value::String(s)) => s,
        _ => return Err("the patch text (`command`) is missing".to_string()),
    };
    let ops = parse_patch(text).map_err(|e| format!("tollgate cannot read the patch ({})", e.0))?;
    let abs = |p: &str| cwd.join(p).to_string_lossy().into_owned();
    let write = |path: &str, content: String| {
        Tool::WriteFile(tool::WriteFile {
            path: abs(path),
            content,
        })
    };
    let mut calls = Vec::new();
    for op in ops {
        match op {
            FileOp::Add { path, content } => calls.push(write(&path, content)),
            // Deleting is writing nothing over the file: destructive when
            // the file has content.
            FileOp::Delete { path } => calls.push(write(&path, String::new())),
            FileOp::Update {
                path,
                removed,
                added,
                move_to,
            } => {
                if let Some(to) = move_to {
                    calls.push(write(&to, added.clone()));
                }
                calls.push(Tool::EditFile(tool::EditFile {
                    path: abs(&path),
                    old_string: removed,
                    new_string: added,
                    replace_all: None,
                }));
            }
        }
    }
    Ok(Mapped::Gated {
        tool: "apply_patch",
        calls,
        shell: None,
    })
}

/// `mcp__SERVER__TOOL` (Claude Code and Codex both name MCP tools so).
fn mcp(rest: &str, input: &Value) -> Mapped {
    // Claude Code also sends the server's name; the name is then exact.
    let named = input.get("mcp_server").and_then(Value::as_str);
    let split = match named {
        Some(server) => rest
            .strip_prefix(server)
            .and_then(|t| t.strip_prefix("__"))
            .map(|tool| (server, tool)),
        None => rest.split_once("__"),
    };
    let Some((server, tool)) = split.filter(|(s, t)| !s.is_empty() && !t.is_empty()) else {
        return Mapped::Refused {
            rule: RULE_INPUT,
            reason: format!(
                "the MCP tool name `mcp__{}` is not `mcp__SERVER__TOOL`, so it is refused.",
                shorten(rest, 120)
            ),
        };
    };
    gated(Tool::Mcp(tool::McpToolCall {
        server: server.to_string(),
        tool: tool.to_string(),
    }))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn calls(m: &Mapped) -> Vec<(String, Value)> {
        match m {
            Mapped::Gated { calls, .. } => calls
                .iter()
                .map(|c| (c.name().as_str().to_string(), c.args_json()))
                .collect(),
            other => panic!("not gated: {other:?}"),
        }
    }

    const CWD: &str = "/w";

    fn m(tool: &str, input: Value) -> Mapped {
        map(tool, &input, Path::new(CWD))
    }

    #[test]
    fn claude_code_tools_become_tollgate_tools() {
        assert_eq!(
            calls(&m(
                "Read",
                json!({"file_path": "/w/a.rs", "offset": 3, "limit": 9})
            )),
            vec![(
                "read_file".into(),
                json!({"path": "/w/a.rs", "offset": 3, "limit": 9})
            )]
        );
        assert_eq!(
            calls(&m("Write", json!({"file_path": "/w/a", "content": "x"}))),
            vec![("write_file".into(), json!({"path": "/w/a", "content": "x"}))]
        );
        assert_eq!(
            calls(&m(
                "Edit",
                json!({"file_path": "/w/a", "old_string": "o", "new_string": "n", "replace_all": true})
            )),
            vec![(
                "edit_file".into(),
                json!({"path": "/w/a", "old_string": "o", "new_string": "n", "replace_all": true})
            )]
        );
        assert_eq!(
            calls(&m("Glob", json!({"pattern": "**/*.rs"}))),
            vec![(
                "glob_files".into(),
                json!({"pattern": "**/*.rs", "path": "/w"})
            )]
        );
        assert_eq!(
            calls(&m(
                "Grep",
                json!({"pattern": "fn", "path": "/w/src", "glob": "*.rs", "-i": true, "output_mode": "content"})
            )),
            vec![(
                "grep".into(),
                json!({"pattern": "fn", "path": "/w/src", "glob": "*.rs", "ignore_case": true})
            )]
        );
        assert_eq!(
            calls(&m(
                "WebFetch",
                json!({"url": "https://docs.rs/", "prompt": "p"})
            )),
            vec![("webfetch".into(), json!({"url": "https://docs.rs/"}))]
        );
        assert_eq!(
            calls(&m("view_image", json!({"path": "/w/a.png"}))),
            vec![("read_file".into(), json!({"path": "/w/a.png"}))]
        );
    }

    #[test]
    fn bash_keeps_its_command_for_routing_and_its_timeout_in_seconds() {
        let got = m(
            "Bash",
            json!({"command": "cargo test", "timeout": 1500, "description": "d"}),
        );
        assert_eq!(
            got,
            Mapped::Gated {
                tool: "run_bash",
                calls: vec![Tool::RunBash(tool::RunBash {
                    command: "cargo test".into(),
                    timeout_s: Some(2),
                })],
                shell: Some(ShellCall {
                    command: "cargo test".into(),
                    timeout_s: Some(2),
                }),
            }
        );
    }

    #[test]
    fn a_patch_is_decided_file_by_file_against_the_cwd() {
        let text = "*** Begin Patch\n*** Add File: new.txt\n+hi\n*** Update File: src/a.rs\n\
                    *** Move to: src/b.rs\n@@\n-old\n+new\n*** Delete File: /w/gone\n*** End Patch\n";
        assert_eq!(
            calls(&m("apply_patch", json!({ "command": text }))),
            vec![
                (
                    "write_file".into(),
                    json!({"path": "/w/new.txt", "content": "hi\n"})
                ),
                (
                    "write_file".into(),
                    json!({"path": "/w/src/b.rs", "content": "new\n"})
                ),
                (
                    "edit_file".into(),
                    json!({"path": "/w/src/a.rs", "old_string": "old\n", "new_string": "new\n"})
                ),
                (
                    "write_file".into(),
                    json!({"path": "/w/gone", "content": ""})
                ),
            ]
        );
        let bad = m(
            "apply_patch",
            json!({ "command": "*** Begin Patch\n*** Nope: x\n" }),
        );
        let Mapped::Refused { reason, .. } = bad else {
            panic!("{bad:?}")
        };
        assert!(reason.contains("cannot read the patch"), "{reason}");
    }

    #[test]
    fn mcp_tools_split_into_server_and_tool() {
        assert_eq!(
            calls(&m("mcp__github__create_issue", json!({"title": "x"}))),
            vec![(
                "mcp".into(),
                json!({"server": "github", "tool": "create_issue"})
            )]
        );
        // With the server named, a `__` inside it is not a split point.
        assert_eq!(
            calls(&m("mcp__my__srv__do_it", json!({"mcp_server": "my__srv"}))),
            vec![("mcp".into(), json!({"server": "my__srv", "tool": "do_it"}))]
        );
        assert!(matches!(
            m("mcp__nosplit", json!({})),
            Mapped::Refused { .. }
        ));
    }

    #[test]
    fn the_table_is_an_allowlist() {
        assert_eq!(m("TodoWrite", json!({"todos": []})), Mapped::Harmless);
        assert_eq!(m("update_plan", json!({})), Mapped::Harmless);
        assert_eq!(m("write_stdin", json!({"chars": ""})), Mapped::Harmless);
        for (tool, input) in [
            ("WebSearch", json!({"query": "x"})),
            ("NotebookEdit", json!({})),
            ("bash", json!({"command": "ls"})),
            ("write_stdin", json!({"chars": "rm -rf /\n"})),
        ] {
            assert!(
                matches!(m(tool, input), Mapped::Refused { .. }),
                "{tool} must be refused"
            );
        }
        assert!(is_harmless("TodoWrite"));
        assert!(!is_harmless("Bash"));
        assert!(known_tools().any(|t| t == "apply_patch"));
    }

    #[test]
    fn bad_input_is_refused_with_the_field_named() {
        for (tool, input, want) in [
            ("Read", json!({"file_path": "a.rs"}), "relative path `a.rs`"),
            ("Read", json!({}), "`file_path` is missing"),
            (
                "Write",
                json!({"file_path": "/w/a"}),
                "`content` is missing",
            ),
            ("Bash", json!({"command": 7}), "`command` is not a string"),
            ("Bash", json!({"command": "  "}), "`command` is empty"),
            (
                "Bash",
                json!({"command": "ls", "timeout": "x"}),
                "`timeout`",
            ),
            (
                "Grep",
                json!({"pattern": "x", "path": "src"}),
                "relative path",
            ),
            ("Read", json!("not an object"), "not a JSON object"),
            (
                "Read",
                json!({"file_path": "/w/a", "offset": "3"}),
                "`offset` is not a whole number",
            ),
            (
                "Edit",
                json!({"file_path": "/w/a", "old_string": "o", "new_string": "n", "replace_all": 1}),
                "`replace_all` is not true or false",
            ),
            (
                "Grep",
                json!({"pattern": "x", "glob": 5}),
                "`glob` is not a string",
            ),
        ] {
            let Mapped::Refused { reason, rule } = m(tool, input) else {
                panic!("{tool}: not refused")
            };
            assert_eq!(rule, RULE_INPUT);
            assert!(reason.contains(want), "{tool}: {reason}");
        }
    }

    #[test]
    fn client_names_round_trip() {
        for c in Client::ALL {
            assert_eq!(Client::parse(c.as_str()), Some(c));
        }
        assert_eq!(Client::parse("claude"), None);
    }
}
