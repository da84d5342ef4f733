//! The proxies over real sockets. Upstream servers listen on 127.0.0.2,
//! which the test gate alone exempts from the SSRF guard (it stands for a
//! public host); names resolve through a test resolver standing in for the
//! host's, so a name that resolves to 127.0.0.1 meets the real guard.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tollgate_egress::{
    ConnId, ConnRequest, ConnStats, ConnectionGate, GateVerdict, Limits, Proxy, Refusal,
};
use tollgate_policy::HostAddrs;
use tollgate_policy::network::{NetVerdict, NetworkConfig, NetworkPolicy};

const UPSTREAM: [u8; 4] = [127, 0, 0, 2];

struct TestGate {
    policy: NetworkPolicy,
    /// The one address spared the SSRF guard (the loopback upstream that
    /// stands for a public host); `None`: the guard alone decides.
    exempt: Option<IpAddr>,
    names: HashMap<String, IpAddr>,
    log: Mutex<Vec<String>>,
    resolved: Mutex<Vec<String>>,
}

impl ConnectionGate for TestGate {
    async fn decide(&self, req: &ConnRequest) -> GateVerdict {
        let d = self.policy.decide(&req.host, req.port);
        match d.verdict {
            NetVerdict::Allow => GateVerdict::Allow { rule: d.rule },
            _ => GateVerdict::Deny(Refusal {
                rule: d.rule,
                reason: d.reason,
            }),
        }
    }
    fn vet(&self, req: &ConnRequest, ip: IpAddr) -> Result<(), String> {
        if Some(ip) == self.exempt {
            return Ok(());
        }
        self.policy
            .vet_address(ip, HostAddrs::none(), &req.host.to_string())
    }
    async fn resolve(&self, name: &str, _port: u16) -> std::io::Result<Vec<IpAddr>> {
        self.resolved.lock().unwrap().push(name.to_string());
        self.names
            .get(name)
            .map(|ip| vec![*ip])
            .ok_or_else(|| std::io::Error::other("NXDOMAIN"))
    }
    fn opened(&self, req: &ConnRequest, addr: SocketAddr, rule: &str) -> Result<ConnId, String> {
        let mut l = self.log.lock().unwrap();
        l.push(format!("open {} {addr} {rule}", req.target()));
        Ok(ConnId(l.len() as u64))
    }
    fn refused(&self, req: &ConnRequest, r: &Refusal) {
        self.log
            .lock()
            .unwrap()
            .push(format!("refused {} {}", req.target(), r.rule));
    }
    fn bad_request(&self, _session: &str, _peer: SocketAddr, why: &str) {
        self.log.lock().unwrap().push(format!("bad {why}"));
    }
    fn secret(&self, req: &ConnRequest, _conn: Option<ConnId>, e: tollgate_egress::SecretUse<'_>) {
        self.log
            .lock()
            .unwrap()
            .push(format!("secret {} {}", e.secret, req.target()));
    }
    fn closed(&self, id: ConnId, s: ConnStats) {
        self.log.lock().unwrap().push(format!(
            "close {} up={} down={}",
            id.0, s.bytes_up, s.bytes_down
        ));
    }
}

/// An upstream that echoes what it gets, prefixed; the bytes each
/// connection received go to `seen`.
async fn echo_server() -> (u16, Arc<Mutex<Vec<Vec<u8>>>>) {
    let l = TcpListener::bind(SocketAddr::from((UPSTREAM, 0)))
        .await
        .unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            let seen = Arc::clone(&s2);
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut buf = [0u8; 8192];
                while let Ok(n) = c.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                    if c.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                    if got.starts_with(b"GET") && got.windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
                seen.lock().unwrap().push(got);
            });
        }
    });
    (port, seen)
}

struct Rig {
    proxy: Arc<Proxy<TestGate>>,
    http: SocketAddr,
    socks: SocketAddr,
    port: u16,
    seen: Arc<Mutex<Vec<Vec<u8>>>>,
}

async fn rig(limits: Limits) -> Rig {
    let (port, seen) = echo_server().await;
    let c = NetworkConfig {
        allow: vec![
            format!("ok.example:{port}"),
            format!("*.wild.example:{port}"),
            format!("inward.example:{port}"),
            format!("bad.example:{port}"),
            "plain.example".into(),
        ],
        deny: vec![format!("bad.example:{port}")],
        ..NetworkConfig::default()
    };
    let up = IpAddr::from(UPSTREAM);
    let names = [
        ("ok.example", up),
        ("a.wild.example", up),
        ("wild.example", up),
        ("bad.example", up),
        ("other.example", up),
        ("inward.example", IpAddr::from([127, 0, 0, 1])),
    ];
    let gate = TestGate {
        policy: NetworkPolicy::from_config(&c).unwrap(),
        exempt: Some(up),
        names: names.iter().map(|(n, a)| (n.to_string(), *a)).collect(),
        log: Mutex::default(),
        resolved: Mutex::default(),
    };
    let proxy = Proxy::new("s1".into(), gate, limits);
    let hl = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sl = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (http, socks) = (hl.local_addr().unwrap(), sl.local_addr().unwrap());
    tokio::spawn(tollgate_egress::serve_http(Arc::clone(&proxy), hl));
    tokio::spawn(tollgate_egress::serve_socks(Arc::clone(&proxy), sl));
    Rig {
        proxy,
        http,
        socks,
        port,
        seen,
    }
}

fn log(r: &Rig) -> Vec<String> {
    r.proxy.gate.log.lock().unwrap().clone()
}

/// Reads until the peer closes or 2 s pass.
async fn read_all(s: &mut TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(2), s.read_to_end(&mut out)).await;
    out
}

async fn read_n(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut out = vec![0u8; n];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut out))
        .await
        .unwrap()
        .unwrap();
    out
}

/// A minimal ClientHello naming `sni`.
fn hello(sni: Option<&str>) -> Vec<u8> {
    let mut body = vec![3, 3];
    body.extend([7u8; 32]);
    body.extend([0, 0, 2, 0x13, 0x01, 1, 0]);
    let mut exts = Vec::new();
    if let Some(n) = sni {
        let n = n.as_bytes();
        let list = (n.len() + 3) as u16;
        exts.extend([0, 0]);
        exts.extend((list + 2).to_be_bytes());
        exts.extend(list.to_be_bytes());
        exts.push(0);
        exts.extend((n.len() as u16).to_be_bytes());
        exts.extend(n);
    }
    body.extend((exts.len() as u16).to_be_bytes());
    body.extend(exts);
    let mut hs = vec![1, 0];
    hs.extend((body.len() as u16).to_be_bytes());
    hs.extend(body);
    let mut rec = vec![0x16, 3, 1];
    rec.extend((hs.len() as u16).to_be_bytes());
    rec.extend(hs);
    rec
}

async fn connect_via_http(r: &Rig, target: &str) -> (TcpStream, String) {
    let mut s = TcpStream::connect(r.http).await.unwrap();
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).await.unwrap() == 0 {
            break;
        }
        head.push(b[0]);
    }
    (s, String::from_utf8_lossy(&head).into_owned())
}

#[tokio::test]
async fn an_allowed_name_tunnels_with_its_own_sni_recorded_before_bytes() {
    let r = rig(Limits::default()).await;
    let (mut s, head) = connect_via_http(&r, &format!("ok.example:{}", r.port)).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let h = hello(Some("OK.example"));
    s.write_all(&h).await.unwrap();
    assert_eq!(read_n(&mut s, h.len()).await, h);
    drop(s);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let l = log(&r);
    assert_eq!(
        l[0],
        format!("open ok.example:{0} 127.0.0.2:{0} ok.example:{0}", r.port),
        "{l:?}"
    );
    assert_eq!(l[1], format!("close 1 up={0} down={0}", h.len()), "{l:?}");
}

#[tokio::test]
async fn sni_other_than_the_decided_name_or_none_is_refused_and_nothing_reaches_the_server() {
    let r = rig(Limits::default()).await;
    for sni in [Some("evil.example"), None] {
        let (mut s, head) = connect_via_http(&r, &format!("ok.example:{}", r.port)).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        s.write_all(&hello(sni)).await.unwrap();
        assert!(read_all(&mut s).await.is_empty(), "{sni:?}");
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let seen = r.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "the server saw both connections close");
    assert!(seen.iter().all(|b| b.is_empty()), "{seen:?}");
    let l = log(&r);
    assert_eq!(
        l.iter().filter(|x| x.ends_with("network:sni")).count(),
        2,
        "{l:?}"
    );
    assert!(!l.iter().any(|x| x.starts_with("open")), "{l:?}");
}

#[tokio::test]
async fn unlisted_denied_apex_and_inward_names_get_403_naming_host_port_rule() {
    let r = rig(Limits::default()).await;
    let p = r.port;
    for (host, rule) in [
        ("unlisted.test", "network:unlisted".to_string()),
        ("bad.example", format!("bad.example:{p}")),
        ("wild.example", "network:unlisted".to_string()),
        ("inward.example", "floor:ssrf".to_string()),
        ("0x7f.1", "network:unlisted".to_string()),
    ] {
        let (mut s, head) = connect_via_http(&r, &format!("{host}:{p}")).await;
        assert!(head.starts_with("HTTP/1.1 403 "), "{host}: {head}");
        let shown = tollgate_policy::network::NetHost::parse(host)
            .unwrap()
            .url_host();
        assert!(
            head.contains(&format!(
                "X-Tollgate-Refused: host={shown}; port={p}; rule={rule}\r\n"
            )),
            "{host}: {head}"
        );
        let body = String::from_utf8(read_all(&mut s).await).unwrap();
        assert!(
            body.starts_with(&format!("network: refused {shown}:{p} (")) && body.ends_with(")\n"),
            "{body}"
        );
        assert_eq!(body.lines().count(), 1);
    }
    // The subdomain wildcard does match its subdomains.
    let (_s, head) = connect_via_http(&r, &format!("a.wild.example:{p}")).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // No name that was refused by the lists was ever resolved.
    let resolved = r.proxy.gate.resolved.lock().unwrap().clone();
    assert_eq!(
        resolved,
        ["inward.example", "a.wild.example"],
        "{resolved:?}"
    );
}

#[tokio::test]
async fn plain_http_is_forwarded_in_origin_form_and_its_host_must_match() {
    let r = rig(Limits::default()).await;
    let p = r.port;
    let mut s = TcpStream::connect(r.http).await.unwrap();
    s.write_all(
        format!("GET http://ok.example:{p}/x HTTP/1.1\r\nHost: evil.example\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let out = String::from_utf8(read_all(&mut s).await).unwrap();
    assert!(
        out.starts_with("HTTP/1.1 403") && out.contains("rule=network:host-header"),
        "{out}"
    );
    let mut s = TcpStream::connect(r.http).await.unwrap();
    s.write_all(format!("GET http://ok.example:{p}/x HTTP/1.1\r\nHost: ok.example:{p}\r\nProxy-Connection: keep-alive\r\n\r\n").as_bytes()).await.unwrap();
    let out = String::from_utf8(read_all(&mut s).await).unwrap();
    assert_eq!(
        out,
        format!("GET /x HTTP/1.1\r\nHost: ok.example:{p}\r\nConnection: close\r\n\r\n")
    );
}

#[tokio::test]
async fn malformed_long_and_slow_heads_get_a_bounded_refusal() {
    let limits = Limits {
        head_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let r = rig(limits).await;
    for bad in [
        "CONNECT nohost HTTP/1.1\r\n\r\n".to_string(),
        "HELLO\r\n\r\n".into(),
        format!(
            "CONNECT ok.example:443 HTTP/1.1\r\nX: {}\r\n\r\n",
            "a".repeat(64 * 1024)
        ),
    ] {
        let mut s = TcpStream::connect(r.http).await.unwrap();
        let _ = s.write_all(bad.as_bytes()).await;
        let out = String::from_utf8_lossy(&read_all(&mut s).await).into_owned();
        assert!(
            out.starts_with("HTTP/1.1 400") && out.contains("rule=network:bad-request"),
            "{out}"
        );
    }
    // A slowloris head: the refusal arrives (the wait is bounded) ...
    let mut s = TcpStream::connect(r.http).await.unwrap();
    s.write_all(b"CONNECT ok.exa").await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), s.read_to_end(&mut out))
        .await
        .expect("the slow head was never refused")
        .unwrap();
    let out = String::from_utf8_lossy(&out).into_owned();
    assert!(
        out.starts_with("HTTP/1.1 400") && out.contains("did not arrive within"),
        "{out}"
    );
    assert_eq!(log(&r).iter().filter(|l| l.starts_with("bad ")).count(), 4);
    // ... and the proxy keeps serving.
    let (mut s, head) = connect_via_http(&r, &format!("ok.example:{}", r.port)).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    s.write_all(b"ping").await.unwrap();
    assert_eq!(read_n(&mut s, 4).await, b"ping");
}

#[tokio::test]
async fn socks5_connects_by_name_and_refuses_with_reply_codes() {
    let r = rig(Limits::default()).await;
    let socks = |name: &str, cmd: u8| {
        let mut m = vec![5, 1, 0, 5, cmd, 0, 3, name.len() as u8];
        m.extend(name.as_bytes());
        m.extend(r.port.to_be_bytes());
        m
    };
    let mut s = TcpStream::connect(r.socks).await.unwrap();
    s.write_all(&socks("ok.example", 1)).await.unwrap();
    assert_eq!(
        read_n(&mut s, 12).await,
        [5, 0, 5, 0, 0, 1, 0, 0, 0, 0, 0, 0]
    );
    s.write_all(b"ping").await.unwrap();
    assert_eq!(read_n(&mut s, 4).await, b"ping");
    for (name, cmd, code) in [
        ("unlisted.test", 1, 2),
        ("bad.example", 1, 2),
        ("inward.example", 1, 2),
        ("ok.example", 2, 7),
        ("ok.example", 3, 7),
    ] {
        let mut s = TcpStream::connect(r.socks).await.unwrap();
        s.write_all(&socks(name, cmd)).await.unwrap();
        let out = read_all(&mut s).await;
        assert_eq!(&out[..4], &[5, 0, 5, code], "{name} {cmd}: {out:?}");
    }
    let mut s = TcpStream::connect(r.socks).await.unwrap();
    s.write_all(&[4, 1, 0, 80, 127, 0, 0, 2, 0]).await.unwrap();
    assert_eq!(read_all(&mut s).await, [0, 0x5b, 0, 0, 0, 0, 0, 0]);
}

#[tokio::test]
async fn the_per_session_cap_refuses_more_and_frees_on_close() {
    let r = rig(Limits {
        max_connections: 2,
        ..Limits::default()
    })
    .await;
    let t = format!("ok.example:{}", r.port);
    let (a, ha) = connect_via_http(&r, &t).await;
    let (_b, hb) = connect_via_http(&r, &t).await;
    assert!(ha.starts_with("HTTP/1.1 200") && hb.starts_with("HTTP/1.1 200"));
    let (_c, hc) = connect_via_http(&r, &t).await;
    assert!(
        hc.starts_with("HTTP/1.1 400") && hc.contains("rule=network:connection-cap"),
        "{hc}"
    );
    drop(a);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_d, hd) = connect_via_http(&r, &t).await;
    assert!(hd.starts_with("HTTP/1.1 200"), "{hd}");
}

/// One A question for `name`.
fn dns_query(name: &str) -> Vec<u8> {
    let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for l in name.split('.') {
        q.push(l.len() as u8);
        q.extend(l.as_bytes());
    }
    q.extend([0, 0, 1, 0, 1]);
    q
}

#[tokio::test]
async fn the_dns_stub_answers_every_name_and_only_allowed_ones_are_resolved_on_the_host() {
    let r = rig(Limits::default()).await;
    let stub = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let stub_addr = stub.local_addr().unwrap();
    tokio::spawn(tollgate_egress::serve_dns(Arc::clone(&r.proxy.names), stub));
    let client = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let mut addrs = HashMap::new();
    for name in ["ok.example", "c2VjcmV0.exfil.test"] {
        client.send_to(&dns_query(name), stub_addr).await.unwrap();
        let mut buf = [0u8; 512];
        let (n, _) = tokio::time::timeout(Duration::from_secs(2), client.recv_from(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&buf[6..8], &[0, 1], "{name}: one answer");
        let ip: [u8; 4] = buf[n - 4..n].try_into().unwrap();
        assert_eq!(ip[..2], [198, 18], "{name}: {ip:?}");
        addrs.insert(name, ip);
    }
    // SOCKS5 by synthetic address: the name it stands for is decided.
    let socks = |ip: [u8; 4]| {
        let mut m = vec![5, 1, 0, 5, 1, 0, 1];
        m.extend(ip);
        m.extend(r.port.to_be_bytes());
        m
    };
    let mut s = TcpStream::connect(r.socks).await.unwrap();
    s.write_all(&socks(addrs["ok.example"])).await.unwrap();
    assert_eq!(read_n(&mut s, 12).await[..4], [5, 0, 5, 0], "{:?}", log(&r));
    let mut s = TcpStream::connect(r.socks).await.unwrap();
    s.write_all(&socks(addrs["c2VjcmV0.exfil.test"]))
        .await
        .unwrap();
    assert_eq!(read_all(&mut s).await[..4], [5, 0, 5, 2]);
    let mut s = TcpStream::connect(r.socks).await.unwrap();
    s.write_all(&socks([198, 19, 7, 7])).await.unwrap();
    assert_eq!(
        read_all(&mut s).await[..4],
        [5, 0, 5, 4],
        "an address the stub never gave"
    );
    let resolved = r.proxy.gate.resolved.lock().unwrap().clone();
    assert_eq!(
        resolved,
        ["ok.example"],
        "the host's resolver saw only the allowed name"
    );
    let l = log(&r);
    assert!(
        l.iter()
            .any(|x| x == &format!("refused c2vjcmv0.exfil.test:{} network:unlisted", r.port)),
        "{l:?}"
    );
}

fn ip(args: &[&str]) {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A test host on a public-looking address in a network namespace of its
/// own behind a veth pair (the pattern of the MCP gateway's
/// network tests); undone on drop.
struct VethHost {
    ns: String,
    host_if: String,
    route: String,
    server: std::process::Child,
    public: IpAddr,
}

impl VethHost {
    fn start() -> VethHost {
        let k = std::process::id() % 60_000;
        let (public, host_side, peer_side) = (
            format!("93.184.{}.{}", 20 + k % 200, 10 + k / 200 % 200),
            format!("10.215.{}.{}", k / 64 % 250, k % 64 * 4 + 1),
            format!("10.215.{}.{}", k / 64 % 250, k % 64 * 4 + 2),
        );
        let (ns, host_if, peer_if) = (format!("tg-net-{k}"), format!("tgn{k}"), format!("tgm{k}"));
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &ns])
            .stderr(std::process::Stdio::null())
            .status();
        ip(&["netns", "add", &ns]);
        ip(&[
            "link", "add", &host_if, "type", "veth", "peer", "name", &peer_if,
        ]);
        ip(&["link", "set", &peer_if, "netns", &ns]);
        ip(&["addr", "add", &format!("{host_side}/30"), "dev", &host_if]);
        ip(&["link", "set", &host_if, "up"]);
        ip(&[
            "-n",
            &ns,
            "addr",
            "add",
            &format!("{peer_side}/30"),
            "dev",
            &peer_if,
        ]);
        ip(&[
            "-n",
            &ns,
            "addr",
            "add",
            &format!("{public}/32"),
            "dev",
            &peer_if,
        ]);
        ip(&["-n", &ns, "link", "set", &peer_if, "up"]);
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        ip(&["-n", &ns, "route", "add", "default", "via", &host_side]);
        let route = format!("{public}/32");
        ip(&["route", "add", &route, "via", &peer_side]);
        let server = std::process::Command::new("ip")
            .args(["netns", "exec", &ns, "python3", "-c", SERVER])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let public: IpAddr = public.parse().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect_timeout(
            &SocketAddr::new(public, 8080),
            Duration::from_millis(500),
        )
        .is_err()
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the test web server did not come up"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        VethHost {
            ns,
            host_if,
            route,
            server,
            public,
        }
    }
}

impl Drop for VethHost {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
        let _ = std::process::Command::new("ip")
            .args(["route", "del", &self.route])
            .status();
        let _ = std::process::Command::new("ip")
            .args(["link", "del", &self.host_if])
            .status();
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.ns])
            .status();
    }
}

/// Answers every GET on port 8080 with the Host it was sent.
const SERVER: &str = r#"
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = ("host=" + self.headers.get("Host", "") + "\n").encode()
        self.send_response(200); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("0.0.0.0", 8080), H).serve_forever()
"#;

#[tokio::test(flavor = "multi_thread")]
async fn real_curl_reaches_a_public_test_host_by_name_through_both_proxies() {
    assert_eq!(
        nix_uid(),
        0,
        "this test creates network namespaces: run it as root"
    );
    let host = VethHost::start();
    let c = NetworkConfig {
        allow: vec!["pub.example:8080".into()],
        ..NetworkConfig::default()
    };
    let gate = TestGate {
        policy: NetworkPolicy::from_config(&c).unwrap(),
        exempt: None,
        names: [
            ("pub.example".to_string(), host.public),
            ("other.example".to_string(), host.public),
        ]
        .into(),
        log: Mutex::default(),
        resolved: Mutex::default(),
    };
    let proxy = Proxy::new("s1".into(), gate, Limits::default());
    let hl = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sl = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (http, socks) = (hl.local_addr().unwrap(), sl.local_addr().unwrap());
    tokio::spawn(tollgate_egress::serve_http(Arc::clone(&proxy), hl));
    tokio::spawn(tollgate_egress::serve_socks(Arc::clone(&proxy), sl));
    let curl = |args: Vec<String>| async move {
        let out = tokio::process::Command::new("curl")
            .args(["-sS", "-m", "20", "-i"])
            .args(args)
            .output()
            .await
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    };
    let out = curl(vec![
        "-x".into(),
        format!("http://{http}"),
        "http://pub.example:8080/x".into(),
    ])
    .await;
    assert!(
        out.contains("200") && out.contains("host=pub.example:8080"),
        "{out}"
    );
    let out = curl(vec![
        "--socks5-hostname".into(),
        socks.to_string(),
        "http://pub.example:8080/y".into(),
    ])
    .await;
    assert!(out.contains("host=pub.example:8080"), "{out}");
    let out = curl(vec![
        "-x".into(),
        format!("http://{http}"),
        "http://other.example:8080/".into(),
    ])
    .await;
    assert!(
        out.contains("403")
            && out.contains(
                "X-Tollgate-Refused: host=other.example; port=8080; rule=network:unlisted"
            ),
        "{out}"
    );
    let l = proxy.gate.log.lock().unwrap().clone();
    let opened = format!(
        "open pub.example:8080 {}:8080 pub.example:8080",
        host.public
    );
    assert_eq!(l.iter().filter(|x| **x == opened).count(), 2, "{l:?}");
}

fn nix_uid() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().next().map(|u| u.parse().unwrap()))
        .unwrap()
}

/// CONNECTs `target` and returns the head and the body of the answer.
async fn connect_answer(r: &Rig, target: &str) -> (String, String) {
    let (mut s, head) = connect_via_http(r, target).await;
    let body = String::from_utf8_lossy(&read_all(&mut s).await).into_owned();
    (head, body)
}

#[tokio::test]
async fn long_punycode_homoglyph_and_numeric_names_are_refused_as_what_they_are() {
    let r = rig(Limits::default()).await;
    let p = r.port;
    // 300 bytes is no DNS name: a bad request, recorded, nothing resolved.
    let (head, body) = connect_answer(&r, &format!("{}:{p}", "a".repeat(300))).await;
    assert!(
        head.starts_with("HTTP/1.1 400") && head.contains("rule=network:bad-request"),
        "{head}"
    );
    assert!(body.contains("300 bytes"), "{body}");
    let (head, _) = connect_answer(&r, &format!("xn--zz.example:{p}")).await;
    assert!(head.starts_with("HTTP/1.1 400"), "invalid punycode: {head}");
    // A homoglyph of an allowed name is another name, shown in its ASCII
    // form, and unlisted.
    let (head, _) = connect_answer(&r, &format!("\u{043e}k.example:{p}")).await;
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    assert!(
        head.contains("host=xn--k-") && head.contains("rule=network:unlisted"),
        "{head}"
    );
    // Every numeric spelling of loopback is the address 127.0.0.1.
    for spelling in [
        "2130706433",
        "0177.0.0.1",
        "127.1",
        "0x7f000001",
        "[::ffff:127.0.0.1]",
    ] {
        let (head, _) = connect_answer(&r, &format!("{spelling}:{p}")).await;
        assert!(head.starts_with("HTTP/1.1 403"), "{spelling}: {head}");
        let shown = if spelling.starts_with('[') {
            "[::ffff:127.0.0.1]"
        } else {
            "127.0.0.1"
        };
        assert!(
            head.contains(&format!("host={shown}; port={p}; rule=network:unlisted")),
            "{spelling}: {head}"
        );
    }
    // SOCKS5 names are at most 255 bytes; a 255-byte one is no DNS name.
    let name = "b".repeat(255);
    let mut m = vec![5, 1, 0, 5, 1, 0, 3, 255];
    m.extend(name.as_bytes());
    m.extend(p.to_be_bytes());
    let mut s = TcpStream::connect(r.socks).await.unwrap();
    s.write_all(&m).await.unwrap();
    assert_eq!(read_all(&mut s).await[..4], [5, 0, 5, 2]);
    let resolved = r.proxy.gate.resolved.lock().unwrap().clone();
    assert!(resolved.is_empty(), "{resolved:?}");
    let l = log(&r);
    assert_eq!(
        l.iter().filter(|x| x.starts_with("bad ")).count(),
        3,
        "{l:?}"
    );
    assert!(!l.iter().any(|x| x.starts_with("open")), "{l:?}");
}

#[tokio::test]
async fn a_socks4_greeting_tls_without_sni_and_garbage_get_a_clear_refusal() {
    let r = rig(Limits::default()).await;
    // SOCKS4 on the SOCKS port: its own "rejected" reply, recorded.
    let mut s = TcpStream::connect(r.socks).await.unwrap();
    s.write_all(&[4, 1, 0, 80, 93, 184, 216, 34, b'u', 0])
        .await
        .unwrap();
    assert_eq!(read_all(&mut s).await, [0, 0x5b, 0, 0, 0, 0, 0, 0]);
    // A ClientHello sent straight at the HTTP proxy: no request line.
    let mut s = TcpStream::connect(r.http).await.unwrap();
    let mut h = hello(Some("ok.example"));
    h.extend(b"\r\n\r\n");
    s.write_all(&h).await.unwrap();
    let out = String::from_utf8_lossy(&read_all(&mut s).await).into_owned();
    assert!(out.starts_with("HTTP/1.1 400"), "{out}");
    // TLS with no SNI through SOCKS5 to an allowed name: closed, recorded.
    let mut m = vec![5, 1, 0, 5, 1, 0, 3, 10];
    m.extend(b"ok.example");
    m.extend(r.port.to_be_bytes());
    let mut s = TcpStream::connect(r.socks).await.unwrap();
    s.write_all(&m).await.unwrap();
    assert_eq!(read_n(&mut s, 12).await[..4], [5, 0, 5, 0]);
    s.write_all(&hello(None)).await.unwrap();
    assert!(read_all(&mut s).await.is_empty());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let l = log(&r);
    assert!(
        l.iter()
            .any(|x| x == "bad a SOCKS4 greeting; only SOCKS5 is served"),
        "{l:?}"
    );
    assert!(
        l.iter()
            .any(|x| x == &format!("refused ok.example:{} network:sni", r.port)),
        "{l:?}"
    );
    assert!(!l.iter().any(|x| x.starts_with("open")), "{l:?}");
}

/// A listener whose accept queue is full: the kernel drops further SYNs,
/// so a connect to it never completes.
async fn unanswering_port() -> (u16, Vec<TcpStream>, TcpListener) {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind(SocketAddr::from((UPSTREAM, 0))).unwrap();
    let port = sock.local_addr().unwrap().port();
    let l = sock.listen(0).unwrap();
    let mut held = Vec::new();
    // Fill the queue; these are never accepted.
    for _ in 0..4 {
        let c = tokio::time::timeout(
            Duration::from_millis(300),
            TcpStream::connect(SocketAddr::from((UPSTREAM, port))),
        )
        .await;
        if let Ok(Ok(c)) = c {
            held.push(c);
        }
    }
    (port, held, l)
}

#[tokio::test]
async fn a_server_that_never_answers_is_a_bounded_wait_recorded() {
    let limits = Limits {
        connect_timeout: Duration::from_millis(500),
        idle_timeout: Duration::from_millis(400),
        ..Limits::default()
    };
    let r = rig(limits.clone()).await;
    // A server that accepts and then says nothing, whatever it is sent.
    let silent = TcpListener::bind(SocketAddr::from((UPSTREAM, 0)))
        .await
        .unwrap();
    let sport = silent.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut kept = Vec::new();
        while let Ok((c, _)) = silent.accept().await {
            kept.push(c);
        }
    });
    let c = NetworkConfig {
        allow: vec![format!("ok.example:{sport}")],
        ..NetworkConfig::default()
    };
    let proxy = Proxy::new(
        "s2".into(),
        TestGate {
            policy: NetworkPolicy::from_config(&c).unwrap(),
            exempt: Some(IpAddr::from(UPSTREAM)),
            names: [("ok.example".to_string(), IpAddr::from(UPSTREAM))].into(),
            log: Mutex::default(),
            resolved: Mutex::default(),
        },
        limits,
    );
    let hl = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = hl.local_addr().unwrap();
    tokio::spawn(tollgate_egress::serve_http(Arc::clone(&proxy), hl));
    let mut s = TcpStream::connect(http).await.unwrap();
    s.write_all(
        format!("GET http://ok.example:{sport}/ HTTP/1.1\r\nHost: ok.example:{sport}\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    // Read to the end: the proxy closes once nothing moved for the bound.
    let mut out = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut out))
        .await
        .expect("the relay never ended")
        .unwrap();
    assert_eq!(n, 0, "the silent server sent nothing");
    let l = proxy.gate.log.lock().unwrap().clone();
    assert!(l[0].starts_with("open ok.example:"), "{l:?}");
    assert!(
        l[1].starts_with("close 1 up=") && l[1].ends_with("down=0"),
        "{l:?}"
    );
    // A server whose accept queue is full never completes the handshake:
    // the connect is bounded and refused, naming it.
    let (port, _held, _listener) = unanswering_port().await;
    let c = NetworkConfig {
        allow: vec![format!("ok.example:{port}")],
        ..NetworkConfig::default()
    };
    let gate = TestGate {
        policy: NetworkPolicy::from_config(&c).unwrap(),
        exempt: Some(IpAddr::from(UPSTREAM)),
        names: [("ok.example".to_string(), IpAddr::from(UPSTREAM))].into(),
        log: Mutex::default(),
        resolved: Mutex::default(),
    };
    let p2 = Proxy::new("s3".into(), gate, r.proxy.limits.clone());
    let hl = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = hl.local_addr().unwrap();
    tokio::spawn(tollgate_egress::serve_http(Arc::clone(&p2), hl));
    let mut s = TcpStream::connect(http).await.unwrap();
    s.write_all(format!("CONNECT ok.example:{port} HTTP/1.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut out))
        .await
        .expect("the connect was not bounded")
        .unwrap();
    let out = String::from_utf8_lossy(&out).into_owned();
    assert!(
        out.starts_with("HTTP/1.1 403") && out.contains("rule=network:connect"),
        "{out}"
    );
    assert!(out.contains("did not accept within"), "{out}");
    assert_eq!(
        *p2.gate.log.lock().unwrap(),
        [format!("refused ok.example:{port} network:connect")]
    );
}

/// Raises this process's descriptor limit to its hard limit.
fn raise_nofile() -> u64 {
    let pid = std::process::id().to_string();
    let hard = std::process::Command::new("sh")
        .args(["-c", "ulimit -Hn"])
        .output()
        .unwrap();
    let hard = String::from_utf8(hard.stdout).unwrap().trim().to_string();
    let ok = std::process::Command::new("prlimit")
        .args(["--pid", &pid, &format!("--nofile={hard}:{hard}")])
        .status()
        .unwrap();
    assert!(ok.success(), "prlimit");
    hard.parse().unwrap_or(u64::MAX)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_connections_from_one_session_hit_its_cap_and_another_session_is_served() {
    const N: usize = 10_000;
    let hard = raise_nofile();
    assert!(
        hard > (N as u64) * 3 / 2,
        "the hard descriptor limit {hard} is too low for {N} connections"
    );
    let limits = Limits {
        head_timeout: Duration::from_secs(120),
        ..Limits::default()
    };
    let cap = limits.max_connections;
    let hog = rig(limits).await;
    let other = rig(Limits::default()).await;
    let mut held = Vec::with_capacity(N);
    for _ in 0..N {
        held.push(TcpStream::connect(hog.http).await.unwrap());
    }
    // The other session is served while the hog holds its cap.
    let (mut s, head) = connect_via_http(&other, &format!("ok.example:{}", other.port)).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    s.write_all(b"ping").await.unwrap();
    assert_eq!(read_n(&mut s, 4).await, b"ping");
    // Past the cap each one was refused at once, naming the cap.
    let mut refused = 0;
    for c in held.iter_mut().rev().take(50) {
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut out)).await;
        let out = String::from_utf8_lossy(&out);
        if out.contains("rule=network:connection-cap") {
            refused += 1;
        }
    }
    assert_eq!(refused, 50);
    assert!(hog.proxy.open_connections() <= cap);
    drop(held);
    // Once they are gone the hog's session is served again.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while hog.proxy.open_connections() > 0 {
        assert!(std::time::Instant::now() < deadline, "slots never freed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_s, head) = connect_via_http(&hog, &format!("ok.example:{}", hog.port)).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let bad = log(&hog).iter().filter(|l| l.starts_with("bad ")).count();
    assert!(bad >= N - cap, "{bad} refusals recorded");
}

#[tokio::test]
async fn a_later_request_on_a_kept_alive_connection_must_name_the_decided_host_too() {
    let r = rig(Limits::default()).await;
    let p = r.port;
    // Pipelined on the HTTP proxy: the first goes, the second (another
    // Host) is refused with a 403 once the server is done with the first.
    for second in [
        format!("GET http://ok.example:{p}/b HTTP/1.1\r\nHost: evil.example\r\n\r\n"),
        format!("GET http://other.example:{p}/b HTTP/1.1\r\nHost: other.example:{p}\r\n\r\n"),
    ] {
        let mut s = TcpStream::connect(r.http).await.unwrap();
        let first = format!(
            "GET http://ok.example:{p}/a HTTP/1.1\r\nHost: ok.example:{p}\r\nConnection: keep-alive\r\n\r\n"
        );
        s.write_all(format!("{first}{second}").as_bytes())
            .await
            .unwrap();
        let out = String::from_utf8(read_all(&mut s).await).unwrap();
        let echoed =
            format!("GET /a HTTP/1.1\r\nHost: ok.example:{p}\r\nConnection: close\r\n\r\n");
        assert!(out.starts_with(&echoed), "{out}");
        let refusal = &out[echoed.len()..];
        assert!(
            refusal.starts_with("HTTP/1.1 403")
                && refusal.contains(&format!(
                    "X-Tollgate-Refused: host=ok.example; port={p}; rule=network:host-header"
                )),
            "{out}"
        );
    }
    // Through a SOCKS5 tunnel, the head in small pieces: checked the same.
    let mut m = vec![5, 1, 0, 5, 1, 0, 3, 10];
    m.extend(b"ok.example");
    m.extend(p.to_be_bytes());
    let mut s = TcpStream::connect(r.socks).await.unwrap();
    s.write_all(&m).await.unwrap();
    assert_eq!(read_n(&mut s, 12).await[..4], [5, 0, 5, 0]);
    s.write_all(b"GE").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    s.write_all(b"T / HTTP/1.1\r\nHost: evil.example\r\n\r\n")
        .await
        .unwrap();
    let out = String::from_utf8(read_all(&mut s).await).unwrap();
    assert!(
        out.starts_with("HTTP/1.1 403") && out.contains("rule=network:host-header"),
        "{out}"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The server saw the first requests only, never a refused one.
    let seen = r.seen.lock().unwrap().clone();
    let seen: Vec<String> = seen
        .iter()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .collect();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(
        !seen.iter().any(|b| b.contains("/b") || b.contains("evil")),
        "{seen:?}"
    );
    let l = log(&r);
    let refused = format!("refused ok.example:{p} network:host-header");
    assert_eq!(l.iter().filter(|x| **x == refused).count(), 3, "{l:?}");
    // Each relayed connection still recorded its close.
    let opened = l.iter().filter(|x| x.starts_with("open ")).count();
    let closed = l.iter().filter(|x| x.starts_with("close ")).count();
    assert_eq!((opened, closed), (3, 3), "{l:?}");
}

#[tokio::test]
async fn stop_closes_open_connections_at_once_each_close_recorded() {
    let r = rig(Limits::default()).await;
    let t = format!("ok.example:{}", r.port);
    let mut held = Vec::new();
    for _ in 0..3 {
        let (mut s, head) = connect_via_http(&r, &t).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        s.write_all(b"ping").await.unwrap();
        assert_eq!(read_n(&mut s, 4).await, b"ping");
        held.push(s);
    }
    assert_eq!(r.proxy.open_connections(), 3);
    // What revoke and kill do to a session's wall.
    r.proxy.stop();
    for s in &mut held {
        let mut out = Vec::new();
        let n = tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut out))
            .await
            .expect("an open connection outlived the stop");
        assert!(n.is_err() || out.is_empty(), "{out:?}");
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while r.proxy.open_connections() > 0 {
        assert!(std::time::Instant::now() < deadline, "slots never freed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let l = log(&r);
    let closes: Vec<&String> = l.iter().filter(|x| x.starts_with("close ")).collect();
    assert_eq!(closes.len(), 3, "{l:?}");
    assert!(closes.iter().all(|c| c.ends_with("up=4 down=4")), "{l:?}");
    // A stopped wall refuses new connections.
    let (_s, head) = connect_via_http(&r, &t).await;
    assert!(head.starts_with("HTTP/1.1 400"), "{head}");
}

/// A small corporate proxy: `CONNECT host:port` only, names resolved from
/// its own map (argv: `name=address`, as a proxy with its own DNS would),
/// every CONNECT line logged to connects.log; an unknown name gets 403.
const CORP_PROXY: &str = r#"
import socket, sys, threading
names = dict(a.split("=") for a in sys.argv[2:])
def pipe(a, b):
    try:
        while True:
            d = a.recv(65536)
            if not d: break
            b.sendall(d)
    except OSError: pass
    try: b.shutdown(socket.SHUT_WR)
    except OSError: pass
def serve(c):
    head = b""
    while b"\r\n\r\n" not in head:
        d = c.recv(1)
        if not d: return
        head += d
    line = head.split(b"\r\n")[0].decode()
    open("connects.log", "a").write(line + "\n")
    method, target, _ = line.split(" ")
    host, port = target.rsplit(":", 1)
    if method != "CONNECT" or host not in names:
        c.sendall(b"HTTP/1.1 403 Forbidden by corp\r\nContent-Length: 0\r\n\r\n"); c.close(); return
    u = socket.create_connection((names[host], int(port)))
    c.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
    threading.Thread(target=pipe, args=(u, c), daemon=True).start()
    pipe(c, u)
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 3128)); s.listen(64)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

/// A corporate network in a namespace of its own: the proxy on the veth's
/// private address, a web server on a public-looking address that the host
/// has no way to (a blackhole route: nothing leaves the machine), so the
/// proxy is its only way. Undone on drop.
struct CorpNet {
    ns: String,
    host_if: String,
    route: String,
    children: Vec<std::process::Child>,
    proxy: SocketAddr,
    public: IpAddr,
    dir: tempfile::TempDir,
}

impl CorpNet {
    fn start() -> CorpNet {
        let k = std::process::id() % 60_000;
        let (public, host_side, peer_side) = (
            format!("93.184.{}.{}", 20 + (k + 7) % 200, 10 + k / 200 % 200),
            format!("10.218.{}.{}", k / 64 % 250, k % 64 * 4 + 1),
            format!("10.218.{}.{}", k / 64 % 250, k % 64 * 4 + 2),
        );
        let (ns, host_if, peer_if) = (format!("tg-corp-{k}"), format!("tgc{k}"), format!("tgd{k}"));
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &ns])
            .stderr(std::process::Stdio::null())
            .status();
        let route = format!("{public}/32");
        let mut net = CorpNet {
            ns: ns.clone(),
            host_if: host_if.clone(),
            route: route.clone(),
            children: Vec::new(),
            proxy: SocketAddr::new(peer_side.parse().unwrap(), 3128),
            public: public.parse().unwrap(),
            dir: tempfile::tempdir().unwrap(),
        };
        ip(&["route", "add", "blackhole", &route]);
        ip(&["netns", "add", &ns]);
        ip(&[
            "link", "add", &host_if, "type", "veth", "peer", "name", &peer_if,
        ]);
        ip(&["link", "set", &peer_if, "netns", &ns]);
        ip(&["addr", "add", &format!("{host_side}/30"), "dev", &host_if]);
        ip(&["link", "set", &host_if, "up"]);
        let peer = format!("{peer_side}/30");
        ip(&["-n", &ns, "addr", "add", &peer, "dev", &peer_if]);
        ip(&["-n", &ns, "addr", "add", &route, "dev", "lo"]);
        ip(&["-n", &ns, "link", "set", &peer_if, "up"]);
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        let run = |script: &str, args: &[String]| {
            std::process::Command::new("ip")
                .args(["netns", "exec", &ns, "python3", "-c", script])
                .args(args)
                .current_dir(net.dir.path())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        };
        let web = SERVER.replace("\"0.0.0.0\"", &format!("{public:?}"));
        let names = ["pub.example", "second.example"].map(|n| format!("{n}={public}"));
        let mut args = vec![peer_side.clone()];
        args.extend(names);
        net.children.push(run(&web, &[]));
        net.children.push(run(CORP_PROXY, &args));
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect_timeout(&net.proxy, Duration::from_millis(500)).is_err()
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the corp proxy did not come up"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        // And the web server behind it (Python starts slowly on a loaded
        // machine; the proxy would not answer a CONNECT to it before).
        let probe = format!("exec 3<>/dev/tcp/{public}/8080");
        while !std::process::Command::new("ip")
            .args(["netns", "exec", &ns, "bash", "-c", &probe])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the corp web server did not come up"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        net
    }

    fn connects(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("connects.log")).unwrap_or_default()
    }
}

impl Drop for CorpNet {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::process::Command::new("ip")
            .args(["link", "del", &self.host_if])
            .status();
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.ns])
            .status();
        let _ = std::process::Command::new("ip")
            .args(["route", "del", "blackhole", &self.route])
            .status();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upstream_proxy_is_the_way_out_and_every_check_still_applies() {
    assert_eq!(
        nix_uid(),
        0,
        "this test creates network namespaces: run it as root"
    );
    let corp = CorpNet::start();
    // The web server is reachable through the proxy only.
    let direct = std::net::TcpStream::connect_timeout(
        &SocketAddr::new(corp.public, 8080),
        Duration::from_secs(5),
    );
    assert!(direct.is_err(), "the host reaches the web server directly");
    let c = NetworkConfig {
        allow: [
            "pub.example:8080",
            "inward.example:8080",
            "nowhere.example:8080",
        ]
        .map(String::from)
        .to_vec(),
        upstream_proxy: Some(format!("http://{}", corp.proxy)),
        ..NetworkConfig::default()
    };
    let policy = NetworkPolicy::from_config(&c).unwrap();
    let upstream = policy.upstream_proxy().cloned();
    assert!(upstream.is_some());
    // The host's resolver knows one name only, and it resolves inward.
    let gate = TestGate {
        policy,
        exempt: None,
        names: [("inward.example".to_string(), IpAddr::from([127, 0, 0, 1]))].into(),
        log: Mutex::default(),
        resolved: Mutex::default(),
    };
    let options = tollgate_egress::Options {
        secrets: None,
        upstream,
    };
    let proxy = Proxy::with_options("s1".into(), gate, Limits::default(), options);
    let hl = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sl = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (http, socks) = (hl.local_addr().unwrap(), sl.local_addr().unwrap());
    tokio::spawn(tollgate_egress::serve_http(Arc::clone(&proxy), hl));
    tokio::spawn(tollgate_egress::serve_socks(Arc::clone(&proxy), sl));
    let curl = |args: Vec<String>| async move {
        let out = tokio::process::Command::new("curl")
            .args(["-sS", "-m", "20", "-i"])
            .args(args)
            .output()
            .await
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    };
    let via_http = |url: &str| vec!["-x".into(), format!("http://{http}"), url.to_string()];
    // Plain HTTP through the HTTP proxy, and by SOCKS5 name.
    let out = curl(via_http("http://pub.example:8080/x")).await;
    assert!(
        out.contains("200") && out.contains("host=pub.example:8080"),
        "{out}"
    );
    let out = curl(vec![
        "--socks5-hostname".into(),
        socks.to_string(),
        "http://pub.example:8080/y".into(),
    ])
    .await;
    assert!(out.contains("host=pub.example:8080"), "{out}");
    // Unlisted: refused by the decision, the proxy never asked.
    let out = curl(via_http("http://second.example:8080/")).await;
    assert!(
        out.contains("403")
            && out.contains("host=second.example; port=8080; rule=network:unlisted"),
        "{out}"
    );
    // An allowed name the host resolves inward: the SSRF guard refuses it.
    let out = curl(via_http("http://inward.example:8080/")).await;
    assert!(
        out.contains("403") && out.contains("rule=floor:ssrf"),
        "{out}"
    );
    // The proxy's own refusal comes back naming it.
    let out = curl(via_http("http://nowhere.example:8080/")).await;
    assert!(
        out.contains("403")
            && out.contains("rule=network:upstream-proxy")
            && out.contains("Forbidden by corp"),
        "{out}"
    );
    // Fronting: a later request naming another host is refused here, and
    // never reaches the proxy's tunnel.
    let mut s = TcpStream::connect(http).await.unwrap();
    s.write_all(b"GET http://pub.example:8080/a HTTP/1.1\r\nHost: pub.example:8080\r\n\r\nGET http://pub.example:8080/b HTTP/1.1\r\nHost: second.example:8080\r\n\r\n").await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut out))
        .await
        .unwrap()
        .unwrap();
    let out = String::from_utf8_lossy(&out);
    assert!(out.contains("host=pub.example:8080\n"), "{out}");
    assert!(out.contains("rule=network:host-header"), "{out}");
    assert!(!out.contains("host=second.example"), "{out}");
    let connects = corp.connects();
    let expected =
        "CONNECT pub.example:8080 HTTP/1.1\n".repeat(3) + "CONNECT nowhere.example:8080 HTTP/1.1\n";
    let mut got: Vec<&str> = connects.lines().collect();
    got.sort();
    let mut want: Vec<&str> = expected.lines().collect();
    want.sort();
    assert_eq!(got, want, "{connects}");
    // Records name the proxy's address; the host resolved no allowed
    // name but to vet it.
    let l = proxy.gate.log.lock().unwrap().clone();
    let opened = format!("open pub.example:8080 {} pub.example:8080", corp.proxy);
    assert_eq!(l.iter().filter(|x| **x == opened).count(), 3, "{l:?}");
    assert!(
        l.contains(&"refused nowhere.example:8080 network:upstream-proxy".to_string()),
        "{l:?}"
    );
    let resolved = proxy.gate.resolved.lock().unwrap().clone();
    assert!(
        !resolved.iter().any(|n| n == "second.example"),
        "{resolved:?}"
    );
}

/// A tunnel's bytes go by splice(2) once decided: many MiB each way,
/// byte for byte, half-closes passed on, and the close record counts them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_tunnel_is_carried_byte_for_byte_both_ways_and_counted() {
    const N: usize = 8 << 20;
    let r = rig(Limits::default()).await;
    let (s, head) = connect_via_http(&r, &format!("ok.example:{}", r.port)).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // Neither TLS nor HTTP: relayed as is (the echo server sends it back).
    let sent: Vec<u8> = (0..N).map(|i| (i % 251) as u8).collect();
    let (mut rd, mut wr) = s.into_split();
    let out = sent.clone();
    let writer = tokio::spawn(async move {
        wr.write_all(&out).await.unwrap();
        wr.shutdown().await.unwrap();
    });
    let mut got = Vec::with_capacity(N);
    tokio::time::timeout(Duration::from_secs(60), rd.read_to_end(&mut got))
        .await
        .expect("the echo did not end")
        .unwrap();
    writer.await.unwrap();
    assert_eq!(got.len(), N);
    assert!(got == sent, "the bytes came back changed");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while r.proxy.open_connections() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the slot was never freed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let l = log(&r);
    assert_eq!(l[1], format!("close 1 up={N} down={N}"), "{l:?}");
}
