//! The config as a start reads it, and `supervisor --check-config`
//! (docs/OPERATIONS.md "Checking a config"): every check a start makes on
//! the config before it binds or writes anything, with EX_CONFIG (78) when
//! one fails, so the unit's `RestartPreventExitStatus=78` keeps systemd
//! from restarting a supervisor that can never start.

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use tollgate_config::{BackendChoice, Config, ProviderChoice};
use tollgate_policy::Engine;

use crate::server::Options;

/// sysexits.h's EX_CONFIG: "configuration error".
pub const EX_CONFIG: u8 = 78;

/// A start stopped by its config (the file, a rule, the operator group,
/// the LLM script): the supervisor exits [`EX_CONFIG`] for it.
#[derive(Debug, thiserror::Error)]
#[error("{0:#}")]
pub struct ConfigFault(pub anyhow::Error);

impl ConfigFault {
    pub fn wrap(e: impl Into<anyhow::Error>) -> anyhow::Error {
        anyhow::Error::new(ConfigFault(e.into()))
    }
}

/// The config file with the command line's overrides.
pub fn load_config(opts: &Options) -> anyhow::Result<Config> {
    let mut config = Config::load(&opts.config, opts.config_explicit).map_err(ConfigFault::wrap)?;
    if let Some(d) = &opts.state_dir {
        config.supervisor.state_dir = d.clone();
    }
    if let Some(d) = &opts.audit_dir {
        config.audit.dir = d.clone();
    }
    if let Some(b) = opts.sandbox {
        config.sandbox.backend = b;
    }
    discover_docker_socket(&mut config)?;
    Ok(config)
}

/// `[sandbox] docker_socket` unset: found as the docker CLI finds it
/// (DOCKER_HOST, the current context, the default socket). With the Docker
/// backend a failed lookup is a config fault; otherwise the default stands.
fn discover_docker_socket(config: &mut Config) -> anyhow::Result<()> {
    use tollgate_sandbox::docker::discover;
    if !config.sandbox.docker_socket.as_os_str().is_empty() {
        return Ok(());
    }
    config.sandbox.docker_socket =
        match discover::engine_socket(&discover::DockerEnv::from_process()) {
            Ok(p) => p,
            Err(e) if config.sandbox.backend == BackendChoice::Docker => {
                return Err(ConfigFault::wrap(anyhow::anyhow!(
                    "[sandbox] docker_socket is not set and {e}"
                )));
            }
            Err(_) => std::path::PathBuf::from(tollgate_sandbox::docker::DEFAULT_SOCKET),
        };
    Ok(())
}

/// The policy engine of `config` (a bad rule, or one failing its own
/// examples, is a config fault, naming the `policy.d/` drop-in it is in).
pub fn engine(config: &Config) -> anyhow::Result<Engine> {
    let wall = config.network.is_some();
    Engine::new(&config.policy)
        .map(|e| e.with_network_wall(wall))
        .map_err(|e| {
            let file = config
                .policy_sources
                .iter()
                .find(|s| Engine::new(&s.policy).is_err())
                .map(|s| format!(" (in {})", s.path.display()))
                .unwrap_or_default();
            ConfigFault::wrap(anyhow::anyhow!("policy{file}: {e}"))
        })
}

/// [`engine`] with its digest and the drop-in of each rule: the policy a
/// start or a reload puts in force.
pub fn in_force(config: &Config) -> anyhow::Result<tollgate_gate::InForce> {
    let files = tollgate_config::dropins::rule_files(
        &config.policy_own,
        &config.policy_sources,
        &config.policy,
    );
    Ok(tollgate_gate::InForce::new(
        engine(config)?,
        &config.policy,
        files,
    ))
}

/// `supervisor --check-config`: each problem on its own line, then exit
/// 0 (a start would get past the config) or 78.
pub fn check_config(opts: &Options) -> ExitCode {
    let problems = problems(opts);
    let mut err = std::io::stderr();
    if problems.is_empty() {
        let _ = writeln!(
            std::io::stdout(),
            "config OK: {}",
            shown_path(&opts.config, opts.config_explicit)
        );
        return ExitCode::SUCCESS;
    }
    for p in &problems {
        let _ = writeln!(err, "supervisor: {p}");
    }
    ExitCode::from(EX_CONFIG)
}

/// What the checker names as the file checked.
fn shown_path(path: &Path, explicit: bool) -> String {
    if !explicit && !path.exists() {
        format!("{} (absent: the built-in defaults)", path.display())
    } else {
        path.display().to_string()
    }
}

/// Every problem a start would stop on before binding: the file (which
/// already names its line), the policy, the operator group, the LLM
/// script, and the directories' parents.
fn problems(opts: &Options) -> Vec<String> {
    let config = match load_config(opts) {
        Ok(c) => c,
        Err(e) => return vec![format!("{e:#}")],
    };
    let mut out = Vec::new();
    if let Err(e) = engine(&config) {
        out.push(format!("{e:#}"));
    }
    if let Some(name) = &config.supervisor.operator_group
        && crate::auth::group_gid(name).is_none()
    {
        out.push(format!(
            "[supervisor] operator_group {name:?} does not exist; create it (groupadd {name}) or remove operator_group"
        ));
    }
    if config.llm.provider == ProviderChoice::Script
        && let Some(p) = &config.llm.script
        && let Err(e) = crate::llm::Script::load(p)
    {
        out.push(format!("[llm] {e}"));
    }
    if let Err(e) = crate::llm_key::read(&config.llm, nix::unistd::getuid().as_raw()) {
        out.push(e);
    }
    if let Err(e) =
        crate::secret_store::SecretStore::load(&config.secrets, nix::unistd::getuid().as_raw())
    {
        out.push(e);
    }
    for (key, dir) in [
        ("[supervisor] state_dir", &config.supervisor.state_dir),
        ("[audit] dir", &config.audit.dir),
    ] {
        if let Some(e) = dir_problem(dir) {
            out.push(format!("{key} {}: {e}", dir.display()));
        }
    }
    out
}

/// A directory the supervisor creates when absent: it must be absolute,
/// a directory if it exists, and have an existing parent otherwise.
fn dir_problem(dir: &Path) -> Option<String> {
    if !dir.is_absolute() {
        return Some("must be an absolute path".to_string());
    }
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => None,
        Ok(_) => Some("exists and is not a directory".to_string()),
        Err(_) => match dir.parent() {
            Some(p) if p.is_dir() => None,
            _ => Some("neither it nor its parent exists".to_string()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_must_be_absolute_and_reachable() {
        let t = tempfile::tempdir().unwrap();
        assert_eq!(dir_problem(t.path()), None);
        assert_eq!(dir_problem(&t.path().join("new")), None);
        assert!(dir_problem(&t.path().join("a/b")).is_some());
        assert!(dir_problem(Path::new("relative")).is_some());
        let f = t.path().join("f");
        std::fs::write(&f, "").unwrap();
        assert!(dir_problem(&f).unwrap().contains("not a directory"));
    }

    #[test]
    fn a_config_fault_is_found_through_anyhow() {
        let e = ConfigFault::wrap(anyhow::anyhow!("x"));
        assert!(e.downcast_ref::<ConfigFault>().is_some());
        let e = e.context("outer");
        assert!(e.downcast_ref::<ConfigFault>().is_some());
    }
}
