//! The one bind mount a session container gets (its workspace), and the host
//! paths it must never expose.
//!
//! The check runs before `create`: a workspace that *is*, *contains* or *lies
//! inside* a forbidden path (the engine's socket, the supervisor's state and
//! audit directories, and the spec's hidden paths: the daemon puts every
//! credential path of the host there, from tollgate-policy's one table; this
//! crate keeps no list of its own) is refused. Paths are compared component
//! by component (`/w` never matches `/w-evil`), in both their given and their
//! canonical form (so `/var/run/docker.sock` and `/run/docker.sock` are the
//! same file).

use std::path::{Component, Path, PathBuf};

use crate::SandboxError;

/// A host path a sandbox must not see, and why (for the error message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forbidden {
    pub path: PathBuf,
    pub why: String,
}

impl Forbidden {
    pub fn new(path: impl Into<PathBuf>, why: impl Into<String>) -> Forbidden {
        Forbidden {
            path: path.into(),
            why: why.into(),
        }
    }
}

/// The forbidden list for one engine socket, state dir, audit dir and the
/// hidden paths (the spec's: the supervisor's files and every credential
/// path).
pub fn forbidden_paths(
    socket: &Path,
    state_dir: &Path,
    audit_dir: &Path,
    hidden: &[PathBuf],
) -> Vec<Forbidden> {
    let mut v = vec![
        Forbidden::new(socket, "the docker engine's socket"),
        Forbidden::new(
            state_dir,
            "the supervisor's state directory (sockets, tokens)",
        ),
        Forbidden::new(audit_dir, "the supervisor's audit directory"),
    ];
    for p in hidden {
        v.push(Forbidden::new(
            p,
            "a path the supervisor hides from sandboxes: its own files, a credential path",
        ));
    }
    v
}

/// Lexically normalised absolute path: `.` dropped, `..` applied. `None` for a
/// relative path.
fn normalise(p: &Path) -> Option<PathBuf> {
    if !p.is_absolute() {
        return None;
    }
    let mut out = PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
        }
    }
    Some(out)
}

/// The lexical and the canonical form of a path (when it exists).
fn forms(p: &Path) -> Vec<PathBuf> {
    let mut v = Vec::with_capacity(2);
    if let Some(n) = normalise(p) {
        v.push(n);
    }
    // canonicalize also resolves a symlinked ancestor (/var/run -> /run).
    if let Ok(c) = std::fs::canonicalize(p)
        && !v.contains(&c)
    {
        v.push(c);
    }
    v
}

/// True when one path is the other or an ancestor of it (component-wise).
fn overlaps(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// Refuses a workspace bind mount that would expose a forbidden path.
///
/// The workspace must be an absolute path to an existing directory; it is
/// refused when it is, contains, or lies inside any forbidden path.
pub fn check_workspace(workspace: &Path, forbidden: &[Forbidden]) -> Result<PathBuf, SandboxError> {
    if !workspace.is_absolute() {
        return Err(SandboxError::Refused(format!(
            "workspace {} is not an absolute path",
            workspace.display()
        )));
    }
    let canonical = std::fs::canonicalize(workspace).map_err(|e| {
        SandboxError::Refused(format!(
            "workspace {} cannot be resolved: {e}; it must be an existing directory",
            workspace.display()
        ))
    })?;
    if !canonical.is_dir() {
        return Err(SandboxError::Refused(format!(
            "workspace {} is not a directory",
            workspace.display()
        )));
    }
    if canonical == Path::new("/") {
        return Err(SandboxError::Refused(
            "refusing to mount / as the workspace: it holds every host secret".to_string(),
        ));
    }
    let mut ws_forms = forms(workspace);
    if !ws_forms.contains(&canonical) {
        ws_forms.push(canonical.clone());
    }
    for f in forbidden {
        for fp in forms(&f.path) {
            for ws in &ws_forms {
                if overlaps(ws, &fp) {
                    let relation = if ws == &fp {
                        "it is"
                    } else if ws.starts_with(&fp) {
                        "it lies inside"
                    } else {
                        "it contains"
                    };
                    return Err(SandboxError::Refused(format!(
                        "refusing to mount {} into a sandbox: {relation} {} ({}); \
                         choose a project directory that holds no credentials or supervisor state",
                        workspace.display(),
                        f.path.display(),
                        f.why
                    )));
                }
            }
        }
    }
    Ok(canonical)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "tollgate-mounts-{}-{}-{name}",
            std::process::id(),
            std::thread::current()
                .name()
                .unwrap_or("t")
                .replace("::", "-")
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn refused(r: Result<PathBuf, SandboxError>) -> String {
        match r {
            Err(SandboxError::Refused(m)) => m,
            other => panic!("expected Refused, got {other:?}"),
        }
    }

    #[test]
    fn prefix_is_not_a_component_match() {
        let base = tmpdir("prefix");
        let w = base.join("w");
        let evil = base.join("w-evil");
        std::fs::create_dir_all(&w).unwrap();
        std::fs::create_dir_all(&evil).unwrap();
        let f = vec![Forbidden::new(&w, "state")];
        assert_eq!(
            check_workspace(&evil, &f).unwrap(),
            std::fs::canonicalize(&evil).unwrap()
        );
        let m = refused(check_workspace(&w, &f));
        assert!(m.contains("it is"), "{m}");
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn workspace_containing_state_dir_is_refused() {
        let base = tmpdir("contains");
        let state = base.join("state");
        std::fs::create_dir_all(&state).unwrap();
        let f = forbidden_paths(
            Path::new("/var/run/docker.sock"),
            &state,
            Path::new("/nonexistent-audit"),
            &[],
        );
        let m = refused(check_workspace(&base, &f));
        assert!(
            m.contains("it contains") && m.contains("state directory"),
            "{m}"
        );
        let m = refused(check_workspace(&state, &f));
        assert!(m.contains("it is"), "{m}");
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn workspace_inside_audit_dir_is_refused() {
        let base = tmpdir("inside");
        let inner = base.join("audit").join("x");
        std::fs::create_dir_all(&inner).unwrap();
        let f = vec![Forbidden::new(base.join("audit"), "audit")];
        let m = refused(check_workspace(&inner, &f));
        assert!(m.contains("lies inside"), "{m}");
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn docker_socket_dirs_are_refused_in_either_spelling() {
        let f = forbidden_paths(
            Path::new("/var/run/docker.sock"),
            Path::new("/nonexistent-state"),
            Path::new("/nonexistent-audit"),
            &[],
        );
        // /run contains /run/docker.sock; /var/run is a symlink to /run here.
        let m = refused(check_workspace(Path::new("/run"), &f));
        assert!(m.contains("docker"), "{m}");
        if Path::new("/var/run").exists() {
            let m = refused(check_workspace(Path::new("/var/run"), &f));
            assert!(m.contains("docker"), "{m}");
        }
        let m = refused(check_workspace(Path::new("/"), &f));
        assert!(m.contains("/"), "{m}");
    }

    #[test]
    fn home_with_credentials_is_refused_but_a_project_is_not() {
        let base = tmpdir("home");
        let home = base.join("alice");
        let project = home.join("src").join("proj");
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::create_dir_all(&project).unwrap();
        // The daemon hands in tollgate-policy's table resolved against every
        // home: this crate has no list of its own.
        let hidden = tollgate_policy::credentials::resolve([home.as_path()]);
        let f = forbidden_paths(
            Path::new("/var/run/docker.sock"),
            Path::new("/nonexistent-state"),
            Path::new("/nonexistent-audit"),
            &hidden,
        );
        let m = refused(check_workspace(&home, &f));
        assert!(m.contains(".ssh") && m.contains("credential"), "{m}");
        assert_eq!(
            check_workspace(&project, &f).unwrap(),
            std::fs::canonicalize(&project).unwrap()
        );
        // Every entry: a workspace that is one or lies inside one is
        // refused, naming it.
        for c in tollgate_policy::credentials::HOME_CREDENTIALS {
            let entry = home.join(c.path);
            std::fs::create_dir_all(entry.join("x")).unwrap();
            let m = refused(check_workspace(&entry.join("x"), &f));
            assert!(m.contains("lies inside") && m.contains(c.path), "{m}");
            let m = refused(check_workspace(&entry, &f));
            assert!(m.contains("it is") && m.contains(c.path), "{m}");
        }
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn symlinked_workspace_is_judged_by_its_target() {
        let base = tmpdir("symlink");
        let state = base.join("state");
        std::fs::create_dir_all(&state).unwrap();
        let link = base.join("link");
        std::os::unix::fs::symlink(&state, &link).unwrap();
        let f = vec![Forbidden::new(&state, "state")];
        let m = refused(check_workspace(&link, &f));
        assert!(m.contains("state"), "{m}");
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn missing_or_relative_or_file_workspace_is_refused() {
        let base = tmpdir("bad");
        let m = refused(check_workspace(&base.join("missing"), &[]));
        assert!(m.contains("cannot be resolved"), "{m}");
        let m = refused(check_workspace(Path::new("relative/dir"), &[]));
        assert!(m.contains("not an absolute path"), "{m}");
        let file = base.join("file");
        std::fs::write(&file, b"x").unwrap();
        let m = refused(check_workspace(&file, &[]));
        assert!(m.contains("not a directory"), "{m}");
        std::fs::remove_dir_all(&base).unwrap();
    }
}
