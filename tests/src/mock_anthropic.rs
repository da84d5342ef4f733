//! A mock of Anthropic's Messages API as Claude Code calls it: `POST
//! /v1/messages?beta=true` with `stream: true`, answered with server-sent
//! events (`message_start`, a `tool_use` or `text` content block,
//! `message_delta` with the stop reason, `message_stop`).
//!
//! Scripted per test: the answer to a request is the step numbered by how
//! many `tool_result` blocks the request carries, so Claude Code's side
//! requests do not shift the script. Tool calls get the ids `toolu_0`,
//! `toolu_1`, … (the step's number). Every request is recorded, so a test
//! reads exactly what the model was told after each call.

use serde_json::{Value, json};

use crate::mock_http::{Dialect, Reply, Scripted, sse, text_of};
use crate::mock_openai::RecordedRequest;

/// One model turn.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Call a tool with this input.
    Tool { name: String, input: Value },
    /// A final answer.
    Text(String),
}

impl Step {
    pub fn tool(name: &str, input: Value) -> Step {
        Step::Tool {
            name: name.to_string(),
            input,
        }
    }

    pub fn bash(command: &str) -> Step {
        Step::tool("Bash", json!({ "command": command, "description": "step" }))
    }
}

/// What the model was told about one tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    pub text: String,
    pub is_error: bool,
}

pub struct MockAnthropic {
    mock: Scripted,
}

impl MockAnthropic {
    /// Serves `script` on `listener` (inside a tokio runtime).
    pub fn serve(
        listener: std::net::TcpListener,
        script: Vec<Step>,
    ) -> std::io::Result<MockAnthropic> {
        let dialect = Dialect {
            is_model: |r| r.method == "POST" && r.path.starts_with("/v1/messages"),
            results_in: tool_results_in,
            reply,
        };
        Ok(MockAnthropic {
            mock: Scripted::serve(listener, script, dialect)?,
        })
    }

    /// `ANTHROPIC_BASE_URL`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.mock.addr())
    }

    /// The Messages requests, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.mock.requests()
    }

    /// What the model was told about the call `toolu_N`, from the first
    /// request that carries it.
    pub fn result_of(&self, tool_use_id: &str) -> Option<ToolResult> {
        self.mock
            .result("tool_use_id", tool_use_id)
            .map(|b| ToolResult {
                text: text_of(&b["content"]),
                is_error: b["is_error"].as_bool().unwrap_or(false),
            })
    }

    /// Every request as text, for "never appears" checks.
    pub fn all_text(&self) -> String {
        self.mock.all_text()
    }
}

/// The `tool_result` blocks of a request's messages.
fn tool_results_in(body: &Value) -> Vec<Value> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|b| b["type"] == "tool_result")
        .cloned()
        .collect()
}

/// In a step's input, stands for the id of the last background command
/// Claude Code started (`Command running in background with ID: X.`).
pub const BACKGROUND_ID: &str = "$BACKGROUND_ID";

/// The id the last background Bash result names, if any.
fn background_id(results: &[Value]) -> Option<String> {
    let marker = "in background with ID: ";
    results.iter().rev().find_map(|b| {
        let text = text_of(&b["content"]);
        let rest = &text[text.find(marker)? + marker.len()..];
        let id: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
            .collect();
        (!id.is_empty()).then_some(id)
    })
}

/// `input` with every [`BACKGROUND_ID`] string replaced.
fn with_background_id(input: &Value, results: &[Value]) -> Value {
    match input {
        Value::String(s) if s == BACKGROUND_ID => {
            Value::String(background_id(results).unwrap_or_else(|| "no-background-id".into()))
        }
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), with_background_id(v, results)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn reply(n: usize, step: Option<&Step>, results: &[Value]) -> Reply {
    let start = json!({"type": "message_start", "message": {
        "id": format!("msg_{n}"), "type": "message", "role": "assistant", "model": "claude-mock",
        "content": [], "stop_reason": null, "usage": {"input_tokens": 10, "output_tokens": 1}}});
    let (block, delta, stop) = match step {
        Some(Step::Tool { name, input }) => (
            json!({"type": "tool_use", "id": format!("toolu_{n}"), "name": name, "input": {}}),
            json!({"type": "input_json_delta", "partial_json": with_background_id(input, results).to_string()}),
            "tool_use",
        ),
        Some(Step::Text(t)) => text_block(t),
        None => text_block("mock: the script is done"),
    };
    let body = sse(&[
        ("message_start", start),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": block}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": delta}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 5}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ]);
    Reply {
        status: 200,
        content_type: "text/event-stream",
        body,
    }
}

fn text_block(t: &str) -> (Value, Value, &'static str) {
    (
        json!({"type": "text", "text": ""}),
        json!({"type": "text_delta", "text": t}),
        "end_turn",
    )
}
