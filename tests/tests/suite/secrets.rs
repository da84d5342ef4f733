//! `[[secrets]]` end to end (docs/INTERFACES.md "[[secrets]]",
//! docs/THREAT_MODEL.md "Secrets"): a supervisor whose sessions' sandboxes
//! sit behind the network wall, test hosts in a network namespace (veth,
//! TEST-NET-2 addresses) serving https that needs a bearer token and plain
//! http that records what it got, and real curl inside the sandbox with the
//! placeholder its environment holds.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use tollgate_e2e::harness::{Supervisor, bin, root_or_skip};
use tollgate_proto::v1 as pb;

const REAL: &str = "REAL-e2e-forge-9c4f1b7d";
const BOUND: &str = "198.51.100.2";
const OTHER: &str = "198.51.100.3";
/// A name for BOUND, in the host's /etc/hosts while the test runs: npm's
/// proxy agent checks an address host's certificate against the wrong name.
const NAME: &str = "pkgs.tollgate-e2e.test";

/// A network namespace holding the test hosts, joined by a veth pair.
struct Hosts {
    ns: String,
    veth: String,
    servers: Vec<Child>,
    dir: PathBuf,
}

fn run(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd).args(args).output().expect(cmd);
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The hosts' server: every request's headers appended to `seen`; `/`
/// answers 200 `welcome` to `Authorization: Bearer REAL`, 401 otherwise.
const SERVER: &str = concat!(
    include_str!("../../src/git_http_backend.py"),
    r#"
import base64, hashlib, http.server, io, json, ssl, sys, tarfile
addr, port, seen = sys.argv[1], int(sys.argv[2]), sys.argv[3]
base = "https://%s" % sys.argv[7]
def tarball():
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as t:
        for name, text in [("package/package.json", '{"name":"tinypkg","version":"1.0.0","main":"index.js"}'),
                           ("package/index.js", "module.exports = 'tiny';\n")]:
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return out.getvalue()
TGZ = tarball()
INTEGRITY = "sha512-" + base64.b64encode(hashlib.sha512(TGZ).digest()).decode()
PACKUMENT = json.dumps({"name": "tinypkg", "dist-tags": {"latest": "1.0.0"}, "versions": {"1.0.0": {
    "name": "tinypkg", "version": "1.0.0",
    "dist": {"tarball": base + "/tinypkg/-/tinypkg-1.0.0.tgz", "integrity": INTEGRITY}}}}).encode()
REPOS = os.path.join(os.path.dirname(seen), "repos")
def git_ok(h):
    a = h.get("Authorization") or ""
    return a == "Basic " + base64.b64encode(("git:" + sys.argv[6]).encode()).decode()
class H(http.server.BaseHTTPRequestHandler):
    # Kept alive (every answer has its length): a later request on the
    # same connection is seen, and its `conn=` (the peer's port) tells it.
    protocol_version = "HTTP/1.1"
    def git(self, method):
        with open(seen, "a") as f:
            f.write(method + " " + self.path + "\n" + str(self.headers) + "\n----\n")
        if not git_ok(self.headers):
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        git_http_backend(self, method, self.path[4:], REPOS, "git")
    def do_POST(self):
        self.git("POST")
    def do_GET(self):
        if self.path.startswith("/git/"):
            return self.git("GET")
        with open(seen, "a") as f:
            f.write(self.path + "\nconn=%d\n" % self.client_address[1] + str(self.headers) + "\n----\n")
        ok = self.headers.get("Authorization") == "Bearer " + sys.argv[6]
        kind = "text/plain"
        if not ok:
            body = b"no token\n"
        elif self.path == "/tinypkg":
            body, kind = PACKUMENT, "application/json"
        elif self.path == "/tinypkg/-/tinypkg-1.0.0.tgz":
            body, kind = TGZ, "application/octet-stream"
        else:
            body = b"welcome\n"
        self.send_response(200 if ok else 401)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer((addr, port), H)
if sys.argv[4] != "-":
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sys.argv[4], sys.argv[5])
    s.socket = ctx.wrap_socket(s.socket, server_side=True)
s.serve_forever()
"#
);

impl Hosts {
    fn new(dir: &Path) -> Hosts {
        let tag = std::process::id() % 100000;
        let (ns, veth, peer) = (
            format!("tgse2e{tag}"),
            format!("tge{tag}a"),
            format!("tge{tag}b"),
        );
        run("ip", &["netns", "add", &ns]);
        run(
            "ip",
            &["link", "add", &veth, "type", "veth", "peer", "name", &peer],
        );
        run("ip", &["link", "set", &peer, "netns", &ns]);
        run("ip", &["addr", "add", "198.51.100.1/29", "dev", &veth]);
        run("ip", &["link", "set", &veth, "up"]);
        for a in [BOUND, OTHER] {
            run(
                "ip",
                &["-n", &ns, "addr", "add", &format!("{a}/29"), "dev", &peer],
            );
        }
        run("ip", &["-n", &ns, "link", "set", &peer, "up"]);
        run("ip", &["-n", &ns, "link", "set", "lo", "up"]);
        let mut h = Hosts {
            ns,
            veth,
            servers: Vec::new(),
            dir: dir.to_path_buf(),
        };
        h.certs();
        let etc = std::fs::read_to_string("/etc/hosts").unwrap();
        std::fs::write("/etc/hosts", format!("{etc}{BOUND}\t{NAME}\n")).unwrap();
        std::fs::write(dir.join("server.py"), SERVER).unwrap();
        let (cert, key) = (h.path("host.pem"), h.path("host.key"));
        h.serve(BOUND, 443, &cert, &key, "bound-seen");
        h.serve(OTHER, 80, "-", "-", "other-seen");
        for (a, p) in [(BOUND, 443), (OTHER, 80)] {
            h.wait_listening(a, p);
        }
        h
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// A CA and a leaf for BOUND, signed by it (the proxy trusts the CA
    /// through `[network] trust_ca`).
    fn certs(&self) {
        let d = |n: &str| self.path(n);
        std::fs::write(
            self.dir.join("ext"),
            format!("subjectAltName=IP:{BOUND},DNS:{NAME}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"),
        )
        .unwrap();
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ];
        let mut ca = vec!["req", "-x509"];
        ca.extend(ec);
        let (cak, cap) = (d("ca.key"), d("ca.pem"));
        ca.extend([
            "-keyout",
            &cak,
            "-out",
            &cap,
            "-days",
            "2",
            "-subj",
            "/CN=tollgate e2e hosts CA",
        ]);
        ca.extend([
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign",
        ]);
        run("openssl", &ca);
        let mut csr = vec!["req"];
        csr.extend(ec);
        let (hk, hc, cn) = (d("host.key"), d("host.csr"), format!("/CN={BOUND}"));
        csr.extend(["-keyout", &hk, "-out", &hc, "-subj", &cn]);
        run("openssl", &csr);
        let (hp, ext) = (d("host.pem"), d("ext"));
        run(
            "openssl",
            &[
                "x509",
                "-req",
                "-in",
                &hc,
                "-CA",
                &cap,
                "-CAkey",
                &cak,
                "-CAcreateserial",
                "-out",
                &hp,
                "-days",
                "2",
                "-extfile",
                &ext,
            ],
        );
    }

    fn serve(&mut self, addr: &str, port: u16, cert: &str, key: &str, seen: &str) {
        let c = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns,
                "python3",
                &self.path("server.py"),
                addr,
                &port.to_string(),
                &self.path(seen),
                cert,
                key,
                REAL,
                NAME,
            ])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        self.servers.push(c);
    }

    fn wait_listening(&self, addr: &str, port: u16) {
        for _ in 0..200 {
            if std::net::TcpStream::connect((addr, port)).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("the test host {addr}:{port} never listened");
    }

    fn seen(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(name)).unwrap_or_default()
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for c in &mut self.servers {
            let _ = c.kill();
            let _ = c.wait();
        }
        if let Ok(etc) = std::fs::read_to_string("/etc/hosts") {
            let kept: String = etc
                .lines()
                .filter(|l| !l.ends_with(NAME))
                .map(|l| format!("{l}\n"))
                .collect();
            let _ = std::fs::write("/etc/hosts", kept);
        }
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
        // Deleting the namespace took the pair with it, usually.
        let _ = Command::new("ip")
            .args(["link", "del", &self.veth])
            .output();
    }
}

fn config(hosts: &Hosts) -> String {
    format!(
        "[llm]\nprovider = \"script\"\n[network]\nallow = [\"{BOUND}\", \"{OTHER}\", \"{NAME}\"]\nallow_private = [\"198.51.100.0/29\"]\ntrust_ca = [\"{}\"]\n\n[[secrets]]\nname = \"forge\"\nfrom_env = \"TOLLGATE_E2E_FORGE\"\nhosts = [\"{BOUND}\", \"{NAME}\"]\nenv = \"FORGE_TOKEN\"\n",
        hosts.path("ca.pem")
    )
}

async fn bash(sup: &Supervisor, token: &str, command: &str) -> String {
    let r = sup
        .call_tool(token, "run_bash", serde_json::json!({ "command": command }))
        .await;
    assert!(r.ok, "{command}: {r:?}");
    r.output
}

/// run_bash in a session that asks: each pending approval is approved
/// (a destructive one with its typed target) until the call returns.
async fn approved_bash(sup: &Supervisor, token: &str, command: &str) -> String {
    let (sock, token, command) = (
        sup.agent_socket.clone(),
        token.to_string(),
        command.to_string(),
    );
    let call = tokio::spawn(async move {
        let mut c = tollgate_e2e::harness::agent_client(&sock).await;
        c.call_tool(tollgate_e2e::harness::authed(
            pb::CallToolRequest {
                call_id: "push".to_string(),
                tool: "run_bash".to_string(),
                arguments_json: serde_json::json!({ "command": command }).to_string(),
            },
            &token,
        ))
        .await
        .unwrap()
        .into_inner()
    });
    while !call.is_finished() {
        let out = sup.ctl(&["approvals", "--json"]);
        let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        for a in list.as_array().into_iter().flatten() {
            let id = a["id"].as_str().unwrap();
            let mut args = vec!["approve", id];
            if a["destructive"] == true {
                args.extend(["--confirm", a["target"].as_str().unwrap()]);
            }
            let _ = sup.ctl(&args);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let r = call.await.unwrap();
    assert!(r.ok, "{r:?}");
    r.output
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_holds_a_placeholder_and_curl_npm_and_git_push_get_the_token_put_in_toward_the_bound_host_only()
 {
    if !root_or_skip("secrets_e2e") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let hosts = Hosts::new(dir.path());
    let sup = Supervisor::builder()
        .config(&config(&hosts))
        .env("TOLLGATE_E2E_FORGE", REAL)
        .start();
    let ws = sup.dirs.workspace("ws", 0);
    let open = sup.open_skip_session(&ws).await;
    let t = &open.token;
    // The environment and /proc/self/environ hold the placeholder only
    // (counted, so the redactor could not hide a value that was there).
    let out = bash(&sup, t, "echo \"$FORGE_TOKEN\"; env | grep -c REAL-e2e; tr '\\0' '\\n' < /proc/self/environ | grep -c REAL-e2e; grep -c tollgate-secret-forge /proc/self/environ; echo \"$SSL_CERT_FILE\"").await;
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("tollgate-secret-forge-"), "{out}");
    assert_eq!(
        &lines[1..],
        ["0", "0", "1", "/etc/ssl/certs/ca-certificates.crt"],
        "{out}"
    );
    let placeholder = lines[0].to_string();
    // curl with the placeholder: the host sees the real token.
    let out = bash(
        &sup,
        t,
        &format!(
            "curl -sS --max-time 20 -H \"Authorization: Bearer $FORGE_TOKEN\" https://{BOUND}/"
        ),
    )
    .await;
    assert_eq!(out.trim_end(), "welcome", "{out}");
    assert!(
        hosts
            .seen("bound-seen")
            .contains(&format!("Authorization: Bearer {REAL}"))
    );
    // Toward a host it is not bound to, it is stripped.
    let out = bash(&sup, t, &format!("curl -sS --max-time 20 -H \"Authorization: Bearer $FORGE_TOKEN\" -H 'X-Kept: 1' http://{OTHER}/")).await;
    assert_eq!(out.trim_end(), "no token", "{out}");
    let other = hosts.seen("other-seen");
    assert!(
        other.contains("X-Kept: 1") && !other.contains("Authorization"),
        "{other}"
    );
    assert!(!other.contains(&placeholder) && !other.contains(REAL));
    // npm install from a registry on the bound host: .npmrc names the
    // placeholder's variable, as a project would its token's.
    std::fs::write(
        ws.join(".npmrc"),
        format!("registry=https://{NAME}/\n//{NAME}/:_authToken=${{FORGE_TOKEN}}\n"),
    )
    .unwrap();
    std::fs::write(
        ws.join("package.json"),
        "{\"name\":\"app\",\"version\":\"1.0.0\"}\n",
    )
    .unwrap();
    let out = bash(&sup, t, "npm install tinypkg --no-audit --no-fund --no-update-notifier >/dev/null 2>npm.err; echo npm=$?; node -e \"console.log(require('tinypkg'))\"").await;
    // The walls' own attribution lines (node's ioctl probes of /dev/null)
    // are not the command's output.
    let out: String = out
        .lines()
        .filter(|l| !l.starts_with("sandbox: "))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        out,
        "npm=0\ntiny\n",
        "{out} {}",
        std::fs::read_to_string(ws.join("npm.err")).unwrap_or_default()
    );
    let bound = hosts.seen("bound-seen");
    assert!(bound.contains("/tinypkg/-/tinypkg-1.0.0.tgz\n"), "{bound}");
    assert!(
        !bound.contains(&placeholder),
        "the host only ever saw the value"
    );
    // git push over https: git's credential exchange carries the
    // placeholder as the password; the proxy puts the value in.
    let bare = dir.path().join("repos/proj.git");
    run(
        "git",
        &[
            "init",
            "-q",
            "--bare",
            "-b",
            "main",
            &bare.display().to_string(),
        ],
    );
    run(
        "git",
        &[
            "--git-dir",
            &bare.display().to_string(),
            "config",
            "http.receivepack",
            "true",
        ],
    );
    let push = format!(
        "git init -q -b main repo && cd repo && git -c user.name=t -c user.email=t@example.org commit -q --allow-empty -m pushed-through-the-wall && git -c credential.helper= -c 'credential.helper=!f() {{ echo username=git; echo \"password=$FORGE_TOKEN\"; }}; f' push -q https://{NAME}/git/proj.git main 2>&1; echo push=$?"
    );
    // `git push` needs the user's confirmation: a session in default mode,
    // each call approved as an operator would, the push with its target.
    let ws2 = sup.dirs.workspace("ws2", 0);
    let mut c = sup.agent_client().await;
    let pushing = c
        .open_session(pb::OpenSessionRequest {
            workspace: ws2.display().to_string(),
            mode: "default".to_string(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let out = approved_bash(&sup, &pushing.token, &push).await;
    assert!(out.ends_with("push=0\n"), "{out}");
    let log = Command::new("git")
        .args([
            "--git-dir",
            &bare.display().to_string(),
            "log",
            "--format=%s",
            "main",
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&log.stdout),
        "pushed-through-the-wall\n"
    );
    // The last line: a value that reaches tool output anyway (here typed
    // into the command) is masked there, and in the records.
    let out = bash(&sup, t, &format!("echo 'token: {REAL}'")).await;
    assert!(out.starts_with("token: ") && !out.contains(REAL), "{out}");
    // `secrets list`: names, hosts, counts; never the value.
    let out = sup.ctl(&["secrets", "list", "--json"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v[0]["name"], "forge");
    assert_eq!(v[0]["hosts"][0], BOUND);
    // curl once, npm the packument and the tarball, git's authenticated requests.
    assert!(v[0]["uses"].as_u64() >= Some(5), "{text}");
    assert_eq!(v[0]["stripped"].as_u64(), Some(1), "{text}");
    assert!(!text.contains(REAL) && !text.contains(&placeholder));
    // Recorded with the connection, naming the secret, never its value.
    let recs = sup.session_records(&open.session_id);
    let uses: Vec<_> = recs.iter().filter(|r| r["event"] == "net_secret").collect();
    assert!(
        uses.iter()
            .any(|r| r["action"] == "put" && r["host"] == BOUND && r["conn"].as_u64() > Some(0)),
        "{uses:?}"
    );
    assert!(
        uses.iter()
            .any(|r| r["action"] == "stripped" && r["host"] == OTHER),
        "{uses:?}"
    );
    later_requests_lose_the_placeholder_too(&sup, &hosts, t, &open.session_id, &placeholder).await;
    for f in sup.audit_files("") {
        assert!(
            !std::fs::read_to_string(&f).unwrap().contains(REAL),
            "{}",
            f.display()
        );
    }
    assert!(!sup.stderr().contains(REAL));
}

/// The blocks of what the plain host saw for `path`.
fn seen_for<'a>(seen: &'a str, path: &str) -> Vec<&'a str> {
    seen.split("\n----\n")
        .filter(|b| b.trim_start().starts_with(&format!("{path}\n")))
        .collect()
}

fn conn_of(block: &str) -> &str {
    block
        .lines()
        .find(|l| l.starts_with("conn="))
        .unwrap_or_else(|| panic!("no conn= in {block}"))
}

/// A kept-alive plain-HTTP connection from a client that ignores the proxy
/// variables (Python's http.client: the transparent path): its second
/// request carries the placeholder and arrives without it, and the audit
/// says it was stripped.
async fn later_requests_lose_the_placeholder_too(
    sup: &Supervisor,
    hosts: &Hosts,
    token: &str,
    session: &str,
    placeholder: &str,
) {
    let script = format!(
        "import http.client, os\nc = http.client.HTTPConnection(\"{OTHER}\", 80, timeout=20)\nc.request(\"GET\", \"/kept-one\")\nr = c.getresponse(); r.read()\nc.request(\"GET\", \"/kept-two\", headers={{\"Authorization\": \"Bearer \" + os.environ[\"FORGE_TOKEN\"], \"X-Kept\": \"2\"}})\nr = c.getresponse(); print(\"second\", r.status, r.read().decode().strip())"
    );
    std::fs::write(sup.dirs.workspace("ws", 0).join("kept.py"), script).unwrap();
    let out = bash(sup, token, "python3 kept.py").await;
    assert!(out.contains("second 401 no token"), "{out}");
    let seen = hosts.seen("other-seen");
    let (one, two) = (seen_for(&seen, "/kept-one"), seen_for(&seen, "/kept-two"));
    assert_eq!((one.len(), two.len()), (1, 1), "{seen}");
    assert_eq!(conn_of(one[0]), conn_of(two[0]), "one connection: {seen}");
    assert!(
        two[0].contains("X-Kept: 2") && !two[0].contains("Authorization"),
        "{}",
        two[0]
    );
    assert!(!seen.contains(placeholder) && !seen.contains(REAL));
    let stripped: Vec<serde_json::Value> = sup
        .session_records(session)
        .into_iter()
        .filter(|r| r["event"] == "net_secret" && r["action"] == "stripped")
        .collect();
    assert!(
        stripped
            .iter()
            .any(|r| r["host"] == OTHER && r["conn"].as_u64() > Some(0) && r["secret"] == "forge"),
        "{stripped:?}"
    );
}

#[test]
fn a_secret_whose_source_is_missing_stops_the_start_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("s.toml");
    std::fs::write(
        &cfg,
        "[[secrets]]\nname = \"forge\"\nfrom_file = \"/nonexistent/tollgate-forge\"\nhosts = [\"git.example.org\"]\n",
    )
    .unwrap();
    let out = Command::new(bin("supervisor"))
        .arg("--check-config")
        .arg("--config")
        .arg(&cfg)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert!(
        err.contains("[[secrets]] \"forge\" /nonexistent/tollgate-forge"),
        "{err}"
    );
    let out = Command::new(bin("supervisor"))
        .arg("--config")
        .arg(&cfg)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .arg("--audit-dir")
        .arg(dir.path().join("audit"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert!(err.contains("[[secrets]] \"forge\""), "{err}");
}
