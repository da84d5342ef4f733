//! The fields of a client's tool input, read with the field named in every
//! refusal.

use std::path::Path;

use serde_json::{Map, Value};

use crate::display::shorten;

pub(super) fn string<'a>(obj: &'a Map<String, Value>, key: &str) -> Result<&'a str, String> {
    match obj.get(key) {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(format!("`{key}` is not a string")),
        None => Err(format!("`{key}` is missing")),
    }
}

/// An optional string field (absent or null: `None`).
pub(super) fn opt_string(obj: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => string(obj, key).map(|s| Some(s.to_string())),
    }
}

/// An optional whole number (absent or null: `None`).
pub(super) fn opt_u64(obj: &Map<String, Value>, key: &str) -> Result<Option<u64>, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("`{key}` is not a whole number")),
    }
}

/// An optional boolean (absent or null: `None`).
pub(super) fn opt_bool(obj: &Map<String, Value>, key: &str) -> Result<Option<bool>, String> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_bool()
            .map(Some)
            .ok_or_else(|| format!("`{key}` is not true or false")),
    }
}

/// A path field the client always sends absolute.
pub(super) fn file_field<'a>(obj: &'a Map<String, Value>, key: &str) -> Result<&'a str, String> {
    let p = string(obj, key)?;
    if !Path::new(p).is_absolute() {
        return Err(format!(
            "`{key}` is the relative path `{}`; the client sends absolute paths",
            shorten(p, 160)
        ));
    }
    Ok(p)
}
