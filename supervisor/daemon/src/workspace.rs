//! Which directories may be a session's workspace (BRIEF section 7).
//!
//! The workspace must exist, be a directory owned by the peer uid (through a
//! symlink, the target is judged), must not be `/`, a system directory or a
//! home directory itself, must not hold or sit inside a credential path, and
//! must not overlap the supervisor's own state or audit directories.

use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use tollgate_sandbox::WorkspaceId;

/// Credential paths relative to a home directory.
pub const HOME_CREDENTIALS: &[&str] = &[
    ".ssh",
    ".aws",
    ".config/gcloud",
    ".docker",
    ".netrc",
    ".kube",
    ".gnupg",
];

/// Host-wide credential paths.
pub const HOST_CREDENTIALS: &[&str] = &["/var/run/docker.sock", "/run/docker.sock"];

/// Directories that are never a workspace, whoever owns them.
const SYSTEM_DIRS: &[&str] = &[
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/media",
    "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var",
    "/var/log", "/var/run", "/var/tmp", "/var/lib",
];

/// The paths this workspace's own git configuration makes host-executed,
/// for the policy's write checks (issue 19): git directories not named
/// `.git`, config files git includes, `core.hooksPath`. Read on the host,
/// once per session; a layout that cannot be guarded (a symlink on a path
/// git follows, a workspace that is itself a git directory) is the reason.
pub fn repo_paths(
    workspace: &Path,
    home: Option<&Path>,
) -> Result<Vec<tollgate_policy::host_exec::RepoPath>, String> {
    use tollgate_policy::host_exec::{RepoPath, RepoRole};
    let found = tollgate_sandbox::host_exec::repo_paths(workspace, home).map_err(|e| match e {
        tollgate_sandbox::SandboxError::Refused(m) => m,
        other => other.to_string(),
    })?;
    let named_git = |p: &Path| {
        p.file_name()
            .is_some_and(|n| n.eq_ignore_ascii_case(".git"))
    };
    let mut v = Vec::new();
    for rel in found.git.into_iter().filter(|p| !named_git(p)) {
        v.push(RepoPath {
            rel,
            role: RepoRole::GitDir,
        });
    }
    for rel in found.configs {
        v.push(RepoPath {
            rel,
            role: RepoRole::GitConfig,
        });
    }
    for rel in found.hooks {
        v.push(RepoPath {
            rel,
            role: RepoRole::HooksDir,
        });
    }
    Ok(v)
}

/// A user from /etc/passwd.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PasswdEntry {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
}

/// Reads /etc/passwd (missing or unreadable: no entries).
pub fn passwd() -> Vec<PasswdEntry> {
    let text = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    parse_passwd(&text)
}

pub fn parse_passwd(text: &str) -> Vec<PasswdEntry> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(':').collect();
            if f.len() < 7 {
                return None;
            }
            Some(PasswdEntry {
                name: f[0].to_string(),
                uid: f[2].parse().ok()?,
                gid: f[3].parse().ok()?,
                home: PathBuf::from(f[5]),
            })
        })
        .collect()
}

/// Every credential path on this host: each user's home credentials plus
/// the host-wide ones. Used by the workspace check and by `doctor`.
pub fn credential_paths(users: &[PasswdEntry]) -> Vec<PathBuf> {
    let mut homes: Vec<PathBuf> = users
        .iter()
        .map(|u| u.home.clone())
        .filter(|h| h.is_absolute() && h != Path::new("/") && h != Path::new("/nonexistent"))
        .collect();
    homes.push(PathBuf::from("/root"));
    homes.sort();
    homes.dedup();
    let mut out: Vec<PathBuf> = homes
        .iter()
        .flat_map(|h| HOME_CREDENTIALS.iter().map(move |c| h.join(c)))
        .collect();
    out.extend(HOST_CREDENTIALS.iter().map(PathBuf::from));
    out
}

/// `a` is `b` or lies beneath it, comparing components (never string
/// prefixes: `/w` is not beneath `/w-evil`).
pub fn is_within(a: &Path, b: &Path) -> bool {
    let mut ac = a.components().filter(|c| !matches!(c, Component::CurDir));
    for bc in b.components().filter(|c| !matches!(c, Component::CurDir)) {
        match ac.next() {
            Some(x) if x == bc => {}
            _ => return false,
        }
    }
    true
}

/// Facts the check needs besides the path.
pub struct WorkspaceRules<'a> {
    pub peer_uid: u32,
    pub users: &'a [PasswdEntry],
    /// The supervisor's state and audit directories, config file, sockets.
    pub protected: &'a [PathBuf],
}

/// A workspace that passed [`check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// The canonical path.
    pub path: PathBuf,
    /// The directory the path named when it was checked. Whatever opens the
    /// path later (the file tools, the sandbox) must find this directory.
    pub id: WorkspaceId,
}

/// Checks a requested workspace; returns its canonical path and identity.
pub fn check(requested: &str, rules: &WorkspaceRules<'_>) -> Result<Checked, String> {
    if requested.is_empty() {
        return Err("workspace is empty; pass an absolute directory path".to_string());
    }
    if requested.contains('\0') {
        return Err("workspace path contains a NUL byte".to_string());
    }
    if requested.len() >= 4096 {
        return Err("workspace path is 4096 bytes or longer".to_string());
    }
    let path = Path::new(requested);
    if !path.is_absolute() {
        return Err(format!("workspace {requested:?} is not an absolute path"));
    }
    let canonical = std::fs::canonicalize(path)
        .map_err(|e| format!("workspace {requested:?} cannot be resolved: {e}"))?;
    let shown = canonical.display();
    let meta = std::fs::metadata(&canonical).map_err(|e| format!("workspace {shown}: {e}"))?;
    if !meta.is_dir() {
        return Err(format!("workspace {shown} is not a directory"));
    }
    if SYSTEM_DIRS.iter().any(|d| canonical == Path::new(d)) {
        return Err(format!(
            "workspace {shown} is a system directory; use a project directory"
        ));
    }
    if meta.uid() != rules.peer_uid {
        return Err(format!(
            "workspace {shown} is owned by uid {}, not by the caller (uid {})",
            meta.uid(),
            rules.peer_uid
        ));
    }
    if let Some(u) = rules.users.iter().find(|u| u.home == canonical) {
        return Err(format!(
            "workspace {shown} is the home directory of {}; use a project directory inside it",
            u.name
        ));
    }
    for p in rules.protected {
        if is_within(&canonical, p) || is_within(p, &canonical) {
            return Err(format!(
                "workspace {shown} overlaps the supervisor's own {}",
                p.display()
            ));
        }
    }
    for c in credential_paths(rules.users) {
        if is_within(&canonical, &c) {
            return Err(format!(
                "workspace {shown} is inside the credential path {}",
                c.display()
            ));
        }
        if is_within(&c, &canonical) && std::fs::symlink_metadata(&c).is_ok() {
            return Err(format!(
                "workspace {shown} contains the credential path {}",
                c.display()
            ));
        }
    }
    for name in HOME_CREDENTIALS {
        let p = canonical.join(name);
        if std::fs::symlink_metadata(&p).is_ok() {
            return Err(format!(
                "workspace {shown} holds a credential path ({name}); move it out or use another directory"
            ));
        }
    }
    Ok(Checked {
        id: WorkspaceId::of(&meta),
        path: canonical,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_compares_components() {
        assert!(is_within(Path::new("/w/a"), Path::new("/w")));
        assert!(is_within(Path::new("/w"), Path::new("/w")));
        assert!(!is_within(Path::new("/w-evil"), Path::new("/w")));
        assert!(!is_within(Path::new("/"), Path::new("/w")));
    }

    #[test]
    fn passwd_parses() {
        let users = parse_passwd(
            "root:x:0:0:root:/root:/bin/bash\nbad line\nu:x:1000:1000::/home/u:/bin/sh\n",
        );
        assert_eq!(users.len(), 2);
        assert_eq!(users[1].home, PathBuf::from("/home/u"));
        let creds = credential_paths(&users);
        assert!(creds.contains(&PathBuf::from("/home/u/.ssh")));
        assert!(creds.contains(&PathBuf::from("/root/.aws")));
    }

    fn rules(uid: u32) -> (Vec<PasswdEntry>, Vec<PathBuf>) {
        let _ = uid;
        (Vec::new(), Vec::new())
    }

    #[test]
    fn refusals_name_the_problem() {
        let (users, protected) = rules(0);
        let me = nix::unistd::getuid().as_raw();
        let r = WorkspaceRules {
            peer_uid: me,
            users: &users,
            protected: &protected,
        };
        assert!(
            check("relative/dir", &r)
                .unwrap_err()
                .contains("not an absolute")
        );
        assert!(check("/", &r).unwrap_err().contains("system directory"));
        assert!(
            check("/nonexistent-xyz", &r)
                .unwrap_err()
                .contains("cannot be resolved")
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "x").unwrap();
        assert!(
            check(file.to_str().unwrap(), &r)
                .unwrap_err()
                .contains("not a directory")
        );
        let link = dir.path().join("root-link");
        std::os::unix::fs::symlink("/", &link).unwrap();
        assert!(
            check(link.to_str().unwrap(), &r)
                .unwrap_err()
                .contains("system directory")
        );
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        let checked = check(ws.to_str().unwrap(), &r).unwrap();
        assert_eq!(checked.path, std::fs::canonicalize(&ws).unwrap());
        assert_eq!(
            checked.id,
            WorkspaceId::of(&std::fs::metadata(&ws).unwrap())
        );
        std::fs::create_dir(ws.join(".ssh")).unwrap();
        assert!(
            check(ws.to_str().unwrap(), &r)
                .unwrap_err()
                .contains("credential")
        );
    }

    #[test]
    fn other_owners_are_refused() {
        let (users, protected) = rules(0);
        let r = WorkspaceRules {
            peer_uid: 4242,
            users: &users,
            protected: &protected,
        };
        let dir = tempfile::tempdir().unwrap();
        let err = check(dir.path().to_str().unwrap(), &r).unwrap_err();
        assert!(err.contains("not by the caller (uid 4242)"), "{err}");
    }

    #[test]
    fn protected_overlap_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        std::fs::create_dir(&state).unwrap();
        let protected = vec![std::fs::canonicalize(&state).unwrap()];
        let r = WorkspaceRules {
            peer_uid: nix::unistd::getuid().as_raw(),
            users: &[],
            protected: &protected,
        };
        let err = check(dir.path().to_str().unwrap(), &r).unwrap_err();
        assert!(err.contains("overlaps"), "{err}");
        let err = check(state.to_str().unwrap(), &r).unwrap_err();
        assert!(err.contains("overlaps"), "{err}");
    }
}
