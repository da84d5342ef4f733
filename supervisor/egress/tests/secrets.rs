//! Secrets through the proxies, over real sockets to test hosts in a
//! network namespace (a veth pair, documentation-range addresses): an
//! https server on the bound host that requires the token, a second host
//! no secret of one kind is bound to, real curl as the sandbox's client
//! where it can say what is tested, a rustls client where the bytes must
//! be chosen (a folded header, smuggling, ALPN, WebSocket, pinning).
//! Needs root (namespaces, veth); without it every test fails, none skips.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tollgate_egress::{
    ConnId, ConnRequest, ConnStats, ConnectionGate, GateVerdict, Limits, Proxy, Refusal,
    SecretCounters, SecretUse, SessionSecret, SessionSecrets,
};
use tollgate_policy::HostAddrs;
use tollgate_policy::network::{NetVerdict, NetworkConfig, NetworkPolicy};
use tollgate_policy::secrets::SecretBinding;

const FORGE: &str = "REAL-forge-7f3c9a41d2";
const OTHER: &str = "REAL-other-55e1b0c9aa";
const KEY: &str = "REAL-key-0b9d77e3";

// ---- the test hosts ----

static NEXT_NET: AtomicU8 = AtomicU8::new(1);

/// A network namespace joined to the host by a veth pair: the host side
/// is `.1`, the namespace holds `.2` (the bound host) and `.3` (the
/// other host) of its own 192.0.2.0/29 block (TEST-NET-1).
struct TestNet {
    ns: String,
    veth: String,
    base: u8,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl TestNet {
    fn new() -> TestNet {
        assert!(
            nix::unistd::geteuid().is_root(),
            "these tests make network namespaces and veth pairs: run them as root"
        );
        let k = NEXT_NET.fetch_add(1, Ordering::Relaxed);
        assert!(k < 32, "at most 31 test networks per process");
        let tag = format!("{}{k}", std::process::id() % 10000);
        let (ns, veth, peer) = (
            format!("tgsec{tag}"),
            format!("tgs{tag}a"),
            format!("tgs{tag}b"),
        );
        let base = k * 8;
        let a = |n: u8| format!("192.0.2.{}/29", base + n);
        ip(&["netns", "add", &ns]);
        ip(&["link", "add", &veth, "type", "veth", "peer", "name", &peer]);
        ip(&["link", "set", &peer, "netns", &ns]);
        ip(&["addr", "add", &a(1), "dev", &veth]);
        ip(&["link", "set", &veth, "up"]);
        for n in [2, 3] {
            ip(&["-n", &ns, "addr", "add", &a(n), "dev", &peer]);
        }
        ip(&["-n", &ns, "link", "set", &peer, "up"]);
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        TestNet { ns, veth, base }
    }

    fn addr(&self, n: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(192, 0, 2, self.base + n))
    }

    /// A listener on `addr:port` inside the namespace.
    fn listen(&self, addr: IpAddr, port: u16) -> TcpListener {
        let path = format!("/var/run/netns/{}", self.ns);
        let l = std::thread::spawn(move || {
            let f = std::fs::File::open(&path).unwrap();
            nix::sched::setns(f.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            let l = std::net::TcpListener::bind(SocketAddr::new(addr, port)).unwrap();
            l.set_nonblocking(true).unwrap();
            l
        })
        .join()
        .unwrap();
        TcpListener::from_std(l).unwrap()
    }
}

impl Drop for TestNet {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
        // Deleting the namespace took the pair with it, usually.
        let _ = Command::new("ip")
            .args(["link", "del", &self.veth])
            .output();
    }
}

/// The hosts' own CA (standing for a public one) and a leaf for `names`.
struct HostCa {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

impl HostCa {
    fn new() -> HostCa {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name
            .push(rcgen::DnType::CommonName, "test hosts' CA");
        let cert = p.self_signed(&key).unwrap();
        HostCa {
            pem: cert.pem(),
            issuer: Issuer::new(p, key),
        }
    }

    fn server(&self, names: &[&str]) -> Arc<rustls::ServerConfig> {
        let key = KeyPair::generate().unwrap();
        let p = CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .unwrap();
        let leaf = p.signed_by(&key, &self.issuer).unwrap();
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut c = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der().clone()], der)
        .unwrap();
        c.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(c)
    }
}

/// What a test server received: each request head, and the ALPN agreed.
type Seen = Arc<Mutex<Vec<String>>>;

async fn read_head<S: AsyncRead + Unpin>(s: &mut S) -> String {
    let mut buf = Vec::new();
    let mut b = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        match s.read(&mut b).await {
            Ok(1) => buf.push(b[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&buf).into_owned()
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.split("\r\n").skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Answers one request: `/ws` upgrades and echoes, `/reflect` returns the
/// token in its body, anything else needs `Authorization: Bearer FORGE`.
async fn answer<S: AsyncRead + AsyncWrite + Unpin>(mut s: S, seen: Seen) {
    let head = read_head(&mut s).await;
    seen.lock().unwrap().push(head.clone());
    let authorised = header(&head, "authorization") == Some(&format!("Bearer {FORGE}"));
    let path = head.split(' ').nth(1).unwrap_or("");
    if path == "/ws" && authorised && header(&head, "upgrade") == Some("websocket") {
        let _ = s
            .write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
            .await;
        let mut b = [0u8; 256];
        while let Ok(n) = s.read(&mut b).await {
            if n == 0 || s.write_all(&b[..n]).await.is_err() {
                break;
            }
        }
        return;
    }
    let (status, body) = match (path, authorised) {
        ("/reflect", _) => ("200 OK", format!("you sent {FORGE} and {FORGE}.\n")),
        (_, true) => ("200 OK", "welcome\n".to_string()),
        (_, false) => ("401 Unauthorized", "no token\n".to_string()),
    };
    let _ = s
        .write_all(
            format!(
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .await;
    let _ = s.shutdown().await;
}

fn serve_tls(l: TcpListener, config: Arc<rustls::ServerConfig>) -> Seen {
    let seen = Seen::default();
    let s2 = Arc::clone(&seen);
    tokio::spawn(async move {
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        while let Ok((c, _)) = l.accept().await {
            let (acceptor, seen) = (acceptor.clone(), Arc::clone(&s2));
            tokio::spawn(async move {
                if let Ok(t) = acceptor.accept(c).await {
                    answer(t, seen).await;
                }
            });
        }
    });
    seen
}

fn serve_plain(l: TcpListener) -> Seen {
    let seen = Seen::default();
    let s2 = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((c, _)) = l.accept().await {
            tokio::spawn(answer(c, Arc::clone(&s2)));
        }
    });
    seen
}

/// Answers every request on a connection with `ok` and keeps it open,
/// whatever the request asks: each head recorded after `#N ` (the
/// connection's number), so two heads of one connection can be told.
fn serve_kept_alive(l: TcpListener) -> Seen {
    let seen = Seen::default();
    let s2 = Arc::clone(&seen);
    tokio::spawn(async move {
        let mut n = 0;
        while let Ok((mut c, _)) = l.accept().await {
            n += 1;
            let seen = Arc::clone(&s2);
            tokio::spawn(async move {
                loop {
                    let head = read_head(&mut c).await;
                    if !head.ends_with("\r\n\r\n") {
                        return;
                    }
                    seen.lock().unwrap().push(format!("#{n} {head}"));
                    let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n";
                    if c.write_all(ok).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    seen
}

// ---- the gate ----

struct TestGate {
    policy: NetworkPolicy,
    names: HashMap<String, IpAddr>,
    log: Mutex<Vec<String>>,
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
        self.policy
            .vet_address(ip, HostAddrs::none(), &req.host.to_string())
    }
    async fn resolve(&self, name: &str, _port: u16) -> std::io::Result<Vec<IpAddr>> {
        self.names
            .get(name)
            .map(|ip| vec![*ip])
            .ok_or_else(|| std::io::Error::other("NXDOMAIN"))
    }
    fn opened(&self, req: &ConnRequest, addr: SocketAddr, _rule: &str) -> Result<ConnId, String> {
        let mut l = self.log.lock().unwrap();
        l.push(format!("open {} {addr}", req.target()));
        Ok(ConnId(l.len() as u64))
    }
    fn refused(&self, req: &ConnRequest, r: &Refusal) {
        self.log
            .lock()
            .unwrap()
            .push(format!("refused {} {}: {}", req.target(), r.rule, r.reason));
    }
    fn bad_request(&self, _session: &str, _peer: SocketAddr, why: &str) {
        self.log.lock().unwrap().push(format!("bad {why}"));
    }
    fn closed(&self, id: ConnId, _s: ConnStats) {
        self.log.lock().unwrap().push(format!("close {}", id.0));
    }
    fn secret(&self, req: &ConnRequest, conn: Option<ConnId>, e: SecretUse<'_>) {
        let what = match e.stripped {
            None => "put".to_string(),
            Some(why) => format!("stripped ({why})"),
        };
        self.log.lock().unwrap().push(format!(
            "secret {} {} conn={:?} {what}",
            e.secret,
            req.target(),
            conn.map(|c| c.0)
        ));
    }
}

// ---- the rig ----

struct Rig {
    _net: TestNet,
    _dir: tempfile::TempDir,
    proxy: Arc<Proxy<TestGate>>,
    http: SocketAddr,
    secrets: Arc<SessionSecrets>,
    /// The session CA, as the sandbox's bundle would hold it.
    bundle: PathBuf,
    host_ca: PathBuf,
    bound: Seen,
    other: Seen,
    other_plain: Seen,
    counters: HashMap<&'static str, Arc<SecretCounters>>,
}

fn secret(
    name: &'static str,
    value: &str,
    host: &str,
    header: Option<(&str, &str)>,
) -> (SessionSecret, Arc<SecretCounters>) {
    let binding = SecretBinding::parse(
        name,
        &[host.to_string()],
        header.map(|h| h.0),
        header.map(|h| h.1),
    )
    .unwrap();
    let counters = Arc::new(SecretCounters::default());
    let s = SessionSecret {
        binding: Arc::new(binding),
        value: value.into(),
        env: Some(format!("{}_TOKEN", name.to_uppercase())),
        counters: Arc::clone(&counters),
    };
    (s, counters)
}

/// `trust_host_ca`: whether the proxy trusts the hosts' CA (as
/// `[network] trust_ca` would make it).
async fn rig(trust_host_ca: bool) -> Rig {
    let net = TestNet::new();
    let ca = HostCa::new();
    let dir = tempfile::tempdir().unwrap();
    let host_ca = dir.path().join("hosts-ca.pem");
    std::fs::write(&host_ca, &ca.pem).unwrap();
    let bound = serve_tls(net.listen(net.addr(2), 443), ca.server(&["bound.example"]));
    let other = serve_tls(
        net.listen(net.addr(3), 443),
        ca.server(&["other.example", "plain.example"]),
    );
    let other_plain = serve_plain(net.listen(net.addr(3), 80));
    let mut counters = HashMap::new();
    let mut list = Vec::new();
    for (name, value, host, header) in [
        ("forge", FORGE, "bound.example", None),
        ("other", OTHER, "other.example", None),
        ("key", KEY, "bound.example", Some(("X-Api-Key", "key={}"))),
    ] {
        let (s, c) = secret(name, value, host, header);
        list.push(s);
        counters.insert(name, c);
    }
    let trust: Vec<PathBuf> = if trust_host_ca {
        vec![host_ca.clone()]
    } else {
        vec![]
    };
    let secrets = Arc::new(SessionSecrets::new("s-test", list, &trust).unwrap());
    let bundle = dir.path().join("session-ca.pem");
    std::fs::write(&bundle, secrets.ca_pem()).unwrap();
    let policy = NetworkPolicy::from_config(&NetworkConfig {
        allow: vec![
            "bound.example".into(),
            "other.example".into(),
            "plain.example".into(),
            "kept.example:8080".into(),
        ],
        allow_private: vec![format!("{}/29", net.addr(0))],
        ..NetworkConfig::default()
    })
    .unwrap();
    let names = HashMap::from([
        ("bound.example".to_string(), net.addr(2)),
        ("other.example".to_string(), net.addr(3)),
        ("plain.example".to_string(), net.addr(3)),
        ("kept.example".to_string(), net.addr(3)),
    ]);
    let gate = TestGate {
        policy,
        names,
        log: Mutex::default(),
    };
    let proxy = Proxy::with_secrets(
        "s-test".into(),
        gate,
        Limits::default(),
        Some(Arc::clone(&secrets)),
    );
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = l.local_addr().unwrap();
    tokio::spawn(tollgate_egress::serve_http(Arc::clone(&proxy), l));
    Rig {
        _net: net,
        _dir: dir,
        proxy,
        http,
        secrets,
        bundle,
        host_ca,
        bound,
        other,
        other_plain,
        counters,
    }
}

impl Rig {
    fn placeholder(&self, env: &str) -> String {
        self.secrets
            .env()
            .into_iter()
            .find(|(k, _)| k == env)
            .unwrap()
            .1
    }

    fn log(&self) -> Vec<String> {
        self.proxy.gate.log.lock().unwrap().clone()
    }

    /// The gate's log once a line holding `want` is in it: a refusal is
    /// recorded by the proxy's task, which may finish after the client.
    async fn logged(&self, want: &str) -> Vec<String> {
        for _ in 0..200 {
            let log = self.log();
            if log.iter().any(|l| l.contains(want)) {
                return log;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("no {want:?} in {:?}", self.log());
    }

    /// curl through the proxy, trusting `cacert`; (exit code, stdout, stderr).
    async fn curl(&self, cacert: &std::path::Path, args: &[&str]) -> (i32, String, String) {
        let out = tokio::process::Command::new("curl")
            .args(["-sS", "--max-time", "20", "--noproxy", ""])
            .arg("--proxy")
            .arg(format!("http://{}", self.http))
            .arg("--cacert")
            .arg(cacert)
            .args(args)
            .env_clear()
            .output()
            .await
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// A TLS connection to `host:443` through the proxy's CONNECT, trusting
    /// the session CA, offering `alpn`.
    async fn tls(
        &self,
        host: &str,
        alpn: &[&[u8]],
    ) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let mut s = TcpStream::connect(self.http).await?;
        s.write_all(format!("CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n").as_bytes())
            .await?;
        let head = read_head(&mut s).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(self.secrets.ca_pem().as_bytes()).unwrap())
            .unwrap();
        let mut c = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        c.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
        let name = ServerName::try_from(host.to_string()).unwrap();
        tokio_rustls::TlsConnector::from(Arc::new(c))
            .connect(name, s)
            .await
    }

    /// Sends `request` raw inside TLS to `host`; returns the whole answer.
    async fn raw(&self, host: &str, request: &str) -> String {
        let mut t = self.tls(host, &[b"http/1.1"]).await.unwrap();
        t.write_all(request.as_bytes()).await.unwrap();
        let mut out = Vec::new();
        let _ = t.read_to_end(&mut out).await;
        String::from_utf8_lossy(&out).into_owned()
    }
}

fn no_value_in(seen: &Seen) {
    for h in seen.lock().unwrap().iter() {
        for v in [FORGE, OTHER, KEY] {
            assert!(!h.contains(v) || h.contains("Bearer"), "{v} in {h}");
        }
    }
}

// ---- the tests ----

#[tokio::test]
async fn curl_with_the_placeholder_reaches_the_bound_host_with_the_real_token() {
    let r = rig(true).await;
    let ph = r.placeholder("FORGE_TOKEN");
    assert!(ph.starts_with("tollgate-secret-forge-") && !ph.contains(FORGE));
    let auth = format!("Authorization: Bearer {ph}");
    let (code, out, err) = r
        .curl(&r.bundle, &["-H", &auth, "https://bound.example/"])
        .await;
    assert_eq!((code, out.as_str()), (0, "welcome\n"), "{err}");
    let heads = r.bound.lock().unwrap().clone();
    assert_eq!(
        header(&heads[0], "authorization"),
        Some(&*format!("Bearer {FORGE}"))
    );
    assert_eq!(
        header(&heads[0], "x-api-key"),
        Some(&*format!("key={KEY}")),
        "the configured header is set"
    );
    assert_eq!(header(&heads[0], "connection"), Some("close"));
    let log = r.log();
    assert!(
        log.iter()
            .any(|l| l.starts_with("secret forge bound.example:443 conn=Some(1) put")),
        "{log:?}"
    );
    assert!(
        log.iter()
            .any(|l| l.starts_with("secret key bound.example:443 conn=Some(1) put")),
        "{log:?}"
    );
    assert!(
        log.iter().all(|l| !l.contains(FORGE) && !l.contains(KEY)),
        "{log:?}"
    );
    assert_eq!(r.counters["forge"].uses.load(Ordering::Relaxed), 1);
    // Without the placeholder the host answers 401: the token came from the proxy.
    let (_, out, _) = r.curl(&r.bundle, &["https://bound.example/"]).await;
    assert_eq!(out, "no token\n");
}

#[tokio::test]
async fn basic_credentials_with_the_placeholder_as_password_are_rewritten_as_git_sends_them() {
    use base64::Engine as _;
    let r = rig(true).await;
    let ph = r.placeholder("FORGE_TOKEN");
    let (code, _, err) = r
        .curl(
            &r.bundle,
            &[
                "-u",
                &format!("git:{ph}"),
                "https://bound.example/info/refs",
            ],
        )
        .await;
    assert_eq!(code, 0, "{err}");
    let heads = r.bound.lock().unwrap().clone();
    let want = base64::engine::general_purpose::STANDARD.encode(format!("git:{FORGE}"));
    assert_eq!(
        header(&heads[0], "authorization"),
        Some(&*format!("Basic {want}"))
    );
}

#[tokio::test]
async fn the_placeholder_to_an_unbound_host_over_plain_http_arrives_stripped_and_recorded() {
    let r = rig(true).await;
    let ph = r.placeholder("FORGE_TOKEN");
    let auth = format!("Authorization: Bearer {ph}");
    let (code, out, err) = r
        .curl(
            &r.bundle,
            &["-H", &auth, "-H", "X-Kept: yes", "http://other.example/"],
        )
        .await;
    assert_eq!((code, out.as_str()), (0, "no token\n"), "{err}");
    let heads = r.other_plain.lock().unwrap().clone();
    assert_eq!(header(&heads[0], "authorization"), None, "{}", heads[0]);
    assert_eq!(header(&heads[0], "x-kept"), Some("yes"));
    assert!(!heads[0].contains(&ph) && !heads[0].contains(FORGE));
    let log = r.log();
    assert!(log.iter().any(|l| l.starts_with("secret forge other.example:80 conn=None stripped (the secret is not bound to other.example:80)")), "{log:?}");
    assert_eq!(r.counters["forge"].stripped.load(Ordering::Relaxed), 1);
    // Plain HTTP to the bound host does not carry it either.
    let (_, out, _) = r
        .curl(&r.bundle, &["-H", &auth, "http://bound.example:443/"])
        .await;
    let _ = out;
    let log = r.log();
    assert!(
        log.iter().any(|l| l.contains(
            "secret forge bound.example:443 conn=None stripped (a secret is put in only inside TLS"
        )),
        "{log:?}"
    );
}

/// Reads from `s` until `n` answers of [`serve_kept_alive`] came.
async fn answers(s: &mut TcpStream, n: usize) -> String {
    let mut got = Vec::new();
    let mut b = [0u8; 4096];
    let read = async {
        while String::from_utf8_lossy(&got)
            .matches("\r\n\r\nok\n")
            .count()
            < n
        {
            match s.read(&mut b).await {
                Ok(0) | Err(_) => break,
                Ok(k) => got.extend_from_slice(&b[..k]),
            }
        }
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), read).await;
    String::from_utf8_lossy(&got).into_owned()
}

/// The heads `seen` got on the connection whose first head asked for `first`.
fn heads_with(seen: &Seen, first: &str) -> Vec<String> {
    let all = seen.lock().unwrap().clone();
    let conn = all
        .iter()
        .find(|h| h.contains(first))
        .and_then(|h| h.split(' ').next())
        .unwrap_or_else(|| panic!("no {first} in {all:?}"))
        .to_string();
    all.into_iter()
        .filter(|h| h.split(' ').next() == Some(&conn))
        .collect()
}

#[tokio::test]
async fn a_placeholder_on_a_later_request_of_a_kept_alive_connection_or_in_a_tunnel_is_stripped_and_recorded()
 {
    let r = rig(true).await;
    let seen = serve_kept_alive(r._net.listen(r._net.addr(3), 8080));
    let ph = r.placeholder("FORGE_TOKEN");
    let url = "http://kept.example:8080";
    // The HTTP proxy: the first request clean, the second on the same
    // connection carrying the placeholder.
    let mut s = TcpStream::connect(r.http).await.unwrap();
    let two = format!(
        "GET {url}/one HTTP/1.1\r\nHost: kept.example:8080\r\n\r\nGET {url}/two HTTP/1.1\r\nHost: kept.example:8080\r\nAuthorization: Bearer {ph}\r\nX-Kept: yes\r\n\r\n"
    );
    s.write_all(two.as_bytes()).await.unwrap();
    let got = answers(&mut s, 2).await;
    assert_eq!(got.matches("200 OK").count(), 2, "{got}");
    drop(s);
    let heads = heads_with(&seen, "GET /one ");
    assert_eq!(heads.len(), 2, "one connection, two requests: {heads:?}");
    assert!(heads[1].contains("GET /two "), "{heads:?}");
    assert_eq!(header(&heads[1], "authorization"), None, "{}", heads[1]);
    assert_eq!(header(&heads[1], "x-kept"), Some("yes"), "{}", heads[1]);
    let stripped = "secret forge kept.example:8080 conn=Some(";
    let why = ") stripped (the secret is not bound to kept.example:8080)";
    let log = r.logged(stripped).await;
    let line = log.iter().find(|l| l.starts_with(stripped)).unwrap();
    assert!(line.ends_with(why), "{log:?}");
    // A CONNECT tunnel carrying plain HTTP: its first and its later heads.
    let mut s = TcpStream::connect(r.http).await.unwrap();
    s.write_all(b"CONNECT kept.example:8080 HTTP/1.1\r\nHost: kept.example:8080\r\n\r\n")
        .await
        .unwrap();
    let head = read_head(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let two = format!(
        "GET /three HTTP/1.1\r\nHost: kept.example:8080\r\nX-Token: {ph}\r\n\r\nGET /four HTTP/1.1\r\nHost: kept.example:8080\r\nAuthorization: Bearer {ph}\r\n\r\n"
    );
    s.write_all(two.as_bytes()).await.unwrap();
    let got = answers(&mut s, 2).await;
    assert_eq!(got.matches("200 OK").count(), 2, "{got}");
    drop(s);
    let heads = heads_with(&seen, "GET /three ");
    assert_eq!(heads.len(), 2, "{heads:?}");
    assert_eq!(header(&heads[0], "x-token"), None, "{}", heads[0]);
    assert_eq!(header(&heads[1], "authorization"), None, "{}", heads[1]);
    for h in seen.lock().unwrap().iter() {
        assert!(!h.contains(&ph) && !h.contains(FORGE), "{h}");
    }
    for _ in 0..200 {
        if r.counters["forge"].stripped.load(Ordering::Relaxed) == 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(r.counters["forge"].stripped.load(Ordering::Relaxed), 3);
    let log = r.log();
    let lines: Vec<&String> = log.iter().filter(|l| l.starts_with(stripped)).collect();
    assert_eq!(lines.len(), 3, "{log:?}");
    assert!(lines.iter().all(|l| l.ends_with(why)), "{log:?}");
}

#[tokio::test]
async fn another_secrets_placeholder_on_a_terminated_connection_is_stripped() {
    let r = rig(true).await;
    let other_ph = r.placeholder("OTHER_TOKEN");
    let forge_ph = r.placeholder("FORGE_TOKEN");
    let (code, out, err) = r
        .curl(
            &r.bundle,
            &[
                "-H",
                &format!("Authorization: Bearer {forge_ph}"),
                "-H",
                &format!("X-Leak: {other_ph}"),
                "https://bound.example/",
            ],
        )
        .await;
    assert_eq!((code, out.as_str()), (0, "welcome\n"), "{err}");
    let h = r.bound.lock().unwrap()[0].clone();
    assert_eq!(header(&h, "x-leak"), None, "{h}");
    assert!(!h.contains(OTHER));
    let log = r.log();
    assert!(log.iter().any(|l| l.starts_with("secret other bound.example:443 conn=Some(1) stripped (the secret is not bound to bound.example:443)")), "{log:?}");
}

#[tokio::test]
async fn https_to_a_host_no_secret_is_bound_to_stays_end_to_end() {
    let r = rig(true).await;
    let ph = r.placeholder("FORGE_TOKEN");
    // Trusting only the hosts' CA: it succeeds only if the proxy did not
    // terminate (the session CA would not verify).
    let (code, out, err) = r
        .curl(
            &r.host_ca,
            &[
                "-H",
                &format!("Authorization: Bearer {ph}"),
                "https://plain.example/",
            ],
        )
        .await;
    assert_eq!((code, out.as_str()), (0, "no token\n"), "{err}");
    let h = r.other.lock().unwrap()[0].clone();
    assert_eq!(
        header(&h, "authorization"),
        Some(&*format!("Bearer {ph}")),
        "the placeholder, worthless, never the value"
    );
    no_value_in(&r.other);
}

#[tokio::test]
async fn a_placeholder_split_across_two_header_lines_is_refused_or_never_assembled() {
    let r = rig(true).await;
    let ph = r.placeholder("FORGE_TOKEN");
    let (a, b) = ph.split_at(20);
    let folded = format!(
        "GET / HTTP/1.1\r\nHost: bound.example\r\nAuthorization: Bearer {a}\r\n {b}\r\n\r\n"
    );
    let answer = r.raw("bound.example", &folded).await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(
        answer.contains("rule=network:secret-request") && answer.contains("folded header line"),
        "{answer}"
    );
    let two = format!("GET / HTTP/1.1\r\nHost: bound.example\r\nX-A: {a}\r\nX-B: {b}\r\n\r\n");
    let answer = r.raw("bound.example", &two).await;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    let seen = r.bound.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "the folded request never reached the host");
    assert_eq!(
        (header(&seen[0], "x-a"), header(&seen[0], "x-b")),
        (Some(a), Some(b))
    );
    assert!(!seen[0].contains(FORGE));
}

#[tokio::test]
async fn transfer_encoding_with_content_length_is_refused_before_the_host_sees_it() {
    let r = rig(true).await;
    let ph = r.placeholder("FORGE_TOKEN");
    let smuggle = format!(
        "POST / HTTP/1.1\r\nHost: bound.example\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\nAuthorization: Bearer {ph}\r\n\r\n0\r\n\r\nGET /admin HTTP/1.1\r\nHost: bound.example\r\n\r\n"
    );
    let answer = r.raw("bound.example", &smuggle).await;
    assert!(
        answer.starts_with("HTTP/1.1 403") && answer.contains("request smuggling"),
        "{answer}"
    );
    let dup =
        "GET / HTTP/1.1\r\nHost: bound.example\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n";
    let answer = r.raw("bound.example", dup).await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    let other_host =
        format!("GET / HTTP/1.1\r\nHost: other.example\r\nAuthorization: Bearer {ph}\r\n\r\n");
    let answer = r.raw("bound.example", &other_host).await;
    assert!(
        answer.starts_with("HTTP/1.1 403") && answer.contains("differs from bound.example:443"),
        "{answer}"
    );
    assert!(
        r.bound.lock().unwrap().is_empty(),
        "none of them reached the host"
    );
    assert_eq!(r.counters["forge"].uses.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn http2_gets_http1_and_an_h2_only_client_is_refused_with_a_reason() {
    let r = rig(true).await;
    let ph = r.placeholder("FORGE_TOKEN");
    let (code, out, err) = r
        .curl(
            &r.bundle,
            &[
                "--http2",
                "-H",
                &format!("Authorization: Bearer {ph}"),
                "https://bound.example/",
            ],
        )
        .await;
    assert_eq!((code, out.as_str()), (0, "welcome\n"), "{err}");
    let t = r.tls("bound.example", &[b"h2", b"http/1.1"]).await.unwrap();
    assert_eq!(t.get_ref().1.alpn_protocol(), Some(b"http/1.1".as_slice()));
    drop(t);
    assert!(r.tls("bound.example", &[b"h2"]).await.is_err());
    r.logged("network:secret-tls: the client offered no HTTP/1.1")
        .await;
}

#[tokio::test]
async fn a_websocket_upgrade_to_a_bound_host_carries_the_token_and_relays_both_ways() {
    let r = rig(true).await;
    let ph = r.placeholder("FORGE_TOKEN");
    let mut t = r.tls("bound.example", &[b"http/1.1"]).await.unwrap();
    let up = format!(
        "GET /ws HTTP/1.1\r\nHost: bound.example\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nAuthorization: Bearer {ph}\r\n\r\n"
    );
    t.write_all(up.as_bytes()).await.unwrap();
    let head = read_head(&mut t).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    for msg in [b"frame one".as_slice(), b"frame two"] {
        t.write_all(msg).await.unwrap();
        let mut got = vec![0u8; msg.len()];
        t.read_exact(&mut got).await.unwrap();
        assert_eq!(got, msg);
    }
    let h = r.bound.lock().unwrap()[0].clone();
    assert_eq!(header(&h, "connection"), Some("Upgrade"));
    assert_eq!(
        header(&h, "authorization"),
        Some(&*format!("Bearer {FORGE}"))
    );
}

#[tokio::test]
async fn a_client_pinning_certificates_is_refused_with_a_reason() {
    let r = rig(true).await;
    let ph = r.placeholder("FORGE_TOKEN");
    // Trusting only the host's real CA, as a client pinning it would.
    let (code, _, err) = r
        .curl(
            &r.host_ca,
            &[
                "-H",
                &format!("Authorization: Bearer {ph}"),
                "https://bound.example/",
            ],
        )
        .await;
    assert_ne!(code, 0, "{err}");
    r.logged("refused bound.example:443 network:secret-tls: the client refused the session's certificate").await;
    // A public-key pin: the handshake completes, then the client leaves.
    let (code, _, err) = r
        .curl(
            &r.bundle,
            &[
                "--pinnedpubkey",
                "sha256//AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
                "https://bound.example/",
            ],
        )
        .await;
    assert_eq!(code, 90, "{err}");
    r.logged("network:secret-tls: the client closed the connection to bound.example:443 after the TLS handshake").await;
    assert!(
        r.bound.lock().unwrap().is_empty(),
        "nothing was sent on, with or without the secret"
    );
}

#[tokio::test]
async fn a_value_reflected_in_the_answer_is_masked_keeping_its_length() {
    let r = rig(true).await;
    let (code, out, err) = r.curl(&r.bundle, &["https://bound.example/reflect"]).await;
    assert_eq!(code, 0, "{err}");
    let stars = "*".repeat(FORGE.len());
    assert_eq!(out, format!("you sent {stars} and {stars}.\n"));
}

#[tokio::test]
async fn a_host_the_proxy_cannot_verify_gets_no_secret() {
    let r = rig(false).await;
    let ph = r.placeholder("FORGE_TOKEN");
    let (code, out, err) = r
        .curl(
            &r.bundle,
            &[
                "-i",
                "-H",
                &format!("Authorization: Bearer {ph}"),
                "https://bound.example/",
            ],
        )
        .await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("\r\n\r\nHTTP/1.1 502 Bad Gateway\r\n")
            && out.contains("rule=network:upstream-tls"),
        "{out}"
    );
    let log = r.log();
    assert!(
        log.iter()
            .any(|l| l
                .contains("network:upstream-tls: the TLS connection to bound.example:443 failed")),
        "{log:?}"
    );
    assert!(r.bound.lock().unwrap().is_empty());
}

#[tokio::test]
async fn rotating_makes_the_old_placeholder_worthless() {
    let r = rig(true).await;
    let old = r.placeholder("FORGE_TOKEN");
    r.secrets.rotate().unwrap();
    let new = r.placeholder("FORGE_TOKEN");
    assert_ne!(old, new);
    let (_, out, _) = r
        .curl(
            &r.bundle,
            &[
                "-H",
                &format!("Authorization: Bearer {old}"),
                "https://bound.example/",
            ],
        )
        .await;
    assert_eq!(out, "no token\n");
    let (_, out, _) = r
        .curl(
            &r.bundle,
            &[
                "-H",
                &format!("Authorization: Bearer {new}"),
                "https://bound.example/",
            ],
        )
        .await;
    assert_eq!(out, "welcome\n");
}
