//! Where the network gate of one `supervisorctl sandbox exec` writes
//! (docs/INTERFACES.md "[network]"): the supervisor's log, beside the
//! exec's own `sandbox_exec` record, each connection attributed to the
//! exec (its id as `call_id`, its command line as `command`). An exec has
//! no session: no operator's entries, no grants, and nobody to ask, so an
//! unlisted host under `unlisted = "ask"` is refused, never granted.

use std::future::Future;
use std::sync::Arc;

use tollgate_audit::event::Event;
use tollgate_gate::approvals::Scope;
use tollgate_gate::network::{Attribution, NetAsk};
use tollgate_policy::HostAddrs;
use tollgate_policy::network::NetOverlay;

use super::NetSink;
use super::sink::{host_addrs_now, write_connection_record};

/// One running `sandbox exec`.
pub(crate) struct ExecSink {
    sup: Arc<crate::supervisor::Supervisor>,
    /// The exec's id (`x…`), the `session` of its records.
    id: String,
    /// Its command line, as recorded in `sandbox_exec`.
    command: String,
}

impl ExecSink {
    pub(crate) fn new(
        sup: Arc<crate::supervisor::Supervisor>,
        id: &str,
        argv: &[String],
    ) -> ExecSink {
        ExecSink {
            sup,
            id: id.to_string(),
            command: argv.join(" "),
        }
    }

    pub(crate) fn id(&self) -> &str {
        &self.id
    }
}

impl NetSink for ExecSink {
    /// Durable like the exec's own record, and essential.
    fn record(&self, event: Event) -> Result<(), String> {
        write_connection_record(&self.sup, crate::events::Log::Supervisor(&self.id), event)
    }

    fn host_addrs(&self) -> Result<HostAddrs, String> {
        host_addrs_now(&self.sup)
    }

    fn overlay(&self) -> NetOverlay {
        NetOverlay::default()
    }

    fn granted(&self, _target: &str) -> bool {
        false
    }

    fn attribution(&self) -> Attribution {
        Attribution {
            call_id: self.id.clone(),
            command: self.command.clone(),
        }
    }

    fn approval_wait(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }

    fn ask<'a>(&'a self, a: NetAsk<'a>) -> impl Future<Output = Result<Scope, String>> + Send + 'a {
        let reason = format!(
            "{}, and a sandbox exec asks no one (it has no session)",
            a.reason
        );
        async move { Err(reason) }
    }
}
