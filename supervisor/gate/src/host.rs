//! What the gate needs of the process around it ([`Host`]), and the narrow
//! context one call runs with ([`Ctx`]): the host and the session.

use std::path::PathBuf;
use std::sync::Arc;

use tollgate_audit::{AuditError, AuditFile, Durable, Event, Priority, Redactor};
use tollgate_config::Config;
use tollgate_policy::host::SystemResolver;
use tollgate_sandbox::{Sandbox, SandboxSpec};

use crate::approvals::Approvals;
use crate::disk::DiskGuard;
use crate::in_force::InForce;
use crate::session::Session;

/// The supervisor as the gate sees it: its configuration and engine, the
/// audit log's writer, the approvals table, the disk floor, and the few
/// host facts a decision or a sandbox needs.
pub trait Host: Send + Sync + 'static {
    fn config(&self) -> &Config;
    /// The policy in force now. Hold the one `Arc` for a whole decision:
    /// a reload may put another in force meanwhile.
    fn engine(&self) -> Arc<InForce>;
    fn redactor(&self) -> &Redactor;
    fn approvals(&self) -> &Approvals;
    fn disk(&self) -> &DiskGuard;
    /// Appends `event` to the session's log and publishes it to watchers;
    /// `durable` and `priority` as [`AuditFile::append_event`].
    fn write(
        &self,
        session: &Session,
        event: Event,
        durable: Durable,
        priority: Priority,
    ) -> Result<(), AuditError>;
    /// Makes every record appended to `file` so far durable.
    fn sync(&self, file: &AuditFile) -> Result<(), AuditError>;
    /// DNS and the host's own addresses as of the last snapshot.
    fn resolver(&self) -> SystemResolver;
    /// DNS and the host's own addresses read again now (right before a
    /// connection).
    fn resolver_now(&self) -> SystemResolver;
    /// Paths no session may touch.
    fn protected_paths(&self) -> Vec<PathBuf>;
    /// A call refused because its record could not be written: counted,
    /// logged and recorded in the supervisor's log.
    fn audit_refused(&self, session: &str, what: &str, error: &dyn std::fmt::Display);
    /// The spec of `session`'s sandbox.
    fn sandbox_spec(&self, session: &Session, sandbox_token: Option<&str>) -> SandboxSpec;
    /// `session`'s sandbox was just built, before its first command: the
    /// host serves what it needs from outside (the network wall,
    /// docs/THREAT_MODEL.md "Network"). An error refuses the sandbox: it is
    /// destroyed, never used without.
    fn sandbox_built(
        self: Arc<Self>,
        session: &Arc<Session>,
        sandbox: &dyn Sandbox,
    ) -> Result<(), String> {
        let _ = (session, sandbox);
        Ok(())
    }
    /// A mark in `session`'s network refusals, taken before a command runs.
    fn net_mark(&self, session: &Session) -> u64 {
        let _ = session;
        0
    }
    /// The `network: refused …` lines for the refusals since `mark`
    /// (docs/INTERFACES.md "[network]").
    fn net_refusals(&self, session: &Session, mark: u64) -> Vec<String> {
        let _ = (session, mark);
        Vec::new()
    }
}

/// One call's context: the host and the session it belongs to.
#[derive(Clone)]
pub struct Ctx {
    pub host: Arc<dyn Host>,
    pub session: Arc<Session>,
}

impl Ctx {
    pub fn new(host: Arc<dyn Host>, session: Arc<Session>) -> Ctx {
        Ctx { host, session }
    }

    /// The one writer of the session's records: `durable` says when the
    /// record must be on disk, `priority` whether it may draw on the audit
    /// directory's reserve.
    pub fn write(
        &self,
        event: Event,
        durable: Durable,
        priority: Priority,
    ) -> Result<(), AuditError> {
        self.host.write(&self.session, event, durable, priority)
    }
}
