//! Any OpenAI-compatible `/v1/chat/completions` endpoint (OpenAI, Ollama,
//! vLLM, llama.cpp server): tools, tool_calls and role "tool".

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};
use tollgate_proto::v1 as pb;

use super::{Completion, LlmError, Provider};

pub struct OpenAi {
    client: reqwest::Client,
    url: String,
    /// Held here only; never sent to the agent, never logged.
    api_key: Option<String>,
    max_response_bytes: usize,
}

impl std::fmt::Debug for OpenAi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAi")
            .field("url", &self.url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl OpenAi {
    /// `proxy`: `[llm] proxy`, the only proxy used (the environment's
    /// proxy variables never are).
    pub fn new(
        base_url: &str,
        api_key: Option<String>,
        max_response_bytes: usize,
        proxy: Option<&str>,
    ) -> Result<OpenAi, String> {
        let builder = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none());
        let builder = match proxy {
            Some(p) => builder.proxy(
                reqwest::Proxy::all(p).map_err(|e| format!("proxy {p:?}: {}", error_chain(&e)))?,
            ),
            None => builder,
        };
        let client = builder
            .build()
            .map_err(|e| format!("cannot build the http client: {e}"))?;
        let url = format!("{}/chat/completions", base_url.trim_end_matches('/'));
        Ok(OpenAi {
            client,
            url,
            api_key,
            max_response_bytes,
        })
    }

    fn body(req: &pb::ChatRequest, model: &str) -> Value {
        let messages: Vec<Value> = req.messages.iter().map(message_json).collect();
        let mut body = json!({ "model": model, "messages": messages });
        if !req.tools.is_empty() {
            let tools: Vec<Value> = req
                .tools
                .iter()
                .map(|t| {
                    let params: Value = serde_json::from_str(&t.parameters_json)
                        .unwrap_or_else(|_| json!({"type": "object"}));
                    json!({
                        "type": "function",
                        "function": {
                            "name": t.name,
                            "description": t.description,
                            "parameters": params,
                        }
                    })
                })
                .collect();
            body["tools"] = Value::Array(tools);
        }
        body
    }

    async fn call(&self, body: &Value) -> Result<Completion, LlmError> {
        let mut rb = self.client.post(&self.url).json(body);
        if let Some(key) = &self.api_key {
            rb = rb.bearer_auth(key);
        }
        let resp = rb.send().await.map_err(|e| LlmError::Connect {
            url: self.url.clone(),
            reason: error_chain(&e),
        })?;
        let status = resp.status();
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let mut stream = resp.bytes_stream();
        let mut buf: Vec<u8> = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                LlmError::Other(format!("reading the response: {}", error_chain(&e)))
            })?;
            if buf.len() + chunk.len() > self.max_response_bytes {
                return Err(LlmError::TooLarge(self.max_response_bytes));
            }
            buf.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            let text = String::from_utf8_lossy(&buf);
            let body: String = text.chars().take(300).collect();
            return Err(LlmError::Status {
                status: status.as_u16(),
                body,
                retry_after,
            });
        }
        parse_response(&buf).map_err(|e| match e {
            LlmError::Malformed { reason, .. } => {
                let kept = &buf[..buf.len().min(super::MALFORMED_BODY_KEPT)];
                LlmError::Malformed {
                    reason,
                    body: Some(String::from_utf8_lossy(kept).into_owned()),
                }
            }
            other => other,
        })
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        out.push_str(": ");
        out.push_str(&s.to_string());
        src = s.source();
    }
    out
}

fn message_json(m: &pb::ChatMessage) -> Value {
    let mut v = json!({ "role": m.role });
    match &m.content {
        Some(c) => v["content"] = Value::String(c.clone()),
        None => v["content"] = Value::Null,
    }
    if !m.tool_calls.is_empty() {
        v["tool_calls"] = Value::Array(
            m.tool_calls
                .iter()
                .map(|c| {
                    json!({
                        "id": c.id,
                        "type": "function",
                        "function": { "name": c.name, "arguments": c.arguments }
                    })
                })
                .collect(),
        );
    }
    if m.role == "tool" {
        v["tool_call_id"] = Value::String(m.tool_call_id.clone());
    }
    v
}

/// Parses a chat-completions response body.
pub(crate) fn parse_response(body: &[u8]) -> Result<Completion, LlmError> {
    let v: Value =
        serde_json::from_slice(body).map_err(|e| LlmError::malformed(format!("not JSON: {e}")))?;
    let choice = v
        .get("choices")
        .and_then(|c| c.get(0))
        .ok_or_else(|| LlmError::malformed("no choices[0]"))?;
    let msg = choice
        .get("message")
        .ok_or_else(|| LlmError::malformed("no choices[0].message"))?;
    let content = msg
        .get("content")
        .and_then(Value::as_str)
        .map(str::to_string);
    let mut tool_calls = Vec::new();
    if let Some(calls) = msg.get("tool_calls").and_then(Value::as_array) {
        for (i, c) in calls.iter().enumerate() {
            let f = c
                .get("function")
                .ok_or_else(|| LlmError::malformed(format!("tool_calls[{i}] has no function")))?;
            let name = f
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| LlmError::malformed(format!("tool_calls[{i}] has no name")))?;
            // Arguments are a JSON-encoded string per the API; some servers
            // send an object. Either way, pass text on and let the agent judge.
            let arguments = match f.get("arguments") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => "{}".to_string(),
                Some(other) => other.to_string(),
            };
            let id = c
                .get("id")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| format!("call_{i}"));
            tool_calls.push(pb::ChatToolCall {
                id,
                name: name.to_string(),
                arguments,
            });
        }
    }
    let usage = v.get("usage").and_then(|u| {
        let p = u.get("prompt_tokens").and_then(Value::as_u64)?;
        let c = u.get("completion_tokens").and_then(Value::as_u64)?;
        Some((p, c))
    });
    let finish_reason = choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    Ok(Completion {
        message: pb::ChatMessage {
            role: "assistant".to_string(),
            content,
            tool_calls,
            tool_call_id: String::new(),
            // Both role fields agree on the way out (wire::chat).
            ..Default::default()
        },
        usage,
        finish_reason,
    })
}

#[async_trait::async_trait]
impl Provider for OpenAi {
    async fn complete(
        &self,
        req: &pb::ChatRequest,
        model: &str,
        timeout: Duration,
        _turn: u32,
    ) -> Result<Completion, LlmError> {
        let body = OpenAi::body(req, model);
        match tokio::time::timeout(timeout, self.call(&body)).await {
            Ok(r) => r,
            Err(_) => Err(LlmError::Timeout(timeout)),
        }
    }

    fn name(&self) -> &'static str {
        "openai"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tool_calls_and_usage() {
        let body = br#"{"choices":[{"message":{"role":"assistant","content":null,
            "tool_calls":[{"id":"c1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"a\"}"}}]},
            "finish_reason":"tool_calls"}],"usage":{"prompt_tokens":10,"completion_tokens":5}}"#;
        let c = parse_response(body).unwrap();
        assert_eq!(c.message.content, None);
        assert_eq!(c.message.tool_calls[0].arguments, r#"{"path":"a"}"#);
        assert_eq!(c.usage, Some((10, 5)));
        assert_eq!(c.finish_reason, "tool_calls");
    }

    #[test]
    fn malformed_bodies_are_errors_not_panics() {
        for body in [
            &b"not json"[..],
            b"{}",
            b"{\"choices\":[]}",
            b"{\"choices\":[{}]}",
        ] {
            assert!(matches!(
                parse_response(body),
                Err(LlmError::Malformed { .. })
            ));
        }
    }

    #[test]
    fn no_usage_is_none() {
        let c = parse_response(br#"{"choices":[{"message":{"content":"hi"}}]}"#).unwrap();
        assert_eq!(c.usage, None);
    }

    #[test]
    fn debug_hides_the_key() {
        let p = OpenAi::new(
            "http://127.0.0.1:1/v1",
            Some("sk-secret-value".to_string()),
            1024,
            None,
        )
        .unwrap();
        assert!(!format!("{p:?}").contains("sk-secret"));
    }
}
