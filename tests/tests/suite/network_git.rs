//! git over the network from inside the sandbox (docs/OPERATIONS.md "git
//! over the network", docs/THREAT_MODEL.md "Network" and "Secrets"), and
//! what a secret-bound session's sandbox holds in memory.
//!
//! A test host (tollgate_e2e::net_host) on two public-looking addresses in
//! a network namespace of the test's own serves, on 443, a real git
//! smart-HTTP server (`git http-backend` behind Python's TLS server):
//! `/git/open/` for anyone, `/git/forge/` only with the forge token as the
//! basic-auth password, and `/whoami`, which needs it as a bearer token.
//! On 22, a real sshd lets the key the test generated run git-shell.
//! `OPEN` is allowed in `[network]`; `BOUND` also has the `forge` secret
//! bound to it, so the egress proxy terminates its TLS with the session's
//! CA. Inside, on each backend:
//! - `git clone`, `fetch`, `pull` and `push` over https to `OPEN`, TLS end
//!   to end (git trusts the host's CA through `GIT_SSL_CAINFO`);
//! - the same to `BOUND`'s forge with the placeholder as the password:
//!   git trusts the session CA through the bundle (`GIT_SSL_CAINFO`), the
//!   proxy puts the value in, the host sees it and never the placeholder;
//! - a bearer request from Python with the placeholder succeeds;
//! - (native) `git clone` and `push` over `ssh://root@OPEN/...` through
//!   the `GIT_SSH_COMMAND` the sandbox provides (SOCKS by `nc -X 5`), the
//!   key the test made added to an `ssh-agent` the command starts;
//! - a process that used the placeholder: no core dump can be written
//!   (RLIMIT_CORE 0, hard), and its whole memory, read from the host as a
//!   core dump would hold it, has the placeholder and never the value.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use tollgate_e2e::harness::{Supervisor, root_or_skip};
use tollgate_e2e::net_host::{self, TestHost};

use super::network_wall::{Sess, client_as};

const REAL: &str = "REAL-e2e-gitforge-5d1e8a2c";

/// The test host: HTTPS on 443 (both addresses) and sshd on 22. Arguments:
/// the certificate, its key, the token, the sshd config.
const SERVERS: &str = concat!(
    include_str!("../../src/git_http_backend.py"),
    r#"
import base64, ctypes, http.server, os, signal, ssl, subprocess, sys, urllib.parse
cert, key, token, sshd = sys.argv[1:5]
REPOS = os.path.abspath("repos")
def deathsig():
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", sshd], preexec_fn=deathsig,
                 stdout=open("sshd.log", "ab"), stderr=subprocess.STDOUT)
def basic_ok(h):
    return (h.get("Authorization") or "") == "Basic " + base64.b64encode(("git:" + token).encode()).decode()
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    def record(self, method):
        with open("seen.log", "a") as f:
            f.write(method + " " + self.path + "\n" + str(self.headers) + "\n----\n")
    def git(self, method, rest, user):
        git_http_backend(self, method, rest, REPOS, user)
    def deny(self, code, extra):
        self.send_response(code)
        for k, v in extra:
            self.send_header(k, v)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def route(self, method):
        self.record(method)
        if self.path.startswith("/git/open/"):
            return self.git(method, self.path[len("/git/open"):], "anyone")
        if self.path.startswith("/git/forge/"):
            if not basic_ok(self.headers):
                return self.deny(401, [("WWW-Authenticate", 'Basic realm="forge"')])
            return self.git(method, self.path[len("/git/forge"):], "git")
        if self.path == "/whoami":
            if self.headers.get("Authorization") != "Bearer " + token:
                return self.deny(401, [])
            b = b"welcome\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(b)))
            self.end_headers()
            return self.wfile.write(b)
        self.deny(404, [])
    def do_GET(self):
        self.route("GET")
    def do_POST(self):
        self.route("POST")
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer(("0.0.0.0", 443), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
s.socket = ctx.wrap_socket(s.socket, server_side=True)
s.serve_forever()
"#
);

fn run(cmd: &str, args: &[&str], cwd: &Path) -> String {
    let out = Command::new(cmd)
        .args(args)
        .current_dir(cwd)
        .output()
        .expect(cmd);
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The test host, its files and the supervisor.
struct World {
    host: TestHost,
    dir: tempfile::TempDir,
    sup: Supervisor,
}

impl World {
    /// `OPEN`: allowed, TLS end to end.
    fn open(&self) -> &str {
        &self.host.addrs.public[0]
    }

    /// `BOUND`: allowed, the forge secret bound to it.
    fn bound(&self) -> &str {
        &self.host.addrs.public[1]
    }

    fn file(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default()
    }

    fn start(test: u32, backend: &str, extra: &str) -> World {
        let a = net_host::addrs(test, 218, 2);
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        certs(d, &a.public);
        ssh_files(d, &a.public[0]);
        repository(d);
        let p = |n: &str| d.join(n).display().to_string();
        let host = TestHost::start(
            a.clone(),
            SERVERS,
            &[&p("host.pem"), &p("host.key"), REAL, &p("sshd_config")],
            d,
            443,
        );
        wait_port(&a.public[0], 22);
        let (open, bound) = (&a.public[0], &a.public[1]);
        let config = format!(
            "{extra}\n[llm]\nprovider = \"script\"\n[network]\nallow = [\"{open}\", \"{open}:22\", \"{bound}\"]\ntrust_ca = [\"{}\"]\n\n[[secrets]]\nname = \"forge\"\nfrom_env = \"TOLLGATE_E2E_GITFORGE\"\nhosts = [\"{bound}\"]\nenv = \"FORGE_TOKEN\"\n",
            p("ca.pem")
        );
        let sup = Supervisor::builder()
            .config(&config)
            .sandbox(backend)
            .env("TOLLGATE_E2E_GITFORGE", REAL)
            .start();
        World { host, dir, sup }
    }
}

fn wait_port(addr: &str, port: u16) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let sa = format!("{addr}:{port}").parse().unwrap();
    while std::net::TcpStream::connect_timeout(&sa, Duration::from_millis(500)).is_err() {
        assert!(Instant::now() < deadline, "{addr}:{port} never listened");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A CA and a leaf for both addresses, signed by it.
fn certs(d: &Path, publics: &[String]) {
    let san: Vec<String> = publics.iter().map(|a| format!("IP:{a}")).collect();
    std::fs::write(
        d.join("ext"),
        format!(
            "subjectAltName={}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
            san.join(",")
        ),
    )
    .unwrap();
    let ec = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
    let sh = format!(
        "openssl req -x509 {ec} -keyout ca.key -out ca.pem -days 2 -subj '/CN=tollgate e2e git CA' \
         -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign && \
         openssl req {ec} -keyout host.key -out host.csr -subj /CN={} && \
         openssl x509 -req -in host.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out host.pem -days 2 -extfile ext",
        publics[0]
    );
    run("sh", &["-c", &sh], d);
}

/// sshd's host key, config and the client's key, allowed git-shell only.
fn ssh_files(d: &Path, open: &str) {
    std::fs::create_dir_all("/run/sshd").unwrap();
    run(
        "ssh-keygen",
        &["-q", "-t", "ed25519", "-N", "", "-f", "hostkey"],
        d,
    );
    run(
        "ssh-keygen",
        &["-q", "-t", "ed25519", "-N", "", "-f", "client"],
        d,
    );
    let client = std::fs::read_to_string(d.join("client.pub")).unwrap();
    std::fs::write(
        d.join("authorized_keys"),
        format!(
            "command=\"/usr/local/bin/git-shell -c \\\"$SSH_ORIGINAL_COMMAND\\\"\",restrict {client}"
        ),
    )
    .unwrap();
    let p = |n: &str| d.join(n).display().to_string();
    std::fs::write(
        d.join("sshd_config"),
        format!(
            "ListenAddress {open}:22\nHostKey {}\nAuthorizedKeysFile {}\nPidFile none\nUsePAM no\n\
             StrictModes no\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n\
             KbdInteractiveAuthentication no\nAllowTcpForwarding no\nLogLevel VERBOSE\n",
            p("hostkey"),
            p("authorized_keys")
        ),
    )
    .unwrap();
}

/// `repos/proj.git`: bare, pushable over http, with one commit.
fn repository(d: &Path) {
    let sh = "git init -q --bare -b main repos/proj.git && \
              git --git-dir repos/proj.git config http.receivepack true && \
              git init -q -b main seed && cd seed && echo one > file && git add file && \
              git -c user.name=t -c user.email=t@example.org commit -q -m first && \
              git push -q ../repos/proj.git main";
    run("sh", &["-c", sh], d);
}

/// The commit subjects on `main` of the test host's repository.
fn subjects(w: &World) -> String {
    let git_dir = w.dir.path().join("repos/proj.git");
    run(
        "git",
        &[
            "--git-dir",
            &git_dir.display().to_string(),
            "log",
            "--format=%s",
            "main",
        ],
        w.dir.path(),
    )
}

/// A commit pushed on the test host after a clone, for fetch and pull.
fn commit_on_the_host(w: &World, subject: &str) {
    let sh = format!(
        "cd seed && git pull -q ../repos/proj.git main && \
         git -c user.name=t -c user.email=t@example.org commit -q --allow-empty -m {subject} && \
         git push -q ../repos/proj.git main"
    );
    run("sh", &["-c", &sh], w.dir.path());
}

/// Every pending approval approved, a destructive one (`git push`) with
/// its typed target, as an operator would.
fn approve_pending(sup: &Supervisor) {
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
}

/// run_bash in the session (default mode: `git push` needs the user's
/// confirmation), approved until it returns; its output, exit code 0.
fn ok(s: &Sess<'_>, cmd: &str) -> String {
    std::thread::scope(|sc| {
        let call = sc.spawn(|| {
            let args = serde_json::json!({ "command": cmd, "timeout_s": 120 }).to_string();
            client_as(s.sup, s.uid, &s.token, &["call", "run_bash", &args])
        });
        while !call.is_finished() {
            approve_pending(s.sup);
            std::thread::sleep(Duration::from_millis(100));
        }
        let line = call.join().unwrap();
        let v: serde_json::Value = line
            .strip_prefix("OK ")
            .and_then(|j| serde_json::from_str(j).ok())
            .unwrap_or_else(|| panic!("`{cmd}`: {line}"));
        assert_eq!(v["exit_code"].as_i64(), Some(0), "`{cmd}`: {line}");
        // The walls' own attribution lines are not the command's output.
        v["output"]
            .as_str()
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.starts_with("sandbox: "))
            .map(|l| format!("{l}\n"))
            .collect()
    })
}

/// A session of `uid` in default mode.
fn open_session<'a>(sup: &'a Supervisor, ws: &Path, uid: u32) -> Sess<'a> {
    let line = client_as(sup, uid, "-", &["open", ws.to_str().unwrap(), "default"]);
    let mut parts = line.split_whitespace();
    assert_eq!(parts.next(), Some("OK"), "{line}");
    Sess {
        sup,
        uid,
        id: parts.next().unwrap().to_string(),
        token: parts.next().unwrap().to_string(),
    }
}

const IDENT: &str = "-c user.name=sandbox -c user.email=sandbox@example.org";

/// clone, fetch, pull and push over https to OPEN (end to end) and to
/// BOUND's forge (terminated; the placeholder as the password).
fn https_git(w: &World, s: &Sess<'_>, ws: &Path) {
    std::fs::copy(w.dir.path().join("ca.pem"), ws.join("hostca.pem")).unwrap();
    let open = format!("https://{}/git/open/proj.git", w.open());
    ok(
        s,
        &format!(
            "GIT_SSL_CAINFO=$PWD/hostca.pem git clone -q {open} open && git -C open log --format=%s"
        ),
    );
    commit_on_the_host(w, "second");
    // The bundle variables name the root's bundle (the session has a
    // secret) and win over git's config: the host's CA is named instead.
    let cai = "GIT_SSL_CAINFO=$PWD/../hostca.pem git";
    let out = ok(
        s,
        &format!(
            "cd open && {cai} fetch -q origin && git log --format=%s origin/main && {cai} {IDENT} pull -q --ff-only origin main && git {IDENT} commit -q --allow-empty -m from-the-sandbox && {cai} push -q origin main 2>&1; echo push=$?"
        ),
    );
    assert!(out.starts_with("second\nfirst\n"), "{out}");
    assert!(out.contains("push=0"), "{out}");
    assert_eq!(subjects(w), "from-the-sandbox\nsecond\nfirst\n");
    // The forge on BOUND: no CA given, the session's is in the bundle.
    let forge = format!("https://{}/git/forge/proj.git", w.bound());
    let helper = "-c credential.helper= -c 'credential.helper=!f() { echo username=git; echo \"password=$FORGE_TOKEN\"; }; f'";
    let out = ok(
        s,
        &format!(
            "echo \"$GIT_SSL_CAINFO\"; git {helper} clone -q {forge} forge && cd forge && git log --format=%s -1 && git {IDENT} commit -q --allow-empty -m forged && git {helper} push -q origin main 2>&1; echo push=$?"
        ),
    );
    assert!(
        out.starts_with("/etc/ssl/certs/ca-certificates.crt\nfrom-the-sandbox\n"),
        "{out}"
    );
    assert!(out.contains("push=0"), "{out}");
    assert_eq!(subjects(w), "forged\nfrom-the-sandbox\nsecond\nfirst\n");
    let seen = w.file("seen.log");
    assert!(
        seen.contains("/git/forge/proj.git/git-receive-pack"),
        "{seen}"
    );
    assert!(
        !seen.contains("tollgate-secret-"),
        "the host saw a placeholder: {seen}"
    );
}

/// A bearer request with the placeholder from Python: the host saw the value.
fn bearer_request(w: &World, s: &Sess<'_>) {
    let cmd = format!(
        "python3 -c 'import os, urllib.request as u; r = u.Request(\"https://{}/whoami\", headers={{\"Authorization\": \"Bearer \" + os.environ[\"FORGE_TOKEN\"]}}); print(u.urlopen(r, timeout=30).read().decode())'",
        w.bound()
    );
    assert_eq!(ok(s, &cmd), "welcome\n\n");
    assert!(
        w.file("seen.log")
            .contains(&format!("Authorization: Bearer {REAL}"))
    );
}

/// git over ssh through the wall's SOCKS proxy with the test's key, added
/// to an `ssh-agent` the command starts (a command may not name `~/.ssh`,
/// a credential path, even the sandbox's own); the host accepted on first
/// use (no known-hosts file of the owner's is there).
fn ssh_git(w: &World, s: &Sess<'_>, ws: &Path, uid: u32) {
    let to = ws.join("client");
    std::fs::copy(w.dir.path().join("client"), &to).unwrap();
    std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o600)).unwrap();
    nix::unistd::chown(&to, Some(uid.into()), Some(uid.into())).unwrap();
    let url = format!(
        "ssh://root@{}{}",
        w.open(),
        w.dir.path().join("repos/proj.git").display()
    );
    let clone = format!("ssh-agent sh -c 'ssh-add -q client && git clone -q {url} viassh' 2>&1");
    let push = "ssh-agent sh -c 'ssh-add -q ../client && git push -q origin main' 2>&1";
    let out = ok(
        s,
        &format!(
            "echo \"$GIT_SSH_COMMAND\"; {clone}; cd viassh && git log --format=%s -1 && git {IDENT} commit -q --allow-empty -m over-ssh && {push}; echo push=$?"
        ),
    );
    assert!(
        out.starts_with("ssh -o 'ProxyCommand=nc -X 5 -x 127.0.0.1:1080 %h %p' "),
        "{out}"
    );
    assert!(
        out.contains("\nforged\n") && out.contains("push=0"),
        "{out}"
    );
    assert_eq!(
        subjects(w),
        "over-ssh\nforged\nfrom-the-sandbox\nsecond\nfirst\n"
    );
    let recs = s.net_records();
    assert!(
        recs.iter().any(|r| r["phase"] == "open"
            && r["via"] == "socks5"
            && r["port"] == 22
            && r["host"] == w.open()),
        "{recs:#?}"
    );
}

/// No core dump can be written inside, and the memory of a process that
/// used the placeholder, read whole from the host, never holds the value.
fn memory_holds_only_the_placeholder(w: &World, s: &Sess<'_>, ws: &Path) {
    let out = ok(
        s,
        "ulimit -c; ulimit -Hc; (ulimit -c unlimited) 2>/dev/null && echo raised; sh -c 'sh -c \"kill -SEGV \\$\\$\"; echo segv=$?' 2>/dev/null; ls core* 2>/dev/null | wc -l",
    );
    assert_eq!(out, "0\n0\nsegv=139\n0\n", "{out}");
    let marker = format!("tg-memscan-{}", w.host.addrs.tag);
    std::fs::write(
        ws.join("hold.py"),
        format!(
            "import os, time, urllib.request as u\nr = u.Request(\"https://{}/whoami\", headers={{\"Authorization\": \"Bearer \" + os.environ[\"FORGE_TOKEN\"]}})\nbody = u.urlopen(r, timeout=30).read()\nopen(\"held.part\", \"wb\").write(body)\nos.rename(\"held.part\", \"held\")\ntime.sleep(60)\n",
            w.bound()
        ),
    )
    .unwrap();
    let cmd = format!("python3 hold.py {marker}");
    std::thread::scope(|sc| {
        let held = sc.spawn(|| s.bash_for(&cmd, 90));
        let deadline = Instant::now() + Duration::from_secs(60);
        while !ws.join("held").exists() {
            assert!(
                Instant::now() < deadline && !held.is_finished(),
                "hold.py never got its answer"
            );
            approve_pending(s.sup);
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(
            std::fs::read_to_string(ws.join("held")).unwrap(),
            "welcome\n"
        );
        let pid = pid_of(&marker).expect("hold.py's host pid");
        let placeholder = std::fs::read_to_string(format!("/proc/{pid}/environ"))
            .unwrap()
            .split('\0')
            .find_map(|kv| kv.strip_prefix("FORGE_TOKEN=").map(str::to_string))
            .unwrap();
        let mem = memory_of(pid);
        let count = |needle: &[u8]| mem.windows(needle.len()).filter(|w| *w == needle).count();
        assert!(
            placeholder.starts_with("tollgate-secret-forge-"),
            "{placeholder}"
        );
        assert!(
            count(placeholder.as_bytes()) >= 1,
            "{} bytes read",
            mem.len()
        );
        assert_eq!(
            count(REAL.as_bytes()),
            0,
            "the value is in the sandbox's memory"
        );
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = held.join();
    });
}

/// The host pid of the python process whose arguments end with `marker`.
fn pid_of(marker: &str) -> Option<i32> {
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
        if args.first().is_some_and(|a| a.ends_with(b"python3"))
            && args.contains(&marker.as_bytes())
        {
            return Some(pid);
        }
    }
    None
}

/// Every readable mapping of `pid`, as a core dump would hold it.
fn memory_of(pid: i32) -> Vec<u8> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let mut all = Vec::new();
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (range, perms) = (f.next().unwrap(), f.next().unwrap());
        if !perms.starts_with('r') {
            continue;
        }
        let (a, b) = range.split_once('-').unwrap();
        let (a, b) = (
            u64::from_str_radix(a, 16).unwrap(),
            u64::from_str_radix(b, 16).unwrap(),
        );
        let mut buf = vec![0u8; usize::try_from(b - a).unwrap()];
        // [vvar] and the like refuse reads: not memory a dump holds.
        if mem.read_exact_at(&mut buf, a).is_ok() {
            all.extend_from_slice(&buf);
        }
    }
    all
}

fn git_through_the_wall(test: u32, backend: &str, extra: &str, uid: u32, ssh: bool) {
    let w = World::start(test, backend, extra);
    let ws = w.sup.dirs.workspace("ws", uid);
    let s = open_session(&w.sup, &ws, uid);
    https_git(&w, &s, &ws);
    bearer_request(&w, &s);
    if ssh {
        ssh_git(&w, &s, &ws, uid);
    }
    memory_holds_only_the_placeholder(&w, &s, &ws);
    assert!(!w.sup.stderr().contains(REAL));
}

#[test]
fn native_git_clones_fetches_pulls_and_pushes_over_https_and_ssh_through_the_wall() {
    if !root_or_skip("network_git_native") {
        return;
    }
    git_through_the_wall(90, "native", "", 0, true);
}

#[test]
fn native_non_root_git_clones_fetches_pulls_and_pushes_over_https_and_ssh_through_the_wall() {
    if !root_or_skip("network_git_native_non_root") {
        return;
    }
    git_through_the_wall(91, "native", "", 65534, true);
}

/// The Docker sandbox trusts the session CA too (docker/ca.rs); its image
/// has no ssh client, so ssh is the native backend's here.
#[test]
fn docker_git_over_https_and_a_secret_bound_request_through_the_wall() {
    let Some(image) = super::mcp_gateway_net::full_image_or_skip("network_git_docker") else {
        return;
    };
    let extra = format!("[sandbox]\nimage = \"{image}\"\n");
    git_through_the_wall(92, "docker", &extra, 0, false);
}
