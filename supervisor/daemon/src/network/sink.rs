//! Where one session's network gate writes, what it reads of the session,
//! and how it asks: the session's audit log, the operator's entries and the
//! grants kept in the gate's session, and the gate's approvals.

use std::future::Future;
use std::sync::Arc;

use tollgate_audit::event::Event;
use tollgate_gate::approvals::Scope;
use tollgate_gate::network::{Attribution, NETWORK_TOOL, NetAsk, ask_connection};
use tollgate_gate::session::Session;
use tollgate_policy::HostAddrs;
use tollgate_policy::network::NetOverlay;

/// What the gate needs of the daemon (a test stands in for it).
pub(crate) trait NetSink: Send + Sync + 'static {
    /// Appends one record durably; the error is why it could not be.
    fn record(&self, event: Event) -> Result<(), String>;
    /// The host's own addresses as of now.
    fn host_addrs(&self) -> Result<HostAddrs, String>;
    /// What an operator changed of the session's lists, now.
    fn overlay(&self) -> NetOverlay;
    /// Whether `host:port` was approved for the whole session.
    fn granted(&self, target: &str) -> bool;
    /// The command running now that a connection is attributed to.
    fn attribution(&self) -> Attribution;
    /// How long an asked connection waits for a person.
    fn approval_wait(&self) -> std::time::Duration;
    /// Asks a person; `Err` is the sentence of the refusal.
    fn ask<'a>(&'a self, a: NetAsk<'a>) -> impl Future<Output = Result<Scope, String>> + Send + 'a;
}

/// Writes one connection record to `log`: durable like a decision (the
/// configured sync), and essential (a full disk draws on the audit
/// reserve). The error is why it could not be.
pub(crate) fn write_connection_record(
    sup: &crate::supervisor::Supervisor,
    log: crate::events::Log<'_>,
    event: Event,
) -> Result<(), String> {
    sup.recorder
        .write(
            log,
            event,
            tollgate_audit::Durable::AsConfigured,
            tollgate_audit::Priority::Essential,
        )
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The host's own addresses as the supervisor's resolver knows them now.
pub(crate) fn host_addrs_now(sup: &crate::supervisor::Supervisor) -> Result<HostAddrs, String> {
    use tollgate_policy::Resolver;
    sup.resolver()
        .host_addrs()
        .cloned()
        .map_err(|e| e.to_string())
}

/// A live session of the supervisor.
pub(crate) struct SessionSink {
    sup: Arc<crate::supervisor::Supervisor>,
    session: Arc<Session>,
}

impl SessionSink {
    pub(crate) fn new(sup: Arc<crate::supervisor::Supervisor>, session: Arc<Session>) -> Self {
        SessionSink { sup, session }
    }
}

impl NetSink for SessionSink {
    /// Durable like a decision (the configured sync), and essential: a
    /// full disk draws on the audit reserve.
    fn record(&self, event: Event) -> Result<(), String> {
        let log = crate::events::Log::Session(&self.session.audit, &self.session.id);
        write_connection_record(&self.sup, log, event)
    }

    fn host_addrs(&self) -> Result<HostAddrs, String> {
        host_addrs_now(&self.sup)
    }

    fn overlay(&self) -> NetOverlay {
        self.session.net.overlay.lock().clone()
    }

    fn granted(&self, target: &str) -> bool {
        self.session.has_grant(NETWORK_TOOL, target)
    }

    fn attribution(&self) -> Attribution {
        self.session.net.attribution()
    }

    fn approval_wait(&self) -> std::time::Duration {
        use tollgate_gate::Host;
        std::time::Duration::from_secs(self.sup.config().session.approval_timeout_s)
    }

    fn ask<'a>(&'a self, a: NetAsk<'a>) -> impl Future<Output = Result<Scope, String>> + Send + 'a {
        let cx = crate::pep::ctx(&self.sup, &self.session);
        async move { ask_connection(&cx, &a).await.map_err(|d| d.reason) }
    }
}
