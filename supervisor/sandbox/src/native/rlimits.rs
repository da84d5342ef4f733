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
            detail: format!("{name}={value}: {e}"),
        })?;
    }
    Ok(())
}
