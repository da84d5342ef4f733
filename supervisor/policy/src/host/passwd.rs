//! The host's users, from /etc/passwd, and the credential paths of the one
//! table ([`crate::credentials`]) resolved against their homes.

use std::path::PathBuf;

/// A user from /etc/passwd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PasswdEntry {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
}

/// Reads /etc/passwd (missing or unreadable: no entries).
pub fn passwd() -> Vec<PasswdEntry> {
    let text = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    parse_passwd(&text)
}

pub fn parse_passwd(text: &str) -> Vec<PasswdEntry> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(':').collect();
            if f.len() < 7 {
                return None;
            }
            Some(PasswdEntry {
                name: f[0].to_string(),
                uid: f[2].parse().ok()?,
                gid: f[3].parse().ok()?,
                home: PathBuf::from(f[5]),
            })
        })
        .collect()
}

/// Every credential path on this host: tollgate-policy's one table
/// resolved against each user's home and root's, plus the host-wide
/// entries. Used by the workspace check, handed to both sandboxes (as
/// hidden paths) and listed by `doctor`.
pub fn credential_paths(users: &[PasswdEntry]) -> Vec<PathBuf> {
    crate::credentials::resolve(users.iter().map(|u| u.home.as_path()))
}
