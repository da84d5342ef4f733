//! The real world behind the engine's fact traits (feature `host`): the
//! filesystem ([`RealFs`]), a client's own search walk ([`RealWalk`]), DNS
//! ([`SystemResolver`]), the host's own
//! addresses ([`read_host_addrs`]), its users ([`passwd`]) and what a
//! workspace's git obeys ([`git`], [`repo_paths`]).
//!
//! This is the one part of the crate that does I/O, so it is opt-in: the
//! supervisor and `supervisorctl` (`policy test`, `doctor`, `bench`) turn it
//! on; the engine itself, its tests and the fuzz targets build without it
//! and stay pure. The engine never calls into this module: each fact comes
//! in through [`crate::FsFacts`] and [`crate::Resolver`], as before.

mod addrs;
pub mod git;
mod passwd;
mod real_fs;
mod resolver;
mod walk;

pub use addrs::{Snapshot, read_host_addrs};
pub use passwd::{PasswdEntry, credential_paths, parse_passwd, passwd};
pub use real_fs::RealFs;
pub use resolver::SystemResolver;
pub use walk::RealWalk;

/// The workspace-relative paths a repository's own configuration makes
/// host-executed, for the file tools' write checks (docs/THREAT_MODEL.md,
/// "What the host runs by itself"): git directories not named `.git`,
/// included config files, hooks directories. Reads no index. `Err`: why
/// this layout cannot be guarded, in a sentence.
pub fn repo_paths(
    workspace: &std::path::Path,
    home: Option<&std::path::Path>,
) -> Result<Vec<crate::host_exec::RepoPath>, String> {
    let found = git::scan(workspace, home, git::Depth::ConfigsOnly).map_err(|e| e.0)?;
    Ok(crate::host_exec::RepoPath::from_scan(
        found.git,
        found.configs,
        found.hooks,
    ))
}
