//! Who a uid is, through the system's name service (docs/OPERATIONS.md
//! "Identity"): `getpwuid_r`, `getgrnam_r` and `getgrouplist` via nix, so
//! users and groups served by LDAP, SSSD, systemd-userdb or extrausers work
//! as well as those in /etc/passwd and /etc/group.
//!
//! The one exception is the all-users credential table
//! ([`tollgate_policy::host::credential_paths`]): it still resolves against
//! every home in /etc/passwd (a name service need not enumerate its users),
//! plus the session owner's home from here.

use std::ffi::CString;

use nix::unistd::{Gid, Group, Uid, User};
use tollgate_policy::host::PasswdEntry;

/// The user `uid` as the name service knows it, or `None`.
pub fn user(uid: u32) -> Option<PasswdEntry> {
    let u = User::from_uid(Uid::from_raw(uid)).ok().flatten()?;
    Some(PasswdEntry {
        name: u.name,
        uid,
        gid: u.gid.as_raw(),
        home: u.dir,
    })
}

/// The gid of group `name` as the name service knows it.
pub fn group_gid(name: &str) -> Option<u32> {
    Group::from_name(name)
        .ok()
        .flatten()
        .map(|g| g.gid.as_raw())
}

/// Whether `uid` (whose primary group, as the kernel reports it for the
/// peer, is `primary`) is in group `gid`: its primary group, or a
/// supplementary one by `getgrouplist` of its name.
pub fn in_group(uid: u32, primary: u32, gid: u32) -> bool {
    if primary == gid {
        return true;
    }
    let Some(u) = user(uid) else {
        return false;
    };
    if u.gid == gid {
        return true;
    }
    let Ok(name) = CString::new(u.name) else {
        return false;
    };
    nix::unistd::getgrouplist(&name, Gid::from_raw(u.gid))
        .map(|groups| groups.iter().any(|g| g.as_raw() == gid))
        .unwrap_or(false)
}

/// The users a session's checks read: /etc/passwd (the floor the
/// credential table resolves against) and `uid` from the name service
/// when /etc/passwd does not have it.
pub fn users_with(uid: u32) -> Vec<PasswdEntry> {
    let mut users = tollgate_policy::host::passwd();
    if !users.iter().any(|u| u.uid == uid)
        && let Some(u) = user(uid)
    {
        users.push(u);
    }
    users
}

#[cfg(test)]
mod tests;
