//! `policy test`: the policy engine offline, JSON Lines in and out. Needs no
//! running supervisor.

use std::io::BufReader;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, anyhow};
use tollgate_config::{Config, DEFAULT_CONFIG};
use tollgate_policy::Mode;
use tollgate_policy::host::{RealFs, SystemResolver, read_host_addrs};
use tollgate_policy::policy_test::{self, TestOptions};

pub struct TestArgs {
    pub config: Option<PathBuf>,
    pub workspace: Option<PathBuf>,
    pub mode: Option<String>,
    pub resolve: Vec<String>,
    pub file: Option<PathBuf>,
}

pub fn test(a: TestArgs) -> anyhow::Result<u8> {
    let config = match &a.config {
        Some(p) => Config::load(p, true)?,
        None => match std::env::var_os("TOLLGATE_CONFIG") {
            Some(p) => Config::load(&PathBuf::from(p), true)?,
            None => Config::load(&PathBuf::from(DEFAULT_CONFIG), false)?,
        },
    };
    let workspace = match a.workspace {
        Some(w) => w,
        None => std::env::current_dir().context("no current directory; pass --workspace")?,
    };
    let workspace = std::fs::canonicalize(&workspace)
        .with_context(|| format!("workspace {}", workspace.display()))?;
    let mode = match &a.mode {
        Some(m) => Mode::parse(m).map_err(|e| anyhow!("--mode: {e}"))?,
        None => Mode::Default,
    };
    let mut pins = Vec::new();
    for spec in &a.resolve {
        pins.push(SystemResolver::parse_pin(spec).map_err(|e| anyhow!("--resolve {spec:?}: {e}"))?);
    }
    // Judged like the supervisor judges: against this host's own addresses,
    // read now (the supervisor reads the same set on the same host).
    let resolver = SystemResolver::with_pins(pins).with_host(Arc::new(read_host_addrs()));
    let uid = nix::unistd::getuid().as_raw();
    let home = tollgate_policy::host::passwd()
        .into_iter()
        .find(|u| u.uid == uid)
        .map(|u| u.home);
    let repo = tollgate_policy::host::repo_paths(&workspace, home.as_deref())
        .map_err(|e| anyhow!("workspace {}: {e}", workspace.display()))?;
    let mut opts = TestOptions::new(workspace, mode, config.policy.clone());
    opts.cap = config.mode_cap();
    opts.home = home;
    opts.repo = repo;
    opts.protected = vec![
        config.supervisor.state_dir.clone(),
        config.audit.dir.clone(),
    ];
    if let Some(c) = &a.config {
        opts.protected
            .push(std::fs::canonicalize(c).unwrap_or_else(|_| c.clone()));
    }
    // Line-buffered (std's stdout), so each answer leaves as it is made.
    let mut out = crate::out::Stdout;
    let result = match a.file.as_deref() {
        None => policy_test::run(
            &mut std::io::stdin().lock(),
            &mut out,
            &opts,
            &RealFs,
            &resolver,
        ),
        Some(p) if p.as_os_str() == "-" => policy_test::run(
            &mut std::io::stdin().lock(),
            &mut out,
            &opts,
            &RealFs,
            &resolver,
        ),
        Some(p) => {
            let f =
                std::fs::File::open(p).with_context(|| format!("cannot open {}", p.display()))?;
            policy_test::run(&mut BufReader::new(f), &mut out, &opts, &RealFs, &resolver)
        }
    };
    match result {
        Ok(()) => Ok(0),
        Err(e) => Err(anyhow!("{e}")),
    }
}
