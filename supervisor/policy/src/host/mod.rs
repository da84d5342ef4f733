//! The real world behind the engine's fact traits (feature `host`): the
//! filesystem ([`RealFs`]), a client's own search walk ([`RealWalk`]), DNS
//! ([`SystemResolver`]), the host's own
//! addresses ([`read_host_addrs`]) and its users ([`passwd`]).
//!
//! This is the one part of the crate that does I/O, so it is opt-in: the
//! supervisor and `supervisorctl` (`policy test`, `doctor`, `bench`) turn it
//! on; the engine itself, its tests and the fuzz targets build without it
//! and stay pure. The engine never calls into this module: each fact comes
//! in through [`crate::FsFacts`] and [`crate::Resolver`], as before.

mod addrs;
mod passwd;
mod real_fs;
mod resolver;
mod walk;

pub use addrs::{Snapshot, read_host_addrs};
pub use passwd::{PasswdEntry, credential_paths, parse_passwd, passwd};
pub use real_fs::RealFs;
pub use resolver::SystemResolver;
pub use walk::RealWalk;
