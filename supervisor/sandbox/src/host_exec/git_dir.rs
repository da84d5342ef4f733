//! The split of one git directory: what the host's git obeys there stays
//! read-only (the policy crate's `GIT_DIR_READ_ONLY`, the one table), the
//! rest (objects, refs, logs, the index, `HEAD`, lock files) stays writable
//! so that git's ordinary work succeeds inside (docs/THREAT_MODEL.md).
//!
//! The git directory itself is pinned (attached onto itself), so it cannot
//! be renamed away, removed or replaced by a file; each protected path is
//! attached read-only when it exists, and a placeholder holds its place
//! when it does not (an empty directory, or a file holding what git reads
//! as nothing), so the sandbox cannot create it.

use std::path::{Path, PathBuf};

use tollgate_policy::host_exec::{Absent, GIT_DIR_READ_ONLY};

/// Submodules within submodules looked at under `modules/`.
const MAX_MODULE_DEPTH: usize = 8;

/// A protected path of a git directory, workspace-relative, and what holds
/// its place when absent.
pub(crate) struct Protected {
    pub rel: PathBuf,
    pub absent: Absent,
}

/// The protected paths of the git directory `gd` (workspace-relative); a
/// linked worktree's own (`worktree`) has fewer. A path whose parent is
/// missing is left out: git makes no such parent by itself, and a
/// placeholder there would only make a directory look more like a
/// repository.
pub(crate) fn protected(ws: &Path, gd: &Path, worktree: bool) -> Vec<Protected> {
    GIT_DIR_READ_ONLY
        .iter()
        .filter(|e| !worktree || e.in_worktree)
        .filter(|e| {
            gd.join(e.rel)
                .parent()
                .is_some_and(|p| std::fs::symlink_metadata(ws.join(p)).is_ok_and(|m| m.is_dir()))
        })
        .map(|e| Protected {
            rel: gd.join(e.rel),
            absent: e.absent,
        })
        .collect()
}

/// `gd` and the git directories held inside it: each linked worktree's
/// (`worktrees/*`, marked `true`) and each submodule's (`modules/**`), as
/// they are at launch. A symlink among them is not followed (the plan
/// refuses it when it sits at a protected path).
pub(crate) fn with_nested(ws: &Path, gd: &Path) -> Vec<(PathBuf, bool)> {
    let mut out = vec![(gd.to_path_buf(), is_worktrees(gd))];
    for d in subdirs(ws, &gd.join("worktrees")) {
        out.push((d, true));
    }
    modules(ws, &gd.join("modules"), 0, &mut out);
    out
}

/// Whether `gd` is a linked worktree's own git directory (`…/worktrees/x`).
fn is_worktrees(gd: &Path) -> bool {
    gd.parent()
        .and_then(Path::file_name)
        .is_some_and(|n| n == "worktrees")
}

fn modules(ws: &Path, dir: &Path, depth: usize, out: &mut Vec<(PathBuf, bool)>) {
    if depth > MAX_MODULE_DEPTH {
        return;
    }
    for d in subdirs(ws, dir) {
        if looks_like_git_dir(&ws.join(&d)) {
            out.extend(with_nested(ws, &d));
        } else {
            // A submodule named `a/b` lives at `modules/a/b`.
            modules(ws, &d, depth + 1, out);
        }
    }
}

/// The real directories (no symlinks) directly in `dir`, workspace-relative.
fn subdirs(ws: &Path, dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(ws.join(dir)) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| dir.join(e.file_name()))
        .collect();
    v.sort();
    v
}

/// What git's `is_git_directory` checks, without reading HEAD.
pub(crate) fn looks_like_git_dir(dir: &Path) -> bool {
    let is = |name: &str, dir_wanted: bool| {
        std::fs::symlink_metadata(dir.join(name))
            .is_ok_and(|m| if dir_wanted { m.is_dir() } else { !m.is_dir() })
    };
    is("HEAD", false) && is("objects", true) && is("refs", true)
}
