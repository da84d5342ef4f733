//! The tool registry: the allowlist of tools, their risk class and schema.

use serde::Serialize;

/// Risk class (BRIEF section 5).
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
    pub name: &'static str,
    pub class: ToolClass,
    pub description: &'static str,
    /// JSON Schema of the arguments object (`additionalProperties: false`).
    pub parameters: serde_json::Value,
    /// Planning and interaction tools run in the agent, not the supervisor.
    pub runs_in_agent: bool,
}

/// Every tool tollgate knows, in a stable order.
pub fn registry() -> &'static [ToolSpec] {
    // Filled in by the policy engine work; see BRIEF section 5.
    &[]
}
