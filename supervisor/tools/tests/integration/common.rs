//! Fixtures shared by the integration tests.

use std::os::unix::fs::{PermissionsExt, chown};
use std::path::{Path, PathBuf};

use tollgate_tools::Workspace;

/// The uid/gid file tools run as in these tests: 65534 when the tests run as
/// root (the production path: a credential switch), else the current user.
pub fn session_ids() -> (u32, u32) {
    if is_root() {
        (65534, 65534)
    } else {
        (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        )
    }
}

pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// For tests that only mean something as root (credential switching).
/// Returns false (and says so) when they must be skipped.
pub fn require_root() -> bool {
    if is_root() {
        return true;
    }
    if std::env::var("TOLLGATE_REQUIRE_ROOT").as_deref() == Ok("1") {
        panic!("this test needs root and TOLLGATE_REQUIRE_ROOT=1 is set");
    }
    eprintln!("skipped: needs root");
    false
}

/// A temp base dir (0755) holding `ws/` (the workspace, owned by the session
/// uid) and `outside/` (owned by the session uid too, so only confinement,
/// not file permissions, keeps the tools out of it).
pub struct Fixture {
    _tmp: tempfile::TempDir,
    pub root: PathBuf,
    pub outside: PathBuf,
    pub ws: Workspace,
    pub uid: u32,
    pub gid: u32,
}

impl Fixture {
    pub fn new() -> Fixture {
        let (uid, gid) = session_ids();
        Fixture::for_owner(uid, gid)
    }

    /// The same for a session owned by `uid:gid` (other owners need root).
    pub fn for_owner(uid: u32, gid: u32) -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(tmp.path()).unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
        let root = base.join("ws");
        let outside = base.join("outside");
        std::fs::create_dir(&root).unwrap();
        std::fs::create_dir(&outside).unwrap();
        for d in [&root, &outside] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
            chown(d, Some(uid), Some(gid)).unwrap();
        }
        let ws = Workspace::open(&root, uid, gid).unwrap();
        Fixture {
            _tmp: tmp,
            root,
            outside,
            ws,
            uid,
            gid,
        }
    }

    /// The absolute path of a workspace-relative path.
    pub fn p(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// Creates a file in the workspace (parents too), owned by the session uid.
    pub fn file(&self, rel: &str, content: impl AsRef<[u8]>) -> PathBuf {
        let p = self.p(rel);
        self.mkdirs(p.parent().unwrap());
        std::fs::write(&p, content).unwrap();
        chown(&p, Some(self.uid), Some(self.gid)).unwrap();
        p
    }

    /// Creates directories in the workspace owned by the session uid.
    pub fn mkdirs(&self, dir: &Path) {
        let mut missing = Vec::new();
        let mut d = dir.to_path_buf();
        while !d.exists() {
            missing.push(d.clone());
            d = d.parent().unwrap().to_path_buf();
        }
        for d in missing.iter().rev() {
            std::fs::create_dir(d).unwrap();
            chown(d, Some(self.uid), Some(self.gid)).unwrap();
        }
    }

    /// A file outside the workspace, owned by the session uid, mode 0644.
    pub fn outside_file(&self, name: &str, content: &str) -> PathBuf {
        let p = self.outside.join(name);
        std::fs::write(&p, content).unwrap();
        chown(&p, Some(self.uid), Some(self.gid)).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        p
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.p(rel)).unwrap()
    }

    /// Names in a workspace directory (for "no temp file left behind").
    pub fn names(&self, rel: &str) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.p(rel))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

pub const CAP: usize = tollgate_tools::DEFAULT_OUTPUT_CAP;
