//! The `script` provider: replays a JSON file of assistant turns, one per Chat
//! call, then answers a final message without tool calls. No network, no model.
//!
//! Format: `[{"content": "…" | null, "tool_calls": [{"name": "…", "arguments": {…}}],
//! "usage": {"prompt_tokens": N, "completion_tokens": M}}]` (`usage` optional).

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use tollgate_proto::v1 as pb;

use super::{Completion, LlmError, Provider};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Turn {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Vec<Call>,
    #[serde(default)]
    usage: Option<TurnUsage>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Call {
    name: String,
    #[serde(default)]
    arguments: serde_json::Value,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
struct TurnUsage {
    prompt_tokens: u64,
    completion_tokens: u64,
}

#[derive(Debug, Clone)]
pub struct Script {
    turns: Vec<Turn>,
}

impl Script {
    pub fn load(path: &Path) -> Result<Script, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read script {}: {e}", path.display()))?;
        Script::parse(&text).map_err(|e| format!("script {}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Script, String> {
        let turns: Vec<Turn> = serde_json::from_str(text).map_err(|e| e.to_string())?;
        Ok(Script { turns })
    }

    /// A script with no turns: every call gets the final message.
    pub fn empty() -> Script {
        Script { turns: Vec::new() }
    }
}

#[async_trait::async_trait]
impl Provider for Script {
    async fn complete(
        &self,
        _req: &pb::ChatRequest,
        _model: &str,
        _timeout: Duration,
        turn: u32,
    ) -> Result<Completion, LlmError> {
        let Some(t) = self.turns.get(turn as usize) else {
            return Ok(Completion {
                message: pb::ChatMessage {
                    role: "assistant".to_string(),
                    content: Some("Done: the script has no more turns.".to_string()),
                    ..Default::default()
                },
                usage: None,
                finish_reason: "stop".to_string(),
            });
        };
        let tool_calls: Vec<pb::ChatToolCall> = t
            .tool_calls
            .iter()
            .enumerate()
            .map(|(i, c)| pb::ChatToolCall {
                id: format!("call_{turn}_{i}"),
                name: c.name.clone(),
                arguments: match &c.arguments {
                    // A string is passed through verbatim, so scripts can send
                    // arguments that are not JSON.
                    serde_json::Value::String(s) => s.clone(),
                    serde_json::Value::Null => "{}".to_string(),
                    other => other.to_string(),
                },
            })
            .collect();
        let finish_reason = if tool_calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        };
        Ok(Completion {
            message: pb::ChatMessage {
                role: "assistant".to_string(),
                content: t.content.clone(),
                tool_calls,
                tool_call_id: String::new(),
                // Both role fields agree on the way out (wire::chat).
                ..Default::default()
            },
            usage: t.usage.map(|u| (u.prompt_tokens, u.completion_tokens)),
            finish_reason: finish_reason.to_string(),
        })
    }

    fn name(&self) -> &'static str {
        "script"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn replays_then_finishes() {
        let s = Script::parse(
            r#"[{"content":"hi","tool_calls":[{"name":"read_file","arguments":{"path":"a"}}],"usage":{"prompt_tokens":3,"completion_tokens":4}}]"#,
        )
        .unwrap();
        let req = pb::ChatRequest::default();
        let c = s
            .complete(&req, "m", Duration::from_secs(1), 0)
            .await
            .unwrap();
        assert_eq!(c.message.tool_calls[0].name, "read_file");
        assert_eq!(c.message.tool_calls[0].arguments, r#"{"path":"a"}"#);
        assert_eq!(c.usage, Some((3, 4)));
        let done = s
            .complete(&req, "m", Duration::from_secs(1), 1)
            .await
            .unwrap();
        assert!(done.message.tool_calls.is_empty());
        assert_eq!(done.finish_reason, "stop");
    }

    #[test]
    fn unknown_fields_are_refused() {
        assert!(Script::parse(r#"[{"contnet":"x"}]"#).is_err());
    }
}
