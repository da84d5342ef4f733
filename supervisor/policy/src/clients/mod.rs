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
//! Every tool the client runs itself is decided by what that run reads or
//! writes, not by one argument (docs/CLIENTS.md, "What a client's own tool
//! reaches"): Grep is walked as the client's ripgrep walks it and narrowed
//! to leave secret files out ([`search`]); a subagent with `isolation`, and
//! WebSearch, which tollgate cannot bound, are refused with the reason.
//!
//! Pure: the caller gives the event's `cwd` and the server the client
//! names; the files a search reaches come in through
//! [`crate::SearchFacts`].

mod fields;
mod mcp_name;
mod patch;
pub mod search;
mod tools;

use std::path::Path;

use serde_json::Value;
use tollgate_toolcall::Tool;

use crate::display::shorten;

pub use patch::{FileOp, PatchError, parse as parse_patch};
pub use search::{ClientSearch, SearchPlan, left_out_note, plan as plan_search};
pub use tools::{RULE_AGENT_ISOLATION, RULE_WEB_SEARCH};

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
        /// For the client's own search: walked as the client runs it before
        /// the answer ([`search::plan`]), and narrowed when it would read
        /// secret files.
        search: Option<ClientSearch>,
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
    /// Claude Code's `run_in_background`: a background job of the session.
    pub background: bool,
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
    List,
    NotebookEdit,
    WebFetch,
    WebSearch,
    Patch,
    Image,
    /// A subagent: the client's bookkeeping unless it is isolated.
    Agent,
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
    ("LS", Kind::List),
    ("NotebookEdit", Kind::NotebookEdit),
    ("WebFetch", Kind::WebFetch),
    ("WebSearch", Kind::WebSearch),
    ("apply_patch", Kind::Patch),
    ("view_image", Kind::Image),
    ("write_stdin", Kind::Stdin),
    // A subagent (Agent, Task) calls its tools through this same hook.
    ("Agent", Kind::Agent),
    ("Task", Kind::Agent),
    // Claude Code's own bookkeeping.
    ("TodoWrite", Kind::Harmless),
    ("ToolSearch", Kind::Harmless),
    ("EnterPlanMode", Kind::Harmless),
    ("ExitPlanMode", Kind::Harmless),
    ("AskUserQuestion", Kind::Harmless),
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

/// What the client's event says beside the tool call.
#[derive(Debug, Clone, Copy)]
pub struct MapCtx<'a> {
    /// The event's working directory (absolute): relative paths of a patch
    /// and a missing search path are taken from it.
    pub cwd: &'a Path,
    /// The MCP server the client reports for an `mcp__…` tool (Claude
    /// Code's `mcp_server`), never the tool's input.
    pub mcp_server: Option<&'a str>,
}

/// Maps one client tool call.
pub fn map(tool_name: &str, input: &Value, ctx: &MapCtx<'_>) -> Mapped {
    if let Some(rest) = tool_name.strip_prefix("mcp__") {
        return mcp_name::map(rest, ctx.mcp_server);
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
    let cwd = ctx.cwd;
    let r = match kind {
        Kind::Shell => tools::shell(obj),
        Kind::Read => tools::read(obj, "file_path"),
        Kind::Write => tools::write(obj),
        Kind::Edit => tools::edit(obj),
        Kind::Glob => tools::glob(obj, cwd),
        Kind::Grep => tools::grep(obj, cwd),
        Kind::List => tools::list(obj, cwd),
        Kind::NotebookEdit => tools::notebook_edit(obj),
        Kind::WebFetch => tools::web_fetch(obj),
        Kind::WebSearch => tools::web_search(obj),
        Kind::Patch => tools::patch(obj, cwd),
        Kind::Image => tools::read(obj, "path"),
        Kind::Stdin => tools::stdin(obj),
        Kind::Agent => tools::agent(obj),
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
        search: None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use tollgate_toolcall as tool;

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
        let ctx = MapCtx {
            cwd: Path::new(CWD),
            mcp_server: None,
        };
        map(tool, &input, &ctx)
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
                    background: None,
                })],
                shell: Some(ShellCall {
                    command: "cargo test".into(),
                    timeout_s: Some(2),
                    background: false,
                }),
                search: None,
            }
        );
    }

    #[test]
    fn bash_run_in_background_is_a_background_job() {
        let got = m(
            "Bash",
            json!({"command": "npm run dev", "run_in_background": true}),
        );
        let Mapped::Gated { calls, shell, .. } = got else {
            panic!("{got:?}")
        };
        assert_eq!(
            calls,
            vec![Tool::RunBash(tool::RunBash {
                command: "npm run dev".into(),
                timeout_s: None,
                background: Some(true),
            })]
        );
        assert!(shell.is_some_and(|s| s.background));
        let bad = m("Bash", json!({"command": "x", "run_in_background": "yes"}));
        assert!(
            matches!(&bad, Mapped::Refused { reason, .. } if reason.contains("run_in_background")),
            "{bad:?}"
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
        // The server the client names beside the call picks the split.
        let named = MapCtx {
            cwd: Path::new(CWD),
            mcp_server: Some("my__srv"),
        };
        assert_eq!(
            calls(&map("mcp__my__srv__do_it", &json!({}), &named)),
            vec![("mcp".into(), json!({"server": "my__srv", "tool": "do_it"}))]
        );
        assert!(matches!(
            m("mcp__nosplit", json!({})),
            Mapped::Refused { .. }
        ));
    }

    /// The finding: the tool's input (`mcp_server`, written by the model)
    /// chose where `mcp__A__B__C` splits, so a call could pass for another
    /// server's tool.
    #[test]
    fn an_mcp_calls_input_cannot_choose_its_server() {
        assert_eq!(
            calls(&m("mcp__a__b__c", json!({"mcp_server": "a__b"}))),
            vec![
                ("mcp".into(), json!({"server": "a", "tool": "b__c"})),
                ("mcp".into(), json!({"server": "a__b", "tool": "c"})),
            ]
        );
    }

    #[test]
    fn the_table_is_an_allowlist() {
        assert_eq!(m("TodoWrite", json!({"todos": []})), Mapped::Harmless);
        assert_eq!(m("update_plan", json!({})), Mapped::Harmless);
        assert_eq!(m("write_stdin", json!({"chars": ""})), Mapped::Harmless);
        for (tool, input) in [
            ("Skill", json!({"skill": "x"})),
            ("EnterWorktree", json!({})),
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

    fn refused(m: &Mapped) -> (&'static str, String) {
        match m {
            Mapped::Refused { rule, reason } => (*rule, reason.clone()),
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn a_grep_carries_its_search_for_the_walk() {
        let input = json!({"pattern": "KEY", "glob": ".env", "type": "py", "multiline": true});
        let Mapped::Gated { search, calls, .. } = m("Grep", input.clone()) else {
            panic!()
        };
        assert_eq!(
            search,
            Some(ClientSearch {
                path: "/w".into(),
                input: input.as_object().cloned().unwrap(),
            })
        );
        assert_eq!(calls.len(), 1);
        let (rule, reason) = refused(&m("Grep", json!({"pattern": "x", "type": 3})));
        assert_eq!(rule, RULE_INPUT);
        assert!(reason.contains("`type` is not a string"), "{reason}");
    }

    #[test]
    fn the_clients_own_tools_are_decided_by_what_they_reach() {
        // A notebook is a file to read, and NotebookEdit edits it.
        assert_eq!(
            calls(&m("Read", json!({"file_path": "/w/n.ipynb"}))),
            vec![("read_file".into(), json!({"path": "/w/n.ipynb"}))]
        );
        assert_eq!(
            calls(&m(
                "NotebookEdit",
                json!({"notebook_path": "/w/n.ipynb", "cell_id": "c1", "new_source": "print(1)"})
            )),
            vec![(
                "edit_file".into(),
                json!({"path": "/w/n.ipynb", "old_string": "", "new_string": "print(1)"})
            )]
        );
        assert_eq!(
            calls(&m(
                "NotebookEdit",
                json!({"notebook_path": "/w/n.ipynb", "cell_id": "c1", "edit_mode": "delete"})
            )),
            vec![(
                "edit_file".into(),
                json!({"path": "/w/n.ipynb", "old_string": "", "new_string": ""})
            )]
        );
        assert!(
            refused(&m(
                "NotebookEdit",
                json!({"notebook_path": "n.ipynb", "new_source": "x"})
            ))
            .1
            .contains("relative path")
        );
        assert!(
            refused(&m(
                "NotebookEdit",
                json!({"notebook_path": "/w/n.ipynb", "new_source": "x", "edit_mode": "wipe"})
            ))
            .1
            .contains("`edit_mode` is `wipe`")
        );
        // LS lists one directory's names.
        assert_eq!(
            calls(&m("LS", json!({"path": "/w/src"}))),
            vec![(
                "glob_files".into(),
                json!({"pattern": "*", "path": "/w/src"})
            )]
        );
        // WebSearch runs where tollgate cannot see.
        let (rule, reason) = refused(&m("WebSearch", json!({"query": "rust"})));
        assert_eq!(rule, RULE_WEB_SEARCH);
        assert!(reason.contains("model provider's servers"), "{reason}");
    }

    /// The finding: a subagent with `isolation: "worktree"` or `"remote"`
    /// was allowed as the client's bookkeeping.
    #[test]
    fn an_isolated_subagent_is_judged_not_allowed_as_harmless() {
        for tool in ["Agent", "Task"] {
            assert_eq!(
                m(tool, json!({"description": "d", "prompt": "p"})),
                Mapped::Harmless
            );
            for (isolation, want) in [
                ("worktree", "run git on the host"),
                ("remote", "remote environment"),
            ] {
                let (rule, reason) = refused(&m(
                    tool,
                    json!({"description": "d", "prompt": "p", "isolation": isolation}),
                ));
                assert_eq!(rule, RULE_AGENT_ISOLATION);
                assert!(reason.contains(want), "{reason}");
            }
            let (rule, _) = refused(&m(
                tool,
                json!({"description": "d", "prompt": "p", "isolation": "moon"}),
            ));
            assert_eq!(rule, RULE_INPUT);
        }
        assert!(!is_harmless("Agent"));
    }

    #[test]
    fn client_names_round_trip() {
        for c in Client::ALL {
            assert_eq!(Client::parse(c.as_str()), Some(c));
        }
        assert_eq!(Client::parse("claude"), None);
    }
}
