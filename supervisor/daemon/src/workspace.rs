//! Which directories may be a session's workspace (docs/THREAT_MODEL.md,
//! "The walls, by layer", 2).
//!
//! The workspace must exist, be a directory owned by the peer uid (through a
//! symlink, the target is judged), must not be `/`, a system directory or a
//! home directory itself, must not hold or sit inside a credential path, and
//! must not overlap the supervisor's own state or audit directories.

use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use tollgate_policy::host::PasswdEntry;
use tollgate_policy::host_exec::RepoPath;
use tollgate_sandbox::WorkspaceId;

/// Directories that are never a workspace, whoever owns them.
const SYSTEM_DIRS: &[&str] = &[
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/media",
    "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var",
    "/var/log", "/var/run", "/var/tmp", "/var/lib",
];

/// The paths this workspace's own git configuration makes host-executed,
/// for the policy's write checks (docs/THREAT_MODEL.md, "What the host runs
/// by itself"): git directories not named
/// `.git`, config files git includes, `core.hooksPath`. Read on the host,
/// once per session; a layout that cannot be guarded (a symlink on a path
/// git follows, a workspace that is itself a git directory) is the reason.
pub fn repo_paths(workspace: &Path, home: Option<&Path>) -> Result<Vec<RepoPath>, String> {
    tollgate_policy::host::repo_paths(workspace, home)
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
    /// [`credential_paths`] of `users`.
    pub credentials: &'a [PathBuf],
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
    for ws in [path, canonical.as_path()] {
        if let Some(c) = tollgate_policy::credentials::named_in(ws) {
            return Err(format!(
                "workspace {shown} lies inside a credential path (~/{}, {}); use a project directory that holds no credentials",
                c.path, c.what
            ));
        }
    }
    for c in rules.credentials {
        // Through a symlink too: `~/.ssh` may point at `~/dotfiles/ssh`.
        let real = std::fs::canonicalize(c).ok();
        for form in std::iter::once(c.as_path()).chain(real.as_deref()) {
            if is_within(&canonical, form) {
                return Err(format!(
                    "workspace {shown} is inside the credential path {}",
                    c.display()
                ));
            }
            if is_within(form, &canonical) && std::fs::symlink_metadata(form).is_ok() {
                return Err(format!(
                    "workspace {shown} contains the credential path {}",
                    c.display()
                ));
            }
        }
    }
    for c in tollgate_policy::credentials::HOME_CREDENTIALS {
        if std::fs::symlink_metadata(canonical.join(c.path)).is_ok() {
            return Err(format!(
                "workspace {shown} holds a credential path ({}, {}); move it out or use another directory",
                c.path, c.what
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
    use tollgate_policy::host::{credential_paths, parse_passwd};

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
            credentials: &[],
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

    /// Every entry of tollgate-policy's one table (docs/THREAT_MODEL.md,
    /// "Credential paths"), for a user's
    /// home: a workspace at or inside it, or holding it, is refused, and
    /// so is one whose own path names it in a home nobody has (moved here
    /// from the Docker backend, which no longer keeps a list).
    #[test]
    fn every_credential_entry_is_refused_as_a_workspace() {
        use tollgate_policy::credentials::HOME_CREDENTIALS;
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let home = base.join("alice");
        let users = vec![PasswdEntry {
            name: "alice".to_string(),
            uid: 4242,
            gid: 4242,
            home: home.clone(),
        }];
        let credentials = credential_paths(&users);
        let r = WorkspaceRules {
            peer_uid: nix::unistd::getuid().as_raw(),
            users: &users,
            credentials: &credentials,
            protected: &[],
        };
        let refused = |ws: &Path| check(ws.to_str().unwrap(), &r).unwrap_err();
        let project = home.join("src/proj");
        std::fs::create_dir_all(&project).unwrap();
        for c in HOME_CREDENTIALS {
            let entry = home.join(c.path);
            let inside = entry.join("proj");
            std::fs::create_dir_all(&inside).unwrap();
            for ws in [&entry, &inside] {
                let e = refused(ws);
                assert!(
                    e.contains("credential path") && e.contains(c.path),
                    "{}: {e}",
                    ws.display()
                );
            }
            // A workspace holding it (a home in disguise), as a file or a
            // directory.
            let holder = base.join("holder");
            for as_dir in [true, false] {
                let at = holder.join(c.path);
                std::fs::create_dir_all(at.parent().unwrap()).unwrap();
                if as_dir {
                    std::fs::create_dir(&at).unwrap();
                } else {
                    std::fs::write(&at, "x").unwrap();
                }
                let e = refused(&holder);
                assert!(
                    e.contains("holds a credential path") && e.contains(c.path),
                    "{e}"
                );
                std::fs::remove_dir_all(&holder).unwrap();
            }
            // Named by its own path, in a home no user has.
            let stray = base.join("bob").join(c.path).join("x");
            std::fs::create_dir_all(&stray).unwrap();
            let e = refused(&stray);
            assert!(e.contains("credential path") && e.contains(c.path), "{e}");
        }
        // A project next to them all is fine.
        assert_eq!(check(project.to_str().unwrap(), &r).unwrap().path, project);
        // A credential directory that is a symlink: its target is one too.
        let real = base.join("dotfiles-ssh");
        std::fs::create_dir_all(real.join("proj")).unwrap();
        std::fs::remove_dir_all(home.join(".ssh")).unwrap();
        std::os::unix::fs::symlink(&real, home.join(".ssh")).unwrap();
        let e = refused(&real.join("proj"));
        assert!(
            e.contains("inside the credential path") && e.contains(".ssh"),
            "{e}"
        );
    }

    #[test]
    fn other_owners_are_refused() {
        let (users, protected) = rules(0);
        let r = WorkspaceRules {
            peer_uid: 4242,
            users: &users,
            credentials: &[],
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
            credentials: &[],
            protected: &protected,
        };
        let err = check(dir.path().to_str().unwrap(), &r).unwrap_err();
        assert!(err.contains("overlaps"), "{err}");
        let err = check(state.to_str().unwrap(), &r).unwrap_err();
        assert!(err.contains("overlaps"), "{err}");
    }
}
