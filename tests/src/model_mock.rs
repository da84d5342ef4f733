//! The model mock for either client: Anthropic's Messages API for Claude
//! Code ([`crate::mock_anthropic`]), OpenAI's Responses API for Codex
//! ([`crate::mock_responses`]), scripted with the same turns, so a test runs
//! one script against both clients.

use serde_json::Value;

use crate::clients::Which;
use crate::mock_anthropic::{self as anth, MockAnthropic, ToolResult};
use crate::mock_openai::RecordedRequest;
use crate::mock_responses::{self as resp, MockResponses};

/// A scripted turn for either client.
#[derive(Debug, Clone)]
pub enum Turn {
    /// The client's shell tool (Claude Code's `Bash`, Codex's `exec_command`).
    Shell(String),
    /// One of the client's own tools by name: Claude Code's (`Grep`,
    /// `Read`, …) or a Codex function tool (`view_image`, …).
    Tool(&'static str, Value),
    /// Codex only: `apply_patch`.
    Patch(String),
    /// Tool `tool` of the MCP server the client knows as `server`.
    Mcp {
        server: String,
        tool: String,
        input: Value,
    },
}

/// A running mock; dropping it stops it.
pub enum ModelMock {
    Claude(MockAnthropic),
    Codex(MockResponses),
}

impl ModelMock {
    /// Serves `turns`, then a final "all done", in `which`'s dialect on
    /// `listener` (inside a tokio runtime).
    pub fn serve(which: Which, listener: std::net::TcpListener, turns: &[Turn]) -> ModelMock {
        match which {
            Which::Claude => {
                let mut script: Vec<anth::Step> = turns.iter().map(claude_step).collect();
                script.push(anth::Step::Text("all done".into()));
                ModelMock::Claude(MockAnthropic::serve(listener, script).expect("serve mock"))
            }
            Which::Codex => {
                let mut script: Vec<resp::Step> = turns.iter().map(codex_step).collect();
                script.push(resp::Step::Text("all done".into()));
                ModelMock::Codex(MockResponses::serve(listener, script).expect("serve mock"))
            }
        }
    }

    /// `ANTHROPIC_BASE_URL`, or Codex's provider `base_url`.
    pub fn base_url(&self) -> String {
        match self {
            ModelMock::Claude(m) => m.base_url(),
            ModelMock::Codex(m) => m.base_url(),
        }
    }

    /// Every request's text, joined: what the model was ever told.
    pub fn all_text(&self) -> String {
        match self {
            ModelMock::Claude(m) => m.all_text(),
            ModelMock::Codex(m) => m.all_text(),
        }
    }

    /// The model requests, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        match self {
            ModelMock::Claude(m) => m.requests(),
            ModelMock::Codex(m) => m.requests(),
        }
    }

    /// What the model was told about call number `n` (Codex does not mark
    /// errors: `is_error` is false).
    pub fn result_of(&self, n: usize) -> Option<ToolResult> {
        match self {
            ModelMock::Claude(m) => m.result_of(&format!("toolu_{n}")),
            ModelMock::Codex(m) => m.result_of(&format!("call_{n}")).map(|text| ToolResult {
                text,
                is_error: false,
            }),
        }
    }
}

impl ModelMock {
    /// What the model was told about call number `n`; panics if never.
    pub fn told(&self, n: usize) -> String {
        self.result_of(n)
            .unwrap_or_else(|| panic!("the model was never told about call {n}"))
            .text
    }
}

fn claude_step(turn: &Turn) -> anth::Step {
    match turn {
        Turn::Shell(c) => anth::Step::bash(c),
        Turn::Tool(name, input) => anth::Step::tool(name, input.clone()),
        Turn::Patch(_) => panic!("apply_patch is Codex's"),
        Turn::Mcp {
            server,
            tool,
            input,
        } => anth::Step::tool(&format!("mcp__{server}__{tool}"), input.clone()),
    }
}

fn codex_step(turn: &Turn) -> resp::Step {
    match turn {
        Turn::Shell(c) => resp::Step::exec(c),
        Turn::Patch(p) => resp::Step::apply_patch(p),
        Turn::Tool(name, input) => resp::Step::Call {
            name: name.to_string(),
            arguments: input.clone(),
            namespace: None,
        },
        Turn::Mcp {
            server,
            tool,
            input,
        } => resp::Step::Call {
            name: tool.clone(),
            arguments: input.clone(),
            namespace: Some(format!("mcp__{server}")),
        },
    }
}
