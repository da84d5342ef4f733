//! A development environment inside the walls (docs/INTERFACES.md,
//! run_bash; docs/THREAT_MODEL.md, "The sandbox's environment"): command
//! lines run in bash where the sandbox has it (both backends), `sh` only
//! where it has not, and the tool's description says which; a command
//! killed at its timeout is `ok: false` with code TIMEOUT and its partial
//! output; a timeout above the cap is refused naming the cap.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use tollgate_e2e::harness::{Supervisor, docker_or_skip, root_or_skip};
use tollgate_proto::v1 as pb;

const CONFIG: &str = r#"
[sandbox]
run_timeout_s = 20
max_run_timeout_s = 30

[llm]
provider = "script"
"#;

/// The full (Debian) image: it has bash.
fn full_image() -> String {
    format!("tollgate-sandbox:{}", env!("CARGO_PKG_VERSION"))
}

fn docker_config(image: &str) -> String {
    CONFIG.replace("[sandbox]\n", &format!("[sandbox]\nimage = \"{image}\"\n"))
}

async fn open(sup: &Supervisor, name: &str) -> pb::OpenSessionResponse {
    let ws = sup.dirs.workspace(name, 0);
    let mut c = sup.agent_client().await;
    c.open_session(pb::OpenSessionRequest {
        workspace: ws.display().to_string(),
        mode: "dangerouslySkipPermissions".to_string(),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
}

async fn bash(
    sup: &Supervisor,
    token: &str,
    command: &str,
    t: Option<u64>,
) -> pb::CallToolResponse {
    let mut args = serde_json::json!({ "command": command });
    if let Some(t) = t {
        args["timeout_s"] = t.into();
    }
    sup.call_tool(token, "run_bash", args).await
}

async fn run_bash_description(sup: &Supervisor, token: &str) -> String {
    let mut c = sup.agent_client().await;
    let tools = c
        .list_tools(tollgate_e2e::harness::authed(
            pb::ListToolsRequest {},
            token,
        ))
        .await
        .unwrap()
        .into_inner()
        .tools;
    tools
        .into_iter()
        .find(|t| t.name == "run_bash")
        .expect("run_bash listed")
        .description
}

/// What bash has and dash has not: `[[ ]]`, arrays, process substitution,
/// pipefail, `source`.
const BASH_FEATURES: &str = r#"[[ -d . && abc == a* ]] && echo dbl-bracket
arr=(one two three); echo "array=${#arr[@]} ${arr[1]}"
cat <(echo procsub)
set -o pipefail; false | true; echo "pipefail=$?"
echo 'sourced=yes' > /tmp/lib.sh; source /tmp/lib.sh; echo "sourced=$sourced"
echo "shell=${BASH_VERSION:+bash}""#;

fn assert_bash_features(r: &pb::CallToolResponse, what: &str) {
    assert!(r.ok, "{what}: {r:?}");
    for want in [
        "dbl-bracket\n",
        "array=3 two\n",
        "procsub\n",
        "pipefail=1\n",
        "sourced=yes\n",
        "shell=bash\n",
    ] {
        assert!(
            r.output.contains(want),
            "{what}: no {want:?} in:\n{}",
            r.output
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_bash_runs_bash_natively_and_says_so() {
    if !root_or_skip("run_bash_runs_bash_natively_and_says_so") {
        return;
    }
    let sup = Supervisor::builder().config(CONFIG).start();
    let s = open(&sup, "ws").await;
    let r = bash(&sup, &s.token, BASH_FEATURES, None).await;
    assert_bash_features(&r, "native");
    let d = run_bash_description(&sup, &s.token).await;
    assert!(d.contains("with bash (`bash -c`)"), "{d}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_bash_runs_bash_in_an_image_with_bash_and_sh_in_one_without() {
    let test = "run_bash_runs_bash_in_an_image_with_bash_and_sh_in_one_without";
    if !root_or_skip(test) || !docker_or_skip(test) {
        return;
    }
    let sup = Supervisor::builder()
        .config(&docker_config(&full_image()))
        .sandbox("docker")
        .start();
    let s = open(&sup, "ws").await;
    let r = bash(&sup, &s.token, BASH_FEATURES, None).await;
    assert_bash_features(&r, "docker, full image");
    let d = run_bash_description(&sup, &s.token).await;
    assert!(d.contains("with bash (`bash -c`)"), "{d}");
    drop(sup);

    // The minimal image is busybox: no bash, so `sh -c`, and the
    // description says so once the backend has seen the image.
    let sup = Supervisor::builder()
        .config(&docker_config(&tollgate_e2e::harness::minimal_image()))
        .sandbox("docker")
        .start();
    let s = open(&sup, "ws").await;
    let r = bash(&sup, &s.token, "echo \"shell=${BASH_VERSION:-none}\"", None).await;
    assert!(r.ok && r.output == "shell=none\n", "{r:?}");
    let d = run_bash_description(&sup, &s.token).await;
    assert!(
        d.contains("with sh (`sh -c`; this sandbox has no bash"),
        "{d}"
    );
}

async fn timeouts_are_honest(sup: &Supervisor, what: &str) {
    let s = open(sup, "ws").await;
    let r = bash(sup, &s.token, "echo started; sleep 30; echo never", Some(1)).await;
    assert!(!r.ok, "{what}: a timed-out command is not ok: {r:?}");
    assert_eq!(r.code, "TIMEOUT", "{what}: {r:?}");
    assert!(
        r.output.starts_with("started\n"),
        "{what}: partial output kept: {r:?}"
    );
    assert!(!r.output.contains("never"), "{what}: {r:?}");
    assert!(r.error.contains("timed out after 1s"), "{what}: {r:?}");
    // Above the cap: refused, naming the cap; nothing ran.
    let r = bash(sup, &s.token, "touch ran-anyway", Some(3600)).await;
    assert!(!r.ok && r.code.is_empty(), "{what}: {r:?}");
    assert!(
        r.error
            .contains("timeout_s 3600 is above this host's cap of 30s"),
        "{what}: {r:?}"
    );
    let r = bash(sup, &s.token, "ls ran-anyway 2>&1 || echo absent", None).await;
    assert!(r.output.contains("absent"), "{what}: {r:?}");
    // Within the cap, an ordinary command is ok with its exit code.
    let r = bash(sup, &s.token, "exit 3", Some(30)).await;
    assert!(
        r.ok && r.exit_code == Some(3) && r.code.is_empty(),
        "{what}: {r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_command_is_not_ok_and_a_timeout_above_the_cap_is_refused() {
    if !root_or_skip("a_timed_out_command_is_not_ok_and_a_timeout_above_the_cap_is_refused") {
        return;
    }
    let sup = Supervisor::builder().config(CONFIG).start();
    timeouts_are_honest(&sup, "native").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_timeouts_are_honest_too() {
    let test = "docker_timeouts_are_honest_too";
    if !root_or_skip(test) || !docker_or_skip(test) {
        return;
    }
    let sup = Supervisor::builder()
        .config(&docker_config(&full_image()))
        .sandbox("docker")
        .start();
    timeouts_are_honest(&sup, "docker").await;
}

/// A local user made for a test, with a home beneath /opt holding a rustup
/// toolchain (hard links of this machine's: no disk spent), a git
/// identity, a credential file inside a shown toolchain directory and a
/// file of the home that is not a toolchain's. Removed when dropped.
pub(super) struct Owner {
    pub(super) name: String,
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) home: std::path::PathBuf,
    /// Last, so it is released after `drop` has run userdel.
    _passwd: std::sync::MutexGuard<'static, ()>,
}

/// What the credential file inside `~/.config` holds: never seen inside.
const SECRET: &str = "tollgate-devenv-secret-token";

impl Owner {
    pub(super) fn create(tag: &str) -> Owner {
        use std::process::Command;
        let passwd = tollgate_e2e::harness::passwd_writer();
        let pid = std::process::id();
        let name = format!("tgdev{tag}{pid}");
        let home = std::path::PathBuf::from(format!("/opt/tollgate-devenv-{tag}-{pid}"));
        let _ = std::fs::remove_dir_all(&home);
        let mut last = String::new();
        for _ in 0..20 {
            let out = Command::new("useradd")
                .args(["-M", "-s", "/bin/bash", "-d"])
                .arg(&home)
                .arg(&name)
                .output()
                .unwrap();
            if out.status.success() {
                last.clear();
                break;
            }
            last = String::from_utf8_lossy(&out.stderr).into_owned();
            std::thread::sleep(std::time::Duration::from_millis(250));
        }
        assert!(last.is_empty(), "useradd {name}: {last}");
        let id = |flag: &str| -> u32 {
            let out = Command::new("id").arg(flag).arg(&name).output().unwrap();
            String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
        };
        let o = Owner {
            uid: id("-u"),
            gid: id("-g"),
            name,
            home,
            _passwd: passwd,
        };
        o.plant();
        o
    }

    /// The user's toolchain: rustup's proxies and one toolchain, linked
    /// from root's (`cp -al`), with the user's own settings.
    fn plant(&self) {
        use std::process::Command;
        let tc = "stable-x86_64-unknown-linux-gnu";
        let h = &self.home;
        // As rustup-init leaves them.
        for d in [
            ".rustup/toolchains",
            ".rustup/update-hashes",
            ".rustup/downloads",
            ".rustup/tmp",
            ".cargo",
            ".config/gh",
            ".config/tool",
        ] {
            std::fs::create_dir_all(h.join(d)).unwrap();
        }
        for (src, dst) in [
            (
                format!("/root/.rustup/toolchains/{tc}"),
                h.join(".rustup/toolchains"),
            ),
            ("/root/.cargo/bin".to_string(), h.join(".cargo")),
        ] {
            let ok = Command::new("cp")
                .arg("-al")
                .arg(&src)
                .arg(&dst)
                .status()
                .unwrap();
            assert!(ok.success(), "cp -al {src}");
        }
        let files = [
            (
                ".rustup/settings.toml",
                format!("version = \"12\"\ndefault_toolchain = \"{tc}\"\nprofile = \"default\"\n"),
            ),
            (
                ".gitconfig",
                format!(
                    "[user]\n\tname = Dev Owner {}\n\temail = {}@example.invalid\n[core]\n\thooksPath = /nonexistent\n",
                    self.name, self.name
                ),
            ),
            (".config/gh/hosts.yml", format!("oauth_token: {SECRET}\n")),
            (".config/tool/settings", "shown\n".to_string()),
            ("notes.txt", "not a toolchain\n".to_string()),
        ];
        for (rel, body) in files {
            std::fs::write(h.join(rel), body).unwrap();
        }
        let ok = Command::new("chown")
            .arg("-R")
            .arg(format!("{}:{}", self.uid, self.gid))
            .arg(h)
            .status()
            .unwrap();
        assert!(ok.success());
        // The linked toolchain stays root's files (hard links): readable.
        std::fs::set_permissions(h, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.home);
        for _ in 0..20 {
            match std::process::Command::new("userdel")
                .arg(&self.name)
                .status()
            {
                Ok(s) if s.success() => return,
                _ => std::thread::sleep(std::time::Duration::from_millis(250)),
            }
        }
    }
}

/// `e2e-client` as `uid`: its one line, `OK …` or `ERR …`.
pub(super) fn client_as(
    sup: &Supervisor,
    uid: u32,
    gid: u32,
    token: &str,
    args: &[&str],
) -> String {
    use std::os::unix::process::CommandExt;
    let out = std::process::Command::new(sup.dirs.staged_bin("e2e-client"))
        .arg(&sup.agent_socket)
        .arg(token)
        .args(args)
        .uid(uid)
        .gid(gid)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "e2e-client: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A session of `uid` in a fresh workspace of theirs; run_bash `command`
/// returns the result's JSON.
struct UserSession<'a> {
    sup: &'a Supervisor,
    uid: u32,
    gid: u32,
    token: String,
    ws: std::path::PathBuf,
}

impl<'a> UserSession<'a> {
    fn open(sup: &'a Supervisor, uid: u32, gid: u32, name: &str) -> UserSession<'a> {
        let ws = sup.dirs.workspace(name, uid);
        let line = client_as(
            sup,
            uid,
            gid,
            "-",
            &["open", ws.to_str().unwrap(), "dangerouslySkipPermissions"],
        );
        let token = line
            .strip_prefix("OK ")
            .and_then(|r| r.split_whitespace().nth(1))
            .unwrap_or_else(|| panic!("open: {line}"))
            .to_string();
        UserSession {
            sup,
            uid,
            gid,
            token,
            ws,
        }
    }

    fn bash(&self, command: &str) -> serde_json::Value {
        let args = serde_json::json!({ "command": command, "timeout_s": 30 }).to_string();
        let line = client_as(
            self.sup,
            self.uid,
            self.gid,
            &self.token,
            &["call", "run_bash", &args],
        );
        let json = line
            .strip_prefix("OK ")
            .unwrap_or_else(|| panic!("run_bash {command}: {line}"));
        serde_json::from_str(json).unwrap()
    }

    /// The command's output; it must have run and exited 0.
    fn ok(&self, command: &str) -> String {
        let r = self.bash(command);
        assert!(r["ok"] == true && r["exit_code"] == 0, "{command}: {r}");
        r["output"].as_str().unwrap().to_string()
    }
}

/// Everything the owner's environment gives a session: HOME at their home
/// path, private and writable; TMPDIR; PATH with their toolchain; a crate
/// built with their rustup toolchain; git commits with their identity
/// (nothing else of their git config); their credential file inside a
/// shown toolchain directory still hidden; the rest of their home absent;
/// the toolchains read-only.
fn the_owners_environment(sup: &Supervisor, owner: &Owner, what: &str) {
    let s = UserSession::open(sup, owner.uid, owner.gid, &format!("ws-{what}"));
    let h = owner.home.display().to_string();
    let out = s.ok("echo \"home=$HOME tmp=$TMPDIR\"; echo \"path=$PATH\"; command -v cargo");
    assert!(
        out.contains(&format!("home={h} tmp=/tmp\n")),
        "{what}: {out}"
    );
    assert!(out.contains(&format!("{h}/.cargo/bin")), "{what}: {out}");
    assert!(
        out.ends_with(&format!("{h}/.cargo/bin/cargo\n")),
        "{what}: {out}"
    );
    // A command may set PATH for itself inside the sandbox.
    let out = s.ok("export PATH=$HOME/.cargo/bin:/usr/bin:/bin; cargo --version");
    assert!(out.starts_with("cargo "), "{what}: {out}");
    let out = s.ok(
        "cargo new --vcs none --quiet hello && cd hello && cargo build --offline --quiet 2>&1 && ./target/debug/hello",
    );
    assert!(out.ends_with("Hello, world!\n"), "{what}: {out}");
    let out = s.ok(
        "cd $TMPDIR && git init -q r && cd r && echo a > f && git add f && git commit -qm first && git log --format='%an <%ae>' && git config --get core.hooksPath || echo no-hooks-path",
    );
    assert!(
        out.contains(&format!(
            "Dev Owner {} <{}@example.invalid>\n",
            owner.name, owner.name
        )) && out.ends_with("no-hooks-path\n"),
        "{what}: {out}"
    );
    // The home is private and writable; the toolchains are read-only; the
    // rest of the host's home is not there; a credential path in a shown
    // directory is masked. In a script: the policy does not read inside
    // it, so what stops it is the sandbox.
    std::fs::write(
        s.ws.join("probe.sh"),
        "echo mine > \"$HOME/.scratch\" && cat \"$HOME/.scratch\"\n\
         touch \"$HOME/.cargo/bin/planted\" 2>/dev/null || echo toolchain-read-only\n\
         cat \"$HOME/.config/tool/settings\"\n\
         cat \"$HOME/.config/gh/hosts.yml\" 2>/dev/null\n\
         ls \"$HOME/notes.txt\" 2>/dev/null || echo notes-absent\n",
    )
    .unwrap();
    let out = s.ok("bash probe.sh");
    assert_eq!(
        out, "mine\ntoolchain-read-only\nshown\nnotes-absent\n",
        "{what}"
    );
    assert!(!out.contains(SECRET), "{what}: {out}");
    assert!(
        !owner.home.join(".scratch").exists() && !owner.home.join(".cargo/bin/planted").exists()
    );
}

const OWNER_CONFIG: &str = r#"
[sandbox]
run_timeout_s = 30
max_run_timeout_s = 60
toolchain_dirs = [".cargo/bin", ".rustup", ".config"]

[session]
output_cap_bytes = 100000

[llm]
provider = "script"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_root_owners_toolchain_identity_and_home_natively() {
    if !root_or_skip("a_non_root_owners_toolchain_identity_and_home_natively") {
        return;
    }
    let owner = Owner::create("n");
    let sup = Supervisor::builder().config(OWNER_CONFIG).start();
    the_owners_environment(&sup, &owner, "native");
}

/// On Docker (the full image: no C linker, so no crate is linked there):
/// HOME is the owner's path, private and writable; their rustup toolchain
/// is there read-only and runs; a toolchain directory holding a credential
/// path is left out (Docker cannot mask inside a bind); the rest of their
/// home is absent; git has their identity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_root_owners_toolchain_and_home_on_docker() {
    let test = "a_non_root_owners_toolchain_and_home_on_docker";
    if !root_or_skip(test) || !docker_or_skip(test) {
        return;
    }
    let owner = Owner::create("d");
    let config = OWNER_CONFIG.replace(
        "[sandbox]\n",
        &format!(
            "[sandbox]\nbackend = \"docker\"\nimage = \"{}\"\n",
            full_image()
        ),
    );
    let sup = Supervisor::builder()
        .config(&config)
        .sandbox("docker")
        .start();
    let s = UserSession::open(&sup, owner.uid, owner.gid, "ws-docker");
    let h = owner.home.display().to_string();
    let out = s.ok("echo \"home=$HOME tmp=$TMPDIR\"; cargo --version; rustc --version");
    assert!(
        out.starts_with(&format!("home={h} tmp=/tmp\ncargo ")),
        "{out}"
    );
    assert!(out.contains("\nrustc "), "{out}");
    std::fs::write(
        s.ws.join("probe.sh"),
        "echo mine > \"$HOME/.scratch\" && cat \"$HOME/.scratch\"\n\
         touch \"$HOME/.cargo/bin/planted\" 2>/dev/null || echo toolchain-read-only\n\
         cat \"$HOME/.config/gh/hosts.yml\" 2>/dev/null || echo credential-absent\n\
         ls \"$HOME/notes.txt\" 2>/dev/null || echo notes-absent\n",
    )
    .unwrap();
    let out = s.ok("sh probe.sh");
    assert_eq!(
        out,
        "mine\ntoolchain-read-only\ncredential-absent\nnotes-absent\n"
    );
    assert!(!owner.home.join(".scratch").exists());
    // git commits with the owner's identity, nothing else of their config
    // (their core.hooksPath is not there), as natively.
    let out = s.ok(
        "cd $TMPDIR && git init -q r && cd r && echo a > f && git add f && git commit -qm first && git log --format='%an <%ae>' && git config --get core.hooksPath || echo no-hooks-path",
    );
    assert_eq!(
        out,
        format!(
            "Dev Owner {} <{}@example.invalid>\nno-hooks-path\n",
            owner.name, owner.name
        )
    );
}

/// A root owner: their own toolchain (this machine's /root/.rustup) builds
/// a crate in the native sandbox; HOME is /root's private stand-in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_owners_toolchain_builds_a_crate_natively() {
    if !root_or_skip("a_root_owners_toolchain_builds_a_crate_natively") {
        return;
    }
    if !std::path::Path::new("/root/.cargo/bin/cargo").exists() {
        panic!("this test needs root's rustup toolchain in /root/.cargo and /root/.rustup");
    }
    let sup = Supervisor::builder().config(OWNER_CONFIG).start();
    let s = open(&sup, "ws-root").await;
    let r = bash(
        &sup,
        &s.token,
        "echo \"home=$HOME\"; cargo new --vcs none --quiet hello && cd hello && cargo build --offline --quiet 2>&1 && ./target/debug/hello",
        Some(60),
    )
    .await;
    assert!(r.ok && r.exit_code == Some(0), "{r:?}");
    assert!(
        r.output.starts_with("home=/root\n") && r.output.ends_with("Hello, world!\n"),
        "{r:?}"
    );
}

/// What `loopback.sh` does inside the sandbox: an HTTP server and a
/// PostgreSQL started there, each queried over the sandbox's own loopback;
/// the host's loopback listener (its port in `HOST_PORT`) is not reachable.
const LOOPBACK_SCRIPT: &str = r#"set -e
cd "$TMPDIR"
mkdir www && echo hello-loopback > www/index.html
python3 -m http.server --bind 127.0.0.1 18080 --directory www >/dev/null 2>&1 &
srv=$!
get='import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:18080/index.html").read().decode().strip())'
for i in $(seq 100); do python3 -c "$get" 2>/dev/null && break; sleep 0.1; done
kill "$srv"
PG="$(ls -d /usr/lib/postgresql/*/bin | tail -n 1)"
"$PG/initdb" -D "$TMPDIR/pg" -A trust -U tg >/dev/null
"$PG/pg_ctl" -D "$TMPDIR/pg" -o "-c listen_addresses=127.0.0.1 -p 15432 -k $TMPDIR" -l "$TMPDIR/pg.log" -w start >/dev/null
psql -h 127.0.0.1 -p 15432 -U tg -d postgres -Atc 'select 40 + 2'
"$PG/pg_ctl" -D "$TMPDIR/pg" -m fast -w stop >/dev/null
python3 -c "import socket, sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 2)" "$HOST_PORT" 2>/dev/null && echo host-loopback-reached || echo host-loopback-unreachable
"#;

/// Natively, a non-root owner (PostgreSQL refuses root): a local HTTP
/// server and a PostgreSQL server started inside the sandbox bind and
/// answer on its own loopback; the host's loopback stays out of reach.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_server_and_postgresql_on_the_sandboxs_own_loopback_natively() {
    if !root_or_skip("an_http_server_and_postgresql_on_the_sandboxs_own_loopback_natively") {
        return;
    }
    let pg = std::fs::read_dir("/usr/lib/postgresql").map(|rd| rd.count());
    assert!(
        pg.is_ok_and(|n| n > 0),
        "this test needs PostgreSQL's server (apt-get install postgresql; .ci/run installs it)"
    );
    let host = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let host_port = host.local_addr().unwrap().port();
    let owner = Owner::create("l");
    let sup = Supervisor::builder().config(OWNER_CONFIG).start();
    let s = UserSession::open(&sup, owner.uid, owner.gid, "ws-loopback");
    std::fs::write(s.ws.join("loopback.sh"), LOOPBACK_SCRIPT).unwrap();
    let r = s.bash(&format!("HOST_PORT={host_port} bash loopback.sh 2>&1"));
    assert!(r["ok"] == true && r["exit_code"] == 0, "{r}");
    // What the walls refused on the way (python's ioctl on /dev/null) may
    // follow, attributed: every further line is the sandbox's.
    let out = r["output"].as_str().unwrap();
    let rest = out
        .strip_prefix("hello-loopback\n42\nhost-loopback-unreachable\n")
        .unwrap_or_else(|| panic!("{r}"));
    assert!(rest.lines().all(|l| l.starts_with("sandbox: ")), "{r}");
    drop(host);
}
