//! cache list, cache clear: the owners' package caches (docs/OPERATIONS.md
//! "Package caches"). Clearing is recorded in the audit log and refused
//! while a session of that owner runs.

use clap::Subcommand;
use serde_json::{Value, json};
use tollgate_proto::v1 as pb;

use crate::client::{Client, status_error};
use crate::table;

#[derive(Debug, Subcommand)]
pub enum CacheCmd {
    /// Every owner's package caches: where, how large, how recent.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Remove package caches: one owner's (--user NAME or UID), or every
    /// owner's. Refused while a session of that owner runs.
    Clear {
        #[arg(long)]
        user: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

/// Runs one `cache` subcommand.
pub async fn run(c: Client, cmd: CacheCmd) -> anyhow::Result<()> {
    match cmd {
        CacheCmd::List { json } => list(c, json).await,
        CacheCmd::Clear { user, json } => clear(c, user.unwrap_or_default(), json).await,
    }
}

fn cache_json(c: &pb::CacheInfo) -> Value {
    json!({
        "uid": c.uid, "user": c.user, "name": c.name,
        "workspace": (!c.workspace.is_empty()).then_some(&c.workspace),
        "path": c.path, "bytes": c.bytes, "files": c.files,
        "newest_unix": c.newest_unix, "sessions": c.sessions,
        "holders": holders(c),
    })
}

/// How many sessions and `sandbox exec`s hold the cache's lease now
/// (docs/INTERFACES.md "Package caches"); from a supervisor of an earlier
/// release, which does not say, its count of the owner's sessions.
fn holders(c: &pb::CacheInfo) -> u32 {
    c.holders.unwrap_or(c.sessions)
}

/// Bytes as `du -h` would round them.
fn size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn rows(list: &[pb::CacheInfo]) -> Vec<Vec<String>> {
    list.iter()
        .map(|c| {
            vec![
                table::escape(&c.user),
                c.uid.to_string(),
                if c.workspace.is_empty() {
                    table::escape(&c.name)
                } else {
                    table::escape(&c.workspace)
                },
                size(c.bytes),
                c.files.to_string(),
                holders(c).to_string(),
                table::escape(&c.path),
            ]
        })
        .collect()
}

const HEADER: [&str; 7] = ["USER", "UID", "CACHE", "SIZE", "FILES", "SESSIONS", "PATH"];

async fn list(mut c: Client, json_out: bool) -> anyhow::Result<()> {
    let r = c
        .list_caches(pb::ListCachesRequest {})
        .await
        .map_err(status_error)?
        .into_inner();
    if json_out {
        outln!(
            "{}",
            json!({
                "mode": crate::wire::cache_mode(&r), "max_mb": r.max_mb, "root": r.root,
                "caches": r.caches.iter().map(cache_json).collect::<Vec<_>>(),
            })
        );
        return Ok(());
    }
    outln!(
        "caches: {} (cache_max_mb {}) in {}",
        crate::wire::cache_mode(&r),
        r.max_mb,
        r.root
    );
    if r.caches.is_empty() {
        outln!("no package caches yet");
        return Ok(());
    }
    table::print(&HEADER, &rows(&r.caches));
    Ok(())
}

async fn clear(mut c: Client, user: String, json_out: bool) -> anyhow::Result<()> {
    let r = c
        .clear_cache(pb::ClearCacheRequest { user })
        .await
        .map_err(status_error)?
        .into_inner();
    if json_out {
        outln!(
            "{}",
            json!({ "cleared": r.cleared.iter().map(cache_json).collect::<Vec<_>>() })
        );
        return Ok(());
    }
    if r.cleared.is_empty() {
        outln!("no package caches to clear");
        return Ok(());
    }
    let bytes: u64 = r.cleared.iter().map(|c| c.bytes).sum();
    outln!("cleared {} cache(s), {}", r.cleared.len(), size(bytes));
    table::print(&HEADER, &rows(&r.cleared));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_like_du() {
        assert_eq!(size(512), "512 B");
        assert_eq!(size(3 << 20), "3.0 MiB");
        assert_eq!(size(1536), "1.5 KiB");
    }

    #[test]
    fn sessions_are_the_lease_holders_else_an_older_supervisors_count() {
        let c = pb::CacheInfo {
            sessions: 2,
            holders: Some(1),
            ..Default::default()
        };
        assert_eq!(holders(&c), 1);
        assert_eq!(rows(std::slice::from_ref(&c))[0][5], "1");
        assert_eq!(cache_json(&c)["holders"], 1);
        assert_eq!(cache_json(&c)["sessions"], 2);
        let idle = pb::CacheInfo {
            sessions: 1,
            holders: Some(0),
            ..Default::default()
        };
        assert_eq!(holders(&idle), 0);
        let older = pb::CacheInfo {
            sessions: 3,
            holders: None,
            ..Default::default()
        };
        assert_eq!(holders(&older), 3);
    }
}
