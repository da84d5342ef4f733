//! Reloading the config without revoking anyone (docs/OPERATIONS.md
//! "Reloading"): on SIGHUP (`systemctl reload tollgate`) or `supervisorctl
//! reload`, the config is read and checked as a start would; a good one
//! puts its `[policy]` in force for every decision from then on while every
//! live session keeps running, a bad one is refused with its reason and the
//! old policy stays. Either way the log, a `config` audit record (old and
//! new digests) and `supervisorctl status` say so. Settings a running
//! supervisor cannot change are named when they differ.

use std::path::PathBuf;

use parking_lot::Mutex;
use tollgate_audit::event::{self, Event};
use tollgate_audit::{Durable, Priority};
use tollgate_config::{BackendChoice, Config};
use tollgate_proto::v1 as pb;

use crate::events::Log;
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

    fn options(&self) -> Options {
        Options {
            config: self.config.clone(),
            config_explicit: self.explicit,
            state_dir: self.state_dir.clone(),
            audit_dir: self.audit_dir.clone(),
            sandbox: self.sandbox,
            passed: None,
        }
    }
}

/// The reload state of a running supervisor: where the config comes from,
/// one reload at a time, and how the last one went.
#[derive(Debug)]
pub struct Reloads {
    source: Source,
    /// Held for a whole reload: two at once would race on the swap.
    running: Mutex<()>,
    last: Mutex<Option<pb::ReloadResult>>,
}

impl Reloads {
    pub fn new(source: Source) -> Reloads {
        Reloads {
            source,
            running: Mutex::new(()),
            last: Mutex::new(None),
        }
    }

    /// The last reload's result, for `supervisorctl status`.
    pub fn last(&self) -> Option<pb::ReloadResult> {
        self.last.lock().clone()
    }
}

/// Who asked for a reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// SIGHUP: `systemctl reload` (`ExecReload=`) or `kill -HUP`.
    Signal,
    /// `supervisorctl reload`, by this operator uid.
    Operator(u32),
}

impl Trigger {
    fn name(self) -> String {
        match self {
            Trigger::Signal => "SIGHUP".to_string(),
            Trigger::Operator(uid) => format!("supervisorctl reload (uid {uid})"),
        }
    }
}

/// Serves signals until one that stops the supervisor (returned by name):
/// each SIGHUP reloads.
pub async fn until_stopped(
    sup: &std::sync::Arc<Supervisor>,
    signals: &mut crate::server::Signals,
) -> &'static str {
    loop {
        match signals.wait().await {
            "SIGHUP" => {
                let _ = reload_off_runtime(sup, Trigger::Signal).await;
            }
            stop => return stop,
        }
    }
}

/// [`reload`] on the blocking pool (it reads files and compiles rules).
pub async fn reload_off_runtime(sup: &std::sync::Arc<Supervisor>, by: Trigger) -> pb::ReloadResult {
    let sup = std::sync::Arc::clone(sup);
    let digest = sup.engine.digest();
    tokio::task::spawn_blocking(move || reload(&sup, by))
        .await
        .unwrap_or_else(|e| refused(digest, None, format!("the reload task failed: {e}")))
}

/// Reads, checks and applies the config; tells the service manager
/// (`RELOADING=1`, then `READY=1`), the log, the supervisor's audit log and
/// `status` either way.
pub fn reload(sup: &Supervisor, by: Trigger) -> pb::ReloadResult {
    let _one = sup.reloads.running.lock();
    crate::activation::notify_reloading();
    let mut result = apply(sup, &sup.reloads.source);
    result.by = by.name();
    result.at_unix_ms = crate::sessions::unix_ms(std::time::SystemTime::now());
    log(sup, &result);
    if let Err(e) = record(sup, &result) {
        tracing::warn!(error = %e, "the reload's config record could not be written");
    }
    *sup.reloads.last.lock() = Some(result.clone());
    let refused = (!result.accepted).then_some(result.reason.as_str());
    crate::activation::notify_reloaded(refused);
    result
}

fn log(sup: &Supervisor, r: &pb::ReloadResult) {
    if r.accepted {
        tracing::info!(
            target: LIFECYCLE,
            by = %r.by,
            old = %r.old_digest,
            new = %r.new_digest,
            needs_restart = %r.needs_restart.join("; "),
            "config reloaded: the new policy decides from now on; live sessions keep running"
        );
    } else {
        tracing::warn!(
            target: LIFECYCLE,
            by = %r.by,
            reason = %r.reason,
            policy = %sup.engine.digest(),
            "config reload refused; the old config stays in force"
        );
    }
}

fn refused(old_digest: String, new_digest: Option<String>, reason: String) -> pb::ReloadResult {
    pb::ReloadResult {
        accepted: false,
        old_digest,
        new_digest: new_digest.unwrap_or_default(),
        reason,
        ..Default::default()
    }
}

fn apply(sup: &Supervisor, from: &Source) -> pb::ReloadResult {
    let old_digest = sup.engine.digest();
    let new = match crate::check::load_config(&from.options()) {
        Ok(c) => c,
        Err(e) => return refused(old_digest, None, format!("{e:#}")),
    };
    let new_digest = crate::policy_handle::digest(&new.policy);
    let policy = match crate::check::in_force(&new) {
        Ok(p) => p,
        Err(e) => return refused(old_digest, Some(new_digest), format!("{e:#}")),
    };
    sup.engine.swap(policy);
    pb::ReloadResult {
        accepted: true,
        old_digest,
        new_digest,
        needs_restart: needs_restart(&sup.config, &new),
        ..Default::default()
    }
}

/// The `config` record of a reload: the run as it now stands (its rule
/// counts and policy digest those in force after it) and the attempt.
fn record(sup: &Supervisor, r: &pb::ReloadResult) -> Result<(), tollgate_audit::AuditError> {
    let mut rec = crate::server::config_record(sup);
    rec.reload = Some(event::ConfigReload {
        by: r.by.clone(),
        outcome: if r.accepted {
            event::ReloadOutcome::Accepted
        } else {
            event::ReloadOutcome::Refused
        },
        old_digest: r.old_digest.clone(),
        new_digest: (!r.new_digest.is_empty()).then(|| r.new_digest.clone()),
        reason: (!r.accepted).then(|| r.reason.clone()),
        needs_restart: r.needs_restart.clone(),
    });
    sup.recorder
        .write(
            Log::Supervisor(""),
            Event::Config(rec),
            Durable::Now,
            Priority::Ordinary,
        )
        .map(|_| ())
}

/// What of `new` differs from the running `old` other than `[policy]`: a
/// running supervisor keeps its sockets and directories, backend, limits,
/// LLM, telemetry and network until it is restarted. The sockets and
/// directories are named by setting; the rest by section.
pub fn needs_restart(old: &Config, new: &Config) -> Vec<String> {
    let mut v = Vec::new();
    let mut differs = |name: &str, same: bool| {
        if !same {
            v.push(name.to_string());
        }
    };
    let (os, ns) = (&old.supervisor, &new.supervisor);
    differs(
        "[supervisor] state_dir (agent.sock and operator.sock live there)",
        os.state_dir == ns.state_dir,
    );
    let mut rest = ns.clone();
    rest.state_dir = os.state_dir.clone();
    differs("[supervisor]", *os == rest);
    differs("[audit] dir", old.audit.dir == new.audit.dir);
    let mut rest = new.audit.clone();
    rest.dir = old.audit.dir.clone();
    differs("[audit]", old.audit == rest);
    differs("[sandbox]", old.sandbox == new.sandbox);
    differs("[session]", old.session == new.session);
    differs("[llm]", old.llm == new.llm);
    differs("[clients]", old.clients == new.clients);
    differs("[telemetry]", old.telemetry == new.telemetry);
    differs("[network]", old.network == new.network);
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
        assert_eq!(
            needs_restart(&old, &dirs),
            vec![
                "[supervisor] state_dir (agent.sock and operator.sock live there)".to_string(),
                "[audit] dir".to_string()
            ]
        );
        let both = parse("[supervisor]\nstate_dir = \"/run/other\"\nfd_reserve = 300\n");
        assert_eq!(needs_restart(&old, &both).len(), 2);
        let limits = parse("[session]\nmax_tool_calls = 3\n");
        assert_eq!(needs_restart(&old, &limits), vec!["[session]".to_string()]);
    }
}
