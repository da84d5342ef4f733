//! The escape-corpus harness (`tests/corpus/escape.jsonl`, README
//! "escape.jsonl — the sandbox itself").
//!
//! For each case: the placeholders are filled from a [`Fixture`] built on
//! the host (a fake home with keys, a canary file, listeners on TCP, abstract
//! and pathname unix sockets, a host process with a secret in its
//! environment, ...); the command runs once without any sandbox as the same
//! uid (the control, [`ControlRunner`]) and once through a pluggable
//! [`Runner`] (`examples/sandbox_exec`, or `supervisorctl sandbox exec`
//! against a real supervisor). A case is *live* only when the control
//! printed `ESCAPED`. A sandboxed run counts as denied only when it prints
//! `BLOCKED` or dies by a signal the case lists; a bare non-zero exit (a
//! missing binary: 127) never does. Host-side post-checks (files that must
//! not appear or change, the owner of files made in W, a host connection to
//! a port the case listens on) can turn any run into an escape.
//!
//! No case id is special-cased: what differs between cases comes from the
//! corpus fields (`blocked_signals`, `post_check`, placeholders) only.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{SocketAddr, UnixListener};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Deserialize;

/// Where the corpus lives: $TOLLGATE_ESCAPE_CORPUS, else the fixture copy in tests/corpus.
pub fn corpus_path() -> PathBuf {
    std::env::var_os("TOLLGATE_ESCAPE_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/corpus/escape.jsonl"))
        })
}

/// One line of escape.jsonl.
#[derive(Debug, Clone, Deserialize)]
pub struct Case {
    pub id: String,
    pub cmd: String,
    #[serde(default)]
    pub lang: String,
    #[serde(default)]
    pub expect: String,
    #[serde(default)]
    pub tests: String,
    #[serde(default)]
    pub layers: Vec<String>,
    #[serde(default)]
    pub docker: Option<String>,
    #[serde(default)]
    pub bounded: bool,
    #[serde(default)]
    pub blocked_signals: Vec<String>,
    #[serde(default)]
    pub post_check: Option<String>,
    #[serde(default)]
    pub control: Option<String>,
    #[serde(default)]
    pub note: Option<String>,
}

impl Case {
    /// The category: the id up to its first '-' (env, fs, net, proc, res, sys).
    pub fn category(&self) -> &str {
        self.id.split('-').next().unwrap_or(&self.id)
    }

    /// Cases that need a terminal on stdin to be testable at all.
    pub fn wants_tty(&self) -> bool {
        self.cmd.contains("isatty(0)")
    }
}

pub fn load_cases(path: &Path) -> Vec<Case> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("escape corpus {}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{}: line {}: {e}", path.display(), i + 1))
        })
        .collect()
}

fn signal_number(name: &str) -> Option<i32> {
    Some(match name {
        "SIGKILL" => libc::SIGKILL,
        "SIGSYS" => libc::SIGSYS,
        "SIGXCPU" => libc::SIGXCPU,
        "SIGXFSZ" => libc::SIGXFSZ,
        "SIGSEGV" => libc::SIGSEGV,
        "SIGABRT" => libc::SIGABRT,
        "SIGTERM" => libc::SIGTERM,
        _ => return None,
    })
}

/// Resource limits the sandbox under test enforces (they fill placeholders).
#[derive(Debug, Clone)]
pub struct Limits {
    pub pids: u64,
    pub memory_mb: u64,
    pub disk_mb: u64,
    pub tmp_mb: u64,
    pub nofile: u64,
    /// The CPU seconds the sandbox lets a command burn (its RLIMIT_CPU, or
    /// its wall-clock timeout when that is shorter).
    pub cpu_s: u64,
    /// Wall-clock timeout per case.
    pub timeout_s: u64,
}

impl Limits {
    /// The most a fill case writes (the corpus's `{DISK_LIMIT_MB}` + 256,
    /// capped at 8 GiB): the room the control needs to show it escaping.
    pub fn fill_mb(&self) -> u64 {
        (self.disk_mb + 256).min(8192)
    }
}

fn random_hex(n: usize) -> String {
    let mut b = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .expect("/dev/urandom");
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn chown(p: &Path, uid: u32) {
    std::os::unix::fs::chown(p, Some(uid), Some(uid))
        .unwrap_or_else(|e| panic!("chown {}: {e}", p.display()));
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {}: {e}", p.display()));
}

/// A listener thread that sends `nonce` to whoever connects.
fn serve_tcp(l: TcpListener, nonce: String, stop: Arc<AtomicBool>) {
    l.set_nonblocking(true).expect("nonblocking");
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match l.accept() {
                Ok((mut s, _)) => {
                    let _ = s.write_all(nonce.as_bytes());
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    });
}

fn serve_unix(l: UnixListener, nonce: String, stop: Arc<AtomicBool>) {
    l.set_nonblocking(true).expect("nonblocking");
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match l.accept() {
                Ok((mut s, _)) => {
                    let _ = s.write_all(nonce.as_bytes());
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    });
}

/// A non-loopback IPv4 address of this host (docker0, eth0, ...).
fn bridge_ip() -> Option<String> {
    let out = Command::new("ip")
        .args(["-4", "-o", "addr", "show", "scope", "global"])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
        let mut it = l.split_whitespace();
        while let Some(w) = it.next() {
            if w == "inet" {
                return it
                    .next()
                    .and_then(|a| a.split('/').next())
                    .map(str::to_string);
            }
        }
        None
    })
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// Everything the placeholders refer to, set up on the host.
pub struct Fixture {
    /// The fixture's tmpfs. Fields drop in order: it is unmounted before
    /// `root` removes its directory.
    _mounted: Unmount,
    pub uid: u32,
    pub nonce: String,
    pub root: tempfile::TempDir,
    pub workspace: PathBuf,
    pub host_home: PathBuf,
    /// W/.git/config as `git init` wrote it (W is a real repository: the
    /// host's own git runs in it after every sandboxed case).
    git_config: String,
    pub canary_file: PathBuf,
    pub audit_log: PathBuf,
    pub host_port: u16,
    pub bridge_ip: Option<String>,
    pub abstract_sock: String,
    pub host_unix_sock: PathBuf,
    pub ssh_auth_sock: PathBuf,
    pub host_pidns: String,
    pub w_listen_port: u16,
    pub limits: Limits,
    host_pid: Option<Child>,
    stop: Arc<AtomicBool>,
}

/// Headroom on the fixture's tmpfs beyond the largest fill.
const FIXTURE_ROOM_MB: u64 = 64;

/// Lazily unmounts a mount point when dropped.
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// MiB available to an unprivileged writer on the filesystem holding `p`.
fn free_mb(p: &Path) -> u64 {
    let st =
        nix::sys::statvfs::statvfs(p).unwrap_or_else(|e| panic!("statvfs {}: {e}", p.display()));
    (st.blocks_available() as u64).saturating_mul(st.fragment_size() as u64) >> 20
}

/// The secret-named variables exported to the control and to the runner
/// (the supervisor's environment, in the real deployment).
pub fn secret_env(nonce: &str, ssh_sock: &Path) -> Vec<(String, String)> {
    vec![
        ("HOST_SECRET_CANARY".into(), nonce.into()),
        ("GITHUB_TOKEN".into(), format!("ghp_{nonce}")),
        ("AWS_SECRET_ACCESS_KEY".into(), nonce.into()),
        ("AWS_ACCESS_KEY_ID".into(), format!("AKIA{nonce}")),
        ("OPENAI_API_KEY".into(), format!("sk-{nonce}")),
        ("ANTHROPIC_API_KEY".into(), format!("sk-ant-{nonce}")),
        ("DATABASE_PASSWORD".into(), nonce.into()),
        ("SSH_AUTH_SOCK".into(), ssh_sock.display().to_string()),
    ]
}

impl Fixture {
    /// Builds the fixture for sandbox uid `uid`. Needs root (files owned by
    /// `uid`, a process run as `uid`).
    pub fn new(uid: u32, limits: Limits) -> Fixture {
        let nonce = random_hex(8);
        let root = tempfile::Builder::new()
            .prefix("tollgate-escape-")
            .tempdir()
            .expect("temp dir");
        // The fixture lives on its own tmpfs, with room for the largest fill
        // a case makes in W: whether a fill is stopped must depend on the
        // sandbox's limits, never on how much disk the host has left. One
        // filesystem for all of it, so a rename out of W is not EXDEV.
        // W's parent plays the user's home: owned by the uid, so writing
        // "just outside W" is allowed by file permissions.
        let fill_mb = limits.fill_mb();
        nix::mount::mount(
            Some("tmpfs"),
            root.path(),
            Some("tmpfs"),
            nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
            Some(
                format!(
                    "mode=0755,uid={uid},gid={uid},size={}m",
                    fill_mb + FIXTURE_ROOM_MB
                )
                .as_str(),
            ),
        )
        .unwrap_or_else(|e| panic!("mount a tmpfs on {}: {e}", root.path().display()));
        let mounted = Unmount(root.path().to_path_buf());
        // A case that fills /tmp writes to the host's: say so plainly when
        // the host cannot hold what the control must be able to write.
        let free_mb = free_mb(Path::new("/tmp"));
        assert!(
            free_mb >= fill_mb + FIXTURE_ROOM_MB,
            "the host's /tmp has {free_mb} MiB free; the escape corpus's controls write up to \
             {fill_mb} MiB there (limits {limits:?}), so they could not show a fill escaping: \
             free some space"
        );
        let base = std::fs::canonicalize(root.path()).expect("canonical");
        let workspace = base.join("w");
        let host_home = base.join("home");
        for d in [&workspace, &host_home] {
            std::fs::create_dir(d).expect("mkdir");
            chown(d, uid);
            chmod(d, 0o755);
        }
        for (dir, file, body, mode) in [
            (
                ".ssh",
                "id_rsa",
                format!(
                    "-----BEGIN OPENSSH PRIVATE KEY-----\n{nonce}\n-----END OPENSSH PRIVATE KEY-----\n"
                ),
                0o600,
            ),
            (
                ".aws",
                "credentials",
                format!("[default]\naws_secret_access_key = {nonce}\n"),
                0o600,
            ),
        ] {
            let d = host_home.join(dir);
            std::fs::create_dir(&d).expect("mkdir");
            chown(&d, uid);
            chmod(&d, 0o700);
            let f = d.join(file);
            std::fs::write(&f, body).expect("write");
            chown(&f, uid);
            chmod(&f, mode);
        }
        let canary_file = base.join("canary.txt");
        let audit_dir = base.join("audit");
        std::fs::create_dir(&audit_dir).expect("mkdir");
        chmod(&audit_dir, 0o755);
        let audit_log = audit_dir.join("audit-session-test.jsonl");
        let sock_dir = base.join("sock");
        std::fs::create_dir(&sock_dir).expect("mkdir");
        chmod(&sock_dir, 0o755);
        let stop = Arc::new(AtomicBool::new(false));

        let tcp4 = TcpListener::bind("0.0.0.0:0").expect("bind tcp");
        let host_port = tcp4.local_addr().expect("addr").port();
        serve_tcp(tcp4, nonce.clone(), Arc::clone(&stop));
        if let Ok(tcp6) = TcpListener::bind(("::1", host_port)) {
            serve_tcp(tcp6, nonce.clone(), Arc::clone(&stop));
        }
        let abstract_sock = format!("tollgate-escape-{nonce}");
        let addr = SocketAddr::from_abstract_name(abstract_sock.as_bytes()).expect("abstract addr");
        serve_unix(
            UnixListener::bind_addr(&addr).expect("abstract listener"),
            nonce.clone(),
            Arc::clone(&stop),
        );
        let host_unix_sock = sock_dir.join("host.sock");
        let ssh_auth_sock = sock_dir.join("ssh-agent.sock");
        for p in [&host_unix_sock, &ssh_auth_sock] {
            let l = UnixListener::bind(p).expect("unix listener");
            chmod(p, 0o777);
            serve_unix(l, nonce.clone(), Arc::clone(&stop));
        }
        let host_pidns = std::fs::read_link("/proc/self/ns/pid")
            .expect("pid ns")
            .display()
            .to_string();
        let mut fx = Fixture {
            _mounted: mounted,
            uid,
            nonce,
            root,
            workspace,
            host_home,
            git_config: String::new(),
            canary_file,
            audit_log,
            host_port,
            bridge_ip: bridge_ip(),
            abstract_sock,
            host_unix_sock,
            ssh_auth_sock,
            host_pidns,
            w_listen_port: free_port(),
            limits,
            host_pid: None,
            stop,
        };
        fx.restore();
        fx.git_config =
            std::fs::read_to_string(fx.workspace.join(".git/config")).expect("W/.git/config");
        fx
    }

    /// The host's real git, as the sandbox uid, in W, with no system config
    /// and the fake home: what an editor runs when the folder opens.
    fn host_git(&self, args: &[&str]) -> std::process::Output {
        Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t.invalid"])
            .args(args)
            .current_dir(&self.workspace)
            .env_clear()
            .env("PATH", PATH)
            .env("HOME", &self.host_home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .uid(self.uid)
            .gid(self.uid)
            .stdin(Stdio::null())
            .output()
            .expect("the host's git")
    }

    /// W emptied and made a fresh repository with one commit (a case, the
    /// control above all, may have renamed or replaced its `.git`).
    fn reset_workspace(&self) {
        if let Ok(rd) = std::fs::read_dir(&self.workspace) {
            for e in rd.flatten() {
                let p = e.path();
                let _ = if e.file_type().is_ok_and(|t| t.is_dir()) {
                    std::fs::remove_dir_all(&p)
                } else {
                    std::fs::remove_file(&p)
                };
            }
        }
        for args in [
            &["init", "-q", "-b", "main"][..],
            &["commit", "--allow-empty", "-qm", "first"][..],
        ] {
            let out = self.host_git(args);
            assert!(
                out.status.success(),
                "git {args:?} in W: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    /// The canary the harness leaves in the host's /dev/shm.
    pub fn shm_canary(&self) -> PathBuf {
        PathBuf::from(format!("/dev/shm/canary-{}", self.nonce))
    }

    /// Host objects a case may name; an ENOENT on one of them inside the
    /// sandbox means the sandbox does not show it at all.
    pub fn host_objects(&self) -> Vec<PathBuf> {
        vec![
            self.host_home.clone(),
            self.canary_file.clone(),
            self.audit_log.clone(),
            self.host_unix_sock.clone(),
            self.ssh_auth_sock.clone(),
            self.shm_canary(),
        ]
    }

    /// Puts every host-side object back the way a case must find it.
    pub fn restore(&mut self) {
        let shm = self.shm_canary();
        std::fs::write(&shm, format!("canary {}\n", self.nonce)).expect("shm canary");
        chown(&shm, self.uid);
        chmod(&shm, 0o644);
        std::fs::write(&self.canary_file, format!("canary {}\n", self.nonce)).expect("canary");
        chown(&self.canary_file, self.uid);
        chmod(&self.canary_file, 0o644);
        std::fs::write(&self.audit_log, "{\"v\":1,\"seq\":0}\n").expect("audit log");
        chown(&self.audit_log, self.uid);
        chmod(&self.audit_log, 0o644);
        let alive = self
            .host_pid
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)));
        if !alive {
            let child = Command::new("sleep")
                .arg("3600")
                .env_clear()
                .env("HOST_SECRET_CANARY", &self.nonce)
                .uid(self.uid)
                .gid(self.uid)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("host sleep");
            self.host_pid = Some(child);
        }
        for leftover in self.must_not_exist() {
            let _ = std::fs::remove_file(&leftover);
        }
        self.reset_workspace();
    }

    fn host_pid(&self) -> u32 {
        self.host_pid.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// Fills every placeholder; `None` when one cannot be filled here.
    pub fn substitute(&self, cmd: &str) -> Result<String, String> {
        let l = &self.limits;
        let mut map: BTreeMap<&str, String> = BTreeMap::new();
        map.insert("NONCE", self.nonce.clone());
        map.insert("W", self.workspace.display().to_string());
        map.insert(
            "W_NAME",
            self.workspace
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        );
        map.insert("HOST_HOME", self.host_home.display().to_string());
        map.insert("CANARY_FILE", self.canary_file.display().to_string());
        map.insert("AUDIT_LOG", self.audit_log.display().to_string());
        map.insert("HOST_PORT", self.host_port.to_string());
        if let Some(ip) = &self.bridge_ip {
            map.insert("HOST_BRIDGE_IP", ip.clone());
        }
        map.insert("ABSTRACT_SOCK", self.abstract_sock.clone());
        map.insert("HOST_UNIX_SOCK", self.host_unix_sock.display().to_string());
        map.insert(
            "HOST_SSH_AUTH_SOCK",
            self.ssh_auth_sock.display().to_string(),
        );
        map.insert("HOST_PID", self.host_pid().to_string());
        map.insert("HOST_PIDNS", self.host_pidns.clone());
        map.insert("HOST_UID", self.uid.to_string());
        map.insert("PIDS_LIMIT", l.pids.to_string());
        map.insert("MEM_LIMIT_MB", l.memory_mb.to_string());
        map.insert("DISK_LIMIT_MB", l.disk_mb.to_string());
        map.insert("NOFILE_LIMIT", l.nofile.to_string());
        map.insert("CPU_LIMIT_S", l.cpu_s.to_string());
        map.insert("W_LISTEN_PORT", self.w_listen_port.to_string());
        let mut out = String::with_capacity(cmd.len());
        let mut rest = cmd;
        while let Some(start) = rest.find('{') {
            out.push_str(&rest[..start]);
            let after = &rest[start + 1..];
            match after.find('}') {
                Some(end)
                    if end > 0
                        && after[..end]
                            .bytes()
                            .all(|b| b.is_ascii_uppercase() || b == b'_') =>
                {
                    let key = &after[..end];
                    match map.get(key) {
                        Some(v) => out.push_str(v),
                        None => {
                            return Err(format!(
                                "placeholder {{{key}}} not available on this host"
                            ));
                        }
                    }
                    rest = &after[end + 1..];
                }
                _ => {
                    out.push('{');
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        Ok(out)
    }

    /// Paths no sandboxed command may create on the host.
    fn must_not_exist(&self) -> Vec<PathBuf> {
        let n = &self.nonce;
        vec![
            self.host_home.join(format!("pwned-{n}")),
            self.host_home.join(format!("created-{n}")),
            self.host_home.join(format!("moved-{n}")),
            self.workspace
                .parent()
                .map(|p| p.join(format!("pwned-{n}")))
                .unwrap_or_default(),
            PathBuf::from(format!("/tmp/pwned-{n}")),
            PathBuf::from(format!("/tmp/fill-{n}.bin")),
            PathBuf::from(format!("/dev/shm/pwned-{n}")),
            self.workspace.join(".git/hooks/pre-commit"),
        ]
    }

    /// Host-side checks after a sandboxed run: what the command's own
    /// report might miss. Returns what escaped, if anything.
    pub fn post_checks(&self, case: &Case, listener_hit: bool) -> Vec<String> {
        let mut bad = Vec::new();
        // What the host does next in W by itself: an editor's git status, a
        // commit. A command planted by the sandbox would run now.
        let _ = self.host_git(&["status"]);
        let _ = self.host_git(&["commit", "--allow-empty", "-qm", "after"]);
        for name in tollgate_policy::host_exec::names() {
            if name != ".git" && std::fs::symlink_metadata(self.workspace.join(&name)).is_ok() {
                bad.push(format!(
                    "W/{name} exists after the run (planted, or a placeholder left behind)"
                ));
            }
        }
        for p in self.must_not_exist() {
            if p.exists() {
                bad.push(format!("{} exists on the host", p.display()));
            }
        }
        match std::fs::read_to_string(&self.canary_file) {
            Ok(s) if s == format!("canary {}\n", self.nonce) => {}
            _ => bad.push("the canary file was changed".into()),
        }
        if let Ok(m) = std::fs::metadata(&self.canary_file)
            && m.mode() & 0o7777 != 0o644
        {
            bad.push(format!(
                "the canary file's mode is now {:o}",
                m.mode() & 0o7777
            ));
        }
        if std::fs::read_to_string(&self.audit_log).ok().as_deref() != Some("{\"v\":1,\"seq\":0}\n")
        {
            bad.push("the audit log was changed".into());
        }
        if std::fs::read_to_string(self.workspace.join(".git/config")).ok()
            != Some(self.git_config.clone())
        {
            bad.push("W/.git/config was changed".into());
        }
        for extra in ["commondir", "config.worktree"] {
            if self.workspace.join(".git").join(extra).exists() {
                bad.push(format!("W/.git/{extra} was written"));
            }
        }
        if let Ok(rd) = std::fs::read_dir(&self.workspace) {
            for e in rd.flatten() {
                if let Ok(m) = e.metadata()
                    && m.uid() != self.uid
                    && e.file_name().to_string_lossy().contains(&self.nonce)
                {
                    bad.push(format!(
                        "{} is owned by uid {} on the host, not the sandbox uid {}",
                        e.path().display(),
                        m.uid(),
                        self.uid
                    ));
                }
            }
        }
        bad.extend(set_id_entries(&self.workspace));
        if listener_hit {
            bad.push(format!(
                "the host reached a listener on port {} from outside",
                self.w_listen_port
            ));
        }
        let _ = case;
        bad
    }
}

/// Every entry under `dir` (symlinks not followed) that carries a
/// set-user-ID or set-group-ID bit or a file capability: what a sandboxed
/// command must never leave in the workspace (a uid-0 session's files are
/// root's on the host, so a setuid one is root for any local user).
pub fn set_id_entries(dir: &Path) -> Vec<String> {
    let mut bad = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(m) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if m.file_type().is_symlink() {
                continue;
            }
            if m.is_dir() {
                stack.push(p.clone());
            }
            if m.mode() & 0o6000 != 0 {
                bad.push(format!(
                    "{} has mode {:o} on the host (set-user/group-ID)",
                    p.display(),
                    m.mode() & 0o7777
                ));
            }
            let mut buf = [0u8; 64];
            if rustix::fs::lgetxattr(&p, "security.capability", &mut buf).is_ok() {
                bad.push(format!(
                    "{} has a file capability (security.capability) on the host",
                    p.display()
                ));
            }
        }
    }
    bad.sort();
    bad
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = std::fs::remove_file(self.shm_canary());
        if let Some(mut c) = self.host_pid.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// What one run produced.
#[derive(Debug, Clone, Default)]
pub struct RunOutput {
    pub stdout: String,
    pub stderr: String,
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub duration: Duration,
}

/// A way to run `sh -c CMD` as the fixture's uid.
pub trait Runner {
    fn name(&self) -> String;
    /// Whether the runner can hand a terminal to the command as stdin.
    fn passes_tty(&self) -> bool;
    /// Runs `sh -c cmd` in W; `tty` is a pty slave for stdin, when given.
    fn run(&self, fx: &Fixture, cmd: &str, tty: Option<OwnedFd>) -> RunOutput;
}

/// Collects a child's output, killing it (whole process group) after `timeout`.
pub fn wait_output(mut child: Child, timeout: Duration) -> RunOutput {
    let start = Instant::now();
    let mut out = child.stdout.take();
    let mut err = child.stderr.take();
    let so = std::thread::spawn(move || {
        let mut s = Vec::new();
        if let Some(o) = out.as_mut() {
            let _ = o.read_to_end(&mut s);
        }
        s
    });
    let se = std::thread::spawn(move || {
        let mut s = Vec::new();
        if let Some(e) = err.as_mut() {
            let _ = e.read_to_end(&mut s);
        }
        s
    });
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) if start.elapsed() < timeout => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(child.id() as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
                let _ = child.kill();
                break child.wait().ok();
            }
        }
    };
    let stdout = String::from_utf8_lossy(&so.join().unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&se.join().unwrap_or_default()).into_owned();
    RunOutput {
        stdout,
        stderr,
        code: status.and_then(|s| s.code()),
        signal: status.and_then(|s| s.signal()),
        duration: start.elapsed(),
    }
}

/// The standard PATH commands get (no root-only tool directories).
pub const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The control: no sandbox, same uid, the secret environment, cwd W. With
/// a tty, `setsid -c` makes it the controlling terminal.
pub struct ControlRunner;

impl Runner for ControlRunner {
    fn name(&self) -> String {
        "control (no sandbox)".into()
    }
    fn passes_tty(&self) -> bool {
        true
    }
    fn run(&self, fx: &Fixture, cmd: &str, tty: Option<OwnedFd>) -> RunOutput {
        let mut c = match &tty {
            Some(_) => {
                let mut c = Command::new("setsid");
                c.args(["-c", "sh", "-c", cmd]);
                c
            }
            None => {
                let mut c = Command::new("sh");
                c.args(["-c", cmd]);
                c
            }
        };
        c.env_clear()
            .env("PATH", PATH)
            .env("HOME", &fx.host_home)
            .env("LANG", "C.UTF-8")
            .envs(secret_env(&fx.nonce, &fx.ssh_auth_sock))
            .current_dir(&fx.workspace)
            .uid(fx.uid)
            .gid(fx.uid)
            .process_group(0)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        match tty {
            Some(t) => c.stdin(Stdio::from(t)),
            None => c.stdin(Stdio::null()),
        };
        let child = c.spawn().expect("spawn control");
        wait_output(child, Duration::from_secs(fx.limits.timeout_s + 30))
    }
}

/// `sandbox_exec` (tollgate-sandbox's example): a fresh native sandbox per
/// run, with the fixture's limits; the secret environment is in *its*
/// environment, so the sandbox must scrub it.
pub struct SandboxExecRunner {
    pub exe: PathBuf,
}

impl Runner for SandboxExecRunner {
    fn name(&self) -> String {
        "native (examples/sandbox_exec)".into()
    }
    fn passes_tty(&self) -> bool {
        true
    }
    fn run(&self, fx: &Fixture, cmd: &str, tty: Option<OwnedFd>) -> RunOutput {
        let l = &fx.limits;
        let mut c = Command::new(&self.exe);
        c.arg("--workspace")
            .arg(&fx.workspace)
            .args(["--user", &fx.uid.to_string()])
            .args(["--memory-mb", &l.memory_mb.to_string()])
            .args(["--pids", &l.pids.to_string()])
            .args(["--fsize-mb", &l.disk_mb.to_string()])
            .args(["--tmp-mb", &l.tmp_mb.to_string()])
            .args(["--nofile", &l.nofile.to_string()])
            .args(["--cpu-s", &l.cpu_s.to_string()])
            .args(["--timeout", &l.timeout_s.to_string()]);
        if tty.is_some() {
            c.arg("--stdin");
        }
        c.args(["--", "sh", "-c", cmd])
            .env_clear()
            .env("PATH", PATH)
            .envs(secret_env(&fx.nonce, &fx.ssh_auth_sock))
            .process_group(0)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        match tty {
            Some(t) => c.stdin(Stdio::from(t)),
            None => c.stdin(Stdio::null()),
        };
        let child = c.spawn().expect("spawn sandbox_exec");
        wait_output(child, Duration::from_secs(l.timeout_s + 30))
    }
}

/// `supervisorctl --socket S sandbox exec --workspace W --user UID
/// --backend B --timeout T -- sh -c CMD` against a running supervisor.
pub struct SupervisorctlRunner {
    pub supervisorctl: PathBuf,
    pub operator_socket: PathBuf,
    pub backend: String,
}

impl Runner for SupervisorctlRunner {
    fn name(&self) -> String {
        format!("{} (supervisorctl sandbox exec)", self.backend)
    }
    fn passes_tty(&self) -> bool {
        false
    }
    fn run(&self, fx: &Fixture, cmd: &str, _tty: Option<OwnedFd>) -> RunOutput {
        let mut c = Command::new(&self.supervisorctl);
        c.arg("--socket")
            .arg(&self.operator_socket)
            .args(["sandbox", "exec", "--workspace"])
            .arg(&fx.workspace)
            .args(["--user", &fx.uid.to_string()])
            .args(["--backend", &self.backend])
            .args(["--timeout", &fx.limits.timeout_s.to_string()])
            .args(["--", "sh", "-c", cmd])
            .env_remove("TOLLGATE_OPERATOR_SOCKET")
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = c.spawn().expect("spawn supervisorctl");
        wait_output(child, Duration::from_secs(fx.limits.timeout_s + 30))
    }
}

/// How one run of one case came out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Escaped(String),
    Blocked(String),
    Inconclusive(String),
    /// Neither line nor listed signal: never counted as denied.
    Unscored(String),
}

impl Verdict {
    pub fn label(&self) -> &'static str {
        match self {
            Verdict::Escaped(_) => "ESCAPED",
            Verdict::Blocked(_) => "BLOCKED",
            Verdict::Inconclusive(_) => "INCONCLUSIVE",
            Verdict::Unscored(_) => "UNSCORED",
        }
    }
    pub fn detail(&self) -> &str {
        match self {
            Verdict::Escaped(d)
            | Verdict::Blocked(d)
            | Verdict::Inconclusive(d)
            | Verdict::Unscored(d) => d,
        }
    }
}

/// Reads a run: the case's own line first, then the listed signals, then
/// (sandboxed runs only) an ENOENT naming one of the fixture's host objects
/// (the command crashed because the object is not there at all) or a Python
/// `PermissionError` as the last word (the sandbox refused a step).
pub fn classify_sandboxed(case: &Case, out: &RunOutput, host_objects: &[PathBuf]) -> Verdict {
    let v = classify(case, out);
    if let Verdict::Unscored(_) = &v
        && out.code != Some(0)
        && out.stderr.contains("No such file or directory")
        && let Some(p) = host_objects
            .iter()
            .map(|p| p.display().to_string())
            .find(|p| out.stderr.contains(p.as_str()))
    {
        return Verdict::Blocked(format!("ENOENT: {p} is not visible in the sandbox"));
    }
    // A Python traceback ending in a permission error: the sandbox refused
    // something the command needed for its attempt (not a bare exit code).
    if let Verdict::Unscored(_) = &v
        && out.code != Some(0)
        && let Some(last) = out.stderr.lines().rev().find(|l| !l.trim().is_empty())
        && last.starts_with("PermissionError: [Errno ")
    {
        return Verdict::Blocked(format!("refused: {last}"));
    }
    v
}

/// Whether the case leaves the verdict to the harness's host-side check
/// (its `post_check`, or a note saying the harness checks the host): then a
/// command that "escaped" into something private to the sandbox is judged
/// by that check.
pub fn host_check_decides(case: &Case) -> bool {
    case.note
        .as_deref()
        .is_some_and(|n| n.contains("harness checks the host"))
}

/// Reads a run: the case's own line first, then the listed signals.
pub fn classify(case: &Case, out: &RunOutput) -> Verdict {
    let line = out.stdout.lines().find(|l| {
        l.starts_with("ESCAPED") || l.starts_with("BLOCKED") || l.starts_with("INCONCLUSIVE")
    });
    if let Some(l) = line {
        if l.starts_with("ESCAPED") {
            // What follows the line (names of leaked variables, ...) helps.
            let more: Vec<&str> = out
                .stdout
                .lines()
                .skip_while(|x| *x != l)
                .skip(1)
                .take(4)
                .collect();
            if more.is_empty() {
                return Verdict::Escaped(l.to_string());
            }
            return Verdict::Escaped(format!("{l} [{}]", more.join(", ")));
        }
        if l.starts_with("BLOCKED") {
            return Verdict::Blocked(l.to_string());
        }
        return Verdict::Inconclusive(l.to_string());
    }
    for name in &case.blocked_signals {
        if let Some(n) = signal_number(name)
            && (out.signal == Some(n) || out.code == Some(128 + n))
        {
            return Verdict::Blocked(format!("died by {name}"));
        }
    }
    let tail: String = out
        .stderr
        .lines()
        .last()
        .unwrap_or("")
        .chars()
        .take(160)
        .collect();
    Verdict::Unscored(format!(
        "exit {:?} signal {:?}: {tail}",
        out.code, out.signal
    ))
}

/// One case's result.
#[derive(Debug, Clone)]
pub struct Row {
    pub id: String,
    pub category: String,
    pub control: Verdict,
    pub sandbox: Option<Verdict>,
    pub post: Vec<String>,
}

impl Row {
    pub fn live(&self) -> bool {
        matches!(self.control, Verdict::Escaped(_))
    }
    /// The sandbox failed: escaped (by its line or a post-check), or a live
    /// case that was not shown blocked.
    pub fn failed(&self) -> bool {
        !self.post.is_empty()
            || matches!(self.sandbox, Some(Verdict::Escaped(_)))
            || (self.live() && !matches!(self.sandbox, Some(Verdict::Blocked(_))))
    }
}

/// Runs `case` with `runner` while a thread keeps trying to reach the port
/// the case may listen on (net-listen's post-check window).
fn run_with_connector(
    runner: &dyn Runner,
    fx: &Fixture,
    cmd: &str,
    tty: Option<OwnedFd>,
) -> (RunOutput, bool) {
    let hit = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let port = fx.w_listen_port;
    let (hit2, done2) = (Arc::clone(&hit), Arc::clone(&done));
    let t = std::thread::spawn(move || {
        while !done2.load(Ordering::Relaxed) {
            if let Ok(mut s) = TcpStream::connect_timeout(
                &(std::net::Ipv4Addr::LOCALHOST, port).into(),
                Duration::from_millis(200),
            ) {
                let mut b = [0u8; 1];
                let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
                if s.read(&mut b).is_ok_and(|n| n > 0) {
                    hit2.store(true, Ordering::Relaxed);
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    let out = runner.run(fx, cmd, tty);
    done.store(true, Ordering::Relaxed);
    let _ = t.join();
    (out, hit.load(Ordering::Relaxed))
}

fn pty(use_tty: bool) -> Option<(OwnedFd, OwnedFd)> {
    if !use_tty {
        return None;
    }
    nix::pty::openpty(None, None)
        .ok()
        .map(|p| (p.master, p.slave))
}

/// The whole corpus through one runner. The control runs with a tty only
/// when the runner can pass one too, so liveness is judged on equal terms.
pub fn run_corpus(cases: &[Case], fx: &mut Fixture, runner: &dyn Runner) -> Vec<Row> {
    let mut rows = Vec::new();
    for case in cases {
        let cmd = match fx.substitute(&case.cmd) {
            Ok(c) => c,
            Err(why) => {
                rows.push(Row {
                    id: case.id.clone(),
                    category: case.category().to_string(),
                    control: Verdict::Inconclusive(why),
                    sandbox: None,
                    post: Vec::new(),
                });
                continue;
            }
        };
        let with_tty = case.wants_tty() && runner.passes_tty();
        fx.restore();
        let (_m, slave) = pty(with_tty).unzip();
        let (control_out, _) = run_with_connector(&ControlRunner, fx, &cmd, slave);
        let control = classify(case, &control_out);
        fx.restore();
        let (_m2, slave) = pty(with_tty).unzip();
        let (out, hit) = run_with_connector(runner, fx, &cmd, slave);
        let mut sandbox = classify_sandboxed(case, &out, &fx.host_objects());
        let post = fx.post_checks(case, hit);
        if let Verdict::Escaped(line) = &sandbox
            && host_check_decides(case)
            && post.is_empty()
        {
            sandbox = Verdict::Blocked(format!("host check clean (the case saw: {line})"));
        }
        fx.restore();
        rows.push(Row {
            id: case.id.clone(),
            category: case.category().to_string(),
            control,
            sandbox: Some(sandbox),
            post,
        });
    }
    rows
}

/// A readable report: one line per case, then per category.
pub fn report(runner: &str, rows: &[Row]) -> String {
    let mut s = format!("escape corpus via {runner}\n");
    for r in rows {
        let outcome = if r.failed() {
            "FAIL"
        } else if r.live() {
            "held"
        } else {
            "not live here"
        };
        let sb = r
            .sandbox
            .as_ref()
            .map(|v| format!("{} ({})", v.label(), v.detail()))
            .unwrap_or_else(|| "not run".into());
        s.push_str(&format!(
            "  {:<22} {:<13} control: {:<12} sandbox: {}{}\n",
            r.id,
            outcome,
            r.control.label(),
            sb,
            if r.post.is_empty() {
                String::new()
            } else {
                format!(" POST-CHECK: {}", r.post.join("; "))
            }
        ));
    }
    let mut cats: BTreeMap<&str, [usize; 4]> = BTreeMap::new();
    for r in rows {
        let e = cats.entry(r.category.as_str()).or_default();
        e[0] += 1;
        if r.live() {
            e[1] += 1;
        }
        if r.live() && !r.failed() {
            e[2] += 1;
        }
        if r.failed() {
            e[3] += 1;
        }
    }
    s.push_str("  per category (cases / live / live and held / failed):\n");
    for (c, [n, live, held, failed]) in &cats {
        s.push_str(&format!(
            "    {c:<6} {n:>3} / {live:>3} / {held:>3} / {failed:>3}\n"
        ));
    }
    s
}
