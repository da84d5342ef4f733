//! Claude Code and Codex behind the gate (docs/CLIENTS.md), against the real
//! clients: a real supervisor, a mock Anthropic Messages server or a mock
//! OpenAI Responses server (in the client's loopback-only network
//! namespace), tollgate's managed configuration installed in a private
//! mount namespace, exactly as `agent hook print-config --managed` prints
//! it. For both clients:
//!
//! - an allowed Bash call runs inside tollgate's sandbox (no /etc/shadow, no
//!   network, its output reaches the model's next request);
//! - denied calls (a denied binary with a metadata URL, a path outside the
//!   workspace, a credential file, a metadata fetch) do not run and
//!   tollgate's reason reaches the model's next request;
//! - with the supervisor stopped, every tool call is blocked;
//! - an ask approved and another denied by supervisorctl from another
//!   process;
//! - revoke mid-session stops the client (and its routed command): Claude
//!   Code on `continue: false`; Codex, which ignores it, by a deny carrying
//!   the operator's reason for every later call;
//! - `supervisorctl audit verify` passes and the audit names the client, its
//!   session id and each tool_use_id.
//!
//! Without the clients (or root) each test says `skipped: …`, except under
//! TOLLGATE_REQUIRE_CLIENTS=1 (CI), where it fails.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tollgate_e2e::clients::{
    Clients, NetNs, Run, Which, clients_or_skip, managed_config, var_tmp_dir,
};
use tollgate_e2e::harness::Supervisor;
use tollgate_e2e::model_mock::{ModelMock, Turn};

/// An unprivileged uid for the sessions that must not be root's.
const USER: u32 = 64123;

const SKIP_MODE: &str = "[session]\napproval_timeout_s = 30\n[clients]\nmode = \"dangerouslySkipPermissions\"\n[llm]\nprovider = \"script\"\n";
const OPERATORS_ONLY: &str = "[session]\nsession_can_approve = false\napproval_timeout_s = 60\n[llm]\nprovider = \"script\"\n";

fn mock(which: Which, ns: &NetNs, turns: &[Turn]) -> ModelMock {
    ModelMock::serve(which, ns.listen(), turns)
}

/// One client run's setup.
struct Setup<'a> {
    clients: &'a Clients,
    which: Which,
    uid: u32,
    workspace: PathBuf,
    managed: String,
    base_url: String,
    scratch: &'a Path,
    extra_args: Vec<String>,
}

impl Setup<'_> {
    fn run(&self) -> Run {
        Run {
            which: self.which,
            bin: match self.which {
                Which::Claude => self.clients.claude.clone(),
                Which::Codex => self.clients.codex.clone(),
            },
            uid: self.uid,
            workspace: self.workspace.clone(),
            scratch: self.scratch.to_path_buf(),
            managed: self.managed.clone(),
            base_url: self.base_url.clone(),
            prompt: "do the task".to_string(),
            timeout: Duration::from_secs(180),
            extra_args: self.extra_args.clone(),
        }
    }
}

/// Codex lets a call run when a hook fails (an answer it does not accept
/// fails the hook): none of tollgate's answers may.
fn no_failed_hook(which: Which, out: &Output) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    if which == Which::Codex {
        assert!(
            !stderr.contains("PreToolUse Failed"),
            "a hook failed, so Codex let the call run:\n{}",
            show(out)
        );
    }
}

fn show(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The one session the client opened, and its records.
fn only_session(sup: &Supervisor) -> (String, Vec<Value>) {
    let files = sup.audit_files("audit-");
    assert_eq!(files.len(), 1, "expected one session file: {files:?}");
    let records = tollgate_e2e::harness::read_records(&files[0]);
    let id = records[0]["session"].as_str().unwrap().to_string();
    (id, records)
}

fn verify(sup: &Supervisor, id: &str) {
    let files = sup.audit_files(&format!("audit-{id}-"));
    let mut args = vec!["audit".to_string(), "verify".to_string()];
    args.extend(files.iter().map(|p| p.display().to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = sup.ctl(&args);
    assert!(out.status.success(), "audit verify: {}", show(&out));
}

fn probe(port: u16) -> String {
    format!(
        "echo MARK-$((6*7)); command -v python3 >/dev/null && echo HAVE-PY; \
         python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 2)' 2>/dev/null && echo REACHED-NET || echo NO-NET; \
         python3 -c \"open('/etc/'+'shadow').read()\" 2>/dev/null && echo READ-SHADOW || echo NO-SHADOW; \
         echo UID-$(id -u); pwd"
    )
}

/// An allowed Bash call runs in tollgate's sandbox as the (non-root) user;
/// four denied calls never run, and the model reads tollgate's reasons; the
/// audit verifies and names the client, its session id and every call.
async fn sandbox_and_denials(which: Which, backend: &str) {
    let test = format!("{}_sandbox_and_denials_{backend}", which.name());
    let Some(clients) = clients_or_skip(&test) else {
        return;
    };
    if backend == "docker" && !docker_or_skip(&test) {
        return;
    }
    let sup = Supervisor::builder()
        .config(SKIP_MODE)
        .sandbox(backend)
        .start();
    let ws = sup.dirs.workspace("ws", USER);
    let ns = NetNs::new();
    // The mock's own port: reachable in the client's namespace, never from
    // the sandbox.
    let listener = ns.listen();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let outside = sup.dirs.root.path().join("outside.txt");
    let turns = match which {
        Which::Claude => vec![
            Turn::Shell(probe(port)),
            Turn::Shell("curl -s http://169.254.169.254/latest/meta-data; touch RAN-CURL".into()),
            Turn::Tool("Read", json!({"file_path": "/etc/hostname"})),
            Turn::Tool("Read", json!({"file_path": "/root/.ssh/id_rsa"})),
            Turn::Tool(
                "WebFetch",
                json!({"url": "http://169.254.169.254/latest/meta-data/", "prompt": "p"}),
            ),
        ],
        Which::Codex => vec![
            Turn::Shell(probe(port)),
            Turn::Shell("curl -s http://169.254.169.254/latest/meta-data; touch RAN-CURL".into()),
            Turn::Patch(format!(
                "*** Begin Patch\n*** Add File: {}\n+escaped\n*** End Patch\n",
                outside.display()
            )),
            // By its host path: `~` in a sandboxed command is the sandbox's
            // own home, where no key of the owner's is (docs/INTERFACES.md).
            Turn::Shell("cat /root/.ssh/id_rsa; touch RAN-CAT".into()),
        ],
    };
    let m = mock(which, &ns, &turns);
    let scratch = var_tmp_dir("tollgate-e2e-client-");
    let setup = Setup {
        clients: &clients,
        which,
        uid: USER,
        workspace: ws.clone(),
        managed: managed_config(&sup, which),
        base_url: m.base_url(),
        scratch: scratch.path(),
        extra_args: Vec::new(),
    };
    let mut cmd = setup.run().command(&ns);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert!(
        m.requests().len() > turns.len(),
        "the client stopped early:\n{}",
        show(&out)
    );
    no_failed_hook(which, &out);

    let allowed = m.told(0);
    for want in [
        "MARK-42",
        "HAVE-PY",
        "NO-NET",
        "NO-SHADOW",
        &format!("UID-{USER}"),
        ws.to_str().unwrap(),
    ] {
        assert!(
            allowed.contains(want),
            "{want} missing from what the model saw: {allowed}"
        );
    }
    assert!(
        !allowed.contains("REACHED-NET") && !allowed.contains("READ-SHADOW"),
        "{allowed}"
    );
    let wants: Vec<&str> = match which {
        Which::Claude => vec![
            "`curl` is on the denied-binaries list",
            "is outside the workspace",
            "credential paths are never readable",
            "169.254.169.254 is a link-local address",
        ],
        Which::Codex => vec![
            "`curl` is on the denied-binaries list",
            "is outside the workspace",
            "credential paths are never available to commands",
        ],
    };
    for (i, want) in wants.iter().enumerate() {
        let told = m.told(i + 1);
        assert!(
            told.contains("tollgate:") && told.contains(want),
            "call {}: {told}",
            i + 1
        );
    }
    for f in ["RAN-CURL", "RAN-CAT"] {
        assert!(!ws.join(f).exists(), "{f}: a denied command ran");
    }
    assert!(
        !outside.exists(),
        "a denied patch wrote outside the workspace"
    );

    let (id, records) = only_session(&sup);
    verify(&sup, &id);
    let opened = &records[0];
    assert_eq!(opened["event"], "session_opened");
    assert_eq!(
        opened["client"],
        if which == Which::Claude {
            "claude-code"
        } else {
            "codex"
        }
    );
    assert_eq!(opened["uid"], USER);
    let client_session = opened["client_session_id"].as_str().unwrap();
    assert!(client_session.len() >= 32, "{client_session}");
    let prefix = if which == Which::Claude {
        "toolu_"
    } else {
        "call_"
    };
    for n in 0..turns.len() {
        let call = format!("{prefix}{n}");
        assert!(
            records
                .iter()
                .any(|r| r["event"] == "permission_check" && r["call_id"] == call.as_str()),
            "no decision recorded for {call}"
        );
    }
    let routed = records
        .iter()
        .find(|r| r["event"] == "tool_result" && r["routed"] == true)
        .expect("the routed command's outcome");
    assert_eq!(routed["call_id"], format!("{prefix}0"));
    // The client's own report of the routed call.
    assert!(
        records
            .iter()
            .any(|r| r["event"] == "client_tool_result"
                && r["call_id"] == format!("{prefix}0").as_str()),
        "no client_tool_result for the allowed call"
    );
    // `supervisorctl sessions` names the client.
    let listed = sup.ctl(&["sessions", "--all", "--json"]);
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let s = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id.as_str())
        .unwrap();
    assert_eq!(s["client_session_id"], client_session);
}

/// Whether the Docker engine answers; without it a test skips, except under
/// TOLLGATE_REQUIRE_DOCKER=1.
fn docker_or_skip(test: &str) -> bool {
    let up = std::process::Command::new("docker")
        .arg("info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if up {
        return true;
    }
    if std::env::var("TOLLGATE_REQUIRE_DOCKER").as_deref() == Ok("1") {
        panic!("{test}: no Docker engine (TOLLGATE_REQUIRE_DOCKER=1)");
    }
    eprintln!("{test}: skipped: no Docker engine");
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_allowed_bash_runs_in_the_sandbox_and_denials_reach_the_model() {
    sandbox_and_denials(Which::Claude, "native").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_allowed_bash_runs_in_the_sandbox_and_denials_reach_the_model() {
    sandbox_and_denials(Which::Codex, "native").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_allowed_bash_runs_in_the_docker_sandbox() {
    sandbox_and_denials(Which::Claude, "docker").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_allowed_bash_runs_in_the_docker_sandbox() {
    sandbox_and_denials(Which::Codex, "docker").await;
}

/// With the supervisor stopped, the hook blocks every tool call.
async fn supervisor_stopped(which: Which) {
    let test = format!("{}_supervisor_stopped", which.name());
    let Some(clients) = clients_or_skip(&test) else {
        return;
    };
    let mut sup = Supervisor::builder().config(SKIP_MODE).start();
    let ws = sup.dirs.workspace("ws", 0);
    let config = managed_config(&sup, which);
    sup.stop();
    let ns = NetNs::new();
    let turns = vec![
        Turn::Shell("touch RAN-1".into()),
        Turn::Shell("touch RAN-2".into()),
    ];
    let m = mock(which, &ns, &turns);
    let scratch = var_tmp_dir("tollgate-e2e-client-");
    let setup = Setup {
        clients: &clients,
        which,
        uid: 0,
        workspace: ws.clone(),
        managed: config,
        base_url: m.base_url(),
        scratch: scratch.path(),
        extra_args: Vec::new(),
    };
    let mut cmd = setup.run().command(&ns);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    no_failed_hook(which, &out);
    for (i, f) in ["RAN-1", "RAN-2"].iter().enumerate() {
        assert!(
            !ws.join(f).exists(),
            "{f} ran with the supervisor down:\n{}",
            show(&out)
        );
        let told = m.told(i);
        assert!(
            told.contains("cannot reach the supervisor"),
            "call {i}: {told}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_every_call_is_blocked_with_the_supervisor_stopped() {
    supervisor_stopped(Which::Claude).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_every_call_is_blocked_with_the_supervisor_stopped() {
    supervisor_stopped(Which::Codex).await;
}

/// Waits for a pending approval in `supervisorctl approvals --json`.
fn next_approval(sup: &Supervisor, seen: &[String], deadline: Instant) -> Value {
    loop {
        let out = sup.ctl(&["approvals", "--json"]);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        if let Some(a) = v
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| !seen.iter().any(|s| a["id"] == s.as_str()))
        {
            return a.clone();
        }
        assert!(Instant::now() < deadline, "no approval appeared");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Two asks: an operator approves one and denies the other, from another
/// process, while the client waits.
async fn approvals(which: Which) {
    let test = format!("{}_approvals", which.name());
    let Some(clients) = clients_or_skip(&test) else {
        return;
    };
    let sup = Supervisor::builder().config(OPERATORS_ONLY).start();
    let ws = sup.dirs.workspace("ws", 0);
    let ns = NetNs::new();
    let turns = vec![
        Turn::Shell("echo APPROVED-RUN-$((2*21))".into()),
        Turn::Shell("touch DENIED-RAN".into()),
    ];
    let m = mock(which, &ns, &turns);
    let scratch = var_tmp_dir("tollgate-e2e-client-");
    let setup = Setup {
        clients: &clients,
        which,
        uid: 0,
        workspace: ws.clone(),
        managed: managed_config(&sup, which),
        base_url: m.base_url(),
        scratch: scratch.path(),
        extra_args: Vec::new(),
    };
    let mut cmd = setup.run().command(&ns);
    let client = tokio::task::spawn_blocking(move || cmd.output().unwrap());
    let deadline = Instant::now() + Duration::from_secs(90);
    let first = next_approval(&sup, &[], deadline);
    assert!(
        first["consequence"]
            .as_str()
            .unwrap()
            .contains("APPROVED-RUN"),
        "{first}"
    );
    let ok = sup.ctl(&["approve", first["id"].as_str().unwrap()]);
    assert!(ok.status.success(), "{}", show(&ok));
    let second = next_approval(&sup, &[first["id"].as_str().unwrap().to_string()], deadline);
    assert!(
        second["consequence"]
            .as_str()
            .unwrap()
            .contains("DENIED-RAN"),
        "{second}"
    );
    let no = sup.ctl(&[
        "deny",
        second["id"].as_str().unwrap(),
        "--reason",
        "not today",
    ]);
    assert!(no.status.success(), "{}", show(&no));
    let out = client.await.unwrap();
    no_failed_hook(which, &out);
    let approved = m.told(0);
    assert!(
        approved.contains("APPROVED-RUN-42"),
        "{approved}\n{}",
        show(&out)
    );
    let denied = m.told(1);
    assert!(
        denied.contains("user denied") && denied.contains("not today"),
        "{denied}"
    );
    assert!(!ws.join("DENIED-RAN").exists(), "the denied command ran");
    let (id, records) = only_session(&sup);
    verify(&sup, &id);
    let decided: Vec<&str> = records
        .iter()
        .filter(|r| r["event"] == "approval_decided")
        .filter_map(|r| r["outcome"].as_str())
        .collect();
    assert_eq!(decided, vec!["approved", "denied"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_asks_are_approved_and_denied_by_supervisorctl() {
    approvals(Which::Claude).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_asks_are_approved_and_denied_by_supervisorctl() {
    approvals(Which::Codex).await;
}

/// Host pids whose command line is exactly `sleep <arg>`.
fn sleeps(arg: &str) -> Vec<i32> {
    let want = format!("sleep\0{arg}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| c.ends_with(want.as_bytes()))
                .unwrap_or(false)
        })
        .collect()
}

/// Revoke mid-session: the routed command dies, and the client stops.
async fn revoke(which: Which) {
    let test = format!("{}_revoke", which.name());
    let Some(clients) = clients_or_skip(&test) else {
        return;
    };
    let sup = Supervisor::builder().config(SKIP_MODE).start();
    let ws = sup.dirs.workspace("ws", 0);
    let ns = NetNs::new();
    // A duration no other test uses.
    let secs = format!("{}", 700 + std::process::id() % 200);
    let turns = vec![
        Turn::Shell(format!("sleep {secs}; touch SLEPT")),
        Turn::Shell("touch AFTER-REVOKE".into()),
    ];
    let m = mock(which, &ns, &turns);
    let scratch = var_tmp_dir("tollgate-e2e-client-");
    let setup = Setup {
        clients: &clients,
        which,
        uid: 0,
        workspace: ws.clone(),
        managed: managed_config(&sup, which),
        base_url: m.base_url(),
        scratch: scratch.path(),
        extra_args: Vec::new(),
    };
    let mut cmd = setup.run().command(&ns);
    let started = Instant::now();
    let client = tokio::task::spawn_blocking(move || cmd.output().unwrap());
    let deadline = Instant::now() + Duration::from_secs(90);
    while sleeps(&secs).is_empty() {
        assert!(Instant::now() < deadline, "the routed sleep never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (id, _) = only_session(&sup);
    let t0 = Instant::now();
    let out = sup.ctl(&["revoke", &id, "--reason", "stop now: e2e"]);
    assert!(out.status.success(), "{}", show(&out));
    while !sleeps(&secs).is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "the routed command outlived the revoke"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    eprintln!(
        "{test}: routed command gone {:?} after the revoke",
        t0.elapsed()
    );
    let out = client.await.unwrap();
    no_failed_hook(which, &out);
    if which == Which::Codex {
        // Codex does not stop on `continue: false`; every later call is
        // denied with the operator's reason.
        let told = m.told(1);
        assert!(told.contains("stop now: e2e"), "{told}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(secs.parse::<u64>().unwrap()),
        "the client ran on"
    );
    assert!(
        !ws.join("SLEPT").exists() && !ws.join("AFTER-REVOKE").exists(),
        "{}",
        show(&out)
    );
    let records = sup.session_records(&id);
    assert!(records.iter().any(|r| r["event"] == "session_revoked"));
    // The client never got to run the second call: it stopped, or its
    // every call was denied with the operator's reason.
    let second = records.iter().find(|r| {
        r["event"] == "permission_check"
            && r["decision"] == "allow"
            && r["call_id"].as_str().is_some_and(|c| c.ends_with('1'))
    });
    assert!(
        second.is_none(),
        "a call was allowed after the revoke: {second:?}"
    );
    verify(&sup, &id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_revoke_mid_session_stops_the_client() {
    revoke(Which::Claude).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_revoke_mid_session_stops_the_client() {
    revoke(Which::Codex).await;
}

// ---- a client's own tool is judged by everything it can reach ------------

/// One run of `turns` as [`USER`] in skip mode (nobody asks: what tollgate
/// allows runs), in a workspace `prepare` fills (owned by `USER` after).
struct Reach {
    sup: Supervisor,
    ws: PathBuf,
    mock: ModelMock,
    out: Output,
}

async fn reach(
    which: Which,
    test: &str,
    turns: impl FnOnce(&Path) -> Vec<Turn>,
    prepare: fn(&Path),
) -> Option<Reach> {
    let clients = clients_or_skip(test)?;
    let sup = Supervisor::builder().config(SKIP_MODE).start();
    let ws = sup.dirs.workspace("ws", USER);
    prepare(&ws);
    let turns = turns(&ws);
    let chown = std::process::Command::new("chown")
        .args(["-R", &format!("{USER}:{USER}")])
        .arg(&ws)
        .status()
        .unwrap();
    assert!(chown.success());
    let ns = NetNs::new();
    let m = mock(which, &ns, &turns);
    let scratch = var_tmp_dir("tollgate-e2e-client-");
    let setup = Setup {
        clients: &clients,
        which,
        uid: USER,
        workspace: ws.clone(),
        managed: managed_config(&sup, which),
        base_url: m.base_url(),
        scratch: scratch.path(),
        // Claude Code's native build offers Grep and Glob only to a session
        // that names them (else its Bash has embedded find and grep).
        extra_args: match which {
            Which::Claude => vec!["--allowedTools".into(), "Grep,Glob".into()],
            Which::Codex => Vec::new(),
        },
    };
    let mut cmd = setup.run().command(&ns);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    no_failed_hook(which, &out);
    assert!(
        m.requests().len() > turns.len(),
        "the client stopped early:\n{}",
        show(&out)
    );
    Some(Reach {
        sup,
        ws,
        mock: m,
        out,
    })
}

impl Reach {
    /// The decision recorded for call `n`.
    fn check(&self, n: usize) -> Value {
        let (_, records) = only_session(&self.sup);
        let prefix = match self.mock {
            ModelMock::Claude(_) => "toolu_",
            ModelMock::Codex(_) => "call_",
        };
        records
            .into_iter()
            .find(|r| {
                r["event"] == "permission_check" && r["call_id"] == format!("{prefix}{n}").as_str()
            })
            .unwrap_or_else(|| panic!("no decision for call {n}:\n{}", show(&self.out)))
    }
}

/// The arguments a decision record holds (a JSON excerpt).
fn args_of(d: &Value) -> Value {
    serde_json::from_str(d["args"].as_str().unwrap_or("null")).unwrap_or(Value::Null)
}

const SECRET: &str = "sk-live-Q7c0ffeeSECRET";

fn secret_workspace(ws: &Path) {
    std::fs::write(ws.join(".env"), format!("API_TOKEN={SECRET}\n")).unwrap();
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::write(ws.join("src/app.py"), "TOKEN = load()  # ordinary-marker\n").unwrap();
}

fn git_secret_workspace(ws: &Path) {
    secret_workspace(ws);
    std::fs::write(ws.join(".gitignore"), ".env\n").unwrap();
    let ok = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(ws)
        .status()
        .unwrap();
    assert!(ok.success());
}

/// The finding: Claude Code's Grep with `glob: ".env"` read the secret file
/// a Read is refused (the glob overrides .gitignore, and hidden files are
/// searched); tollgate decided it on the search path alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_grep_with_a_glob_never_reads_a_secret_file() {
    let test = "claude_grep_with_a_glob_never_reads_a_secret_file";
    let turns = |_: &Path| {
        vec![Turn::Tool(
            "Grep",
            json!({"pattern": "API_TOKEN|SECRET", "glob": ".env", "output_mode": "content"}),
        )]
    };
    let Some(r) = reach(Which::Claude, test, turns, git_secret_workspace).await else {
        return;
    };
    let told = r.mock.told(0);
    assert!(
        !told.contains(SECRET),
        "the secret reached the model: {told}"
    );
    assert!(
        !r.mock.all_text().contains(SECRET),
        "the secret reached the model"
    );
    let d = r.check(0);
    assert_eq!(d["decision"], "allow", "{d}");
    assert_eq!(d["client_tool"], "Grep");
    assert_eq!(args_of(&d)["glob"], ".env !**/.env", "{d}");
    assert!(
        r.mock
            .all_text()
            .contains("tollgate left `.env` out of this search"),
        "the model was not told what was left out"
    );
    verify(&r.sup, &only_session(&r.sup).0);
}

/// The finding: in a workspace that is not a git repository, a plain Grep
/// searched `.env` (hidden files on, no .gitignore read).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_grep_outside_a_git_repository_never_reads_a_secret_file() {
    let test = "claude_grep_outside_a_git_repository_never_reads_a_secret_file";
    let turns = |_: &Path| {
        vec![Turn::Tool(
            "Grep",
            json!({"pattern": "SECRET|ordinary-marker", "output_mode": "content"}),
        )]
    };
    let Some(r) = reach(Which::Claude, test, turns, secret_workspace).await else {
        return;
    };
    let told = r.mock.told(0);
    assert!(
        !told.contains(SECRET),
        "the secret reached the model: {told}"
    );
    assert!(
        told.contains("ordinary-marker"),
        "the rest of the search ran: {told}"
    );
    assert_eq!(args_of(&r.check(0))["glob"], "!**/.env");
}

/// Glob lists names under its path, never following links: decided on the
/// path and the pattern (an absolute pattern, which Claude Code would
/// search from its own directory, is refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_glob_is_decided_on_its_path_and_pattern() {
    let turns = |_: &Path| {
        vec![
            Turn::Tool("Glob", json!({"pattern": "/etc/*"})),
            Turn::Tool("Glob", json!({"pattern": "**/*.py"})),
        ]
    };
    let test = "claude_glob_is_decided_on_its_path_and_pattern";
    let Some(r) = reach(Which::Claude, test, turns, secret_workspace).await else {
        return;
    };
    let told = r.mock.told(0);
    assert!(told.contains("reaches outside the workspace"), "{told}");
    assert!(!told.contains("passwd"), "{told}");
    assert_eq!(r.check(0)["rule"], "floor:path-scope");
    assert!(r.mock.told(1).contains("app.py"), "{}", r.mock.told(1));
}

fn notebook(source: &str) -> String {
    json!({
        "cells": [{"cell_type": "code", "id": "c1", "metadata": {}, "execution_count": null,
                   "outputs": [], "source": [source]}],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5
    })
    .to_string()
}

fn notebook_workspace(ws: &Path) {
    secret_workspace(ws);
    std::fs::write(ws.join("n.ipynb"), notebook("print('nb-marker')")).unwrap();
    std::fs::write(ws.join("secrets.ipynb"), notebook(SECRET)).unwrap();
}

/// Read of a directory is refused; a notebook is the one file it names (a
/// secret-named one needs an approval nobody gives in this mode).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_read_of_a_directory_is_refused_and_a_notebook_is_a_file() {
    let turns = |ws: &Path| {
        vec![
            Turn::Tool("Read", json!({"file_path": ws.join("src")})),
            Turn::Tool("Read", json!({"file_path": ws.join("n.ipynb")})),
            Turn::Tool("Read", json!({"file_path": ws.join("secrets.ipynb")})),
        ]
    };
    let test = "claude_read_of_a_directory_is_refused_and_a_notebook_is_a_file";
    let Some(r) = reach(Which::Claude, test, turns, notebook_workspace).await else {
        return;
    };
    assert!(
        r.mock.told(0).contains("is a directory"),
        "{}",
        r.mock.told(0)
    );
    assert!(r.mock.told(1).contains("nb-marker"), "{}", r.mock.told(1));
    let secret = r.mock.told(2);
    assert!(!secret.contains(SECRET), "{secret}");
    assert!(secret.contains("looks like a secret file"), "{secret}");
    assert_eq!(r.check(2)["rule"], "floor:secret-file");
}

/// NotebookEdit writes the notebook it names: an edit, inside the
/// workspace only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_notebook_edit_is_an_edit_of_the_notebook() {
    let turns = |ws: &Path| {
        let outside = ws.parent().unwrap().join("outside.ipynb");
        vec![
            Turn::Tool(
                "NotebookEdit",
                json!({"notebook_path": outside, "cell_id": "c1", "new_source": "print('escaped')"}),
            ),
            // Claude Code edits only a notebook it has read.
            Turn::Tool("Read", json!({"file_path": ws.join("n.ipynb")})),
            Turn::Tool(
                "NotebookEdit",
                json!({"notebook_path": ws.join("n.ipynb"), "cell_id": "c1", "new_source": "print('edited-marker')"}),
            ),
        ]
    };
    let test = "claude_notebook_edit_is_an_edit_of_the_notebook";
    let Some(r) = reach(Which::Claude, test, turns, notebook_workspace).await else {
        return;
    };
    assert!(
        r.mock.told(0).contains("outside the workspace"),
        "{}",
        r.mock.told(0)
    );
    assert!(!r.ws.parent().unwrap().join("outside.ipynb").exists());
    assert_eq!(r.check(2)["tool"], "edit_file");
    assert_eq!(r.check(2)["decision"], "allow");
    let nb = std::fs::read_to_string(r.ws.join("n.ipynb")).unwrap();
    assert!(
        nb.contains("edited-marker"),
        "{nb}\n{}\n{}",
        r.mock.told(2),
        show(&r.out)
    );
}

/// WebSearch runs at the model provider, where tollgate cannot see: it is
/// refused, and the model reads why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_web_search_is_refused_with_the_reason() {
    let turns = |_: &Path| vec![Turn::Tool("WebSearch", json!({"query": "tollgate"}))];
    let test = "claude_web_search_is_refused_with_the_reason";
    let Some(r) = reach(Which::Claude, test, turns, secret_workspace).await else {
        return;
    };
    let told = r.mock.told(0);
    assert!(
        told.contains("tollgate:") && told.contains("model provider's servers"),
        "{told}"
    );
    assert_eq!(r.check(0)["rule"], "clients:web-search");
}

/// The finding: a subagent with `isolation: "worktree"` was allowed as
/// bookkeeping, though Claude Code then runs git on the host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_an_isolated_subagent_is_judged_not_allowed() {
    let turns = |_: &Path| {
        vec![
            Turn::Tool(
                "Agent",
                json!({"description": "d", "prompt": "list files", "isolation": "worktree"}),
            ),
            Turn::Tool(
                "Agent",
                json!({"description": "d", "prompt": "list files", "isolation": "remote"}),
            ),
        ]
    };
    let test = "claude_an_isolated_subagent_is_judged_not_allowed";
    let Some(r) = reach(Which::Claude, test, turns, git_secret_workspace).await else {
        return;
    };
    for n in 0..2 {
        let d = r.check(n);
        assert_eq!(
            (d["decision"].as_str(), d["rule"].as_str()),
            (Some("deny"), Some("clients:agent-isolation")),
            "{d}"
        );
    }
    assert!(
        !r.ws.join(".claude/worktrees").exists(),
        "a worktree was made"
    );
}

/// Codex's own file tool, `view_image`, reads the one file it names: a
/// directory is refused, a secret file needs an approval nobody gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_view_image_is_decided_on_the_file_it_reads() {
    fn prepare(ws: &Path) {
        secret_workspace(ws);
        std::fs::write(ws.join("id_ed25519"), SECRET).unwrap();
    }
    let turns = |ws: &Path| {
        vec![
            Turn::Tool("view_image", json!({"path": ws.join("src")})),
            Turn::Tool("view_image", json!({"path": ws.join("id_ed25519")})),
        ]
    };
    let test = "codex_view_image_is_decided_on_the_file_it_reads";
    let Some(r) = reach(Which::Codex, test, turns, prepare).await else {
        return;
    };
    assert!(
        r.mock.told(0).contains("is a directory"),
        "{}",
        r.mock.told(0)
    );
    assert!(!r.mock.all_text().contains(SECRET));
    assert_eq!(r.check(1)["rule"], "floor:secret-file");
}

/// The tool names a Responses request offers the model.
fn offered_tools(body: &[u8]) -> Vec<String> {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    v["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            t["name"]
                .as_str()
                .or_else(|| t["type"].as_str())
                .unwrap_or("")
                .to_string()
        })
        .collect()
}

/// Codex's web search runs at the model provider and never reaches a hook:
/// under tollgate's managed requirements it is off, so the model is never
/// offered it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_web_search_is_off_under_the_managed_requirements() {
    let turns = |_: &Path| vec![Turn::Shell("echo ran-$((6*7))".into())];
    let test = "codex_web_search_is_off_under_the_managed_requirements";
    let Some(r) = reach(Which::Codex, test, turns, secret_workspace).await else {
        return;
    };
    assert!(r.mock.told(0).contains("ran-42"), "{}", show(&r.out));
    let model_requests: Vec<Vec<String>> = r
        .mock
        .requests()
        .iter()
        .filter(|q| q.path.ends_with("/responses"))
        .map(|q| offered_tools(&q.body))
        .collect();
    assert!(!model_requests.is_empty());
    for tools in &model_requests {
        assert!(
            tools.iter().any(|t| t == "exec_command"),
            "not a model request: {tools:?}"
        );
        assert!(
            !tools.iter().any(|t| t.starts_with("web_search")),
            "Codex offered web search: {tools:?}"
        );
    }
}

// ---- Claude Code's background Bash is a background job of the session -----

/// `Bash` with `run_in_background: true` runs as a routed background job
/// (docs/CLIENTS.md, "Background commands"): it keeps running through three
/// more Bash calls, `supervisorctl sessions` lists it (routed), and the
/// client's `TaskStop` ends it in the sandbox; the start and the end are
/// recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_run_in_background_is_a_job_until_task_stop() {
    let test = "claude_run_in_background_is_a_job_until_task_stop";
    let Some(clients) = clients_or_skip(test) else {
        return;
    };
    let sup = Supervisor::builder().config(SKIP_MODE).start();
    let ws = sup.dirs.workspace("ws", 0);
    let ns = NetNs::new();
    let secs = format!("{}", 1300 + std::process::id() % 200);
    let background = format!(
        "echo bg-started; while [ ! -e GO ]; do sleep 0.05; done; echo bg-saw-go; sleep {secs}"
    );
    let id = tollgate_e2e::mock_anthropic::BACKGROUND_ID;
    let turns = vec![
        Turn::Tool(
            "Bash",
            json!({"command": background, "run_in_background": true, "description": "bg"}),
        ),
        Turn::Shell("touch GO; echo fg-1".into()),
        Turn::Shell("echo fg-2".into()),
        Turn::Shell("echo fg-3".into()),
        // Claude Code 2.1.328 offers TaskStop deferred (loaded by
        // ToolSearch) and has no TaskOutput: the model is told the output
        // file's host path instead (docs/CLIENTS.md, "Background commands").
        Turn::Tool(
            "ToolSearch",
            json!({"query": "select:TaskStop", "max_results": 5}),
        ),
        Turn::Tool("TaskStop", json!({"task_id": id})),
    ];
    let m = mock(Which::Claude, &ns, &turns);
    let scratch = var_tmp_dir("tollgate-e2e-client-");
    let setup = Setup {
        clients: &clients,
        which: Which::Claude,
        uid: 0,
        workspace: ws.clone(),
        managed: managed_config(&sup, Which::Claude),
        base_url: m.base_url(),
        scratch: scratch.path(),
        extra_args: Vec::new(),
    };
    let mut cmd = setup.run().command(&ns);
    let client = tokio::task::spawn_blocking(move || cmd.output().unwrap());
    let deadline = Instant::now() + Duration::from_secs(120);
    while sleeps(&secs).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the background job's sleep never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let listed: Value = serde_json::from_slice(&sup.ctl(&["sessions", "--json"]).stdout).unwrap();
    let job = &listed[0]["jobs"][0];
    assert!(job["routed"] == true && job["id"] == "job-1", "{listed}");
    let out = client.await.unwrap();
    assert!(
        sleeps(&secs).is_empty(),
        "the job outlived its client: {}",
        show(&out)
    );
    for n in 1..=3 {
        let told = m.told(n);
        assert!(told.contains(&format!("fg-{n}")), "call {n}: {told}");
    }
    let told = m.told(0);
    assert!(told.contains("in background with ID"), "{told}");
    let stopped = m.result_of(5).expect("TaskStop's result");
    assert!(!stopped.is_error, "TaskStop: {}", stopped.text);
    let (sid, records) = only_session(&sup);
    let started: Vec<&Value> = records
        .iter()
        .filter(|r| r["event"] == "job_started")
        .collect();
    assert_eq!(started.len(), 1, "{started:?}");
    assert_eq!(started[0]["routed"], true);
    assert_eq!(started[0]["call_id"], "toolu_0");
    let ended: Vec<&Value> = records
        .iter()
        .filter(|r| r["event"] == "job_ended")
        .collect();
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert_eq!(ended[0]["how"], "killed", "{ended:?}");
    // TaskStop came before the client's end: the job ended before the
    // session did.
    let pos = |e: &str| records.iter().position(|r| r["event"] == e);
    let stop_check = records
        .iter()
        .position(|r| r["event"] == "permission_check" && r["client_tool"] == "TaskStop");
    assert!(stop_check.is_some(), "TaskStop was not decided");
    assert!(
        pos("job_ended") > stop_check,
        "the job ended before TaskStop"
    );
    verify(&sup, &sid);
}
