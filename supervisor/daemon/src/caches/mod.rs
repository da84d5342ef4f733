//! Package caches kept between sessions (docs/OPERATIONS.md "Package
//! caches", docs/THREAT_MODEL.md "Package caches"): npm, pip, cargo's
//! registry and git checkouts, Go modules, bun and yarn, in one directory
//! per owner (or per owner and workspace, `[sandbox] cache`) outside every
//! workspace, attached to the owner's sandboxes at `~/.tollgate-cache`
//! with the tools' cache variables pointing into it. The size cap
//! (`cache_max_mb`) is kept while no sandbox has the cache attached
//! ([`lease`]): the oldest files go first. `supervisorctl cache
//! list|clear` are the operator's view.

pub mod lease;
pub mod operator;
pub mod store;

use std::path::{Path, PathBuf};

use tollgate_config::CacheMode;

use crate::supervisor::Supervisor;

/// The directory all caches are kept in.
pub fn root(sup: &Supervisor) -> PathBuf {
    let configured = &sup.config.sandbox.cache_dir;
    if configured.as_os_str().is_empty() {
        sup.paths.state_dir.join("caches")
    } else {
        configured.clone()
    }
}

/// Each tool's cache variable and the directory it names beneath the
/// cache's path inside (`at`): tollgate-policy's table, which the shell
/// policy judges `$npm_config_cache` and the others with.
pub fn env(at: &Path) -> Vec<(String, String)> {
    tollgate_policy::sandbox_env::cache_env(at)
}

/// The cache one sandbox of `owner` (uid, gid) in `workspace` gets, and
/// the lease the sandbox holds it by ([`lease`]): made when missing,
/// trimmed to the cap only while no other sandbox has it attached (else
/// when the last of them ends). `None` when caches are off, or when it
/// cannot be made or leased (the sandbox then keeps its caches in its
/// private home, and the log says why).
pub fn for_sandbox(
    sup: &Supervisor,
    owner: (u32, u32),
    workspace: &Path,
) -> Option<(PathBuf, tollgate_sandbox::Lease)> {
    let mode = sup.config.sandbox.cache;
    let root = root(sup);
    let leaf = store::leaf(&root, mode, owner.0, workspace)?;
    let ws = (mode == CacheMode::Workspace).then_some(workspace);
    let cap = sup.config.sandbox.cache_max_mb;
    let cap = (cap > 0).then(|| cap.saturating_mul(1 << 20));
    let held =
        store::prepare(&root, &leaf, owner, ws).and_then(|()| lease::hold(&leaf, cap, trim_logged));
    match held {
        Ok(h) => Some((leaf, tollgate_sandbox::Lease::new(h))),
        Err(e) => {
            tracing::warn!(cache = %leaf.display(), error = %e, "package cache unavailable; this sandbox keeps its caches in its private home");
            None
        }
    }
}

/// Trims `leaf` to `cap_bytes` (the oldest files first), saying in the
/// log what went.
pub(crate) fn trim_logged(leaf: &Path, cap_bytes: u64) {
    match store::trim(leaf, cap_bytes) {
        Ok(t) if t.removed_files > 0 => tracing::info!(
            cache = %leaf.display(),
            removed_files = t.removed_files,
            removed_bytes = t.removed_bytes,
            "package cache over cache_max_mb: oldest files removed"
        ),
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(cache = %leaf.display(), error = %e, "package cache not trimmed")
        }
    }
}
