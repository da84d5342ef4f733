//! Reloading the config without revoking anyone (docs/OPERATIONS.md
//! "Reloading"): on SIGHUP (`systemctl reload tollgate`), the config is read
//! and checked as a start would; a good one puts its `[policy]` in force for
//! every decision from then on while every live session keeps running, a
//! bad one is refused with its reason and the old policy stays. Settings a
//! running supervisor cannot change are named when they differ.

use std::path::PathBuf;

use tollgate_config::{BackendChoice, Config};

use crate::logging::LIFECYCLE;
use crate::server::Options;
use crate::supervisor::Supervisor;

/// Where the config comes from, with the command line's overrides, as at start.
#[derive(Debug, Clone)]
pub struct Source {
    pub config: PathBuf,
    pub explicit: bool,
    pub state_dir: Option<PathBuf>,
    pub audit_dir: Option<PathBuf>,
    pub sandbox: Option<BackendChoice>,
}

impl Source {
    pub fn of(opts: &Options) -> Source {
        Source {
            config: opts.config.clone(),
            explicit: opts.config_explicit,
            state_dir: opts.state_dir.clone(),
            audit_dir: opts.audit_dir.clone(),
            sandbox: opts.sandbox,
        }
    }
}

/// Serves signals until one that stops the supervisor (returned by name):
/// each SIGHUP reloads.
pub async fn until_stopped(
    sup: &Supervisor,
    from: &Source,
    signals: &mut crate::server::Signals,
) -> &'static str {
    loop {
        match signals.wait().await {
            "SIGHUP" => {
                let _ = reload(sup, from);
            }
            stop => return stop,
        }
    }
}

/// What a reload did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reloaded {
    pub old_digest: String,
    pub new_digest: String,
    /// Sections that differ but apply only at the next start.
    pub needs_restart: Vec<&'static str>,
}

/// Reads, checks and applies the config; tells the service manager
/// (`RELOADING=1`, then `READY=1`) and the log either way.
pub fn reload(sup: &Supervisor, from: &Source) -> Result<Reloaded, String> {
    crate::activation::notify_reloading();
    let outcome = apply(sup, from);
    match &outcome {
        Ok(r) => tracing::info!(
            target: LIFECYCLE,
            old = %r.old_digest,
            new = %r.new_digest,
            needs_restart = %r.needs_restart.join(" "),
            "config reloaded: the new policy decides from now on; live sessions keep running"
        ),
        Err(e) => tracing::warn!(
            target: LIFECYCLE,
            reason = %e,
            policy = %sup.engine.digest(),
            "config reload refused; the old config stays in force"
        ),
    }
    crate::activation::notify_reloaded(outcome.as_ref().err().map(String::as_str));
    outcome
}

fn apply(sup: &Supervisor, from: &Source) -> Result<Reloaded, String> {
    let opts = Options {
        config: from.config.clone(),
        config_explicit: from.explicit,
        state_dir: from.state_dir.clone(),
        audit_dir: from.audit_dir.clone(),
        sandbox: from.sandbox,
        passed: None,
    };
    let new = crate::check::load_config(&opts).map_err(|e| format!("{e:#}"))?;
    let engine = crate::check::engine(&new).map_err(|e| format!("{e:#}"))?;
    let new_digest = crate::policy_handle::digest(&new.policy);
    let old_digest = sup.engine.swap(engine, new_digest.clone());
    Ok(Reloaded {
        old_digest,
        new_digest,
        needs_restart: needs_restart(&sup.config, &new),
    })
}

/// The sections of `new` that differ from the running `old` other than
/// `[policy]`: a running supervisor keeps its sockets, directories,
/// backend, limits, LLM and telemetry until it is restarted.
pub fn needs_restart(old: &Config, new: &Config) -> Vec<&'static str> {
    let mut v = Vec::new();
    let mut differs = |name: &'static str, same: bool| {
        if !same {
            v.push(name);
        }
    };
    differs("[supervisor]", old.supervisor == new.supervisor);
    differs("[sandbox]", old.sandbox == new.sandbox);
    differs("[audit]", old.audit == new.audit);
    differs("[session]", old.session == new.session);
    differs("[llm]", old.llm == new.llm);
    differs("[clients]", old.clients == new.clients);
    differs("[telemetry]", old.telemetry == new.telemetry);
    differs("[log]", old.log == new.log);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_policy_applies_at_once_and_the_rest_is_named() {
        let parse = |t: &str| Config::parse(t, std::path::Path::new("x.toml")).unwrap();
        let old = parse("[policy]\ndeny = [\"run_bash(rm *)\"]\n");
        let same_but_policy = parse("[policy]\ndeny = [\"run_bash(curl *)\"]\n");
        assert!(needs_restart(&old, &same_but_policy).is_empty());
        let dirs =
            parse("[supervisor]\nstate_dir = \"/run/other\"\n[audit]\ndir = \"/var/log/other\"\n");
        assert_eq!(needs_restart(&old, &dirs), vec!["[supervisor]", "[audit]"]);
    }
}
