//! `supervisorctl cache list|clear` (docs/INTERFACES.md): what each
//! owner's package caches hold, and removing them. A clear is refused
//! while a session of that owner runs (its sandbox has the cache mounted
//! and may be writing to it), and while any sandbox holds the lease on a
//! cache it would remove (an operator's `sandbox exec`, a sandbox whose
//! session ended but whose processes are not yet confirmed gone): all or
//! nothing, naming the holders. It is recorded (`cache_cleared`) before
//! anything is removed: a clear that cannot be recorded does not happen.
//! The leases stay taken while the caches go, so a sandbox being built
//! meanwhile waits and gets a fresh cache.

use tollgate_audit::event::{CacheCleared, Event};
use tollgate_audit::{Durable, Priority};
use tollgate_proto::v1 as pb;
use tonic::Status;

use super::lease::{self, ClearLock};
use super::store::{self, Listed};
use crate::events::Log;
use crate::supervisor::Supervisor;

fn user_name(uid: u32) -> String {
    crate::identity::user(uid)
        .map(|u| u.name)
        .unwrap_or_else(|| uid.to_string())
}

fn info(sup: &Supervisor, l: &Listed) -> pb::CacheInfo {
    pb::CacheInfo {
        uid: l.uid,
        user: user_name(l.uid),
        name: l.name.clone(),
        workspace: l.workspace.clone().unwrap_or_default(),
        path: l.path.display().to_string(),
        bytes: l.usage.bytes,
        files: l.usage.files,
        newest_unix: l.usage.newest_unix,
        sessions: sup.sessions.count_for_uid(l.uid) as u32,
        holders: Some(sup.leases.of(&l.path).len() as u32),
    }
}

fn listed(sup: &Supervisor) -> Result<Vec<Listed>, Status> {
    let root = super::root(sup);
    store::list(&root)
        .map_err(|e| Status::internal(format!("reading the caches in {}: {e}", root.display())))
}

/// Every cache, with the configuration it is kept under.
pub fn list(sup: &Supervisor) -> Result<pb::ListCachesResponse, Status> {
    let caches = listed(sup)?.iter().map(|l| info(sup, l)).collect();
    Ok(pb::ListCachesResponse {
        caches,
        mode: sup.config.sandbox.cache.as_str().to_string(),
        cache_mode: crate::wire::cache_mode(sup.config.sandbox.cache) as i32,
        max_mb: sup.config.sandbox.cache_max_mb,
        root: super::root(sup).display().to_string(),
    })
}

/// The uid `user` names: a number, or a name the name service knows.
fn uid_of(user: &str) -> Result<u32, Status> {
    if let Ok(uid) = user.parse::<u32>() {
        return Ok(uid);
    }
    nix::unistd::User::from_name(user)
        .ok()
        .flatten()
        .map(|u| u.uid.as_raw())
        .ok_or_else(|| Status::not_found(format!("no user named {user:?}")))
}

/// Removes the caches of `user` (every owner's when empty); refused while
/// one of their sessions runs.
pub fn clear(sup: &Supervisor, user: &str, by: &str) -> Result<pb::ClearCacheResponse, Status> {
    let only = if user.is_empty() {
        None
    } else {
        Some(uid_of(user)?)
    };
    let chosen: Vec<Listed> = listed(sup)?
        .into_iter()
        .filter(|l| only.is_none_or(|u| u == l.uid))
        .collect();
    let busy: Vec<String> = chosen
        .iter()
        .map(|l| l.uid)
        .chain(only)
        .collect::<std::collections::BTreeSet<u32>>()
        .into_iter()
        .filter(|uid| sup.sessions.count_for_uid(*uid) > 0)
        .map(|uid| {
            let ids: Vec<String> = sup
                .sessions
                .all()
                .iter()
                .filter(|s| s.uid == uid)
                .map(|s| s.id.clone())
                .collect();
            format!("{} ({})", user_name(uid), ids.join(", "))
        })
        .collect();
    if !busy.is_empty() {
        return Err(Status::failed_precondition(format!(
            "cache in use: sessions of {} are running and have it mounted; end them first (supervisorctl revoke SESSION) and clear again",
            busy.join("; ")
        )));
    }
    let _locks = locked(sup, &chosen)?;
    let cleared: Vec<pb::CacheInfo> = chosen.iter().map(|l| info(sup, l)).collect();
    let record = Event::CacheCleared(CacheCleared {
        by: by.to_string(),
        user: only.map(user_name).unwrap_or_default(),
        caches: cleared.iter().map(|c| c.path.clone()).collect(),
        bytes: cleared.iter().map(|c| c.bytes).sum(),
        files: cleared.iter().map(|c| c.files).sum(),
    });
    sup.recorder
        .write(
            Log::Supervisor(""),
            record,
            Durable::AsConfigured,
            Priority::Ordinary,
        )
        .map_err(|e| {
            Status::unavailable(format!(
                "AUDIT_UNAVAILABLE: the caches were not cleared: their record cannot be written: {e}"
            ))
        })?;
    for l in &chosen {
        store::clear(l).map_err(|e| {
            Status::internal(format!("removing the cache {}: {e}", l.path.display()))
        })?;
    }
    Ok(pb::ClearCacheResponse { cleared })
}

/// Every chosen leaf's lease, exclusively (docs/OPERATIONS.md "Package
/// caches"): refused, naming the holders, when a sandbox holds any of them.
fn locked(sup: &Supervisor, chosen: &[Listed]) -> Result<Vec<ClearLock>, Status> {
    let mut locks = Vec::with_capacity(chosen.len());
    let mut held = Vec::new();
    for l in chosen {
        let got = lease::for_clear(&l.path, &sup.leases).map_err(|e| {
            Status::internal(format!("the lease of the cache {}: {e}", l.path.display()))
        })?;
        match got {
            Ok(lock) => locks.push(lock),
            Err(ids) => held.push(held_by(l, &ids)),
        }
    }
    if held.is_empty() {
        return Ok(locks);
    }
    Err(Status::failed_precondition(format!(
        "cache in use: {}; nothing was cleared: end them first (supervisorctl revoke SESSION; an operator's sandbox exec ends with its command) and clear again",
        held.join("; ")
    )))
}

/// `CACHE is held by the sandbox of ID, …` for one held leaf.
fn held_by(l: &Listed, ids: &[lease::HolderId]) -> String {
    let what = match &l.workspace {
        Some(ws) => format!("the cache of {} for {ws}", user_name(l.uid)),
        None => format!("the cache of {}", user_name(l.uid)),
    };
    if ids.is_empty() {
        return format!(
            "{what} ({}) is held by a sandbox this supervisor does not know of (another supervisor with the same cache_dir?)",
            l.path.display()
        );
    }
    let ids: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
    format!(
        "{what} ({}) is held by the sandbox of {}",
        l.path.display(),
        ids.join(", ")
    )
}
