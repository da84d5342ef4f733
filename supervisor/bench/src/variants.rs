//! Supervisors that differ from the bench's main one by a few config lines
//! (`[network]` configured, `toolchain_dirs = []`, `attribute_refusals`),
//! started beside it in the same run, and calls sampled on two of them in
//! alternating rounds, so a pair's two rows see the same machine
//! (docs/PERFORMANCE.md, "Pairs on two supervisors").

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::harness::{AgentSession, SupervisorProc, TempRoot, blocking};

/// What a group needs to start its own supervisors.
pub struct Ctx<'a> {
    pub root: &'a TempRoot,
    pub exe: &'a Path,
    pub script: &'a Path,
    pub sync: tollgate_audit::SyncMode,
    pub samples: usize,
    pub quick: bool,
}

impl Ctx<'_> {
    /// A supervisor in `<root>/sup-<name>` whose config is the main one's
    /// with `sandbox_keys` added to `[sandbox]` and `sections` appended.
    pub async fn start(
        &self,
        name: &str,
        sandbox_keys: &str,
        sections: &str,
    ) -> anyhow::Result<SupervisorProc> {
        let dir = self.root.subdir(&format!("sup-{name}"))?;
        let config = super::variant_config(self.script, self.sync, sandbox_keys, sections);
        let exe = self.exe.to_path_buf();
        blocking(move || SupervisorProc::start(&exe, &dir, &config, "native")).await
    }

    /// A fresh workspace directory.
    pub fn workspace(&self, name: &str) -> anyhow::Result<PathBuf> {
        self.root.subdir(name)
    }
}

/// `args` of `tool` on session `a` and session `b` in rounds (a then b,
/// then b then a, …) after `warmup` untimed rounds; each call must succeed.
pub async fn alternate(
    sessions: (&mut AgentSession, &mut AgentSession),
    tool: &str,
    args: &str,
    warmup: usize,
    n: usize,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let (a, b) = sessions;
    let (mut ta, mut tb) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..warmup + n {
        let order = if i % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for first in order {
            let s = if first { &mut *a } else { &mut *b };
            let t = Instant::now();
            s.call(tool, args).await?;
            let took = t.elapsed();
            if i >= warmup {
                if first { ta.push(took) } else { tb.push(took) }
            }
        }
    }
    Ok((ta, tb))
}

/// The number of open descriptors of a process.
pub fn fd_count(pid: u32) -> Option<f64> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as f64)
}
