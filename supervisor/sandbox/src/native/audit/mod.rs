//! Refusals attributed (docs/THREAT_MODEL.md, "Refusals, attributed"):
//! each command of a native sandbox takes a Landlock domain of its own,
//! with logging on (init.rs, landlock.rs); while it does, its name is a tag
//! the supervisor chose, which the kernel keeps in the domain's
//! `LANDLOCK_DOMAIN status=allocated ... comm=<tag>` record. One reader per
//! supervisor process follows the audit multicast group, learns which
//! domain is which command's from those records, and files every
//! `LANDLOCK_ACCESS` record of that domain under that command (with the
//! pid and name the event's `SYSCALL`/`PROCTITLE` records give). A record
//! of a domain it did not tag (another supervisor's, anything else on the
//! host) is counted as unattributed and otherwise ignored.
//!
//! The seccomp filter's refusals (`SECCOMP` records, logged with
//! `SECCOMP_FILTER_FLAG_LOG`: seccomp.rs) name no domain, only `pid` and
//! `ses`. Each command's child sets its loginuid while it bears the tag
//! (init.rs), which gives it and everything it starts an audit session of
//! its own; the `LOGIN` record of that write, whose event's `SYSCALL`
//! record names the tag, ties the session to the command. A session is
//! never reused and a sandboxed process cannot leave it, so neither a
//! reused pid nor a process gone before its record is read misleads it.
//!
//! Everything is bounded: per command (refusal.rs), the events waiting for
//! their end, the tags and domains remembered. When a command has ended,
//! [`Listener::finish`] waits (bounded) until the kernel's queue is empty
//! and the reader has read everything sent, then hands its refusals over.

mod netlink;
mod record;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use record::Record;

use crate::refusal::{Access, Refusal, Refusals, Rule, landlock_rule};

/// Whether commands' refusals are attributed (`[sandbox] attribute_refusals`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttributionMode {
    /// When the kernel's audit is on already (never changes it).
    Auto,
    /// Also turn the kernel's audit on when it is off.
    On,
    Off,
}

static MODE: Mutex<AttributionMode> = Mutex::new(AttributionMode::Auto);
static LISTENER: OnceLock<Listener> = OnceLock::new();

/// Sets the mode for sandboxes built from now on. Once the reader runs it
/// keeps running (`Off` then only stops new sandboxes from using it).
pub fn set_attribution(mode: AttributionMode) {
    if let Ok(mut m) = MODE.lock() {
        *m = mode;
    }
}

/// The process's one reader, started on first use (a failure is tried
/// again next time: the kernel's audit may be turned on meanwhile); `Err`
/// says why refusals are not attributed here.
pub(crate) fn listener() -> Result<&'static Listener, String> {
    let mode = MODE.lock().map(|m| *m).unwrap_or(AttributionMode::Off);
    if mode == AttributionMode::Off {
        return Err("switched off ([sandbox] attribute_refusals = \"off\")".to_string());
    }
    if let Some(l) = LISTENER.get() {
        return Ok(l);
    }
    static START: Mutex<()> = Mutex::new(());
    let _one = START.lock();
    if let Some(l) = LISTENER.get() {
        return Ok(l);
    }
    let l = Listener::start(mode)?;
    Ok(LISTENER.get_or_init(|| l))
}

/// One line for `supervisorctl doctor`: attributed, or why not.
pub fn attribution_status() -> Result<String, String> {
    listener().map(|l| {
        format!(
            "{}; {} refusal records of domains not ours seen",
            l.summary,
            l.unattributed.load(Ordering::Relaxed)
        )
    })
}

/// The kernel's audit backlog limit the supervisor raises a lower one to
/// (mode `on` only): records of about a thousand refusals in a burst.
const BACKLOG: u32 = 8192;
/// `supervisorctl doctor`: can this host attribute refusals (Landlock
/// ABI 7, the kernel's audit status, the multicast group)? Read here, in
/// the caller's process; a warning, never a failure: without it refusals
/// read as the kernel's bare errors.
pub fn doctor_check() -> crate::DoctorCheck {
    let (status, detail, hint) = match probe() {
        Ok(detail) => (crate::CheckStatus::Ok, detail, None),
        Err((detail, hint)) => (crate::CheckStatus::Warn, detail, Some(hint.to_string())),
    };
    crate::DoctorCheck {
        name: "refusal attribution".to_string(),
        status,
        detail,
        hint,
    }
}

fn probe() -> Result<String, (String, &'static str)> {
    let abi = super::sys::landlock_abi();
    if abi < 7 {
        return Err((
            format!(
                "Landlock ABI {abi} has no audit logging: sandbox refusals read as the kernel's bare errors"
            ),
            "boot Linux 6.15 or newer",
        ));
    }
    let not_root = "run the supervisor as root (CAP_AUDIT_CONTROL, CAP_AUDIT_READ)";
    let control = netlink::control(Duration::from_secs(1))
        .map_err(|e| (format!("audit socket: {e}"), not_root))?;
    let st = netlink::status(&control).map_err(|e| {
        (
            format!("audit status: {e}; refusals read as the kernel's bare errors"),
            not_root,
        )
    })?;
    netlink::multicast().map_err(|e| (format!("audit multicast group: {e}"), not_root))?;
    let auditd = if st.pid != 0 {
        format!("auditd (pid {}) also reads the log", st.pid)
    } else {
        "no auditd".to_string()
    };
    if st.enabled == 0 {
        return Err((
            format!(
                "kernel audit is off ({auditd}): refusals are attributed only with [sandbox] attribute_refusals = \"on\", which turns it on"
            ),
            "set [sandbox] attribute_refusals = \"on\", or turn audit on (auditctl -e 1)",
        ));
    }
    if let Some(uid) = own_loginuid() {
        return Err((
            format!(
                "Landlock refusals attributed, but not seccomp's: this process's loginuid is set ({uid}: it runs in a login session), so commands cannot take audit sessions of their own"
            ),
            "run the supervisor as a service (systemd unit), not from a login shell",
        ));
    }
    Ok(format!(
        "Landlock ABI {abi}, kernel audit on, backlog limit {}, {auditd}; seccomp refusals by audit session",
        st.backlog_limit
    ))
}

/// This process's loginuid when it is set (`None`: unset, so the sandbox's
/// commands can each take an audit session of their own: init.rs).
fn own_loginuid() -> Option<u32> {
    let text = std::fs::read_to_string("/proc/self/loginuid").ok()?;
    text.trim()
        .parse::<u32>()
        .ok()
        .filter(|u| *u != record::NO_SESSION)
}

/// Events waiting for their end record, at most.
const MAX_PENDING: usize = 256;
/// Landlock records kept per event, at most.
const MAX_PER_EVENT: usize = 16;
/// Tags and domains remembered (finished commands' too, for their
/// processes that outlived them), at most.
const MAX_REMEMBERED: usize = 8192;

/// One command's share.
pub(crate) struct Call {
    workspace: PathBuf,
    refusals: Mutex<Refusals>,
    /// Its end is being waited for: its events are complete.
    finishing: AtomicBool,
}

/// A registered command: its tag (its name while it takes its domain).
pub(crate) struct CallHandle {
    pub tag: String,
    call: Arc<Call>,
    lost_before: u32,
    overruns_before: u64,
}

#[derive(Default)]
struct Event {
    accesses: Vec<(u64, Vec<String>, Option<Vec<u8>>)>,
    pid: Option<u32>,
    /// The `PROCTITLE` record's argv[0].
    argv0: Option<Vec<u8>>,
    /// The `SYSCALL` record's `comm` (a tag while a command takes its own
    /// domain and session).
    comm: Option<Vec<u8>>,
    /// A `LOGIN` record's new session.
    login: Option<u32>,
}

#[derive(Default)]
struct State {
    tags: Remembered<Vec<u8>>,
    domains: Remembered<u64>,
    sessions: Remembered<u32>,
    pending: BTreeMap<u64, Event>,
}

/// Keys of commands, the oldest forgotten past [`MAX_REMEMBERED`].
struct Remembered<K> {
    map: HashMap<K, Arc<Call>>,
    order: VecDeque<K>,
}

impl<K> Default for Remembered<K> {
    fn default() -> Self {
        Remembered {
            map: HashMap::new(),
            order: VecDeque::new(),
        }
    }
}

impl<K: std::hash::Hash + Eq + Clone> Remembered<K> {
    /// The first call a key is given to keeps it.
    fn insert(&mut self, key: K, call: Arc<Call>) {
        if self.map.contains_key(&key) {
            return;
        }
        if self.order.len() >= MAX_REMEMBERED
            && let Some(old) = self.order.pop_front()
        {
            self.map.remove(&old);
        }
        self.order.push_back(key.clone());
        self.map.insert(key, call);
    }

    fn get(&self, key: &K) -> Option<&Arc<Call>> {
        self.map.get(key)
    }

    fn remove(&mut self, key: &K) {
        self.map.remove(key);
    }
}

pub(crate) struct Listener {
    state: Arc<Mutex<State>>,
    control: Mutex<OwnedFd>,
    wake: OwnedFd,
    epoch: tokio::sync::watch::Receiver<u64>,
    overruns: Arc<AtomicU64>,
    unattributed: Arc<AtomicU64>,
    summary: String,
}

impl Listener {
    fn start(mode: AttributionMode) -> Result<Listener, String> {
        let abi = super::sys::landlock_abi();
        if abi < 7 {
            return Err(format!(
                "Landlock ABI {abi} has no audit logging (needs 7, Linux 6.15)"
            ));
        }
        let control = netlink::control(Duration::from_secs(1))
            .map_err(|e| format!("cannot open the kernel's audit socket: {e}"))?;
        let st = netlink::status(&control).map_err(|e| {
            format!("cannot read the kernel's audit status (needs CAP_AUDIT_CONTROL): {e}")
        })?;
        let mut turned_on = false;
        if st.enabled == 0 {
            if mode != AttributionMode::On {
                return Err("kernel audit is off; [sandbox] attribute_refusals = \"on\" lets the supervisor turn it on".to_string());
            }
            netlink::enable(&control).map_err(|e| format!("cannot turn kernel audit on: {e}"))?;
            tracing::warn!(
                "turned the kernel's audit on to attribute sandbox refusals ([sandbox] attribute_refusals = \"on\")"
            );
            turned_on = true;
        }
        if mode == AttributionMode::On && st.backlog_limit != 0 && st.backlog_limit < BACKLOG {
            // The kernel's default (64) drops records of a burst of
            // refusals while kauditd prints them to the console.
            netlink::set_backlog_limit(&control, BACKLOG)
                .map_err(|e| format!("cannot raise the kernel's audit backlog limit: {e}"))?;
        }
        let mc = netlink::multicast().map_err(|e| {
            format!("cannot join the audit multicast group (needs CAP_AUDIT_READ): {e}")
        })?;
        Listener::spawn(control, mc, summary(st, turned_on))
    }

    fn spawn(control: OwnedFd, mc: OwnedFd, summary: String) -> Result<Listener, String> {
        // SAFETY: eventfd(2) returns a new fd or -1.
        let wake = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if wake < 0 {
            return Err(format!("eventfd: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: a fresh fd nothing else owns.
        let wake = unsafe { OwnedFd::from_raw_fd(wake) };
        let wake_r = wake.try_clone().map_err(|e| format!("eventfd: {e}"))?;
        let (tx, rx) = tokio::sync::watch::channel(0u64);
        let state = Arc::new(Mutex::new(State::default()));
        let reader = Reader {
            fd: mc,
            wake: wake_r,
            state: Arc::clone(&state),
            epoch: tx,
            overruns: Arc::new(AtomicU64::new(0)),
            unattributed: Arc::new(AtomicU64::new(0)),
        };
        let (overruns, unattributed) = (
            Arc::clone(&reader.overruns),
            Arc::clone(&reader.unattributed),
        );
        std::thread::Builder::new()
            .name("tollgate-audit".to_string())
            .spawn(move || reader.run())
            .map_err(|e| format!("cannot start the audit reader: {e}"))?;
        Ok(Listener {
            state,
            control: Mutex::new(control),
            wake,
            epoch: rx,
            overruns,
            unattributed,
            summary,
        })
    }

    fn status(&self) -> Option<netlink::Status> {
        let fd = self.control.lock().ok()?;
        netlink::status(&fd).ok()
    }

    /// A new command of a sandbox whose workspace is `workspace`.
    pub(crate) fn register(&self, workspace: &Path) -> CallHandle {
        let tag = new_tag();
        let call = Arc::new(Call {
            workspace: workspace.to_path_buf(),
            refusals: Mutex::new(Refusals::default()),
            finishing: AtomicBool::new(false),
        });
        if let Ok(mut st) = self.state.lock() {
            st.tags.insert(tag.as_bytes().to_vec(), Arc::clone(&call));
        }
        CallHandle {
            tag,
            lost_before: self.status().map(|s| s.lost).unwrap_or(0),
            overruns_before: self.overruns.load(Ordering::Relaxed),
            call,
        }
    }

    /// After the command ended: its refusals, once the kernel's queue is
    /// empty and the reader has read everything sent (each wait bounded).
    pub(crate) async fn finish(&self, h: CallHandle) -> Refusals {
        h.call.finishing.store(true, Ordering::SeqCst);
        let mut lost_after = h.lost_before;
        for _ in 0..100 {
            match self.status() {
                Some(s) => {
                    lost_after = s.lost;
                    if s.backlog == 0 {
                        break;
                    }
                }
                None => break,
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        self.sync().await;
        let mut r = h
            .call
            .refusals
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default();
        r.attributed = true;
        r.lost += u64::from(lost_after.wrapping_sub(h.lost_before));
        r.lost += self.overruns.load(Ordering::Relaxed) - h.overruns_before;
        r
    }

    /// Wakes the reader and waits (at most a second) until it has read
    /// everything queued on its socket.
    async fn sync(&self) {
        let mut rx = self.epoch.clone();
        let seen = *rx.borrow_and_update();
        let one: u64 = 1;
        // SAFETY: an 8-byte write to our own eventfd.
        let _ = unsafe { libc::write(self.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
        let _ = tokio::time::timeout(Duration::from_secs(1), async {
            while *rx.borrow_and_update() <= seen {
                if rx.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
    }
}

fn summary(st: netlink::Status, turned_on: bool) -> String {
    let auditd = if st.pid != 0 {
        format!("auditd (pid {}) reads the log too", st.pid)
    } else {
        "no auditd: the kernel also prints records to its log (rate-limited)".to_string()
    };
    let on = if turned_on {
        "kernel audit turned on by the supervisor"
    } else {
        "kernel audit on"
    };
    let seccomp = match own_loginuid() {
        None => "seccomp records by per-command audit session".to_string(),
        Some(uid) => {
            format!("seccomp refusals unattributed (the supervisor's loginuid is set: {uid})")
        }
    };
    format!("Landlock audit records, per-command domains; {seccomp}; {on}; {auditd}")
}

/// 15 bytes (a process name's most): "tg" and 13 random hex digits.
fn new_tag() -> String {
    let mut b = [0u8; 8];
    // SAFETY: getrandom into a live buffer of its length.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != 8 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        static N: AtomicU64 = AtomicU64::new(0);
        let v = t.as_nanos() as u64 ^ N.fetch_add(1, Ordering::Relaxed).rotate_left(32);
        b = v.to_ne_bytes();
    }
    format!("tg{:013x}", u64::from_ne_bytes(b) & ((1 << 52) - 1))
}

/// The refused process's name: its argv[0], unless that is stale. The
/// kernel keeps a task's first proctitle for its later events, across exec
/// (a command's child logs one before it execs: init.rs), so an argv[0]
/// whose file name does not begin with the `comm` exec set is not this
/// program's, and `comm` is.
fn program(argv0: Option<Vec<u8>>, comm: Option<Vec<u8>>) -> Option<Vec<u8>> {
    let Some(comm) = comm else {
        return argv0;
    };
    match argv0 {
        Some(a) => {
            let base = a.rsplit(|&b| b == b'/').next().unwrap_or(&a);
            let n = base.len().min(comm.len());
            (n > 0 && base[..n] == comm[..n])
                .then_some(a)
                .or(Some(comm))
        }
        None => Some(comm),
    }
}

/// The reader thread.
struct Reader {
    fd: OwnedFd,
    wake: OwnedFd,
    state: Arc<Mutex<State>>,
    epoch: tokio::sync::watch::Sender<u64>,
    overruns: Arc<AtomicU64>,
    unattributed: Arc<AtomicU64>,
}

impl Reader {
    fn run(self) {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let mut fds = [
                libc::pollfd {
                    fd: self.fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.wake.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: poll on two live pollfds.
            let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
            if rc < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                return;
            }
            if !self.drain(&mut buf) {
                tracing::warn!(
                    "the audit reader's socket failed; refusals are no longer attributed"
                );
                return;
            }
            if fds[1].revents & libc::POLLIN != 0 {
                let mut v = 0u64;
                // SAFETY: an 8-byte read from our own eventfd.
                let _ =
                    unsafe { libc::read(self.wake.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
                let _ = self.drain(&mut buf);
                self.flush_finishing();
                self.epoch.send_modify(|e| *e += 1);
            }
        }
    }

    /// Reads everything queued now; false when the socket failed.
    fn drain(&self, buf: &mut [u8]) -> bool {
        loop {
            match netlink::read(self.fd.as_raw_fd(), buf) {
                Ok(netlink::Read::Message(kind, n)) => self.handle(kind, &buf[..n]),
                Ok(netlink::Read::Empty) => return true,
                Ok(netlink::Read::Overrun) => {
                    self.overruns.fetch_add(1, Ordering::Relaxed);
                }
                Err(_) => return false,
            }
        }
    }

    fn handle(&self, kind: u16, text: &[u8]) {
        let Some(p) = record::parse(kind, text) else {
            return;
        };
        let Ok(mut st) = self.state.lock() else {
            return;
        };
        match p.record {
            Record::Access {
                domain,
                blockers,
                path,
            } => {
                let ev = st.pending.entry(p.serial).or_default();
                if ev.accesses.len() < MAX_PER_EVENT {
                    ev.accesses.push((domain, blockers, path));
                }
                self.bound_pending(&mut st);
            }
            Record::Allocated { domain, comm, .. } => {
                if let Some(call) = st.tags.get(&comm).cloned() {
                    st.domains.insert(domain, call);
                }
            }
            Record::Deallocated { domain, .. } => {
                st.domains.remove(&domain);
            }
            Record::Syscall { pid, comm } => {
                if let Some(ev) = st.pending.get_mut(&p.serial) {
                    ev.pid = pid;
                    ev.comm = comm;
                }
            }
            Record::Login { ses } => {
                st.pending.entry(p.serial).or_default().login = Some(ses);
                self.bound_pending(&mut st);
            }
            Record::Seccomp {
                ses,
                pid,
                comm,
                arch,
                syscall,
            } => self.seccomp(&st, ses, pid, comm, (arch, syscall)),
            Record::Proctitle { argv0 } => {
                if let Some(ev) = st.pending.get_mut(&p.serial) {
                    ev.argv0 = Some(argv0);
                }
            }
            Record::Eoe => {
                if let Some(mut ev) = st.pending.remove(&p.serial) {
                    if let (Some(ses), Some(comm)) = (ev.login.take(), ev.comm.as_ref())
                        && let Some(call) = st.tags.get(comm).cloned()
                    {
                        st.sessions.insert(ses, call);
                    }
                    self.emit(&st, ev);
                }
            }
        }
    }

    /// At most [`MAX_PENDING`] events wait for their end: the oldest is
    /// filed as it stands.
    fn bound_pending(&self, st: &mut State) {
        if st.pending.len() > MAX_PENDING
            && let Some((_, old)) = st.pending.pop_first()
        {
            self.emit(st, old);
        }
    }

    /// One `SECCOMP` record, filed under the command whose session it names.
    fn seccomp(
        &self,
        st: &State,
        ses: u32,
        pid: Option<u32>,
        comm: Option<Vec<u8>>,
        (arch, nr): (u32, u32),
    ) {
        let Some(call) = st.sessions.get(&ses) else {
            self.unattributed.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let (name, rule) = if arch == record::ARCH_X86_64 {
            (super::seccomp::why_refused(nr).0, Rule::Syscall(nr))
        } else {
            (format!("syscall {nr} of arch {arch:x}"), Rule::ForeignArch)
        };
        if let Ok(mut r) = call.refusals.lock() {
            r.add(Refusal {
                access: Access::Syscall,
                path: name.into_bytes(),
                rule,
                pid,
                program: comm,
            });
        }
    }

    /// Files the events of commands being finished (complete: their
    /// processes are gone); the rest keep waiting for their end.
    fn flush_finishing(&self) {
        let Ok(mut st) = self.state.lock() else {
            return;
        };
        let done: Vec<u64> = st
            .pending
            .iter()
            .filter(|(_, ev)| {
                ev.accesses.iter().any(|(d, _, _)| {
                    st.domains
                        .get(d)
                        .is_none_or(|c| c.finishing.load(Ordering::SeqCst))
                })
            })
            .map(|(s, _)| *s)
            .collect();
        for s in done {
            if let Some(ev) = st.pending.remove(&s) {
                self.emit(&st, ev);
            }
        }
    }

    /// One event is one refused request, however many records it has
    /// (an `O_CREAT` open of a file names its directory, then the file; a
    /// link both directories): the last record names the object asked for.
    fn emit(&self, st: &State, ev: Event) {
        let Some((domain, blockers, path)) = ev.accesses.into_iter().last() else {
            return;
        };
        let Some(call) = st.domains.get(&domain) else {
            self.unattributed.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let Some(access) = blockers.iter().find_map(|b| Access::from_landlock(b)) else {
            return;
        };
        let path = path.unwrap_or_default();
        let refusal = Refusal {
            access,
            rule: landlock_rule(access, &path, &call.workspace),
            path,
            pid: ev.pid,
            program: program(ev.argv0, ev.comm),
        };
        if let Ok(mut r) = call.refusals.lock() {
            r.add(refusal);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stale_argv0_gives_way_to_comm() {
        let v = |s: &str| Some(s.as_bytes().to_vec());
        assert_eq!(program(v("/usr/bin/cat"), v("cat")), v("/usr/bin/cat"));
        assert_eq!(program(v("/x/sandbox_init"), v("sh")), v("sh"));
        assert_eq!(program(v("python3"), v("python3.11")), v("python3"));
        assert_eq!(program(None, v("sh")), v("sh"));
        assert_eq!(program(v("sh"), None), v("sh"));
    }

    #[test]
    fn tags_fit_a_process_name_and_differ() {
        let a = new_tag();
        let b = new_tag();
        assert_eq!(a.len(), 15);
        assert!(a.starts_with("tg"));
        assert_ne!(a, b);
    }
}
