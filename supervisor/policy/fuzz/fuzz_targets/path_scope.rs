//! Path scope: any bytes as a file path get a decision, and nothing outside
//! the workspace is ever allowed.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use tollgate_policy::{Mode, ToolCall};

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    LazyLock::force(&common::NOTE_PANICS);
    let path = String::from_utf8_lossy(data).into_owned();
    for (tool, args) in [
        ("read_file", serde_json::json!({ "path": path })),
        ("write_file", serde_json::json!({ "path": path, "content": "x" })),
        ("grep", serde_json::json!({ "pattern": "x", "path": path, "glob": path })),
    ] {
        let call = ToolCall { tool: tool.to_string(), args };
        let d = common::ENGINE.decide(&call, &common::ctx(Mode::AcceptEdits), &*common::FS, &common::Dns);
        common::check(&d);
    }
});
