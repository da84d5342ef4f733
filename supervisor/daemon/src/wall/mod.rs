//! The network wall of each session's sandbox (docs/THREAT_MODEL.md
//! "Network", docs/INTERFACES.md "[network]"). With `[network]`
//! configured, every sandbox (run_bash, a routed client shell, an MCP
//! gateway's server; `supervisorctl sandbox exec` too) gets, once built and
//! before its first command, the supervisor's listeners in its own network
//! namespace (`tollgate_sandbox::wall`): the HTTP and SOCKS5 proxies, the
//! DNS stub and the transparent listener the capture rules send every
//! other TCP connection to. Each connection is decided by the session's
//! [`NetworkGate`] and recorded; refusals are also noted for the
//! `network: refused …` lines of the command's result ([`refusals`]).
//!
//! A wall ends with its session (revoke, kill, expiry: open connections are
//! closed and their close recorded) or when the session's sandbox is built
//! again.

pub(crate) mod refusals;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tollgate_egress::{
    ConnId, ConnRequest, ConnStats, ConnectionGate, GateVerdict, Limits, Options, Proxy, Refusal,
};
use tollgate_sandbox::{Sandbox, WallSockets};

use crate::network::{ExecSink, NetworkGate, SessionSink, WallSink};
use crate::sessions::Session;
use crate::supervisor::Supervisor;
use refusals::RefusalNotes;

/// How long a wall that ends waits for its connections' close records.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// The running walls, by session.
#[derive(Default)]
pub(crate) struct Walls {
    running: Mutex<HashMap<String, Running>>,
}

struct Running {
    proxy: Arc<Proxy<Noted>>,
    notes: Arc<RefusalNotes>,
}

/// Whose wall one is: its id (the session's or the exec's), where its
/// gate writes, what ends it besides [`Walls::stop`], its secrets.
struct Owner {
    id: String,
    sink: WallSink,
    end: CancellationToken,
    secrets: Option<Arc<tollgate_egress::SessionSecrets>>,
    notes: RefusalNotes,
}

impl Walls {
    /// Serves the wall in `sandbox` when `[network]` is configured; an
    /// error refuses the sandbox. A wall the session had (an earlier
    /// sandbox) ends.
    pub(crate) fn start(
        &self,
        sup: &Arc<Supervisor>,
        session: &Arc<Session>,
        sandbox: &dyn Sandbox,
    ) -> Result<(), String> {
        let owner = Owner {
            id: session.id.clone(),
            sink: WallSink::Session(SessionSink::new(Arc::clone(sup), Arc::clone(session))),
            end: session.cancel.child_token(),
            // [[secrets]]: the session's, made with its sandbox's spec.
            secrets: sup.secret_store.of_session(&session.id),
            notes: RefusalNotes::default(),
        };
        self.start_for(sup, owner, sandbox)
    }

    /// Serves the wall of one `supervisorctl sandbox exec` (its id the
    /// wall's, its connections recorded in the supervisor's log; no
    /// secrets) until [`Walls::stop`] of that id.
    pub(crate) fn start_exec(
        &self,
        sup: &Arc<Supervisor>,
        exec: ExecSink,
        sandbox: &dyn Sandbox,
    ) -> Result<(), String> {
        let owner = Owner {
            id: exec.id().to_string(),
            sink: WallSink::Exec(exec),
            end: CancellationToken::new(),
            secrets: None,
            notes: RefusalNotes::for_exec(),
        };
        self.start_for(sup, owner, sandbox)
    }

    fn start_for(
        &self,
        sup: &Arc<Supervisor>,
        o: Owner,
        sandbox: &dyn Sandbox,
    ) -> Result<(), String> {
        let policy = match sup.config.network_policy() {
            Ok(Some(p)) => p,
            Ok(None) => return Ok(()),
            Err(e) => return Err(format!("[network] is invalid: {e}")),
        };
        let sockets = sandbox
            .network_wall()
            .map_err(|e| format!("the network wall cannot be served in the sandbox: {e}"))?;
        // [network] upstream_proxy: allowed connections go out through it.
        let upstream = policy.upstream_proxy().cloned();
        let notes = Arc::new(o.notes);
        let gate = Noted {
            gate: NetworkGate::new(Arc::new(policy), o.sink),
            notes: Arc::clone(&notes),
        };
        let options = Options {
            secrets: o.secrets,
            upstream,
        };
        let proxy = Proxy::with_options(o.id.clone(), gate, Limits::default(), options);
        serve(&proxy, sockets, o.end)?;
        let old = self.lock().insert(o.id, Running { proxy, notes });
        if let Some(old) = old {
            old.proxy.stop();
        }
        Ok(())
    }

    /// Ends the session's (or the exec's) wall: its connections are closed now; waits
    /// (bounded) until each has recorded its close.
    pub(crate) async fn stop(&self, session: &str) {
        let Some(r) = self.lock().remove(session) else {
            return;
        };
        r.proxy.stop();
        let waited = tokio::time::timeout(CLOSE_GRACE, async {
            while r.proxy.open_connections() > 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        let _ = waited.await;
    }

    pub(crate) fn mark(&self, session: &str) -> u64 {
        self.lock().get(session).map_or(0, |r| r.notes.mark())
    }

    pub(crate) fn refused_since(&self, session: &str, mark: u64) -> Vec<String> {
        match self.lock().get(session) {
            Some(r) => r.notes.lines_since(mark),
            None => Vec::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Running>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One task per listener, until the wall stops or the session ends.
fn serve(
    proxy: &Arc<Proxy<Noted>>,
    s: WallSockets,
    session_end: CancellationToken,
) -> Result<(), String> {
    let tcp = |l: std::net::TcpListener| {
        tokio::net::TcpListener::from_std(l).map_err(|e| format!("register a wall listener: {e}"))
    };
    let http = tcp(s.http)?;
    let socks = tcp(s.socks)?;
    let transparent = s
        .transparent
        .into_iter()
        .map(tcp)
        .collect::<Result<Vec<_>, _>>()?;
    let dns = tokio::net::UdpSocket::from_std(s.dns)
        .map_err(|e| format!("register the DNS stub: {e}"))?;
    let p = Arc::clone(proxy);
    until_stopped(proxy, &session_end, tollgate_egress::serve_http(p, http));
    let p = Arc::clone(proxy);
    until_stopped(proxy, &session_end, tollgate_egress::serve_socks(p, socks));
    for l in transparent {
        let p = Arc::clone(proxy);
        until_stopped(
            proxy,
            &session_end,
            tollgate_egress::serve_transparent(p, l),
        );
    }
    let names = Arc::clone(&proxy.names);
    until_stopped(proxy, &session_end, tollgate_egress::serve_dns(names, dns));
    Ok(())
}

/// Runs `server` until the wall stops; the session's end stops the wall.
fn until_stopped(
    proxy: &Arc<Proxy<Noted>>,
    session_end: &CancellationToken,
    server: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let (proxy, end) = (Arc::clone(proxy), session_end.clone());
    tokio::spawn(async move {
        tokio::select! {
            _ = server => {}
            _ = proxy.stopped() => {}
            _ = end.cancelled() => proxy.stop(),
        }
    });
}

/// The session's gate, with each refusal noted for the result lines.
pub(crate) struct Noted {
    gate: NetworkGate<WallSink>,
    notes: Arc<RefusalNotes>,
}

impl ConnectionGate for Noted {
    async fn decide(&self, req: &ConnRequest) -> GateVerdict {
        self.gate.decide(req).await
    }

    fn vet(&self, req: &ConnRequest, ip: IpAddr) -> Result<(), String> {
        self.gate.vet(req, ip)
    }

    async fn resolve(&self, name: &str, port: u16) -> std::io::Result<Vec<IpAddr>> {
        self.gate.resolve(name, port).await
    }

    fn opened(&self, req: &ConnRequest, addr: SocketAddr, rule: &str) -> Result<ConnId, String> {
        self.gate.opened(req, addr, rule)
    }

    fn refused(&self, req: &ConnRequest, refusal: &Refusal) {
        self.notes.note(req, refusal);
        self.gate.refused(req, refusal);
    }

    fn bad_request(&self, session: &str, peer: SocketAddr, why: &str) {
        self.gate.bad_request(session, peer, why);
    }

    fn closed(&self, id: ConnId, stats: ConnStats) {
        self.gate.closed(id, stats);
    }
    fn secret(&self, req: &ConnRequest, conn: Option<ConnId>, e: tollgate_egress::SecretUse<'_>) {
        self.gate.secret(req, conn, e);
    }
}
