//! Validation before policy: the arguments must fit the tool's schema.
//!
//! This interprets the small JSON Schema subset the registry uses (object,
//! properties, required, additionalProperties false, string with maxLength
//! and enum, integer with minimum, boolean), so the schema the model sees and
//! the check made here are the same data.

use serde_json::{Map, Value};

use crate::display::escape;
use crate::registry::ToolSpec;

/// Checks `args` against `spec`. On failure, returns a sentence naming the field.
pub(crate) fn validate(spec: &ToolSpec, args: &Value) -> Result<(), String> {
    let empty = Map::new();
    let obj = match args {
        Value::Object(o) => o,
        // A tool without arguments may be called with `null`.
        Value::Null => &empty,
        other => {
            return Err(format!(
                "the arguments must be a JSON object, not {}; {} takes {}",
                kind(other),
                spec.name,
                signature(spec)
            ));
        }
    };
    let schema = &spec.parameters;
    let props = schema.get("properties").and_then(Value::as_object);
    let required = schema.get("required").and_then(Value::as_array);

    // Unknown fields first: a misspelt optional field is the usual mistake.
    for key in obj.keys() {
        if props.is_none_or(|p| !p.contains_key(key)) {
            return Err(format!(
                "unknown field `{}`; {} takes {}",
                escape(&truncate(key, 64)),
                spec.name,
                signature(spec)
            ));
        }
    }
    for r in required.into_iter().flatten().filter_map(Value::as_str) {
        if !obj.contains_key(r) {
            return Err(format!(
                "missing field `{r}`; {} takes {}",
                spec.name,
                signature(spec)
            ));
        }
    }
    for (key, value) in obj {
        let Some(field) = props.and_then(|p| p.get(key)) else {
            continue;
        };
        check_field(key, field, value)?;
    }
    Ok(())
}

fn check_field(key: &str, field: &Value, value: &Value) -> Result<(), String> {
    let want = field.get("type").and_then(Value::as_str).unwrap_or("");
    match want {
        "string" => {
            let Some(s) = value.as_str() else {
                return Err(format!(
                    "field `{key}` must be a string, not {}",
                    kind(value)
                ));
            };
            if let Some(max) = field.get("maxLength").and_then(Value::as_u64)
                && s.len() as u64 > max
            {
                return Err(format!(
                    "field `{key}` is too long ({} bytes; the limit is {max})",
                    s.len()
                ));
            }
            if let Some(choices) = field.get("enum").and_then(Value::as_array)
                && !choices.iter().any(|c| c.as_str() == Some(s))
            {
                let names: Vec<&str> = choices.iter().filter_map(Value::as_str).collect();
                return Err(format!(
                    "field `{key}` must be one of {}, not {:?}",
                    names.join(", "),
                    escape(&truncate(s, 64))
                ));
            }
        }
        "integer" => {
            let n = match value {
                Value::Number(n) if n.is_u64() || n.is_i64() => n.as_i64().unwrap_or(i64::MAX),
                _ => {
                    return Err(format!(
                        "field `{key}` must be an integer, not {}",
                        kind(value)
                    ));
                }
            };
            if let Some(min) = field.get("minimum").and_then(Value::as_i64)
                && n < min
            {
                return Err(format!("field `{key}` must be at least {min}, not {n}"));
            }
        }
        "boolean" => {
            if !value.is_boolean() {
                return Err(format!(
                    "field `{key}` must be true or false, not {}",
                    kind(value)
                ));
            }
        }
        other => {
            // A schema type this validator does not know: refuse rather than
            // let an unchecked value through.
            return Err(format!(
                "field `{key}` has an unsupported schema type {other:?}"
            ));
        }
    }
    Ok(())
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_f64() => "a fractional number",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `{path: string, offset?: integer}`: the shape of a tool's arguments.
pub(crate) fn signature(spec: &ToolSpec) -> String {
    let props = spec.parameters.get("properties").and_then(Value::as_object);
    let required: Vec<&str> = spec
        .parameters
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let ty = |name: &str| {
        props
            .and_then(|p| p.get(name))
            .and_then(|f| f.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("value")
            .to_string()
    };
    // Required fields in schema order, then the optional ones by name (the
    // map's own order depends on serde_json features).
    let mut parts: Vec<String> = required.iter().map(|r| format!("{r}: {}", ty(r))).collect();
    let mut optional: Vec<&String> = props
        .into_iter()
        .flat_map(|p| p.keys())
        .filter(|k| !required.contains(&k.as_str()))
        .collect();
    optional.sort();
    parts.extend(optional.into_iter().map(|k| format!("{k}?: {}", ty(k))));
    format!("{{{}}}", parts.join(", "))
}

fn truncate(s: &str, max_chars: usize) -> String {
    if s.chars().count() <= max_chars {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max_chars).collect();
        t.push('…');
        t
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::registry::lookup;

    fn check(tool: &str, args: Value) -> Result<(), String> {
        validate(lookup(tool).unwrap(), &args)
    }

    #[test]
    fn good_arguments_pass() {
        check("read_file", json!({"path": "a", "offset": 0, "limit": 5})).unwrap();
        check("grep", json!({"pattern": "x", "ignore_case": true})).unwrap();
        check("todo_list", json!({})).unwrap();
        check("todo_list", Value::Null).unwrap();
        check("todo_update", json!({"id": 1, "status": "done"})).unwrap();
    }

    #[test]
    fn each_failure_names_the_field() {
        let cases = [
            ("read_file", json!({}), "missing field `path`"),
            (
                "read_file",
                json!({"path": 1}),
                "field `path` must be a string, not a number",
            ),
            (
                "read_file",
                json!({"path": "a", "bogus": 1}),
                "unknown field `bogus`",
            ),
            (
                "read_file",
                json!({"path": "a", "limit": 0}),
                "field `limit` must be at least 1",
            ),
            (
                "read_file",
                json!({"path": "a", "offset": 1.5}),
                "field `offset` must be an integer, not a fractional number",
            ),
            (
                "read_file",
                json!({"path": "a", "offset": -1}),
                "field `offset` must be at least 0",
            ),
            (
                "grep",
                json!({"pattern": "x", "ignore_case": "yes"}),
                "field `ignore_case` must be true or false",
            ),
            (
                "todo_update",
                json!({"id": 1, "status": "later"}),
                "field `status` must be one of pending, in_progress, done",
            ),
            (
                "run_bash",
                json!(["ls"]),
                "must be a JSON object, not an array",
            ),
            (
                "run_bash",
                json!({"command": null}),
                "field `command` must be a string, not null",
            ),
        ];
        for (tool, args, want) in cases {
            let err = check(tool, args.clone()).unwrap_err();
            assert!(err.contains(want), "{tool} {args}: {err}");
        }
    }

    #[test]
    fn the_message_shows_the_expected_shape() {
        let err = check("read_file", json!({})).unwrap_err();
        assert_eq!(
            err,
            "missing field `path`; read_file takes {path: string, limit?: integer, offset?: integer}"
        );
    }

    #[test]
    fn over_long_strings_are_refused() {
        let long = "a".repeat(crate::registry::MAX_PATH_BYTES + 1);
        let err = check("read_file", json!({ "path": long })).unwrap_err();
        assert!(err.contains("too long"), "{err}");
    }
}
