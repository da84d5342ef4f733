//! Claude Code and Codex behind the gate: the supervisor's side of
//! `agent hook`.
//!
//! A client runs `agent hook` for each event of its sessions; the hook sends
//! the event here (ClientHooks on agent.sock) and prints the answer. This
//! module binds each client session to one tollgate session (per uid, with
//! the event's `cwd` as workspace), maps the client's tool to tollgate's
//! (`tollgate_policy::clients`), has the gate decide it exactly like a
//! `CallTool` (without running it), keeps routed shell commands for their
//! rewritten command to claim, and records what the client reports after a
//! call. It never decides anything itself.

mod bindings;
mod claims;
mod event;
mod propose;
mod routes;
mod service;

use std::sync::Arc;
use std::time::Duration;

pub use bindings::Bindings;
pub use event::MAX_EVENT_BYTES;
pub use routes::{Route, Routes};
pub use service::HookSvc;

use crate::sessions::Session;

/// The client sessions and their routed commands.
pub struct Hooks {
    pub bindings: Bindings,
    pub routes: Routes,
}

impl Hooks {
    /// The tables, with the client session owners kept under `state_dir`.
    pub fn open(state_dir: &std::path::Path) -> std::io::Result<Hooks> {
        Ok(Hooks {
            bindings: Bindings::new(claims::Claims::open(state_dir)?),
            routes: Routes::default(),
        })
    }

    /// Client sessions with no event for `limit` and nothing running.
    pub fn idle(&self, limit: Duration) -> Vec<Arc<Session>> {
        self.bindings.idle(limit)
    }
}
