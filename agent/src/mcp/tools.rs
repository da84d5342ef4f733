//! The MCP tool list: the supervisor's `ListTools` answer (never a copy of its
//! schemas) turned into MCP tool definitions, each with honest hints.
//!
//! Only the tools that run on the supervisor's side are offered: the planning
//! tools and `ask_question` run in the interactive agent's own loop, and an MCP
//! client has its own.

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use tollgate_proto::{ToolClass, ToolSpec};
use tollgate_toolcall::ToolName;

/// What a tool may do to the world, for the MCP annotations. One row per
/// class of the registry (`ToolSpec.tool_class`), with the per-tool exceptions in
/// [`hints_for`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hints {
    pub read_only: bool,
    pub destructive: bool,
    pub idempotent: bool,
    pub open_world: bool,
}

/// The hints of one tool. `read_file`, `glob_files` and `grep` only read;
/// `write_file`, `edit_file` and `run_bash` can destroy (overwrite, replace,
/// `rm`); `webfetch` changes nothing here but reaches the open web. A tool
/// the supervisor adds later gets its class's hints, never "read-only" unless
/// its class is `read`.
pub fn hints_for(spec: &ToolSpec) -> Hints {
    let by_class = match spec.tool_class() {
        ToolClass::Read => Hints {
            read_only: true,
            destructive: false,
            idempotent: true,
            open_world: false,
        },
        ToolClass::Write => Hints {
            read_only: false,
            destructive: true,
            idempotent: false,
            open_world: false,
        },
        // run_bash, webfetch, and any unknown class: assume the worst.
        _ => Hints {
            read_only: false,
            destructive: true,
            idempotent: false,
            open_world: true,
        },
    };
    match ToolName::parse(&spec.name) {
        // The same content written twice leaves the same file.
        Some(ToolName::WriteFile) => Hints {
            idempotent: true,
            ..by_class
        },
        // The class's worst case: with `[network]` a command reaches the
        // hosts the supervisor allows (docs/MCP.md's hint table).
        Some(ToolName::RunBash) => by_class,
        // A GET through the SSRF guard: it changes nothing here, and it is
        // not read-only either (docs/MCP.md's hint table: it reaches out).
        Some(ToolName::Webfetch) => Hints {
            destructive: false,
            ..by_class
        },
        // It reads what the job printed since the last read: twice is not
        // once.
        Some(ToolName::JobOutput) => Hints {
            idempotent: false,
            ..by_class
        },
        // It ends one of the session's own processes: it changes something,
        // nothing that was not the session's, and twice is once.
        Some(ToolName::KillJob) => Hints {
            read_only: false,
            destructive: false,
            idempotent: true,
            open_world: false,
        },
        Some(
            ToolName::ReadFile
            | ToolName::GlobFiles
            | ToolName::Grep
            | ToolName::EditFile
            | ToolName::Mcp
            | ToolName::TodoAppend
            | ToolName::TodoList
            | ToolName::TodoUpdate
            | ToolName::ReadScratchpad
            | ToolName::WriteScratchpad
            | ToolName::AskQuestion,
        ) => by_class,
        // A tool the supervisor added after this agent was built.
        None => by_class,
    }
}

/// Whether the tool runs on the supervisor's side (and so is offered here).
pub fn offered(spec: &ToolSpec) -> bool {
    !matches!(
        spec.tool_class(),
        ToolClass::Planning | ToolClass::Interaction
    )
}

/// One MCP tool definition from a `ListTools` entry. A schema the supervisor
/// sent that is not a JSON object becomes the empty object schema: the PEP
/// validates the arguments anyway.
pub fn to_mcp(spec: &ToolSpec) -> Tool {
    let schema: JsonObject = match serde_json::from_str(&spec.parameters_json) {
        Ok(serde_json::Value::Object(m)) => m,
        _ => {
            let mut m = JsonObject::new();
            m.insert("type".into(), "object".into());
            m
        }
    };
    let h = hints_for(spec);
    let annotations = ToolAnnotations::new()
        .read_only(h.read_only)
        .destructive(h.destructive)
        .idempotent(h.idempotent)
        .open_world(h.open_world);
    Tool::new(
        spec.name.clone(),
        spec.description.clone(),
        Arc::new(schema),
    )
    .annotate(annotations)
}

/// The tools offered over MCP, in the supervisor's order.
pub fn offered_tools(specs: &[ToolSpec]) -> Vec<Tool> {
    specs.iter().filter(|s| offered(s)).map(to_mcp).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, class: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: format!("{name} does things"),
            tool_class: ToolClass::from_str_name(&format!("TOOL_CLASS_{}", class.to_uppercase()))
                .unwrap_or_default() as i32,
            parameters_json: r#"{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false}"#.into(),

            ..Default::default()
        }
    }

    fn hints(name: &str, class: &str) -> (bool, bool, bool, bool) {
        let h = hints_for(&spec(name, class));
        (h.read_only, h.destructive, h.idempotent, h.open_world)
    }

    /// (readOnly, destructive, idempotent, openWorld), per tool of the registry.
    #[test]
    fn every_tool_has_honest_hints() {
        assert_eq!(hints("read_file", "read"), (true, false, true, false));
        assert_eq!(hints("glob_files", "read"), (true, false, true, false));
        assert_eq!(hints("grep", "read"), (true, false, true, false));
        assert_eq!(hints("write_file", "write"), (false, true, true, false));
        assert_eq!(hints("edit_file", "write"), (false, true, false, false));
        assert_eq!(hints("run_bash", "action"), (false, true, false, true));
        assert_eq!(hints("webfetch", "action"), (false, false, false, true));
        // A tool the supervisor adds later is never taken for read-only.
        assert_eq!(hints("new_tool", "action"), (false, true, false, true));
        assert_eq!(hints("odd", "mystery"), (false, true, false, true));
    }

    #[test]
    fn the_schema_is_the_supervisors_and_planning_tools_stay_out() {
        let specs = vec![
            spec("read_file", "read"),
            spec("todo_list", "planning"),
            spec("ask_question", "interaction"),
            spec("run_bash", "action"),
        ];
        let tools = offered_tools(&specs);
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(names, vec!["read_file", "run_bash"]);
        let wire = serde_json::to_value(&tools[0]).unwrap();
        assert_eq!(
            wire,
            serde_json::json!({
                "name": "read_file",
                "description": "read_file does things",
                "inputSchema": serde_json::from_str::<serde_json::Value>(&specs[0].parameters_json).unwrap(),
                "annotations": {
                    "readOnlyHint": true,
                    "destructiveHint": false,
                    "idempotentHint": true,
                    "openWorldHint": false,
                },
            })
        );
    }

    #[test]
    fn a_broken_schema_becomes_the_empty_object() {
        let mut s = spec("grep", "read");
        s.parameters_json = "[1,2]".into();
        assert_eq!(
            serde_json::to_value(to_mcp(&s)).unwrap()["inputSchema"],
            serde_json::json!({"type": "object"})
        );
    }
}
