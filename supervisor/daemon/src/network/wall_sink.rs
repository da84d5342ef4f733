//! Whose wall a gate serves: a session's ([`SessionSink`]) or one
//! `supervisorctl sandbox exec`'s ([`ExecSink`]); one type, so every wall
//! is served and stopped alike (crate::wall).

use tollgate_audit::event::Event;
use tollgate_gate::approvals::Scope;
use tollgate_gate::network::{Attribution, NetAsk};
use tollgate_policy::HostAddrs;
use tollgate_policy::network::NetOverlay;

use super::{ExecSink, NetSink, SessionSink};

pub(crate) enum WallSink {
    Session(SessionSink),
    Exec(ExecSink),
}

impl NetSink for WallSink {
    fn record(&self, event: Event) -> Result<(), String> {
        match self {
            WallSink::Session(s) => s.record(event),
            WallSink::Exec(s) => s.record(event),
        }
    }

    fn host_addrs(&self) -> Result<HostAddrs, String> {
        match self {
            WallSink::Session(s) => s.host_addrs(),
            WallSink::Exec(s) => s.host_addrs(),
        }
    }

    fn overlay(&self) -> NetOverlay {
        match self {
            WallSink::Session(s) => s.overlay(),
            WallSink::Exec(s) => s.overlay(),
        }
    }

    fn granted(&self, target: &str) -> bool {
        match self {
            WallSink::Session(s) => s.granted(target),
            WallSink::Exec(s) => s.granted(target),
        }
    }

    fn attribution(&self) -> Attribution {
        match self {
            WallSink::Session(s) => s.attribution(),
            WallSink::Exec(s) => s.attribution(),
        }
    }

    fn approval_wait(&self) -> std::time::Duration {
        match self {
            WallSink::Session(s) => s.approval_wait(),
            WallSink::Exec(s) => s.approval_wait(),
        }
    }

    async fn ask<'a>(&'a self, a: NetAsk<'a>) -> Result<Scope, String> {
        match self {
            WallSink::Session(s) => s.ask(a).await,
            WallSink::Exec(s) => s.ask(a).await,
        }
    }
}
