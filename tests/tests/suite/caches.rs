//! Package caches kept between sessions (docs/OPERATIONS.md "Package
//! caches", docs/THREAT_MODEL.md "Package caches"): one per owner outside
//! every workspace, attached at `~/.tollgate-cache` with the tools' cache
//! variables (both backends); two owners never see each other's; one per
//! workspace with `cache = "workspace"`; none (the private home's tmpfs)
//! with `cache = "off"`; over `cache_max_mb` the oldest files go once no
//! sandbox of the owner has the cache (never under a live session);
//! `supervisorctl cache list|clear`, the clear
//! refused while the owner's session runs, or while any sandbox holds the
//! cache's lease (an operator's `sandbox exec`), and recorded in the audit
//! log.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use tollgate_e2e::harness::{Supervisor, authed, docker_or_skip, root_or_skip};
use tollgate_proto::v1 as pb;

use super::devenv::{Owner, client_as};

const CONFIG: &str = r#"
[sandbox]
run_timeout_s = 30
max_run_timeout_s = 60
toolchain_dirs = []

[llm]
provider = "script"
"#;

/// [`CONFIG`] with `extra` in `[sandbox]` (its own `toolchain_dirs`, when
/// it names them).
fn config(extra: &str) -> String {
    let base = if extra.contains("toolchain_dirs") {
        CONFIG.replace("toolchain_dirs = []\n", "")
    } else {
        CONFIG.to_string()
    };
    base.replace("[sandbox]\n", &format!("[sandbox]\n{extra}\n"))
}

fn full_image() -> String {
    format!("tollgate-sandbox:{}", env!("CARGO_PKG_VERSION"))
}

fn docker(extra: &str) -> String {
    config(&format!(
        "backend = \"docker\"\nimage = \"{}\"\n{extra}",
        full_image()
    ))
}

/// What every cache variable names, on one line each. The commands below
/// write through the variables: the shell floor judges them with the
/// values the sandbox sets.
const SHOW_VARS: &str = "for v in npm_config_cache PIP_CACHE_DIR CARGO_HOME GOMODCACHE BUN_INSTALL_CACHE_DIR YARN_CACHE_FOLDER; do echo \"$v=${!v:-unset}\"; done";

/// Two files in the npm cache, together over a cap of 1 MiB: `old` (two
/// days old) goes first.
const OVER_THE_CAP: &str = "mkdir -p \"$npm_config_cache\" && cd \"$npm_config_cache\" && head -c 700000 /dev/urandom > old && touch -d '2 days ago' old && head -c 700000 /dev/urandom > new && ls";

fn vars_at(at: &str) -> String {
    [
        ("npm_config_cache", "npm"),
        ("PIP_CACHE_DIR", "pip"),
        ("CARGO_HOME", "cargo"),
        ("GOMODCACHE", "go-mod"),
        ("BUN_INSTALL_CACHE_DIR", "bun"),
        ("YARN_CACHE_FOLDER", "yarn"),
    ]
    .iter()
    .map(|(k, d)| format!("{k}={at}/{d}\n"))
    .collect()
}

/// A session of root (the test's own uid) in workspace `name`.
struct RootSession<'a> {
    sup: &'a Supervisor,
    id: String,
    token: String,
}

impl<'a> RootSession<'a> {
    async fn open(sup: &'a Supervisor, name: &str) -> RootSession<'a> {
        let ws = sup.dirs.workspace(name, 0);
        let mut c = sup.agent_client().await;
        let r = c
            .open_session(pb::OpenSessionRequest {
                workspace: ws.display().to_string(),
                mode: "dangerouslySkipPermissions".to_string(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        RootSession {
            sup,
            id: r.session_id,
            token: r.token,
        }
    }

    async fn ok(&self, command: &str) -> String {
        let r = self
            .sup
            .call_tool(
                &self.token,
                "run_bash",
                serde_json::json!({ "command": command, "timeout_s": 30 }),
            )
            .await;
        assert!(r.ok && r.exit_code == Some(0), "{command}: {r:?}");
        r.output
    }

    async fn close(self) {
        let mut c = self.sup.agent_client().await;
        c.close_session(authed(pb::CloseSessionRequest {}, &self.token))
            .await
            .unwrap();
    }
}

/// A session of a test user (`e2e-client` as them), closed by revoking it.
struct UserSession<'a> {
    sup: &'a Supervisor,
    owner: &'a Owner,
    id: String,
    token: String,
}

impl<'a> UserSession<'a> {
    fn open(sup: &'a Supervisor, owner: &'a Owner, name: &str) -> UserSession<'a> {
        let ws = sup.dirs.workspace(name, owner.uid);
        let line = client_as(
            sup,
            owner.uid,
            owner.gid,
            "-",
            &["open", ws.to_str().unwrap(), "dangerouslySkipPermissions"],
        );
        let mut words = line
            .strip_prefix("OK ")
            .unwrap_or_else(|| panic!("open: {line}"))
            .split_whitespace();
        let id = words.next().unwrap().to_string();
        let token = words.next().unwrap().to_string();
        UserSession {
            sup,
            owner,
            id,
            token,
        }
    }

    fn ok(&self, command: &str) -> String {
        let args = serde_json::json!({ "command": command, "timeout_s": 30 }).to_string();
        let line = client_as(
            self.sup,
            self.owner.uid,
            self.owner.gid,
            &self.token,
            &["call", "run_bash", &args],
        );
        let r: serde_json::Value = serde_json::from_str(
            line.strip_prefix("OK ")
                .unwrap_or_else(|| panic!("run_bash {command}: {line}")),
        )
        .unwrap();
        assert!(r["ok"] == true && r["exit_code"] == 0, "{command}: {r}");
        r["output"].as_str().unwrap().to_string()
    }

    fn close(self) {
        let out = self.sup.ctl(&["revoke", &self.id]);
        assert!(out.status.success(), "{out:?}");
    }
}

fn caches_root(sup: &Supervisor) -> PathBuf {
    sup.dirs.state.join("caches")
}

fn mode_of(p: &Path) -> (u32, u32) {
    let m = std::fs::symlink_metadata(p).unwrap();
    (m.uid(), m.mode() & 0o7777)
}

/// One owner's cache, written in one session, is there in the next (in
/// another workspace), natively: the variables name it, it lives beneath
/// the state directory, the owner's own (0700).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_written_in_one_session_is_there_in_the_next_natively() {
    if !root_or_skip("a_cache_written_in_one_session_is_there_in_the_next_natively") {
        return;
    }
    let sup = Supervisor::builder().config(CONFIG).start();
    persists(&sup, "native").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_written_in_one_session_is_there_in_the_next_on_docker() {
    let Some(sup) = docker_supervisor(
        "a_cache_written_in_one_session_is_there_in_the_next_on_docker",
        "",
    ) else {
        return;
    };
    persists(&sup, "docker").await;
}

async fn persists(sup: &Supervisor, what: &str) {
    let a = RootSession::open(sup, "ws-a").await;
    let out = a.ok(SHOW_VARS).await;
    assert_eq!(out, vars_at("/root/.tollgate-cache"), "{what}");
    a.ok("mkdir -p \"$npm_config_cache\" \"$CARGO_HOME/registry\" && echo kept > \"$npm_config_cache/marker\" && echo crate > $CARGO_HOME/registry/c").await;
    a.close().await;
    let leaf = caches_root(sup).join("0/owner");
    assert_eq!(
        std::fs::read_to_string(leaf.join("npm/marker")).unwrap(),
        "kept\n",
        "{what}"
    );
    assert_eq!(mode_of(&leaf), (0, 0o700), "{what}");
    let b = RootSession::open(sup, "ws-b").await;
    let out = b
        .ok("cat \"$npm_config_cache/marker\" $CARGO_HOME/registry/c")
        .await;
    assert_eq!(out, "kept\ncrate\n", "{what}");
    // Nothing else of the home persists.
    b.ok("echo gone > \"$HOME/.scratch\"").await;
    b.close().await;
    let c = RootSession::open(sup, "ws-c").await;
    let out = c
        .ok("cat \"$HOME/.scratch\" 2>/dev/null || echo absent")
        .await;
    assert_eq!(out, "absent\n", "{what}");
    c.close().await;
}

/// A non-root owner's cache is theirs (uid, 0700); neither owner sees the
/// other's, nor the directory the caches are kept in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_owners_caches_are_not_visible_to_each_other() {
    if !root_or_skip("two_owners_caches_are_not_visible_to_each_other") {
        return;
    }
    let owner = Owner::create("c");
    let sup = Supervisor::builder().config(CONFIG).start();
    two_owners(&sup, &owner).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_owners_caches_are_not_visible_to_each_other_on_docker() {
    let Some(sup) = docker_supervisor(
        "two_owners_caches_are_not_visible_to_each_other_on_docker",
        "",
    ) else {
        return;
    };
    let owner = Owner::create("cd");
    two_owners(&sup, &owner).await;
}

/// A supervisor on the Docker backend with the full image and `extra` in
/// `[sandbox]`; `None` (the test skipped) without root or Docker.
fn docker_supervisor(test: &str, extra: &str) -> Option<Supervisor> {
    if !root_or_skip(test) || !docker_or_skip(test) {
        return None;
    }
    Some(
        Supervisor::builder()
            .config(&docker(extra))
            .sandbox("docker")
            .start(),
    )
}

async fn two_owners(sup: &Supervisor, owner: &Owner) {
    let root = RootSession::open(sup, "ws-root").await;
    root.ok("mkdir -p \"$npm_config_cache\" && echo root-only > \"$npm_config_cache/root-marker\"")
        .await;
    let user = UserSession::open(sup, owner, "ws-user");
    let home = owner.home.display().to_string();
    let out = user.ok(SHOW_VARS);
    assert_eq!(out, vars_at(&format!("{home}/.tollgate-cache")));
    // In a script: the shell floor refuses the supervisor's own paths
    // before anything runs; what is checked here is the sandbox.
    std::fs::write(
        sup.dirs.workspace("ws-user", owner.uid).join("probe.sh"),
        format!(
            "mkdir -p \"$npm_config_cache\" && echo user-only > \"$npm_config_cache/user-marker\"\n\
             ls -A \"$npm_config_cache\"\n\
             ls {} 2>/dev/null || echo caches-dir-hidden\n",
            caches_root(sup).display()
        ),
    )
    .unwrap();
    assert_eq!(user.ok("bash probe.sh"), "user-marker\ncaches-dir-hidden\n");
    let out = root.ok("ls -A \"$npm_config_cache\"").await;
    assert_eq!(out, "root-marker\n");
    let leaf = caches_root(sup).join(format!("{}/owner", owner.uid));
    assert_eq!(mode_of(&leaf), (owner.uid, 0o700));
    assert_eq!(
        mode_of(&caches_root(sup).join(owner.uid.to_string())),
        (0, 0o700)
    );
    assert!(leaf.join("npm/user-marker").exists());
    assert!(!leaf.join("npm/root-marker").exists());
    user.close();
    root.close().await;
}

/// `cache = "workspace"`: one cache per owner and workspace, named in
/// `cache list` with its workspace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_workspace_keeps_one_cache_per_workspace() {
    if !root_or_skip("cache_workspace_keeps_one_cache_per_workspace") {
        return;
    }
    let sup = Supervisor::builder()
        .config(&config("cache = \"workspace\""))
        .start();
    let a = RootSession::open(&sup, "ws-a").await;
    a.ok("mkdir -p $PIP_CACHE_DIR && echo a > $PIP_CACHE_DIR/marker")
        .await;
    a.close().await;
    let b = RootSession::open(&sup, "ws-b").await;
    let out = b
        .ok("cat $PIP_CACHE_DIR/marker 2>/dev/null || echo not-here")
        .await;
    assert_eq!(out, "not-here\n");
    b.close().await;
    let a = RootSession::open(&sup, "ws-a").await;
    assert_eq!(a.ok("cat $PIP_CACHE_DIR/marker").await, "a\n");
    a.close().await;
    let list = list_json(&sup);
    assert_eq!(list["mode"], "workspace");
    let caches = list["caches"].as_array().unwrap();
    let ws_a = sup.dirs.workspace("ws-a", 0).display().to_string();
    let got: Vec<(String, bool)> = caches
        .iter()
        .map(|c| {
            (
                c["workspace"].as_str().unwrap().to_string(),
                c["path"]
                    .as_str()
                    .unwrap()
                    .starts_with(&caches_root(&sup).join("0/ws-").display().to_string()),
            )
        })
        .collect();
    assert_eq!(got.len(), 2, "{list}");
    assert!(got.contains(&(ws_a, true)), "{list}");
    assert!(got.iter().all(|(_, under)| *under), "{list}");
}

/// `cache = "off"`: no cache variable, nothing attached, nothing kept: the
/// tools' own defaults in the private home, emptied with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_off_keeps_caches_in_the_private_home_only() {
    if !root_or_skip("cache_off_keeps_caches_in_the_private_home_only") {
        return;
    }
    let sup = Supervisor::builder()
        .config(&config("cache = \"off\""))
        .start();
    let a = RootSession::open(&sup, "ws").await;
    let out = a.ok(SHOW_VARS).await;
    assert_eq!(
        out,
        "npm_config_cache=unset\nPIP_CACHE_DIR=unset\nCARGO_HOME=unset\nGOMODCACHE=unset\nBUN_INSTALL_CACHE_DIR=unset\nYARN_CACHE_FOLDER=unset\n"
    );
    let out = a
        .ok("ls -d ~/.tollgate-cache 2>/dev/null || echo no-cache; mkdir -p ~/.npm && echo x > ~/.npm/m && df --output=fstype ~/.npm | tail -1")
        .await;
    assert_eq!(out, "no-cache\ntmpfs\n");
    a.close().await;
    let b = RootSession::open(&sup, "ws").await;
    assert_eq!(
        b.ok("cat ~/.npm/m 2>/dev/null || echo gone").await,
        "gone\n"
    );
    b.close().await;
    assert!(!caches_root(&sup).exists());
}

/// `cache = "off"` on Docker: the directories the engine makes above a
/// toolchain's mount point (`~/.cargo` above `~/.cargo/bin`) are the
/// session's, so cargo's registry and the like can be written beside the
/// read-only toolchain by a non-root owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_off_on_docker_leaves_the_home_above_a_toolchain_writable() {
    let Some(sup) = docker_supervisor(
        "cache_off_on_docker_leaves_the_home_above_a_toolchain_writable",
        "cache = \"off\"\ntoolchain_dirs = [\".cargo/bin\", \".rustup\"]",
    ) else {
        return;
    };
    let owner = Owner::create("co");
    let user = UserSession::open(&sup, &owner, "ws");
    // In a script: the shell floor refuses a write to the read-only
    // toolchain before anything runs; what is checked here is the sandbox.
    std::fs::write(
        sup.dirs.workspace("ws", owner.uid).join("probe.sh"),
        "mkdir -p ~/.cargo/registry && echo written > ~/.cargo/registry/x && cat ~/.cargo/registry/x\n\
         stat -c %u ~/.cargo\n\
         test -x ~/.cargo/bin/cargo && echo toolchain-shown\n\
         touch ~/.cargo/bin/x 2>/dev/null && echo bin-writable || echo bin-read-only\n",
    )
    .unwrap();
    let out = user.ok("bash probe.sh");
    assert_eq!(
        out,
        format!("written\n{}\ntoolchain-shown\nbin-read-only\n", owner.uid)
    );
    user.close();
}

/// Over `cache_max_mb` the oldest files are removed once no sandbox has
/// the cache (here: when the session ends, before the next one's sandbox
/// is built), until the cache fits; the newer ones stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_cap_the_oldest_files_go_before_the_next_sandbox() {
    if !root_or_skip("over_the_cap_the_oldest_files_go_before_the_next_sandbox") {
        return;
    }
    let sup = Supervisor::builder()
        .config(&config("cache_max_mb = 1"))
        .start();
    over_the_cap(&sup).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_cap_the_oldest_files_go_before_the_next_sandbox_on_docker() {
    let Some(sup) = docker_supervisor(
        "over_the_cap_the_oldest_files_go_before_the_next_sandbox_on_docker",
        "cache_max_mb = 1",
    ) else {
        return;
    };
    over_the_cap(&sup).await;
}

async fn over_the_cap(sup: &Supervisor) {
    let a = RootSession::open(sup, "ws").await;
    a.ok(OVER_THE_CAP).await;
    a.close().await;
    let b = RootSession::open(sup, "ws").await;
    let out = b.ok("ls \"$npm_config_cache\"").await;
    assert_eq!(out, "new\n");
    b.close().await;
}

/// Two sessions of one owner share the cache: the second's sandbox start
/// removes nothing the first may be using, nor does the first's end while
/// the second runs; the trim happens once the last of them ends
/// (docs/OPERATIONS.md "Package caches").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_in_use_is_trimmed_only_after_its_last_session_ends() {
    if !root_or_skip("a_cache_in_use_is_trimmed_only_after_its_last_session_ends") {
        return;
    }
    let sup = Supervisor::builder()
        .config(&config("cache_max_mb = 1"))
        .start();
    let a = RootSession::open(&sup, "ws-a").await;
    a.ok(OVER_THE_CAP).await;
    let b = RootSession::open(&sup, "ws-b").await;
    assert_eq!(b.ok("ls \"$npm_config_cache\"").await, "new\nold\n");
    assert_eq!(a.ok("ls \"$npm_config_cache\"").await, "new\nold\n");
    a.close().await;
    assert_eq!(b.ok("ls \"$npm_config_cache\"").await, "new\nold\n");
    let npm = caches_root(&sup).join("0/owner/npm");
    assert!(npm.join("old").exists(), "trimmed while a session had it");
    b.close().await;
    assert!(
        eventually(|| !npm.join("old").exists()),
        "not trimmed after the last session ended"
    );
    assert!(npm.join("new").exists());
}

/// Waits up to 10 s for `done`.
fn eventually(done: impl Fn() -> bool) -> bool {
    for _ in 0..200 {
        if done() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    false
}

fn list_json(sup: &Supervisor) -> serde_json::Value {
    let out = sup.ctl(&["cache", "list", "--json"]);
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The SESSIONS column of `cache list`'s table, one cell per cache.
fn sessions_column(sup: &Supervisor) -> Vec<String> {
    let out = sup.ctl(&["cache", "list"]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    // Cells start where their header does (SIZE's hold a space).
    let mut lines = text.lines().skip(1);
    let header = lines.next().unwrap_or_default();
    let at = header.find("SESSIONS").unwrap_or_else(|| panic!("{text}"));
    lines
        .map(|l| {
            l.get(at..)
                .unwrap_or_default()
                .split(' ')
                .next()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

/// `cache list` (text and JSON) shows each owner's cache; `cache clear`
/// is refused while the owner's session runs, then removes the cache and
/// leaves a `cache_cleared` record in the supervisor's log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_list_and_clear_with_the_audit_record() {
    if !root_or_skip("cache_list_and_clear_with_the_audit_record") {
        return;
    }
    let sup = Supervisor::builder().config(CONFIG).start();
    let a = RootSession::open(&sup, "ws").await;
    a.ok("mkdir -p $GOMODCACHE && head -c 8192 /dev/zero > $GOMODCACHE/m")
        .await;
    let leaf = caches_root(&sup).join("0/owner");
    let list = list_json(&sup);
    assert_eq!(
        (&list["mode"], &list["max_mb"], &list["root"]),
        (
            &serde_json::json!("owner"),
            &serde_json::json!(2048),
            &serde_json::json!(caches_root(&sup).display().to_string())
        )
    );
    let c = &list["caches"][0];
    assert_eq!(
        (
            &c["uid"],
            &c["user"],
            &c["name"],
            &c["path"],
            &c["files"],
            &c["bytes"],
            &c["sessions"]
        ),
        (
            &serde_json::json!(0),
            &serde_json::json!("root"),
            &serde_json::json!("owner"),
            &serde_json::json!(leaf.display().to_string()),
            &serde_json::json!(1),
            &serde_json::json!(8192),
            &serde_json::json!(1)
        ),
        "{list}"
    );
    // The session's sandbox holds the cache's lease.
    assert_eq!(c["holders"], 1, "{list}");
    assert_eq!(sessions_column(&sup), ["1"]);
    let out = sup.ctl(&["cache", "list"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        text.starts_with(&format!(
            "caches: owner (cache_max_mb 2048) in {}\nUSER",
            caches_root(&sup).display()
        )),
        "{text}"
    );
    assert!(text.contains("root") && text.contains("8.0 KiB"), "{text}");
    // Refused while the session runs, naming it.
    let out = sup.ctl(&["cache", "clear", "--user", "root"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        err.contains("cache in use: sessions of root") && err.contains(&a.id),
        "{err}"
    );
    assert!(leaf.join("go-mod/m").exists());
    a.close().await;
    let out = sup.ctl(&["cache", "clear", "--user", "root"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(text.starts_with("cleared 1 cache(s), 8.0 KiB\n"), "{text}");
    assert!(!leaf.exists());
    let log = sup.audit_files("supervisor-").remove(0);
    let recs = tollgate_e2e::harness::read_records(&log);
    let r = recs
        .iter()
        .find(|r| r["event"] == "cache_cleared")
        .expect("a cache_cleared record");
    assert_eq!(
        (&r["user"], &r["caches"], &r["bytes"], &r["files"], &r["by"]),
        (
            &serde_json::json!("root"),
            &serde_json::json!([leaf.display().to_string()]),
            &serde_json::json!(8192),
            &serde_json::json!(1),
            &serde_json::json!("uid 0 via operator")
        ),
        "{r}"
    );
    let out = sup.ctl(&["cache", "clear", "--json"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap(),
        serde_json::json!({ "cleared": [] })
    );
    // The next session makes it again, empty.
    let b = RootSession::open(&sup, "ws").await;
    assert_eq!(b.ok("ls -A ~/.tollgate-cache | wc -l").await, "0\n");
    b.close().await;
}

/// `cache clear` respects the leases (docs/OPERATIONS.md "Package
/// caches"): an operator's `sandbox exec` holds the cache though no session
/// of the owner runs (`cache list` counts it under SESSIONS); the clear is
/// refused naming its exec id, removes nothing, and goes through once the
/// exec has ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_clear_is_refused_while_a_sandbox_exec_holds_the_cache() {
    if !root_or_skip("cache_clear_is_refused_while_a_sandbox_exec_holds_the_cache") {
        return;
    }
    let sup = Supervisor::builder().config(CONFIG).start();
    let ws = sup.dirs.workspace("ws", 0);
    let leaf = caches_root(&sup).join("0/owner");
    let started = leaf.join("npm/started");
    let release = ws.join("release");
    // Writes into the cache, then runs until the test lets it end.
    let script = format!(
        "mkdir -p \"$npm_config_cache\" && touch \"$npm_config_cache/started\" && \
         while [ ! -e {} ]; do sleep 0.05; done; echo done > \"$npm_config_cache/written\"",
        release.display()
    );
    let exec = sup
        .ctl_cmd()
        .args(["sandbox", "exec", "--workspace", ws.to_str().unwrap()])
        .args(["--", "sh", "-c", &script])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert!(eventually(|| started.exists()), "the exec never started");
    // No session of root runs, yet the exec holds the cache: SESSIONS
    // counts it (docs/INTERFACES.md "Package caches").
    let c = &list_json(&sup)["caches"][0];
    assert_eq!(
        (&c["holders"], &c["sessions"]),
        (&serde_json::json!(1), &serde_json::json!(0)),
        "{c}"
    );
    assert_eq!(sessions_column(&sup), ["1"]);
    let out = sup.ctl(&["cache", "clear", "--user", "root"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let named = format!(
        "cache in use: the cache of root ({}) is held by the sandbox of x",
        leaf.display()
    );
    assert!(
        err.contains(&named) && err.contains("nothing was cleared"),
        "{err}"
    );
    assert!(started.exists(), "the clear removed a held cache");
    std::fs::write(&release, "").unwrap();
    let done = exec.wait_with_output().unwrap();
    assert!(done.status.success(), "{done:?}");
    assert_eq!(
        std::fs::read_to_string(leaf.join("npm/written")).unwrap(),
        "done\n"
    );
    // The exec's sandbox is gone, and its lease with it.
    assert_eq!(list_json(&sup)["caches"][0]["holders"], 0);
    assert_eq!(sessions_column(&sup), ["0"]);
    let out = sup.ctl(&["cache", "clear", "--user", "root"]);
    assert!(out.status.success(), "{out:?}");
    assert!(!leaf.exists());
}
