//! The network rows (docs/PERFORMANCE.md, "The network rows"): a test host
//! in a network namespace of the bench's own (nethost.rs) serving plain
//! HTTP, HTTPS (a CA the bench makes with `openssl`) and a one-byte banner;
//! a supervisor with `[network]` allowing it and one with a `[[secrets]]`
//! entry bound to its HTTPS port besides. Each figure inside a sandbox is
//! beside the same client on the host, direct, in the same run; the plain
//! download also beside curl on the host through two bare relays (relay.rs),
//! the floor one relay hop sets.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, bail};

use super::git::{own_time, self_timed};
use super::harness::{AgentSession, SupervisorProc, TRUE_ARGS, blocking, run_checked, warmup_for};
use super::nethost::{self, TestHost};
use super::relay;
use super::stats::{Row, Target, Unit, percentile};
use super::variants::{Ctx, alternate, fd_count};

/// The test host: HTTP on 8080 and HTTPS on 8443 (`/256m`: 256 MiB of
/// zeros; anything else one byte), and on 7000 a banner of one byte.
const SERVERS: &str = r#"
import socket, socketserver, ssl, sys, threading
addr, cert, key = sys.argv[1], sys.argv[2], sys.argv[3]
ZERO = memoryview(b"\0" * (1 << 20))
TLS = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
TLS.load_cert_chain(cert, key)
TLS.set_alpn_protocols(["http/1.1"])
def serve(sock):
    head = b""
    while b"\r\n\r\n" not in head:
        d = sock.recv(65536)
        if not d: return
        head += d
    n = (256 << 20) if head.split(b" ")[1].endswith(b"/256m") else 1
    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % n)
    while n > 0:
        k = min(n, len(ZERO)); sock.sendall(ZERO[:k]); n -= k
class Plain(socketserver.BaseRequestHandler):
    def handle(self): serve(self.request)
class Tls(socketserver.BaseRequestHandler):
    def handle(self):
        s = TLS.wrap_socket(self.request, server_side=True)
        serve(s)
        s.close()
class Banner(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.sendall(b"B")
        while self.request.recv(4096): pass
class S(socketserver.ThreadingTCPServer):
    allow_reuse_address = True; daemon_threads = True; request_queue_size = 512
threading.Thread(target=S(("0.0.0.0", 8443), Tls).serve_forever, daemon=True).start()
threading.Thread(target=S(("0.0.0.0", 7000), Banner).serve_forever, daemon=True).start()
S(("0.0.0.0", 8080), Plain).serve_forever()
"#;

/// Clients, one process per batch: prints one number per sample (ns), or
/// for `storm` the connections opened, the failures and the seconds.
const CLIENT: &str = r#"
import os, socket, ssl, struct, sys, threading, time
mode, host, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ca = sys.argv[5] if len(sys.argv) > 5 else None
def tcp():
    if mode.endswith("proxy"):
        s = socket.create_connection(("127.0.0.1", 3128))
        s.sendall(b"CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (host.encode(), port, host.encode(), port))
        h = b""
        while b"\r\n\r\n" not in h:
            d = s.recv(1)
            if not d: raise SystemExit("the proxy closed: %r" % h)
            h += d
        if b" 200" not in h.split(b"\r\n")[0]: raise SystemExit("the proxy said %r" % h)
        return s
    return socket.create_connection((host, port))
CTX = []
def tls(s):
    if not CTX:
        CTX.append(ssl.create_default_context(cafile=ca))
        CTX[0].set_alpn_protocols(["http/1.1"])
    t = CTX[0].wrap_socket(s, server_hostname=host)
    t.sendall(b"GET /1 HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n" % (host.encode(), port))
    return t
def once():
    s = tcp()
    if mode.startswith("tls"): s = tls(s)
    if not s.recv(1): raise SystemExit("no first byte")
    return s
def dns_floor():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    if os.fork() == 0:
        while True: b.send(b.recv(512))
    return a
out = []
if mode == "storm":
    stop, done, bad = time.time() + n, [0], [0]
    def worker():
        k, t0 = 0, time.time()
        while time.time() < stop:
            due = t0 + k / (1000 / 8)
            if time.time() < due: time.sleep(due - time.time())
            try:
                once().close(); done[0] += 1
            except Exception: bad[0] += 1
            k += 1
    t = time.time(); ws = [threading.Thread(target=worker) for _ in range(8)]
    [w.start() for w in ws]; [w.join() for w in ws]
    print("storm", done[0], bad[0], time.time() - t); sys.exit(0)
if mode in ("dns", "udp-floor"):
    if mode == "dns":
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.connect(("127.0.0.1", 53))
    else:
        u = dns_floor()
    for i in range(n + 20):
        name = b"".join(bytes([len(l)]) + l for l in (b"n%d" % (i % 50), b"bench", b"example")) + b"\0"
        q = struct.pack("!HHHHHH", i & 0xFFFF, 0x0100, 1, 0, 0, 0) + name + b"\0\1\0\1"
        t = time.perf_counter_ns(); u.send(q); r = u.recv(512); t1 = time.perf_counter_ns()
        if mode == "dns" and (len(r) < 12 or r[:2] != q[:2] or r[7] != 1): raise SystemExit("bad answer %r" % r)
        if i >= 20: out.append(t1 - t)
else:
    for i in range(n + 10):
        t = time.perf_counter_ns(); s = once(); t1 = time.perf_counter_ns(); s.close()
        if i >= 10: out.append(t1 - t)
print(" ".join(map(str, out)))
"#;

const PY: &str = "/usr/bin/python3";
const BYTES: f64 = 256.0;

/// The world of this group: the host, its files, the two supervisors and a
/// session on each.
struct World {
    host: TestHost,
    dir: PathBuf,
    net: SupervisorProc,
    s_net: AgentSession,
    s_secret: AgentSession,
    _secrets: SupervisorProc,
    relays: Vec<relay::Relay>,
}

pub async fn run(ctx: &Ctx<'_>, main: &SupervisorProc) -> Vec<Row> {
    let mut w = match World::start(ctx).await {
        Ok(w) => w,
        Err(e) => return failed(&format!("{e:#}")),
    };
    let mut rows = Vec::new();
    let groups: [(&str, &str); 5] = [
        (
            "net.run_bash_true_network_unused",
            "run_bash `true`, [network] configured, unused",
        ),
        (
            "net.download",
            "256 MiB over HTTP through the sandbox's proxy",
        ),
        ("net.connect", "TCP connect + first byte, transparent path"),
        ("net.dns_stub", "DNS stub: one A answer"),
        (
            "net.storm_rate",
            "one session opening 1,000 connections/s for 10 s",
        ),
    ];
    for (i, (id, name)) in groups.into_iter().enumerate() {
        let r = match i {
            0 => run_bash_unused(ctx, main, &mut w).await,
            1 => download(ctx, &mut w, false).await,
            2 => connect(ctx, &mut w, false).await,
            3 => dns(ctx, &mut w).await,
            _ => storm(ctx, &mut w).await,
        };
        rows.extend(
            r.unwrap_or_else(|e| vec![Row::failed(id, name, Unit::Nanos, format!("{e:#}"))]),
        );
    }
    rows.extend(download(ctx, &mut w, true).await.unwrap_or_else(|e| {
        vec![Row::failed(
            "net.secret_download",
            "256 MiB over HTTPS, TLS terminated",
            Unit::MibPerSecond,
            format!("{e:#}"),
        )]
    }));
    rows.extend(connect(ctx, &mut w, true).await.unwrap_or_else(|e| {
        vec![Row::failed(
            "net.secret_connect",
            "TLS connect + first byte, TLS terminated",
            Unit::Nanos,
            format!("{e:#}"),
        )]
    }));
    drop(w);
    rows
}

fn failed(why: &str) -> Vec<Row> {
    [
        (
            "net.download",
            "256 MiB over HTTP through the sandbox's proxy",
            Unit::MibPerSecond,
        ),
        (
            "net.connect",
            "TCP connect + first byte through the proxy",
            Unit::Nanos,
        ),
        ("net.dns_stub", "DNS stub: one A answer", Unit::Nanos),
        (
            "net.run_bash_true_network_unused",
            "run_bash `true`, [network] configured, unused",
            Unit::Nanos,
        ),
        (
            "net.storm_fds_after",
            "supervisor fds after 1,000 connections/s for 10 s",
            Unit::Count,
        ),
        (
            "net.secret_download",
            "256 MiB over HTTPS, TLS terminated",
            Unit::MibPerSecond,
        ),
        (
            "net.secret_connect",
            "TLS connect + first byte, TLS terminated",
            Unit::Nanos,
        ),
    ]
    .into_iter()
    .map(|(id, name, unit)| Row::failed(id, name, unit, why.to_string()))
    .collect()
}

/// A CA and a leaf for `addr` (an IP SAN), made with the host's openssl.
fn certificates(dir: &Path, addr: &str) -> anyhow::Result<()> {
    let script = format!(
        "set -e\n\
         openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=tollgate-bench-ca -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign\n\
         openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout leaf.key -out leaf.csr -subj /CN={addr}\n\
         printf 'subjectAltName=IP:{addr}\\nbasicConstraints=CA:FALSE\\nextendedKeyUsage=serverAuth\\nkeyUsage=digitalSignature\\n' > leaf.ext\n\
         openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out leaf.pem -days 2 -extfile leaf.ext\n"
    );
    run_checked(Command::new("sh").args(["-c", &script]).current_dir(dir))
        .map(drop)
        .context("making the test host's certificates (openssl)")
}

impl World {
    async fn start(ctx: &Ctx<'_>) -> anyhow::Result<World> {
        let dir = ctx.workspace("ws-net")?;
        let addr = nethost::public_address();
        let (d, a) = (dir.clone(), addr.clone());
        let host = blocking(move || {
            certificates(&d, &a)?;
            std::fs::write(d.join("client.py"), CLIENT)?;
            let secret = d.join("secret");
            std::fs::write(&secret, "bench-secret-value-0123456789\n")?;
            std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
            let (cert, key) = (d.join("leaf.pem"), d.join("leaf.key"));
            let args = [
                a.as_str(),
                &cert.display().to_string(),
                &key.display().to_string(),
            ]
            .map(str::to_string);
            TestHost::start(SERVERS, &args.each_ref().map(String::as_str), &d, 8080)
        })
        .await?;
        let allow =
            format!("[network]\nallow = [\"{addr}:8080\", \"{addr}:7000\", \"{addr}:8443\"]\n");
        let net = ctx.start("network", "", &allow).await?;
        let secrets = format!(
            "{allow}trust_ca = [{ca:?}]\n\n[[secrets]]\nname = \"bench\"\nfrom_file = {file:?}\nhosts = [\"{addr}:8443\"]\nheader = \"Authorization\"\nformat = \"Bearer {{}}\"\n",
            ca = dir.join("ca.pem").display().to_string(),
            file = dir.join("secret").display().to_string(),
        );
        let sec = ctx.start("secrets", "", &secrets).await?;
        let mode = "dangerouslySkipPermissions";
        let mut s_net = AgentSession::open(net.agent_channel().await?, &dir, mode).await?;
        let mut s_secret = AgentSession::open(sec.agent_channel().await?, &dir, mode).await?;
        s_net.call("run_bash", TRUE_ARGS).await?;
        s_secret.call("run_bash", TRUE_ARGS).await?;
        Ok(World {
            host,
            dir,
            net,
            s_net,
            s_secret,
            _secrets: sec,
            relays: Vec::new(),
        })
    }

    fn addr(&self) -> &str {
        &self.host.public
    }

    /// The floor relays (started on first use) and curl's command through
    /// each, in [`FLOOR_ROWS`]' order.
    fn floor_cmds(&mut self) -> anyhow::Result<Vec<String>> {
        if self.relays.is_empty() {
            let to: std::net::SocketAddr = format!("{}:8080", self.addr()).parse()?;
            for how in [relay::How::Buffer, relay::How::Splice] {
                self.relays.push(relay::Relay::start(to, how)?);
            }
        }
        let curl = "curl -sS --fail -o /dev/null --noproxy '*'";
        Ok(self
            .relays
            .iter()
            .map(|r| self_timed(&format!("{curl} http://{}/256m", r.addr)))
            .collect())
    }

    /// `script` on the host (`sh -c` in the group's directory).
    async fn on_host(&self, script: String) -> anyhow::Result<String> {
        let dir = self.dir.clone();
        blocking(move || run_checked(Command::new("sh").args(["-c", &script]).current_dir(dir)))
            .await
    }

    /// `script` inside, through run_bash on the network or secrets session.
    async fn inside(&mut self, secret: bool, script: &str) -> anyhow::Result<String> {
        let s = if secret {
            &mut self.s_secret
        } else {
            &mut self.s_net
        };
        let args = serde_json::json!({ "command": script, "timeout_s": 120 }).to_string();
        Ok(s.call("run_bash", &args).await?.output)
    }

    /// The client's samples, on the host or inside.
    async fn client(&mut self, secret: Option<bool>, args: &str) -> anyhow::Result<Vec<Duration>> {
        let cmd = format!("{PY} client.py {args}");
        let out = match secret {
            None => self.on_host(cmd.clone()).await?,
            Some(s) => self.inside(s, &cmd).await?,
        };
        let v: Vec<Duration> = out
            .split_whitespace()
            .filter_map(|x| x.parse::<u64>().ok())
            .map(Duration::from_nanos)
            .collect();
        if v.is_empty() {
            bail!("`{cmd}` printed no samples: {}", out.trim_end());
        }
        Ok(v)
    }
}

/// run_bash `true` on the main supervisor and on the one with `[network]`,
/// alternating.
async fn run_bash_unused(
    ctx: &Ctx<'_>,
    main: &SupervisorProc,
    w: &mut World,
) -> anyhow::Result<Vec<Row>> {
    let ws = ctx.workspace("ws-net-unused")?;
    let mut s_main = AgentSession::open(
        main.agent_channel().await?,
        &ws,
        "dangerouslySkipPermissions",
    )
    .await?;
    s_main.call("run_bash", TRUE_ARGS).await?;
    let n = ctx.samples;
    let (with, without) = alternate(
        (&mut w.s_net, &mut s_main),
        "run_bash",
        TRUE_ARGS,
        warmup_for(n),
        n,
    )
    .await?;
    s_main.close().await?;
    Ok(vec![
        Row::latency("net.run_bash_true_no_network", "run_bash `true`, no [network] (baseline)", &without)
            .with_note("the main bench supervisor, calls alternating with the next row's"),
        Row::latency("net.run_bash_true_network_unused", "run_bash `true`, [network] configured, unused", &with)
            .with_baseline("net.run_bash_true_no_network")
            .with_target(Target::RatioAtMost { factor: 1.03, issue: 32 })
            .with_note("a supervisor alike but for [network]: the sandbox behind the wall (proxies, stub, nftables), the command opening nothing"),
    ])
}

fn mib_per_s(d: &[Duration]) -> Vec<f64> {
    let mut v: Vec<f64> = d
        .iter()
        .map(|x| BYTES / x.as_secs_f64().max(1e-9))
        .collect();
    v.sort_by(f64::total_cmp);
    v
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    percentile(&v, 0.5).unwrap_or(0.0)
}

/// 256 MiB with curl, host direct and inside in alternating rounds, each
/// timed by the shell around curl: plain HTTP through the HTTP proxy, or
/// (`secret`) HTTPS through CONNECT to the host the secret is bound to.
async fn download(ctx: &Ctx<'_>, w: &mut World, secret: bool) -> anyhow::Result<Vec<Row>> {
    let a = w.addr().to_string();
    let (url, direct_extra) = if secret {
        (format!("https://{a}:8443/256m"), "--cacert ca.pem")
    } else {
        (format!("http://{a}:8080/256m"), "")
    };
    let curl = "curl -sS --fail -o /dev/null";
    let host_cmd = self_timed(&format!("{curl} --noproxy '*' {direct_extra} {url}"));
    let inside_cmd = self_timed(&format!("{curl} {url}"));
    let n = if ctx.quick { 2 } else { 5 };
    let floors = if secret { Vec::new() } else { w.floor_cmds()? };
    let (mut host, mut inside) = (Vec::new(), Vec::new());
    let mut floor = vec![Vec::new(); floors.len()];
    for i in 0..n + 1 {
        let h = own_time(&w.on_host(host_cmd.clone()).await?)?;
        let mut f = Vec::new();
        for cmd in &floors {
            f.push(own_time(&w.on_host(cmd.clone()).await?)?);
        }
        let s = own_time(&w.inside(secret, &inside_cmd).await?)?;
        if i > 0 {
            host.push(h);
            inside.push(s);
            floor.iter_mut().zip(f).for_each(|(v, x)| v.push(x));
        }
    }
    let (hm, sm) = (mib_per_s(&host), mib_per_s(&inside));
    let floor_rows = floor.iter().zip(FLOOR_ROWS).map(|(d, (id, name, note))| {
        let v = mib_per_s(d);
        Row::value(id, name, Unit::MibPerSecond, median(&v), v.len())
            .with_baseline("base.net_download_direct")
            .with_note(note)
    });
    let (base, id, what) = if secret {
        (
            "base.net_secret_download_direct",
            "net.secret_download",
            "256 MiB over HTTPS",
        )
    } else {
        (
            "base.net_download_direct",
            "net.download",
            "256 MiB over HTTP",
        )
    };
    let (via, target) = if secret {
        (
            "through CONNECT, TLS terminated by the proxy (session CA) and again to the host, the secret's header set",
            Target::AtLeastRatio {
                factor: 0.5,
                issue: 36,
            },
        )
    } else {
        (
            "through the sandbox's HTTP proxy (curl's http_proxy)",
            Target::AtLeastRatio {
                factor: 0.8,
                issue: 32,
            },
        )
    };
    Ok(vec![
        Row::value(
            base,
            &format!("{what} from the test host, curl on the host, direct (baseline)"),
            Unit::MibPerSecond,
            median(&hm),
            hm.len(),
        )
        .with_note("a network namespace behind a veth pair; timed by the shell around curl"),
        Row::value(
            id,
            &format!(
                "{what} from the test host, curl in the sandbox, {}",
                if secret {
                    "TLS terminated"
                } else {
                    "through the proxy"
                }
            ),
            Unit::MibPerSecond,
            median(&sm),
            sm.len(),
        )
        .with_baseline(base)
        .with_target(target)
        .with_note(format!(
            "{via}; rounds alternating with the host's; timed by the shell around curl"
        )),
    ]
    .into_iter()
    .chain(floor_rows)
    .collect())
}

/// The floor rows of the plain download: curl on the host through a bare
/// relay on its loopback (relay.rs), in the same rounds.
const FLOOR_ROWS: [(&str, &str, &str); 2] = [
    (
        "base.net_download_relay_buffer",
        "256 MiB over HTTP from the test host, curl on the host through a bare relay, read/write 64 KiB (floor)",
        "one relay hop, nothing decided or recorded: two threads, read(2) and write(2) of 64 KiB",
    ),
    (
        "base.net_download_relay_splice",
        "256 MiB over HTTP from the test host, curl on the host through a bare splice(2) relay (floor)",
        "one relay hop, nothing decided or recorded: two threads, splice(2) through a 1 MiB pipe",
    ),
];

/// Connect + first byte: a Python loop on the host (direct) and inside
/// (transparent and CONNECT), or the same with TLS (`secret`).
async fn connect(ctx: &Ctx<'_>, w: &mut World, secret: bool) -> anyhow::Result<Vec<Row>> {
    let a = w.addr().to_string();
    let n = ctx.samples.clamp(20, 200) / 2;
    let (mut direct, mut trans, mut proxy) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..2 {
        if secret {
            let ca = w.dir.join("ca.pem").display().to_string();
            direct.extend(w.client(None, &format!("tls {a} 8443 {n} {ca}")).await?);
            proxy.extend(
                w.client(Some(true), &format!("tls-proxy {a} 8443 {n}"))
                    .await?,
            );
        } else {
            direct.extend(w.client(None, &format!("tcp {a} 7000 {n}")).await?);
            trans.extend(w.client(Some(false), &format!("tcp {a} 7000 {n}")).await?);
            proxy.extend(
                w.client(Some(false), &format!("tcp-proxy {a} 7000 {n}"))
                    .await?,
            );
        }
    }
    if secret {
        return Ok(vec![
            Row::latency("base.net_secret_connect_direct", "TLS connect + handshake + first byte, host direct (baseline)", &direct)
                .with_note("Python's ssl on the host, the bench's CA, HTTP/1.1 GET"),
            Row::latency("net.secret_connect", "TLS connect + handshake + first byte, TLS terminated", &proxy)
                .with_baseline("base.net_secret_connect_direct")
                .with_target(Target::AddedAtMostNanos { value: 5_000_000.0, issue: 36 })
                .with_note("CONNECT to the proxy, the session CA's leaf, the proxy's own TLS to the host (its open record fsynced first), the header set; Python's ssl trusting SSL_CERT_FILE"),
        ]);
    }
    Ok(vec![
        Row::latency("base.net_connect_direct", "TCP connect + first byte, host direct (baseline)", &direct)
            .with_note("Python on the host to the test host's one-byte banner"),
        Row::latency("net.connect", "TCP connect + first byte, transparent path (nftables → proxy)", &trans)
            .with_baseline("base.net_connect_direct")
            .with_target(Target::AddedAtMostNanos { value: 1_000_000.0, issue: 32 })
            .with_note("a plain connect() in the sandbox, redirected to the transparent listener; the supervisor's connect upstream and its fsynced `open` record come before the first byte"),
        Row::latency("net.connect_proxy", "TCP connect + first byte, HTTP CONNECT", &proxy)
            .with_baseline("base.net_connect_direct")
            .with_target(Target::AddedAtMostNanos { value: 1_000_000.0, issue: 32 })
            .with_note("CONNECT to 127.0.0.1:3128 and its 200 reply, then the banner"),
    ])
}

/// The stub's answer beside a datagram round trip to another process on
/// the sandbox's own loopback (the same Python loop: its floor).
async fn dns(ctx: &Ctx<'_>, w: &mut World) -> anyhow::Result<Vec<Row>> {
    let n = ctx.samples;
    let floor = w.client(Some(false), &format!("udp-floor - 0 {n}")).await?;
    let stub = w.client(Some(false), &format!("dns - 0 {n}")).await?;
    Ok(vec![
        Row::latency("base.udp_floor_inside", "datagram round trip to another process, Python, in the sandbox (floor)", &floor)
            .with_note("the same loop as the next row against a forked echo over a socketpair: what the measuring client costs"),
        Row::latency("net.dns_stub", "DNS stub: one A answer, from a Python client in the sandbox", &stub)
            .with_baseline("base.udp_floor_inside")
            .with_target(Target::MedianAtMostNanos { value: 200_000.0, issue: 32 })
            .with_note("UDP to 127.0.0.1:53, 50 names in turn, each answered with its synthetic address"),
    ])
}

/// 8 threads in one sandbox opening 125 connections/s each for 10 s
/// through the transparent path; the supervisor's fds and RSS before and 2 s
/// after.
async fn storm(ctx: &Ctx<'_>, w: &mut World) -> anyhow::Result<Vec<Row>> {
    let pid = w.net.pid().context("the network supervisor has no pid")?;
    let (fds0, rss0) = (fd_count(pid), w.net.rss_mib());
    let secs = if ctx.quick { 3 } else { 10 };
    let a = w.addr().to_string();
    let out = w
        .inside(false, &format!("{PY} client.py storm {a} 7000 {secs}"))
        .await?;
    let f: Vec<f64> = out
        .split_whitespace()
        .skip_while(|x| *x != "storm")
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let [done, bad, took] = f[..] else {
        bail!("the storm printed no counts: {}", out.trim_end());
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (fds1, rss1) = (fd_count(pid), w.net.rss_mib());
    let got = format!("{done:.0} connections in {took:.1} s, {bad:.0} failed");
    Ok(vec![
        Row::value("net.storm_rate", "connections/s opened by one session, asked for 1,000/s for 10 s", Unit::PerSecond, done / took.max(1e-9), done as usize)
            .with_target(Target::AtLeastPerSecond { value: 1000.0, issue: 32 })
            .with_note(format!("{got}; 8 Python threads paced at 125/s each, connect + banner byte + close, through the transparent path (each connection's open and close recorded)")),
        Row::value("net.storm_fds_before", "network supervisor's open fds before the storm (baseline)", Unit::Count, fds0.unwrap_or(0.0), 1),
        Row::value("net.storm_fds_after", "network supervisor's open fds 2 s after the storm", Unit::Count, fds1.unwrap_or(0.0), 1)
            .with_baseline("net.storm_fds_before")
            .with_target(Target::RatioAtMost { factor: 1.0, issue: 32 })
            .with_note("flat: no more descriptors than before"),
        Row::value("net.storm_rss_before", "network supervisor's RSS before the storm (baseline)", Unit::Mib, rss0.unwrap_or(0.0), 1),
        Row::value("net.storm_rss_after", "network supervisor's RSS 2 s after the storm", Unit::Mib, rss1.unwrap_or(0.0), 1)
            .with_baseline("net.storm_rss_before")
            .with_target(Target::RatioAtMost { factor: 1.1, issue: 32 })
            .with_note("flat: within 10% of before (the bench's reading of `flat`; allocator pages kept count)"),
    ])
}
