//! The supervisor's end of the resident exec agent (`tollgate-exec-agent`,
//! pid 1 of every session container).
//!
//! - [`AgentBinary`]: the agent executable on the host, found next to the
//!   supervisor's own (or configured), checked before any container is made:
//!   a regular file, owned by root or the supervisor's user, writable by
//!   nobody else, executable, and statically linked for this machine (a
//!   dynamic one would not start in an image without the host's libc). Its
//!   device and inode are kept: the container's pid 1 must be that very file.
//! - [`AgentSocket`]: one listening Unix socket per container, in
//!   `<state dir>/exec-agent/` (0700: no other host user reaches it),
//!   bind-mounted read-only into the container. It accepts exactly one
//!   connection, from a process in that container running as the session's
//!   uid, and is then closed and unlinked: nothing in the container can
//!   connect to the supervisor afterwards.
//! - [`AgentLink`]: the connection. The agent's first frame must be a `Hello`
//!   whose posture the backend checks; then a reader task routes each
//!   command's frames to its `exec` call. Everything read is untrusted: a
//!   frame that does not parse, or output beyond the credit the agent was
//!   given, closes the link (and the backend destroys the container).

use std::collections::HashMap;
use std::io::Read;
use std::net::Shutdown;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tollgate_exec_agent::wire::{
    self, DRAIN_MAX, FrameReader, FromAgent, Hello, INITIAL_WINDOW, ToAgent,
};

use crate::{Output, SandboxError};

pub use tollgate_exec_agent::{BINARY_NAME, CONTAINER_BINARY, CONTAINER_SOCKET};

/// Where the static build of this source tree put the agent ("" if it did not).
pub const BUILT_AGENT: &str = env!("TOLLGATE_EXEC_AGENT_BUILT");
/// Why the static build did not happen ("" if it did).
const BUILD_ERROR: &str = env!("TOLLGATE_EXEC_AGENT_BUILD_ERROR");

const HINT: &str = "build the workspace (cargo build --release puts a static tollgate-exec-agent \
                    next to supervisor; it needs static glibc: apt-get install libc6-dev) or set \
                    [sandbox] docker_exec_agent";

/// The agent executable: next to the running executable, else the one this
/// source tree's build made (for tests run from `target/<profile>/deps`).
pub fn default_agent_path() -> PathBuf {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join(BINARY_NAME)))
        .unwrap_or_else(|| PathBuf::from(BINARY_NAME));
    if !beside.exists() && !BUILT_AGENT.is_empty() && Path::new(BUILT_AGENT).exists() {
        return PathBuf::from(BUILT_AGENT);
    }
    beside
}

/// The checked agent executable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentBinary {
    /// Canonical path (what is bind-mounted).
    pub path: PathBuf,
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
}

fn unusable(path: &Path, why: impl std::fmt::Display) -> SandboxError {
    let built = if BUILD_ERROR.is_empty() {
        String::new()
    } else {
        format!(" (this build made none: {BUILD_ERROR})")
    };
    SandboxError::Unavailable(format!(
        "docker exec agent {}: {why}{built}; {HINT}",
        path.display()
    ))
}

impl AgentBinary {
    /// Checks the file at `path` (see the module docs).
    pub fn check(path: &Path) -> Result<AgentBinary, SandboxError> {
        let canon = std::fs::canonicalize(path).map_err(|e| unusable(path, e))?;
        let mut f = std::fs::File::open(&canon).map_err(|e| unusable(&canon, e))?;
        let m = f.metadata().map_err(|e| unusable(&canon, e))?;
        if !m.is_file() {
            return Err(unusable(&canon, "not a regular file"));
        }
        let me = nix::unistd::geteuid().as_raw();
        if m.uid() != 0 && m.uid() != me {
            return Err(unusable(
                &canon,
                format!(
                    "owned by uid {}, not by root or the supervisor (uid {me}): whoever owns it could replace every container's pid 1",
                    m.uid()
                ),
            ));
        }
        if m.mode() & 0o022 != 0 {
            return Err(unusable(
                &canon,
                format!(
                    "mode {:o} lets others write it: chmod go-w",
                    m.mode() & 0o7777
                ),
            ));
        }
        if m.mode() & 0o111 == 0 {
            return Err(unusable(&canon, "not executable: chmod 755"));
        }
        let mut head = Vec::new();
        f.by_ref()
            .take(1 << 16)
            .read_to_end(&mut head)
            .map_err(|e| unusable(&canon, e))?;
        check_elf(&head).map_err(|why| unusable(&canon, why))?;
        Ok(AgentBinary {
            path: canon,
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
        })
    }
}

/// The machine field an executable for this host carries.
fn host_machine() -> Option<u16> {
    match std::env::consts::ARCH {
        "x86_64" => Some(62),
        "aarch64" => Some(183),
        _ => None,
    }
}

/// A 64-bit little-endian ELF executable for this machine with no program
/// interpreter (statically linked). `head`: the file's first bytes.
pub fn check_elf(head: &[u8]) -> Result<(), String> {
    let u16_at = |o: usize| head.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u32_at = |o: usize| {
        head.get(o..o + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let u64_at = |o: usize| {
        head.get(o..o + 8).map(|b| {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            u64::from_le_bytes(a)
        })
    };
    if head.get(..4) != Some(b"\x7fELF".as_slice()) {
        return Err("not an ELF executable".to_string());
    }
    if head.get(4) != Some(&2) || head.get(5) != Some(&1) {
        return Err("not a 64-bit little-endian ELF executable".to_string());
    }
    let machine = u16_at(0x12).ok_or("ELF header cut short")?;
    if host_machine().is_some_and(|m| m != machine) {
        return Err(format!(
            "built for ELF machine {machine}, not this host's ({})",
            std::env::consts::ARCH
        ));
    }
    let phoff = usize::try_from(u64_at(0x20).ok_or("ELF header cut short")?)
        .map_err(|_| "ELF program header offset out of range")?;
    let phentsize = usize::from(u16_at(0x36).ok_or("ELF header cut short")?);
    let phnum = usize::from(u16_at(0x38).ok_or("ELF header cut short")?);
    if phentsize < 4 || phnum == 0 {
        return Err("ELF file has no program headers".to_string());
    }
    for i in 0..phnum {
        let ty = u32_at(phoff + i * phentsize).ok_or("ELF program headers cut short")?;
        // PT_INTERP: a dynamic loader is needed.
        if ty == 3 {
            return Err(
                "dynamically linked; it would not start in an image without the host's libc"
                    .to_string(),
            );
        }
    }
    Ok(())
}

/// The one-connection listening socket of one container.
pub(super) struct AgentSocket {
    path: PathBuf,
    listener: Option<tokio::net::UnixListener>,
}

impl AgentSocket {
    /// `<state_dir>/exec-agent/<session>.sock`, connectable by `uid:gid`
    /// (the container's user) and, on the host, by nobody but the supervisor.
    pub(super) fn bind(
        state_dir: &Path,
        session_id: &str,
        uid: u32,
        gid: u32,
    ) -> Result<AgentSocket, SandboxError> {
        let io = |what: String| {
            move |source: std::io::Error| SandboxError::Io {
                context: what,
                source,
            }
        };
        let dir = state_dir.join("exec-agent");
        std::fs::create_dir_all(&dir).map_err(io(format!("create {}", dir.display())))?;
        let dm =
            std::fs::symlink_metadata(&dir).map_err(io(format!("inspect {}", dir.display())))?;
        if !dm.is_dir() {
            return Err(SandboxError::Refused(format!(
                "{} is not a directory (a symlink?); refusing to put exec agent sockets there",
                dir.display()
            )));
        }
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .map_err(io(format!("chmod 0700 {}", dir.display())))?;
        let path = dir.join(format!("{session_id}.sock"));
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(format!("remove stale {}", path.display()))(e)),
        }
        let std_listener = bind_long(&dir, &format!("{session_id}.sock"))
            .map_err(io(format!("bind {}", path.display())))?;
        // The container's user must be able to connect (write permission on
        // the socket); the 0700 directory keeps every host user but the
        // supervisor's out.
        if nix::unistd::geteuid().is_root() {
            std::os::unix::fs::chown(&path, Some(uid), Some(gid))
                .map_err(io(format!("chown {}", path.display())))?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                .map_err(io(format!("chmod {}", path.display())))?;
        } else {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))
                .map_err(io(format!("chmod {}", path.display())))?;
        }
        std_listener
            .set_nonblocking(true)
            .map_err(io(format!("listen on {}", path.display())))?;
        let listener = tokio::net::UnixListener::from_std(std_listener)
            .map_err(io(format!("listen on {}", path.display())))?;
        Ok(AgentSocket {
            path,
            listener: Some(listener),
        })
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// The first connection. The listener is closed and the socket file
    /// removed right after, whatever happens.
    pub(super) async fn accept_once(&mut self) -> std::io::Result<UnixStream> {
        let l = self
            .listener
            .as_ref()
            .ok_or_else(|| std::io::Error::other("the exec agent socket was already used"))?;
        let r = l.accept().await.map(|(s, _)| s);
        self.close();
        r
    }

    fn close(&mut self) {
        self.listener = None;
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for AgentSocket {
    fn drop(&mut self) {
        self.close();
    }
}

/// Binds a listener at `dir/name`, through `/proc/self/fd/N/name` when the
/// full path would not fit a socket address (108 bytes).
fn bind_long(dir: &Path, name: &str) -> std::io::Result<std::os::unix::net::UnixListener> {
    let full = dir.join(name);
    if full.as_os_str().len() < 100 {
        return std::os::unix::net::UnixListener::bind(&full);
    }
    let d = std::fs::File::open(dir)?;
    std::os::unix::net::UnixListener::bind(format!("/proc/self/fd/{}/{name}", d.as_raw_fd()))
}

/// Sockets and git identity files a crashed supervisor left (each lives
/// only while its container starts, so one older than `age` is nobody's).
pub(super) fn remove_stale_sockets(state_dir: &Path, age: Duration) {
    let Ok(rd) = std::fs::read_dir(state_dir.join("exec-agent")) else {
        return;
    };
    for e in rd.flatten() {
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|d| d > age);
        let name = e.file_name();
        let name = name.to_string_lossy();
        if old && (name.ends_with(".sock") || name.ends_with(super::git_identity::SUFFIX)) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// The process that connected must be in container `id` (its cgroup names
/// the container) and run as the session's `uid`.
pub(super) fn check_peer(stream: &UnixStream, id: &str, uid: u32) -> Result<(), String> {
    let cred = stream
        .peer_cred()
        .map_err(|e| format!("no peer credentials: {e}"))?;
    if cred.uid() != uid {
        return Err(format!("it runs as uid {}, not {uid}", cred.uid()));
    }
    let pid = cred
        .pid()
        .filter(|p| *p > 0)
        .ok_or("the kernel gave no peer pid")?;
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .map_err(|e| format!("pid {pid}: {e}"))?;
    if cgroup.contains(id) {
        Ok(())
    } else {
        Err(format!("pid {pid} is not in the container's cgroup"))
    }
}

/// What happened to one command, as the agent reported it.
#[derive(Debug)]
pub(super) enum Event {
    Output(Output),
    Exited(wire::Exited),
    SpawnFailed(String),
}

struct Route {
    tx: mpsc::UnboundedSender<Event>,
    /// Output bytes received and not yet credited back.
    in_flight: Arc<AtomicU64>,
}

/// State shared between the link and its reader task.
pub(super) struct LinkShared {
    routes: Mutex<HashMap<u64, Route>>,
    /// Cancelled once the connection is over, for whatever reason.
    pub(super) closed: CancellationToken,
    /// Why the agent's stream was refused, if it was.
    broken: Mutex<Option<String>>,
    /// A second handle on the socket, to shut it down from anywhere.
    raw: std::os::unix::net::UnixStream,
}

impl LinkShared {
    /// Ends the connection: the agent sees end-of-stream, kills everything
    /// and exits (taking the container with it).
    pub(super) fn close(&self) {
        self.closed.cancel();
        let _ = self.raw.shutdown(Shutdown::Both);
        if let Ok(mut r) = self.routes.lock() {
            r.clear();
        }
    }

    fn refuse(&self, why: String) {
        if let Ok(mut b) = self.broken.lock()
            && b.is_none()
        {
            *b = Some(why);
        }
        self.close();
    }

    pub(super) fn broken(&self) -> Option<String> {
        self.broken.lock().ok().and_then(|b| b.clone())
    }
}

/// The live connection to one container's agent.
pub(super) struct AgentLink {
    writer: tokio::sync::Mutex<OwnedWriteHalf>,
    pub(super) shared: Arc<LinkShared>,
    next_id: AtomicU64,
}

/// Output a route may hold beyond what was credited (see [`wire`]).
const MAX_IN_FLIGHT: u64 = INITIAL_WINDOW as u64 + DRAIN_MAX as u64;

impl AgentLink {
    /// Reads the agent's `Hello` (within `timeout`), then starts routing.
    pub(super) async fn handshake(
        stream: UnixStream,
        timeout: Duration,
    ) -> Result<(AgentLink, Hello), String> {
        let raw = stream
            .into_std()
            .and_then(|s| {
                let dup = s.try_clone()?;
                Ok((s, dup))
            })
            .map_err(|e| format!("exec agent socket: {e}"))?;
        let (s, dup) = raw;
        s.set_nonblocking(true)
            .map_err(|e| format!("exec agent socket: {e}"))?;
        let mut stream = UnixStream::from_std(s).map_err(|e| format!("exec agent socket: {e}"))?;
        let mut frames = FrameReader::new();
        let first = tokio::time::timeout(timeout, async {
            let mut buf = vec![0u8; 4096];
            loop {
                if let Some(f) = frames.next_frame().map_err(|e| e.to_string())? {
                    return Ok::<_, String>(f);
                }
                let n = stream
                    .read(&mut buf)
                    .await
                    .map_err(|e| format!("reading its hello: {e}"))?;
                if n == 0 {
                    return Err("it closed the connection before saying hello".to_string());
                }
                frames.push(&buf[..n]);
            }
        })
        .await
        .map_err(|_| format!("it said no hello within {timeout:?}"))??;
        let hello = match FromAgent::parse(first.0, &first.1) {
            Ok(FromAgent::Hello(h)) => h,
            Ok(other) => return Err(format!("its first frame was not a hello: {other:?}")),
            Err(e) => return Err(format!("its hello does not parse: {e}")),
        };
        let (rd, wr) = stream.into_split();
        let shared = Arc::new(LinkShared {
            routes: Mutex::new(HashMap::new()),
            closed: CancellationToken::new(),
            broken: Mutex::new(None),
            raw: dup,
        });
        tokio::spawn(read_loop(rd, frames, Arc::clone(&shared)));
        Ok((
            AgentLink {
                writer: tokio::sync::Mutex::new(wr),
                shared,
                next_id: AtomicU64::new(1),
            },
            hello,
        ))
    }

    /// A new command id and the channel its events arrive on.
    pub(super) fn open(&self) -> (u64, mpsc::UnboundedReceiver<Event>, Arc<AtomicU64>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        let in_flight = Arc::new(AtomicU64::new(0));
        if let Ok(mut r) = self.shared.routes.lock()
            && !self.shared.closed.is_cancelled()
        {
            r.insert(
                id,
                Route {
                    tx,
                    in_flight: Arc::clone(&in_flight),
                },
            );
        }
        (id, rx, in_flight)
    }

    pub(super) fn forget(&self, id: u64) {
        if let Ok(mut r) = self.shared.routes.lock() {
            r.remove(&id);
        }
    }

    /// Sends one frame.
    pub(super) async fn send(&self, msg: &ToAgent) -> std::io::Result<()> {
        let bytes = msg.to_bytes();
        let mut w = self.writer.lock().await;
        w.write_all(&bytes).await
    }

    pub(super) fn is_closed(&self) -> bool {
        self.shared.closed.is_cancelled()
    }
}

/// Routes the agent's frames until the connection ends or breaks the rules.
async fn read_loop(mut rd: OwnedReadHalf, mut frames: FrameReader, shared: Arc<LinkShared>) {
    loop {
        loop {
            let (t, body) = match frames.next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => return shared.refuse(format!("a frame that does not parse: {e}")),
            };
            let msg = match FromAgent::parse_owned(t, body) {
                Ok(m) => m,
                Err(e) => return shared.refuse(format!("a frame that does not parse: {e}")),
            };
            if let Err(why) = route(&shared, msg) {
                return shared.refuse(why);
            }
        }
        // Read straight into the frame buffer (no copy), a frame's worth at a time.
        let buf = frames.buffer();
        buf.reserve(2 * wire::MAX_CHUNK);
        let n = tokio::select! {
            _ = shared.closed.cancelled() => return,
            n = rd.read_buf(buf) => n,
        };
        if matches!(n, Ok(0) | Err(_)) {
            if let Err(e) = frames.finish() {
                return shared.refuse(e.to_string());
            }
            return shared.close();
        }
    }
}

/// Delivers one frame to its command. `Err`: the agent broke the protocol.
fn route(shared: &LinkShared, msg: FromAgent) -> Result<(), String> {
    let (id, ev) = match msg {
        FromAgent::Hello(_) => return Err("a second hello".to_string()),
        FromAgent::Fatal { message } => {
            return Err(format!("it gave up: {}", String::from_utf8_lossy(&message)));
        }
        FromAgent::Stdout { id, data } => (id, Event::Output(Output::Stdout(Bytes::from(data)))),
        FromAgent::Stderr { id, data } => (id, Event::Output(Output::Stderr(Bytes::from(data)))),
        FromAgent::Exited(x) => (x.id, Event::Exited(x)),
        FromAgent::SpawnFailed { id, message } => (
            id,
            Event::SpawnFailed(String::from_utf8_lossy(&message).into_owned()),
        ),
    };
    let mut routes = shared
        .routes
        .lock()
        .map_err(|_| "the route table is poisoned".to_string())?;
    let Some(r) = routes.get(&id) else {
        // A command whose caller went away.
        return Ok(());
    };
    if let Event::Output(Output::Stdout(b) | Output::Stderr(b)) = &ev {
        let now = r.in_flight.fetch_add(b.len() as u64, Ordering::SeqCst) + b.len() as u64;
        if now > MAX_IN_FLIGHT {
            return Err(format!(
                "command {id} sent {now} bytes of output beyond its credit (at most {MAX_IN_FLIGHT})"
            ));
        }
    }
    let done = matches!(ev, Event::Exited(_) | Event::SpawnFailed(_));
    let _ = r.tx.send(ev);
    if done {
        routes.remove(&id);
    }
    Ok(())
}

/// The posture every command inherits from the agent: refused unless it runs
/// as the session's uid and gid, with no_new_privs, a seccomp filter and no
/// capability in any set.
pub(super) fn check_hello(h: &Hello, uid: u32, gid: u32) -> Result<String, String> {
    let mut bad = Vec::new();
    if h.version != wire::VERSION {
        bad.push(format!(
            "protocol version {} (the supervisor speaks {})",
            h.version,
            wire::VERSION
        ));
    }
    if h.pid != 1 {
        bad.push(format!("pid {} in the container (must be 1)", h.pid));
    }
    if (h.uid, h.gid) != (uid, gid) {
        bad.push(format!(
            "uid:gid {}:{} (the session's is {uid}:{gid})",
            h.uid, h.gid
        ));
    }
    if h.no_new_privs != 1 {
        bad.push(format!("NoNewPrivs {}", h.no_new_privs));
    }
    if h.seccomp != 2 {
        bad.push(format!("Seccomp {}", h.seccomp));
    }
    for (name, v) in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"]
        .iter()
        .zip(h.caps)
    {
        if v != 0 {
            bad.push(format!("{name} {v:016x}"));
        }
    }
    if bad.is_empty() {
        Ok(format!(
            "pid 1 uid={uid} gid={gid} NoNewPrivs=1 Seccomp=2 caps=0 (protocol {})",
            h.version
        ))
    } else {
        Err(bad.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_agent_passes_its_own_checks_and_this_test_binary_does_not() {
        if BUILT_AGENT.is_empty() {
            panic!("the static exec agent was not built: {BUILD_ERROR}");
        }
        let a = AgentBinary::check(Path::new(BUILT_AGENT)).unwrap();
        assert!(a.size > 0);
        // This test executable is dynamically linked.
        let me = std::env::current_exe().unwrap();
        match AgentBinary::check(&me) {
            Err(SandboxError::Unavailable(m)) => {
                assert!(
                    m.contains("dynamically linked") && m.contains("docker_exec_agent"),
                    "{m}"
                )
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }

    #[test]
    fn files_that_are_not_a_static_executable_are_refused() {
        let dir = std::env::temp_dir().join(format!("tollgate-agent-check-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("script");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = AgentBinary::check(&script).unwrap_err().to_string();
        assert!(e.contains("not an ELF executable"), "{e}");
        let copy = dir.join("agent");
        if !BUILT_AGENT.is_empty() {
            std::fs::copy(BUILT_AGENT, &copy).unwrap();
            std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o775)).unwrap();
            let e = AgentBinary::check(&copy).unwrap_err().to_string();
            assert!(e.contains("lets others write it"), "{e}");
            std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o644)).unwrap();
            let e = AgentBinary::check(&copy).unwrap_err().to_string();
            assert!(e.contains("not executable"), "{e}");
        }
        let e = AgentBinary::check(&dir.join("missing"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("missing") && e.contains("docker_exec_agent"),
            "{e}"
        );
        assert!(
            AgentBinary::check(&dir)
                .unwrap_err()
                .to_string()
                .contains("not a regular file")
        );
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            check_elf(b"\x7fELF\x01\x01")
                .unwrap_err()
                .contains("64-bit")
        );
        assert!(
            check_elf(b"\x7fELF\x02\x01\x01")
                .unwrap_err()
                .contains("cut short")
        );
    }

    #[test]
    fn a_weak_or_foreign_posture_is_refused_naming_each_fault() {
        let good = Hello {
            version: wire::VERSION,
            pid: 1,
            uid: 1000,
            gid: 1000,
            no_new_privs: 1,
            seccomp: 2,
            caps: [0; 5],
        };
        assert!(check_hello(&good, 1000, 1000).is_ok());
        let mut bad = good.clone();
        bad.pid = 7;
        bad.uid = 0;
        bad.no_new_privs = 0;
        bad.seccomp = 0;
        bad.caps[2] = 0x20_0000;
        bad.version = 99;
        let e = check_hello(&bad, 1000, 1000).unwrap_err();
        for want in [
            "protocol version 99",
            "pid 7",
            "uid:gid 0:1000",
            "NoNewPrivs 0",
            "Seccomp 0",
            "CapEff 0000000000200000",
        ] {
            assert!(e.contains(want), "{want}: {e}");
        }
    }
}
