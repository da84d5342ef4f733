//! Running the real Claude Code and Codex behind tollgate, offline.
//!
//! Each run happens in a network namespace with only loopback (its mock
//! model server listens there too, bound by the test) and in a private mount
//! namespace where an overlay on `/etc` holds the managed configuration
//! (`/etc/claude-code/managed-settings.json`, `/etc/codex/requirements.toml`):
//! the host's `/etc` is never written. The supervisor runs outside; its
//! socket is reached by path. A client can run as an unprivileged uid, with
//! what it needs staged in a world-traversable temp dir.
//!
//! The clients are found in `$TOLLGATE_CLIENTS_DIR` (default
//! `/opt/tollgate-clients`, where `npm install --prefix` put them). When
//! they are missing a test says `skipped: …` once, unless
//! `TOLLGATE_REQUIRE_CLIENTS=1` (CI), where it fails.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{Supervisor, bin};

/// The pinned versions (docs/CLIENTS.md): read a newer one's behaviour before
/// moving a pin.
pub const CLAUDE_VERSION: &str = "2.1.328";
pub const CODEX_VERSION: &str = "0.169.0";

/// Where the clients are.
pub fn clients_dir() -> PathBuf {
    std::env::var_os("TOLLGATE_CLIENTS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/tollgate-clients"))
}

/// The installed clients.
#[derive(Debug, Clone)]
pub struct Clients {
    pub claude: PathBuf,
    pub codex: PathBuf,
}

/// The clients, or `None` after one `skipped: …` line; under
/// `TOLLGATE_REQUIRE_CLIENTS=1` a missing client fails the test.
pub fn clients_or_skip(test: &str) -> Option<Clients> {
    let c = Clients {
        claude: client_bin(Which::Claude),
        codex: client_bin(Which::Codex),
    };
    match missing_for(&[&c.claude, &c.codex]) {
        None => Some(c),
        Some(why) => skip_or_fail(test, &why),
    }
}

/// One client, as [`clients_or_skip`] finds both.
pub fn client_or_skip(which: Which, test: &str) -> Option<PathBuf> {
    let exe = client_bin(which);
    match missing_for(&[&exe]) {
        None => Some(exe),
        Some(why) => skip_or_fail(test, &why),
    }
}

/// Where a client's executable is.
fn client_bin(which: Which) -> PathBuf {
    clients_dir().join("node_modules/.bin").join(which.name())
}

/// Why the clients `exes` cannot run here, or `None` when they can.
fn missing_for(exes: &[&PathBuf]) -> Option<String> {
    let missing: Vec<String> = exes
        .iter()
        .filter(|p| !p.exists())
        .map(|p| p.display().to_string())
        .collect();
    let tools: Vec<&str> = ["unshare", "nsenter", "setpriv", "ip", "timeout"]
        .into_iter()
        .filter(|t| which(t).is_none())
        .collect();
    let root = nix::unistd::geteuid().is_root();
    if missing.is_empty() && tools.is_empty() && root {
        return None;
    }
    Some(if !root {
        "needs root (namespaces, an overlay on /etc)".to_string()
    } else if !tools.is_empty() {
        format!("missing {}", tools.join(", "))
    } else {
        format!(
            "the clients are not installed ({}); install them with: npm install --prefix {} @anthropic-ai/claude-code@{CLAUDE_VERSION} @openai/codex@{CODEX_VERSION}",
            missing.join(", "),
            clients_dir().display()
        )
    })
}

/// `None` after a `skipped: …` line; a failure under
/// `TOLLGATE_REQUIRE_CLIENTS=1`.
fn skip_or_fail<T>(test: &str, why: &str) -> Option<T> {
    if std::env::var("TOLLGATE_REQUIRE_CLIENTS").as_deref() == Ok("1") {
        panic!("{test}: {why} (TOLLGATE_REQUIRE_CLIENTS=1)");
    }
    eprintln!("{test}: skipped: {why}");
    None
}

pub fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(name))
            .find(|f| f.is_file())
    })
}

/// A network namespace with only `lo` (up), held by a sleeping process.
pub struct NetNs {
    holder: Child,
}

impl NetNs {
    pub fn new() -> NetNs {
        let holder = Command::new("unshare")
            .args(["--net", "--", "sleep", "3600"])
            .stdin(Stdio::null())
            .spawn()
            .expect("unshare --net");
        let ns = NetNs { holder };
        // Wait until the holder is in its own namespace, then bring lo up.
        let own = std::fs::read_link("/proc/self/ns/net").ok();
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::read_link(ns.path()).ok() == own {
            assert!(Instant::now() < deadline, "unshare --net did not start");
            std::thread::sleep(Duration::from_millis(5));
        }
        let up = Command::new("nsenter")
            .arg(format!("--net={}", ns.path().display()))
            .args(["--", "ip", "link", "set", "lo", "up"])
            .status()
            .expect("nsenter ip");
        assert!(up.success(), "ip link set lo up failed");
        ns
    }

    /// The namespace's file.
    pub fn path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/ns/net", self.holder.id()))
    }

    /// A listener on 127.0.0.1 inside the namespace (a socket stays in the
    /// namespace it was made in, whichever thread uses it later).
    pub fn listen(&self) -> std::net::TcpListener {
        let path = self.path();
        std::thread::spawn(move || {
            let f = std::fs::File::open(&path).expect("open netns");
            nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            std::net::TcpListener::bind("127.0.0.1:0").expect("bind in netns")
        })
        .join()
        .expect("netns thread")
    }
}

impl Default for NetNs {
    fn default() -> Self {
        NetNs::new()
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

/// Which client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    Claude,
    Codex,
}

impl Which {
    pub fn name(self) -> &'static str {
        match self {
            Which::Claude => "claude",
            Which::Codex => "codex",
        }
    }
}

/// What `agent hook print-config WHICH --managed` prints for `sup`. The
/// clients run as another uid: the hook they start is the staged copy of
/// the agent, which that uid can reach (the build's may sit where only root
/// can).
pub fn managed_config(sup: &Supervisor, which: Which) -> String {
    let out = Command::new(bin("agent"))
        .args(["hook", "print-config", which.name(), "--managed"])
        .arg("--socket")
        .arg(&sup.agent_socket)
        .arg("--agent")
        .arg(sup.dirs.staged_bin("agent"))
        .output()
        .expect("agent hook print-config");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("the managed configuration is UTF-8")
}

/// A temp dir outside /tmp that everyone can traverse: Codex's own sandbox
/// cannot start with its home under /tmp.
pub fn var_tmp_dir(prefix: &str) -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/var/tmp")
        .expect("temp dir in /var/tmp");
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    d
}

/// One client run.
pub struct Run {
    pub which: Which,
    pub bin: PathBuf,
    /// The uid (and gid) the client runs as; 0 is root.
    pub uid: u32,
    pub workspace: PathBuf,
    /// A directory the run may use (HOME, CODEX_HOME, the overlay), made
    /// traversable and handed to `uid`.
    pub scratch: PathBuf,
    /// The managed configuration: Claude Code's settings JSON or Codex's
    /// requirements TOML.
    pub managed: String,
    /// The mock model server's base URL.
    pub base_url: String,
    pub prompt: String,
    /// Killed after this.
    pub timeout: Duration,
    /// More arguments for the client (Claude Code's `--allowedTools Grep`).
    pub extra_args: Vec<String>,
}

impl Run {
    /// Claude Code as `uid` in `workspace` behind `sup` (its managed
    /// configuration), against the mock model at `base_url`, with `scratch`
    /// for its home: three minutes, no extra arguments.
    pub fn claude_routed(
        sup: &Supervisor,
        clients: &Clients,
        (uid, workspace): (u32, &Path),
        scratch: &Path,
        base_url: String,
    ) -> Run {
        Run {
            which: Which::Claude,
            bin: clients.claude.clone(),
            uid,
            workspace: workspace.to_path_buf(),
            scratch: scratch.to_path_buf(),
            managed: managed_config(sup, Which::Claude),
            base_url,
            prompt: "do the task".to_string(),
            timeout: Duration::from_secs(180),
            extra_args: Vec::new(),
        }
    }

    /// Runs the client to its end (or the timeout) and returns its output.
    pub fn run(&self, ns: &NetNs) -> Output {
        self.command(ns).output().expect("run the client")
    }

    /// The command, for a test that runs it in the background.
    pub fn command(&self, ns: &NetNs) -> Command {
        let home = self.scratch.join("home");
        let overlay = self.scratch.join("overlay");
        for d in [&home, &overlay] {
            std::fs::create_dir_all(d).expect("scratch dirs");
        }
        std::fs::set_permissions(&self.scratch, std::fs::Permissions::from_mode(0o755))
            .expect("chmod scratch");
        let managed = self.scratch.join("managed");
        std::fs::write(&managed, &self.managed).expect("write managed config");
        std::fs::set_permissions(&managed, std::fs::Permissions::from_mode(0o644))
            .expect("chmod managed");
        let (etc_dir, etc_file) = match self.which {
            Which::Claude => ("/etc/claude-code", "managed-settings.json"),
            Which::Codex => ("/etc/codex", "requirements.toml"),
        };
        let env = client_env(self.which, &home, &self.base_url);
        let args: Vec<String> = match self.which {
            Which::Claude => {
                let mut a: Vec<String> = vec![
                    "-p".into(),
                    self.prompt.clone(),
                    "--output-format".into(),
                    "json".into(),
                ];
                a.extend(self.extra_args.iter().cloned());
                a
            }
            Which::Codex => {
                write_codex_config(&home, &codex_config(&self.base_url));
                vec![
                    "exec".into(),
                    "--skip-git-repo-check".into(),
                    "-s".into(),
                    "workspace-write".into(),
                    "-c".into(),
                    "sandbox_workspace_write.network_access=true".into(),
                ]
                .into_iter()
                .chain(self.extra_args.iter().cloned())
                .chain([self.prompt.clone()])
                .collect()
            }
        };
        if self.uid != 0 {
            chown_tree(&home, self.uid);
        }
        let q = tollgate_toolcall::shell::shell_quote;
        let mut exec = String::from("exec ");
        if self.uid != 0 {
            exec.push_str(&format!(
                "setpriv --reuid={u} --regid={u} --clear-groups -- ",
                u = self.uid
            ));
        }
        exec.push_str("env -i ");
        for (k, v) in &env {
            exec.push_str(&format!("{k}={} ", q(v)));
        }
        exec.push_str(&q(&self.bin.display().to_string()));
        for a in &args {
            exec.push(' ');
            exec.push_str(&q(a));
        }
        let script = format!(
            "set -e\n\
             mount -t tmpfs tmpfs {ov}\n\
             mkdir {ov}/u {ov}/w\n\
             mount -t overlay overlay -o lowerdir=/etc,upperdir={ov}/u,workdir={ov}/w /etc\n\
             mkdir -p {etc_dir}\n\
             cp {managed} {etc_dir}/{etc_file}\n\
             chmod 644 {etc_dir}/{etc_file}\n\
             cd {ws}\n\
             {exec} </dev/null\n",
            ov = q(&overlay.display().to_string()),
            managed = q(&managed.display().to_string()),
            ws = q(&self.workspace.display().to_string()),
        );
        let script_path = self.scratch.join("run.sh");
        std::fs::write(&script_path, script).expect("write run script");
        let mut cmd = Command::new("timeout");
        cmd.args(["-s", "KILL", &format!("{}", self.timeout.as_secs())])
            .arg("nsenter")
            .arg(format!("--net={}", ns.path().display()))
            .args([
                "--",
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "--",
                "sh",
            ])
            .arg(&script_path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }
}

/// The whole environment a client runs with (`env -i`): a plain PATH,
/// HOME, and the mock model's URL and key (Codex's home under HOME).
pub fn client_env(which: Which, home: &Path, base_url: &str) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
        ("HOME".into(), home.display().to_string()),
        ("LANG".into(), "C.UTF-8".into()),
    ];
    match which {
        Which::Claude => env.extend([
            ("ANTHROPIC_BASE_URL".into(), base_url.to_string()),
            ("ANTHROPIC_API_KEY".into(), "test-key".into()),
            (
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(),
                "1".into(),
            ),
            ("DISABLE_AUTOUPDATER".into(), "1".into()),
        ]),
        Which::Codex => env.extend([
            ("CODEX_HOME".into(), codex_home(home).display().to_string()),
            ("MOCK_API_KEY".into(), "test-key".into()),
        ]),
    }
    env
}

/// Codex's home (`CODEX_HOME`) under a run's HOME.
pub fn codex_home(home: &Path) -> PathBuf {
    home.join("codex")
}

/// Writes `config` as Codex's `config.toml` in its home under `home`.
pub fn write_codex_config(home: &Path, config: &str) {
    let dir = codex_home(home);
    std::fs::create_dir_all(&dir).expect("codex home");
    std::fs::write(dir.join("config.toml"), config).expect("codex config");
}

/// Codex's config for the mock provider, with everything that would leave
/// loopback switched off (docs/CLIENTS.md, "Testing against the real clients").
pub fn codex_config(base_url: &str) -> String {
    format!(
        "model_provider = \"mock\"\nmodel = \"gpt-5.5\"\ncheck_for_update_on_startup = false\n\
         [model_providers.mock]\nname = \"mock\"\nbase_url = \"{base_url}\"\nwire_api = \"responses\"\nenv_key = \"MOCK_API_KEY\"\n\
         [analytics]\nenabled = false\n[feedback]\nenabled = false\n\
         [otel]\nexporter = \"none\"\ntrace_exporter = \"none\"\nmetrics_exporter = \"none\"\n\
         [features]\nplugins = false\n"
    )
}

fn chown_tree(dir: &Path, uid: u32) {
    let id = (
        Some(nix::unistd::Uid::from_raw(uid)),
        Some(nix::unistd::Gid::from_raw(uid)),
    );
    let _ = nix::unistd::chown(dir, id.0, id.1);
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() && !p.is_symlink() {
                chown_tree(&p, uid);
            } else {
                let _ = nix::unistd::chown(&p, id.0, id.1);
            }
        }
    }
}
