//! Keeping a sandbox from writing what the host runs by itself
//! (docs/THREAT_MODEL.md "What the host runs by itself").
//!
//! The names come from the daemon ([`crate::SandboxSpec::host_exec`], the
//! policy crate's one table); this module never lists its own. Before a
//! sandbox starts, on the host, [`plan`] decides what to attach and how:
//!
//! - every name at the top of the workspace: read-only when it exists; when
//!   it does not, *reserved*: an empty directory is created in its place
//!   ([`reserve`]), attached read-only, and removed when the sandbox is gone
//!   (or, after a crash, at the next start). An empty directory named `.git`
//!   is no repository to git, which walks on upward; one named `.envrc` or
//!   `HEAD` is nothing any program runs.
//! - what the workspace's git obeys beyond the names (`git::scan`, in the
//!   policy crate's host module, which `policy test` reads too): the
//!   git directory a `.git` file points to and the common directory, when
//!   inside the workspace; config files it includes; the `core.hooksPath`
//!   directory; the `.git` of every submodule (gitlink) and of every
//!   repository one directory down (reserved when a gitlink's is missing).
//! - every ancestor of such a path below the top, attached onto itself
//!   read-write (*pinned*): a mount point cannot be renamed, removed or
//!   replaced in the namespace that sees it (EBUSY), so neither the path nor
//!   a directory above it can be moved away and recreated.
//!
//! Symlinks at any of these places are refused: a mount cannot pin one, and
//! the sandbox could repoint it.

use tollgate_policy::host::git;
pub(crate) mod git_dir;
pub(crate) mod reserve;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use tollgate_policy::host_exec::{Absent, GitDirMode};

use crate::SandboxError;

/// How a path is attached inside the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum BindHow {
    /// Read-only, and a mount point: not writable, renamable or removable.
    ReadOnly,
    /// Onto itself, writable: only so that it cannot be renamed or removed
    /// (it holds a read-only path further down).
    Pin,
}

/// One path to attach, relative to the workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bind {
    pub rel: PathBuf,
    pub how: BindHow,
}

/// What a sandbox over one workspace needs, decided on the host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Parents before children.
    pub binds: Vec<Bind>,
    /// Placeholders to create first (parents first), removed at the end.
    pub reserve: Vec<Placeholder>,
    /// The split git directories, outermost only (workspace-relative):
    /// every command starts under a Landlock layer that keeps symlinks,
    /// FIFOs, sockets and devices out of them
    /// (`tollgate_exec_agent::links`, docs/THREAT_MODEL.md).
    pub no_links_beneath: Vec<PathBuf>,
}

/// A placeholder: what holds a missing protected path's place while a
/// sandbox runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placeholder {
    pub rel: PathBuf,
    /// `None`: an empty directory; `Some`: a file holding these bytes.
    pub file: Option<&'static str>,
}

impl Placeholder {
    pub fn dir(rel: PathBuf) -> Placeholder {
        Placeholder { rel, file: None }
    }
}

/// What is at a path, not following a final symlink.
enum Found {
    Missing,
    Dir,
    File,
}

fn refused(msg: String) -> SandboxError {
    SandboxError::Refused(msg)
}

fn look(ws: &Path, rel: &Path) -> Result<Found, SandboxError> {
    let p = ws.join(rel);
    // Another sandbox's placeholder: reserve it too (a shared hold), or
    // that sandbox's end would remove it from under this one.
    if reserve::is_held(&p) {
        return Ok(Found::Missing);
    }
    match std::fs::symlink_metadata(&p) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Found::Missing),
        Err(e) => Err(refused(format!("cannot inspect {}: {e}", p.display()))),
        Ok(m) if m.file_type().is_symlink() => Err(refused(format!(
            "{} is a symlink; the host runs what is there by itself, and a symlink cannot be \
             made read-only in the sandbox (the sandbox could repoint it). Replace it with the \
             file or directory it points to, or remove it",
            p.display()
        ))),
        Ok(m) if m.is_dir() => Ok(Found::Dir),
        Ok(m) if m.is_file() => Ok(Found::File),
        Ok(_) => Err(refused(format!(
            "{} is not a regular file or directory (a FIFO, socket or device); the host would \
             read what a sandboxed command feeds it. Remove it",
            p.display()
        ))),
    }
}

/// Validates the names the daemon passed: single, normal path components.
fn check_names(names: &[String]) -> Result<(), SandboxError> {
    for n in names {
        let mut comps = Path::new(n).components();
        let single = matches!(comps.next(), Some(Component::Normal(_))) && comps.next().is_none();
        if !single || n.contains('/') || n.contains('\0') {
            return Err(refused(format!(
                "host-executed name {n:?} is not a single file name"
            )));
        }
    }
    Ok(())
}

/// The paths noted for a plan before parents are worked out.
#[derive(Default)]
struct Noted {
    read_only: BTreeSet<PathBuf>,
    /// Missing: what holds the place (`None`: an empty directory).
    missing: BTreeMap<PathBuf, Option<&'static str>>,
    /// Git directories: pinned, split by [`git_dir::protected`].
    git_dirs: BTreeSet<PathBuf>,
}

impl Noted {
    fn note(&mut self, ws: &Path, rel: PathBuf, absent: Absent) -> Result<(), SandboxError> {
        match (look(ws, &rel)?, absent) {
            (Found::Missing, Absent::Nothing) => {}
            (Found::Missing, Absent::EmptyDir) => {
                self.missing.insert(rel, None);
            }
            (Found::Missing, Absent::File(text)) => {
                self.missing.insert(rel, Some(text));
            }
            (Found::Dir | Found::File, _) => {
                self.read_only.insert(rel);
            }
        }
        Ok(())
    }

    /// A git directory as it is at launch: pinned, its protected paths (and
    /// those of the worktrees and submodules it holds) read-only.
    fn git_dir(&mut self, ws: &Path, gd: &Path) -> Result<(), SandboxError> {
        for (g, worktree) in git_dir::with_nested(ws, gd) {
            if self.git_dirs.contains(&g) {
                continue;
            }
            for p in git_dir::protected(ws, &g, worktree) {
                self.note(ws, p.rel, p.absent)?;
            }
            self.git_dirs.insert(g);
        }
        Ok(())
    }

    /// A path beneath another one is covered by it: nothing can be created
    /// inside a read-only directory or a reserved (empty, read-only) one,
    /// and a git directory inside one must not be pinned writable.
    fn drop_covered(&mut self) {
        let all: Vec<PathBuf> = self
            .read_only
            .iter()
            .chain(self.missing.keys())
            .cloned()
            .collect();
        let covered = |p: &PathBuf| all.iter().any(|q| q != p && p.starts_with(q));
        self.read_only.retain(|p| !covered(p));
        self.missing.retain(|p, _| !covered(p));
        self.git_dirs
            .retain(|p| !all.iter().any(|q| p.starts_with(q)));
    }
}

/// Decides what to attach read-only, what to pin and what to reserve for a
/// sandbox over `workspace` (canonical). `names`: the host-executed names;
/// `home`: the session owner's home (their global git config, `~`);
/// `git_dir`: a git directory all read-only, or split ([`git_dir`]).
pub fn plan(
    workspace: &Path,
    names: &[String],
    home: Option<&Path>,
    git_dir: GitDirMode,
) -> Result<Plan, SandboxError> {
    check_names(names)?;
    let split = git_dir == GitDirMode::Split;
    let mut n = Noted::default();
    if !names.is_empty() {
        let found =
            git::scan(workspace, home, git::Depth::WithSubmodules).map_err(|e| refused(e.0))?;
        let mut git_dirs = Vec::new();
        for name in names {
            let rel = PathBuf::from(name);
            if split
                && name.eq_ignore_ascii_case(".git")
                && matches!(look(workspace, &rel)?, Found::Dir)
            {
                git_dirs.push(rel);
            } else {
                n.note(workspace, rel, Absent::EmptyDir)?;
            }
        }
        for rel in found.git {
            if split && matches!(look(workspace, &rel)?, Found::Dir) {
                git_dirs.push(rel);
            } else {
                n.note(workspace, rel, Absent::EmptyDir)?;
            }
        }
        for rel in found
            .missing_git
            .into_iter()
            .chain(found.configs)
            .chain(found.hooks)
        {
            n.note(workspace, rel, Absent::EmptyDir)?;
        }
        for gd in git_dirs {
            n.git_dir(workspace, &gd)?;
        }
    }
    n.drop_covered();
    assemble(workspace, n)
}

/// The binds and placeholders for what [`plan`] noted: parents pinned,
/// missing parents reserved.
fn assemble(workspace: &Path, n: Noted) -> Result<Plan, SandboxError> {
    let mut out = Plan {
        no_links_beneath: n
            .git_dirs
            .iter()
            .filter(|g| !n.git_dirs.iter().any(|o| o != *g && g.starts_with(o)))
            .cloned()
            .collect(),
        ..Plan::default()
    };
    let mut pins: BTreeSet<PathBuf> = n.git_dirs.clone();
    for p in &n.read_only {
        for a in ancestors(p) {
            match look(workspace, &a)? {
                Found::Dir => {
                    pins.insert(a);
                }
                Found::File | Found::Missing => {
                    return Err(refused(format!(
                        "{} changed while the sandbox was being planned; try again",
                        workspace.join(&a).display()
                    )));
                }
            }
        }
        out.binds.push(Bind {
            rel: p.clone(),
            how: BindHow::ReadOnly,
        });
    }
    'missing: for (p, file) in &n.missing {
        for a in ancestors(p) {
            match look(workspace, &a)? {
                Found::Dir => {
                    pins.insert(a);
                }
                // A file where a directory would be: pinned, nothing can be
                // created beneath it.
                Found::File => {
                    pins.insert(a);
                    continue 'missing;
                }
                Found::Missing => {
                    out.reserve.push(Placeholder::dir(a.clone()));
                    pins.insert(a);
                }
            }
        }
        out.reserve.push(Placeholder {
            rel: p.clone(),
            file: *file,
        });
        out.binds.push(Bind {
            rel: p.clone(),
            how: BindHow::ReadOnly,
        });
    }
    for p in pins {
        out.binds.push(Bind {
            rel: p,
            how: BindHow::Pin,
        });
    }
    out.binds
        .sort_by(|a, b| (depth(&a.rel), &a.rel).cmp(&(depth(&b.rel), &b.rel)));
    out.binds.dedup();
    // Parents first, each once.
    let mut seen = BTreeSet::new();
    out.reserve.retain(|p| seen.insert(p.rel.clone()));
    out.reserve.sort_by_key(|p| depth(&p.rel));
    Ok(out)
}

/// The proper ancestors of a relative path, shortest first (`a`, `a/b` for
/// `a/b/c`).
fn ancestors(p: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = p
        .ancestors()
        .skip(1)
        .filter(|a| !a.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .collect();
    v.reverse();
    v
}

fn depth(p: &Path) -> usize {
    p.components().count()
}

#[cfg(test)]
mod tests {
    use super::*;

    const RO: GitDirMode = GitDirMode::ReadOnly;
    const SPLIT: GitDirMode = GitDirMode::Split;

    fn names() -> Vec<String> {
        [".git", ".envrc", ".vscode", "HEAD"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    fn reserved(p: &Plan) -> Vec<String> {
        p.reserve
            .iter()
            .map(|r| r.rel.display().to_string())
            .collect()
    }

    fn binds(p: &Plan) -> Vec<(String, BindHow)> {
        p.binds
            .iter()
            .map(|b| (b.rel.display().to_string(), b.how))
            .collect()
    }

    #[test]
    fn existing_names_are_read_only_missing_ones_reserved() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().canonicalize().unwrap();
        std::fs::create_dir(ws.join(".vscode")).unwrap();
        std::fs::write(ws.join(".envrc"), "x").unwrap();
        let p = plan(&ws, &names(), None, RO).unwrap();
        assert_eq!(
            binds(&p),
            vec![
                (".envrc".into(), BindHow::ReadOnly),
                (".git".into(), BindHow::ReadOnly),
                (".vscode".into(), BindHow::ReadOnly),
                ("HEAD".into(), BindHow::ReadOnly),
            ]
        );
        assert_eq!(reserved(&p), [".git", "HEAD"]);
        // No names: nothing at all (a backend test that wants none).
        assert_eq!(plan(&ws, &[], None, RO).unwrap(), Plan::default());
    }

    #[test]
    fn symlinks_and_bad_names_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().canonicalize().unwrap();
        std::os::unix::fs::symlink("/etc", ws.join(".vscode")).unwrap();
        let e = plan(&ws, &names(), None, RO).unwrap_err().to_string();
        assert!(e.contains(".vscode is a symlink"), "{e}");
        std::fs::remove_file(ws.join(".vscode")).unwrap();
        for bad in ["a/b", "..", ".", ""] {
            let e = plan(&ws, &[bad.to_string()], None, RO)
                .unwrap_err()
                .to_string();
            assert!(e.contains("not a single file name"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_hooks_path_below_the_top_is_reserved_with_its_parents_pinned() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().canonicalize().unwrap();
        std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
        std::fs::create_dir_all(ws.join("tools")).unwrap();
        std::fs::write(
            ws.join(".git/config"),
            "[core]\n\thooksPath = tools/git/hooks\n[include]\n\tpath = ../shared.inc\n",
        )
        .unwrap();
        let p = plan(&ws, &names(), None, RO).unwrap();
        assert_eq!(
            binds(&p),
            vec![
                (".envrc".into(), BindHow::ReadOnly),
                (".git".into(), BindHow::ReadOnly),
                (".vscode".into(), BindHow::ReadOnly),
                ("HEAD".into(), BindHow::ReadOnly),
                ("shared.inc".into(), BindHow::ReadOnly),
                ("tools".into(), BindHow::Pin),
                ("tools/git".into(), BindHow::Pin),
                ("tools/git/hooks".into(), BindHow::ReadOnly),
            ]
        );
        assert_eq!(
            reserved(&p),
            [
                ".envrc",
                ".vscode",
                "HEAD",
                "shared.inc",
                "tools/git",
                "tools/git/hooks"
            ]
        );
        // Split: the git directory pinned, what git obeys in it read-only.
        let p = plan(&ws, &names(), None, SPLIT).unwrap();
        assert_eq!(
            binds(&p),
            vec![
                (".envrc".into(), BindHow::ReadOnly),
                (".git".into(), BindHow::Pin),
                (".vscode".into(), BindHow::ReadOnly),
                ("HEAD".into(), BindHow::ReadOnly),
                ("shared.inc".into(), BindHow::ReadOnly),
                ("tools".into(), BindHow::Pin),
                (".git/commondir".into(), BindHow::ReadOnly),
                (".git/config".into(), BindHow::ReadOnly),
                (".git/config.worktree".into(), BindHow::ReadOnly),
                (".git/hooks".into(), BindHow::ReadOnly),
                (".git/info".into(), BindHow::ReadOnly),
                ("tools/git".into(), BindHow::Pin),
                ("tools/git/hooks".into(), BindHow::ReadOnly),
            ]
        );
        assert_eq!(
            reserved(&p),
            [
                ".envrc",
                ".vscode",
                "HEAD",
                "shared.inc",
                ".git/commondir",
                ".git/config.worktree",
                ".git/info",
                "tools/git",
                "tools/git/hooks"
            ]
        );
    }

    #[test]
    fn a_worktree_gitdir_inside_the_workspace_is_read_only() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().canonicalize().unwrap();
        let gd = ws.join("repo/.bare/worktrees/wt");
        std::fs::create_dir_all(&gd).unwrap();
        std::fs::write(gd.join("commondir"), "../..\n").unwrap();
        std::fs::write(ws.join(".git"), format!("gitdir: {}\n", gd.display())).unwrap();
        let p = plan(&ws, &names(), None, RO).unwrap();
        assert_eq!(
            binds(&p),
            vec![
                (".envrc".into(), BindHow::ReadOnly),
                (".git".into(), BindHow::ReadOnly),
                (".vscode".into(), BindHow::ReadOnly),
                ("HEAD".into(), BindHow::ReadOnly),
                ("repo".into(), BindHow::Pin),
                ("repo/.bare".into(), BindHow::ReadOnly),
            ]
        );
        let p = plan(&ws, &names(), None, SPLIT).unwrap();
        assert_eq!(
            binds(&p),
            vec![
                (".envrc".into(), BindHow::ReadOnly),
                (".git".into(), BindHow::ReadOnly),
                (".vscode".into(), BindHow::ReadOnly),
                ("HEAD".into(), BindHow::ReadOnly),
                ("repo".into(), BindHow::Pin),
                ("repo/.bare".into(), BindHow::Pin),
                ("repo/.bare/commondir".into(), BindHow::ReadOnly),
                ("repo/.bare/config".into(), BindHow::ReadOnly),
                ("repo/.bare/config.worktree".into(), BindHow::ReadOnly),
                ("repo/.bare/hooks".into(), BindHow::ReadOnly),
                ("repo/.bare/info".into(), BindHow::ReadOnly),
                ("repo/.bare/worktrees".into(), BindHow::Pin),
                ("repo/.bare/worktrees/wt".into(), BindHow::Pin),
                (
                    "repo/.bare/worktrees/wt/commondir".into(),
                    BindHow::ReadOnly
                ),
                (
                    "repo/.bare/worktrees/wt/config.worktree".into(),
                    BindHow::ReadOnly
                ),
            ]
        );
        // A gitfile pointing through a symlink inside the workspace: refused.
        std::os::unix::fs::symlink("repo", ws.join("link")).unwrap();
        std::fs::write(ws.join(".git"), "gitdir: link/.bare/worktrees/wt\n").unwrap();
        let e = plan(&ws, &names(), None, RO).unwrap_err().to_string();
        assert!(e.contains("link is a symlink inside the workspace"), "{e}");
    }

    #[test]
    fn a_workspace_that_is_a_git_directory_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().canonicalize().unwrap();
        std::fs::create_dir(ws.join("objects")).unwrap();
        std::fs::create_dir(ws.join("refs")).unwrap();
        std::fs::write(ws.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        let e = plan(&ws, &names(), None, RO).unwrap_err().to_string();
        assert!(e.contains("is itself a git directory"), "{e}");
    }

    /// A git directory as git makes it: HEAD, objects/, refs/.
    fn git_dir_at(d: &Path) {
        std::fs::create_dir_all(d.join("objects/info")).unwrap();
        std::fs::create_dir_all(d.join("refs/heads")).unwrap();
        std::fs::create_dir_all(d.join("hooks")).unwrap();
        std::fs::write(d.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(d.join("config"), "[core]\n").unwrap();
    }

    #[test]
    fn a_git_directory_is_pinned_with_what_git_obeys_read_only() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().canonicalize().unwrap();
        git_dir_at(&ws.join(".git"));
        git_dir_at(&ws.join(".git/modules/lib/inner"));
        // The default: the whole git directory read-only, nothing inside bound.
        let p = plan(&ws, &[".git".to_string()], None, RO).unwrap();
        assert_eq!(binds(&p), vec![(".git".into(), BindHow::ReadOnly)]);
        assert!(p.reserve.is_empty());
        // Read-only as a whole: nothing can be made in it at all.
        assert!(p.no_links_beneath.is_empty());
        let p = plan(&ws, &[".git".to_string()], None, SPLIT).unwrap();
        let b = binds(&p);
        for (rel, how) in [
            (".git", BindHow::Pin),
            (".git/config", BindHow::ReadOnly),
            (".git/hooks", BindHow::ReadOnly),
            (".git/info", BindHow::ReadOnly),
            (".git/commondir", BindHow::ReadOnly),
            (".git/objects/info/alternates", BindHow::ReadOnly),
            // A submodule's git directory (`modules/a/b`) is split the same way.
            (".git/modules/lib/inner", BindHow::Pin),
            (".git/modules/lib/inner/config", BindHow::ReadOnly),
            (".git/modules/lib/inner/hooks", BindHow::ReadOnly),
        ] {
            assert!(b.contains(&(rel.to_string(), how)), "{rel} {how:?}: {b:?}");
        }
        // Objects, refs and the index stay writable: no bind covers them.
        for rel in [
            ".git/objects/ab",
            ".git/refs/heads/main",
            ".git/index",
            ".git/HEAD",
        ] {
            assert!(
                !p.binds
                    .iter()
                    .any(|x| x.how == BindHow::ReadOnly && Path::new(rel).starts_with(&x.rel)),
                "{rel}: {b:?}"
            );
        }
        // The outermost git directory only: the submodule's lies beneath it.
        assert_eq!(p.no_links_beneath, vec![PathBuf::from(".git")]);
        let commondir = p
            .reserve
            .iter()
            .find(|r| r.rel == Path::new(".git/commondir"));
        assert_eq!(commondir.and_then(|r| r.file), Some(".\n"));
    }

    #[test]
    fn bad_git_layouts_are_refused_naming_the_path() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().canonicalize().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        // A `.git` that is a symlink.
        std::os::unix::fs::symlink(elsewhere.path(), ws.join(".git")).unwrap();
        let e = plan(&ws, &[".git".to_string()], None, SPLIT)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("{} is a symlink", ws.join(".git").display())),
            "{e}"
        );
        std::fs::remove_file(ws.join(".git")).unwrap();
        // A symlink planted where git obeys something inside a git directory.
        git_dir_at(&ws.join(".git"));
        std::fs::remove_dir(ws.join(".git/hooks")).unwrap();
        std::os::unix::fs::symlink("../tools", ws.join(".git/hooks")).unwrap();
        let e = plan(&ws, &[".git".to_string()], None, SPLIT)
            .unwrap_err()
            .to_string();
        assert!(e.contains(".git/hooks is a symlink"), "{e}");
    }

    #[test]
    fn a_gitfile_pointing_outside_the_workspace_is_read_only_and_nothing_outside_bound() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().canonicalize().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let gd = outside.path().canonicalize().unwrap().join("repo.git");
        git_dir_at(&gd);
        std::fs::write(ws.join(".git"), format!("gitdir: {}\n", gd.display())).unwrap();
        for mode in [RO, SPLIT] {
            let p = plan(&ws, &[".git".to_string()], None, mode).unwrap();
            assert_eq!(
                binds(&p),
                vec![(".git".into(), BindHow::ReadOnly)],
                "{mode:?}"
            );
            assert!(p.reserve.is_empty(), "{mode:?}");
        }
    }
}
