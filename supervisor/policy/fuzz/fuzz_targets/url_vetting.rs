//! URL vetting: any bytes as a webfetch URL get a decision, and an allowed
//! fetch is pinned to public addresses only.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use tollgate_policy::{Mode, ToolCall, Verdict};

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    LazyLock::force(&common::NOTE_PANICS);
    let url = String::from_utf8_lossy(data).into_owned();
    if let Ok(f) = common::ENGINE.vet_url(&url, &common::Dns) {
        for a in &f.addrs {
            assert!(!a.ip().is_loopback() && !a.ip().is_unspecified(), "{url:?} -> {a}");
        }
    }
    let call = ToolCall {
        tool: "webfetch".to_string(),
        args: serde_json::json!({ "url": url }),
    };
    let d = common::ENGINE.decide(&call, &common::ctx(Mode::DangerouslySkipPermissions), &*common::FS, &common::Dns);
    common::check(&d);
    if d.verdict == Verdict::Allow {
        assert!(d.fetch.is_some());
    }
});
