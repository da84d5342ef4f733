//! `agent hook`: Claude Code's and Codex's hook command, one process per
//! event.
//!
//! The hook reads one event on stdin, asks the supervisor (ClientHooks on
//! agent.sock), prints the client's answer on stdout and exits 0. Every
//! failure blocks: exit 2 with one line on stderr naming the cause and what
//! to do (both clients let a tool run when a hook exits 1, crashes or runs
//! past its timeout, so the hook must never do any of those). Its own
//! deadline is shorter than the `timeout` it was installed with.
//!
//! `agent hook exec ID` runs a routed shell command (the rewritten Bash
//! command); `agent hook print-config` prints what to install.

pub mod args;
pub mod config;
pub mod event;
pub mod exec;

use std::time::Duration;

/// The agent's path and the socket in the command lines the hook prints
/// and rewrites are quoted with the workspace's one shell-quoting function.
pub use tollgate_toolcall::shell::shell_quote;

/// The seconds a hook may take when no `--timeout` is given.
pub const DEFAULT_TIMEOUT_S: u32 = 30;

/// The hook's own deadline for a client `timeout`: a tenth earlier, and at
/// least one second, so the client's own timeout (which lets the tool run)
/// is never reached.
pub fn deadline_for(timeout_s: u32) -> Duration {
    let total = Duration::from_secs(timeout_s.into());
    let margin = (total / 10).max(Duration::from_secs(1));
    total.saturating_sub(margin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_comes_before_the_clients_timeout() {
        for t in [2u32, 3, 10, 30, 120, 300, 600] {
            let d = deadline_for(t);
            assert!(d < Duration::from_secs(t.into()), "{t}");
            assert!(Duration::from_secs(t.into()) - d >= Duration::from_secs(1));
        }
        assert_eq!(deadline_for(120), Duration::from_secs(108));
        assert_eq!(deadline_for(3), Duration::from_secs(2));
        assert_eq!(deadline_for(1), Duration::ZERO);
    }
}
