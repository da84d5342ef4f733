//! The context budget (docs/ARCHITECTURE.md "Reference: modes, tools,
//! budgets"). Tokens are estimated at 4 characters
//! each. When the conversation passes 80 % of the budget, everything between the
//! system prompt and the last 8 messages is replaced with one deterministic summary
//! message: the count, the characters, the tool names and the first 16 hex digits of
//! a sha256 of what was dropped. A tool call is never split from its results.

use sha2::{Digest, Sha256};
use tollgate_proto::{ChatMessage, ChatRole};

/// Characters per estimated token.
pub const CHARS_PER_TOKEN: usize = 4;
/// Messages kept at the end when trimming.
pub const KEEP_LAST: usize = 8;
/// Per-message overhead counted on top of the text (role, ids, framing).
const MESSAGE_OVERHEAD_CHARS: usize = 16;

/// Estimated characters of one message as the provider will see it.
pub fn message_chars(m: &ChatMessage) -> usize {
    let mut n = MESSAGE_OVERHEAD_CHARS + m.content.as_deref().map_or(0, |c| c.chars().count());
    for tc in &m.tool_calls {
        n += tc.name.chars().count() + tc.arguments.chars().count() + tc.id.len();
    }
    n + m.tool_call_id.len()
}

/// Estimated characters of a whole conversation.
pub fn total_chars(messages: &[ChatMessage]) -> usize {
    messages.iter().map(message_chars).sum()
}

/// What a trim removed, as reported to the supervisor (`context_trim`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrimReport {
    pub dropped_messages: usize,
    pub dropped_chars: usize,
    pub tools: Vec<String>,
    pub sha256_16: String,
    /// Tool results in the kept tail that had to be shortened as well.
    pub shortened: usize,
}

/// A text message.
pub fn message(role: ChatRole, content: impl Into<String>) -> ChatMessage {
    ChatMessage {
        content: Some(content.into()),
        ..crate::wire::message_from(role)
    }
}

/// The stable serialisation the fingerprint is computed over.
fn fingerprint(dropped: &[ChatMessage]) -> String {
    let mut h = Sha256::new();
    for m in dropped {
        let calls: Vec<serde_json::Value> = m
            .tool_calls
            .iter()
            .map(|tc| serde_json::json!([tc.id, tc.name, tc.arguments]))
            .collect();
        let v = serde_json::json!([m.role, m.content, calls, m.tool_call_id]);
        h.update(v.to_string().as_bytes());
        h.update(b"\n");
    }
    let digest = hex::encode(h.finalize());
    digest[..16].to_string()
}

/// The summary message that replaces the dropped messages.
pub fn summary_text(report: &TrimReport) -> String {
    let tools = if report.tools.is_empty() {
        "none".to_string()
    } else {
        report.tools.join(", ")
    };
    format!(
        "[Context trimmed by the agent: {} earlier messages ({} characters) were removed to stay within the context budget. Tools used in them: {}. Fingerprint of the removed content: sha256:{}. Their details are no longer visible; read files again if you need them.]",
        report.dropped_messages, report.dropped_chars, tools, report.sha256_16
    )
}

/// Trims `messages` (whose first element is the system prompt) when their
/// estimate passes 80 % of `budget_tokens`. Returns what was done, or `None` when
/// nothing had to go.
pub fn trim(messages: &mut Vec<ChatMessage>, budget_tokens: usize) -> Option<TrimReport> {
    let limit = budget_tokens.saturating_mul(CHARS_PER_TOKEN) * 8 / 10;
    if total_chars(messages) <= limit {
        return None;
    }
    let mut report = TrimReport {
        dropped_messages: 0,
        dropped_chars: 0,
        tools: Vec::new(),
        sha256_16: String::new(),
        shortened: 0,
    };
    let len = messages.len();
    let mut start = len.saturating_sub(KEEP_LAST).max(1);
    // Never split a tool call from its results: a kept tail may not open with a
    // tool message, so pull its assistant message (and any sibling results) in.
    while start > 1 && messages.get(start).is_some_and(crate::wire::is_tool) {
        start -= 1;
    }
    if start > 1 {
        let dropped: Vec<ChatMessage> = messages.drain(1..start).collect();
        report.dropped_messages = dropped.len();
        report.dropped_chars = dropped.iter().map(message_chars).sum();
        for m in &dropped {
            for tc in &m.tool_calls {
                if !report.tools.contains(&tc.name) {
                    report.tools.push(tc.name.clone());
                }
            }
        }
        report.tools.sort();
        report.sha256_16 = fingerprint(&dropped);
        messages.insert(1, message(ChatRole::User, summary_text(&report)));
    }
    report.shortened = shorten_tail(messages, limit);
    if report.dropped_messages == 0 && report.shortened == 0 {
        return None;
    }
    Some(report)
}

/// When the kept messages alone are still over the limit, shortens the largest
/// tool results (never the system prompt, never the model's own calls), each to no
/// less than 1,000 characters. Returns how many were shortened.
fn shorten_tail(messages: &mut [ChatMessage], limit: usize) -> usize {
    let mut shortened = 0;
    loop {
        let total = total_chars(messages);
        if total <= limit {
            return shortened;
        }
        let excess = total - limit;
        let Some((idx, len)) = messages
            .iter()
            .enumerate()
            .skip(1)
            .filter(|(_, m)| crate::wire::is_tool(m))
            .map(|(i, m)| (i, m.content.as_deref().map_or(0, |c| c.chars().count())))
            .filter(|(_, len)| *len > 1_200)
            .max_by_key(|(i, len)| (*len, usize::MAX - *i))
        else {
            return shortened;
        };
        let keep = len.saturating_sub(excess + 200).max(1_000);
        if let Some(m) = messages.get_mut(idx)
            && let Some(content) = m.content.as_mut()
        {
            let head: String = content.chars().take(keep).collect();
            *content = format!(
                "{head}\n[shortened by the agent to fit the context budget: {} characters removed]",
                len - keep
            );
        }
        shortened += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_proto::ChatToolCall;

    fn assistant_call(id: &str, name: &str, args: &str) -> ChatMessage {
        ChatMessage {
            content: None,
            tool_calls: vec![ChatToolCall {
                id: id.into(),
                name: name.into(),
                arguments: args.into(),
            }],
            ..crate::wire::message_from(ChatRole::Assistant)
        }
    }

    fn tool_msg(id: &str, text: &str) -> ChatMessage {
        ChatMessage {
            content: Some(text.into()),
            tool_call_id: id.into(),
            ..crate::wire::message_from(ChatRole::Tool)
        }
    }

    fn conversation(rounds: usize, result_len: usize) -> Vec<ChatMessage> {
        let mut m = vec![
            message(ChatRole::System, "sys"),
            message(ChatRole::User, "task"),
        ];
        for i in 0..rounds {
            let id = format!("c{i}");
            let name = if i % 2 == 0 { "read_file" } else { "grep" };
            m.push(assistant_call(&id, name, "{\"path\":\"a\"}"));
            m.push(tool_msg(&id, &"r".repeat(result_len)));
        }
        m
    }

    #[test]
    fn under_budget_nothing_happens() {
        let mut m = conversation(3, 100);
        let before = m.clone();
        assert_eq!(trim(&mut m, 24_000), None);
        assert_eq!(m, before);
    }

    #[test]
    fn trims_to_system_summary_and_last_eight() {
        // 20 rounds of 1,000-char results: about 21,000 chars, over 80 % of 5,000 tokens.
        let mut m = conversation(20, 1_000);
        let tail: Vec<ChatMessage> = m[m.len() - 8..].to_vec();
        let dropped: Vec<ChatMessage> = m[1..m.len() - 8].to_vec();
        let report = trim(&mut m, 5_000).unwrap();
        assert_eq!(report.dropped_messages, dropped.len());
        assert_eq!(
            report.dropped_chars,
            dropped.iter().map(message_chars).sum::<usize>()
        );
        assert_eq!(
            report.tools,
            vec!["grep".to_string(), "read_file".to_string()]
        );
        assert_eq!(report.sha256_16, fingerprint(&dropped));
        assert_eq!(report.sha256_16.len(), 16);
        assert_eq!(m.len(), 10);
        assert_eq!(m[0], message(ChatRole::System, "sys"));
        assert_eq!(m[1], message(ChatRole::User, summary_text(&report)));
        assert_eq!(&m[2..], &tail[..]);
    }

    #[test]
    fn deterministic() {
        let mut a = conversation(20, 1_000);
        let mut b = conversation(20, 1_000);
        assert_eq!(trim(&mut a, 5_000), trim(&mut b, 5_000));
        assert_eq!(a, b);
    }

    #[test]
    fn never_splits_a_call_from_its_results() {
        // One assistant message with three parallel calls whose results straddle
        // the "last 8" boundary.
        let mut m = vec![
            message(ChatRole::System, "sys"),
            message(ChatRole::User, "task"),
        ];
        for i in 0..6 {
            m.push(message(ChatRole::User, "x".repeat(2_000)));
            m.push(message(ChatRole::Assistant, format!("ok {i}")));
        }
        let mut call = assistant_call("a", "read_file", "{}");
        for id in ["b", "c"] {
            call.tool_calls.push(ChatToolCall {
                id: id.into(),
                name: "grep".into(),
                arguments: "{}".into(),
            });
        }
        m.push(call.clone());
        for id in ["a", "b", "c"] {
            m.push(tool_msg(id, "result"));
        }
        for i in 0..5 {
            m.push(message(ChatRole::Assistant, format!("tail {i}")));
        }
        // Last 8 = the three results + 5 tail messages; the assistant call must come too.
        trim(&mut m, 2_000).unwrap();
        assert_eq!(m[2], call);
        assert_eq!(m.len(), 2 + 9);
        for (i, msg) in m.iter().enumerate() {
            if crate::wire::is_tool(msg) {
                assert!(i > 2, "a tool result was separated from its call");
            }
        }
    }

    #[test]
    fn still_over_budget_shortens_the_biggest_results() {
        let mut m = conversation(4, 30_000);
        let report = trim(&mut m, 5_000).unwrap();
        assert!(report.shortened > 0);
        assert!(total_chars(&m) <= 5_000 * 4 * 8 / 10);
        assert!(m.iter().filter(|x| crate::wire::is_tool(x)).all(|x| {
            x.content
                .as_deref()
                .unwrap_or("")
                .contains("[shortened by the agent")
                || x.content.as_deref().unwrap_or("").len() < 30_000
        }));
    }

    #[test]
    fn second_trim_folds_the_old_summary_in() {
        let mut m = conversation(20, 1_000);
        trim(&mut m, 5_000).unwrap();
        for i in 0..15 {
            let id = format!("d{i}");
            m.push(assistant_call(&id, "run_bash", "{}"));
            m.push(tool_msg(&id, &"z".repeat(1_000)));
        }
        let r = trim(&mut m, 5_000).unwrap();
        assert!(r.tools.contains(&"run_bash".to_string()));
        assert_eq!(m.len(), 10);
        assert!(
            m[1].content
                .as_deref()
                .unwrap()
                .starts_with("[Context trimmed by the agent:")
        );
    }
}
