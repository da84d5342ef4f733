//! A mock of OpenAI's Responses API as Codex calls it: `POST /v1/responses`,
//! answered with server-sent events (`response.created`, one
//! `response.output_item.done` holding a function call, a custom (freeform)
//! tool call or a message, `response.completed`).
//!
//! Scripted per test: the answer to a request is the step numbered by how
//! many `function_call_output` / `custom_tool_call_output` items its `input`
//! carries. Calls get the ids `call_0`, `call_1`, … (the step's number).
//! Every request is recorded, so a test reads what the model was told.

use serde_json::{Value, json};

use crate::mock_http::{Dialect, Reply, Scripted, sse, text_of};
use crate::mock_openai::RecordedRequest;

/// One model turn.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// A function tool call (`exec_command`, …), optionally in a namespace
    /// (`mcp__NAME` for an MCP server's tool).
    Call {
        name: String,
        arguments: Value,
        namespace: Option<String>,
    },
    /// A freeform tool call (`apply_patch`).
    Custom { name: String, input: String },
    /// A final answer.
    Text(String),
}

impl Step {
    /// Codex's shell tool.
    pub fn exec(cmd: &str) -> Step {
        Step::Call {
            name: "exec_command".to_string(),
            arguments: json!({ "cmd": cmd }),
            namespace: None,
        }
    }

    pub fn apply_patch(patch: &str) -> Step {
        Step::Custom {
            name: "apply_patch".to_string(),
            input: patch.to_string(),
        }
    }
}

pub struct MockResponses {
    mock: Scripted,
}

impl MockResponses {
    pub fn serve(
        listener: std::net::TcpListener,
        script: Vec<Step>,
    ) -> std::io::Result<MockResponses> {
        let dialect = Dialect {
            is_model: |r| r.method == "POST" && r.path.ends_with("/responses"),
            results_in: outputs_in,
            reply,
        };
        Ok(MockResponses {
            mock: Scripted::serve(listener, script, dialect)?,
        })
    }

    /// The provider's `base_url`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.mock.addr())
    }

    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.mock.requests()
    }

    /// What the model was told about `call_N` (an MCP result may come as
    /// text blocks: their text).
    pub fn result_of(&self, call_id: &str) -> Option<String> {
        self.mock
            .result("call_id", call_id)
            .map(|o| text_of(&o["output"]))
    }

    pub fn all_text(&self) -> String {
        self.mock.all_text()
    }
}

fn outputs_in(body: &Value) -> Vec<Value> {
    body["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["type"] == "function_call_output" || i["type"] == "custom_tool_call_output")
        .cloned()
        .collect()
}

fn reply(n: usize, step: Option<&Step>, _results: &[Value]) -> Reply {
    let id = format!("resp_{n}");
    let item = match step {
        Some(Step::Call {
            name,
            arguments,
            namespace,
        }) => {
            let mut item = json!({"type": "function_call", "call_id": format!("call_{n}"),
                "name": name, "arguments": arguments.to_string()});
            if let Some(ns) = namespace {
                item["namespace"] = json!(ns);
            }
            item
        }
        Some(Step::Custom { name, input }) => json!({"type": "custom_tool_call",
            "call_id": format!("call_{n}"), "name": name, "input": input}),
        Some(Step::Text(t)) => message(t),
        None => message("mock: the script is done"),
    };
    let body = sse(&[
        (
            "response.created",
            json!({"type": "response.created", "response": {"id": id}}),
        ),
        (
            "response.output_item.done",
            json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        ),
        (
            "response.completed",
            json!({"type": "response.completed", "response": {"id": id,
            "usage": {"input_tokens": 10, "input_tokens_details": null, "output_tokens": 5,
                      "output_tokens_details": null, "total_tokens": 15}}}),
        ),
    ]);
    Reply {
        status: 200,
        content_type: "text/event-stream",
        body,
    }
}

fn message(t: &str) -> Value {
    json!({"type": "message", "role": "assistant", "id": "msg_mock",
        "content": [{"type": "output_text", "text": t}]})
}
