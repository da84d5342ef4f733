//! What a wrapped MCP server's answers may carry back to the client: a
//! `tools/call` result redacted and capped like run_bash's output, and a
//! `tools/list` result without the tools the policy denies.

use serde_json::{Value, json};
use tollgate_audit::Redactor;
use tollgate_policy::{Engine, McpToolCall, Mode, Verdict};

use crate::pep::McpAnswer;

/// The hint appended to a capped result.
const CAP_HINT: &str = "ask the server for less (a narrower query, a range)";

/// Redacts every string of a `tools/call` response and caps its text to
/// `cap` bytes (over all text blocks); a result whose other content (images,
/// structured content) is still over twice the cap is replaced by a note.
pub fn tools_call_answer(mut response: Value, redactor: &Redactor, cap: usize) -> McpAnswer {
    redactor.redact_json(&mut response);
    let is_error = response.get("error").is_some()
        || response
            .pointer("/result/isError")
            .and_then(Value::as_bool)
            .unwrap_or(false);
    let mut truncated = false;
    let mut room = cap;
    if let Some(blocks) = response
        .pointer_mut("/result/content")
        .and_then(Value::as_array_mut)
    {
        for b in blocks.iter_mut() {
            let Some(text) = b.get_mut("text") else {
                continue;
            };
            let Some(t) = text.as_str() else {
                continue;
            };
            if t.len() <= room {
                room -= t.len();
                continue;
            }
            let capped = tollgate_tools::cap_text(t, room, CAP_HINT);
            truncated = true;
            room = 0;
            *text = json!(capped.text);
        }
    }
    let mut bytes = response.to_string().len();
    if bytes > cap.saturating_mul(2).max(64 * 1024) {
        let id = response.get("id").cloned().unwrap_or(Value::Null);
        response = json!({"jsonrpc": "2.0", "id": id, "result": {
            "content": [{"type": "text", "text": format!(
                "[the MCP server's result was {bytes} bytes, over the output cap of {cap} bytes; it was not passed on. {CAP_HINT}]"
            )}],
            "isError": true,
        }});
        truncated = true;
        bytes = response.to_string().len();
    }
    McpAnswer {
        response,
        bytes,
        truncated,
        is_error,
    }
}

/// Removes from a `tools/list` response the tools the policy denies, and
/// returns their names.
pub fn filter_tools_list(
    response: &mut Value,
    engine: &Engine,
    server: &str,
    mode: Mode,
) -> Vec<String> {
    let mut removed = Vec::new();
    if let Some(tools) = response
        .pointer_mut("/result/tools")
        .and_then(Value::as_array_mut)
    {
        tools.retain(|t| {
            let name = t.get("name").and_then(Value::as_str).unwrap_or_default();
            let call = McpToolCall {
                server: server.to_string(),
                tool: name.to_string(),
            };
            let keep = engine.decide_mcp(&call, mode).verdict != Verdict::Deny;
            if !keep {
                removed.push(name.to_string());
            }
            keep
        });
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_policy::{PolicyConfig, RuleSpec};

    #[test]
    fn text_is_capped_and_redacted() {
        let r = Redactor::new(Vec::new());
        let resp = json!({"jsonrpc":"2.0","id":3,"result":{"content":[
            {"type":"text","text":"a".repeat(100)},
            {"type":"text","text":"AKIAIOSFODNN7EXAMPLE and more"}]}});
        let a = tools_call_answer(resp, &r, 60);
        assert!(a.truncated && !a.is_error);
        let first = a.response["result"]["content"][0]["text"].as_str().unwrap();
        assert!(first.len() < 100 + CAP_HINT.len() + 80, "{first}");
        let second = a.response["result"]["content"][1]["text"].as_str().unwrap();
        assert!(!second.contains("AKIAIOSFODNN7EXAMPLE"), "{second}");
    }

    #[test]
    fn denied_tools_leave_the_list() {
        let engine = Engine::new(&PolicyConfig {
            deny: vec![RuleSpec::Bare("mcp(fs.write_file)".into())],
            ..Default::default()
        })
        .unwrap();
        let mut resp = json!({"jsonrpc":"2.0","id":1,"result":{"tools":[
            {"name":"read_file"},{"name":"write_file"}]}});
        let removed = filter_tools_list(&mut resp, &engine, "fs", Mode::Default);
        assert_eq!(removed, vec!["write_file".to_string()]);
        assert_eq!(resp["result"]["tools"], json!([{"name":"read_file"}]));
    }
}
