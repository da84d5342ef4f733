//! Shared by the fuzz targets: an in-memory world around /w/proj, a fixed
//! DNS table, and the promises every decision must keep.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use tollgate_policy::{
    Context, Decision, Engine, FileFacts, FileKind, FsFacts, HostAddrs, HostAddrsError, Mode,
    PolicyConfig, ResolveError, Resolver, Verdict,
};

pub struct MemFs(HashMap<PathBuf, (FileFacts, Option<PathBuf>)>);

impl FsFacts for MemFs {
    fn symlink_metadata(&self, path: &Path) -> Option<FileFacts> {
        self.0.get(path).map(|n| n.0)
    }
    fn read_link(&self, path: &Path) -> Option<PathBuf> {
        self.0.get(path).and_then(|n| n.1.clone())
    }
}

pub static FS: LazyLock<MemFs> = LazyLock::new(|| {
    let f = |kind, size| FileFacts { kind, size, nlink: 1 };
    let mut m = HashMap::new();
    for d in ["/", "/w", "/w/proj", "/w/proj/src", "/w/proj/.git", "/etc", "/proc", "/proc/self"] {
        m.insert(PathBuf::from(d), (f(FileKind::Dir, 0), None));
    }
    for (p, size) in [("/w/proj/src/main.rs", 10), ("/w/proj/.env", 5), ("/etc/passwd", 100)] {
        m.insert(PathBuf::from(p), (f(FileKind::File, size), None));
    }
    for (p, t) in [
        ("/w/proj/link", "/etc"),
        ("/w/proj/up", ".."),
        ("/w/proj/loop1", "loop2"),
        ("/w/proj/loop2", "loop1"),
        ("/w/proj/dangling", "/tmp/nowhere"),
        ("/proc/self/root", "/"),
    ] {
        m.insert(PathBuf::from(p), (f(FileKind::Symlink, 0), Some(PathBuf::from(t))));
    }
    MemFs(m)
});

pub struct Dns;

impl Resolver for Dns {
    fn resolve(&self, host: &str) -> Result<Vec<IpAddr>, ResolveError> {
        match host {
            "example.com" => Ok(vec![IpAddr::from([93, 184, 216, 34])]),
            "localtest.me" => Ok(vec![IpAddr::from([127, 0, 0, 1])]),
            _ => Err(ResolveError::NotFound(host.to_string())),
        }
    }

    fn host_addrs(&self) -> Result<&HostAddrs, HostAddrsError> {
        Ok(HostAddrs::none())
    }
}

pub static ENGINE: LazyLock<Engine> = LazyLock::new(|| {
    Engine::new(&PolicyConfig::default()).unwrap_or_else(|e| panic!("default policy: {e}"))
});

thread_local! {
    /// The message of a panic seen on this thread since the last `check`.
    static PANICKED: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

/// The engine catches panics inside brush-parser (it allows `unwrap`
/// internally) and refuses the call, but each still costs a panic message
/// on the supervisor's stderr and a backtrace when RUST_BACKTRACE is set, so
/// a caught panic is a finding too (vendor/brush-parser/TOLLGATE.md, patch
/// 11). The hook notes it and [`check`] fails the input with its message; a
/// panic that escapes `decide` still reaches libfuzzer-sys's own
/// `catch_unwind`, which aborts.
pub static NOTE_PANICS: LazyLock<()> = LazyLock::new(|| {
    std::panic::set_hook(Box::new(|info| {
        PANICKED.with(|p| *p.borrow_mut() = Some(info.to_string()));
    }));
});

pub fn ctx(mode: Mode) -> Context {
    Context {
        workspace: PathBuf::from("/w/proj"),
        mode,
        tools: None,
        home: Some(PathBuf::from("/home/u")),
        protected: vec![PathBuf::from("/etc/tollgate")],
        read_files: BTreeSet::new(),
        repo: Vec::new(),
        sandbox: None,
    }
}

/// What no input may break.
pub fn check(d: &Decision) {
    if let Some(message) = PANICKED.with(|p| p.borrow_mut().take()) {
        // Not through `panic!`: the quiet hook would swallow the message.
        eprintln!("a panic was caught inside the decision: {message}");
        std::process::abort();
    }
    assert!(!d.reason.is_empty());
    for s in [&d.reason, &d.consequence, &d.target] {
        assert!(!s.contains('\n') && !s.contains('\r') && !s.contains('\u{1b}'), "{s:?}");
    }
    if d.verdict != Verdict::Deny
        && let Some(p) = &d.path
    {
        assert!(p.starts_with("/w/proj"), "allowed path outside: {p:?}");
    }
}
