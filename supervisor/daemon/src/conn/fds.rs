//! The supervisor's own file descriptor limit: raised to the hard limit at
//! start, and counted for `status`.

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// The fewest descriptors agent.sock must keep after the reserve, or the
/// supervisor refuses to start (it could serve almost no one).
pub const MIN_AGENT_FDS: u64 = 32;

/// RLIMIT_NOFILE as the supervisor runs with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdLimit {
    pub soft: u64,
    pub hard: u64,
    /// The soft limit found at start, before raising it.
    pub was: u64,
}

/// Raises the soft RLIMIT_NOFILE to the hard limit (a raise within the hard
/// limit needs no privilege).
pub fn raise() -> Result<FdLimit, nix::Error> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    }
    let (now, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    Ok(FdLimit {
        soft: now,
        hard,
        was: soft,
    })
}

/// Refuses a reserve that leaves agent.sock (almost) nothing.
pub fn check_reserve(limit: FdLimit, reserve: u64) -> Result<(), String> {
    if limit.soft < reserve.saturating_add(MIN_AGENT_FDS) {
        return Err(format!(
            "[supervisor] fd_reserve = {reserve} leaves agent.sock fewer than {MIN_AGENT_FDS} of the \
             supervisor's {} file descriptors (RLIMIT_NOFILE hard limit {}); raise the hard limit \
             (ulimit -Hn, systemd LimitNOFILE=) or lower fd_reserve",
            limit.soft, limit.hard
        ));
    }
    Ok(())
}

/// How many descriptors this process has open now.
pub fn in_use() -> Option<u64> {
    let dir = std::fs::read_dir("/proc/self/fd").ok()?;
    // The directory handle being read is one of them.
    Some((dir.count() as u64).saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raising_reaches_the_hard_limit_and_counting_works() {
        let l = raise().unwrap();
        assert_eq!(l.soft, l.hard);
        assert!(l.was <= l.soft);
        let before = in_use().unwrap();
        let f = std::fs::File::open("/proc/self/status").unwrap();
        assert!(
            in_use().unwrap() > before.saturating_sub(8),
            "counts open files"
        );
        drop(f);
    }

    #[test]
    fn a_reserve_that_leaves_nothing_is_refused() {
        let l = FdLimit {
            soft: 256,
            hard: 256,
            was: 256,
        };
        assert!(check_reserve(l, 96).is_ok());
        let err = check_reserve(l, 240).unwrap_err();
        assert!(err.contains("fd_reserve = 240"), "{err}");
        assert!(err.contains("hard limit 256"), "{err}");
    }
}
