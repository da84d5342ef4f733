//! The Landlock domain each command takes of its own (init.rs), after fork
//! and before exec: the sandbox's file-system rules again, without the
//! scopes, and /etc entry by entry as it is when the command starts
//! (`etc_scan.rs`), where the sandbox's own domain grants /etc as a whole.
//! A Landlock domain only narrows, so the command and everything it
//! starts read of /etc only what both grant.
//!
//! Pid 1 keeps the ruleset and builds it again, before it forks a command,
//! only when a directory the last scan read has changed since
//! ([`etc_scan::Stamps`]): a file the host replaced by a rename (`useradd`
//! rewriting /etc/passwd, a package upgrade rewriting /etc/ld.so.cache) is
//! readable to every command started after, and a name created since is
//! granted only if no rule withholds it. A process started before keeps
//! the domain it started with (docs/THREAT_MODEL.md, "run_bash").

use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

use super::SetupError;
use super::etc_scan::{self, Stamps};
use super::landlock::{self, Builder};

/// What a command's rules are made of besides /etc.
pub(crate) struct Inputs {
    pub workspace: PathBuf,
    /// The private home, writable like /tmp.
    pub home: Option<PathBuf>,
    /// Masked paths (`SandboxSpec::hidden`): no rule for what covers them.
    pub hidden: Vec<PathBuf>,
}

/// A command's ruleset, and what it was built from.
pub(crate) struct PerCall {
    inputs: Inputs,
    ruleset: OwnedFd,
    stamps: Stamps,
    /// [`landlock::PER_CALL_LOG_FLAGS`] when refusals are attributed, else 0
    /// (the flag needs Landlock ABI 7; sandboxes need 6).
    flags: u32,
}

/// The /etc part of one build, for the posture report.
pub(crate) struct EtcReport {
    pub granted: usize,
    pub withheld: Vec<String>,
}

impl PerCall {
    /// The first build, during setup (in the sandbox's view, before pid 1
    /// drops its credentials).
    pub(crate) fn build(
        inputs: Inputs,
        attribute: bool,
    ) -> Result<(PerCall, EtcReport), SetupError> {
        let (ruleset, stamps, report) = rules(&inputs)?;
        let flags = if attribute {
            landlock::PER_CALL_LOG_FLAGS
        } else {
            0
        };
        let per_call = PerCall {
            inputs,
            ruleset,
            stamps,
            flags,
        };
        Ok((per_call, report))
    }

    /// Builds the ruleset again if /etc changed since the last build. Pid 1
    /// calls it before each fork (single-threaded: nothing runs meanwhile).
    /// A build that fails keeps the last ruleset, which grants no more
    /// than it did, and is tried again at the next command.
    pub(crate) fn refresh(&mut self) {
        if self.stamps.current() {
            return;
        }
        if let Ok((ruleset, stamps, _)) = rules(&self.inputs) {
            self.ruleset = ruleset;
            self.stamps = stamps;
        }
    }

    /// Gives the calling process (a command's child) its domain.
    pub(crate) fn restrict(&self) -> Result<(), std::io::Error> {
        landlock::restrict_per_call(self.ruleset.as_fd(), self.flags)
    }
}

/// /etc scanned (its directories stamped first), then every rule.
fn rules(inputs: &Inputs) -> Result<(OwnedFd, Stamps, EtcReport), SetupError> {
    let scan = etc_scan::scan(&inputs.hidden).map_err(|detail| SetupError {
        step: "landlock",
        detail,
    })?;
    let mut b = Builder::new(false)?;
    let (dir_access, file_access) = landlock::etc_rights();
    let mut granted = 0;
    for (path, ft) in &scan.candidates {
        if b.grant_entry(path, *ft, dir_access, file_access)? {
            granted += 1;
        }
    }
    landlock::grant_system(&mut b)?;
    landlock::grant_writable(&mut b, &inputs.workspace, inputs.home.as_deref())?;
    let ruleset = Option::<OwnedFd>::from(b.finish()?).ok_or_else(|| SetupError {
        step: "landlock",
        detail: "the command's ruleset has no file descriptor".to_string(),
    })?;
    let report = EtcReport {
        granted,
        withheld: scan.withheld,
    };
    Ok((ruleset, scan.stamps, report))
}
