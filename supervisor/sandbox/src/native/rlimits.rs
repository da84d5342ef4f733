//! Step 4: resource limits, inherited by every command.
//!
//! core 0 (no dumps of sandbox memory), nofile, fsize. RLIMIT_NPROC: in a
//! rootless sandbox it counts only the sandbox's user namespace and is the
//! pids cap; as root it is a high backstop (the pids cgroup is the cap) whose
//! hard limit the sandbox cannot raise. RLIMIT_DATA bounds memory per
//! process only where no memory cgroup exists (rootless). RLIMIT_CPU is set
//! per command, in the forked child, so pid 1 never accumulates toward it.

use super::SetupError;
use super::protocol::InitConfig;
use super::sys;

const MIB: u64 = 1024 * 1024;

pub(crate) fn apply(cfg: &InitConfig) -> Result<(), SetupError> {
    let nproc = if cfg.rootless {
        cfg.pids
    } else {
        cfg.rlimit_nproc
    };
    let mut limits: Vec<(&str, libc::__rlimit_resource_t, u64)> = vec![
        ("RLIMIT_CORE", libc::RLIMIT_CORE, 0),
        ("RLIMIT_NOFILE", libc::RLIMIT_NOFILE, cfg.nofile),
        (
            "RLIMIT_FSIZE",
            libc::RLIMIT_FSIZE,
            cfg.fsize_mb.saturating_mul(MIB),
        ),
        ("RLIMIT_NPROC", libc::RLIMIT_NPROC, nproc),
    ];
    if cfg.rootless {
        limits.push((
            "RLIMIT_DATA",
            libc::RLIMIT_DATA,
            cfg.memory_mb.saturating_mul(MIB),
        ));
    }
    for (name, res, value) in limits {
        sys::set_rlimit(res, value).map_err(|e| SetupError {
            step: "rlimits",
            detail: explain(name, value, &e, hard_limit(res)),
        })?;
    }
    Ok(())
}

/// The current hard limit of `res`, if it can be read.
fn hard_limit(res: libc::__rlimit_resource_t) -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: the kernel writes the live `rlimit` struct.
    (unsafe { libc::getrlimit(res, &mut lim) } == 0).then_some(lim.rlim_max)
}

/// What failed and, when the sandbox asks for more than the supervisor's
/// own hard limit (which an unprivileged process cannot raise), what to
/// raise: docs/OPERATIONS.md, "File descriptors".
fn explain(name: &str, value: u64, e: &std::io::Error, hard: Option<u64>) -> String {
    let base = format!("{name}={value}: {e}");
    match hard {
        Some(h) if h < value && name == "RLIMIT_NOFILE" => format!(
            "{base}: the sandbox needs {value} file descriptors but the supervisor's hard \
             RLIMIT_NOFILE is {h}; raise it to at least {value} (LimitNOFILE={value} in the \
             supervisor's systemd unit, or `ulimit -Hn {value}` in the shell that starts it)"
        ),
        Some(h) if h < value => {
            format!("{base}: the supervisor's hard {name} is {h}; raise it to at least {value}")
        }
        _ => base,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_nofile_below_1024_error_says_what_to_raise() {
        let e = std::io::Error::from_raw_os_error(libc::EPERM);
        let m = explain("RLIMIT_NOFILE", 1024, &e, Some(512));
        assert!(m.contains("hard RLIMIT_NOFILE is 512"), "{m}");
        assert!(m.contains("LimitNOFILE=1024"), "{m}");
        assert!(m.contains("ulimit -Hn 1024"), "{m}");
        // Within the hard limit: the error alone, no misleading hint.
        let m = explain("RLIMIT_NOFILE", 1024, &e, Some(4096));
        assert!(!m.contains("raise"), "{m}");
        assert!(hard_limit(libc::RLIMIT_NOFILE).is_some_and(|h| h > 0));
    }
}
