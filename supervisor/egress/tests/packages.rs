//! Package managers through the HTTP proxy, from the host side: the
//! registries this machine's npm and pip are configured for, each host read
//! at run time from the client itself (`npm config get registry`; pip's
//! `index-url` or, unset, the index and file hosts pip reports as its
//! defaults). No registry's name is written here.
//!
//! Where a registry's name resolves to an address the SSRF guard refuses
//! (a mirror on a private or documentation range, as on some build
//! machines), the test puts exactly those addresses in `allow_private`, as
//! an operator would for a corporate mirror (docs/OPERATIONS.md "Network"),
//! and says so on stderr.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use tokio::net::TcpListener;
use tollgate_egress::{
    ConnId, ConnRequest, ConnStats, ConnectionGate, GateVerdict, Limits, Proxy, Refusal,
};
use tollgate_policy::HostAddrs;
use tollgate_policy::network::{NetVerdict, NetworkConfig, NetworkPolicy};

/// The real policy and guard; the host's resolver (the trait's default).
/// The supervisor's own addresses are the daemon's to add (its gate reads
/// them); here none are.
struct RealGate {
    policy: NetworkPolicy,
    log: Mutex<Vec<String>>,
}

impl ConnectionGate for RealGate {
    async fn decide(&self, req: &ConnRequest) -> GateVerdict {
        let d = self.policy.decide(&req.host, req.port);
        match d.verdict {
            NetVerdict::Allow => GateVerdict::Allow { rule: d.rule },
            NetVerdict::Deny | NetVerdict::Ask => GateVerdict::Deny(Refusal {
                rule: d.rule,
                reason: d.reason,
            }),
        }
    }
    fn vet(&self, req: &ConnRequest, ip: IpAddr) -> Result<(), String> {
        self.policy
            .vet_address(ip, HostAddrs::none(), &req.host.to_string())
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
            .push(format!("refused {} {}: {}", req.target(), r.rule, r.reason));
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
        self.log
            .lock()
            .unwrap()
            .push(format!("close {} down={}", id.0, s.bytes_down));
    }
}

fn host_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?']).next().unwrap_or("");
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    authority.split(':').next().unwrap().to_ascii_lowercase()
}

fn output(cmd: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(cmd).args(args).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// npm's registry host, as npm itself reports it.
fn npm_hosts() -> Vec<String> {
    vec![host_of(&output("npm", &["config", "get", "registry"]))]
}

/// pip's index host (its configuration, else its default) and the host
/// its default index serves files from.
fn pip_hosts() -> Vec<String> {
    let configured = output("pip", &["config", "get", "global.index-url"]);
    let script = "from pip._internal.models.index import PyPI; print(PyPI.simple_url); print(PyPI.file_storage_domain)";
    let defaults = output("python3", &["-c", script]);
    let mut lines = defaults.lines();
    let index = if configured.contains("://") {
        configured
    } else {
        lines.next().unwrap().to_string()
    };
    let mut hosts = vec![host_of(&index)];
    if let Some(files) = lines.next() {
        let f = host_of(files);
        if !hosts.contains(&f) {
            hosts.push(f);
        }
    }
    hosts
}

/// The addresses `hosts` resolve to that the SSRF guard refuses, as /32
/// or /128 entries, each reported.
async fn private_addresses(hosts: &[String]) -> Vec<String> {
    let probe = NetworkPolicy::from_config(&NetworkConfig::default()).unwrap();
    let mut out = Vec::new();
    for h in hosts {
        let addrs = tokio::net::lookup_host(format!("{h}:443")).await.unwrap();
        for a in addrs {
            if let Err(why) = probe.vet_address(a.ip(), HostAddrs::none(), h) {
                eprintln!("allow_private gets {} ({why})", a.ip());
                out.push(a.ip().to_string());
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

async fn proxy_for(hosts: &[String]) -> (Arc<Proxy<RealGate>>, SocketAddr) {
    let c = NetworkConfig {
        allow: hosts.to_vec(),
        allow_private: private_addresses(hosts).await,
        ..NetworkConfig::default()
    };
    let gate = RealGate {
        policy: NetworkPolicy::from_config(&c).unwrap(),
        log: Mutex::default(),
    };
    let proxy = Proxy::new("pkg".into(), gate, Limits::default());
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(tollgate_egress::serve_http(Arc::clone(&proxy), l));
    (proxy, addr)
}

fn run(cmd: &mut tokio::process::Command) -> impl std::future::Future<Output = (bool, String)> {
    let child = cmd
        .kill_on_drop(true)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    async move {
        let out = child.wait_with_output().await.unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    }
}

fn opened(log: &[String], host: &str) -> bool {
    log.iter()
        .any(|l| l.starts_with(&format!("open {host}:443 ")))
}

fn npm(proxy: SocketAddr, dir: &std::path::Path) -> tokio::process::Command {
    let mut c = tokio::process::Command::new("npm");
    c.args([
        "install",
        "--no-audit",
        "--no-fund",
        "--no-package-lock",
        "is-number@7.0.0",
    ])
    .current_dir(dir)
    .env("npm_config_cache", dir.join("cache"))
    .env("npm_config_https_proxy", format!("http://{proxy}"))
    .env("npm_config_proxy", format!("http://{proxy}"))
    .env("npm_config_fetch_retries", "0")
    .env("npm_config_update_notifier", "false");
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn npm_installs_a_real_package_through_the_proxy_and_an_unlisted_registry_is_refused() {
    let hosts = npm_hosts();
    let (proxy, addr) = proxy_for(&hosts).await;
    let dir = tempfile::tempdir().unwrap();
    let (ok, text) = run(&mut npm(addr, dir.path())).await;
    assert!(ok, "npm install failed: {text}");
    assert!(
        dir.path()
            .join("node_modules/is-number/package.json")
            .exists()
    );
    let log = proxy.gate.log.lock().unwrap().clone();
    assert!(opened(&log, &hosts[0]), "{log:?}");
    // The same install with nothing allowed: refused by name, recorded.
    let (proxy, addr) = proxy_for(&[]).await;
    let dir = tempfile::tempdir().unwrap();
    let (ok, text) = run(&mut npm(addr, dir.path())).await;
    assert!(!ok, "npm install succeeded with nothing allowed: {text}");
    let log = proxy.gate.log.lock().unwrap().clone();
    let refused = format!("refused {}:443 network:unlisted", hosts[0]);
    assert!(log.iter().any(|l| l.starts_with(&refused)), "{log:?}");
    assert!(!log.iter().any(|l| l.starts_with("open")), "{log:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pip_downloads_a_real_package_through_the_proxy_from_its_index_and_file_hosts() {
    let hosts = pip_hosts();
    let (proxy, addr) = proxy_for(&hosts).await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let mut cmd = tokio::process::Command::new("pip");
    cmd.args([
        "download",
        "--no-deps",
        "--no-cache-dir",
        "--retries",
        "0",
        "-d",
        &d,
    ])
    .args(["--proxy", &format!("http://{addr}"), "six==1.16.0"])
    // Only the network: no local wheel directory.
    .env("PIP_FIND_LINKS", "")
    .env("PIP_NO_INDEX", "0");
    let (ok, text) = run(&mut cmd).await;
    assert!(ok, "pip download failed: {text}");
    let got: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(got.iter().any(|n| n.starts_with("six-1.16.0")), "{got:?}");
    let log = proxy.gate.log.lock().unwrap().clone();
    for h in &hosts {
        assert!(opened(&log, h), "{h}: {log:?}");
    }
}
