//! webfetch must not reach the supervisor's own host (docs/THREAT_MODEL.md,
//! "The walls, by layer").
//!
//! The address classes the SSRF guard refuses do not include the host's own
//! public addresses, and a service bound to 0.0.0.0 answers there. Here a
//! supervisor runs inside a fresh network namespace (its "host") whose own link
//! holds public-looking addresses (8.8.8.8, 2001:4860:4860::8888),
//! with a web server on 0.0.0.0 and [::] inside it; a second namespace across
//! a veth pair plays a public web host (93.184.216.34), the control that
//! fetching still works. Every name is pid-suffixed and removed afterwards;
//! no address or route of the machine's own namespace is touched.
//!
//! - the fetch to each own address (IPv4, IPv6, IPv4-mapped, by name through
//!   /etc/hosts, and as a redirect hop) is refused with a sentence naming the
//!   interface, while the same service answers there when asked directly;
//! - an address added AFTER the supervisor started is refused too, once the
//!   netlink notification has refreshed the set (the supervisor's log records
//!   the new set: `host_addresses`, trigger `netlink`);
//! - the connector check: a fetch judged while its address was someone
//!   else's, then approved after the address became the host's own, is
//!   refused before connecting.
//! - with Docker: a bridge network created after start, on a public-looking
//!   subnet; its gateway, as the engine reports it, is refused.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tollgate_e2e::harness::{Supervisor, authed, read_records, root_or_skip};
use tollgate_proto::v1 as pb;

const PUBLIC_IP: &str = "93.184.216.34";
const OWN_V4: &str = "8.8.8.8";
const OWN_V6: &str = "2001:4860:4860::8888";
const LATER_V4: &str = "8.8.4.4";
const LATER_V6: &str = "2001:4860:4860::8844";

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("ip");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Two namespaces: `host` (the supervisor's) and `web` (a public host).
struct Lab {
    host: String,
    web: String,
    etc: PathBuf,
    servers: Vec<Child>,
}

/// Answers every GET with a body naming who answered; `/redirect?to=URL`
/// redirects. Listens on 0.0.0.0:80 and, with `--v6`, on [::]:80 too.
const SERVER: &str = r#"
import http.server, socket, sys, threading, urllib.parse
WHO = sys.argv[1]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        u = urllib.parse.urlparse(self.path)
        if u.path == '/redirect':
            to = urllib.parse.parse_qs(u.query)['to'][0]
            self.send_response(302); self.send_header('Location', to); self.end_headers(); return
        body = ('answered by ' + WHO + ' for ' + self.path + '\n').encode()
        self.send_response(200); self.send_header('Content-Type', 'text/plain')
        self.send_header('Content-Length', str(len(body))); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
class V6(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6
    def server_bind(self):
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        super().server_bind()
servers = [http.server.ThreadingHTTPServer(('0.0.0.0', 80), H)]
if '--v6' in sys.argv: servers.append(V6(('::', 80), H))
for s in servers[1:]: threading.Thread(target=s.serve_forever, daemon=True).start()
servers[0].serve_forever()
"#;

impl Lab {
    fn start(tag: &str) -> Lab {
        let pid = std::process::id();
        let host = format!("tg-{tag}-host-{pid}");
        let web = format!("tg-{tag}-web-{pid}");
        let etc = PathBuf::from(format!("/etc/netns/{host}"));
        let lab = Lab {
            host: host.clone(),
            web: web.clone(),
            etc: etc.clone(),
            servers: Vec::new(),
        };
        for ns in [&host, &web] {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(Stdio::null())
                .status();
            ip(&["netns", "add", ns]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        // The supervisor's host: public-looking addresses on a link of its
        // own (a veth pair with both ends inside: this kernel has no dummy
        // links).
        ip(&[
            "-n", &host, "link", "add", "own0", "type", "veth", "peer", "name", "own1",
        ]);
        ip(&["-n", &host, "link", "set", "own0", "up"]);
        ip(&["-n", &host, "link", "set", "own1", "up"]);
        ip(&[
            "-n",
            &host,
            "addr",
            "add",
            &format!("{OWN_V4}/32"),
            "dev",
            "own0",
        ]);
        ip(&[
            "-n",
            &host,
            "addr",
            "add",
            &format!("{OWN_V6}/128"),
            "dev",
            "own0",
            "nodad",
        ]);
        // The link to the public web host.
        ip(&[
            "-n", &host, "link", "add", "veth0", "type", "veth", "peer", "name", "veth1", "netns",
            &web,
        ]);
        ip(&["-n", &host, "addr", "add", "10.77.0.1/30", "dev", "veth0"]);
        ip(&["-n", &host, "link", "set", "veth0", "up"]);
        ip(&["-n", &web, "addr", "add", "10.77.0.2/30", "dev", "veth1"]);
        ip(&[
            "-n",
            &web,
            "addr",
            "add",
            &format!("{PUBLIC_IP}/32"),
            "dev",
            "veth1",
        ]);
        ip(&["-n", &web, "link", "set", "veth1", "up"]);
        ip(&["-n", &web, "route", "add", "default", "via", "10.77.0.1"]);
        ip(&[
            "-n",
            &host,
            "route",
            "add",
            &format!("{PUBLIC_IP}/32"),
            "via",
            "10.77.0.2",
        ]);
        // Names, for the supervisor inside the namespace (`ip netns exec`
        // binds /etc/netns/<ns>/hosts over /etc/hosts).
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(
            etc.join("hosts"),
            format!(
                "127.0.0.1 localhost\n::1 localhost\n{OWN_V4} own.example\n{PUBLIC_IP} public.example\n"
            ),
        )
        .unwrap();
        let mut lab = lab;
        lab.servers
            .push(serve(&host, "the-supervisors-own-host", true));
        lab.servers.push(serve(&web, "the-public-web-host", false));
        for (ns, url) in [
            (&host, format!("http://{OWN_V4}/")),
            (&host, format!("http://[{OWN_V6}]/")),
            (&host, format!("http://{PUBLIC_IP}/")),
        ] {
            lab.wait_for(ns, &url);
        }
        lab
    }

    /// GET `url` from inside namespace `ns` (not through tollgate).
    fn get(&self, ns: &str, url: &str) -> Option<String> {
        let out = Command::new("ip")
            .args(["netns", "exec", ns, "python3", "-c"])
            .arg("import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=2).read().decode())")
            .arg(url)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn wait_for(&self, ns: &str, url: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(body) = self.get(ns, url) {
                return body;
            }
            assert!(Instant::now() < deadline, "{url} did not answer in {ns}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn serve(ns: &str, who: &str, v6: bool) -> Child {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, "python3", "-c", SERVER, who]);
    if v6 {
        c.arg("--v6");
    }
    c.stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("web server")
}

impl Drop for Lab {
    fn drop(&mut self) {
        for s in &mut self.servers {
            let _ = s.kill();
            let _ = s.wait();
        }
        for ns in [&self.host, &self.web] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        let _ = std::fs::remove_dir_all(&self.etc);
    }
}

const CONFIG: &str = "[session]\nfetch_max_bytes = 100000\nsession_can_approve = false\napproval_timeout_s = 30\n[llm]\nprovider = \"script\"\n";

async fn open(sup: &Supervisor, mode: &str) -> pb::OpenSessionResponse {
    let ws = sup.dirs.workspace("ws", 0);
    let mut c = sup.agent_client().await;
    c.open_session(pb::OpenSessionRequest {
        workspace: ws.display().to_string(),
        mode: mode.to_string(),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
}

async fn fetch(sup: &Supervisor, token: &str, url: &str) -> pb::CallToolResponse {
    sup.call_tool(token, "webfetch", serde_json::json!({ "url": url }))
        .await
}

/// The fetch was refused by the SSRF floor as one of the host's own addresses.
fn assert_own_host_refusal(r: &pb::CallToolResponse, url: &str, sentence: &str) {
    assert!(!r.ok, "{url} was fetched: {}", r.output);
    let d = r
        .denied
        .as_ref()
        .unwrap_or_else(|| panic!("{url}: not a denial: {r:?}"));
    assert_eq!(d.rule, "floor:ssrf", "{url}: {d:?}");
    assert!(
        d.reason.contains(sentence) && d.reason.contains("an address of the supervisor's own host"),
        "{url}: {}",
        d.reason
    );
    assert!(!r.output.contains("answered by"), "{url}: {}", r.output);
}

/// The `host_addresses` records of the supervisor's own log.
fn host_address_records(sup: &Supervisor) -> Vec<serde_json::Value> {
    sup.audit_files("supervisor-")
        .iter()
        .flat_map(|p| read_records(p))
        .filter(|r| r["event"] == "host_addresses")
        .collect()
}

/// Waits until the supervisor's log records a set holding every `entry`
/// ("8.8.4.4 own0"); returns the first such record.
fn wait_for_set(sup: &Supervisor, entries: &[String]) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(r) = host_address_records(sup).into_iter().find(|r| {
            entries.iter().all(|e| {
                r["addresses"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|x| x == e.as_str()))
            })
        }) {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "no host_addresses record with {entries:?}: {:?}",
            host_address_records(sup)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_supervisors_own_addresses_are_refused_even_when_added_later() {
    if !root_or_skip("the_supervisors_own_addresses_are_refused_even_when_added_later") {
        return;
    }
    let lab = Lab::start("own");
    // The service on the supervisor's host answers at its public addresses
    // (asked directly, not through tollgate): this is what the wall is for.
    assert!(
        lab.wait_for(&lab.host, &format!("http://{OWN_V4}/x"))
            .contains("the-supervisors-own-host")
    );
    assert!(
        lab.wait_for(&lab.host, &format!("http://[{OWN_V6}]/x"))
            .contains("the-supervisors-own-host")
    );

    let sup = Supervisor::builder()
        .config(CONFIG)
        .wrapper(&["ip", "netns", "exec", &lab.host])
        .start();
    let s = open(&sup, "dangerouslySkipPermissions").await;

    // The start-up record lists the namespace's addresses, both families.
    let first = wait_for_set(
        &sup,
        &[
            format!("{OWN_V4} own0"),
            format!("{OWN_V6} own0"),
            "10.77.0.1 veth0".to_string(),
            "127.0.0.1 lo".to_string(),
            "::1 lo".to_string(),
        ],
    );
    assert_eq!(first["trigger"], "start", "{first}");

    // Control: another host's public address is fetched, by address and by name.
    for url in [
        format!("http://{PUBLIC_IP}/page"),
        "http://public.example/page".to_string(),
    ] {
        let r = fetch(&sup, &s.token, &url).await;
        assert!(r.ok, "{url}: {r:?}");
        assert!(
            r.output.contains("answered by the-public-web-host"),
            "{}",
            r.output
        );
    }

    // The host's own addresses are refused, in every spelling.
    for (url, sentence) in [
        (
            format!("http://{OWN_V4}/x"),
            format!("{OWN_V4} is an address of the supervisor's own host (interface own0)"),
        ),
        (
            format!("http://[{OWN_V6}]:80/x"),
            format!("{OWN_V6} is an address of the supervisor's own host (interface own0)"),
        ),
        (
            format!("http://[::ffff:{OWN_V4}]/x"),
            "(interface own0)".to_string(),
        ),
        (
            "http://134744072/x".to_string(), // 8.8.8.8 as one decimal number
            format!("{OWN_V4} is an address"),
        ),
        (
            "http://own.example/x".to_string(),
            format!(
                "`own.example` resolves to {OWN_V4}, which is an address of the supervisor's own host (interface own0)"
            ),
        ),
    ] {
        let r = fetch(&sup, &s.token, &url).await;
        assert_own_host_refusal(&r, &url, &sentence);
    }
    // A redirect hop to the host's own address is refused too.
    let hop = format!("http://{PUBLIC_IP}/redirect?to=http%3A%2F%2F{OWN_V4}%2Fx");
    let r = fetch(&sup, &s.token, &hop).await;
    assert!(!r.ok, "{r:?}");
    assert!(
        r.error.contains("redirect") && r.error.contains("an address of the supervisor's own host"),
        "{}",
        r.error
    );
    assert!(!r.output.contains("answered by"), "{}", r.output);

    // Added after start: refused once the netlink notification is in.
    ip(&[
        "-n",
        &lab.host,
        "addr",
        "add",
        &format!("{LATER_V4}/32"),
        "dev",
        "own0",
    ]);
    ip(&[
        "-n",
        &lab.host,
        "addr",
        "add",
        &format!("{LATER_V6}/128"),
        "dev",
        "own0",
        "nodad",
    ]);
    assert!(
        lab.wait_for(&lab.host, &format!("http://{LATER_V4}/x"))
            .contains("the-supervisors-own-host")
    );
    let later = wait_for_set(
        &sup,
        &[format!("{LATER_V4} own0"), format!("{LATER_V6} own0")],
    );
    assert_eq!(later["trigger"], "netlink", "{later}");
    for (url, sentence) in [
        (
            format!("http://{LATER_V4}/x"),
            format!("{LATER_V4} is an address of the supervisor's own host (interface own0)"),
        ),
        (
            format!("http://[{LATER_V6}]/x"),
            format!("{LATER_V6} is an address of the supervisor's own host (interface own0)"),
        ),
    ] {
        let r = fetch(&sup, &s.token, &url).await;
        assert_own_host_refusal(&r, &url, &sentence);
    }

    // Removed again: no longer the host's, so no longer refused as such
    // (nothing answers there now; the point is the reason).
    ip(&[
        "-n",
        &lab.host,
        "addr",
        "del",
        &format!("{LATER_V4}/32"),
        "dev",
        "own0",
    ]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while host_address_records(&sup).last().is_some_and(|r| {
        r["addresses"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x == format!("{LATER_V4} own0").as_str())
    }) {
        assert!(Instant::now() < deadline, "the removal was not recorded");
        std::thread::sleep(Duration::from_millis(50));
    }
    let r = fetch(&sup, &s.token, &format!("http://{LATER_V4}/x")).await;
    assert!(
        r.denied
            .as_ref()
            .is_none_or(|d| !d.reason.contains("own host")),
        "{r:?}"
    );

    // The decision records say why.
    let checks: Vec<serde_json::Value> = sup
        .session_records(&s.session_id)
        .into_iter()
        .filter(|e| e["event"] == "permission_check" && e["decision"] == "deny")
        .collect();
    assert!(
        checks.iter().any(|c| c["rule"] == "floor:ssrf"
            && c["reason"].as_str().unwrap().contains(&format!(
                "{OWN_V4} is an address of the supervisor's own host (interface own0)"
            ))),
        "{checks:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_that_becomes_the_hosts_own_while_a_fetch_waits_is_refused_at_the_connector() {
    if !root_or_skip(
        "an_address_that_becomes_the_hosts_own_while_a_fetch_waits_is_refused_at_the_connector",
    ) {
        return;
    }
    let lab = Lab::start("conn");
    let sup = Supervisor::builder()
        .config(CONFIG)
        .wrapper(&["ip", "netns", "exec", &lab.host])
        .start();
    let s = open(&sup, "default").await;
    // Judged now: 93.184.216.34 is the public host's, so the call asks.
    let socket = sup.agent_socket.clone();
    let token = s.token.clone();
    let pending = tokio::spawn(async move {
        let mut c = tollgate_e2e::harness::agent_client(&socket).await;
        c.call_tool(authed(
            pb::CallToolRequest {
                call_id: "c1".to_string(),
                tool: "webfetch".to_string(),
                arguments_json: serde_json::json!({ "url": format!("http://{PUBLIC_IP}/page") })
                    .to_string(),
            },
            &token,
        ))
        .await
        .unwrap()
        .into_inner()
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let approval = loop {
        let out = sup.ctl(&["approvals", "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        if let Some(a) = v.as_array().and_then(|a| a.first()) {
            break a.clone();
        }
        assert!(Instant::now() < deadline, "no approval appeared");
        std::thread::sleep(Duration::from_millis(20));
    };
    // While it waits, the address becomes the supervisor's own: the host
    // takes it on its own link (and would now answer there itself).
    ip(&[
        "-n",
        &lab.host,
        "addr",
        "add",
        &format!("{PUBLIC_IP}/32"),
        "dev",
        "own0",
    ]);
    assert!(
        lab.wait_for(&lab.host, &format!("http://{PUBLIC_IP}/x"))
            .contains("the-supervisors-own-host")
    );
    let out = sup.ctl(&["approve", approval["id"].as_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = pending.await.unwrap();
    assert!(!r.ok, "fetched: {}", r.output);
    assert!(
        r.error.contains(&format!(
            "{PUBLIC_IP} is an address of the supervisor's own host (interface own0)"
        )),
        "{}",
        r.error
    );
    assert!(!r.output.contains("answered by"), "{}", r.output);
}

/// Docker's bridges are interface addresses of the host: a network created
/// after the supervisor started, on a public-looking subnet, has its
/// gateway (as the engine reports it) refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_docker_bridge_gateway_created_after_start_is_refused() {
    if !root_or_skip("a_docker_bridge_gateway_created_after_start_is_refused") {
        return;
    }
    let docker_ok = Command::new("docker")
        .args(["info", "--format", "{{.ServerVersion}}"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !docker_ok {
        if std::env::var("TOLLGATE_REQUIRE_DOCKER").as_deref() == Ok("1") {
            panic!("this test needs a docker engine and TOLLGATE_REQUIRE_DOCKER=1");
        }
        eprintln!("skipped: needs docker");
        return;
    }
    let sup = Supervisor::builder().config(CONFIG).start();
    let s = open(&sup, "dangerouslySkipPermissions").await;
    let pid = std::process::id();
    // 9.x.y.0/24: public (IBM's), not in any refused class; unique per pid.
    let subnet = format!("9.{}.{}.0/24", 100 + pid % 100, (pid / 100) % 250);
    let name = format!("tg-own-{pid}");
    struct Net(String);
    impl Drop for Net {
        fn drop(&mut self) {
            let _ = Command::new("docker")
                .args(["network", "rm", &self.0])
                .stdout(Stdio::null())
                .status();
        }
    }
    // Asked for explicitly: docker 20.10 reports a network's gateway
    // (IPAM.Config) only when it was given at creation.
    let gateway = subnet.replace(".0/24", ".1");
    let out = Command::new("docker")
        .args([
            "network",
            "create",
            "--driver",
            "bridge",
            "--subnet",
            &subnet,
            "--gateway",
            &gateway,
            &name,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _net = Net(name.clone());
    let reported = engine_view(&name);
    assert_eq!(
        reported.gateway.as_deref(),
        Some(gateway.as_str()),
        "{reported:?}"
    );
    let bridge = reported
        .bridge
        .unwrap_or_else(|| format!("br-{}", &reported.id[..12]));
    let later = wait_for_set(&sup, &[format!("{gateway} {bridge}")]);
    assert_eq!(later["trigger"], "netlink", "{later}");
    let url = format!("http://{gateway}/");
    let r = fetch(&sup, &s.token, &url).await;
    assert_own_host_refusal(
        &r,
        &url,
        &format!("{gateway} is an address of the supervisor's own host (interface {bridge})"),
    );
    // The default bridge: the engine reports its subnet and its link; when
    // that link exists on this host, its address (in that subnet) is in the
    // set too (and refused already as a private address).
    let default = engine_view("bridge");
    let link = default
        .bridge
        .clone()
        .unwrap_or_else(|| "docker0".to_string());
    let exists = Command::new("ip")
        .args(["link", "show", &link])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if exists {
        let set = host_address_records(&sup).pop().unwrap();
        assert!(
            set["addresses"].as_array().unwrap().iter().any(|a| {
                let (ip, on) = a.as_str().unwrap().split_once(' ').unwrap();
                on == link && default.subnets.iter().any(|net| in_subnet(ip, net))
            }),
            "no address of {link} in {:?}: {set}",
            default.subnets
        );
    } else {
        eprintln!("note: the engine's default bridge link {link} does not exist on this host now");
    }
}

/// What the docker engine says about a network.
#[derive(Debug)]
struct EngineView {
    id: String,
    subnets: Vec<String>,
    gateway: Option<String>,
    bridge: Option<String>,
}

fn engine_view(network: &str) -> EngineView {
    let out = Command::new("docker")
        .args(["network", "inspect", "--format", "{{json .}}", network])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let configs = v["IPAM"]["Config"].as_array().cloned().unwrap_or_default();
    EngineView {
        id: v["Id"].as_str().unwrap().to_string(),
        subnets: configs
            .iter()
            .filter_map(|c| c["Subnet"].as_str().map(str::to_string))
            .collect(),
        gateway: configs
            .iter()
            .find_map(|c| c["Gateway"].as_str().map(str::to_string)),
        bridge: v["Options"]["com.docker.network.bridge.name"]
            .as_str()
            .map(str::to_string),
    }
}

/// Whether IPv4 `ip` lies in `net` ("a.b.c.d/len"); IPv6 never does here.
fn in_subnet(ip: &str, net: &str) -> bool {
    let (Some((base, len)), Ok(ip)) = (net.split_once('/'), ip.parse::<std::net::Ipv4Addr>())
    else {
        return false;
    };
    let (Ok(base), Ok(len)) = (base.parse::<std::net::Ipv4Addr>(), len.parse::<u32>()) else {
        return false;
    };
    let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
    u32::from(ip) & mask == u32::from(base) & mask
}

/// `supervisorctl policy test` judges like the supervisor: it reads the
/// host's own addresses itself.
#[test]
fn policy_test_refuses_the_hosts_own_addresses_too() {
    if !root_or_skip("policy_test_refuses_the_hosts_own_addresses_too") {
        return;
    }
    let lab = Lab::start("ptest");
    let ws = tempfile::tempdir().unwrap();
    let mut child = Command::new("ip")
        .args(["netns", "exec", &lab.host])
        .arg(tollgate_e2e::harness::bin("supervisorctl"))
        .args([
            "policy",
            "test",
            "--mode",
            "dangerouslySkipPermissions",
            "--workspace",
        ])
        .arg(ws.path())
        .env_remove("TOLLGATE_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().unwrap();
        for url in [
            format!("http://{OWN_V4}/"),
            format!("http://[{OWN_V6}]/"),
            format!("http://{PUBLIC_IP}/"),
        ] {
            writeln!(
                stdin,
                "{}",
                serde_json::json!({"tool": "webfetch", "args": {"url": url}})
            )
            .unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    for (line, ip) in lines.iter().zip([OWN_V4, OWN_V6]) {
        assert_eq!(line["decision"], "deny", "{line}");
        assert_eq!(line["rule"], "floor:ssrf", "{line}");
        assert!(
            line["reason"].as_str().unwrap().starts_with(&format!(
                "{ip} is an address of the supervisor's own host (interface own0)"
            )),
            "{line}"
        );
    }
    assert_eq!(lines[2]["decision"], "allow", "{}", lines[2]);
}
