//! One hook event as Claude Code or Codex writes it, checked before anything
//! acts on it. Both clients send the same shape (Codex adds `turn_id` and
//! `model`); every field tollgate uses is checked here, and a refusal names
//! the field and what to do.

use std::path::PathBuf;

use serde_json::{Map, Value};
use tollgate_policy::escape_for_display;

/// The largest event accepted (bytes of JSON). A bigger one is refused, not
/// cut: a 10 MB Write is not something tollgate passes unread.
pub const MAX_EVENT_BYTES: usize = 4 << 20;
/// The longest client session id: Claude Code's and Codex's are 36-char
/// UUIDs.
pub const MAX_SESSION_ID: usize = 128;
/// The longest tool name and tool_use_id.
pub const MAX_TOOL_FIELD: usize = 256;

/// The events `agent hook` handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventName {
    SessionStart,
    PreToolUse,
    PostToolUse,
    PostToolUseFailure,
    Stop,
    SessionEnd,
}

impl EventName {
    pub const ALL: [EventName; 6] = [
        EventName::SessionStart,
        EventName::PreToolUse,
        EventName::PostToolUse,
        EventName::PostToolUseFailure,
        EventName::Stop,
        EventName::SessionEnd,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventName::SessionStart => "SessionStart",
            EventName::PreToolUse => "PreToolUse",
            EventName::PostToolUse => "PostToolUse",
            EventName::PostToolUseFailure => "PostToolUseFailure",
            EventName::Stop => "Stop",
            EventName::SessionEnd => "SessionEnd",
        }
    }

    pub fn parse(s: &str) -> Option<EventName> {
        EventName::ALL.into_iter().find(|e| e.as_str() == s)
    }
}

/// A tool call in a PreToolUse or PostToolUse event.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolEvent {
    pub name: String,
    pub input: Value,
    pub use_id: String,
    /// PostToolUse: what the tool returned.
    pub response: Option<Value>,
    /// PostToolUse: how long it took, when the client says (Claude Code).
    pub duration_ms: Option<u64>,
    /// For an `mcp__…` tool: the server the client itself reports (Claude
    /// Code's `mcp_server`, beside the call, never in the model's input).
    pub mcp_server: Option<String>,
}

/// A checked event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub name: EventName,
    pub session_id: String,
    /// Absolute; whether it is a real directory is checked against the disk
    /// when a session opens.
    pub cwd: PathBuf,
    pub tool: Option<ToolEvent>,
    /// Codex's model name, recorded at open.
    pub model: Option<String>,
    /// SessionStart's `source`, SessionEnd's `reason`.
    pub detail: Option<String>,
}

/// Checks the event text. The error is a sentence naming the field.
pub fn parse(text: &str) -> Result<Event, String> {
    if text.len() > MAX_EVENT_BYTES {
        return Err(format!(
            "the event is {} bytes, over tollgate's limit of {} MiB; the call is refused (split the work into smaller calls)",
            text.len(),
            MAX_EVENT_BYTES >> 20
        ));
    }
    let v: Value =
        serde_json::from_str(text).map_err(|e| format!("the event is not valid JSON ({e})"))?;
    let Value::Object(obj) = v else {
        return Err("the event is not a JSON object".to_string());
    };
    let name_text = required(&obj, "hook_event_name", 64)?;
    let name = EventName::parse(name_text).ok_or_else(|| {
        format!(
            "unknown event `{}` (tollgate handles {}); install the hooks `agent hook print-config` prints",
            escape_for_display(name_text),
            EventName::ALL.map(EventName::as_str).join(", ")
        )
    })?;
    let session_id = session_id(required(&obj, "session_id", MAX_SESSION_ID)?)?;
    let cwd_text = required(&obj, "cwd", 4095)?;
    let cwd = PathBuf::from(cwd_text);
    if !cwd.is_absolute() {
        return Err(format!(
            "`cwd` is the relative path `{}`; the client sends an absolute one",
            escape_for_display(cwd_text)
        ));
    }
    let tool = match name {
        EventName::PreToolUse | EventName::PostToolUse | EventName::PostToolUseFailure => {
            Some(ToolEvent {
                name: required(&obj, "tool_name", MAX_TOOL_FIELD)?.to_string(),
                input: match obj.get("tool_input") {
                    Some(v @ Value::Object(_)) => v.clone(),
                    Some(_) => return Err("`tool_input` is not a JSON object".to_string()),
                    None => return Err("`tool_input` is missing".to_string()),
                },
                use_id: printable(
                    required(&obj, "tool_use_id", MAX_TOOL_FIELD)?,
                    "tool_use_id",
                )?,
                response: obj.get("tool_response").cloned(),
                duration_ms: obj.get("duration_ms").and_then(Value::as_u64),
                mcp_server: mcp_server(&obj)?,
            })
        }
        EventName::SessionStart | EventName::Stop | EventName::SessionEnd => None,
    };
    let optional = |key: &str| {
        obj.get(key)
            .and_then(Value::as_str)
            .map(|s| s.chars().take(128).collect::<String>())
    };
    Ok(Event {
        name,
        session_id,
        cwd,
        tool,
        model: optional("model"),
        detail: optional("source").or_else(|| optional("reason")),
    })
}

fn required<'a>(obj: &'a Map<String, Value>, key: &str, max: usize) -> Result<&'a str, String> {
    match obj.get(key) {
        Some(Value::String(s)) if s.is_empty() => Err(format!("`{key}` is empty")),
        Some(Value::String(s)) if s.len() > max => Err(format!(
            "`{key}` is {} bytes long; the limit is {max}",
            s.len()
        )),
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(format!("`{key}` is not a string")),
        None => Err(format!("`{key}` is missing")),
    }
}

/// A client session id: letters, digits, `-`, `_` and `.`, never `.` or
/// `..` alone (it names files in the client's own directories, and here it
/// names a session in the audit log and for operators).
fn session_id(s: &str) -> Result<String, String> {
    let ok = s
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if !ok || s == "." || s.contains("..") {
        return Err(format!(
            "`session_id` `{}` is not a session id (letters, digits, `-`, `_`, `.`; no `/` or `..`)",
            escape_for_display(&s.chars().take(64).collect::<String>())
        ));
    }
    Ok(s.to_string())
}

/// Claude Code's `mcp_server`: `{"name": …, "source": …}` (a bare string
/// is read as the name too).
fn mcp_server(obj: &Map<String, Value>) -> Result<Option<String>, String> {
    let name = match obj.get("mcp_server") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) => s.as_str(),
        Some(Value::Object(o)) => match o.get("name") {
            Some(Value::String(s)) => s.as_str(),
            _ => return Err("`mcp_server` has no `name` string".to_string()),
        },
        Some(_) => return Err("`mcp_server` is not an object".to_string()),
    };
    if name.is_empty() || name.len() > MAX_TOOL_FIELD {
        return Err(format!(
            "`mcp_server.name` is 1 to {MAX_TOOL_FIELD} bytes long"
        ));
    }
    printable(name, "mcp_server.name").map(Some)
}

/// A field that goes into the audit log as an identifier: no control
/// characters.
fn printable(s: &str, key: &str) -> Result<String, String> {
    if s.chars().any(char::is_control) {
        return Err(format!("`{key}` holds control characters"));
    }
    Ok(s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base(name: &str) -> Value {
        json!({
            "session_id": "17dcfece-22b4-40c1-9367-52283ff5acc4",
            "transcript_path": "/home/u/.claude/projects/x.jsonl",
            "cwd": "/w",
            "hook_event_name": name,
            "tool_name": "Bash",
            "tool_input": {"command": "ls"},
            "tool_use_id": "toolu_01",
        })
    }

    #[test]
    fn the_mcp_server_comes_from_the_event_not_the_tool_input() {
        let mut v = base("PreToolUse");
        v["tool_name"] = json!("mcp__a__b__c");
        v["tool_input"] = json!({"mcp_server": "a__b"});
        let e = parse(&v.to_string()).unwrap();
        assert_eq!(e.tool.unwrap().mcp_server, None);
        v["mcp_server"] = json!({"name": "a", "source": "user"});
        let e = parse(&v.to_string()).unwrap();
        assert_eq!(e.tool.unwrap().mcp_server.as_deref(), Some("a"));
    }

    #[test]
    fn a_pre_tool_use_event_is_read_whole() {
        let mut v = base("PreToolUse");
        v["model"] = json!("gpt-5.5");
        let e = parse(&v.to_string()).unwrap();
        assert_eq!(
            e,
            Event {
                name: EventName::PreToolUse,
                session_id: "17dcfece-22b4-40c1-9367-52283ff5acc4".into(),
                cwd: "/w".into(),
                tool: Some(ToolEvent {
                    name: "Bash".into(),
                    input: json!({"command": "ls"}),
                    use_id: "toolu_01".into(),
                    response: None,
                    duration_ms: None,
                    mcp_server: None,
                }),
                model: Some("gpt-5.5".into()),
                detail: None,
            }
        );
        let mut start = base("SessionStart");
        start["source"] = json!("startup");
        let e = parse(&start.to_string()).unwrap();
        assert_eq!((e.tool, e.detail.as_deref()), (None, Some("startup")));
    }

    #[test]
    fn bad_events_are_refused_naming_the_field() {
        let with = |k: &str, v: Value| {
            let mut e = base("PreToolUse");
            e[k] = v;
            e.to_string()
        };
        let without = |k: &str| {
            let mut e = base("PreToolUse");
            e.as_object_mut().unwrap().remove(k);
            e.to_string()
        };
        for (text, want) in [
            ("{not json".to_string(), "not valid JSON"),
            ("[1,2]".to_string(), "not a JSON object"),
            (without("tool_name"), "`tool_name` is missing"),
            (without("cwd"), "`cwd` is missing"),
            (without("tool_input"), "`tool_input` is missing"),
            (with("cwd", json!("rel/dir")), "relative path"),
            (with("session_id", json!("a/b")), "is not a session id"),
            (with("session_id", json!("..")), "is not a session id"),
            (with("session_id", json!("a..b")), "is not a session id"),
            (
                with("session_id", json!("x".repeat(1000))),
                "1000 bytes long",
            ),
            (
                with("hook_event_name", json!("UserPromptSubmit")),
                "unknown event `UserPromptSubmit`",
            ),
            (
                with("tool_input", json!("ls")),
                "`tool_input` is not a JSON object",
            ),
            (with("tool_use_id", json!("a\nb")), "control characters"),
            (
                with("mcp_server", json!({"source": "user"})),
                "`mcp_server` has no `name` string",
            ),
            (
                with("mcp_server", json!(5)),
                "`mcp_server` is not an object",
            ),
            (with("tool_name", json!(7)), "`tool_name` is not a string"),
        ] {
            let e = parse(&text).unwrap_err();
            assert!(e.contains(want), "{text:.80}: {e}");
        }
        let huge = with(
            "tool_input",
            json!({"content": "x".repeat(MAX_EVENT_BYTES)}),
        );
        assert!(parse(&huge).unwrap_err().contains("over tollgate's limit"));
    }
}
