//! `reload`: the supervisor reads its config again and puts the new
//! `[policy]` in force, as SIGHUP does (docs/OPERATIONS.md "Reloading").
//! A refused reload exits 1, naming why; the old config stays in force.

use serde_json::{Value, json};
use tollgate_proto::v1 as pb;

use crate::client::{Client, status_error};
use crate::table;

pub async fn run(mut c: Client, json_out: bool) -> anyhow::Result<u8> {
    let r = c
        .reload(pb::ReloadRequest {})
        .await
        .map_err(status_error)?
        .into_inner();
    if json_out {
        outln!("{}", result_json(&r));
    } else if r.accepted {
        outln!(
            "reloaded: policy {} in force (was {}); live sessions keep running",
            short(&r.new_digest),
            short(&r.old_digest)
        );
        for s in &r.needs_restart {
            outln!("needs a restart to apply: {}", table::escape(s));
        }
    } else {
        eprintln!(
            "supervisorctl: reload refused, the old config stays in force (policy {}): {}",
            short(&r.old_digest),
            table::escape(&r.reason)
        );
    }
    Ok(if r.accepted { 0 } else { 1 })
}

/// A reload's result as `reload --json` and `status --json` print it.
pub fn result_json(r: &pb::ReloadResult) -> Value {
    json!({
        "accepted": r.accepted, "by": r.by, "at_unix_ms": r.at_unix_ms,
        "old_digest": r.old_digest,
        "new_digest": (!r.new_digest.is_empty()).then_some(&r.new_digest),
        "reason": (!r.accepted).then_some(&r.reason),
        "needs_restart": r.needs_restart,
    })
}

/// `status`'s line for the last reload.
pub fn status_line(r: Option<&pb::ReloadResult>) -> String {
    let Some(r) = r else {
        return "none since start".to_string();
    };
    let when = table::ago(r.at_unix_ms);
    if r.accepted {
        let mut line = format!(
            "accepted {when} ({}): policy {} replaced {}",
            r.by,
            short(&r.new_digest),
            short(&r.old_digest)
        );
        if !r.needs_restart.is_empty() {
            line.push_str(&format!(
                "; needs a restart to apply: {}",
                r.needs_restart.join(", ")
            ));
        }
        line
    } else {
        format!(
            "REFUSED {when} ({}), the old config stays in force: {}",
            r.by, r.reason
        )
    }
}

/// The first 12 hex digits of a digest, as shown in tables.
fn short(d: &str) -> &str {
    d.get(..12).unwrap_or(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_reload_says_so_and_why() {
        let r = pb::ReloadResult {
            accepted: false,
            old_digest: "a".repeat(64),
            reason: "config x.toml: line 2".into(),
            by: "SIGHUP".into(),
            ..Default::default()
        };
        let line = status_line(Some(&r));
        assert!(line.starts_with("REFUSED"), "{line}");
        assert!(line.contains("line 2") && line.contains("SIGHUP"), "{line}");
        let v = result_json(&r);
        assert_eq!(v["new_digest"], Value::Null);
        assert_eq!(v["reason"], "config x.toml: line 2");
        assert_eq!(status_line(None), "none since start");
    }
}
