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

/// The cache one sandbox (of session `session`) of `owner` (uid, gid) in
/// `workspace` gets, and the lease the sandbox holds it by ([`lease`]):
/// made when missing, trimmed to the cap only while no other sandbox has
/// it attached (else when the last of them ends). `None` when caches are
/// off, or when it cannot be made or leased (the sandbox then keeps its
/// caches in its private home, and the log says why).
pub fn for_sandbox(
    sup: &Supervisor,
    session: &str,
    owner: (u32, u32),
    workspace: &Path,
) -> Option<(PathBuf, tollgate_sandbox::Lease)> {
    let mode = sup.config.sandbox.cache;
    let root = root(sup);
    let leaf = store::leaf(&root, mode, owner.0, workspace)?;
    let ws = (mode == CacheMode::Workspace).then_some(workspace);
    let cap = sup.config.sandbox.cache_max_mb;
    let cap = (cap > 0).then(|| cap.saturating_mul(1 << 20));
    let holder = lease::Holder {
        holders: sup.leases.clone(),
        id: lease::HolderId(session.to_string()),
    };
    // Made again once held: a clear this hold waited for removed it.
    let held = store::prepare(&root, &leaf, owner, ws)
        .and_then(|()| lease::hold(&leaf, cap, holder, trim_logged))
        .and_then(|h| store::prepare(&root, &leaf, owner, ws).map(|()| h));
    match held {
        Ok(hold) => {
            let reported = Reported {
                hold,
                recorder: sup.recorder.clone(),
                session: session.to_string(),
            };
            Some((leaf, tollgate_sandbox::Lease::reporting(reported)))
        }
        Err(e) => {
            tracing::warn!(cache = %leaf.display(), error = %e, "package cache unavailable; this sandbox keeps its caches in its private home");
            None
        }
    }
}

/// A sandbox's hold on its cache that records in the audit log when it
/// ended other than at once (docs/OPERATIONS.md "Package caches"): after
/// its container's removal was retried, or when the supervisor gave up on
/// it (`recovered`, in the session's supervisor log).
struct Reported {
    hold: lease::Hold,
    recorder: crate::events::Recorder,
    session: String,
}

impl tollgate_sandbox::Leased for Reported {
    fn ended(&self, how: &tollgate_sandbox::LeaseEnd) {
        let Some(detail) = lease_end_detail(&self.hold, how) else {
            return;
        };
        let record =
            tollgate_audit::event::Event::Recovered(tollgate_audit::event::Recovered { detail });
        let written = self.recorder.write(
            crate::events::Log::Supervisor(&self.session),
            record,
            tollgate_audit::Durable::AsConfigured,
            tollgate_audit::Priority::Ordinary,
        );
        if let Err(e) = written {
            tracing::error!(session = %self.session, error = %e, "the end of a package cache's lease was not recorded");
        }
    }
}

/// What the audit log says of a lease that ended as `how`; `None` for an
/// ordinary end.
fn lease_end_detail(hold: &lease::Hold, how: &tollgate_sandbox::LeaseEnd) -> Option<String> {
    use tollgate_sandbox::LeaseEnd;
    let cache = hold.leaf().display();
    match how {
        LeaseEnd::Gone => None,
        LeaseEnd::GoneAfterRetries { what, tries } => Some(format!(
            "package cache {cache} released: {what} confirmed gone after {tries} removals tried"
        )),
        LeaseEnd::GaveUp { what, tries, error } => Some(format!(
            "package cache {cache} released: gave up on {what} after {tries} removals tried (last: {error}); what is left of it waits for the next start's reaper"
        )),
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

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_sandbox::LeaseEnd;

    #[test]
    fn only_a_lease_that_ended_late_or_given_up_is_described() {
        let d = tempfile::tempdir().unwrap();
        let leaf = d.path().join("owner");
        std::fs::create_dir(&leaf).unwrap();
        let holder = lease::Holder {
            holders: lease::Holders::default(),
            id: lease::HolderId("S".to_string()),
        };
        let h = lease::hold(&leaf, None, holder, |_, _| {}).unwrap();
        assert_eq!(lease_end_detail(&h, &LeaseEnd::Gone), None);
        let late = LeaseEnd::GoneAfterRetries {
            what: "container tollgate-S".into(),
            tries: 3,
        };
        assert_eq!(
            lease_end_detail(&h, &late).unwrap(),
            format!(
                "package cache {} released: container tollgate-S confirmed gone after 3 removals tried",
                leaf.display()
            )
        );
        let gave_up = LeaseEnd::GaveUp {
            what: "container tollgate-S".into(),
            tries: 11,
            error: "409".into(),
        };
        let said = lease_end_detail(&h, &gave_up).unwrap();
        assert!(
            said.contains("gave up on container tollgate-S after 11 removals tried (last: 409)"),
            "{said}"
        );
    }
}
