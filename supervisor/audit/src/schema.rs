//! The JSON Schema of an audit record (docs/audit-records.schema.json),
//! derived from [`Event`] and its field types (schemars), with the
//! envelope every line carries (`v`, `seq`, `ts`, `session`, `prev`,
//! `hash`). Reading is lenient (docs/ARCHITECTURE.md "Adding an audit
//! event"), so a member a type gives a default is not required, and members
//! the schema does not name are allowed: a newer writer's additions.

use serde_json::{Value, json};

use crate::Event;

/// The schema document.
pub fn schema() -> Value {
    let mut root = serde_json::to_value(schemars::schema_for!(Event)).unwrap_or(Value::Null);
    let defs = root
        .as_object_mut()
        .and_then(|o| o.remove("$defs"))
        .unwrap_or_else(|| json!({}));
    if let Some(o) = root.as_object_mut() {
        o.remove("$schema");
        o.remove("title");
    }
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "tollgate audit record",
        "description": "One line of a tollgate audit file (JSON Lines): the hash-chain envelope and one event's members. Generated from tollgate_audit::Event; regenerate with TOLLGATE_WRITE_SCHEMA=1 cargo test -p tollgate-audit --test audit schema.",
        "allOf": [envelope(), root],
        "$defs": defs,
    })
}

/// The members every record has besides its event's.
fn envelope() -> Value {
    let hex = json!({"type": "string", "pattern": "^[0-9a-f]{64}$"});
    json!({
        "type": "object",
        "required": ["v", "seq", "ts", "session", "event", "prev", "hash"],
        "properties": {
            "v": {"const": 1, "description": "The record format's version."},
            "seq": {"type": "integer", "minimum": 1, "description": "1-based position in its file."},
            "ts": {"type": "string", "description": "UTC, RFC 3339 with microseconds."},
            "session": {"type": "string", "description": "The session it belongs to; empty for none."},
            "event": {"type": "string", "description": "The record's kind."},
            "prev": hex.clone(),
            "hash": hex,
        },
    })
}

/// The schema as the file in docs/ holds it.
pub fn text() -> String {
    let mut s = serde_json::to_string_pretty(&schema()).unwrap_or_default();
    s.push('\n');
    s
}
