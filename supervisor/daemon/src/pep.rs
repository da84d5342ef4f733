//! The daemon's side of the gate (`tollgate_gate`): the supervisor as the
//! gate's [`Host`], and the calls the services make into it. The pipeline
//! itself (decide, record, ask, run) is the gate's; its types become
//! protobuf in `wire.rs`.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tollgate_audit::{AuditError, AuditFile, Durable, Event, Priority, Redactor};
use tollgate_config::Config;
use tollgate_gate::approvals::Approvals;
use tollgate_gate::disk::DiskGuard;
use tollgate_gate::{Ctx, Host, RoutedCommand};
use tollgate_policy::host::SystemResolver;
use tollgate_proto::v1 as pb;
use tollgate_sandbox::{Sandbox, SandboxSpec};

pub use tollgate_gate::{Gate, McpAnswer, McpCall};

use crate::backends::{SandboxOwner, SpecFor, sandbox_spec};
use crate::events::Log;
use crate::host_addrs::Trigger;
use crate::sessions::Session;
use crate::supervisor::Supervisor;
use crate::wire;

impl Host for Supervisor {
    fn config(&self) -> &Config {
        &self.config
    }

    fn engine(&self) -> Arc<tollgate_gate::InForce> {
        self.engine.load()
    }

    fn redactor(&self) -> &Redactor {
        &self.redactor
    }

    fn approvals(&self) -> &Approvals {
        &self.approvals
    }

    fn disk(&self) -> &DiskGuard {
        &self.disk
    }

    fn write(
        &self,
        session: &Session,
        event: Event,
        durable: Durable,
        priority: Priority,
    ) -> Result<(), AuditError> {
        let log = Log::Session(&session.audit, &session.id);
        self.recorder
            .write(log, event, durable, priority)
            .map(|_| ())
    }

    fn sync(&self, file: &AuditFile) -> Result<(), AuditError> {
        self.recorder.sync(file)
    }

    fn resolver(&self) -> SystemResolver {
        Supervisor::resolver(self)
    }

    fn resolver_now(&self) -> SystemResolver {
        let now = self.host_addrs.read_now(Trigger::Connector);
        SystemResolver::default().with_host(now)
    }

    fn protected_paths(&self) -> Vec<PathBuf> {
        Supervisor::protected_paths(self)
    }

    fn audit_refused(&self, session: &str, what: &str, error: &dyn std::fmt::Display) {
        Supervisor::audit_refused(self, session, what, error)
    }

    fn sandbox_spec(&self, session: &Session, sandbox_token: Option<&str>) -> SandboxSpec {
        let owner = SandboxOwner {
            uid: session.uid,
            gid: session.gid,
            name: session.user.clone(),
            home: session.home.clone(),
        };
        let mut spec = sandbox_spec(
            self,
            SpecFor {
                session_id: &session.id,
                workspace: &session.workspace,
                workspace_id: tollgate_sandbox::WorkspaceId::from_pair(session.files.id()),
                owner: &owner,
                credentials: &session.credentials,
                sandbox_token,
                egress: session.egress.get().cloned(),
            },
        );
        // The workspace's devcontainer image, while its file is unchanged
        // since the session opened (devcontainer.rs).
        spec.image = session.devcontainer.get().and_then(|named| {
            let still = crate::devcontainer::still_named(&session.workspace, named);
            if still.is_none() {
                tracing::warn!(session = %session.id, "the workspace's {} changed since the session opened; using the configured image", crate::devcontainer::FILE);
            }
            still
        });
        spec
    }

    fn sandbox_built(
        self: Arc<Self>,
        session: &Arc<Session>,
        sandbox: &dyn Sandbox,
    ) -> Result<(), String> {
        self.walls.start(&self, session, sandbox)
    }

    fn net_mark(&self, session: &Session) -> u64 {
        self.walls.mark(&session.id)
    }

    fn net_refusals(&self, session: &Session, mark: u64) -> Vec<String> {
        self.walls.refused_since(&session.id, mark)
    }
}

/// The gate's context for one call of `session`.
pub fn ctx(sup: &Arc<Supervisor>, session: &Arc<Session>) -> Ctx {
    let host: Arc<dyn Host> = Arc::clone(sup) as Arc<dyn Host>;
    Ctx::new(host, Arc::clone(session))
}

/// CallTool, through the gate.
pub async fn call_tool(
    sup: &Arc<Supervisor>,
    session: &Arc<Session>,
    req: pb::CallToolRequest,
    cancel: CancellationToken,
) -> pb::CallToolResponse {
    let answer = tollgate_gate::call_tool(&ctx(sup, session), wire::call_tool(req), cancel).await;
    wire::tool_answer(answer)
}

/// The session ended: the denial to send.
pub fn revoked(session: &Session) -> pb::Denial {
    wire::denial(tollgate_gate::revoked(session))
}

/// A routed command, streamed to `out`.
pub async fn run_routed(
    sup: &Arc<Supervisor>,
    route: &crate::hooks::Route,
    out: &mpsc::Sender<wire::Routed>,
    cancel: CancellationToken,
) {
    let cmd = RoutedCommand {
        call_id: &route.call_id,
        command: &route.command,
        target: &route.target,
        timeout_s: route.timeout_s,
        background: route.background,
    };
    tollgate_gate::run_routed(&ctx(sup, &route.session), &cmd, out, cancel).await
}

/// Builds the session's sandbox ahead of its first command.
pub fn warm_sandbox(sup: &Arc<Supervisor>, session: &Arc<Session>) {
    tollgate_gate::warm_sandbox(&ctx(sup, session))
}

/// The session's sandbox, created on first use, or why there is none.
pub async fn session_sandbox(
    sup: &Arc<Supervisor>,
    session: &Arc<Session>,
) -> Result<Arc<dyn Sandbox>, String> {
    tollgate_gate::session_sandbox(&ctx(sup, session)).await
}

/// One `tools/call` of a wrapped MCP server, through the gate.
pub async fn mcp_tool_call<F, Fut>(
    cx: &Ctx,
    call: McpCall<'_>,
    cancel: &CancellationToken,
    forward: F,
) -> Result<McpAnswer, pb::Denial>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<McpAnswer, String>>,
{
    tollgate_gate::mcp_tool_call(cx, call, cancel, forward)
        .await
        .map_err(wire::denial)
}
