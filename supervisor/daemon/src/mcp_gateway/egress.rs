//! `agent mcp-gateway --allow-net HOST[:PORT]…`: egress by forwarding,
//! never by routing (docs/THREAT_MODEL.md, "MCP gateway egress").
//!
//! The wrapped server's sandbox keeps its network namespace with no route
//! out. For each allowed host and port the supervisor opens a listener
//! inside that namespace (`Sandbox::egress_listener`): on the IP literal
//! itself, or on a `127.0.0.N` that the sandbox's `/etc/hosts` gives the
//! name. Each connection the server makes there is accepted here; the host
//! is resolved now by the supervisor's resolver, every address vetted by the
//! SSRF guard, one vetted address connected to (no second lookup: DNS
//! rebinding stays out), checked again at the connector against the host's
//! own addresses read now, and bytes copied both ways under a byte cap and
//! an idle timeout. TLS passes end to end. Each connection is one
//! `mcp_egress` record; a refused one is recorded and closed. Everything
//! ends with the gateway (client gone, server exit, revoke, kill).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tollgate_audit::event::{self, Event};
use tollgate_audit::{Durable, Priority};
use tollgate_policy::egress::{EgressEntry, EgressHost, parse_allow_net};
use tollgate_sandbox::{Egress, Sandbox};

use crate::events::Log;
use crate::host_addrs::Trigger;
use crate::sessions::Session;
use crate::supervisor::Supervisor;
use tollgate_policy::host::SystemResolver;

/// Connections open at once through one gateway; more are refused.
const MAX_CONNECTIONS: u32 = 64;
/// Bytes one connection may carry in each direction.
const MAX_BYTES_EACH_WAY: u64 = 256 * 1024 * 1024;
/// A connection that moves no byte either way for this long is closed.
const IDLE: Duration = Duration::from_secs(300);
/// How long the connect to the vetted address may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// At the gateway's end, how long its connections get to record themselves.
const RECORD_GRACE: Duration = Duration::from_secs(2);
/// Refused connections recorded one by one; the rest are counted into one
/// summary record when the gateway ends (docs/THREAT_MODEL.md): a sandbox
/// hammering a refused host cannot grow the audit log without bound.
const MAX_REFUSED_RECORDS: u64 = 64;

/// One forwarded host and port, and where its listener sits in the sandbox.
#[derive(Debug, Clone)]
struct Forward {
    host: EgressHost,
    port: u16,
    listen: SocketAddr,
}

impl Forward {
    fn url(&self) -> String {
        format!("http://{}:{}/", self.host.url_host(), self.port)
    }
}

/// The vetted `--allow-net` list: the forwards, and what the sandbox is told.
#[derive(Debug, Clone)]
pub(super) struct Plan {
    forwards: Vec<Forward>,
    pub sandbox: Egress,
}

/// Parses the list and vets every host with the SSRF guard now: a syntax
/// error, or a host that is or resolves to a refused address, refuses the
/// start with the guard's sentence naming the host. `None`: no egress.
pub(super) async fn plan(
    sup: &Arc<Supervisor>,
    allow_net: &[String],
) -> Result<Option<Plan>, String> {
    if allow_net.is_empty() {
        return Ok(None);
    }
    let entries = parse_allow_net(allow_net)?;
    let plan = layout(&entries);
    for f in &plan.forwards {
        vet(sup, f)
            .await
            .map_err(|why| format!("--allow-net {}:{} is refused: {why}", f.host, f.port))?;
    }
    Ok(Some(plan))
}

/// Where each forward listens: an IP literal on itself, the n-th name on
/// 127.0.0.(n+2) (127.0.0.1 stays localhost).
fn layout(entries: &[EgressEntry]) -> Plan {
    let mut forwards = Vec::new();
    let mut sandbox = Egress::default();
    let mut names = 0u8;
    for e in entries {
        let ip = match &e.host {
            EgressHost::Ip(ip) => *ip,
            EgressHost::Name(n) => {
                names = names.saturating_add(1);
                let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, names.saturating_add(1)));
                sandbox.hosts.push((n.clone(), ip));
                ip
            }
        };
        for p in &e.ports {
            if !sandbox.ports.contains(p) {
                sandbox.ports.push(*p);
            }
            forwards.push(Forward {
                host: e.host.clone(),
                port: *p,
                listen: SocketAddr::new(ip, *p),
            });
        }
    }
    Plan { forwards, sandbox }
}

/// The SSRF guard on `http://HOST:PORT/`, now (the resolver blocks: off the
/// runtime): every address the host stands for must pass; the first is the
/// one to connect to.
async fn vet(sup: &Arc<Supervisor>, f: &Forward) -> Result<SocketAddr, String> {
    let (sup, url) = (Arc::clone(sup), f.url());
    tokio::task::spawn_blocking(move || {
        let vetted = sup
            .engine
            .load()
            .vet_url(&url, &sup.resolver())
            .map_err(|d| d.reason)?;
        vetted
            .addrs
            .first()
            .copied()
            .ok_or_else(|| "the host has no address".to_string())
    })
    .await
    .map_err(|e| format!("the vetting task failed: {e}"))?
}

/// The connector check on the one address about to be used, against the
/// host's own addresses read now.
fn vet_peer(sup: &Supervisor, addr: SocketAddr) -> Result<(), String> {
    let now = sup.host_addrs.read_now(Trigger::Connector);
    sup.engine
        .load()
        .vet_address(addr.ip(), &SystemResolver::default().with_host(now))
}

/// What every connection of one gateway shares.
struct Ctx {
    sup: Arc<Supervisor>,
    session: Arc<Session>,
    server: String,
    slots: Arc<Semaphore>,
    stop: CancellationToken,
    /// Connections refused so far.
    refused: AtomicU64,
}

/// The running forwards of one gateway; [`Running::finish`] ends them.
pub(super) struct Running {
    ctx: Arc<Ctx>,
}

/// Opens every listener in the sandbox and starts accepting. A listener
/// that cannot be opened refuses the start (nothing is half-forwarded).
pub(super) fn start(
    sup: &Arc<Supervisor>,
    session: &Arc<Session>,
    sandbox: &dyn Sandbox,
    server: &str,
    plan: &Plan,
) -> Result<Running, String> {
    let ctx = Arc::new(Ctx {
        sup: Arc::clone(sup),
        session: Arc::clone(session),
        server: server.to_string(),
        slots: Arc::new(Semaphore::new(MAX_CONNECTIONS as usize)),
        stop: session.cancel.child_token(),
        refused: AtomicU64::new(0),
    });
    let mut listeners = Vec::with_capacity(plan.forwards.len());
    for f in &plan.forwards {
        let l = sandbox
            .egress_listener(f.listen)
            .and_then(|l| {
                TcpListener::from_std(l).map_err(|e| tollgate_sandbox::SandboxError::Io {
                    context: format!("register the listener on {}", f.listen),
                    source: e,
                })
            })
            .map_err(|e| format!("--allow-net {}:{} cannot be forwarded: {e}", f.host, f.port))?;
        listeners.push((f.clone(), l));
    }
    for (f, l) in listeners {
        tokio::spawn(accept(Arc::clone(&ctx), f, l));
    }
    Ok(Running { ctx })
}

impl Running {
    /// Closes the listeners and every connection, and waits (bounded) for
    /// the connections' records.
    pub(super) async fn finish(self) {
        self.ctx.stop.cancel();
        let _ =
            tokio::time::timeout(RECORD_GRACE, self.ctx.slots.acquire_many(MAX_CONNECTIONS)).await;
    }
}

/// However the gateway ends (its task dropped too), its forwards end.
impl Drop for Running {
    fn drop(&mut self) {
        self.ctx.stop.cancel();
    }
}

async fn accept(ctx: Arc<Ctx>, f: Forward, listener: TcpListener) {
    loop {
        let conn = tokio::select! {
            _ = ctx.stop.cancelled() => return,
            r = listener.accept() => r,
        };
        let Ok((conn, _)) = conn else {
            // Out of fds or the like: not a reason to stop forwarding.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        match Arc::clone(&ctx.slots).try_acquire_owned() {
            Ok(permit) => {
                let (ctx, f) = (Arc::clone(&ctx), f.clone());
                tokio::spawn(async move {
                    connection(&ctx, &f, conn).await;
                    drop(permit);
                });
            }
            Err(_) => {
                let why = format!("{MAX_CONNECTIONS} connections of this server are open already");
                record(&ctx, &f, &Outcome::refused(why, Instant::now()));
            }
        }
    }
}

/// How one connection went, for its record.
struct Outcome {
    address: Option<SocketAddr>,
    refused: Option<String>,
    end: String,
    bytes_out: u64,
    bytes_in: u64,
    started: Instant,
}

impl Outcome {
    fn refused(why: String, started: Instant) -> Outcome {
        Outcome {
            address: None,
            refused: Some(why),
            end: "refused".to_string(),
            bytes_out: 0,
            bytes_in: 0,
            started,
        }
    }
}

/// One connection from the sandbox: vet, connect, copy, record.
async fn connection(ctx: &Ctx, f: &Forward, conn: TcpStream) {
    let started = Instant::now();
    let addr = match vet(&ctx.sup, f).await.and_then(|a| {
        vet_peer(&ctx.sup, a)?;
        Ok(a)
    }) {
        Ok(a) => a,
        Err(why) => return record(ctx, f, &Outcome::refused(why, started)),
    };
    let remote = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            let why = format!("connecting to {addr} failed: {e}");
            return record(ctx, f, &Outcome::refused(why, started));
        }
        Err(_) => {
            let why = format!("connecting to {addr} took longer than {CONNECT_TIMEOUT:?}");
            return record(ctx, f, &Outcome::refused(why, started));
        }
    };
    let mut o = Outcome {
        address: Some(addr),
        refused: None,
        end: String::new(),
        bytes_out: 0,
        bytes_in: 0,
        started,
    };
    let end = relay(ctx, conn, remote, &mut o).await;
    o.end = end;
    record(ctx, f, &o);
}

/// Copies both ways until both sides are done, the connection idles, a
/// direction passes its cap, or the gateway ends. Returns how it ended.
async fn relay(ctx: &Ctx, conn: TcpStream, remote: TcpStream, o: &mut Outcome) -> String {
    let (cr, cw) = conn.into_split();
    let (rr, rw) = remote.into_split();
    let (out, inn) = (AtomicU64::new(0), AtomicU64::new(0));
    let last = AtomicU64::new(0);
    let t0 = Instant::now();
    let end = tokio::select! {
        r = async { tokio::try_join!(pipe(cr, rw, &out, &last, t0), pipe(rr, cw, &inn, &last, t0)) } => {
            match r {
                Ok(_) => "closed".to_string(),
                Err(e) => e,
            }
        }
        _ = idle(&last, t0) => format!("idle for {}s", IDLE.as_secs()),
        _ = ctx.stop.cancelled() => "the gateway ended".to_string(),
    };
    o.bytes_out = out.load(Ordering::Relaxed);
    o.bytes_in = inn.load(Ordering::Relaxed);
    end
}

/// One direction: read, count, write, until EOF (then half-close).
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    count: &AtomicU64,
    last: &AtomicU64,
    t0: Instant,
) -> Result<(), String> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = from
            .read(&mut buf)
            .await
            .map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            let _ = to.shutdown().await;
            return Ok(());
        }
        let total = count.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
        if total > MAX_BYTES_EACH_WAY {
            return Err(format!(
                "more than {} MiB in one direction",
                MAX_BYTES_EACH_WAY / (1024 * 1024)
            ));
        }
        to.write_all(&buf[..n])
            .await
            .map_err(|e| format!("write: {e}"))?;
        last.store(millis(t0), Ordering::Relaxed);
    }
}

fn millis(t0: Instant) -> u64 {
    u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Returns once nothing moved for [`IDLE`].
async fn idle(last: &AtomicU64, t0: Instant) {
    loop {
        tokio::time::sleep(IDLE / 10).await;
        let quiet = millis(t0).saturating_sub(last.load(Ordering::Relaxed));
        if quiet >= u64::try_from(IDLE.as_millis()).unwrap_or(u64::MAX) {
            return;
        }
    }
}

/// The connection's `mcp_egress` record in the session's audit file; a
/// refusal past [`MAX_REFUSED_RECORDS`] is only counted.
fn record(ctx: &Ctx, f: &Forward, o: &Outcome) {
    if o.refused.is_some() && !ctx.count_refusal() {
        return;
    }
    ctx.write(Event::McpEgress(event::McpEgress {
        server: ctx.server.clone(),
        host: f.host.to_string(),
        port: f.port,
        address: o.address.map(|a| a.to_string()),
        refused: o.refused.clone(),
        end: o.end.clone(),
        bytes_out: o.bytes_out,
        bytes_in: o.bytes_in,
        duration_ms: u64::try_from(o.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        suppressed: 0,
    }));
}

impl Ctx {
    /// Counts a refusal; `true` while refusals are still recorded one by one.
    fn count_refusal(&self) -> bool {
        self.refused.fetch_add(1, Ordering::Relaxed) < MAX_REFUSED_RECORDS
    }

    fn write(&self, record: Event) {
        if let Err(e) = self.sup.recorder.write(
            Log::Session(&self.session.audit, &self.session.id),
            record,
            Durable::AsConfigured,
            Priority::Ordinary,
        ) {
            tracing::warn!(session = %self.session.id, "mcp egress record not written: {e}");
        }
    }
}

/// When the last connection of a gateway is gone: the refusals that were
/// only counted, in one record.
impl Drop for Ctx {
    fn drop(&mut self) {
        let n = self.refused.load(Ordering::Relaxed);
        if n <= MAX_REFUSED_RECORDS {
            return;
        }
        self.write(Event::McpEgress(event::McpEgress {
            server: self.server.clone(),
            host: String::new(),
            port: 0,
            address: None,
            refused: Some(format!(
                "{n} connections were refused; the first {MAX_REFUSED_RECORDS} are recorded one by one"
            )),
            end: "refusals_summary".to_string(),
            bytes_out: 0,
            bytes_in: 0,
            duration_ms: 0,
            suppressed: n - MAX_REFUSED_RECORDS,
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_get_their_own_loopback_address_and_literals_themselves() {
        let entries = parse_allow_net(&[
            "api.example".to_string(),
            "93.184.216.34:80".to_string(),
            "other.example:8443".to_string(),
        ])
        .unwrap();
        let p = layout(&entries);
        let listens: Vec<String> = p.forwards.iter().map(|f| f.listen.to_string()).collect();
        assert_eq!(
            listens,
            [
                "127.0.0.2:443",
                "127.0.0.2:80",
                "93.184.216.34:80",
                "127.0.0.3:8443"
            ]
        );
        assert_eq!(p.sandbox.ports, vec![443, 80, 8443]);
        assert_eq!(
            p.sandbox.hosts,
            vec![
                ("api.example".to_string(), "127.0.0.2".parse().unwrap()),
                ("other.example".to_string(), "127.0.0.3".parse().unwrap()),
            ]
        );
    }
}
