//! Running a file operation as the session owner.
//!
//! On Linux credentials belong to a thread, not to the process, and the
//! filesystem uid/gid decide every permission check of `open`, `mkdir`,
//! `rename` and the owner of what is created. Each operation therefore gets a
//! fresh std::thread (never a pooled thread that could be reused with other
//! credentials) that, in this order:
//! 1. sets its supplementary groups to the owner's (raw per-thread
//!    `setgroups`: glibc's `setgroups` would change every thread of the
//!    supervisor; without this the thread would keep root's groups),
//! 2. `setfsgid(gid)`,
//! 3. `setfsuid(uid)`: leaving fsuid 0 clears the thread's filesystem
//!    capabilities (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER,
//!    CAP_CHOWN, ...), so the owner's permissions are what apply,
//! 4. checks that the fs ids took effect (setfsuid reports no error; a
//!    failed setgroups does), failing closed, then does the work and ends. Nothing is ever switched back.
//!
//! When the supervisor is not root (rootless single-user mode) it can only
//! act for its own uid, and no switch happens.

use std::sync::Arc;

use nix::unistd::{Gid, Uid};

use crate::ToolError;

#[derive(Debug)]
pub(crate) enum Owner {
    /// The supervisor is root: switch each worker thread to these ids.
    Switch {
        uid: u32,
        gid: u32,
        groups: Vec<u32>,
    },
    /// The supervisor already runs as the owner.
    Current { uid: u32, gid: u32 },
}

impl Owner {
    pub(crate) fn for_session(uid: u32, gid: u32) -> Result<Owner, ToolError> {
        if uid == u32::MAX || gid == u32::MAX {
            return Err(ToolError::Credentials {
                uid,
                gid,
                reason: "-1 is not a valid id".into(),
            });
        }
        let euid = nix::unistd::geteuid();
        if euid.is_root() {
            Ok(Owner::Switch {
                uid,
                gid,
                groups: owner_groups(uid, gid),
            })
        } else if euid.as_raw() == uid {
            Ok(Owner::Current { uid, gid })
        } else {
            Err(ToolError::Credentials {
                uid,
                gid,
                reason: format!(
                    "the supervisor runs as uid {} without root, so it can only act for uid {}",
                    euid.as_raw(),
                    euid.as_raw()
                ),
            })
        }
    }

    pub(crate) fn uid(&self) -> u32 {
        match self {
            Owner::Switch { uid, .. } | Owner::Current { uid, .. } => *uid,
        }
    }

    pub(crate) fn gid(&self) -> u32 {
        match self {
            Owner::Switch { gid, .. } | Owner::Current { gid, .. } => *gid,
        }
    }

    /// Switches the calling thread. Only ever call it on a thread of its own
    /// that ends after the operation.
    fn apply_to_this_thread(&self) -> Result<(), ToolError> {
        let (uid, gid, groups) = match self {
            Owner::Current { .. } => return Ok(()),
            Owner::Switch { uid, gid, groups } => (*uid, *gid, groups),
        };
        let fail = |reason: String| ToolError::Credentials { uid, gid, reason };
        let gids: Vec<rustix::thread::Gid> = groups
            .iter()
            .map(|&g| rustix::thread::Gid::from_raw(g))
            .collect();
        // A raw per-thread setgroups: it reports failure, so no check after.
        rustix::thread::set_thread_groups(&gids)
            .map_err(|e| fail(format!("setgroups failed: {e}")))?;
        nix::unistd::setfsgid(Gid::from_raw(gid));
        nix::unistd::setfsuid(Uid::from_raw(uid));
        // setfsuid/setfsgid report no error: calling them again returns the
        // current value, which must now be the owner's.
        let fsgid = nix::unistd::setfsgid(Gid::from_raw(gid)).as_raw();
        let fsuid = nix::unistd::setfsuid(Uid::from_raw(uid)).as_raw();
        if fsuid != uid || fsgid != gid {
            return Err(fail(format!(
                "the thread's filesystem ids are {fsuid}:{fsgid} after the switch"
            )));
        }
        Ok(())
    }
}

/// The owner's supplementary groups from the user database (`getgrouplist`),
/// always including `gid`. A uid without a passwd entry gets just `gid`.
fn owner_groups(uid: u32, gid: u32) -> Vec<u32> {
    let mut groups = vec![gid];
    if let Ok(Some(user)) = nix::unistd::User::from_uid(Uid::from_raw(uid))
        && let Ok(name) = std::ffi::CString::new(user.name)
        && let Ok(list) = nix::unistd::getgrouplist(&name, Gid::from_raw(gid))
    {
        groups.extend(list.into_iter().map(Gid::as_raw));
    }
    groups.sort_unstable();
    groups.dedup();
    groups
}

/// Runs `work` on a fresh thread switched to `owner` and returns its result.
/// If the future is dropped, the thread still finishes its operation (a write
/// completes or leaves the old file; it is never half done).
pub(crate) async fn run_as_owner<T, F>(owner: Arc<Owner>, work: F) -> Result<T, ToolError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, ToolError> + Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("tollgate-fs".into())
        .spawn(move || {
            let result = owner.apply_to_this_thread().and_then(|()| work());
            // The receiver is gone when the caller stopped waiting: nothing to do.
            let _ = tx.send(result);
        })
        .map_err(|e| ToolError::Internal(format!("cannot start a file-tool thread: {e}")))?;
    rx.await.map_err(|_| {
        ToolError::Internal("the file-tool thread ended without an answer (it panicked)".into())
    })?
}

/// The same, blocking the calling thread (for callers outside tokio).
#[cfg(test)]
pub(crate) fn run_as_owner_blocking<T, F>(owner: Arc<Owner>, work: F) -> Result<T, ToolError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, ToolError> + Send + 'static,
{
    std::thread::Builder::new()
        .name("tollgate-fs".into())
        .spawn(move || owner.apply_to_this_thread().and_then(|()| work()))
        .map_err(|e| ToolError::Internal(format!("cannot start a file-tool thread: {e}")))?
        .join()
        .map_err(|_| ToolError::Internal("the file-tool thread panicked".into()))?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_root() -> bool {
        nix::unistd::geteuid().is_root()
    }

    #[test]
    fn invalid_ids_are_refused() {
        assert!(Owner::for_session(u32::MAX, 0).is_err());
        assert!(Owner::for_session(0, u32::MAX).is_err());
    }

    #[test]
    fn a_switched_thread_has_the_owners_fs_ids_and_groups_and_others_do_not() {
        if !is_root() {
            if std::env::var("TOLLGATE_REQUIRE_ROOT").as_deref() == Ok("1") {
                panic!("needs root");
            }
            eprintln!("skipped: needs root");
            return;
        }
        let owner = Arc::new(Owner::for_session(65534, 65534).unwrap());
        let status = run_as_owner_blocking(owner, || {
            std::fs::read_to_string("/proc/thread-self/status")
                .map_err(|e| ToolError::Internal(e.to_string()))
        })
        .unwrap();
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .unwrap()
                .split_whitespace()
                .skip(1)
                .collect::<Vec<_>>()
        };
        // Uid: real effective saved fs.
        assert_eq!(field("Uid:")[3], "65534");
        assert_eq!(field("Gid:")[3], "65534");
        assert_eq!(field("Groups:"), vec!["65534"]);
        // The filesystem capabilities are gone from the effective set.
        let capeff = u64::from_str_radix(field("CapEff:")[0], 16).unwrap();
        const CAP_DAC_OVERRIDE: u64 = 1 << 1;
        const CAP_DAC_READ_SEARCH: u64 = 1 << 2;
        const CAP_FOWNER: u64 = 1 << 3;
        assert_eq!(
            capeff & (CAP_DAC_OVERRIDE | CAP_DAC_READ_SEARCH | CAP_FOWNER),
            0
        );

        // The calling thread (and so the rest of the supervisor) is untouched.
        let mine = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        let fs_uid = mine
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .unwrap()
            .split_whitespace()
            .nth(4)
            .unwrap()
            .to_string();
        assert_eq!(fs_uid, "0");
    }
}
