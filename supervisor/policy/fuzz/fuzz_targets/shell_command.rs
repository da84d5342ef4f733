//! Command analysis: any bytes as a run_bash command get a decision.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use tollgate_policy::{Mode, ToolCall};

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    LazyLock::force(&common::NOTE_PANICS);
    let command = String::from_utf8_lossy(data).into_owned();
    let call = ToolCall {
        tool: "run_bash".to_string(),
        args: serde_json::json!({ "command": command }),
    };
    let mode = Mode::ALL[data.first().map_or(0, |b| *b as usize) % Mode::ALL.len()];
    let d = common::ENGINE.decide(&call, &common::ctx(mode), &*common::FS, &common::Dns);
    common::check(&d);
});
