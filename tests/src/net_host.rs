//! Test hosts on public-looking addresses (docs/THREAT_MODEL.md "Network"):
//! a network namespace this process creates, reached from the host through
//! a veth pair, with servers the test starts inside it. The SSRF guard sees
//! their addresses as outside; no traffic leaves the machine. Each test's
//! names, subnets and addresses are unique to it (`test`, a number no other
//! test of the run uses, and `net`, the second octet of the veth /30s of one
//! test file); the route is added before the first packet and everything is
//! undone on drop, a failed start included.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One test host's names and addresses.
#[derive(Debug, Clone)]
pub struct Addrs {
    /// A number unique to this process and test, for names.
    pub tag: u32,
    /// The public-looking addresses the host answers on.
    pub public: Vec<String>,
    /// Its public-looking IPv6 addresses (none unless [`Addrs::with_v6`]):
    /// outside every range the SSRF guard refuses (2001:db8::/32 is one).
    pub public6: Vec<String>,
    /// The veth pair's /30: the host's side (.1) and the namespace's (.2).
    pub host_side: String,
    pub peer_side: String,
}

/// `publics` addresses for test number `test`, the veth /30 in `10.NET.0.0/16`.
pub fn addrs(test: u32, net: u8, publics: u32) -> Addrs {
    let k = std::process::id().wrapping_mul(4).wrapping_add(test);
    let (x, z) = (20 + k % 200, 10 + k / 200 % 200);
    let (c, d) = (k / 64 % 250, k % 64 * 4);
    Addrs {
        tag: k % 10_000_000,
        public: (0..publics)
            .map(|i| format!("93.184.{x}.{}", z + i))
            .collect(),
        public6: Vec::new(),
        host_side: format!("10.{net}.{c}.{}", d + 1),
        peer_side: format!("10.{net}.{c}.{}", d + 2),
    }
}

impl Addrs {
    /// Adds `n` public-looking IPv6 addresses, unique like the IPv4 ones.
    pub fn with_v6(mut self, n: u32) -> Addrs {
        let k = self.tag;
        self.public6 = (1..=n)
            .map(|i| {
                format!(
                    "2606:2800:{:x}:{:x}::{i:x}",
                    0x1000 + k / 0xf000 % 0xf000,
                    0x1000 + k % 0xf000
                )
            })
            .collect();
        self
    }

    /// The veth pair's IPv6 /64 (unique local, never a test host's address):
    /// the host's side (::1) and the namespace's (::2).
    fn sides6(&self) -> (String, String) {
        let (c, d) = (self.tag / 0x10000 % 0x10000, self.tag % 0x10000);
        (
            format!("fd54:{c:x}:{d:x}::1"),
            format!("fd54:{c:x}:{d:x}::2"),
        )
    }
}

/// Runs `ip ARGS`; a failure fails the test with ip's own words.
pub fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("ip");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A running test host; undone on drop.
pub struct TestHost {
    pub addrs: Addrs,
    ns: String,
    host_if: String,
    routes: Vec<String>,
    server: Option<Child>,
}

impl TestHost {
    /// Creates the namespace and its veth pair, gives it `a.public`, routes
    /// those addresses to it, runs `python3 -c SCRIPT ARGS` there with `cwd`
    /// as working directory, and waits until `ready_port` of the first
    /// public address accepts.
    pub fn start(a: Addrs, script: &str, args: &[&str], cwd: &Path, ready_port: u16) -> TestHost {
        let mut host = TestHost {
            ns: format!("tg-host-{}", a.tag),
            host_if: format!("tgh{}", a.tag),
            routes: Vec::new(),
            server: None,
            addrs: a.clone(),
        };
        let (ns, host_if) = (host.ns.clone(), host.host_if.clone());
        let peer_if = format!("tgp{}", a.tag);
        let _ = Command::new("ip")
            .args(["netns", "del", &ns])
            .stderr(Stdio::null())
            .status();
        ip(&["netns", "add", &ns]);
        ip(&[
            "link", "add", &host_if, "type", "veth", "peer", "name", &peer_if,
        ]);
        ip(&["link", "set", &peer_if, "netns", &ns]);
        ip(&[
            "addr",
            "add",
            &format!("{}/30", a.host_side),
            "dev",
            &host_if,
        ]);
        ip(&["link", "set", &host_if, "up"]);
        let peer = format!("{}/30", a.peer_side);
        ip(&["-n", &ns, "addr", "add", &peer, "dev", &peer_if]);
        for public in &a.public {
            let p = format!("{public}/32");
            ip(&["-n", &ns, "addr", "add", &p, "dev", &peer_if]);
        }
        ip(&["-n", &ns, "link", "set", &peer_if, "up"]);
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        ip(&["-n", &ns, "route", "add", "default", "via", &a.host_side]);
        for public in &a.public {
            let r = format!("{public}/32");
            ip(&["route", "add", &r, "via", &a.peer_side]);
            host.routes.push(r);
        }
        if !a.public6.is_empty() {
            host.add_v6(&peer_if);
        }
        host.server = Some(
            Command::new("ip")
                .args(["netns", "exec", &ns, "python3", "-c", script])
                .args(args)
                .current_dir(cwd)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("the test host's servers"),
        );
        host.wait_ready(ready_port);
        host
    }

    /// The IPv6 side: the veth's /64 (no duplicate address detection, so
    /// the addresses are usable at once), the public addresses in the
    /// namespace, routes both ways.
    fn add_v6(&mut self, peer_if: &str) {
        let (ns, a) = (self.ns.clone(), self.addrs.clone());
        let (host6, peer6) = a.sides6();
        let (h, p) = (format!("{host6}/64"), format!("{peer6}/64"));
        ip(&["-6", "addr", "add", &h, "dev", &self.host_if, "nodad"]);
        ip(&["-n", &ns, "-6", "addr", "add", &p, "dev", peer_if, "nodad"]);
        for public in &a.public6 {
            let r = format!("{public}/128");
            ip(&["-n", &ns, "-6", "addr", "add", &r, "dev", peer_if, "nodad"]);
        }
        ip(&["-n", &ns, "-6", "route", "add", "default", "via", &host6]);
        for public in &a.public6 {
            let r = format!("{public}/128");
            ip(&["-6", "route", "add", &r, "via", &peer6]);
            self.routes.push(r);
        }
    }

    /// Generous: Python starts slowly on a loaded 2-core machine.
    fn wait_ready(&self, port: u16) {
        let addr = format!("{}:{port}", self.addrs.public[0]).parse().unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_err() {
            assert!(Instant::now() < deadline, "the test host did not come up");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for TestHost {
    fn drop(&mut self) {
        if let Some(server) = &mut self.server {
            let _ = server.kill();
            let _ = server.wait();
        }
        for r in &self.routes {
            let _ = Command::new("ip").args(["route", "del", r]).status();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .stderr(Stdio::null())
            .status();
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
    }
}
